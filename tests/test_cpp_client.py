"""The C++ client (clients/cpp): its unit tests, the conformance suite, and a vector served by C++ and
Python clients together, against SyncVectorEnv."""

from __future__ import annotations

import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gym_remote import RemoteVectorEnv
from gym_remote.conformance import GROUPS, run
from gym_remote.conformance.reference import differences
from gym_remote.conformance.values import probe_vector
from gym_remote.errors import RemoteEnvError
from gym_remote.links import shared
from gym_remote.probe import ProbeEnv
from tests.helpers import free_tcp_address

pytestmark = pytest.mark.timeout(300)


def probe_client(build, *arguments: str) -> list[str]:
    return [str(build / "gym_remote_probe_client"), *arguments]


def test_its_unit_tests_and_the_test_vectors_pass(cpp_build):
    command = ["ctest", "--test-dir", str(cpp_build), "--output-on-failure"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "100% tests passed, 0 tests failed out of 4" in done.stdout, done.stdout[-4000:]


@pytest.mark.parametrize("group", GROUPS)
def test_it_passes_the_conformance_suite(cpp_build, group):
    template = probe_client(
        cpp_build, "{endpoint}", "--num-envs", "{num_envs}", "--liveness-timeout", "{liveness_timeout}", "{security}"
    )
    report = run(template, groups=[group])
    assert report.results and report.passed, report.text()


@pytest.mark.parametrize("layout", ["tcp", "ipc", "tcp, no data plane"])
@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_cpp_and_python_clients_serve_one_vector_as_sync_vector_env_steps(cpp_build, reaper, tmp_path, mode, layout):
    """On this host both clients carry the steps over the data plane (PROTOCOL.md §13) unless told not to."""
    endpoint = f"ipc://{tmp_path}/learner" if layout == "ipc" else free_tcp_address()
    switch = ["--no-data-plane"] if "no data plane" in layout else []
    envs = probe_vector(endpoint, 4, liveness_timeout=2.0, mode=mode)
    reference = SyncVectorEnv([ProbeEnv] * 4, autoreset_mode=mode)
    try:
        spin = ["--spin", "0.0001"] if layout == "ipc" else []  # busy-checks the data channel for commands
        reaper.popen(probe_client(cpp_build, endpoint, "--num-envs", "2", "--name", "cpp", *switch, *spin))
        python = [sys.executable, "-m", "gym_remote", "client", endpoint, "--env", "gym_remote/Probe-v0", *switch]
        reaper.popen([*python, "--num-envs", "2", "--name", "python"])
        found = differences(envs.reset(seed=5), reference.reset(seed=5), "reset")
        planes = {row["client"]: row["plane"] for row in envs.stats()}
        local = "shm" if shared.AVAILABLE else "uds"  # (the C++ client has no shared-memory mailboxes)
        assert planes == ({"cpp": "zmq", "python": "zmq"} if switch else {"cpp": "uds", "python": local}), envs.stats()
        envs.action_space.seed(1)
        for step in range(40):
            actions = envs.action_space.sample()
            expected = reference.step(actions)
            found += differences(envs.step(actions), expected, f"step {step}")
            done = expected[2] | expected[3]
            if mode == AutoresetMode.DISABLED and np.any(done):
                options = {"reset_mask": done.copy()}
                mask = {"reset_mask": done.copy()}
                found += differences(envs.reset(options=options), reference.reset(options=mask), f"reset {step}")
        assert not found, "\n".join(found)
    finally:
        envs.close()
        reference.close()


def test_a_killed_cpp_client_is_noticed_at_once_over_the_data_plane(cpp_build, reaper):
    """Its data channel closes when it dies, so the server does not wait for the liveness timeout (30 s)."""
    endpoint = free_tcp_address()
    envs = probe_vector(endpoint, 2, liveness_timeout=30.0)
    try:
        client = reaper.popen(probe_client(cpp_build, endpoint, "--num-envs", "2", "--liveness-timeout", "30"))
        envs.reset(seed=1)
        assert [row["plane"] for row in envs.stats()] == ["uds", "uds"], envs.stats()
        client.kill()
        client.wait(5)
        started = time.monotonic()
        _, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        elapsed = time.monotonic() - started
        assert elapsed < 2.0, f"the loss took {elapsed:.2f} s to notice"
        assert truncations.all() and not terminations.any() and "client_lost" in infos, infos
    finally:
        envs.close()


def cartpole_client(build, endpoint: str, num_envs: int) -> list[str]:
    return [str(build / "gym_remote_cartpole_client"), endpoint, "--num-envs", str(num_envs)]


def cartpole_vectors(mode: AutoresetMode) -> tuple[RemoteVectorEnv, SyncVectorEnv, str]:
    """A RemoteVectorEnv of 4 CartPole slots bound to a free port, and its SyncVectorEnv twin of gym.make's."""
    single = gym.make("CartPole-v1")
    endpoint = free_tcp_address()
    envs = RemoteVectorEnv(
        num_envs=4,
        bind=endpoint,
        autoreset_mode=mode,
        observation_space=single.observation_space,
        action_space=single.action_space,
    )
    reference = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4, autoreset_mode=mode)
    return envs, reference, endpoint


