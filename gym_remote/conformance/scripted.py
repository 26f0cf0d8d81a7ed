"""A scripted raw server for the wire checks: a ROUTER socket that a check drives message by message.

Unlike :class:`~gym_remote.server.SlotServer` it decides nothing: a check sends exactly the messages
it wants (well-formed or not, built with :mod:`gym_remote.protocol` and :mod:`gym_remote.codec`)
and waits, bounded, for exactly the replies ``docs/PROTOCOL.md`` requires. Everything that arrives is
parsed strictly; what does not fit raises :class:`~gym_remote.conformance.report.CheckFailed` naming
what arrived, what was expected and what the server had sent before.

Example::

    with ScriptedServer(context.endpoint()) as server:
        server.watch(context.start_client(server.endpoint, 3))
        server.expect_hello()
        server.send_welcome([0, 1, 2])
        seq = server.send_reset([1, 2, 3])
        result = server.parse_result(server.expect(Kind.RESULT, seq=seq), 3)
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq
from gymnasium import spaces

from gym_remote import codec, protocol
from gym_remote.conformance.reference import preview
from gym_remote.conformance.report import CheckFailed
from gym_remote.conformance.subject import ClientProcess
from gym_remote.errors import ProtocolError
from gym_remote.links.zeromq import send_frames, set_heartbeats, terminate
from gym_remote.probe import probe_spaces
from gym_remote.protocol import FLAG_VALUE, NO_OPTIONS, Kind, kind_name
from gym_remote.security import DEFAULT_MAX_MESSAGE_BYTES, is_local_endpoint

__all__ = [
    "ABSENT",
    "HELLO_SECONDS",
    "REPLY_SECONDS",
    "Received",
    "Result",
    "ScriptedServer",
    "ZapGatekeeper",
    "leaf_names",
]

logger = logging.getLogger("gym_remote")

REPLY_SECONDS = 5.0
"""How long a check waits for the reply to a command (the probe answers in microseconds)."""

HELLO_SECONDS = 15.0
"""How long a check waits for a freshly started client's HELLO (its process has to start first)."""

EXIT_GRACE_SECONDS = 0.5
"""After a watched client exited, how long to wait still for what it sent before it exited."""

HISTORY_SHOWN = 4
"""How many of the last messages sent a failure message lists."""

ABSENT: Any = NO_OPTIONS
"""Leave an optional field out of a command (RESET's ``options``, CALL's ``query``, SET_ATTR's ``outermost``)."""

WELCOME_KEYS = frozenset(
    {
        "protocol",
        "server",
        "server_session",
        "slots",
        "num_envs",
        "autoreset_mode",
        "observation_space",
        "action_space",
        "allow_pickle",
        "liveness_timeout",
        "reset_first",
        "max_message_bytes",
        "data_channel",
    }
)
"""The keys of WELCOME in PROTOCOL.md §7."""

CLIENT_KINDS = frozenset({Kind.HELLO, Kind.BYE, Kind.RESULT, Kind.CALL_RESULT, Kind.ERROR})


def leaf_names(space: spaces.Space, prefix: str = "") -> list[str]:
    """Names of the array leaves of ``space`` in wire order, e.g. ``["['zeta']", "['mid'][0]"]``."""
    if isinstance(space, spaces.Dict):
        return [name for key, child in space.spaces.items() for name in leaf_names(child, f"{prefix}[{key!r}]")]
    if isinstance(space, spaces.Tuple):
        return [name for i, child in enumerate(space.spaces) for name in leaf_names(child, f"{prefix}[{i}]")]
    return [prefix or "(the whole space)"]


