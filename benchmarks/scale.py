"""One learner, many clients: RemoteVectorEnv at 16 to 1,024 zero-cost clients, next to the floor of libzmq.

    python benchmarks/scale.py [--clients 16 256 1024] [--seconds 3] [--repeats 3]

Every client is a process of its own hosting one env that costs nothing (the C++ null client, CartPole's
spaces), over ZeroMQ tcp on loopback; so what is measured is the learner's own work per client message.
For each count of clients, in turns:

* ``floor``: a minimal pyzmq ROUTER that sends each of N C echo clients (``echo_client.c``, built here with
  ``cc``) a message of a STEP's size and waits for all their answers, of a RESULT's size; lock-step rounds.
  What one Python process can do over libzmq at all.
* ``lock-step``: ``RemoteVectorEnv.step()`` over N slots, one client each.
* ``partial``: the same vector (``batch_size = N / 2``) stepped with ``send`` / ``recv``.

Each row gives client messages per second (each message is one env's step and its result), the
learner process's CPU time per message (libzmq's I/O threads included), the client processes' CPU time per
message (all of them together share the cores with the learner), and how long the N clients took
to join (for the floor: until every echo client said it is ready). Each learner waits for replies
without spinning (``spin=0``), as the floor does. Linux (the clients are started and ended by pid);
needs the C++ clients built (``clients/cpp``) and a C compiler with libzmq's headers.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import zmq
from bench_envs import NullEnv
from cpp_clients import PROGRAMS

from gym_remote import RemoteVectorEnv

SOURCE = Path(__file__).resolve().parent / "echo_client.c"
SPACES = NullEnv.observation_space, NullEnv.action_space
STEP_FRAMES = (16, 8)  # a STEP for one env: header, one int64 action
RESULT_FRAMES = (26, 16)  # its RESULT: header and scalars (16 + 10 bytes), one float32 x 4 observation


def missing() -> str | None:
    """Why the scale case cannot run here (None if it can): the C++ null client, or a C compiler with libzmq."""
    if not PROGRAMS["null"].exists():
        return f"build the C++ clients first: {PROGRAMS['null']} is missing (see clients/cpp/README.md)"
    try:
        echo_client()
    except (OSError, subprocess.CalledProcessError) as error:
        return f"cannot build {SOURCE.name} with cc and libzmq: {error}"
    return None


def echo_client() -> Path:
    """The echo client's program, built on first use into a temporary directory removed when this process exits."""
    global _echo_client
    if _echo_client is None:
        directory = tempfile.mkdtemp(prefix="gym-remote-echo-client-")
        atexit.register(shutil.rmtree, directory, True)
        program = Path(directory) / "echo_client"
        subprocess.run(["cc", "-O2", "-o", str(program), str(SOURCE), "-lzmq"], check=True, capture_output=True)
        _echo_client = program
    return _echo_client


_echo_client: Path | None = None


