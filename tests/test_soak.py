"""The chaos soak (``tests/soak``): its checker alone, then the soak itself for 60 s on a fixed and a random seed.

The checker is pure: it is fed rows that a ``SyncVectorEnv`` of soak envs really gives (in this process), and
rows spoiled in the ways the library could spoil them; it must let the first through and catch the others. The
soak runs as its own process (``python -m tests.soak``), whose exit status says whether every check held; its
output (the seed first, on a failure the event log) is shown when it fails.
"""

from __future__ import annotations

import itertools
import random
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from tests.envs import soak as soak_env
from tests.soak.checker import (
    NEXT_STEP,
    SAME_STEP,
    Call,
    Checker,
    CheckFailed,
    Reset,
    Row,
    Step,
    reset_rows_of,
    rows_of,
)

SOAK_SECONDS = 60
FIXED_SEED = 16


# -- the checker, fed rows from a SyncVectorEnv -----------------------------------------------------


class Rows:
    """Two soak envs in a ``SyncVectorEnv`` of ``mode``, as one client (this process) serving slots 0 and 1."""

    def __init__(self, mode: str) -> None:
        soak_env._made = itertools.count()  # this "client's" envs are 0 and 1
        self.envs = SyncVectorEnv([soak_env.make_env, soak_env.make_env], autoreset_mode=AutoresetMode(mode))
        self.checker = Checker(2, mode)
        self.checker.client_started(soak_env.os.getpid(), 2, "uds", 0.0)
        self.time = 1.0
        self.rng = np.random.default_rng(0)

    def call(self, kind: str) -> Call:
        self.time += 1.0
        return Call(kind, self.time, self.time + 0.5)

    def reset(self, seed: int = 10) -> None:
        rows = reset_rows_of(self.envs.reset(seed=seed), 2, 0)
        call = self.call("reset")
        self.checker.rows(call, {slot: (Reset(seed + slot), rows[slot], call.start) for slot in range(2)})

    def step(self) -> list[Row]:
        actions = self.rng.integers(0, soak_env.ACTIONS, 2)
        rows = rows_of(self.envs.step(actions), range(2), 0)
        call = self.call("step")
        self.checker.rows(call, {slot: (Step(int(actions[slot])), rows[slot], call.start) for slot in range(2)})
        return rows

    def feed(self, slot: int, action: int, row: Row) -> None:
        call = self.call("recv")
        self.checker.rows(call, {slot: (Step(action), row, call.start)})


@pytest.fixture(params=[NEXT_STEP, SAME_STEP])
def rows(request):
    made = Rows(request.param)
    yield made
    made.envs.close()


def test_the_checker_accepts_what_the_envs_really_give(rows):
    rows.reset()
    ended = 0
    for _ in range(60):
        ended += sum(row.terminated or row.truncated for row in rows.step())
    assert ended >= 8  # episodes of 2 to 14 steps: autoresets were checked too
    assert rows.checker.counts.rows == 2 + 120


@pytest.mark.parametrize("spoiled", ["another action", "rows swapped"])
def test_the_checker_catches_a_spoiled_row(rows, spoiled):
    rows.reset()
    rows.step()
    taken = rows_of(rows.envs.step(np.array([1, 2])), range(2), 0)
    told, given = ([3, 2], taken) if spoiled == "another action" else ([1, 2], taken[::-1])
    call = rows.call("step")
    with pytest.raises(CheckFailed, match="slot 0.*no expectation allows"):
        rows.checker.rows(call, {slot: (Step(told[slot]), given[slot], call.start) for slot in range(2)})


def test_the_checker_catches_a_final_obs_repeated_in_a_later_row():
    rows = Rows(SAME_STEP)
    rows.reset()
    for _ in range(20):  # episodes end within 14 steps
        if "final_obs" in rows.step()[0].info:
            break
    taken = rows_of(rows.envs.step(np.array([1, 1])), range(2), 0)
    assert not (taken[0].terminated or taken[0].truncated)  # step 1 of an episode of 2 steps or more
    stale = replace(taken[0], info={**taken[0].info, "final_obs": taken[0].obs, "final_info": {"soak_step": 3}})
    call = rows.call("recv")
    with pytest.raises(CheckFailed, match="slot 0.*no expectation allows"):
        rows.checker.rows(call, {0: (Step(1), stale, call.start)})


def loss_report(rows: Rows, last: Row) -> Row:
    """What the library reports for a lost client (NEXT_STEP: the last observation stays)."""
    assert rows.checker.mode == NEXT_STEP
    return Row(last.obs, 0.0, False, True, {"client_lost": True})


def test_the_checker_catches_a_loss_report_without_a_fault():
    rows = Rows(NEXT_STEP)
    rows.reset()
    last = rows.step()[0]
    with pytest.raises(CheckFailed, match="no fault that loses it"):
        rows.feed(0, 1, loss_report(rows, last))


