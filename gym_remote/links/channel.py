"""The same-host data plane: a membership's messages over a Unix domain socket (PROTOCOL.md §13).

A ZeroMQ round trip crosses libzmq's I/O thread in both processes, two thread wake-ups more each
way than a plain socket; between processes on one machine that is most of a cheap env's step. So a
client on the learner's host carries its membership's messages over a :class:`Channel`, a
``SOCK_STREAM`` Unix socket in Linux's abstract namespace, while ZeroMQ stays the control plane
(handshake, security, heartbeats, probes) and the only transport across machines.

A channel carries one *record* per message::

    u32 frame count f | f x u64 frame lengths | the frames' bytes, one after the other   (little-endian)

The client connects and sends a 24-byte greeting holding a random token before its HELLO, which
names the token; the server's :class:`Listener` accepts connections as they come, keeps those of its
own user that greet in time, and hands one out to the HELLO naming its token. Abstract sockets leave
no file behind, whatever kills either process; the kernel frees the name when the listening socket
closes. Linux only (:data:`AVAILABLE`).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import logging
import operator
import os
import secrets
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from gym_remote.links import fork, shared
from gym_remote.links.base import MAX_FRAMES, FrameList, LinkBroken

__all__ = [
    "AVAILABLE",
    "ENV_SWITCH",
    "Channel",
    "Listener",
    "address_for",
    "connect",
    "enabled_by_default",
    "wanted",
    "new_token",
]

logger = logging.getLogger(__name__)

AVAILABLE = sys.platform.startswith("linux")
"""Abstract Unix sockets exist on Linux only; elsewhere every message travels over ZeroMQ."""

ENV_SWITCH = "GYM_REMOTE_DATA_PLANE"
"""Environment variable: ``off`` (or ``0``, ``false``, ``no``) turns the same-host data plane off by default;
``uds`` keeps it to the Unix socket, ``shm`` asks for shared-memory mailboxes too."""

KINDS = ("shm", "uds")
"""The data plane's kinds: the channel with shared-memory mailboxes where the host allows them
(:data:`gym_remote.links.shared.AVAILABLE`), and the channel's socket alone."""

DEFAULT_KIND = "shm"

GREETING_MAGIC = b"GR-DATA2"
TOKEN_BYTES = 16
GREETING_SIZE = len(GREETING_MAGIC) + TOKEN_BYTES  # 24

_COUNT = struct.Struct("<I")
_PEERCRED = struct.Struct("3i")  # pid, uid, gid
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)

BUFFER_BYTES = 4 << 20
"""Socket buffer size asked for (the kernel caps it at its ``wmem_max``/``rmem_max``)."""

FIRST_READ_BYTES = 1 << 16
"""A channel's receive buffer to begin with; it doubles only as bytes arrive that do not fit."""

MAX_PENDING = 64
"""Connections the listener holds that are not claimed yet; beyond it the oldest are closed."""

GREETING_SECONDS = 5.0
"""How long a connection may take to send its whole greeting before the listener closes it."""

PENDING_SECONDS = 30.0
"""How long the listener keeps a greeted connection that no HELLO has claimed."""

CONNECT_SECONDS = 2.0
"""How long a client tries to connect to a listener whose queue of connections is full."""


def enabled_by_default() -> bool:
    """Whether the data plane is on when nobody said otherwise: on Linux, unless :data:`ENV_SWITCH` says off."""
    return bool(_default_kind())


def _default_kind() -> str:
    if not AVAILABLE:
        return ""
    switch = os.environ.get(ENV_SWITCH, "").strip().lower()
    if switch in ("0", "off", "false", "no"):
        return ""
    return switch if switch in KINDS else DEFAULT_KIND


def wanted(choice: bool | str | None) -> str:
    """The data plane's kind to use as ``choice`` says (``True``: the default kind, a kind by name, None: as
    :data:`ENV_SWITCH` says), where it is available: ``"shm"``, ``"uds"``, or ``""`` (off).

    Raises:
        ValueError: ``choice`` names no kind.
    """
    if choice is None:
        kind = _default_kind()
    elif choice == "":  # (what this function answers for "off")
        kind = ""
    elif isinstance(choice, str):
        if choice not in KINDS:
            raise ValueError(f"data_plane must be True, False, None or one of {KINDS}, got {choice!r}")
        kind = choice if AVAILABLE else ""
    else:
        kind = (_default_kind() or DEFAULT_KIND) if choice and AVAILABLE else ""
    return "uds" if kind == "shm" and not shared.AVAILABLE else kind


def address_for(endpoint: str) -> bytes:
    """The abstract socket name of the data channel of the server at ZeroMQ ``endpoint``.

    Both sides derive it from the endpoint the client connects to, so a client on the server's host
    finds it without being told; a client on another host finds nothing there and uses ZeroMQ.
    """
    digest = hashlib.sha256(endpoint.encode()).hexdigest()[:40]
    return b"\0gym_remote/data/" + digest.encode()


def new_token() -> bytes:
    return secrets.token_bytes(TOKEN_BYTES)


