"""A learner and a fleet of external clients, as practitioners run them: how long the learner waits for them,
and what each side tells its user (log lines at INFO, error messages)."""

from __future__ import annotations

import logging
import math
import re
import signal
import threading
import time

import gymnasium as gym
import pytest

import gym_remote.server as server_module
from gym_remote import RemoteTimeoutError, RemoteVectorEnv
from tests.helpers import (
    GYM_REMOTE_SCRIPT,
    LoggedProcess,
    ThreadClient,
    free_tcp_address,
    wait_for_listening,
    wait_until,
)


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


def test_serve_states_its_spaces_and_its_timeout_names_the_refused_and_the_waiting(run):
    """``serve --env``: a client of another env is refused in plain words and shuts no one out; a client with more
    envs than there are free slots waits in line, says so on both sides, and the learner's timeout names it and
    the refusal."""
    address = free_tcp_address()
    serve = ["serve", "--bind", address, "--env", "CartPole-v1", "--num-envs", "3", "--connect-timeout", "10"]
    server = run(*serve, "--steps", "300", "--no-progress", name="serve")
    wait_for_listening(server)
    assert f"gym-remote client {address} --env CartPole-v1 --num-envs N" in server.stdout, str(server)
    client = ["client", address, "--connect-timeout", "30", "--name"]
    wrong = run(*client, "wrong", "--env", "MountainCar-v0", name="wrong")
    assert wrong.wait(30) == 1, str(wrong)
    vector_space = str(gym.make("CartPole-v1").observation_space)
    assert "the observation space of its env 0, Box(" in wrong.stderr, str(wrong)
    assert f"differs from the vector's, {vector_space}" in wrong.stderr, str(wrong)
    assert "observation_mode" not in wrong.stderr and "Traceback" not in wrong.stderr, str(wrong)
    right = run(*client, "right", "--env", "CartPole-v1", "--num-envs", "2", name="right")
    wait_until(lambda: "client 'right' (slots 0-1) joined" in server.stderr, 20, "the first client to join")
    big = run(*client, "big", "--env", "CartPole-v1", "--num-envs", "2", name="big")
    assert server.wait(40) == 1, str(server)
    assert re.search(r"refused client 'wrong' from \S+ \(pid \d+\): the observation space of its env 0", server.stderr)
    assert re.search(
        r"client 'big' from \S+ \(pid \d+\) waits in line at position 1: the vector has 3 slots and 1 is free",
        server.stderr,
    )
    assert "waiting in line at position 1" in big.stderr, str(big)
    error = server.stderr[server.stderr.index("gym-remote: error:") :]
    assert "slots 2 have no client" in error and "clients refused: 'wrong': the observation space" in error, error
    assert "waiting in line for more free slots than the 1 there are: 'big' (2 envs)" in error, error
    assert big.wait(15) == 0 and right.wait(15) == 0, str(big) + str(right)


def test_the_learner_tells_the_story_of_its_fleet_one_line_each(run):
    """At serve's default level: each join, a client that leaves (and what its slots do then), the replacement's
    join, and at the end one line that sums the run up; the clients say when they join, leave and are closed."""
    address = free_tcp_address()
    serve = ["serve", "--bind", address, "--env", "CartPole-v1", "--num-envs", "4", "--connect-timeout", "60"]
    server = run(*serve, "--steps", "200000", "--no-progress", name="serve")
    wait_for_listening(server)
    client = ["client", address, "--env", "CartPole-v1", "--num-envs", "2", "--connect-timeout", "30", "--name"]
    first, second = run(*client, "first", name="first"), run(*client, "second", name="second")
    wait_until(lambda: "4 of 4 slots served" in server.stderr, 30, "both clients to join")
    first.process.send_signal(signal.SIGTERM)
    assert first.wait(15) == 143, str(first)
    wait_until(lambda: "left (it said goodbye)" in server.stderr, 15, "the learner to see the client leave")
    replacement = run(*client, "replacement", name="replacement")
    assert server.wait(120) == 0, str(server)
    assert second.wait(15) == 0 and replacement.wait(15) == 0, str(second) + str(replacement)
    lines = server.stderr.splitlines()
    assert re.search(
        r"WARNING client 'first' \(slots (0-1|2-3)\) left \(it said goodbye\); 2 of 4 slots served; "
        r"slots (0-1|2-3) wait for a client$",
        server.stderr,
        re.MULTILINE,
    ), str(server)
    assert len([line for line in lines if "joined from" in line]) == 3, str(server)
    assert re.search(
        r"INFO server gym_remote closed after [\d.]+ s: told 2 client\(s\) the run is over; "
        r"3 clients joined, 0 lost, 1 left, 0 refused$",
        server.stderr,
        re.MULTILINE,
    ), str(server)
    assert "client first: leaving" in first.stderr, str(first)
    for each in (first, second, replacement):
        assert re.search(r"INFO client \w+: serving slots [\d-]+ of gym_remote over ", each.stderr), str(each)
    assert "client second: the server closed; exiting" in second.stderr, str(second)


def test_while_slots_wait_for_clients_the_learner_says_so_at_intervals(monkeypatch, caplog):
    monkeypatch.setattr(server_module, "REMIND_SECONDS", 0.5)
    envs = RemoteVectorEnv(num_envs=2, connect_timeout=2.0)
    try:
        with caplog.at_level(logging.WARNING, logger="gym_remote"), pytest.raises(RemoteTimeoutError):
            envs.reset(seed=0)
    finally:
        envs.close()
    reminders = [record.getMessage() for record in caplog.records if "have had no client for" in record.getMessage()]
    assert 2 <= len(reminders) <= 4, reminders
    assert reminders[0].startswith("slots 0-1 have had no client for ")
    assert "waiting for up to 1 s more" in reminders[-1] or "waiting for up to 0 s more" in reminders[-1], reminders
