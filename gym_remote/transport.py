"""Socket helpers shared by the server and the client: lean multipart sends and receives.

These sit on the step path, so they avoid pyzmq's conveniences that cost microseconds per frame
(enum flag arithmetic in ``send_multipart``, Frame objects for small zero-copy sends).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import zmq

from gym_remote.errors import ProtocolError

__all__ = [
    "send_frames",
    "recv_into",
    "recv_rest",
    "drain",
    "set_heartbeats",
    "terminate",
    "ZERO_COPY_BYTES",
    "MAX_FRAMES",
]

logger = logging.getLogger(__name__)

SNDMORE = int(zmq.SNDMORE)
RCVMORE = int(zmq.RCVMORE)

ZERO_COPY_BYTES = 1 << 20
"""Arrays at least this large are sent without copying; smaller frames are cheaper to copy.

pyzmq's zero-copy send hands each buffer's release to a thread of its own, which costs a wake-up;
on a 2-core VM copying measured faster up to about 1 MiB (a batch of 8 Atari-sized frames, 225 KB,
stepped ~15% faster copied), and zero-copy faster beyond."""


def send_frames(sock: zmq.Socket, frames: Sequence[Any]) -> None:
    """Send ``frames`` as one multipart message."""
    send = sock.send
    last = len(frames) - 1
    for position, frame in enumerate(frames):
        zero_copy = type(frame) is np.ndarray and frame.nbytes >= ZERO_COPY_BYTES
        send(frame, SNDMORE if position < last else 0, copy=not zero_copy)


def recv_into(sock: zmq.Socket, targets: Sequence[np.ndarray], what: str) -> None:
    """Receive the next frames of the current message straight into the arrays ``targets``.

    Raises:
        ProtocolError: the message ended early, or a frame's size differs from its target's.
    """
    get = sock.get
    receive = sock.recv_into
    for target in targets:
        if not get(RCVMORE):
            raise ProtocolError(f"{what}: the message ended before all its array frames")
        received = receive(target)
        if received != target.nbytes:
            raise ProtocolError(f"{what}: an array frame of {received} bytes, expected {target.nbytes}")


MAX_FRAMES = 65_536
"""Most frames a message may have; a peer sending more gets an error (libzmq bounds only each frame's size)."""


def recv_rest(sock: zmq.Socket) -> list[bytes]:
    """The remaining frames of the current message.

    Raises:
        ProtocolError: the message has more than ``MAX_FRAMES`` frames (the rest is discarded).
    """
    frames = []
    while sock.get(RCVMORE):
        if len(frames) == MAX_FRAMES:
            drain(sock)
            raise ProtocolError(f"a message of more than {MAX_FRAMES} frames")
        frames.append(sock.recv())
    return frames


def drain(sock: zmq.Socket) -> None:
    """Discard the remaining frames of the current message."""
    while sock.get(RCVMORE):
        sock.recv()


HEARTBEAT_INTERVAL_MS = 1000
"""How often libzmq sends a ZMTP heartbeat on a connection (more often for short timeouts)."""


def set_heartbeats(sock: zmq.Socket, liveness_timeout: float) -> None:
    """ZMTP heartbeats: libzmq closes a connection that shows no sign of life within ``liveness_timeout``.

    They are answered by the peer's libzmq I/O thread, whatever the peer's Python code is doing, so a
    busy env keeps its connection alive and a dead or unreachable process loses it.
    """
    timeout_ms = max(1, int(liveness_timeout * 1000))
    sock.setsockopt(zmq.HEARTBEAT_IVL, min(HEARTBEAT_INTERVAL_MS, max(1, timeout_ms // 4)))
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout_ms)
    sock.setsockopt(zmq.HEARTBEAT_TTL, timeout_ms)


TERMINATE_SECONDS = 5.0
"""How long :func:`terminate` waits by default for a context's sockets to close."""


def terminate(context: zmq.Context, timeout: float = TERMINATE_SECONDS) -> bool:
    """``context.term()``, waiting at most ``timeout`` seconds.

    ``term()`` waits for every socket of the context to be closed (and its linger to pass); one left open
    (by a thread that is stuck) would make it wait forever. Here it goes on in a daemon thread, which
    finishes if that socket closes later.

    Returns:
        True if the context is terminated; False (with a warning) if it was still waiting after ``timeout``.
    """
    errors: list[zmq.ZMQError] = []

    def term() -> None:
        try:
            context.term()
        except zmq.ZMQError as error:  # EINTR: a signal; nothing else is left to do with the context
            errors.append(error)

    thread = threading.Thread(target=term, name="gym_remote-context-term", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        logger.warning(
            "the ZeroMQ context did not terminate within %g s: a socket of it is still open; leaving it to "
            "terminate in the background",
            timeout,
        )
        return False
    if errors:
        logger.warning("terminating the ZeroMQ context failed: %s", errors[0])
    return True
