"""Envs of different speeds: lock-step ``step()`` against EnvPool-style partial batches, in one run.

    python benchmarks/partial_batches.py [--num-envs 8] [--fast-ms 1] [--slowdown 10] [--seconds 3] [--repeats 3]

Half the envs (the odd slots) take ``--slowdown`` times longer per step than the others, as when
clients run on machines of different speeds or simulate scenes of different weight. Their step waits
(``time.sleep``) rather than computes, so that the 2 cores of a small machine are not what limits
the result. Every env has its own client process. Lock-step ``step()`` waits for the slowest env every
time; ``send``/``recv`` with ``batch_size = num_envs / 2`` returns whichever envs are done. The table
shows env-steps per second (medians of ``--repeats`` interleaved runs) and the ratio to lock-step.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from common import Case, interleaved_medians, print_table

from gym_remote import RemoteVectorEnv


class Sleepy(gym.Wrapper):
    """CartPole whose every step also waits ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.delay = delay

    def step(self, action):
        time.sleep(self.delay)
        return self.env.step(action)


def lock_step(envs: RemoteVectorEnv, seconds: float) -> float:
    """Env-steps per second of ``step()`` with random actions."""
    rng = np.random.default_rng(0)
    envs.reset(seed=0)
    for _ in range(5):  # warm-up
        envs.step(rng.integers(0, 2, envs.num_envs))
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        envs.step(rng.integers(0, 2, envs.num_envs))
        steps += envs.num_envs
    return steps / (time.perf_counter() - started)


def partial_batches(envs: RemoteVectorEnv, seconds: float) -> float:
    """Env-steps per second of the ``send``/``recv`` loop with random actions."""
    rng = np.random.default_rng(0)
    envs.async_reset(seed=0)
    for _ in range(10):  # warm-up
        env_id = envs.recv()[4]["env_id"]
        envs.send(rng.integers(0, 2, len(env_id)), env_id)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        env_id = envs.recv()[4]["env_id"]
        steps += len(env_id)
        envs.send(rng.integers(0, 2, len(env_id)), env_id)
    elapsed = time.perf_counter() - started
    while True:  # collect the last results, so that the envs close idle
        try:
            envs.recv()
        except gym.error.NoAsyncCallError:
            return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--fast-ms", type=float, default=1.0, help="step time of the fast envs")
    parser.add_argument("--slowdown", type=float, default=10.0, help="how many times slower the slow envs are")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, fast = args.num_envs, args.fast_ms / 1000
    delays = [fast * (args.slowdown if slot % 2 else 1) for slot in range(n)]
    env_fns = [lambda delay=delay: Sleepy(delay) for delay in delays]

    def remote(batch_size: int) -> RemoteVectorEnv:
        return RemoteVectorEnv(env_fns, num_clients=n, batch_size=batch_size)

    def run(loop: Callable[[RemoteVectorEnv, float], float]) -> Callable[[RemoteVectorEnv], float]:
        return lambda envs: loop(envs, args.seconds)

    cases: dict[str, Case] = {
        "lock-step step()": (lambda: remote(n), run(lock_step)),
        f"send/recv, batch_size={n}": (lambda: remote(n), run(partial_batches)),
        f"send/recv, batch_size={n // 2}": (lambda: remote(n // 2), run(partial_batches)),
        f"send/recv, batch_size={max(1, n // 4)}": (lambda: remote(max(1, n // 4)), run(partial_batches)),
    }
    medians = interleaved_medians(cases, args.repeats)
    title = (
        f"{n} envs, one client each: {n - n // 2} take {args.fast_ms:g} ms a step, {n // 2} take "
        f"{args.fast_ms * args.slowdown:g} ms; median of {args.repeats} runs of {args.seconds:g} s"
    )
    print_table(title, medians, "lock-step step()", "env-steps/s", "x lock-step")


if __name__ == "__main__":
    main()
