"""The server side of the wire: one ROUTER socket, the clients that joined it, and their slots.

:class:`SlotServer` knows messages, clients and slots, not Gymnasium semantics; the
:class:`~gym_remote.RemoteVectorEnv` builds commands and reads results through it. It is used from one
thread only (the learner's), as its socket must be: joins, leaves and other control messages are
handled whenever that thread waits for clients, so nothing runs behind the learner's back and nothing
costs time on the step path.

Liveness: libzmq's own heartbeats (ZMTP PING/PONG, answered by the peers' I/O threads whatever their
envs are doing) close the connection of a peer that is gone or cut off; the server then cannot route
to it (``ROUTER_MANDATORY``), which it notices when it sends a command or, while it waits for a reply,
when it probes the peers it waits for. A slow env keeps its connection alive and is only bounded by
the reply timeout.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import zmq
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector.utils import batch_differing_spaces

from gym_remote import codec, protocol, transport
from gym_remote.errors import ProtocolError, RemoteEnvError, RemoteTimeoutError, remote_env_error
from gym_remote.protocol import FLAG_VALUE, Kind, format_slots, kind_name
from gym_remote.security import DEFAULT_HANDSHAKE_RATE, Gatekeeper, ServerSecurity

__all__ = ["SlotServer", "ClientInfo", "Exchange", "LaunchSlot", "default_spin"]

_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.25
"""Longest a wait blocks inside libzmq before it checks deadlines, probes peers and runs the watchdog."""

PROBE_SECONDS = 0.5
"""A client awaited and not heard from for this long is probed (once per this interval)."""

SEND_HWM = 10_000
"""Messages queued for one client before sends to it fail (ZMQ_SNDHWM)."""

DEFAULT_SPIN_SECONDS = 400e-6
"""How long a wait for replies busy-checks the socket before it sleeps in libzmq (see ``SlotServer``)."""

DEFAULT_MAX_MESSAGE_BYTES = 256 << 20
"""Largest frame a peer may send by default (ZMQ_MAXMSGSIZE): 256 MiB; a peer sending more is cut off."""


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


@dataclass(eq=False)
class ClientInfo:
    """What the server knows of one joined client."""

    identity: bytes
    name: str
    host: str
    pid: int
    session: str
    slots: list[int]
    trusted: bool
    observation_spaces: list[gym.Space]
    action_spaces: list[gym.Space]
    metadata: dict[str, Any]
    render_mode: str | None
    launch_index: int | None = None
    peer_address: str = ""
    key: str = ""  # the name of the CURVE key it authenticated with ("" without authentication)
    rejoins: int = 0
    joined_at: float = field(default_factory=time.monotonic)
    last_seen: float = field(default_factory=time.monotonic)
    last_probe: float = 0.0
    latency: float | None = None
    steps: int = 0
    # recv_into targets for the observation leaves, and how to scatter them if slots are not consecutive
    observation_targets: list[np.ndarray] = field(default_factory=list)
    slot_slice: slice | None = None
    slot_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))

    @property
    def count(self) -> int:
        return len(self.slots)

    @property
    def rows(self) -> slice | np.ndarray:
        """Indexes the client's rows in a batch array: a slice when its slots are consecutive."""
        return self.slot_slice if self.slot_slice is not None else self.slot_index

    def describe(self) -> str:
        return f"client {self.name!r} (slots {format_slots(self.slots)})"


@dataclass
class LaunchSlot:
    """Slots reserved for a client the server launched itself, which proves itself with ``token``."""

    index: int
    first_slot: int
    count: int
    token: str


@dataclass(frozen=True)
class _Peer:
    """What libzmq tells of a message's sender: its network address and the name of its CURVE key."""

    address: str = ""
    key: str = ""


@dataclass
class _Waiter:
    """A client that found no free slot and waits in line for one."""

    hello: dict[str, Any]
    peer: _Peer


@dataclass(eq=False)
class Exchange:
    """One command sent to some clients (all with the same ``seq``), and the replies it still awaits."""

    seq: int
    reply_kind: Kind
    on_reply: Callable[[ClientInfo, protocol.Header, bytes], None]
    what: str
    pending: dict[bytes, ClientInfo] = field(default_factory=dict)
    sent_at: dict[bytes, float] = field(default_factory=dict)
    lost: list[ClientInfo] = field(default_factory=list)
    errors: list[tuple[ClientInfo, RemoteEnvError]] = field(default_factory=list)


