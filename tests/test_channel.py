"""The data channel link (``gym_remote.links.channel``) on its own: records over real Unix socket pairs,
sends that never block, reads that allocate only for bytes that came, interrupts, the end of a peer,
and the listener that accepts, checks and pairs greeted connections with HELLOs. No ZeroMQ."""

from __future__ import annotations

import functools
import os
import resource
import select
import signal
import socket
import struct
import time

import numpy as np
import pytest

from gym_remote.errors import ProtocolError
from gym_remote.links import LinkBroken, channel, shared
from gym_remote.links.channel import Channel, Listener
from tests.helpers import call_interrupted_at, interrupts_at_random_moments

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not channel.AVAILABLE, reason="the data plane needs Linux's abstract Unix sockets"),
]


SLAB_SHAPE = [8, 7]
"""The frame sizes of the messages the slabs of connected_channels("slabs") carry, both ways."""


def connected_channels(kind: str) -> tuple[Channel, Channel]:
    """Two channels connected to each other: over the socket alone, or with a shared block whose mailboxes
    carry what fits, and with ``"slabs"`` whose slabs carry the messages of frame sizes :data:`SLAB_SHAPE` too
    (the first is the server's end, the second the client's)."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a, b = Channel(left, max_frame_bytes=64 << 20), Channel(right, max_frame_bytes=64 << 20)
    if kind in ("mailboxes", "slabs"):
        slab = shared.slab_bytes(SLAB_SHAPE) if kind == "slabs" else 0
        block = shared.Block.create(1 << 16, 1 << 16, (slab, slab))
        b.use_block(block, outgoing=shared.REPLIES)
        a.block_fd = os.dup(block.fd)
        assert a.attach_block() == ""
        if kind == "slabs":
            assert a.use_slabs(SLAB_SHAPE, SLAB_SHAPE) and b.use_slabs(SLAB_SHAPE, SLAB_SHAPE)
    return a, b


def _open_pair(kind: str):
    """Two connected channels of ``kind`` (see connected_channels), closed after the test."""
    if kind != "socket" and not shared.AVAILABLE:
        pytest.skip("shared-memory mailboxes need x86-64 Linux")
    a, b = connected_channels(kind)
    yield a, b
    a.close()
    b.close()


@pytest.fixture(params=["socket", "mailboxes", "slabs"])
def pair(request):
    """Two connected channels, of each kind."""
    yield from _open_pair(request.param)


@pytest.fixture
def mailboxes():
    """Two channels connected with a shared block."""
    yield from _open_pair("mailboxes")


@pytest.fixture
def slabs():
    """Two channels connected with a shared block and slabs."""
    yield from _open_pair("slabs")


def frames_of(record) -> list[bytes]:
    return [bytes(frame) for frame in record.frames]


def receive_within(link: Channel, seconds: float, *, peer: Channel | None = None):
    """The next record of ``link`` (consuming the one before), waiting up to ``seconds`` for it and sending
    what waits in ``peer`` meanwhile; None if it did not come."""
    link.consume()
    deadline = time.monotonic() + seconds
    while True:
        record = link.receive()
        if record is not None or time.monotonic() > deadline:
            return record
        if peer is not None:
            peer.flush()
        select.select([link.fileno()], [peer.fileno()] if peer is not None and peer.wants_write else [], [], 0.05)


# -- records ------------------------------------------------------------------------------------------


def test_a_record_arrives_with_its_frames_in_order(pair):
    a, b = pair
    frames = [b"header", b"", np.arange(6, dtype=np.float32), memoryview(b"tail")]
    a.send(frames)
    record = receive_within(b, 5)
    assert frames_of(record) == [b"header", b"", np.arange(6, dtype=np.float32).tobytes(), b"tail"]


def test_several_records_in_one_read_come_out_one_at_a_time(pair):
    a, b = pair
    for number in range(5):
        a.send([f"record {number}".encode(), bytes([number]) * number])
    time.sleep(0.05)
    got = [frames_of(receive_within(b, 5)) for _ in range(5)]
    assert got == [[f"record {n}".encode(), bytes([n]) * n] for n in range(5)]
    b.consume()
    assert b.receive() is None


def test_the_current_record_is_handed_out_again_until_consumed(pair):
    a, b = pair
    a.send([b"first"])
    a.send([b"second"])
    first = receive_within(b, 5)
    first.next()
    assert frames_of(b.receive()) == [b"first"] and b.receive() is first  # an interrupted handler gets it again
    b.consume()
    assert frames_of(receive_within(b, 5)) == [b"second"]


def test_a_record_split_across_writes_is_returned_only_when_whole(pair):
    a, b = pair
    raw = struct.pack("<IQQ", 2, 3, 4) + b"abc" + b"defg"
    for cut in (2, 10, 20, len(raw) - 1):
        a.sock.sendall(raw[:cut])
        time.sleep(0.01)
        b.consume()
        assert b.receive() is None, cut
        a.sock.sendall(raw[cut:])
        assert frames_of(receive_within(b, 5)) == [b"abc", b"defg"]


def test_a_record_whose_lengths_came_before_the_buffer_made_room_comes_out_whole(pair):
    """The first record fills the receive buffer but for the start of the second, whose frame lengths are in;
    once the first is consumed the rest of the second arrives, the buffer moves it to its start, and it reads
    whole, as does a third."""
    a, b = pair
    second = struct.pack("<IQQQ", 3, 5, 6, 7) + b"fives" + b"sixsix" + b"sevens7"
    taken_first = 40  # the frame count, its lengths, and 12 bytes of the frames
    first_payload = b"f" * (channel.FIRST_READ_BYTES - 4 - 8 - taken_first)
    a.sock.sendall(struct.pack("<IQ", 1, len(first_payload)) + first_payload + second[:taken_first])
    time.sleep(0.05)
    assert frames_of(receive_within(b, 5)) == [first_payload]
    b.consume()
    assert b.receive() is None  # the second's layout is read, its frames are not all in
    a.sock.sendall(second[taken_first:])
    assert frames_of(receive_within(b, 5)) == [b"fives", b"sixsix", b"sevens7"]
    a.send([b"third"])
    assert frames_of(receive_within(b, 5)) == [b"third"]


def test_a_record_reads_as_a_message(pair):
    a, b = pair
    target = np.zeros(3, dtype=np.int64)
    a.send([b"head", np.array([7, 8, 9], dtype=np.int64), b"v1", b"v2"])
    record = receive_within(b, 5)
    assert record.next() == b"head"
    record.next_into([target], "RESULT")
    assert target.tolist() == [7, 8, 9]
    assert record.rest() == [b"v1", b"v2"] and not record.more()
    a.send([b"x", b"y"])
    record = receive_within(b, 5)
    record.skip_rest()
    assert not record.more()


def test_a_frame_of_the_wrong_size_is_refused_by_next_into(pair):
    a, b = pair
    a.send([np.arange(2, dtype=np.int64)])
    with pytest.raises(ProtocolError, match="16 bytes, expected 24"):
        receive_within(b, 5).next_into([np.zeros(3, dtype=np.int64)], "RESULT")


# -- sending never blocks ---------------------------------------------------------------------------


def test_a_record_larger_than_the_socket_buffers_goes_out_while_the_sender_flushes(pair):
    a, b = pair
    big = np.random.default_rng(0).integers(0, 255, size=24 << 20, dtype=np.uint8)
    started = time.monotonic()
    a.send([b"h", big])
    assert time.monotonic() - started < 1 and a.wants_write  # most of it waits in the link
    big[:] = 0  # the sender may reuse its buffer at once: what waits was copied
    record = receive_within(b, 20, peer=a)
    assert record is not None and frames_of(record)[0] == b"h"
    assert np.array_equal(
        np.frombuffer(record.frames[1], dtype=np.uint8),
        np.random.default_rng(0).integers(0, 255, size=24 << 20, dtype=np.uint8),
    )
    assert not a.wants_write


def test_records_sent_while_others_wait_keep_their_order(pair):
    a, b = pair
    a.send([np.zeros(8 << 20, dtype=np.uint8)])
    for number in range(3):
        a.send([bytes([number])])
    assert frames_of(receive_within(b, 20, peer=a))[0][:1] == b"\0"
    assert [frames_of(receive_within(b, 5, peer=a)) for _ in range(3)] == [[b"\0"], [b"\1"], [b"\2"]]


def test_a_send_to_a_dead_peer_breaks_the_link(pair):
    a, b = pair
    b.close()
    with pytest.raises(LinkBroken, match="closed"):
        for _ in range(10):
            a.send([b"x" * 1000])
    with pytest.raises(LinkBroken):  # broken for good
        a.flush()


# -- the end of a peer --------------------------------------------------------------------------------


def test_the_peer_closing_is_seen_at_once(pair):
    a, b = pair
    a.close()
    with pytest.raises(LinkBroken, match="closed"):
        receive_within(b, 5)


def test_the_peer_dying_mid_record_is_seen(pair):
    a, b = pair
    a.sock.sendall(struct.pack("<IQ", 1, 100) + b"only part")
    a.close()
    with pytest.raises(LinkBroken, match="in the middle of a message"):
        receive_within(b, 5)


# -- what a peer announces costs nothing --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (struct.pack("<I", 0), "record of 0 frames"),
        (struct.pack("<I", 70_000), "record of 70000 frames"),
        (struct.pack("<IQ", 1, 65 << 20), "exceeds the limit"),
    ],
    ids=["no frames", "too many frames", "frame too large"],
)
def test_malformed_records_break_the_link_without_allocating(pair, raw, message):
    a, b = pair
    if b.block is not None and raw == struct.pack("<I", 0):
        pytest.skip("with a shared block, a record of no frames is a doorbell (test_a_doorbell_only_wakes)")
    a.sock.sendall(raw)
    with pytest.raises(LinkBroken, match=message):
        receive_within(b, 5)
    assert len(b._buffer) < 1 << 20  # nothing was reserved for the announced sizes


def test_announced_lengths_within_the_limit_reserve_nothing_before_the_bytes_come(pair):
    a, b = pair
    count = 4096  # 4096 frames of 64 MiB each: 256 GiB announced in a 32 KiB header
    a.sock.sendall(struct.pack(f"<I{count}Q", count, *([64 << 20] * count)) + b"a few bytes")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(5):
        b.consume()
        assert b.receive() is None
    assert len(b._buffer) <= 1 << 16  # the header fits the first buffer: nothing more was made
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 16 << 10  # KiB


# -- interrupts ---------------------------------------------------------------------------------------


class _Interrupt(Exception):
    pass


@pytest.mark.timeout(60, method="thread")  # the test uses SIGALRM itself
@interrupts_at_random_moments(_Interrupt)
def test_sends_and_reads_interrupted_at_random_moments_lose_or_garble_nothing(pair):
    """Records of random sizes sent and read while a timer raises at random moments (microseconds apart), as
    Ctrl-C would at any bytecode: the channel never breaks, each record arrives whole and once, in order,
    every send that returned is received, and a send that was interrupted arrives whole or not at all."""
    a, b = pair
    rng = np.random.default_rng(0)

    live = False

    def interrupt(signum, frame):
        if live:  # (not once the try below is left: a signal may be handled after its timer was stopped)
            raise _Interrupt

    attempted, returned, received = [], set(), []
    previous = signal.signal(signal.SIGALRM, interrupt)
    deadline = time.monotonic() + 4
    number = 0
    try:
        while time.monotonic() < deadline or a.wants_write or b.buffered():
            armed = time.monotonic() < deadline
            try:
                live = armed
                if armed:
                    signal.setitimer(signal.ITIMER_REAL, float(rng.uniform(2e-6, 2e-4)))
                if armed and number < 100_000:
                    size = int(rng.choice([0, 7, 1000, 70_000, 600_000]))
                    number += 1  # a new number for every attempt
                    attempted.append(number)
                    a.send([struct.pack("<Q", number), np.full(size, number % 251, dtype=np.uint8)])
                    returned.add(number)
                a.flush()
                while (record := b.receive()) is not None:
                    received.append([bytes(frame) for frame in record.frames])
                    b.consume()
            except _Interrupt:
                pass
            finally:
                live = False
                signal.setitimer(signal.ITIMER_REAL, 0)
            select.select([b.fileno()], [a.fileno()] if a.wants_write else [], [], 0.001)
        # (the loop stops with nothing left in the two links' buffers, but a record may still be in the socket's)
        while select.select([b.fileno()], [], [], 0.2)[0]:
            while (record := b.receive()) is not None:
                received.append([bytes(frame) for frame in record.frames])
                b.consume()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # (an interrupt between the test's append and consume() hands the same record out again: seen twice in a row)
    received = [frames for index, frames in enumerate(received) if index == 0 or frames != received[index - 1]]
    numbers = [struct.unpack("<Q", frames[0])[0] for frames in received]
    bad = [i for i in range(1, len(numbers)) if numbers[i] <= numbers[i - 1]]
    assert numbers == sorted(set(numbers)), (
        f"records out of order or twice: {[numbers[max(0, i - 3) : i + 3] for i in bad[:5]]}"
    )
    missing = sorted(returned - set(numbers))
    assert not missing, f"sends that returned but never arrived: {missing[:10]} (of {number} attempted)"
    assert set(numbers) <= set(attempted)
    for value, frames in zip(numbers, received, strict=True):
        payload = np.frombuffer(frames[1], dtype=np.uint8)
        assert (payload == value % 251).all(), f"record {value} garbled"
    assert len(attempted) - len(returned) > 20, "too few sends were interrupted for the test to mean much"


@pytest.mark.timeout(60, method="thread")  # the test uses SIGALRM itself
def test_a_send_interrupted_while_waiting_for_room_completes_later(pair):
    """Ctrl-C while the rest of a large record waits for room leaves it in the link; it goes out whole, before
    the records sent after it, when the link is flushed again."""
    a, b = pair
    big = np.arange(8 << 20, dtype=np.uint8)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        a.send([b"big", big])
        with pytest.raises(KeyboardInterrupt):
            while True:  # a writer waiting for room, as the multiplexer does
                a.flush()
                select.select([], [a.fileno()], [], 0.01) if a.wants_write else time.sleep(0.01)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    a.send([b"after"])
    record = receive_within(b, 20, peer=a)
    assert frames_of(record)[0] == b"big" and np.array_equal(np.frombuffer(record.frames[1], np.uint8), big)
    assert frames_of(receive_within(b, 5, peer=a)) == [b"after"]


# -- forked children ----------------------------------------------------------------------------------


def _forked_sleeper() -> int:
    """A child forked without exec that sleeps; returned once its after-fork handlers have run."""
    ready, told = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.write(told, b"x")
            time.sleep(10)
        finally:
            os._exit(0)
    os.close(told)
    os.read(ready, 1)
    os.close(ready)
    return child


def test_a_forked_child_holds_no_channel(pair):
    """A child forked without exec closes its copy of every channel: the parent's death is seen at once."""
    a, b = pair
    child = _forked_sleeper()
    try:
        a.close()  # the parent's copy; the child's is gone already
        with pytest.raises(LinkBroken, match="closed"):
            receive_within(b, 2)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


