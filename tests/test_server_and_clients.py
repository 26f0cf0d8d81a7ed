"""Membership with real processes: the server form of RemoteVectorEnv and the clients that join it.

Clients are ``gym-remote client`` processes (started through the ``reaper`` fixture) or
:class:`~gym_remote.EnvClient` objects running in threads of the test process. A server only handles
joins while its (the test's) thread waits inside ``reset``/``step``, so tests that need a late join
handled keep stepping until the joining client is done.
"""

from __future__ import annotations

import os
import re
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector.utils import batch_space

import gym_remote
from gym_remote import JoinRefusedError, RemoteTimeoutError, RemoteVectorEnv
from tests.envs import make_cartpole
from tests.helpers import LoggedProcess, ThreadClient, cli_client, free_tcp_address, step_until, wait_until

CARTPOLE = gym.make("CartPole-v1")
CARTPOLE_OBS, CARTPOLE_ACT = CARTPOLE.observation_space, CARTPOLE.action_space


# -- helpers ---------------------------------------------------------------------------------------


def cartpole_client(reaper, tmp_path, name, address, num_envs=2, *extra, **kwargs) -> LoggedProcess:
    return cli_client(
        reaper,
        tmp_path,
        name,
        address,
        "--env",
        "CartPole-v1",
        "--num-envs",
        str(num_envs),
        "--connect-timeout",
        "30",
        *extra,
        **kwargs,
    )


def expected_cartpole_resets(seed: int, num_envs: int) -> np.ndarray:
    return np.stack([gym.make("CartPole-v1").reset(seed=seed + index)[0] for index in range(num_envs)])


def full_rollout(envs: RemoteVectorEnv, steps: int, seed: int) -> None:
    """reset(seed) then ``steps`` random steps, checking every batch; at least one episode must end."""
    obs, infos = envs.reset(seed=seed)
    assert obs.shape == (envs.num_envs, 4)
    np.testing.assert_array_equal(obs, expected_cartpole_resets(seed, envs.num_envs))
    envs.action_space.seed(seed)
    episodes_ended = 0
    for _ in range(steps):
        obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        assert obs.shape == (envs.num_envs, 4) and obs.dtype == np.float32
        assert envs.observation_space.contains(obs)
        assert rewards.dtype == np.float64 and rewards.shape == (envs.num_envs,)
        assert terminations.dtype == np.bool_ and truncations.dtype == np.bool_
        assert isinstance(infos, dict)
        episodes_ended += int(np.sum(terminations | truncations))
    assert episodes_ended > 0, "no CartPole episode ended in a random rollout"


# -- server form, clients joining ------------------------------------------------------------------


def test_address_is_loopback_with_a_free_port():
    envs = RemoteVectorEnv(num_envs=2)
    try:
        match = re.fullmatch(r"tcp://127\.0\.0\.1:(\d+)", envs.address)
        assert match, envs.address
        assert 0 < int(match.group(1)) < 65536
        other = RemoteVectorEnv(num_envs=2)  # a second server gets another free port
        try:
            assert other.address != envs.address
        finally:
            other.close()
    finally:
        envs.close()


def test_cli_clients_started_after_the_server(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=4, connect_timeout=30)
    try:
        assert envs.num_clients == 0
        clients = [cartpole_client(reaper, tmp_path, f"after-{index}", envs.address) for index in range(2)]
        started = time.monotonic()
        full_rollout(envs, steps=300, seed=10)  # reset waits for both clients (they take a while to start)
        assert envs.num_clients == 2
        assert time.monotonic() - started < 30
    finally:
        envs.close()
    for client in clients:
        assert client.wait(timeout=10) == 0, client.stderr


