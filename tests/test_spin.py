"""The learner's spin: it busy-waits for replies that come fast, and sleeps through slow ones.

Measured as the learner thread's CPU time against the wall time of its steps: a spinning wait keeps
the thread on the CPU, a sleeping one does not. The rule itself (:class:`gym_remote.spin.SpinGate`, which
the client follows too) is tested without sockets first.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import threading
import time
from contextlib import closing

import gymnasium as gym
import pytest

from gym_remote import RemoteVectorEnv
from gym_remote.conformance.values import probe_vector
from gym_remote.links import shared
from gym_remote.server import DEFAULT_SPIN_SECONDS
from gym_remote.spin import OtherThreads, SpinGate
from tests.envs.partial import make_timed
from tests.helpers import cpu_seconds

pytestmark = pytest.mark.timeout(60)

SPIN = 200e-6


def _gate_after(waits: list[float]) -> SpinGate:
    gate = SpinGate(SPIN)
    for seconds in waits:
        gate.waited(seconds)
    return gate


def test_the_gate_spins_while_waits_are_shorter_than_the_spin():
    assert _gate_after([]).now() == SPIN
    assert _gate_after([40e-6] * 50).now() == SPIN


def test_one_late_wait_among_fast_ones_leaves_the_spin_on():
    # (a process preempted once, or time stolen by the hypervisor: before the bound, one wait of a
    # millisecond turned the spin off, and the sleeping waits after it kept it off)
    assert _gate_after([40e-6] * 50 + [0.5]).now() == SPIN
    assert _gate_after([40e-6] * 50 + [0.5] + [40e-6] + [0.5]).now() == SPIN


def test_a_few_slow_waits_in_a_row_turn_the_spin_off_and_fast_ones_bring_it_back():
    slow = _gate_after([40e-6] * 50 + [0.02] * 3)
    assert slow.now() == 0.0
    assert _gate_after([40e-6] * 50 + [0.02] * 3 + [120e-6] * 4).now() == SPIN  # waits asleep, still fast


def test_a_gate_of_zero_never_spins():
    assert SpinGate(0.0).now() == 0.0
    gate = SpinGate(0.0)
    gate.waited(0.0)
    assert gate.now() == 0.0


def test_a_crowded_gate_sleeps_until_the_crowd_is_gone():
    gate = _gate_after([40e-6] * 50)
    gate.crowded = True
    assert gate.now() == 0.0
    gate.waited(40e-6)
    assert gate.now() == 0.0  # however fast the replies
    gate.crowded = False
    assert gate.now() == SPIN


class _Burner:
    """A thread of this process that keeps a core busy outside the GIL (hashing), as a trainer's math does."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._burn, daemon=True)

    def _burn(self) -> None:
        data = bytes(1 << 20)
        while not self._stop.is_set():
            hashlib.sha256(data).digest()

    def __enter__(self) -> _Burner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive()


def test_other_threads_count_what_the_process_burns_outside_the_calling_thread():
    others = OtherThreads()
    time.sleep(0.3)
    assert others.share() < 0.2  # (nothing of this process runs; the look itself reads the clocks)
    with _Burner():
        others.share()
        time.sleep(0.4)
        assert others.crowded()
    busy_until = time.perf_counter() + 0.3
    while time.perf_counter() < busy_until:  # the calling thread's own CPU time is not counted
        pass
    assert others.share() < 0.2
    time.sleep(0.3)
    assert others.crowded() is False


def test_other_threads_start_over_in_another_thread():
    others = OtherThreads()
    answers = []
    thread = threading.Thread(target=lambda: answers.append(others.share()))
    thread.start()
    thread.join(10)
    assert answers == [None]


def _busy_share(envs: RemoteVectorEnv, steps: int) -> float:
    """The share of the wall time of ``steps`` steps that the learner thread spent on the CPU."""
    envs.reset(seed=0)
    for _ in range(3):  # let the spin settle on how fast replies come
        envs.step(envs.action_space.sample())
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        envs.step(envs.action_space.sample())
    return (time.thread_time() - cpu) / (time.perf_counter() - wall)


def _timed_envs(delay: float, spin: float | None) -> RemoteVectorEnv:
    env_fns = [functools.partial(make_timed, 0, delay, max_steps=10_000, terminate_prob=0.0)]
    return RemoteVectorEnv(env_fns, num_clients=1, spin=spin)


def test_replies_faster_than_the_spin_are_waited_for_busily():
    with closing(_timed_envs(0.002, spin=0.02)) as envs:
        assert _busy_share(envs, 30) > 0.6


def test_replies_slower_than_the_spin_are_waited_for_asleep():
    # a spin of 5 ms at every 25 ms step would keep the thread busy 20% of the time
    with closing(_timed_envs(0.025, spin=0.005)) as envs:
        assert _busy_share(envs, 20) < 0.08