# -- the listener and the greeting ------------------------------------------------------------------


@pytest.fixture
def listener():
    name = channel.address_for(f"ipc:///test/{os.getpid()}/{time.monotonic_ns()}")
    listener = Listener(name, max_frame_bytes=1 << 20)
    yield listener
    listener.close()


def test_a_greeted_connection_is_handed_to_the_hello_with_its_token(listener):
    token = channel.new_token()
    client = channel.connect(listener.name, token, max_frame_bytes=1 << 20)
    server = listener.take(token, os.getpid(), b"hello-sender")
    assert server is not None
    server.send([b"command"])
    assert frames_of(receive_within(client, 5)) == [b"command"]
    client.send([b"reply"])
    assert frames_of(receive_within(server, 5)) == [b"reply"]
    assert listener.take(token, os.getpid(), b"another-sender") is None  # handed out once
    # the same HELLO handled again (an interrupt cut its first handling short) gets the same channel
    assert listener.take(token, os.getpid(), b"hello-sender") is server
    client.close()
    server.close()


@pytest.mark.skipif(not shared.AVAILABLE, reason="shared-memory mailboxes need x86-64 Linux")
def test_a_take_cut_short_at_any_call_is_made_again_and_keeps_the_shared_block(listener):
    """An interrupt while the server takes a greeted connection has its HELLO handled again. For every n: the
    take interrupted at its n-th Python call, then made again, hands out a channel that still has the block
    the client handed over. (The greeting was read before, as the multiplexer reads it when it comes; an
    interrupt inside that read is not covered here.)"""
    cuts = 0
    for number in range(1, 300):
        token = channel.new_token()
        block = shared.Block.create(100, 100)
        client = channel.connect(listener.name, token, max_frame_bytes=1 << 20, block=block)
        listener.service(time.monotonic())
        server = None
        try:
            take = functools.partial(listener.take, token, os.getpid(), b"hello-sender")
            cut, server = call_interrupted_at(number, _Interrupt, take, within="/gym_remote/")
            if cut:
                cuts += 1
                server = listener.take(token, os.getpid(), b"hello-sender")
            assert server is not None, f"cut at call {number}: no channel"
            assert (server.attach_block(), server.plane) == ("", "shm"), f"cut at call {number}"
        finally:
            if server is not None:
                server.close()
            client.close()
            block.close()
        if not cut:
            break
    assert cuts >= 3


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("with_block", [True, False], ids=["shm", "uds"])
def test_a_connection_accepted_and_greeted_while_cut_short_at_any_call_is_still_taken(listener, with_block):
    """The listener accepts connections and reads their greetings as the multiplexer sees them come, inside a
    learner's call that an interrupt may cut short anywhere. For every n: the listener's service interrupted at
    its n-th Python call (the socket module's included), then the take that follows, hands out the channel with
    the block the client handed over; and no descriptor is left open."""
    if with_block and not shared.AVAILABLE:
        pytest.skip("shared-memory mailboxes need x86-64 Linux")
    before = _open_descriptors()
    cuts = 0
    for number in range(1, 300):
        token = channel.new_token()
        block = shared.Block.create(100, 100) if with_block else None
        client = channel.connect(listener.name, token, max_frame_bytes=1 << 20, block=block)
        server = None
        try:
            cut, _ = call_interrupted_at(number, _Interrupt, lambda: listener.service(time.monotonic()))
            cuts += cut
            server = listener.take(token, os.getpid(), b"hello-sender")
            assert server is not None, f"cut at call {number}: no channel"
            if with_block:
                assert (server.attach_block(), server.plane) == ("", "shm"), f"cut at call {number}"
                client.use_block(block, outgoing=shared.REPLIES)
            server.send([b"command"])
            assert frames_of(receive_within(client, 5)) == [b"command"]
        finally:
            if server is not None:
                server.close()
            client.close()
            if block is not None:
                block.close()
        if not cut:
            break
    assert cuts >= 5
    assert _open_descriptors() == before


