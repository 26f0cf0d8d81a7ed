"""One wait on every link of the learner: the ROUTER socket, the members' data channels and the channel
listener, in a single ``poll()``.

:class:`Multiplexer` hands out one event per call of :meth:`Multiplexer.next`: a message arrived (an
:class:`~gym_remote.links.base.Arrival`, current until its handler consumes it), a member's link broke
(:class:`~gym_remote.links.base.Broken`), or an interrupt cut a message short
(:class:`~gym_remote.links.base.CutShort`). While it waits it also sends what waits in the channels'
outboxes and accepts connections to the listener, so nothing is sent or accepted member by member.
Liveness is not its business: the server checks every member it awaits in one pass after each wait.
"""

from __future__ import annotations

import os
import select
import time
from collections import deque

from gym_remote.links.base import Arrival, Broken, CutShort, FrameList, LinkBroken
from gym_remote.links.channel import Channel, Listener
from gym_remote.links.zeromq import Router

__all__ = ["Multiplexer", "arrival"]

_READ, _WRITE = select.POLLIN, select.POLLOUT
_TROUBLE = select.POLLERR | select.POLLHUP | select.POLLNVAL

Event = Arrival | Broken | CutShort


class Multiplexer:
    """The learner's links, waited on together.

    Args:
        router: the ROUTER socket every peer's ZeroMQ messages arrive on.
        listener: the data channel listener, if the server offers the data plane.
    """

    def __init__(self, router: Router, listener: Listener | None = None) -> None:
        self.router = router
        self.listener = listener
        self.channels: dict[bytes, Channel] = {}  # members served over a data channel, by identity
        self._mailboxes: dict[bytes, Channel] = {}  # those of them whose channel has a shared block
        self._of_fd: dict[int, tuple[bytes, Channel]] = {}  # each channel, and its member, by descriptor
        self._joined = 0  # counts the channels added and removed (see _register)
        self._poll = select.poll()
        self._registered: dict[int, int] = {}
        self._layout: tuple = ()  # what the poll set was made for (see _register)
        self._broken: deque[Broken] = deque()  # links found broken while waiting, to hand out
        self._turn = 0  # whose messages are looked at first, for fairness between the router and channels

    def add(self, identity: bytes, channel: Channel) -> None:
        """Wait on ``channel``, the data channel of member ``identity``, too."""
        self.channels[identity] = channel
        self._of_fd[channel.fileno()] = (identity, channel)
        if channel.block is not None:
            self._mailboxes[identity] = channel
        self._joined += 1

    def remove(self, identity: bytes) -> Channel | None:
        """Stop waiting on the data channel of ``identity`` (which the caller closes); it, or None."""
        channel = self.channels.pop(identity, None)
        self._mailboxes.pop(identity, None)
        if channel is not None:
            fd = channel.fileno()
            self._of_fd.pop(fd, None)
            if fd in self._registered:
                try:
                    self._poll.unregister(fd)
                except KeyError:  # (by a call an interrupt cut short)
                    pass
                del self._registered[fd]
            self._joined += 1
        return channel

    def next(self, timeout: float, spin: float = 0.0) -> Event | None:
        """The next event, waiting at most ``timeout`` seconds (None if nothing happened).

        ``spin``: first busy-check the links for that many seconds (a thread's wake-up costs tens of
        microseconds, as much as a cheap env's step), yielding the core to any other runnable process between
        looks.

        With no listener and no channel the router is the only link, and libzmq waits for it (:meth:`Router.wait
        <gym_remote.links.zeromq.Router.wait>`): one call, where a ``poll()`` takes a look, the poll and a
        look again.
        """
        if self.listener is None and not self.channels and not self._broken:  # the router is the only link
            return self.router.wait(timeout, spin)
        event = self._ready()
        if event is not None:
            return event
        self._register()
        if spin > 0:
            clock, until, yield_core = time.perf_counter, time.perf_counter() + spin, os.sched_yield
            while clock() < until:  # zero-timeout polls: one system call a look, however many links
                event = self._poll_links(0) or (self._from_channels(self._mailboxes) if self._mailboxes else None)
                if event is not None:
                    return event
                yield_core()  # (to a client or trainer sharing this core, which is what the spin waits for)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not self._sleep():  # a mailbox holds a message that rang no doorbell
                event = self._from_channels()
                if event is not None:
                    return event
                continue
            try:
                event = self._poll_links(int(remaining * 1000) + 1)
            finally:
                self._wake()
            if event is not None:
                return event

    def look(self) -> Event | None:
        """The next event if one is there now, with no waiting: :meth:`next` with a ``poll()`` that does not
        block (which also sends what waits and accepts connections)."""
        event = self._ready()
        if event is not None:
            return event
        self._register()
        return self._poll_links(0)

    # -- internals ---------------------------------------------------------------------------------

    def _ready(self) -> Event | None:
        """An event that needs no waiting: a broken link, a message on the router, a record in a channel's
        buffer. The router and the channels take turns at being looked at first.

        A look at the router that finds nothing also re-arms its descriptor: a message that comes after it
        wakes the next ``poll()``."""
        if self._broken:
            return self._broken.popleft()
        self._turn ^= 1
        if self._turn:
            return self.router.receive() or self._from_channels()
        return self._from_channels() or self.router.receive()

    def _from_channels(self, channels: dict[bytes, Channel] | None = None) -> Event | None:
        """The current record of the first channel (of ``channels``, default all) that has one whole, as an
        arrival (or its link broken). Over the shared mailboxes alone (``self._mailboxes``) it makes no
        system call.

        A channel whose read an interrupt cut short counts as buffered, and may still lack the rest of its
        record once that read is accounted for."""
        for identity, channel in (self.channels if channels is None else channels).items():
            if channel.buffered():
                try:
                    record = channel.receive()
                except LinkBroken as error:
                    return Broken(identity, str(error))
                if record is not None:
                    return arrival(identity, channel, record)
        return None

    def _sleep(self) -> bool:
        """Before a ``poll()`` that may block: have every shared mailbox ring a doorbell for its next message. False
        (nobody sleeps) if one holds a message already."""
        for channel in self._mailboxes.values():
            if not channel.sleep():
                self._wake()
                return False
        return True

    def _wake(self) -> None:
        for channel in self._mailboxes.values():
            channel.wake()

    def _poll_links(self, milliseconds: int) -> Event | None:
        """One ``poll()`` on every link (waiting at most ``milliseconds``), then what it found: reading
        channels that have bytes, sending what waits where there is room, accepting connections. Returns
        the first event there is then: a record the poll brought is handed out at once, with no second
        look at every link (the others wait in their buffers for the next call); if the router's
        descriptor woke, the router is looked at (:meth:`_ready`).

        The poll set must be up to date (:meth:`_register`); it is brought up to date again when what the
        poll found may have changed it (a channel's outbox sent, connections accepted or closed), and only
        then: on the step path a poll finds replies, which change nothing of it."""
        found = self._poll.poll(milliseconds)
        listener = self.listener
        serve_listener = listener is not None and listener.has_pending  # drop connections that overstay
        if not found and not serve_listener:
            return None
        arrived: Arrival | None = None
        other = False  # the router's or the listener's descriptor woke
        wrote = False  # a channel's outbox was sent (its interest in room may have ended)
        router = self.router.fileno()
        for fd, events in found:
            member = self._of_fd.get(fd)
            if member is None:
                if fd == router:
                    self.router.woke()
                other = True
                continue
            identity, channel = member
            try:
                if events & (_WRITE | _TROUBLE) and channel.wants_write:
                    wrote = True
                    channel.flush()
                if events & (_READ | _TROUBLE):
                    record = channel.receive(woken=True)
                    if record is not None and arrived is None:
                        arrived = arrival(identity, channel, record)
            except LinkBroken as error:
                self._broken.append(Broken(identity, str(error)))
        served = False
        if listener is not None and (serve_listener or other):
            listener.service(time.monotonic())
            served = True
        if served or wrote:
            self._register()
        if self._broken or (other and arrived is None):
            return self._ready()
        return arrived

    def _register(self) -> None:
        """Bring the poll set up to date (when it changed): what each descriptor is to be waited for now.
        Each step is done before it is recorded, so that an interrupt leaves nothing recorded as done."""
        writers = [fd for fd, member in self._of_fd.items() if member[1].wants_write]
        listener = self.listener
        # (the listening socket itself is always waited on: only the connections still to greet change)
        greeting = listener.descriptors() if listener is not None and listener.has_pending else None
        layout = (self._joined, writers, greeting)
        if layout == self._layout:
            return
        wanted = {self.router.fileno(): _READ}
        for fd in self._of_fd:
            wanted[fd] = _READ
        for fd in writers:
            wanted[fd] = _READ | _WRITE
        for fd in listener.descriptors() if listener is not None else ():
            wanted[fd] = _READ
        registered, poll = self._registered, self._poll
        for fd in [fd for fd in registered if fd not in wanted]:
            try:
                poll.unregister(fd)
            except KeyError:  # (unregistered already, by a call an interrupt cut short)
                pass
            del registered[fd]
        for fd, events in wanted.items():
            if registered.get(fd) != events:
                poll.register(fd, events)
                registered[fd] = events
        self._layout = layout


def arrival(identity: bytes, channel: Channel, record: FrameList) -> Arrival:
    """``record``, the current one of ``channel``, as an arrival from ``identity``."""
    record.rewind()  # (handed out again if its handler was cut short)
    return Arrival(identity, record.next(), record, channel)
