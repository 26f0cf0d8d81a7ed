"""Lifecycle of the local client processes that ``RemoteVectorEnv(env_fns)`` starts itself.

Start-up (contiguous shares, the default number of clients, start-up failures), failures while
running (an env raising, a client process killed), and the end: close(), and a training process that
dies or is interrupted without closing, whose clients must not outlive it.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import signal
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError

from gym_remote import RemoteEnvError, RemoteVectorEnv, SecurityOptions
from gym_remote.launch import split_evenly
from tests.envs import Counter, make_cartpole
from tests.envs.factories import (
    make_broken,
    make_indexed,
    make_mountaincar,
    make_staller,
    make_step_failer,
)
from tests.helpers import (
    KillWhenMarked,
    LoggedProcess,
    child_pids,
    is_local_client,
    kill_local_clients,
    pid_alive,
    wait_until,
)

# -- helpers ---------------------------------------------------------------------------------------


def process_gone(pid: int) -> bool:
    """Neither running nor a zombie."""
    return not pid_alive(pid)


def reaped(pid: int) -> bool:
    """No trace of the process left (it has exited and its parent collected it)."""
    return not os.path.exists(f"/proc/{pid}")


# -- start-up --------------------------------------------------------------------------------------


def test_default_num_clients_and_contiguous_shares():
    count = 3
    envs = RemoteVectorEnv([functools.partial(make_indexed, index) for index in range(count)], connect_timeout=30)
    try:
        expected_clients = min(os.cpu_count() or 1, count)
        assert len(envs._launcher.pids) == expected_clients
        assert envs.num_clients == expected_clients
        assert envs.get_attr("index") == tuple(range(count))
        pids = envs.get_attr("pid")
        for (first, share), pid in zip(split_evenly(count, expected_clients), envs._launcher.pids, strict=True):
            assert pids[first : first + share] == (pid,) * share, pids
    finally:
        envs.close()


@pytest.mark.parametrize(("count", "num_clients"), [(5, 2), (4, 4), (3, 1)])
def test_env_fns_i_serves_slot_i(count, num_clients):
    envs = RemoteVectorEnv(
        [functools.partial(make_indexed, index) for index in range(count)], num_clients=num_clients, connect_timeout=30
    )
    try:
        assert envs.num_clients == num_clients
        assert envs.get_attr("index") == tuple(range(count))
        pids = envs.get_attr("pid")
        client_pids = envs._launcher.pids
        assert len(set(client_pids)) == num_clients
        # each client serves one run of consecutive slots, in launch order, the larger shares first
        runs = [pids[0]]
        for pid in pids[1:]:
            if pid != runs[-1]:
                runs.append(pid)
        assert runs == client_pids, pids
        shares = [pids.count(pid) for pid in client_pids]
        assert shares == sorted(shares, reverse=True) and max(shares) - min(shares) <= 1, shares
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (count, 4)
    finally:
        envs.close()


def test_env_fn_raising_at_construction_fails_fast_with_its_traceback():
    before = child_pids()
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        RemoteVectorEnv(
            [make_cartpole, functools.partial(make_broken, "the-env-would-not-build-42")],
            num_clients=2,
            connect_timeout=60,
        )
    elapsed = time.monotonic() - started
    text = str(caught.value)
    assert "the-env-would-not-build-42" in text, text
    assert "RuntimeError" in text, text
    assert "Traceback" in text and "make_broken" in text, text  # the client's traceback
    assert elapsed < 20, f"took {elapsed:.1f} s (connect_timeout=60)"
    # nothing is left running, and nothing is left unreaped
    left = {pid for pid in child_pids() - before if is_local_client(pid) or not reaped(pid)}
    assert not left, f"child processes left behind: {left}"


def test_every_env_fn_raising_at_construction():
    started = time.monotonic()
    with pytest.raises(Exception, match="all-broken-7"):
        RemoteVectorEnv([functools.partial(make_broken, "all-broken-7")] * 3, connect_timeout=60)
    assert time.monotonic() - started < 20


def test_local_clients_with_different_spaces_are_refused_at_once():
    started = time.monotonic()
    with pytest.raises(RuntimeError) as caught:
        RemoteVectorEnv([make_cartpole, make_mountaincar], num_clients=2, connect_timeout=60)
    text = str(caught.value)
    assert "observation spaces are not equivalent" in text and "Box(" in text, text
    assert time.monotonic() - started < 5


def _the_env(env: gym.Env) -> gym.Env:
    return env


@pytest.mark.parametrize("wrapped", [False, True], ids=["same", "same_unwrapped"])
def test_env_fns_returning_one_env_instance_are_refused(wrapped):
    shared = Counter()
    env_fns = [functools.partial(_the_env, shared) for _ in range(3)]
    if wrapped:  # two wrappers around one env are one env too
        env_fns[1] = functools.partial(_the_env, gym.wrappers.OrderEnforcing(shared))
    started = time.monotonic()
    with pytest.raises(ValueError, match="returned the same env instance") as caught:
        RemoteVectorEnv(env_fns, num_clients=1, connect_timeout=30)
    assert "envs [0, 1, 2]" in str(caught.value)
    assert time.monotonic() - started < 5


def test_one_env_instance_copied_into_separate_clients_steps_separately():
    """Each client process unpickles its own copy: no slot steps another slot's env."""
    shared = Counter()
    envs = RemoteVectorEnv([functools.partial(_the_env, shared) for _ in range(3)], num_clients=3, connect_timeout=30)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(3, dtype=np.int64))
        obs, *_ = envs.step(np.zeros(3, dtype=np.int64))
        assert obs.tolist() == [[2.0], [2.0], [2.0]]
    finally:
        envs.close()


