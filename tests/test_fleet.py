"""A learner and a fleet of external clients, as practitioners run them: how long the learner waits for them,
and what each side tells its user (log lines at INFO, error messages)."""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import gym_remote
import gym_remote.server as server_module
from gym_remote import RemoteTimeoutError, RemoteVectorEnv
from gym_remote.cli import build_parser
from gym_remote.links import shared
from gym_remote.security import read_secret_file
from tests.conftest import REPO_ROOT
from tests.helpers import (
    GYM_REMOTE_SCRIPT,
    LoggedProcess,
    ThreadClient,
    data_channel_name,
    finished,
    free_tcp_address,
    listening,
    wait_for_listening,
    wait_until,
)

LOCAL_PLANE = "shm" if shared.AVAILABLE else "uds"
"""The plane of a client on the learner's host (this test module runs over the default plane)."""


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


def test_the_package_namespace_shows_its_api_not_its_imports():
    names = dir(gym_remote)
    assert "annotations" not in names and "logging" not in names
    assert {"RemoteVectorEnv", "EnvClient", "SecurityOptions"} <= set(names)


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
    assert "is lost" not in server.stderr, str(server)  # a client that left, and a normal close: no loss
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


# -- clients that keep serving ------------------------------------------------------------------------


def test_a_fleet_that_keeps_serving_serves_three_learner_runs_in_a_row_then_stops_when_told(run):
    """Two ``--keep-serving`` clients (one over its data channel, one over ZeroMQ) serve three ``serve`` runs: one
    that ends normally, one interrupted with Ctrl-C, and one that tells them to stop; they exit 0 only then."""
    address = free_tcp_address()
    client = ["client", address, "--env", "CartPole-v1", "--num-envs", "2", "--keep-serving", "--name"]
    fleet = [run(*client, "near", name="near"), run(*client, "far", "--no-data-plane", name="far")]
    serve = ["serve", "--bind", address, "--env", "CartPole-v1", "--num-envs", "4", "--no-progress"]

    first = run(*serve, "--steps", "2000", name="run1")
    assert first.wait(60) == 0, str(first)
    second = run(*serve, "--steps", "100000000", name="run2", preexec_fn=default_sigint)
    wait_until(lambda: "4 of 4 slots served" in second.stderr, 30, "the fleet to join the second run")
    time.sleep(0.5)  # mid-rollout
    second.process.send_signal(signal.SIGINT)
    assert second.wait(30) == 130, str(second)
    third = run(*serve, "--steps", "2000", "--stop-clients", name="run3")
    assert third.wait(60) == 0, str(third)
    for each in fleet:
        assert each.wait(15) == 0, str(each)
    for server in (first, third):
        assert re.search(r"^2000 steps in ", server.stdout, re.MULTILINE), str(server)
    assert "told 2 client(s) the run is over" in first.stderr and "told 2 client(s) to stop" in third.stderr
    for each in fleet:
        assert len(re.findall(r"serving slots [\d-]+ of gym_remote", each.stderr)) == 3, str(each)
        assert "the run is over; waiting for the next learner" in each.stderr and "runs served: 2" in each.stderr
        assert "the server closed; exiting" in each.stderr, str(each)
    assert "over its same-host data channel" in fleet[0].stderr and "over ZeroMQ" in fleet[1].stderr


def test_a_client_that_keeps_serving_stays_through_the_python_learners_runs(stack, thread_clients):
    envs = RemoteVectorEnv(num_envs=2, bind="tcp://127.0.0.1:*", connect_timeout=30)
    address = envs.address
    keeper = ThreadClient(address, [make_cartpole] * 2, keep_serving=True)
    thread_clients.append(keeper)
    for run_number in range(3):
        if run_number:
            envs = RemoteVectorEnv(num_envs=2, bind=address, connect_timeout=30)
        try:
            envs.reset(seed=run_number)
            for _ in range(20):
                envs.step(envs.action_space.sample())
        finally:
            envs.close(stop_clients=run_number == 2)
        if run_number < 2:
            time.sleep(0.3)
            assert not keeper.done, "a run's end must not end a client that keeps serving"
    keeper.finish(15)
    assert keeper.client.runs == 2 and keeper.client.rejoins == 0


