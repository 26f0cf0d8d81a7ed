"""The soak's checker: what every slot may show next, and whether every loss is reported exactly once.

Pure: no socket, no process, no clock (the soak passes times in), so it is unit-tested on its own
(``tests/test_soak.py``). The env (``tests/envs/soak.py``) makes every row predictable from the slot's
env state and the action the learner sent, so the checker predicts each row exactly.

Each slot holds a set of **hypotheses**, usually one:

* :class:`Known`: an env whose state the checker knows (pid, index, episode, step, checksum, ...),
  served by a :class:`Member` (one client session as the learner saw it), and the observation the
  learner's batch holds for the slot (a NEXT_STEP loss report repeats it; SAME_STEP makes it ``final_obs``);
* :class:`Awaiting`: the slot's last membership ended (its loss was reported); a new one serves it, whose
  first row the learner has not seen: a reset row (``unseen`` None), or, after an interrupted call
  swallowed that row, the env's next step after an unseen reset.

A row must match at least one hypothesis, which the row then narrows to its successors. An interrupted
call (a KeyboardInterrupt inside the library) may or may not have reached the envs: every hypothesis
is kept and joined by the ones where it did, and the next row decides.

Losses: the soak tells the checker of every fault that must end a membership (:class:`Fault`: SIGKILL,
SIGTERM, SIGSTOP beyond ``liveness_timeout``). A loss report on a slot must be explained by such a fault
of the membership that served it, each fault at most once per slot and at most once per env its client
hosted; a membership seen serving a slot whose client had such a fault must report it there (before any
row of a later membership), and must stop answering commands sent once the fault has taken effect.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tests.envs.soak import CHECKSUM, EPISODE, FIELDS, INDEX, NO_SEED, PID, episode_end, fold

NEXT_STEP, SAME_STEP = "NextStep", "SameStep"
Obs = tuple[int, ...]  # the first len(FIELDS) entries of an observation (the payload is checked apart)

LOSS_KINDS = ("kill", "term", "freeze")  # faults that must end a membership

TOLERANCES = {
    "landed_loss": "a loss report may show the observation of a result its client answered before it was lost "
    "in the same call (that result itself discarded)",
    "stale_final": "a row that ends no episode may carry the final_obs and final_info of an earlier row",
}
"""Library faults the checker can be told to let pass (``--tolerate``), to look past a known bug for
others. The soak in CI tolerates none."""


class CheckFailed(AssertionError):
    """A row, a call's result or a loss report that the library must not have produced."""


# -- facts the soak gives the checker --------------------------------------------------------------


@dataclass
class Fault:
    """A fault that must end the membership of client ``pid`` (``size`` envs): ``kind`` in LOSS_KINDS.

    ``start``: when the signal went out; ``end``: for a freeze, when SIGCONT went out (None while frozen).
    ``takes_effect``: seconds after ``start`` from which no command sent may be answered by the membership.
    """

    kind: str
    pid: int
    size: int
    start: float
    takes_effect: float
    end: float | None = None
    number: int = 0
    reported: set[int] = field(default_factory=set)  # slots whose loss report this fault explained

    def applies_to(self, member: Member) -> bool:
        """Whether this fault ended ``member`` (a freeze: only sessions the learner saw before SIGCONT)."""
        if member.pid != self.pid:
            return False
        return self.kind != "freeze" or self.end is None or member.first_delivered < self.end

    def in_effect_since(self, since: float) -> bool:
        """Whether this fault may have ended a membership that began at ``since`` or later: it came after, or
        was still on (a frozen client can be admitted from the line; a killed one, before its death is seen)."""
        if self.start >= since - 0.5:
            return True
        if self.kind == "freeze":
            return self.end is None or self.end > since - 0.5
        return self.start > since - 5.0

    def __str__(self) -> str:
        return f"fault #{self.number} ({self.kind} of pid {self.pid} at {self.start:.3f})"


@dataclass(frozen=True)
class Member:
    """One membership as the learner saw it: the client's pid and when its first row was delivered."""

    pid: int
    first_delivered: float


@dataclass(frozen=True)
class Call:
    """A learner call: its kind, when it started and ended (commands it sent went out in between)."""

    kind: str
    start: float
    end: float


@dataclass(frozen=True)
class Step:
    action: int


