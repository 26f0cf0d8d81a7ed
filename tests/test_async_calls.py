"""step_async / step_wait and reset_async / reset_wait, against Gymnasium's own vector envs.

Real client processes (local clients, ``gym-remote client``) and EnvClients in threads, real sockets
(ipc and loopback tcp), real CartPole-v1. Every result is compared with a ``SyncVectorEnv`` twin given
the same seeds and actions; the ordering errors are compared with what ``AsyncVectorEnv`` raises.

Envs misbehave on cue through files (``tests.envs.async_calls``): a step or reset that sleeps once, or
raises once, in a chosen env.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import re
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from gym_remote import RemoteVectorEnv
from gym_remote.errors import RemoteEnvError, RemoteTimeoutError
from tests.envs import make_cartpole
from tests.envs.async_calls import make_controlled
from tests.helpers import (
    ThreadClient,
    cartpole_server,
    cli_client,
    kill_local_clients,
    pid_alive,
    wait_until,
)

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]
NUM_ENVS = 4


# -- rigs: a RemoteVectorEnv, its SyncVectorEnv twin, and the control directory of its envs ---------


class Rig:
    """A RemoteVectorEnv of :func:`make_controlled` envs and a SyncVectorEnv twin of plain CartPole.

    ``index_of[slot]`` is the env index (the ``I`` of the control files) serving ``slot``.
    """

    def __init__(self, envs: RemoteVectorEnv, mode: AutoresetMode, control: Path, num_envs: int) -> None:
        self.envs = envs
        self.twin = SyncVectorEnv([make_cartpole] * num_envs, autoreset_mode=mode)
        self.control = control
        self.num_envs = num_envs
        self.index_of: list[int] = list(range(num_envs))
        self.rng = np.random.default_rng(1234)

    def labels(self) -> tuple[str, ...]:
        """What ``get_attr("label")`` returns: each slot's env's label."""
        return tuple(f"env-{index}" for index in self.index_of)

    def actions(self) -> np.ndarray:
        return self.rng.integers(0, 2, size=self.num_envs)

    def cue(self, what: str, slot: int, seconds: float | None = None) -> None:
        """The next ``what`` ("step" / "reset") of the env in ``slot`` sleeps ``seconds`` (None: raises)."""
        index = self.index_of[slot]
        name = f"{what}-{index}" if seconds is not None else f"fail-{what}-{index}"
        (self.control / name).write_text(str(seconds))

    def entered(self, what: str, slot: int) -> bool:
        return (self.control / f"entered-{what}-{self.index_of[slot]}").exists()

    def step_both(self, actions: np.ndarray | None = None, how: str = "async") -> tuple:
        """Step the remote env (``how``: "async" = step_async + step_wait, "sync" = step) and the twin;
        the results must be the same. Returns the remote's."""
        actions = self.actions() if actions is None else actions
        if how == "async":
            self.envs.step_async(actions)
            got = self.envs.step_wait()
        else:
            got = self.envs.step(actions)
        expected = self.twin.step(actions)
        assert_same(got, expected, f"step({actions.tolist()})")
        return got

    def reset_both(self, seed: Any = None, options: dict | None = None) -> tuple:
        """reset_async + reset_wait on the remote env, reset on the twin (options copied for each:
        both pop ``reset_mask``); the results must be the same."""
        self.envs.reset_async(seed=seed, options=None if options is None else dict(options))
        got = self.envs.reset_wait()
        expected = self.twin.reset(seed=seed, options=None if options is None else dict(options))
        assert_same(got, expected, f"reset(seed={seed}, options={options})")
        return got


def assert_same(got: Any, expected: Any, what: str) -> None:
    assert data_equivalence(got, expected, exact=True), f"{what} differs from SyncVectorEnv's\n{got}\n!=\n{expected}"


