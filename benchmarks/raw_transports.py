"""Transport floors below ZeroMQ: lock-step echoes of gym_remote's message sizes over a Unix domain
socket and over shared memory with a blocking wake-up, and nothing else.

They answer what a same-host data plane could reach on this machine, next to ``echo.py``'s pyzmq
echo: the learner sends each client process a message of the size of a STEP and waits for a reply
of the size of a RESULT. Both block in the kernel while they wait (no spinning), so they measure
what they cost without burning a core.

* ``uds``: a ``SOCK_SEQPACKET`` socket pair per client, one ``send``/``recv_into`` each way.
* ``shm``: a shared anonymous memory block per client and two eventfds; the writer fills the block,
  then signals the reader's eventfd, which the reader blocks on in ``read``.

The client processes are forked (they inherit the sockets, memory and eventfds), so these run on
Linux only; elsewhere :func:`available` is False.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import socket
import struct
import sys
import time

HEADER = 16
_ONE = struct.pack("=Q", 1)


def available() -> bool:
    """Whether this machine has what the raw transports need (Linux: fork, eventfd, SOCK_SEQPACKET)."""
    return sys.platform.startswith("linux") and hasattr(os, "eventfd") and hasattr(socket, "SOCK_SEQPACKET")


def message_sizes(envs_per_client: int, obs_bytes: int, action_bytes: int) -> tuple[int, int]:
    """The bytes of a STEP (header and actions) and of a RESULT (header, 10 bytes of scalars per env,
    observations) for one client hosting ``envs_per_client`` envs, as gym_remote sends them."""
    return HEADER + envs_per_client * action_bytes, HEADER + 10 * envs_per_client + envs_per_client * obs_bytes


def _uds_client(sock: socket.socket, command_bytes: int, reply_bytes: int) -> None:
    command = bytearray(command_bytes)
    reply = bytes(reply_bytes)
    while sock.recv_into(command) == command_bytes:
        sock.send(reply)
    sock.close()


def _shm_client(block: mmap.mmap, to_client: int, to_learner: int, command_bytes: int, reply_bytes: int) -> None:
    reply = bytes(reply_bytes)
    while True:
        os.read(to_client, 8)
        if block[0] == 0xFF:  # stop
            break
        _ = bytes(block[:command_bytes])  # read the command, as a client would
        block[:reply_bytes] = reply
        os.write(to_learner, _ONE)


def uds_steps_per_second(clients: int, envs_per_client: int, obs_bytes: int, action_bytes: int, rounds: int) -> float:
    """Env-steps per second of ``rounds`` lock-step rounds over ``clients`` Unix-socket echo processes."""
    command_bytes, reply_bytes = message_sizes(envs_per_client, obs_bytes, action_bytes)
    context = multiprocessing.get_context("fork")
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(clients)]
    for learner_end, client_end in pairs:
        for end in (learner_end, client_end):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, max(1 << 16, 2 * reply_bytes))
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, max(1 << 16, 2 * reply_bytes))
        learner_end.settimeout(30)
    processes = [
        context.Process(target=_uds_client, args=(client_end, command_bytes, reply_bytes), daemon=True)
        for _, client_end in pairs
    ]
    for process in processes:
        process.start()
    ends = [learner_end for learner_end, _ in pairs]
    command, reply = bytes(command_bytes), bytearray(reply_bytes)
    try:
        started = 0.0
        for round_ in range(rounds + rounds // 10):  # the first tenth warms up
            if round_ == rounds // 10:
                started = time.perf_counter()
            for end in ends:
                end.send(command)
            for end in ends:
                end.recv_into(reply)
        elapsed = time.perf_counter() - started
    finally:
        for end in ends:
            end.close()  # the client's recv_into returns 0: it exits
        _end(processes)
        for _, client_end in pairs:
            client_end.close()
    return rounds * clients * envs_per_client / elapsed


def shm_steps_per_second(clients: int, envs_per_client: int, obs_bytes: int, action_bytes: int, rounds: int) -> float:
    """Env-steps per second of ``rounds`` lock-step rounds over ``clients`` shared-memory echo processes,
    each woken through an eventfd (and waking the learner through another)."""
    command_bytes, reply_bytes = message_sizes(envs_per_client, obs_bytes, action_bytes)
    context = multiprocessing.get_context("fork")
    size = max(command_bytes, reply_bytes)
    blocks = [mmap.mmap(-1, size) for _ in range(clients)]  # anonymous and shared: inherited by the fork
    to_clients = [os.eventfd(0) for _ in range(clients)]
    to_learner = [os.eventfd(0) for _ in range(clients)]
    processes = [
        context.Process(
            target=_shm_client, args=(blocks[i], to_clients[i], to_learner[i], command_bytes, reply_bytes), daemon=True
        )
        for i in range(clients)
    ]
    for process in processes:
        process.start()
    command = bytes(command_bytes)
    reply = bytearray(reply_bytes)
    try:
        started = 0.0
        for round_ in range(rounds + rounds // 10):
            if round_ == rounds // 10:
                started = time.perf_counter()
            for block, wake in zip(blocks, to_clients, strict=True):
                block[:command_bytes] = command
                os.write(wake, _ONE)
            for block, woken in zip(blocks, to_learner, strict=True):
                os.read(woken, 8)
                reply[:] = block[:reply_bytes]
        elapsed = time.perf_counter() - started
    finally:
        for block, wake in zip(blocks, to_clients, strict=True):
            block[0] = 0xFF
            os.write(wake, _ONE)
        _end(processes)
        for descriptor in to_clients + to_learner:
            os.close(descriptor)
        for block in blocks:
            block.close()
    return rounds * clients * envs_per_client / elapsed


def _end(processes: list) -> None:
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)


if __name__ == "__main__":
    if not available():
        sys.exit("the raw transports need Linux")
    for clients in (1, 2):
        for name, function in (("uds", uds_steps_per_second), ("shm+eventfd", shm_steps_per_second)):
            rate = function(clients, 8 // clients, 16, 8, 5000)
            print(f"{name:12s} {clients} client(s): {rate:,.0f} env-steps/s")
