"""Membership faults with real processes: clients killed, stopped, slow, hung, leaving, waiting in line.

Clients are ``gym-remote client`` processes (started through the ``reaper`` fixture, killed by pid)
or :class:`~gym_remote.EnvClient` objects in threads of the test process. Envs are
:class:`tests.envs.faults.CounterEnv`: deterministic in their seed, step count and actions, so the
data of every slot can be compared with a ``SyncVectorEnv`` driven with the same seeds and actions.

The server handles joins, leaves and liveness only while the test's thread is inside ``reset`` or
``step``; tests that wait for something on the server side keep stepping meanwhile.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import re
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gym_remote import ClientLostError, EnvClient, RemoteTimeoutError, RemoteVectorEnv, protocol
from gym_remote.protocol import Kind
from tests.envs.faults import CounterEnv, make_counter
from tests.helpers import (
    KillWhenMarked,
    LoggedProcess,
    ThreadClient,
    cli_client,
    pid_alive,
    rows_by_client,
    step_until,
    wait_until,
)

NEXT_STEP, SAME_STEP, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED
MODES = [NEXT_STEP, SAME_STEP, DISABLED]
MODE_IDS = [mode.value for mode in MODES]
LOST = np.True_  # infos["client_lost"][slot], as batched

STATS_SERVED_KEYS = {
    "slot",
    "epoch",
    "served",
    "client",
    "host",
    "pid",
    "address",
    "key",
    "session",
    "local",
    "steps",
    "last_seen",
    "latency",
    "connected_for",
    "rejoins",
    "plane",
    "restarts",
}
STATS_EMPTY_KEYS = {"slot", "epoch", "served", "empty_for"}


# -- helpers ---------------------------------------------------------------------------------------


def counter_client(
    reaper, tmp_path, name: str, address: str, num_envs: int = 1, *extra: str, log_level: str = "WARNING", **env_kwargs
) -> LoggedProcess:
    """A ``gym-remote client`` process hosting ``num_envs`` CounterEnvs (``env_kwargs`` as ``--env-kwargs``)."""
    return cli_client(
        reaper,
        tmp_path,
        name,
        address,
        "--factory",
        "tests.envs.faults:make_counter",
        "--num-envs",
        str(num_envs),
        "--env-kwargs",
        json.dumps(env_kwargs),
        "--connect-timeout",
        "30",
        "--liveness-timeout",
        "2",
        *extra,
        log_level=log_level,
    )


def counter_fns(count: int, **kwargs: Any) -> list:
    return [functools.partial(make_counter, **kwargs) for _ in range(count)]


def sigkill(process) -> None:
    """SIGKILL a process the test started (by pid) and reap it."""
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def slot_info(infos: dict, slot: int) -> dict:
    """The info of one slot out of a batched info dict (``_key`` masks, nested dicts followed)."""
    info = {}
    for key, value in infos.items():
        if isinstance(key, str) and key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        assert mask is not None, f"info key {key!r} has no _{key} mask"
        if mask[slot]:
            info[key] = slot_info(value, slot) if isinstance(value, dict) else value[slot]
    return info


def assert_same(expected: Any, actual: Any, where: str) -> None:
    """Equal values of equal types (numpy arrays: same dtype, shape and values; dicts: same keys)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected a dict, got {actual!r}"
        assert sorted(expected, key=str) == sorted(actual, key=str), f"{where}: keys {list(expected)} != {list(actual)}"
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{where}: expected an array, got {actual!r}"
        assert (expected.dtype, expected.shape) == (actual.dtype, actual.shape), f"{where}: {expected!r} != {actual!r}"
        assert np.array_equal(expected, actual), f"{where}: {expected!r} != {actual!r}"
    else:
        assert type(expected) is type(actual), (
            f"{where}: {expected!r} ({type(expected)}) != {actual!r} ({type(actual)})"
        )
        assert expected == actual, f"{where}: {expected!r} != {actual!r}"


def assert_well_formed(result: tuple, num_envs: int, where: str) -> None:
    """A step's batch has the right shapes and dtypes, and every info mask is a boolean row per slot."""
    obs, rewards, terminations, truncations, infos = result
    assert isinstance(obs, np.ndarray) and obs.shape == (num_envs, 3) and obs.dtype == np.float64, where
    assert rewards.shape == (num_envs,) and rewards.dtype == np.float64, where
    assert terminations.shape == (num_envs,) and terminations.dtype == np.bool_, where
    assert truncations.shape == (num_envs,) and truncations.dtype == np.bool_, where
    assert isinstance(infos, dict), where

    def check_masks(batch: dict) -> None:
        for key, value in batch.items():
            if isinstance(key, str) and key.startswith("_"):
                assert value.dtype == np.bool_ and value.shape == (num_envs,), f"{where}: mask {key}"
            elif isinstance(value, dict):
                check_masks(value)

    check_masks(infos)
    if "client_lost" in infos:
        lost = infos["_client_lost"]
        assert infos["client_lost"][lost].all(), f"{where}: client_lost False where its mask is set"
        assert truncations[lost].all() and not terminations[lost].any(), f"{where}: lost slots not truncated"
        assert (rewards[lost] == 0.0).all(), f"{where}: lost slots with a reward"


def lost_slots(infos: dict) -> list[int]:
    """The slots whose ``client_lost`` is reported in ``infos``."""
    if "client_lost" not in infos:
        return []
    return np.flatnonzero(infos["_client_lost"] & infos["client_lost"].astype(bool)).tolist()


def single_reset(default_seed: int = 0, seed: int | None = None) -> tuple[np.ndarray, dict]:
    """A fresh CounterEnv's reset observation and info, as one slot of a batch holds them."""
    sync = SyncVectorEnv([functools.partial(CounterEnv, default_seed=default_seed)])
    try:
        obs, infos = sync.reset(seed=seed)
    finally:
        sync.close()
    return obs[0], slot_info(infos, 0)


def members_by_name(envs: RemoteVectorEnv) -> dict[str, dict[str, Any]]:
    """Who serves what, from ``stats()``: client name -> slots, pid, session."""
    return {
        name: {"slots": [row["slot"] for row in rows], "pid": rows[0]["pid"], "session": rows[0]["session"]}
        for name, rows in rows_by_client(envs.stats()).items()
    }


def in_line(envs: RemoteVectorEnv, name: str) -> bool:
    return any(waiter.hello.get("name") == name for waiter in envs._server.members.waiting.values())


def served_by(envs: RemoteVectorEnv, name: str) -> list[int]:
    slots = envs._server.members.slots
    return [slot for slot, client in enumerate(slots) if client is not None and client.name == name]


def step_quietly_until(envs: RemoteVectorEnv, condition, timeout: float, what: str, rng: np.random.Generator) -> int:
    """:func:`~tests.helpers.step_until` with ``rng``'s actions, each step well formed and with no client lost."""

    def step() -> None:
        result = envs.step(rng.integers(0, 3, size=envs.num_envs))
        assert_well_formed(result, envs.num_envs, f"step while waiting for {what}")
        assert "client_lost" not in result[4], f"unexpected loss while waiting for {what}: {result[4]}"

    return step_until(envs, condition, timeout, what, step)


