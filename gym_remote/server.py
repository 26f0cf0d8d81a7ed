"""The learner's side of the protocol: its members, the commands in flight to them, and their replies.

:class:`SlotServer` speaks the protocol (docs/PROTOCOL.md) and nothing below it: every message
reaches a member over the member's *link* (:mod:`gym_remote.links`: a ZeroMQ route, or a Unix
channel on the same host), and one :class:`~gym_remote.links.mux.Multiplexer` waits on all of them
at once. Who serves which slot is decided by its :class:`~gym_remote.membership.Membership`, which
it consults on every HELLO, leave and loss; what happened (a client joined, a client was lost) is
queued as :class:`Joined` and :class:`Lost` events, which its owner takes after a wait with
:meth:`SlotServer.peek_event`. A command is one :class:`Exchange`: sent to some members, its replies
land in its :class:`Sink` (a batch) as they arrive. The server is used from one thread only (the
learner's): control messages are handled whenever that thread waits, so nothing runs behind the
learner's back and nothing costs time on the step path.

One step, top to bottom: :meth:`SlotServer.start` builds every member's command, then sends each on
its link (never blocking: what a socket does not take waits in the link); :meth:`SlotServer.finish`
waits (:meth:`SlotServer.wait`), handing each message the multiplexer yields to :meth:`_handle`, which
lands a reply in its exchange's sink; after each wait, :meth:`_checks` looks at every member it awaits
in one pass (liveness).

Liveness: libzmq's heartbeats (ZMTP PING/PONG, answered by the peers' I/O threads whatever their envs
are doing) close the connection of a peer that is gone or cut off; the server then cannot route to it,
which it notices when it sends, or, while it waits for replies, when it probes the members it awaits.
A member whose connection has taken none of the bytes sent to it for ``liveness_timeout`` (a frozen
process with a large message in flight, which blocks libzmq's own heartbeats) is lost too. A slow env
keeps its connection alive and is only bounded by the reply timeout.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gym_remote import codec, protocol
from gym_remote.errors import ProtocolError, RemoteEnvError, RemoteTimeoutError
from gym_remote.fleet import FleetRecorder, fleet_report
from gym_remote.links import Arrival, Broken, CutShort, LinkBroken, Message
from gym_remote.links.channel import Channel, Listener, address_for
from gym_remote.links.gate import Gatekeeper
from gym_remote.links.mux import Multiplexer, arrival
from gym_remote.links.reach import reachable_endpoints
from gym_remote.links.zeromq import Route, Router, new_context, terminate
from gym_remote.membership import (
    LEFT,
    RECONNECTED,
    Admit,
    ClientInfo,
    LaunchSlot,
    Membership,
    Peer,
    Refuse,
    data_channel_token,
    space_mismatch,
)
from gym_remote.protocol import FLAG_VALUE, Kind, format_slots, kind_name
from gym_remote.security import DEFAULT_HANDSHAKE_RATE, DEFAULT_MAX_MESSAGE_BYTES, ServerSecurity
from gym_remote.spin import OtherThreads, SpinGate

if TYPE_CHECKING:
    from gym_remote.launch import Launcher

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "SlotServer",
    "ClientInfo",
    "Exchange",
    "Joined",
    "LaunchSlot",
    "Lost",
    "Sink",
    "default_spin",
    "space_mismatch",
]

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.25
"""Longest a wait sleeps before it checks deadlines, probes members and polls the launcher."""

STATUS_PER_SECOND = 10
"""STATUS requests the server answers in a second at most (the others are dropped)."""

REMIND_SECONDS = 30.0
"""While slots wait for clients, the learner says which, this often."""


PROBE_SECONDS = 0.5
"""A member awaited and not heard from for this long is probed (once per this interval)."""

LOOK_SECONDS = 0.002
"""How often steps that land straight from the slabs (no wait on the links) look at every link all the same."""

LOOK_EVENTS = 64
"""Most events one such look handles (a join storm is handled over several looks, steps in between)."""

DEFAULT_SPIN_SECONDS = 400e-6
"""How long a wait for replies busy-checks the links before it sleeps (see ``SlotServer``)."""


def default_spin(local_clients: int, shared_memory: bool = False) -> float:
    """RemoteVectorEnv's default ``spin`` with ``local_clients`` client processes on this machine:
    :data:`DEFAULT_SPIN_SECONDS` if they leave a core free for the spinning learner, or, when they step in
    shared memory (``shared_memory``: where a step is a wake-up and they spin too, yielding the core between
    looks), if each has a core of its own on a machine of two or more; else 0. (Measured, 2 clients on 2 cores,
    8 envs: CartPole +65 %, 84x84x4 frames +48 %, a 1 ms env level; next to a trainer the waits sleep anyway.)"""
    cores = _usable_cores()
    if local_clients + 1 <= cores or (shared_memory and 2 <= cores and local_clients <= cores):
        return DEFAULT_SPIN_SECONDS
    return 0.0


def _usable_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Joined:
    """Event: ``client`` joined and serves its slots."""

    client: ClientInfo


@dataclass(frozen=True)
class Lost:
    """Event: ``client`` is gone (``reason``); its slots are empty."""

    client: ClientInfo
    reason: str


class Sink(Protocol):
    """Where the replies of an exchange land.

    For a RESULT the server asks :meth:`targets` for the arrays its observation frames are received
    into, then hands over the rest; for a CALL_RESULT only :meth:`land` is called (``scalars`` None).
    Either may raise :class:`~gym_remote.errors.ProtocolError` for a reply that does not fit.
    """

    def targets(self, client: ClientInfo, header: protocol.Header) -> Sequence[np.ndarray]: ...

    def land(self, client: ClientInfo, header: protocol.Header, scalars: bytes | None, value: Any) -> None: ...


@dataclass(eq=False)
class Exchange:
    """One command sent to some clients (all with the same ``seq``), and the replies it still awaits."""

    seq: int
    reply_kind: Kind
    sink: Sink
    what: str
    pending: dict[bytes, ClientInfo] = field(default_factory=dict)
    sent_at: dict[bytes, float] = field(default_factory=dict)
    lost: list[ClientInfo] = field(default_factory=list)
    errors: list[tuple[ClientInfo, RemoteEnvError]] = field(default_factory=list)
    commands: list[tuple[ClientInfo, list[Any]]] = field(default_factory=list)  # built, not sent yet
    slabs: list[tuple[bytes, Channel]] = field(default_factory=list)  # sent in these members' slabs (§13.6)


@dataclass(eq=False)
class _Links:
    """A member's links: its ZeroMQ ``route`` (probes; everything, without a data channel), and the
    link its membership's messages travel on (``data``: the route, or its channel)."""

    route: Route
    data: Route | Channel


