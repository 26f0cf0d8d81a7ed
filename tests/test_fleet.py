"""A learner and a fleet of external clients, as practitioners run them: how long the learner waits for them,
and what each side tells its user (log lines at INFO, error messages)."""

from __future__ import annotations

import math
import threading
import time

import gymnasium as gym
import pytest

from gym_remote import RemoteVectorEnv
from tests.helpers import ThreadClient


def make_cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("forever", [None, math.inf])
def test_a_learner_without_a_connect_timeout_waits_for_its_clients_however_long(stack, thread_clients, forever):
    envs = RemoteVectorEnv(num_envs=2, connect_timeout=forever, timeout=forever)
    stack.callback(envs.close)
    assert envs.connect_timeout == envs.timeout == math.inf
    timer = threading.Timer(1.5, lambda: thread_clients.append(ThreadClient(envs.address, [make_cartpole] * 2)))
    timer.start()
    stack.callback(timer.cancel)
    started = time.monotonic()
    obs, _ = envs.reset(seed=0)
    assert time.monotonic() - started >= 1.4 and obs.shape == (2, 4)
    envs.step(envs.action_space.sample())


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_a_timeout_that_is_not_positive_is_refused(timeout):
    with pytest.raises(ValueError, match="connect_timeout must be a positive number of seconds"):
        RemoteVectorEnv(num_envs=1, connect_timeout=timeout)
