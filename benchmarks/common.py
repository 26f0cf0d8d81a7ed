"""What the benchmark scripts share: the measurements of ``gym_remote.bench``, and printing their table."""

from __future__ import annotations

from gym_remote.bench import Case, format_table, interleaved_medians, lock_step_rate

__all__ = ["Case", "interleaved_medians", "lock_step_rate", "print_table"]


def print_table(title: str, medians: dict[str, float], baseline: str, what: str, ratio: str) -> None:
    """One row per case: its median and its ratio to ``baseline``'s."""
    print(format_table(title, medians, baseline, what, ratio))