def test_cli_clients_started_before_the_server(reaper, tmp_path):
    address = free_tcp_address()
    clients = [cartpole_client(reaper, tmp_path, f"before-{index}", address, log_level="INFO") for index in range(2)]
    # the clients are up and knocking (HELLO sent) before anything listens at the address
    for client in clients:
        wait_until(lambda client=client: "connecting to" in client.stderr, 30, "the client to send HELLO")
        assert client.process.poll() is None, client.stderr
    envs = RemoteVectorEnv(num_envs=4, bind=address, connect_timeout=30)
    try:
        assert envs.address == address
        full_rollout(envs, steps=300, seed=3)
        assert envs.num_clients == 2
    finally:
        envs.close()
    for client in clients:
        assert client.wait(timeout=10) == 0, client.stderr


def test_spaces_are_learned_from_the_first_client(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=4, connect_timeout=30)
    try:
        clients = [cartpole_client(reaper, tmp_path, f"c{index}", envs.address) for index in range(2)]
        assert envs.single_observation_space == CARTPOLE_OBS  # waits for the first client
        assert envs.single_action_space == CARTPOLE_ACT
        assert envs.observation_space == batch_space(CARTPOLE_OBS, 4)
        assert envs.action_space == batch_space(CARTPOLE_ACT, 4)
        assert envs.metadata["render_fps"] == CARTPOLE.metadata["render_fps"]
        full_rollout(envs, steps=200, seed=0)
    finally:
        envs.close()
    for client in clients:
        assert client.wait(timeout=10) == 0, client.stderr


def test_explicit_spaces_need_no_client(reaper, tmp_path):
    started = time.monotonic()
    envs = RemoteVectorEnv(num_envs=3, observation_space=CARTPOLE_OBS, action_space=CARTPOLE_ACT, connect_timeout=30)
    try:
        assert envs.single_observation_space == CARTPOLE_OBS
        assert envs.single_action_space == CARTPOLE_ACT
        assert envs.observation_space == batch_space(CARTPOLE_OBS, 3)
        assert envs.action_space == batch_space(CARTPOLE_ACT, 3)
        assert time.monotonic() - started < 5  # no waiting for a client
        assert envs.num_clients == 0
        clients = [
            cartpole_client(reaper, tmp_path, "two", envs.address, 2),
            cartpole_client(reaper, tmp_path, "one", envs.address, 1),
        ]
        full_rollout(envs, steps=200, seed=7)
        assert envs.num_clients == 2
    finally:
        envs.close()
    for client in clients:
        assert client.wait(timeout=10) == 0, client.stderr


def test_ipc_bind_and_thread_clients(tmp_path, thread_clients):
    address = f"ipc://{tmp_path}/server.sock"
    envs = RemoteVectorEnv(num_envs=3, bind=address, connect_timeout=30)
    try:
        assert envs.address == address
        thread_clients.append(ThreadClient(address, [make_cartpole] * 2))
        thread_clients.append(ThreadClient(address, [make_cartpole]))
        full_rollout(envs, steps=150, seed=1)
        assert envs.num_clients == 2
    finally:
        envs.close()
    for client in thread_clients:
        client.finish(10)


# -- reset() waiting for slots ---------------------------------------------------------------------


def test_reset_times_out_saying_how_many_slots_are_served(thread_clients):
    envs = RemoteVectorEnv(num_envs=4, connect_timeout=1.0)
    try:
        thread_clients.append(ThreadClient(envs.address, [make_cartpole] * 2))
        started = time.monotonic()
        with pytest.raises(RemoteTimeoutError) as caught:
            envs.reset(seed=0)
        elapsed = time.monotonic() - started
        message = str(caught.value)
        assert isinstance(caught.value, TimeoutError)
        assert re.search(r"\b2 of 4 slots\b", message), message
        assert elapsed < 8, f"reset took {elapsed:.1f} s with connect_timeout=1"
        assert envs.num_clients == 1

        # the vector recovers once enough clients joined
        thread_clients.append(ThreadClient(envs.address, [make_cartpole] * 2))
        envs.connect_timeout = 30
        obs, _ = envs.reset(seed=0)
        np.testing.assert_array_equal(obs, expected_cartpole_resets(0, 4))
    finally:
        envs.close()
    for client in thread_clients:
        client.finish(10)