@dataclass(frozen=True)
class Reset:
    seed: int | None


Event = Step | Reset


@dataclass(frozen=True)
class Row:
    """One slot's result: the observation's head (``FIELDS``), reward, flags and the slot's info."""

    obs: Obs
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    payload_ok: bool = True

    def describe(self) -> str:
        named = ", ".join(f"{name}={value}" for name, value in zip(FIELDS, self.obs))
        flags = f"terminated={self.terminated} truncated={self.truncated}"
        return f"obs[{named}] reward={self.reward} {flags} info={self.info}"

    def brief(self) -> str:
        """pid/index episode.step and marks: ``T`` terminated, ``t`` truncated, ``L`` a loss, ``F`` a final_obs."""
        marks = (
            "T" * self.terminated + "t" * self.truncated + "L" * self.reports_loss + "F" * ("final_obs" in self.info)
        )
        return f"{self.obs[0]}/{self.obs[1]} {self.obs[2]}.{self.obs[3]}{marks}"

    @property
    def reports_loss(self) -> bool:
        return bool(self.info.get("client_lost"))


# -- what an env shows -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Env:
    """The state of one env of one client, as the checker predicts it."""

    pid: int
    index: int
    episode: int
    step: int
    checksum: int
    length: int
    terminates: bool
    tag: int
    seed: int

    @classmethod
    def after_reset(cls, pid: int, index: int, episode: int, seed: int | None) -> Env:
        length, terminates = episode_end(pid, index, episode)
        return cls(pid, index, episode, 0, 0, length, terminates, 0, NO_SEED if seed is None else seed)

    @property
    def ended(self) -> bool:
        return self.step >= self.length

    @property
    def obs(self) -> Obs:
        return (self.pid, self.index, self.episode, self.step, self.checksum, self.length, self.tag, self.seed)

    def reset(self, seed: int | None) -> Env:
        return Env.after_reset(self.pid, self.index, self.episode + 1, seed)

    def state(self) -> tuple[int, ...]:
        """What ``call("state")`` returns."""
        return (self.pid, self.index, self.episode, self.step, self.checksum, self.tag)


def step_row(env: Env, action: int, mode: str) -> tuple[Row, Env]:
    """The row ``env`` gives for ``action`` in autoreset ``mode``, and the env's state after it."""
    if mode == NEXT_STEP and env.ended:  # the autoreset step: the action is ignored
        new = env.reset(None)
        return Row(new.obs, 0.0, False, False, {"soak_step": 0}), new
    stepped = replace(env, step=env.step + 1, checksum=fold(env.checksum, action))
    end = stepped.ended
    reward = float(10 * stepped.step + action)
    terminated, truncated = end and env.terminates, end and not env.terminates
    if mode == SAME_STEP and end:
        new = stepped.reset(None)
        info = {"final_obs": stepped.obs, "final_info": {"soak_step": stepped.step}, "soak_step": 0}
        return Row(new.obs, reward, terminated, truncated, info), new
    return Row(stepped.obs, reward, terminated, truncated, {"soak_step": stepped.step}), stepped


def reset_row(env: Env, seed: int | None) -> tuple[Row, Env]:
    new = env.reset(seed)
    return Row(new.obs, 0.0, False, False, {"soak_step": 0}), new


def loss_row(shown: Obs | None, replacement: Obs | None, mode: str) -> Row:
    """A loss report: NEXT_STEP repeats the last observation; SAME_STEP shows the replacement's reset."""
    if mode == NEXT_STEP:
        return Row(shown, 0.0, False, True, {"client_lost": True})
    info = {"final_obs": shown, "final_info": {"client_lost": True}, "soak_step": 0, "client_lost": True}
    return Row(replacement, 0.0, False, True, info)


# -- hypotheses ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Known:
    """The slot's env state is known; ``shown`` is what the learner's batch holds for the slot (None: unknown)."""

    env: Env
    member: Member
    shown: Obs | None


@dataclass(frozen=True)
class Awaiting:
    """A membership the learner has not seen serves the slot (or will): its first row is a reset row
    (``unseen`` None), or its env was reset unseen and then took the actions ``unseen``.

    ``since``: when the slot's previous membership ended (its report's call started); ``tag``: a tag
    set on the unseen env."""

    shown: Obs | None
    since: float
    unseen: tuple[int, ...] | None = None
    tag: int = 0