class SlotServer:
    """A bound ROUTER socket whose joining clients serve ``num_envs`` slots.

    Args:
        bind: endpoint to bind, e.g. ``"tcp://127.0.0.1:*"`` (a free port) or ``"ipc:///path"``.
        num_envs: number of slots.
        observation_mode: ``"same"``, ``"different"`` or a custom space pair, as in ``SyncVectorEnv``;
            decides how a client's observation spaces must match the vector's.
        vector_class: the vector env's class name, in the words of a refusal for spaces.
        autoreset_mode: told to clients in WELCOME.
        allow_pickle: ``True`` lets remote clients that ask for it use the trusted pickle mode;
            launched clients are trusted unless this is ``False``.
        launcher: starts clients of its own (see :class:`~gym_remote.launch.Launcher`); the server
            reserves their slots, polls it while it waits and tells it who joined, was lost or refused.
        liveness_timeout: seconds without any sign of life (heartbeats included) after which libzmq
            closes a peer's connection, and the server declares the client lost; also how long a
            member's connection may take none of the bytes sent to it.
        max_message_bytes: largest frame a peer may send.
        name: the server's name in WELCOME and logs.
        security: CURVE keys and the client keys accepted (None: plain connections).
        max_connections: connections open at once beyond which new ones are refused (default
            ``4 * num_envs + 64``); also the length of the waiting line.
        handshake_rate: connection handshakes per second one network address may start (bursts of twice
            as many, or of ``num_envs`` if more).
        spin: seconds a wait for replies busy-checks the links before it sleeps, while replies have
            lately come within that time (0: never). Waking a sleeping thread costs tens of
            microseconds, as much as a cheap env's whole step; a spin that would not pay (slow envs)
            is skipped, so it costs CPU only while replies come fast.
        data_plane: serve clients on this machine that offer it over a data channel (a Unix socket,
            :mod:`gym_remote.links.channel`) instead of ZeroMQ; False: every message travels over ZeroMQ.
    """

    def __init__(
        self,
        bind: str,
        num_envs: int,
        *,
        observation_mode: Any,
        vector_class: str = "RemoteVectorEnv",
        autoreset_mode: Any,
        allow_pickle: bool | None,
        launcher: Launcher | None = None,
        liveness_timeout: float = 10.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        name: str = "gym_remote",
        security: ServerSecurity | None = None,
        max_connections: int | None = None,
        handshake_rate: float = DEFAULT_HANDSHAKE_RATE,
        spin: float = DEFAULT_SPIN_SECONDS,
        data_plane: bool | str = True,
    ) -> None:
        self._spin = SpinGate(spin)
        self._other_threads = OtherThreads()  # a trainer thread next to the learner leaves no core for a spin
        self.num_envs = num_envs
        self.autoreset_mode = autoreset_mode
        self.liveness_timeout = liveness_timeout
        self.max_message_bytes = int(max_message_bytes)
        self.name = name
        self.started_at = time.monotonic()
        self.fleet = FleetRecorder(num_envs)  # the vector env records its results; status reports read it
        self.published: dict[str, Any] | None = None  # the last status published for other threads (publish_status)
        self._publishing = False
        self._admission_due = False  # slots freed that waiters in line may not have been offered yet
        self._status_window: deque[float] = deque()  # when the STATUS requests of the last second came
        self.session = secrets.token_hex(16)
        self.launcher = launcher
        self.max_connections = int(max_connections) if max_connections is not None else 4 * num_envs + 64
        self.members = Membership(
            num_envs,
            observation_mode=observation_mode,
            vector_class=vector_class,
            allow_pickle=allow_pickle,
            launches=launcher.launches if launcher is not None else (),
            max_waiting=self.max_connections,
        )
        self.observation_leaves: list[np.ndarray] | None = None
        self._events: deque[Joined | Lost] = deque()  # what happened, for the owner to take (peek_event)
        self._reminded_after = 0.0  # how far into the current wait for clients remind_empty last spoke
        self._seq = 0
        # replies the server stopped awaiting (landed, failed, lost or cut short), counted before each stops being
        # awaited: an interrupt may leave it one too high, never too low (see PartialBatches.news)
        self.replies_taken = 0
        self._awaited: dict[bytes, dict[int, Exchange]] = {}  # identity -> seq -> the exchange awaiting its reply
        # identity -> seqs of abandoned commands sent on a member's route whose replies have not come, oldest
        # first: with the awaited ones, what it owes (it answers in order: a reply that lost its header is the
        # oldest). Kept apart from _awaited so that the step path, which abandons nothing, never touches it.
        self._late: dict[bytes, deque[int]] = {}
        self._last_checks = 0.0
        self._last_look = 0.0  # (perf_counter) see _look_around
        self._links: dict[bytes, _Links] = {}  # members' links, by identity
        self._offered: dict[bytes, Channel] = {}  # channels of clients not (yet) admitted: in line
        self._connections: dict[bytes, Any] = {}  # what libzmq told of the connection of each HELLO's sender
        self._unclaimed_channels: set[str] = set()  # client names already told why they got no channel
        self._slab_members: list[tuple[ClientInfo, Channel]] | None = None  # see slab_members (None: to make)

        self.security = security
        self.context = new_context()  # its own: the gatekeeper answers for every socket of its context
        self.gatekeeper = Gatekeeper(
            self.context,
            security.authorized if security is not None else None,
            max_connections=self.max_connections,
            handshake_rate=handshake_rate,
            handshake_burst=num_envs,  # a whole fleet on one host (one address) joins at once
        )
        # The data channel listens before the router binds a fixed endpoint: clients waiting for this learner (a
        # fleet that keeps serving) connect the moment it binds, and must find the channel there already.
        listener = None
        if data_plane and _fixed(bind):
            listener = self._listen_for_channels([address_for(address) for address in reachable_endpoints(bind)])
        try:
            self.router = Router(
                self.context,
                bind,
                liveness_timeout=liveness_timeout,
                max_message_bytes=self.max_message_bytes,
                security=security,
                gatekeeper=self.gatekeeper,
                tell_peer=_is_hello,
            )
        except OSError:
            if listener is not None:
                listener.close()
            self.gatekeeper.close()
            terminate(self.context)
            raise
        self.gatekeeper.start()
        self.addresses = reachable_endpoints(self.router.bound)
        self.address = self.addresses[0]  # the one to give to clients
        names = [address_for(address) for address in self.addresses]
        if data_plane and (listener is None or listener.names != names):  # (a port or a host name resolved)
            if listener is not None:
                listener.close()
            listener = self._listen_for_channels(names)
            if listener is None:
                logger.warning("no same-host data plane for %s (every message goes over ZeroMQ)", self.address)
        self.listener = listener
        self.mux = Multiplexer(self.router, listener)
        logger.info(
            "server %s listening on %s for %d slots (%s)",
            name,
            self.address if len(self.addresses) == 1 else f"{self.router.bound} ({', '.join(self.addresses)})",
            num_envs,
            f"CURVE, {security.how}" if security is not None else "no authentication",
        )

    def _listen_for_channels(self, names: list[bytes]) -> Listener | None:
        """The data channel listener under ``names`` (PROTOCOL.md §13.1), or None if one is taken (another server
        binds this endpoint too)."""
        try:
            return Listener(names, max_frame_bytes=self.max_message_bytes)
        except OSError as error:
            logger.debug("cannot listen for data channels at %s: %s", names, error)
            return None

    # -- slots -------------------------------------------------------------------------------------

    def set_observation_buffers(self, leaves: list[np.ndarray] | None) -> None:
        """The batch's observation leaf arrays, which replies are received into (None: value path)."""
        self.observation_leaves = leaves
        for client in self.members.clients.values():
            self._prepare_targets(client)

    def peek_event(self) -> Joined | Lost | None:
        """The oldest of what happened that its owner has not taken yet (joins and losses, in order), or None."""
        return self._events[0] if self._events else None

    def pop_event(self) -> None:
        """The oldest event is taken care of (see :meth:`peek_event`)."""
        if self._events:
            self._events.popleft()

    @property
    def has_events(self) -> bool:
        return bool(self._events)

    def wait_for_slots(self, timeout: float, slots: Sequence[int] | None = None, what: str = "all slots") -> None:
        """Handle joins (and leaves) until every slot in ``slots`` (default: all) is served.

        Raises:
            RemoteTimeoutError: ``timeout`` seconds passed; the message names the empty slots, says how
                long they have been empty and how many slots are served.
        """
        needed = list(range(self.num_envs)) if slots is None else list(slots)
        started = time.monotonic()
        deadline = started + timeout
        while empty := self.members.empty_slots(needed):
            now = time.monotonic()
            if now > deadline:
                raise RemoteTimeoutError(self.empty_slots_message(timeout, what, empty))
            self.remind_empty(empty, now - started, timeout)
            self._poll_once()

    def empty_slots_message(self, timeout: float, what: str, empty: list[int]) -> str:
        """The error text for a wait on ``empty`` slots that ran out after ``timeout`` seconds."""
        return self.members.empty_slots_message(timeout, what, empty, self.address)

    def wait_for_first_client(self, timeout: float) -> None:
        """Handle joins until the vector's spaces are known (the first client brings them)."""
        started = time.monotonic()
        deadline = started + timeout
        while self.members.observation_space is None:
            self.remind_empty(self.members.empty_slots(), time.monotonic() - started, timeout)
            if time.monotonic() > deadline:
                raise RemoteTimeoutError(
                    f"timed out after {timeout:g} s waiting for a first client at {self.address} "
                    "to learn the spaces (pass observation_space and action_space, or gym-remote serve --env ENV_ID, "
                    "to skip this wait)"
                )
            self._poll_once()

    def poll(self) -> None:
        """Handle the control messages that arrived (joins, leaves), waiting at most ``POLL_SECONDS``."""
        self._poll_once()

    def lose(self, client: ClientInfo, reason: str, *, tell: bool = True) -> None:
        """Declare ``client`` lost: free its slots, tell it (if it can still hear), let waiters in.

        The loss is recorded (its slots freed, the event queued) before anything that an interrupt can come out of
        (the EVICT's send checks for signals); waiters an interrupt kept out are let in by the next checks."""
        if self.members.lose(client.identity, reason) is None:
            return
        self._events.append(Lost(client, reason))
        self._admission_due = True
        for exchange in self._awaited.pop(client.identity, {}).values():
            self.replies_taken += 1
            if exchange.pending.pop(client.identity, None) is not None:
                exchange.lost.append(client)
        if tell:
            self._try_send(client.identity, protocol.message(Kind.EVICT, {"reason": reason}))
        self._drop_links(client.identity)
        if self.launcher is not None:
            self.launcher.on_lost(client)
        self._admit_waiters()
        self._tell_loss(client, reason)

    def _tell_loss(self, client: ClientInfo, reason: str) -> None:
        """One line on a loss: a warning (the slots' episodes end early), except for a client that reconnected."""
        empty = self.members.empty_slots(client.slots)
        then = f"; slots {format_slots(empty)} wait for a client" if empty else ""
        what = "left (it said goodbye)" if reason == LEFT else f"is lost: {reason}"
        logger.log(
            logging.INFO if reason == RECONNECTED else logging.WARNING,
            "%s %s; %d of %d slots served%s",
            client.describe(),
            what,
            self.members.served,
            self.num_envs,
            then,
        )

    def remind_empty(self, empty: list[int], waited: float, limit: float) -> None:
        """Say (every :data:`REMIND_SECONDS` of a wait) which slots still wait for a client, and for how long more.

        The launcher is asked first (every time): it raises if it knows that some of them will get no client soon.
        """
        if self.launcher is not None:
            self.launcher.check_empty(empty)
        if waited < self._reminded_after + REMIND_SECONDS:
            if waited < self._reminded_after:  # a new wait
                self._reminded_after = 0.0
            return
        self._reminded_after = waited
        left = "without limit" if limit == math.inf else f"for up to {max(0.0, limit - waited):.0f} s more"
        logger.warning(
            "slots %s have had no client for %.0f s (%d of %d served); waiting %s; clients connect to %s",
            format_slots(empty),
            waited,
            self.members.served,
            self.num_envs,
            left,
            self.address,
        )

    # -- commands ----------------------------------------------------------------------------------

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def start(
        self,
        clients: Sequence[ClientInfo],
        build: Callable[[ClientInfo, int], list[Any]],
        sink: Sink,
        *,
        reply_kind: Kind,
        what: str,
    ) -> Exchange:
        """Send one command to each of ``clients``; their replies land in ``sink`` while the server waits.

        ``build(client, seq)`` makes the command's frames (for all clients before any is sent, so that a
        value that cannot be encoded stops the command everywhere). Sends never block. Replies are
        handled by :meth:`wait` (of this or any later exchange), in arrival order. A client that goes
        away meanwhile (it left, its link broke, its launcher found its process dead) or sends a
        malformed reply is declared lost (:meth:`lose`) and listed in ``Exchange.lost``.
        """
        exchange = self.prepare(clients, build, sink, reply_kind=reply_kind, what=what)
        self.launch(exchange)
        return exchange

    def prepare(
        self,
        clients: Sequence[ClientInfo],
        build: Callable[[ClientInfo, int], list[Any]],
        sink: Sink,
        *,
        reply_kind: Kind,
        what: str,
    ) -> Exchange:
        """The exchange :meth:`start` would send, built but not sent (:meth:`launch` sends it): so that its
        owner can record it before anything goes out."""
        seq = self.next_seq()
        exchange = Exchange(seq, reply_kind, sink, what)
        exchange.commands = [(client, build(client, seq)) for client in clients]
        if self._spin.crowded:  # clients that spin waiting for commands would take the core this process needs
            for _, frames in exchange.commands:
                frames[0] = protocol.add_flags(frames[0], protocol.FLAG_CROWDED)
        return exchange

    def launch(self, exchange: Exchange) -> None:
        """Send the commands of a prepared exchange. An interrupt while sending abandons it: replies to what
        went out are dropped as late, and the exchange awaits nothing."""
        commands, exchange.commands = exchange.commands, []
        try:
            for client, frames in commands:
                self._await(exchange, client)
                if not self.send(client, frames):
                    self._unsent(exchange, client)
        except BaseException:
            self.abandon(exchange)
            raise

    def slab_members(self) -> list[tuple[ClientInfo, Channel]] | None:
        """Every member and its data channel, if every slot is served by a member whose STEPs for all its envs
        travel in its slab (PROTOCOL.md §13.6); else None."""
        members = self._slab_members
        if members is None:  # (made again after every join and loss)
            members = []
            for client in self.members.clients.values():
                data = self.slab_channel(client)
                if data is None:
                    members = []
                    break
                members.append((client, data))
            if sum(client.count for client, _ in members) != self.num_envs:
                members = []
            self._slab_members = members
        return members or None

    def slab_channel(self, client: ClientInfo) -> Channel | None:
        """The data channel of member ``client`` if its STEPs for all its envs travel in its slab (§13.6), else None."""
        links = self._links.get(client.identity)
        data = links.data if links is not None else None
        return data if type(data) is Channel and data.slabs else None

    def start_in_slabs(
        self, members: list[tuple[ClientInfo, Channel]], actions: np.ndarray, sink: Sink
    ) -> Exchange | None:
        """:meth:`start` a STEP for every slot whose actions, a contiguous batch in the action space's own dtype,
        are written straight in the slabs of ``members`` (from :meth:`slab_members`): no message is built. None,
        with nothing sent, if a slab cannot take it now."""
        posts = self.slab_posts(members, actions, [client.rows for client, _ in members])
        if posts is None:
            return None
        exchange = Exchange(self.next_seq(), Kind.RESULT, sink, "step")
        self.launch_in_slabs(exchange, posts)
        return exchange

    @staticmethod
    def slab_posts(
        members: Sequence[tuple[ClientInfo, Channel]], actions: np.ndarray, rows: Sequence[slice | np.ndarray]
    ) -> list[tuple[ClientInfo, Channel, np.ndarray]] | None:
        """What :meth:`launch_in_slabs` posts: each member with the rows of ``actions`` (``rows[i]`` for
        ``members[i]``) for all its envs; None if a slab cannot take them now (it is busy, or of another size)."""
        posts = []
        for (client, channel), member_rows in zip(members, rows, strict=True):
            action_rows = actions[member_rows]
            if not channel.slab_free() or action_rows.nbytes != channel.slab_frames()[0][1].nbytes:
                return None
            posts.append((client, channel, action_rows))
        return posts

    def launch_in_slabs(
        self, exchange: Exchange, posts: list[tuple[ClientInfo, Channel, np.ndarray]], flags: int = 0
    ) -> None:
        """Send ``exchange``'s STEP (with ``flags``) to each member of ``posts`` (from :meth:`slab_posts`) by
        writing its actions in its slab. As :meth:`launch`, an interrupt abandons the exchange."""
        seq = exchange.seq
        if self._spin.crowded:
            flags |= protocol.FLAG_CROWDED
        try:
            for client, channel, action_rows in posts:
                self._await(exchange, client)
                frames = channel.slab_frames()[0]
                frames[0][:] = protocol.pack_header(Kind.STEP, seq, client.count, flags)
                # numpy's stubs give arrays their buffer protocol (__buffer__) from Python 3.12 on only
                frames[1][:] = memoryview(np.ascontiguousarray(action_rows)).cast("B")  # pyright: ignore[reportArgumentType]
                try:
                    channel.post_slab()
                except LinkBroken as error:
                    self._unsent(exchange, client)
                    self.lose(client, str(error), tell=False)
                    continue
                exchange.slabs.append((client.identity, channel))
        except BaseException:
            self.abandon(exchange)
            raise

    def _await(self, exchange: Exchange, client: ClientInfo) -> None:
        """``exchange`` awaits a reply from ``client`` (before its command goes out)."""
        identity = client.identity
        exchange.sent_at[identity] = time.monotonic()  # (first: what abandon() looks at to stop awaiting)
        exchange.pending[identity] = client
        by_seq = self._awaited.get(identity)
        if by_seq is None:
            by_seq = self._awaited[identity] = {}
        by_seq[exchange.seq] = exchange

    def _unsent(self, exchange: Exchange, client: ClientInfo) -> None:
        """The command of ``exchange`` did not reach ``client``: no reply is awaited."""
        self.replies_taken += 1
        if exchange.pending.pop(client.identity, None) is not None:
            self._unawait(client.identity, exchange.seq)  # (a client lost while sending is listed by lose())
            exchange.lost.append(client)

    def wait(self, done: Callable[[], bool], deadline: float) -> bool:
        """Handle messages (replies, joins, leaves) until ``done()``; False if ``deadline`` passed first.

        ``done`` is asked after every message and must not change anything.
        """
        remaining = deadline - time.monotonic()
        while not done():
            self._poll_once(min(POLL_SECONDS, max(0.0, remaining)), spin=True)
            remaining = deadline - time.monotonic()
            if remaining < 0 and not done():
                return False
        return True

    def abandon(self, exchange: Exchange) -> None:
        """Stop awaiting the replies ``exchange`` still lacks: when they come, they are dropped as late."""
        self.replies_taken += len(exchange.pending)
        for identity in exchange.pending:
            if self._replies_on_route(identity):
                late = self._late.get(identity)
                if late is None:
                    late = self._late[identity] = deque()
                late.append(exchange.seq)
        # every member it went to: one whose reply an interrupt cut short between leaving ``pending`` and leaving
        # the awaited ones is awaited no more either
        for identity in exchange.sent_at:
            self._unawait(identity, exchange.seq)
        exchange.pending.clear()

    def exchange(
        self,
        clients: Sequence[ClientInfo],
        build: Callable[[ClientInfo, int], list[Any]],
        sink: Sink,
        *,
        reply_kind: Kind,
        timeout: float,
        what: str,
    ) -> list[ClientInfo]:
        """:meth:`start` a command and :meth:`finish` it: send it to ``clients`` and handle every reply.

        Returns:
            The clients lost during the exchange.
        """
        exchange = self.start(clients, build, sink, reply_kind=reply_kind, what=what)
        try:
            return self.finish(exchange, time.monotonic() + timeout, timeout)
        except BaseException:
            self.abandon(exchange)  # (an interrupt as finish() was entered, before it could)
            raise

    def finish(self, exchange: Exchange, deadline: float, timeout: float) -> list[ClientInfo]:
        """Wait for every reply of ``exchange`` (until ``deadline``, ``timeout`` seconds after it began).

        However the wait ends (a reply, a timeout, an error, an interrupt), the exchange is over
        afterwards: replies it still lacked are dropped as late when they come.

        Returns:
            The clients lost during the exchange.

        Raises:
            RemoteEnvError: an env raised in a client (that of the lowest slot, naming it), raised
                after every other client has answered, so that no reply is left to confuse a later command.
            RemoteTimeoutError: a client, alive but silent, did not answer in time.
        """
        try:
            if exchange.slabs:
                self._spin_on_slabs(exchange)
            if not self.wait(lambda: not exchange.pending, deadline):
                waiting = "; ".join(client.describe() for client in exchange.pending.values())
                raise RemoteTimeoutError(f"timed out after {timeout:g} s waiting for {exchange.what} from {waiting}")
        finally:
            self.abandon(exchange)
        if exchange.errors:  # the first env in slot order, as SyncVectorEnv meets them
            raise min((error for _, error in exchange.errors), key=lambda error: (error.slot is None, error.slot or 0))
        return exchange.lost

    def _spin_on_slabs(self, exchange: Exchange) -> None:
        """Handle the replies of ``exchange`` that come in its members' slabs while the spin lasts (one look if it
        does not spin): a look at a word each, no system call. What does not come by then is left to
        :meth:`wait`; the other links are looked at every :data:`LOOK_SECONDS` (:meth:`_look_around`)."""
        gate, pending, slabs = self._spin, exchange.pending, exchange.slabs
        clock, yield_core = time.perf_counter, os.sched_yield
        since = clock()
        until = since + gate.now()
        while True:
            for identity, channel in slabs:
                if identity in pending and channel.slab_holds():  # then receive() has the record: no check per spin
                    self._dispatch(arrival(identity, channel, channel.receive()))  # pyright: ignore[reportArgumentType]
            now = clock()
            if not pending:
                gate.waited(now - since)
                break
            if now >= until:
                return
            yield_core()
        if now - self._last_look >= LOOK_SECONDS:
            self._look_around()

    def send(self, client: ClientInfo, frames: list[Any]) -> bool:
        """Send one message to ``client`` on its link; if the link is broken, declare it lost and return False."""
        links = self._links.get(client.identity)
        if links is None:
            return False
        try:
            links.data.send(frames)
            return True
        except LinkBroken as error:
            self.lose(client, str(error), tell=False)
            return False

    # -- observability -----------------------------------------------------------------------------

    def stats(self) -> list[dict[str, Any]]:
        """One dict per slot: who serves it and how well (see ``RemoteVectorEnv.stats``)."""
        return self.members.stats()

    def connection_stats(self) -> dict[str, Any]:
        """The gate's view: security, connections open, handshakes accepted and denied, clients in line."""
        return {
            "address": self.address,
            "addresses": list(self.addresses),
            "security": self._security_text(),
            **self.gatekeeper.stats(),
            "clients": len(self.members.clients),
            "waiting": len(self.members.waiting),
            "waiting_clients": [str(waiter.hello.get("name"))[:200] for waiter in self.members.waiting.values()],
            "recent_refusals": list(self.members.refusals),
            "counts": dict(self.members.counts),
            "data_channel_refusals": dict(self.listener.refused) if self.listener is not None else {},
        }

    # -- closing -----------------------------------------------------------------------------------

    def close(
        self, timeout: float = 5.0, gone: Callable[[ClientInfo], bool] | None = None, stop_clients: bool = False
    ) -> None:
        """Send CLOSE to every client (and waiter), wait up to ``timeout`` for their BYE, close the links.

        ``gone(client)`` tells of clients known to be dead already, which are not waited for. ``stop_clients``:
        the CLOSE tells clients that keep serving across runs to exit too (PROTOCOL.md §9).
        """
        self.gatekeeper.policy.closing = True  # clients that keep serving must find the next learner, not this one
        clients = list(self.members.clients.values())
        close = protocol.message(Kind.CLOSE, {"stop": stop_clients}, seq=self.next_seq())
        waiting = set()
        for identity in [client.identity for client in clients if gone is None or not gone(client)]:
            if self._try_send(identity, close):
                waiting.add(identity)
        for identity in self.members.waiting:
            self._try_send(identity, close)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            event = self.mux.next(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            if isinstance(event, Arrival):
                event.source.consume()
                event.message.skip_rest()
                if _kind_of(event.header) == Kind.BYE:
                    waiting.discard(event.identity)
            elif isinstance(event, Broken):
                waiting.discard(event.identity)
                self._drop_links(event.identity)
        if waiting:
            logger.warning("%d client(s) did not acknowledge CLOSE within %g s", len(waiting), timeout)
        logger.info(
            "server %s closed after %.1f s: told %d client(s) %s; %s",
            self.name,
            time.monotonic() - self.started_at,
            len(clients) + len(self.members.waiting),
            "to stop" if stop_clients else "the run is over",
            self.members.summary(),
        )
        self.members.clear()
        for identity in [*self._links, *self._offered]:
            self._drop_links(identity)
        if self.listener is not None:
            self.listener.close()
        self.gatekeeper.close(self.router.socket)
        self.router.close()
        terminate(self.context)

    # -- waiting -----------------------------------------------------------------------------------

    def _poll_once(self, timeout: float = POLL_SECONDS, spin: bool = False) -> None:
        """Handle the next event (waiting at most ``timeout`` seconds for one), then the periodic checks.

        ``spin``: a wait for replies, which first busy-checks for them while replies come fast.
        """
        gate = self._spin
        if spin and gate.spin:
            waiting_since = time.perf_counter()
            event = self.mux.next(timeout, gate.now())
            gate.waited(time.perf_counter() - waiting_since)
        else:
            event = self.mux.next(timeout)
        self._dispatch(event)
        # also while messages keep coming: a dead client among busy ones must still be noticed
        self._checks()

    def _dispatch(self, event: Arrival | Broken | CutShort | None) -> None:
        if isinstance(event, Arrival):
            self._handle(event)
            if type(event.source) is Channel:  # (handled: the client's next reply may use the block at once)
                event.source.release()
        elif isinstance(event, Broken):
            self._on_broken(event)
        elif isinstance(event, CutShort):
            self._on_cut_short(event)

    def _look_around(self) -> None:
        """Handle what is there on every link now, without waiting (at most :data:`LOOK_EVENTS` events), then the
        periodic checks: what a wait does for the links a step that lands straight from the slabs never waits on
        (the router's joins and probes, the listener, the other channels)."""
        self._last_look = time.perf_counter()
        for _ in range(LOOK_EVENTS):
            event = self.mux.look()
            if event is None:
                break
            self._dispatch(event)
        self._checks()

    def _checks(self) -> None:
        """At most every ``POLL_SECONDS``: tell the spin how busy the process's other threads were, poll the
        launcher, and look at every member whose reply is awaited, all in one pass: probe those not heard from
        lately, lose those whose connection takes no bytes."""
        now = time.monotonic()
        if now - self._last_checks < POLL_SECONDS:
            return
        self._last_checks = now
        if self.fleet.due(now):
            slots = self.members.slots
            self.fleet.sample(now, {slot: client.latency for slot, client in enumerate(slots) if client is not None})
        if self._publishing and (self.published is None or now - self.published["published_at"] >= 1.0):
            self.published = {**self.status(now), "published_at": now}  # (replaced whole: readers never see a change)
        if self._admission_due:  # (an interrupt cut short the admission that follows a loss)
            self._admit_waiters()
        crowded = self._other_threads.crowded()
        if crowded is not None:  # (looked at even without a spin of its own: the commands tell clients that spin)
            self._spin.crowded = crowded
        if self.launcher is not None:
            for index, code in self.launcher.poll():
                for client in [client for client in self.members.clients.values() if client.launch_index == index]:
                    self.lose(client, f"its process exited with code {code}", tell=False)
        clients = self.members.clients
        for client in [clients[identity] for identity in self._awaited if identity in clients]:
            links = self._links.get(client.identity)
            if links is None:
                continue
            stalled = links.route.stalled_for(now)
            if stalled >= self.liveness_timeout:
                self.lose(client, f"its connection took none of the data sent to it for {stalled:.1f} s", tell=False)
            elif now - max(client.last_seen, client.last_probe) >= PROBE_SECONDS:
                client.last_probe = now
                self._probe(client, links.route)

    def _probe(self, client: ClientInfo, route: Route) -> None:
        """Check that ``client``'s connection still routes."""
        try:
            route.send([protocol.pack_header(Kind.PING)])
        except LinkBroken as error:
            self.lose(client, str(error), tell=False)

    # -- handling what arrives ---------------------------------------------------------------------

    def _handle(self, arrival: Arrival) -> None:
        """Hand a message to the exchange awaiting it, or handle it as a control message.

        The message stays current (handed out again by the next wait) until it is consumed: a reply once
        its exchange stops awaiting it, before it lands; anything else once handled. So an interrupt never
        loses a message unseen: a reply cut short after that point just does not land (its slot takes
        actions again), and a control message cut short is handled again.
        """
        identity = arrival.identity
        try:
            header = protocol.parse_header(arrival.header)
        except ProtocolError as error:
            arrival.source.consume()
            arrival.message.skip_rest()
            self._on_malformed(identity, error)
            return
        seq = header.seq
        if self._late and header.kind in _REPLY_KINDS:
            self._settle_late(identity, seq)
        awaited = self._awaited.get(identity)
        exchange = awaited.get(seq) if awaited is not None else None
        if exchange is None:
            try:
                self._handle_other(identity, header, arrival)
            except Exception:
                arrival.source.consume()
                raise
            arrival.source.consume()  # not if an interrupt stopped it: then it is handled again
            return
        self.replies_taken += 1
        client = exchange.pending.pop(identity, None)
        self._unawait(identity, seq)
        arrival.source.consume()
        message = arrival.message
        if client is None:  # handed out again after an interrupt cut its first handling short: it does not land
            message.skip_rest()
            return
        if header.version != protocol.PROTOCOL_VERSION:
            message.skip_rest()
            logger.error("%s sent a malformed reply: protocol version %d", client.describe(), header.version)
            exchange.lost.append(client)
            self.lose(client, f"it sent a malformed reply in protocol version {header.version}")
            return
        client.last_seen = time.monotonic()
        client.latency = client.last_seen - exchange.sent_at[identity]
        try:
            if header.kind == exchange.reply_kind:
                self._land(exchange.sink, client, header, arrival)
            elif header.kind == Kind.ERROR:
                report = self._read_value(client, header, message)
                exchange.errors.append((client, client.env_error(report, exchange.what)))
            elif header.kind == Kind.BYE:
                message.skip_rest()
                exchange.lost.append(client)
                self.lose(client, LEFT, tell=False)
            else:
                raise ProtocolError(
                    f"expected {exchange.reply_kind.name} for {exchange.what}, got {kind_name(header.kind)}"
                )
        except ProtocolError as error:
            message.skip_rest()
            logger.error("%s sent a malformed reply to %s: %s", client.describe(), exchange.what, error)
            exchange.lost.append(client)
            self.lose(client, f"it sent a malformed reply to {exchange.what}: {error}")

    def _land(self, sink: Sink, client: ClientInfo, header: protocol.Header, arrival: Arrival) -> None:
        """Receive the rest of a reply into ``sink``: a RESULT's array frames into its targets, then its value."""
        message = arrival.message
        if header.kind != Kind.RESULT:
            sink.land(client, header, None, self._read_value(client, header, message))
            return
        message.next_into(sink.targets(client, header), "RESULT")
        if header.flags & FLAG_VALUE:
            value = self._read_value(client, header, message)
        elif message.more():
            raise ProtocolError("RESULT has frames after its observations but no value section")
        else:
            value = None
        sink.land(client, header, arrival.header, value)
        client.steps += 1

    def _read_value(self, client: ClientInfo, header: protocol.Header, message: Message) -> Any:
        """The value section that ends ``message`` (None if the header has none)."""
        frames = message.rest()
        if not header.flags & FLAG_VALUE:
            if frames:
                raise ProtocolError(f"{len(frames)} unexpected frames without a value section")
            return None
        return protocol.read_value(frames, allow_pickle=client.trusted)

    def _on_malformed(self, identity: bytes, error: ProtocolError) -> None:
        """A message whose header is malformed: its sender is lost if it is a member awaited, else told."""
        client = self.members.clients.get(identity) if identity in self._awaited else None
        if client is not None:
            logger.error("%s sent a malformed reply: %s", client.describe(), error)
            self.lose(client, f"it sent a malformed reply: {error}")
        else:
            logger.warning("dropping a malformed message from peer %s: %s", identity.hex()[:16], error)
            self._try_send(identity, _error_message(str(error)))

    def _on_broken(self, broken: Broken) -> None:
        """A link broke: its member is lost; a client in line loses the channel it offered."""
        client = self.members.clients.get(broken.identity)
        if client is not None:
            if "malformed" in broken.reason:
                logger.error("%s: %s", client.describe(), broken.reason)
            self.lose(client, broken.reason, tell=False)
        else:
            self._drop_links(broken.identity)

    def _on_cut_short(self, cut: CutShort) -> None:
        """A message an interrupt cut short while it was read (it is gone): if it was a reply, its exchange stops
        awaiting it, as for a reply cut short while it landed (a slot in partial batches takes actions again).

        Which reply: that of the command its header names, if the header is known; else, from a known sender,
        the oldest it owes, awaited or abandoned (a client answers in order); else, if the command went to one
        member only, that member's. If nothing awaits that reply any more (the call it answered was
        interrupted), nothing changes.
        """
        try:
            seq = protocol.parse_header(cut.header).seq if cut.header is not None else None
        except ProtocolError:
            seq = None
        identity = cut.identity
        if identity is None and seq is not None:
            owners = [owner for owner, by_seq in self._awaited.items() if seq in by_seq]
            if len(owners) == 1 and len(self._awaited[owners[0]][seq].pending) == 1:
                identity = owners[0]
        awaited = self._awaited.get(identity, {}) if identity is not None else {}
        if identity is not None:
            if cut.header is None:
                on_route = self._replies_on_route(identity)
                seq = min([*self._late.get(identity, ()), *awaited], default=None) if on_route else None
            if seq is not None:
                self._settle_late(identity, seq)
        if identity is not None and seq in awaited:  # (nothing is awaited without an identity)
            exchange = awaited[seq]
            self.replies_taken += 1
            exchange.pending.pop(identity, None)
            self._unawait(identity, seq)
        logger.info("an interrupt cut short a message (sender %s, seq %s); it was dropped", identity, seq)

    def _handle_other(self, identity: bytes, header: protocol.Header, arrival: Arrival) -> None:
        """A message that is not an awaited reply: a join, a leave, a late reply, or a stray."""
        kind, message = header.kind, arrival.message
        if kind == Kind.HELLO:
            self._on_hello(identity, header, arrival)
            return
        client = self.members.clients.get(identity)
        if kind == Kind.ERROR and client is None:
            self._on_start_failure(message)
            return
        message.skip_rest()
        if kind == Kind.STATUS:
            self._answer_status(identity, header.seq)
            return
        if kind == Kind.BYE:
            if client is not None:
                self.lose(client, LEFT, tell=False)
            elif self._leave_line(identity):
                logger.info("a waiting client left the line; %d waiting", len(self.members.waiting))
        elif client is None:
            logger.warning("ignoring %s from a peer that is not a member", kind_name(kind))
            self._try_send(identity, protocol.message(Kind.EVICT, {"reason": "not a member: send HELLO to join"}))
        else:
            client.last_seen = time.monotonic()
            logger.debug("dropping a late %s (seq %d) from %s", kind_name(kind), header.seq, client.describe())

    def _answer_status(self, identity: bytes, seq: int) -> None:
        """STATUS_REPORT for a peer that asked (PROTOCOL.md §9.1); at most :data:`STATUS_PER_SECOND` a second."""
        now = time.monotonic()
        window = self._status_window
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) >= STATUS_PER_SECOND:
            logger.debug("dropping a STATUS request: more than %d this second", STATUS_PER_SECOND)
            return
        window.append(now)
        if self.members.private:
            text = "this server serves only the local clients it started itself; it reports to no one"
            self._try_send(identity, _error_message(text, "PermissionError", seq))
            return
        self._try_send(identity, protocol.message(Kind.STATUS_REPORT, self.status(now), seq=seq))

    def publish_status(self) -> None:
        """From now on, publish the status in :attr:`published` once a second (while the learner is inside a call),
        for a thread that serves it (``gym_remote.metrics``): it reads a finished report, never the server."""
        self._publishing = True
        self.published = {**self.status(), "published_at": time.monotonic()}

    def status(self, now: float | None = None) -> dict[str, Any]:
        """The fleet's status, as STATUS_REPORT carries it (PROTOCOL.md §9.1); from the first one on, episodes count."""
        now = time.monotonic() if now is None else now
        self.fleet.count_episodes(now - self.started_at)
        gate = self.gatekeeper.stats()
        counts = dict(self.members.counts)
        refused = self.members.refused_by_code()
        for reason, count in gate["handshakes_denied"].items():
            refused[f"handshake: {reason}"] = count
        server = {
            "server": self.name,
            "protocol": protocol.PROTOCOL_VERSION,
            "address": self.address,
            "addresses": list(self.addresses),
            "uptime": now - self.started_at,
            "num_envs": self.num_envs,
            "served": self.members.served,
            "autoreset_mode": self.autoreset_mode.value,
            "security": self._security_text(),
            "counts": counts,
        }
        return fleet_report(
            server=server,
            slots=self.members.stats(),
            recorder=self.fleet,
            losses=self.members.slot_losses,
            waiting=self.members.waiting_clients(),
            refused=refused,
            now=now,
        )

    def _security_text(self) -> str:
        return f"CURVE ({self.security.how})" if self.security is not None else "none"

    def _on_start_failure(self, message: Message) -> None:
        """An ERROR from a peer that is not a member: a client whose envs failed to start."""
        try:
            report = protocol.read_value(message.rest())
            launch = report.get("launch") or {}
            text = f"{report['type']}: {report['message']}"
        except (ProtocolError, KeyError, TypeError, AttributeError) as error:
            logger.warning("ignoring a malformed ERROR from an unknown peer: %s", error)
            return
        index = self.members.verified_launch(launch)
        if index is not None and self.launcher is not None:
            self.launcher.failed(index, report)
        logger.error("client %r failed before joining: %s", str(report.get("name"))[:200], text)

    def _on_hello(self, identity: bytes, header: protocol.Header, arrival: Arrival) -> None:
        members = self.members
        if identity in members.clients:  # a repeated HELLO: answer as before
            arrival.message.skip_rest()
            if not self._welcome(members.clients[identity]):
                self.lose(members.clients[identity], "its connection is gone", tell=False)
            return
        try:
            frames = arrival.message.rest()
        except ProtocolError as error:  # e.g. too many frames
            self._answer(identity, members.refuse_malformed(identity, error))
            return
        peer = arrival.peer
        hello = members.parse_hello(identity, header.version, frames)
        if isinstance(hello, Refuse):
            self._answer(identity, hello)
            return
        previous = members.previous_member(hello)
        if previous is not None:  # the same client, reconnected: its old membership ends here
            self.lose(previous, RECONNECTED, tell=False)
        if peer is not None:
            self._connections[identity] = peer
        self._take_offer(identity, hello)
        member_peer = Peer(peer.address, peer.key) if peer is not None else Peer()
        self._answer(identity, members.hello(identity, hello, member_peer))

    def _take_offer(self, identity: bytes, hello: dict[str, Any]) -> None:
        """Pair the data channel a HELLO offers with the connection its client greeted, and map the shared block
        handed over with it (PROTOCOL.md §13)."""
        token = data_channel_token(hello)
        if token is None or self.listener is None or type(hello.get("pid")) is not int:
            return
        offered = self.listener.take(token, hello["pid"], identity)
        name = str(hello.get("name"))[:200]
        if offered is None:
            self._warn_once_for(
                name,
                "client %r offered a data channel, but no connection from its process (pid %s) greeted with its "
                "token: it is served over ZeroMQ",
                name,
                hello["pid"],
            )
            return
        previous = self._offered.pop(identity, None)
        if previous is not None and previous is not offered:  # (the same: a HELLO handled again, see take)
            previous.close()
        self._offered[identity] = offered
        if offered.block_fd >= 0:
            refused = offered.attach_block()
            if refused:
                self._warn_once_for(name, "client %r: %s; it is served over its data channel's socket", name, refused)

    def _warn_once_for(self, name: str, text: str, *args: Any) -> None:
        """Log why client ``name`` got less of the data plane than it offered, once per client name."""
        if name not in self._unclaimed_channels:
            self._unclaimed_channels.add(name)
            logger.warning(text, *args)

    def _answer(self, identity: bytes, decision: Admit | Refuse) -> None:
        """Carry out what membership decided for ``identity``: welcome it, or refuse it."""
        if isinstance(decision, Admit):
            self._welcome_and_join(decision.client)
            return
        if decision.waiting:
            logger.debug("%s waits in line: %s", decision.client, decision.reason)
        else:
            logger.warning("refused %s: %s", decision.client, decision.reason)
            self._drop_links(identity)
        answer = {"code": decision.code, "reason": decision.reason, "waiting": decision.waiting}
        if not self.router.try_send(identity, protocol.message(Kind.REFUSE, answer)) and decision.waiting:
            self._leave_line(identity)  # it is gone: it does not hold a place in line
        if decision.launch_index is not None and self.launcher is not None:
            self.launcher.refused(decision.launch_index, decision)

    def _welcome_and_join(self, client: ClientInfo) -> None:
        first = self.members.observation_space is None
        if not self._welcome(client):  # it went away (e.g. it died waiting in line): the slots stay free
            logger.info("client %r went away before its WELCOME", client.name)
            self._leave_line(client.identity)
            return
        # links and targets first: a member always has them, however an interrupt cuts this short
        self._attach(client)
        self._prepare_targets(client)
        self.members.join(client)
        self.fleet.forget_latencies(client.slots)
        logger.info(
            "%s joined from %s (pid %d, %s%s, over %s); %d of %d slots served",
            client.describe(),
            client.host,
            client.pid,
            client.peer_address or "local",
            f", key {client.key!r}" if client.key else "",
            _PLANE_NAMES[client.plane],
            self.members.served,
            self.num_envs,
        )
        self._events.append(Joined(client))
        if self.launcher is not None:
            self.launcher.on_join(client)
        if first:
            self._admit_waiters()  # those that waited for the spaces to be known

    def _attach(self, client: ClientInfo) -> None:
        """The links of a new member: its route, and the data channel it offered if the server took it."""
        identity = client.identity
        route = self.router.route(identity, self._connections.pop(identity, None))
        channel = self._offered.pop(identity, None)
        self._links[identity] = _Links(route, channel if channel is not None else route)
        self._slab_members = None
        if channel is not None:
            self.mux.add(identity, channel)
            client.plane = channel.plane

    def _drop_links(self, identity: bytes) -> None:
        """Forget the links of ``identity`` (a member's, or the channel a client in line offered) and close
        its data channel."""
        self._connections.pop(identity, None)
        self._late.pop(identity, None)
        channels = [self._offered.pop(identity, None), self.mux.remove(identity)]
        self._links.pop(identity, None)
        self._slab_members = None
        for channel in channels:
            if channel is not None:
                channel.close()

    def _leave_line(self, identity: bytes) -> bool:
        """The client in line ``identity`` gives up its place (and the data channel it offered)."""
        self._drop_links(identity)
        return self.members.leave_line(identity)

    def _admit_waiters(self) -> None:
        """Give free slots to the clients waiting in line, first come first served."""
        self._admission_due = True  # (until done: what an interrupt cuts short, the next checks do)
        for identity in list(self.members.waiting):
            if not self.members.can_admit():
                break
            decision = self.members.admit_waiter(identity)
            if decision is not None:
                self._answer(identity, decision)
        self._admission_due = False

    def _prepare_targets(self, client: ClientInfo) -> None:
        slots = client.slots
        consecutive = slots == list(range(slots[0], slots[0] + len(slots)))
        client.slot_slice = slice(slots[0], slots[0] + len(slots)) if consecutive else None
        client.slot_index = np.asarray(slots, dtype=np.intp)
        if self.observation_leaves is None:
            client.observation_targets = []
        elif consecutive:
            client.observation_targets = [leaf[client.slot_slice] for leaf in self.observation_leaves]
        else:
            client.observation_targets = [np.empty_like(leaf[: len(slots)]) for leaf in self.observation_leaves]

    def _welcome(self, client: ClientInfo) -> bool:
        """Send ``client`` its WELCOME; False if it cannot be reached any more."""
        observation_space, action_space = self.members.spaces_for(client)
        offered = self._offered.get(client.identity)
        welcome = {
            "protocol": protocol.PROTOCOL_VERSION,
            "server": self.name,
            "server_session": self.session,
            "slots": client.slots,
            "num_envs": self.num_envs,
            "autoreset_mode": self.autoreset_mode.value,
            "observation_space": codec.space_to_value(observation_space, allow_pickle=client.trusted),
            "action_space": codec.space_to_value(action_space, allow_pickle=client.trusted),
            "allow_pickle": client.trusted,
            "liveness_timeout": self.liveness_timeout,
            "reset_first": self.members.reset_first,
            "max_message_bytes": self.max_message_bytes,
            "data_channel": offered is not None or client.plane != "zmq",
            "shared_memory": (offered.plane if offered is not None else client.plane) == "shm",
        }
        sizes = protocol.slab_frame_sizes(client.count, observation_space, action_space)
        welcome["slabs"] = (
            offered is not None
            and offered.block is not None
            and sizes is not None
            and max(*sizes[0], *sizes[1]) <= self.max_message_bytes
            and offered.use_slabs(*sizes)
        )
        return self._try_send(client.identity, protocol.message(Kind.WELCOME, welcome))

    def _try_send(self, identity: bytes, frames: list[Any]) -> bool:
        """Send a control message to a peer that may be gone; False if it cannot be reached. A member served
        over a data channel hears everything there, in order (PROTOCOL.md §13.3)."""
        links = self._links.get(identity)
        if links is None:
            return self.router.try_send(identity, frames)
        try:
            links.data.send(frames)
            return True
        except LinkBroken:
            return False

    def _replies_on_route(self, identity: bytes) -> bool:
        """Whether the member's replies come on its ZeroMQ route, where an interrupt can cut off a message's header
        (a data channel reads whole records)."""
        links = self._links.get(identity)
        return links is not None and links.data is links.route

    def _settle_late(self, identity: bytes, seq: int) -> None:
        """The reply to ``seq`` came (or was cut short): no reply to it or to an older command is owed any more."""
        late = self._late.get(identity)
        if late is not None:
            while late and late[0] <= seq:
                late.popleft()
            if not late:
                del self._late[identity]

    def _unawait(self, identity: bytes, seq: int) -> None:
        awaited = self._awaited.get(identity)
        if awaited is not None:
            awaited.pop(seq, None)
            if not awaited:
                del self._awaited[identity]