def test_the_checker_takes_one_loss_report_and_catches_a_duplicated_one():
    rows = Rows(NEXT_STEP)
    rows.reset()
    last = rows.step()[0]
    rows.checker.fault("kill", soak_env.os.getpid(), rows.time + 0.1, 0.0)
    assert [slot for slot, _ in rows.checker.outstanding_reports()] == [0, 1]  # both slots owe a report
    rows.feed(0, 1, loss_report(rows, last))
    assert [slot for slot, _ in rows.checker.outstanding_reports()] == [1]
    with pytest.raises(CheckFailed, match="no fault explains it"):
        rows.feed(0, 1, loss_report(rows, last))  # the same loss, reported again on the same slot


def test_the_checker_catches_a_missing_loss_report():
    rows = Rows(NEXT_STEP)
    rows.reset()
    rows.step()
    rows.checker.fault("kill", soak_env.os.getpid(), rows.time + 0.1, 0.0)
    with pytest.raises(CheckFailed, match="outlived the fault"):
        rows.step()  # the killed client's envs answer a command sent after the kill: no report came
    assert rows.checker.outstanding_reports()


def test_the_checker_catches_a_new_client_before_the_loss_report():
    rows = Rows(NEXT_STEP)
    rows.reset()
    last = rows.step()[0]
    rows.checker.fault("freeze", soak_env.os.getpid(), rows.time + 0.1, 3.0)
    newcomer = replace(last, obs=(last.obs[0] + 1, 0, 1, 0, 0, *soak_env.episode_end(last.obs[0] + 1, 0, 1), 0, -1))
    rows.checker.client_started(last.obs[0] + 1, 1, "uds", rows.time)
    with pytest.raises(CheckFailed, match="no expectation allows"):
        rows.feed(0, 1, replace(newcomer, reward=0.0, terminated=False, truncated=False, info={"soak_step": 0}))


def test_an_interrupted_step_leaves_both_outcomes_open_until_the_next_row():
    for reached in (False, True):
        rows = Rows(NEXT_STEP)
        rows.reset()
        rows.step()
        actions = [3, 4]
        call = rows.call("step")
        rows.checker.interrupted(call, {0: Step(3), 1: Step(4)})
        assert all(len(rows.checker.slots[slot]) > 1 for slot in range(2))
        if reached:
            rows.envs.step(np.array(actions))  # the envs took the interrupted step; its results were lost
        rows.step()
        assert all(len(rows.checker.slots[slot]) == 1 for slot in range(2))


def test_stats_must_agree_with_the_episodes_being_played():
    rows = Rows(NEXT_STEP)
    rows.reset()
    rows.step()
    pid = soak_env.os.getpid()
    served = {"served": True, "pid": pid, "plane": "uds"}
    rows.checker.stats([served, served])
    with pytest.raises(CheckFailed, match="no client serves it"):
        rows.checker.stats([served, {"served": False}])
    with pytest.raises(CheckFailed, match="plane"):
        rows.checker.stats([served, {**served, "plane": "zmq"}])


# -- the soak ------------------------------------------------------------------------------------------


def run_soak_process(reaper, tmp_path, seed: int) -> None:
    output = tmp_path / f"soak-{seed}.out"
    with open(output, "w") as out:
        process = reaper.popen(
            [sys.executable, "-m", "tests.soak", "--seconds", str(SOAK_SECONDS), "--seed", str(seed)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            code = process.wait(timeout=SOAK_SECONDS + 240)
        except subprocess.TimeoutExpired:
            code = None
    text = output.read_text(errors="replace")
    assert text.startswith(f"soak seed={seed} "), text[:500]  # the seed comes first
    if code != 0:
        pytest.fail(f"the soak of seed {seed} failed (exit status {code}):\n{text[-60000:]}", pytrace=False)
    assert "soak passed" in text and "rows checked" in text, text[-3000:]
    reports = re.search(r"status reports checked: (\d+)", text)
    assert reports is not None and int(reports.group(1)) >= SOAK_SECONDS / 3, text[-3000:]  # (asked every 0.5-1.5 s)


@pytest.mark.timeout(SOAK_SECONDS + 300)
def test_the_soak_holds_for_a_minute_on_a_fixed_seed(reaper, tmp_path):
    run_soak_process(reaper, tmp_path, FIXED_SEED)


@pytest.mark.timeout(SOAK_SECONDS + 300)
def test_the_soak_holds_for_a_minute_on_a_random_seed(reaper, tmp_path):
    seed = random.SystemRandom().randrange(2**31)
    print(f"soak seed {seed}")
    run_soak_process(reaper, tmp_path, seed)
