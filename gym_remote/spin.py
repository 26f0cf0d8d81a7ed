"""When a wait for a message busy-checks first: the one rule both faces follow for their ``spin``.

A wait that spins finds a message that comes within the spin microseconds sooner than one that sleeps in
``poll()`` (a thread's wake-up costs tens of microseconds, as much as a cheap env's step), at the price of a
core kept busy. It pays only while messages come within the spin, so each wait asks a :class:`SpinGate`
how long to spin, and tells it how long the message took.

>>> gate = SpinGate(200e-6)
>>> gate.now()  # nothing measured yet: spin
0.0002
>>> for _ in range(20):
...     gate.waited(1.0)  # a slow peer (a learner training, an env that works) ...
>>> gate.now()  # ... turns the spin off
0.0
>>> for _ in range(20):
...     gate.waited(50e-6)  # messages come fast again: the spin is back
>>> gate.now()
0.0002
"""

from __future__ import annotations

import threading
import time

__all__ = ["CROWDED_SHARE", "OtherThreads", "SpinGate"]

_WEIGHT = 0.25
"""The weight of the latest wait in the moving average."""

CROWDED_SHARE = 0.5
"""A core's share that the waiting process's other threads may use before a wait stops spinning."""


class SpinGate:
    """A moving average of how long messages took to come, and the spin it calls for: ``spin`` while the
    average is below it, else 0.

    Each wait counts for at most twice the spin: a single late message (the process preempted, time stolen
    by the hypervisor) cannot turn the spin off by itself, while a few slow ones in a row do. Without that
    bound one late message turned it off, and the waits that followed, asleep, took a wake-up longer than
    the spin, so it stayed off (measured: half the rate of a 1-client CartPole learner, in some runs).

    A spin also needs a core of its own: while the learner's process's other threads keep at least
    :data:`CROWDED_SHARE` of a core busy (a trainer thread next to the learner; see :attr:`crowded`), a wait
    that spins, the learner's or its clients', takes the core the other side or those threads need, and the
    waits sleep. (Measured: CartPole, 1 client, a trainer thread in the learner's process: the learner's spin
    cost 18 % of the rate there, and its client's spin 23 %.)
    """

    def __init__(self, spin: float) -> None:
        if not spin >= 0:
            raise ValueError(f"spin must be a duration in seconds >= 0, got {spin!r}")
        self.spin = float(spin)
        self._average = 0.0
        self.crowded = False
        """No core to spare for a spin now: waits sleep however fast messages come. A learner's process whose
        other threads keep :data:`CROWDED_SHARE` of a core busy (:meth:`OtherThreads.crowded`) is crowded, and
        so is a client whose learner's latest command says so (``FLAG_CROWDED``)."""

    def now(self) -> float:
        """How long the next wait spins, in seconds (0: it sleeps at once)."""
        return self.spin if self._average < self.spin and not self.crowded else 0.0

    def waited(self, seconds: float) -> None:
        """A message came ``seconds`` after the wait for it began."""
        self._average += _WEIGHT * (min(seconds, 2 * self.spin) - self._average)


class OtherThreads:
    """How much CPU the process's threads other than the caller's used since the last look: the process's CPU
    time less the calling thread's, over the wall time between looks."""

    def __init__(self) -> None:
        self._mark = self._now()

    @staticmethod
    def _now() -> tuple[int, float, float, float]:
        return threading.get_ident(), time.perf_counter(), time.process_time(), time.thread_time()

    def share(self) -> float | None:
        """The other threads' CPU time since the last look, in cores (None: the first look from this thread, or
        no time passed)."""
        previous, self._mark = self._mark, self._now()
        thread, wall, process, own = self._mark
        if thread != previous[0] or wall <= previous[1]:
            return None
        return max(0.0, (process - previous[2]) - (own - previous[3])) / (wall - previous[1])

    def crowded(self) -> bool | None:
        """Whether the other threads kept at least :data:`CROWDED_SHARE` of a core busy since the last look
        (None: as :meth:`share`)."""
        share = self.share()
        return None if share is None else share >= CROWDED_SHARE