def test_an_env_of_the_cpp_client_raising_in_partial_batches_costs_no_other_slot_its_result(cpp_build, reaper):
    """Partial batches send one STEP per client with FLAG_EACH: the C++ client steps the envs after one that
    raises, and lists the error in its RESULT (PROTOCOL.md §5.6)."""
    single = gym.make("CartPole-v1")
    endpoint = free_tcp_address()
    envs = RemoteVectorEnv(
        num_envs=2,
        bind=endpoint,
        batch_size=1,
        observation_space=single.observation_space,
        action_space=single.action_space,
        timeout=30,
    )
    reference = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    try:
        reaper.popen(cartpole_client(cpp_build, endpoint, 2))
        envs.async_reset(seed=5)
        expected = reference.reset(seed=5)[0]
        returned = {}
        for _ in range(2):
            obs, *_, info = envs.recv()
            returned[int(info["env_id"][0])] = obs[0]
        np.testing.assert_array_equal(np.stack([returned[0], returned[1]]), expected)
        envs.send(np.array([5, 1]), [0, 1])  # slot 0's action is invalid: its env raises; slot 1's steps
        with pytest.raises(RemoteEnvError, match="slot 0") as raised:
            envs.recv()
        assert raised.value.slot == 0 and isinstance(raised.value, AssertionError)
        obs, rewards, terminations, truncations, info = envs.recv()
        assert info["env_id"].tolist() == [1]
        stepped = reference.step(np.array([0, 1]))  # (slot 0's twin takes its valid action below)
        np.testing.assert_array_equal(obs[0], stepped[0][1])
        assert (rewards[0], terminations[0], truncations[0]) == (stepped[1][1], stepped[2][1], stepped[3][1])
        envs.send(np.array([0]), [0])  # slot 0 takes actions again, from the state it was in
        obs, *_, info = envs.recv()
        assert info["env_id"].tolist() == [0]
        np.testing.assert_array_equal(obs[0], stepped[0][0])
    finally:
        envs.close()
        reference.close()


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_the_cpp_cartpole_makes_gymnasiums_episodes_from_the_same_seeds(cpp_build, reaper, mode):
    """Its resets draw from numpy's PCG64 seeded as env.np_random is, and its physics are Gymnasium's, so
    seeded resets (seeds of any size), the unseeded autoresets after them, options and every step match bit for bit."""
    envs, reference, endpoint = cartpole_vectors(mode)
    try:
        reaper.popen(cartpole_client(cpp_build, endpoint, 4))
        found = differences(envs.reset(seed=123), reference.reset(seed=123), "reset(seed=123)")
        rng = np.random.default_rng(0)
        episodes = 0
        for step in range(300):
            actions = rng.integers(0, 2, 4)
            expected = reference.step(actions)
            found += differences(envs.step(actions), expected, f"step {step}")
            done = expected[2] | expected[3]
            episodes += int(done.sum())
            if mode == AutoresetMode.DISABLED and np.any(done):
                where = f"reset of {done} after step {step}"
                found += differences(
                    envs.reset(options={"reset_mask": done.copy()}),
                    reference.reset(options={"reset_mask": done.copy()}),
                    where,
                )
            if found:
                break
        options = {"low": -0.2, "high": 0.2}
        for written, big in (("2**200 + 3", 2**200 + 3), ("2**64 - 2", 2**64 - 2)):  # seeds of 7 words; across 2**64
            found += differences(
                envs.reset(seed=big, options=options), reference.reset(seed=big, options=options), f"reset({written})"
            )
        assert not found, "\n".join(found)
        assert episodes >= 20, f"only {episodes} episodes ended in 300 steps"
        assert envs.get_attr("np_random_seed") == (big, big + 1, big + 2, big + 3)
    finally:
        envs.close()
        reference.close()


def test_the_cpp_cartpole_state_is_an_attribute_the_learner_sets(cpp_build, reaper):
    envs, reference, endpoint = cartpole_vectors(AutoresetMode.DISABLED)
    try:
        reaper.popen(cartpole_client(cpp_build, endpoint, 4))
        envs.reset(seed=0)
        reference.reset(seed=0)
        rng = np.random.default_rng(0)
        states = [rng.uniform(-0.2, 0.2, 4) for _ in range(4)]  # further from upright than a reset goes
        envs.set_attr("state", states)
        reference.set_attr("state", states)
        for step in range(200):
            actions = rng.integers(0, 2, 4)
            expected = reference.step(actions)
            found = differences(envs.step(actions), expected, f"step {step}")
            assert not found, "\n".join(found)
            if np.any(expected[2] | expected[3]):
                break
        gotten = envs.get_attr("state")
        assert [state.dtype for state in gotten] == [np.dtype(np.float64)] * 4
        assert [state.tobytes() for state in gotten] == [state.tobytes() for state in reference.get_attr("state")]
    finally:
        envs.close()
        reference.close()
