"""The RLlib tests' Ray: one local instance on 127.0.0.1 for the session.

These tests need ``ray[rllib]``, whose exact Gymnasium pin keeps it out of the main test environment: run them
in an environment of their own (``pip install torch`` first, then ``pip install ".[rllib]" pytest
pytest-timeout``) with ``python -m pytest tests/rllib``. The main suite does not collect this directory
(``collect_ignore`` in ``tests/conftest.py``).
"""

from __future__ import annotations

import pytest

from tests.helpers import ray_instance


@pytest.fixture(scope="session")
def local_ray():
    """A Ray instance of its own, 2 CPUs on 127.0.0.1, for the session (:func:`tests.helpers.ray_instance`)."""
    with ray_instance(_node_ip_address="127.0.0.1", num_cpus=2, include_dashboard=False, log_to_driver=False):
        yield
