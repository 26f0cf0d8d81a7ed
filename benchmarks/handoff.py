"""What a blocking handoff between two processes costs when each side works before it answers.

A learner and one client, forked, play ping-pong over a Unix socket pair, both blocking in ``recv``.
Each side first works ``W`` µs (a busy loop) and then answers. The printed overhead is the round's
time less the ``2 W`` µs of work: what the two wake-ups cost. On a VM, a vCPU that has been idle for a
while is woken more dearly than one that went idle a moment ago, so the overhead grows with ``W`` even
though the messages do not change.

    python benchmarks/handoff.py [--rounds N] [--work 0 10 20 40 80 160]

Linux only (fork, ``AF_UNIX``).
"""

from __future__ import annotations

import argparse
import os
import socket
import time

MESSAGE = bytes(64)
STOP = b"\xff" * len(MESSAGE)


def _work(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def _answer(sock: socket.socket, work: float) -> None:
    buffer = bytearray(len(MESSAGE))
    while sock.recv_into(buffer) == len(MESSAGE) and buffer != STOP:
        _work(work)
        sock.sendall(MESSAGE)


def overhead_per_round(work_us: float, rounds: int) -> float:
    """µs a round takes beyond the ``2 * work_us`` of work, over ``rounds`` rounds."""
    learner, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    work = work_us * 1e-6
    pid = os.fork()
    if pid == 0:
        learner.close()
        try:
            _answer(client, work)
        finally:
            os._exit(0)
    client.close()
    buffer = bytearray(len(MESSAGE))
    try:
        started = time.perf_counter()
        for _ in range(rounds):
            learner.sendall(MESSAGE)
            learner.recv_into(buffer)
            _work(work)
        elapsed = time.perf_counter() - started
        learner.sendall(STOP)
    finally:
        learner.close()
        os.waitpid(pid, 0)
    return elapsed / rounds * 1e6 - 2 * work_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--work", type=float, nargs="+", default=[0, 10, 20, 40, 80, 160], metavar="US")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results: dict[float, list[float]] = {work: [] for work in args.work}
    for _ in range(args.repeats):  # the work sizes take turns, so that a drifting machine weighs on all alike
        for work in args.work:
            results[work].append(overhead_per_round(work, args.rounds))
    print(f"{'work per side, µs':>18s} {'overhead per round, µs (median)':>32s}")
    for work, overheads in results.items():
        print(f"{work:18g} {sorted(overheads)[len(overheads) // 2]:32.1f}")


if __name__ == "__main__":
    main()
