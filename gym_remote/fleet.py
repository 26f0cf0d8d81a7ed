"""What the learner knows of its fleet, for ``gym-remote status`` (socket-free).

:class:`FleetRecorder` keeps, per slot, the env-steps taken and the episodes finished with their returns
(the vector env records every batch of results it returns: a lock-step step's while the next step's commands
are out, so that the counting costs the round trip nothing; ``envs.status()`` counts the last one first), and
samples once a second what rates and latencies need. :func:`fleet_report` puts that together with the
membership (who serves which slot, who waits in line, who was refused) into the STATUS_REPORT value of
PROTOCOL.md §9.1: plain JSON types only.

>>> import numpy as np
>>> recorder = FleetRecorder(2)
>>> recorder.count_episodes(0.0)
>>> recorder.record(np.array([1.0, 2.0]), np.array([False, True]))
>>> recorder.record(np.array([1.0, 2.0]), np.array([True, False]))
>>> recorder.steps.tolist(), recorder.episodes.tolist(), recorder.return_sums.tolist()
([2, 2], [1, 1], [2.0, 2.0])
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

import numpy as np

__all__ = ["FleetRecorder", "fleet_report", "fleet_summary", "RATE_WINDOW_SECONDS"]

SAMPLE_SECONDS = 1.0
"""How often the recorder samples step counts and latencies."""

_add, _count_nonzero = np.add, np.count_nonzero  # (on the step path: numpy's any() costs three times as much)

RATE_WINDOW_SECONDS = 10.0
"""Env-steps per second are measured over about this long."""

LATENCY_SAMPLES = 60
"""Latency samples kept per slot (one a second: the last minute)."""


class FleetRecorder:
    """Per slot: env-steps, finished episodes and their returns, and samples of rates and latencies.

    ``record`` is on the step path: an integer per lock-step step, and once :meth:`count_episodes` was called a
    few numpy operations on arrays of ``num_envs`` values.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self._every_slot_steps = 0  # lock-step steps that returned every slot (one integer: the common case is cheap)
        self._slot_steps = np.zeros(num_envs, dtype=np.int64)  # the other steps, slot by slot
        self.episodes = np.zeros(num_envs, dtype=np.int64)
        self.return_sums = np.zeros(num_envs, dtype=np.float64)
        self._returns = np.zeros(num_envs, dtype=np.float64)  # of the episodes under way
        self.episodes_since: float | None = None  # the server's uptime when episodes began to count (None: not yet)
        self._counts: deque[tuple[float, np.ndarray]] = deque()  # (time, steps) samples over the rate window
        self._latencies: list[deque[float]] = [deque(maxlen=LATENCY_SAMPLES) for _ in range(num_envs)]
        self._sampled_at = -SAMPLE_SECONDS

    @property
    def steps(self) -> np.ndarray:
        """Env-steps each slot returned."""
        return self._slot_steps + self._every_slot_steps

    def count_episodes(self, uptime: float) -> None:
        """Count episodes and returns from now on (``uptime``: the server's, for :attr:`episodes_since`).

        Until someone asks for the fleet's figures, the recorder counts only steps (an integer per lock-step
        step): the episodes' bookkeeping costs a learner with two clients on two cores about 4 % of its steps."""
        if self.episodes_since is None:
            self.episodes_since = uptime

    def record(self, rewards: np.ndarray, ended: np.ndarray, rows: Any = None) -> None:
        """Results returned for the slots ``rows`` (all if None): one env-step each, with its reward; ``ended``
        (terminated or truncated) marks the episodes that ended with it."""
        if rows is None:
            self._every_slot_steps += 1
            if self.episodes_since is None:
                return
            _add(self._returns, rewards, out=self._returns)
        else:
            self._slot_steps[rows] += 1
            if self.episodes_since is None:
                return
            self._returns[rows] += rewards
        if _count_nonzero(ended):
            slots = np.flatnonzero(ended) if rows is None else np.asarray(rows)[ended]
            self.episodes[slots] += 1
            self.return_sums[slots] += self._returns[slots]
            self._returns[slots] = 0.0

    def restart(self, slots: Any) -> None:
        """``slots`` start new episodes without ending the ones under way (a reset): their returns so far drop."""
        self._returns[slots] = 0.0

    def due(self, now: float) -> bool:
        """Whether a sample is due (one every :data:`SAMPLE_SECONDS`)."""
        return now - self._sampled_at >= SAMPLE_SECONDS

    def sample(self, now: float, latencies: dict[int, float | None]) -> None:
        """Sample the step counts (for rates) and each served slot's latency; at most every
        :data:`SAMPLE_SECONDS` (a sample that is not :meth:`due` is not taken)."""
        if not self.due(now):
            return
        self._sampled_at = now
        self._counts.append((now, self.steps))
        while len(self._counts) > 2 and now - self._counts[1][0] >= RATE_WINDOW_SECONDS:
            self._counts.popleft()
        for slot, latency in latencies.items():
            if latency is not None:
                self._latencies[slot].append(latency)

    def forget_latencies(self, slots: Any) -> None:
        """A new client serves ``slots``: the latencies of the one before do not describe it."""
        for slot in np.atleast_1d(slots):
            self._latencies[int(slot)].clear()

    def rates(self, now: float) -> np.ndarray:
        """Env-steps per second of each slot over the rate window (up to ``now``)."""
        if not self._counts:
            return np.zeros(self.num_envs)
        since, counted = self._counts[0]
        elapsed = now - since
        if elapsed <= 0:
            return np.zeros(self.num_envs)
        return (self.steps - counted) / elapsed

    def latency(self, slot: int) -> tuple[float | None, float | None]:
        """The median and worst sampled latency of ``slot`` (seconds), or Nones without samples."""
        samples = self._latencies[slot]
        if not samples:
            return None, None
        return statistics.median(samples), max(samples)