class Reference:
    """A ``SyncVectorEnv`` standing for one client's envs, compared with that client's slots of the batch."""

    def __init__(self, slots: list[int], mode: AutoresetMode, default_seeds: list[int] | None = None) -> None:
        self.slots = list(slots)
        seeds = default_seeds if default_seeds is not None else [0] * len(self.slots)
        self.sync = SyncVectorEnv(
            [functools.partial(CounterEnv, default_seed=seed) for seed in seeds], autoreset_mode=mode
        )

    def reset(self, seed: int | None = None, mask: np.ndarray | None = None) -> tuple[Any, dict]:
        """Reset as ``RemoteVectorEnv.reset(seed=seed, ...)`` resets these slots (slot ``s`` gets ``seed + s``)."""
        seeds = None if seed is None else [seed + slot for slot in self.slots]
        options = None if mask is None else {"reset_mask": mask[self.slots].copy()}
        return self.sync.reset(seed=seeds, options=options)

    def check_reset(self, remote: tuple, seed: int | None, where: str, mask: np.ndarray | None = None) -> None:
        obs, infos = self.reset(seed, mask)
        for index, slot in enumerate(self.slots):
            assert_same(obs[index], remote[0][slot], f"{where}: obs of slot {slot}")
            assert_same(slot_info(infos, index), slot_info(remote[1], slot), f"{where}: info of slot {slot}")

    def check_step(self, remote: tuple, actions: np.ndarray, where: str) -> None:
        expected = self.sync.step(actions[self.slots])
        self.compare(expected, remote, where)

    def compare(self, expected: tuple, remote: tuple, where: str, extra_info: dict | None = None) -> None:
        names = ("obs", "reward", "terminated", "truncated")
        for index, slot in enumerate(self.slots):
            for name, want, got in zip(names, expected[:4], remote[:4], strict=True):
                assert_same(want[index], got[slot], f"{where}: {name} of slot {slot}")
            want_info = {**slot_info(expected[4], index), **(extra_info or {})}
            assert_same(want_info, slot_info(remote[4], slot), f"{where}: info of slot {slot}")

    def close(self) -> None:
        self.sync.close()


# -- 1. a client SIGKILLed mid-episode, in every autoreset mode ------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_sigkilled_client_truncates_its_slots_and_survivors_match_sync(reaper, tmp_path, mode):
    steps, seed, kill_after = 360, 17, 100
    victim_slots = [0, 1] if mode is SAME_STEP else [2, 3]
    victim_mask = np.isin(np.arange(4), victim_slots)
    envs = RemoteVectorEnv(num_envs=4, autoreset_mode=mode, timeout=20, connect_timeout=20, liveness_timeout=2)
    refs: dict[str, Reference] = {}
    processes = {}
    try:
        processes["a"] = counter_client(reaper, tmp_path, "a", envs.address, 2, seed_base=100)
        processes["b"] = counter_client(reaper, tmp_path, "b", envs.address, 2, seed_base=200)
        obs, infos = envs.reset(seed=seed)
        members = members_by_name(envs)
        assert sorted(members) == ["a", "b"] and sorted(m["slots"] for m in members.values()) == [[0, 1], [2, 3]]
        victim = next(name for name, member in members.items() if member["slots"] == victim_slots)
        survivor = "b" if victim == "a" else "a"
        assert members[victim]["pid"] == processes[victim].process.pid
        for name, member in members.items():
            refs[name] = Reference(member["slots"], mode)
            refs[name].check_reset((obs, infos), seed, "reset")

        rng = np.random.default_rng(seed)
        previous_obs, ended = obs, np.zeros(4, dtype=bool)
        killed_at = None
        losses = 0
        for step in range(steps):
            actions = rng.integers(0, 3, size=4)
            where = f"step {step}"
            if killed_at is None and step >= kill_after and not ended[victim_slots].any():
                sigkill(processes[victim].process)  # mid-episode: its envs took a step since their reset
                processes["r"] = counter_client(reaper, tmp_path, "r", envs.address, 2, seed_base=300)
                killed_at = step
            result = envs.step(actions)
            obs, rewards, terminations, truncations, infos = result
            assert_well_formed(result, 4, where)
            if lost_slots(infos):
                losses += 1
            refs[survivor].check_step(result, actions, where)  # unaffected by the loss, before and after

            if step == killed_at:  # the loss is reported in the step right after the kill
                assert lost_slots(infos) == victim_slots, f"{where}: {infos}"
                assert infos["_client_lost"].tolist() == victim_mask.tolist()
                assert truncations[victim_slots].all() and not terminations[victim_slots].any()
                assert rewards[victim_slots].tolist() == [0.0, 0.0]
                refs.pop(victim).close()
                if mode is SAME_STEP:  # the replacement has joined and been reset within this step
                    assert served_by(envs, "r") == victim_slots
                    replacement = Reference(victim_slots, mode, default_seeds=[300, 301])
                    reset_obs, reset_infos = replacement.reset()
                    for index, slot in enumerate(victim_slots):
                        assert_same(reset_obs[index], obs[slot], f"{where}: replacement's reset obs of slot {slot}")
                        want = {
                            **slot_info(reset_infos, index),
                            "client_lost": LOST,
                            "final_obs": previous_obs[slot],
                            "final_info": {"client_lost": LOST},
                        }
                        assert_same(want, slot_info(infos, slot), f"{where}: info of slot {slot}")
                    refs["r"] = replacement
                else:  # the last observation stays; only the loss is in the info
                    for slot in victim_slots:
                        assert_same(previous_obs[slot], obs[slot], f"{where}: obs of lost slot {slot}")
                        assert_same({"client_lost": LOST}, slot_info(infos, slot), f"{where}: info of slot {slot}")
                    assert "final_obs" not in infos or not infos["_final_obs"][victim_slots].any()
            elif mode is NEXT_STEP and killed_at is not None and step == killed_at + 1:
                # the replacement's first step is the autoreset step of the lost slots
                assert "client_lost" not in infos, f"{where}: the loss was reported twice"
                assert served_by(envs, "r") == victim_slots
                replacement = Reference(victim_slots, mode, default_seeds=[300, 301])
                reset_obs, reset_infos = replacement.reset()
                expected = (reset_obs, np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), reset_infos)
                replacement.compare(expected, result, f"{where} (autoreset of the replacement)")
                refs["r"] = replacement
            else:
                assert "client_lost" not in infos, f"{where}: unexpected client_lost: {infos}"
                for name, ref in refs.items():
                    if name != survivor:
                        ref.check_step(result, actions, where)

            ended = terminations | truncations
            if mode is DISABLED and ended.any():
                reset_seed = 1000 + step
                mask = ended.copy()
                reset = envs.reset(seed=reset_seed, options={"reset_mask": mask.copy()})
                if "r" not in refs and killed_at is not None:
                    assert served_by(envs, "r") == victim_slots
                    refs["r"] = Reference(victim_slots, mode, default_seeds=[300, 301])
                for ref in refs.values():
                    if mask[ref.slots].any():
                        ref.check_reset(reset, reset_seed, f"{where} (masked reset)", mask)
                    else:
                        for slot in ref.slots:
                            assert_same(obs[slot], reset[0][slot], f"{where}: obs of unreset slot {slot}")
                            assert slot_info(reset[1], slot) == {}
                obs, ended = reset[0], np.zeros(4, dtype=bool)
            previous_obs = obs

        assert killed_at is not None, "the victim's episodes never were mid-episode at a kill opportunity"
        assert losses == 1, f"the loss was reported {losses} times"
        assert sorted(refs) == sorted([survivor, "r"])
        stats = envs.stats()
        for slot in range(4):
            row = stats[slot]
            if slot in victim_slots:
                assert (row["client"], row["epoch"]) == ("r", 2), row
            else:
                assert (row["client"], row["epoch"]) == (survivor, 1), row
        assert envs.num_clients == 2
    finally:
        envs.close()
        for ref in refs.values():
            ref.close()
    for name in ("r", "a", "b"):
        if name in processes and processes[name].process.returncode != -signal.SIGKILL:
            assert processes[name].wait(timeout=10) == 0, processes[name].stderr