Hypothesis = Known | Awaiting


@dataclass
class Counts:
    rows: int = 0
    loss_reports: int = 0
    resets: int = 0
    episodes_ended: int = 0
    call_results: int = 0
    interrupted: int = 0


class Checker:
    """Each slot's hypotheses, the faults that end memberships, and what every row must be.

    Args:
        num_envs: slots.
        mode: ``"NextStep"`` or ``"SameStep"``.
        payload: observation entries after ``FIELDS`` (all equal to the checksum).
        initial_time: when the soak began (every membership's faults come after it).
    """

    def __init__(self, num_envs: int, mode: str, payload: int = 0, tolerate: frozenset[str] = frozenset()) -> None:
        if mode not in (NEXT_STEP, SAME_STEP):
            raise ValueError(f"mode must be {NEXT_STEP!r} or {SAME_STEP!r}, got {mode!r}")
        unknown = set(tolerate) - set(TOLERANCES)
        if unknown:
            raise ValueError(f"unknown tolerances {sorted(unknown)}: known are {sorted(TOLERANCES)}")
        self.tolerate = tolerate
        self.num_envs = num_envs
        self.mode = mode
        self.payload = payload
        self.slots: list[set[Hypothesis]] = [{Awaiting(None, 0.0)} for _ in range(num_envs)]
        self.faults: dict[int, list[Fault]] = {}  # pid -> its faults that may still be reported (not retired)
        self.deaths: dict[int, float] = {}  # pid -> when it was killed or terminated
        self.clients: dict[int, dict[str, Any]] = {}  # pid -> {"size", "plane", "started"}
        self.episodes_seen: dict[tuple[int, int], int] = {}  # (pid, index) -> last episode seen
        self.counts = Counts()
        self._numbers = itertools.count(1)

    # -- facts ---------------------------------------------------------------------------------

    def client_started(self, pid: int, size: int, plane: str, when: float) -> None:
        self.clients[pid] = {"size": size, "plane": plane, "started": when}

    def fault(self, kind: str, pid: int, start: float, takes_effect: float) -> Fault:
        """Note a fault that must end the membership of ``pid`` (before its signal goes out)."""
        if kind not in LOSS_KINDS:
            raise ValueError(f"not a fault that ends a membership: {kind!r}")
        size = self.clients[pid]["size"] if pid in self.clients else 1
        fault = Fault(kind, pid, size, start, takes_effect, number=next(self._numbers))
        self.faults.setdefault(pid, []).append(fault)
        if kind != "freeze":
            self.deaths.setdefault(pid, start + takes_effect)
        return fault

    def all_faults(self) -> list[Fault]:
        return sorted((fault for faults in self.faults.values() for fault in faults), key=lambda f: f.number)

    def dead(self, pid: int, before: float) -> bool:
        """Whether ``pid`` was killed or terminated before ``before``."""
        return pid in self.deaths and self.deaths[pid] < before

    def retire(self, now: float, after: float) -> None:
        """Forget faults older than ``after`` seconds that owe no report, and clients dead that long (a row
        from one is then from a pid the soak never started: still a failure): a soak of hours stays small."""
        for pid in list(self.faults):
            kept = [
                f
                for f in self.faults[pid]
                if f.start > now - after or (f.end is None and f.kind == "freeze") or self._owed_slots(f)
            ]
            if kept:
                self.faults[pid] = kept
            else:
                del self.faults[pid]
        playing = {h.env.pid for hypotheses in self.slots for h in hypotheses if isinstance(h, Known)}
        for pid, died in list(self.deaths.items()):
            if died < now - after and pid not in playing and pid not in self.faults:
                del self.deaths[pid]
                self.clients.pop(pid, None)
                for key in [key for key in self.episodes_seen if key[0] == pid]:
                    del self.episodes_seen[key]

    # -- rows ----------------------------------------------------------------------------------

    def rows(self, call: Call, results: dict[int, tuple[Event, Row, float]]) -> None:
        """Check the rows a call returned: ``results[slot] = (the event sent to the slot, its row, when the
        command went out at the earliest)``."""
        for slot, (event, row, sent) in results.items():
            self._row(call, slot, event, row, sent)

    def _row(self, call: Call, slot: int, event: Event, row: Row, sent: float) -> None:
        self.counts.rows += 1
        where = f"slot {slot}, {call.kind} at {call.start:.3f}-{call.end:.3f}"
        if not row.payload_ok:
            raise CheckFailed(f"{where}: the observation's payload is not the checksum: {row.describe()}")
        if "stale_final" in self.tolerate and not (row.terminated or row.truncated) and "final_obs" in row.info:
            row = replace(row, info={k: v for k, v in row.info.items() if k not in ("final_obs", "final_info")})
        successors: dict[Hypothesis, Fault | None] = {}
        mismatches = []
        for hypothesis in sorted(self.slots[slot], key=repr):
            try:
                nxt, fault = self._accept(call, slot, hypothesis, event, row, sent)
            except CheckFailed as failure:
                mismatches.append(f"  {hypothesis}: {failure}")
                continue
            successors.setdefault(nxt, fault)
        if not successors:
            raise CheckFailed(
                f"{where}: {event} got {row.describe()}, which no expectation allows:\n" + "\n".join(mismatches)
            )
        if row.reports_loss:
            self.counts.loss_reports += 1
            fault = next(iter(successors.values()))
            if fault is not None:
                fault.reported.add(slot)
        if row.terminated or (row.truncated and not row.reports_loss):
            self.counts.episodes_ended += 1
        if isinstance(event, Reset):
            self.counts.resets += 1
        for hypothesis in successors:
            if isinstance(hypothesis, Known):
                key = (hypothesis.env.pid, hypothesis.env.index)
                self.episodes_seen[key] = max(self.episodes_seen.get(key, 0), hypothesis.env.episode)
        self.slots[slot] = set(successors)
        self._check_unique(where)

    def _accept(
        self, call: Call, slot: int, hypothesis: Hypothesis, event: Event, row: Row, sent: float
    ) -> tuple[Hypothesis, Fault | None]:
        """The hypothesis after ``row``, and the fault it reports, if ``row`` is what ``hypothesis`` allows."""
        if row.reports_loss:
            if isinstance(event, Reset):
                raise CheckFailed("a reset reported a lost client")
            fault = self._explain_loss(call, slot, hypothesis)
            shown = self._last_shown(hypothesis, event)
            if self.mode == NEXT_STEP:
                expect_one_of([loss_row(obs, None, self.mode) for obs in shown], row, hypothesis.shown is None)
                return Awaiting(row.obs, call.start), fault
            member, env = self._new_member(call, sent, row.obs, None)
            expect_one_of([loss_row(obs, env.obs, self.mode) for obs in shown], row, hypothesis.shown is None)
            return Known(env, member, env.obs), fault
        if isinstance(hypothesis, Known):
            fault = self._ending_fault(hypothesis.member, slot)
            if fault is not None and sent >= fault.start + fault.takes_effect:
                if row.obs[PID] == hypothesis.env.pid and _same_session_row(hypothesis, event, row, self.mode):
                    raise CheckFailed(
                        f"client {hypothesis.env.pid} answered a command sent {sent - fault.start:.2f} s after "
                        f"{fault}: its membership outlived the fault"
                    )
            if isinstance(event, Reset) and row.obs[PID] != hypothesis.env.pid:
                if fault is None:
                    raise CheckFailed(f"a reset answered by client {row.obs[PID]}, not {hypothesis.env.pid}")
                member, env = self._new_member(call, sent, row.obs, event.seed)
                expect(Row(env.obs, 0.0, False, False, {"soak_step": 0}), row)
                fault.reported.add(slot)  # the reset drops the report: the episode started anew
                return Known(env, member, env.obs), None
            expected, env = (
                step_row(hypothesis.env, event.action, self.mode)
                if isinstance(event, Step)
                else reset_row(hypothesis.env, event.seed)
            )
            expect(expected, row)
            return Known(env, hypothesis.member, row.obs), None
        # Awaiting: a new membership's first row
        seed = event.seed if isinstance(event, Reset) else None
        if hypothesis.unseen is None or isinstance(event, Reset):
            member, env = self._new_member(call, sent, row.obs, seed)
            expect(Row(env.obs, 0.0, False, False, {"soak_step": 0}), row)
            return Known(env, member, row.obs), None
        for episode in range(row.obs[EPISODE], max(0, row.obs[EPISODE] - 3), -1):
            member, env = self._new_member(call, sent, (*row.obs[:EPISODE], episode), None, check_episode=False)
            env = replace(env, tag=hypothesis.tag)
            for action in hypothesis.unseen:
                env = step_row(env, action, self.mode)[1]
            expected, after = step_row(env, event.action, self.mode)
            if _matches(expected, row):
                self._check_episode(after)
                return Known(after, member, row.obs), None
        raise CheckFailed(f"not the step after an unseen reset and the actions {hypothesis.unseen}")

    def _last_shown(self, hypothesis: Hypothesis, event: Step) -> list[Obs | None]:
        """The observations a loss report may repeat: the last one returned for the slot; with the tolerance
        ``landed_loss``, also that of the result its client answered before it was lost (then discarded)."""
        shown = [hypothesis.shown]
        if "landed_loss" in self.tolerate and isinstance(hypothesis, Known):
            shown.append(step_row(hypothesis.env, event.action, self.mode)[0].obs)
        return shown

    def _new_member(
        self, call: Call, sent: float, obs: Obs, seed: int | None, check_episode: bool = True
    ) -> tuple[Member, Env]:
        """The membership and env state a new membership's reset row (``obs``) shows."""
        pid, index, episode = obs[PID], obs[INDEX], obs[EPISODE]
        if pid not in self.clients:
            raise CheckFailed(f"a row from pid {pid}, which the soak never started")
        if self.dead(pid, sent):
            raise CheckFailed(f"a row from client {pid}, killed before the command was sent")
        if not 0 <= index < self.clients[pid]["size"]:
            raise CheckFailed(f"env index {index} of client {pid}, which hosts {self.clients[pid]['size']}")
        env = Env.after_reset(pid, index, episode, seed)
        if check_episode:
            self._check_episode(env)
        return Member(pid, call.end), env

    def _check_episode(self, env: Env) -> None:
        seen = self.episodes_seen.get((env.pid, env.index), 0)
        if env.episode <= seen:
            raise CheckFailed(f"env {env.index} of client {env.pid} shows episode {env.episode}, it was at {seen}")

    # -- losses --------------------------------------------------------------------------------

    def _ending_fault(self, member: Member, slot: int) -> Fault | None:
        """The first fault that ended ``member`` and has not yet been reported on ``slot``."""
        for fault in self.faults.get(member.pid, ()):
            if slot not in fault.reported and fault.applies_to(member):
                return fault
        return None

    def _ended(self, member: Member) -> bool:
        return any(fault.applies_to(member) for fault in self.faults.get(member.pid, ()))

    def _explain_loss(self, call: Call, slot: int, hypothesis: Hypothesis) -> Fault:
        if isinstance(hypothesis, Known):
            fault = self._ending_fault(hypothesis.member, slot)
            if fault is None:
                raise CheckFailed(f"a loss report, but client {hypothesis.member.pid} had no fault that loses it")
            if len(fault.reported) >= fault.size:
                raise CheckFailed(f"{fault} was already reported on {sorted(fault.reported)}: more than its envs")
            return fault
        for fault in self.all_faults():  # a membership the learner never saw: its fault came, or was on, since
            if fault.in_effect_since(hypothesis.since) and slot not in fault.reported and self._free_reports(fault) > 0:
                return fault
        raise CheckFailed(f"a loss report on a slot waiting since {hypothesis.since:.3f}, and no fault explains it")

    def _free_reports(self, fault: Fault) -> int:
        """Reports ``fault`` may still explain beyond those it owes slots where its membership was seen."""
        return fault.size - len(fault.reported) - len(self._owed_slots(fault))

    def _owed_slots(self, fault: Fault) -> list[int]:
        return [slot for slot in range(self.num_envs) if slot not in fault.reported and self._owes(fault, slot)]

    def _owes(self, fault: Fault, slot: int) -> bool:
        hypotheses = self.slots[slot]
        return all(isinstance(h, Known) and fault.applies_to(h.member) for h in hypotheses)

    def outstanding_reports(self) -> list[tuple[int, Fault]]:
        """Slots whose membership was seen, was ended by a fault, and has not reported it yet."""
        owed = []
        for slot in range(self.num_envs):
            for fault in self.all_faults():
                if slot not in fault.reported and self._owes(fault, slot):
                    owed.append((slot, fault))
                    break
        return owed

    # -- interrupted calls and their uncertainty -----------------------------------------------

    def interrupted(self, call: Call, events: dict[int, Event]) -> None:
        """A call that sent ``events`` was interrupted: each may or may not have reached its env, and
        its row (perhaps a loss report) may have landed in the batch without being returned."""
        self.counts.interrupted += 1
        for slot, event in events.items():
            grown: set[Hypothesis] = set()
            for hypothesis in self.slots[slot]:
                grown.add(hypothesis)
                grown.update(self._maybe_reached(call, slot, hypothesis, event))
            self.slots[slot] = grown

    def _maybe_reached(self, call: Call, slot: int, hypothesis: Hypothesis, event: Event) -> list[Hypothesis]:
        if not isinstance(event, Step):
            raise ValueError("only calls that step are interrupted")
        if isinstance(hypothesis, Awaiting):
            if hypothesis.unseen is None:
                return [replace(hypothesis, unseen=(), shown=None)]
            return [replace(hypothesis, unseen=(*hypothesis.unseen, event.action), shown=None)]
        expected, env = step_row(hypothesis.env, event.action, self.mode)
        grown: list[Hypothesis] = [replace(hypothesis, env=env), Known(env, hypothesis.member, expected.obs)]
        if self._ending_fault(hypothesis.member, slot) is not None:  # its loss report may have been swallowed
            unseen = () if self.mode == SAME_STEP else None
            grown += [Awaiting(hypothesis.shown, call.start, unseen), Awaiting(None, call.start, unseen)]
        return grown

    # -- calls ---------------------------------------------------------------------------------

    def call_results(self, call: Call, name: str, results: Sequence[Any]) -> None:
        """Check ``call("state")`` or ``get_attr("steps")`` results, one per slot, and narrow by them."""
        for slot, result in enumerate(results):
            self.counts.call_results += 1
            kept = {h for h in self.slots[slot] if _call_allows(h, name, result)}
            if not kept:
                raise CheckFailed(
                    f"slot {slot}: {name} returned {result!r}, expected one of "
                    f"{sorted(_call_expectation(h, name) for h in self.slots[slot])}"
                )
            self.slots[slot] = kept

    def tag_set(self, value: int, surely: bool) -> None:
        """``set_attr("tag", value)`` on every slot: done (``surely``), or perhaps only on some (it failed)."""
        for slot in range(self.num_envs):
            tagged = {_tagged(h, value) for h in self.slots[slot]}
            self.slots[slot] = tagged if surely else tagged | self.slots[slot]

    # -- the learner's own account -------------------------------------------------------------

    def stats(self, rows: Sequence[dict[str, Any]]) -> None:
        """Check ``envs.stats()``: a slot whose client has no fault is still served by it, on its plane."""
        for slot, stat in enumerate(rows):
            if stat["served"]:
                client = self.clients.get(stat["pid"])
                if client is None:
                    raise CheckFailed(f"slot {slot} served by pid {stat['pid']}, which the soak never started")
                if stat.get("plane") != client["plane"]:
                    raise CheckFailed(
                        f"slot {slot}: client {stat['pid']} on plane {stat.get('plane')!r}, "
                        f"started for {client['plane']!r}"
                    )
            members = {h.member for h in self.slots[slot] if isinstance(h, Known)}
            if len(members) != 1 or not all(isinstance(h, Known) for h in self.slots[slot]):
                continue
            (member,) = members
            if self._ended(member):
                continue
            if not stat["served"] or stat["pid"] != member.pid:
                who = f"client {stat['pid']}" if stat["served"] else "no client"
                raise CheckFailed(
                    f"slot {slot}: stats() says {who} serves it, but client {member.pid} (no fault) "
                    "still plays its episode"
                )

    def _check_unique(self, where: str) -> None:
        held: dict[tuple[int, int], int] = {}
        for slot, hypotheses in enumerate(self.slots):
            if len(hypotheses) != 1:
                continue
            (hypothesis,) = hypotheses
            if not isinstance(hypothesis, Known) or self._ended(hypothesis.member):
                continue
            key = (hypothesis.env.pid, hypothesis.env.index)
            if key in held:
                raise CheckFailed(f"{where}: env {key[1]} of client {key[0]} serves slots {held[key]} and {slot}")
            held[key] = slot

    def describe(self, slot: int) -> str:
        return " | ".join(sorted(map(str, self.slots[slot])))


