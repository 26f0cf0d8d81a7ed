"""The runnable examples in the docstrings run and give what they show."""

from __future__ import annotations

import doctest

import pytest

import gym_remote
from gym_remote import codec, protocol, vector_env


@pytest.mark.parametrize("module", [gym_remote, vector_env, protocol, codec], ids=lambda module: module.__name__)
def test_docstring_examples(module):
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert failures == 0
    assert tried > 0
