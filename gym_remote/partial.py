"""Partial batches (EnvPool's ``send`` / ``recv``): each slot steps on its own, results return as they arrive.

Every slot is in one :class:`SlotState` at a time, kept in one array (:class:`SlotTable`)::

    IDLE --send()--> IN_FLIGHT --result lands--> READY --recv() returns it--> IDLE
      \\--send(), no client--> PARKED --a client serves the slot--> IN_FLIGHT
    IN_FLIGHT --the env raised--> IDLE          IN_FLIGHT --client lost--> READY (a loss report)
                                                           (SAME_STEP: PARKED for a replacement's reset)

The slots of one ``send`` that one client serves get one STEP (``FLAG_SUBSET`` for some of a client's envs)
with ``FLAG_EACH``, so that an env that raises costs no other slot its result (PROTOCOL.md §5.6); for all of a
member's envs, with a numpy batch of actions, it is written straight in the member's slab (§13.6). A slot
waiting for a client's reset gets a RESET of its own.
:class:`PartialBatches` sends the commands; the :class:`~gym_remote.RemoteVectorEnv` waits, and
tells it what happened (:meth:`PartialBatches.collect`, :meth:`PartialBatches.client_lost`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gym_remote import commands, protocol
from gym_remote.batch import Landing, ResultBatch
from gym_remote.commands import Builder, Plan
from gym_remote.episodes import Episodes
from gym_remote.errors import RemoteEnvError
from gym_remote.protocol import Kind
from gym_remote.server import ClientInfo, Exchange, SlotServer

__all__ = ["PartialBatches", "SlotState", "SlotTable"]


class SlotState(enum.IntEnum):
    """Where a slot's result is in partial batches."""

    IDLE = 0  # nothing outstanding: the slot takes an action
    PARKED = 1  # its command waits for a client to serve the slot
    IN_FLIGHT = 2  # a command computes its result
    READY = 3  # its result arrived: recv() returns it, in arrival order


_IDLE, _PARKED, _IN_FLIGHT, _READY = (int(state) for state in SlotState)
"""The states as plain ints, for array comparisons (numpy compares an IntEnum slowly)."""


@dataclass
class Parked:
    """A command for a slot without a client, sent when one serves it: a RESET (with the slot's seed
    and the options) or a STEP (with the slot's action)."""

    kind: Kind
    seed: int | None = None
    options: Any = None
    action: Any = None


class SlotTable:
    """Each slot's :class:`SlotState`, with what that state holds: a parked command, the exchange in
    flight, the order of arrival. Socket-free.

    The state array is the one truth: what a state holds is kept per slot and counts only while the slot
    is in that state, and every transition ends with a single store into the array. So an interrupt
    (Ctrl-C) at any point leaves each slot in its old state or its new one, with what that state holds,
    never in between.
    """

    def __init__(self, num_envs: int) -> None:
        # one byte per slot, read and written as Python ints on the per-slot paths; ``state`` is a numpy view of the
        # same bytes, for the masks of many slots at once
        self._codes = bytearray(num_envs)  # (IDLE is 0)
        self.state = np.frombuffer(self._codes, dtype=np.int8)
        self._parked: list[Parked | None] = [None] * num_envs
        self._exchange: list[Exchange | None] = [None] * num_envs
        self._arrival = [0] * num_envs  # the order of READY slots' arrivals
        self._arrivals = 0

    def slots_in(self, state: SlotState) -> list[int]:
        return (self.state == int(state)).nonzero()[0].tolist()  # (numpy compares an IntEnum slowly)

    @property
    def parked(self) -> dict[int, Parked]:
        """The PARKED slots and their commands."""
        # a PARKED slot has its command (the state and the command change together)
        return {slot: self._parked[slot] for slot in self.slots_in(SlotState.PARKED)}  # pyright: ignore[reportReturnType]

    @property
    def in_flight(self) -> dict[int, Exchange]:
        """The IN_FLIGHT slots and their exchanges."""
        # an IN_FLIGHT slot has its exchange (the state and the exchange change together)
        return {slot: self._exchange[slot] for slot in self.slots_in(SlotState.IN_FLIGHT)}  # pyright: ignore[reportReturnType]

    @property
    def ready(self) -> list[int]:
        """The READY slots, in arrival order."""
        return sorted(self.slots_in(SlotState.READY), key=self._arrival.__getitem__)

    def any_parked(self) -> bool:
        """Whether a command waits for a client (asked on every ``recv``: kept cheap)."""
        return _PARKED in self._codes

    def ready_count(self) -> int:
        return self._codes.count(_READY)

    def busy_count(self) -> int:
        """How many slots are not IDLE."""
        return len(self._codes) - self._codes.count(_IDLE)

    def exchange_of(self, slot: int) -> Exchange | None:
        """The exchange ``slot`` waits for, if it is IN_FLIGHT."""
        return self._exchange[slot] if self._codes[slot] == _IN_FLIGHT else None

    @property
    def busy(self) -> np.ndarray:
        """Which slots have a result outstanding or unreturned (not IDLE)."""
        return self.state != _IDLE

    def any_busy(self) -> bool:
        """Whether any slot is not IDLE (on every lock-step call's path: kept cheap)."""
        return self.busy_count() != 0

    def outstanding(self) -> list[int]:
        """The slots whose results are still coming (PARKED or IN_FLIGHT)."""
        return np.flatnonzero((self.state == _PARKED) | (self.state == _IN_FLIGHT)).tolist()

    def park(self, slot: int, command: Parked) -> None:
        self._parked[slot] = command
        self._codes[slot] = _PARKED

    def fly(self, slot: int, exchange: Exchange) -> None:
        self._exchange[slot] = exchange
        self._codes[slot] = _IN_FLIGHT

    def arrive(self, slot: int) -> None:
        self._arrivals += 1
        self._arrival[slot] = self._arrivals
        self._codes[slot] = _READY

    def idle(self, slot: int) -> None:
        self._codes[slot] = _IDLE

    def idle_all(self, slots: list[int]) -> None:
        """``slots`` become IDLE, all in one store."""
        self.state[slots] = _IDLE

    def clear(self) -> None:
        """Every slot IDLE (the exchanges in flight are the caller's to abandon first)."""
        self.state[:] = _IDLE