# -- comparing -------------------------------------------------------------------------------------


def _matches(expected: Row, row: Row, shown_unknown: bool = False) -> bool:
    if shown_unknown:
        info = {key: value for key, value in row.info.items() if key != "final_obs"}
        want = {key: value for key, value in expected.info.items() if key != "final_obs"}
        obs_ok = expected.obs is None or row.obs == expected.obs
    else:
        info, want, obs_ok = row.info, expected.info, row.obs == expected.obs
    return (
        obs_ok
        and (expected.reward, expected.terminated, expected.truncated) == (row.reward, row.terminated, row.truncated)
        and info == want
    )


def expect(expected: Row, row: Row, shown_unknown: bool = False) -> None:
    expect_one_of([expected], row, shown_unknown)


def expect_one_of(expected: list[Row], row: Row, shown_unknown: bool = False) -> None:
    if not any(_matches(one, row, shown_unknown) for one in expected):
        raise CheckFailed(
            "expected " + " or ".join(one.describe() if one.obs is not None else str(one) for one in expected)
        )


def _same_session_row(hypothesis: Known, event: Event, row: Row, mode: str) -> bool:
    """Whether ``row`` is the one ``hypothesis``'s env gives for ``event`` (its membership answered)."""
    if isinstance(event, Reset):
        return False
    return _matches(step_row(hypothesis.env, event.action, mode)[0], row)


