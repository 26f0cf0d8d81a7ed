"""The soak's learner: one RemoteVectorEnv driven through every kind of call, each result checked.

Phases, chosen from the seed: lock-step ``step()``; ``step_async``/``step_wait`` with learner work in
between; partial batches (``send``/``recv`` with ``batch_size < num_envs``, sometimes holding slots back);
``get_attr("steps")``, ``call("state")`` and ``set_attr("tag", ...)``. Now and then a quiet point:
the fault injector pauses, every loss owed is collected, the slots may be reset, memory is measured.

A call may be interrupted (SIGALRM raising KeyboardInterrupt a random delay into it, as Ctrl-C would):
the learner carries on, and the checker widens what the slots may show next. Every call's latency
must stay within its bound (:meth:`Learner.allowance`).
"""

from __future__ import annotations

import ctypes
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import Any

import numpy as np
from gymnasium.error import NoAsyncCallError

from gym_remote import ClientLostError, RemoteTimeoutError, RemoteVectorEnv
from tests.envs.soak import ACTIONS
from tests.soak.checker import Call, Checker, CheckFailed, Reset, Step, reset_rows_of, rows_of
from tests.soak.events import EventLog
from tests.soak.schedule import LIVENESS, NUM_ENVS
from tests.soak.supervisor import JOIN_SECONDS, FaultInjector

SLACK = 2.0
"""Seconds any call may take beyond what the faults before its end explain: a call's own work (a few ms), a
burst of joins, and the scheduling of a learner and ~12 client processes on 2 shared cores."""
INTERRUPT_PROBABILITY = 0.03
QUIET_EVERY = (15.0, 35.0)  # seconds between two quiet points
OWED_REPORTS_WITHIN = 3 * LIVENESS + JOIN_SECONDS + 10.0  # a quiet point collects every owed loss report by then


class SoakFailure(AssertionError):
    """What the soak found wrong (a check of the library, a latency, a leftover)."""


class InterruptedCall(Call):
    """A call cut short by the alarm."""


class Interrupted(Exception):
    def __init__(self, call: Call) -> None:
        super().__init__(call.kind)
        self.call = call


@dataclass
class Worst:
    latency: float = 0.0
    allowance: float = 0.0