# -- 2. slow clients are not lost; hung envs are bounded by the timeout ----------------------------


@pytest.mark.timeout(120)
def test_slow_client_with_steps_longer_than_liveness_timeout_is_not_lost(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=2, timeout=20, connect_timeout=30, liveness_timeout=1)
    try:
        fast = counter_client(reaper, tmp_path, "fast", envs.address, 1, terminate_prob=0.0)
        assert envs.single_observation_space.shape == (3,)  # "fast" has joined: it gets slot 0
        # the slow env busy-loops (holding the GIL) for 3 s per step; its client's own liveness is 1 s too
        slow = counter_client(
            reaper,
            tmp_path,
            "slow",
            envs.address,
            1,
            "--liveness-timeout",
            "1",
            step_seconds=3.0,
            busy=True,
            terminate_prob=0.0,
        )
        envs.reset(seed=0)
        before = envs.stats()
        assert [row["client"] for row in before] == ["fast", "slow"]
        for step in range(3):
            started = time.monotonic()
            result = envs.step(np.ones(2, dtype=np.int64))
            elapsed = time.monotonic() - started
            assert_well_formed(result, 2, f"slow step {step}")
            assert elapsed >= 2.9, f"step {step} took {elapsed:.2f} s; the slow env takes 3 s"
            assert elapsed < 10, f"step {step} took {elapsed:.2f} s"
            assert "client_lost" not in result[4], f"the slow client was declared lost: {result[4]}"
            assert not result[3].any() and not result[2].any()
            assert result[0][:, 0].tolist() == [step + 1, step + 1]  # both envs stepped once per step
        after = envs.stats()
        assert envs.num_clients == 2
        for old, new in zip(before, after, strict=True):
            assert (new["epoch"], new["session"], new["pid"], new["client"]) == (
                old["epoch"],
                old["session"],
                old["pid"],
                old["client"],
            )
            assert new["steps"] == old["steps"] + 3
        assert after[1]["latency"] >= 2.9
        assert after[1]["pid"] == slow.process.pid and after[0]["pid"] == fast.process.pid
    finally:
        envs.close()
    assert fast.wait(timeout=10) == 0, fast.stderr
    assert slow.wait(timeout=15) == 0, slow.stderr


@pytest.mark.timeout(120)
def test_hung_env_is_bounded_by_timeout(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=2, timeout=2, connect_timeout=30, liveness_timeout=1)
    try:
        good = counter_client(reaper, tmp_path, "good", envs.address, 1)
        assert envs.single_observation_space.shape == (3,)
        hung = counter_client(reaper, tmp_path, "hung", envs.address, 1, step_seconds=60.0)
        envs.reset(seed=0)
        started = time.monotonic()
        with pytest.raises(RemoteTimeoutError) as caught:
            envs.step(np.zeros(2, dtype=np.int64))
        elapsed = time.monotonic() - started
        assert 1.9 <= elapsed < 6, f"step raised after {elapsed:.2f} s with timeout=2"
        message = str(caught.value)
        assert "hung" in message and "step" in message, message
        # alive (its heartbeats are answered): it is not declared lost, it stays a member
        assert envs.num_clients == 2
        assert [row["client"] for row in envs.stats()] == ["good", "hung"]
        sigkill(hung.process)
    finally:
        envs.close()
    assert good.wait(timeout=10) == 0, good.stderr


# -- dead and unreachable clients are noticed in time ----------------------------------------------


@pytest.mark.timeout(120)
def test_killed_cli_client_is_noticed_within_half_a_second(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=2, timeout=60, connect_timeout=20, liveness_timeout=30)
    try:
        keeper = counter_client(reaper, tmp_path, "keeper", envs.address, 1)
        assert envs.single_observation_space.shape == (3,)
        victim = counter_client(reaper, tmp_path, "victim", envs.address, 1)
        envs.reset(seed=0)
        for _ in range(5):
            envs.step(np.zeros(2, dtype=np.int64))
        sigkill(victim.process)
        started = time.monotonic()
        _, _, _, truncations, infos = envs.step(np.zeros(2, dtype=np.int64))
        elapsed = time.monotonic() - started
        assert lost_slots(infos) == [1] and truncations[1]
        assert elapsed < 1.0, f"a killed process was noticed after {elapsed:.2f} s (liveness_timeout=30)"
    finally:
        envs.close()
    assert keeper.wait(timeout=10) == 0, keeper.stderr


@pytest.mark.timeout(120)
def test_stopped_client_is_lost_within_liveness_timeout_and_rejoins_when_resumed(reaper, tmp_path):
    liveness = 2.0
    envs = RemoteVectorEnv(num_envs=2, timeout=60, connect_timeout=20, liveness_timeout=liveness)
    try:
        keeper = counter_client(reaper, tmp_path, "keeper", envs.address, 1)
        assert envs.single_observation_space.shape == (3,)
        frozen = counter_client(reaper, tmp_path, "frozen", envs.address, 1, log_level="INFO")
        envs.reset(seed=0)
        for _ in range(5):
            envs.step(np.zeros(2, dtype=np.int64))
        before = envs.stats()[1]
        assert before["client"] == "frozen" and before["rejoins"] == 0
        os.kill(frozen.process.pid, signal.SIGSTOP)  # alive but unreachable: nothing answers heartbeats
        try:
            started = time.monotonic()
            _, _, _, truncations, infos = envs.step(np.zeros(2, dtype=np.int64))
            elapsed = time.monotonic() - started
        finally:
            os.kill(frozen.process.pid, signal.SIGCONT)
        assert lost_slots(infos) == [1] and truncations[1], infos
        assert elapsed < liveness + 1.5, f"an unreachable client was noticed after {elapsed:.2f} s"
        # resumed, it finds its connection gone and rejoins as a new session: the replacement of its own slot
        result = envs.step(np.zeros(2, dtype=np.int64))  # waits for it (connect_timeout=20)
        assert "client_lost" not in result[4]
        assert result[1][1] == 0.0 and result[0][1][0] == 0.0  # the autoreset step of the rejoined client
        row = envs.stats()[1]
        assert (row["client"], row["pid"], row["rejoins"], row["epoch"]) == ("frozen", before["pid"], 1, 2)
        assert row["session"] != before["session"]
        for _ in range(20):
            assert "client_lost" not in envs.step(np.zeros(2, dtype=np.int64))[4]
    finally:
        envs.close()
    assert keeper.wait(timeout=10) == 0, keeper.stderr
    assert frozen.wait(timeout=10) == 0, frozen.stderr


