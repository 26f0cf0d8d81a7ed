"""Shared-memory mailboxes for a data channel (PROTOCOL.md §13.5): a message is a wake-up, not a copy
through the kernel.

A client on the learner's host makes a :class:`Block`, an anonymous sealed ``memfd``, and hands it to
the learner with its data channel's greeting. The block holds two *lanes*, one per direction (commands
from the learner, replies from the client), each a mailbox for one record of the channel's format
(``u32 count | count x u64 lengths | the frames``) and a few control words::

    offset 0      "GR-SHM01", then u64 command lane capacity, u64 reply lane capacity, u64 and u64 slab sizes
    64 + 128 k    lane k, written by its sender:   u64 posted (number of the message in the mailbox), u64 length
    128 + 128 k   lane k, written by its receiver: u64 taken (messages consumed so far), u32 sleeping
    4096          lane 0's mailbox, then lane 1's (each its capacity in bytes), then lane 0's slab, lane 1's

A lane's *slab* (:class:`Slab`, PROTOCOL.md §13.6) is a second mailbox for messages of one shape (a STEP for
all of a client's envs, its RESULT): u64 posted, then the frames at fixed offsets, so that a sender writes its
arrays where the receiver reads them and there is no record to build or parse. Slab messages are numbered
with the lane's others and go in only under the mailbox's rule (the receiver took every message before).

The words are in the host's byte order (both sides run on one host), 8-byte aligned, and each is written
whole. A sender numbers its messages 1, 2, ... whichever way they travel. It puts message ``n`` in the
mailbox only when the receiver has taken ``n - 1`` messages (so the mailbox is free, and nothing older is
unread on the socket) and is not asleep (a sleeping receiver is woken by the socket anyway), writes
``posted = n`` last, and writes a *doorbell* (a record of 0 frames) on the socket only if the receiver
went to sleep meanwhile. A receiver takes the mailbox's message when ``posted`` is one
more than what it has taken, and otherwise reads the socket; before it sleeps in ``poll()`` it sets
``sleeping`` and looks at the mailbox once more. Everything that does not fit, or finds the mailbox busy,
travels on the socket as before, so the mailbox only ever saves work.

Safety: the memfd has no name (nothing is left in ``/dev/shm`` however either process ends), travels only
over a Unix socket to a peer of the same user, and is sealed against shrinking before it is handed over,
so the learner's reads can never fault; the learner checks its size and layout, and parses what the
client posts with the same limits as a socket record. Both sides need a machine whose stores become
visible in order (x86-64, :data:`AVAILABLE`): Python has no memory barrier weaker than a lock, which
orders a store before a load (:func:`_fence`) but not two stores on weakly ordered machines.
"""

from __future__ import annotations

import mmap
import os
import platform
import struct
import sys
import threading
from collections.abc import Sequence
from typing import Any

from gym_remote.links import fork
from gym_remote.links.base import MAX_FRAMES

__all__ = ["AVAILABLE", "Block", "BlockRefused", "Inbox", "Outbox", "Slab", "lane_bytes", "slab_bytes"]

AVAILABLE = (
    sys.platform.startswith("linux")
    and hasattr(os, "memfd_create")
    and platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
)
"""Whether this host can carry a data channel's messages in shared memory (see the module's docstring)."""

MAGIC = b"GR-SHM01"
HEADER_BYTES = 4096
MIN_LANE_BYTES = 64 << 10
MAX_BLOCK_BYTES = 1 << 30
"""The largest block a server maps."""

COMMANDS, REPLIES = 0, 1
"""The lanes: the learner's commands to the client, and the client's replies."""

_WORD = struct.Struct("@Q")  # native: CPython packs it with one memcpy, so a reader never sees half of it
_HALF = struct.Struct("@I")
_CAPACITIES = struct.Struct("@QQ")
_SLAB_CAPACITIES = struct.Struct("@QQ")  # at offset 24; zeros in a block without slabs
_SLAB_CONTROL = 64  # a slab's control bytes (its posted word) before its first frame
_SLAB_ALIGN = 64
_COUNT = struct.Struct("<I")
_LANE_STRIDE = 128
_SENDER, _RECEIVER = 64, 128  # offsets of a lane's control words, plus _LANE_STRIDE * lane
_SEALS = getattr(os, "F_SEAL_SHRINK", 2) | getattr(os, "F_SEAL_GROW", 4) | getattr(os, "F_SEAL_SEAL", 1)
_F_ADD_SEALS, _F_GET_SEALS = 1033, 1034  # fcntl.F_ADD_SEALS / F_GET_SEALS (Linux), named in fcntl since 3.9
_new_lock = threading.Lock


