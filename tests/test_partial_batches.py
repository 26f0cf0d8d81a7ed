"""Partial batches (EnvPool's ``async_reset`` / ``send`` / ``recv``), with real client processes and threads.

Every slot's results are recorded with the action that produced them and compared with the same env
(same make function, same seed) stepped alone with the same actions in a one-env ``SyncVectorEnv`` of
the same autoreset mode: a result lost, repeated, or delivered to the wrong slot shows up there.

* heterogeneous speeds: fast slots come back many times while slow ones work;
* clients hosting several envs get commands for some of them (FLAG_SUBSET), Dict and non-array
  observation spaces, actions as numpy arrays and as lists;
* ``batch_size=1`` and ``batch_size=num_envs`` (compared with a lock-step ``SyncVectorEnv``);
* no starvation at equal speeds;
* clients joining and leaving (killed mid-step, lost while idle) while partial batches run;
* the errors of the API: bad ids, busy slots, wrong action counts, lock-step calls while busy,
  ``recv`` timeouts, envs raising.

Local client processes are ended by ``close()`` and, should a test fail, by pid (``local_envs``);
other processes by the ``reaper`` fixture, thread clients by ``thread_clients``.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError, ResetNeeded
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space, iterate

from gym_remote import RemoteEnvError, RemoteVectorEnv
from gym_remote.conformance.reference import unbatch_info
from gym_remote.errors import RemoteTimeoutError
from tests.envs import make_cartpole
from tests.envs.partial import TimedEnv, make_space_env, make_timed
from tests.helpers import KillWhenMarked, ThreadClient, kill_local_clients, wait_until

SEED = 100
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]
LIVENESS = 2.0


# -- recording and replaying -------------------------------------------------------------------------


@dataclass
class Entry:
    """One result of one slot: what produced it (``("reset", seed)`` or ``("step", action)``) and what came back."""

    event: tuple[str, Any]
    obs: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def unbatch(space, results, count: int) -> list[tuple[Any, float, bool, bool, dict]]:
    """A batch of ``count`` results (obs, rewards, terminations, truncations, infos), one tuple per position."""
    obs, rewards, terminations, truncations, infos = results
    assert rewards.shape == terminations.shape == truncations.shape == (count,)
    assert rewards.dtype == np.float64 and terminations.dtype == truncations.dtype == np.bool_
    observations = list(iterate(batch_space(space, count), obs))
    assert len(observations) == count
    return [
        (observations[p], float(rewards[p]), bool(terminations[p]), bool(truncations[p]), unbatch_info(infos, p))
        for p in range(count)
    ]


def assert_same(actual: Any, expected: Any, where: str) -> None:
    """Equal values of equal types and dtypes, nested through dicts, tuples and lists."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not a dict"
        assert actual.keys() == expected.keys(), (
            f"{where}: keys {sorted(actual, key=str)} != {sorted(expected, key=str)}"
        )
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), f"{where}: {actual!r} != {expected!r}"
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{index}]")
    elif isinstance(expected, str):
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
    else:
        a, e = np.asarray(actual), np.asarray(expected)
        assert a.dtype == e.dtype and a.shape == e.shape, f"{where}: {actual!r} != {expected!r} (dtype or shape)"
        assert np.array_equal(a, e), f"{where}: {actual!r} != {expected!r}"


def twin_entries(make, mode: AutoresetMode, events: list[tuple[str, Any]]) -> list[Entry]:
    """Replay ``events`` on ``make()`` alone in a one-env ``SyncVectorEnv`` of autoreset mode ``mode``."""
    twin = SyncVectorEnv([make], autoreset_mode=mode)
    entries = []
    try:
        for kind, value in events:
            if kind == "reset":
                obs, infos = twin.reset(seed=value)
                results = (obs, np.zeros(1), np.zeros(1, np.bool_), np.zeros(1, np.bool_), infos)
            else:
                results = twin.step(np.array([value]))
            entries.append(Entry((kind, value), *unbatch(twin.single_observation_space, results, 1)[0]))
    finally:
        twin.close()
    return entries


def assert_matches_twin(entries: list[Entry], make, mode: AutoresetMode, where: str) -> None:
    """``entries`` (one slot's results) are what ``make()`` alone gives for the same events."""
    assert entries, f"{where}: no results at all"
    expected = twin_entries(make, mode, [entry.event for entry in entries])
    assert len(entries) == len(expected)
    for index, (actual, wanted) in enumerate(zip(entries, expected, strict=True)):
        at = f"{where}, result {index} ({actual.event})"
        assert_same(actual.obs, wanted.obs, f"{at} obs")
        assert actual.reward == wanted.reward, f"{at}: reward {actual.reward} != {wanted.reward}"
        assert (actual.terminated, actual.truncated) == (wanted.terminated, wanted.truncated), at
        assert_same(actual.info, wanted.info, f"{at} info")