def _call_allows(hypothesis: Hypothesis, name: str, result: Any) -> bool:
    expected = _call_expectation(hypothesis, name)
    return expected is None or expected == result


def _call_expectation(hypothesis: Hypothesis, name: str) -> Any:
    if isinstance(hypothesis, Awaiting):
        return None  # an env the learner has not seen
    if name == "state":
        return hypothesis.env.state()
    if name == "steps":
        return hypothesis.env.step
    raise ValueError(f"no expectation for {name!r}")


def _tagged(hypothesis: Hypothesis, value: int) -> Hypothesis:
    if isinstance(hypothesis, Awaiting):
        return replace(hypothesis, tag=value)
    env = replace(hypothesis.env, tag=value)
    return replace(hypothesis, env=env)


# -- reading Gymnasium's batched results -----------------------------------------------------------


def plain(value: Any) -> Any:
    """Numpy values as Python ones (arrays as tuples of the head fields), recursively through dicts."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return tuple(int(x) for x in value[: len(FIELDS)])
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def slot_info(infos: dict[str, Any], position: int) -> dict[str, Any]:
    """The info of one position of a batched info dict (its ``_key`` masks followed, nested dicts too)."""
    info = {}
    for key, value in infos.items():
        if key.startswith("_") or key == "env_id":
            continue
        mask = infos.get(f"_{key}")
        if mask is None:
            raise CheckFailed(f"info key {key!r} has no _{key} mask: {infos}")
        if mask[position]:
            info[key] = slot_info(value, position) if isinstance(value, dict) else plain(value[position])
    return info


def rows_of(results: tuple, positions: Iterable[int], payload: int) -> list[Row]:
    """The :class:`Row` of each position of a step's or recv's results ``(obs, rewards, terminations,
    truncations, infos)``."""
    observations, rewards, terminations, truncations, infos = results
    rows = []
    for position in positions:
        observation = observations[position]
        payload_ok = len(observation) == len(FIELDS) + payload and bool(
            np.all(observation[len(FIELDS) :] == observation[CHECKSUM])
        )
        rows.append(
            Row(
                plain(observation),
                float(rewards[position]),
                bool(terminations[position]),
                bool(truncations[position]),
                slot_info(infos, position),
                payload_ok,
            )
        )
    return rows


def reset_rows_of(results: tuple, num_envs: int, payload: int) -> list[Row]:
    observations, infos = results
    zeros = np.zeros(num_envs)
    return rows_of((observations, zeros, zeros.astype(bool), zeros.astype(bool), infos), range(num_envs), payload)