@pytest.mark.timeout(120)
def test_killed_local_client_is_noticed_quickly_and_restarted(tmp_path):
    envs = RemoteVectorEnv(counter_fns(4), num_clients=2, timeout=60, connect_timeout=20, liveness_timeout=30)
    try:
        envs.reset(seed=0)
        for _ in range(3):
            envs.step(np.zeros(4, dtype=np.int64))
        before = envs.stats()
        assert [row["local"] for row in before] == [True] * 4
        assert [row["restarts"] for row in before] == [0] * 4
        victim = before[2]["pid"]
        assert victim == envs._launcher.pids[1] and before[3]["pid"] == victim
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: not pid_alive(victim), 10, "the local client to die")
        started = time.monotonic()
        _, _, _, truncations, infos = envs.step(np.zeros(4, dtype=np.int64))
        elapsed = time.monotonic() - started
        assert lost_slots(infos) == [2, 3] and truncations[2:].all()
        assert elapsed < 1.0, f"a killed local client was noticed after {elapsed:.2f} s"
        result = envs.step(np.zeros(4, dtype=np.int64))  # waits for the restarted client: its autoreset step
        assert result[1][2:].tolist() == [0.0, 0.0] and result[0][2:, 0].tolist() == [0.0, 0.0]
        after = envs.stats()
        assert [row["restarts"] for row in after] == [0, 0, 1, 1]
        assert [row["epoch"] for row in after] == [1, 1, 2, 2]
        assert after[2]["pid"] != victim and after[2]["pid"] == envs._launcher.pids[1]
        assert after[0]["pid"] == before[0]["pid"] and after[0]["session"] == before[0]["session"]
        # local clients connect over ipc: they have no network address
        # over ipc libzmq describes the peer as localhost:uid:gid:pid
        assert [row["address"].split(":")[-1] for row in before] == [str(row["pid"]) for row in before], before
        assert [row["address"].split(":")[-1] for row in after] == [str(row["pid"]) for row in after], after
    finally:
        envs.close()


# -- 3. soak: many join/leave cycles ---------------------------------------------------------------


@dataclass
class Member:
    kind: str  # "thread" or "cli"
    name: str
    handle: Any  # ThreadClient or LoggedProcess


class TableChecker:
    """Checks the server's slot table after every step: slots and clients agree, epochs only grow."""

    def __init__(self, envs: RemoteVectorEnv) -> None:
        self.envs = envs
        self.epochs = [0] * envs.num_envs

    def check(self, where: str) -> list[dict]:
        envs, server = self.envs, self.envs._server.members
        held: dict[int, Any] = {}
        for identity, client in server.clients.items():
            assert client.identity == identity, where
            assert client.slots and len(set(client.slots)) == len(client.slots), f"{where}: {client.slots}"
            for slot in client.slots:
                assert slot not in held, f"{where}: slot {slot} held by {held[slot].name} and {client.name}"
                held[slot] = client
                assert server.slots[slot] is client, f"{where}: slot {slot} does not point to {client.name}"
        for slot, client in enumerate(server.slots):
            assert held.get(slot) is client, f"{where}: slot {slot} points to a client that is not a member"
        assert not set(server.waiting) & set(server.clients), f"{where}: a member waits in line"
        distinct = {id(client) for client in server.slots if client is not None}
        assert envs.num_clients == len(server.clients) == len(distinct), where
        rows = envs.stats()
        assert [row["slot"] for row in rows] == list(range(envs.num_envs)), where
        for row, client in zip(rows, server.slots, strict=True):
            assert row["served"] == (client is not None), f"{where}: {row}"
            assert row["epoch"] >= self.epochs[row["slot"]], f"{where}: epoch went down: {row}"
            if client is not None:
                assert set(row) == STATS_SERVED_KEYS, f"{where}: {row}"
                assert (row["client"], row["session"], row["pid"]) == (client.name, client.session, client.pid)
                assert row["epoch"] >= 1
            else:
                assert set(row) == STATS_EMPTY_KEYS and row["empty_for"] >= 0, f"{where}: {row}"
        self.epochs = [row["epoch"] for row in rows]
        return rows


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", [NEXT_STEP, SAME_STEP], ids=["NextStep", "SameStep"])
def test_soak_join_leave_cycles_keep_the_slot_table_consistent(reaper, tmp_path, thread_clients, mode):
    """36 cycles: a member or two leave (BYE or SIGKILL), newcomers (some in line already) take over.

    NEXT_STEP: the newcomers join after the loss step; the step after it waits for them. SAME_STEP:
    the loss step waits for replacements, so they are started (and wait in line) before the leave.
    """
    num_envs, cycles = 4, 36
    started = time.monotonic()
    rng = random.Random(7)
    actions_rng = np.random.default_rng(7)
    names = itertools.count()
    envs = RemoteVectorEnv(num_envs=num_envs, autoreset_mode=mode, timeout=20, connect_timeout=20, liveness_timeout=2)
    checker = TableChecker(envs)
    previous: dict[str, Any] = {}
    counts = {"steps": 0, "losses": 0, "joins": 0, "cli": 0, "waited": 0}

    def new_member(kind: str, count: int) -> Member:
        name = f"{kind}{next(names)}"
        counts["joins"] += 1
        if kind == "cli":
            counts["cli"] += 1
            return Member(kind, name, counter_client(reaper, tmp_path, name, envs.address, count))
        client = ThreadClient(envs.address, counter_fns(count), name=name, liveness_timeout=2)
        thread_clients.append(client)
        return Member(kind, name, client)

    def step(where: str, expect_lost: list[int] = (), fresh: list[int] = ()) -> tuple:
        """One step, checked: the batch, the losses, each slot's episode counter, the slot table."""
        result = envs.step(actions_rng.integers(0, 3, size=num_envs))
        counts["steps"] += 1
        obs, rewards, terminations, truncations, infos = result
        assert_well_formed(result, num_envs, where)
        assert lost_slots(infos) == sorted(expect_lost), f"{where}: lost {lost_slots(infos)}, expected {expect_lost}"
        ended = terminations | truncations
        for slot in range(num_envs):
            counter, before = obs[slot][0], previous["obs"][slot][0]
            if mode is NEXT_STEP:
                if slot in expect_lost:  # the last observation stays
                    assert_same(previous["obs"][slot], obs[slot], f"{where}: obs of lost slot {slot}")
                elif slot in fresh or previous["ended"][slot]:  # an autoreset step (a newcomer's first step)
                    assert counter == 0.0 and rewards[slot] == 0.0 and not ended[slot], f"{where}: slot {slot}"
                else:  # the episode goes on: one more step
                    assert counter == before + 1, f"{where}: slot {slot}: {obs[slot]} after {previous['obs'][slot]}"
            else:
                if ended[slot]:  # the observation is the next episode's (a replacement's reset if lost)
                    assert counter == 0.0, f"{where}: slot {slot}: {obs[slot]}"
                    final = infos["final_obs"][slot]
                    if slot in expect_lost:
                        assert_same(previous["obs"][slot], final, f"{where}: final obs of lost slot {slot}")
                    else:
                        assert final[0] == before + 1, f"{where}: slot {slot}: final {final}"
                else:
                    assert counter == before + 1, f"{where}: slot {slot}: {obs[slot]} after {previous['obs'][slot]}"
        previous.update(obs=obs, ended=ended)
        checker.check(where)
        return result

    def knock(member: Member, where: str) -> Member:
        """Step until ``member`` waits in line (started one by one, they queue in a known order)."""
        step_until(
            envs,
            lambda: in_line(envs, member.name),
            20,
            f"{where}: {member.name} to get in line",
            lambda: step(f"{where} ({member.name} knocking)"),
        )
        counts["waited"] += 1
        return member

    def sizes_for(free: int) -> list[int]:
        sizes = []
        while free:
            sizes.append(rng.choice([1, 2]) if free >= 2 else 1)
            free -= sizes[-1]
        return sizes

    def kind_for(cycle: int, last: bool) -> str:
        return "cli" if cycle % 6 == 0 and last else "thread"  # every 6th cycle, the last newcomer is a process

    try:
        anchor = new_member("thread", 1)  # stays all along, on slot 0
        assert envs.single_observation_space.shape == (3,)
        members = [new_member("thread", 1), new_member("cli", 2)]
        obs, _ = envs.reset(seed=0)
        previous.update(obs=obs, ended=np.zeros(num_envs, dtype=bool))
        checker.check("after reset")
        assert served_by(envs, anchor.name) == [0]

        for cycle in range(cycles):
            where = f"cycle {cycle}"
            # the oldest member (or two) will leave: thread clients say BYE, processes are SIGKILLed
            leavers = [members.pop(0)]
            if cycle % 5 == 4 and members:
                leavers.append(members.pop(0))
            lost = sorted(slot for leaver in leavers for slot in served_by(envs, leaver.name))
            assert lost, f"{where}: the leavers {[leaver.name for leaver in leavers]} serve nothing"
            # newcomers that find every slot served wait in line: one every third cycle, all in SAME_STEP
            assert not envs._server.members.empty_slots()
            in_line_first = [knock(new_member("thread", 1), where)] if cycle % 3 == 1 else []
            if mode is SAME_STEP:
                sizes = sizes_for(len(lost) - len(in_line_first))
                for index, size in enumerate(sizes):
                    in_line_first.append(knock(new_member(kind_for(cycle, index == len(sizes) - 1), size), where))
            assert [w.hello["name"] for w in envs._server.members.waiting.values()] == [m.name for m in in_line_first]
            for leaver in leavers:
                if leaver.kind == "thread":
                    leaver.handle.stop()
                    assert leaver.handle.done and leaver.handle.error is None, repr(leaver.handle.error)
                else:
                    sigkill(leaver.handle.process)
            epochs = list(checker.epochs)
            # SAME_STEP: the loss step waits for the replacements and resets them
            step(f"{where} (loss)", expect_lost=lost, fresh=lost if mode is SAME_STEP else ())
            counts["losses"] += 1
            admitted = sorted(slot for member in in_line_first for slot in served_by(envs, member.name))
            assert not envs._server.members.waiting, f"{where}: still in line: {list(envs._server.members.waiting)}"
            members += in_line_first
            for slot in admitted:
                assert slot in lost and checker.epochs[slot] == epochs[slot] + 1, f"{where}: slot {slot}"
            if mode is SAME_STEP:
                assert admitted == lost, f"{where}: admitted {admitted}, lost {lost}"
            else:  # newcomers fill the empty slots; the next step waits for them (their autoreset step)
                empty = envs._server.members.empty_slots()
                assert sorted(empty + admitted) == lost, f"{where}: empty {empty}, lost {lost}"
                sizes = sizes_for(len(empty))
                members += [new_member(kind_for(cycle, i == len(sizes) - 1), size) for i, size in enumerate(sizes)]
                step(f"{where} (refill)", fresh=lost)
                for slot in empty:
                    assert checker.epochs[slot] == epochs[slot] + 1, f"{where}: slot {slot} epochs {checker.epochs}"
            assert not envs._server.members.empty_slots()
            for _ in range(rng.randint(1, 4)):
                step(f"{where} (steady)")
            assert served_by(envs, anchor.name) == [0]

        print(f"soak {mode.value}: {counts}, {time.monotonic() - started:.1f} s")
        assert counts["losses"] == cycles and counts["waited"] >= 12 and counts["cli"] >= 6, counts
        assert checker.epochs[0] == 1  # the anchor never left
        elapsed = time.monotonic() - started
        assert elapsed < 90, f"the soak took {elapsed:.1f} s ({counts})"
    finally:
        envs.close()
    for member in [anchor, *members]:
        if member.kind == "thread":
            member.handle.finish(10)
        else:
            assert member.handle.wait(timeout=10) == 0, member.handle.stderr