@pytest.mark.parametrize("num_clients", [0, 3, -1])
def test_num_clients_out_of_range(num_clients):
    with pytest.raises(ValueError, match="num_clients"):
        RemoteVectorEnv([make_cartpole] * 2, num_clients=num_clients)


# -- a constructor that refuses its arguments --------------------------------------------------------

BOX, DISCRETE = gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2)
REFUSED_ARGUMENTS = {  # what, the arguments, the error message
    "unknown autoreset_mode": ({"env_fns": [make_cartpole], "autoreset_mode": "bogus"}, "not a valid AutoresetMode"),
    "unknown observation_mode": (
        {"env_fns": [make_cartpole], "observation_mode": "bogus"},
        "Invalid `observation_mode`",
    ),
    "empty env_fns": ({"env_fns": []}, "env_fns is empty"),
    "num_envs not len(env_fns)": ({"env_fns": [make_cartpole] * 2, "num_envs": 3}, "does not match len"),
    "neither env_fns nor num_envs": ({}, "needs env_fns, or num_envs >= 1"),
    "num_envs 0": ({"num_envs": 0}, "needs env_fns, or num_envs >= 1"),
    "spaces with env_fns": (
        {"env_fns": [make_cartpole], "observation_space": BOX, "action_space": DISCRETE},
        "are for the server form",
    ),
    "one space only": ({"num_envs": 1, "observation_space": BOX}, "give both observation_space and action_space"),
    "unknown final_info_format": (
        {"env_fns": [make_cartpole], "final_info_format": "bogus"},
        "'gymnasium' or 'legacy'",
    ),
    "legacy infos without SameStep": ({"env_fns": [make_cartpole], "final_info_format": "legacy"}, "SameStep"),
    "batch_size above num_envs": ({"env_fns": [make_cartpole] * 2, "batch_size": 3}, "batch_size must be between"),
    "batch_size 0": ({"num_envs": 2, "batch_size": 0}, "batch_size must be between"),
    "partial batches without autoreset": (
        {"env_fns": [make_cartpole] * 2, "batch_size": 1, "autoreset_mode": "Disabled"},
        "DISABLED",
    ),
    "security twice": ({"num_envs": 1, "security": SecurityOptions(), "insecure": True}, "not both"),
    "env_fns and a launcher": ({"env_fns": [make_cartpole], "launcher": object()}, "or a launcher, not both"),
    "num_clients above len(env_fns)": ({"env_fns": [make_cartpole], "num_clients": 2}, "num_clients must be between"),
    "reachable bind without authentication": ({"num_envs": 1, "bind": "tcp://0.0.0.0:*"}, "reachable from other"),
}


