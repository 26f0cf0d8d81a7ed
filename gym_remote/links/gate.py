"""The gatekeeper: a thread that answers a server socket's ZAP requests by a
:class:`~gym_remote.security.GatePolicy`, and counts the socket's connections for it.

libzmq holds every connection's handshake until its ZAP request is answered, whatever the learner's
thread is doing, so the answers come from a thread of their own with sockets of their own (one socket,
one thread): the ZAP socket, a monitor of the watched socket's connections, and a socket that wakes
the thread to stop. What to answer is the policy's; this module only moves the messages.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from gym_remote.security import (
    DEFAULT_HANDSHAKE_RATE,
    HANDSHAKE_SECONDS,
    ZAP_DOMAIN,
    AuthorizedKeys,
    GatePolicy,
)

__all__ = ["Gatekeeper", "ZAP_ENDPOINT", "handshake_failure_reason"]

logger = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_CONNECTION_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL

GATEKEEPER_POLL_MS = 200
"""The gatekeeper thread's longest wait in ZeroMQ: it holds its sockets' lock no longer than this."""

GATEKEEPER_CLOSE_SECONDS = 5.0
"""How long :meth:`Gatekeeper.close` waits at most by default."""


class Gatekeeper:
    """Answers a server socket's ZAP requests in a thread: CURVE keys, connection count, handshake rate.

    Every socket of ``context`` with a ZAP domain or a security mechanism asks it, so a server that
    uses one owns its context. Denials never reach the gym_remote protocol: libzmq closes the connection.

    Args:
        context: the server's own ZeroMQ context.
        authorized: the client keys accepted (None: plain connections, which are only counted and rated).
        max_connections: connections open at once beyond which new handshakes are refused.
        handshake_rate: handshakes per second one network address may start.
        handshake_burst: handshakes one address may start at once (at least twice ``handshake_rate``).
    """

    def __init__(
        self,
        context: zmq.Context,
        authorized: AuthorizedKeys | None,
        *,
        max_connections: int,
        handshake_rate: float = DEFAULT_HANDSHAKE_RATE,
        handshake_burst: float = 0.0,
    ) -> None:
        self.policy = GatePolicy(
            authorized, max_connections=max_connections, handshake_rate=handshake_rate, handshake_burst=handshake_burst
        )
        # A flag, not a threading.Event: an interrupt can leave an Event's lock held (at the entry of the
        # Python-level Condition.__exit__), and close() called again would wait for it forever.
        self._stopping = False
        # Held by whoever uses the sockets (the thread while it polls, receives or replies; close() to close
        # them under a thread that is stuck elsewhere, in a key lookup say): never two threads in libzmq at once.
        self._sockets_lock = threading.RLock()
        self._sockets_closed = False
        self._monitor_address = f"inproc://gym-remote-gatekeeper-{id(self):x}"
        self._context = context
        self._zap = context.socket(zmq.REP)
        self._zap.setsockopt(zmq.LINGER, 0)
        try:
            self._zap.bind(ZAP_ENDPOINT)
        except zmq.ZMQError:
            self._zap.close()
            raise
        self._monitor: zmq.Socket | None = None
        # The peers of connections still in their handshake (by descriptor), and the failures of handshakes
        # whose connection has not closed yet: libzmq reports a failure, then closes that connection.
        self._handshaking: dict[int, tuple[str, float]] = {}
        self._failures: list[int] = []
        self._wake = context.socket(zmq.PAIR)  # close() wakes the thread through it
        self._wake.setsockopt(zmq.LINGER, 0)
        self._wake.bind(f"inproc://gym-remote-gatekeeper-wake-{id(self):x}")
        self._thread = threading.Thread(target=self._run, name="gym_remote-gatekeeper", daemon=True)

    @property
    def handshake_burst(self) -> float:
        return self.policy.handshake_burst

    def watch(self, sock: zmq.Socket) -> None:
        """Count ``sock``'s connections (call before it binds, from the thread that owns it)."""
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        sock.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_SECONDS * 1000))
        sock.monitor(self._monitor_address, _CONNECTION_EVENTS)
        monitor = self._context.socket(zmq.PAIR)
        monitor.setsockopt(zmq.LINGER, 0)
        monitor.connect(self._monitor_address)
        self._monitor = monitor

    def start(self) -> None:
        self._thread.start()

    def stats(self) -> dict[str, Any]:
        """Connections open now, handshakes accepted, and handshakes denied by reason."""
        return self.policy.stats()

    def close(self, sock: zmq.Socket | None = None, timeout: float = GATEKEEPER_CLOSE_SECONDS) -> bool:
        """Stop the thread and close its sockets, within about ``timeout`` seconds whatever the thread does
        (``sock``: the watched socket, whose monitor ends first).

        A thread that does not stop in time (stuck in a key lookup, say) has its sockets closed under it,
        so that ``context.term()`` cannot wait for them; it ends when it gets back to them.

        Returns:
            True once the gatekeeper's sockets are closed; False (logged) if they could not be, in which
            case terminate the context with :func:`gym_remote.links.zeromq.terminate`, which is bounded.
        """
        deadline = time.monotonic() + timeout
        if sock is not None and not sock.closed:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
        self._stopping = True
        if self._thread.is_alive():
            self._wake_thread()
            self._thread.join(timeout / 2)  # the other half: for its sockets' lock if it is stuck
        if not self._thread.is_alive():
            self._close_sockets()
            return True
        if not self._sockets_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            logger.error(
                "the gatekeeper thread did not stop within %g s and holds its sockets; they stay open, and "
                "context.term() would wait for them (gym_remote.links.zeromq.terminate does not)",
                timeout,
            )
            return False
        try:
            self._close_sockets()
        finally:
            self._sockets_lock.release()
        logger.warning(
            "the gatekeeper thread did not stop within %g s; its sockets were closed under it (it ends when it "
            "gets back to them)",
            timeout / 2,
        )
        return True

    def _wake_thread(self) -> None:
        try:
            waker = self._context.socket(zmq.PAIR)
        except zmq.ZMQError:  # the context is closed already: the thread's polls fail and it ends
            return
        waker.connect(f"inproc://gym-remote-gatekeeper-wake-{id(self):x}")
        try:
            waker.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:  # the thread saw the stop flag and closed its end already
            pass
        waker.close(linger=100)

    def _close_sockets(self) -> None:
        with self._sockets_lock:
            self._sockets_closed = True
            for owned in (self._zap, self._monitor, self._wake):
                if owned is not None:
                    owned.close(linger=0)

    # -- the thread --------------------------------------------------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._zap, zmq.POLLIN)
        poller.register(self._wake, zmq.POLLIN)
        monitor = self._monitor
        if monitor is not None:
            poller.register(monitor, zmq.POLLIN)
        try:
            while not self._stopping:
                with self._sockets_lock:
                    if self._sockets_closed:  # by close(), while this thread was answering
                        return
                    ready = dict(poller.poll(GATEKEEPER_POLL_MS))
                    if monitor is not None and monitor in ready:  # connection events first: a handshake's own
                        self._read_connection_events(monitor)  # connection is counted
                    if self._zap not in ready:
                        continue
                    request = self._zap.recv_multipart()
                reply = self.policy.answer(request)  # without the lock: a lookup may rescan a slow key directory
                with self._sockets_lock:
                    if self._sockets_closed:
                        return
                    self._zap.send_multipart(reply)
        except zmq.ZMQError as error:  # the context is being terminated
            if not self._stopping:
                logger.error("the gatekeeper stopped: %s", error)
        finally:
            self._close_sockets()

    def _read_connection_events(self, monitor: zmq.Socket) -> None:
        while True:
            try:
                event = parse_monitor_message(monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            kind, value = event["event"], event["value"]
            if kind == zmq.EVENT_ACCEPTED:
                self.policy.connection_opened(value)
                self._handshaking[value] = (_peer_of(value), time.monotonic())
                self._forget_old_handshakes()
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                self._failures.append(value)
            elif kind == zmq.EVENT_DISCONNECTED:
                self.policy.connection_closed(value)
                peer, _ = self._handshaking.pop(value, (None, 0.0))
                if self._failures:
                    self.policy.handshake_failed(peer, handshake_failure_reason(self._failures.pop(0)))

    def _forget_old_handshakes(self) -> None:
        """Drop the peers of connections older than a handshake may last (they finished it, or were cut off)."""
        if len(self._handshaking) > 64:
            cutoff = time.monotonic() - 2 * HANDSHAKE_SECONDS
            self._handshaking = {fd: seen for fd, seen in self._handshaking.items() if seen[1] > cutoff}


def handshake_failure_reason(code: int) -> str:
    """What a server says of a handshake that failed with libzmq's protocol error ``code``."""
    if code == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
        return "its CURVE handshake failed: the client holds another secret, or a wrong server key"
    if code == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        return "it has no keys or secret, and this server requires them"
    return f"its ZeroMQ handshake failed (protocol error {code:#x})"


def _peer_of(descriptor: int) -> str:
    """The network address of the peer on a connection's socket descriptor: "" for ipc, and
    :data:`PEER_GONE` if the connection was closed before its monitor event was read (on a busy machine)."""
    try:
        with socket.socket(fileno=os.dup(descriptor)) as connection:
            name = connection.getpeername()
    except OSError:
        return PEER_GONE
    return name[0] if isinstance(name, tuple) else ""


PEER_GONE = "an address gone before it was read"
"""What the refusal log says of a peer whose connection closed before the gatekeeper could read its address."""