@dataclass
class Received:
    """One message from a client: its routing id, parsed header, frames, and decoded value section."""

    identity: bytes
    header: protocol.Header
    frames: list[bytes]
    """Every frame after the routing id; ``frames[0]`` is the header frame."""
    arrays: list[bytes]
    """A RESULT's observation frames (one per leaf of the observation space); else empty."""
    value: Any
    """The value section, decoded; None when the message has none (no FLAG_VALUE)."""

    @property
    def kind(self) -> int:
        return self.header.kind

    @property
    def seq(self) -> int:
        return self.header.seq

    def describe(self) -> str:
        """E.g. ``ERROR (seq 3, count 0): AttributeError: 'ProbeEnv' object has no attribute 'x'``."""
        header = self.header
        text = f"{kind_name(header.kind)} (seq {header.seq}, count {header.count}, flags {header.flags})"
        value = self.value
        if header.kind == Kind.ERROR and isinstance(value, dict):
            return f"{text}: {value.get('type')}: {preview(value.get('message'), 300)}"
        if header.kind == Kind.HELLO and isinstance(value, dict):
            return f"{text} from session {preview(value.get('session'))}"
        if value is not None:
            return f"{text} with the value {preview(value)}"
        return text


@dataclass
class Result:
    """A RESULT, checked against the layout of ``count`` probe envs."""

    seq: int
    count: int
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    observations: list[np.ndarray]
    """One array per observation leaf, of shape ``(count, *leaf.shape)`` in the leaf's dtype."""
    infos: list[Any] | None
    final: list[Any] | None
    value: dict[str, Any] = field(default_factory=dict)