class SlotServer:
    """A bound ROUTER socket that maps joining clients onto ``num_envs`` slots.

    Args:
        bind: endpoint to bind, e.g. ``"tcp://127.0.0.1:*"`` (a free port) or ``"ipc:///path"``.
        num_envs: number of slots.
        observation_mode: ``"same"``, ``"different"`` or a custom space pair, as in ``SyncVectorEnv``;
            decides how a client's observation spaces must match the vector's.
        vector_class: the vector env's class name, in the words of a refusal for spaces.
        autoreset_mode: told to clients in WELCOME.
        allow_pickle: ``True`` lets remote clients that ask for it use the trusted pickle mode;
            launched clients are trusted unless this is ``False``.
        launches: slots reserved for launched clients.
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
        launches: Sequence[LaunchSlot] = (),
        liveness_timeout: float = 10.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        name: str = "gym_remote",
        security: ServerSecurity | None = None,
        max_connections: int | None = None,
        handshake_rate: float = DEFAULT_HANDSHAKE_RATE,
        spin: float = DEFAULT_SPIN_SECONDS,
    ) -> None:
        if not spin >= 0:
            raise ValueError(f"spin must be a duration in seconds >= 0, got {spin!r}")
        self.num_envs = num_envs
        self.spin = float(spin)
        self._typical_wait = 0.0  # a moving average of how long replies took to come (see _poll_once)
        self.observation_mode = observation_mode
        self.vector_class = vector_class
        self.autoreset_mode = autoreset_mode
        self.allow_pickle = allow_pickle
        self.liveness_timeout = liveness_timeout
        self.max_message_bytes = int(max_message_bytes)
        self.name = name
        self.session = secrets.token_hex(16)
        self.launches = {launch.index: launch for launch in launches}
        self._reserved = np.zeros(num_envs, dtype=bool)
        for launch in launches:
            self._reserved[launch.first_slot : launch.first_slot + launch.count] = True
        self.slots: list[ClientInfo | None] = [None] * num_envs
        self.quarantined: set[int] = set()  # empty slots no client may take yet (see quarantine())
        self.slot_epochs = [0] * num_envs
        self.empty_since = [time.monotonic()] * num_envs
        self.clients: dict[bytes, ClientInfo] = {}
        self.waiting: dict[bytes, _Waiter] = {}
        self.observation_space: gym.Space | None = None
        self.action_space: gym.Space | None = None
        self.observation_leaves: list[np.ndarray] | None = None
        self.launch_failures: dict[int, dict[str, Any]] = {}  # start-up errors reported by launched clients
        self.launch_refusals: dict[int, _Refusal] = {}  # why launched clients were refused
        self.refusals: list[str] = []
        self.on_first_spaces: Callable[[ClientInfo], None] | None = None
        self.on_join: Callable[[ClientInfo], None] | None = None
        self.on_lost: Callable[[ClientInfo, str], None] | None = None
        self.watchdog: Callable[[], None] | None = None
        self.reset_first = False  # told in WELCOME: new envs start as if their episode had ended
        self._seq = 0
        self._awaited: dict[bytes, dict[int, Exchange]] = {}  # identity -> seq -> the exchange awaiting its reply
        self._admitting = False
        self._last_checks = 0.0

        self.security = security
        self.max_connections = int(max_connections) if max_connections is not None else 4 * num_envs + 64
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
            self.context.term()
            raise OSError(f"cannot bind {bind!r}: {error}") from None
        self.socket = sock
        self.address = _connectable(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        logger.info(
            "server %s listening on %s for %d slots (%s)",
            name,
            self.address,
            num_envs,
            f"CURVE, {security.how}" if security is not None else "no authentication",
        )

    # -- slots -------------------------------------------------------------------------------------

    def set_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Fix the vector's single spaces that joining clients must match."""
        self.observation_space = observation_space
        self.action_space = action_space

    def set_observation_buffers(self, leaves: list[np.ndarray] | None) -> None:
        """The batch's observation leaf arrays, which replies are received into (None: value path)."""
        self.observation_leaves = leaves
        for client in self.clients.values():
            self._prepare_targets(client)

    def observation_space_of(self, slot: int) -> gym.Space:
        """The observation space of the env serving ``slot`` (which must be served)."""
        client = self.slots[slot]
        return client.observation_spaces[client.slots.index(slot)]

    @property
    def served(self) -> int:
        return sum(client is not None for client in self.slots)

    def empty_slots(self, slots: Iterable[int] | None = None) -> list[int]:
        """The slots (of ``slots``, default all) that have no client."""
        return [slot for slot in (range(self.num_envs) if slots is None else slots) if self.slots[slot] is None]

    def clients_of(self, slots: Iterable[int]) -> list[ClientInfo]:
        """The clients serving ``slots``, each once, in slot order."""
        clients: dict[bytes, ClientInfo] = {}
        for slot in slots:
            client = self.slots[slot]
            if client is not None:
                clients.setdefault(client.identity, client)
        return list(clients.values())

    def wait_for_slots(self, timeout: float, slots: Iterable[int] | None = None, what: str = "all slots") -> None:
        """Handle joins (and leaves) until every slot in ``slots`` (default: all) is served.

        Raises:
            RemoteTimeoutError: ``timeout`` seconds passed; the message names the empty slots, says how
                long they have been empty and how many slots are served.
        """
        needed = list(range(self.num_envs)) if slots is None else list(slots)
        deadline = time.monotonic() + timeout
        while self.empty_slots(needed):
            if time.monotonic() > deadline:
                raise RemoteTimeoutError(self.empty_slots_message(timeout, what, self.empty_slots(needed)))
            self._poll_once()

    def empty_slots_message(self, timeout: float, what: str, empty: list[int]) -> str:
        """The error text for a wait on ``empty`` slots that ran out after ``timeout`` seconds."""
        now = time.monotonic()
        longest = max(now - self.empty_since[slot] for slot in empty)
        hint = f"; clients refused: {'; '.join(self.refusals[-3:])}" if self.refusals else ""
        return (
            f"timed out after {timeout:g} s waiting for clients to serve {what}: slots {format_slots(empty)} "
            f"have no client (empty for up to {longest:.1f} s); {self.served} of {self.num_envs} slots are "
            f"served; clients connect to {self.address}{hint}"
        )

    def wait_for_first_client(self, timeout: float) -> None:
        """Handle joins until the vector's spaces are known (the first client brings them)."""
        deadline = time.monotonic() + timeout
        while self.observation_space is None:
            if time.monotonic() > deadline:
                raise RemoteTimeoutError(
                    f"timed out after {timeout:g} s waiting for a first client at {self.address} "
                    "to learn the spaces (pass observation_space and action_space to skip this wait)"
                )
            self._poll_once()

    def quarantine(self, slots: Iterable[int]) -> None:
        """Keep ``slots`` from being given to joining clients until :meth:`release`."""
        self.quarantined.update(slots)

    def release(self, slots: Iterable[int]) -> None:
        """Let joining clients (and those waiting in line) take ``slots`` again."""
        self.quarantined.difference_update(slots)
        self._admit_waiters()

    def poll(self) -> None:
        """Handle the control messages that arrived (joins, leaves), waiting at most ``POLL_SECONDS``."""
        self._poll_once()

    def lose(self, client: ClientInfo, reason: str, *, tell: bool = True) -> None:
        """Declare ``client`` lost: free its slots, tell it (if it can still hear), let waiters in."""
        if self.clients.pop(client.identity, None) is None:
            return
        now = time.monotonic()
        for slot in client.slots:
            if self.slots[slot] is client:
                self.slots[slot] = None
                self.empty_since[slot] = now
        for exchange in self._awaited.pop(client.identity, {}).values():
            if exchange.pending.pop(client.identity, None) is not None:
                exchange.lost.append(client)
        logger.info("%s is lost: %s; %d of %d slots served", client.describe(), reason, self.served, self.num_envs)
        if tell:
            self._try_send(client.identity, protocol.message(Kind.EVICT, {"reason": reason}))
        if self.on_lost is not None:
            self.on_lost(client, reason)
        self._admit_waiters()

    # -- commands ----------------------------------------------------------------------------------

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def start(
        self,
        clients: Sequence[ClientInfo],
        build: Callable[[ClientInfo, int], list[Any]],
        on_reply: Callable[[ClientInfo, protocol.Header, bytes], None],
        *,
        reply_kind: Kind,
        what: str,
    ) -> Exchange:
        """Send one command to each of ``clients``; their replies are handled while the server waits.

        ``build(client, seq)`` makes the command's frames (for all clients before any is sent, so that a
        value that cannot be encoded stops the command everywhere); ``on_reply(client, header,
        header_frame)`` must read the rest of the reply through :meth:`recv_into` / :meth:`recv_value`.
        Replies are handled by :meth:`wait` (of this or any later exchange), in arrival order. A client
        that goes away meanwhile (it left, its connection dropped, the watchdog found its process dead)
        or sends a malformed reply is declared lost (:meth:`lose`) and listed in ``Exchange.lost``.
        """
        seq = self.next_seq()
        commands = [(client, build(client, seq)) for client in clients]
        exchange = Exchange(seq, reply_kind, on_reply, what)
        for client, frames in commands:
            if self.send(client, frames):
                exchange.pending[client.identity] = client
                exchange.sent_at[client.identity] = time.monotonic()
                self._awaited.setdefault(client.identity, {})[seq] = exchange
            else:
                exchange.lost.append(client)
        return exchange

    def wait(self, done: Callable[[], bool], deadline: float) -> bool:
        """Handle messages (replies, joins, leaves) until ``done()``; False if ``deadline`` passed first."""
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
        on_reply: Callable[[ClientInfo, protocol.Header, bytes], None],
        *,
        reply_kind: Kind,
        timeout: float,
        what: str,
    ) -> list[ClientInfo]:
        """:meth:`start` a command and :meth:`finish` it: send it to ``clients`` and handle every reply.

        Returns:
            The clients lost during the exchange.
        """
        exchange = self.start(clients, build, on_reply, reply_kind=reply_kind, what=what)
        return self.finish(exchange, time.monotonic() + timeout, timeout)

    def finish(self, exchange: Exchange, deadline: float, timeout: float) -> list[ClientInfo]:
        """Wait for every reply of ``exchange`` (until ``deadline``, ``timeout`` seconds after it began).

        Returns:
            The clients lost during the exchange.

        Raises:
            RemoteEnvError: an env raised in a client (that of the lowest slot, naming it), raised
                after every other client has answered, so that no reply is left to confuse a later command.
            RemoteTimeoutError: a client, alive but silent, did not answer in time; the exchange is
                abandoned (its late replies will be dropped).
        """
        if not self.wait(lambda: not exchange.pending, deadline):
            waiting = "; ".join(client.describe() for client in exchange.pending.values())
            self.abandon(exchange)
            raise RemoteTimeoutError(f"timed out after {timeout:g} s waiting for {exchange.what} from {waiting}")
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
                exchange.on_reply(client, header, frame)
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

    def _unawait(self, identity: bytes, seq: int) -> None:
        awaited = self._awaited.get(identity)
        if awaited is not None:
            awaited.pop(seq, None)
            if not awaited:
                del self._awaited[identity]

    def send(self, client: ClientInfo, frames: list[Any]) -> bool:
        """Send one message to ``client``; if it cannot be routed any more, declare it lost and return False."""
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

    def recv_into(self, targets: Sequence[np.ndarray], what: str) -> None:
        """Receive the next frames of the current message straight into ``targets``."""
        transport.recv_into(self.socket, targets, what)

    def recv_rest(self) -> list[bytes]:
        """The remaining frames of the current message."""
        return transport.recv_rest(self.socket)

    def has_more(self) -> bool:
        """Whether the current message has more frames."""
        return bool(self.socket.get(transport.RCVMORE))

    def recv_value(self, client: ClientInfo, header: protocol.Header) -> Any:
        """The value section that ends the current message (None if the header has none)."""
        frames = self.recv_rest()
        if not header.flags & FLAG_VALUE:
            if frames:
                raise ProtocolError(f"{len(frames)} unexpected frames without a value section")
            return None
        return protocol.read_value(frames, allow_pickle=client.trusted)

    # -- observability -----------------------------------------------------------------------------

    def stats(self) -> list[dict[str, Any]]:
        """One dict per slot: who serves it and how well (see ``RemoteVectorEnv.stats``)."""
        now = time.monotonic()
        rows = []
        for slot, client in enumerate(self.slots):
            row: dict[str, Any] = {"slot": slot, "epoch": self.slot_epochs[slot], "served": client is not None}
            if client is None:
                row["empty_for"] = now - self.empty_since[slot]
            else:
                row.update(
                    client=client.name,
                    host=client.host,
                    pid=client.pid,
                    address=client.peer_address,
                    key=client.key,
                    session=client.session,
                    local=client.launch_index is not None,
                    steps=client.steps,
                    last_seen=now - client.last_seen,
                    latency=client.latency,
                    connected_for=now - client.joined_at,
                    rejoins=client.rejoins,
                )
            rows.append(row)
        return rows

    def connection_stats(self) -> dict[str, Any]:
        """The gate's view: security, connections open, handshakes accepted and denied, clients in line."""
        return {
            "address": self.address,
            "security": f"CURVE ({self.security.how})" if self.security is not None else "none",
            **self.gatekeeper.stats(),
            "clients": len(self.clients),
            "waiting": len(self.waiting),
            "recent_refusals": list(self.refusals),
        }

    # -- closing -----------------------------------------------------------------------------------

    def close(self, timeout: float = 5.0, gone: Callable[[ClientInfo], bool] | None = None) -> None:
        """Send CLOSE to every client (and waiter), wait up to ``timeout`` for their BYE, close the socket.

        ``gone(client)`` tells of clients known to be dead already, which are not waited for.
        """
        clients = list(self.clients.values())
        seq = self.next_seq()
        waiting = set()
        for identity in [client.identity for client in clients if gone is None or not gone(client)]:
            if self._try_send(identity, [protocol.pack_header(Kind.CLOSE, seq)]):
                waiting.add(identity)
        for identity in self.waiting:
            self._try_send(identity, [protocol.pack_header(Kind.CLOSE, seq)])
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            try:
                message = self._receive()
            except zmq.Again:
                continue
            if message is not None:
                self._drain()
                if message[1].kind == Kind.BYE:
                    waiting.discard(message[0])
        if waiting:
            logger.warning("%d client(s) did not acknowledge CLOSE within %g s", len(waiting), timeout)
        self.clients.clear()
        self.slots = [None] * self.num_envs
        self.gatekeeper.close(self.socket)
        self.socket.close(linger=0)
        self.context.term()

    # -- internals ---------------------------------------------------------------------------------

    def _receive(self) -> tuple[bytes, protocol.Header, bytes] | None:
        """The next message's routing id, header and header frame; None if it was malformed (then dropped).

        A malformed message from a client whose reply is awaited makes that client lost.

        Raises:
            zmq.Again: no message came within ``POLL_SECONDS``.
        """
        identity = self.socket.recv()
        frame = self.socket.recv()
        try:
            return identity, protocol.parse_header(frame), frame
        except ProtocolError as error:
            self._drain()
            client = self.clients.get(identity) if identity in self._awaited else None
            if client is not None:
                logger.error("%s sent a malformed reply: %s", client.describe(), error)
                self.lose(client, f"it sent a malformed reply: {error}")
            else:
                logger.warning("dropping a malformed message from peer %s: %s", identity.hex()[:16], error)
                self._try_send(identity, _error_message(str(error)))
            return None

    def _spin_until_readable(self, until: float) -> None:
        """Busy-check the socket until a message is there or ``until`` (``time.perf_counter``) passed."""
        events, clock, readable = self.socket.get, time.perf_counter, _POLLIN
        while not events(_EVENTS) & readable and clock() < until:
            pass

    def _poll_once(self, spin: bool = False) -> None:
        """Handle the next message (waiting at most ``POLL_SECONDS`` for it), then the periodic checks.

        ``spin``: a wait for replies, which first busy-checks the socket while replies come fast.
        """
        waiting_since = time.perf_counter()
        if spin and self._typical_wait < self.spin:
            self._spin_until_readable(waiting_since + self.spin)
        try:
            message = self._receive()
        except zmq.Again:
            message = None
        if spin:
            self._typical_wait += 0.25 * (time.perf_counter() - waiting_since - self._typical_wait)
        if message is not None:
            self._dispatch(*message)
        # also while messages keep coming: a dead client among busy ones must still be noticed
        self._checks()

    def _checks(self) -> None:
        """At most every ``POLL_SECONDS``: run the watchdog and probe the clients whose replies are awaited."""
        now = time.monotonic()
        if now - self._last_checks < POLL_SECONDS:
            return
        self._last_checks = now
        if self.watchdog is not None:
            self.watchdog()
        for client in [self.clients[identity] for identity in self._awaited if identity in self.clients]:
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
        client = self.clients.get(identity)
        if kind == Kind.ERROR and client is None:
            self._on_start_failure(identity, header)
            return
        self._drain()
        if kind == Kind.BYE:
            if client is not None:
                self.lose(client, "it left", tell=False)
            elif self.waiting.pop(identity, None) is not None:
                logger.info("a waiting client left the line; %d waiting", len(self.waiting))
        elif client is None:
            logger.warning("ignoring %s from a peer that is not a member", kind_name(kind))
            self._try_send(identity, protocol.message(Kind.EVICT, {"reason": "not a member: send HELLO to join"}))
        else:
            client.last_seen = time.monotonic()
            logger.debug("dropping a late %s (seq %d) from %s", kind_name(kind), header.seq, client.describe())

    def _on_start_failure(self, identity: bytes, header: protocol.Header) -> None:
        try:
            report = protocol.read_value(self.recv_rest())
            launch = report.get("launch") or {}
            text = f"{report['type']}: {report['message']}"
        except (ProtocolError, KeyError, TypeError, AttributeError) as error:
            logger.warning("ignoring a malformed ERROR from an unknown peer: %s", error)
            return
        index = self._verified_launch(launch)
        if index is not None:
            self.launch_failures[index] = report
        logger.error("client %r failed before joining: %s", str(report.get("name"))[:200], text)

    def _on_hello(self, identity: bytes, header: protocol.Header) -> None:
        if identity in self.clients:  # a repeated HELLO: answer as before
            self._drain()
            if not self._welcome(self.clients[identity]):
                self.lose(self.clients[identity], "its connection is gone", tell=False)
            return
        hello = None
        try:
            frames, peer = self._recv_rest_and_peer()
            if header.version != protocol.PROTOCOL_VERSION:
                raise _Refusal(
                    "version",
                    f"protocol version mismatch: the server speaks {protocol.PROTOCOL_VERSION}, "
                    f"the client {header.version}",
                )
            hello = protocol.read_value(frames)
            if not isinstance(hello, dict):
                raise ProtocolError("HELLO must carry a dict")
            previous = self._member_with_session(hello.get("previous_session"))
            if previous is not None:  # the same client, reconnected: its old membership ends here
                self.lose(previous, "it reconnected as a new session", tell=False)
            self._join(identity, hello, peer)
        except _Refusal as refusal:
            self._refuse_hello(identity, hello, refusal)
        except _MALFORMED as error:
            self.waiting.pop(identity, None)
            self._refuse(identity, "invalid", f"malformed HELLO: {type(error).__name__}: {error}")

    def _join(self, identity: bytes, hello: dict[str, Any], peer: _Peer) -> None:
        """Admit a client, or put it in line when there is no free slot and it asked to wait."""
        try:
            client = self._admit(identity, hello, peer)
        except _Refusal as refusal:
            if refusal.code != "full" or not hello.get("wait"):
                raise
            if identity not in self.waiting:
                if len(self.waiting) >= self.max_connections:
                    raise _Refusal("full", f"{refusal}, and the waiting line is full ({len(self.waiting)})") from None
                self.waiting[identity] = _Waiter(hello, peer)
                logger.info(
                    "no free slot for client %r; it waits in line (%d waiting)", hello.get("name"), len(self.waiting)
                )
            position = list(self.waiting).index(identity) + 1
            if not self._refuse(identity, "full", f"{refusal}; waiting in line at position {position}", waiting=True):
                del self.waiting[identity]  # it is gone: it does not hold a place in line
            return
        self.waiting.pop(identity, None)
        first = self.observation_space is None
        if first:
            self.set_spaces(client.observation_spaces[0], client.action_spaces[0])
        if not self._welcome(client):  # it went away (e.g. it died waiting in line): the slots stay free
            logger.info("client %r went away before its WELCOME", client.name)
            if first:
                self.observation_space = self.action_space = None
            return
        self.clients[identity] = client
        for slot in client.slots:
            self.slots[slot] = client
            self.slot_epochs[slot] += 1
        if first and self.on_first_spaces is not None:
            self.on_first_spaces(client)
        self._prepare_targets(client)
        if first:
            self._admit_waiters()  # those that waited for the spaces to be known
        logger.info(
            "%s joined from %s (pid %d, %s%s); %d of %d slots served",
            client.describe(),
            client.host,
            client.pid,
            client.peer_address or "local",
            f", key {client.key!r}" if client.key else "",
            self.served,
            self.num_envs,
        )
        if self.on_join is not None:
            self.on_join(client)

    def _admit_waiters(self) -> None:
        """Give free slots to the clients waiting in line, first come first served."""
        if self._admitting:  # a loss while admitting: the running loop goes on with the freed slots
            return
        self._admitting = True
        try:
            for identity in list(self.waiting):
                if not [slot for slot in self.empty_slots() if slot not in self.quarantined]:
                    return
                waiter = self.waiting.get(identity)
                if waiter is None:
                    continue
                try:
                    self._join(identity, waiter.hello, waiter.peer)
                except _Refusal as refusal:
                    if refusal.code != "full":  # its spaces do not match those now known
                        self._refuse_hello(identity, waiter.hello, refusal)
                except _MALFORMED as error:
                    self.waiting.pop(identity, None)
                    self._refuse(identity, "invalid", f"malformed HELLO: {type(error).__name__}: {error}")
        finally:
            self._admitting = False

    def _admit(self, identity: bytes, hello: dict[str, Any], peer: _Peer) -> ClientInfo:
        if hello.get("protocol") != protocol.PROTOCOL_VERSION:
            raise _Refusal(
                "version",
                f"protocol version mismatch: the server speaks {protocol.PROTOCOL_VERSION}, "
                f"the client {hello.get('protocol')}",
            )
        count = hello["num_envs"]
        if type(count) is not int or not 1 <= count <= protocol.MAX_ENVS_PER_CLIENT:
            raise ProtocolError(f"num_envs must be an int from 1 to {protocol.MAX_ENVS_PER_CLIENT}")
        pid, rejoins, metadata = hello.get("pid", 0), hello.get("rejoins", 0), hello.get("metadata") or {}
        if type(pid) is not int or type(rejoins) is not int or not isinstance(metadata, dict):
            raise ProtocolError("pid and rejoins must be ints, metadata a dict")
        render_mode = hello.get("render_mode")
        launch_index, trusted = self._check_launch(hello.get("launch"))
        if launch_index is None and self._reserved.all():
            raise _Refusal("private", "this server serves only the local clients it started itself")
        if self.observation_space is None and self.launches and launch_index != 0:
            # With launched clients, env_fns[0] defines the spaces (as in SyncVectorEnv): wait for it.
            raise _Refusal("full", "the spaces are not known yet: waiting for the client serving slot 0")
        if not trusted and self.allow_pickle is True and hello.get("allow_pickle") is True:
            trusted = True
        if trusted and hello.get("metadata_pickle"):
            extra = _unpickle_metadata(hello["metadata_pickle"])
            metadata = {**metadata, **extra}
        observation_spaces = _spaces_per_env(hello, "observation", count, trusted)
        action_spaces = _spaces_per_env(hello, "action", count, trusted)
        self._check_spaces(observation_spaces, action_spaces)
        if launch_index is not None:
            launch = self.launches[launch_index]
            if count != launch.count:
                raise _Refusal("invalid", f"launched client {launch_index} hosts {count} envs, expected {launch.count}")
            slots = list(range(launch.first_slot, launch.first_slot + count))
            if self.empty_slots(slots) != slots or self.quarantined.intersection(slots):
                raise _Refusal("full", f"the slots of launched client {launch_index} are not free yet")
        else:
            slots = self._free_slots(count)
        return ClientInfo(
            identity=identity,
            name=str(hello.get("name", "?"))[:200],
            host=str(hello.get("host", "?"))[:200],
            pid=pid,
            session=str(hello.get("session", ""))[:64],
            slots=slots,
            trusted=trusted,
            observation_spaces=observation_spaces,
            action_spaces=action_spaces,
            metadata=metadata,
            render_mode=render_mode if isinstance(render_mode, str) else None,
            launch_index=launch_index,
            peer_address=peer.address,
            key=peer.key,
            rejoins=rejoins,
        )

    def _member_with_session(self, session: Any) -> ClientInfo | None:
        if type(session) is not str or not session:
            return None
        return next((client for client in self.clients.values() if client.session == session), None)

    def _check_launch(self, launch: Any) -> tuple[int | None, bool]:
        """The launch index of a launched client (None for others) and whether it is trusted."""
        if launch is None:
            return None, False
        index = self._verified_launch(launch)
        if index is None:
            raise _Refusal("invalid", "the client claims to be a launched client, but its launch token is wrong")
        return index, self.allow_pickle is not False

    def _verified_launch(self, launch: Any) -> int | None:
        """The index of the launched client whose current token ``launch`` carries, else None."""
        index = launch.get("index") if isinstance(launch, dict) else None
        record = self.launches.get(index) if type(index) is int else None
        if record is None or not hmac.compare_digest(str(launch.get("token", "")), record.token):
            return None
        return index

    def _check_spaces(self, observation_spaces: list[gym.Space], action_spaces: list[gym.Space]) -> None:
        reference_obs = self.observation_space if self.observation_space is not None else observation_spaces[0]
        reference_act = self.action_space if self.action_space is not None else action_spaces[0]
        for index, (obs_space, act_space) in enumerate(zip(observation_spaces, action_spaces, strict=True)):
            mismatch = space_mismatch(
                self.observation_mode, reference_obs, reference_act, obs_space, act_space, self.vector_class
            )
            if mismatch is not None:
                kind, reason = mismatch
                raise _Refusal("spaces", f"{reason} (the client's env {index})", kind)

    def _free_slots(self, count: int) -> list[int]:
        free = [
            slot
            for slot in range(self.num_envs)
            if self.slots[slot] is None and not self._reserved[slot] and slot not in self.quarantined
        ]
        if len(free) < count:
            raise _Refusal(
                "full",
                f"no free slot: the vector has {self.num_envs} slots and {len(free)} are free, "
                f"this client offers {count} envs",
            )
        for start in range(len(free) - count + 1):  # prefer consecutive slots (received in place)
            if free[start + count - 1] - free[start] == count - 1:
                return free[start : start + count]
        return free[:count]

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
        welcome = {
            "protocol": protocol.PROTOCOL_VERSION,
            "server": self.name,
            "server_session": self.session,
            "slots": client.slots,
            "num_envs": self.num_envs,
            "autoreset_mode": self.autoreset_mode.value,
            "observation_space": codec.space_to_value(self.observation_space, allow_pickle=client.trusted),
            "action_space": codec.space_to_value(self.action_space, allow_pickle=client.trusted),
            "allow_pickle": client.trusted,
            "liveness_timeout": self.liveness_timeout,
            "reset_first": self.reset_first,
            "max_message_bytes": self.max_message_bytes,
        }
        return self._try_send(client.identity, protocol.message(Kind.WELCOME, welcome))

    def _refuse_hello(self, identity: bytes, hello: Any, refusal: _Refusal) -> None:
        """Refuse a HELLO for good; a launched client's refusal is kept for the learner to raise."""
        self.waiting.pop(identity, None)
        self._refuse(identity, refusal.code, str(refusal))
        index = self._verified_launch(hello.get("launch")) if isinstance(hello, dict) else None
        if index is not None:
            self.launch_refusals[index] = refusal

    def _refuse(self, identity: bytes, code: str, reason: str, *, waiting: bool = False) -> bool:
        """Send REFUSE; False if the peer cannot be reached any more."""
        if waiting:
            logger.debug("client waits in line: %s", reason)
        else:
            logger.warning("refused a client: %s", reason)
            self.refusals.append(reason)
            del self.refusals[:-10]
        answer = {"code": code, "reason": reason, "waiting": waiting}
        return self._try_send(identity, protocol.message(Kind.REFUSE, answer))

    def _try_send(self, identity: bytes, frames: list[Any]) -> bool:
        """Send a control message to a peer that may be gone; False if it cannot be routed."""
        try:
            self.socket.send_multipart([identity, *frames])
            return True
        except zmq.ZMQError:
            return False

    def _recv_rest_and_peer(self) -> tuple[list[bytes], _Peer]:
        """The remaining frames of the current message, and who sent it."""
        if not self.has_more():
            return [], _Peer()
        first = self.socket.recv(copy=False)
        return [first.bytes, *self.recv_rest()], _Peer(_property(first, "Peer-Address"), _property(first, "User-Id"))

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
        transport.drain(self.socket)