def fleet_report(
    *,
    server: dict[str, Any],
    slots: list[dict[str, Any]],
    recorder: FleetRecorder,
    losses: list[int],
    waiting: list[dict[str, Any]],
    refused: dict[str, int],
    now: float,
) -> dict[str, Any]:
    """The STATUS_REPORT value (PROTOCOL.md §9.1): ``server``'s own fields, then a row per slot (from the
    membership's ``slots`` rows, with the recorder's figures and ``losses`` per slot), the clients ``waiting`` in
    line, and the refusals by reason."""
    rates, steps = recorder.rates(now), recorder.steps
    rows = []
    for row in slots:
        slot = row["slot"]
        median, worst = recorder.latency(slot)
        episodes = int(recorder.episodes[slot])
        entry: dict[str, Any] = {
            "slot": slot,
            "served": bool(row["served"]),
            "steps": int(steps[slot]),
            "steps_per_second": float(rates[slot]),
            "episodes": episodes,
            "mean_return": float(recorder.return_sums[slot] / episodes) if episodes else None,
            "losses": int(losses[slot]),
        }
        if row["served"]:
            entry.update(
                client=str(row["client"]),
                host=str(row["host"]),
                pid=int(row["pid"]),
                plane=str(row["plane"]),
                rejoins=int(row["rejoins"]),
                last_seen=float(row["last_seen"]),
                connected_for=float(row["connected_for"]),
                latency_median=median,
                latency_worst=worst,
            )
        else:
            entry["empty_for"] = float(row["empty_for"])
        rows.append(entry)
    return {**server, "episodes_since": recorder.episodes_since, "slots": rows, "waiting": waiting, "refused": refused}


def fleet_summary(report: dict[str, Any]) -> dict[str, float]:
    """The fleet as a few numbers, from a status report (:func:`fleet_report`): what the SB3 callback and the
    CleanRL example write to TensorBoard next to the training curves.

    Keys: ``slots``, ``served``, ``waiting``, ``joined``, ``rejoined``, ``lost``, ``left``, ``refused``,
    ``env_steps_per_second`` (all slots), ``step_latency_median_ms`` (the median of the slots' medians),
    ``step_latency_worst_ms``, ``episodes``, ``mean_return`` (over every episode so far; NaN before the first).

    >>> fleet_summary({"num_envs": 2, "served": 1, "waiting": [], "counts": {"joined": 2, "lost": 1}, "slots": [
    ...     {"steps_per_second": 10.0, "episodes": 2, "mean_return": 3.0, "latency_median": 0.001,
    ...      "latency_worst": 0.004},
    ...     {"steps_per_second": 0.0, "episodes": 0, "mean_return": None}]})["mean_return"]
    3.0
    """
    counts = report.get("counts", {})
    slots = report.get("slots", [])
    medians = [slot["latency_median"] for slot in slots if slot.get("latency_median") is not None]
    worsts = [slot["latency_worst"] for slot in slots if slot.get("latency_worst") is not None]
    episodes = sum(slot["episodes"] for slot in slots)
    returns = sum(slot["mean_return"] * slot["episodes"] for slot in slots if slot["episodes"])
    return {
        "slots": float(report.get("num_envs", len(slots))),
        "served": float(report.get("served", 0)),
        "waiting": float(len(report.get("waiting", []))),
        "joined": float(counts.get("joined", 0)),
        "rejoined": float(counts.get("rejoined", 0)),
        "lost": float(counts.get("lost", 0)),
        "left": float(counts.get("left", 0)),
        "refused": float(sum(value for key, value in counts.items() if key.startswith("refused:"))),
        "env_steps_per_second": float(sum(slot["steps_per_second"] for slot in slots)),
        "step_latency_median_ms": statistics.median(medians) * 1e3 if medians else float("nan"),
        "step_latency_worst_ms": max(worsts) * 1e3 if worsts else float("nan"),
        "episodes": float(episodes),
        "mean_return": returns / episodes if episodes else float("nan"),
    }
