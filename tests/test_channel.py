"""The data channel (``gym_remote.channel``) on its own: records over real Unix socket pairs, limits,
the end of a peer, and the listener that pairs greeted connections with HELLOs. No ZeroMQ."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import numpy as np
import pytest

from gym_remote import channel, transport
from gym_remote.channel import Channel, ChannelClosed, Listener
from gym_remote.errors import ProtocolError

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not channel.AVAILABLE, reason="the data plane needs Linux's abstract Unix sockets"),
]


@pytest.fixture
def pair():
    """Two channels connected to each other, closed after the test."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a, b = Channel(left, max_frame_bytes=64 << 20), Channel(right, max_frame_bytes=64 << 20)
    yield a, b
    a.close()
    b.close()


def frames_of(record) -> list[bytes]:
    return [bytes(frame) for frame in record.frames]


def test_a_record_arrives_with_its_frames_in_order(pair):
    a, b = pair
    frames = [b"header", b"", np.arange(6, dtype=np.float32), memoryview(b"tail")]
    a.send(frames, timeout=1.0)
    record = b.read_until(time.monotonic() + 5)
    assert frames_of(record) == [b"header", b"", np.arange(6, dtype=np.float32).tobytes(), b"tail"]


def test_several_records_in_one_read_come_out_one_at_a_time(pair):
    a, b = pair
    for number in range(5):
        a.send([f"record {number}".encode(), bytes([number]) * number], timeout=1.0)
    time.sleep(0.05)
    got = []
    while len(got) < 5:
        record = b.read_until(time.monotonic() + 5)
        got.append(frames_of(record))
    assert got == [[f"record {n}".encode(), bytes([n]) * n] for n in range(5)]
    assert b.read() is None


def test_a_record_larger_than_the_socket_buffers_goes_through_in_pieces(pair):
    a, b = pair
    big = np.random.default_rng(0).integers(0, 255, size=24 << 20, dtype=np.uint8)
    sender = threading.Thread(target=a.send, args=([b"h", big],), kwargs={"timeout": 20.0})
    sender.start()
    record = b.read_until(time.monotonic() + 20)
    sender.join(20)
    assert record is not None and frames_of(record)[0] == b"h"
    assert np.array_equal(np.frombuffer(record.frames[1], dtype=np.uint8), big)


def test_a_record_split_across_writes_is_returned_only_when_whole(pair):
    a, b = pair
    raw = struct.pack("<IQQ", 2, 3, 4) + b"abc" + b"defg"
    for cut in (2, 10, 20, len(raw) - 1):
        a.sock.sendall(raw[:cut])
        time.sleep(0.01)
        assert b.read() is None, cut
        a.sock.sendall(raw[cut:])
        record = b.read_until(time.monotonic() + 5)
        assert frames_of(record) == [b"abc", b"defg"]


def test_a_record_reads_like_a_zmq_message_for_the_frame_readers(pair):
    a, b = pair
    target = np.zeros(3, dtype=np.int64)
    a.send([b"head", np.array([7, 8, 9], dtype=np.int64), b"v1", b"v2"], timeout=1.0)
    record = b.read_until(time.monotonic() + 5)
    assert record.recv() == b"head"
    transport.recv_into(record, [target], "RESULT")
    assert target.tolist() == [7, 8, 9]
    assert transport.recv_rest(record) == [b"v1", b"v2"]
    assert not record.get(transport.RCVMORE)
    a.send([b"x", b"y"], timeout=1.0)
    record = b.read_until(time.monotonic() + 5)
    transport.drain(record)
    assert not record.get(transport.RCVMORE)


def test_a_frame_of_the_wrong_size_is_refused_by_recv_into(pair):
    a, b = pair
    a.send([np.arange(2, dtype=np.int64)], timeout=1.0)
    record = b.read_until(time.monotonic() + 5)
    with pytest.raises(ProtocolError, match="16 bytes, expected 24"):
        transport.recv_into(record, [np.zeros(3, dtype=np.int64)], "RESULT")


def test_the_peer_closing_is_seen_at_once(pair):
    a, b = pair
    a.close()
    with pytest.raises(ChannelClosed, match="closed the channel"):
        b.read_until(time.monotonic() + 5)


def test_the_peer_dying_mid_record_is_seen(pair):
    a, b = pair
    a.sock.sendall(struct.pack("<IQ", 1, 100) + b"only part")
    a.close()
    with pytest.raises(ChannelClosed, match="mid-message"):
        b.read_until(time.monotonic() + 5)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (struct.pack("<I", 0), "record of 0 frames"),
        (struct.pack("<I", 70_000), "record of 70000 frames"),
        (struct.pack("<IQ", 1, 65 << 20), "exceeds the limit"),
    ],
    ids=["no frames", "too many frames", "frame too large"],
)
def test_malformed_records_are_refused_without_allocating(pair, raw, message):
    a, b = pair
    a.sock.sendall(raw)
    with pytest.raises(ProtocolError, match=message):
        b.read_until(time.monotonic() + 5)
    assert len(b._buffer) < 1 << 20  # nothing was reserved for the announced sizes