def local_rig(stack, tmp_path: Path, mode: AutoresetMode = AutoresetMode.NEXT_STEP, **kwargs: Any) -> Rig:
    """4 controlled envs in 2 local client processes (slots 0-1 and 2-3), ended by pid at teardown."""
    control = tmp_path / "control"
    control.mkdir(exist_ok=True)
    step_seconds = kwargs.pop("step_seconds", 0.0)
    num_envs = kwargs.pop("num_envs", NUM_ENVS)
    kwargs.setdefault("num_clients", 2)
    kwargs.setdefault("timeout", 30.0)
    kwargs.setdefault("connect_timeout", 30.0)
    kwargs.setdefault("liveness_timeout", 2.0)
    envs = RemoteVectorEnv(
        [functools.partial(make_controlled, str(control), index, step_seconds) for index in range(num_envs)],
        autoreset_mode=mode,
        **kwargs,
    )
    seen: set[int] = set(envs._launcher.pids)

    def end() -> None:
        seen.update(envs._launcher.pids)
        try:
            envs.close()
        finally:
            kill_local_clients(seen)

    stack.callback(end)
    rig = Rig(envs, mode, control, num_envs)
    stack.callback(rig.twin.close)
    return rig


def server_rig(stack, thread_clients, tmp_path: Path, mode: AutoresetMode = AutoresetMode.NEXT_STEP, **kwargs) -> Rig:
    """A server-form RemoteVectorEnv (loopback tcp) for 4 slots, and the control directory; no client yet."""
    control = tmp_path / "control"
    control.mkdir(exist_ok=True)
    envs = cartpole_server(stack, NUM_ENVS, autoreset_mode=mode, **kwargs)
    rig = Rig(envs, mode, control, NUM_ENVS)
    stack.callback(rig.twin.close)
    return rig


def start_thread_clients(rig: Rig, thread_clients: list) -> list[ThreadClient]:
    """Two EnvClients in threads, hosting env indexes 0-1 and 2-3."""
    clients = []
    for first in (0, 2):
        fns = [functools.partial(make_controlled, str(rig.control), index) for index in (first, first + 1)]
        client = ThreadClient(rig.envs.address, fns, name=f"thread-{first}")
        thread_clients.append(client)
        clients.append(client)
    return clients


def learn_index_map(rig: Rig, clients: list[ThreadClient]) -> None:
    """Which env index serves which slot, from the slots each thread client was given."""
    for first, client in zip((0, 2), clients, strict=True):
        assert len(client.client.slots) == 2, client.client.slots
        for offset, slot in enumerate(client.client.slots):
            rig.index_of[slot] = first + offset


def make_rig(form: str, mode, stack, thread_clients, tmp_path: Path, **kwargs) -> Rig:
    """A rig of either form, with its clients joined and every slot reset once (seed 0) on both sides."""
    if form == "local":
        rig = local_rig(stack, tmp_path, mode, **kwargs)
        rig.reset_both(seed=0)
        return rig
    rig = server_rig(stack, thread_clients, tmp_path, mode, **kwargs)
    clients = start_thread_clients(rig, thread_clients)
    rig.reset_both(seed=0)
    learn_index_map(rig, clients)
    return rig


def first_ending(rig: Rig, seed: int, slot: int, actions: list[np.ndarray], at_least: int = 3) -> int:
    """The first step (from ``at_least`` on) at which ``slot``'s episode ends, after ``reset(seed)`` and
    ``actions``, found on a scout SyncVectorEnv."""
    scout = SyncVectorEnv([make_cartpole] * rig.num_envs, autoreset_mode=rig.twin.autoreset_mode)
    try:
        scout.reset(seed=seed)
        for index, action in enumerate(actions):
            _, _, terminations, truncations, _ = scout.step(action)
            if index >= at_least and (terminations[slot] or truncations[slot]):
                return index
    finally:
        scout.close()
    raise AssertionError(f"slot {slot}'s episode never ended in {len(actions)} random CartPole steps")


# -- 1. the results are SyncVectorEnv's -------------------------------------------------------------


