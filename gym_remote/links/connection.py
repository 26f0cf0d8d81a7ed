"""A client's links to its server for one session: a :class:`~gym_remote.links.zeromq.Dealer`, and on the
server's host a data channel (PROTOCOL.md §13), waited on together.

Before its WELCOME a client speaks over the DEALER only; a data channel it greeted waits unused. If the
WELCOME takes the channel, the membership's messages travel on it (:meth:`ServerConnection.use_channel`)
while the server's probes still come over ZeroMQ; :meth:`ServerConnection.next_message` reads whichever
has a message, and sends what waits in either link while it waits.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Sequence
from typing import Any

from gym_remote.links import shared
from gym_remote.links.base import LinkBroken, Message
from gym_remote.links.channel import Channel, address_for, connect, new_token
from gym_remote.links.zeromq import (
    FOR_NOW_ZAP_STATUSES,
    HANDSHAKE_FAILURES,
    PROTOCOL_ERROR_MECHANISM_MISMATCH,
    ConnectionEvent,
    Dealer,
    new_context,
    terminate,
)
from gym_remote.security import ClientSecurity

__all__ = [
    "ServerConnection",
    "ConnectionEvent",
    "FOR_NOW_ZAP_STATUSES",
    "HANDSHAKE_FAILURES",
    "PROTOCOL_ERROR_MECHANISM_MISMATCH",
    "new_context",
    "terminate",
]

_READ, _WRITE = select.POLLIN, select.POLLOUT


class ServerConnection:
    """One session's links to the server at ``address`` (see the module's docstring).

    Args:
        context: the client's ZeroMQ context.
        address: the server's endpoint.
        session: this session's routing id (32 hex characters).
        liveness_timeout: ZMTP heartbeats close a connection silent for this long.
        security: the server's public key and this client's keys (None: a plain connection).

    Raises:
        ValueError: ZeroMQ cannot connect to ``address``.
    """

    def __init__(
        self,
        context: Any,
        address: str,
        session: str,
        *,
        liveness_timeout: float,
        security: ClientSecurity | None = None,
    ) -> None:
        self.address = address
        self.dealer = Dealer(context, address, session.encode(), liveness_timeout=liveness_timeout, security=security)
        self.channel: Channel | None = None  # greeted, or in use once the WELCOME took it
        self.block: shared.Block | None = None  # the shared block handed over with the greeting
        self.token = b""
        self.active_channel: Channel | None = None  # the channel once the WELCOME took it: messages travel on it
        # the channel whose current record was handed out (a client handles one at a time), else None
        self._handed_out: Channel | None = None
        self._channel_poll = select.poll()
        self._polling_writes = False  # whether the channel's poll waits for room to write, too
        self._messages = 0

    # -- the data channel --------------------------------------------------------------------------

    def open_channel(
        self, max_frame_bytes: int, block_bytes: tuple[int, int, tuple[int, int]] | None = None
    ) -> tuple[str, bool]:
        """Connect to the server's data channel and greet it with a new token; with ``block_bytes`` (the bytes
        of a command and of a reply to carry, and of the slabs), hand over a new shared block with the greeting too.

        Returns:
            ``("", False)`` on success; else why not, and whether that is unexpected (nothing listening is
            expected: another host, or a server without a data plane).
        """
        self.close_channel()
        token = new_token()
        try:
            if block_bytes is not None:
                self.block = shared.Block.create(*block_bytes)
            self.channel = connect(address_for(self.address), token, max_frame_bytes=max_frame_bytes, block=self.block)
        except OSError as error:
            self.close_channel()
            nothing_there = error.errno in (errno.ENOENT, errno.ECONNREFUSED)
            return error.strerror or str(error), not nothing_there
        self.token = token
        return "", False

    def use_channel(self, shared_memory: bool = False, slabs: tuple[list[int], list[int]] | None = None) -> None:
        """The WELCOME took the channel: from now on the membership's messages travel on it, through the shared
        block's mailboxes if the WELCOME took that too, and its slabs for messages of the frame sizes ``slabs``
        (a STEP's, a RESULT's) if it took those."""
        channel = self.channel
        if channel is not None:
            block, self.block = self.block, None
            if shared_memory and block is not None:
                channel.use_block(block, outgoing=shared.REPLIES)
                if slabs is not None:
                    channel.use_slabs(slabs[1], slabs[0])
            elif block is not None:
                block.close()
            self._channel_poll = select.poll()
            self._channel_poll.register(channel.fileno(), _READ)
            self._polling_writes = False
            self.active_channel = channel

    def close_channel(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.block is not None:
            self.block.close()
            self.block = None
        self.active_channel = self._handed_out = None  # (a record handed out went with its channel)
        self.token = b""

    # -- sending -----------------------------------------------------------------------------------

    def send(self, frames: Sequence[Any]) -> None:
        """Send one message on the membership's link; never blocks (what waits goes out while it waits).

        Raises:
            LinkBroken: the link is broken (the server is gone, or an interrupt cut a send short).
        """
        channel = self.active_channel
        if channel is None:
            self.dealer.send(frames)
            return
        self._answered()
        channel.send(frames)

    def reply_slab(self) -> list[memoryview] | None:
        """The frames of the data channel's slab for replies, to write a RESULT into in place and send with
        :meth:`post_slab`, if it may carry the next message now; else None (PROTOCOL.md §13.6)."""
        channel = self.active_channel
        if channel is None:
            return None
        self._answered()
        return channel.slab_frames()[0] if channel.slabs and channel.slab_free() else None

    def _answered(self) -> None:
        """A reply goes out: the command it answers is read, and its mailbox (or slab) free for the next."""
        channel = self._handed_out
        if channel is not None:
            self._handed_out = None
            channel.consume()
            channel.release()

    def post_slab(self) -> None:
        """Send the reply written in the slab :meth:`reply_slab` gave out.

        Raises:
            LinkBroken: the link is broken.
        """
        # only after reply_slab() gave out the slab's frames, which it does on the channel only (no check per step)
        self.active_channel.post_slab()  # pyright: ignore[reportOptionalMemberAccess]

    def send_last(self, frames: Sequence[Any], timeout: float) -> bool:
        """Send a last message (a BYE), waiting at most ``timeout`` for it to go out; False if it did not."""
        try:
            channel = self.active_channel
            if channel is None:
                return self.dealer.send_now(frames)  # the socket's linger delivers it
            channel.send(frames)
            deadline = time.monotonic() + timeout
            while not channel.flush():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                _wait(channel.fileno(), _WRITE, remaining)
            return True
        except LinkBroken:
            return False

    # -- receiving ---------------------------------------------------------------------------------

    def next_message(self, timeout: float, spin: float = 0.0) -> tuple[bytes, Message] | None:
        """The next message's header frame and the rest, waiting at most ``timeout`` seconds (None if none
        came; the caller then looks at :meth:`events`).

        Over the data channel, commands come there; the server's probes come over ZeroMQ, looked at every
        64 messages and whenever the channel stays quiet for ``timeout``.

        ``spin``: over the data channel, first busy-check it for that many seconds, yielding the core to
        any other runnable thread between checks.

        Raises:
            LinkBroken: the data channel closed or broke (the server is gone), or an interrupt cut a read short.
        """
        handed_out = self._handed_out
        if handed_out is not None:  # the last message is done with
            self._handed_out = None
            handed_out.consume()
        self.dealer.flush()
        channel = self.active_channel
        if channel is None:
            return self.dealer.receive(timeout)
        self._messages += 1
        if not self._messages & 63:
            message = self.dealer.receive()
            if message is not None:
                return message
        return self._from_channel(channel, timeout, spin) or self.dealer.receive()

    def _from_channel(self, channel: Channel, timeout: float, spin: float) -> tuple[bytes, Message] | None:
        """The next record of ``channel``, waiting at most ``timeout`` seconds (and sending what waits)."""
        if channel.wants_write:
            channel.flush()
        # what is buffered already, with no system call: in lock-step the next command is seldom there yet,
        # and a poll() finds it as cheaply as a read that comes back empty would
        record = channel.receive() if channel.buffered() else None
        if record is None and spin > 0:
            clock, yield_core, receive = time.perf_counter, os.sched_yield, channel.receive
            until = clock() + spin
            while record is None and clock() < until:
                yield_core()
                record = receive()
        if record is None:
            deadline = time.monotonic() + timeout
            poll = self._channel_poll
            while record is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                writing = channel.wants_write
                if writing != self._polling_writes:
                    poll.modify(channel.fileno(), _READ | (_WRITE if writing else 0))
                    self._polling_writes = writing
                woken = False
                if channel.sleep():
                    try:
                        found = poll.poll(int(remaining * 1000) + 1)
                    finally:
                        channel.wake()
                    for _, events in found:
                        if events & _WRITE:
                            channel.flush()
                        woken = woken or bool(events & _READ)
                record = channel.receive(woken)
        self._handed_out = channel
        record.rewind()
        return record.next(), record

    # -- the connection ------------------------------------------------------------------------------

    def events(self) -> list[tuple[ConnectionEvent, int]]:
        """What happened to the ZeroMQ connection since the last call (see :class:`ConnectionEvent`)."""
        return self.dealer.events()

    def stalled_for(self, now: float) -> float:
        """Seconds for which the server has taken nothing this client sent over ZeroMQ (0 if nothing waits)."""
        return self.dealer.stalled_for(now)

    def close(self, linger: int = 0) -> None:
        self.close_channel()
        self.dealer.close(linger)


def _wait(fd: int, events: int, timeout: float) -> None:
    poller = select.poll()
    poller.register(fd, events)
    poller.poll(int(timeout * 1000) + 1)
