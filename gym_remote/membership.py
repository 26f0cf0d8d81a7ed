"""Who serves which slot: the slot table, the waiting line, and the rules of a HELLO.

:class:`Membership` owns no socket and calls nothing back. The server hands it what happened (a
HELLO arrived, a client was lost, a waiter may come in now) and it answers with a decision
(:class:`Admit` these slots, :class:`Refuse` for this reason, wait in line); the server then does
the I/O (WELCOME, REFUSE) and tells it what became of it (:meth:`Membership.join`). Everything
here runs without a network, and is tested so.

Example:
    >>> import gymnasium as gym
    >>> from gym_remote.membership import Admit, Membership, Peer
    >>> members = Membership(2, observation_mode="same", allow_pickle=None)
    >>> from gym_remote import codec
    >>> space = codec.space_to_value(gym.spaces.Discrete(3), allow_pickle=False)
    >>> hello = {"protocol": 2, "num_envs": 2, "name": "sim",
    ...          "observation_spaces": [space], "observation_space_index": [0, 0],
    ...          "action_spaces": [space], "action_space_index": [0, 0]}
    >>> decision = members.hello(b"peer-1", hello, Peer())
    >>> isinstance(decision, Admit), decision.client.slots
    (True, [0, 1])
    >>> members.join(decision.client)
    >>> members.served, members.empty_slots()
    (2, [])
"""

from __future__ import annotations

import hmac
import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector.utils import batch_differing_spaces

from gym_remote import codec, protocol
from gym_remote.errors import ProtocolError, RemoteEnvError, remote_env_error
from gym_remote.gymnasium_versions import SPACES_ERROR
from gym_remote.protocol import format_slots

__all__ = ["Admit", "ClientInfo", "LaunchSlot", "Membership", "Peer", "Refuse", "data_channel_token", "space_mismatch"]

logger = logging.getLogger(__name__)


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
    plane: str = (
        "zmq"  # where its commands travel: "zmq", "uds" (the same-host data channel), "shm" (and its mailboxes)
    )
    rejoins: int = 0
    dtypes: frozenset[np.dtype] | None = None  # the dtypes it accepts in a STEP's array frames (None: any)
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

    def env_error(self, report: Any, what: str, index: Any = None) -> RemoteEnvError:
        """The error to raise for an error ``report`` of this client's (PROTOCOL.md §8) during ``what``, naming
        the slot of the env that raised: ``index`` (a local index), or else the report's own ``index``."""
        if not isinstance(report, dict):
            return RemoteEnvError(f"{self.describe()} reported an unreadable error during {what}")
        index = report.get("index") if index is None else index
        slot = self.slots[index] if type(index) is int and 0 <= index < self.count else None
        where = f"slot {slot} of {self.describe()}" if slot is not None else self.describe()
        text = f"{what} failed in {where}: {report.get('type')}: {report.get('message')}"
        return remote_env_error(text, report, slot)


def accepted_dtypes(listed: Any) -> frozenset[np.dtype] | None:
    """The dtypes a HELLO's ``dtypes`` says the client accepts in a STEP's array frames (None: any).

    >>> sorted(dtype.str for dtype in accepted_dtypes(["<f4", "|u1"]))
    ['<f4', '|u1']
    """
    if listed is None:
        return None
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        raise ProtocolError("dtypes must be a list of dtype strings")
    return frozenset(codec.check_dtype(name) for name in listed)


def data_channel_token(hello: dict[str, Any]) -> bytes | None:
    """The token of the data channel a HELLO offers (PROTOCOL.md §13), or None if it offers none.

    An offer that is not ``{"token": 32 hex digits}`` is no offer: the client is served over ZeroMQ.
    """
    offer = hello.get("data_channel")
    token = offer.get("token") if isinstance(offer, dict) else None
    if type(token) is not str or len(token) != 32 or token.strip("0123456789abcdef"):
        return None
    return bytes.fromhex(token)


@dataclass
class LaunchSlot:
    """Slots reserved for a client the learner launched itself, which proves itself with ``token``."""

    index: int
    first_slot: int
    count: int
    token: str


@dataclass(frozen=True)
class Peer:
    """What libzmq tells of a message's sender: its network address and the name of its CURVE key."""

    address: str = ""
    key: str = ""