class Rollout:
    """Drives ``send`` / ``recv`` on ``envs`` and records every slot's results with what produced them."""

    def __init__(self, envs: RemoteVectorEnv, seed: int = 0) -> None:
        self.envs = envs
        self.rng = np.random.default_rng(seed)
        self.records: dict[int, list[Entry]] = {slot: [] for slot in range(envs.num_envs)}
        self.pending: dict[int, tuple[str, Any]] = {}  # slot -> the event whose result is coming
        self.idle: set[int] = set()
        self.batches: list[list[int]] = []
        self.sends: list[list[int]] = []

    def start(self, seed: int | None = SEED) -> None:
        self.envs.async_reset(seed=seed)
        for slot in range(self.envs.num_envs):
            self.pending[slot] = ("reset", None if seed is None else seed + slot)
        self.idle.clear()

    def recv(self, **kwargs: Any) -> list[int]:
        outstanding = set(self.pending)
        results = self.envs.recv(**kwargs)
        ids = results[4]["env_id"]
        assert isinstance(ids, np.ndarray) and ids.dtype == np.int32 and ids.ndim == 1
        slots = ids.tolist()
        size = min(self.envs.batch_size, len(outstanding))
        assert len(slots) == size, f"recv returned {len(slots)} results, expected {size}"
        assert len(set(slots)) == len(slots), f"a slot twice in one batch: {slots}"
        assert set(slots) <= outstanding, f"results for slots {set(slots) - outstanding} that had nothing in flight"
        for slot, result in zip(slots, unbatch(self.envs.single_observation_space, results, size), strict=True):
            self.records[slot].append(Entry(self.pending.pop(slot), *result))
        self.idle.update(slots)
        self.batches.append(slots)
        return slots

    def send(self, slots: list[int], form: str = "array", id_form: str = "array") -> None:
        actions = self.rng.integers(0, 3, len(slots))
        sent = actions if form == "array" else [int(action) for action in actions]
        self.envs.send(sent, np.asarray(slots) if id_form == "array" else list(slots))
        for slot, action in zip(slots, actions, strict=True):
            self.pending[slot] = ("step", int(action))
            self.idle.discard(slot)
        self.sends.append(list(slots))

    def drain(self) -> None:
        while self.pending:
            self.recv()
        with pytest.raises(NoAsyncCallError):
            self.envs.recv()

    def steps(self, slot: int) -> int:
        return sum(entry.event[0] == "step" for entry in self.records[slot])


@pytest.fixture
def local_envs():
    """``local_envs(env_fns, **kwargs)``: a RemoteVectorEnv with local clients, closed (and its client
    processes killed by pid) at teardown."""
    made: list[tuple[RemoteVectorEnv, set[int]]] = []

    def make(env_fns, **kwargs: Any) -> RemoteVectorEnv:
        kwargs.setdefault("connect_timeout", 30)
        kwargs.setdefault("timeout", 30)
        kwargs.setdefault("liveness_timeout", LIVENESS)
        envs = RemoteVectorEnv(env_fns, **kwargs)
        made.append((envs, set(envs._launcher.pids)))
        return envs

    yield make
    for envs, pids in made:
        try:
            pids.update(envs._launcher.pids)
            envs.close()
        finally:
            kill_local_clients(pids)


# -- 1. heterogeneous speeds -------------------------------------------------------------------------

FAST, SLOW = 0.002, 0.05  # (25x apart, so that the 3x below holds on a loaded host)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_fast_slots_come_back_while_slow_ones_work_and_every_slot_matches_its_twin(mode, local_envs):
    fns = [
        functools.partial(make_timed, i, FAST, 10) if i % 2 == 0 else functools.partial(make_timed, i, SLOW, 3)
        for i in range(8)
    ]
    envs = local_envs(fns, num_clients=8, batch_size=4, autoreset_mode=mode)
    rollout = Rollout(envs, seed=1)
    rollout.start()
    slow = [1, 3, 5, 7]
    for _ in range(2000):
        if min(rollout.steps(slot) for slot in slow) >= 6:
            break
        rollout.send(rollout.recv())
    rollout.drain()
    counts = [rollout.steps(slot) for slot in range(8)]
    fast_counts, slow_counts = counts[0::2], counts[1::2]
    assert min(slow_counts) >= 6, counts
    assert min(fast_counts) >= 3 * max(slow_counts), f"fast slots did not overtake slow ones: {counts}"
    # episodes ended (and were reset) in every slot, so autoreset happened in partial batches
    for slot in range(8):
        assert any(entry.terminated or entry.truncated for entry in rollout.records[slot]), slot
        assert_matches_twin(rollout.records[slot], fns[slot], mode, f"slot {slot}")