def test_a_learner_next_to_a_busy_thread_waits_asleep():
    # a trainer thread keeps a core busy: a spinning wait would take the core the client needs
    with closing(_timed_envs(0.002, spin=0.02)) as envs, _Burner():
        envs.reset(seed=0)
        settle_until = time.perf_counter() + 0.8  # the other threads' share is looked at every quarter second
        while time.perf_counter() < settle_until:
            envs.step(envs.action_space.sample())
        assert _busy_share(envs, 30) < 0.3


def _client_busy_share(envs: RemoteVectorEnv, pid: int, seconds: float) -> float:
    """The share of ``seconds`` of steps, each followed by 3 ms of the learner's own work, that the client
    process ``pid`` spent on the CPU (a client that spins for its next command spins through those 3 ms)."""
    cpu, wall = cpu_seconds(pid), time.perf_counter()
    while time.perf_counter() - wall < seconds:
        envs.step(envs.action_space.sample())
        time.sleep(0.003)
    return (cpu_seconds(pid) - cpu) / (time.perf_counter() - wall)


@pytest.mark.parametrize("client", ["python", "c++"])
def test_a_client_spins_only_while_its_learners_process_has_a_core_to_spare(
    request, reaper, tmp_path, data_plane, client
):
    # a trainer thread next to the learner keeps a core busy: the learner's commands say so (FLAG_CROWDED),
    # and a client spinning for them would take the core the learner needs (measured: 23 % of the rate);
    # over ZeroMQ a client never spins
    endpoint = f"ipc://{tmp_path}/learner"
    if client == "python":
        command = [sys.executable, "-m", "gym_remote", "client", endpoint, "--env", "gym_remote/Probe-v0"]
    else:
        command = [str(request.getfixturevalue("cpp_build") / "gym_remote_probe_client"), endpoint]
    with closing(probe_vector(endpoint, 1, liveness_timeout=2.0)) as envs:
        process = reaper.popen([*command, "--num-envs", "1", "--spin", "0.02"])
        envs.reset(seed=0)
        served = "uds" if data_plane == "shm" and client == "c++" else data_plane  # (the C++ client has no mailboxes)
        assert [row["plane"] for row in envs.stats()] == [served]
        alone = _client_busy_share(envs, process.pid, 1.0)
        with _Burner():
            _client_busy_share(envs, process.pid, 0.8)  # the learner looks at its other threads every 0.25 s
            crowded = _client_busy_share(envs, process.pid, 1.0)
        if data_plane != "zmq":
            assert alone > 0.5, f"the client spun {alone:.0%} of the time next to an idle learner"
        else:
            assert alone < 0.25, f"the client spun {alone:.0%} of the time over ZeroMQ"
        assert crowded < 0.25, f"the client spun {crowded:.0%} of the time while its learner's process was crowded"


def test_spin_zero_never_spins():
    with closing(_timed_envs(0.002, spin=0.0)) as envs:
        assert _busy_share(envs, 30) < 0.3


def test_the_default_spins_only_when_a_core_is_left_for_it():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env_fns = [lambda: gym.make("CartPole-v1")] * 2
    with closing(RemoteVectorEnv(env_fns, num_clients=1)) as one_client:
        assert one_client.spin == (DEFAULT_SPIN_SECONDS if cores >= 2 else 0.0)
    with closing(RemoteVectorEnv(env_fns, num_clients=2, data_plane="uds")) as two_clients:
        assert two_clients.spin == (DEFAULT_SPIN_SECONDS if cores >= 3 else 0.0)
    with closing(RemoteVectorEnv(env_fns, num_clients=2, data_plane="shm")) as two_clients_in_shared_memory:
        each_has_a_core = cores >= 2 and shared.AVAILABLE  # (they spin too: a step is a wake-up)
        assert two_clients_in_shared_memory.spin == (DEFAULT_SPIN_SECONDS if each_has_a_core else 0.0)
    many = [env_fns[0]] * (cores + 1)
    with closing(RemoteVectorEnv(many, num_clients=cores + 1, data_plane="shm")) as more_clients_than_cores:
        assert more_clients_than_cores.spin == 0.0
    with closing(RemoteVectorEnv(num_envs=2)) as remote_clients_only:
        assert remote_clients_only.spin == DEFAULT_SPIN_SECONDS
    with closing(RemoteVectorEnv(num_envs=2, spin=0.001)) as chosen:
        assert chosen.spin == 0.001


@pytest.mark.parametrize("spin", [-0.001, float("nan")])
def test_a_negative_spin_is_refused(spin):
    with pytest.raises(ValueError, match="spin must be a duration"):
        RemoteVectorEnv(num_envs=2, spin=spin)