# -- 4. waiting in line ----------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_newcomers_wait_in_line_and_are_admitted_first_come_first_served(reaper, tmp_path, thread_clients):
    rng = np.random.default_rng(3)
    envs = RemoteVectorEnv(num_envs=2, timeout=20, connect_timeout=20, liveness_timeout=2)
    try:
        killed = counter_client(reaper, tmp_path, "killed", envs.address, 1)
        assert envs.single_observation_space.shape == (3,)  # "killed" has slot 0
        leaving = ThreadClient(envs.address, counter_fns(1), name="leaving", liveness_timeout=2)
        thread_clients.append(leaving)
        envs.reset(seed=0)
        assert served_by(envs, "killed") == [0] and served_by(envs, "leaving") == [1]

        first = counter_client(reaper, tmp_path, "first", envs.address, 1, log_level="INFO", seed_base=40)
        step_quietly_until(envs, lambda: in_line(envs, "first"), 20, "the first newcomer to wait in line", rng)
        second = counter_client(reaper, tmp_path, "second", envs.address, 1, log_level="INFO", seed_base=50)
        step_quietly_until(envs, lambda: in_line(envs, "second"), 20, "the second newcomer to wait in line", rng)
        assert [waiter.hello["name"] for waiter in envs._server.members.waiting.values()] == ["first", "second"]
        # they are told, and they wait (they do not exit)
        wait_until(lambda: "waiting in line at position 1" in first.stderr, 10, "the first newcomer to be told")
        wait_until(lambda: "waiting in line at position 2" in second.stderr, 10, "the second newcomer to be told")
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            assert "client_lost" not in envs.step(rng.integers(0, 3, size=2))[4]
        assert first.process.poll() is None, first.stderr
        assert second.process.poll() is None, second.stderr
        assert envs.num_clients == 2 and len(envs._server.members.waiting) == 2

        # a full server turns away a client that will not wait
        impatient = counter_client(reaper, tmp_path, "impatient", envs.address, 1, "--exit-if-full")
        step_quietly_until(envs, lambda: impatient.process.poll() is not None, 20, "the impatient client to exit", rng)
        assert impatient.process.returncode == 1, impatient.stderr
        assert "no free slot" in impatient.stderr, impatient.stderr
        assert not in_line(envs, "impatient")

        # a member is killed: the step reports it; the first in line takes its slot at once
        previous = envs.step(rng.integers(0, 3, size=2))[0]
        sigkill(killed.process)
        obs, rewards, _, truncations, infos = envs.step(rng.integers(0, 3, size=2))
        assert lost_slots(infos) == [0] and truncations[0] and rewards[0] == 0.0
        assert_same(previous[0], obs[0], "the lost slot keeps its last observation")
        assert served_by(envs, "first") == [0] and in_line(envs, "second")
        obs, rewards, terminations, truncations, infos = envs.step(rng.integers(0, 3, size=2))
        expected_obs, expected_info = single_reset(default_seed=40)
        assert_same(expected_obs, obs[0], "the newcomer's autoreset step")
        assert_same(expected_info, slot_info(infos, 0), "the newcomer's reset info")
        assert (rewards[0], terminations[0], truncations[0]) == (0.0, False, False)
        assert "client_lost" not in infos

        # a member leaves (BYE): the second in line takes its slot
        leaving.stop()
        assert leaving.error is None, repr(leaving.error)
        _, _, _, truncations, infos = envs.step(rng.integers(0, 3, size=2))
        assert lost_slots(infos) == [1] and truncations[1]
        assert served_by(envs, "second") == [1] and not envs._server.members.waiting
        obs, rewards, _, _, infos = envs.step(rng.integers(0, 3, size=2))
        assert_same(single_reset(default_seed=50)[0], obs[1], "the second newcomer's autoreset step")
        assert rewards[1] == 0.0
        assert [row["epoch"] for row in envs.stats()] == [2, 2]
        assert [row["client"] for row in envs.stats()] == ["first", "second"]
    finally:
        envs.close()
    assert first.wait(timeout=10) == 0, first.stderr
    assert second.wait(timeout=10) == 0, second.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [NEXT_STEP, SAME_STEP], ids=["NextStep", "SameStep"])