@pytest.mark.parametrize(("arguments", "message"), REFUSED_ARGUMENTS.values(), ids=REFUSED_ARGUMENTS.keys())
def test_a_vector_env_that_refuses_its_arguments_leaves_nothing_that_fails_when_closed_or_collected(
    arguments, message, monkeypatch
):
    """Gymnasium before 1.3 closes a collected vector env (``VectorEnv.__del__``), a half-built one too."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(ValueError, match=message):
        RemoteVectorEnv(**arguments)
    gc.collect()
    half_built = RemoteVectorEnv.__new__(RemoteVectorEnv)  # kept, to close as __del__ would
    with pytest.raises(ValueError, match=message):
        half_built.__init__(**arguments)
    half_built.close()
    assert half_built.closed
    del half_built
    gc.collect()
    assert not unraisable, [f"{report.exc_type.__name__}: {report.exc_value}" for report in unraisable]


# -- failures while running ------------------------------------------------------------------------


def test_env_raising_in_step_names_the_slot_and_reset_recovers():
    env_fns = [functools.partial(make_step_failer, index, None) for index in range(3)]
    env_fns.append(functools.partial(make_step_failer, 3, 3))  # slot 3 raises on its 3rd step after a reset
    envs = RemoteVectorEnv(env_fns, num_clients=2, connect_timeout=30)
    try:
        for attempt in range(2):
            envs.reset(seed=attempt)
            envs.step(np.zeros(4, dtype=np.int64))
            envs.step(np.ones(4, dtype=np.int64))
            with pytest.raises(RemoteEnvError) as caught:
                envs.step(np.zeros(4, dtype=np.int64))
            error = caught.value
            assert error.slot == 3
            assert "slot 3" in str(error), str(error)
            assert error.remote_type == "ValueError"
            assert "deliberate step failure in env 3 at step 3" in str(error)
            assert "Traceback" in error.remote_traceback
            assert "deliberate step failure in env 3" in error.remote_traceback
            assert "envs/factories.py" in error.remote_traceback  # where it was raised, in the client
            assert error.remote_traceback.strip() in str(error)
        # after the error, reset() brings the vector back into working order
        obs, _ = envs.reset(seed=11)
        assert obs.shape == (4, 4)
        obs, rewards, *_ = envs.step(np.zeros(4, dtype=np.int64))
        assert rewards.shape == (4,)
        assert envs.get_attr("index") == (0, 1, 2, 3)
    finally:
        envs.close()


def test_client_killed_during_step_truncates_its_slots_quickly_and_is_restarted(tmp_path):
    marker = tmp_path / "stalling"
    env_fns = [make_cartpole, make_cartpole, make_cartpole, functools.partial(make_staller, str(marker), 60.0)]
    envs = RemoteVectorEnv(env_fns, num_clients=2, timeout=120, connect_timeout=30)
    victim = envs._launcher.pids[1]  # serves slots 2-3, including the stalling env
    try:
        envs.reset(seed=0)
        killer = KillWhenMarked(victim, marker)
        started = time.monotonic()
        _, rewards, terminations, truncations, infos = envs.step(np.zeros(4, dtype=np.int64))
        elapsed = time.monotonic() - started
        killer.join(5)
        assert killer.killed.is_set()
        assert elapsed < 15, f"step() took {elapsed:.1f} s to notice (timeout=120)"
        assert truncations.tolist() == [False, False, True, True]
        assert not terminations[2:].any() and rewards[2:].tolist() == [0.0, 0.0]
        assert infos["client_lost"].tolist() == [False, False, True, True]
        assert infos["_client_lost"].tolist() == [False, False, True, True]
        # the restarted client takes over: its reset observation comes with the autoreset step
        marker.unlink()
        obs, rewards, _, truncations, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert rewards[2:].tolist() == [0.0, 0.0] and not truncations.any()
        assert "client_lost" not in infos
        assert envs._launcher.pids[1] != victim
        stats = envs.stats()
        assert [row["restarts"] for row in stats] == [0, 0, 1, 1]
    finally:
        envs.close()
        kill_local_clients([victim])
    for pid in envs._launcher.pids:
        assert reaped(pid), f"client {pid} not reaped after close()"


# -- closing ---------------------------------------------------------------------------------------


def test_close_ends_and_reaps_every_client():
    before = child_pids()
    envs = RemoteVectorEnv([make_cartpole] * 4, num_clients=3, connect_timeout=30)
    pids = list(envs._launcher.pids)
    try:
        assert len(pids) == 3
        assert all(pid_alive(pid) for pid in pids)
        envs.reset(seed=0)
        for _ in range(20):
            envs.step(envs.action_space.sample())
        started = time.monotonic()
        envs.close()
        assert time.monotonic() - started < 10
        for pid in pids:
            assert process_gone(pid), f"client {pid} still running after close()"
            assert reaped(pid), f"client {pid} left as a zombie after close()"
        assert not (child_pids() - before), "child processes left after close()"
    finally:
        envs.close()
        kill_local_clients(pids)


def test_closed_env_cannot_be_used_and_close_twice_is_fine():
    envs = RemoteVectorEnv([make_cartpole] * 2, num_clients=1, connect_timeout=30)
    envs.reset(seed=0)
    envs.close()
    assert envs.closed
    envs.close()  # a second close does nothing
    with pytest.raises(ClosedEnvironmentError):
        envs.reset(seed=0)
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ClosedEnvironmentError):
        envs.get_attr("np_random_seed")
    with pytest.raises(ClosedEnvironmentError):
        envs.call("render")
    with pytest.raises(ClosedEnvironmentError):
        envs.set_attr("foo", 1)


def test_close_of_server_form_before_any_client():
    envs = RemoteVectorEnv(num_envs=2, connect_timeout=1)
    started = time.monotonic()
    envs.close()
    envs.close()
    assert time.monotonic() - started < 5
    with pytest.raises(ClosedEnvironmentError):
        envs.reset()


def _dropped_without_close(kind: str) -> tuple[list[int], str]:
    """Build a vector env of ``kind``, step it, drop every reference; its client pids and private directory."""
    if kind == "sb3":
        sb3 = pytest.importorskip("gym_remote.sb3")
        venv = sb3.RemoteVecEnv([make_cartpole] * 3, num_clients=2, connect_timeout=30)
        venv.reset()
        venv.step(np.zeros(3, dtype=np.int64))
        envs = venv.envs
    else:
        envs = venv = RemoteVectorEnv([make_cartpole] * 3, num_clients=2, connect_timeout=30)
        envs.reset(seed=0)
        envs.step(np.zeros(3, dtype=np.int64))
    pids, workdir = list(envs._launcher.pids), envs._launcher.workdir
    del envs, venv
    return pids, workdir


@pytest.mark.parametrize("kind", ["gymnasium", "sb3"])
def test_vector_env_dropped_without_close_ends_its_clients_at_once(kind):
    """No reference cycle keeps a dropped vector env alive until the garbage collector runs."""
    gc.collect()
    gc.disable()
    try:
        pids, workdir = _dropped_without_close(kind)
        assert os.path.isdir(os.path.dirname(workdir))
        wait_until(lambda: all(reaped(pid) for pid in pids), 10, "the clients of the dropped env to be reaped")
        assert not os.path.exists(workdir), "the private directory is left behind"
    finally:
        gc.enable()
        kill_local_clients(pids)


# -- the training process dies or is interrupted ---------------------------------------------------

TRAINING_SCRIPT = """
import json, sys, time
import numpy as np
from gym_remote import RemoteVectorEnv
from tests.envs import make_cartpole