class Learner:
    def __init__(
        self,
        envs: RemoteVectorEnv,
        checker: Checker,
        injector: FaultInjector,
        log: EventLog,
        rng: Random,
        started: float,
        interrupts: bool = True,
    ) -> None:
        self.envs = envs
        self.interrupt_probability = INTERRUPT_PROBABILITY if interrupts else 0.0
        self.checker = checker
        self.injector = injector
        self.log = log
        self.rng = rng
        self.started = started
        self.calls: Counter[str] = Counter()
        self.interrupts: Counter[str] = Counter()
        self.worst: dict[str, Worst] = {}
        self.costs: list[tuple[float, float]] = []  # (when, seconds a call may pay for it): from the injector
        self.faults: dict[int, Any] = {}  # the injector's fault ids -> the checker's faults
        self.tags = 0
        self.rss: list[tuple[float, int]] = []  # (seconds since the start, RSS bytes) at each quiet point
        self._armed = False
        signal.signal(signal.SIGALRM, self._alarm)

    # -- what the injector did --------------------------------------------------------------------

    def take_notes(self) -> None:
        """Tell the checker what happened meanwhile: clients started, faults, the end of freezes."""
        while not self.injector.notes.empty():
            note = self.injector.notes.get()
            values = note.values
            if note.kind == "client":
                self.checker.client_started(values["pid"], values["size"], values["plane"], values["at"])
            elif note.kind == "fault":
                self.faults[values["id"]] = self.checker.fault(
                    values["kind"], values["pid"], values["at"], values["takes_effect"]
                )
            elif note.kind == "freeze_end":
                self.faults.pop(values["fault"]).end = values["at"]
            elif note.kind == "cost":
                self.costs.append((values["at"], values["cost"]))
                self.costs = self.costs[-200:]
            elif note.kind == "failure":
                raise SoakFailure(values["text"])

    # -- timing and interrupting a call ---------------------------------------------------------

    def _alarm(self, signum: int, frame: object) -> None:
        if self._armed:
            raise KeyboardInterrupt

    def _interrupt_delay(self) -> float | None:
        if self.rng.random() >= self.interrupt_probability:
            return None
        band = self.rng.random()
        if band < 0.6:
            return self.rng.uniform(0.0002, 0.003)  # inside an ordinary call
        if band < 0.85:
            return self.rng.uniform(0.003, 0.05)
        return self.rng.uniform(0.05, 1.5)  # inside a call that waits on a fault

    def timed(self, kind: str, function: Callable[[], Any], interruptible: bool = True) -> tuple[Any, Call]:
        """Run one library call; check its latency. Raises :class:`Interrupted` if the alarm cut it short."""
        delay = self._interrupt_delay() if interruptible else None
        start = time.monotonic()
        try:
            try:
                if delay is not None:
                    self._armed = True
                    signal.setitimer(signal.ITIMER_REAL, delay)
                result = function()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                self._armed = False
        except KeyboardInterrupt:
            call = Call(kind, start, time.monotonic())
            self.interrupts[kind] += 1
            self.log.add("interrupt", f"{kind} interrupted after {call.end - call.start:.4f} s")
            self.take_notes()
            raise Interrupted(call) from None
        except Exception as error:
            self.log.add("call", f"{kind} raised {error!r}")
            self.take_notes()
            raise
        call = Call(kind, start, time.monotonic())
        self.calls[kind] += 1
        self.take_notes()
        self._check_latency(call)
        return result, call

    def allowance(self, call: Call) -> float:
        """How long ``call`` may take: until every fault before its end is resolved, plus :data:`SLACK`."""
        resolved = max([call.start, *(at + cost for at, cost in self.costs if at < call.end)])
        return resolved - call.start + SLACK

    def _check_latency(self, call: Call) -> None:
        latency, allowance = call.end - call.start, self.allowance(call)
        worst = self.worst.setdefault(call.kind, Worst())
        if latency > worst.latency:
            worst.latency, worst.allowance = latency, allowance
        if latency > 0.5:
            self.log.add("slow", f"{call.kind} took {latency:.3f} s (allowed {allowance:.3f} s)")
        if latency > allowance:
            raise SoakFailure(f"{call.kind} took {latency:.2f} s, more than its bound {allowance:.2f} s")

    def _check_rows(self, call: Call, results: dict) -> None:
        shown = " ".join(f"{slot}:{row.brief()}" for slot, (_, row, _) in sorted(results.items()))
        self.log.call(f"{call.kind} {call.end - call.start:.4f}s {shown}")
        self.checker.rows(call, results)

    def after_call(self) -> None:
        """The learner's own account of who serves what must agree with the checker's; the injector learns it."""
        stats = self.envs.stats()
        self.checker.stats(stats)
        served = [row["pid"] for row in stats if row["served"]]
        self.injector.seen_members(frozenset(served), len(served) == NUM_ENVS, time.monotonic())

    def actions(self, count: int) -> list[int]:
        return [self.rng.randrange(ACTIONS) for _ in range(count)]

    # -- the run --------------------------------------------------------------------------------

    def run(self, seconds: float, warmup: float) -> None:
        end = self.started + seconds
        self.reset()
        next_quiet = time.monotonic() + self.rng.uniform(*QUIET_EVERY)
        phases = {"step": 3, "async": 2, "partial": 3, "calls": 1}
        while time.monotonic() < end:
            phase = self.rng.choices(list(phases), list(phases.values()))[0]
            if phase == "step":
                for _ in range(self.rng.randint(3, 30)):
                    self.step()
            elif phase == "async":
                for _ in range(self.rng.randint(3, 30)):
                    self.step_async_wait()
            elif phase == "partial":
                self.partial(self.rng.randint(5, 60))
            else:
                self.attribute_call()
            if time.monotonic() >= next_quiet:
                self.quiet(reset=self.rng.random() < 0.5, measure=time.monotonic() - self.started >= warmup)
                next_quiet = time.monotonic() + self.rng.uniform(*QUIET_EVERY)
        self.quiet(reset=False, measure=True, final=True)
        self.settle()

    def settle(self, within: float = 15.0, rejoin: float = 2.0) -> None:
        """Before closing: every live client serves or waits in line (one that is still reconnecting would
        miss the CLOSE, and wait for a learner at the address for minutes). Steps meanwhile: ``rejoin``
        seconds at least (clients thawed by the last quiet point reconnect within that), then until the
        learner counts as many members and waiters as clients run."""
        started = time.monotonic()
        deadline = started + within
        while time.monotonic() < started + rejoin:
            self.step(interruptible=False)
            time.sleep(0.02)
        while True:
            # by name: a client that died waiting stays in the line's count, and must not stand for one that
            # is still reconnecting
            alive = {client.name for client in self.injector.supervisor.alive()}
            known = {row.get("client") for row in self.envs.stats()} | set(self.envs.server_stats()["waiting_clients"])
            if alive <= known:
                return
            if time.monotonic() > deadline:
                missing = ", ".join(sorted(alive - known))
                raise SoakFailure(f"clients {missing} run, but neither serve nor wait in line after {within:g} s")
            self.step(interruptible=False)
            time.sleep(0.05)

    def reset(self) -> None:
        """reset(seed=...) of every slot; only at quiet points (no loss may be owed: it would drop the report)."""
        seed = self.rng.randrange(2**20)
        results, call = self.timed("reset", lambda: self.envs.reset(seed=seed), interruptible=False)
        rows = reset_rows_of(results, NUM_ENVS, self.checker.payload)
        self._check_rows(call, {slot: (Reset(seed + slot), rows[slot], call.start) for slot in range(NUM_ENVS)})
        self.log.add("reset", f"reset(seed={seed})")
        self.after_call()

    def step(self, interruptible: bool = True) -> None:
        actions = self.actions(NUM_ENVS)
        try:
            results, call = self.timed("step", lambda: self.envs.step(np.array(actions)), interruptible)
        except Interrupted as interrupted:
            self.checker.interrupted(interrupted.call, {slot: Step(a) for slot, a in enumerate(actions)})
            return
        self._check_step(call, actions, results)

    def _check_step(self, call: Call, actions: list[int], results: tuple) -> None:
        rows = rows_of(results, range(NUM_ENVS), self.checker.payload)
        self._check_rows(call, {slot: (Step(actions[slot]), rows[slot], call.start) for slot in range(NUM_ENVS)})
        lost = [slot for slot, row in enumerate(rows) if row.reports_loss]
        if lost:
            self.log.add("loss", f"{call.kind} reports lost clients on slots {lost}")
        self.after_call()

    def step_async_wait(self) -> None:
        actions = self.actions(NUM_ENVS)
        events = {slot: Step(a) for slot, a in enumerate(actions)}
        try:
            _, sent = self.timed("step_async", lambda: self.envs.step_async(np.array(actions)))
        except Interrupted as interrupted:
            self.checker.interrupted(interrupted.call, events)
            sent = InterruptedCall(*vars(interrupted.call).values())  # it may have gone out all the same
        time.sleep(self.rng.uniform(0, 0.005))  # the learner's own work while the envs step
        try:
            results, call = self.timed("step_wait", self.envs.step_wait)
        except Interrupted as interrupted:
            self.checker.interrupted(interrupted.call, events)
            return
        except NoAsyncCallError:
            if sent.kind == "step_async" and not isinstance(sent, InterruptedCall):
                raise CheckFailed("step_wait() says no step_async is pending, right after one") from None
            self.log.add("call", "step_wait: nothing pending (its step_async was interrupted first)")
            return
        self._check_step(Call("step_wait", sent.start, call.end), actions, results)

    def partial(self, iterations: int) -> None:
        """Partial batches: send to idle slots (all, or some while others are held back), recv, check."""
        pending: dict[int, tuple[int, float]] = {}  # slot -> (action, when it was sent)
        held: Counter[int] = Counter()
        interrupted = False
        for _ in range(iterations):
            idle = [slot for slot in range(NUM_ENVS) if slot not in pending]
            if self.rng.random() < 0.3:  # hold some slots back (at most 4 iterations each)
                idle = [slot for slot in idle if held[slot] >= 4 or self.rng.random() < 0.5]
            for slot in range(NUM_ENVS):
                held[slot] = 0 if slot in idle or slot in pending else held[slot] + 1
            if idle:
                interrupted |= not self._send(idle, pending)
            if not pending:
                continue
            try:
                results, call = self.timed("recv", self.envs.recv)
            except Interrupted:
                interrupted = True
                continue
            except NoAsyncCallError:  # every result in flight was cut short by the interrupts, or never went out
                if not interrupted:
                    raise CheckFailed(f"recv() says nothing is in flight, but slots {sorted(pending)} are") from None
                break
            self._check_recv(call, results, pending)
            if interrupted:
                break  # after an interrupt, collect what is in flight before sending again
        self._drain(pending, interrupted)

    def _send(self, slots: list[int], pending: dict[int, tuple[int, float]]) -> bool:
        """Send actions to ``slots``; False if the send was interrupted (some may have gone out)."""
        actions = self.actions(len(slots))
        start = time.monotonic()
        try:
            self.timed("send", lambda: self.envs.send(np.array(actions), np.array(slots)))
        except Interrupted:
            for slot, action in zip(slots, actions):
                pending[slot] = (action, start)
            return False
        for slot, action in zip(slots, actions):
            pending[slot] = (action, start)
        return True

    def _check_recv(self, call: Call, results: tuple, pending: dict[int, tuple[int, float]]) -> None:
        ids = results[4]["env_id"].tolist()
        unknown = [slot for slot in ids if slot not in pending]
        if unknown or len(set(ids)) != len(ids):
            raise CheckFailed(f"recv returned slots {ids}; slots {unknown} had nothing in flight")
        rows = rows_of(results, range(len(ids)), self.checker.payload)
        self._check_rows(call, {slot: (Step(pending[slot][0]), row, pending[slot][1]) for slot, row in zip(ids, rows)})
        lost = [slot for slot, row in zip(ids, rows) if row.reports_loss]
        if lost:
            self.log.add("loss", f"recv reports lost clients on slots {lost}")
        for slot in ids:
            del pending[slot]
        self.after_call()

    def _drain(self, pending: dict[int, tuple[int, float]], interrupted: bool) -> None:
        """recv() until nothing is in flight. After an interrupt, a slot that never comes back lost its result
        (the env stepped, or not); otherwise every slot sent must come back."""
        while pending:
            try:
                results, call = self.timed("recv", self.envs.recv, interruptible=False)
            except NoAsyncCallError:
                if not interrupted:
                    raise CheckFailed(
                        f"recv() says nothing is in flight, but slots {sorted(pending)} never came back"
                    ) from None
                now = time.monotonic()
                self.checker.interrupted(Call("recv", now, now), {slot: Step(a) for slot, (a, _) in pending.items()})
                self.log.add("drain", f"slots {sorted(pending)} lost their results to an interrupt")
                pending.clear()
                return
            self._check_recv(call, results, pending)
        try:
            self.envs.recv(timeout=0.0)
        except NoAsyncCallError:
            return
        except RemoteTimeoutError as error:
            raise CheckFailed(f"every slot sent came back, yet recv() still waits for some: {error}") from None
        raise CheckFailed("recv() returned results after every slot sent had come back")

    def attribute_call(self) -> None:
        kind = self.rng.choice(["get_attr", "call", "set_attr"])
        try:
            if kind == "get_attr":
                results, call = self.timed("get_attr", lambda: self.envs.get_attr("steps"))
                self.checker.call_results(call, "steps", results)
            elif kind == "call":
                results, call = self.timed("call", lambda: self.envs.call("state"))
                self.checker.call_results(call, "state", results)
            else:
                self.tags += 1
                tag = self.tags
                try:
                    self.timed("set_attr", lambda: self.envs.set_attr("tag", tag))
                except (Interrupted, ClientLostError):
                    self.checker.tag_set(tag, surely=False)
                    raise
                self.checker.tag_set(tag, surely=True)
        except Interrupted:
            return
        except ClientLostError as error:
            now = time.monotonic()
            recent = any(at > now - OWED_REPORTS_WITHIN for at, _ in self.costs) or self.checker.outstanding_reports()
            if not recent:
                raise CheckFailed(f"{kind} raised {error!r}, but no client had a fault lately") from error
            self.log.add("call", f"{kind}: {error}")
            return
        self.after_call()

    # -- quiet points -----------------------------------------------------------------------------

    def quiet(self, reset: bool, measure: bool, final: bool = False) -> None:
        """Pause the faults, collect every loss report owed, maybe reset, measure memory, go on (unless ``final``)."""
        paused_at = time.monotonic()
        self.log.add("quiet", "pausing faults")
        if not self.injector.pause(timeout=20.0):
            raise SoakFailure("the fault injector did not pause within 20 s")
        deadline = time.monotonic() + OWED_REPORTS_WITHIN
        while self.checker.outstanding_reports():
            if time.monotonic() > deadline:
                owed = "; ".join(f"slot {slot}: {fault}" for slot, fault in self.checker.outstanding_reports())
                raise CheckFailed(f"losses never reported within {OWED_REPORTS_WITHIN:g} s of a quiet point: {owed}")
            self.step(interruptible=False)
        for _ in range(2):
            self.step(interruptible=False)
        if reset:
            self.reset()
        if measure:
            self.rss.append((time.monotonic() - self.started, rss_bytes()))
            self.log.add("memory", f"RSS {self.rss[-1][1] / 2**20:.1f} MiB")
        self.checker.retire(time.monotonic(), after=60.0)
        if not final:
            self.injector.resume(time.monotonic() - paused_at)
            self.log.add("quiet", "faults resume")


def rss_bytes() -> int:
    """The process's resident memory, once the C allocator gave back what it holds free: the memory in use,
    not how much large messages (a few hundred KiB each, in libzmq's and the learner's allocator arenas)
    happened to leave cached at this moment."""
    _trim_heap()
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _trim_heap() -> None:
    try:
        ctypes.CDLL(None).malloc_trim(0)  # glibc: returns the free memory of every arena
    except (OSError, AttributeError):
        pass  # another C library: RSS as it is
