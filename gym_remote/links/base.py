"""What every link has in common: whole messages, a clear end, and a way to tell a peer that stopped taking data.

A *link* carries one membership's messages between the learner and a client (a ZeroMQ route, a
Unix channel). Whatever the kind, a link:

* sends a message whole or not at all: :meth:`send` never blocks, the part the socket did not take
  waits in the link and goes out while the owner waits for something else;
* hands out a received message only once it is complete, reading with allocation bounded by the
  bytes that arrived (never by what a peer announces);
* is safe against interrupts (Ctrl-C, a signal handler that raises) at any bytecode: a send or
  read cut short either completes on the next call or leaves the link broken
  (:class:`LinkBroken`), never half done and silently reused (one exception, on ZeroMQ routes: an
  interrupt out of pyzmq's send of a frame leaves unknown whether that frame went out, and the route
  sends it again; that one message may be malformed, never the next, see :mod:`.zeromq`);
* closes idempotently.

How a cut-short operation is recognised: each step whose effect could be lost between a system
call's return and the bookkeeping after it marks itself first (an attribute set before, cleared
after); finding the mark still set on the next call means the step's outcome is unknown, and the
link breaks. Nothing is allocated or parsed twice, nor sent twice but for that one frame.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import termios
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gym_remote.errors import ProtocolError

__all__ = [
    "Arrival",
    "Broken",
    "FrameList",
    "LinkBroken",
    "MAX_FRAMES",
    "CutShort",
    "Message",
    "Peer",
    "StallWatch",
    "frame_size_error",
]

MAX_FRAMES = 65_536
"""Most frames a message may have (PROTOCOL.md §10); libzmq bounds only each frame's size."""


class LinkBroken(Exception):
    """The link can carry nothing more: its peer is gone, broke the framing, stopped taking data, or a
    send or read of it was cut short. ``str(error)`` says which, in words fit for a log line."""


class Message(Protocol):
    """A received message, read frame by frame in order (the header frame has been read already).

    The frames a message hands out are valid until the next message is taken from its link.
    """

    def more(self) -> bool:
        """Whether frames are left."""
        ...

    def next(self) -> bytes:
        """The next frame, as bytes."""
        ...

    def next_into(self, targets: Sequence[Any], what: str) -> None:
        """The next frames straight into the arrays ``targets``, one frame each.

        Raises:
            ProtocolError: the message ended early, or a frame's size differs from its target's.
        """
        ...

    def rest(self) -> list[bytes]:
        """The remaining frames (at most :data:`MAX_FRAMES` in all)."""
        ...

    def skip_rest(self) -> None:
        """Discard the remaining frames."""
        ...


class FrameList:
    """A message received whole into memory: its frames (views into the link's buffer), in order."""

    __slots__ = ("frames", "position")

    def __init__(self, frames: list[memoryview]) -> None:
        self.frames = frames
        self.position = 0

    def rewind(self) -> bool:
        """Back to the first frame (the message is handed out again); always possible."""
        self.position = 0
        return True

    def more(self) -> bool:
        return self.position < len(self.frames)

    def next(self) -> bytes:
        frame = self.frames[self.position]
        self.position += 1
        return bytes(frame)

    def next_into(self, targets: Sequence[Any], what: str) -> None:
        frames, position = self.frames, self.position
        if position + len(targets) > len(frames):
            self.position = len(frames)
            raise ProtocolError(f"{what}: the message ended before all its array frames")
        for target, frame in zip(targets, frames[position:], strict=False):
            if frame.nbytes != target.nbytes:
                raise frame_size_error(frame.nbytes, target.nbytes, what)
            memoryview(target).cast("B")[:] = frame
        self.position = position + len(targets)

    def rest(self) -> list[bytes]:
        rest = [bytes(frame) for frame in self.frames[self.position :]]
        self.position = len(self.frames)
        return rest

    def skip_rest(self) -> None:
        self.position = len(self.frames)


def frame_size_error(received: int, expected: int, what: str) -> ProtocolError:
    """The error for an array frame of ``received`` bytes for a target of ``expected`` bytes."""
    return ProtocolError(f"{what}: an array frame of {received} bytes, expected {expected}")


# -- what a wait on links yields ------------------------------------------------------------------------


class _Consumable(Protocol):
    def consume(self) -> None: ...