_MALFORMED = (ProtocolError, KeyError, TypeError, ValueError, OverflowError)
"""What parsing a malformed HELLO can raise."""


class _Refusal(Exception):
    """Why a HELLO is refused; ``error`` is the exception a launched client's refusal raises in the learner."""

    def __init__(self, code: str, reason: str, error: type[Exception] = RuntimeError) -> None:
        super().__init__(reason)
        self.code = code
        self.error = error


def space_mismatch(
    observation_mode: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    env_observation_space: gym.Space,
    env_action_space: gym.Space,
    vector_class: str = "RemoteVectorEnv",
) -> tuple[type[Exception], str] | None:
    """Whether an env's spaces do not fit the vector's, as ``SyncVectorEnv`` checks its envs'.

    Returns None if they fit, else the exception class ``SyncVectorEnv`` raises and its message, with
    ``vector_class`` where Gymnasium names its own class (with ``observation_mode="different"``, what
    ``batch_differing_spaces`` raises for the pair).
    """
    if observation_mode == "same":
        if env_observation_space != observation_space:
            return RuntimeError, (
                f"{vector_class}(..., observation_mode='same') however the sub-environments observation spaces are "
                f"not equivalent. single_observation_space={observation_space}, sub-environment "
                f"observation_space={env_observation_space}. If this is intentional, use "
                "`observation_mode='different'` instead."
            )
    else:
        if observation_mode == "different":
            try:
                batch_differing_spaces([observation_space, env_observation_space])
            except (TypeError, ValueError, AssertionError) as error:
                return type(error), str(error)
        if not is_space_dtype_shape_equiv(env_observation_space, observation_space):
            return RuntimeError, (
                f"{vector_class}(..., observation_mode='different' or custom space) however the sub-environments "
                "observation spaces do not share a common shape and dtype, single_observation_space="
                f"{observation_space}, sub-environment observation space={env_observation_space}"
            )
    if env_action_space != action_space:
        return RuntimeError, (
            "Sub-environment action space doesn't make the `single_action_space`, "
            f"action_space={env_action_space}, single_action_space={action_space}"
        )
    return None


