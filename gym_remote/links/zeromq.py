"""ZeroMQ links: the learner's ROUTER socket with a :class:`Route` per member, and the client's :class:`Dealer`.

These sit on the step path, so they avoid pyzmq's conveniences that cost microseconds per frame
(enum flag arithmetic in ``send_multipart``, Frame objects for small sends and receives): the
frames after a message's header are read straight from the socket, into the batch's arrays where
they land.

Interrupts (see :mod:`gym_remote.links.base`): ZeroMQ delivers and queues a multipart message
whole, so a message is only ever cut short on this side, between the frames of one send or one
read. pyzmq checks for signals after every send and receive, so an interrupt comes out of one only
once its frame went out, or came in. The router remembers which frame it was at: a read cut short is
picked up or dropped (and reported) before the next message is read, and a send cut short is
finished before the next one starts.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from gym_remote.errors import ProtocolError
from gym_remote.security import ClientSecurity, ServerSecurity

if TYPE_CHECKING:
    from gym_remote.links.gate import Gatekeeper
from gym_remote.links import fork
from gym_remote.links.base import MAX_FRAMES, Arrival, CutShort, LinkBroken, Peer, StallWatch, frame_size_error

__all__ = [
    "Dealer",
    "new_context",
    "Route",
    "Router",
    "ConnectionEvent",
    "PROTOCOL_ERROR_MECHANISM_MISMATCH",
    "send_frames",
    "set_heartbeats",
    "use_curve",
    "terminate",
    "ZERO_COPY_BYTES",
]

logger = logging.getLogger(__name__)

SNDMORE = int(zmq.SNDMORE)
NOBLOCK = int(zmq.NOBLOCK)
RCVMORE = int(zmq.RCVMORE)
_EVENTS, _POLLIN, _POLLOUT = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.POLLOUT)
_queue = zmq.backend.Socket.send
"""The compiled send under pyzmq's ``Socket.send``, which is Python: called directly, no Python code runs between
the call and the queueing. An interrupt can still come out of it before the frame is queued or after (pyzmq checks
for signals both before and after ``zmq_msg_send``), so it leaves in doubt whether that frame went out."""

ZERO_COPY_BYTES = 1 << 20
"""Arrays at least this large are sent without copying; smaller frames are cheaper to copy.

pyzmq's zero-copy send hands each buffer's release to a thread of its own, which costs a wake-up;
on a 2-core VM copying measured faster up to about 1 MiB (a batch of 8 Atari-sized frames, 225 KB,
stepped ~15% faster copied), and zero-copy faster beyond."""

SERVER_SEND_HWM = 10_000
"""Messages queued for one client before the server counts it as not reading (ZMQ_SNDHWM)."""

CLIENT_SEND_HWM = 16
"""Messages a client queues for the server at most; beyond it they wait in the link (see :class:`Dealer`)."""

HEARTBEAT_INTERVAL_MS = 1000
"""How often libzmq sends a ZMTP heartbeat on a connection (more often for short timeouts)."""

TERMINATE_SECONDS = 5.0
"""How long :func:`terminate` waits by default for a context's sockets to close."""


def new_context() -> zmq.Context:
    """A ZeroMQ context of one's own (a server's: its gatekeeper answers for every socket of it)."""
    return zmq.Context()


def use_curve(sock: zmq.Socket, security: ServerSecurity | ClientSecurity) -> None:
    """Encrypt and authenticate ``sock``'s connections with CURVE, as a server or as a client."""
    if isinstance(security, ServerSecurity):
        sock.curve_server = True
        sock.curve_secretkey = security.keys.secret
        sock.curve_publickey = security.keys.public
    else:
        sock.curve_serverkey = security.server_public
        sock.curve_publickey = security.keys.public
        sock.curve_secretkey = security.keys.secret