def test_reset_times_out_with_no_client_at_all():
    envs = RemoteVectorEnv(num_envs=3, observation_space=CARTPOLE_OBS, action_space=CARTPOLE_ACT, connect_timeout=1.0)
    try:
        started = time.monotonic()
        with pytest.raises(RemoteTimeoutError, match=r"\b0 of 3 slots\b"):
            envs.reset()
        assert time.monotonic() - started < 8
    finally:
        envs.close()


# -- leaving and replacing -------------------------------------------------------------------------


def test_a_client_that_leaves_frees_its_slots_for_a_newcomer(thread_clients):
    envs = RemoteVectorEnv(num_envs=4, timeout=20, connect_timeout=30)
    try:
        first = ThreadClient(envs.address, [make_cartpole] * 2, name="first")
        thread_clients.append(first)
        assert envs.single_observation_space == CARTPOLE_OBS  # "first" has slots 0-1
        leaving = ThreadClient(envs.address, [make_cartpole] * 2, name="leaving")
        thread_clients.append(leaving)
        envs.reset(seed=0)
        assert leaving.client.slots == [2, 3]
        envs.step(envs.action_space.sample())

        leaving.stop()  # says BYE
        assert leaving.done and leaving.error is None, repr(leaving.error)
        started = time.monotonic()
        _, _, _, truncations, infos = envs.step(envs.action_space.sample())  # the BYE is seen while it waits
        assert time.monotonic() - started < 15
        assert truncations[2:].all() and infos["client_lost"].tolist() == [False, False, True, True]
        assert envs.num_clients == 1

        newcomer = ThreadClient(envs.address, [make_cartpole] * 2, name="newcomer")
        thread_clients.append(newcomer)
        envs.step(envs.action_space.sample())  # waits for the newcomer: its reset is this autoreset step
        assert newcomer.client.slots == [2, 3]
        full_rollout(envs, steps=100, seed=4)
        assert envs.num_clients == 2
    finally:
        envs.close()
    for client in (first, newcomer):
        client.finish(10)


# -- refusals --------------------------------------------------------------------------------------


def test_cli_client_with_other_spaces_is_refused(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=2, observation_space=CARTPOLE_OBS, action_space=CARTPOLE_ACT, connect_timeout=30)
    try:
        good = cartpole_client(reaper, tmp_path, "good", envs.address, 2)
        bad = cli_client(reaper, tmp_path, "pendulum", envs.address, "--env", "Pendulum-v1", "--connect-timeout", "30")
        envs.reset(seed=0)
        # keep the server busy (handling joins) until the refused client gave up
        step_until(envs, lambda: bad.process.poll() is not None, 30, "the Pendulum client to exit")
        assert bad.process.returncode not in (0, None)
        stderr = bad.stderr
        assert "refused" in stderr, stderr
        assert "observation space" in stderr, stderr
        assert "Box(-8.0, 8.0, (3,), float32)" in stderr or "(3,)" in stderr, stderr
        # the server keeps working with the client it has
        for _ in range(50):
            envs.step(envs.action_space.sample())
        assert envs.num_clients == 1
    finally:
        envs.close()
    assert good.wait(timeout=10) == 0, good.stderr


def test_thread_client_with_other_spaces_is_refused(thread_clients):
    envs = RemoteVectorEnv(num_envs=2, connect_timeout=30)  # spaces learned from the first client
    try:
        good = ThreadClient(envs.address, [make_cartpole] * 2)
        thread_clients.append(good)
        envs.reset(seed=0)
        bad = ThreadClient(envs.address, [lambda: gym.make("MountainCar-v0")])
        thread_clients.append(bad)
        step_until(envs, lambda: bad.done, 30, "the MountainCar client to be answered")
        error = bad.error
        assert isinstance(error, JoinRefusedError), repr(error)
        assert isinstance(error, ConnectionError)
        assert error.code == "spaces"
        assert "observation space" in str(error), str(error)
        assert "refused" in str(error), str(error)
        for _ in range(20):
            envs.step(envs.action_space.sample())
    finally:
        envs.close()
    good.finish(10)


