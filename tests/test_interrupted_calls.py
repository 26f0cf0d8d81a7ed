"""An interrupted call leaves nothing behind: a KeyboardInterrupt (here from SIGALRM) while a call waits
for its replies ends that call, and the next call gets only its own results.

The envs (``tests.envs.Napper``) sleep on demand, so that the interrupt comes while the learner
waits; their late replies then arrive during the next call, where they must be dropped.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import numpy as np
import pytest

from gym_remote import RemoteVectorEnv
from tests.envs import Napper

pytestmark = pytest.mark.timeout(90)

INTERRUPT_AFTER = 0.3  # seconds into a wait; the envs nap for Napper.NAP_SECONDS (1 s)


@contextlib.contextmanager
def interrupt_after(seconds: float) -> Iterator[None]:
    """Raise KeyboardInterrupt in the main thread after ``seconds``, as Ctrl-C would."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(params=[1, 2], ids=["1-client", "2-clients"])
def envs(request) -> Iterator[RemoteVectorEnv]:
    vector = RemoteVectorEnv([Napper] * 2, num_clients=request.param, autoreset_mode="SameStep", timeout=30)
    try:
        yield vector
    finally:
        vector.close()


def assert_nothing_awaited(envs: RemoteVectorEnv) -> None:
    """No command of the interrupted call still awaits replies (they would land in a later call)."""
    assert not envs._server._awaited, f"replies still awaited: {envs._server._awaited}"


def assert_second_step_is_its_own(envs: RemoteVectorEnv, steps_before: int) -> None:
    """The next step returns its own results: the count after both steps, no episode end, no infos."""
    observations, rewards, terminations, truncations, infos = envs.step(np.array([0, 0]))
    assert observations[:, 0].tolist() == [steps_before + 1] * 2, observations
    assert rewards.tolist() == [0.0, 0.0] and not terminations.any() and not truncations.any()
    assert "final_obs" not in infos and "napped" not in infos, infos


def test_an_interrupted_step_leaves_no_results_for_the_next(envs):
    envs.reset(seed=0)
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.step(np.array([1, 1]))  # both envs nap, then end their episodes (SAME_STEP: a final_obs)
    assert_nothing_awaited(envs)
    # The napping step ended the episodes in the clients, which reset them: the count restarts at 0.
    assert_second_step_is_its_own(envs, steps_before=0)
    assert_second_step_is_its_own(envs, steps_before=1)


def test_an_interrupted_step_wait_leaves_no_results_for_the_next(envs):
    envs.reset(seed=0)
    envs.step_async(np.array([0, 1]))  # slot 1 naps
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.step_wait()
    assert_nothing_awaited(envs)
    observations, _, terminations, _, infos = envs.step(np.array([0, 0]))
    assert observations[:, 0].tolist() == [2, 1], observations  # slot 1 restarted after its nap ended it
    assert not terminations.any() and "final_obs" not in infos and "napped" not in infos, infos


def test_an_interrupted_reset_leaves_no_results_for_the_next_call(envs):
    envs.reset(seed=0)
    envs.step(np.array([0, 0]))
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.reset(seed=1, options={"nap": True})
    assert_nothing_awaited(envs)
    observations, infos = envs.reset(seed=2)
    assert observations[:, 0].tolist() == [0, 0] and "napped_in_reset" not in infos, infos
    assert_second_step_is_its_own(envs, steps_before=0)


def test_an_interrupted_reset_wait_leaves_no_results_for_the_next_call(envs):
    envs.reset(seed=0)
    envs.reset_async(seed=1, options={"nap": True})
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.reset_wait()
    assert_nothing_awaited(envs)
    assert_second_step_is_its_own(envs, steps_before=0)


def test_an_interrupted_call_leaves_no_results_for_the_next_call(envs):
    envs.reset(seed=0)
    envs.step(np.array([0, 0]))
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.call("nap")
    assert_nothing_awaited(envs)
    assert envs.get_attr("steps") == (1, 1)
    assert_second_step_is_its_own(envs, steps_before=1)


def test_an_interrupted_recv_keeps_its_slots_in_flight():
    envs = RemoteVectorEnv([Napper] * 2, num_clients=2, autoreset_mode="SameStep", timeout=30, batch_size=2)
    try:
        envs.async_reset(seed=0)
        envs.recv()
        envs.send(np.array([1, 0]), np.array([0, 1]))  # slot 0 naps, slot 1 answers at once
        with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
            envs.recv()
        # A later recv() returns both results, each once, as after a timeout.
        observations, rewards, terminations, _, infos = envs.recv()
        by_slot = dict(zip(infos["env_id"].tolist(), range(2), strict=True))
        assert sorted(by_slot) == [0, 1]
        assert bool(terminations[by_slot[0]]) and rewards[by_slot[0]] == 1.0
        assert observations[by_slot[1], 0] == 1 and not terminations[by_slot[1]]
        envs.send(np.array([0, 0]), np.array([0, 1]))
        observations, _, terminations, _, infos = envs.recv()
        assert sorted(infos["env_id"].tolist()) == [0, 1] and not terminations.any()
    finally:
        envs.close()