class Fleet:
    """``count`` client processes running ``command``; :meth:`end` ends them by pid."""

    def __init__(self, command: list[str], count: int) -> None:
        self.processes: list[subprocess.Popen] = []
        try:
            for _ in range(count):
                quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
                self.processes.append(subprocess.Popen(command, **quiet))
        except BaseException:
            self.end()
            raise

    def cpu_seconds(self) -> float:
        """The CPU time the client processes (all their threads) have used so far: the scheduler's own count
        (``/proc/PID/task/TID/sched``, to the nanosecond; the tick counts of ``/proc/PID/stat`` are truncated per
        process, which loses all of it for a client that ran less than a tick)."""
        total = 0.0
        for process in self.processes:
            try:
                threads = os.listdir(f"/proc/{process.pid}/task")
            except OSError:  # (a process that is gone)
                continue
            for thread in threads:
                try:
                    with open(f"/proc/{process.pid}/task/{thread}/sched") as sched:
                        for line in sched:
                            if line.startswith("se.sum_exec_runtime"):
                                total += float(line.rpartition(":")[2])  # milliseconds
                                break
                except (OSError, ValueError):
                    continue
        return total / 1000

    def end(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


class Row:
    """One measured run: client messages per second, the learner's and the clients' CPU microseconds per
    message, join seconds."""

    def __init__(self, messages: int, elapsed: float, cpu: float, clients_cpu: float, join: float) -> None:
        self.rate = messages / elapsed
        self.cpu_us = 1e6 * cpu / messages
        self.clients_cpu_us = 1e6 * clients_cpu / messages
        self.join = join


def floor(clients: int, seconds: float) -> Row:
    """Lock-step rounds of a bare ROUTER over ``clients`` C echo clients for ``seconds``."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.RCVTIMEO, 60_000)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.bind("tcp://127.0.0.1:*")
    address = router.getsockopt_string(zmq.LAST_ENDPOINT)
    started = time.monotonic()
    fleet = Fleet([str(echo_client()), address, *map(str, RESULT_FRAMES)], clients)
    try:
        identities = [router.recv_multipart()[0] for _ in range(clients)]  # "ready"
        join = time.monotonic() - started
        command = [bytes(size) for size in STEP_FRAMES]
        rounds, cpu, clients_cpu, begun = 0, time.process_time(), fleet.cpu_seconds(), time.perf_counter()
        while time.perf_counter() - begun < seconds:
            for identity in identities:
                router.send_multipart([identity, *command])
            for _ in identities:
                router.recv_multipart()
            rounds += 1
        elapsed, cpu = time.perf_counter() - begun, time.process_time() - cpu
        clients_cpu = fleet.cpu_seconds() - clients_cpu
        for identity in identities:
            router.send_multipart([identity, b"stop"])
        return Row(rounds * clients, elapsed, cpu, clients_cpu, join)
    finally:
        fleet.end()
        router.close()
        context.term()


def remote(clients: int, seconds: float, partial: bool) -> Row:
    """RemoteVectorEnv over ``clients`` C++ null clients for ``seconds``: ``step()``, or ``send``/``recv``."""
    envs = RemoteVectorEnv(
        num_envs=clients,
        bind="tcp://127.0.0.1:*",
        observation_space=SPACES[0],
        action_space=SPACES[1],
        data_plane=False,
        spin=0,
        connect_timeout=120,
        batch_size=max(1, clients // 2) if partial else None,
    )
    started = time.monotonic()
    fleet = Fleet([str(PROGRAMS["null"]), envs.address, "--num-envs", "1", "--no-data-plane"], clients)
    try:
        if partial:
            envs.async_reset(seed=0)
            envs.unwrapped._server.wait_for_slots(120)
        else:
            envs.reset(seed=0)
        join = time.monotonic() - started
        actions = np.zeros(clients, dtype=np.int64)
        messages, cpu, clients_cpu, begun = 0, time.process_time(), fleet.cpu_seconds(), time.perf_counter()
        while time.perf_counter() - begun < seconds:
            if partial:
                env_id = envs.recv()[4]["env_id"]
                envs.send(actions[: len(env_id)], env_id)
                messages += len(env_id)
            else:
                envs.step(actions)
                messages += clients
        elapsed, cpu = time.perf_counter() - begun, time.process_time() - cpu
        clients_cpu = fleet.cpu_seconds() - clients_cpu
        if partial:
            while True:  # the last results, so that the clients are idle when the vector closes
                try:
                    envs.recv()
                except gym.error.NoAsyncCallError:
                    break
        return Row(messages, elapsed, cpu, clients_cpu, join)
    finally:
        envs.close()
        fleet.end()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    reason = missing()
    if reason is not None:
        sys.exit(reason)
    kinds = {
        "floor (bare ROUTER, C echo clients)": lambda n: floor(n, args.seconds),
        "RemoteVectorEnv, lock-step": lambda n: remote(n, args.seconds, partial=False),
        "RemoteVectorEnv, partial (batch N/2)": lambda n: remote(n, args.seconds, partial=True),
    }
    columns = ("messages/s", 11), ("x floor", 8), ("CPU µs/msg", 11), ("x floor", 8), ("clients µs", 11), ("join s", 7)
    print(f"{'clients':>7s}  {'row':38s} " + " ".join(f"{name:>{width}s}" for name, width in columns))
    for clients in args.clients:
        runs: dict[str, list[Row]] = {name: [] for name in kinds}
        for _ in range(args.repeats):  # the rows take turns
            for name, measure in kinds.items():
                runs[name].append(measure(clients))
        rate = {name: statistics.median(row.rate for row in rows) for name, rows in runs.items()}
        cpu = {name: statistics.median(row.cpu_us for row in rows) for name, rows in runs.items()}
        clients_cpu = {name: statistics.median(row.clients_cpu_us for row in rows) for name, rows in runs.items()}
        join = {name: max(row.join for row in rows) for name, rows in runs.items()}
        base = next(iter(kinds))
        for name in kinds:
            print(
                f"{clients:7d}  {name:38s} {rate[name]:11,.0f} {rate[name] / rate[base]:8.2f} "
                f"{cpu[name]:11.1f} {cpu[name] / cpu[base]:8.2f} {clients_cpu[name]:11.1f} {join[name]:7.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
