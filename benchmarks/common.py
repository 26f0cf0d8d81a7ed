"""What the benchmark scripts share: interleaved repetitions, medians, and the table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import gymnasium as gym

Case = tuple[Callable[[], gym.vector.VectorEnv], Callable[[gym.vector.VectorEnv], float]]
"""How to make a vector env, and how to measure it (a rate); the env is closed after each run."""


def interleaved_medians(
    cases: dict[str, Case], repeats: int, runs: dict[str, list[float]] | None = None
) -> dict[str, float]:
    """Each case measured ``repeats`` times, the cases taking turns (absolute speeds drift on shared
    machines, ratios measured side by side hold); the median of each. ``runs`` receives every measurement."""
    results: dict[str, list[float]] = runs if runs is not None else {}
    results.update({name: [] for name in cases})
    for _ in range(repeats):
        for name, (make, measure) in cases.items():
            envs = make()
            try:
                results[name].append(measure(envs))
            finally:
                envs.close()
    return {name: statistics.median(results[name]) for name in cases}


def print_table(title: str, medians: dict[str, float], baseline: str, what: str, ratio: str) -> None:
    """One row per case: its median and its ratio to ``baseline``'s."""
    print(title)
    width = max(len(name) for name in medians) + 2
    print(f"{'':{width}s} {what:>12s} {ratio:>12s}")
    for name, median in medians.items():
        print(f"{name:{width}s} {median:12,.0f} {median / medians[baseline]:12.2f}")


def lock_step_rate(steps: int, warmup: int) -> Callable[[gym.vector.VectorEnv], float]:
    """Env-steps per second of ``step()`` with random actions (drawn before the clock starts)."""

    def measure(envs: gym.vector.VectorEnv) -> float:
        envs.action_space.seed(0)
        actions = [envs.action_space.sample() for _ in range(steps + warmup)]
        envs.reset(seed=0)
        for action in actions[:warmup]:
            envs.step(action)
        started = time.perf_counter()
        for action in actions[warmup:]:
            envs.step(action)
        return steps * envs.num_envs / (time.perf_counter() - started)

    return measure