def test_a_token_from_another_process_or_unknown_gets_no_channel(listener):
    token = channel.new_token()
    client = channel.connect(listener.name, token, max_frame_bytes=1 << 20)
    assert listener.take(channel.new_token(), os.getpid()) is None
    assert listener.take(token, os.getpid() + 1) is None  # the HELLO names another process: closed
    with pytest.raises(LinkBroken):
        receive_within(client, 5)
    client.close()


def _closed_by_peer(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:  # closed with bytes unread
        return True
    except TimeoutError:
        return False


def _in_child_as_nobody(work) -> int:
    """Run ``work()`` in a forked child that became another user; its exit code (0: ``work`` returned True)."""
    child = os.fork()
    if child == 0:
        try:
            os.setuid(65534)
            os._exit(0 if work() else 1)
        except BaseException:
            os._exit(2)
    return child


def _wait_child(child: int, seconds: float, between=lambda: None) -> int | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        between()
        pid, code = os.waitpid(child, os.WNOHANG)
        if pid:
            return os.waitstatus_to_exitcode(code)
        time.sleep(0.02)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to greet as another user")
def test_a_connection_from_another_user_is_closed_unread(listener):
    token = channel.new_token()

    def greet() -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(listener.name)
        sock.sendall(channel.GREETING_MAGIC + token)
        return _closed_by_peer(sock, 10)

    child = _in_child_as_nobody(greet)
    status = _wait_child(child, 10, between=lambda: listener.take(token, child))
    assert status == 0, status
    assert listener.refused["another user"] == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to connect as another user")
def test_a_flood_of_connections_from_another_user_cannot_fill_the_queue(listener):
    """Another user's connections are accepted and closed as fast as they come: a process holding hundreds
    of them open keeps no place in the listener's queue, and a client of the listener's user gets in."""

    def flood() -> bool:
        held = []
        for _ in range(600):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(listener.name)
            except BlockingIOError:  # the queue is full for now: the listener empties it
                time.sleep(0.001)
            held.append(sock)
        time.sleep(5)
        return True

    child = _in_child_as_nobody(flood)
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            listener.service(time.monotonic())
            time.sleep(0.005)
        token = channel.new_token()
        client = channel.connect(listener.name, token, max_frame_bytes=1 << 20)
        assert listener.take(token, os.getpid()) is not None
        client.close()
        assert listener.refused["another user"] > 100
    finally:
        _wait_child(child, 10)


def test_a_connection_that_does_not_greet_in_time_is_closed(listener, monkeypatch):
    monkeypatch.setattr(channel, "GREETING_SECONDS", 0.3)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(listener.name)
    deadline = time.monotonic() + 5
    while listener.refused["no greeting in time"] == 0 and time.monotonic() < deadline:
        listener.service(time.monotonic())
        time.sleep(0.05)
    assert _closed_by_peer(silent, 2)
    silent.close()


def test_connections_beyond_the_limit_close_the_oldest(listener, monkeypatch):
    monkeypatch.setattr(channel, "MAX_PENDING", 3)
    socks = []
    for _ in range(5):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(listener.name)
        socks.append(sock)
    listener.service(time.monotonic())
    assert [_closed_by_peer(sock, 0.5) for sock in socks] == [True, True, False, False, False]
    assert listener.refused["too many"] == 2
    for sock in socks:
        sock.close()


def test_a_bad_greeting_is_closed(listener):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(listener.name)
    sock.sendall(b"HELLO-XX" + bytes(16))
    assert listener.take(bytes(16), os.getpid()) is None
    assert _closed_by_peer(sock, 5)
    sock.close()


def test_connecting_where_nothing_listens_fails_at_once():
    started = time.monotonic()
    with pytest.raises(OSError):
        channel.connect(channel.address_for("tcp://192.0.2.1:1"), channel.new_token(), max_frame_bytes=1)
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


@pytest.mark.parametrize(
    ("switch", "choice", "kind"),
    [
        ("", None, "shm"),
        ("uds", None, "uds"),
        ("UDS", True, "uds"),  # True: the default kind, as the environment names it
        ("shm", None, "shm"),
        ("off", None, ""),
        ("off", True, "shm"),  # an explicit choice wins
        ("", "uds", "uds"),
        ("shm", False, ""),
        ("", "", ""),  # (the answer for off, passed on to a launched client)
    ],
)
def test_the_kind_of_data_plane_follows_the_choice_then_the_environment(monkeypatch, switch, choice, kind):
    monkeypatch.setenv(channel.ENV_SWITCH, switch)
    expected = "uds" if kind == "shm" and not shared.AVAILABLE else kind
    assert channel.wanted(choice) == expected


def test_a_data_plane_kind_that_does_not_exist_is_refused():
    with pytest.raises(ValueError, match="data_plane must be True, False, None or one of"):
        channel.wanted("tcp")


def test_a_forked_child_does_not_keep_the_listeners_name(listener):
    """A child forked without exec closes its copy of the listening socket: the name is free when the parent closes."""
    child = _forked_sleeper()
    try:
        listener.close()
        second = Listener(listener.name, max_frame_bytes=1)  # the name is free again
        second.close()
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


# -- shared-memory mailboxes --------------------------------------------------------------------------


def test_messages_that_fit_go_through_the_mailbox_and_the_rest_on_the_socket_in_their_order(mailboxes):
    a, b = mailboxes
    capacity = b.block.capacities[shared.COMMANDS]
    sizes = [10, 10, capacity, 10, 0, capacity + 1, 10]  # sent before any is read: the mailbox is busy after the first
    for number, size in enumerate(sizes):
        a.send([struct.pack("<Q", number), bytes(size)])
    got = [frames_of(receive_within(b, 5, peer=a)) for _ in sizes]
    assert [(struct.unpack("<Q", frames[0])[0], len(frames[1])) for frames in got] == list(enumerate(sizes))
    assert a.messages_posted == 1
    b.consume()
    b.release()
    for number in range(3):  # read as they come: each fits and finds the mailbox free
        a.send([struct.pack("<Q", number), b"x"])
        assert frames_of(receive_within(b, 5)) == [struct.pack("<Q", number), b"x"]
        b.consume()
        b.release()
    assert a.messages_posted == 4
    a.send([b"too big", bytes(capacity)])  # the socket; once it is taken, the mailbox again
    assert frames_of(receive_within(b, 5, peer=a))[0] == b"too big"
    b.consume()
    a.send([b"small"])
    assert a.messages_posted == 4  # the receiver did not say it is done with what it consumed
    assert frames_of(receive_within(b, 5, peer=a)) == [b"small"]
    b.consume()
    b.release()
    a.send([b"small"])
    assert frames_of(receive_within(b, 5, peer=a)) == [b"small"]
    assert a.messages_posted == 5


def test_a_sleeping_receiver_gets_its_message_on_the_socket_and_an_awake_one_in_the_mailbox(mailboxes):
    a, b = mailboxes
    a.send([b"while awake"])
    assert not select.select([b.fileno()], [], [], 0.05)[0], "a system call for a receiver that did not sleep"
    assert frames_of(b.receive()) == [b"while awake"] and a.messages_posted == 1
    b.consume()
    assert b.sleep()  # nothing waits: it may sleep
    a.send([b"while asleep"])
    assert select.select([b.fileno()], [], [], 5)[0], "nothing woke the sleeping receiver"
    b.wake()
    assert frames_of(b.receive()) == [b"while asleep"] and a.messages_posted == 1  # it came on the socket
    b.consume()
    b.release()
    a.send([b"before sleeping"])
    assert not b.sleep()  # a message came before it went to sleep: it must not
    assert frames_of(b.receive()) == [b"before sleeping"] and a.messages_posted == 2


def test_a_receiver_that_falls_asleep_while_a_message_is_posted_gets_a_doorbell(mailboxes, monkeypatch):
    """The sender saw the receiver awake and posted; the receiver went to sleep before it could see the post
    (its own look at the mailbox came first): the sender's second look finds it asleep and rings."""
    a, b = mailboxes
    looks = []

    def asleep_from_the_second_look(outbox, fenced=True):
        looks.append(outbox)
        return len(looks) > 1

    monkeypatch.setattr(shared.Outbox, "receiver_sleeps", asleep_from_the_second_look)
    a.send([b"posted"])
    assert len(looks) == 2 and a.messages_posted == 1
    assert select.select([b.fileno()], [], [], 5)[0], "no doorbell woke the receiver"
    assert frames_of(b.receive()) == [b"posted"]
    b.consume()
    assert b.receive() is None and b._buffer[b._start : b._end] == b""  # the doorbell was read and passed over


def _slab_message(number: int) -> list[bytes]:
    return [struct.pack("<Q", number), bytes([number % 256]) * 7]


def test_messages_of_the_slab_shape_travel_in_it_and_keep_their_order_with_the_rest(slabs):
    """A message of the slab's shape goes in the slab when the receiver took every message before it, as a
    mailbox message does; else on the socket, with the rest: the receiver takes them in the order they were
    sent, whichever way each came."""
    a, b = slabs
    capacity = b.block.capacities[shared.COMMANDS]
    sent = [_slab_message(1), [b"two"], _slab_message(3), [b"four", bytes(capacity)], _slab_message(5)]
    for frames in sent:  # before any is read: the slab carries the first, the socket the rest
        a.send(frames)
    assert a._slab_out.posted() == 1 and a.messages_posted == 1
    got = [frames_of(receive_within(b, 5, peer=a)) for _ in sent]
    assert got == [[bytes(frame) for frame in frames] for frames in sent]
    b.consume()
    b.release()
    for number in range(6, 10):  # read as they come: each finds the slab free
        a.send(_slab_message(number))
        assert frames_of(receive_within(b, 5)) == _slab_message(number)
        assert a._slab_out.posted() == number
        b.consume()
        b.release()
    assert a._slab_in.posted() == 0  # nothing came the other way


def test_a_slab_message_goes_in_the_slab_to_a_sleeping_receiver_with_a_doorbell(slabs):
    a, b = slabs
    assert b.sleep()
    a.send(_slab_message(1))
    assert a._slab_out.posted() == 1
    assert select.select([b.fileno()], [], [], 5)[0], "no doorbell woke the sleeping receiver"
    b.wake()
    assert frames_of(b.receive()) == _slab_message(1)
    b.consume()
    assert b.receive() is None  # the doorbell was passed over
    a.send(_slab_message(2))
    assert not b.sleep()  # a message came before it went to sleep: it must not
    assert frames_of(b.receive()) == _slab_message(2)


def test_a_slab_message_to_a_sleeper_whose_socket_is_full_rings_when_there_is_room(slabs):
    """The receiver sleeps and its socket is full (of doorbells it has not read): a message posted in the slab
    queues its doorbell, and the next one finds that doorbell still waiting and queues its own behind it; both
    messages are taken, in order, once the receiver reads."""
    a, b = slabs
    a.sock.setblocking(False)
    try:
        while True:
            a.sock.send(bytes(4096))  # (records of no frames: doorbells)
    except BlockingIOError:
        pass
    for number in (1, 2):
        assert b.sleep()
        a.send(_slab_message(number))
        assert a._slab_out.posted() == number and a.wants_write  # its doorbell waits for room
        b.wake()
        assert frames_of(b.receive()) == _slab_message(number)  # (an awake receiver looks at the slab first)
        b.consume()
        b.release()
    deadline = time.monotonic() + 10
    while a.wants_write and time.monotonic() < deadline:
        while b.receive() is not None:
            raise AssertionError("a record among the doorbells")
        a.flush()
    assert not a.wants_write


def test_a_message_written_in_place_in_the_slab_is_taken_without_a_record(slabs):
    """post_slab() sends what was written in the slab's frames; the receiver's message is those frames, where
    they lie, and the sender's slab is free again only once the receiver let go of it."""
    a, b = slabs
    out, _ = a.slab_frames()
    out[0][:] = struct.pack("<Q", 41)
    out[1][:] = b"in situ"
    assert a.slab_free()
    a.post_slab()
    assert not a.slab_free()
    assert b.slab_holds()
    record = b.receive()
    assert [frame.obj for frame in record.frames] == [frame.obj for frame in b.slab_frames()[1]]  # (the block)
    assert frames_of(record) == [struct.pack("<Q", 41), b"in situ"]
    b.consume()
    assert not a.slab_free()  # consumed, not let go of yet
    b.release()
    assert a.slab_free() and not b.slab_holds()
    a.send([b"after"])
    assert frames_of(receive_within(b, 5)) == [b"after"]


def test_a_doorbell_is_taken_in_with_the_wake_up_it_caused(slabs):
    """A receiver asleep in poll() is woken by the doorbell of a message posted in the slab: receive(woken=True)
    hands out that message and reads the doorbell off the socket with it, so that the next poll() sleeps until
    the next message rather than waking at once for the old doorbell. Without ``woken`` the doorbell stays."""
    a, b = slabs
    for woken in (True, False):
        assert b.sleep()
        out, _ = a.slab_frames()
        out[0][:] = struct.pack("<Q", 7)
        out[1][:] = b"rung it"
        a.post_slab()  # the receiver sleeps: a doorbell on the socket too
        assert select.select([b.sock], [], [], 5)[0], "the doorbell did not come"
        b.wake()
        assert frames_of(b.receive(woken)) == [struct.pack("<Q", 7), b"rung it"]
        b.consume()
        b.release()
        assert bool(select.select([b.sock], [], [], 0)[0]) is not woken  # the doorbell read, or left to wake a poll
        assert b.receive() is None  # (either way no record for it)
        assert not select.select([b.sock], [], [], 0)[0]


def test_a_message_taken_before_the_peer_closed_comes_before_the_end(slabs):
    """The peer posts a message in its slab, rings (the receiver sleeps) and closes: the receiver woken by it gets
    the message, and only its next receive() says the channel closed."""
    a, b = slabs
    assert b.sleep()
    out, _ = a.slab_frames()
    out[0][:] = struct.pack("<Q", 8)
    out[1][:] = b"the end"
    a.post_slab()
    a.sock.shutdown(socket.SHUT_WR)
    assert select.select([b.sock], [], [], 5)[0]
    b.wake()
    assert frames_of(b.receive(woken=True)) == [struct.pack("<Q", 8), b"the end"]
    b.consume()
    with pytest.raises(LinkBroken, match="closed"):
        b.receive()


def test_a_doorbell_only_wakes(mailboxes):
    """Records of no frames on the socket of a channel with a shared block are doorbells: passed over, whatever
    their number, between records too."""
    a, b = mailboxes
    a.sock.sendall(struct.pack("<III", 0, 0, 0) + struct.pack("<IQ", 1, 2) + b"ab" + struct.pack("<I", 0))
    assert frames_of(receive_within(b, 5)) == [b"ab"]
    b.consume()
    assert b.receive() is None


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (struct.pack("<I", 0), "record of 0 frames"),
        (struct.pack("<I", 70_000), "record of 70000 frames"),
        (struct.pack("<IQ", 1, 5) + b"abc", "do not fill"),
        (struct.pack("<IQ", 1, 1 << 40), "do not fill"),
        (b"ab", "record of 2 bytes"),
    ],
    ids=["no frames", "too many frames", "short", "lengths beyond the record", "no count"],
)
def test_a_malformed_record_in_a_mailbox_breaks_the_link(mailboxes, record, message):
    """What a peer posts is checked as a socket record is: a malformed one breaks the link, and nothing is read
    outside the mailbox."""
    a, b = mailboxes
    outbox = a._mail_out
    outbox.post(1, b"", [record], len(record))
    with pytest.raises(LinkBroken, match=message):
        receive_within(b, 5)


