"""Partial batches (EnvPool's ``send`` / ``recv``): each slot steps on its own, results return as they arrive.

:class:`PartialBatches` keeps where every slot's result is: *busy* from ``send`` until ``recv``
returns it, and meanwhile *in flight* (a command computes it), *parked* (the slot has no client: the
command waits for one), or *ready* (arrived, queued in arrival order). Every slot gets a command of
its own (``FLAG_SUBSET`` for clients hosting several envs), so its result returns as soon as its env
is done, and an env that raises costs no other slot its result. The
:class:`~gym_remote.RemoteVectorEnv` owns it and calls it from ``async_reset``, ``send`` and ``recv``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from gym_remote import commands, protocol
from gym_remote.batch import ResultBatch
from gym_remote.commands import Builder, Plan
from gym_remote.errors import RemoteTimeoutError
from gym_remote.protocol import Kind
from gym_remote.server import ClientInfo, Exchange, SlotServer

__all__ = ["PartialBatches"]

logger = logging.getLogger(__name__)


@dataclass
class _Parked:
    """A command for a slot without a client, sent when one serves the slot: a RESET (with the slot's
    seed and the options) or a STEP (with the slot's action)."""

    kind: Kind
    seed: int | None = None
    options: Any = None
    action: Any = None


class PartialBatches:
    """The per-slot bookkeeping of ``send`` / ``recv`` over a server's slots.

    Args:
        server: the server whose clients serve the slots.
        autoreset_mode: the vector's; in SAME_STEP mode a lost client's result waits for the reset of
            a replacement.
        lost_unreported: the vector's record of slots whose client was lost and whose episode has not
            yet been reported as truncated (shared with the lock-step calls).
    """

    def __init__(self, server: SlotServer, autoreset_mode: AutoresetMode, lost_unreported: dict[int, str]) -> None:
        self.server = server
        self.autoreset_mode = autoreset_mode
        self.lost_unreported = lost_unreported
        self.batch: ResultBatch | None = None  # set once the spaces are known
        self.busy = np.zeros(server.num_envs, dtype=np.bool_)  # sent, and not yet returned by recv()
        self.in_flight: dict[int, Exchange] = {}  # slot -> the command computing its result
        self.parked: dict[int, _Parked] = {}
        self.ready: deque[int] = deque()  # slots whose results have arrived, in arrival order
        self.loss_reports: set[int] = set()  # slots whose next result reports their lost client
        self.joined = False  # a client joined since the parked commands were last dispatched
        self._exchanges: dict[Exchange, int] = {}  # commands not yet settled, with their slots

    def outstanding(self) -> list[int]:
        """The slots whose results are still coming (in flight or parked)."""
        return sorted(self.in_flight.keys() | self.parked.keys())

    def reset_all(self, seed: list[int | None], options: Any) -> None:
        """Start resetting every slot (``seed[slot]``); results that were not returned yet are dropped."""
        self.ready.clear()
        self.loss_reports.clear()
        self.busy[:] = True
        for slot in range(len(seed)):
            self.parked[slot] = _Parked(Kind.RESET, seed[slot], options)
        self.dispatch_parked()

    def send(
        self, slots: list[int], messages: Callable[[commands.PlanOf], Builder], per_env: Callable[[], list]
    ) -> None:
        """Send actions to ``slots`` (``slots[row]`` gets row ``row``; none of them busy).

        ``messages(plan_of)`` makes the STEP messages for plans (:func:`commands.step`); ``per_env()``
        splits the actions per slot, for the slots that must wait for a client.
        """
        server = self.server
        reporting = [slot for slot in slots if slot in self.lost_unreported]  # their actions are not needed
        others = [(slot, row) for row, slot in enumerate(slots) if slot not in self.lost_unreported]
        served = [(slot, row) for slot, row in others if server.slots[slot] is not None]
        unserved = [(slot, row) for slot, row in others if server.slots[slot] is None]
        actions = per_env() if unserved else []
        self.busy[slots] = True
        self.report_losses(reporting)
        for slot, row in unserved:
            self.parked[slot] = _Parked(Kind.STEP, action=actions[row])
        for slot, row in served:
            self._start(slot, commands.one_slot(server.slots[slot], slot, row), messages, "step")
        self.dispatch_parked()

    def recv(self, size: int, timeout: float) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of the first ``size`` slots to have them (``size`` no more than the busy slots).

        Raises:
            RemoteEnvError: an env raised (its slot then takes actions again).
            RemoteTimeoutError: fewer than ``size`` results came within ``timeout`` seconds; the
                slots still working stay in flight.
        """
        self.dispatch_parked()

        def done() -> bool:
            if self.joined and self.parked:
                self.dispatch_parked()
            return len(self.ready) >= size or any(exchange.errors for exchange in self._exchanges)

        arrived = self.server.wait(done, time.monotonic() + timeout)
        self._settle()
        if not arrived:
            parked = sorted(self.parked)
            raise RemoteTimeoutError(
                f"recv() timed out after {timeout:g} s: {len(self.ready)} of the {size} results it waits for "
                f"arrived; slots {protocol.format_slots(sorted(self.in_flight))} are still working"
                + (f", slots {protocol.format_slots(parked)} wait for a client" if parked else "")
                + " (they stay in flight: a later recv() returns them)"
            )
        slots = [self.ready.popleft() for _ in range(size)]
        self.busy[slots] = False
        return self.batch.take(slots)

    def on_lost(self, client: ClientInfo) -> None:
        """``client`` is lost: the results of its slots in flight become reports of the loss."""
        self.report_losses([slot for slot in client.slots if self.in_flight.pop(slot, None) is not None])

    def report_losses(self, slots: list[int]) -> None:
        """The results of ``slots``, whose client was lost: truncated, ``client_lost`` in their infos.

        In SAME_STEP mode the result waits for a replacement client's reset (its observation starts
        the next episode; the last one becomes ``final_obs``).
        """
        if not slots:
            return
        for slot in slots:
            self.lost_unreported.pop(slot, None)
        logger.info("slots %s: episodes truncated, their client was lost", protocol.format_slots(sorted(slots)))
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        self.batch.prepare_loss_reports(slots, same_step)
        if same_step:
            for slot in slots:
                self.loss_reports.add(slot)
                self.parked[slot] = _Parked(Kind.RESET)
        else:
            self.batch.write_loss_reports(slots)
            self.ready.extend(slots)
        self.server.release(slots)

    def dispatch_parked(self) -> None:
        """Send the parked commands of the slots that have a client now."""
        self.joined = False
        due = [slot for slot in sorted(self.parked) if self.server.slots[slot] is not None]
        if not due:
            return
        seed = [None] * self.server.num_envs
        for slot in due:
            command = self.parked.pop(slot)
            plan = commands.one_slot(self.server.slots[slot], slot)
            if command.kind == Kind.RESET:
                seed[slot] = command.seed
                options = command.options
                self._start(
                    slot, plan, lambda plan_of, options=options: commands.reset(seed, options, plan_of), "reset"
                )
            else:
                action = [command.action]
                self._start(slot, plan, lambda plan_of, action=action: commands.listed_step(action, plan_of), "step")

    def _start(self, slot: int, plan: Plan, messages: Callable[[commands.PlanOf], Builder], what: str) -> None:
        """Send ``slot``'s command (``messages(plan_of)`` builds it); its result lands and queues up on arrival."""

        def on_reply(client: ClientInfo, header: protocol.Header, frame: bytes) -> None:
            batch = self.batch
            batch.slot_infos.pop(slot, None)
            if slot not in self.loss_reports:
                batch.slot_finals.pop(slot, None)
            batch.read_result(self.server, client, header, frame, what, plan)
            if slot in self.loss_reports:  # the reset of a replacement client, in SAME_STEP mode
                self.loss_reports.discard(slot)
                batch.write_loss_reports([slot])
            self.in_flight.pop(slot, None)
            self.ready.append(slot)

        owner = self.server.slots[slot]
        exchange = self.server.start([owner], messages(lambda _: plan), on_reply, reply_kind=Kind.RESULT, what=what)
        if exchange.pending:
            self._exchanges[exchange] = slot
            self.in_flight[slot] = exchange
        elif slot in self.lost_unreported:  # lost while sending: the slot reports the loss
            self.report_losses([slot])

    def _settle(self) -> None:
        """Forget the commands that are over; raise the first env error one of them reported."""
        error = None
        for exchange, slot in list(self._exchanges.items()):
            if exchange.errors:  # no result: the slot takes actions again
                if self.in_flight.get(slot) is exchange:
                    del self.in_flight[slot]
                    self.busy[slot] = False
                error = error or exchange.errors[0][1]
                exchange.errors.clear()
            if not exchange.pending:
                del self._exchanges[exchange]
        if error is not None:
            raise error