def test_a_client_that_serves_one_run_exits_at_its_end(stack, thread_clients):
    envs = RemoteVectorEnv(num_envs=1, connect_timeout=30)
    once = ThreadClient(envs.address, [make_cartpole])
    thread_clients.append(once)
    envs.reset(seed=0)
    envs.close()
    once.finish(15)
    assert once.client.runs == 0


@pytest.mark.parametrize(("signal_number", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_client_that_keeps_serving_ends_cleanly_on_a_signal(run, stack, signal_number, code):
    envs = RemoteVectorEnv(num_envs=2, bind="tcp://127.0.0.1:*", connect_timeout=30)
    stack.callback(envs.close)
    client = ["client", envs.address, "--env", "CartPole-v1", "--num-envs", "2", "--keep-serving"]
    process = run(*client, "--name", "kept", name="kept", preexec_fn=default_sigint)
    envs.reset(seed=0)
    envs.step(envs.action_space.sample())
    process.process.send_signal(signal_number)
    assert process.wait(15) == code, str(process)
    assert "client kept: leaving" in process.stderr and "Traceback" not in process.stderr, str(process)
    _, _, _, truncations, infos = envs.step(envs.action_space.sample())
    assert truncations.all() and infos["client_lost"].all()


def default_sigint() -> None:
    """In the child: Ctrl-C raises KeyboardInterrupt, even if the test runner was started with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


# -- the fleet recipes of docs/CLUSTERS.md ----------------------------------------------------------------


def clusters_block(language: str, containing: str) -> str:
    text = (REPO_ROOT / "docs" / "CLUSTERS.md").read_text()
    blocks = re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"one ```{language} block with {containing!r} in docs/CLUSTERS.md"
    return found[0]


def test_the_systemd_unit_of_the_clusters_doc_is_valid_and_its_command_serves_until_stopped(run, stack, tmp_path):
    unit = clusters_block("ini", "ExecStart=")
    command = shlex.split(re.search(r"^ExecStart=(.*)$", unit, re.MULTILINE).group(1))
    assert command[:2] == ["/opt/envs/venv/bin/gym-remote", "client"] and "--keep-serving" in command
    if shutil.which("systemd-analyze"):
        units = tmp_path / "units"
        units.mkdir()
        (units / "gym-remote-client@.service").write_text(unit.replace(command[0], GYM_REMOTE_SCRIPT))
        broken = unit.replace(command[0], GYM_REMOTE_SCRIPT).replace("RestartSec=5", "RestartSec=soon")
        (units / "broken@.service").write_text(broken.replace("ExecStart=", "ExecStrat="))
        for name, code in (("gym-remote-client@1.service", 0), ("broken@1.service", 1)):
            done = subprocess.run(
                ["systemd-analyze", "verify", str(units / name)], capture_output=True, text=True, timeout=60
            )
            assert done.returncode == code, (name, done.stdout, done.stderr)
    secret = tmp_path / "secret"
    assert finished(run, "secret", str(secret)).process.returncode == 0
    envs = RemoteVectorEnv(num_envs=8, bind=free_tcp_address(), secret=read_secret_file(secret), connect_timeout=30)
    stack.callback(envs.close)
    replaced = {"tcp://learner.example:5555": envs.address, "/etc/gym-remote/secret": str(secret), "%H-%i": "host-1"}
    args = [replaced.get(arg, arg) for arg in command[1:]]
    client = run(*args, name="unit", preexec_fn=default_sigint)
    envs.reset(seed=0)
    envs.step(envs.action_space.sample())
    assert {row["client"] for row in envs.stats()} == {"host-1"}
    client.process.send_signal(signal.SIGTERM)
    assert client.wait(15) == 143, str(client)  # SuccessExitStatus: an operator's stop is not a failure
    assert re.search(r"^SuccessExitStatus=130 143$", unit, re.MULTILINE) and "Restart=on-failure" in unit


def test_the_kubernetes_clients_of_the_clusters_doc_keep_serving_with_options_that_exist():
    yaml = pytest.importorskip("yaml")
    documents = list(yaml.safe_load_all(clusters_block("yaml", "kind: Deployment")))
    deployment = next(document for document in documents if document["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["gym-remote", "client"] and "--keep-serving" in args
    parsed = build_parser().parse_args(args[1:])
    assert parsed.keep_serving and parsed.connect_timeout is None and parsed.secret_file == "/secret/secret"


def test_a_learner_that_configures_no_logging_still_sees_a_loss(tmp_path, reaper):
    script = tmp_path / "learner.py"
    script.write_text(
        "import gymnasium as gym\n"
        "from gym_remote import RemoteVectorEnv\n"
        "envs = RemoteVectorEnv([lambda: gym.make('CartPole-v1')] * 2, num_clients=2)\n"
        "envs.reset(seed=0)\n"
        "import os, signal\n"
        "os.kill(envs.stats()[1]['pid'], signal.SIGKILL)\n"
        "for _ in range(50):\n"
        "    envs.step(envs.action_space.sample())\n"
        "envs.close()\n"
    )
    learner = LoggedProcess(reaper, tmp_path, "learner", [sys.executable, str(script)])
    assert learner.wait(60) == 0, str(learner)
    assert re.search(
        r"^client 'local-1' \(slots 1\) is lost: .*; slots 1 wait for a client$", learner.stderr, re.MULTILINE
    ), str(learner)
    assert " INFO " not in learner.stderr and "joined" not in learner.stderr, str(learner)  # INFO stays quiet


def test_a_client_on_the_learners_host_takes_the_data_channel_of_every_run_it_joins(stack, thread_clients):
    """A keep-serving client reconnects the moment a new learner binds its address: the learner listens for data
    channels before it binds, so the client never finds the endpoint without its channel (it served over ZeroMQ
    when it came in between)."""
    address = free_tcp_address()
    keeper = None
    planes = []
    for run_number in range(4):
        envs = RemoteVectorEnv(num_envs=2, bind=address, connect_timeout=30)
        try:
            if keeper is None:
                keeper = ThreadClient(address, [make_cartpole] * 2, keep_serving=True)
                thread_clients.append(keeper)
            envs.reset(seed=run_number)
            envs.step(envs.action_space.sample())
            planes.append({row["plane"] for row in envs.stats()})
        finally:
            envs.close(stop_clients=run_number == 3)
    keeper.finish(15)
    assert planes == [{LOCAL_PLANE}] * 4, planes


@pytest.mark.parametrize("bind", ["tcp", "ipc"])
def test_the_data_channel_listens_before_the_router_binds_a_fixed_endpoint(monkeypatch, tmp_path, bind):
    """The ordering the test above relies on, checked at the moment it matters: when the router has bound (and a
    waiting client may connect), the channel's name is taken already."""
    address = free_tcp_address() if bind == "tcp" else f"ipc://{tmp_path}/learner"
    seen = []

    class Watched(server_module.Router):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(listening(data_channel_name(address)))

    monkeypatch.setattr(server_module, "Router", Watched)
    envs = RemoteVectorEnv(num_envs=1, bind=address, connect_timeout=5)
    envs.close()
    assert seen == [True]


# -- a learner that outlives a client --------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_a_learner_that_masks_empty_slots_steps_the_served_ones_until_a_replacement_comes(stack, thread_clients, mode):
    spaces = gym.make("CartPole-v1")
    envs = RemoteVectorEnv(
        num_envs=2,
        autoreset_mode=mode,
        empty_slots="mask",
        connect_timeout=60,
        observation_space=spaces.observation_space,
        action_space=spaces.action_space,
    )
    stack.callback(envs.close)
    stays = ThreadClient(envs.address, [make_cartpole])
    thread_clients.append(stays)
    wait_until(lambda: (envs._server.poll(), envs._server.members.served)[1] == 1, 20, "the first client")
    leaves = ThreadClient(envs.address, [make_cartpole])
    thread_clients.append(leaves)
    twin = gym.vector.SyncVectorEnv([make_cartpole], autoreset_mode=mode)  # what slot 0 must return
    stack.callback(twin.close)
    envs.reset(seed=0)
    twin.reset(seed=0)
    rng = np.random.default_rng(0)

    def step():
        actions = rng.integers(0, 2, size=2)
        started = time.monotonic()
        result = envs.step(actions)
        assert time.monotonic() - started < 5, "a step waited for the empty slot"
        expected = twin.step(actions[:1])
        for got, want in zip(result[:4], expected[:4], strict=True):
            assert np.array_equal(got[0], want[0]), (got, want)  # the served slot is not disturbed
        return result

    for _ in range(5):
        step()
    leaves.client.stop()
    leaves.join(10)
    reported = None
    for _ in range(20):  # the loss is seen within a step or two; it is reported once
        obs, rewards, terminations, truncations, infos = step()
        if truncations[1]:
            reported = obs[1].copy()
            assert infos["client_lost"][1] and rewards[1] == 0 and not terminations[1]
            if mode == "SameStep":
                assert np.array_equal(infos["final_obs"][1], reported)
            break
    assert reported is not None, "the loss of slot 1 was reported"
    for _ in range(5):
        obs, rewards, terminations, truncations, infos = step()
        assert infos["unserved"][1] and infos["_unserved"][1] and not infos["_unserved"][0]
        assert rewards[1] == 0 and not terminations[1] and not truncations[1]
        assert np.array_equal(obs[1], reported), "a masked row keeps its last observation"
    replacement = ThreadClient(envs.address, [make_cartpole])
    thread_clients.append(replacement)
    rows = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # masked rows until the replacement joins (it takes a moment)
        obs, rewards, terminations, truncations, infos = step()
        unserved = bool(infos.get("_unserved", np.zeros(2, bool))[1])
        rows.append((unserved, float(rewards[1]), obs[1].copy()))
        if len(rows) >= 2 and not unserved and rewards[1] == 1.0:
            break
        time.sleep(0.01)
    served_again = next(index for index, (unserved, _, _) in enumerate(rows) if not unserved)
    first = rows[served_again] if mode == "NextStep" else rows[served_again - 1]
    assert first[1] == 0.0 and not np.array_equal(first[2], reported), "a replacement starts with a reset"
    if mode == "SameStep":
        assert rows[served_again - 1][0], "SAME_STEP: the reset row is masked"
    assert rows[-1][1] == 1.0, "then the replacement's envs step"


def test_a_masked_slot_that_waits_for_a_reset_is_reset_once_by_the_users_reset(stack, thread_clients):
    """SAME_STEP, empty_slots="mask": slot 1's loss is reported with no replacement, so it waits for a reset. A
    replacement joins; send() to it is refused (it would step an env never reset); the user's reset() resets it,
    and the steps after return what SyncVectorEnv returns from the same reset (no second, masked reset)."""
    spaces = gym.make("CartPole-v1")
    envs = RemoteVectorEnv(
        num_envs=2,
        autoreset_mode="SameStep",
        empty_slots="mask",
        connect_timeout=60,
        observation_space=spaces.observation_space,
        action_space=spaces.action_space,
    )
    stack.callback(envs.close)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole]))
    wait_until(lambda: (envs._server.poll(), envs._server.members.served)[1] == 1, 20, "the first client")
    leaves = ThreadClient(envs.address, [make_cartpole])
    thread_clients.append(leaves)
    envs.reset(seed=0)
    leaves.client.stop()
    leaves.join(10)
    actions = np.array([0, 1])
    for _ in range(40):
        if envs.step(actions)[3][1]:
            break
    else:
        pytest.fail("the loss of slot 1 was never reported")
    thread_clients.append(ThreadClient(envs.address, [make_cartpole]))
    wait_until(lambda: (envs._server.poll(), envs._server.members.served)[1] == 2, 20, "the replacement")
    with pytest.raises(ValueError, match=re.escape("send(): slots 1 lost their clients while step() masked them")):
        envs.send(np.array([1]), [1])
    twin = gym.vector.SyncVectorEnv([make_cartpole, make_cartpole], autoreset_mode="SameStep")
    stack.callback(twin.close)
    assert data_equivalence(envs.reset(seed=7), twin.reset(seed=7))
    rng = np.random.default_rng(0)
    for step in range(30):
        actions = rng.integers(0, 2, size=2)
        got, want = envs.step(actions), twin.step(actions)
        assert data_equivalence(got, want), f"step {step}: {got} != {want}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"empty_slots": "skip"}, "empty_slots must be 'wait' or 'mask'"),
        ({"empty_slots": "mask", "autoreset_mode": "Disabled"}, "empty_slots='mask' needs an autoreset mode"),
    ],
)
def test_empty_slots_takes_wait_or_mask(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RemoteVectorEnv(num_envs=1, **kwargs)


# -- the README's walkthrough on two machines -----------------------------------------------------------


@pytest.fixture
def two_hosts():
    """Two network namespaces ("machines") on a private /24 with no default route: the learner's at 10.213.10.1,
    the envs' at 10.213.10.2. Torn down after the test."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to make network namespaces")
    tag = os.getpid() % 100000
    learner, envs = f"gr-learner-{tag}", f"gr-envs-{tag}"
    commands = [
        ["ip", "netns", "add", learner],
        ["ip", "netns", "add", envs],
        ["ip", "link", "add", f"grl{tag}", "type", "veth", "peer", "name", f"gre{tag}"],
        ["ip", "link", "set", f"grl{tag}", "netns", learner],
        ["ip", "link", "set", f"gre{tag}", "netns", envs],
    ]
    for namespace, device, address in ((learner, f"grl{tag}", "10.213.10.1/24"), (envs, f"gre{tag}", "10.213.10.2/24")):
        commands += [
            ["ip", "netns", "exec", namespace, "ip", "addr", "add", address, "dev", device],
            ["ip", "netns", "exec", namespace, "ip", "link", "set", device, "up"],
            ["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"],
        ]
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True, timeout=10)
        yield learner, envs
    except subprocess.CalledProcessError as error:
        pytest.skip(f"cannot make network namespaces: {error.stderr.decode(errors='replace').strip()}")
    finally:
        for namespace in (learner, envs):  # (deleting a namespace deletes its end of the veth pair)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)


def readme_commands(after: str) -> list[list[str]]:
    """The commands of the README's first ```bash block after the text ``after`` (comments dropped)."""
    readme = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme[readme.index(after) :], re.DOTALL).group(1)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_the_readmes_walkthrough_across_two_machines_works_as_written(reaper, tmp_path, two_hosts):
    learner_host, envs_host = two_hosts
    learner_dir, envs_dir = tmp_path / "learner", tmp_path / "envs"
    learner_dir.mkdir()
    envs_dir.mkdir()
    make_secret, serve = readme_commands("shares a secret with its clients")
    (client,) = readme_commands("On each env machine:")
    readme = (REPO_ROOT / "README.md").read_text()
    status = shlex.split(re.search(r"and from either, `(gym-remote status [^`]+)`", readme).group(1))

    def on(host: str, directory, name: str, command: list[str]) -> LoggedProcess:
        assert command[0] == "gym-remote", command
        argv = ["ip", "netns", "exec", host, GYM_REMOTE_SCRIPT, *command[1:]]
        return LoggedProcess(reaper, tmp_path, name, argv, cwd=str(directory))

    assert on(learner_host, learner_dir, "secret", make_secret).wait(30) == 0
    shutil.copy(learner_dir / "secret.txt", envs_dir / "secret.txt")  # "copy it to the env machines"
    server = on(learner_host, learner_dir, "serve", serve)
    wait_for_listening(server)
    advertised = re.search(r"^listening on (tcp://\S+)", server.stdout, re.MULTILINE).group(1)
    assert advertised == "tcp://10.213.10.1:5555", str(server)  # the learner's address, not loopback

    def use(command: list[str]) -> list[str]:
        return [advertised if arg == "tcp://10.0.0.5:5555" else arg for arg in command]

    first = on(envs_host, envs_dir, "client-1", [*use(client), "--name", "first"])
    wait_until(lambda: "4 of 8 slots served" in server.stderr, 30, "the first client to join")
    shown = on(envs_host, envs_dir, "status", use(status))  # (the learner answers while it waits for slots)
    assert shown.wait(30) == 0, str(shown)
    assert re.search(r"^0\s+first\s", shown.stdout, re.MULTILINE) and "4 of 8 slots served" in shown.stdout
    second = on(envs_host, envs_dir, "client-2", [*use(client), "--name", "second"])
    assert server.wait(60) == 0, str(server)
    assert re.search(r"^20000 steps in ", server.stdout, re.MULTILINE), str(server)
    for each in (first, second):  # --keep-serving: they wait for the next run
        wait_until(lambda each=each: "waiting for the next learner" in each.stderr, 15, "the run's end")
        assert each.process.poll() is None, str(each)
