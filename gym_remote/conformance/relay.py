"""A TCP relay between a client and a server, for making network faults on loopback.

It forwards every connection made to it, in one thread, and can be told to fail as a network does:

- :meth:`Relay.freeze` silences the connections open now: it goes on reading both sides but passes
  nothing on and keeps both connections open, so that only a peer's own heartbeats can tell it that the
  other side is gone (docs/CONFORMANCE.md, lifecycle);
- :meth:`Relay.pause` stops reading, writing and accepting until :meth:`Relay.resume`: what the peers
  send waits in the kernel's buffers, as in a stall where the connection stays up;
- ``record=True`` keeps every byte passed on in :attr:`Relay.to_server` and :attr:`Relay.to_client`.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

__all__ = ["Relay"]

CHUNK = 1 << 16
SEND_TIMEOUT = 5.0
"""Seconds a send to one side may block before that connection is closed."""


class Relay:
    """Listens on ``127.0.0.1`` (a free port) and forwards every connection to ``target`` (host, port).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, target: tuple[str, int], record: bool = False) -> None:
        self.target = target
        self.record = record
        self.to_server = bytearray()
        self.to_client = bytearray()
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)  # a connection reset between select() and accept() must not block
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, self._listener)  # data: the socket, typed
        self._lock = threading.Lock()
        self._peers: dict[socket.socket, socket.socket] = {}  # both directions of every open pair
        self._client_sides: set[socket.socket] = set()
        self._frozen: set[socket.socket] = set()  # client sides of frozen connections, while open
        self._frozen_ever: set[socket.socket] = set()
        self._relaying = threading.Event()
        self._relaying.set()
        self._paused = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gym_remote-relay", daemon=True)
        self._thread.start()

    @classmethod
    def to(cls, endpoint: str, record: bool = False) -> Relay:
        """A relay to a ``tcp://HOST:PORT`` endpoint."""
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        return cls((host, int(port)), record=record)

    @property
    def endpoint(self) -> str:
        """Where clients connect: ``tcp://127.0.0.1:PORT``."""
        return f"tcp://127.0.0.1:{self.port}"

    def freeze(self) -> int:
        """Stop forwarding on every connection open now (later ones are forwarded); returns how many."""
        with self._lock:
            clients = [sock for sock in self._client_sides if sock not in self._frozen_ever]
            self._frozen.update(clients)
            self._frozen_ever.update(clients)
            return len(clients)

    def frozen_closed_by_client(self) -> bool:
        """Whether connections were frozen and the client has closed all of them."""
        with self._lock:
            return bool(self._frozen_ever) and not self._frozen

    def pause(self, timeout: float = 2.0) -> None:
        """Stop relaying, the connections left open; returns once the relay's thread has stopped.

        Raises:
            TimeoutError: the thread did not stop within ``timeout`` seconds.
        """
        self._relaying.clear()
        if not self._paused.wait(timeout):
            raise TimeoutError(f"the relay did not pause within {timeout} s")

    def resume(self) -> None:
        self._paused.clear()
        self._relaying.set()

    def close(self) -> None:
        """Stop the thread and close every socket (again: nothing).

        Raises:
            TimeoutError: the thread did not stop within 5 s.
        """
        if self._stop.is_set() and not self._thread.is_alive():
            return
        self._stop.set()
        self._relaying.set()
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            raise TimeoutError("the relay's thread did not stop within 5 s")
        for key in list(self._selector.get_map().values()):
            key.data.close()
        self._selector.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._relaying.is_set():
                self._paused.set()
                self._relaying.wait(0.05)
                continue
            for key, _ in self._selector.select(timeout=0.05):
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    self._forward(key.data)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        try:
            server = socket.create_connection(self.target, timeout=SEND_TIMEOUT)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.settimeout(SEND_TIMEOUT)  # recv only follows select(); a send that blocks this long fails
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._selector.register(sock, selectors.EVENT_READ, sock)
        with self._lock:
            self._client_sides.add(client)
            self._peers[client] = server
            self._peers[server] = client
            self.connections += 1

    def _forward(self, sock: socket.socket) -> None:
        with self._lock:
            if sock not in self._peers:  # closed earlier in this round
                return
            peer = self._peers[sock]
            from_client = sock in self._client_sides
            frozen = (sock if from_client else peer) in self._frozen_ever
        try:
            data = sock.recv(CHUNK)
        except OSError:
            data = b""
        if not data:
            self._close(sock, frozen)
            return
        if frozen:
            return  # read and dropped, so that the sender's buffers never fill
        if self.record:
            (self.to_server if from_client else self.to_client).extend(data)
        try:
            peer.sendall(data)
        except OSError:
            self._close(sock, frozen)

    def _close(self, sock: socket.socket, frozen: bool) -> None:
        """One side closed: close both, except that a frozen connection's other side hears nothing of it."""
        with self._lock:
            peer = self._peers.pop(sock, None)
            self._client_sides.discard(sock)
            self._frozen.discard(sock)
            if peer is not None and not frozen:
                self._peers.pop(peer, None)
                self._client_sides.discard(peer)
        for closing in (sock,) if frozen or peer is None else (sock, peer):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(closing)
            closing.close()