def rollout_with_masked_resets(rig: Rig, seed: int, steps: int = 50) -> None:
    """``steps`` steps (mostly step_async/step_wait, every third one step()), compared with the twin.

    The first two times an episode ends, a reset_async with a reset_mask follows: first resetting the
    slots that did NOT end (the ended ones keep their pending autoreset), then those that did, with
    CartPole's ``low``/``high`` reset options along.
    """
    rig.reset_both(seed=seed)
    ended_episodes = masked_resets = 0
    for step in range(steps):
        _, _, terminations, truncations, _ = rig.step_both(how="sync" if step % 3 == 2 else "async")
        ended = terminations | truncations
        ended_episodes += int(ended.sum())
        if ended.any() and masked_resets < 2:
            mask = ~ended if masked_resets == 0 and not ended.all() else ended.copy()
            rig.reset_both(seed=seed + 100 + step, options={"reset_mask": mask, "low": -0.03, "high": 0.03})
            masked_resets += 1
    assert ended_episodes >= 2, "too few episodes ended for the autoreset to be exercised"
    assert masked_resets == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_local_clients_async_results_equal_sync_vector_env(mode, stack, tmp_path):
    rig = local_rig(stack, tmp_path, mode)
    rollout_with_masked_resets(rig, seed=7)
    # a second rollout, list seeds this time
    seeds = [3, None, 5, 11]
    rig.envs.reset_async(seed=seeds)
    obs, infos = rig.envs.reset_wait()
    expected_obs, expected_infos = rig.twin.reset(seed=seeds)
    for slot in (0, 2, 3):
        np.testing.assert_array_equal(obs[slot], expected_obs[slot])
    assert infos == expected_infos == {}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_server_form_async_results_equal_sync_vector_env(mode, stack, thread_clients, tmp_path):
    rig = server_rig(stack, thread_clients, tmp_path, mode)
    # reset_async sends what it can (nothing: no client yet) and returns; reset_wait waits for the clients
    started = time.monotonic()
    rig.envs.reset_async(seed=21)
    assert time.monotonic() - started < 1.0, "reset_async waited for clients"
    clients = start_thread_clients(rig, thread_clients)
    got = rig.envs.reset_wait()
    assert_same(got, rig.twin.reset(seed=21), "reset(seed=21) waited for in reset_wait")
    learn_index_map(rig, clients)
    assert rig.envs.num_clients == 2
    rollout_with_masked_resets(rig, seed=8)


# -- 2. calls out of order ----------------------------------------------------------------------------


def outcome(call) -> tuple[str, str | None]:
    """What ``call()`` raised (exception type name, its ``.name``), or ("ok", None)."""
    try:
        call()
    except (NoAsyncCallError, AlreadyPendingCallError) as error:
        return type(error).__name__, error.name
    return "ok", None


def wait_without_async_script(envs, actions: np.ndarray) -> list[tuple[str, str | None]]:
    """The misuses of *_wait, with the pending calls completed in between; the outcome of each."""
    return [
        outcome(lambda: envs.step_wait()),
        outcome(lambda: envs.reset_wait()),
        outcome(lambda: envs.reset_async(seed=5)),
        outcome(lambda: envs.step_wait()),  # a reset is pending, not a step
        outcome(lambda: envs.reset_wait()),  # the pending reset completes
        outcome(lambda: envs.reset_wait()),  # ... once
        outcome(lambda: envs.step_async(actions)),
        outcome(lambda: envs.reset_wait()),  # a step is pending, not a reset
        outcome(lambda: envs.step_wait()),  # the pending step completes
        outcome(lambda: envs.step_wait()),  # ... once
    ]


@pytest.mark.timeout(60)
def test_wait_without_its_async_raises_no_async_call_error_like_async_vector_env(stack, tmp_path):
    actions = np.array([1, 0, 1, 1])
    reference = AsyncVectorEnv([make_cartpole] * NUM_ENVS)
    stack.callback(reference.close)
    expected = wait_without_async_script(reference, actions)
    assert expected == [
        ("NoAsyncCallError", "step"),
        ("NoAsyncCallError", "reset"),
        ("ok", None),
        ("NoAsyncCallError", "step"),
        ("ok", None),
        ("NoAsyncCallError", "reset"),
        ("ok", None),
        ("NoAsyncCallError", "reset"),
        ("ok", None),
        ("NoAsyncCallError", "step"),
    ]

    rig = local_rig(stack, tmp_path)
    assert wait_without_async_script(rig.envs, actions) == expected
    # the pending calls completed with the right results: the envs are where the twin is after the same
    rig.twin.reset(seed=5)
    rig.twin.step(actions)
    for _ in range(5):
        rig.step_both()

    # and the same with the results checked
    rig.envs.reset_async(seed=9)
    with pytest.raises(NoAsyncCallError) as caught:
        rig.envs.step_wait()
    assert caught.value.name == "step"
    assert_same(rig.envs.reset_wait(), rig.twin.reset(seed=9), "reset_wait after a refused step_wait")
    actions = rig.actions()
    rig.envs.step_async(actions)
    with pytest.raises(NoAsyncCallError) as caught:
        rig.envs.reset_wait()
    assert caught.value.name == "reset"
    assert_same(rig.envs.step_wait(), rig.twin.step(actions), "step_wait after a refused reset_wait")


