"""The same-host data plane: a client's commands and replies over a Unix domain socket.

A ZeroMQ round trip crosses libzmq's I/O thread in both processes, two thread wake-ups more each
way than a plain socket; between processes on one machine that is most of a cheap env's step. So a
client on the learner's host carries its membership's messages over a :class:`Channel`, a
``SOCK_STREAM`` Unix socket in Linux's abstract namespace, while ZeroMQ stays the control plane
(handshake, security, heartbeats, probes) and the only transport across machines.

A channel carries the same messages as the ZeroMQ socket, each as one *record*::

    u32 frame count f | f x u64 frame lengths | the frames' bytes, one after the other   (little-endian)

and a :class:`Record` reads like the current message of a ZeroMQ socket (``get(RCVMORE)``, ``recv``,
``recv_into``), so one set of frame readers serves both planes. How a channel is set up and bound to
a membership is in ``docs/PROTOCOL.md`` §13: the client connects and sends a 24-byte greeting holding a
random token before its HELLO, which names the token; the server pairs them, checks the peer's
credentials, and says in WELCOME whether the channel is in use.

Abstract sockets leave no file behind, whatever kills either process; the kernel frees the name
when the listening socket closes. Linux only (:data:`AVAILABLE`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import select
import socket
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

from gym_remote.errors import ProtocolError

__all__ = [
    "AVAILABLE",
    "ENV_SWITCH",
    "Channel",
    "ChannelClosed",
    "Listener",
    "Record",
    "address_for",
    "connect",
    "enabled_by_default",
    "wanted",
    "new_token",
]

AVAILABLE = sys.platform.startswith("linux")
"""Abstract Unix sockets exist on Linux only; elsewhere every message travels over ZeroMQ."""

ENV_SWITCH = "GYM_REMOTE_DATA_PLANE"
"""Environment variable: ``off`` (or ``0``, ``false``, ``no``) turns the same-host data plane off by default."""

GREETING_MAGIC = b"GR-DATA2"
TOKEN_BYTES = 16
GREETING_SIZE = len(GREETING_MAGIC) + TOKEN_BYTES  # 24

_COUNT = struct.Struct("<I")
_RCVMORE = 13  # zmq.RCVMORE: the one option a Record answers (see Record.get)
_PEERCRED = struct.Struct("3i")  # pid, uid, gid
_DONTWAIT = socket.MSG_DONTWAIT if AVAILABLE else 0

BUFFER_BYTES = 4 << 20
"""Socket buffer size asked for (the kernel caps it at its ``wmem_max``/``rmem_max``)."""

MAX_PENDING = 64
"""Greeted connections the server holds for HELLOs still to come; older ones are closed beyond it."""

PENDING_SECONDS = 30.0
"""How long the server keeps a greeted connection whose HELLO has not come."""


def enabled_by_default() -> bool:
    """Whether the data plane is on when nobody said otherwise: on Linux, unless :data:`ENV_SWITCH` says off."""
    return AVAILABLE and os.environ.get(ENV_SWITCH, "").strip().lower() not in ("0", "off", "false", "no")


def wanted(choice: bool | None) -> bool:
    """Whether to use the data plane: as ``choice`` says where it is available, by default if None."""
    return enabled_by_default() if choice is None else bool(choice) and AVAILABLE


def address_for(endpoint: str) -> bytes:
    """The abstract socket name of the data channel of the server at ZeroMQ ``endpoint``.

    Both sides derive it from the endpoint the client connects to, so a client on the server's host
    finds it without being told; a client on another host finds nothing there and uses ZeroMQ.
    """
    digest = hashlib.sha256(endpoint.encode()).hexdigest()[:40]
    return b"\0gym_remote/data/" + digest.encode()


def new_token() -> bytes:
    return secrets.token_bytes(TOKEN_BYTES)


class ChannelClosed(Exception):
    """The peer closed the channel (or its process died), or the channel broke."""


class Record:
    """One received message: its frames, read in order like a ZeroMQ socket's current message.

    The frames are views into the channel's buffer, valid until the channel's next read.
    """

    __slots__ = ("frames", "position")

    def __init__(self, frames: list[memoryview]) -> None:
        self.frames = frames
        self.position = 0

    def get(self, option: int) -> bool:
        """``get(zmq.RCVMORE)``: whether frames are left."""
        if option != _RCVMORE:
            raise ValueError(f"a Record only answers RCVMORE, not option {option}")
        return self.position < len(self.frames)

    def recv(self) -> bytes:
        frame = self.frames[self.position]
        self.position += 1
        return bytes(frame)

    def recv_into(self, target: Any) -> int:
        """Copy the next frame into ``target`` if the sizes agree; returns the frame's size either way."""
        frame = self.frames[self.position]
        self.position += 1
        view = memoryview(target).cast("B")
        if frame.nbytes == view.nbytes:
            view[:] = frame
        return frame.nbytes