@dataclass
class Admit:
    """Welcome ``client`` (then :meth:`Membership.join` it once its WELCOME is sent)."""

    client: ClientInfo


@dataclass
class Refuse:
    """Send REFUSE with ``code`` and ``reason``; ``waiting``: the client keeps its place in line.

    ``launch_index``: the refused client is a launched one (its launcher learns why, ``error`` being
    the exception the learner raises for it).
    """

    code: str
    reason: str
    waiting: bool = False
    launch_index: int | None = None
    error: type[Exception] = RuntimeError
    client: str = "a client"  # who, for logs: "client 'name' from host (pid N)"


@dataclass
class _Waiter:
    """A client that found no free slot and waits in line for one."""

    hello: dict[str, Any]
    peer: Peer


class _Refusal(Exception):
    """Why a HELLO is refused: ``reason``, as the learner raises it for its own clients (of class ``error``), and
    ``plain``, as any other client is told it (default: ``reason``)."""

    def __init__(self, code: str, reason: str, error: type[Exception] = RuntimeError, plain: str = "") -> None:
        super().__init__(reason)
        self.code = code
        self.error = error
        self.plain = plain or reason


_MALFORMED = (ProtocolError, KeyError, TypeError, ValueError, OverflowError)
"""What parsing a malformed HELLO can raise."""

MAX_REFUSALS_KEPT = 10

LEFT = "it left"
"""The reason of a loss whose client said goodbye (BYE)."""

RECONNECTED = "it reconnected as a new session"
"""The reason of a loss whose client joined again (a rejoin, not a failure)."""


