"""Speed, measured side by side: vector envs taking turns, medians of their rates.

Absolute speeds drift on shared machines; ratios between vector envs measured in the same run, in
turns, hold. ``gym-remote bench`` and the scripts in ``benchmarks/`` measure with these.

>>> import gymnasium as gym
>>> from gym_remote.bench import interleaved_medians, lock_step_rate
>>> make = lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
>>> medians = interleaved_medians({"sync": (make, lock_step_rate(steps=50, warmup=5))}, repeats=2)
>>> sorted(medians), medians["sync"] > 0
(['sync'], True)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import gymnasium as gym

__all__ = ["Case", "interleaved_medians", "lock_step_rate", "format_table"]

Case = tuple[Callable[[], gym.vector.VectorEnv], Callable[[gym.vector.VectorEnv], float]]
"""How to make a vector env, and how to measure it (a rate); the env is closed after each run."""


def interleaved_medians(
    cases: dict[str, Case],
    repeats: int,
    runs: dict[str, list[float]] | None = None,
    on_run: Callable[[str], object] | None = None,
) -> dict[str, float]:
    """Each case measured ``repeats`` times, the cases taking turns; the median of each.

    ``runs`` receives every measurement; ``on_run(name)`` is called after each (for progress).
    """
    results: dict[str, list[float]] = runs if runs is not None else {}
    results.update({name: [] for name in cases})
    for _ in range(repeats):
        for name, (make, measure) in cases.items():
            envs = make()
            try:
                results[name].append(measure(envs))
            finally:
                envs.close()
            if on_run is not None:
                on_run(name)
    return {name: statistics.median(results[name]) for name in cases}


def lock_step_rate(steps: int, warmup: int, seed: int = 0) -> Callable[[gym.vector.VectorEnv], float]:
    """Env-steps per second of ``step()`` with random actions (drawn before the clock starts), from ``seed``."""

    def measure(envs: gym.vector.VectorEnv) -> float:
        envs.action_space.seed(seed)
        actions = [envs.action_space.sample() for _ in range(steps + warmup)]
        envs.reset(seed=seed)
        for action in actions[:warmup]:
            envs.step(action)
        started = time.perf_counter()
        for action in actions[warmup:]:
            envs.step(action)
        return steps * envs.num_envs / (time.perf_counter() - started)

    return measure


def format_table(title: str, medians: dict[str, float], what: str, ratios: dict[str, str]) -> str:
    """One row per case: its median, then its ratio to each baseline (``ratios``: column title -> case name)."""
    width = max(len(name) for name in medians) + 2
    header = "".join(f" {column:>10s}" for column in ratios)
    lines = [title, f"{'':{width}s} {what:>12s}{header}"]
    for name, median in medians.items():
        cells = "".join(f" {median / medians[baseline]:10.2f}" for baseline in ratios.values())
        lines.append(f"{name:{width}s} {median:12,.0f}{cells}")
    return "\n".join(lines)