def test_waiter_that_died_in_line_does_not_keep_the_slot_from_the_next_in_line(reaper, tmp_path, mode):
    rng = np.random.default_rng(5)
    envs = RemoteVectorEnv(num_envs=2, autoreset_mode=mode, timeout=20, connect_timeout=8, liveness_timeout=2)
    checker = TableChecker(envs)
    try:
        m1 = counter_client(reaper, tmp_path, "m1", envs.address, 1)
        assert envs.single_observation_space.shape == (3,)  # m1 has slot 0
        m2 = counter_client(reaper, tmp_path, "m2", envs.address, 1)
        envs.reset(seed=0)
        ghost = counter_client(reaper, tmp_path, "ghost", envs.address, 1)
        step_quietly_until(envs, lambda: in_line(envs, "ghost"), 20, "the ghost to wait in line", rng)
        live = counter_client(reaper, tmp_path, "live", envs.address, 1, seed_base=60)
        step_quietly_until(envs, lambda: in_line(envs, "live"), 20, "the live newcomer to wait in line", rng)
        sigkill(ghost.process)  # it dies while waiting in line, without a word
        for _ in range(10):
            envs.step(rng.integers(0, 3, size=2))

        sigkill(m1.process)
        # SAME_STEP: this step waits for a replacement of slot 0: the live newcomer (the ghost cannot)
        obs, _, _, truncations, infos = envs.step(rng.integers(0, 3, size=2))
        assert lost_slots(infos) == [0] and truncations[0]
        checker.check("after the loss")
        if mode is NEXT_STEP:  # the next step waits for slot 0, and is the newcomer's autoreset step
            obs, rewards, terminations, truncations, infos = envs.step(rng.integers(0, 3, size=2))
            assert "client_lost" not in infos, infos
            assert (rewards[0], terminations[0], truncations[0]) == (0.0, False, False)
        assert served_by(envs, "live") == [0]
        assert_same(single_reset(default_seed=60)[0], obs[0], "the live newcomer's reset observation")
        checker.check("after the admission")
        assert "client_lost" not in envs.step(rng.integers(0, 3, size=2))[4]
        assert not envs._server.members.waiting
    finally:
        envs.close()
    assert m2.wait(timeout=10) == 0, m2.stderr
    assert live.wait(timeout=10) == 0, live.stderr


@pytest.mark.timeout(120)
def test_waiters_behind_a_dead_one_are_admitted_once(reaper, tmp_path):
    rng = np.random.default_rng(6)
    envs = RemoteVectorEnv(num_envs=4, timeout=20, connect_timeout=8, liveness_timeout=2)
    checker = TableChecker(envs)
    try:
        big = counter_client(reaper, tmp_path, "big", envs.address, 3)
        assert envs.single_observation_space.shape == (3,)  # big has slots 0-2
        small = counter_client(reaper, tmp_path, "small", envs.address, 1)
        envs.reset(seed=0)
        ghost = counter_client(reaper, tmp_path, "ghost", envs.address, 1)
        step_quietly_until(envs, lambda: in_line(envs, "ghost"), 20, "the ghost to wait in line", rng)
        live = counter_client(reaper, tmp_path, "live", envs.address, 1)
        step_quietly_until(envs, lambda: in_line(envs, "live"), 20, "the live newcomer to wait in line", rng)
        sigkill(ghost.process)
        for _ in range(10):
            envs.step(rng.integers(0, 3, size=4))

        sigkill(big.process)  # three slots free up at once
        _, _, _, _, infos = envs.step(rng.integers(0, 3, size=4))
        assert lost_slots(infos) == [0, 1, 2]
        checker.check("after the loss")
        assert len(served_by(envs, "live")) == 1, envs.stats()
        late = counter_client(reaper, tmp_path, "late", envs.address, 2)
        result = envs.step(rng.integers(0, 3, size=4))  # waits for the free slots to be served
        assert "client_lost" not in result[4]
        checker.check("after the refill")
        assert sorted(served_by(envs, "live") + served_by(envs, "late") + served_by(envs, "small")) == [0, 1, 2, 3]
        for _ in range(20):
            assert "client_lost" not in envs.step(rng.integers(0, 3, size=4))[4]
    finally:
        envs.close()
    for client in (small, live, late):
        assert client.wait(timeout=10) == 0, client.stderr


@pytest.mark.timeout(120)
def test_client_killed_during_reset_is_replaced_within_that_reset(reaper, tmp_path):
    marker = tmp_path / "stalling"
    rng = np.random.default_rng(8)
    envs = RemoteVectorEnv(num_envs=2, timeout=60, connect_timeout=8, liveness_timeout=2)
    try:
        keeper = counter_client(reaper, tmp_path, "keeper", envs.address, 1)
        assert envs.single_observation_space.shape == (3,)  # the keeper has slot 0
        # slot 1 is reset with seed 100 by reset(seed=99): then the victim stalls, and is killed
        victim = counter_client(
            reaper, tmp_path, "victim", envs.address, 1, stall_seed=100, stall_seconds=60.0, marker=str(marker)
        )
        envs.reset(seed=0)
        for _ in range(5):
            envs.step(rng.integers(0, 3, size=2))
        replacement = counter_client(reaper, tmp_path, "replacement", envs.address, 1)
        step_quietly_until(envs, lambda: in_line(envs, "replacement"), 20, "the replacement to wait in line", rng)

        killer = KillWhenMarked(victim.pid, marker)
        started = time.monotonic()
        obs, infos = envs.reset(seed=99)
        elapsed = time.monotonic() - started
        killer.join(10)
        assert marker.exists(), "the victim never stalled"
        assert elapsed < 6, f"reset took {elapsed:.1f} s"
        assert served_by(envs, "replacement") == [1]
        # the replacement's env is fresh; the keeper's has had earlier episodes (obs[1] counts them)
        expected_obs, expected_info = single_reset(seed=100)
        assert_same(expected_obs, obs[1], "reset obs of slot 1")
        assert_same(expected_info, slot_info(infos, 1), "reset info of slot 1")
        expected_obs, expected_info = single_reset(seed=99)
        assert obs[0][0] == 0.0 and obs[0][2] == expected_obs[2], obs[0]
        assert slot_info(infos, 0)["draw"] == expected_info["draw"] and slot_info(infos, 0)["t"] == 0
        # a new episode began with this reset: nothing is left to report
        obs, rewards, _, truncations, infos = envs.step(rng.integers(0, 3, size=2))
        assert "client_lost" not in infos, infos
        assert obs[:, 0].tolist() == [1.0, 1.0] and not truncations.any()
    finally:
        envs.close()
    assert keeper.wait(timeout=10) == 0, keeper.stderr
    assert replacement.wait(timeout=10) == 0, replacement.stderr