def repeated_key(body: Any) -> str | None:
    """The first key that some object of the JSON ``body`` (one that decodes) holds twice, or None."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> None:
        keys = [key for key, _ in items]
        if not found and len(set(keys)) < len(keys):
            found.append(next(key for index, key in enumerate(keys) if key in keys[:index]))

    json.loads(bytes(body), object_pairs_hook=pairs)
    return found[0] if found else None


class ScriptedServer:
    """A bound ROUTER socket that sends what a check scripts and receives strictly, with bounded waits.

    Its options are the real server's (``ZMQ_LINGER`` 0, ``ROUTER_MANDATORY``, ``MAXMSGSIZE``, ZMTP
    heartbeats for ``liveness_timeout``), NULL mechanism, loopback or ipc endpoints only. Use it as a
    context manager: on the way out it ends the clients it watches, then closes its socket and context
    (bounded).

    Args:
        endpoint: where to bind, e.g. ``context.endpoint()``.
        liveness_timeout: the heartbeat timeout, as the client under test is given.
        zap_domain: a ZAP domain, so that a check's own ZAP handler (in :attr:`context`) decides every handshake.
    """

    def __init__(self, endpoint: str, *, liveness_timeout: float = 2.0, zap_domain: bytes | None = None) -> None:
        if not is_local_endpoint(endpoint):
            raise ValueError(f"the scripted server binds only loopback or ipc endpoints, not {endpoint!r}")
        self.endpoint = endpoint
        self.liveness_timeout = float(liveness_timeout)
        self.max_message_bytes = DEFAULT_MAX_MESSAGE_BYTES
        self.observation_space, self.action_space = probe_spaces()
        self.use_observation_space(self.observation_space)
        action_leaves = codec.array_leaf_spaces(self.action_space)
        if action_leaves is None:
            raise ValueError("the scripted server's action space (probe_spaces()) must be an array space")
        self.action_leaves = action_leaves
        self.peer: bytes | None = None
        """The routing id commands go to and replies must come from (set by :meth:`expect_hello`)."""
        self.hosted = 0
        """The number of envs of the welcomed client (the length of the last WELCOME's slots)."""
        self.seq = 0
        self.sent: list[str] = []
        self.clients: list[ClientProcess] = []
        self.context = zmq.Context()
        sock = self.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        sock.setsockopt(zmq.SNDTIMEO, 1000)
        set_heartbeats(sock, self.liveness_timeout)
        if zap_domain is not None:  # libzmq then asks a ZAP handler in self.context about every handshake
            sock.setsockopt(zmq.ZAP_DOMAIN, zap_domain)
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as error:
            sock.close(linger=0)
            terminate(self.context, 2.0)
            raise OSError(f"the scripted server cannot bind {endpoint!r}: {error}") from None
        self.socket = sock

    def use_observation_space(self, space: spaces.Space) -> None:
        """Send ``space`` in WELCOME as the vector's observation space, and read RESULTs in its layout."""
        leaves = codec.array_leaf_spaces(space)
        if leaves is None:
            raise ValueError(f"the scripted server's observation space must be an array space, not {space}")
        self.observation_space = space
        self.observation_leaves = leaves
        self.observation_names = leaf_names(space)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """End the watched clients, close the socket and terminate the context, waiting at most 2 s."""
        for process in self.clients:
            process.end()  # while the socket is open to take its BYE (a client lingers on a BYE it cannot send)
        if not self.socket.closed:
            self.socket.close(linger=0)
            terminate(self.context, 2.0)

    def watch(self, process: ClientProcess) -> ClientProcess:
        """Fail waits early (and say so) when ``process`` exits while a reply is awaited."""
        self.clients.append(process)
        return process

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    # -- failing -----------------------------------------------------------------------------------

    def fail(self, text: str) -> CheckFailed:
        """A CheckFailed for ``text``, followed by the last messages this server sent (to raise)."""
        lines = [text]
        if self.sent:
            lines.append("the scripted server had sent (most recent last):")
            lines.extend(f"  {note}" for note in self.sent[-HISTORY_SHOWN:])
        return CheckFailed("\n".join(lines))

    def _exited(self) -> str:
        """How the watched clients ended, if any did ("" while all run)."""
        return "; ".join(
            f"{process.label} (pid {process.pid}) exited with status {process.process.returncode}"
            for process in self.clients
            if not process.running()
        )

    # -- receiving ---------------------------------------------------------------------------------

    def receive(self, timeout: float, *, stop_on_exit: bool = False) -> Received | None:
        """The next message from any peer, parsed; None if none came within ``timeout`` seconds
        (or, with ``stop_on_exit``, soon after a watched client exited).

        Raises:
            CheckFailed: the message is malformed (bad header, version, flags, value section).
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if self.socket.poll(max(0, int(min(remaining, 0.1) * 1000))):
                return self._parse(self.socket.recv_multipart(zmq.NOBLOCK))
            if remaining <= 0:
                return None
            if stop_on_exit and self._exited():
                deadline = min(deadline, time.monotonic() + EXIT_GRACE_SECONDS)
                stop_on_exit = False

    def _parse(self, raw: list[bytes]) -> Received:
        identity, frames = raw[0], raw[1:]
        if not frames:
            raise self.fail("the client sent a message with no frame after its routing id (PROTOCOL.md §2)")
        try:
            header = protocol.parse_header(frames[0])
        except ProtocolError as error:
            raise self.fail(
                f"the client sent a malformed message: {error} (PROTOCOL.md §2.1); its first frame starts "
                f"{bytes(frames[0][:24])!r}"
            ) from None
        name = kind_name(header.kind)
        if header.version != protocol.PROTOCOL_VERSION:
            raise self.fail(f"the client sent {name} with header version {header.version}, expected 2 (§2.1)")
        if header.kind not in CLIENT_KINDS:
            raise self.fail(f"the client sent {name}, a kind only a server sends (PROTOCOL.md §4)")
        if header.flags & ~FLAG_VALUE:
            raise self.fail(
                f"the client sent {name} with flags {header.flags:#x}: a client's messages may carry only "
                "FLAG_VALUE (1); FLAG_DTYPES and FLAG_SUBSET are for commands, other bits are 0 (§2.1)"
            )
        if header.kind != Kind.RESULT and len(frames[0]) != protocol.HEADER_SIZE:
            raise self.fail(
                f"the client sent {name} whose header frame has {len(frames[0])} bytes, expected 16 "
                "(only RESULT's header frame carries more, §2)"
            )
        arrays: list[bytes] = []
        rest = frames[1:]
        if header.kind == Kind.RESULT:
            leaves = len(self.observation_leaves)
            arrays, rest = frames[1 : 1 + leaves], frames[1 + leaves :]
            if len(arrays) < leaves:
                raise self.fail(
                    f"the client sent a RESULT (seq {header.seq}) with {len(arrays)} observation frame(s), "
                    f"expected {leaves}, one per leaf of the observation space {self.observation_names} (§5.4)"
                )
        value = None
        if header.flags & FLAG_VALUE:
            try:
                value = protocol.read_value(rest)
            except ProtocolError as error:
                raise self.fail(
                    f"the client sent {name} (seq {header.seq}) whose value section does not decode: {error} "
                    "(PROTOCOL.md §2.2, §3)"
                ) from None
            repeated = repeated_key(rest[0])
            if repeated is not None:
                raise self.fail(
                    f"the client sent {name} (seq {header.seq}) whose body has an object with the key {repeated!r} "
                    "twice: the keys of one object are distinct, and a sender never repeats one (PROTOCOL.md §3.1)"
                )
        elif rest:
            raise self.fail(
                f"the client sent {name} (seq {header.seq}) with {len(rest)} frame(s) more than its layout has, "
                "and no FLAG_VALUE (§2)"
            )
        received = Received(identity, header, frames, arrays, value)
        logger.debug("scripted server received %s from %s", received.describe(), identity[:40])
        return received

    def expect(
        self,
        kind: Kind,
        *,
        seq: int | None = None,
        timeout: float = REPLY_SECONDS,
        why: str = "",
        count: int | None = 0,
    ) -> Received:
        """The next message, which must be ``kind`` (echoing ``seq`` if given) from the current peer.

        ``count``: the header count it must have (None: any; RESULT's is checked by :meth:`parse_result`).
        ``why``: the requirement, for the failure message (e.g. ``"PROTOCOL.md §5.2: ..."``).

        Raises:
            CheckFailed: nothing came in time, or something else came.
        """
        wanted = kind_name(kind) + (f" echoing seq {seq}" if seq is not None else "")
        because = f"\n({why})" if why else ""
        received = self.receive(timeout, stop_on_exit=True)
        if received is None:
            ended = self._exited()
            if ended:
                raise self.fail(f"expected {wanted}, but the client exited first: {ended}{because}")
            raise self.fail(f"expected {wanted} within {timeout:g} s, but nothing came{because}")
        if received.kind != kind:
            raise self.fail(f"expected {wanted}, but got {received.describe()}{because}")
        if kind != Kind.HELLO and self.peer is not None and received.identity != self.peer:
            raise self.fail(
                f"expected {wanted} from the welcomed session {self.peer[:64]!r}, but it came from the routing id "
                f"{received.identity[:64]!r}{because}"
            )
        if seq is not None and received.seq != seq:
            raise self.fail(
                f"expected {wanted}, but got {kind_name(kind)} with seq {received.seq}: a reply echoes the seq of "
                f"the command it answers (PROTOCOL.md §6){because}"
            )
        if count is not None and kind != Kind.RESULT and received.header.count != count:
            raise self.fail(
                f"the client's {received.describe()} has header count {received.header.count}, expected {count} "
                f"(PROTOCOL.md §2.1: count is k for HELLO, as the command for RESULT, else 0){because}"
            )
        return received

    def expect_hello(self, *, timeout: float = HELLO_SECONDS, count: int | None = None) -> Received:
        """A HELLO from a new client, whose routing id becomes :attr:`peer`."""
        received = self.expect(
            Kind.HELLO, timeout=timeout, count=count, why="PROTOCOL.md §7: a client starts with HELLO"
        )
        if not isinstance(received.value, dict):
            raise self.fail(f"the HELLO carries {preview(received.value)}, not a dict (PROTOCOL.md §7)")
        self.peer = received.identity
        return received

    def expect_silence(self, seconds: float, *, why: str = "") -> None:
        """Nothing may arrive for ``seconds``."""
        received = self.receive(seconds)
        if received is not None:
            because = f"\n({why})" if why else ""
            raise self.fail(f"expected no message for {seconds:g} s, but got {received.describe()}{because}")

    def parse_result(self, received: Received, count: int) -> Result:
        """Check a RESULT's layout for ``count`` envs and read its parts.

        Raises:
            CheckFailed: its count, scalars, observation frames or value section do not fit.
        """
        header = received.header
        seq = header.seq
        if header.count != count:
            raise self.fail(
                f"the RESULT (seq {seq}) has header count {header.count}, expected {count}: as the command it "
                "answers (PROTOCOL.md §2.1, §5.5)"
            )
        try:
            rewards, terminated, truncated = protocol.parse_result_scalars(received.frames[0], count)
        except ProtocolError as error:
            raise self.fail(
                f"RESULT (seq {seq}): {error}; frame 0 is the header, then {count} float64 rewards, {count} "
                f"terminated bytes and {count} truncated bytes (PROTOCOL.md §5.4)"
            ) from None
        observations = []
        for name, leaf, frame in zip(self.observation_names, self.observation_leaves, received.arrays):
            expected = count * math.prod(leaf.shape) * leaf.dtype.itemsize
            if len(frame) != expected:
                raise self.fail(
                    f"RESULT (seq {seq}): the observation frame of leaf {name} has {len(frame)} bytes, expected "
                    f"{expected} ({count} envs of dtype {leaf.dtype.str}, shape {leaf.shape}; PROTOCOL.md §5.1)"
                )
            observations.append(np.frombuffer(frame, dtype=leaf.dtype).reshape((count, *leaf.shape)))
        value = received.value if received.value is not None else {}
        if type(value) is not dict:
            raise self.fail(f"RESULT (seq {seq}): its value section holds {preview(value)}, not a dict (§5.4)")
        if "obs" in value:
            raise self.fail(
                f"RESULT (seq {seq}) carries 'obs' in its value section, which is only allowed for an observation "
                "space without an array layout; the probe's observations travel as array frames (§5.4)"
            )
        lists = {}
        for key in ("infos", "final"):
            entries = value.get(key)
            if entries is not None and (type(entries) is not list or len(entries) != count):
                raise self.fail(
                    f"RESULT (seq {seq}): {key!r} must be a list of {count} entries, one per env, got "
                    f"{preview(entries)} (§5.4)"
                )
            lists[key] = entries
        return Result(
            seq,
            count,
            rewards.copy(),
            terminated.copy(),
            truncated.copy(),
            observations,
            lists["infos"],
            lists["final"],
            value,
        )

    # -- sending -----------------------------------------------------------------------------------

    def send_raw(self, frames: Sequence[Any], note: str, *, identity: bytes | None = None) -> None:
        """Send ``frames`` (after the routing id) to ``identity`` (default :attr:`peer`); ``note`` logs it."""
        target = self.peer if identity is None else identity
        if target is None:
            raise RuntimeError("the scripted server has no client to send to yet: expect a HELLO first")
        self.sent.append(note)
        logger.debug("scripted server sends %s", note)
        try:
            send_frames(self.socket, [target, *frames])
        except zmq.ZMQError as error:
            ended = self._exited()
            raise self.fail(
                f"could not send {note}: {error} (the client's connection is gone{': ' + ended if ended else ''})"
            ) from None

    def send(
        self,
        kind: Kind,
        value: Any = None,
        *,
        seq: int = 0,
        count: int = 0,
        indexes: Sequence[int] | None = None,
        identity: bytes | None = None,
    ) -> int:
        """Send one control message or command (a value section unless ``value`` is None); returns ``seq``."""
        frames = protocol.message(kind, value, seq=seq, count=count, indexes=indexes)
        note = f"{kind_name(kind)} seq {seq}, count {count}"
        if indexes is not None:
            note += f", FLAG_SUBSET indexes {list(indexes)}"
        if value is not None:
            note += f": {preview(value, 200)}"
        self.send_raw(frames, note, identity=identity)
        return seq

    def _command(self, kind: Kind, value: Any, indexes: Sequence[int] | None, count: int | None) -> int:
        if count is None:
            count = self.hosted if indexes is None else len(indexes)
        return self.send(kind, value, seq=self.next_seq(), count=count, indexes=indexes)

    def welcome_value(
        self,
        slots: Sequence[int],
        *,
        num_envs: int | None = None,
        autoreset_mode: Any = "NextStep",
        reset_first: bool = False,
        allow_pickle: bool = False,
        data_channel: bool = False,
        **extra: Any,
    ) -> dict[str, Any]:
        """A WELCOME value with every key of PROTOCOL.md §7, for the probe's spaces; ``extra`` adds keys."""
        return {
            "protocol": protocol.PROTOCOL_VERSION,
            "server": "gym-remote conformance",
            "server_session": secrets.token_hex(16),
            "slots": [int(slot) for slot in slots],
            "num_envs": int(num_envs if num_envs is not None else max(slots) + 1),
            "autoreset_mode": getattr(autoreset_mode, "value", autoreset_mode),
            "observation_space": codec.space_to_value(self.observation_space),
            "action_space": codec.space_to_value(self.action_space),
            "allow_pickle": allow_pickle,
            "liveness_timeout": self.liveness_timeout,
            "reset_first": reset_first,
            "max_message_bytes": self.max_message_bytes,
            "data_channel": data_channel,
            **extra,
        }

    def send_welcome(self, slots: Sequence[int], *, identity: bytes | None = None, **options: Any) -> dict[str, Any]:
        """Send WELCOME (see :meth:`welcome_value` for ``options``); returns its value."""
        welcome = self.welcome_value(slots, **options)
        if identity is not None:
            self.peer = identity
        self.hosted = len(welcome["slots"])
        frames = protocol.message(Kind.WELCOME, welcome)
        shown = {key: welcome[key] for key in ("slots", "num_envs", "autoreset_mode", "reset_first")}
        unknown = sorted(set(welcome) - WELCOME_KEYS)
        self.send_raw(frames, f"WELCOME {shown}" + (f" with the extra keys {unknown}" if unknown else ""))
        return welcome

    def send_refuse(self, code: str, reason: str, *, waiting: bool = False, version: int | None = None) -> None:
        """Send REFUSE; ``version``: the header's protocol version (a server of another version, §7)."""
        value = {"code": code, "reason": reason, "waiting": waiting}
        frames = protocol.message(Kind.REFUSE, value)
        if version is not None:
            frames[0] = protocol.HEADER.pack(protocol.MAGIC, version, Kind.REFUSE, FLAG_VALUE, 0, 0)
        note = f"REFUSE{'' if version is None else f' with header version {version}'}: {value}"
        self.send_raw(frames, note)

    def send_reset(
        self,
        seeds: Sequence[int | None],
        *,
        options: Any = ABSENT,
        indexes: Sequence[int] | None = None,
        count: int | None = None,
    ) -> int:
        """Send RESET (``options`` ABSENT: the key is left out); returns its seq."""
        value: dict[str, Any] = {"seeds": list(seeds)}
        if options is not ABSENT:
            value["options"] = options
        return self._command(Kind.RESET, value, indexes, count)

    def step_frames(
        self,
        seq: int,
        actions: Sequence[np.ndarray],
        *,
        indexes: Sequence[int] | None = None,
        dtypes: Sequence[Any] | None = None,
    ) -> list[Any]:
        """The frames of a STEP whose actions travel as array frames, one per action leaf (§5.4).

        ``actions``: the leaf arrays, each ``(c, *leaf.shape)``; they travel in the leaves' dtypes, or in
        ``dtypes`` (listed after the header, FLAG_DTYPES).
        """
        count = len(actions[0])
        if dtypes is None:
            arrays = [np.ascontiguousarray(a, dtype=leaf.dtype) for a, leaf in zip(actions, self.action_leaves)]
            header = protocol.pack_step_header(seq, count, subset=indexes is not None)
        else:
            listed = [np.dtype(dtype) for dtype in dtypes]
            arrays = [np.ascontiguousarray(a, dtype=dtype) for a, dtype in zip(actions, listed)]
            header = protocol.pack_step_header(seq, count, listed, subset=indexes is not None)
        subset = [] if indexes is None else [protocol.index_frame(indexes)]
        return [header, *subset, *arrays]

    def send_step(
        self,
        actions: Sequence[np.ndarray],
        *,
        indexes: Sequence[int] | None = None,
        dtypes: Sequence[Any] | None = None,
    ) -> int:
        """Send STEP with these action leaves (see :meth:`step_frames`); returns its seq."""
        seq = self.next_seq()
        frames = self.step_frames(seq, actions, indexes=indexes, dtypes=dtypes)
        note = f"STEP seq {seq}, count {len(actions[0])}"
        if indexes is not None:
            note += f", FLAG_SUBSET indexes {list(indexes)}"
        if dtypes is not None:
            note += f", FLAG_DTYPES {json.dumps([np.dtype(d).str for d in dtypes])}"
        rows = [[a[row].tolist() for a in actions] for row in range(len(actions[0]))]
        self.send_raw(frames, f"{note}: actions {preview(rows, 200)}")
        return seq

    def send_call(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        query: Any = ABSENT,
        indexes: Sequence[int] | None = None,
    ) -> int:
        """Send CALL (with ``query``: ``{"name", "query"}``, no args); returns its seq."""
        if query is ABSENT:
            value: dict[str, Any] = {"name": name, "args": list(args), "kwargs": dict(kwargs or {})}
        else:
            value = {"name": name, "query": query}
        return self._command(Kind.CALL, value, indexes, None)

    def send_set_attr(
        self, name: str, values: Sequence[Any], *, outermost: Any = ABSENT, indexes: Sequence[int] | None = None
    ) -> int:
        """Send SET_ATTR; returns its seq."""
        value: dict[str, Any] = {"name": name, "values": list(values)}
        if outermost is not ABSENT:
            value["outermost"] = outermost
        return self._command(Kind.SET_ATTR, value, indexes, None)

    def send_ping(self) -> None:
        self.send(Kind.PING)

    def send_evict(self, reason: str) -> None:
        self.send(Kind.EVICT, {"reason": reason})

    def send_close(self) -> int:
        """Send CLOSE with a fresh seq; returns it."""
        return self.send(Kind.CLOSE, seq=self.next_seq())

    def send_error(self, message: str) -> None:
        """Send the server's ERROR (seq 0), as for a malformed message (PROTOCOL.md §8)."""
        self.send(Kind.ERROR, {"type": "ProtocolError", "message": message, "traceback": "", "index": None})


class ZapGatekeeper:
    """A ZAP handler (RFC 27) in the context of a scripted server made with a ``zap_domain``: answers the first
    ``refusals`` handshakes with status 500 ("not now") and the others with 200, and notes when it answered.
    Close it before the server."""

    def __init__(self, server: ScriptedServer, refusals: int = 1) -> None:
        self.refusals = refusals
        self.answered: list[tuple[float, bytes]] = []
        self._socket = server.context.socket(zmq.REP)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind("inproc://zeromq.zap.01")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="conformance-zap", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._socket.poll(50):
                continue
            request = self._socket.recv_multipart()
            status = b"500" if len(self.answered) < self.refusals else b"200"
            text = b"conformance check: not now" if status == b"500" else b"OK"
            self.answered.append((time.monotonic(), status))  # (before the reply: the client acts on the reply)
            self._socket.send_multipart([b"1.0", request[1], status, text, b"", b""])

    def close(self) -> None:
        """Stop answering and close the handler's socket (waits at most 2 s for its thread)."""
        self._stop.set()
        self._thread.join(2.0)
        self._socket.close(linger=0)
