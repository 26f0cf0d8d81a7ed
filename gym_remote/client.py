"""The environment's face: :class:`EnvClient` serves local Gymnasium envs to a RemoteVectorEnv.

A client connects a DEALER socket to the server's ROUTER, introduces itself with HELLO (its envs and
their spaces), is given slots in WELCOME, then answers commands until the server sends CLOSE.
Autoreset happens here, next to the envs, exactly as ``SyncVectorEnv`` does it (see
:class:`HostedEnvs`), so a step costs one message each way per client, whatever the number of envs.

Example (a client for a server running elsewhere)::

    import gymnasium as gym
    from gym_remote import EnvClient

    EnvClient("tcp://10.0.0.5:5555", [lambda: gym.make("CartPole-v1")] * 4).run()  # until the server closes
"""

from __future__ import annotations

import enum
import logging
import os
import platform
import random
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from gym_remote import codec, protocol
from gym_remote.errors import ClientLostError, EncodeError, JoinRefusedError, ProtocolError, RemoteTimeoutError
from gym_remote.links import LinkBroken, Message, shared
from gym_remote.links.channel import wanted as data_plane_wanted
from gym_remote.links.connection import (
    FOR_NOW_ZAP_STATUSES,
    HANDSHAKE_FAILURES,
    PROTOCOL_ERROR_MECHANISM_MISMATCH,
    ConnectionEvent,
    ServerConnection,
    new_context,
    terminate,
)
from gym_remote.links.reach import why_unreachable
from gym_remote.protocol import FLAG_VALUE, HAS_ATTR_QUERY, NO_OPTIONS, WRAPPERS_QUERY, Kind, format_slots, kind_name
from gym_remote.security import KeySource, check_endpoint, client_security, is_local_endpoint
from gym_remote.spin import SpinGate

__all__ = ["EnvClient", "HostedEnvs", "EnvFailure"]

logger = logging.getLogger(__name__)


IDLE_POLL_SECONDS = 0.2
"""How often an idle client wakes up to check whether it was asked to stop."""

DEFAULT_SPIN_SECONDS = 200e-6
"""How long a client served over a data channel busy-checks it for the next command (see ``EnvClient``'s
``spin``): about twice the 90th percentile of what a learner takes between a cheap env's RESULT and its next
STEP (CartPole, 8 envs, 1 client: median 41 µs, 90th percentile 87 to 111 µs), and longer than such a wait
that sleeps (so that a spin turned off by slow commands comes back when they are fast again)."""

HELLO_REPEAT_SECONDS = 2.0
"""How long a client waits for an answer to its HELLO before it sends it again (PROTOCOL.md §7): the learner
drops a message an interrupt of its call cut short while it was read. The wait doubles with each repeat."""

MAX_HELLO_REPEAT_SECONDS = 32.0
"""The longest wait between two repeats of an unanswered HELLO."""

NEW_SESSION_LINGER_MS = 0
"""``ZMQ_LINGER`` of a socket closed to start a new session: nothing it queued may reach the server the new
session speaks to (PROTOCOL.md §11.1)."""

LAST_LINGER_MS = 1000
"""``ZMQ_LINGER`` of the last socket, closed when the client stops: its BYE still leaves."""

NOT_NOW_WAIT_SECONDS = (0.5, 2.0)
"""After a ZAP status 500 ("not now", PROTOCOL.md §12.4), a client waits a random time in this range, so that a
fleet turned away together does not come back together, then connects again on a new socket."""

UNREACHABLE_CHECK_SECONDS = 3.0
"""How long a client waits for a server's handshake before it finds out why none comes (and says it)."""

UNREACHABLE_RECHECK_SECONDS = 30.0
"""How often it looks again while the server stays unreachable (it speaks again only if the cause changed)."""


class EnvFailure(Exception):
    """The env at position ``index`` of a :class:`HostedEnvs` raised ``error`` (also this one's ``__cause__``).

    The client reports ``error`` (its class, message and traceback) in an ERROR naming ``index``, as
    Gymnasium's AsyncVectorEnv workers report their env's index with its error.
    """

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error

    def __str__(self) -> str:
        return f"env {self.index}: {type(self.error).__name__}: {self.error}"


class _End(enum.Enum):
    """How a membership (or a wait for one) ended."""

    EXIT = "the server closed, or this client was stopped: run() returns"
    RUN_OVER = "the learner's run is over: a client that keeps serving waits for the next one"
    LOST = "the server went away: the client rejoins (or raises, without reconnect)"


class _ServerGone(Exception):
    """The link to the server broke, or the server stopped taking this client's messages: the session is over."""


