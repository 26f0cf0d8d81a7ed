"""CartPole-v1 steps per second: SyncVectorEnv, AsyncVectorEnv and RemoteVectorEnv, in one run.

    python benchmarks/cartpole.py [--num-envs 8] [--steps 4000] [--repeats 5]

Each vector env is measured ``--repeats`` times, interleaved with the others (absolute speeds drift
on shared machines; ratios measured side by side hold), after a warm-up; the table shows medians
and the ratio of each to AsyncVectorEnv. The full suite of cases lives in this folder's other scripts.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
from common import interleaved_medians, lock_step_rate, print_table

from gym_remote import RemoteVectorEnv

BENCHMARK_SECRET = "benchmark-secret-not-for-real-use"
"""Encrypts the CURVE case (its local clients get keys of their own; the secret only sets the server's)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env_fns = [lambda: gym.make("CartPole-v1") for _ in range(args.num_envs)]
    measure = lock_step_rate(args.steps, 200)
    cases = {
        "SyncVectorEnv": lambda: gym.vector.SyncVectorEnv(env_fns),
        "AsyncVectorEnv": lambda: gym.vector.AsyncVectorEnv(env_fns, shared_memory=True),
        "Remote, 1 client (ipc)": lambda: RemoteVectorEnv(env_fns, num_clients=1),
        "Remote, 2 clients (ipc)": lambda: RemoteVectorEnv(env_fns, num_clients=2),
        "Remote, 2 clients (tcp)": lambda: RemoteVectorEnv(env_fns, num_clients=2, bind="tcp://127.0.0.1:*"),
        "Remote, 2 clients (tcp, CURVE)": lambda: RemoteVectorEnv(
            env_fns, num_clients=2, bind="tcp://127.0.0.1:*", secret=BENCHMARK_SECRET
        ),
        f"Remote, {args.num_envs} clients (ipc)": lambda: RemoteVectorEnv(env_fns, num_clients=args.num_envs),
    }
    medians = interleaved_medians({name: (make, measure) for name, make in cases.items()}, args.repeats)
    title = f"CartPole-v1, {args.num_envs} envs, median of {args.repeats} runs of {args.steps} steps"
    print_table(title, medians, "AsyncVectorEnv", "steps/s", "x Async")


if __name__ == "__main__":
    main()