def test_a_length_beyond_the_mailbox_breaks_the_link(mailboxes):
    a, b = mailboxes
    outbox = a._mail_out
    outbox.post(1, b"", [struct.pack("<IQ", 1, 1) + b"a"], outbox.capacity + 1)
    with pytest.raises(LinkBroken, match="in a mailbox of"):
        receive_within(b, 5)


def test_a_frame_over_the_limit_in_a_mailbox_breaks_the_link(mailboxes):
    a, b = mailboxes
    b.max_frame_bytes = 100
    a.send([bytes(101)])
    with pytest.raises(LinkBroken, match="exceeds the limit of 100 bytes"):
        receive_within(b, 5)


def test_the_frames_of_a_consumed_message_stay_valid_until_the_receiver_looks_again(mailboxes):
    """A learner consumes a reply before it lands it (so that an interrupt never lands it twice) and reads its
    frames afterwards: the mailbox is not handed back until the receiver asks for the next message."""
    a, b = mailboxes
    a.send([b"first", bytes(100)])
    record = receive_within(b, 5)
    b.consume()
    a.send([b"second", b"\xff" * 100])  # goes on the socket: the mailbox is still lent out
    assert frames_of(record) == [b"first", bytes(100)]
    assert frames_of(receive_within(b, 5, peer=a)) == [b"second", b"\xff" * 100]


