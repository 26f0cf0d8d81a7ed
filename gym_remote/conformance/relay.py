"""A TCP relay between a client and a server that can freeze: it then stops passing bytes either way and
keeps both connections open, so that only the client's own heartbeats can tell it that its server is
gone (docs/CONFORMANCE.md, lifecycle)."""

from __future__ import annotations

import selectors
import socket
import threading

__all__ = ["Relay"]

CHUNK = 1 << 16


class Relay:
    """Listens on ``127.0.0.1:<port>`` and forwards every connection to ``target`` (host, port).

    Use as a context manager; :meth:`freeze` silences the connections open now (later ones are
    forwarded), and :meth:`frozen_closed_by_client` tells whether the client has closed all of them.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._frozen: set[socket.socket] = set()  # client-side sockets of frozen connections still open
        self._frozen_ever: set[socket.socket] = set()
        self._client_sides: set[socket.socket] = set()
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gym_remote-conformance-relay", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def freeze(self) -> int:
        """Stop forwarding on every connection open now; returns how many were frozen."""
        with self._lock:
            clients = [sock for sock in self._pairs if sock not in self._frozen_ever and self._is_client(sock)]
            self._frozen.update(clients)
            self._frozen_ever.update(clients)
            return len(clients)

    def frozen_closed_by_client(self) -> bool:
        with self._lock:
            return bool(self._frozen_ever) and not self._frozen

    def _is_client(self, sock: socket.socket) -> bool:
        return sock in self._client_sides

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.05):
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    self._forward(key.fileobj)  # type: ignore[arg-type]

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, None)
        with self._lock:
            self._client_sides.add(client)
            self._pairs[client] = server
            self._pairs[server] = client
            self.connections += 1

    def _forward(self, sock: socket.socket) -> None:
        with self._lock:
            peer = self._pairs.get(sock)
            client_side = sock if self._is_client(sock) else peer
            frozen = client_side in self._frozen_ever
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close_side(sock, frozen)
            return
        if frozen or peer is None:
            return  # frozen: read and dropped, so the sender's kernel buffers never fill
        try:
            peer.sendall(data)
        except OSError:
            self._close_side(peer, frozen)

    def _close_side(self, sock: socket.socket, frozen: bool) -> None:
        """One side closed: a frozen connection only forgets that side (its peer hears nothing of it)."""
        with self._lock:
            peer = self._pairs.pop(sock, None)
            if self._is_client(sock):
                self._frozen.discard(sock)
                self._client_sides.discard(sock)
            if peer is not None and not frozen:
                self._pairs.pop(peer, None)
        for closing in (sock,) if frozen else (sock, peer):
            if closing is None:
                continue
            try:
                self._selector.unregister(closing)
            except (KeyError, ValueError):
                pass
            closing.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