class Channel:
    """A connected data channel: one membership's records, in both directions (a link, see
    :mod:`gym_remote.links.base`).

    Interrupts: the only steps whose outcome an interrupt could hide are the system calls that send and
    receive (their byte counts). Each stores its result where the channel finds it even if an interrupt
    comes right after the call (:meth:`_send_now`), and the channel's state is then brought up to date
    from the stored result, a step that can be repeated (:meth:`_settle_send`, :meth:`_settle_read`): so a
    send or read cut short completes on the next call.

    With a shared block in use (:meth:`use_block`), a message goes through the block's mailbox when it fits
    and the mailbox is free, and on the socket otherwise (:mod:`gym_remote.links.shared`); the socket then
    carries what is large or rare, the doorbells of a receiver that sleeps, and its end-of-file when the
    peer dies.

    Args:
        sock: a connected ``AF_UNIX`` ``SOCK_STREAM`` socket, now owned by the channel.
        max_frame_bytes: largest frame accepted from the peer (a larger one breaks the channel).
        block_fd: a shared block's descriptor the peer handed over with its greeting (now owned by the
            channel until :meth:`attach_block` maps it or the channel closes).
    """

    def __init__(self, sock: socket.SocketType, *, max_frame_bytes: int, block_fd: int = -1) -> None:
        sock.setblocking(False)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, BUFFER_BYTES)
            except OSError:
                pass
        self.sock = sock
        self._fd = sock.fileno()
        self.max_frame_bytes = int(max_frame_bytes)
        # receiving: bytes [_start, _end) of the buffer are in, not yet consumed
        self._buffer = bytearray(FIRST_READ_BYTES)
        self._view = memoryview(self._buffer)
        self._start = 0
        self._end = 0
        # the layout of the record at _parsed_start, once its frame lengths are in: its end and its lengths
        self._parsed_start = -1
        self._parsed_end = 0
        self._parsed_lengths: tuple[int, ...] = ()
        self._current: FrameList | None = None  # the record handed out and not consumed yet
        self._current_end = 0
        self._read_base: int | None = None  # _end before the read in progress (None: none in progress)
        self._read_result: deque[int] = deque()
        # sending: the bytes not yet sent, as (position in the stream, bytes) segments; _sent is a position
        self._outbox: deque[tuple[int, memoryview]] = deque()
        self._sent = 0
        self._send_base: int | None = None  # _sent before the send in progress (None: none in progress)
        self._send_result: deque[int] = deque()
        self._sending: list[Any] | None = None  # the caller's buffers the send in progress borrowed, if any
        self._sending_end = 0  # the stream position after them
        self._unsettled = False  # a send, a read or a post is in progress, or an interrupt cut one short
        self._broken = ""
        self._closed = False
        # the shared block (see use_block): messages are numbered 1, 2, ... each way, however they travel
        self.block_fd = block_fd
        self.block: shared.Block | None = None
        self._mail_out: shared.Outbox | None = None
        self._mail_in: shared.Inbox | None = None
        self._slab_out: shared.Slab | None = None  # the lanes' slabs, once agreed (see use_slabs)
        self._slab_in: shared.Slab | None = None
        self._messages_sent = 0
        self._messages_taken = 0
        self._posting = 0  # the number of a message being posted (0: none in progress)
        self._posting_to: shared.Outbox | shared.Slab | None = None  # where it is posted
        self._current_in_mailbox = False
        self._release_due = False  # a message was consumed and the peer is not told yet (see release)
        self.messages_posted = 0  # messages this side sent through the shared block (its mailbox or its slab)
        self.slab_posts = 0  # of them, those in this side's slab
        self.slab_takes = 0  # messages taken from the peer's slab
        fork.register(self)

    # -- the shared block --------------------------------------------------------------------------

    def attach_block(self) -> str:
        """The server's side: map the block the peer handed over with its greeting and use it; "" if done,
        else why not (nothing was handed over, or it is refused: see :meth:`Block.attach`).

        Repeatable: the channel keeps the block's descriptor until the block is in use, so a call an interrupt
        cut short is made again (the HELLO that asked for it is handled again) and still finds the block."""
        if self.block is None and self.block_fd >= 0:
            try:
                block = shared.Block.attach(self.block_fd, max(shared.MAX_BLOCK_BYTES, 4 * self.max_frame_bytes))
            except (shared.BlockRefused, OSError) as error:
                fd, self.block_fd = self.block_fd, -1
                os.close(fd)
                return f"its shared block was refused: {error}"
            self.use_block(block, outgoing=shared.COMMANDS)
        if self.block is None:
            return "the client handed over no shared block"
        self.block_fd = -1  # (the block owns it)
        return ""

    def use_block(self, block: shared.Block, outgoing: int) -> None:
        """From now on, carry messages in ``block``'s mailboxes where they fit: this side sends on lane
        ``outgoing`` and receives on the other. Before any message travels on the channel."""
        self._mail_out = block.outbox(outgoing)
        self._mail_in = block.inbox(1 - outgoing)
        self.block = block  # (last: a block in use has its mailboxes)

    def use_slabs(self, outgoing: Sequence[int], incoming: Sequence[int]) -> bool:
        """From now on, carry a message whose frames have exactly the sizes ``outgoing`` in this side's slab, and
        take those the peer posts in its slab, of the sizes ``incoming`` (PROTOCOL.md §13.6): False (and no
        slabs) if the block has none, or they are too small. Before any message travels on the channel."""
        block, inbox = self.block, self._mail_in  # (use_block sets both)
        if block is None or inbox is None:
            return False
        lane = 1 - inbox.lane
        slab_out, slab_in = block.slab(lane, outgoing), block.slab(1 - lane, incoming)
        if slab_out is None or slab_in is None:
            return False
        self._slab_out, self._slab_in = slab_out, slab_in
        return True

    @property
    def slabs(self) -> bool:
        """Whether messages of the slabs' shapes travel in them (see :meth:`use_slabs`)."""
        return self._slab_out is not None

    def slab_frames(self) -> tuple[list[memoryview], list[memoryview]]:
        """The frames of this side's slab (writable, to fill before :meth:`post_slab`) and of the peer's (read-only:
        a message :meth:`receive` hands out from the slab is these frames). Only with :attr:`slabs`."""
        # (slabs agreed: callers use it on a channel with slabs only, as said above; no check per message here)
        return self._slab_out.frames, self._slab_in.received  # pyright: ignore[reportOptionalMemberAccess]

    def slab_free(self) -> bool:
        """Whether this side's slab may carry the next message now (its last one was taken and let go of). Only with
        :attr:`slabs`."""
        # (slabs agreed: callers use it on a channel with slabs only, as said above; no check per message here)
        return self._slab_out.free_for(  # pyright: ignore[reportOptionalMemberAccess]
            self._messages_sent + 1
        ) and not (self._unsettled or self._broken or self._closed)

    def post_slab(self) -> None:
        """Send the message written in this side's slab (its frames filled in place, see :meth:`slab_frames`;
        only when :meth:`slab_free`), ringing a doorbell if the receiver sleeps; the messages consumed before it
        are let go of first (see :meth:`release`). Never blocks.

        Raises:
            LinkBroken: the peer is gone.
        """
        if self._unsettled or self._broken or self._closed:
            self._check_intact()
        if self._release_due:  # (the peer's answer to this message may then use its slab at once)
            self.release()
        number = self._messages_sent + 1
        self._posting_to = slab = self._slab_out
        self._posting = number
        self._unsettled = True
        # (only when slab_free(), so with slabs: see slab_frames)
        slab.post(number)  # pyright: ignore[reportOptionalMemberAccess]
        self._settle_post()

    def slab_holds(self) -> bool:
        """Whether the next message waits in the peer's slab and none is current (then :meth:`receive` hands it out
        with no system call). Only with :attr:`slabs`."""
        if self._unsettled or self._broken or self._closed:
            return False  # (receive() says what is wrong)
        if self._release_due:
            self.release()
        # (slabs agreed: callers use it on a channel with slabs only, as for slab_frames)
        return self._current is None and self._slab_in.holds(self._messages_taken)  # pyright: ignore[reportOptionalMemberAccess]

    @property
    def plane(self) -> str:
        """What carries this channel's messages: ``"shm"`` (shared-memory mailboxes) or ``"uds"`` (the socket)."""
        return "shm" if self.block is not None else "uds"

    def sleep(self) -> bool:
        """The owner is about to sleep in ``poll()``: have the peer ring a doorbell for the next message. False
        if a message has come already (then the owner does not sleep)."""
        if self._mail_in is None:
            return True
        if self._current is not None or self._broken:
            return False
        if self._release_due:
            self.release()
        return self._mail_in.sleep(self._messages_taken, self._slab_in)

    def wake(self) -> None:
        """The owner is awake again (see :meth:`sleep`)."""
        if self._mail_in is not None:
            self._mail_in.wake()

    # -- the link ----------------------------------------------------------------------------------

    def fileno(self) -> int:
        return self._fd

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def wants_write(self) -> bool:
        """Whether bytes wait to be sent (the multiplexer then waits for room too)."""
        return bool(self._outbox)

    def stalled_for(self, now: float) -> float:
        """Always 0: a channel's peer reads it from its application thread, which may be busy with an env
        (or a learner with training) for as long as it likes; liveness stays with ZeroMQ."""
        return 0.0

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.clear()
            self.sock.close()
            self._mail_out = self._mail_in = None
            self._slab_out = self._slab_in = self._posting_to = None
            self._release_due = False
            self._current = None  # (its frames may be views of the block, which cannot be unmapped while they live)
            if self.block is not None:
                self.block.close()  # (its descriptor may still be block_fd: an attach cut short at its end)
            elif self.block_fd >= 0:
                os.close(self.block_fd)
            self.block_fd = -1

    def forget_in_child(self) -> None:
        self.close()

    # -- sending -----------------------------------------------------------------------------------

    def send(self, frames: Sequence[Any]) -> None:
        """Send ``frames`` as one record: what the socket takes now goes at once, the rest (copied) when
        :meth:`flush` finds room. Never blocks.

        Raises:
            LinkBroken: the peer is gone.
        """
        if self._unsettled or self._broken or self._closed:
            self._check_intact()
        lengths = [len(frame) if type(frame) is bytes else memoryview(frame).nbytes for frame in frames]
        count = len(lengths)
        prefix = _COUNT.pack(count) + _lengths(count).pack(*lengths)
        size = 4 + 8 * count + sum(lengths)
        number = self._messages_sent + 1
        slab = self._slab_out
        if slab is not None and tuple(lengths) == slab.sizes and slab.free_for(number):
            # in its slab even if the receiver sleeps: a doorbell wakes it (what the slab saves is the work, not
            # only the wake-up)
            self._posting_to = slab
            self._posting = number
            self._unsettled = True
            slab.post(number, frames)
            self._settle_post()
            return
        mail = self._mail_out
        # a receiver asleep in poll() is woken by the socket anyway: the message goes there, with no doorbell
        if (
            mail is not None
            and not self._outbox
            and size <= mail.capacity
            and mail.free_for(number)
            and not mail.receiver_sleeps(fenced=False)  # (a stale answer only picks the path: see _settle_post)
        ):
            self._posting_to = mail
            self._posting = number
            self._unsettled = True
            mail.post(number, prefix, frames, size)
            self._settle_post()
            return
        # (counted before it goes: an interrupt before it went leaves the count ahead, and the mailbox unused)
        self._messages_sent = number
        buffers = [prefix, *frames]
        if self._outbox:  # records before this one go first: it waits behind them, copied
            self._queue_rest(buffers, self._queued_end(), 0)
            self.flush()
            return
        self._send_now(buffers, borrowed=size)

    def _settle_post(self) -> None:
        """Account for the post in progress (if any): counted if its number was posted, and a doorbell rung if
        the receiver sleeps (rung twice if an interrupt came between, which is harmless). Repeatable."""
        number = self._posting
        if number:
            # a post in progress names where it goes (send and post_slab store _posting_to before _posting), and posts
            # are made with a block in use only, so its mailboxes are there (close() ends every later settle)
            if self._posting_to.posted() == number:  # pyright: ignore[reportOptionalMemberAccess]
                if self._messages_sent != number:
                    self._messages_sent = number
                    self.messages_posted += 1
                    self.slab_posts += self._posting_to is self._slab_out
                if self._mail_out.receiver_sleeps():  # pyright: ignore[reportOptionalMemberAccess]
                    self._ring()
            self._posting = 0
            self._posting_to = None
        self._recheck_unsettled()

    def _recheck_unsettled(self) -> None:
        """After a send, read or post was accounted for: whether another is still in progress."""
        self._unsettled = self._read_base is not None or self._send_base is not None or self._posting != 0

    def _ring(self) -> None:
        """Send a doorbell: a record of no frames, which wakes a receiver sleeping in ``poll()``."""
        if self._outbox:
            self._queue_rest([_DOORBELL], self._queued_end(), 0)
            self._send_queued()  # (not flush(): a post still being settled would settle, and ring, again)
        else:
            self._send_now([_DOORBELL], borrowed=len(_DOORBELL))

    def flush(self) -> bool:
        """Send what waits, as far as the socket takes it now; True once nothing waits.

        Raises:
            LinkBroken: the peer is gone.
        """
        if self._unsettled or self._broken or self._closed:
            self._check_intact()
        self._send_queued()
        return not self._outbox

    def _send_queued(self) -> None:
        """Send what waits in the outbox, as far as the socket takes it now."""
        outbox = self._outbox
        if outbox:
            self._trim()  # (what was sent leaves first, even if an interrupt cut short an earlier trimming)
            start, first = outbox[0]
            self._send_now([first[self._sent - start :], *(view for _, view in itertools.islice(outbox, 1, _IOV_MAX))])

    def _send_now(self, buffers: list[Any], borrowed: int = 0) -> None:
        """One ``sendmsg`` of ``buffers`` (never blocking), then its result is accounted for (:meth:`_settle_send`).
        ``borrowed``: if not 0, they are the caller's (a new record of that many bytes), and what the socket does
        not take of them is queued, copied; else they are the outbox's.

        The byte count is kept where an interrupt cannot lose it: ``deque.extend`` over ``map`` calls the
        system call and stores its result with no bytecode in between (CPython runs a Python signal handler
        only between bytecodes, and the socket module checks for signals only when a call fails with EINTR).
        """
        self._send_result.clear()
        self._sending = buffers if borrowed else None  # (these stores come with no call between them)
        self._sending_end = self._sent + borrowed
        self._send_base = self._sent
        self._unsettled = True
        try:
            self._send_result.extend(map(self.sock.sendmsg, (buffers[:_IOV_MAX],), _NO_ANCILLARY, _SEND_FLAGS))
        except BlockingIOError:
            pass
        except OSError as error:
            raise self._broken_by(f"its data channel closed (sending failed: {error.strerror or error})") from None
        self._settle_send()

    def _settle_send(self) -> None:
        """Account for the send in progress (if any): the bytes it sent, what it left of the buffers it borrowed
        (queued, copied), and the outbox trimmed of what went. Repeatable."""
        base = self._send_base
        if base is not None:
            self._sent = base + (self._send_result[0] if self._send_result else 0)
            if self._sending is not None:
                if self._sent < self._sending_end:
                    self._queue_rest(self._sending, base, self._sent)
                self._sending = None
            self._send_base = None
        self._trim()
        self._recheck_unsettled()

    def _trim(self) -> None:
        """Drop from the outbox what was sent. Repeatable."""
        outbox, sent = self._outbox, self._sent
        while outbox and outbox[0][0] + outbox[0][1].nbytes <= sent:
            outbox.popleft()

    def _queue_rest(self, buffers: Sequence[Any], start: int, sent: int) -> None:
        """Queue (copied) what lies past stream position ``sent`` of ``buffers``, which begin at ``start`` in the
        stream, skipping what is queued already (so that it can be repeated)."""
        end = self._queued_end()
        segments = []
        for buffer in buffers:
            view = memoryview(buffer).cast("B")
            stop = start + view.nbytes
            begin = max(start, sent, end)
            if begin < stop:
                segments.append((begin, memoryview(bytes(view[begin - start :]))))
            start = stop
        self._outbox.extend(segments)

    def _queued_end(self) -> int:
        """The stream position after the last byte queued (or sent)."""
        outbox = self._outbox
        return outbox[-1][0] + outbox[-1][1].nbytes if outbox else self._sent

    # -- receiving ---------------------------------------------------------------------------------

    def buffered(self) -> bool:
        """Whether a whole record, or bytes that break the channel, wait to be taken without a system call."""
        if self._current is not None or self._broken or self._read_base is not None:
            return True
        if self._mail_in is not None:
            if self._release_due:
                self.release()
            if self._mail_in.holds(self._messages_taken) or (
                self._slab_in is not None and self._slab_in.holds(self._messages_taken)
            ):
                return True
        try:
            return self._record_end() is not None
        except LinkBroken:  # (the next receive raises it)
            return True

    def receive(self, woken: bool = False) -> FrameList | None:
        """The next record if it has arrived whole (None if not yet); never blocks.

        The record stays this channel's current one, handed out again by every call, until
        :meth:`consume`; its frames are views valid until then.

        ``woken``: the owner's ``poll()`` found the socket readable. A message from the shared block is then
        handed out with the socket read once too: the doorbell that woke the poll is taken in with the wake-up
        it caused, instead of waking the next ``poll()`` again (a poll, two reads and the sleeping flags more
        per message, measured as ~15 % more CPU per step in a client that sleeps).

        Raises:
            LinkBroken: the peer closed the channel or died (mid-record too), or sent a malformed or
                oversized record.
        """
        if self._unsettled or self._broken or self._closed:
            self._check_intact()
        if self._current is not None:
            return self._current
        if self._mail_in is not None:
            if self._release_due:
                self.release()
            record = self._take_posted(self._mail_in)
            if record is not None:
                if woken:
                    try:
                        self._receive_some()
                    except LinkBroken:  # (the next call says so: this message came first)
                        pass
                return record
        end = self._record_end()
        while end is None:
            if not self._receive_some():
                return None
            end = self._record_end()
        if self._mail_in is not None:
            # the record on the socket may have been sent after the next message was posted (which the look above
            # came too early to see): posted before the send, it is seen now, and comes first
            record = self._take_posted(self._mail_in)
            if record is not None:
                return record
        record = FrameList(self._frames_of_record())
        self._current_end = end
        self._current_in_mailbox = False
        self._current = record
        return record

    def _take_posted(self, mail: shared.Inbox) -> FrameList | None:
        """The next message, made current, if the mailbox ``mail`` (``_mail_in``) or the slab holds it (older messages
        are all taken then: see :meth:`send`)."""
        slab = self._slab_in
        from_slab = False
        if mail.holds(self._messages_taken):
            try:
                frames = mail.frames(self.max_frame_bytes)
            except ValueError as error:
                raise self._malformed(str(error)) from None
        elif slab is not None and slab.holds(self._messages_taken):
            frames, from_slab = list(slab.received), True
        else:
            return None
        record = FrameList(frames)
        self._current_in_mailbox = True
        self._current = record
        self.slab_takes += from_slab
        return record

    def consume(self) -> None:
        """The current record is taken care of: the next :meth:`receive` hands out the one after it."""
        if self._current is not None:
            if not self._current_in_mailbox:  # (these stores come with no call between them)
                self._start = self._current_end
                self._parsed_start = -1
            self._current = None
            self._messages_taken += 1
            self._release_due = self._mail_in is not None

    def release(self) -> None:
        """Tell the peer that the messages consumed are done with, so that its next one may use the mailbox again
        (the frames handed out are no longer valid then). Done by every :meth:`receive`, :meth:`buffered` and
        :meth:`sleep` too: a learner consumes a reply before it lands it, and lets go of it once it is handled. An
        interrupt before it leaves the mailbox unused for one message, no more."""
        if self._release_due:
            self._release_due = False
            # due only with a mailbox in use (consume() says so), and close() clears both
            self._mail_in.mark_taken(self._messages_taken)  # pyright: ignore[reportOptionalMemberAccess]

    def _record_end(self) -> int | None:
        """The end offset of the record at ``_start`` if it is all here; its layout is checked first.

        Raises:
            LinkBroken: a frame count out of range, or a frame longer than the limit (the channel is broken).
        """
        start, buffer = self._start, self._buffer
        if start == self._parsed_start:  # (a record's layout is checked once)
            end = self._parsed_end
            return end if self._end >= end else None
        have = self._end - start
        if have < 4:
            return None
        (count,) = _COUNT.unpack_from(buffer, start)
        while count == 0 and self._mail_in is not None:  # doorbells: they only woke the poll()
            start += 4
            self._start = start
            have -= 4
            if have < 4:
                return None
            (count,) = _COUNT.unpack_from(buffer, start)
        if not 1 <= count <= MAX_FRAMES:
            raise self._malformed(f"a data channel record of {count} frames (at most {MAX_FRAMES})")
        prefix = 4 + 8 * count
        if have < prefix:
            return None
        lengths = _lengths(count).unpack_from(buffer, start + 4)
        largest = max(lengths)
        if largest > self.max_frame_bytes:
            raise self._malformed(f"a frame of {largest} bytes exceeds the limit of {self.max_frame_bytes} bytes")
        end = start + prefix + sum(lengths)
        self._parsed_end, self._parsed_lengths = end, lengths
        self._parsed_start = start
        return end if self._end >= end else None

    def _frames_of_record(self) -> list[memoryview]:
        """The frames of the record at ``_start`` (its layout parsed by :meth:`_record_end`)."""
        lengths = self._parsed_lengths
        position = self._start + 4 + 8 * len(lengths)
        view, frames = self._view, []
        for length in lengths:
            frames.append(view[position : position + length])
            position += length
        return frames

    def _receive_some(self) -> bool:
        """Take in what has arrived, making room as bytes come (never for what a header announces);
        False if nothing had arrived. Its byte count is kept as a send's is (see :meth:`_send_now`)."""
        if self._end == len(self._buffer):
            self._make_room()
        self._read_result.clear()
        self._read_base = self._end
        self._unsettled = True
        try:
            self._read_result.extend(map(self.sock.recv_into, (self._view[self._end :],)))
        except BlockingIOError:
            self._read_base = None
            self._recheck_unsettled()
            return False
        except OSError as error:
            raise self._broken_by(f"its data channel closed (receiving failed: {error.strerror or error})") from None
        return self._settle_read()

    def _settle_read(self) -> bool:
        """Account for the read in progress (if any); whether it took in bytes. Repeatable.

        Raises:
            LinkBroken: the read found the channel closed.
        """
        base = self._read_base
        if base is None:
            return False
        if not self._read_result:  # it did not happen
            self._read_base = None
            self._recheck_unsettled()
            return False
        received = self._read_result[0]
        if received == 0:
            partial = " in the middle of a message" if base > self._start else ""
            raise self._broken_by(f"its data channel closed{partial} (the peer closed it, or its process ended)")
        self._end = base + received
        self._read_base = None
        self._recheck_unsettled()
        return True

    def _make_room(self) -> None:
        """Room for more bytes: drop consumed ones, or a buffer twice the size (a new one, so that the frames
        already handed out stay as they were)."""
        start, end = self._start, self._end
        if start:  # frames handed out before the current record are no longer valid
            self._parsed_start = -1
            self._view[: end - start] = self._view[start:end]
            self._start, self._end = 0, end - start
            return
        bigger = bytearray(2 * len(self._buffer))
        bigger[:end] = self._view[:end]
        self._buffer, self._view = bigger, memoryview(bigger)

    # -- breaking ----------------------------------------------------------------------------------

    def _check_intact(self) -> None:
        """Refuse a broken or closed channel; else finish what an interrupt cut short: the results of a send
        and a read are accounted for."""
        if self._broken:
            raise LinkBroken(self._broken)
        if self._closed:
            raise LinkBroken("its data channel is closed")
        self._settle_send()
        if self._read_base is not None:
            self._settle_read()
        if self._posting:
            self._settle_post()

    def _malformed(self, problem: str) -> LinkBroken:
        return self._broken_by(f"it sent a malformed message on its data channel: {problem}")

    def _broken_by(self, reason: str) -> LinkBroken:
        """Mark the channel broken (for good: every later call raises the same); the error to raise."""
        self._broken = self._broken or reason
        self._outbox.clear()
        return LinkBroken(self._broken)