class Channel:
    """A connected data channel: sends and receives records without blocking longer than told.

    Args:
        sock: a connected ``AF_UNIX`` ``SOCK_STREAM`` socket.
        max_frame_bytes: largest frame accepted from the peer (a larger one breaks the channel).
        max_frames: most frames a record may have.
    """

    def __init__(self, sock: socket.socket, *, max_frame_bytes: int, max_frames: int = 65_536) -> None:
        sock.setblocking(True)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, BUFFER_BYTES)
            except OSError:
                pass
        self.sock = sock
        self.max_frame_bytes = int(max_frame_bytes)
        self.max_frames = int(max_frames)
        self._buffer = bytearray(1 << 16)
        self._view = memoryview(self._buffer)
        self._start = 0  # the first byte not yet handed out in a record
        self._end = 0  # one past the last byte received
        self._need = 0  # the size of the record at _start, once its frame lengths are in (else 0)
        self._lengths: tuple[int, ...] = ()
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.sock.close()

    # -- sending -----------------------------------------------------------------------------------

    def send(self, frames: Sequence[Any], timeout: float) -> None:
        """Send ``frames`` as one record, waiting at most ``timeout`` seconds for room in the socket.

        Raises:
            TimeoutError: the peer took too little of it in time (it stopped reading).
            ChannelClosed: the peer is gone.
        """
        lengths = [memoryview(frame).nbytes for frame in frames]
        count = len(lengths)
        buffers: list[Any] = [_COUNT.pack(count) + _lengths(count).pack(*lengths), *frames]
        total = 4 + 8 * count + sum(lengths)
        sent = self._send_some(buffers)
        if sent < total:
            self._send_rest(buffers, sent, time.monotonic() + timeout, timeout)

    def _send_rest(self, buffers: list[Any], sent: int, deadline: float, timeout: float) -> None:
        views = [memoryview(buffer).cast("B") for buffer in buffers]
        while views:
            while views and sent >= views[0].nbytes:
                sent -= views.pop(0).nbytes
            if not views:
                return
            views[0] = views[0][sent:]
            sent = 0
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"the peer took no data for {timeout:g} s")
            _wait(self.sock, select.POLLOUT, remaining)
            sent = self._send_some(views)

    def _send_some(self, buffers: list[Any]) -> int:
        """Send what the socket takes now of ``buffers``, without waiting; the number of bytes sent."""
        try:
            return self.sock.sendmsg(buffers, (), _DONTWAIT)
        except BlockingIOError:
            return 0
        except OSError as error:
            raise ChannelClosed(f"sending failed: {error.strerror or error}") from None

    # -- receiving ---------------------------------------------------------------------------------

    def buffered(self) -> bool:
        """Whether a whole record (or a malformed one, which :meth:`read` raises for) waits to be read."""
        try:
            return self._complete() is not None
        except ProtocolError:
            return True

    def read(self) -> Record | None:
        """The next record if it has arrived whole (None if not yet); never blocks.

        Raises:
            ChannelClosed: the peer closed the channel or died (mid-record too).
            ProtocolError: the record's layout is malformed or exceeds the limits (the channel is then useless).
        """
        if self._start:
            self._compact()
        end = self._complete()
        while end is None:
            if not self._receive():
                return None
            end = self._complete()
        return self._take(end)

    def read_until(self, deadline: float) -> Record | None:
        """The next record, waiting for it until ``deadline`` (``time.monotonic``); None if it did not come."""
        if self._start:
            self._compact()
        end = self._complete()
        while end is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._poll.poll(max(0, int(remaining * 1000)) + 1):
                return None
            self._receive()
            end = self._complete()
        return self._take(end)

    def _compact(self) -> None:
        """Drop the bytes of records already handed out (their views become invalid here)."""
        rest = self._end - self._start
        if rest:
            self._buffer[:rest] = self._view[self._start : self._end]
        self._start, self._end = 0, rest

    def _complete(self) -> int | None:
        """The end offset of the record starting at ``_start`` if it is all there; checks its layout once."""
        start = self._start
        have = self._end - start
        if not self._need:
            if have < 4:
                return None
            (count,) = _COUNT.unpack_from(self._buffer, start)
            if not 1 <= count <= self.max_frames:
                raise ProtocolError(f"a data channel record of {count} frames (at most {self.max_frames})")
            prefix = 4 + 8 * count
            if have < prefix:
                self._reserve(start + prefix)
                return None
            lengths = _lengths(count).unpack_from(self._buffer, start + 4)
            largest = max(lengths)
            if largest > self.max_frame_bytes:
                raise ProtocolError(f"a frame of {largest} bytes exceeds the limit of {self.max_frame_bytes} bytes")
            self._lengths = lengths
            self._need = prefix + sum(lengths)
            self._reserve(start + self._need)
        return start + self._need if have >= self._need else None

    def _take(self, end: int) -> Record:
        position = self._start + 4 + 8 * len(self._lengths)
        view = self._view
        frames = []
        for length in self._lengths:
            frames.append(view[position : position + length])
            position += length
        self._start, self._need = end, 0
        return Record(frames)

    def _reserve(self, size: int) -> None:
        """Make room for ``size`` bytes: a new buffer, so that views into the old one stay as they were."""
        if size > len(self._buffer):
            bigger = bytearray(max(size, 2 * len(self._buffer)))
            bigger[: self._end] = self._view[: self._end]
            self._buffer, self._view = bigger, memoryview(bigger)

    def _receive(self) -> bool:
        """Take in what has arrived; False if nothing had."""
        if self._end == len(self._buffer):
            self._reserve(2 * len(self._buffer))
        try:
            received = self.sock.recv_into(self._view[self._end :], 0, _DONTWAIT)
        except BlockingIOError:
            return False
        except OSError as error:
            raise ChannelClosed(f"receiving failed: {error.strerror or error}") from None
        if received == 0:
            raise ChannelClosed("the peer closed the channel" + (" mid-message" if self._end > self._start else ""))
        self._end += received
        return True