class MalformedResultClient(EnvClient):
    """An EnvClient whose ``break_at``-th RESULT is malformed: it claims one env more than it hosts."""

    def __init__(self, *args: Any, break_at: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.break_at = break_at
        self.results = 0

    def _send_result(self, hosted, seq, infos, finals, indexes=None, errors=None) -> None:
        self.results += 1
        if self.results == self.break_at:
            self._send([protocol.pack_header(Kind.RESULT, seq, count=hosted.count + 1)], "RESULT")
            return
        super()._send_result(hosted, seq, infos, finals, indexes, errors)


@pytest.mark.timeout(120)
def test_client_sending_a_malformed_reply_is_lost_and_evicted(thread_clients):
    rng = np.random.default_rng(9)
    envs = RemoteVectorEnv(num_envs=3, timeout=20, connect_timeout=20, liveness_timeout=2)
    try:
        keeper = ThreadClient(envs.address, counter_fns(2), name="keeper", liveness_timeout=2)
        thread_clients.append(keeper)
        assert envs.single_observation_space.shape == (3,)  # the keeper has slots 0-1
        breaker = ThreadClient.around(  # answers the reset and 4 steps, then sends a malformed RESULT
            MalformedResultClient(
                envs.address,
                counter_fns(1, terminate_prob=0.0),
                name="breaker",
                connect_timeout=30,
                reconnect=False,
                liveness_timeout=2,
                break_at=6,
            )
        )
        thread_clients.append(breaker)
        envs.reset(seed=0)
        assert served_by(envs, "breaker") == [2]
        for _ in range(4):
            previous, _, _, _, infos = envs.step(rng.integers(0, 3, size=3))
            assert "client_lost" not in infos
        obs, rewards, terminations, truncations, infos = envs.step(rng.integers(0, 3, size=3))
        assert lost_slots(infos) == [2] and infos["_client_lost"].tolist() == [False, False, True]
        assert (rewards[2], terminations[2], truncations[2]) == (0.0, False, True)
        assert_same(previous[2], obs[2], "the lost slot keeps its last observation")
        assert envs.num_clients == 1
        # the breaker was told (EVICT) and, as it may not reconnect, its run() ends with ClientLostError
        breaker.join(10)
        assert isinstance(breaker.error, ClientLostError), repr(breaker.error)
        newcomer = ThreadClient(envs.address, counter_fns(1, default_seed=5), name="newcomer", liveness_timeout=2)
        thread_clients.append(newcomer)
        obs, rewards, _, _, infos = envs.step(rng.integers(0, 3, size=3))  # waits: the newcomer's autoreset step
        assert "client_lost" not in infos
        assert_same(single_reset(default_seed=5)[0], obs[2], "the newcomer's reset observation")
        assert served_by(envs, "newcomer") == [2] and envs.stats()[2]["epoch"] == 2
    finally:
        envs.close()
    for client in (keeper, newcomer):
        client.finish(10)


# -- 5. a slot empty for longer than connect_timeout -----------------------------------------------


EMPTY_FOR = re.compile(r"slots 2 have no client \(empty for up to ([0-9.]+) s\)")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_slot_empty_longer_than_connect_timeout_raises_and_recovers(thread_clients, mode):
    short = 1.5
    rng = np.random.default_rng(11)
    envs = RemoteVectorEnv(num_envs=3, autoreset_mode=mode, timeout=20, connect_timeout=20, liveness_timeout=2)
    try:
        keeper = ThreadClient(envs.address, counter_fns(2), name="keeper", liveness_timeout=2)
        thread_clients.append(keeper)
        assert envs.single_observation_space.shape == (3,)  # the keeper has slots 0-1
        gone = ThreadClient(envs.address, counter_fns(1, terminate_prob=0.0, max_steps=1000), name="gone")
        thread_clients.append(gone)
        obs, _ = envs.reset(seed=0)
        assert served_by(envs, "gone") == [2]
        for _ in range(3):
            obs, _, terminations, truncations, _ = envs.step(rng.integers(0, 3, size=3))
            if mode is DISABLED and (terminations | truncations).any():
                obs, _ = envs.reset(options={"reset_mask": terminations | truncations})
        last_obs = obs
        gone.stop()
        assert gone.error is None, repr(gone.error)
        lost_at = time.monotonic()

        reset_mask = np.array([False, False, True])
        if mode is not SAME_STEP:  # the loss is reported at once; no replacement is needed for that
            obs, rewards, terminations, truncations, infos = envs.step(rng.integers(0, 3, size=3))
            assert lost_slots(infos) == [2] and truncations[2] and not terminations[2] and rewards[2] == 0.0
            assert_same(last_obs[2], obs[2], "the lost slot keeps its last observation")
            reset_mask |= terminations | truncations
            if mode is DISABLED:
                with pytest.raises(AssertionError, match="reset them"):
                    envs.step(rng.integers(0, 3, size=3))

        envs.connect_timeout = short
        empty_for = []
        for attempt in range(2):
            started = time.monotonic()
            with pytest.raises(RemoteTimeoutError) as caught:
                if mode is DISABLED:
                    envs.reset(options={"reset_mask": reset_mask.copy()})
                else:
                    envs.step(rng.integers(0, 3, size=3))
            elapsed = time.monotonic() - started
            message = str(caught.value)
            assert isinstance(caught.value, TimeoutError)
            assert short <= elapsed < short + 3, f"attempt {attempt}: raised after {elapsed:.2f} s: {message}"
            match = EMPTY_FOR.search(message)
            assert match, message
            assert "2 of 3 slots are served" in message, message
            empty_for.append(float(match.group(1)))
            assert empty_for[-1] >= short - 0.1 and empty_for[-1] <= time.monotonic() - lost_at + 0.1, message
            row = envs.stats()[2]
            # the message rounds to a tenth of a second, so it may read up to 0.05 s more than the clock
            assert not row["served"] and row["empty_for"] >= empty_for[-1] - 0.05, row
        assert empty_for[1] >= empty_for[0] + short - 0.1, empty_for

        # a client joins: stepping works again
        envs.connect_timeout = 20
        newcomer = ThreadClient(envs.address, counter_fns(1, default_seed=777), name="newcomer", liveness_timeout=2)
        thread_clients.append(newcomer)
        expected_obs, expected_info = single_reset(default_seed=777)
        if mode is SAME_STEP:  # the loss is reported now, with the newcomer's reset
            obs, rewards, terminations, truncations, infos = envs.step(rng.integers(0, 3, size=3))
            assert lost_slots(infos) == [2] and truncations[2] and not terminations[2] and rewards[2] == 0.0
            assert_same(expected_obs, obs[2], "the newcomer's reset observation")
            want = {**expected_info, "client_lost": LOST, "final_obs": last_obs[2], "final_info": {"client_lost": LOST}}
            assert_same(want, slot_info(infos, 2), "the info of the lost slot")
        elif mode is NEXT_STEP:  # the newcomer's first step is its autoreset step
            obs, rewards, terminations, truncations, infos = envs.step(rng.integers(0, 3, size=3))
            assert "client_lost" not in infos
            assert_same(expected_obs, obs[2], "the newcomer's reset observation")
            assert_same(expected_info, slot_info(infos, 2), "the newcomer's reset info")
            assert (rewards[2], terminations[2], truncations[2]) == (0.0, False, False)
        else:
            obs, infos = envs.reset(seed=40, options={"reset_mask": reset_mask.copy()})
            seeded_obs, seeded_info = single_reset(seed=42)
            assert_same(seeded_obs, obs[2], "the newcomer's seeded reset observation")
            assert_same(seeded_info, slot_info(infos, 2), "the newcomer's seeded reset info")
        assert served_by(envs, "newcomer") == [2]
        assert envs.stats()[2]["epoch"] == 2
        for _ in range(20):
            obs, _, terminations, truncations, infos = envs.step(rng.integers(0, 3, size=3))
            assert "client_lost" not in infos
            if mode is DISABLED and (terminations | truncations).any():
                envs.reset(options={"reset_mask": terminations | truncations})
    finally:
        envs.close()
    for client in (keeper, newcomer):
        client.finish(10)


# -- 6. stats() ------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_stats_fields_and_values(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=3, timeout=20, connect_timeout=20, liveness_timeout=2)
    try:
        alpha = counter_client(reaper, tmp_path, "alpha", envs.address, 2)
        assert envs.single_observation_space.shape == (3,)  # alpha has slots 0-1
        rows = envs.stats()
        assert set(rows[2]) == STATS_EMPTY_KEYS and rows[2]["epoch"] == 0 and not rows[2]["served"]
        assert rows[2]["empty_for"] > 0
        beta = counter_client(reaper, tmp_path, "beta", envs.address, 1)
        envs.reset(seed=0)
        rows = envs.stats()
        assert [row["slot"] for row in rows] == [0, 1, 2]
        for row in rows:
            assert set(row) == STATS_SERVED_KEYS, row
            assert row["served"] is True and row["epoch"] == 1
            assert row["host"] == socket.gethostname()
            assert row["address"] == "127.0.0.1", row
            assert row["key"] == "", row  # no authentication: no key name
            assert re.fullmatch(r"[0-9a-f]{32}", row["session"]), row
            assert row["local"] is False and row["rejoins"] == 0 and row["restarts"] == 0
            assert row["steps"] == 1  # the reset
            assert 0 < row["latency"] < 20
            assert 0 <= row["last_seen"] < 5 and row["connected_for"] > 0
        assert [row["client"] for row in rows] == ["alpha", "alpha", "beta"]
        assert [row["pid"] for row in rows] == [alpha.process.pid, alpha.process.pid, beta.process.pid]
        assert rows[0]["session"] == rows[1]["session"] != rows[2]["session"]

        history = [rows]
        for _ in range(10):
            envs.step(np.zeros(3, dtype=np.int64))
            history.append(envs.stats())
        for earlier, later in itertools.pairwise(history):
            for old, new in zip(earlier, later, strict=True):
                assert new["steps"] == old["steps"] + 1
                assert new["connected_for"] > old["connected_for"]
                assert new["latency"] > 0
        assert [row["steps"] for row in history[-1]] == [11, 11, 11]

        sigkill(beta.process)
        _, _, _, _, infos = envs.step(np.zeros(3, dtype=np.int64))
        assert lost_slots(infos) == [2]
        rows = envs.stats()
        assert set(rows[2]) == STATS_EMPTY_KEYS and rows[2]["epoch"] == 1 and rows[2]["served"] is False
        assert 0 <= rows[2]["empty_for"] < 5
        assert rows[0]["steps"] == 12

        gamma = counter_client(reaper, tmp_path, "gamma", envs.address, 1)
        envs.step(np.zeros(3, dtype=np.int64))  # waits for gamma: its autoreset step
        rows = envs.stats()
        assert (rows[2]["client"], rows[2]["pid"], rows[2]["epoch"], rows[2]["steps"]) == (
            "gamma",
            gamma.process.pid,
            2,
            1,
        )
        assert rows[2]["session"] != history[0][2]["session"] and rows[2]["latency"] > 0
        assert [row["epoch"] for row in rows] == [1, 1, 2]
        assert rows[0]["steps"] == 13 and rows[0]["session"] == history[0][0]["session"]
    finally:
        envs.close()
    assert alpha.wait(timeout=10) == 0, alpha.stderr
    assert gamma.wait(timeout=10) == 0, gamma.stderr


# -- frozen clients with large commands in flight ---------------------------------------------------

ENVS_PER_CLIENT = 16
"""Envs of each client below, each taking 1 MiB actions: a client's STEP carries ``ENVS_PER_CLIENT`` MiB."""


def assert_frozen_clients_are_lost_in_time(reaper, tmp_path, clients: int, envs_each: int) -> None:
    """Start a server (liveness 2 s, reply timeout 15 s) and ``clients`` ``gym-remote client`` processes,
    each hosting ``envs_each`` :class:`~tests.envs.faults.ActionDigestEnv` with 1 MiB actions; stop them
    (SIGSTOP) while idle after a reset and two steps; the next step, which sends each client ``envs_each``
    MiB of actions, must report every slot lost within liveness_timeout and a little more."""
    envs = RemoteVectorEnv(
        num_envs=clients * envs_each, timeout=15, connect_timeout=30, liveness_timeout=2.0, max_message_bytes=1 << 30
    )
    args = ("--factory", "tests.envs.faults:make_action_digest", "--num-envs", str(envs_each), "--env-kwargs")
    args += (json.dumps({"action_bytes": 1 << 20}), "--connect-timeout", "30", "--liveness-timeout", "2")
    processes = [cli_client(reaper, tmp_path, f"big{index}", envs.address, *args) for index in range(clients)]
    try:
        envs.reset(seed=0)
        for value in (1, 1, 2):
            if value == 2:
                for process in processes:  # while idle: the next STEP is theirs to take, and they take none
                    os.kill(process.pid, signal.SIGSTOP)
                started = time.monotonic()
            _, _, _, truncations, infos = envs.step(np.full((envs.num_envs, 1 << 20), value, dtype=np.uint8))
        elapsed = time.monotonic() - started
        assert lost_slots(infos) == list(range(envs.num_envs)) and truncations.all(), infos
        assert elapsed < 2.0 + 1.5, f"{clients} frozen client(s) were lost after {elapsed:.1f} s (liveness 2 s)"
    finally:
        for process in processes:
            os.kill(process.pid, signal.SIGCONT)
        envs.close(timeout=1)


@pytest.mark.timeout(120)
def test_a_frozen_client_with_a_large_step_in_flight_is_lost_at_liveness_timeout(reaper, tmp_path):
    """A client stopped (SIGSTOP) while idle is sent 64 MiB of actions, far more than the sockets' buffers
    hold: it is lost within liveness_timeout (2 s) and a little more, over either plane, not after the
    15 s reply timeout."""
    assert_frozen_clients_are_lost_in_time(reaper, tmp_path, clients=1, envs_each=64)


@pytest.mark.timeout(120)
def test_frozen_clients_with_large_steps_in_flight_are_found_together(reaper, tmp_path):
    """Three clients stopped (SIGSTOP) while idle are each sent 16 MiB of actions: one step reports all
    three lost within liveness_timeout (2 s) and a little more, not one after another."""
    assert_frozen_clients_are_lost_in_time(reaper, tmp_path, clients=3, envs_each=16)
