"""Partial batches (EnvPool's ``send`` / ``recv``): each slot steps on its own, results return as they arrive.

Every slot is in one :class:`SlotState` at a time, kept in one array (:class:`SlotTable`)::

    IDLE --send()--> IN_FLIGHT --result lands--> READY --recv() returns it--> IDLE
      \\--send(), no client--> PARKED --a client serves the slot--> IN_FLIGHT
    IN_FLIGHT --the env raised--> IDLE          IN_FLIGHT --client lost--> READY (a loss report)
                                                           (SAME_STEP: PARKED for a replacement's reset)

Every slot gets a command of its own (``FLAG_SUBSET`` for clients hosting several envs), so its
result returns as soon as its env is done, and an env that raises costs no other slot its result.
:class:`PartialBatches` sends the commands; the :class:`~gym_remote.RemoteVectorEnv` waits, and
tells it what happened (:meth:`PartialBatches.collect`, :meth:`PartialBatches.client_lost`).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gym_remote import commands, protocol
from gym_remote.batch import ResultBatch
from gym_remote.commands import Builder, Plan
from gym_remote.episodes import Episodes
from gym_remote.errors import RemoteEnvError
from gym_remote.protocol import Kind
from gym_remote.server import Exchange, SlotServer

__all__ = ["PartialBatches", "SlotState", "SlotTable"]


class SlotState(enum.IntEnum):
    """Where a slot's result is in partial batches."""

    IDLE = 0  # nothing outstanding: the slot takes an action
    PARKED = 1  # its command waits for a client to serve the slot
    IN_FLIGHT = 2  # a command computes its result
    READY = 3  # its result arrived: recv() returns it, in arrival order