def test_a_send_to_a_peer_that_stopped_reading_times_out(pair):
    a, _ = pair
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        a.send([np.zeros(64 << 20, dtype=np.uint8)], timeout=0.5)
    assert time.monotonic() - started < 5


def test_a_send_to_a_dead_peer_says_so(pair):
    a, b = pair
    b.close()
    with pytest.raises(ChannelClosed):
        for _ in range(10):
            a.send([b"x" * 1000], timeout=0.5)


def test_read_until_returns_none_when_nothing_comes(pair):
    _, b = pair
    started = time.monotonic()
    assert b.read_until(started + 0.2) is None
    assert 0.15 < time.monotonic() - started < 2


# -- the listener and the greeting ------------------------------------------------------------------


@pytest.fixture
def listener():
    name = channel.address_for(f"ipc:///test/{os.getpid()}/{time.monotonic_ns()}")
    listener = Listener(name, max_frame_bytes=1 << 20)
    yield listener
    listener.close()


def test_a_greeted_connection_is_handed_to_the_hello_with_its_token(listener):
    token = channel.new_token()
    client = channel.connect(listener.name, token, timeout=2, max_frame_bytes=1 << 20)
    server = listener.take(token, os.getpid())
    assert server is not None
    server.send([b"command"], timeout=1)
    assert frames_of(client.read_until(time.monotonic() + 5)) == [b"command"]
    client.send([b"reply"], timeout=1)
    assert frames_of(server.read_until(time.monotonic() + 5)) == [b"reply"]
    assert listener.take(token, os.getpid()) is None  # handed out once
    client.close()
    server.close()


def test_a_token_from_another_process_or_unknown_gets_no_channel(listener):
    token = channel.new_token()
    client = channel.connect(listener.name, token, timeout=2, max_frame_bytes=1 << 20)
    assert listener.take(channel.new_token(), os.getpid()) is None
    assert listener.take(token, os.getpid() + 1) is None  # the HELLO names another process: closed
    with pytest.raises(ChannelClosed):
        client.read_until(time.monotonic() + 5)
    client.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to greet as another user")
def test_a_connection_from_another_user_is_closed_unread(listener):
    token = channel.new_token()
    child = os.fork()
    if child == 0:  # another user, greeting with a token the HELLO will name
        try:
            os.setuid(65534)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(listener.name)
            sock.sendall(channel.GREETING_MAGIC + token)
            sock.settimeout(10)
            try:
                closed = sock.recv(1) == b""
            except ConnectionResetError:  # closed with the greeting unread
                closed = True
            os._exit(0 if closed else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 10
    status = None
    while status is None and time.monotonic() < deadline:
        assert listener.take(token, child) is None
        pid, code = os.waitpid(child, os.WNOHANG)
        status = os.waitstatus_to_exitcode(code) if pid else None
        time.sleep(0.02)
    if status is None:
        os.kill(child, 9)
        os.waitpid(child, 0)
    assert status == 0, status


def test_a_bad_greeting_is_closed(listener):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(listener.name)
    sock.sendall(b"HELLO-XX" + bytes(16))
    assert listener.take(bytes(16), os.getpid()) is None
    sock.settimeout(5)
    assert sock.recv(10) == b""  # closed by the listener
    sock.close()


def test_connecting_where_nothing_listens_fails_at_once():
    started = time.monotonic()
    with pytest.raises(OSError):
        channel.connect(channel.address_for("tcp://192.0.2.1:1"), channel.new_token(), timeout=2, max_frame_bytes=1)
    assert time.monotonic() - started < 1


def test_a_second_listener_cannot_take_the_name(listener):
    with pytest.raises(OSError):
        Listener(listener.name, max_frame_bytes=1)


def test_the_name_follows_the_endpoint():
    assert channel.address_for("ipc:///tmp/a") == channel.address_for("ipc:///tmp/a")
    assert channel.address_for("ipc:///tmp/a") != channel.address_for("ipc:///tmp/b")
    assert channel.address_for("tcp://127.0.0.1:5555").startswith(b"\0gym_remote/data/")


@pytest.mark.parametrize(("value", "on"), [("", True), ("off", False), ("0", False), ("OFF ", False), ("1", True)])
def test_the_environment_variable_turns_the_default_off(monkeypatch, value, on):
    monkeypatch.setenv(channel.ENV_SWITCH, value)
    assert channel.enabled_by_default() is on
