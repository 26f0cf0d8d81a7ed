"""The TCP relay the conformance suite and the outage tests make network faults with: it forwards and
records, a paused relay passes nothing until it resumes, and a frozen one passes nothing ever again but
keeps the connection open."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from gym_remote.conformance.relay import Relay
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(30)

QUIET = 0.3
"""Seconds within which nothing must arrive through a paused or frozen relay."""


class EchoServer:
    """A TCP server on 127.0.0.1 that answers every connection's bytes with the same bytes, in a thread."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.address = self.listener.getsockname()
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            connection.settimeout(0.1)
            self.accepted.append(connection)
            thread = threading.Thread(target=self._echo, args=(connection,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _echo(self, connection: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                data = connection.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            connection.sendall(data)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        for sock in [self.listener, *self.accepted]:
            sock.close()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def relay(echo):
    with Relay(echo.address, record=True) as relay:
        yield relay


def connect(relay: Relay) -> socket.socket:
    return socket.create_connection(("127.0.0.1", relay.port), timeout=5)


def receive(sock: socket.socket, size: int, timeout: float = 5.0) -> bytes:
    """Exactly ``size`` bytes, or fewer if ``timeout`` seconds pass first (b"" when the peer closed)."""
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(TimeoutError):
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                break
            data += chunk
    return data


def test_forwards_both_ways_and_records_what_it_passed(relay):
    with connect(relay) as client:
        client.sendall(b"hello")
        assert receive(client, 5) == b"hello"
        big = bytes(range(256)) * 4096  # 1 MiB, many reads and writes
        client.sendall(big)
        assert receive(client, len(big)) == big
    assert relay.connections == 1
    assert bytes(relay.to_server) == b"hello" + big
    wait_until(lambda: bytes(relay.to_client) == b"hello" + big, 5, "the echo to be recorded")
    assert relay.endpoint == f"tcp://127.0.0.1:{relay.port}"


def test_a_paused_relay_holds_bytes_until_it_resumes(relay):
    with connect(relay) as client:
        client.sendall(b"before")
        assert receive(client, 6) == b"before"
        relay.pause()
        client.sendall(b"during")
        assert receive(client, 6, timeout=QUIET) == b""
        relay.resume()
        assert receive(client, 6) == b"during", "what was sent during the pause arrives after it"


def test_a_frozen_connection_passes_nothing_but_stays_open_and_later_ones_are_forwarded(relay, echo):
    first = connect(relay)
    try:
        first.sendall(b"one")
        assert receive(first, 3) == b"one"
        assert relay.freeze() == 1
        assert relay.freeze() == 0, "a connection is frozen once"
        first.sendall(b"lost")
        assert receive(first, 4, timeout=QUIET) == b""
        assert bytes(relay.to_server) == b"one"
        with connect(relay) as second:  # opened after the freeze: forwarded
            second.sendall(b"two")
            assert receive(second, 3) == b"two"
        assert not relay.frozen_closed_by_client()
        echo.accepted[0].shutdown(socket.SHUT_RDWR)  # the server side closing is not passed on either
        first.sendall(b"still")
        assert receive(first, 5, timeout=QUIET) == b""
    finally:
        first.close()
    wait_until(relay.frozen_closed_by_client, 5, "the relay to see the client close the frozen connection")


def test_a_closed_side_closes_the_other(relay, echo):
    with connect(relay) as client:
        client.sendall(b"x")
        assert receive(client, 1) == b"x"
        echo.accepted[0].shutdown(socket.SHUT_RDWR)
        assert receive(client, 1) == b"", "the client sees its connection closed"


def test_a_relay_to_an_endpoint():
    echo = EchoServer()
    try:
        with Relay.to(f"tcp://127.0.0.1:{echo.address[1]}") as relay, connect(relay) as client:
            client.sendall(b"ping")
            assert receive(client, 4) == b"ping"
            assert relay.to_server == b"", "nothing is recorded unless asked"
        relay.close()  # a second close does nothing
    finally:
        echo.close()