# -- 2. clients hosting several envs: subsets of their envs -------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("observation", "mode", "form"),
    [
        ("dict", AutoresetMode.NEXT_STEP, "list"),
        ("dict", AutoresetMode.SAME_STEP, "array"),
        ("tuple_with_text", AutoresetMode.SAME_STEP, "list"),
        ("tuple_with_text", AutoresetMode.NEXT_STEP, "array"),
    ],
)
def test_random_subsets_of_multi_env_clients_match_their_twins(observation, mode, form, local_envs):
    fns = [functools.partial(make_space_env, i, observation) for i in range(8)]
    envs = local_envs(fns, num_clients=2, batch_size=3, autoreset_mode=mode)
    rollout = Rollout(envs, seed=2)
    rng = np.random.default_rng(3)
    rollout.start()
    subsets = 0
    for iteration in range(150):
        rollout.recv()
        chosen = [slot for slot in sorted(rollout.idle) if rng.random() < 0.6]
        if not chosen and not rollout.pending:
            chosen = [min(rollout.idle)]
        if chosen:
            chosen = rng.permutation(chosen).tolist()  # any order: actions follow env_id's order
            rollout.send(chosen, form, "list" if iteration % 2 else "array")
            for first in (0, 4):  # the two clients' slots
                share = [slot for slot in chosen if first <= slot < first + 4]
                subsets += 0 < len(share) < 4
    rollout.drain()
    assert subsets >= 30, f"only {subsets} commands for a strict subset of a client's envs"
    for slot in range(8):
        assert rollout.steps(slot) >= 10, (slot, rollout.steps(slot))
        assert_matches_twin(rollout.records[slot], fns[slot], mode, f"slot {slot}")