class HostedEnvs:
    """The envs one client hosts, stepped with Gymnasium's autoreset semantics.

    It keeps the client's share of the batch: observations in arrays laid out like the server's
    (for array spaces), rewards and flags directly inside the RESULT frame, and per-env autoreset flags.
    What an env raises comes out of its methods as an :class:`EnvFailure` naming the env.
    """

    def __init__(self, envs: Sequence[gym.Env]) -> None:
        self.envs = list(envs)
        self.count = len(self.envs)
        shared = _shared_envs(self.envs)
        if shared:
            raise ValueError(
                f"the env functions of envs {shared} returned the same env instance: one env cannot serve "
                "several slots. Make each env function create a new env (e.g. `lambda: gym.make(env_id)`, "
                "not `lambda: env`)"
            )

    def configure(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        autoreset_mode: AutoresetMode,
        reset_first: bool = False,
    ) -> None:
        """Lay out buffers for the vector's single spaces (as agreed in the handshake).

        ``reset_first``: the envs start as if their episodes had just ended, so that (in NEXT_STEP mode)
        the first step resets them: how a client replacing a lost one starts.
        """
        count = self.count
        self.observation_space = observation_space
        self.autoreset_mode = autoreset_mode
        self.observation_leaves = codec.array_leaf_spaces(observation_space)
        # Any: an array, dict or tuple of arrays, as the space is (what gather() writes into)
        self.observations: Any = (
            create_empty_array(observation_space, n=count, fn=np.zeros) if self.observation_leaves is not None else None
        )
        self.observation_frames = (
            codec.batch_leaves(observation_space, self.observations) if self.observations is not None else []
        )
        self.env_obs: list[Any] = [None] * count
        self.action_space = action_space
        self.action_batch_spaces = codec.BatchedSpaces(action_space)  # by number of envs stepped
        self.action_leaves = codec.array_leaf_spaces(action_space)
        # a single Box, Discrete, MultiDiscrete or MultiBinary: Gymnasium's iterate and concatenate are
        # iter() and np.stack() for these, called here directly (they are on the step path)
        self.action_is_leaf = type(action_space) in codec.LEAF_SPACES
        self.observation_is_leaf = type(observation_space) in codec.LEAF_SPACES
        self.result = protocol.ResultFrame(count)
        self.autoreset = [bool(reset_first)] * count

    def selected(self, indexes: Sequence[int] | None) -> Sequence[int]:
        """The envs a command is for: ``indexes``, or all (None)."""
        return range(self.count) if indexes is None else indexes

    def step(
        self, actions: Sequence[Any], indexes: Sequence[int] | None = None, each: bool = False
    ) -> tuple[list[dict], list[tuple[Any, dict] | None] | None, list[Exception | None] | None]:
        """Step the envs ``indexes`` (all if None) with their actions, in order; return (infos, finals, errors).

        ``finals`` is None unless an env's episode ended in SAME_STEP mode; then it holds, per env
        stepped, None or the (final_obs, final_info) of the ended episode. An env that raises stops the
        step (:class:`EnvFailure`), and ``errors`` is None; with ``each`` (PROTOCOL.md §5.6) the others are
        stepped all the same, and ``errors`` holds, per env stepped, None or what it raised.
        """
        infos: list[dict] = []
        finals: list[tuple[Any, dict] | None] | None = None
        errors = _NO_ERRORS * len(actions) if each else None
        next_step = self.autoreset_mode is AutoresetMode.NEXT_STEP
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        envs, env_obs, autoreset = self.envs, self.env_obs, self.autoreset
        result = self.result
        rewards: list[Any] = []
        terminations: list[bool] = []
        truncations: list[bool] = []
        for position, (index, action) in enumerate(zip(self.selected(indexes), actions, strict=True)):
            env = envs[index]
            try:
                if next_step and autoreset[index]:
                    obs, info = env.reset()
                    reward, terminated, truncated = 0.0, False, False
                else:
                    obs, reward, terminated, truncated, info = env.step(action)
                    terminated, truncated = bool(terminated), bool(truncated)
                    if same_step and (terminated or truncated):
                        final = (obs, info)
                        obs, info = env.reset()
                        if finals is None:
                            finals = _NO_FINALS * len(actions)
                        finals[position] = final
                if each:
                    result.rewards[index] = reward  # (a reward that is not a number is this env's error)
            except Exception as error:
                if errors is None:
                    raise EnvFailure(index, error) from error
                errors[position] = error  # (it keeps its observation and autoreset flag; its row is 0)
                infos.append({})
                rewards.append(0.0)
                terminations.append(False)
                truncations.append(False)
                continue
            env_obs[index] = obs
            infos.append(info)
            autoreset[index] = terminated or truncated
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
        rows = slice(None) if indexes is None else indexes
        try:
            result.rewards[rows] = rewards
        except (TypeError, ValueError) as error:  # one of them is not a number: find which, as an env's error
            for index, reward in zip(self.selected(indexes), rewards):
                try:
                    float(reward)
                except (TypeError, ValueError):
                    raise EnvFailure(index, error) from error
            raise
        result.terminated[rows] = terminations
        result.truncated[rows] = truncations
        return infos, finals, errors

    def reset(self, seeds: Sequence[int | None], options: Any, indexes: Sequence[int] | None) -> list[dict]:
        """Reset the envs ``indexes`` (all if None) with their seeds, in order; return their infos.

        ``options`` :data:`NO_OPTIONS`: ``env.reset(seed=...)`` without the ``options`` keyword, which
        some envs do not take (as SB3's ``DummyVecEnv`` calls it); else ``env.reset(seed=..., options=options)``.
        """
        infos: list[dict] = []
        maybe_options = {} if options is NO_OPTIONS else {"options": options}
        for index, seed in zip(self.selected(indexes), seeds, strict=True):
            env = self.envs[index]
            try:
                self.env_obs[index], info = env.reset(seed=seed, **maybe_options)
            except Exception as error:
                raise EnvFailure(index, error) from error
            self.autoreset[index] = False
            self.result.rewards[index] = 0.0
            self.result.terminated[index] = False
            self.result.truncated[index] = False
            infos.append(info)
        return infos

    def call(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        indexes: Sequence[int] | None = None,
        query: str | None = None,
    ) -> list[Any]:
        """``SyncVectorEnv.call`` for the envs ``indexes`` (all if None), in order: reach ``name`` through
        wrappers, call it if callable. The name :data:`WRAPPERS_QUERY` asks for each env's wrapper classes;
        ``query`` :data:`HAS_ATTR_QUERY` asks whether each env has ``name`` (through wrappers), calling nothing.
        """
        if query is not None and query != HAS_ATTR_QUERY:
            raise ProtocolError(f"unknown CALL query {query!r}: expected {HAS_ATTR_QUERY!r} or none")
        results = []
        for index in self.selected(indexes):
            try:
                results.append(self._call_one(self.envs[index], name, args, kwargs, query))
            except Exception as error:
                raise EnvFailure(index, error) from error
        return results

    @staticmethod
    def _call_one(env: gym.Env, name: str, args: Sequence[Any], kwargs: dict[str, Any], query: str | None) -> Any:
        if query == HAS_ATTR_QUERY:  # SB3's has_attr: would get_attr succeed? (reads, never calls)
            try:
                env.get_wrapper_attr(name)
                return True
            except AttributeError:
                return False
        if name == WRAPPERS_QUERY:
            return _wrapper_classes(env)
        function = env.get_wrapper_attr(name)
        return function(*args, **kwargs) if callable(function) else function

    def set_attr(
        self, name: str, values: Sequence[Any], indexes: Sequence[int] | None = None, outermost: bool = False
    ) -> None:
        """Set ``name`` on the envs ``indexes`` (all if None), one value per env: through their wrappers
        (``set_wrapper_attr``), or on the outermost wrapper itself (``setattr``, as SB3's DummyVecEnv)."""
        for index, value in zip(self.selected(indexes), values, strict=True):
            try:
                if outermost:
                    setattr(self.envs[index], name, value)
                else:
                    self.envs[index].set_wrapper_attr(name, value)
            except Exception as error:
                raise EnvFailure(index, error) from error

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # closing must go on for the other envs
                logger.exception("closing an env failed")

    def gather(self, indexes: Sequence[int] | None = None, into: Any = None) -> None:
        """Batch the observations :meth:`step` or :meth:`reset` left of the envs ``indexes`` (all if None) into their
        rows of :attr:`observations`; or, of all the envs, into ``into`` (a batch of the observation space laid
        over other memory: a slab's frames).

        Only those rows: the other envs may never have been reset (a command for some envs).
        """
        if self.observations is None:
            return
        if indexes is None:
            out = self.observations if into is None else into
            if self.observation_is_leaf:
                np.stack(self.env_obs, axis=0, out=out)
            else:
                concatenate(self.observation_space, self.env_obs, out)
            return
        for index in indexes:
            row = codec.leaves_to_batch(
                self.observation_space, [leaf[index : index + 1] for leaf in self.observation_frames]
            )
            concatenate(self.observation_space, [self.env_obs[index]], row)


class _ReplySlab:
    """Writes a RESULT for all of a client's envs, without a value section, in place in its data channel's slab
    for replies (PROTOCOL.md §13.6): the frames a RESULT would have, with no record around them."""

    def __init__(self, hosted: HostedEnvs) -> None:
        self._leaves = [(leaf.dtype, leaf.shape) for leaf in hosted.observation_frames]
        self._frames: list[memoryview] | None = None
        self._batch: Any = None  # the observation space's batch over the slab's frames

    def write(self, frames: list[memoryview], hosted: HostedEnvs, seq: int) -> None:
        """The RESULT of the step or reset ``hosted`` made last, for all its envs: its observations gathered straight
        into the slab."""
        if frames is not self._frames:  # (the same list every time: its views are made once)
            views = [
                np.frombuffer(frame, dtype).reshape(shape)
                for frame, (dtype, shape) in zip(frames[1:], self._leaves, strict=True)
            ]
            self._batch = (
                views[0] if hosted.observation_is_leaf else codec.leaves_to_batch(hosted.observation_space, views)
            )
            self._frames = frames
        hosted.gather(None, into=self._batch)
        frames[0][:] = hosted.result.pack(seq, 0)