class BlockRefused(Exception):
    """A block handed over cannot be used (not a sealed memfd, sizes out of bounds, a bad layout): ``str``
    says what, for a log line."""


def _fence() -> None:
    """A full memory barrier: a free lock's acquire is an atomic read-modify-write, which on x86 orders every
    store before it against every load after it (what the sleeping flag needs). A new lock each time, never
    released, so that an interrupt can leave nothing held."""
    _new_lock().acquire()


def slab_bytes(frame_sizes: Sequence[int]) -> int:
    """The bytes of a slab for messages of exactly these frame sizes: its control word, then each frame at a
    multiple of 64 bytes."""
    return _SLAB_CONTROL + sum(_whole_lines(size) for size in frame_sizes)


def lane_bytes(payload: int) -> int:
    """A lane's capacity for records of up to ``payload`` bytes of frames: room for twice that (a value
    section next to the arrays), at least :data:`MIN_LANE_BYTES`, in whole pages."""
    wanted = max(MIN_LANE_BYTES, 2 * payload + 4096)
    return -(-wanted // mmap.PAGESIZE) * mmap.PAGESIZE


class Block:
    """One membership's shared block: two lanes of mailboxes over one mapping (see the module's docstring).

    Make one with :meth:`create` (the client) or :meth:`attach` (the learner, checking what it was given).
    """

    def __init__(self, fd: int, size: int, capacities: tuple[int, int], slabs: tuple[int, int] = (0, 0)) -> None:
        self.fd = fd
        self.size = size
        self.capacities = capacities
        self.slab_capacities = slabs
        self._map: mmap.mmap | None = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        fork.register(self)

    @classmethod
    def create(cls, command_bytes: int, reply_bytes: int, slabs: tuple[int, int] = (0, 0)) -> Block:
        """A new block whose lanes hold ``command_bytes`` and ``reply_bytes``, with slabs of ``slabs`` bytes
        (see :func:`slab_bytes`; 0: none), sealed at its size.

        Raises:
            OSError: the kernel has no memfd or sealing.
        """
        capacities = (lane_bytes(command_bytes), lane_bytes(reply_bytes))
        slabs = (_whole_lines(slabs[0]), _whole_lines(slabs[1]))
        size = HEADER_BYTES + sum(capacities) + sum(slabs)
        fd = os.memfd_create("gym_remote-data", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            block = cls(fd, size, capacities, slabs)
        except BaseException:
            os.close(fd)
            raise
        try:
            mapping = block.mapping()
            mapping[: len(MAGIC)] = MAGIC
            _CAPACITIES.pack_into(mapping, len(MAGIC), *capacities)
            _SLAB_CAPACITIES.pack_into(mapping, len(MAGIC) + _CAPACITIES.size, *slabs)
            _add_seals(fd)
        except BaseException:
            block.close()
            raise
        return block

    @classmethod
    def attach(cls, fd: int, max_bytes: int = MAX_BLOCK_BYTES) -> Block:
        """The block in ``fd``, after checking that it is a memfd sealed against shrinking, of at most
        ``max_bytes``, laid out as its header says. The block returned owns ``fd``; until then the caller does
        (so that a call an interrupt cut short can be made again).

        Raises:
            BlockRefused: it is not; why, in words fit for a log line.
        """
        try:
            seals = _get_seals(fd)
        except OSError:
            raise BlockRefused("it is not a sealable memfd") from None
        if not seals & getattr(os, "F_SEAL_SHRINK", 2):
            raise BlockRefused("it is not sealed against shrinking")
        size = os.fstat(fd).st_size
        if not HEADER_BYTES < size <= max_bytes:
            raise BlockRefused(f"its size, {size} bytes, is out of bounds (at most {max_bytes})")
        header = os.pread(fd, len(MAGIC) + _CAPACITIES.size + _SLAB_CAPACITIES.size, 0)
        if header[: len(MAGIC)] != MAGIC:
            raise BlockRefused("its header is not a gym_remote block's")
        capacities = _CAPACITIES.unpack_from(header, len(MAGIC))
        slabs = _SLAB_CAPACITIES.unpack_from(header, len(MAGIC) + _CAPACITIES.size)
        if HEADER_BYTES + sum(capacities) + sum(slabs) != size or min(capacities) < 4 + 8:
            raise BlockRefused(
                f"its lanes, {capacities[0]} and {capacities[1]} bytes, and slabs, {slabs[0]} and {slabs[1]} bytes, "
                f"do not fill its {size} bytes"
            )
        if any(slab % _SLAB_ALIGN for slab in slabs):
            raise BlockRefused(f"its slabs, {slabs[0]} and {slabs[1]} bytes, are not whole multiples of 64 bytes")
        return cls(fd, size, (int(capacities[0]), int(capacities[1])), (int(slabs[0]), int(slabs[1])))

    def outbox(self, lane: int) -> Outbox:
        return Outbox(self, lane)

    def inbox(self, lane: int) -> Inbox:
        return Inbox(self, lane)

    def mapping(self) -> mmap.mmap:
        """The block's memory.

        Raises:
            ValueError: the block is closed.
        """
        if self._map is None:
            raise ValueError("the shared-memory block is closed")
        return self._map

    def mailbox(self, lane: int) -> memoryview:
        """The mailbox bytes of ``lane``."""
        start = HEADER_BYTES + (self.capacities[0] if lane else 0)
        return memoryview(self.mapping())[start : start + self.capacities[lane]]

    def slab_start(self, lane: int) -> int:
        """The offset of the slab of ``lane``."""
        return HEADER_BYTES + sum(self.capacities) + (self.slab_capacities[0] if lane else 0)

    def slab(self, lane: int, frame_sizes: Sequence[int]) -> Slab | None:
        """The slab of ``lane`` for messages of exactly ``frame_sizes`` bytes per frame; None if it is too small."""
        if slab_bytes(frame_sizes) > self.slab_capacities[lane]:
            return None
        return Slab(self, lane, frame_sizes)

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def close(self) -> None:
        """Unmap the block and close its descriptor. A mapping still lent out (a frame of a message not let go
        of) is unmapped when the last view of it goes."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            # (what keeps a lent-out mapping alive: the views of it, no longer the block)
            mapping, self._map = self._map, None
            try:
                if mapping is not None:
                    mapping.close()
            except BufferError:
                pass
            os.close(fd)

    forget_in_child = close


class _Lane:
    """One end of a lane: its mailbox, and the offsets of its words."""

    def __init__(self, block: Block, lane: int) -> None:
        self.lane = lane
        self.capacity = block.capacities[lane]
        self._map = block.mapping()
        self._mailbox = block.mailbox(lane)
        self._posted = _SENDER + _LANE_STRIDE * lane
        self._taken = _RECEIVER + _LANE_STRIDE * lane
        self._sleeping = self._taken + _WORD.size


class Outbox(_Lane):
    """The sender's end of a lane."""

    def free_for(self, number: int) -> bool:
        """Whether message ``number`` may go in the mailbox: the receiver took every message before it."""
        return _WORD.unpack_from(self._map, self._taken)[0] == number - 1

    def post(self, number: int, prefix: bytes, frames: Sequence[Any], size: int) -> None:
        """Put message ``number`` (the record ``prefix`` + ``frames``, ``size`` bytes in all, at most the capacity)
        in the mailbox, then mark it posted."""
        mailbox, position = self._mailbox, len(prefix)
        mailbox[:position] = prefix
        for frame in frames:
            view = memoryview(frame).cast("B")
            end = position + view.nbytes
            mailbox[position:end] = view
            position = end
        _WORD.pack_into(self._map, self._posted + _WORD.size, size)
        _WORD.pack_into(self._map, self._posted, number)

    def posted(self) -> int:
        """The number of the message last posted."""
        return _WORD.unpack_from(self._map, self._posted)[0]

    def receiver_sleeps(self, fenced: bool = True) -> bool:
        """Whether the receiver sleeps (or is about to): a message is better sent on the socket, which wakes it;
        asked again after posting, a doorbell is needed. Only an answer after a memory barrier (``fenced``)
        sees a receiver that went to sleep just before."""
        if fenced:
            _fence()
        return _HALF.unpack_from(self._map, self._sleeping)[0] != 0


class Inbox(_Lane):
    """The receiver's end of a lane."""

    def holds(self, taken: int) -> bool:
        """Whether the mailbox holds the message after the ``taken`` ones consumed."""
        return _WORD.unpack_from(self._map, self._posted)[0] == taken + 1

    def frames(self, max_frame_bytes: int) -> list[memoryview]:
        """The frames of the message in the mailbox, as views of it (valid until it is marked taken).

        Raises:
            ValueError: the record is malformed or breaks a limit; why.
        """
        length = _WORD.unpack_from(self._map, self._posted + _WORD.size)[0]
        if not 4 <= length <= self.capacity:
            raise ValueError(f"a shared-memory record of {length} bytes in a mailbox of {self.capacity}")
        mailbox = self._mailbox[:length].toreadonly()
        (count,) = _COUNT.unpack_from(mailbox, 0)
        if not 1 <= count <= MAX_FRAMES or 4 + 8 * count > length:
            raise ValueError(f"a shared-memory record of {count} frames in {length} bytes")
        lengths = struct.unpack_from(f"<{count}Q", mailbox, 4)
        position = 4 + 8 * count
        if position + sum(lengths) != length:
            raise ValueError(f"a shared-memory record whose frames do not fill its {length} bytes")
        if max(lengths) > max_frame_bytes:
            raise ValueError(f"a frame of {max(lengths)} bytes exceeds the limit of {max_frame_bytes} bytes")
        frames = []
        for size in lengths:
            frames.append(mailbox[position : position + size])
            position += size
        return frames

    def mark_taken(self, taken: int) -> None:
        """Tell the sender that ``taken`` messages have been consumed (the mailbox is free again)."""
        _WORD.pack_into(self._map, self._taken, taken)

    def sleep(self, taken: int, slab: Slab | None = None) -> bool:
        """Say that the receiver is about to sleep; False (and awake again) if the mailbox (or the lane's ``slab``)
        holds the next message already, which a sender that saw the receiver awake rang no doorbell for."""
        _HALF.pack_into(self._map, self._sleeping, 1)
        _fence()
        if self.holds(taken) or (slab is not None and slab.holds(taken)):
            _HALF.pack_into(self._map, self._sleeping, 0)
            return False
        return True

    def wake(self) -> None:
        """The receiver is awake (no doorbells needed)."""
        _HALF.pack_into(self._map, self._sleeping, 0)


class Slab:
    """A lane's slab: a second mailbox, for the one shape of message that dominates a lane (a STEP for all of a
    client's envs, its RESULT), whose frames lie at fixed offsets (PROTOCOL.md §13.6). A message whose frames
    have exactly the slab's sizes may travel in it, numbered with the lane's other messages; there is no
    record to write or parse, and each side can read or write a frame where it lies (:attr:`frames`)."""

    def __init__(self, block: Block, lane: int, frame_sizes: Sequence[int]) -> None:
        self.sizes = tuple(int(size) for size in frame_sizes)
        start = block.slab_start(lane)
        self._map = block.mapping()
        self._posted = start
        self._taken = _RECEIVER + _LANE_STRIDE * lane
        view = memoryview(self._map)
        frames, position = [], start + _SLAB_CONTROL
        for size in self.sizes:
            frames.append(view[position : position + size])
            position += _whole_lines(size)
        self.frames = frames
        """The frames' bytes, where they lie (writable: the sender's to fill before :meth:`post`)."""
        self.received = [frame.toreadonly() for frame in frames]
        """The frames as a receiver hands them out."""

    # the sender's end

    def free_for(self, number: int) -> bool:
        """Whether message ``number`` may go in the slab: the receiver took (and let go of) every message before it,
        as for a mailbox (so a message an interrupt kept off the socket, which the receiver never takes, keeps the
        slab unused: the numbers would no longer say the order)."""
        return _WORD.unpack_from(self._map, self._taken)[0] == number - 1

    def post(self, number: int, frames: Sequence[Any] | None = None) -> None:
        """Put message ``number`` in the slab: ``frames`` (of exactly the slab's sizes; None: written in place
        already), then mark it posted."""
        if frames is not None:
            for target, frame in zip(self.frames, frames, strict=True):
                target[:] = memoryview(frame).cast("B")
        _WORD.pack_into(self._map, self._posted, number)

    def posted(self) -> int:
        """The number of the message last posted."""
        return _WORD.unpack_from(self._map, self._posted)[0]

    # the receiver's end

    def holds(self, taken: int) -> bool:
        """Whether the slab holds the message after the ``taken`` ones consumed."""
        return _WORD.unpack_from(self._map, self._posted)[0] == taken + 1


def _whole_lines(size: int) -> int:
    return -(-int(size) // _SLAB_ALIGN) * _SLAB_ALIGN


def _add_seals(fd: int) -> None:
    import fcntl

    fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", _F_ADD_SEALS), _SEALS)


def _get_seals(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, getattr(fcntl, "F_GET_SEALS", _F_GET_SEALS))
