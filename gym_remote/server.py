"""The server side of the wire: one ROUTER socket, the commands in flight on it, and their replies.

:class:`SlotServer` knows messages and clients, not Gymnasium semantics. Who serves which slot is
decided by its :class:`~gym_remote.membership.Membership`, which it consults on every HELLO, leave
and loss; what happened (a client joined, a client was lost) is queued as :class:`Joined` and
:class:`Lost` events, which its owner takes after a wait with :meth:`SlotServer.take_events`. A
command is one :class:`Exchange`: sent to some clients, its replies land in its :class:`Sink` (a
batch) as they arrive. The server is used from one thread only (the learner's), as its socket must
be: control messages are handled whenever that thread waits, so nothing runs behind the learner's
back and nothing costs time on the step path.

Liveness: libzmq's own heartbeats (ZMTP PING/PONG, answered by the peers' I/O threads whatever their
envs are doing) close the connection of a peer that is gone or cut off; the server then cannot route
to it (``ROUTER_MANDATORY``), which it notices when it sends a command or, while it waits for a reply,
when it probes the peers it waits for. A slow env keeps its connection alive and is only bounded by
the reply timeout.
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import zmq

from gym_remote import channel, codec, protocol, transport
from gym_remote.channel import Channel, ChannelClosed, Listener, Record
from gym_remote.errors import ProtocolError, RemoteEnvError, RemoteTimeoutError, remote_env_error
from gym_remote.membership import (
    Admit,
    ClientInfo,
    LaunchSlot,
    Membership,
    Peer,
    Refuse,
    data_channel_token,
    space_mismatch,
)
from gym_remote.protocol import FLAG_VALUE, Kind, kind_name
from gym_remote.security import DEFAULT_HANDSHAKE_RATE, DEFAULT_MAX_MESSAGE_BYTES, Gatekeeper, ServerSecurity

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

_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.25
"""Longest a wait blocks inside libzmq before it checks deadlines, probes peers and polls the launcher."""

PROBE_SECONDS = 0.5
"""A client awaited and not heard from for this long is probed (once per this interval)."""

SEND_HWM = 10_000
"""Messages queued for one client before sends to it fail (ZMQ_SNDHWM)."""

DEFAULT_SPIN_SECONDS = 400e-6
"""How long a wait for replies busy-checks the socket before it sleeps in libzmq (see ``SlotServer``)."""


def default_spin(local_clients: int) -> float:
    """RemoteVectorEnv's default ``spin`` with ``local_clients`` client processes on this machine:
    :data:`DEFAULT_SPIN_SECONDS` if they leave a core free for the spinning learner, else 0."""
    return DEFAULT_SPIN_SECONDS if local_clients + 1 <= _usable_cores() else 0.0


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
            closes a peer's connection, and the server declares the client lost.
        max_message_bytes: largest frame a peer may send.
        name: the server's name in WELCOME and logs.
        security: CURVE keys and the client keys accepted (None: plain connections).
        max_connections: connections open at once beyond which new ones are refused (default
            ``4 * num_envs + 64``); also the length of the waiting line.
        handshake_rate: connection handshakes per second one network address may start.
        spin: seconds a wait for replies busy-checks the socket before it sleeps in libzmq, while
            replies have lately come within that time (0: never). Waking a sleeping thread costs
            tens of microseconds, as much as a cheap env's whole step; a spin that would not pay
            (slow envs) is skipped, so it costs CPU only while replies come fast.
        data_plane: serve clients on this machine that offer it over a data channel (a Unix socket,
            :mod:`gym_remote.channel`) instead of ZeroMQ; False: every message travels over ZeroMQ.
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
        data_plane: bool = True,
    ) -> None:
        if not spin >= 0:
            raise ValueError(f"spin must be a duration in seconds >= 0, got {spin!r}")
        self.num_envs = num_envs
        self.spin = float(spin)
        self._typical_wait = 0.0  # a moving average of how long replies took to come (see _poll_once)
        self.autoreset_mode = autoreset_mode
        self.liveness_timeout = liveness_timeout
        self.max_message_bytes = int(max_message_bytes)
        self.name = name
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
        self._events: list[Joined | Lost] = []
        self._seq = 0
        self._awaited: dict[bytes, dict[int, Exchange]] = {}  # identity -> seq -> the exchange awaiting its reply
        self._last_checks = 0.0
        # the same-host data plane: the listener, the channels of members (and of clients in line), by identity
        self._listener: Listener | None = None
        self._channels: dict[bytes, Channel] = {}
        self._offered: dict[bytes, Channel] = {}  # channels of clients not (yet) admitted: in line
        self._channel_of_fd: dict[int, bytes] = {}
        self._fds = select.poll()  # the channels' descriptors and the ROUTER socket's (see _next_message)
        self._message: zmq.Socket | Record  # where the rest of the message being handled is read from

        self.security = security
        self.context = zmq.Context()  # its own: the gatekeeper answers for every socket of its context
        self.gatekeeper = Gatekeeper(
            self.context,
            security.authorized if security is not None else None,
            max_connections=self.max_connections,
            handshake_rate=handshake_rate,
        )
        sock = self.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
        sock.setsockopt(zmq.RCVTIMEO, int(POLL_SECONDS * 1000))
        sock.setsockopt(zmq.SNDTIMEO, int(POLL_SECONDS * 1000))
        sock.setsockopt(zmq.SNDHWM, SEND_HWM)
        transport.set_heartbeats(sock, liveness_timeout)
        if security is not None:
            security.apply(sock)
        self.gatekeeper.watch(sock)
        self.gatekeeper.start()
        try:
            sock.bind(bind)
        except zmq.ZMQError as error:
            self.gatekeeper.close(sock)
            sock.close()
            transport.terminate(self.context)
            raise OSError(f"cannot bind {bind!r}: {error}") from None
        self.socket = sock
        self._message = sock
        self._fds.register(sock.get(zmq.FD), select.POLLIN)
        self.address = _connectable(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        if channel.wanted(data_plane):
            try:
                self._listener = Listener(channel.address_for(self.address), max_frame_bytes=self.max_message_bytes)
            except OSError as error:  # e.g. the name is taken: another server binds this endpoint too
                logger.warning(
                    "no same-host data plane for %s (every message goes over ZeroMQ): %s", self.address, error
                )
        logger.info(
            "server %s listening on %s for %d slots (%s)",
            name,
            self.address,
            num_envs,
            f"CURVE, {security.how}" if security is not None else "no authentication",
        )

    # -- slots -------------------------------------------------------------------------------------

    def set_observation_buffers(self, leaves: list[np.ndarray] | None) -> None:
        """The batch's observation leaf arrays, which replies are received into (None: value path)."""
        self.observation_leaves = leaves
        for client in self.members.clients.values():
            self._prepare_targets(client)

    def take_events(self) -> list[Joined | Lost]:
        """What happened since the last call (joins and losses, in order); the queue is emptied."""
        events, self._events = self._events, []
        return events

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
        deadline = time.monotonic() + timeout
        while self.members.empty_slots(needed):
            if time.monotonic() > deadline:
                raise RemoteTimeoutError(self.empty_slots_message(timeout, what, self.members.empty_slots(needed)))
            self._poll_once()

    def empty_slots_message(self, timeout: float, what: str, empty: list[int]) -> str:
        """The error text for a wait on ``empty`` slots that ran out after ``timeout`` seconds."""
        return self.members.empty_slots_message(timeout, what, empty, self.address)

    def wait_for_first_client(self, timeout: float) -> None:
        """Handle joins until the vector's spaces are known (the first client brings them)."""
        deadline = time.monotonic() + timeout
        while self.members.observation_space is None:
            if time.monotonic() > deadline:
                raise RemoteTimeoutError(
                    f"timed out after {timeout:g} s waiting for a first client at {self.address} "
                    "to learn the spaces (pass observation_space and action_space to skip this wait)"
                )
            self._poll_once()

    def release(self, slots: Sequence[int]) -> None:
        """Let joining clients (and those waiting in line) take the quarantined ``slots`` again."""
        self.members.release(slots)
        self._admit_waiters()

    def poll(self) -> None:
        """Handle the control messages that arrived (joins, leaves), waiting at most ``POLL_SECONDS``."""
        self._poll_once()

    def lose(self, client: ClientInfo, reason: str, *, tell: bool = True) -> None:
        """Declare ``client`` lost: free its slots, tell it (if it can still hear), let waiters in."""
        if self.members.lose(client.identity) is None:
            return
        for exchange in self._awaited.pop(client.identity, {}).values():
            if exchange.pending.pop(client.identity, None) is not None:
                exchange.lost.append(client)
        logger.info(
            "%s is lost: %s; %d of %d slots served", client.describe(), reason, self.members.served, self.num_envs
        )
        if tell:
            self._try_send(client.identity, protocol.message(Kind.EVICT, {"reason": reason}))
        self._close_channel(client.identity)
        self._events.append(Lost(client, reason))
        if self.launcher is not None:
            self.launcher.on_lost(client)
        self._admit_waiters()

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
        value that cannot be encoded stops the command everywhere). Replies are handled by :meth:`wait`
        (of this or any later exchange), in arrival order. A client that goes away meanwhile (it left,
        its connection dropped, its launcher found its process dead) or sends a malformed reply is
        declared lost (:meth:`lose`) and listed in ``Exchange.lost``.
        """
        seq = self.next_seq()
        commands = [(client, build(client, seq)) for client in clients]
        exchange = Exchange(seq, reply_kind, sink, what)
        for client, frames in commands:
            if self.send(client, frames):
                exchange.pending[client.identity] = client
                exchange.sent_at[client.identity] = time.monotonic()
                self._awaited.setdefault(client.identity, {})[seq] = exchange
            else:
                exchange.lost.append(client)
        return exchange

    def wait(self, done: Callable[[], bool], deadline: float) -> bool:
        """Handle messages (replies, joins, leaves) until ``done()``; False if ``deadline`` passed first.

        ``done`` is asked after every message and must not change anything.
        """
        while not done():
            self._poll_once(spin=True)
            if time.monotonic() > deadline and not done():
                return False
        return True

    def abandon(self, exchange: Exchange) -> None:
        """Stop awaiting the replies ``exchange`` still lacks: when they come, they are dropped as late."""
        for identity in exchange.pending:
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
        return self.finish(exchange, time.monotonic() + timeout, timeout)

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
            if not self.wait(lambda: not exchange.pending, deadline):
                waiting = "; ".join(client.describe() for client in exchange.pending.values())
                raise RemoteTimeoutError(f"timed out after {timeout:g} s waiting for {exchange.what} from {waiting}")
        finally:
            self.abandon(exchange)
        if exchange.errors:  # the first env in slot order, as SyncVectorEnv meets them
            raise min((error for _, error in exchange.errors), key=lambda error: (error.slot is None, error.slot or 0))
        return exchange.lost

    def _dispatch(self, identity: bytes, header: protocol.Header, frame: bytes) -> None:
        """Hand a message to the exchange awaiting it, or handle it as a control message."""
        exchange = self._awaited.get(identity, {}).get(header.seq)
        if exchange is None:
            self._handle_other(identity, header, frame)
            return
        client = exchange.pending.pop(identity)
        self._unawait(identity, header.seq)
        if header.version != protocol.PROTOCOL_VERSION:
            self._drain()
            logger.error("%s sent a malformed reply: protocol version %d", client.describe(), header.version)
            exchange.lost.append(client)
            self.lose(client, f"it sent a malformed reply in protocol version {header.version}")
            return
        client.latency = time.monotonic() - exchange.sent_at[identity]
        client.last_seen = time.monotonic()
        try:
            if header.kind == exchange.reply_kind:
                self._land(exchange.sink, client, header, frame)
            elif header.kind == Kind.ERROR:
                exchange.errors.append(
                    (client, self._remote_error(client, self.recv_value(client, header), exchange.what))
                )
            elif header.kind == Kind.BYE:
                self._drain()
                exchange.lost.append(client)
                self.lose(client, "it left", tell=False)
            else:
                raise ProtocolError(
                    f"expected {exchange.reply_kind.name} for {exchange.what}, got {kind_name(header.kind)}"
                )
        except ProtocolError as error:
            self._drain()
            logger.error("%s sent a malformed reply to %s: %s", client.describe(), exchange.what, error)
            exchange.lost.append(client)
            self.lose(client, f"it sent a malformed reply to {exchange.what}: {error}")

    def _land(self, sink: Sink, client: ClientInfo, header: protocol.Header, frame: bytes) -> None:
        """Receive the rest of a reply into ``sink``: a RESULT's array frames into its targets, then its value."""
        if header.kind != Kind.RESULT:
            sink.land(client, header, None, self.recv_value(client, header))
            return
        transport.recv_into(self._message, sink.targets(client, header), "RESULT")
        if header.flags & FLAG_VALUE:
            value = self.recv_value(client, header)
        elif self.has_more():
            raise ProtocolError("RESULT has frames after its observations but no value section")
        else:
            value = None
        sink.land(client, header, frame, value)
        client.steps += 1

    def _unawait(self, identity: bytes, seq: int) -> None:
        awaited = self._awaited.get(identity)
        if awaited is not None:
            awaited.pop(seq, None)
            if not awaited:
                del self._awaited[identity]

    def send(self, client: ClientInfo, frames: list[Any]) -> bool:
        """Send one message to ``client``; if it cannot be routed any more, declare it lost and return False."""
        data = self._channels.get(client.identity)
        if data is not None:
            try:
                data.send(frames, self.liveness_timeout)
                return True
            except ChannelClosed as error:
                reason = f"its data channel closed ({error})"
            except TimeoutError:
                reason = f"it took nothing from its data channel for {self.liveness_timeout:g} s"
            self.lose(client, reason, tell=False)
            return False
        try:
            transport.send_frames(self.socket, [client.identity, *frames])
            return True
        except zmq.ZMQError as error:
            if error.errno == zmq.EHOSTUNREACH:
                reason = "its connection is gone"
            elif error.errno == zmq.EAGAIN:
                reason = f"its queue is full: it has not read anything for long (over {SEND_HWM} messages)"
            else:
                raise
        self.lose(client, reason, tell=False)
        return False

    def has_more(self) -> bool:
        """Whether the current message has more frames."""
        return bool(self._message.get(transport.RCVMORE))

    def recv_value(self, client: ClientInfo, header: protocol.Header) -> Any:
        """The value section that ends the current message (None if the header has none)."""
        frames = transport.recv_rest(self._message)
        if not header.flags & FLAG_VALUE:
            if frames:
                raise ProtocolError(f"{len(frames)} unexpected frames without a value section")
            return None
        return protocol.read_value(frames, allow_pickle=client.trusted)

    # -- observability -----------------------------------------------------------------------------

    def stats(self) -> list[dict[str, Any]]:
        """One dict per slot: who serves it and how well (see ``RemoteVectorEnv.stats``)."""
        return self.members.stats()

    def connection_stats(self) -> dict[str, Any]:
        """The gate's view: security, connections open, handshakes accepted and denied, clients in line."""
        return {
            "address": self.address,
            "security": f"CURVE ({self.security.how})" if self.security is not None else "none",
            **self.gatekeeper.stats(),
            "clients": len(self.members.clients),
            "waiting": len(self.members.waiting),
            "recent_refusals": list(self.members.refusals),
        }

    # -- closing -----------------------------------------------------------------------------------

    def close(self, timeout: float = 5.0, gone: Callable[[ClientInfo], bool] | None = None) -> None:
        """Send CLOSE to every client (and waiter), wait up to ``timeout`` for their BYE, close the socket.

        ``gone(client)`` tells of clients known to be dead already, which are not waited for.
        """
        clients = list(self.members.clients.values())
        seq = self.next_seq()
        waiting = set()
        for identity in [client.identity for client in clients if gone is None or not gone(client)]:
            if self._try_send(identity, [protocol.pack_header(Kind.CLOSE, seq)]):
                waiting.add(identity)
        for identity in self.members.waiting:
            self._try_send(identity, [protocol.pack_header(Kind.CLOSE, seq)])
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            message = self._next_message(spin=False)
            if message:
                self._drain()
                if message[1].kind == Kind.BYE:
                    waiting.discard(message[0])
        if waiting:
            logger.warning("%d client(s) did not acknowledge CLOSE within %g s", len(waiting), timeout)
        self.members.clear()
        for identity in [*self._channels, *self._offered]:
            self._close_channel(identity)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.gatekeeper.close(self.socket)
        self.socket.close(linger=0)
        transport.terminate(self.context)

    # -- internals ---------------------------------------------------------------------------------

    def _receive(self) -> tuple[bytes, protocol.Header, bytes] | None:
        """The next message's routing id, header and header frame; None if it was malformed (then dropped).

        A malformed message from a client whose reply is awaited makes that client lost.

        Raises:
            zmq.Again: no message came within ``POLL_SECONDS``.
        """
        identity = self.socket.recv()
        self._message = self.socket
        try:
            frame = self.socket.recv()
            return identity, protocol.parse_header(frame), frame
        except ProtocolError as error:
            self._drain()
            client = self.members.clients.get(identity) if identity in self._awaited else None
            if client is not None:
                logger.error("%s sent a malformed reply: %s", client.describe(), error)
                self.lose(client, f"it sent a malformed reply: {error}")
            else:
                logger.warning("dropping a malformed message from peer %s: %s", identity.hex()[:16], error)
                self._try_send(identity, _error_message(str(error)))
            return None
        except BaseException:  # interrupted mid-message: the next receive must start at a message's start
            self._drain()
            raise

    def _poll_once(self, spin: bool = False) -> None:
        """Handle the next message (waiting at most ``POLL_SECONDS`` for it), then the periodic checks.

        ``spin``: a wait for replies, which first busy-checks for them while replies come fast.
        """
        waiting_since = time.perf_counter()
        message = self._next_message(spin)
        if spin:
            self._typical_wait += 0.25 * (time.perf_counter() - waiting_since - self._typical_wait)
        if message:
            try:
                self._dispatch(*message)
            except BaseException:  # interrupted mid-message (e.g. Ctrl-C): drop the rest of it
                self._drain()
                raise
        # also while messages keep coming: a dead client among busy ones must still be noticed
        self._checks()

    def _next_message(self, spin: bool) -> tuple[bytes, protocol.Header, bytes] | None:
        """The next message from the ROUTER socket or a data channel, waiting at most ``POLL_SECONDS``.

        None if none came, or if what came was malformed or a channel closing (then handled).
        ``spin``: busy-check first (see ``spin``), while replies have lately come within that time.
        """
        if spin and self._typical_wait < self.spin:
            message = self._spin_for_message(time.perf_counter() + self.spin)
            if message is not None:
                return message or None
        if not self._channels:
            try:
                return self._receive()
            except zmq.Again:
                return None
        for identity, data in self._channels.items():  # a record already received needs no syscall
            if data.buffered():
                return self._read_channel(identity, data) or None
        # One poll() for the channels and the ROUTER socket. libzmq's descriptor only signals that the
        # socket's state may have changed, and is reset by reading ZMQ_EVENTS: so the events are read
        # before every sleep, and a message that arrives after that read wakes the poll.
        deadline = time.monotonic() + POLL_SECONDS
        events, readable = self.socket.get, _POLLIN
        while True:
            if events(_EVENTS) & readable:
                try:
                    return self._receive()
                except zmq.Again:
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            for fd, _ in self._fds.poll(int(remaining * 1000) + 1):
                identity = self._channel_of_fd.get(fd)
                if identity is not None:  # else the ROUTER's descriptor: its events are read above
                    message = self._read_channel(identity, self._channels[identity])
                    if message is not None:
                        return message or None

    def _spin_for_message(self, until: float) -> tuple[bytes, protocol.Header, bytes] | tuple[()] | None:
        """Busy-check the ROUTER socket and the data channels until a message is there or ``until`` passed."""
        events, clock, readable = self.socket.get, time.perf_counter, _POLLIN
        while clock() < until:
            if events(_EVENTS) & readable:
                try:
                    return self._receive()
                except zmq.Again:
                    return None
            for identity, data in list(self._channels.items()):
                message = self._read_channel(identity, data)
                if message is not None:
                    return message
        return None

    def _read_channel(self, identity: bytes, data: Channel) -> tuple[bytes, protocol.Header, bytes] | tuple[()] | None:
        """The next message on a member's data channel; None if none is in yet, ``()`` if the channel broke
        or sent a malformed message (its client is then lost)."""
        client = self.members.clients.get(identity)
        try:
            record = data.read()
            if record is None:
                return None
            frame = record.recv()
            header = protocol.parse_header(frame)
        except ChannelClosed as error:
            reason = f"its data channel closed ({error})"
        except ProtocolError as error:
            logger.error("%s sent a malformed message on its data channel: %s", _describe(client, identity), error)
            reason = f"it sent a malformed message on its data channel: {error}"
        else:
            self._message = record
            return identity, header, frame
        if client is not None:
            self.lose(client, reason, tell=False)
        else:
            self._close_channel(identity)
        return ()

    def _attach(self, client: ClientInfo) -> None:
        """Serve ``client`` over the data channel it offered, if the server took the offer."""
        data = self._offered.pop(client.identity, None)
        if data is None:
            return
        self._channels[client.identity] = data
        self._channel_of_fd[data.fileno()] = client.identity
        self._fds.register(data.fileno(), select.POLLIN)
        client.plane = "uds"

    def _close_channel(self, identity: bytes) -> None:
        """Close the data channel of ``identity`` (a member's, or one offered by a client in line), if any."""
        data = self._offered.pop(identity, None)
        if data is None:
            data = self._channels.pop(identity, None)
            if data is None:
                return
            fd = data.fileno()
            self._channel_of_fd.pop(fd, None)
            self._fds.unregister(fd)
        data.close()

    def _leave_line(self, identity: bytes) -> bool:
        """The client in line ``identity`` gives up its place (and the data channel it offered)."""
        self._close_channel(identity)
        return self.members.leave_line(identity)

    def _checks(self) -> None:
        """At most every ``POLL_SECONDS``: poll the launcher and probe the clients whose replies are awaited."""
        now = time.monotonic()
        if now - self._last_checks < POLL_SECONDS:
            return
        self._last_checks = now
        if self.launcher is not None:
            for index, code in self.launcher.poll():
                for client in [client for client in self.members.clients.values() if client.launch_index == index]:
                    self.lose(client, f"its process exited with code {code}", tell=False)
        clients = self.members.clients
        for client in [clients[identity] for identity in self._awaited if identity in clients]:
            if now - max(client.last_seen, client.last_probe) >= PROBE_SECONDS:
                client.last_probe = now
                self._probe(client)

    def _probe(self, client: ClientInfo) -> None:
        """Check that ``client``'s connection still routes; a busy client with a full queue is not lost."""
        try:
            self.socket.send_multipart([client.identity, protocol.pack_header(Kind.PING)], zmq.NOBLOCK)
        except zmq.ZMQError as error:
            if error.errno == zmq.EHOSTUNREACH:
                self.lose(client, "its connection is gone", tell=False)
            elif error.errno != zmq.EAGAIN:
                raise

    def _handle_other(self, identity: bytes, header: protocol.Header, frame: bytes) -> None:
        """A message that is not an awaited reply: a join, a leave, a late reply, or a stray."""
        kind = header.kind
        if kind == Kind.HELLO:
            self._on_hello(identity, header)
            return
        client = self.members.clients.get(identity)
        if kind == Kind.ERROR and client is None:
            self._on_start_failure()
            return
        self._drain()
        if kind == Kind.BYE:
            if client is not None:
                self.lose(client, "it left", tell=False)
            elif self._leave_line(identity):
                logger.info("a waiting client left the line; %d waiting", len(self.members.waiting))
        elif client is None:
            logger.warning("ignoring %s from a peer that is not a member", kind_name(kind))
            self._try_send(identity, protocol.message(Kind.EVICT, {"reason": "not a member: send HELLO to join"}))
        else:
            client.last_seen = time.monotonic()
            logger.debug("dropping a late %s (seq %d) from %s", kind_name(kind), header.seq, client.describe())

    def _on_start_failure(self) -> None:
        """An ERROR from a peer that is not a member: a client whose envs failed to start."""
        try:
            report = protocol.read_value(transport.recv_rest(self.socket))
            launch = report.get("launch") or {}
            text = f"{report['type']}: {report['message']}"
        except (ProtocolError, KeyError, TypeError, AttributeError) as error:
            logger.warning("ignoring a malformed ERROR from an unknown peer: %s", error)
            return
        index = self.members.verified_launch(launch)
        if index is not None and self.launcher is not None:
            self.launcher.failed(index, report)
        logger.error("client %r failed before joining: %s", str(report.get("name"))[:200], text)

    def _on_hello(self, identity: bytes, header: protocol.Header) -> None:
        members = self.members
        if identity in members.clients:  # a repeated HELLO: answer as before
            self._drain()
            if not self._welcome(members.clients[identity]):
                self.lose(members.clients[identity], "its connection is gone", tell=False)
            return
        try:
            frames, peer = self._recv_rest_and_peer()
        except ProtocolError as error:  # e.g. too many frames
            self._drain()
            self._answer(identity, members.refuse_malformed(identity, error))
            return
        hello = members.parse_hello(identity, header.version, frames)
        if isinstance(hello, Refuse):
            self._answer(identity, hello)
            return
        previous = members.previous_member(hello)
        if previous is not None:  # the same client, reconnected: its old membership ends here
            self.lose(previous, "it reconnected as a new session", tell=False)
        self._take_offer(identity, hello)
        self._answer(identity, members.hello(identity, hello, peer))

    def _take_offer(self, identity: bytes, hello: dict[str, Any]) -> None:
        """Pair the data channel a HELLO offers with the connection its client greeted (PROTOCOL.md §13)."""
        token = data_channel_token(hello)
        if token is None or self._listener is None or type(hello.get("pid")) is not int:
            return
        offered = self._listener.take(token, hello["pid"])
        if offered is None:
            logger.debug(
                "no data channel greeted with the token of %r's HELLO: it is served over ZeroMQ", hello.get("name")
            )
            return
        self._close_channel(identity)
        self._offered[identity] = offered

    def _answer(self, identity: bytes, decision: Admit | Refuse) -> None:
        """Carry out what membership decided for ``identity``: welcome it, or refuse it."""
        if isinstance(decision, Admit):
            self._welcome_and_join(decision.client)
            return
        if decision.waiting:
            logger.debug("client waits in line: %s", decision.reason)
        else:
            logger.warning("refused a client: %s", decision.reason)
            self._close_channel(identity)
        answer = {"code": decision.code, "reason": decision.reason, "waiting": decision.waiting}
        if not self._try_send(identity, protocol.message(Kind.REFUSE, answer)) and decision.waiting:
            self._leave_line(identity)  # it is gone: it does not hold a place in line
        if decision.launch_index is not None and self.launcher is not None:
            self.launcher.refused(decision.launch_index, decision)

    def _welcome_and_join(self, client: ClientInfo) -> None:
        first = self.members.observation_space is None
        if not self._welcome(client):  # it went away (e.g. it died waiting in line): the slots stay free
            logger.info("client %r went away before its WELCOME", client.name)
            self._leave_line(client.identity)
            return
        self.members.join(client)
        self._attach(client)
        self._prepare_targets(client)
        logger.info(
            "%s joined from %s (pid %d, %s%s); %d of %d slots served",
            client.describe(),
            client.host,
            client.pid,
            client.peer_address or "local",
            f", key {client.key!r}" if client.key else "",
            self.members.served,
            self.num_envs,
        )
        self._events.append(Joined(client))
        if self.launcher is not None:
            self.launcher.on_join(client)
        if first:
            self._admit_waiters()  # those that waited for the spaces to be known

    def _admit_waiters(self) -> None:
        """Give free slots to the clients waiting in line, first come first served."""
        for identity in list(self.members.waiting):
            if not self.members.can_admit():
                return
            decision = self.members.admit_waiter(identity)
            if decision is not None:
                self._answer(identity, decision)

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
            "data_channel": client.identity in self._offered or client.identity in self._channels,
        }
        return self._try_send(client.identity, protocol.message(Kind.WELCOME, welcome))

    def _try_send(self, identity: bytes, frames: list[Any]) -> bool:
        """Send a control message to a peer that may be gone; False if it cannot be routed."""
        data = self._channels.get(identity)
        if data is not None:  # a member served over a data channel hears everything there, in order
            try:
                data.send(frames, min(1.0, self.liveness_timeout))
                return True
            except (ChannelClosed, TimeoutError):
                return False
        try:
            self.socket.send_multipart([identity, *frames])
            return True
        except zmq.ZMQError:
            return False

    def _recv_rest_and_peer(self) -> tuple[list[bytes], Peer]:
        """The remaining frames of the current message, and who sent it."""
        if not self.has_more():
            return [], Peer()
        first = self.socket.recv(copy=False)
        rest = transport.recv_rest(self.socket)
        return [first.bytes, *rest], Peer(_property(first, "Peer-Address"), _property(first, "User-Id"))

    def _remote_error(self, client: ClientInfo, report: Any, what: str) -> RemoteEnvError:
        if not isinstance(report, dict):
            return RemoteEnvError(f"{client.describe()} reported an unreadable error during {what}")
        index = report.get("index")
        slot = client.slots[index] if type(index) is int and 0 <= index < client.count else None
        where = f"slot {slot} of {client.describe()}" if slot is not None else client.describe()
        return remote_env_error(
            f"{what} failed in {where}: {report.get('type')}: {report.get('message')}", report, slot
        )

    def _drain(self) -> None:
        transport.drain(self._message)


def _describe(client: ClientInfo | None, identity: bytes) -> str:
    return client.describe() if client is not None else f"peer {identity.hex()[:16]}"


def _error_message(text: str) -> list[Any]:
    return protocol.message(Kind.ERROR, {"type": "ProtocolError", "message": text, "traceback": "", "index": None})


def _property(frame: zmq.Frame, name: str) -> str:
    """A message property libzmq attached to ``frame`` ("" if there is none)."""
    try:
        value = frame.get(name)
    except (zmq.ZMQError, KeyError):
        return ""
    return value if isinstance(value, str) else ""


def _connectable(endpoint: str) -> str:
    """An endpoint a client can connect to (a wildcard bind address becomes the loopback address)."""
    for wildcard in ("tcp://0.0.0.0:", "tcp://[::]:"):
        if endpoint.startswith(wildcard):
            return "tcp://127.0.0.1:" + endpoint[len(wildcard) :]
    return endpoint