_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
_DOORBELL = _COUNT.pack(0)
_NO_ANCILLARY, _SEND_FLAGS = ((),), (_NOSIGNAL,)  # sendmsg's other arguments, for map() (the socket does not block)

_LENGTHS: dict[int, struct.Struct] = {}


def _lengths(count: int) -> struct.Struct:
    """The struct of a record's ``count`` frame lengths (the few counts in use are kept)."""
    layout = _LENGTHS.get(count)
    if layout is None:
        layout = struct.Struct(f"<{count}Q")
        if len(_LENGTHS) < 64:
            _LENGTHS[count] = layout
    return layout


def peer_credentials(sock: socket.SocketType) -> tuple[int, int, int]:
    """The peer process's (pid, uid, gid) as the kernel recorded them at connect time."""
    return _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))


def connect(
    name: bytes,
    token: bytes,
    *,
    max_frame_bytes: int,
    timeout: float = CONNECT_SECONDS,
    block: shared.Block | None = None,
) -> Channel:
    """The client's side: connect to the server's data channel ``name`` and greet it with ``token`` (handing
    over ``block``'s descriptor with the greeting, if given; the channel uses it once the WELCOME takes it).

    A listener whose queue of connections is full is tried again until ``timeout``.

    Raises:
        OSError: nothing listens there (another host, or a server without a data plane), the
            listener belongs to another user, or its queue stayed full.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock.connect(name)
                break
            except BlockingIOError:  # EAGAIN: the listener's queue is full
                if time.monotonic() > deadline:
                    raise OSError(errno.EAGAIN, f"the listener's queue stayed full for {timeout:g} s") from None
                time.sleep(0.01)
        _, uid, _ = peer_credentials(sock)
        if uid != os.getuid():
            raise PermissionError(errno.EPERM, f"the data channel's listener runs as uid {uid}, not {os.getuid()}")
        sock.settimeout(timeout)
        if block is None:
            sock.sendall(GREETING_MAGIC + token)
        else:  # (24 bytes fit any socket buffer: one sendmsg sends them all, the descriptor with the first)
            sock.sendmsg([GREETING_MAGIC + token], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _FD.pack(block.fd))])
        return Channel(sock, max_frame_bytes=max_frame_bytes)
    except BaseException:
        sock.close()
        raise


class _Pending:
    """A connection the listener accepted: its peer, the greeting as far as it came, and the shared block's
    descriptor handed over with it (-1: none).

    A read of the greeting is stored where an interrupt cannot lose it (``reads``) and then applied once
    (``applied`` is the read applied last): see :meth:`Listener._read_greeting`."""

    __slots__ = ("sock", "pid", "since", "greeting", "block_fd", "reads", "applied", "strays", "greeted")

    def __init__(self, sock: socket.SocketType, pid: int, since: float) -> None:
        self.sock, self.pid, self.since, self.greeting, self.block_fd = sock, pid, since, b"", -1
        self.reads: deque[tuple[bytes, list, int, Any]] = deque()  # a recvmsg's result, until applied
        self.applied: tuple | None = None
        self.strays: tuple[int, ...] = ()  # descriptors that came with the greeting's later bytes: to close
        self.greeted = False  # whole, well formed, and listed by its token

    def close_strays(self) -> None:
        while self.strays:
            fd, self.strays = self.strays[0], self.strays[1:]
            os.close(fd)

    def close(self) -> None:
        self.sock.close()
        if self.reads and self.reads[0] is not self.applied:  # (descriptors that came and were not looked at)
            self.strays += tuple(_descriptors_of(self.reads[0][1]))
        self.reads.clear()
        self.close_strays()
        if self.block_fd >= 0:
            fd, self.block_fd = self.block_fd, -1
            os.close(fd)


class Listener:
    """The server's side: a listening abstract socket and the connections not claimed yet.

    Connections are accepted as soon as the multiplexer sees them (:meth:`service`); one from another
    user is closed unread, one whose greeting does not come whole within :data:`GREETING_SECONDS` is
    closed, and a greeted one is kept for :data:`PENDING_SECONDS` until the HELLO that names its token,
    from the same process, claims it (:meth:`take`).
    """

    def __init__(self, name: bytes | Sequence[bytes], *, max_frame_bytes: int) -> None:
        names = [name] if isinstance(name, bytes) else list(dict.fromkeys(name))
        socks: list[socket.socket] = []
        try:
            for each in names:  # one listening socket per name a client on this host may derive (§13.1)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind(each)
                sock.listen(socket.SOMAXCONN)
                sock.setblocking(False)
        except BaseException:
            for sock in socks:
                sock.close()
            raise
        self.name = names[0]
        self.names = names
        self.socks = socks
        self.max_frame_bytes = max_frame_bytes
        self.uid = os.getuid()
        self._accepted: deque[socket.SocketType] = deque()  # accepted, not pending or refused yet (see _accept)
        self._pending: dict[int, _Pending] = {}  # by descriptor: accepted, not claimed yet
        self._greeted: dict[bytes, _Pending] = {}  # by token
        self._taken: tuple[bytes, int, bytes, Channel] | None = None  # the last taken: token, pid, claimant, channel
        self.refused = {"another user": 0, "no greeting in time": 0, "a bad greeting": 0, "too many": 0}
        self._closed = False
        fork.register(self)

    def descriptors(self) -> list[int]:
        """What the multiplexer waits on for this listener (reading): the listening socket, and each
        connection whose greeting is still to come."""
        waiting = (fd for fd, pending in self._pending.items() if len(pending.greeting) < GREETING_SIZE)
        return [*(sock.fileno() for sock in self.socks), *waiting]

    @property
    def has_pending(self) -> bool:
        """Whether connections wait to be claimed (or to greet): :meth:`service` drops them when they overstay."""
        return bool(self._pending)

    def service(self, now: float) -> None:
        """Accept the connections that wait, read the greetings that came, drop the stale."""
        if self._closed:
            return
        self._accept(now)
        for fd, pending in list(self._pending.items()):
            if not pending.greeted:
                self._read_greeting(fd, pending)
        self._drop_stale(now)

    def take(self, token: bytes, pid: int, claimant: bytes = b"") -> Channel | None:
        """The connection greeted with ``token`` by process ``pid``, as a channel for ``claimant`` (the HELLO's
        sender); None if there is none.

        Asked again by the same claimant for the token it handed out last, it hands out the same channel
        (while it is open): a HELLO whose handling an interrupt cut short, after the channel was taken and
        before the server kept it, is handled again and finds its channel still there.
        """
        taken = self._taken
        if taken is None or taken[0] != token:
            self.service(time.monotonic())
            pending = self._greeted.get(token)
            if pending is None:
                return None
            if pending.pid != pid:
                self._drop(pending.sock.fileno(), None)
                return None
            channel = Channel(pending.sock, max_frame_bytes=self.max_frame_bytes, block_fd=pending.block_fd)
            taken = (token, pid, claimant, channel)
            self._taken = taken
            pending.block_fd = -1  # (the channel owns it now; kept until the channel is, for a take made again)
        pending = self._greeted.pop(token, None)  # (the channel owns its socket now)
        if pending is not None:
            self._pending.pop(pending.sock.fileno(), None)
        channel = taken[3]
        return channel if taken[1:3] == (pid, claimant) and not channel.closed else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sock in self._accepted:
            sock.close()
        self._accepted.clear()
        for pending in self._pending.values():
            pending.close()
        self._pending.clear()
        self._greeted.clear()
        for sock in self.socks:
            sock.close()

    forget_in_child = close

    def _accept(self, now: float) -> None:
        """Accept what waits on each listening socket (see :meth:`_accept_from`)."""
        for listening in self.socks:
            self._accept_from(listening, now)

    def _accept_from(self, listening: socket.socket, now: float) -> None:
        """Accept what waits. Each connection is stored (wrapped in a socket object, in one C call that an
        interrupt cannot split) before anything is made of it, and leaves the store only once it is pending or
        refused: a call cut short finds it there again."""
        accepted = self._accepted
        while True:
            if not accepted:
                try:
                    # socket.socket.accept()'s own call, which CPython's _socket.socket has (typeshed leaves it out)
                    descriptors = map(_FIRST, itertools.starmap(listening._accept, _NO_ARGUMENTS))  # pyright: ignore[reportAttributeAccessIssue]
                    accepted.extend(map(_SOCKET_OF_DESCRIPTOR, descriptors))
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as error:  # e.g. out of descriptors: the rest stays queued for the next call
                    logger.warning("the data channel listener cannot accept a connection: %s", error)
                    return
            sock = accepted[0]
            fd = sock.fileno()
            made = self._pending.get(fd)  # (pending already, by a call an interrupt cut short before popleft)
            if fd >= 0 and (made is None or made.sock is not sock):
                try:
                    pid, uid, _ = peer_credentials(sock)
                except OSError:
                    pid, uid = 0, -1
                if uid != self.uid:
                    self._refuse(sock, "another user")
                else:
                    sock.setblocking(False)
                    self._pending[fd] = _Pending(sock, pid, now)
                    while len(self._pending) > MAX_PENDING:
                        oldest = next(iter(self._pending))
                        self._drop(oldest, "too many")
            accepted.popleft()

    def _read_greeting(self, fd: int, pending: _Pending) -> None:
        """Read what came of the greeting; once it is whole, list the connection by its token.

        The read's result (bytes and descriptors) is stored by the call that reads (``deque.extend`` over
        ``starmap``: no bytecode between them, see :meth:`Channel._send_now`) and applied to the greeting in
        stores with no call between them, so an interrupt anywhere loses no byte and no descriptor, and applies
        none twice."""
        if len(pending.greeting) < GREETING_SIZE:
            if not pending.reads:
                wanted = ((GREETING_SIZE - len(pending.greeting), _ONE_FD_SPACE),)
                try:
                    pending.reads.extend(itertools.starmap(pending.sock.recvmsg, wanted))
                except BlockingIOError:
                    return
                except OSError:
                    pending.reads.append(_CLOSED_READ)
            read = pending.reads[0]
            part = read[0]
            if pending.applied is not read:
                # a shared block's descriptor comes with the greeting's first bytes; any other is closed
                descriptors = _descriptors_of(read[1])
                keep = descriptors[0] if descriptors and pending.block_fd < 0 and not pending.greeting else -1
                strays = tuple(other for other in descriptors if other != keep)
                block_fd = keep if keep >= 0 else pending.block_fd
                pending.greeting, pending.block_fd, pending.strays, pending.applied = (
                    pending.greeting + part,
                    block_fd,
                    strays,
                    read,
                )
            pending.close_strays()
            pending.reads.clear()
            if not part:  # closed before greeting
                self._drop(fd, None)
                return
            if len(pending.greeting) < GREETING_SIZE:
                return
        if not pending.greeting.startswith(GREETING_MAGIC):
            self._drop(fd, "a bad greeting")
            return
        token = pending.greeting[len(GREETING_MAGIC) :]
        earlier = self._greeted.get(token)
        if earlier is not None and earlier is not pending:  # a token used twice: neither connection is trusted
            self._drop(earlier.sock.fileno(), "a bad greeting")
            self._drop(fd, "a bad greeting")
            return
        self._greeted[token] = pending
        pending.greeted = True

    def _drop_stale(self, now: float) -> None:
        for fd, pending in list(self._pending.items()):
            if len(pending.greeting) < GREETING_SIZE and now - pending.since > GREETING_SECONDS:
                self._drop(fd, "no greeting in time")
            elif now - pending.since > PENDING_SECONDS:
                self._drop(fd, None)

    def _drop(self, fd: int, reason: str | None) -> None:
        pending = self._pending.pop(fd, None)
        if pending is None:
            return
        token = pending.greeting[len(GREETING_MAGIC) :]
        if self._greeted.get(token) is pending:
            del self._greeted[token]
        self._refuse(pending, reason)

    def _refuse(self, sock: socket.SocketType | _Pending, reason: str | None) -> None:
        sock.close()
        if reason is not None:
            self.refused[reason] += 1
            if self.refused[reason] == 1:  # once per reason; the counts are in the server's connection_stats()
                logger.warning("the data channel listener closed a connection: %s (logged once)", _WHY[reason])


_FD = struct.Struct("i")
_ONE_FD_SPACE = socket.CMSG_SPACE(_FD.size) if hasattr(socket, "CMSG_SPACE") else 0


_SOCKET_OF_DESCRIPTOR = functools.partial(socket.SocketType, socket.AF_UNIX, socket.SOCK_STREAM, 0)
"""An accepted descriptor as a socket object: the C type itself, whose making runs no bytecode (see
:meth:`Listener._accept`)."""
_FIRST = operator.itemgetter(0)
_NO_ARGUMENTS = ((),)
_CLOSED_READ: tuple[bytes, list, int, Any] = (b"", [], 0, None)


def _descriptors_of(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors a ``recvmsg``'s ancillary data holds (``SCM_RIGHTS``)."""
    descriptors = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            whole = len(data) - len(data) % _FD.size
            descriptors += [_FD.unpack_from(data, offset)[0] for offset in range(0, whole, _FD.size)]
    return descriptors


_WHY = {
    "another user": "its process runs as another user",
    "no greeting in time": f"it did not send its greeting within {GREETING_SECONDS:g} s",
    "a bad greeting": "its greeting was malformed, or its token was used twice",
    "too many": f"more than {MAX_PENDING} connections waited to be claimed (the oldest is closed)",
}