def _error_message(text: str) -> list[Any]:
    return protocol.message(Kind.ERROR, {"type": "ProtocolError", "message": text, "traceback": "", "index": None})


def _unpickle_metadata(data: Any) -> dict[str, Any]:
    """The pickled metadata entries of a trusted client."""
    try:
        metadata = cloudpickle.loads(data)
    except Exception as error:  # a malformed pickle can raise anything
        raise ProtocolError(f"metadata_pickle does not unpickle: {type(error).__name__}: {error}") from None
    if not isinstance(metadata, dict):
        raise ProtocolError("metadata_pickle must hold a dict")
    return metadata


def _spaces_per_env(hello: dict[str, Any], which: str, count: int, trusted: bool) -> list[gym.Space]:
    distinct = hello[f"{which}_spaces"]
    index = hello[f"{which}_space_index"]
    if type(distinct) is not list or type(index) is not list or len(index) != count:
        raise ProtocolError(f"{which}_spaces / {which}_space_index do not describe {count} envs")
    decoded = [codec.space_from_value(value, allow_pickle=trusted) for value in distinct]
    if any(type(position) is not int or not 0 <= position < len(decoded) for position in index):
        raise ProtocolError(f"{which}_space_index refers to a space that is not there")
    return [decoded[position] for position in index]


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
