"""Episodes that end with their client: which slots lost theirs, and how the loss is reported.

:class:`Episodes` is the single owner of the slots whose client was lost after the episodes began
and whose loss the learner has not reported yet. Lock-step ``step()`` and partial batches both
report through it, in the same words: the slot's result is truncated with reward 0 and
``infos["client_lost"]``; in SAME_STEP mode its last observation becomes ``final_obs`` and the
result waits for a replacement client's reset, whose observation starts the next episode. No
sockets: the caller resets the slots when :attr:`Episodes.reset_replacements` says so.

Example:
    >>> import gymnasium as gym
    >>> from gymnasium.vector import AutoresetMode
    >>> from gym_remote.batch import ResultBatch
    >>> from gym_remote.episodes import Episodes
    >>> batch = ResultBatch(gym.spaces.Discrete(3), 2)
    >>> episodes = Episodes(2, AutoresetMode.NEXT_STEP)
    >>> episodes.start()
    >>> episodes.client_lost([1], "its connection is gone")
    >>> episodes.begin_reports(batch)
    [1]
    >>> episodes.unreported([0, 1]), bool(batch.truncations[1]), batch.slot_infos[1]
    ([], True, {'client_lost': True})
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gymnasium.vector import AutoresetMode

from gym_remote import protocol
from gym_remote.batch import ResultBatch

__all__ = ["Episodes"]

logger = logging.getLogger(__name__)


class Episodes:
    """Lost-but-unreported slots among ``num_envs``, and their loss reports, for a vector in ``autoreset_mode``."""

    def __init__(self, num_envs: int, autoreset_mode: AutoresetMode) -> None:
        self.num_envs = num_envs
        self.autoreset_mode = autoreset_mode
        self.started = False  # the first reset happened: a lost client now ends an episode
        self._lost: dict[int, str] = {}  # slot -> why its client was lost
        self._lost_client: dict[int, bytes | None] = {}  # slot -> the client whose loss that was
        self._reporting: set[int] = set()  # reports begun, waiting for a replacement's reset (SAME_STEP)
        # SAME_STEP with empty_slots="mask": slots whose loss was reported without a replacement; a client that
        # comes to serve one resets it before its first step
        self.awaiting_reset: set[int] = set()

    @property
    def reset_replacements(self) -> bool:
        """Whether a report waits for the reset of a replacement client (SAME_STEP: the next episode
        starts in the step that reports the loss)."""
        return self.autoreset_mode is AutoresetMode.SAME_STEP

    @property
    def any_unreported(self) -> bool:
        """Whether some loss is still to be reported."""
        return bool(self._lost)

    def start(self) -> None:
        """The episodes began (the first reset)."""
        self.started = True

    def client_lost(self, slots: Iterable[int], reason: str, client: bytes | None = None) -> None:
        """The client of ``slots`` (its identity: ``client``) is gone; before the episodes began, that ends
        nothing. A replacement lost while a report waits for its reset adds nothing to that report, unless
        its reset landed first (see :meth:`finish_reports`)."""
        if self.started:
            for slot in slots:
                self._lost[slot] = reason
                self._lost_client[slot] = client

    def still_running(self) -> list[int]:
        """The slots whose episodes go on: all but those whose loss is still to be reported."""
        if not self._lost:
            return list(range(self.num_envs))
        return [slot for slot in range(self.num_envs) if slot not in self._lost]

    def unreported(self, slots: Iterable[int]) -> list[int]:
        """Those of ``slots`` whose loss is still to be reported, in the order given."""
        return [slot for slot in slots if slot in self._lost]

    def forget(self, slots: Iterable[int]) -> None:
        """New episodes start in ``slots`` (they are reset): their losses need no report any more."""
        for slot in slots:
            self._lost.pop(slot, None)
            self._lost_client.pop(slot, None)
            self._reporting.discard(slot)

    def reset_done(self, slots: Iterable[int]) -> None:
        """``slots`` were reset: none waits for a reset any more (see :attr:`awaiting_reset`)."""
        self.awaiting_reset.difference_update(slots)

    def begin_reports(self, batch: ResultBatch, slots: Iterable[int] | None = None) -> list[int]:
        """Report the losses of ``slots`` (default: every unreported one) in ``batch``; the slots reported.

        Without :attr:`reset_replacements` the reports are written at once and done. With it, the
        slots keep counting as unreported until :meth:`finish_reports`, after the replacement's reset.
        """
        if not self._lost:
            return []
        due = sorted(self._lost) if slots is None else sorted(set(self.unreported(slots)))
        due = [slot for slot in due if slot not in self._reporting]
        if not due:
            return []
        batch.prepare_loss_reports(due, self.reset_replacements)
        if self.reset_replacements:
            self._reporting.update(due)
        else:
            self._write(batch, due)
        return due

    def finish_reports(self, batch: ResultBatch, slots: list[int], reset_by: dict[int, bytes] | None = None) -> None:
        """The replacements of ``slots`` have reset (``reset_by``: the identity of the client whose reset landed
        in each slot): their results now report the loss (SAME_STEP). A replacement lost after its reset
        landed ended the episode it began: that loss is reported next."""
        again = {
            slot: (self._lost[slot], reset_by[slot])
            for slot in slots
            if reset_by and slot in self._lost and self._lost_client.get(slot) == reset_by.get(slot, b"")
        }
        self._write(batch, slots)
        for slot, (reason, identity) in again.items():
            self._lost[slot], self._lost_client[slot] = reason, identity

    def report_without_replacement(self, batch: ResultBatch, slots: list[int]) -> None:
        """Report the losses of ``slots`` now, with no replacement to reset them (``empty_slots="mask"``): in
        SAME_STEP mode the last observation is ``final_obs`` and stays the row's observation, and the slot is
        reset when a client serves it again (:attr:`awaiting_reset`)."""
        batch.prepare_loss_reports(slots, self.reset_replacements)
        self._reporting.difference_update(slots)
        self._write(batch, slots)
        if self.reset_replacements:
            self.awaiting_reset.update(slots)

    def retry_reports(self, slots: Iterable[int]) -> None:
        """The replacement reset of ``slots`` failed: their losses are reported again, from the start, later."""
        self._reporting.difference_update(slots)

    def _write(self, batch: ResultBatch, slots: list[int]) -> None:
        batch.write_loss_reports(slots)
        self.forget(slots)
        logger.info("slots %s: episodes truncated, their client was lost", protocol.format_slots(slots))
