"""The shared block of a data channel (``gym_remote.links.shared``) on its own: what the learner accepts when a
client hands one over, the mailboxes' words, and the memory fence. No sockets (test_channel.py runs the
channel's tests over mailboxes too)."""

from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
import threading

import pytest

from gym_remote.links import shared
from gym_remote.links.channel import Channel
from gym_remote.links.shared import Block, BlockRefused
from tests.helpers import call_interrupted_at

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(not shared.AVAILABLE, reason="shared-memory mailboxes need x86-64 Linux"),
]


@pytest.fixture
def block():
    made = Block.create(100, 5000)
    yield made
    made.close()


def attach_copy(block: Block, max_bytes: int = shared.MAX_BLOCK_BYTES) -> Block:
    return Block.attach(os.dup(block.fd), max_bytes)


def test_a_block_is_sealed_sized_in_pages_and_attaches(block):
    assert all(capacity % 4096 == 0 and capacity >= shared.MIN_LANE_BYTES for capacity in block.capacities)
    assert block.size == shared.HEADER_BYTES + sum(block.capacities)
    other = attach_copy(block)
    try:
        assert other.capacities == block.capacities
        outbox, inbox = other.outbox(shared.COMMANDS), block.inbox(shared.COMMANDS)
        assert not inbox.holds(0)
        outbox.post(1, struct.pack("<IQ", 1, 3), [b"abc"], 4 + 8 + 3)
        assert inbox.holds(0) and [bytes(frame) for frame in inbox.frames(10)] == [b"abc"]
        assert not outbox.free_for(2)
        inbox.mark_taken(1)
        assert outbox.free_for(2)
    finally:
        other.close()
    with pytest.raises(PermissionError):  # sealed: neither end can shrink it under the other's reads
        os.ftruncate(block.fd, 4096)


def test_a_block_with_slabs_lays_their_frames_out_on_lines_of_64_bytes():
    step, result = [16, 8 * 8], [16 + 10 * 8, 8 * 4 * 4]
    made = Block.create(100, 100, (shared.slab_bytes(step), shared.slab_bytes(result)))
    try:
        assert shared.slab_bytes(step) == 64 + 64 + 64 and shared.slab_bytes(result) == 64 + 128 + 128
        assert made.size == shared.HEADER_BYTES + sum(made.capacities) + sum(made.slab_capacities)
        other = attach_copy(made)
        try:
            assert other.slab_capacities == made.slab_capacities
            sender, receiver = other.slab(shared.COMMANDS, step), made.slab(shared.COMMANDS, step)
            assert [frame.nbytes for frame in sender.frames] == step
            start = made.slab_start(shared.COMMANDS)
            assert start == shared.HEADER_BYTES + sum(made.capacities)
            sender.frames[1][:] = bytes(range(64))
            assert not receiver.holds(0)
            sender.post(1)
            assert receiver.holds(0) and bytes(receiver.received[1]) == bytes(range(64))
            assert os.pread(made.fd, 64, start + 128) == bytes(range(64))  # its second frame, at offset 128
            assert struct.unpack("@Q", os.pread(made.fd, 8, start))[0] == 1  # posted, at the slab's start
            assert not sender.free_for(2)
            made.inbox(shared.COMMANDS).mark_taken(1)
            assert sender.free_for(2) and not sender.free_for(3)
            assert made.slab(shared.REPLIES, [*result[:1], result[1] + 1]) is None  # too small for that shape
        finally:
            other.close()
    finally:
        made.close()


def test_a_block_without_slabs_has_none():
    made = Block.create(100, 100)
    try:
        other = attach_copy(made)
        assert made.slab_capacities == (0, 0) and other.slab_capacities == (0, 0)
        assert made.slab(shared.COMMANDS, [16]) is None
        other.close()
    finally:
        made.close()


def test_a_lane_holds_twice_what_it_is_sized_for():
    assert shared.lane_bytes(0) == shared.MIN_LANE_BYTES
    assert shared.lane_bytes(1 << 20) >= 2 << 20