@pytest.fixture(params=["mailboxes", "slabs"])
def with_block(request):
    """Two channels connected with a shared block, without slabs and with them."""
    yield from _open_pair(request.param)


def test_a_message_posted_while_the_receiver_reads_the_socket_comes_before_the_next_one_sent_there(with_block):
    """The receiver looked at the mailbox and the slab (nothing yet), then reads the socket; meanwhile the sender
    posted message 1 and sent message 2 on the socket: the receiver hands out 1 first, then 2."""
    a, b = with_block
    capacity = b.block.capacities[shared.COMMANDS]
    first = _slab_message(1) if a.slabs else [b"one"]
    second = [b"two", bytes(capacity)]  # the mailbox is busy with the first, and too small anyway
    read_the_socket = b._receive_some

    def sent_meanwhile():
        del b._receive_some  # (once)
        a.send(first)
        a.send(second)
        return read_the_socket()

    b._receive_some = sent_meanwhile
    assert b.receive() is not None and a.messages_posted == 1 and not a.wants_write
    assert frames_of(b.receive()) == first
    assert frames_of(receive_within(b, 5, peer=a)) == second


@pytest.mark.parametrize("kind", ["mailboxes", "slabs"])
def test_messages_from_another_process_alternating_between_the_block_and_the_socket_keep_their_order(kind):
    """A sender process sends pairs of messages back to back, the first through the block, the second on the
    socket, while the receiver looks as fast as it can: each pair comes out in its order (the race of the
    test above, between processes; it showed within 40,000 messages)."""
    if not shared.AVAILABLE:
        pytest.skip("shared-memory mailboxes need x86-64 Linux")
    pairs = 20_000
    slab = shared.slab_bytes(SLAB_SHAPE) if kind == "slabs" else 0
    block = shared.Block.create(1 << 16, 1 << 16, (slab, slab))
    senders_copy, receivers_copy = os.dup(block.fd), os.dup(block.fd)
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = os.fork()
    if child == 0:
        try:
            left.close()
            sender = Channel(right, max_frame_bytes=1 << 20)
            sender.use_block(shared.Block.attach(senders_copy), outgoing=shared.REPLIES)
            assert kind != "slabs" or sender.use_slabs(SLAB_SHAPE, SLAB_SHAPE)
            large = bytes(sender.block.capacities[shared.REPLIES])
            for number in range(0, 2 * pairs, 2):
                sender.send(_slab_message(number) if kind == "slabs" else [struct.pack("<Q", number)])
                sender.send([struct.pack("<Q", number + 1), large])
                while not sender.flush() or sender.receive() is None:  # one acknowledgement per pair
                    pass
                sender.consume()
        finally:
            os._exit(0)
    right.close()
    receiver = Channel(left, max_frame_bytes=1 << 20)
    os.close(senders_copy)
    block.close()
    try:
        receiver.block_fd = receivers_copy
        assert receiver.attach_block() == ""
        assert kind != "slabs" or receiver.use_slabs(SLAB_SHAPE, SLAB_SHAPE)
        numbers = []
        deadline = time.monotonic() + 30
        while len(numbers) < 2 * pairs and time.monotonic() < deadline:
            record = receiver.receive()
            if record is not None:
                numbers.append(struct.unpack("<Q", record.frames[0])[0])
                receiver.consume()
                if len(numbers) % 2 == 0:
                    receiver.send([b"next"])
        assert numbers == list(range(2 * pairs))
        assert (receiver.slab_takes > 0) == (kind == "slabs")  # (a message whose slab was not free yet took the socket)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        receiver.close()