def set_heartbeats(sock: zmq.Socket, liveness_timeout: float) -> None:
    """ZMTP heartbeats: libzmq closes a connection that shows no sign of life within ``liveness_timeout``.

    They are answered by the peer's libzmq I/O thread, whatever the peer's Python code is doing, so a
    busy env keeps its connection alive and a dead or unreachable process loses it.
    """
    timeout_ms = max(1, int(liveness_timeout * 1000))
    sock.setsockopt(zmq.HEARTBEAT_IVL, min(HEARTBEAT_INTERVAL_MS, max(1, timeout_ms // 4)))
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout_ms)
    sock.setsockopt(zmq.HEARTBEAT_TTL, timeout_ms)


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


def send_frames(sock: zmq.Socket, frames: Sequence[Any]) -> None:
    """Send ``frames`` as one multipart message on ``sock`` (blocking as the socket's options say)."""
    _send_frames(sock, frames, 0)


def _send_frames(sock: zmq.Socket, frames: Sequence[Any], first: int, flags: int = 0) -> None:
    """Send ``frames[first:]`` as the end of a multipart message (large arrays without copying)."""
    last = len(frames) - 1
    for position in range(first, len(frames)):
        frame = frames[position]
        _queue(sock, frame, flags | (SNDMORE if position < last else 0), _copy(frame))


class _ReceiveTimeout:
    """A socket's ``ZMQ_RCVTIMEO``, set only when it changes (a socket option costs a microsecond)."""

    def __init__(self, sock: zmq.Socket) -> None:
        self._socket = sock
        self._seconds: float | None = None  # as last set (None: not known)

    def set(self, seconds: float) -> None:
        """Blocking receives wait at most ``seconds`` (at least a millisecond)."""
        if seconds != self._seconds:
            self._seconds = None  # (unknown, should an interrupt come out of the next call)
            self._socket.setsockopt(zmq.RCVTIMEO, max(1, int(seconds * 1000)))
            self._seconds = seconds


class _Cursor:
    """The frames of a ZeroMQ socket's current message after its header (a
    :class:`~gym_remote.links.base.Message`): read straight from the socket, or, for a message read whole
    in advance (``read``: its frames), from memory, from the start again after :meth:`rewind`."""

    __slots__ = ("sock", "read", "position", "ended")

    def __init__(self, sock: zmq.Socket, read: list[bytes] | None = None) -> None:
        self.sock = sock
        self.read = read  # None: read from the socket; _TOO_LONG: it had more than MAX_FRAMES frames
        self.position = 0
        self.ended = read is not None  # the socket is known to be past the message's last frame

    def rewind(self) -> bool:
        """Back to the first frame after the header; False if frames were taken from the socket already
        (then the message cannot be read again)."""
        if self.read is None:
            return not self.position
        self.position = 0
        return True

    def more(self) -> bool:
        if self.read is not None:
            return self.position < len(self.read)
        if self.ended or not self.sock.get(RCVMORE):
            self.ended = True
            return False
        return True

    def next(self) -> bytes:
        self.position += 1
        if self.read is not None:
            return self.read[self.position - 1]
        return self.sock.recv()

    def next_into(self, targets: Sequence[Any], what: str) -> None:
        if self.read is not None:
            raise ProtocolError(f"{what}: unexpected array frames")
        self.position += 1
        get, receive = self.sock.get, self.sock.recv_into
        for target in targets:
            if self.ended or not get(RCVMORE):
                self.ended = True
                raise ProtocolError(f"{what}: the message ended before all its array frames")
            received = receive(target)
            if received != target.nbytes:
                raise frame_size_error(received, target.nbytes, what)

    def rest(self) -> list[bytes]:
        if self.read is _TOO_LONG:
            raise ProtocolError(f"a message of more than {MAX_FRAMES} frames")
        if self.read is not None:
            rest, self.position = self.read[self.position :], len(self.read)
            return rest
        self.position += 1
        frames = _take_rest(self.sock) if not self.ended else []
        self.ended = True
        if frames is None:
            raise ProtocolError(f"a message of more than {MAX_FRAMES} frames")
        return frames

    def skip_rest(self) -> None:
        if self.read is not None:
            self.position = len(self.read)
        elif not self.ended:
            _drain(self.sock)
            self.ended = True


class _Reading(enum.IntEnum):
    IDLE = 0  # at a message's start
    IDENTITY = 1  # taking the routing id frame
    HEADER = 2  # taking the header frame
    CURRENT = 3  # the current message is handed out, its rest still in the socket
    FINISHING = 4  # the current message was consumed; what its handler did not read is to be dropped
    WHOLE = 5  # reading the frames after the header of a message read whole (it is dropped if cut short)


class Router:
    """The learner's ROUTER socket: a route to every member, and every peer's messages in arrival order.

    A received message stays current (:meth:`receive` hands it out again) until :meth:`consume`; the
    frames after its header are read from the socket by whoever handles it, and what they leave
    unread is dropped when the next message is taken.

    Args:
        context: the ZeroMQ context (its own: the gatekeeper answers for every socket of it).
        bind: the endpoint to bind.
        liveness_timeout: ZMTP heartbeats close a connection silent for this long.
        max_message_bytes: largest frame a peer may send (``ZMQ_MAXMSGSIZE``).
        security: the server's CURVE keys (None: plain connections).
        gatekeeper: answers the socket's ZAP requests and counts its connections (None: nobody asks).
        tell_peer: which messages to tell the sender of (given the header frame): reading a frame as a
            ZeroMQ frame object to learn its properties costs a microsecond, so only where needed.

    Raises:
        OSError: the endpoint cannot be bound.
    """

    def __init__(
        self,
        context: zmq.Context,
        bind: str,
        *,
        liveness_timeout: float,
        max_message_bytes: int,
        security: ServerSecurity | None = None,
        gatekeeper: Gatekeeper | None = None,
        tell_peer: Callable[[bytes], bool] = lambda header: False,
    ) -> None:
        sock = context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
        sock.setsockopt(zmq.SNDHWM, SERVER_SEND_HWM)
        set_heartbeats(sock, liveness_timeout)
        if security is not None:
            use_curve(sock, security)
        if gatekeeper is not None:
            gatekeeper.watch(sock)
        try:
            sock.bind(bind)
        except zmq.ZMQError as error:
            sock.close()
            raise OSError(f"cannot bind {bind!r}: {error}") from None
        self.socket = sock
        self.bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._fork_address = _socket_address(self.bound)
        if self._fork_address is not None:
            fork.register_address(self._fork_address)
        self._ipc_file = _ipc_file(self.bound)  # libzmq leaves it behind: removed on close
        self._tell_peer = tell_peer
        self._fd = sock.get(zmq.FD)
        self._state = _Reading.IDLE
        self._identity: bytes | None = None
        self._header: bytes | None = None
        self._arrival: Arrival | None = None
        # the frames of the current (or last) message; until the first, one of no frames (read in no state before)
        self._cursor = _Cursor(sock, [])
        self._quiet = False  # the last look found nothing, and neither a wake-up nor a send came since
        self._receive_timeout = _ReceiveTimeout(sock)
        self._sending: tuple[Any, ...] | None = None  # the parts (routing id, frames) of a send in progress
        self._sent = 0  # how many of its parts are known to have gone out (the next may have too)
        self._closed = False

    def fileno(self) -> int:
        return self._fd

    # -- receiving ---------------------------------------------------------------------------------

    def receive(self) -> Arrival | CutShort | None:
        """The current message (the same until :meth:`consume`), or the next one if one waits; never blocks.

        A look that finds nothing has processed the socket's pending commands (as reading ``ZMQ_EVENTS``
        does), which re-arms the descriptor's wake-up for a message that comes later. Until that wake-up
        (:meth:`woke`) or a send on the socket (which may process commands, and take the wake-up of a message
        with them), the router is known to be quiet, and a look costs nothing. Else a look asks the socket
        (``ZMQ_EVENTS``) before it receives: a receive that finds nothing costs twice as much (pyzmq raises).

        A :class:`~gym_remote.links.base.CutShort` reports a message an interrupt cut short while it was taken
        from the socket, or a current message whose handler was cut short after reading frames of it (it has
        been dropped).
        """
        event = self._resume()
        if event is not None or self._quiet:
            return event
        if not self.socket.get(_EVENTS) & _POLLIN:
            self._quiet = True
            return None
        return self._take(NOBLOCK)

    def wait(self, timeout: float, spin: float = 0.0) -> Arrival | CutShort | None:
        """:meth:`receive`, waiting at most ``timeout`` seconds for a message inside libzmq (None if none came).

        For a learner whose only link is this router: one call that sleeps until a message comes, where a
        wait on several links takes a look, a ``poll()`` and a look again. ``spin``: first busy-check for a
        message for that many seconds.
        """
        state = self._state
        if state == _Reading.FINISHING and self._cursor.ended:  # (the usual case: the last message was read whole)
            self._state = _Reading.IDLE
        elif state != _Reading.IDLE:
            event = self._resume()
            if event is not None:
                return event
        self._quiet = False  # (its looks process the socket's commands, and an interrupt may cut one short)
        if spin > 0:
            # each look yields the core and the GIL (pyzmq's look holds it): the process's other threads, a trainer,
            # are not starved while the learner spins
            clock, events, yield_core = time.perf_counter, self.socket.get, os.sched_yield
            until = clock() + spin
            while clock() < until:
                if events(_EVENTS) & _POLLIN:
                    return self._take(NOBLOCK)
                yield_core()
        if timeout <= 0:
            return None
        self._receive_timeout.set(timeout)
        return self._take(0)

    def _resume(self) -> Arrival | CutShort | None:
        """The current message, or what an interrupted read left to report; None once at a message's start."""
        state = self._state
        if state == _Reading.CURRENT:  # handed out before, and its handler was cut short
            return self._again()
        if state == _Reading.FINISHING and self._cursor.ended:  # its handler read it to the end
            self._state = state = _Reading.IDLE
        if state != _Reading.IDLE:
            interrupted = self._recover()
            if interrupted is not None:
                return interrupted
            if self._state == _Reading.CURRENT:
                return self._arrival
        return None

    def _take(self, flags: int) -> Arrival | None:
        """The next message, taken from the socket (``flags``: NOBLOCK, or 0 to wait as ``ZMQ_RCVTIMEO`` says)."""
        self._identity = None
        self._state = _Reading.IDENTITY
        try:
            self._identity = self.socket.recv(flags)
        except zmq.Again:  # (none came in time, or none was there after all)
            self._state = _Reading.IDLE
            self._quiet = True  # libzmq has processed the socket's commands: a message to come wakes it
            return None
        self._quiet = False  # (more may wait, their wake-up taken by this receive)
        return self._take_header()

    def woke(self) -> None:
        """Its descriptor woke: a message may have come."""
        self._quiet = False

    def _take_header(self) -> Arrival:
        self._header = None
        self._state = _Reading.HEADER
        self._header = header = self.socket.recv()
        return self._hand_out(header)

    def _hand_out(self, header: bytes) -> Arrival:
        sock = self.socket
        peer, read = None, None
        if self._tell_peer(header):  # read whole (it can be handled again) and learn the sender
            peer, read = Peer(), []
            if sock.get(RCVMORE):
                self._state = _Reading.WHOLE
                frame = sock.recv(copy=False)
                peer = Peer(_property(frame, "Peer-Address"), _property(frame, "User-Id"), _source_fd(frame))
                read = _whole(frame, sock)
        self._cursor = _Cursor(sock, read)
        # the identity was taken before the header (see _take); a routing id frame lost leaves no header to hand out
        identity: bytes = self._identity  # pyright: ignore[reportAssignmentType]
        self._arrival = Arrival(identity, header, self._cursor, self, peer)
        self._state = _Reading.CURRENT
        return self._arrival

    def _again(self) -> Arrival | CutShort:
        """The current message once more, from its first frame after the header; if frames of it were taken
        from the socket already, it cannot be: it was cut short (and is dropped)."""
        # the state is CURRENT: _hand_out set the arrival (and its message, the cursor) before it
        arrival: Arrival = self._arrival  # pyright: ignore[reportAssignmentType]
        if self._cursor.rewind():  # (its message)
            return arrival
        self.consume()
        return CutShort(arrival.identity, arrival.header)

    def consume(self) -> None:
        """The current message is taken care of (its handler may still read its frames, until the next
        :meth:`receive`)."""
        if self._state == _Reading.CURRENT:
            self._state = _Reading.FINISHING
            self._arrival = None

    def _recover(self) -> CutShort | None:
        """Pick up after a read an interrupt cut short; None once at a message's start (or current) again.

        pyzmq checks for signals after every receive, so an interrupt can come out of a receive that took its
        frame: that frame is lost, and the rest of its message is dropped (reported as cut short).
        """
        state, sock = self._state, self.socket
        if state == _Reading.FINISHING:
            self._cursor.skip_rest()  # (nothing to do if its handler read it to the end)
        elif state == _Reading.IDENTITY:
            if self._identity is not None:  # taken, but the header not yet: read on
                self._take_header()
                return None
            if sock.get(RCVMORE):  # the routing id frame was taken and lost: the header frame names the sender
                self._header = None  # (the last message's: were this read cut short too, the next recovery drops
                self._state = _Reading.HEADER  # the rest, rather than hand it out under that header)
                frame = sock.recv(copy=False)
                _drain(sock)
                self._state = _Reading.IDLE
                return CutShort(_sender(frame), frame.bytes)
        elif state == _Reading.HEADER:
            if self._header is not None:
                self._hand_out(self._header)
                return None
            identity = self._identity
            _drain(sock)
            self._state = _Reading.IDLE
            return CutShort(identity, None)
        elif state == _Reading.WHOLE:  # frames of it were taken and lost
            _drain(sock)
            self._state = _Reading.IDLE
            return CutShort(self._identity, self._header)
        self._state = _Reading.IDLE
        return None

    # -- sending -----------------------------------------------------------------------------------

    def send(self, identity: bytes, frames: Sequence[Any]) -> None:
        """Send ``frames`` to ``identity`` whole; never blocks.

        Raises:
            LinkBroken: its connection is gone, or its queue is full (it read none of the last
                :data:`SERVER_SEND_HWM` messages).
        """
        self._quiet = False
        interrupted = self._sending
        if interrupted is not None:
            self._finish_interrupted_send(interrupted)
        parts = (identity, *frames)
        self._sending = parts
        self._sent = 0
        try:
            _queue(self.socket, identity, NOBLOCK | SNDMORE)
        except zmq.ZMQError as error:
            self._sending = None
            if error.errno == zmq.EHOSTUNREACH:
                raise LinkBroken("its connection is gone") from None
            if error.errno == zmq.EAGAIN:
                raise LinkBroken(
                    f"its queue is full: it has not read anything for long (over {SERVER_SEND_HWM} messages)"
                ) from None
            raise
        self._sent = 1
        self._send_parts(parts, 1)
        self._sending = None

    def _send_parts(self, parts: tuple[Any, ...], first: int) -> None:
        """Send ``parts[first:]`` (the send in progress), ending it; ``_sent`` counts the parts known to have gone out.

        No Python call comes between a send and the count that follows it, so an interrupt leaves at most the
        part ``_sent`` in doubt (an interrupt out of the compiled send itself, :data:`_queue`).
        """
        sock = self.socket
        last = len(parts) - 1
        for part in range(first, len(parts)):
            _queue(sock, parts[part], SNDMORE if part < last else 0, _copy(parts[part]))
            self._sent = part + 1

    def try_send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """:meth:`send`, for a peer that may be gone: False if it cannot be reached."""
        try:
            self.send(identity, frames)
            return True
        except LinkBroken:
            return False

    def _finish_interrupted_send(self, parts: tuple[Any, ...]) -> None:
        """End the message an interrupt cut short, so that the next one starts at a message boundary.

        The part in doubt is sent again. If it had gone out, the peer gets that frame twice: a malformed command,
        which a client answers with ERROR (its call was the one the interrupt ended, so the learner drops the
        answer as late). If it was the last part, the router drops the repeat (a routing id alone is no message);
        if it was the routing id, the repeat arrives in front of the header, and the client finds no header (a routing
        id is a session's hex digits, §7, never the header's magic bytes).
        """
        try:
            self._send_parts(parts, self._sent)
        except zmq.ZMQError:
            pass
        self._sending = None

    def route(self, identity: bytes, peer: Peer | None) -> Route:
        """The link to the member ``identity`` (``peer``: what its HELLO told of it)."""
        return Route(self, identity, peer.fd if peer is not None else -1)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.socket.close(linger=0)
        if self._fork_address is not None:
            fork.unregister_address(self._fork_address)
        if self._ipc_file is not None:
            path, inode = self._ipc_file
            try:
                if os.stat(path).st_ino == inode:  # still this router's (not rebound by another server since)
                    os.unlink(path)
            except OSError:
                pass


class Route:
    """A member's ZeroMQ link: messages to it go out on the router's socket; its messages arrive there."""

    plane = "zmq"

    def __init__(self, router: Router, identity: bytes, fd: int) -> None:
        self.router = router
        self.identity = identity
        self._watch: StallWatch | None = None
        if fd >= 0:
            try:
                self._watch = StallWatch(fd)
            except OSError:
                self._watch = None

    def send(self, frames: Sequence[Any]) -> None:
        """Send one message whole; never blocks. Raises :class:`LinkBroken` if it cannot be routed."""
        self.router.send(self.identity, frames)

    def stalled_for(self, now: float) -> float:
        """Seconds for which the member's connection has taken none of the bytes waiting for it (0 if none
        wait): libzmq's heartbeats cannot show a frozen peer while a large message blocks them."""
        return self._watch.stalled_for(now) if self._watch is not None else 0.0

    @property
    def wants_write(self) -> bool:
        return False

    def close(self) -> None:
        """Nothing to close: the route ends with its member (the router's socket stays)."""


# -- the client's side ------------------------------------------------------------------------------


class ConnectionEvent(enum.Enum):
    """What a client's socket monitor tells of its connection to the server."""

    DROPPED = "the connection dropped"
    HANDSHAKE_SUCCEEDED = "the ZeroMQ handshake succeeded"
    HANDSHAKE_CUT = "the server cut the handshake off"  # e.g. a CURVE key it cannot decrypt with
    HANDSHAKE_PROTOCOL = "the handshake failed: protocol error"  # value: libzmq's error code
    HANDSHAKE_AUTH = "the server's ZAP handler refused the handshake"  # value: the ZAP status


HANDSHAKE_FAILURES = 3
"""Security handshakes a server cuts off in a row (the sign of a wrong server key or secret) before a peer gives up."""

FOR_NOW_ZAP_STATUSES = frozenset((300, 500))
"""ZAP statuses of a handshake refused for now (too many connections, too fast, a closing server): try again later;
any other refusal is for good."""

PROTOCOL_ERROR_MECHANISM_MISMATCH = int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
"""The value of a failed handshake's event when one side uses CURVE and the other does not."""

_MONITORED = {
    zmq.EVENT_DISCONNECTED: ConnectionEvent.DROPPED,
    zmq.EVENT_HANDSHAKE_SUCCEEDED: ConnectionEvent.HANDSHAKE_SUCCEEDED,
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: ConnectionEvent.HANDSHAKE_CUT,
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: ConnectionEvent.HANDSHAKE_PROTOCOL,
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: ConnectionEvent.HANDSHAKE_AUTH,
}
_MONITOR_MASK = 0
for _event in _MONITORED:
    _MONITOR_MASK |= _event


class Dealer:
    """The client's ZeroMQ link: a DEALER socket connected to the server (one per session), the events of
    its connection, and the messages the server has not taken yet.

    Sends never block: a message the socket does not take (its queue to the server is full) waits in the
    link until :meth:`flush` finds room. :meth:`stalled_for` says how long the server has taken nothing.

    Args:
        context: the client's ZeroMQ context.
        address: the server's endpoint.
        routing_id: this session's routing id.
        liveness_timeout: ZMTP heartbeats close a connection silent for this long.
        security: the server's public key and this client's keys (None: a plain connection).

    Raises:
        ValueError: ZeroMQ cannot connect to ``address`` (the message says why).
    """

    plane = "zmq"

    def __init__(
        self,
        context: zmq.Context,
        address: str,
        routing_id: bytes,
        *,
        liveness_timeout: float,
        security: ClientSecurity | None = None,
    ) -> None:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
        sock.setsockopt(zmq.SNDHWM, CLIENT_SEND_HWM)
        sock.setsockopt(zmq.RCVHWM, 0)  # libzmq keeps reading whatever the envs do (see StallWatch)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)  # reconnection attempts back off up to 5 s apart
        set_heartbeats(sock, liveness_timeout)
        if security is not None:
            use_curve(sock, security)
        monitor = sock.get_monitor_socket(_MONITOR_MASK)
        try:
            sock.connect(address)
        except zmq.ZMQError as error:  # not an address ZeroMQ can connect to; nothing may stay open
            sock.disable_monitor()
            monitor.close(linger=0)
            sock.close(linger=0)
            # (a ZMQError always has its errno: zmq_errno() when none was given)
            raise ValueError(f"cannot connect to {address!r}: {zmq.strerror(error.errno)}") from None  # pyright: ignore[reportArgumentType]
        self.socket = sock
        self.monitor = monitor
        self._fd = sock.get(zmq.FD)
        self._outbox: deque[tuple[list[Any], float]] = deque()  # messages not taken yet, and since when
        self._sending = False  # a send in progress (see base: an interrupt leaves it set)
        self._reading = False
        self._cursor: _Cursor | None = None  # the frames of the last message received
        self._receive_timeout = _ReceiveTimeout(sock)
        self._watch: StallWatch | None = None
        self._fork_address: Any = None
        self._closed = False

    def fileno(self) -> int:
        return self._fd

    def monitor_fileno(self) -> int:
        return self.monitor.get(zmq.FD)

    @property
    def wants_write(self) -> bool:
        return bool(self._outbox)

    def has_events(self) -> bool:
        """Whether the connection's monitor has news (:meth:`events`; this re-arms its descriptor's wake-up)."""
        return bool(self.monitor.get(_EVENTS) & _POLLIN)

    # -- receiving ---------------------------------------------------------------------------------

    def receive(self, timeout: float = 0.0) -> tuple[bytes, _Cursor] | None:
        """The next message's header frame, and the rest to read from the cursor; None if none came within
        ``timeout`` seconds (the wait is libzmq's own).

        Raises:
            LinkBroken: an interrupt cut short the reading of a message.
        """
        if self._sending or self._reading or self._closed:
            self._check_intact()
        sock = self.socket
        if self._cursor is not None and not self._cursor.ended:
            self._cursor.skip_rest()  # what the last message's handler left unread
        self._reading = True
        try:
            if timeout > 0:
                self._receive_timeout.set(timeout)
                header = sock.recv()
            else:
                header = sock.recv(NOBLOCK)
        except zmq.Again:
            self._reading = False
            return None
        read = None
        if self._watch is None and sock.get(RCVMORE):  # the first message with a body: learn the connection
            frame = sock.recv(copy=False)
            self._watch_connection(_source_fd(frame))
            read = _whole(frame, sock)
        self._reading = False
        self._cursor = _Cursor(sock, read)
        return header, self._cursor

    def _watch_connection(self, fd: int) -> None:
        """Watch the connection with descriptor ``fd`` (see :meth:`stalled_for`), and close it in forked children."""
        if fd < 0:
            return
        try:
            self._watch = StallWatch(fd)
        except OSError:
            return
        address = _peer_address(fd)
        if address is not None:
            self._fork_address = address
            fork.register_address(address)

    # -- sending -----------------------------------------------------------------------------------

    def send(self, frames: Sequence[Any]) -> None:
        """Send one message whole, now or (if the queue to the server is full) when :meth:`flush` finds room.

        Raises:
            LinkBroken: an interrupt cut short an earlier send.
        """
        if self._sending or self._reading or self._closed:
            self._check_intact()
        if self._outbox or not self._send_now(frames):
            self._outbox.append(([bytes(memoryview(frame).cast("B")) for frame in frames], time.monotonic()))

    def send_now(self, frames: Sequence[Any]) -> bool:
        """Send one message if the socket takes it at once (a last word, such as a BYE); False if not."""
        self._check_intact()
        return not self._outbox and self._send_now(frames)

    def flush(self) -> bool:
        """Send the waiting messages the socket takes now; True once none waits."""
        if not self._outbox:
            return True
        self._check_intact()
        while self._outbox:
            if not self._send_now(self._outbox[0][0]):
                return False
            self._outbox.popleft()
        return True

    def _send_now(self, frames: Sequence[Any]) -> bool:
        sock, first = self.socket, frames[0]
        self._sending = True
        try:
            _queue(sock, first, NOBLOCK | (SNDMORE if len(frames) > 1 else 0), _copy(first))
        except zmq.Again:
            self._sending = False
            return False
        _send_frames(sock, frames, 1)
        self._sending = False
        return True

    def stalled_for(self, now: float) -> float:
        """Seconds for which the server has taken nothing: a message waiting in the link, or bytes in the
        connection's send queue that do not move (0 if neither)."""
        waiting = now - self._outbox[0][1] if self._outbox else 0.0
        queued = self._watch.stalled_for(now) if self._watch is not None else 0.0
        return max(waiting, queued)

    # -- the connection ------------------------------------------------------------------------------

    def events(self) -> list[tuple[ConnectionEvent, int]]:
        """What happened to the connection since the last call, in order, with each event's value."""
        events = []
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return events
            kind = _MONITORED.get(event["event"])
            if kind is not None:
                events.append((kind, int(event["value"])))

    def close(self, linger: int = 0) -> None:
        if self._closed:
            return
        self._closed = True
        self._outbox.clear()
        self.socket.disable_monitor()
        self.monitor.close(linger=0)
        self.socket.close(linger=linger)
        if self._fork_address is not None:
            fork.unregister_address(self._fork_address)

    def _check_intact(self) -> None:
        """Raise if an interrupt cut a message short or the link is closed (callers on the step path test the
        three flags first, which saves a call)."""
        if self._sending or self._reading:
            self._sending = self._reading = False
            raise LinkBroken("an interrupt cut short a message on the connection to the server")
        if self._closed:
            raise LinkBroken("the connection to the server is closed")


# -- helpers -----------------------------------------------------------------------------------------


def _copy(frame: Any) -> bool:
    """Whether to copy ``frame`` into the message (see :data:`ZERO_COPY_BYTES`)."""
    return not (type(frame) is np.ndarray and frame.nbytes >= ZERO_COPY_BYTES)


_TOO_LONG: list[bytes] = []
"""A message read whole that had more than :data:`MAX_FRAMES` frames (the rest was dropped)."""


def _whole(first: zmq.Frame, sock: zmq.Socket) -> list[bytes]:
    """``first`` and the rest of the current message, read into memory (:data:`_TOO_LONG` if too long)."""
    rest = _take_rest(sock)
    return _TOO_LONG if rest is None or len(rest) >= MAX_FRAMES else [first.bytes, *rest]


def _take_rest(sock: zmq.Socket) -> list[bytes] | None:
    """The remaining frames of the current message; None (and the rest dropped) beyond :data:`MAX_FRAMES`."""
    frames: list[bytes] = []
    get, receive = sock.get, sock.recv
    while get(RCVMORE):
        if len(frames) == MAX_FRAMES:
            _drain(sock)
            return None
        frames.append(receive())
    return frames


def _drain(sock: zmq.Socket) -> None:
    """Discard the remaining frames of the current message."""
    while sock.get(RCVMORE):
        sock.recv()


def _property(frame: zmq.Frame, name: str) -> str:
    """A message property libzmq attached to ``frame`` ("" if there is none)."""
    try:
        value = frame.get(name)
    except (zmq.ZMQError, KeyError):
        return ""
    return value if isinstance(value, str) else ""


def _sender(frame: zmq.Frame) -> bytes | None:
    """The routing id the sender of ``frame`` gave its connection in the handshake (libzmq's ``Identity``
    property; the ROUTER routes by it), or None if it gave none."""
    try:
        identity = frame.get("Identity")
    except (zmq.ZMQError, KeyError, UnicodeDecodeError):
        return None
    return identity.encode() if isinstance(identity, str) and identity else None


def _source_fd(frame: zmq.Frame) -> int:
    """The descriptor of the connection ``frame`` arrived on (-1 if libzmq does not tell)."""
    try:
        fd = frame.get(zmq.SRCFD)
    except (zmq.ZMQError, AttributeError, KeyError):
        return -1
    return fd if isinstance(fd, int) else -1


def _socket_address(endpoint: str) -> Any:
    """The socket address (as ``getsockname`` gives it) of a bound ``tcp://`` or ``ipc://`` endpoint."""
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://") :]
        return b"\0" + path[1:].encode() if path.startswith("@") else path
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint[len("tcp://") :].rpartition(":")
        if port.isdigit():
            return (host.strip("[]"), int(port))
    return None


def _ipc_file(endpoint: str) -> tuple[str, int] | None:
    """The path and inode of the socket file a bound ``ipc://`` endpoint made (None: not a file)."""
    path = _socket_address(endpoint)
    if not isinstance(path, str):
        return None
    try:
        return path, os.stat(path).st_ino
    except OSError:
        return None


def _peer_address(fd: int) -> Any:
    """The address of the peer of the connection ``fd``, as ``getpeername`` gives it (None if unknown)."""
    try:
        probe = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    try:
        address = probe.getpeername()
    except OSError:
        return None
    finally:
        probe.close()
    return (address[0], address[1]) if isinstance(address, tuple) else address