ATTEMPTS = {
    "step_async": lambda envs, actions: envs.step_async(actions),
    "reset_async": lambda envs, actions: envs.reset_async(seed=99),
    "step": lambda envs, actions: envs.step(actions),
    "reset": lambda envs, actions: envs.reset(seed=99),
    "call": lambda envs, actions: envs.call("get_wrapper_attr", "label"),
    "get_attr": lambda envs, actions: envs.get_attr("label"),
    "set_attr": lambda envs, actions: envs.set_attr("label", "changed"),
    "render": lambda envs, actions: envs.render(),
}
PARTIAL_ATTEMPTS = {  # EnvPool's partial-batch API: refused too (AsyncVectorEnv has no such methods)
    "send": lambda envs, actions: envs.send(actions),
    "recv": lambda envs, actions: envs.recv(timeout=1),
    "async_reset": lambda envs, actions: envs.async_reset(seed=99),
}


def start_pending(envs, pending: str, actions: np.ndarray) -> None:
    if pending == "step":
        envs.step_async(actions)
    else:
        envs.reset_async(seed=3)


def pending_refusals(envs, pending: str, attempts: dict, actions: np.ndarray) -> dict[str, tuple[str, str | None]]:
    return {name: outcome(lambda attempt=attempt: attempt(envs, actions)) for name, attempt in attempts.items()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pending", ["step", "reset"])
def test_calls_while_a_call_is_pending_raise_already_pending_like_async_vector_env(pending, stack, tmp_path):
    first_actions, actions = np.array([0, 1, 1, 0]), np.array([1, 1, 0, 0])
    reference = AsyncVectorEnv([make_cartpole] * NUM_ENVS)
    stack.callback(reference.close)
    reference.reset(seed=0)
    start_pending(reference, pending, first_actions)
    expected = pending_refusals(reference, pending, ATTEMPTS, actions)
    assert expected == dict.fromkeys(ATTEMPTS, ("AlreadyPendingCallError", pending))
    getattr(reference, f"{pending}_wait")()

    rig = local_rig(stack, tmp_path)
    rig.reset_both(seed=0)
    start_pending(rig.envs, pending, first_actions)
    assert pending_refusals(rig.envs, pending, ATTEMPTS, actions) == expected
    assert pending_refusals(rig.envs, pending, PARTIAL_ATTEMPTS, actions) == dict.fromkeys(
        PARTIAL_ATTEMPTS, ("AlreadyPendingCallError", pending)
    )

    # the pending call still completes, with its own results; none of the refused calls ran
    if pending == "step":
        assert_same(rig.envs.step_wait(), rig.twin.step(first_actions), "the pending step")
    else:
        assert_same(rig.envs.reset_wait(), rig.twin.reset(seed=3), "the pending reset")
    assert rig.envs.get_attr("label") == rig.labels()  # set_attr was refused
    for _ in range(5):  # no refused step or reset reached the envs
        rig.step_both()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pending", ["step", "reset"])
def test_close_with_a_call_pending_warns_like_async_vector_env_then_closes(pending):
    message = f"Calling `close` while waiting for a pending call to `{pending}` to complete."
    reference = AsyncVectorEnv([make_cartpole] * 2)
    reference.reset(seed=0)
    start_pending(reference, pending, np.array([0, 1]))
    with pytest.warns(UserWarning, match=re.escape(message)):
        reference.close()

    envs = RemoteVectorEnv([make_cartpole] * 2, num_clients=1)
    pids = envs._launcher.pids
    envs.reset(seed=0)
    start_pending(envs, pending, np.array([0, 1]))
    with pytest.warns(UserWarning, match=re.escape(message)) as caught:
        envs.close()
    assert [str(warning.message) for warning in caught] == [message]
    assert caught[0].filename == __file__  # attributed to the caller of close()
    assert envs.closed
    assert not any(pid_alive(pid) for pid in pids)
    with pytest.raises(ClosedEnvironmentError):
        envs.step_wait()


def test_close_without_a_call_pending_does_not_warn(recwarn):
    envs = RemoteVectorEnv([make_cartpole] * 2, num_clients=1)
    envs.reset(seed=0)
    envs.step_async(np.array([0, 1]))
    envs.step_wait()
    envs.close()
    assert not [warning for warning in recwarn if issubclass(warning.category, UserWarning)]


@pytest.mark.timeout(60)
def test_async_calls_refused_for_bad_arguments_leave_nothing_pending(stack, tmp_path):
    rig = local_rig(stack, tmp_path)
    rig.reset_both(seed=0)
    with pytest.raises(ValueError):
        rig.envs.step_async(np.array([0, 1, 1]))  # 3 actions for 4 envs
    with pytest.raises(NoAsyncCallError):
        rig.envs.step_wait()
    with pytest.raises(ValueError, match="length"):
        rig.envs.reset_async(seed=[1, 2])
    with pytest.raises(ValueError, match="at least one True"):
        rig.envs.reset_async(options={"reset_mask": np.zeros(NUM_ENVS, dtype=np.bool_)})
    with pytest.raises(NoAsyncCallError):
        rig.envs.reset_wait()
    for step in range(5):  # nothing was sent to the envs
        rig.step_both(how="async" if step % 2 else "sync")
    rig.reset_both(seed=[4, 5, 6, 7])


# -- 3. timeouts: late replies are dropped --------------------------------------------------------------


def assert_timeout_error(error: BaseException) -> None:
    assert isinstance(error, RemoteTimeoutError)
    assert isinstance(error, TimeoutError)
    assert isinstance(error, multiprocessing.TimeoutError)


TIMED_OUT_STEP_CASES = [
    ("local", AutoresetMode.NEXT_STEP, "step"),
    ("local", AutoresetMode.NEXT_STEP, "get_attr"),
    ("local", AutoresetMode.NEXT_STEP, "reset"),
    ("local", AutoresetMode.NEXT_STEP, "timeout"),
    ("local", AutoresetMode.SAME_STEP, "step"),
    ("server", AutoresetMode.NEXT_STEP, "step"),
    ("server", AutoresetMode.SAME_STEP, "timeout"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("form", "mode", "then"), TIMED_OUT_STEP_CASES, ids=[f"{f}-{m.value}-then-{t}" for f, m, t in TIMED_OUT_STEP_CASES]
)
def test_timed_out_step_wait_drops_the_late_replies(form, mode, then, stack, thread_clients, tmp_path):
    """The step that times out is the one that ends slot 3's episode (found on a scout twin), so its late
    reply carries what a mixed-up batch would show at once: a terminal flag, final_obs, the autoreset."""
    rig = make_rig(form, mode, stack, thread_clients, tmp_path)
    seed, slow = 31, 3
    actions = [rig.actions() for _ in range(200)]
    timed_out_at = first_ending(rig, seed, slow, actions)
    rig.reset_both(seed=seed)
    for step in range(timed_out_at):
        rig.step_both(actions[step])

    rig.cue("step", slow, 0.8)
    rig.envs.step_async(actions[timed_out_at])
    started = time.monotonic()
    with pytest.raises(RemoteTimeoutError) as caught:
        rig.envs.step_wait(timeout=0.2)
    elapsed = time.monotonic() - started
    assert_timeout_error(caught.value)
    assert "step" in str(caught.value)
    assert 0.19 <= elapsed < 1.2, f"step_wait(timeout=0.2) took {elapsed:.2f} s"
    assert rig.entered("step", slow)
    _, _, terminations, truncations, _ = rig.twin.step(actions[timed_out_at])  # the step did run in the envs
    assert terminations[slow] or truncations[slow]
    with pytest.raises(NoAsyncCallError):  # the timed-out call is over
        rig.envs.step_wait()

    step = timed_out_at + 1
    if then == "get_attr":  # the late reply arrives while a call waits for its own
        assert rig.envs.get_attr("label") == rig.labels()
    elif then == "reset":  # ... while a reset waits for its own
        rig.reset_both(seed=77)
    elif then == "timeout":  # a second step times out (the slow env is still in the first one)
        rig.envs.step_async(actions[step])
        with pytest.raises(RemoteTimeoutError):
            rig.envs.step_wait(timeout=0.1)
        rig.twin.step(actions[step])
        step += 1
    for offset in range(12):
        rig.step_both(actions[step + offset], how="async" if offset % 2 else "sync")


TIMED_OUT_RESET_CASES = [("local", "reset"), ("local", "step"), ("server", "reset")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("form", "then"), TIMED_OUT_RESET_CASES, ids=[f"{form}-then-{then}" for form, then in TIMED_OUT_RESET_CASES]
)
def test_timed_out_reset_wait_drops_the_late_replies(form, then, stack, thread_clients, tmp_path):
    rig = make_rig(form, AutoresetMode.NEXT_STEP, stack, thread_clients, tmp_path)
    for _ in range(3):
        rig.step_both()
    slow = 2
    rig.cue("reset", slow, 0.8)
    rig.envs.reset_async(seed=5)
    started = time.monotonic()
    with pytest.raises(RemoteTimeoutError) as caught:
        rig.envs.reset_wait(timeout=0.2)
    elapsed = time.monotonic() - started
    assert_timeout_error(caught.value)
    assert 0.19 <= elapsed < 1.2, f"reset_wait(timeout=0.2) took {elapsed:.2f} s"
    assert rig.entered("reset", slow)
    rig.twin.reset(seed=5)  # the resets did run
    with pytest.raises(NoAsyncCallError):
        rig.envs.reset_wait()

    if then == "reset":  # a reset with other seeds: the late seed-5 observations must not be taken for it
        rig.reset_both(seed=500)
    for _ in range(10):
        rig.step_both()


@pytest.mark.timeout(60)
def test_step_wait_timeout_defaults_to_the_constructors_and_a_longer_one_is_honoured(stack, tmp_path):
    rig = local_rig(stack, tmp_path, timeout=0.3)
    rig.reset_both(seed=0)
    actions = rig.actions()
    rig.cue("step", 3, 1.0)
    rig.envs.step_async(actions)
    started = time.monotonic()
    with pytest.raises(RemoteTimeoutError):
        rig.envs.step_wait()
    elapsed = time.monotonic() - started
    assert 0.29 <= elapsed < 1.0, f"step_wait() with timeout=0.3 took {elapsed:.2f} s"
    rig.twin.step(actions)

    rig.cue("step", 1, 0.8)
    actions = rig.actions()
    rig.envs.step_async(actions)
    started = time.monotonic()
    got = rig.envs.step_wait(timeout=10)  # waits for the 0.8 s step
    assert 0.75 <= time.monotonic() - started < 5
    assert_same(got, rig.twin.step(actions), "a step slower than the constructor's timeout")


@pytest.mark.timeout(60)
def test_reset_wait_honours_a_timeout_longer_than_the_constructors(stack, tmp_path):
    rig = local_rig(stack, tmp_path, timeout=0.3)
    rig.reset_both(seed=0)
    rig.cue("reset", 3, 0.8)
    rig.envs.reset_async(seed=4)
    started = time.monotonic()
    got = rig.envs.reset_wait(timeout=10)  # documented: "seconds to wait in all"
    assert 0.75 <= time.monotonic() - started < 5
    assert_same(got, rig.twin.reset(seed=4), "a reset slower than the constructor's timeout")


@pytest.mark.timeout(60)
def test_reset_wait_waits_for_missing_clients_up_to_its_timeout(stack, thread_clients, tmp_path):
    rig = server_rig(stack, thread_clients, tmp_path, connect_timeout=1.0, timeout=1.0)
    # default: connect_timeout (+ timeout) for clients to serve the slots
    rig.envs.reset_async(seed=1)
    started = time.monotonic()
    with pytest.raises(RemoteTimeoutError) as caught:
        rig.envs.reset_wait()
    elapsed = time.monotonic() - started
    assert_timeout_error(caught.value)
    assert 0.95 <= elapsed < 3.5, f"reset_wait() with connect_timeout=1, timeout=1 took {elapsed:.2f} s"
    # explicit and shorter
    rig.envs.reset_async(seed=1)
    started = time.monotonic()
    with pytest.raises(RemoteTimeoutError):
        rig.envs.reset_wait(timeout=0.3)
    elapsed = time.monotonic() - started
    assert 0.29 <= elapsed < 1.3, f"reset_wait(timeout=0.3) took {elapsed:.2f} s"
    # the env is idle again; with clients, a reset goes through
    rig.envs.connect_timeout = 30.0
    clients = start_thread_clients(rig, thread_clients)
    rig.reset_both(seed=1)
    learn_index_map(rig, clients)
    for _ in range(5):
        rig.step_both()


# -- 4. the learner works while the clients step --------------------------------------------------------


@pytest.mark.timeout(60)
def test_clients_step_while_the_learner_computes(stack, tmp_path):
    step_seconds, work_seconds, rounds = 0.25, 0.25, 4
    rig = local_rig(stack, tmp_path, num_envs=2, step_seconds=step_seconds)
    rig.reset_both(seed=3)
    started = time.monotonic()
    for _ in range(rounds):
        actions = rig.actions()
        sent = time.monotonic()
        rig.envs.step_async(actions)
        assert time.monotonic() - sent < 0.15, "step_async waited for the envs"
        time.sleep(work_seconds)  # the learner's work
        assert_same(rig.envs.step_wait(), rig.twin.step(actions), "a step overlapped with the learner's work")
    elapsed = time.monotonic() - started
    serial = rounds * (step_seconds + work_seconds)
    assert elapsed < 0.8 * serial, f"{rounds} overlapped rounds took {elapsed:.2f} s (serial: {serial:.2f} s)"


# -- 5. a closed env ------------------------------------------------------------------------------------


CLOSED_CALLS = {
    **ATTEMPTS,
    **PARTIAL_ATTEMPTS,
    "step_wait": lambda envs, actions: envs.step_wait(),
    "reset_wait": lambda envs, actions: envs.reset_wait(),
    "step_wait(timeout)": lambda envs, actions: envs.step_wait(timeout=1),
    "reset_wait(timeout)": lambda envs, actions: envs.reset_wait(timeout=1),
}


def closed_errors(envs, actions: np.ndarray) -> dict[str, type | None]:
    """What each method raised (its exception class; None if it returned)."""
    errors: dict[str, type | None] = {}
    for name, attempt in CLOSED_CALLS.items():
        try:
            attempt(envs, actions)
        except Exception as error:  # noqa: BLE001 - the type is what is checked
            errors[name] = type(error)
        else:
            errors[name] = None
    return errors


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pending", [None, "step", "reset"])
def test_every_method_of_a_closed_env_raises_closed_environment_error(pending, stack, tmp_path):
    rig = local_rig(stack, tmp_path)
    rig.reset_both(seed=0)
    pids = list(rig.envs._launcher.pids)
    actions = rig.actions()
    if pending is not None:  # closing does not wait for a slow pending call
        rig.cue(pending, 2, 10.0)
        start_pending(rig.envs, pending, actions)
        wait_until(lambda: rig.entered(pending, 2), 10, f"the slow {pending} to start")
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rig.envs.close(timeout=1.0)  # for the clients to acknowledge, then for the processes to exit
    assert time.monotonic() - started < 6, "close() waited for the pending call"
    assert len(caught) == (0 if pending is None else 1), [str(warning.message) for warning in caught]
    assert rig.envs.closed
    expected = dict.fromkeys(CLOSED_CALLS, ClosedEnvironmentError)
    assert closed_errors(rig.envs, actions) == expected
    rig.envs.close()  # again: nothing happens
    for pid in pids:
        wait_until(lambda pid=pid: not pid_alive(pid), 10, f"local client {pid} to end")


# -- 6. a client lost while a step is pending ------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_local_client_killed_while_step_async_is_pending(mode, stack, tmp_path):
    rig = local_rig(stack, tmp_path, mode, max_restarts=2)
    rig.reset_both(seed=2)
    for _ in range(3):  # too few steps for a CartPole episode to end
        last_obs, *_ = rig.step_both()
    victim = rig.envs.stats()[2]["pid"]
    assert rig.envs.stats()[3]["pid"] == victim != rig.envs.stats()[0]["pid"]

    rig.cue("step", 2, 30.0)  # the victim is inside this step when it dies
    actions = rig.actions()
    rig.envs.step_async(actions)
    wait_until(lambda: rig.entered("step", 2), 10, "the victim's step to start")
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not pid_alive(victim), 10, f"local client {victim} to die")
    started = time.monotonic()
    obs, rewards, terminations, truncations, infos = rig.envs.step_wait()
    assert time.monotonic() - started < 10
    expected = rig.twin.step(actions)
    for got, want in zip((obs, rewards, terminations, truncations), expected[:4], strict=True):
        np.testing.assert_array_equal(got[:2], want[:2])  # the other client's slots are unaffected
    assert truncations.tolist() == [False, False, True, True] and not terminations[2:].any()
    assert rewards[2:].tolist() == [0.0, 0.0]
    assert infos["client_lost"].tolist() == [False, False, True, True]
    assert infos["_client_lost"].tolist() == [False, False, True, True]
    if mode is AutoresetMode.SAME_STEP:  # the lost episode ends on its last observation; a reset starts the next
        assert infos["_final_obs"][2:].all()
        for slot in (2, 3):
            np.testing.assert_array_equal(infos["final_obs"][slot], last_obs[slot])
        assert infos["final_info"]["client_lost"].tolist() == [False, False, True, True], infos["final_info"]
        assert np.abs(obs[2:]).max() <= 0.05, obs

    # the restarted client takes over; the other slots go on as in the twin
    obs, rewards, terminations, truncations, infos = rig.envs.step(actions := rig.actions())
    expected = rig.twin.step(actions)
    for got, want in zip((obs, rewards, terminations, truncations), expected[:4], strict=True):
        np.testing.assert_array_equal(got[:2], want[:2])
    assert "client_lost" not in infos and not truncations[2:].any()
    assert rig.envs.stats()[2]["pid"] != victim
    rig.reset_both(seed=40)
    for _ in range(5):
        rig.step_both()


@pytest.mark.timeout(60)
def test_cli_client_killed_while_step_async_is_pending(reaper, stack, tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    envs = cartpole_server(stack, 2, liveness_timeout=2.0)
    processes = []
    for index in range(2):
        kwargs = json.dumps({"control": str(control), "index": index})
        processes.append(
            cli_client(
                reaper,
                tmp_path,
                f"client{index}",
                envs.address,
                "--factory",
                "tests.envs.async_calls:make_controlled",
                "--env-kwargs",
                kwargs,
                "--num-envs",
                "1",
                "--connect-timeout",
                "30",
            )
        )
    twin = SyncVectorEnv([make_cartpole] * 2)
    stack.callback(twin.close)
    envs.reset_async(seed=6)
    assert_same(envs.reset_wait(), twin.reset(seed=6), "reset")
    indexes = envs.get_attr("index")
    assert sorted(indexes) == [0, 1]
    victim_slot = indexes.index(1)
    victim = processes[1]
    assert envs.stats()[victim_slot]["pid"] == victim.pid

    (control / "step-1").write_text("30")
    actions = np.array([1, 0])
    envs.step_async(actions)
    wait_until(lambda: (control / "entered-step-1").exists(), 10, "the victim's step to start")
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    started = time.monotonic()
    obs, rewards, terminations, truncations, infos = envs.step_wait()
    assert time.monotonic() - started < 10
    survivor = 1 - victim_slot
    expected = twin.step(actions)
    for got, want in zip((obs, rewards, terminations, truncations), expected[:4], strict=True):
        np.testing.assert_array_equal(got[survivor], want[survivor])
    assert truncations[victim_slot] and not terminations[victim_slot] and rewards[victim_slot] == 0.0
    mask = [slot == victim_slot for slot in range(2)]
    assert infos["client_lost"].tolist() == mask and infos["_client_lost"].tolist() == mask
    assert envs.num_clients == 1


# -- 7. an env that raises inside step_async / reset_async ------------------------------------------------


ERROR_CASES = [("local", "step"), ("local", "reset"), ("server", "step")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("form", "what"), ERROR_CASES, ids=[f"{f}-{w}" for f, w in ERROR_CASES])
def test_env_error_during_an_async_call_is_raised_by_its_wait(form, what, stack, thread_clients, tmp_path):
    rig = make_rig(form, AutoresetMode.NEXT_STEP, stack, thread_clients, tmp_path)
    for _ in range(2):
        rig.step_both()
    failing, slow = 2, 0  # another client is slow: the error waits for its reply, left for no later call
    rig.cue(what, failing)
    rig.cue(what, slow, 0.5)
    if what == "step":
        rig.envs.step_async(rig.actions())
        wait = rig.envs.step_wait
    else:
        rig.envs.reset_async(seed=8)
        wait = rig.envs.reset_wait
    with pytest.raises(RemoteEnvError) as caught:
        wait()
    error = caught.value
    assert error.slot == failing
    assert error.remote_type == "ValueError"
    assert f"deliberate {what} failure in env {rig.index_of[failing]}" in str(error)
    assert "slot 2" in str(error), str(error)
    assert "ValueError" in error.remote_traceback
    with pytest.raises(NoAsyncCallError):  # the failed call is over
        wait()

    # usable again: a reset (the envs' states are unknown after a failed batch), then steps
    rig.reset_both(seed=13)
    for step in range(10):
        rig.step_both(how="async" if step % 2 else "sync")
    assert rig.envs.get_attr("label") == rig.labels()
