"""Unit tests for :mod:`gym_remote.batch`: how RESULTs land in the learner's batch (no sockets)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from gym_remote import commands, protocol
from gym_remote.batch import ResultBatch
from gym_remote.errors import ProtocolError
from gym_remote.protocol import FLAG_VALUE, Kind
from tests.test_commands import client


def _result(seq: int, rewards: list[float]) -> bytes:
    frame = protocol.ResultFrame(len(rewards))
    frame.rewards[:] = rewards
    return bytes(frame.pack(seq, FLAG_VALUE))


def test_a_result_listing_errors_lands_the_other_slots_and_reports_those_whose_envs_raised():
    batch = ResultBatch(spaces.Box(-1, 1, (2,), np.float32), 4)
    hosting = client([1, 2, 3])
    plan = commands.Plan([2, 3], np.arange(2), [1, 2])  # a command for its envs 1 and 2
    arrivals: list = []
    failures: list = []
    replies: list = []
    landing = batch.landing(lambda _: plan, arrivals, failures, replies)
    header = protocol.Header(protocol.PROTOCOL_VERSION, Kind.RESULT, FLAG_VALUE, 2, 7)
    landing.targets(hosting, header)[0][:] = [[0.5, 0.5], [0.25, 0.25]]
    report = {"type": "ValueError", "module": "builtins", "message": "boom", "traceback": "tb"}
    landing.land(hosting, header, _result(7, [1.0, 0.0]), {"errors": [None, report], "infos": [{"a": 1}, {}]})
    assert arrivals == [(2, 7)] and replies == [7]
    [(slot, seq, error)] = failures
    assert (slot, seq, error.slot) == (3, 7, 3)
    assert isinstance(error, ValueError) and "step failed in slot 3 of client 'c'" in str(error)
    assert error.remote_traceback == "tb"
    assert batch.rewards[2] == 1.0 and batch.observations[2].tolist() == [0.5, 0.5]
    assert batch.slot_infos == {2: {"a": 1}}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"errors": [None, None]}, "did not ask for them"),  # a command without FLAG_EACH
        ({"errors": [None]}, "errors must be a list of 2"),
    ],
)
def test_a_result_listing_errors_it_should_not_is_malformed(value, problem):
    batch = ResultBatch(spaces.Box(-1, 1, (2,), np.float32), 4)
    hosting = client([0, 1])
    failures = None if "did not" in problem else []
    landing = batch.landing(None, [], failures)
    header = protocol.Header(protocol.PROTOCOL_VERSION, Kind.RESULT, FLAG_VALUE, 2, 3)
    hosting.observation_targets = [np.zeros((2, 2), np.float32)]
    landing.targets(hosting, header)
    with pytest.raises(ProtocolError, match=problem):
        landing.land(hosting, header, _result(3, [0.0, 0.0]), value)