_REPLY_KINDS = frozenset((Kind.RESULT, Kind.CALL_RESULT, Kind.ERROR))


_PLANE_NAMES = {"zmq": "ZeroMQ", "uds": "its data channel", "shm": "its data channel and shared memory"}


def _fixed(endpoint: str) -> bool:
    """Whether ``endpoint`` names its port (or path) before it is bound: not ``tcp://host:*`` or ``tcp://host:0``."""
    if endpoint.startswith("tcp://"):
        port = endpoint.rsplit(":", 1)[-1]
        return port.isdigit() and int(port) != 0
    return "*" not in endpoint


def _kind_of(header: bytes) -> int | None:
    """The kind a header frame names (None if it is too short to name one)."""
    return header[3] if len(header) > 3 else None


def _is_hello(header: bytes) -> bool:
    """Whether a header frame is a HELLO's: the router reads those whole and tells who sent them."""
    return len(header) > 3 and header[3] == _HELLO  # (asked of every message: no call to _kind_of)


_HELLO = int(Kind.HELLO)


def _error_message(text: str, kind: str = "ProtocolError", seq: int = 0) -> list[Any]:
    """An ERROR from the server (PROTOCOL.md §8): an exception type's name ``kind``, ``text``, for ``seq``."""
    value = {"type": kind, "message": text, "traceback": "", "index": None}
    return protocol.message(Kind.ERROR, value, seq=seq)