mode = sys.argv[1]
envs = RemoteVectorEnv([make_cartpole] * 3, num_clients=2, connect_timeout=30)
envs.reset(seed=0)
print(json.dumps(envs._launcher.pids), flush=True)
if mode == "raise":
    raise RuntimeError("the training script crashed")
if mode == "step":
    while True:
        envs.step(np.zeros(3, dtype=np.int64))
time.sleep(600)
"""


def start_training(reaper, tmp_path: Path, mode: str) -> tuple[LoggedProcess, list[int]]:
    """The training script (``TRAINING_SCRIPT``) in ``mode``, and the pids of its two local clients."""
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    training = LoggedProcess(reaper, tmp_path, "train", [sys.executable, str(script), mode])
    pids: list[int] = []

    def pids_printed() -> bool:
        line = training.stdout.strip()
        if line:
            pids.extend(json.loads(line.splitlines()[0]))
            return True
        assert training.process.poll() is None, f"training script exited early:\n{training.stderr}"
        return False

    wait_until(pids_printed, 60, "the training script to print its client pids")
    assert len(pids) == 2, pids
    if mode != "raise":  # a script that raises at once may be gone, and its clients with it, by now
        assert all(pid_alive(pid) for pid in pids), pids
    return training, pids


def assert_clients_exit(pids: list[int], timeout: float = 10.0) -> None:
    try:
        wait_until(
            lambda: not any(pid_alive(pid) for pid in pids),
            timeout,
            f"the clients {pids} to exit after their training process ended",
        )
    finally:
        kill_local_clients(pids)


@pytest.mark.parametrize("mode", ["sleep", "step"])
def test_clients_exit_when_the_training_process_is_killed(reaper, tmp_path, mode):
    training, pids = start_training(reaper, tmp_path, mode)
    os.kill(training.pid, signal.SIGKILL)
    assert training.wait(timeout=10) == -signal.SIGKILL
    assert_clients_exit(pids)


def test_clients_exit_when_the_training_script_raises(reaper, tmp_path):
    training, pids = start_training(reaper, tmp_path, "raise")
    assert training.wait(timeout=20) == 1
    assert "the training script crashed" in training.stderr
    assert_clients_exit(pids)


@pytest.mark.parametrize("mode", ["sleep", "step"])
def test_clients_exit_when_the_training_process_is_interrupted(reaper, tmp_path, mode):
    training, pids = start_training(reaper, tmp_path, mode)
    os.kill(training.pid, signal.SIGINT)
    code = training.wait(timeout=20)  # fails if the training script ignored SIGINT
    assert code != 0
    assert "KeyboardInterrupt" in training.stderr
    assert_clients_exit(pids)