@dataclass(frozen=True)
class Peer:
    """What libzmq tells of a message's sender: its network address, the name of its CURVE key, and the
    descriptor of its connection (for :class:`StallWatch`; -1 if unknown)."""

    address: str = ""
    key: str = ""
    fd: int = -1


@dataclass(eq=False)
class Arrival:
    """A message from ``identity``: its ``header`` frame, and the rest to read from ``message``.

    It stays its ``source``'s current message, handed out again by every wait, until the handler calls
    ``source.consume()``: a handler an interrupt cuts short before then gets it again. ``peer`` is what
    libzmq told of the sender, for the messages the router was asked to tell it of.
    """

    identity: bytes
    header: bytes
    message: Message
    source: _Consumable
    peer: Peer | None = None


@dataclass(frozen=True)
class Broken:
    """The link of ``identity`` broke (``reason`` says how, in words fit for a log line)."""

    identity: bytes
    reason: str


@dataclass(frozen=True)
class CutShort:
    """An interrupt cut a message short while it was taken off a socket, and it was dropped. What is known of
    it: its sender's ``identity`` and its ``header`` frame, either of which may be None (lost; a ZeroMQ
    message whose routing id frame was lost still names its sender if the peer gave itself a routing id)."""

    identity: bytes | None
    header: bytes | None


# -- a peer that takes nothing ----------------------------------------------------------------------

_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)
_BYTES_ACKED = struct.Struct("Q")
_BYTES_ACKED_OFFSET = 120  # struct tcp_info: tcpi_bytes_acked (Linux >= 4.1)
_INT = struct.Struct("i")


class StallWatch:
    """Whether the peer of a connection takes the bytes sent to it, watched from its kernel socket.

    For a ZeroMQ connection the peer's reader is libzmq's I/O thread, which keeps reading whatever
    that process's application is doing; bytes that stop moving out of the send queue therefore mean a
    frozen or unreachable process, even while a large message blocks libzmq's own heartbeats. Progress
    is TCP's count of acknowledged bytes, or for a Unix socket a send queue that shrinks.

    Args:
        fd: the connection's descriptor (owned by someone else: it is only read, never closed).
    """

    CONTINUITY_SECONDS = 1.0
    """Longest gap between two looks (:meth:`stalled_for`) that a stall is counted across."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._inode = os.fstat(fd).st_ino  # the descriptor may be closed and its number reused
        self._is_tcp = _is_tcp(fd)
        self._mark: tuple[int, int] = (0, 0)  # (queued bytes, acknowledged bytes) at the last progress
        self._since: float | None = None  # when the queue was last seen empty or moving
        self._last_look = float("-inf")

    def stalled_for(self, now: float) -> float:
        """Seconds for which bytes have waited in the send queue without any being taken (0: none wait,
        or the connection is gone, which the caller learns otherwise)."""
        try:
            if os.fstat(self.fd).st_ino != self._inode:
                return 0.0
            queued = _INT.unpack(fcntl.ioctl(self.fd, termios.TIOCOUTQ, b"\0" * _INT.size))[0]
            if queued <= 0:
                self._since = None
                return 0.0
            acked = self._bytes_acked()
        except OSError:
            return 0.0
        previous_queued, previous_acked = self._mark
        self._mark = (queued, acked)
        # bytes seen waiting at two looks far apart may have moved in between (the watch is only asked while a
        # reply is awaited): a stall is counted from looks that follow each other closely
        unwatched = now - self._last_look > self.CONTINUITY_SECONDS
        self._last_look = now
        if (
            self._since is None
            or unwatched
            or acked > previous_acked
            or (not self._is_tcp and queued < previous_queued)
        ):
            self._since = now
        return now - self._since

    def _bytes_acked(self) -> int:
        if not self._is_tcp or _TCP_INFO is None:  # (_is_tcp is False without TCP_INFO)
            return 0
        info = socket.socket(fileno=os.dup(self.fd))
        try:
            data = info.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 256)
        finally:
            info.close()
        if len(data) < _BYTES_ACKED_OFFSET + _BYTES_ACKED.size:
            return 0
        return _BYTES_ACKED.unpack_from(data, _BYTES_ACKED_OFFSET)[0]


def _is_tcp(fd: int) -> bool:
    if _TCP_INFO is None:
        return False
    probe = socket.socket(fileno=os.dup(fd))
    try:
        return probe.family in (socket.AF_INET, socket.AF_INET6) and probe.type == socket.SOCK_STREAM
    finally:
        probe.close()
