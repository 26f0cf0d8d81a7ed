"""The transport floor: a raw pyzmq lock-step echo with gym_remote's message sizes, and nothing else.

The learner's ROUTER sends each of ``clients`` DEALER processes one message of the size of a STEP
(header + actions) and waits for every reply of the size of a RESULT (header + scalars, observations);
the rate of these rounds, times the envs they stand for, is what ZeroMQ itself allows on this machine.
With ``spin``, the learner busy-checks its socket before each blocking receive, as RemoteVectorEnv's
``spin`` does, so that the two are compared waiting the same way.
"""

from __future__ import annotations

import multiprocessing
import time

import zmq

HEADER = 16


def _echo(address: str, identity: bytes, reply_sizes: list[int]) -> None:
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, identity)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    reply = [bytes(size) for size in reply_sizes]
    sock.send(b"ready")
    while True:
        frames = sock.recv_multipart()
        if frames[0] == b"stop":
            break
        sock.send_multipart(reply, copy=len(reply[-1]) < 65536)
    sock.close()
    context.term()


def echo_steps_per_second(
    clients: int,
    envs_per_client: int,
    obs_bytes: int,
    action_bytes: int,
    rounds: int,
    address: str,
    spin: float = 0.0,
) -> float:
    """Env-steps per second of ``rounds`` lock-step rounds over ``clients`` echo processes on ``address``.

    Each client stands for ``envs_per_client`` envs: it receives ``16 + envs*action_bytes`` bytes and
    answers with ``16 + 10*envs`` and ``envs*obs_bytes`` bytes, as gym_remote's STEP and RESULT.
    """
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.RCVTIMEO, 30_000)
    if address.endswith(":*"):
        router.bind(address)
        address = router.getsockopt_string(zmq.LAST_ENDPOINT)
    else:
        router.bind(address)
    identities = [f"echo-{index}".encode() for index in range(clients)]
    reply_sizes = [HEADER + 10 * envs_per_client, envs_per_client * obs_bytes]
    processes = [
        multiprocessing.Process(target=_echo, args=(address, identity, reply_sizes), daemon=True)
        for identity in identities
    ]
    for process in processes:
        process.start()
    try:
        for _ in identities:
            router.recv_multipart()  # "ready"
        command = [bytes(HEADER), bytes(envs_per_client * action_bytes)]
        small = envs_per_client * obs_bytes < 65536
        started = 0.0
        for round_ in range(rounds + rounds // 10):  # the first tenth warms up
            if round_ == rounds // 10:
                started = time.perf_counter()
            for identity in identities:
                router.send_multipart([identity, *command])
            for _ in identities:
                if spin:
                    until = time.perf_counter() + spin
                    while not router.get(zmq.EVENTS) & zmq.POLLIN and time.perf_counter() < until:
                        pass
                router.recv_multipart(copy=small)  # large replies stay in libzmq's buffers: no copy
        elapsed = time.perf_counter() - started
        for identity in identities:
            router.send_multipart([identity, b"stop"])
    finally:
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.kill()
        router.close()
        context.term()
    return rounds * clients * envs_per_client / elapsed
