"""The runnable examples in the docstrings run and give what they show."""

from __future__ import annotations

import doctest

import pytest

import gym_remote
from gym_remote import bench, codec, protocol, registration, sb3, spin, vector_env


@pytest.mark.parametrize(
    "module",
    [gym_remote, vector_env, protocol, codec, sb3, registration, bench, spin],
    ids=lambda module: module.__name__,
)
def test_docstring_examples(module):
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert failures == 0
    assert tried > 0


def test_secret_key_derivation_is_the_one_protocol_md_specifies():
    """§12.2 of docs/PROTOCOL.md, followed literally, gives the keys gym_remote derives from a secret."""
    import hashlib
    import re
    from pathlib import Path

    import zmq
    from zmq.utils import z85

    from gym_remote.security import keys_from_secret

    text = (Path(__file__).resolve().parent.parent / "docs" / "PROTOCOL.md").read_text()
    section = text[text.index("### 12.2") : text.index("### 12.3")]
    salt = re.search(r'salt\s*=\s*"([^"]+)"', section).group(1).encode()
    cost = {name.lower(): int(value) for name, value in re.findall(r"\b([Nrp]) = (\d+)", section)}
    length = int(re.search(r"length = (\d+) bytes", section).group(1))
    derived = hashlib.scrypt(b"correct horse battery staple", salt=salt, dklen=length, **cost)
    server, clients = keys_from_secret("correct horse battery staple")
    assert server.secret == z85.encode(derived[0:32]) and clients.secret == z85.encode(derived[32:64])
    assert server.public == zmq.curve_public(server.secret) and clients.public == zmq.curve_public(clients.secret)