def _memfd(size: int, seals: int = 0, content: bytes = b"") -> int:
    fd = os.memfd_create("test", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if content:
        os.pwrite(fd, content, 0)
    if seals:
        import fcntl

        fcntl.fcntl(fd, 1033, seals)  # F_ADD_SEALS
    return fd


SHRINK = 2


def _header(capacities: tuple[int, int]) -> bytes:
    return shared.MAGIC + struct.pack("@QQ", *capacities)


def _slabbed(slabs: tuple[int, int]) -> bytes:
    return _header((65536, 65536)) + struct.pack("@QQ", *slabs)


def _a_file() -> int:
    with tempfile.TemporaryFile() as file:
        file.truncate(4096 + 2 * 65536)
        return os.dup(file.fileno())


FULL = 4096 + 2 * 65536


@pytest.mark.parametrize(
    ("make", "max_bytes", "reason"),
    [
        (lambda: _memfd(FULL, 0, _header((65536, 65536))), None, "not sealed against shrinking"),
        (lambda: _memfd(FULL, SHRINK, b"NOT-OURS" + bytes(16)), None, "header is not"),
        (lambda: _memfd(FULL, SHRINK, _header((65536, 65537))), None, "do not fill"),
        (lambda: _memfd(FULL, SHRINK, _header((2 * 65536, 0))), None, "do not fill"),
        (lambda: _memfd(4096, SHRINK, _header((0, 0))), None, "out of bounds"),
        (lambda: _memfd(FULL, SHRINK, _header((65536, 65536))), FULL - 1, "out of bounds"),
        (_a_file, None, "not a sealable memfd"),
        (lambda: _memfd(FULL + 128, SHRINK, _slabbed((64, 32))), None, "do not fill"),
        (lambda: _memfd(FULL + 96, SHRINK, _slabbed((64, 32))), None, "not whole multiples of 64"),
    ],
    ids=[
        "unsealed",
        "bad magic",
        "lanes overflow",
        "an empty lane",
        "too small",
        "too large",
        "a file",
        "slabs overflow",
        "a slab out of line",
    ],
)
def test_a_block_the_learner_cannot_trust_is_refused(make, max_bytes, reason):
    fd = make()
    try:
        with pytest.raises(BlockRefused, match=reason):
            Block.attach(fd, max_bytes or shared.MAX_BLOCK_BYTES)
        os.fstat(fd)  # still the caller's, to close
    finally:
        os.close(fd)


def test_a_refused_block_is_closed_by_its_channel():
    left, right = socket.socketpair()
    fd = _memfd(FULL, 0, _header((65536, 65536)))  # unsealed
    channel = Channel(left, max_frame_bytes=1 << 20, block_fd=fd)
    try:
        assert "not sealed against shrinking" in channel.attach_block()
        assert channel.plane == "uds" and channel.block_fd == -1
        with pytest.raises(OSError):
            os.fstat(fd)
    finally:
        channel.close()
        right.close()


def test_an_attach_cut_short_at_any_call_is_made_again_and_finds_the_block(block):
    """The server maps a client's block while it handles its HELLO; an interrupt there has the HELLO handled
    again. For every n: the attach interrupted at its n-th Python call, then made again, uses the block, and
    closing the channel closes its descriptor."""
    cuts = 0
    for number in range(1, 300):
        left, right = socket.socketpair()
        channel = Channel(left, max_frame_bytes=1 << 20, block_fd=os.dup(block.fd))
        try:
            cut, reason = call_interrupted_at(number, _Stop, channel.attach_block)
            if cut:
                cuts += 1
                reason = channel.attach_block()
            assert (reason, channel.plane, channel.block_fd) == ("", "shm", -1), f"cut at call {number}"
            fd = channel.block.fd
        finally:
            channel.close()
            right.close()
        with pytest.raises(OSError):  # closed with the channel
            os.fstat(fd)
        if not cut:
            break
    assert cuts >= 3


def test_what_is_posted_is_read_within_the_mailbox_only(block):
    """A record is read from the mailbox's bytes up to the posted length, never past the mailbox."""
    outbox, inbox = block.outbox(shared.REPLIES), block.inbox(shared.REPLIES)
    capacity = outbox.capacity
    outbox.post(1, struct.pack("<IQ", 1, capacity - 12), [bytes(capacity - 12)], capacity)
    (frame,) = inbox.frames(1 << 30)
    assert frame.nbytes == capacity - 12 and frame.readonly


def test_the_sleeping_flag_is_seen_by_the_sender(block):
    outbox, inbox = block.outbox(shared.COMMANDS), block.inbox(shared.COMMANDS)
    assert not outbox.receiver_sleeps()
    assert inbox.sleep(0)
    assert outbox.receiver_sleeps()
    inbox.wake()
    assert not outbox.receiver_sleeps()
    outbox.post(1, struct.pack("<IQ", 1, 1), [b"x"], 13)
    assert not inbox.sleep(0) and not outbox.receiver_sleeps()  # a message came: it stays awake


class _Stop(Exception):
    pass


def _fence_then_set(done: threading.Event) -> None:
    shared._fence()
    done.set()


def test_a_fence_cut_short_at_any_bytecode_leaves_nothing_held():
    """The fence takes a lock; an interrupt at any of its bytecodes (as a signal handler that raises would)
    must not leave a lock held that the next fence would wait on forever."""
    opcodes = 0

    def count(frame, event, arg):
        nonlocal opcodes
        frame.f_trace_opcodes = True
        if event == "opcode" and frame.f_code is shared._fence.__code__:
            opcodes += 1
        return count

    sys.settrace(count)
    try:
        shared._fence()
    finally:
        sys.settrace(None)
    assert opcodes > 0
    for cut in range(1, opcodes + 1):
        seen = 0

        def interrupt(frame, event, arg, cut=cut):
            nonlocal seen
            frame.f_trace_opcodes = True
            if event == "opcode" and frame.f_code is shared._fence.__code__:
                seen += 1
                if seen == cut:
                    raise _Stop
            return interrupt

        sys.settrace(interrupt)
        try:
            shared._fence()
        except _Stop:
            pass
        finally:
            sys.settrace(None)
        done = threading.Event()
        thread = threading.Thread(target=_fence_then_set, args=(done,), daemon=True)
        thread.start()
        assert done.wait(5), f"a fence cut short at its opcode {cut} left a lock held"