# -- 3. batch_size 1 and num_envs -------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_batch_size_one_returns_one_slot_at_a_time(local_envs):
    fns = [functools.partial(make_timed, i, 0.001 * i, 5) for i in range(4)]
    envs = local_envs(fns, num_clients=2, batch_size=1, autoreset_mode=AutoresetMode.SAME_STEP)
    rollout = Rollout(envs, seed=4)
    rollout.start()
    for _ in range(80):
        rollout.send(rollout.recv(), form="list")
    rollout.drain()
    assert all(len(batch) == 1 for batch in rollout.batches)
    for slot in range(4):
        assert rollout.steps(slot) >= 5
        assert_matches_twin(rollout.records[slot], fns[slot], AutoresetMode.SAME_STEP, f"slot {slot}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_full_batches_match_a_lock_step_sync_vector_env(mode, local_envs):
    fns = [functools.partial(make_timed, i, 0.001 * (i % 3), 6) for i in range(8)]
    envs = local_envs(fns, num_clients=4, autoreset_mode=mode)  # batch_size defaults to num_envs
    assert envs.batch_size == 8
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    rng = np.random.default_rng(5)
    space = envs.single_observation_space
    try:
        envs.async_reset(seed=SEED)
        obs, infos = sync.reset(seed=SEED)
        expected = unbatch(space, (obs, np.zeros(8), np.zeros(8, bool), np.zeros(8, bool), infos), 8)
        orders = set()
        for step in range(40):
            results = envs.recv()
            ids = results[4]["env_id"].tolist()
            assert sorted(ids) == list(range(8))
            orders.add(tuple(ids))
            for slot, actual in zip(ids, unbatch(space, results, 8), strict=True):
                assert_same(actual, expected[slot], f"step {step}, slot {slot}")
            actions = rng.integers(0, 3, 8)
            if step % 2:
                envs.send(actions[ids], ids)  # in arrival order
            else:
                envs.send(actions)  # env_id=None: every slot, in slot order
            expected = unbatch(space, sync.step(actions), 8)
        results = envs.recv()
        for slot, actual in zip(results[4]["env_id"].tolist(), unbatch(space, results, 8), strict=True):
            assert_same(actual, expected[slot], f"last step, slot {slot}")
    finally:
        sync.close()


# -- 4. no starvation -------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_no_slot_starves_at_equal_speeds(local_envs):
    fns = [functools.partial(make_timed, i, 0.002, 20) for i in range(8)]
    envs = local_envs(fns, num_clients=4, batch_size=3)
    rollout = Rollout(envs, seed=6)
    rollout.start()
    for _ in range(240):
        rollout.send(rollout.recv())
    rollout.drain()
    counts = np.array([rollout.steps(slot) for slot in range(8)])
    mean = counts.mean()
    assert counts.min() >= 0.6 * mean and counts.max() <= 1.4 * mean, counts
    last_seen = dict.fromkeys(range(8), 0)
    longest = 0
    for index, batch in enumerate(rollout.batches):
        for slot in batch:
            longest = max(longest, index - last_seen[slot])
            last_seen[slot] = index
    assert longest <= 12, f"a slot waited {longest} batches for its result (8 slots, batch_size 3)"


# -- 5. clients joining and leaving -----------------------------------------------------------------


def timed_server(stack, num_envs: int, mode: Any) -> RemoteVectorEnv:
    """A server-form vector of ``num_envs`` slots for TimedEnvs in partial batches of 2, in autoreset ``mode``,
    its clients to come (closed at teardown)."""
    single = TimedEnv()
    envs = RemoteVectorEnv(
        num_envs=num_envs,
        batch_size=2,
        autoreset_mode=mode,
        observation_space=single.observation_space,
        action_space=single.action_space,
        timeout=20,
        connect_timeout=20,
        liveness_timeout=LIVENESS,
    )
    stack.callback(envs.close)
    return envs


CLIENT_SCRIPT = """
import functools, sys
from gym_remote import EnvClient
from tests.envs.partial import make_timed

address, marker = sys.argv[1], sys.argv[2]
fns = [
    functools.partial(make_timed, 4, 0.002, 8, terminate_prob=0.0, stall_at=3, marker=marker),  # no autoreset first
    functools.partial(make_timed, 5, 0.002, 8),
]
EnvClient(address, fns, name="doomed", connect_timeout=30, liveness_timeout=2).run()
"""


def label_of(entry: Entry) -> int:
    return int(np.asarray(entry.obs)[0])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_clients_join_and_leave_while_partial_batches_run(mode, stack, thread_clients, reaper, tmp_path):
    envs = timed_server(stack, 6, mode)
    fast = {label: functools.partial(make_timed, label, 0.002, 8) for label in range(8)}
    for labels in ((0, 1), (2, 3)):
        thread_clients.append(ThreadClient(envs.address, [fast[label] for label in labels], liveness_timeout=LIVENESS))
    rollout = Rollout(envs, seed=7)
    rollout.start()

    # slots 4-5 have no client: their resets wait for one, the other slots run meanwhile
    for _ in range(20):
        slots = rollout.recv()
        assert set(slots) <= {0, 1, 2, 3}, slots
        rollout.send(slots)
    with pytest.raises(ValueError, match="already have an action in flight"):
        envs.send([0], [4])  # still resetting

    # a client joins for slots 4-5; slot 4's env stalls at its 3rd step, and its process is killed
    marker = tmp_path / "stalled"
    doomed = reaper.popen([sys.executable, "-c", CLIENT_SCRIPT, envs.address, str(marker)])
    killer = KillWhenMarked(doomed.pid, marker, timeout=60)

    def lost_both() -> bool:
        rows = [row for row in envs.stats() if row["slot"] in (4, 5)]
        return killer.killed.is_set() and not any(row["served"] and row["pid"] == doomed.pid for row in rows)

    def allowed(slot: int) -> bool:
        if slot == 5:  # one step, then idle: its client is lost while it has nothing in flight
            return rollout.steps(5) < 1
        if slot == 4:  # its 3rd step (the stalled one) only once slot 5 is idle, and no 4th: over the data
            # plane the loss can come back (as the 3rd step's result) before the killer has said it killed
            return rollout.steps(4) < 2 or (rollout.steps(4) == 2 and 5 in rollout.idle and rollout.steps(5) >= 1)
        return True

    deadline = time.monotonic() + 40
    while not killer.killed.is_set():
        assert time.monotonic() < deadline, f"slot 4's env never stalled: steps {rollout.steps(4)}"
        rollout.recv()
        sendable = [slot for slot in sorted(rollout.idle) if allowed(slot)]
        if sendable:
            rollout.send(sendable)
    # the replacement takes slots 4-5 as soon as the loss is noticed; slot 5's loss is reported all the same
    thread_clients.append(ThreadClient(envs.address, [fast[6], fast[7]], liveness_timeout=LIVENESS))
    # no new actions until the loss is noticed
    while not lost_both():
        assert time.monotonic() < deadline, (
            f"slot 4's client was not lost in time: exit={doomed.poll()} pending={rollout.pending} "
            f"served={[row['served'] for row in envs.stats()]}"
        )
        try:
            if rollout.pending:
                rollout.recv(timeout=0.3)
            else:
                time.sleep(0.05)
        except RemoteTimeoutError:
            pass
    assert 5 in rollout.idle and rollout.steps(5) == 1 and rollout.steps(4) + (4 in rollout.pending) == 3
    rollout.send(sorted(rollout.idle))  # slot 5's result reports the loss (its action is dropped)

    def after_loss(slot: int) -> int:
        records = rollout.records[slot]
        losses = [index for index, entry in enumerate(records) if entry.info.get("client_lost")]
        return len(records) - 1 - losses[0] if losses else -1

    deadline = time.monotonic() + 40
    while min(after_loss(4), after_loss(5)) < 5:
        assert time.monotonic() < deadline, {slot: after_loss(slot) for slot in (4, 5)}
        rollout.send(rollout.recv())
    rollout.drain()
    assert killer.killed.is_set()

    # the slots of the clients that stayed: exactly their twins, no loss reported
    for slot in range(4):
        records = rollout.records[slot]
        assert not any(entry.truncated and entry.info.get("client_lost") for entry in records), slot
        assert rollout.steps(slot) >= 20
        assert_matches_twin(records, fast[label_of(records[0])], mode, f"slot {slot}")
    assert sorted(label_of(rollout.records[slot][0]) for slot in range(4)) == [0, 1, 2, 3]

    # the slots of the lost client: their episode until the loss, the report, then the replacement's
    for slot, label, new_label in ((4, 4, 6), (5, 5, 7)):
        records = rollout.records[slot]
        losses = [index for index, entry in enumerate(records) if entry.info.get("client_lost")]
        assert len(losses) == 1, (slot, [entry.info for entry in records])
        before, report, after = records[: losses[0]], records[losses[0]], records[losses[0] + 1 :]
        assert before[0].event == ("reset", SEED + slot) and label_of(before[0]) == label
        assert_matches_twin(before, fast[label], mode, f"slot {slot} before its client was lost")
        assert report.event[0] == "step"
        assert report.truncated and not report.terminated and report.reward == 0.0, report
        if mode is AutoresetMode.NEXT_STEP:
            assert_same(report.obs, before[-1].obs, f"slot {slot}: the loss report's observation")
            assert report.info == {"client_lost": True}, report.info
            # the replacement's first step is an autoreset step: it delivers its (unseeded) reset
            fresh = [replace(after[0], event=("reset", None)), *after[1:]]
        else:
            assert_same(report.info.pop("final_obs"), before[-1].obs, f"slot {slot}: final_obs")
            assert report.info.pop("final_info") == {"client_lost": True}
            assert bool(report.info.pop("client_lost"))
            fresh = [replace(report, event=("reset", None), truncated=False), *after]
        assert label_of(fresh[0]) == new_label
        assert len(fresh) >= 4
        assert_matches_twin(fresh, fast[new_label], mode, f"slot {slot} after the replacement joined")


# -- 6. what the API refuses ------------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_constructor_checks_batch_size_and_autoreset_mode():
    single = TimedEnv()
    spaces = {"observation_space": single.observation_space, "action_space": single.action_space}
    for batch_size in (0, -1, 5):
        with pytest.raises(ValueError, match="batch_size"):
            RemoteVectorEnv(num_envs=4, batch_size=batch_size, **spaces)
    with pytest.raises(ValueError, match="autoreset"):
        RemoteVectorEnv(num_envs=4, batch_size=2, autoreset_mode=AutoresetMode.DISABLED, **spaces)
    envs = RemoteVectorEnv(num_envs=4, batch_size=4, autoreset_mode=AutoresetMode.DISABLED, **spaces)
    try:
        for call in (envs.async_reset, lambda: envs.send([0], [0]), envs.recv):
            with pytest.raises(ValueError, match="DISABLED"):
                call()
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_send_and_recv_refuse_what_the_api_forbids_without_side_effects(local_envs):
    fns = [functools.partial(make_timed, i, 0.0, 6) for i in range(4)]
    envs = local_envs(fns, num_clients=2, batch_size=2)
    with pytest.raises(NoAsyncCallError):
        envs.recv()
    with pytest.raises(ResetNeeded):
        envs.send([0], [0])
    rollout = Rollout(envs, seed=8)
    rollout.start()
    zeros = np.zeros(4, dtype=np.int64)
    for call in (
        lambda: envs.step(zeros),
        lambda: envs.reset(seed=1),
        lambda: envs.step_async(zeros),
        lambda: envs.reset_async(seed=1),
        lambda: envs.async_reset(seed=1),
    ):
        with pytest.raises(AlreadyPendingCallError):
            call()
    with pytest.raises(ValueError, match="already have an action in flight"):
        envs.send([1], [2])  # its reset is in flight
    rollout.drain()

    bad_ids = {
        (4,): "from 0 to 3, got \\[4\\]",
        (-1,): "from 0 to 3",
        (0, 2, 0): "names a slot twice: \\[0, 2, 0\\]",
        ((0, 1),): "1-d array",
        (): "empty",
        (0.5,): "1-d array of slot numbers",
    }
    for ids, message in bad_ids.items():
        with pytest.raises(ValueError, match=message):
            envs.send(np.ones(max(1, len(ids)), dtype=np.int64), list(ids))
    for actions, ids in (([1, 1, 1], [0, 1]), (np.ones(1, np.int64), [0, 1]), (np.ones(3, np.int64), None)):
        with pytest.raises(ValueError):
            envs.send(actions, ids)
    with pytest.raises(NoAsyncCallError):  # none of the refused sends left a slot busy
        envs.recv()

    rollout.send([3, 0, 2, 1])
    first = rollout.recv()
    time.sleep(0.3)  # the other results have arrived, but recv() has not returned them
    others = sorted(set(range(4)) - set(first))
    with pytest.raises(ValueError, match="already have an action in flight"):
        envs.send([1], [others[0]])
    with pytest.raises(ValueError, match="already have an action in flight"):
        envs.send([1, 1], [first[0], others[1]])
    rollout.send(first)  # the returned slots take actions again, while the others wait for recv()
    with pytest.raises(AlreadyPendingCallError):
        envs.step(zeros)
    rollout.drain()

    # nothing is busy: the lock-step calls work again on the same object, and partial batches after them
    actions = np.array([2, 0, 1, 2])
    results = envs.step(actions)
    for slot, result in enumerate(unbatch(envs.single_observation_space, results, 4)):
        rollout.records[slot].append(Entry(("step", int(actions[slot])), *result))
    for slot in range(4):
        assert_matches_twin(rollout.records[slot], fns[slot], AutoresetMode.NEXT_STEP, f"slot {slot}")
    results = envs.reset(seed=3)
    obs, infos = results
    batch = (obs, np.zeros(4), np.zeros(4, np.bool_), np.zeros(4, np.bool_), infos)
    for slot, result in enumerate(unbatch(envs.single_observation_space, batch, 4)):
        rollout.records[slot].append(Entry(("reset", 3 + slot), *result))
    rollout.start(seed=11)  # partial batches again, after lock-step calls
    for _ in range(10):
        rollout.send(rollout.recv())
    rollout.drain()
    for slot in range(4):
        assert_matches_twin(rollout.records[slot], fns[slot], AutoresetMode.NEXT_STEP, f"slot {slot} (whole history)")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_recv_timeout_leaves_the_slow_slots_in_flight(mode, local_envs):
    # slot 1: slow, and its episode never ends (an autoreset step would not sleep)
    fns = [functools.partial(make_timed, 0, 0.0, 5), functools.partial(make_timed, 1, 0.8, 100, 0.0)]
    envs = local_envs(fns, num_clients=2, batch_size=2, autoreset_mode=mode)
    rollout = Rollout(envs, seed=10)
    rollout.start()
    rollout.drain()
    for _ in range(4):
        rollout.send([0, 1])
        started = time.monotonic()
        with pytest.raises(RemoteTimeoutError, match="1 of the 2 results"):
            envs.recv(timeout=0.2)
        assert time.monotonic() - started < 0.7, "recv(timeout=0.2) waited for the slow slot"
        for slot in (0, 1):  # both still outstanding: the slow one working, the fast one's result kept
            with pytest.raises(ValueError, match="already have an action in flight"):
                envs.send([1], [slot])
        with pytest.raises(AlreadyPendingCallError):
            envs.reset()
        assert sorted(rollout.recv()) == [0, 1]  # a later recv returns both
    rollout.drain()
    for slot in (0, 1):
        assert_matches_twin(rollout.records[slot], fns[slot], mode, f"slot {slot}")


@pytest.mark.timeout(60)
def test_env_raising_in_step_frees_its_slot_and_the_others_go_on(local_envs):
    fns = [functools.partial(make_timed, i, 0.0, 8) for i in range(4)]
    envs = local_envs(fns, num_clients=2, batch_size=2)  # slots 0-1 in one client, 2-3 in the other
    rollout = Rollout(envs, seed=11)
    rollout.start()
    rollout.drain()
    rollout.send([2])
    envs.send([5], [1])  # not in Discrete(3): the env raises, without changing
    with pytest.raises(RemoteEnvError, match="slot 1"):
        while True:  # slot 2's result may come first
            rollout.recv()
    rollout.send([1, 3])  # slot 1 takes actions again
    rollout.drain()
    for _ in range(10):
        rollout.send(rollout.recv() if rollout.pending else [0, 1, 2, 3])
    rollout.drain()
    for slot in range(4):
        assert_matches_twin(rollout.records[slot], fns[slot], AutoresetMode.NEXT_STEP, f"slot {slot}")


@pytest.mark.timeout(60)
def test_env_error_does_not_lose_the_results_of_other_slots_in_the_same_command(local_envs):
    fns = [functools.partial(make_timed, i, 0.0, 8) for i in range(4)]
    envs = local_envs(fns, num_clients=2, batch_size=2)  # slots 0-1 in one client
    rollout = Rollout(envs, seed=12)
    rollout.start()
    rollout.drain()
    envs.send([1, 5], [0, 1])  # one command for slots 0 and 1; slot 1's env raises
    rollout.pending[0] = ("step", 1)
    with pytest.raises(RemoteEnvError, match="slot 1"):
        envs.recv()
    # slot 0's env stepped: its result must still come (it is not lost), and slot 1 takes actions again
    rollout.send([1])
    rollout.drain()
    for slot in (0, 1):
        assert_matches_twin(rollout.records[slot], fns[slot], AutoresetMode.NEXT_STEP, f"slot {slot}")


@pytest.mark.timeout(60)
def test_an_env_raising_first_in_its_command_leaves_the_others_of_that_command_stepped(local_envs):
    fns = [functools.partial(make_timed, i, 0.0, 8) for i in range(4)]
    envs = local_envs(fns, num_clients=2, batch_size=2)  # slots 0-1 in one client, 2-3 in the other
    rollout = Rollout(envs, seed=14)
    rollout.start()
    rollout.drain()
    envs.send([5, 1, 0, 2], [0, 1, 2, 3])  # one command per client; slot 0's env raises, before slot 1's steps
    rollout.pending.update({1: ("step", 1), 2: ("step", 0), 3: ("step", 2)})
    with pytest.raises(RemoteEnvError, match="slot 0") as raised:
        while True:  # the other client's results may come first
            rollout.recv()
    assert raised.value.slot == 0
    rollout.drain()  # slot 1 was stepped all the same: its result comes; slot 0 has nothing in flight
    assert rollout.records[1][-1].event == ("step", 1)
    rollout.send([0])  # slot 0 takes actions again
    rollout.drain()
    for slot in range(4):
        assert_matches_twin(rollout.records[slot], fns[slot], AutoresetMode.NEXT_STEP, f"slot {slot}")


@pytest.mark.timeout(60)
def test_a_client_killed_mid_step_is_noticed_while_other_slots_keep_running(local_envs, tmp_path):
    marker = tmp_path / "stalled"
    fns = [
        functools.partial(make_timed, 0, 0.002, 8),
        functools.partial(make_timed, 1, 0.002, 8),
        functools.partial(make_timed, 2, 0.002, 8, stall_at=1, marker=str(marker)),
    ]
    envs = local_envs(fns, num_clients=3, batch_size=1, max_restarts=5)
    rollout = Rollout(envs, seed=13)
    rollout.start()
    rollout.drain()
    victim = envs._launcher.pids[2]
    killer = KillWhenMarked(victim, marker, timeout=20)
    rollout.send([0, 1, 2])  # slot 2's env stalls; its process is killed mid-step
    wait_until(killer.killed.is_set, 20, "the stalled client to be killed")
    started = time.monotonic()
    # the other slots keep running: slot 2's loss must be reported within a few liveness timeouts
    while not any(entry.info.get("client_lost") for entry in rollout.records[2]):
        assert time.monotonic() - started < 5 * LIVENESS, "the killed client's slot never reported its loss"
        others = [slot for slot in rollout.recv() if slot != 2]
        if others:
            rollout.send(others)
    report = rollout.records[2][-1]
    assert report.truncated and report.reward == 0.0


@pytest.mark.timeout(60)
def test_recv_sends_nothing_from_inside_a_wait_predicate(thread_clients, monkeypatch):
    """A wait's predicate only looks: the commands parked for slots without a client are sent by recv()
    itself once a client joins, never while the server asks the predicate whether it is done."""
    single = TimedEnv()
    envs = RemoteVectorEnv(
        num_envs=2,
        batch_size=2,
        observation_space=single.observation_space,
        action_space=single.action_space,
        timeout=20,
        connect_timeout=20,
    )
    try:
        server = envs._server
        in_predicate = []
        sent_from_predicate = []
        original_wait, original_start = server.wait, server.start

        def watched_wait(done, deadline):
            def watched_done():
                in_predicate.append(True)
                try:
                    return done()
                finally:
                    in_predicate.pop()

            return original_wait(watched_done, deadline)

        def watched_start(*args, **kwargs):
            if in_predicate:
                sent_from_predicate.append(kwargs.get("what"))
            return original_start(*args, **kwargs)

        monkeypatch.setattr(server, "wait", watched_wait)
        monkeypatch.setattr(server, "start", watched_start)
        envs.async_reset(seed=3)  # no client yet: both resets are parked
        joiner = threading.Timer(
            0.5,
            lambda: thread_clients.append(
                ThreadClient(envs.address, [functools.partial(make_timed, label) for label in (0, 1)])
            ),
        )
        joiner.start()
        try:
            observations, _, _, _, infos = envs.recv()
        finally:
            joiner.join(5)
        assert sorted(infos["env_id"].tolist()) == [0, 1] and observations.shape == (2, 3)
        assert sent_from_predicate == [], f"commands sent from inside a wait predicate: {sent_from_predicate}"
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_a_lost_client_with_an_idle_slot_is_replaced_while_the_loss_of_that_slot_is_still_unreported():
    """A client serving slots 0 and 1 dies with slot 0 in flight and slot 1 idle. recv() reports slot 0's
    loss; slot 0 gets its next action; its replacement, which needs slots 0 and 1, must not wait behind the
    loss of slot 1, which is reported only when slot 1 is next stepped: the next recv() returns slot 0
    served by the replacement, and slot 1's loss is then reported exactly once."""
    envs = RemoteVectorEnv(
        [make_cartpole] * 4, num_clients=2, batch_size=2, timeout=30, connect_timeout=30, liveness_timeout=LIVENESS
    )
    pids = set(envs.launcher.pids)
    try:
        envs.async_reset(seed=0)
        for _ in range(2):
            envs.recv()
        victim = envs.stats()[0]["pid"]
        assert envs.stats()[1]["pid"] == victim and envs.stats()[2]["pid"] != victim
        os.kill(victim, signal.SIGSTOP)  # it takes slot 0's action but never answers it
        envs.send(np.array([1]), np.array([0]))
        os.kill(victim, signal.SIGKILL)
        _, _, _, truncations, infos = envs.recv()
        assert infos["env_id"].tolist() == [0] and truncations.tolist() == [True] and infos["client_lost"][0]
        envs.send(np.array([1]), np.array([0]))
        started = time.monotonic()
        _, rewards, _, truncations, infos = envs.recv(timeout=LIVENESS + 10)
        elapsed = time.monotonic() - started
        assert infos["env_id"].tolist() == [0] and not truncations.any() and "client_lost" not in infos, infos
        assert elapsed < LIVENESS + 5, f"slot 0's replacement served it after {elapsed:.1f} s"
        pids.update(envs.launcher.pids)
        served = envs.stats()
        assert served[0]["pid"] not in (None, victim) and served[0]["epoch"] == 2, served[0]
        losses = 0
        for _ in range(5):  # slot 1's loss: reported when it is next stepped, and only then
            envs.send(np.array([1, 1]), np.array([0, 1]))
            results = [envs.recv(timeout=LIVENESS + 10)]
            if len(results[0][4]["env_id"]) < 2:
                results.append(envs.recv(timeout=LIVENESS + 10))
            for _, _, _, truncations, infos in results:
                for row, slot in enumerate(infos["env_id"].tolist()):
                    lost = bool(infos.get("client_lost", np.zeros(2, bool))[row])
                    assert slot == 1 or not lost, f"slot 0 reported lost again: {infos}"
                    assert truncations[row] or not lost
                    losses += lost
        assert losses == 1, f"slot 1's loss was reported {losses} times"
    finally:
        try:
            pids.update(envs.launcher.pids)
            envs.close()
        finally:
            kill_local_clients(pids)


REPLACEMENT_SCRIPT = """
import functools, sys
from gym_remote import EnvClient
from tests.envs.partial import make_timed, make_timed_exiting_after_reset

address, label, exit_after = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
fn = functools.partial(make_timed_exiting_after_reset, label, exit_after) if exit_after else functools.partial(
    make_timed, label, 0.0, 12, 0.0
)
EnvClient(address, [fn], name=f"client-{label}", connect_timeout=30, liveness_timeout=2).run()
"""


@pytest.mark.timeout(60)
def test_a_replacement_lost_right_after_its_reset_landed_has_its_own_loss_reported(stack, thread_clients, reaper):
    """SAME_STEP partial batches: client A of a slot is lost; its loss report waits for a replacement's reset;
    replacement B resets (its reset lands) and is lost at once, while recv() still waits for the other slot. recv()
    reports A's loss with B's reset; the slot's next result must report B's loss (B's episode ended with
    it), with replacement C's reset, rather than step C's env as if nothing had happened."""
    envs = timed_server(stack, 2, "SameStep")

    def client(label: int, exit_after: float = 0.0):
        return reaper.popen([sys.executable, "-c", REPLACEMENT_SCRIPT, envs.address, str(label), str(exit_after)])

    first = client(100)
    thread_clients.append(ThreadClient(envs.address, [functools.partial(make_timed, 1, 3.0, 50, 0.0)]))
    envs.reset(seed=0)  # (waits for both clients)
    slot = [row["pid"] for row in envs.stats()].index(first.pid)  # A's; the slow client serves the other
    envs.async_reset(seed=0)
    envs.recv()
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    envs.send(np.array([0, 0]), np.array([0, 1]))  # the slow slot takes 3 s; A's waits for a replacement's reset
    second = client(200, exit_after=0.2)
    observations, _, _, truncations, infos = envs.recv()
    assert sorted(infos["env_id"].tolist()) == [0, 1]
    row = infos["env_id"].tolist().index(slot)
    assert truncations[row] and infos["client_lost"][row], infos
    assert observations[row, 0] == 200  # B's reset starts the next episode
    second.wait(10)
    third = client(300)
    envs.send(np.array([0]), np.array([slot]))
    observations, _, _, truncations, infos = envs.recv(timeout=20)
    assert infos["env_id"].tolist() == [slot]
    assert truncations[0] and infos["client_lost"][0], f"B's loss was not reported: {observations}, {infos}"
    assert infos["final_obs"][0][0] == 200 and observations[0, 0] == 300, (observations, infos)
    assert envs.stats()[slot]["pid"] == third.pid


@pytest.mark.timeout(60)
def test_a_loss_report_waiting_for_a_replacement_in_line_comes_at_once(stack, reaper):
    """SAME_STEP partial batches: a client is lost with its slot in flight while another waits in line. The
    waiting client takes the slot at once, and the loss report (with its reset) is returned by the same
    recv() without waiting for anything else to happen."""
    envs = timed_server(stack, 2, "SameStep")

    def client(label: int):
        return reaper.popen([sys.executable, "-c", REPLACEMENT_SCRIPT, envs.address, str(label), "0"])

    first, second = client(100), client(200)
    envs.reset(seed=0)  # (waits for both clients)
    client(300)

    def waits_in_line() -> bool:
        envs.step(np.array([0, 0]))  # (the learner takes in the HELLO while it steps)
        return envs.server_stats()["waiting"] == 1

    wait_until(waits_in_line, 30, "the third client to wait in line")
    envs.async_reset(seed=1)
    envs.recv()
    slot = [row["pid"] for row in envs.stats()].index(first.pid)
    os.kill(first.pid, signal.SIGSTOP)
    envs.send(np.array([0]), np.array([slot]))  # never answered
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    started = time.monotonic()
    observations, _, _, truncations, infos = envs.recv(timeout=10)
    assert time.monotonic() - started < 5
    assert infos["env_id"].tolist() == [slot] and truncations[0] and infos["client_lost"][0], infos
    assert observations[0, 0] == 300, observations  # the replacement's reset
    assert second.poll() is None