class PartialBatches:
    """The commands of ``send`` / ``recv`` over a server's slots, and where each slot's result is.

    Every step below is safe against an interrupt: the table's transitions are (see :class:`SlotTable`);
    a result is landed before its slot becomes READY and is marked with its command's sequence number, so
    one that arrives for a command the slot no longer waits for is ignored; and losses are reported from
    what the episodes and the exchanges say, each time anew, so a report cut short is made again.

    Args:
        server: the server whose clients serve the slots.
        episodes: the vector's record of lost clients, whose losses partial batches report too.
        batch: the batch results land in.
    """

    def __init__(self, server: SlotServer, episodes: Episodes, batch: ResultBatch) -> None:
        self.server = server
        self.episodes = episodes
        self.batch = batch
        self.table = SlotTable(server.num_envs)
        self.reports_loss = np.zeros(server.num_envs, dtype=np.bool_)  # its next result reports a lost client
        # since the last collect(): (slot, seq) of each slot a RESULT landed; (slot, seq, error) of each slot whose
        # env raised (FLAG_EACH); the seq of each RESULT landed
        self._arrivals: list[tuple[int, int]] = []
        self._failures: list[tuple[int, int, RemoteEnvError]] = []
        self._replies: list[int] = []
        self._taken_seen = server.replies_taken  # the server's count of replies taken, at the last collect()
        self._losses_unreported = False  # the last collect() found lost slots the vector did not know of yet
        self._starting = False  # a command is being started: an interrupt may leave its slots in flight unsent

    def reset_all(self, seed: list[int | None], options: Any) -> None:
        """Start resetting every slot (``seed[slot]``); results that were not returned yet are dropped."""
        self.table.clear()
        self.reports_loss[:] = False
        for slot in range(len(seed)):
            self.table.park(slot, Parked(Kind.RESET, seed[slot], options))
        self.dispatch_parked()

    def send(
        self, slots: list[int], messages: Callable[[commands.PlanOf], Builder], per_env: Callable[[], list]
    ) -> None:
        """Send actions to ``slots`` (``slots[row]`` gets row ``row``; all of them IDLE).

        ``messages(plan_of)`` makes the STEP messages for plans (:func:`commands.step`); ``per_env()``
        splits the actions per slot, for the slots that must wait for a client. Interrupted, it has sent
        the actions of some of the slots (whose results :meth:`collect` finds) and of none of the others.
        """
        # who served each slot when the actions were given: a client lost while they go out leaves its later
        # slots in flight with a lost command, whose loss collect() reports
        owners = list(self.server.members.slots)
        reporting = set(self.episodes.unreported(slots))  # their actions are not needed
        self._report(sorted(reporting))
        actions: list | None = None
        served: list[tuple[int, int]] = []  # (row, slot)
        for row, slot in enumerate(slots):
            if slot in reporting:
                continue
            if owners[slot] is not None:
                served.append((row, slot))
                continue
            if actions is None:
                actions = per_env()
            self.table.park(slot, Parked(Kind.STEP, action=actions[row]))
        if served:
            rows, served_slots = zip(*served, strict=True)
            # served: the slots with an owner (in this snapshot of them), checked above
            served_owners: Sequence[ClientInfo] = owners  # pyright: ignore[reportAssignmentType]
            for plan in commands.plans_for(owners, served_slots, rows).values():
                self._start(served_owners[plan.slots[0]], plan, messages, "step", each=True)
        self.dispatch_parked()

    def news(self, size: int) -> Callable[[], bool]:
        """A predicate for one wait of the server: whether :meth:`collect` would find ``size`` results, or an
        error, or a slot whose reply an interrupt cut short (it goes IDLE), or a parked command can go out (its
        slot has a client: one that joined before the command was parked), or the server has events for the
        vector (a join or a loss). It has no side effects.

        It is asked after every message, so what a wait cannot change is looked at once, here: which results
        are READY and which commands are parked (only :meth:`collect`, :meth:`send` and :meth:`dispatch_parked`
        change them, never the server while it waits)."""
        arrivals_wanted = size - self.table.ready_count()
        parked = self.table.slots_in(SlotState.PARKED) if self.table.any_parked() else ()
        server = self.server

        def has_news() -> bool:
            if len(self._arrivals) >= arrivals_wanted or self._failures:
                return True
            if self._unlanded(server.replies_taken):  # an error or a reply cut short (or a loss: one look more)
                return True
            if server.has_events:
                return True
            if not parked:
                return False
            owners = server.members.slots
            return any(owners[slot] is not None for slot in parked)

        return has_news

    def collect(self) -> RemoteEnvError | None:
        """Move what happened into the table: landed results become READY (in arrival order); a slot whose
        client was lost reports the loss; a slot whose env raised, or whose reply an interrupt cut short,
        becomes IDLE. Returns the first env error (its slot takes actions again).

        Call it after the vector took the server's events (the episodes know of every loss).
        """
        table = self.table
        taken = self.server.replies_taken
        unlanded = self._unlanded(taken)
        error = None
        for slot, seq, failure in self._failures:  # (before the arrivals: a slot's own error comes first)
            exchange = table.exchange_of(slot)
            if exchange is not None and exchange.seq == seq:
                error = error or failure
                self.reports_loss[slot] = False
                table.idle(slot)
        self._failures.clear()
        for slot, seq in self._arrivals:
            exchange = table.exchange_of(slot)
            if exchange is None or exchange.seq != seq:  # a result for a command the slot no longer waits for
                continue
            if self.reports_loss[slot]:  # the reset of a replacement client, in SAME_STEP mode
                self.episodes.finish_reports(self.batch, [slot], {slot: next(iter(exchange.sent_at))})
                self.reports_loss[slot] = False
            table.arrive(slot)
        self._arrivals.clear()
        self._replies.clear()
        if not unlanded and not self._losses_unreported:  # (the look below costs a pass over the slots in flight)
            self._taken_seen = taken
            return error
        lost = []
        for slot, exchange in table.in_flight.items():
            if exchange.errors:
                error = error or exchange.errors[0][1]
                self.reports_loss[slot] = False
                table.idle(slot)
            elif exchange.lost:
                lost.append(slot)
            elif not exchange.pending:
                # its reply was cut short (an interrupted receive): the result is gone, the slot takes actions
                self.reports_loss[slot] = False
                table.idle(slot)
        reporting = self.episodes.unreported(lost)  # (the others wait for the vector to learn of the loss)
        self._report(reporting)
        self._losses_unreported = len(reporting) < len(lost)
        self._taken_seen = taken
        self._starting = False
        return error

    def _unlanded(self, taken: int) -> bool:
        """Whether a command may have ended without a RESULT landing since the last :meth:`collect` (its client
        answered ERROR or was lost, an interrupt cut its reply or its start short). The server's count of replies
        taken may be one too high after an interrupt, which costs one look more, never one less."""
        return taken - self._taken_seen > len(self._replies) or self._starting

    def take(self, size: int) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The first ``size`` READY results, as ``recv`` returns them (made before the slots become IDLE, so an
        interrupt returns them later rather than never)."""
        slots = self.table.ready[:size]
        results = self.batch.take(slots)
        self.table.idle_all(slots)
        self.batch.forget_infos(slots)
        return results

    def dispatch_parked(self) -> bool:
        """Send the parked commands of the slots that have a client now; whether there were any."""
        if not self.table.any_parked():
            return False
        owners = list(self.server.members.slots)  # (a client lost while sending: see send())
        parked = self.table.parked
        due = [slot for slot in sorted(parked) if owners[slot] is not None]
        if not due:
            return False
        seed: list[int | None] = [None] * self.server.num_envs
        for slot in due:
            command, owner = parked[slot], owners[slot]
            if owner is None:  # (due: only slots with an owner)
                continue
            plan = commands.one_slot(owner, slot)
            if command.kind == Kind.RESET:
                seed[slot] = command.seed
                options = command.options
                messages = lambda plan_of, options=options: commands.reset(seed, options, plan_of)  # noqa: E731
                self._start(owner, plan, messages, "reset")
            else:
                action = [command.action]
                messages = lambda plan_of, action=action: commands.listed_step(action, plan_of)  # noqa: E731
                self._start(owner, plan, messages, "step", each=True)
        return True

    def _report(self, slots: list[int]) -> None:
        """The results of ``slots``, whose client was lost (and the episodes know it): truncated,
        ``client_lost`` in their infos. Made anew by every call, so one an interrupt cut short is finished.

        In SAME_STEP mode the result waits for a replacement client's reset (its observation starts
        the next episode; the last one becomes ``final_obs``).
        """
        if not slots:
            return
        self.episodes.begin_reports(self.batch, slots)
        for slot in slots:
            if self.episodes.reset_replacements:
                self.reports_loss[slot] = True
                self.table.park(slot, Parked(Kind.RESET))
            else:
                self.table.arrive(slot)

    def send_in_slabs(self, slots: list[int], actions: np.ndarray) -> bool:
        """:meth:`send` for the common case: ``slots`` are all the slots of some clients, each client's in its env
        order (as :meth:`take` returns a client's results), every one of them a member whose slab takes a STEP for
        all its envs (PROTOCOL.md §13.6), and nothing is parked. ``actions`` (a numpy batch in the action space's own
        dtype, ``actions[row]`` for ``slots[row]``) are written straight in the slabs: no message is built. False,
        with nothing sent, otherwise."""
        if self.table.any_parked():
            return False
        server = self.server
        owners = server.members.slots
        members, rows = [], []
        start = 0
        while start < len(slots):
            client = owners[slots[start]]
            if client is None:
                return False
            channel = server.slab_channel(client)
            if channel is None:
                return False
            end = start + client.count
            if slots[start:end] != client.slots:
                return False
            members.append((client, channel))
            rows.append(slice(start, end))
            start = end
        posts = server.slab_posts(members, actions, rows)
        if posts is None:
            return False
        for post in posts:  # (an exchange each, as _start: a client's loss or error is its slots' alone)
            client = post[0]
            exchange = Exchange(server.next_seq(), Kind.RESULT, self._landing(None, each=True), "step")
            self._fly(client.slots, exchange)
            server.launch_in_slabs(exchange, [post], protocol.FLAG_EACH)
            self._starting = False
        return True

    def _start(
        self,
        owner: ClientInfo,
        plan: Plan,
        messages: Callable[[commands.PlanOf], Builder],
        what: str,
        each: bool = False,
    ) -> None:
        """Send the command for the slots of ``plan`` (``messages(plan_of)`` builds it) to ``owner``; their results
        land on arrival. ``each``: a STEP with FLAG_EACH (an env that raises costs no other slot its result)."""
        sink = self._landing(lambda _: plan, each)
        exchange = self.server.prepare([owner], messages(lambda _: plan), sink, reply_kind=Kind.RESULT, what=what)
        if each:
            frames = exchange.commands[0][1]
            frames[0] = protocol.add_flags(frames[0], protocol.FLAG_EACH)
        self._fly(plan.slots, exchange)
        self.server.launch(exchange)
        self._starting = False

    def _landing(self, plan_of: commands.PlanOf | None, each: bool) -> Landing:
        """Where the RESULT of a command started here lands (``plan_of`` None: it is for all its client's envs)."""
        return self.batch.landing(plan_of, self._arrivals, self._failures if each else None, self._replies)

    def _fly(self, slots: list[int], exchange: Exchange) -> None:
        """``slots`` go IN_FLIGHT awaiting ``exchange``, before its command goes out: a command cut short leaves them
        in flight with nothing awaited, which :meth:`collect` turns back to IDLE (``_starting`` tells it to look,
        until the caller, the command sent, clears it)."""
        self._starting = True
        for slot in slots:
            self.table.fly(slot, exchange)


def format_outstanding(table: SlotTable) -> str:
    """Which slots are still working and which wait for a client, for a timeout's message."""
    parked = sorted(table.parked)
    text = f"slots {protocol.format_slots(sorted(table.in_flight))} are still working"
    return text + (f", slots {protocol.format_slots(parked)} wait for a client" if parked else "")