class Membership:
    """The slot table of ``num_envs`` slots and the rules by which clients join it.

    Args:
        num_envs: number of slots.
        observation_mode: ``"same"``, ``"different"`` or a custom space pair, as in ``SyncVectorEnv``;
            decides how a client's observation spaces must match the vector's.
        vector_class: the vector env's class name, in the words of a refusal for spaces.
        allow_pickle: ``True`` lets remote clients that ask for it use the trusted pickle mode;
            launched clients are trusted unless this is ``False``.
        launches: slots reserved for launched clients.
        max_waiting: longest the waiting line may grow.
    """

    def __init__(
        self,
        num_envs: int,
        *,
        observation_mode: Any,
        vector_class: str = "RemoteVectorEnv",
        allow_pickle: bool | None,
        launches: Sequence[LaunchSlot] = (),
        max_waiting: int = 1024,
    ) -> None:
        self.num_envs = num_envs
        self.observation_mode = observation_mode
        self.vector_class = vector_class
        self.allow_pickle = allow_pickle
        self.max_waiting = max_waiting
        self.launches = {launch.index: launch for launch in launches}
        self._reserved = np.zeros(num_envs, dtype=bool)
        for launch in launches:
            self._reserved[launch.first_slot : launch.first_slot + launch.count] = True
        self.slots: list[ClientInfo | None] = [None] * num_envs
        self._every_slot = list(range(num_envs))
        # what every step asks of the slots, worked out once after each change of them (None: not yet)
        self._slot_summary: tuple[list[ClientInfo], bool] | None = None
        self.clients: dict[bytes, ClientInfo] = {}
        self.waiting: dict[bytes, _Waiter] = {}
        self.slot_epochs = [0] * num_envs
        self.slot_losses = [0] * num_envs  # memberships of each slot that ended in a loss
        self.empty_since = [time.monotonic()] * num_envs
        self.observation_space: gym.Space | None = None
        self.action_space: gym.Space | None = None
        self.spaces_from = ""  # the name of the client whose spaces the vector took, if it took a client's
        self.refusals: list[str] = []  # the last refusals for good: "'name': reason"
        # since the start: joins, rejoins (a client that lost its server and joined again), losses, goodbyes,
        # and refusals for good by code ("refused:spaces", ...)
        self.counts: Counter[str] = Counter()
        self.reset_first = False  # told in WELCOME: new envs start as if their episode had ended

    # -- settings ----------------------------------------------------------------------------------

    def set_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Fix the vector's single spaces that joining clients must match."""
        self.observation_space = observation_space
        self.action_space = action_space

    def start_episodes(self, *, reset_first: bool) -> None:
        """Episodes run from now on: new clients are told ``reset_first``.

        A lost client's slots are free for a new client at once; the learner reports the loss at each
        slot's next step all the same (``gym_remote.episodes``), and the new client's envs start as if
        their episode had ended, so their first step after the report starts a new one.
        """
        self.reset_first = reset_first

    # -- queries -----------------------------------------------------------------------------------

    @property
    def served(self) -> int:
        return sum(client is not None for client in self.slots)

    def empty_slots(self, slots: Iterable[int] | None = None) -> list[int]:
        """The slots (of ``slots``, default all) that have no client."""
        if self._summary()[1]:
            return []
        return [slot for slot in (range(self.num_envs) if slots is None else slots) if self.slots[slot] is None]

    def clients_of(self, slots: Iterable[int]) -> list[ClientInfo]:
        """The clients serving ``slots``, each once, in slot order."""
        if slots == self._every_slot:  # (every step's question)
            return list(self._summary()[0])
        return self._clients_of(slots)

    def _summary(self) -> tuple[list[ClientInfo], bool]:
        """The clients of every slot, each once, in slot order; and whether every slot is served."""
        summary = self._slot_summary
        if summary is None:
            summary = self._slot_summary = (self._clients_of(self._every_slot), None not in self.slots)
        return summary

    def _clients_of(self, slots: Iterable[int]) -> list[ClientInfo]:
        clients: dict[bytes, ClientInfo] = {}
        for slot in slots:
            client = self.slots[slot]
            if client is not None:
                clients.setdefault(client.identity, client)
        return list(clients.values())

    def observation_space_of(self, slot: int) -> gym.Space:
        """The observation space of the env serving ``slot`` (which must be served)."""
        client = self.slots[slot]
        if client is None:
            raise ValueError(f"slot {slot} has no client, hence no observation space yet")
        return client.observation_spaces[client.slots.index(slot)]

    def member_with_session(self, session: Any) -> ClientInfo | None:
        if type(session) is not str or not session:
            return None
        session = session[:64]  # as sessions are kept
        return next((client for client in self.clients.values() if client.session == session), None)

    def previous_member(self, hello: Any) -> ClientInfo | None:
        """The member a HELLO says it was before it reconnected (its old membership is to end)."""
        return self.member_with_session(hello.get("previous_session")) if isinstance(hello, dict) else None

    def verified_launch(self, launch: Any) -> int | None:
        """The index of the launched client whose current token ``launch`` carries, else None."""
        index = launch.get("index") if isinstance(launch, dict) else None
        record = self.launches.get(index) if type(index) is int else None
        if record is None or not hmac.compare_digest(str(launch.get("token", "")), record.token):
            return None
        return index

    def can_admit(self) -> bool:
        """Whether a slot is free for a waiter."""
        return any(client is None for client in self.slots)

    def spaces_for(self, client: ClientInfo) -> tuple[gym.Space, gym.Space]:
        """The vector's single spaces as a WELCOME to ``client`` carries them (its own if it is the first)."""
        if self.observation_space is None or self.action_space is None:  # (set together, by set_spaces)
            return client.observation_spaces[0], client.action_spaces[0]
        return self.observation_space, self.action_space

    # -- events ------------------------------------------------------------------------------------

    def parse_hello(self, identity: bytes, version: int, frames: list[bytes]) -> dict[str, Any] | Refuse:
        """The value of a HELLO (header ``version``, value ``frames``) from ``identity``, or why it is refused."""
        if version != protocol.PROTOCOL_VERSION:
            reason = f"protocol version mismatch: the server speaks {protocol.PROTOCOL_VERSION}, the client {version}"
            return self._refuse_for_good(identity, None, "version", reason)
        try:
            hello = protocol.read_value(frames)
            if not isinstance(hello, dict):
                raise ProtocolError("HELLO must carry a dict")
        except _MALFORMED as error:
            return self._refuse_for_good(identity, None, "invalid", f"malformed HELLO: {type(error).__name__}: {error}")
        return hello

    def refuse_malformed(self, identity: bytes, error: Exception) -> Refuse:
        """A HELLO that could not even be read (``error``) is refused for good."""
        return self._refuse_for_good(identity, None, "invalid", f"malformed HELLO: {type(error).__name__}: {error}")

    def hello(self, identity: bytes, hello: dict[str, Any], peer: Peer) -> Admit | Refuse:
        """What to answer the HELLO ``hello`` (see :meth:`parse_hello`) from ``identity``.

        A client that may wait and finds no free slot is put in line (``Refuse(waiting=True)``).
        """
        try:
            return Admit(self._admit(identity, hello, peer))
        except _Refusal as refusal:
            if refusal.code == "full" and hello.get("wait"):
                return self._queue(identity, hello, peer, str(refusal))
            return self._refuse_for_good(identity, hello, refusal.code, refusal, refusal.error)
        except _MALFORMED as error:
            return self._refuse_for_good(identity, None, "invalid", f"malformed HELLO: {type(error).__name__}: {error}")

    def admit_waiter(self, identity: bytes) -> Admit | Refuse | None:
        """What to answer the waiter ``identity`` now that slots may be free (None: it keeps waiting)."""
        waiter = self.waiting.get(identity)
        if waiter is None:
            return None
        try:
            return Admit(self._admit(identity, waiter.hello, waiter.peer))
        except _Refusal as refusal:
            if refusal.code == "full":
                return None
            return self._refuse_for_good(identity, waiter.hello, refusal.code, refusal, refusal.error)
        except _MALFORMED as error:
            return self._refuse_for_good(identity, None, "invalid", f"malformed HELLO: {type(error).__name__}: {error}")

    def join(self, client: ClientInfo) -> None:
        """``client``'s WELCOME went out: it serves its slots now (the first client brings the spaces)."""
        self.waiting.pop(client.identity, None)
        if self.observation_space is None:
            self.set_spaces(client.observation_spaces[0], client.action_spaces[0])
            self.spaces_from = client.name
        self.counts["joined"] += 1
        if client.rejoins:
            self.counts["rejoined"] += 1
        self.clients[client.identity] = client
        self._slot_summary = None
        for slot in client.slots:
            self.slots[slot] = client
            self.slot_epochs[slot] += 1

    def lose(self, identity: bytes, reason: str = "") -> ClientInfo | None:
        """The client ``identity`` is gone (for ``reason``): its slots are empty, free for others."""
        client = self.clients.pop(identity, None)
        if client is None:
            return None
        self.counts["left" if reason == LEFT else "reconnected" if reason == RECONNECTED else "lost"] += 1
        now = time.monotonic()
        self._slot_summary = None
        for slot in client.slots:
            if self.slots[slot] is client:
                self.slots[slot] = None
                self.empty_since[slot] = now
                self.slot_losses[slot] += 1
        return client

    def leave_line(self, identity: bytes) -> bool:
        """The waiter ``identity`` left (or cannot be reached): it gives up its place. False if it was not waiting."""
        return self.waiting.pop(identity, None) is not None

    def clear(self) -> None:
        """Forget every member and waiter (the server closed)."""
        self.clients.clear()
        self.waiting.clear()
        self._slot_summary = None
        self.slots = [None] * self.num_envs

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
                    plane=client.plane,
                )
            rows.append(row)
        return rows

    @property
    def private(self) -> bool:
        """Whether every slot is reserved for the clients the learner launched (it admits no one else)."""
        return bool(self._reserved.all())

    def waiting_clients(self) -> list[dict[str, Any]]:
        """The clients in line, first first: ``name``, ``host``, ``pid``, ``num_envs``."""
        return [
            {
                "name": str(waiter.hello.get("name", "?"))[:200],
                "host": str(waiter.hello.get("host", "?"))[:200],
                "pid": waiter.hello.get("pid") if type(waiter.hello.get("pid")) is int else 0,
                "num_envs": waiter.hello.get("num_envs") if type(waiter.hello.get("num_envs")) is int else 0,
            }
            for waiter in self.waiting.values()
        ]

    def refused_by_code(self) -> dict[str, int]:
        """The HELLOs refused for good since the start, by code (``"spaces"``, ``"full"`` ...), in code order."""
        prefix = "refused:"
        return {key[len(prefix) :]: count for key, count in sorted(self.counts.items()) if key.startswith(prefix)}

    def summary(self) -> str:
        """What happened to the fleet since the start, in one line.

        >>> members = Membership(2, observation_mode="same", allow_pickle=None)
        >>> members.summary()
        '0 clients joined, 0 lost, 0 left, 0 refused'
        """
        counts = self.counts
        rejoined = f" ({counts['rejoined']} after losing their server)" if counts["rejoined"] else ""
        refused = self.refused_by_code()
        by_code = f" ({', '.join(f'{code} {count}' for code, count in refused.items())})" if refused else ""
        return (
            f"{counts['joined']} clients joined{rejoined}, {counts['lost']} lost, {counts['left']} left, "
            f"{sum(refused.values())} refused{by_code}"
        )

    def empty_slots_message(self, timeout: float, what: str, empty: list[int], address: str) -> str:
        """The error text for a wait on ``empty`` slots that ran out after ``timeout`` seconds."""
        now = time.monotonic()
        longest = max(now - self.empty_since[slot] for slot in empty)
        hint = f"; clients refused: {'; '.join(self.refusals[-3:])}" if self.refusals else ""
        if self.waiting:
            free = sum(slot is None and not reserved for slot, reserved in zip(self.slots, self._reserved))
            waiters = ", ".join(
                f"{str(waiter.hello.get('name', '?'))[:200]!r} ({waiter.hello.get('num_envs')} envs)"
                for waiter in list(self.waiting.values())[:3]
            )
            more = f" and {len(self.waiting) - 3} more" if len(self.waiting) > 3 else ""
            hint += f"; waiting in line for more free slots than the {free} there are: {waiters}{more}"
        return (
            f"timed out after {timeout:g} s waiting for clients to serve {what}: slots {format_slots(empty)} "
            f"have no client (empty for up to {longest:.1f} s); {self.served} of {self.num_envs} slots are "
            f"served; clients connect to {address}{hint}"
        )

    # -- internals ---------------------------------------------------------------------------------

    def _queue(self, identity: bytes, hello: dict[str, Any], peer: Peer, reason: str) -> Refuse:
        if identity not in self.waiting:
            if len(self.waiting) >= self.max_waiting:
                return self._refuse_for_good(
                    identity, hello, "full", f"{reason}, and the waiting line is full ({len(self.waiting)})"
                )
            self.waiting[identity] = _Waiter(hello, peer)
            logger.info(
                "%s waits in line at position %d: %s",
                _who(hello),
                len(self.waiting),
                reason.removeprefix("no free slot: "),
            )
        position = list(self.waiting).index(identity) + 1
        return Refuse("full", f"{reason}; waiting in line at position {position}", waiting=True, client=_who(hello))

    def _refuse_for_good(
        self, identity: bytes, hello: Any, code: str, reason: str | _Refusal, error: type[Exception] = RuntimeError
    ) -> Refuse:
        """Refuse for good: a launched client with ``reason`` as the learner raises it, any other in plain words."""
        self.waiting.pop(identity, None)
        index = self.verified_launch(hello.get("launch")) if isinstance(hello, dict) else None
        if isinstance(reason, _Refusal):
            reason = str(reason) if index is not None else reason.plain
        self.refusals.append(f"{str(hello.get('name', '?'))[:200]!r}: {reason}" if isinstance(hello, dict) else reason)
        self.counts[f"refused:{code}"] += 1
        del self.refusals[:-MAX_REFUSALS_KEPT]
        return Refuse(code, reason, launch_index=index, error=error, client=_who(hello))

    def _admit(self, identity: bytes, hello: dict[str, Any], peer: Peer) -> ClientInfo:
        if type(hello.get("protocol")) is not int or hello["protocol"] != protocol.PROTOCOL_VERSION:
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
        dtypes = accepted_dtypes(hello.get("dtypes"))
        launch_index, trusted = self._check_launch(hello.get("launch"))
        if launch_index is None and self._reserved.all():
            raise _Refusal("private", "this server serves only the local clients it started itself")
        if self.observation_space is None and self.launches and launch_index != 0:
            # With launched clients, env_fns[0] defines the spaces (as in SyncVectorEnv): wait for it.
            raise _Refusal("full", "the spaces are not known yet: waiting for the client serving slot 0")
        if not trusted and self.allow_pickle is True and hello.get("allow_pickle") is True:
            trusted = True
        if trusted and hello.get("metadata_pickle"):
            metadata = {**metadata, **_unpickle_metadata(hello["metadata_pickle"])}
        observation_spaces = _spaces_per_env(hello, "observation", count, trusted)
        action_spaces = _spaces_per_env(hello, "action", count, trusted)
        self._check_spaces(observation_spaces, action_spaces)
        if launch_index is not None:
            launch = self.launches[launch_index]
            if count != launch.count:
                raise _Refusal("invalid", f"launched client {launch_index} hosts {count} envs, expected {launch.count}")
            slots = list(range(launch.first_slot, launch.first_slot + count))
            if self.empty_slots(slots) != slots:
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
            dtypes=dtypes,
        )

    def _check_launch(self, launch: Any) -> tuple[int | None, bool]:
        """The launch index of a launched client (None for others) and whether it is trusted."""
        if launch is None:
            return None, False
        index = self.verified_launch(launch)
        if index is None:
            raise _Refusal("invalid", "the client claims to be a launched client, but its launch token is wrong")
        return index, self.allow_pickle is not False

    def _check_spaces(self, observation_spaces: list[gym.Space], action_spaces: list[gym.Space]) -> None:
        reference_obs = self.observation_space if self.observation_space is not None else observation_spaces[0]
        reference_act = self.action_space if self.action_space is not None else action_spaces[0]
        for index, (obs_space, act_space) in enumerate(zip(observation_spaces, action_spaces, strict=True)):
            mismatch = space_mismatch(
                self.observation_mode, reference_obs, reference_act, obs_space, act_space, self.vector_class
            )
            if mismatch is not None:
                kind, reason = mismatch
                observation_fits = (
                    space_mismatch(self.observation_mode, reference_obs, reference_act, obs_space, reference_act)
                    is None
                )
                if observation_fits:
                    what, theirs, ours, differs = "action space", act_space, reference_act, "differs from"
                elif self.observation_mode == "same":
                    what, theirs, ours, differs = "observation space", obs_space, reference_obs, "differs from"
                elif kind is SPACES_ERROR:  # shape or dtype
                    what, theirs, ours = "observation space", obs_space, reference_obs
                    differs = "does not share shape and dtype with"
                else:  # what batch_differing_spaces raised
                    what, theirs, ours = "observation space", obs_space, reference_obs
                    differs = f"cannot be batched ({reason}) with"
                origin = (
                    f" (the vector took its spaces from the first client, {self.spaces_from!r}; give the server "
                    "observation_space and action_space, or serve --env ENV_ID, to state them up front)"
                    if self.spaces_from
                    else ""
                )
                plain = f"the {what} of its env {index}, {theirs}, {differs} the vector's, {ours}{origin}"
                raise _Refusal("spaces", f"{reason} (the client's env {index})", kind, plain)

    def _free_slots(self, count: int) -> list[int]:
        open_slots = int(np.count_nonzero(~self._reserved))
        if count > open_slots:  # it could never fit: waiting in line would be forever
            raise _Refusal(
                "invalid",
                f"this client offers {count} envs, more than the {open_slots} slots the vector has for clients "
                f"that join (of its {self.num_envs} slots)",
            )
        free = [slot for slot in range(self.num_envs) if self.slots[slot] is None and not self._reserved[slot]]
        if len(free) < count:
            verb = "is" if len(free) == 1 else "are"
            raise _Refusal(
                "full",
                f"no free slot: the vector has {self.num_envs} slots and {len(free)} {verb} free, "
                f"this client offers {count} envs",
            )
        for start in range(len(free) - count + 1):  # prefer consecutive slots (received in place)
            if free[start + count - 1] - free[start] == count - 1:
                return free[start : start + count]
        return free[:count]


def _who(hello: Any) -> str:
    """A client as logs name it before it joins: ``client 'name' from host (pid N)``."""
    if not isinstance(hello, dict):
        return "a client"
    name, host = str(hello.get("name", "?"))[:200], str(hello.get("host", "?"))[:200]
    return f"client {name!r} from {host} (pid {hello.get('pid', '?')})"


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
            return SPACES_ERROR, (
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
            return SPACES_ERROR, (
                f"{vector_class}(..., observation_mode='different' or custom space) however the sub-environments "
                "observation spaces do not share a common shape and dtype, single_observation_space="
                f"{observation_space}, sub-environment observation space={env_observation_space}"
            )
    if env_action_space != action_space:
        return SPACES_ERROR, (
            "Sub-environment action space doesn't make the `single_action_space`, "
            f"action_space={env_action_space}, single_action_space={action_space}"
        )
    return None


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