class EnvClient:
    """Serve Gymnasium envs to a :class:`~gym_remote.RemoteVectorEnv` until it closes.

    A client that finds no free slot waits in line for one (unless ``wait_for_slot=False``). If the
    server goes away without closing (the learner crashed or restarts, the network dropped), the
    client notices within ``liveness_timeout``, then reconnects with backoff and joins the server
    that is at the address again, as a new member whose envs start with a reset.

    Args:
        address: the server's endpoint, e.g. ``"tcp://10.0.0.5:5555"`` (``envs.address`` on the server);
            the transport scheme (``tcp://``, ``ipc://``) is required.
        env_fns: functions that each make one env; the client hosts ``len(env_fns)`` envs, and the
            server maps them onto as many slots.
        name: a name for logs and the server's client table (default: ``host:pid``).
        connect_timeout: seconds to wait for the server's answer to the first handshake (``None``:
            forever). A client may start before its server; it waits this long for it.
        wait_for_slot: when the server has no free slot, wait in line (True) or give up (False).
        slot_timeout: seconds to wait in line for a free slot (``None``: forever).
        reconnect: rejoin a server that went away (True), or end :meth:`run` with an error.
        reconnect_timeout: seconds to try to rejoin after the server went away (``None``: forever).
        liveness_timeout: seconds without a sign of life from the server's connection (ZeroMQ
            heartbeats, answered even while the learner is busy) before the server counts as gone; a
            reply the server does not take within it (it stopped reading) counts the same.
        allow_pickle: accept pickled values from the server and send values that cannot be encoded
            safely as pickles. Only for servers you trust as much as your own code; the server must
            allow it too.
        server_key: the server's public key (its ``NAME.key`` file, or the key as Z85 text), for a
            server that uses CURVE (``gym-remote keygen``); needs ``client_key``.
        client_key: this client's ``NAME.key_secret`` file (or secret key as Z85 text); the server
            must have its public key among its ``authorized_keys``.
        secret: a shared secret instead of key files: the same as the server's; it never travels.
        insecure: connect beyond loopback without keys or a secret knowingly, without the warning it
            otherwise gets (only on a network you trust).
        keep_serving: stay up across learner runs: when a run ends (the learner closes without telling its
            clients to stop) or the learner is lost, wait for the next learner at ``address`` without limit and
            serve it. :meth:`run` returns only when a learner closes with ``stop_clients=True``, on :meth:`stop`
            (SIGTERM, Ctrl-C), or raises on a refusal.
        data_plane: on the server's machine, carry commands and results over a Unix socket (the
            same-host data plane, if the server offers one) instead of ZeroMQ. Default: on (Linux),
            unless the environment variable ``GYM_REMOTE_DATA_PLANE`` is ``off``.
        spin: over the data plane, seconds to busy-check for the next command after answering one,
            while commands have lately come within that time and the learner's process has a core to
            spare (its commands say when it has not) (0: never; yielding the core to any other runnable
            thread meanwhile). It saves a wake-up per step, but takes a core: the local clients of a
            RemoteVectorEnv spin (:data:`DEFAULT_SPIN_SECONDS`) only when its learner does.

    Raises:
        ValueError: ``address`` is not a ZeroMQ endpoint (e.g. it lacks its scheme: ``localhost:5555``).

    Example::

        client = EnvClient("tcp://10.0.0.5:5555", [lambda: gym.make("CartPole-v1")] * 4)
        client.run()  # returns when the server closes
    """

    def __init__(
        self,
        address: str,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        name: str | None = None,
        connect_timeout: float | None = 120.0,
        wait_for_slot: bool = True,
        slot_timeout: float | None = 3600.0,
        reconnect: bool = True,
        reconnect_timeout: float | None = 300.0,
        liveness_timeout: float = 10.0,
        allow_pickle: bool = False,
        server_key: KeySource | None = None,
        client_key: KeySource | None = None,
        secret: str | bytes | None = None,
        insecure: bool = False,
        keep_serving: bool = False,
        data_plane: bool | str | None = None,
        spin: float = 0.0,
        _launch: dict[str, Any] | None = None,
    ) -> None:
        if callable(env_fns):
            env_fns = [env_fns]
        if not env_fns:
            raise ValueError("EnvClient needs at least one env function")
        if len(env_fns) > protocol.MAX_ENVS_PER_CLIENT:
            raise ValueError(f"one client can host at most {protocol.MAX_ENVS_PER_CLIENT} envs, got {len(env_fns)}")
        check_endpoint(address, "address")
        self.address = address
        self.env_fns = list(env_fns)
        self.name = name or f"{platform.node()}:{os.getpid()}"
        self.connect_timeout = connect_timeout
        self.wait_for_slot = wait_for_slot
        self.slot_timeout = slot_timeout
        self.reconnect = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.keep_serving = keep_serving
        self.runs = 0  # learner runs this client served to their end (keep_serving)
        self.liveness_timeout = liveness_timeout
        self.allow_pickle = allow_pickle
        self._security = client_security(server_key, client_key, secret)
        self._security_from_secret = secret is not None
        if self._security is None and not insecure and not is_local_endpoint(address):
            logger.warning(
                "client %s: connecting to %s without authentication or encryption; anyone on the network path "
                "can read and change the traffic (see server_key/client_key or secret: --server-key/--client-key "
                "or --secret-file; --insecure if that is what you want)",
                self.name,
                address,
            )
        self.session = ""  # this run's current membership (its routing id); new after each reconnection
        self.previous_session = ""
        self._welcomed_session = ""  # the last session the server welcomed
        self.slots: list[int] = []
        self.rejoins = 0
        self._launch = _launch
        self._stop = threading.Event()
        self._trusted = False
        self._max_message_bytes: int | None = None
        self._cut_handshakes = 0  # security handshakes the server cut off in a row
        self._denials = 0  # the server's answers "not now" to this client's handshakes, in a row
        self._join_timeout: float | None = connect_timeout
        self._lost_reason = ""  # why _serve counted the server as gone, for ClientLostError (": ..." or "")
        self.data_plane = data_plane_wanted(data_plane)
        self._connection: ServerConnection | None = None  # this session's links to the server
        self._connected = False  # this session's ZeroMQ handshake succeeded
        self._told_no_data_channel = False
        self._unreachable = ""  # why no server answered at the address, when last looked
        self._spin = SpinGate(spin)
        self._reply_slab: _ReplySlab | None = None  # this membership's slab for RESULTs, if it has one

    @property
    def spin(self) -> float:
        """Seconds a wait for the next command busy-checks the data channel first (see ``spin`` above)."""
        return self._spin.spin

    def stop(self) -> None:
        """Ask :meth:`run` (in another thread) to leave the server (BYE) and return.

        It does within ``IDLE_POLL_SECONDS`` when idle, else after the command it is handling.
        """
        self._stop.set()

    close = stop

    def run(self) -> None:
        """Connect, serve the envs until the server sends CLOSE (or :meth:`stop`), then close the envs.

        Raises:
            ValueError: ZeroMQ cannot connect to ``address`` (the message says why).
            JoinRefusedError: the server refused the handshake (the message says why).
            RemoteTimeoutError: no server answered within ``connect_timeout`` (or, after losing the
                server, within ``reconnect_timeout``), or no slot freed up within ``slot_timeout``.
            ClientLostError: the server went away and ``reconnect`` is off.
        """
        self._context = new_context()
        hosted: HostedEnvs | None = None
        try:
            self._connect()
            hosted = self._make_envs()
            join_timeout = self.connect_timeout
            while True:
                end = self._join(hosted, join_timeout) or self._serve(hosted)
                if end is _End.EXIT:
                    return
                if end is _End.RUN_OVER:
                    self.runs += 1
                    logger.info(
                        "client %s: the run is over; waiting for the next learner at %s (runs served: %d)",
                        self.name,
                        self.address,
                        self.runs,
                    )
                    join_timeout = None
                else:
                    if not self.reconnect:
                        reason, self._lost_reason = self._lost_reason, ""
                        raise ClientLostError(f"client {self.name}: lost the server at {self.address}{reason}")
                    self.rejoins += 1
                    join_timeout = None if self.keep_serving else self.reconnect_timeout
                    logger.warning("client %s: lost the server at %s; rejoining", self.name, self.address)
                self._connect(linger=NEW_SESSION_LINGER_MS)
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: leave cleanly, so the slots free up
            self._say_bye()
            raise
        finally:
            if hosted is not None:
                hosted.close()
            self._disconnect(linger=LAST_LINGER_MS)
            terminate(self._context)

    def _make_envs(self) -> HostedEnvs:
        """Call the env functions; one that raises is reported to the server (ERROR, seq 0), then re-raised."""
        envs: list[gym.Env] = []
        try:
            for env_fn in self.env_fns:
                envs.append(env_fn())
            return HostedEnvs(envs)
        except Exception as error:
            index = len(envs) if len(envs) < len(self.env_fns) else None
            try:
                self._send_error(0, error, index)
            except _ServerGone as gone:  # the env function's error is the one to raise
                logger.warning("client %s: %s", self.name, gone)
            for env in envs:
                env.close()
            raise

    # -- connection --------------------------------------------------------------------------------

    def _connect(self, linger: int = LAST_LINGER_MS) -> None:
        """New links to the server for a new session; the old ones, if any, are closed."""
        if self.session:
            self._disconnect(linger)
        self.previous_session = self._welcomed_session  # a membership the server may still hold
        self.session = uuid.uuid4().hex
        self._connected = False
        try:
            self._connection = ServerConnection(
                self._context,
                self.address,
                self.session,
                liveness_timeout=self.liveness_timeout,
                security=self._security,
            )
        except ValueError as error:  # not an address ZeroMQ can connect to
            raise ValueError(f"client {self.name}: {error}") from None

    def _session_connection(self) -> ServerConnection:
        """This session's links to the server.

        Raises:
            RuntimeError: the client has no session (it is not running).
        """
        if self._connection is None:
            raise RuntimeError(f"client {self.name} has no connection to a server: it is not running")
        return self._connection

    def _say_bye(self) -> None:
        connection = self._connection
        if connection is not None and connection.send_last(protocol.message(Kind.BYE), 0.5):
            logger.info("client %s: leaving", self.name)

    def _disconnect(self, linger: int) -> None:
        if self._connection is not None:
            self._connection.close(linger)
            self._connection = None

    def _connection_dropped(self) -> bool:
        """Whether the connection to the server dropped since the last call (libzmq then reconnects).

        Raises:
            JoinRefusedError: the server turned down this client's security handshake for good.
        """
        dropped = False
        for event, value in self._session_connection().events():
            if event is ConnectionEvent.DROPPED:
                dropped = True
            elif event is ConnectionEvent.HANDSHAKE_SUCCEEDED:
                self._connected = True
                self._cut_handshakes = 0
                self._denials = 0
            elif event is ConnectionEvent.HANDSHAKE_CUT:
                self._cut_handshakes += 1
                if self._cut_handshakes >= HANDSHAKE_FAILURES:
                    if self._security is None:
                        hint = (
                            "the server probably requires authentication: give server_key and client_key "
                            "(--server-key/--client-key), or secret (--secret-file)"
                        )
                    elif self._security_from_secret:
                        hint = "does this client hold the server's secret (--secret-file, secret)?"
                    else:
                        hint = "is server_key (--server-key) the server's public key, its NAME.key file?"
                    raise JoinRefusedError(
                        f"client {self.name}: the server at {self.address} cut off the ZeroMQ handshake "
                        f"{self._cut_handshakes} times in a row: {hint}",
                        code="handshake",
                    )
            elif event is ConnectionEvent.HANDSHAKE_PROTOCOL:
                raise JoinRefusedError(self._mismatch_message(value), code="handshake")
            elif event is ConnectionEvent.HANDSHAKE_AUTH:
                if value not in FOR_NOW_ZAP_STATUSES:
                    raise JoinRefusedError(
                        f"client {self.name}: the server at {self.address} does not accept this client's key "
                        f"(ZAP status {value}): is its public key among the server's authorized_keys?",
                        code="unauthorized",
                    )
                self._denials += 1
                delay = random.uniform(*NOT_NOW_WAIT_SECONDS)
                logger.log(
                    logging.WARNING if self._denials >= 3 else logging.INFO,  # (a closing server says "not now" too)
                    "client %s: the server at %s is refusing connections for now (too many, too fast, or it is "
                    "closing); trying again in %.1f s",
                    self.name,
                    self.address,
                    delay,
                )
                self._stop.wait(delay)
                dropped = True
        return dropped

    def _mismatch_message(self, value: int) -> str:
        if value != PROTOCOL_ERROR_MECHANISM_MISMATCH:
            return f"client {self.name}: the ZeroMQ handshake with {self.address} failed (protocol error {value:#x})"
        if self._security is not None:
            return (
                f"client {self.name}: the server at {self.address} does not use CURVE, but this client was given "
                "keys or a secret"
            )
        return (
            f"client {self.name}: the server at {self.address} requires authentication: give server_key and "
            "client_key (--server-key/--client-key), or secret (--secret-file)"
        )

    # -- handshake -------------------------------------------------------------------------------

    def _join(self, hosted: HostedEnvs, timeout: float | None) -> _End | None:
        """Send HELLO and wait for WELCOME; while the server has no free slot, wait in line.

        Returns None once welcomed, else how the wait ended: the server closed first (a normal end for a client
        in line; for one that keeps serving, the end of a run it waited through).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self._join_timeout = timeout
        hello = self._send_hello(hosted, deadline)
        repeat_after = HELLO_REPEAT_SECONDS
        repeat_at = time.monotonic() + repeat_after
        in_line = False
        while True:
            if not in_line and time.monotonic() >= repeat_at:  # unanswered: the learner may have dropped it
                logger.info("client %s: no answer to HELLO within %g s; saying it again", self.name, repeat_after)
                self._send(hello, "HELLO")
                repeat_after = min(2 * repeat_after, MAX_HELLO_REPEAT_SECONDS)
                repeat_at = time.monotonic() + repeat_after
            received = self._receive(IDLE_POLL_SECONDS)
            if received is None and self._connection_dropped():
                # The server went away before it welcomed us (or while we waited in line): the HELLO went
                # to the old server. Start over with a new session, once a server is there again.
                if not self._denials:
                    logger.warning(
                        "client %s: the connection dropped before a WELCOME (the server restarted, or the HELLO "
                        "exceeds its message size limit); saying HELLO again",
                        self.name,
                    )
                if deadline is not None and time.monotonic() > deadline and not in_line:
                    raise self._no_answer()
                self._connect(linger=NEW_SESSION_LINGER_MS)
                hello = self._send_hello(hosted, deadline)
                repeat_after = HELLO_REPEAT_SECONDS
                repeat_at = time.monotonic() + repeat_after
                continue
            if received is None:
                if self._stop.is_set():
                    raise RemoteTimeoutError(
                        f"client {self.name}: stopped before it joined the server at {self.address}"
                    )
                if deadline is not None and time.monotonic() > deadline:
                    if in_line:
                        raise RemoteTimeoutError(
                            f"client {self.name}: no slot of the server at {self.address} freed up within "
                            f"{self.slot_timeout:g} s"
                        )
                    raise self._no_answer()
                continue
            frame, message = received
            try:
                header = protocol.parse_header(frame)
            except ProtocolError as error:
                logger.warning("client %s: ignoring a malformed message before WELCOME: %s", self.name, error)
                continue
            if header.kind == Kind.WELCOME:
                break
            if header.kind == Kind.REFUSE:
                answer = protocol.read_value(message.rest())
                if answer.get("waiting") is True and self.wait_for_slot:
                    if not in_line:
                        logger.info("client %s: %s", self.name, answer.get("reason"))
                        in_line = True
                        deadline = None if self.slot_timeout is None else time.monotonic() + self.slot_timeout
                    continue
                raise JoinRefusedError(
                    f"server at {self.address} refused client {self.name}: {answer.get('reason')}",
                    code=str(answer.get("code", "")),
                )
            if header.kind == Kind.CLOSE:
                end = self._closed(header, message)
                logger.info(
                    "client %s: the server at %s closed before a slot freed up%s",
                    self.name,
                    self.address,
                    "; exiting" if end is _End.EXIT else "",
                )
                return end
            if header.kind != Kind.PING:
                logger.warning("client %s: ignoring %s before WELCOME", self.name, kind_name(header.kind))
        welcome = protocol.read_value(message.rest())
        self._trusted = bool(welcome["allow_pickle"])
        self._max_message_bytes = welcome.get("max_message_bytes")
        self.slots = list(welcome["slots"])
        observation_space = codec.space_from_value(welcome["observation_space"], allow_pickle=self._trusted)
        action_space = codec.space_from_value(welcome["action_space"], allow_pickle=self._trusted)
        slabs = (
            protocol.slab_frame_sizes(hosted.count, observation_space, action_space) if welcome.get("slabs") else None
        )
        self._take_data_channel(welcome.get("data_channel") is True, welcome.get("shared_memory") is True, slabs)
        connection = self._session_connection()
        channel = connection.active_channel
        self._reply_slab = None
        hosted.configure(
            observation_space,
            action_space,
            AutoresetMode(welcome["autoreset_mode"]),
            reset_first=bool(welcome.get("reset_first", False)),
        )
        if channel is not None and channel.slabs:
            self._reply_slab = _ReplySlab(hosted)
        self._connection_dropped()  # forget events from before this session's WELCOME
        self._welcomed_session = self.session
        logger.info(
            "client %s: serving slots %s of %s%s%s",
            self.name,
            format_slots(self.slots),
            welcome["server"],
            " over its same-host data channel" if channel is not None else " over ZeroMQ",
            f" (rejoined after losing its server, {self.rejoins} time(s) so far)" if self.rejoins else "",
        )
        return None

    def _receive(self, timeout: float) -> tuple[bytes, Message] | None:
        """The next message before WELCOME (None if none came, or the link broke: then it counts as dropped)."""
        try:
            return self._session_connection().next_message(timeout)
        except LinkBroken as error:
            logger.info("client %s: %s", self.name, error)
            self._connect(linger=NEW_SESSION_LINGER_MS)
            return None

    def _send_hello(self, hosted: HostedEnvs, deadline: float | None) -> list[Any]:
        """Once a server answers the ZeroMQ handshake, open the data channel (if it is on this machine) and
        send HELLO, offering the channel; returns the HELLO (to repeat it unchanged). Waiting for the handshake
        first lets a client started before its server (or rejoining a restarted one) find the channel."""
        logger.info("client %s: connecting to %s with %d envs", self.name, self.address, hosted.count)
        self._wait_for_handshake(deadline)
        if self.data_plane:
            block_bytes = _block_bytes(hosted) if self.data_plane == "shm" else None
            reason, unexpected = self._session_connection().open_channel(
                self._max_message_bytes or (1 << 62), block_bytes
            )
            if reason:
                self._no_data_channel(f"no data channel for this address ({reason})", unexpected)
        hello = protocol.message(Kind.HELLO, self._hello(hosted), count=hosted.count, what="HELLO")
        self._send(hello, "HELLO")
        return hello

    def _wait_for_handshake(self, deadline: float | None) -> None:
        """Wait until the ZeroMQ handshake with a server succeeds; a connection refused for now is tried again.

        Raises:
            JoinRefusedError: the server turned the handshake down for good.
            RemoteTimeoutError: no server answered before ``deadline`` (or the client was stopped).
        """
        check_at = time.monotonic() + UNREACHABLE_CHECK_SECONDS
        while not self._connected:
            if self._connection_dropped() and not self._connected:
                self._connect(linger=NEW_SESSION_LINGER_MS)  # libzmq gave up on the old socket's connection
            if self._connected:
                self._unreachable = ""
                return
            if time.monotonic() >= check_at and not self._denials:
                self._tell_why_unreachable(deadline)
                check_at = time.monotonic() + UNREACHABLE_RECHECK_SECONDS
            if self._stop.is_set():
                raise RemoteTimeoutError(f"client {self.name}: stopped before it joined the server at {self.address}")
            if deadline is not None and time.monotonic() > deadline:
                raise self._no_answer()
            self._receive(0.05)  # wakes on the connection's events too

    def _tell_why_unreachable(self, deadline: float | None) -> None:
        """Find out why no server answers (a plain connection attempt) and say it, once per different cause."""
        reason = why_unreachable(self.address)
        if reason and reason != self._unreachable:
            left = "until stopped" if deadline is None else f"for up to {max(0.0, deadline - time.monotonic()):.0f} s"
            logger.warning("client %s: no server at %s yet: %s; trying again %s", self.name, self.address, reason, left)
        self._unreachable = reason

    def _take_data_channel(
        self, taken: bool, shared_memory: bool, slabs: tuple[list[int], list[int]] | None = None
    ) -> None:
        """Use the data channel (and its shared block, and its slabs for the frame sizes ``slabs``) if the WELCOME
        took it; else close it (saying why, once)."""
        connection = self._session_connection()
        if taken and connection.channel is not None:
            if connection.block is not None and not shared_memory:
                logger.info("client %s: the server did not take the shared block; serving over the socket", self.name)
            connection.use_channel(shared_memory, slabs)
            return
        if connection.channel is not None:
            self._no_data_channel("the server did not take this client's data channel", unexpected=True)
            connection.close_channel()

    def _no_data_channel(self, reason: str, unexpected: bool) -> None:
        """Say (once per run) why this client is served over ZeroMQ though it wanted a data channel: a warning
        if something went wrong, else (no server offers one here) for information."""
        if self._told_no_data_channel:
            return
        self._told_no_data_channel = True
        logger.log(
            logging.WARNING if unexpected else logging.DEBUG, "client %s: %s; serving over ZeroMQ", self.name, reason
        )

    def _no_answer(self) -> RemoteTimeoutError:
        if self._denials:
            return RemoteTimeoutError(
                f"client {self.name}: the server at {self.address} kept refusing new connections (too many open "
                "connections, or too many handshakes from this address) until the connect timeout"
            )
        unreachable = (self._unreachable or why_unreachable(self.address)) if not self._connected else ""
        why = f": {unreachable}" if unreachable else " (is the address right, and is the server running?)"
        return RemoteTimeoutError(
            f"client {self.name}: no answer from a server at {self.address} within {self._join_timeout:g} s{why}"
        )

    def _hello(self, hosted: HostedEnvs) -> dict[str, Any]:
        trusted = self.allow_pickle
        obs_spaces, obs_index = _distinct([env.observation_space for env in hosted.envs])
        act_spaces, act_index = _distinct([env.action_space for env in hosted.envs])
        first = hosted.envs[0]
        metadata, metadata_pickle = _split_metadata(dict(first.metadata), trusted)
        token = self._session_connection().token
        return {
            "protocol": protocol.PROTOCOL_VERSION,
            "name": self.name,
            "host": platform.node(),
            "pid": os.getpid(),
            "session": self.session,
            "previous_session": self.previous_session or None,
            "rejoins": self.rejoins,
            "wait": self.wait_for_slot,
            "num_envs": hosted.count,
            "observation_spaces": [codec.space_to_value(space, allow_pickle=trusted) for space in obs_spaces],
            "observation_space_index": obs_index,
            "action_spaces": [codec.space_to_value(space, allow_pickle=trusted) for space in act_spaces],
            "action_space_index": act_index,
            "metadata": metadata,
            "metadata_pickle": metadata_pickle,
            "render_mode": first.render_mode if isinstance(first.render_mode, str) else None,
            "allow_pickle": trusted,
            "launch": self._launch,
            "data_channel": {"token": token.hex()} if token else None,
            "dtypes": None,  # every dtype numpy has
        }

    # -- serving ---------------------------------------------------------------------------------

    def _serve(self, hosted: HostedEnvs) -> _End:
        """Answer commands until the membership ends: the server closed (or this client was stopped), the run is
        over, or the server was lost (its connection dropped, its data channel closed, or it stopped taking this
        client's messages)."""
        try:
            return self._serve_commands(hosted)
        except _ServerGone as error:
            logger.warning("client %s: %s; counting the server as gone", self.name, error)
            self._lost_reason = f": {error}"
            return _End.LOST

    def _serve_commands(self, hosted: HostedEnvs) -> _End:
        while True:
            received = self._next_command()
            if received is None:
                if self._stop.is_set() or not self._parent_alive():
                    logger.info("client %s: stopping", self.name)
                    self._send_last(protocol.message(Kind.BYE), "BYE")
                    return _End.EXIT
                if self._connection_dropped():
                    return _End.LOST
                stalled = self._session_connection().stalled_for(time.monotonic())
                if stalled >= self.liveness_timeout:
                    raise _ServerGone(
                        f"the server at {self.address} took nothing from this client for {stalled:.1f} s (it "
                        "stopped reading, or is gone)"
                    )
                continue
            frame, message = received
            header = None
            try:
                header = protocol.parse_header(frame)
                self._spin.crowded = bool(header.flags & protocol.FLAG_CROWDED)  # (the learner's hint)
                outcome = self._handle(hosted, header, frame, message)
                if outcome is not None:
                    return outcome
            except _ServerGone:
                raise
            except Exception as error:  # an env or the message failed: report it and keep serving
                message.skip_rest()
                index = None
                if isinstance(error, EnvFailure):  # report the env's own error, and which env raised it
                    index, error = error.index, error.error
                # get_attr of a missing attribute is an answer the caller expects, not a failure here
                expected = isinstance(error, AttributeError) and header is not None and header.kind == Kind.CALL
                self._send_error(header.seq if header else 0, error, index, expected=expected)

    def _next_command(self) -> tuple[bytes, Message] | None:
        """The next message's header frame and the rest; None after ``IDLE_POLL_SECONDS`` without one.

        Raises:
            _ServerGone: a link to the server broke (its data channel closed: the server is gone, or ended
                this membership).
        """
        connection: ServerConnection = self._connection  # pyright: ignore[reportAssignmentType] -- see _send
        on_channel = connection.active_channel is not None
        spin = self._spin.now() if on_channel else 0.0
        since = time.perf_counter()
        try:
            received = connection.next_message(IDLE_POLL_SECONDS, spin)
        except LinkBroken as error:
            raise _ServerGone(str(error)) from None
        if received is not None and on_channel:
            # slow commands (a slow learner, or one starved of CPU) turn the spin off until they come fast again
            self._spin.waited(time.perf_counter() - since)
        return received

    def _handle(self, hosted: HostedEnvs, header: protocol.Header, frame: bytes, message: Message) -> _End | None:
        """Answer one command; how the membership ended if it did (CLOSE, EVICT), else None."""
        if header.version != protocol.PROTOCOL_VERSION:
            raise ProtocolError(
                f"server speaks protocol version {header.version}, this client {protocol.PROTOCOL_VERSION}"
            )
        kind = header.kind
        if kind == Kind.STEP:
            indexes = self._read_indexes(hosted, header, message)
            actions = self._read_actions(hosted, header, frame, indexes, message)
            infos, finals, errors = hosted.step(actions, indexes, bool(header.flags & protocol.FLAG_EACH))
            self._send_result(hosted, header.seq, infos, finals, indexes, errors)
        elif kind == Kind.RESET:
            indexes = self._read_indexes(hosted, header, message)
            command = self._read_command(header, message, "seeds")
            seeds = _per_env(command["seeds"], header, "seeds")
            options = command.get("options", NO_OPTIONS)  # absent: reset(seed=...) without the keyword
            infos = hosted.reset(seeds, options, indexes)
            self._send_result(hosted, header.seq, infos, None, indexes)
        elif kind == Kind.CALL:
            indexes = self._read_indexes(hosted, header, message)
            command = self._read_command(header, message, "name")
            name, query = command["name"], command.get("query")
            if query is None:
                results = hosted.call(name, *_call_arguments(header, command), indexes)
            else:  # a query carries no args or kwargs (PROTOCOL.md §5.3)
                results = hosted.call(name, [], {}, indexes, query)
            self._send_call_result(header.seq, results, indexes)
        elif kind == Kind.SET_ATTR:
            indexes = self._read_indexes(hosted, header, message)
            command = self._read_command(header, message, "name", "values")
            name, outermost = command["name"], command.get("outermost", False)
            if type(outermost) is not bool:
                raise ProtocolError(f"SET_ATTR's outermost must be true or false, got {outermost!r}")
            hosted.set_attr(name, _per_env(command["values"], header, "values"), indexes, outermost)
            self._send_call_result(header.seq, None, indexes)
        elif kind == Kind.PING:
            message.skip_rest()  # a probe: the server checks that this connection still routes
        elif kind == Kind.WELCOME:
            message.skip_rest()  # the answer to a repeated HELLO (the first answer came already)
        elif kind == Kind.CLOSE:
            end = self._closed(header, message)
            if end is _End.EXIT:
                logger.info("client %s: the server closed; exiting", self.name)
            return end
        elif kind == Kind.EVICT:
            reason = (self._read_value(header, message) or {}).get("reason")
            logger.warning("client %s: the server ended this membership: %s", self.name, reason)
            return _End.LOST
        elif kind == Kind.ERROR:
            report = self._read_value(header, message) or {}
            logger.warning("client %s: the server reports an error: %s", self.name, report.get("message"))
        else:
            raise ProtocolError(f"unexpected {kind_name(kind)} message from the server")
        return None

    def _closed(self, header: protocol.Header, message: Message) -> _End:
        """Answer CLOSE with BYE; the end it means for this client: the end of a run for one that keeps serving,
        unless the server tells its clients to stop (PROTOCOL.md §9)."""
        try:
            value = self._read_value(header, message)
        except Exception:  # noqa: BLE001 - a CLOSE that cannot be read still closes
            message.skip_rest()
            value = None
        stop = isinstance(value, dict) and value.get("stop") is True
        self._send_last(protocol.message(Kind.BYE, seq=header.seq), "BYE")
        return _End.RUN_OVER if self.keep_serving and not stop else _End.EXIT

    def _read_indexes(self, hosted: HostedEnvs, header: protocol.Header, message: Message) -> list[int] | None:
        """The envs a command is for: those its index frame lists (FLAG_SUBSET), or None for all."""
        if not header.flags & protocol.FLAG_SUBSET:
            if header.count != hosted.count:
                raise ProtocolError(
                    f"{kind_name(header.kind)} for {header.count} envs, this client hosts {hosted.count}"
                )
            return None
        if not message.more():
            raise ProtocolError(f"{kind_name(header.kind)} with FLAG_SUBSET lacks its index frame")
        return protocol.parse_index_frame(message.next(), header.count, hosted.count)

    def _read_actions(
        self, hosted: HostedEnvs, header: protocol.Header, frame: bytes, indexes: list[int] | None, message: Message
    ) -> Any:
        """The actions of a STEP, one per env stepped, as ``iterate`` gives them (see PROTOCOL.md, STEP)."""
        count = header.count
        if header.flags & FLAG_VALUE:
            return _per_env(self._read_command(header, message, "actions")["actions"], header, "actions")
        leaves = hosted.action_leaves
        if leaves is None:
            raise ProtocolError("STEP without actions: this action space needs them in a value section")
        dtypes = None
        if header.flags & protocol.FLAG_DTYPES:
            dtypes = protocol.parse_step_dtypes(frame, len(leaves))
        targets = _new_actions(leaves, count, dtypes)
        message.next_into(targets, "STEP")
        if message.more():
            raise ProtocolError("STEP message has more frames than the action space needs")
        if hosted.action_is_leaf:
            return list(targets[0])
        batch = codec.leaves_to_batch(hosted.action_space, targets)
        return list(iterate(hosted.action_batch_spaces[count], batch))

    def _read_command(self, header: protocol.Header, message: Message, *keys: str) -> dict[str, Any]:
        """A command's value, checked to be a dict with ``keys`` (and a string ``name`` if that is one of them);
        anything else makes the command malformed: a ProtocolError, which the client's ERROR reports as such
        (PROTOCOL.md §8), whatever an env would have made of the value."""
        command = self._read_value(header, message)
        what = kind_name(header.kind)
        if not isinstance(command, dict):
            raise ProtocolError(f"{what} must carry a dict, not {type(command).__name__}")
        missing = [key for key in keys if key not in command]
        if missing:
            raise ProtocolError(f"{what} lacks {' and '.join(repr(key) for key in missing)}")
        if "name" in keys and type(command["name"]) is not str:
            raise ProtocolError(f"{what}'s name must be a string, not {type(command['name']).__name__}")
        return command

    def _read_value(self, header: protocol.Header, message: Message) -> Any:
        frames = message.rest()
        if not header.flags & FLAG_VALUE:
            raise ProtocolError(f"{kind_name(header.kind)} message without its value section")
        return protocol.read_value(frames, allow_pickle=self._trusted)

    def _send_result(
        self,
        hosted: HostedEnvs,
        seq: int,
        infos: list[dict],
        finals: list[tuple[Any, dict] | None] | None,
        indexes: list[int] | None = None,
        errors: list[Exception | None] | None = None,
    ) -> None:
        """Send the RESULT of the envs ``indexes`` (all if None), in that order; ``errors``: for a STEP with
        FLAG_EACH, what each env raised or None (a value that cannot be encoded is added, PROTOCOL.md §5.6)."""
        extra: dict[str, Any] = {}
        if hosted.observations is None:
            extra["obs"] = hosted.env_obs if indexes is None else [hosted.env_obs[index] for index in indexes]
        if any(infos):
            extra["infos"] = infos
        if finals is not None:
            extra["final"] = finals
        envs = hosted.selected(indexes)
        if errors is not None and any(error is not None for error in errors):
            for position, error in enumerate(errors):
                if error is not None:
                    self._log_error(error, envs[position])
            extra["errors"] = [None if error is None else error_report(error) for error in errors]
        flags = FLAG_VALUE if extra else 0
        if not flags and indexes is None and self._reply_slab is not None:
            connection: ServerConnection = self._connection  # pyright: ignore[reportAssignmentType] -- see _send
            try:
                slab_frames = connection.reply_slab()
                if slab_frames is not None:
                    self._reply_slab.write(slab_frames, hosted, seq)
                    connection.post_slab()
                    return
            except LinkBroken as error:
                raise _ServerGone(f"could not send RESULT to the server at {self.address}: {error}") from None
        hosted.gather(indexes)
        if indexes is None:
            frames: list[Any] = [hosted.result.pack(seq, flags), *hosted.observation_frames]
        else:
            rows = np.asarray(indexes, dtype=np.intp)
            frames = [hosted.result.pack_subset(seq, flags, rows), *[leaf[rows] for leaf in hosted.observation_frames]]
        if extra:
            frames += self._value_frames(extra, envs, errors is not None)
        self._check_sizes(frames)
        self._send(frames, "RESULT")

    def _value_frames(self, extra: dict[str, Any], envs: Sequence[int], each: bool) -> list[Any]:
        """The value section of a RESULT for ``envs``. A value that cannot travel is the error of its env: of the
        whole command (:class:`EnvFailure`), or with ``each`` that env's alone (its entries are blanked)."""
        slots = [self.slots[index] for index in envs]
        label = lambda path: _result_label(slots, path)  # noqa: E731
        for _ in range(len(envs) + 1):  # (each round blanks one more env)
            try:
                return protocol.value_frames(extra, allow_pickle=self._trusted, label=label)
            except EncodeError as error:
                position = error.path[1][0]
                if type(position) is not int:  # (every entry of the value section is a list, one item per env)
                    raise
                if not each or error.path[0][0] == "errors":
                    raise EnvFailure(envs[position], error) from error
                self._log_error(error, envs[position])
                extra.setdefault("errors", [None] * len(envs))[position] = error_report(error)
                for key, blank in (("obs", None), ("infos", {}), ("final", None)):
                    if key in extra:
                        extra[key] = [*extra[key][:position], blank, *extra[key][position + 1 :]]
        raise AssertionError("unreachable: every env's entries were blanked")

    def _check_sizes(self, frames: Sequence[Any]) -> None:
        """Refuse to send a frame the server would cut this client off for (its size limit is in WELCOME)."""
        limit = self._max_message_bytes
        if type(limit) is not int:
            return
        for frame in frames:
            if (frame.nbytes if type(frame) in (np.ndarray, memoryview) else len(frame)) > limit:
                break
        else:
            return
        if any(memoryview(frame).nbytes > limit for frame in frames):
            largest = max(memoryview(frame).nbytes for frame in frames)
            raise ProtocolError(
                f"a frame of {largest} bytes exceeds the server's message size limit of {limit} bytes "
                "(RemoteVectorEnv(max_message_bytes=...)); host fewer envs per client or raise the limit"
            )

    def _send_call_result(self, seq: int, results: list[Any] | None, indexes: list[int] | None = None) -> None:
        slots = self.slots if indexes is None else [self.slots[index] for index in indexes]
        message = protocol.message(
            Kind.CALL_RESULT,
            {"results": results},
            seq=seq,
            allow_pickle=self._trusted,
            label=lambda path: f"the result of slot {slots[path[1][0]]}{protocol.path_text(path[2:])}",
        )
        self._check_sizes(message)
        self._send(message, "CALL_RESULT")

    def _send_error(self, seq: int, error: BaseException, index: int | None, expected: bool = False) -> None:
        report = {**error_report(error), "index": index, "name": self.name, "launch": self._launch}
        self._log_error(error, index, logging.DEBUG if expected else logging.ERROR)
        self._send(protocol.message(Kind.ERROR, report, seq=seq), "ERROR")

    def _log_error(self, error: BaseException, index: int | None, level: int = logging.ERROR) -> None:
        env = f" (env {index})" if index is not None else ""
        logger.log(level, "client %s: %s: %s%s", self.name, type(error).__name__, error, env)

    def _send(self, frames: Sequence[Any], what: str) -> None:
        """Send one message on the membership's link; it never blocks (what the socket does not take waits
        in the link, and goes out while the client waits for the next command).

        Raises:
            _ServerGone: the link to the server broke.
        """
        # the step path runs in a session only, which has its connection (no check per message here)
        connection: ServerConnection = self._connection  # pyright: ignore[reportAssignmentType]
        try:
            connection.send(frames)
        except LinkBroken as error:
            raise _ServerGone(f"could not send {what} to the server at {self.address}: {error}") from None

    def _send_last(self, frames: Sequence[Any], what: str) -> None:
        """Send the last message of a session (a BYE): one that does not go out at once is given up on."""
        if not self._session_connection().send_last(frames, 0.5):
            logger.info("client %s: the server took no %s; leaving without it", self.name, what)

    def _parent_alive(self) -> bool:
        parent = (self._launch or {}).get("parent_pid")
        return parent is None or os.getppid() == parent


_NO_ERRORS: list[Exception | None] = [None]
_NO_FINALS: list[tuple[Any, dict] | None] = [None]
"""(Typed one-item lists, which HostedEnvs.step multiplies into one entry per env.)"""


def _new_actions(leaves: list[codec.ArrayLeaf], count: int, dtypes: Sequence[np.dtype] | None) -> list[np.ndarray]:
    """Fresh arrays to receive the action ``leaves`` of a STEP for ``count`` envs (in the leaves' dtypes unless
    given).

    Fresh, not reused: an env may keep the action it was given, as it may with ``SyncVectorEnv``.
    """
    if dtypes is None:
        dtypes = [leaf.dtype for leaf in leaves]
    return [np.empty((count, *leaf.shape), dtype=dtype) for leaf, dtype in zip(leaves, dtypes)]


def _shared_envs(envs: Sequence[gym.Env]) -> list[int]:
    """The positions of the envs whose unwrapped env another position holds too."""
    positions: dict[int, list[int]] = {}
    for position, env in enumerate(envs):
        positions.setdefault(id(env.unwrapped), []).append(position)
    return sorted(position for group in positions.values() if len(group) > 1 for position in group)


def _block_bytes(hosted: HostedEnvs) -> tuple[int, int, tuple[int, int]]:
    """The bytes of a STEP's actions and of a RESULT's arrays, for all of ``hosted``'s envs: what a shared
    block's lanes are sized for (a message that does not fit travels on the socket); and the bytes of its
    slabs, for the messages of its first env's spaces (PROTOCOL.md §13.6; none if they have no array layout)."""
    actions = sum(_array_bytes(env.action_space) for env in hosted.envs)
    results = sum(_array_bytes(env.observation_space) + 8 + 2 for env in hosted.envs)
    first = hosted.envs[0]
    sizes = protocol.slab_frame_sizes(hosted.count, first.observation_space, first.action_space)
    slabs = (shared.slab_bytes(sizes[0]), shared.slab_bytes(sizes[1])) if sizes is not None else (0, 0)
    return actions, results, slabs


def _array_bytes(space: gym.Space) -> int:
    """The bytes of one value of ``space`` as array frames (0 for spaces whose values travel in the value section)."""
    return sum(codec.leaf_bytes(leaf) for leaf in codec.array_leaf_spaces(space) or [])


def error_report(error: BaseException) -> dict[str, str]:
    """What a client tells of an error its env raised (PROTOCOL.md §8): class, module, message, traceback."""
    return {
        "type": type(error).__name__,
        "module": type(error).__module__,
        "message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
    }


def _per_env(value: Any, header: protocol.Header, name: str) -> list:
    """``value``, checked to be a list of one entry per env the command is for (``header.count``)."""
    if not isinstance(value, list) or len(value) != header.count:
        raise ProtocolError(f"{kind_name(header.kind)} must carry a list of {header.count} {name}")
    return value


def _call_arguments(header: protocol.Header, command: dict[str, Any]) -> tuple[Sequence[Any], dict[str, Any]]:
    """A plain CALL's ``args`` (a list) and ``kwargs`` (a dict with string keys); else the CALL is malformed."""
    args, kwargs = command.get("args"), command.get("kwargs")
    if not (isinstance(args, (list, tuple)) and isinstance(kwargs, dict) and all(type(key) is str for key in kwargs)):
        what = kind_name(header.kind)
        raise ProtocolError(f"{what} must carry 'args' (a list) and 'kwargs' (a dict with string keys)")
    return args, kwargs


def _wrapper_classes(env: gym.Env) -> list[str]:
    """The classes (``module.qualname``, bases included) of the wrappers around ``env``, outermost first."""
    names: list[str] = []
    while isinstance(env, gym.Wrapper):
        for kind in type(env).__mro__:
            name = f"{kind.__module__}.{kind.__qualname__}"
            if name not in names:
                names.append(name)
        env = env.env
    return names


def _result_label(slots: list[int], path: tuple[tuple[Any, str], ...]) -> str:
    """Where in a RESULT for ``slots`` (in message order) a value that cannot travel sits."""
    field, position = path[0][0], path[1][0]
    if field == "final":
        part = "observation" if path[2][0] == 0 else "info"
        return f"the final {part} of slot {slots[position]}{protocol.path_text(path[3:])}"
    part = {"infos": "info", "obs": "observation"}.get(field, field)
    return f"the {part} of slot {slots[position]}{protocol.path_text(path[2:])}"


def _distinct(items: list[gym.Space]) -> tuple[list[gym.Space], list[int]]:
    distinct: list[gym.Space] = []
    index = []
    for item in items:
        for position, known in enumerate(distinct):
            if known is item or (type(known) is type(item) and known == item):
                index.append(position)
                break
        else:
            distinct.append(item)
            index.append(len(distinct) - 1)
    return distinct, index


def _split_metadata(metadata: dict[str, Any], trusted: bool) -> tuple[dict[str, Any], bytes | None]:
    """Metadata entries that encode safely, and (trusted mode) a pickle of the others."""
    safe, other = {}, {}
    for key, value in metadata.items():
        try:
            codec.encode({key: value})
            safe[key] = value
        except EncodeError:
            other[key] = value
    if other and not trusted:
        logger.debug("metadata keys %s cannot travel without pickle; left out", sorted(map(str, other)))
    if other and trusted:
        import cloudpickle

        return safe, cloudpickle.dumps(other)
    return safe, None
