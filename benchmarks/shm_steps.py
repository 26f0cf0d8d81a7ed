"""The ceiling a shared-memory step could reach in Python: CartPole stepped by forked client processes that
read their actions from, and write their results into, a shared block, next to SyncVectorEnv.

Nothing of gym_remote runs here: no messages, no membership, no faults handled. Each client owns a memfd
block (its actions, observations, rewards and flags, and two sequence numbers); the learner writes the
actions and the step's number, then signals the client's eventfd; the client steps its envs (Gymnasium's
next-step autoreset), writes the results and the number, and signals the learner's eventfd. A side that
*spins* busy-checks the number (yielding the core between looks) before it blocks in ``read`` on its
eventfd. It measures what issue 24's shared-memory link is for: how fast a step can be once it is a
handoff rather than a message, in each wake-up scheme, idle and next to a trainer thread.

    python benchmarks/shm_steps.py [--steps N] [--repeats R] [--trainer]

Linux only (fork, memfd, eventfd).
"""

from __future__ import annotations

import argparse
import mmap
import os
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from common import Trainer

NUM_ENVS = 8
OBS_SIZE = 4  # CartPole's observation
SPIN_SECONDS = 200e-6
COMMAND, RESULT, STOP = 0, 1, 2  # the control words


class Block:
    """One client's shared block: control words, then its envs' actions, observations, rewards and flags."""

    def __init__(self, envs: int, fd: int | None = None) -> None:
        size = 64 + envs * (8 + 4 * OBS_SIZE + 8 + 2)
        if fd is None:
            fd = os.memfd_create("gym-remote-shm-steps")
            os.ftruncate(fd, size)
        self.fd = fd
        view = memoryview(mmap.mmap(fd, size))
        self.control = np.frombuffer(view, np.uint64, 8, 0)
        offset = 64
        self.actions = np.frombuffer(view, np.int64, envs, offset)
        offset += 8 * envs
        self.observations = np.frombuffer(view, np.float32, envs * OBS_SIZE, offset).reshape(envs, OBS_SIZE)
        offset += 4 * OBS_SIZE * envs
        self.rewards = np.frombuffer(view, np.float64, envs, offset)
        offset += 8 * envs
        self.flags = np.frombuffer(view, np.uint8, 2 * envs, offset).reshape(2, envs)


def _wait(control: np.ndarray, word: int, old: int, spin: float, eventfd: int) -> int:
    """The control word's new value: spun for (yielding the core) up to ``spin`` seconds, then blocked for."""
    value = int(control[word])
    until = time.perf_counter() + spin
    while value == old and time.perf_counter() < until:
        os.sched_yield()
        value = int(control[word])
    while value == old:
        os.eventfd_read(eventfd)  # (a count left by a signal that found the peer spinning only loops once more)
        value = int(control[word])
    return value


def _serve(block: Block, envs: int, spin: float, to_client: int, to_learner: int) -> None:
    hosted = [gym.make("CartPole-v1") for _ in range(envs)]
    for index, env in enumerate(hosted):
        block.observations[index] = env.reset(seed=index)[0]
    autoreset = [False] * envs
    step = 0
    while True:
        step = _wait(block.control, COMMAND, step, spin, to_client)
        if block.control[STOP]:
            return
        for index, (env, action) in enumerate(zip(hosted, block.actions.tolist())):
            if autoreset[index]:
                observation, _ = env.reset()
                reward, terminated, truncated = 0.0, False, False
            else:
                observation, reward, terminated, truncated, _ = env.step(action)
            block.observations[index] = observation
            block.rewards[index] = reward
            block.flags[0, index], block.flags[1, index] = terminated, truncated
            autoreset[index] = terminated or truncated
        block.control[RESULT] = step
        os.eventfd_write(to_learner, 1)


def shm_rate(clients: int, client_spin: float, learner_spin: float, steps: int) -> float:
    """Env-steps per second of ``steps`` lock-steps of NUM_ENVS CartPoles over ``clients`` forked clients."""
    per_client = NUM_ENVS // clients
    blocks, pids, to_clients, to_learner = [], [], [], os.eventfd(0)
    for _ in range(clients):
        block, to_client = Block(per_client), os.eventfd(0)
        pid = os.fork()
        if pid == 0:
            try:
                _serve(Block(per_client, block.fd), per_client, client_spin, to_client, to_learner)
            finally:
                os._exit(0)
        blocks.append(block)
        pids.append(pid)
        to_clients.append(to_client)
    batch = np.zeros((NUM_ENVS, OBS_SIZE), np.float32)
    actions = np.random.default_rng(0).integers(0, 2, (steps + steps // 10, NUM_ENVS))

    def step(number: int, row: np.ndarray) -> np.ndarray:
        for index, block in enumerate(blocks):
            block.actions[:] = row[index * per_client : (index + 1) * per_client]
            block.control[COMMAND] = number
            os.eventfd_write(to_clients[index], 1)  # (wakes nobody if the client spins)
        for index, block in enumerate(blocks):
            _wait(block.control, RESULT, number - 1, learner_spin, to_learner)
            batch[index * per_client : (index + 1) * per_client] = block.observations
        return batch.copy()

    try:
        warmup = steps // 10
        for number in range(1, warmup + 1):
            step(number, actions[number - 1])
        started = time.perf_counter()
        for number in range(warmup + 1, warmup + steps + 1):
            step(number, actions[number - 1])
        elapsed = time.perf_counter() - started
    finally:
        for index, block in enumerate(blocks):
            block.control[STOP] = 1
            block.control[COMMAND] += 1
            os.eventfd_write(to_clients[index], 1)
        for pid in pids:
            os.waitpid(pid, 0)
    return steps * NUM_ENVS / elapsed


def sync_rate(steps: int) -> float:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * NUM_ENVS)
    envs.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, (steps + steps // 10, NUM_ENVS))
    for row in actions[: steps // 10]:
        envs.step(row)
    started = time.perf_counter()
    for row in actions[steps // 10 :]:
        envs.step(row)
    rate = steps * NUM_ENVS / (time.perf_counter() - started)
    envs.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trainer", action="store_true", help="a trainer thread busy in the learner's process")
    args = parser.parse_args()
    steps = args.steps
    cases: dict[str, Callable[[], float]] = {
        "SyncVectorEnv": lambda: sync_rate(steps),
        "1 client, both spin": lambda: shm_rate(1, SPIN_SECONDS, SPIN_SECONDS, steps),
        "1 client, both block": lambda: shm_rate(1, 0.0, 0.0, steps),
        "2 clients spin, learner blocks": lambda: shm_rate(2, SPIN_SECONDS, 0.0, steps),
        "2 clients, all spin": lambda: shm_rate(2, SPIN_SECONDS, SPIN_SECONDS, steps),
        "2 clients, all block": lambda: shm_rate(2, 0.0, 0.0, steps),
    }
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):  # the cases take turns
        for name, measure in cases.items():
            if args.trainer:
                with Trainer():
                    rates[name].append(measure())
            else:
                rates[name].append(measure())
    medians = {name: sorted(runs)[len(runs) // 2] for name, runs in rates.items()}
    print(f"CartPole-v1, {NUM_ENVS} envs{', next to a trainer thread' if args.trainer else ''}: env-steps/s")
    for name, median in medians.items():
        print(f"{name:32s} {median:10,.0f} {median / medians['SyncVectorEnv']:6.2f}x Sync")


if __name__ == "__main__":
    main()
