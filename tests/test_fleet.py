"""A learner and a fleet of external clients, as practitioners run them: how long the learner waits for them,
and what each side tells its user (log lines at INFO, error messages)."""

from __future__ import annotations

import math
import re
import threading
import time

import gymnasium as gym
import pytest

from gym_remote import RemoteVectorEnv
from tests.helpers import GYM_REMOTE_SCRIPT, LoggedProcess, ThreadClient, wait_for_listening


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


def test_a_server_bound_to_every_interface_advertises_its_hosts_address_and_serves_each_on_its_plane(
    reaper, tmp_path, other_host
):
    """``serve --bind tcp://0.0.0.0:PORT`` on the other host: it gives clients its host's address (not loopback),
    a client on this host joins over ZeroMQ at that address, and two clients on its own host, one at that
    address and one at loopback, both over the data channel."""
    in_other_host = ["ip", "netns", "exec", other_host]
    serve = [GYM_REMOTE_SCRIPT, "serve", "--bind", "tcp://0.0.0.0:5555", "--insecure", "--num-envs", "3"]
    server = LoggedProcess(reaper, tmp_path, "serve", [*in_other_host, *serve, "--steps", "600", "--no-progress"])
    wait_for_listening(server)
    assert "listening on tcp://10.213.7.2:5555 (also at tcp://127.0.0.1:5555) for 3 envs" in server.stdout, str(server)
    assert "gym-remote client tcp://10.213.7.2:5555 --env ENV_ID" in server.stdout, str(server)
    client = [GYM_REMOTE_SCRIPT, "client", "--env", "CartPole-v1", "--connect-timeout", "30", "--insecure", "--name"]
    clients = [
        LoggedProcess(reaper, tmp_path, "far", [*client, "far", "tcp://10.213.7.2:5555"]),
        LoggedProcess(reaper, tmp_path, "near", [*in_other_host, *client, "near", "tcp://10.213.7.2:5555"]),
        LoggedProcess(reaper, tmp_path, "loop", [*in_other_host, *client, "loop", "tcp://127.0.0.1:5555"]),
    ]
    assert server.wait(60) == 0, str(server)
    for each in clients:
        assert each.wait(15) == 0, str(each)
    planes = dict(re.findall(r"client '(\w+)' \(slots? \d\) joined from .* over ([^)]+)\)", server.stderr))
    assert planes.keys() == {"far", "near", "loop"}, str(server)
    assert planes["far"] == "ZeroMQ", str(server)
    assert planes["near"].startswith("its data channel") and planes["loop"].startswith("its data channel"), str(server)