_LENGTHS: dict[int, struct.Struct] = {}


def _lengths(count: int) -> struct.Struct:
    """The struct of a record's ``count`` frame lengths (the few counts in use are kept)."""
    layout = _LENGTHS.get(count)
    if layout is None:
        layout = struct.Struct(f"<{count}Q")
        if len(_LENGTHS) < 64:
            _LENGTHS[count] = layout
    return layout


def _wait(sock: socket.socket, events: int, timeout: float) -> None:
    """Block until ``sock`` has ``events`` (``select.POLLIN``/``POLLOUT``) or ``timeout`` seconds passed."""
    poller = select.poll()
    poller.register(sock, events)
    poller.poll(max(0, int(timeout * 1000)) + 1)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """The peer process's (pid, uid, gid) as the kernel recorded them at connect time."""
    return _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))


def connect(name: bytes, token: bytes, *, timeout: float, max_frame_bytes: int) -> Channel:
    """The client's side: connect to the server's data channel ``name`` and greet it with ``token``.

    Raises:
        OSError: nothing listens there (another host, or a server without a data plane), or the
            listener belongs to another user.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(name)
        _, uid, _ = peer_credentials(sock)
        if uid != os.getuid():
            raise PermissionError(errno.EPERM, f"the data channel's listener runs as uid {uid}, not {os.getuid()}")
        sock.sendall(GREETING_MAGIC + token)
        return Channel(sock, max_frame_bytes=max_frame_bytes)
    except BaseException:
        sock.close()
        raise


class Listener:
    """The server's side: a listening abstract socket, and the greeted connections not yet paired.

    A connection is kept only if its peer runs as this process's user and greets it correctly; it is
    handed out (:meth:`take`) to the HELLO that names its token and comes from the same process.
    """

    def __init__(self, name: bytes, *, max_frame_bytes: int) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(name)
            sock.listen(128)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.name = name
        self.sock = sock
        self.max_frame_bytes = max_frame_bytes
        self._greeted: dict[bytes, tuple[socket.socket, int, float]] = {}  # token -> (socket, pid, when)
        self._greeting: list[tuple[socket.socket, int, float]] = []  # accepted, greeting not in yet
        self.uid = os.getuid()

    def take(self, token: bytes, pid: int) -> Channel | None:
        """The connection greeted with ``token`` by process ``pid``, as a channel; None if there is none."""
        self._accept()
        entry = self._greeted.pop(token, None)
        if entry is None:
            return None
        sock, peer_pid, _ = entry
        if peer_pid != pid:
            sock.close()
            return None
        return Channel(sock, max_frame_bytes=self.max_frame_bytes)

    def _accept(self) -> None:
        """Accept waiting connections and read the greetings that are in; drop stale and foreign ones."""
        now = time.monotonic()
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # e.g. out of file descriptors: the others stay in the backlog
                break
            pid, uid, _ = peer_credentials(sock)
            if uid != self.uid:
                sock.close()
                continue
            sock.setblocking(False)
            self._greeting.append((sock, pid, now))
        still: list[tuple[socket.socket, int, float]] = []
        for sock, pid, since in self._greeting[-MAX_PENDING:]:
            try:
                greeting: bytes | None = sock.recv(GREETING_SIZE, socket.MSG_PEEK)
            except BlockingIOError:
                greeting = None  # nothing in yet
            except OSError:
                greeting = b""
            if greeting is not None and len(greeting) == GREETING_SIZE:
                sock.recv(GREETING_SIZE)
                if greeting.startswith(GREETING_MAGIC):
                    self._greeted[greeting[len(GREETING_MAGIC) :]] = (sock, pid, since)
                else:
                    sock.close()
            elif greeting != b"" and now - since < PENDING_SECONDS:  # part of it, or nothing yet
                still.append((sock, pid, since))
            else:  # closed, or too slow
                sock.close()
        for sock, _, _ in self._greeting[:-MAX_PENDING]:
            sock.close()
        self._greeting = still
        for token, (sock, _, since) in list(self._greeted.items()):
            if now - since > PENDING_SECONDS or len(self._greeted) > MAX_PENDING:
                sock.close()
                del self._greeted[token]

    def close(self) -> None:
        for sock, _, _ in [*self._greeting, *self._greeted.values()]:
            sock.close()
        self._greeting.clear()
        self._greeted.clear()
        self.sock.close()
