"""The promises that need other versions than the suite's own, each checked by pytest in a virtual environment of
its own (:mod:`tests.side_envs`), made on first use and run in the background beside the rest of the suite:

- the oldest versions of its dependencies that ``pyproject.toml`` allows (each ``>=`` bound pinned: gymnasium
  1.1, pyzmq 26.4, numpy 1.23.2 ...), where equivalence with ``SyncVectorEnv``, faults and partial batches must
  hold, over ZeroMQ (the plane every remote client uses);
- RLlib (``tests/rllib``), whose ``ray[rllib]`` pins an older Gymnasium than the suite's.
"""

from __future__ import annotations

import pytest

from tests.side_envs import OLDEST, RLLIB, SideRun, oldest_allowed, project_metadata

# PYTHONHASHSEED: before Gymnasium 1.4 a Text space orders a set charset (its default) by hash, which differs
# between processes unless the seed is shared, as between a client and the test's SyncVectorEnv
OLDEST_RUN = SideRun(
    OLDEST,
    ["tests/test_equivalence.py", "tests/test_faults.py", "tests/test_partial_batches.py", "--data-plane", "zmq"]
    # (the rich-infos matrix with 2 clients only, and no join/leave soak: the main suite runs those on every plane)
    + ["-k", "not soak_join_leave and (not rich_infos or -2-copy or -2-nocopy)"],
    timeout=1500,
    env={"PYTHONHASHSEED": "0"},
)
RLLIB_RUN = SideRun(RLLIB, ["tests/rllib"], timeout=600)


def test_the_oldest_environment_pins_every_dependency_to_its_lower_bound():
    dependencies = project_metadata()["dependencies"]
    assert OLDEST.steps == (tuple(oldest_allowed(dependencies)),)
    assert all("==" in pin and ">" not in pin for pin in OLDEST.steps[0])
    with pytest.raises(ValueError, match="no lower bound"):
        oldest_allowed(["numpy"])


@pytest.mark.side_run(OLDEST_RUN)
@pytest.mark.timeout(OLDEST_RUN.budget + 60)
def test_equivalence_faults_and_partial_batches_hold_on_the_oldest_versions():
    OLDEST_RUN.result()


@pytest.mark.side_run(RLLIB_RUN)
@pytest.mark.timeout(RLLIB_RUN.budget + 60)
def test_rllib_trains_on_remote_vector_env():
    RLLIB_RUN.result()