def test_thread_client_offering_more_envs_than_free_slots_is_refused(thread_clients):
    envs = RemoteVectorEnv(num_envs=4, connect_timeout=30)
    try:
        first = ThreadClient(envs.address, [make_cartpole] * 2)
        thread_clients.append(first)
        assert envs.single_observation_space == CARTPOLE_OBS  # the first client has joined: 2 slots free
        too_big = ThreadClient(envs.address, [make_cartpole] * 3, wait_for_slot=False)
        fitting = ThreadClient(envs.address, [make_cartpole] * 2)
        thread_clients.extend([too_big, fitting])
        envs.reset(seed=5)  # waits until the fitting client has joined
        step_until(envs, lambda: too_big.done, 30, "the 3-env client to be answered")
        error = too_big.error
        assert isinstance(error, JoinRefusedError), repr(error)
        assert error.code == "full"
        assert "no free slot" in str(error), str(error)
        assert envs.num_clients == 2
        full_rollout(envs, steps=100, seed=5)
    finally:
        envs.close()
    for client in (first, fitting):
        client.finish(10)


def test_cli_client_finding_no_free_slot_is_refused(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=4, connect_timeout=30)
    try:
        members = [cartpole_client(reaper, tmp_path, f"member-{index}", envs.address) for index in range(2)]
        envs.reset(seed=0)
        extra = cartpole_client(reaper, tmp_path, "extra", envs.address, 1, "--exit-if-full")
        step_until(envs, lambda: extra.process.poll() is not None, 30, "the extra client to exit")
        assert extra.process.returncode == 1, extra.stderr
        assert "no free slot" in extra.stderr, extra.stderr
        assert envs.num_clients == 2
        full_rollout(envs, steps=100, seed=1)
    finally:
        envs.close()
    for member in members:
        assert member.wait(timeout=10) == 0, member.stderr


def test_errors_are_exported():
    assert issubclass(gym_remote.JoinRefusedError, gym_remote.GymRemoteError)
    assert issubclass(gym_remote.RemoteTimeoutError, TimeoutError)
    assert issubclass(gym_remote.ClientLostError, ConnectionError)


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_cli_client_stopped_by_a_signal_says_goodbye(reaper, tmp_path, signum, code):
    """A stopped client tells the server at once (BYE): its slots report the loss in the next step,
    long before the liveness timeout would have found it."""
    envs = RemoteVectorEnv(num_envs=4, connect_timeout=30, liveness_timeout=60)
    try:
        keeper = cartpole_client(reaper, tmp_path, "keeper", envs.address)
        leaving = cartpole_client(reaper, tmp_path, "leaving", envs.address)
        envs.reset(seed=0)
        slots = [row["slot"] for row in envs.stats() if row["client"] == "leaving"]
        for _ in range(5):
            envs.step(envs.action_space.sample())
        os.kill(leaving.process.pid, signum)
        assert leaving.wait(timeout=10) == code, leaving.stderr
        started = time.monotonic()
        _, _, _, truncations, infos = envs.step(envs.action_space.sample())
        assert time.monotonic() - started < 5
        assert infos["client_lost"].tolist() == [slot in slots for slot in range(4)]
        assert truncations[slots].all()
    finally:
        envs.close()
    assert keeper.wait(timeout=10) == 0, keeper.stderr


def test_env_client_close_leaves_the_server(thread_clients):
    envs = RemoteVectorEnv(num_envs=2, connect_timeout=30, liveness_timeout=60)
    try:
        staying = ThreadClient(envs.address, [make_cartpole])
        leaving = ThreadClient(envs.address, [make_cartpole])
        thread_clients.extend([staying, leaving])
        envs.reset(seed=0)
        slot = leaving.client.slots[0]
        leaving.client.close()
        leaving.join(5)
        assert leaving.error is None, repr(leaving.error)
        _, _, _, truncations, infos = envs.step(envs.action_space.sample())
        assert infos["client_lost"].tolist() == [index == slot for index in range(2)] and truncations[slot]
    finally:
        envs.close()