_IDLE, _PARKED, _IN_FLIGHT = int(SlotState.IDLE), int(SlotState.PARKED), int(SlotState.IN_FLIGHT)
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
    flight, the arrival order of ready results. Socket-free; every change goes through a method
    that checks the state it leaves."""

    def __init__(self, num_envs: int) -> None:
        self.state = np.full(num_envs, SlotState.IDLE, dtype=np.int8)
        self.parked: dict[int, Parked] = {}  # exactly the PARKED slots
        self.in_flight: dict[int, Exchange] = {}  # exactly the IN_FLIGHT slots
        self.ready: deque[int] = deque()  # exactly the READY slots, in arrival order

    def slots_in(self, state: SlotState) -> list[int]:
        return np.flatnonzero(self.state == state).tolist()

    @property
    def busy(self) -> np.ndarray:
        """Which slots have a result outstanding or unreturned (not IDLE)."""
        return self.state != _IDLE

    def any_busy(self) -> bool:
        """Whether any slot is not IDLE (on every lock-step call's path: kept cheap)."""
        return bool(self.state.any())  # IDLE is 0

    def outstanding(self) -> list[int]:
        """The slots whose results are still coming (PARKED or IN_FLIGHT)."""
        return np.flatnonzero((self.state == _PARKED) | (self.state == _IN_FLIGHT)).tolist()

    def park(self, slot: int, command: Parked) -> None:
        self._leave(slot)
        self.parked[slot] = command
        self.state[slot] = SlotState.PARKED

    def fly(self, slot: int, exchange: Exchange) -> None:
        self._leave(slot)
        self.in_flight[slot] = exchange
        self.state[slot] = SlotState.IN_FLIGHT

    def arrive(self, slot: int) -> None:
        self._leave(slot)
        self.ready.append(slot)
        self.state[slot] = SlotState.READY

    def idle(self, slot: int) -> None:
        self._leave(slot)
        self.state[slot] = SlotState.IDLE

    def take_ready(self, count: int) -> list[int]:
        """The first ``count`` ready slots, which become IDLE."""
        if count > len(self.ready):
            raise ValueError(f"{count} results asked for, {len(self.ready)} are ready")
        slots = [self.ready.popleft() for _ in range(count)]
        self.state[slots] = SlotState.IDLE
        return slots

    def clear(self) -> None:
        """Every slot IDLE (the exchanges in flight are the caller's to abandon first)."""
        self.parked.clear()
        self.in_flight.clear()
        self.ready.clear()
        self.state[:] = SlotState.IDLE

    def _leave(self, slot: int) -> None:
        state = self.state[slot]
        if state == SlotState.PARKED:
            del self.parked[slot]
        elif state == SlotState.IN_FLIGHT:
            del self.in_flight[slot]
        elif state == SlotState.READY:
            self.ready.remove(slot)


class PartialBatches:
    """The commands of ``send`` / ``recv`` over a server's slots, and where each slot's result is.

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
        self._arrivals: list[int] = []  # slots whose RESULT landed since the last collect(), in order

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
        splits the actions per slot, for the slots that must wait for a client.
        """
        owners = self.server.members.slots
        reporting = set(self.episodes.unreported(slots))  # their actions are not needed
        others = [(slot, row) for row, slot in enumerate(slots) if slot not in reporting]
        unserved = [(slot, row) for slot, row in others if owners[slot] is None]
        actions = per_env() if unserved else []
        self._report(sorted(reporting))
        for slot, row in unserved:
            self.table.park(slot, Parked(Kind.STEP, action=actions[row]))
        for slot, row in others:
            if owners[slot] is not None:
                self._start(slot, commands.one_slot(owners[slot], slot, row), messages, "step")
        self.dispatch_parked()

    def has_news(self, size: int) -> bool:
        """Whether :meth:`collect` would find ``size`` results, or an error (a wait's predicate: no side effects)."""
        if len(self.table.ready) + len(self._arrivals) >= size:
            return True
        return any(exchange.errors for exchange in self.table.in_flight.values())

    def collect(self) -> RemoteEnvError | None:
        """Move what arrived into the table: landed results become READY (in arrival order), a slot whose
        env raised becomes IDLE. Returns the first env error (its slot takes actions again)."""
        for slot in self._arrivals:
            if self.table.state[slot] != SlotState.IN_FLIGHT:
                continue
            self.table.arrive(slot)
            if self.reports_loss[slot]:  # the reset of a replacement client, in SAME_STEP mode
                self.reports_loss[slot] = False
                self.episodes.finish_reports(self.batch, [slot])
        self._arrivals.clear()
        error = None
        for slot, exchange in list(self.table.in_flight.items()):
            if exchange.errors:
                error = error or exchange.errors[0][1]
                self.table.idle(slot)
                self.reports_loss[slot] = False
            elif not exchange.pending and not exchange.lost:
                # its reply was cut short (an interrupted receive): the result is gone, the slot takes actions
                self.table.idle(slot)
                self.reports_loss[slot] = False
        return error

    def client_lost(self, slots: Iterable[int]) -> None:
        """The client of ``slots`` is lost: the results of those in flight become reports of the loss."""
        self._report([slot for slot in slots if self.table.state[slot] == SlotState.IN_FLIGHT])

    def take(self, size: int) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The first ``size`` READY results, as ``recv`` returns them."""
        return self.batch.take(self.table.take_ready(size))

    def dispatch_parked(self) -> None:
        """Send the parked commands of the slots that have a client now."""
        owners = self.server.members.slots
        due = [slot for slot in sorted(self.table.parked) if owners[slot] is not None]
        if not due:
            return
        seed = [None] * self.server.num_envs
        for slot in due:
            command = self.table.parked[slot]
            plan = commands.one_slot(owners[slot], slot)
            if command.kind == Kind.RESET:
                seed[slot] = command.seed
                options = command.options
                self._start(
                    slot, plan, lambda plan_of, options=options: commands.reset(seed, options, plan_of), "reset"
                )
            else:
                action = [command.action]
                self._start(slot, plan, lambda plan_of, action=action: commands.listed_step(action, plan_of), "step")

    def _report(self, slots: list[int]) -> None:
        """The results of ``slots``, whose client was lost: truncated, ``client_lost`` in their infos.

        In SAME_STEP mode the result waits for a replacement client's reset (its observation starts
        the next episode; the last one becomes ``final_obs``).
        """
        reported = self.episodes.begin_reports(self.batch, slots)
        if not reported:
            return
        if self.episodes.reset_replacements:
            for slot in reported:
                self.reports_loss[slot] = True
                self.table.park(slot, Parked(Kind.RESET))
        else:
            for slot in reported:
                self.table.arrive(slot)
        self.server.release(reported)

    def _start(self, slot: int, plan: Plan, messages: Callable[[commands.PlanOf], Builder], what: str) -> None:
        """Send ``slot``'s command (``messages(plan_of)`` builds it); its result lands on arrival."""
        owner = self.server.members.slots[slot]
        sink = self.batch.landing(lambda _: plan, self._arrivals)
        # lost while sending (nothing pending): the slot reports the loss once the vector learns of it
        self.table.fly(
            slot, self.server.start([owner], messages(lambda _: plan), sink, reply_kind=Kind.RESULT, what=what)
        )


def format_outstanding(table: SlotTable) -> str:
    """Which slots are still working and which wait for a client, for a timeout's message."""
    parked = sorted(table.parked)
    text = f"slots {protocol.format_slots(sorted(table.in_flight))} are still working"
    return text + (f", slots {protocol.format_slots(parked)} wait for a client" if parked else "")
