"""What the benchmark scripts share: the measurements of ``gym_remote.bench``, and printing their table."""

from __future__ import annotations

import threading

import numpy as np

from gym_remote.bench import Case, format_table, interleaved_medians, lock_step_rate

__all__ = ["Case", "Trainer", "interleaved_medians", "lock_step_rate", "print_table"]


def print_table(title: str, medians: dict[str, float], baseline: str, what: str, ratio: str) -> None:
    """One row per case: its median and its ratio to ``baseline``'s."""
    print(format_table(title, medians, what, {ratio: baseline}))


class Trainer:
    """A CPU-bound "trainer" in the learner's process while a vector env steps: a thread multiplying
    matrices (numpy releases the GIL, as torch does), which keeps one core busy."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._train, daemon=True)

    def _train(self) -> None:
        rng = np.random.default_rng(0)
        a, b = rng.random((192, 192)), rng.random((192, 192))
        while not self._stop.is_set():
            a = np.tanh(a @ b)

    def __enter__(self) -> Trainer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
