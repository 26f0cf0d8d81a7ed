"""The learner's face: :class:`RemoteVectorEnv`, a Gymnasium ``VectorEnv`` whose envs live in clients."""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError, ResetNeeded
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_differing_spaces, batch_space, iterate

from gym_remote import codec, commands, protocol
from gym_remote.batch import Landing, ResultBatch
from gym_remote.client import DEFAULT_SPIN_SECONDS as CLIENT_SPIN_SECONDS
from gym_remote.episodes import Episodes
from gym_remote.errors import ClientLostError, ProtocolError, RemoteTimeoutError
from gym_remote.gymnasium_versions import CHECKS_BY_ASSERT, RESET_MASK_NAME, argument_error
from gym_remote.launch import Launcher, LocalClients
from gym_remote.links import shared
from gym_remote.links.channel import wanted as data_plane_wanted
from gym_remote.partial import PartialBatches, format_outstanding
from gym_remote.protocol import HAS_ATTR_QUERY, NO_OPTIONS, Kind
from gym_remote.security import (
    DEFAULT_HANDSHAKE_RATE,
    AuthorizedKeys,
    ClientSecurity,
    KeyPair,
    KeySource,
    SecurityOptions,
    ServerSecurity,
    check_endpoint,
    is_local_endpoint,
    server_security,
)
from gym_remote.server import DEFAULT_MAX_MESSAGE_BYTES, ClientInfo, Exchange, Joined, SlotServer, default_spin

__all__ = ["RemoteVectorEnv"]

logger = logging.getLogger(__name__)


class RemoteVectorEnv(VectorEnv):
    """A vector env whose sub-environments run in ZeroMQ clients, a drop-in for ``SyncVectorEnv``.

    Two ways to build one:

    * ``RemoteVectorEnv(env_fns)`` (as ``SyncVectorEnv``) starts ``num_clients`` local client
      processes, each serving a contiguous share of ``env_fns`` over a private ``ipc://`` endpoint;
      ``env_fns[i]`` always serves slot ``i``.
    * ``RemoteVectorEnv(num_envs=n)`` only listens (on ``bind``, by default loopback with a free
      port, readable as :attr:`address`); clients anywhere join with ``gym-remote client ADDRESS``
      or :class:`~gym_remote.EnvClient`, and :meth:`reset` waits until every slot is served.

    Observations, rewards (float64), terminations, truncations and infos are exactly those of
    ``SyncVectorEnv`` for the same envs, seeds and actions, in every autoreset mode.

    Args:
        env_fns: functions that each make one env (the drop-in form), or None (the server form).
        copy: return a copy of the observations from :meth:`reset` and :meth:`step`.
        observation_mode: ``"same"``, ``"different"`` or a ``(observation_space, single_observation_space)``
            pair, as in ``SyncVectorEnv``.
        autoreset_mode: the :class:`~gymnasium.vector.AutoresetMode` (or its string value).
        num_envs: number of slots; required without ``env_fns``.
        bind: the endpoint to listen on. Default: a private ``ipc://`` path with ``env_fns``, else
            ``"tcp://127.0.0.1:*"`` (loopback, free port).
        num_clients: local processes to start (default: the CPU count, at most ``len(env_fns)``).
        observation_space, action_space: single spaces for the server form; default: those of the
            first client that joins.
        timeout: seconds to wait for a live client's answer to a reset, step or call (a slow env is
            waited for this long; a dead or unreachable client is noticed within ``liveness_timeout``);
            ``None`` (or ``math.inf``): without limit.
        connect_timeout: seconds to wait for clients to serve empty slots: at start-up, in :meth:`reset`,
            and in :meth:`step` for the replacement of a lost client; ``None`` (or ``math.inf``): without limit.
        liveness_timeout: seconds without a sign of life on a client's connection (ZeroMQ heartbeats,
            answered whatever its envs are doing) before the client is declared lost.
        max_restarts: times in a row a local client's process may die without serving a step before
            the vector env gives up restarting it and raises. An env function that raises is not
            retried: its error is raised at once.
        max_message_bytes: largest message frame a client may send (default 256 MiB). gym_remote
            clients learn it in the handshake and report an error instead of sending more; any other peer
            that sends more is cut off by ZeroMQ.
        allow_pickle: the trusted pickle mode, for values that cannot travel safely (e.g. custom
            objects in infos or ``get_attr`` results). ``None`` (default): only for the local clients this
            env starts itself; ``True``: also for remote clients that ask for it, which can then run any
            code in this process; ``False``: never.
        name: the server's name in logs and in the clients' logs.
        server_key: this server's ``NAME.key_secret`` file (``gym-remote keygen``): connections are
            encrypted and authenticated with CURVE, and only clients whose public key is in
            ``authorized_keys`` get in.
        authorized_keys: a directory of client ``NAME.key`` files (read again when an unknown key
            connects), a key file, or a list of key files and Z85 public keys.
        secret: a shared secret instead of key files: server and clients derive CURVE keys from it
            (the secret never travels). Clients need the same secret.
        insecure: allow binding a non-loopback address without ``server_key`` or ``secret`` (anyone who
            can reach the port can then serve slots and read the traffic).
        max_connections: connections open at once beyond which new ones are refused (default
            ``4 * num_envs + 64``); also the length of the waiting line.
        handshake_rate: connection handshakes per second one network address may start (bursts of
            twice as many, or of ``num_envs`` if more: a whole fleet on one host joins at once); a flood
            beyond it is refused.
        batch_size: how many slots' results :meth:`recv` returns (default ``num_envs``); see
            :meth:`send` and :meth:`recv`, the partial batches of EnvPool.
        spin: seconds a wait for replies busy-checks for them before it sleeps, as long as replies
            have lately come that fast; ``0`` never spins. Cheap envs answer in less time than it takes
            to wake a sleeping thread, so spinning speeds them up, at the cost of a busy core while
            waiting. Default: 400 µs, unless the local clients leave no core free for the spin (then 0; but
            over shared memory, where they spin too, it is 400 µs while each client has a core of its own).
            Slow envs are waited for asleep, whatever this says, and so are all envs while other threads of
            this process (a trainer) keep half a core or more busy. Over the data plane the local clients
            then spin too, for 200 µs, waiting for the next step (see :class:`~gym_remote.EnvClient`).
        data_plane: carry the commands and results of clients on this machine (the local clients,
            and ``gym-remote client`` on this host) over Unix sockets instead of ZeroMQ, which is
            faster; ZeroMQ stays the control plane and the only transport to other machines (see
            ``docs/PROTOCOL.md`` §13). ``"shm"`` has the local clients carry steps in shared-memory
            mailboxes next to the socket (x86-64 Linux), ``"uds"`` keeps them to the socket. Default: on
            (Linux), unless the environment variable ``GYM_REMOTE_DATA_PLANE`` is ``off`` (it may name a
            kind too). ``stats()`` tells which plane each slot uses.
        final_info_format: ``"gymnasium"`` (infos as Gymnasium 1.x batches them), or ``"legacy"``,
            only for scripts written for Gymnasium 0.29 (older CleanRL scripts): needs
            ``autoreset_mode="SameStep"``; the infos of an ended episode's last step come as
            ``infos["final_info"]``, an object array of per-env info dicts (None elsewhere), and its
            last observation as ``infos["final_observation"]``; every info key is batched without
            descending into dicts, as Gymnasium 0.29 did. New code should keep the default.
        empty_slots: what :meth:`step` does for a slot without a client (its client was lost, no replacement
            came yet): ``"wait"`` (default) waits for one, up to ``connect_timeout``; ``"mask"`` steps the
            served slots and returns the empty ones masked: the step after the loss reports it once
            (truncated, ``infos["client_lost"]``), then each row is reward 0, neither terminated nor truncated,
            its last observation, ``infos["unserved"]`` (with its ``_unserved`` mask), until a client serves it
            again, which starts it with a reset (NEXT_STEP: its autoreset step; SAME_STEP: a masked row holding
            the reset observation). Masked rows are not transitions of any env: drop them from what you learn
            from. Needs NEXT_STEP or SAME_STEP; ``reset()`` and calls still wait for every slot they reach.
        security: the security arguments above in one :class:`~gym_remote.security.SecurityOptions`
            (``server_key`` … ``max_message_bytes``), instead of as keyword arguments; kept as :attr:`security`.
        launcher: starts clients for the server form (``num_envs=``), e.g.
            :class:`gym_remote.ray.RayClients`; it implements :class:`~gym_remote.launch.Launcher`
            (``env_fns`` use :class:`~gym_remote.launch.LocalClients`).

    Example:
        >>> import gymnasium as gym
        >>> from gym_remote import RemoteVectorEnv
        >>> envs = RemoteVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_clients=2)
        >>> obs, infos = envs.reset(seed=42)
        >>> obs.shape
        (4, 4)
        >>> obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        >>> rewards
        array([1., 1., 1., 1.])
        >>> envs.close()

        Partial batches, as in EnvPool: each ``recv`` returns the first ``batch_size`` slots to finish.

        >>> envs = RemoteVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_clients=2, batch_size=2)
        >>> envs.async_reset(seed=42)
        >>> obs, rewards, terminations, truncations, infos = envs.recv()
        >>> obs.shape, infos["env_id"].shape
        ((2, 4), (2,))
        >>> import numpy as np
        >>> envs.send(np.array([0, 1]), infos["env_id"])      # one action per returned slot
        >>> envs.close()
    """

    # Set once by the constructor (_serve), in every form: a vector env that exists has them. (Declared, not set to
    # None first: close() of a half-built one reads the server through _built_server().)
    _server: SlotServer
    # Set once the spaces are known (_set_spaces), before any use: every use follows _ensure_spaces().
    _single_action_space: gym.Space
    _action_space: gym.Space
    _batch: ResultBatch
    _action_leaf_spaces: list[codec.ArrayLeaf] | None

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]] | None = None,
        copy: bool = True,
        observation_mode: str | tuple[gym.Space, gym.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        num_envs: int | None = None,
        bind: str | None = None,
        num_clients: int | None = None,
        observation_space: gym.Space | None = None,
        action_space: gym.Space | None = None,
        timeout: float | None = 300.0,
        connect_timeout: float | None = 60.0,
        liveness_timeout: float = 10.0,
        max_restarts: int = 3,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        allow_pickle: bool | None = None,
        name: str = "gym_remote",
        server_key: KeySource | None = None,
        authorized_keys: KeySource | Iterable[KeySource] | None = None,
        secret: str | bytes | None = None,
        insecure: bool = False,
        max_connections: int | None = None,
        handshake_rate: float = DEFAULT_HANDSHAKE_RATE,
        batch_size: int | None = None,
        spin: float | None = None,
        data_plane: bool | str | None = None,
        final_info_format: str = "gymnasium",
        empty_slots: str = "wait",
        launcher: Launcher | None = None,
        security: SecurityOptions | None = None,
    ) -> None:
        super().__init__()
        # what close() reads, set before anything can raise: Gymnasium before 1.3 closes a half-built
        # vector env too, when it is collected (VectorEnv.__del__)
        self._launcher: Launcher | None = None
        # step_async / reset_async: the call whose results step_wait / reset_wait collects
        self._waiting_for: str | None = None  # "step" or "reset"
        self._step_call: Exchange | None = None
        self._reset_call: _ResetCall | None = None
        self._finalizer: weakref.finalize | None = None  # closes what a vector env dropped unclosed leaves
        self._metrics: list[Any] = []  # the Prometheus endpoints of serve_metrics

        given = SecurityOptions(
            server_key=server_key,
            authorized_keys=authorized_keys,
            secret=secret,
            insecure=insecure,
            allow_pickle=allow_pickle,
            max_connections=max_connections,
            handshake_rate=handshake_rate,
            max_message_bytes=max_message_bytes,
        )
        self.security = _security_options(security, given)
        self.copy = copy
        self.autoreset_mode = (
            autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        )
        self.observation_mode = _checked_observation_mode(observation_mode)
        env_fns = list(env_fns) if env_fns is not None else None
        self.num_envs = _checked_num_envs(env_fns, num_envs, observation_space, action_space)
        self.final_info_format = _checked_final_info_format(final_info_format, self.autoreset_mode)
        self.batch_size = _checked_batch_size(batch_size, self.num_envs, self.autoreset_mode)
        self.empty_slots = _checked_empty_slots(empty_slots, self.autoreset_mode)
        self._masked: list[int] = []  # the slots the step under way returns masked (empty_slots="mask")
        self._unrecorded: Any = None  # the rows of the last step's results not yet in the fleet's figures
        if env_fns is not None and launcher is not None:
            raise ValueError("give env_fns (local client processes) or a launcher, not both")
        self.timeout = _duration(timeout, "timeout")
        self.connect_timeout = _duration(connect_timeout, "connect_timeout")
        self.metadata = {"autoreset_mode": self.autoreset_mode}
        self.render_mode = None

        self._single_observation_space: gym.Space | None = None  # (None until the spaces are known)
        self._observation_space: gym.Space | None = None  # (None until known: observation_mode="different")
        self._autoreset_envs = np.zeros(self.num_envs, dtype=np.bool_)
        self._episodes = Episodes(self.num_envs, self.autoreset_mode)
        self._metadata_known = observation_space is not None  # else the first client's metadata is taken
        self._partial: PartialBatches | None = None  # send / recv (once the spaces are known)

        serving = _Serving(
            bind=bind,
            spin=spin,
            liveness_timeout=liveness_timeout,
            name=name,
            data_plane=data_plane_wanted(data_plane),
            observation_space=observation_space,
            action_space=action_space,
        )
        try:
            if env_fns is not None:
                self._build_local_form(env_fns, num_clients, max_restarts, serving)
            elif launcher is not None:
                self._build_launcher_form(launcher, serving)
            else:
                self._build_server_form(serving)
        except BaseException:
            self.close(timeout=0.5)  # the local clients need not finish their handshakes first
            raise
        self._finalizer = weakref.finalize(self, _release, self._server, self._launcher)

    # -- construction ------------------------------------------------------------------------------

    def _build_local_form(
        self, env_fns: list[Callable[[], gym.Env]], num_clients: int | None, max_restarts: int, serving: _Serving
    ) -> None:
        """``env_fns`` served by ``num_clients`` local processes (default: the CPU count, at most ``len(env_fns)``)."""
        count = num_clients if num_clients is not None else min(os.cpu_count() or 1, len(env_fns))
        if not 1 <= count <= len(env_fns):
            raise ValueError(f"num_clients must be between 1 and len(env_fns)={len(env_fns)}, got {count}")
        spin = serving.learner_spin(count)
        clients = LocalClients(
            env_fns,
            count,
            connect_timeout=self.connect_timeout,
            liveness_timeout=serving.liveness_timeout,
            max_restarts=max_restarts,
            data_plane=serving.data_plane,
            spin=CLIENT_SPIN_SECONDS if spin > 0 else 0.0,  # they spin when the learner does: a core is free
        )
        self._serve(serving, clients, spin)

    def _build_launcher_form(self, launcher: Launcher, serving: _Serving) -> None:
        """The clients ``launcher`` starts (e.g. Ray actors), and any that join as remote clients do."""
        self._serve(serving, launcher, serving.learner_spin(launcher.local_processes))

    def _build_server_form(self, serving: _Serving) -> None:
        """Only listen: remote clients join."""
        self._serve(serving, None, serving.learner_spin(0))

    def _serve(self, serving: _Serving, launcher: Launcher | None, spin: float) -> None:
        """Listen (on ``bind``, else where ``launcher`` says, else on loopback), take the spaces if given,
        and start the launcher's clients."""
        self.spin = spin
        self._launcher = launcher
        bind = serving.bind or (launcher.default_bind if launcher is not None else None) or "tcp://127.0.0.1:*"
        launched = launcher is not None and bool(launcher.launches)
        options = self.security
        curve, local_security = _security(bind, options, launched)
        self._server = SlotServer(
            bind,
            self.num_envs,
            observation_mode=self.observation_mode,
            vector_class=type(self).__name__,
            autoreset_mode=self.autoreset_mode,
            allow_pickle=options.allow_pickle,
            launcher=launcher,
            liveness_timeout=serving.liveness_timeout,
            max_message_bytes=options.max_message_bytes,
            name=serving.name,
            security=curve,
            max_connections=options.max_connections,
            handshake_rate=options.handshake_rate,
            spin=spin,
            data_plane=serving.data_plane,
        )
        if serving.observation_space is not None and serving.action_space is not None:  # (both or neither)
            self._set_spaces(serving.observation_space, serving.action_space)
        if launcher is not None:
            self._start_launcher(launcher, options.allow_pickle, local_security)

    def _start_launcher(self, launcher: Launcher, allow_pickle: bool | None, security: ClientSecurity | None) -> None:
        """Start the launcher's clients; wait for those it launches with reserved slots (slot 0 brings the spaces)."""
        server = self._server
        # clients on this machine reach a server bound to every interface through loopback; others at its address
        address = server.addresses[-1] if launcher.local_processes else server.address
        launcher.start(address, allow_pickle=allow_pickle is not False, security=security)
        reserved = [
            slot for launch in launcher.launches for slot in range(launch.first_slot, launch.first_slot + launch.count)
        ]
        if not reserved:
            return
        what = "the local clients" if isinstance(launcher, LocalClients) else "the launched clients"
        server.wait_for_slots(self.connect_timeout, reserved, what=what)
        self._drain_events()  # the first to join, slot 0's client (the others wait for it), brings the spaces

    def _drain_events(self) -> None:
        """Take in what the server saw happen during its last wait: joins and losses of clients.

        Each event leaves the server's queue only once taken in (taking one in twice changes nothing), so
        an interrupt loses none."""
        server = self._server
        while (event := server.peek_event()) is not None:
            client = event.client
            if isinstance(event, Joined):
                if not self._metadata_known:  # the client that brought the spaces
                    self._adopt_first_client(client)
            else:  # Lost: its episodes end (reported by the next step) and its slots wait for a new client
                self._episodes.client_lost(client.slots, event.reason, client.identity)
            server.pop_event()

    def _adopt_first_client(self, client: ClientInfo) -> None:
        """Take metadata, render mode and (when not given) the spaces from a client's first env."""
        self._metadata_known = True
        self.metadata = {**client.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = client.render_mode
        if self._single_observation_space is None:
            self._set_spaces(client.observation_spaces[0], client.action_spaces[0])

    def _set_spaces(self, single_observation_space: gym.Space, single_action_space: gym.Space) -> None:
        self._single_action_space = single_action_space
        self._action_batches = codec.BatchedSpaces(single_action_space)  # for send() to some of the slots
        self._action_space = self._action_batches[self.num_envs]
        if _is_space_pair(self.observation_mode):
            self._observation_space, single = self.observation_mode
        else:
            single = single_observation_space
            self._observation_space = (
                batch_space(single_observation_space, self.num_envs) if self.observation_mode == "same" else None
            )
        self._single_observation_space = single
        self._server.members.set_spaces(single, single_action_space)
        self._batch = ResultBatch(single, self.num_envs, legacy_infos=self.final_info_format == "legacy")
        self._partial = PartialBatches(self._server, self._episodes, self._batch)
        self._server.set_observation_buffers(self._batch.leaves)
        self._action_leaf_spaces = codec.array_leaf_spaces(single_action_space)
        # the shape and dtype of a batch of actions that goes in the clients' slabs as it is (see _step_in_slabs)
        leaf = type(single_action_space) in codec.LEAF_SPACES
        self._slab_action_shape = (self.num_envs, *(single_action_space.shape or ())) if leaf else None
        self._slab_action_dtype = single_action_space.dtype if leaf else None

    def _ensure_spaces(self) -> None:
        if self._single_observation_space is None:
            self._check_open()
            self._server.wait_for_first_client(self.connect_timeout)
            self._drain_events()

    # -- spaces (known once the first client joins, unless given) ----------------------------------

    # (a property where VectorEnv has an attribute: the spaces come with the first client)
    @property
    def single_observation_space(self) -> gym.Space:
        self._ensure_spaces()
        space = self._single_observation_space
        if space is None:  # (_ensure_spaces() made sure it is not)
            raise RuntimeError("the observation space is not known")
        return space

    @single_observation_space.setter
    def single_observation_space(self, space: gym.Space) -> None:  # pyright: ignore[reportIncompatibleVariableOverride]
        self._single_observation_space = space

    # (a property where VectorEnv has an attribute: the spaces come with the first client)
    @property
    def observation_space(self) -> gym.Space:
        self._ensure_spaces()
        if self._observation_space is None:  # observation_mode="different" needs every slot's space
            self._server.wait_for_slots(self.connect_timeout, what="all slots (observation_mode='different')")
            self._drain_events()
            self._observation_space = batch_differing_spaces(
                [self._server.members.observation_space_of(slot) for slot in range(self.num_envs)]
            )
        return self._observation_space

    @observation_space.setter
    def observation_space(self, space: gym.Space) -> None:  # pyright: ignore[reportIncompatibleVariableOverride]
        self._observation_space = space

    # (a property where VectorEnv has an attribute: the spaces come with the first client)
    @property
    def single_action_space(self) -> gym.Space:
        self._ensure_spaces()
        return self._single_action_space

    @single_action_space.setter
    def single_action_space(self, space: gym.Space) -> None:  # pyright: ignore[reportIncompatibleVariableOverride]
        self._single_action_space = space

    # (a property where VectorEnv has an attribute: the spaces come with the first client)
    @property
    def action_space(self) -> gym.Space:
        self._ensure_spaces()
        return self._action_space

    @action_space.setter
    def action_space(self, space: gym.Space) -> None:  # pyright: ignore[reportIncompatibleVariableOverride]
        self._action_space = space

    @property
    def address(self) -> str:
        """The endpoint clients connect to, e.g. ``"tcp://127.0.0.1:40123"``; for a server bound to every
        interface (``tcp://0.0.0.0:5555``), the one at this host's main address (see :attr:`addresses`)."""
        return self._server.address

    @property
    def addresses(self) -> list[str]:
        """Every endpoint clients may connect to: one per address of this host for a server bound to every
        interface (the address of its default route first, loopback last), else only :attr:`address`."""
        return list(self._server.addresses)

    @property
    def launcher(self) -> Launcher | None:
        """What starts this vector env's own clients (:class:`~gym_remote.launch.LocalClients` with
        ``env_fns``), or None."""
        return self._launcher

    @property
    def num_clients(self) -> int:
        """How many clients are connected now."""
        return len(self._server.members.clients)

    def stats(self) -> list[dict[str, Any]]:
        """Who serves each slot, and how well: one dict per slot.

        Keys: ``slot``; ``epoch`` (how many clients have served the slot); ``served``; for an empty
        slot ``empty_for`` (seconds); for a served one ``client`` (name), ``host``, ``pid``, ``address``
        (the client's network address as libzmq reports it: an IP address over tcp, ``localhost:uid:gid:pid``
        over ipc), ``key`` (the name of the CURVE key it authenticated with, ``""`` without
        authentication), ``session``, ``local`` (started by this env),
        ``steps`` (commands answered by the client), ``last_seen`` (seconds since its last message),
        ``latency`` (seconds from sending the last command to its reply), ``connected_for`` (seconds),
        ``rejoins`` (times the client reconnected after losing a server), ``plane`` (``"uds"``: its
        commands travel over the same-host data plane, ``"zmq"``: over ZeroMQ) and ``restarts`` (times
        this env restarted the local client).
        """
        self._check_open()
        rows = self._server.stats()
        local = self._launcher if isinstance(self._launcher, LocalClients) else None
        for row in rows:
            client = self._server.members.slots[row["slot"]]
            if client is not None:
                index = client.launch_index
                row["restarts"] = local.restarts[index] if index is not None and local is not None else 0
        return rows

    def status(self) -> dict[str, Any]:
        """The fleet's status, as ``gym-remote status --json`` shows it (PROTOCOL.md §9.1): per slot its client,
        env-steps/s, step latency, episodes and mean return, losses and rejoins; the clients in line, the
        refusals by reason, uptime. ``gym_remote.fleet.fleet_summary`` turns it into a few numbers."""
        self._check_open()
        self._record_previous()
        return self._server.status()

    def serve_metrics(self, port: int = 0, address: str = "127.0.0.1") -> int:
        """Serve the fleet's figures for Prometheus at ``http://ADDRESS:PORT/metrics`` (``gym_remote.metrics``; the
        ``metrics`` extra); returns the port (``0``: a free one). They are the status of :meth:`status`, refreshed
        once a second while the vector env is inside a call; the endpoint closes with the vector env."""
        self._check_open()
        from gym_remote.metrics import MetricsEndpoint

        server = self._server
        server.publish_status()
        endpoint = MetricsEndpoint(lambda: server.published, port, address)
        self._metrics.append(endpoint)
        return endpoint.port

    def server_stats(self) -> dict[str, Any]:
        """The server's side: who may connect and who tried.

        Keys: ``address``; ``security`` (``"none"`` or how CURVE is used); ``connections`` (open now);
        ``handshakes_accepted``; ``handshakes_denied`` (counts by reason: ``"key not authorized"``,
        ``"too many connections"``, ``"handshake rate exceeded"`` ...); ``clients`` (joined);
        ``waiting`` (in line for a slot) and ``waiting_clients`` (their names, first in line first; one that
        died waiting stays listed until a slot is offered to it); ``recent_refusals`` (the last HELLO
        refusals' reasons).
        """
        self._check_open()
        return self._server.connection_stats()

    # one per sub-env, as SyncVectorEnv's (VectorEnv's own is the vector's single seed and generator)
    @property
    def np_random_seed(self) -> tuple[int, ...]:  # pyright: ignore[reportIncompatibleMethodOverride]
        """The sub-envs' ``np_random_seed``, one per slot."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:  # pyright: ignore[reportIncompatibleMethodOverride]
        """The sub-envs' random generators (needs the trusted pickle mode: they are not plain data)."""
        return self.get_attr("np_random")

    # -- the VectorEnv API -------------------------------------------------------------------------

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs (all, or those in ``options["reset_mask"]``); as ``SyncVectorEnv.reset``.

        Waits up to ``connect_timeout`` for clients to serve every slot that is reset.
        """
        pending = self._reset_call
        try:
            self.reset_async(seed=seed, options=options)
            return self.reset_wait()
        except BaseException:
            if self._reset_call is not pending:
                self._abandon_pending("reset")
            raise

    def reset_async(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Send the resets of :meth:`reset` and return at once; :meth:`reset_wait` collects them.

        Raises:
            AlreadyPendingCallError: a :meth:`step_async` or :meth:`reset_async` is waiting for its
                ``*_wait``, or partial batches have results outstanding (see :meth:`recv`).
        """
        self._check_idle("reset_async")
        reset_mask = None
        if options is not None and "reset_mask" in options:
            reset_mask = options.pop("reset_mask")
            _check_reset_mask(reset_mask, self.num_envs)
        slots = list(range(self.num_envs)) if reset_mask is None else np.flatnonzero(reset_mask).tolist()
        self._reset_async_slots(slots, seed, options)

    def _reset_async_slots(self, slots: list[int], seed: int | list[int | None] | None, options: Any) -> None:
        """:meth:`reset_async` for ``slots``, each given ``options`` as they are (NO_OPTIONS: none at all)."""
        self._check_idle("reset_async")
        seed = self._seeds(seed)
        self._ensure_spaces()
        self._batch.clear_infos()
        self._reset_call = self._start_reset(slots, seed, options, "reset")
        self._waiting_for = "reset"

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """The results of :meth:`reset_async`, as :meth:`reset` returns them.

        Args:
            timeout: seconds to wait in all (default: ``connect_timeout + timeout`` of the constructor).

        Raises:
            NoAsyncCallError: no :meth:`reset_async` is waiting.
            RemoteTimeoutError: the resets did not all arrive in time (also a
                ``multiprocessing.TimeoutError``, as ``AsyncVectorEnv`` raises); later replies to them
                are dropped, and the vector env can be used again.
        """
        self._collect_reset(timeout)
        return self._batch.observations_out(self.copy), self._batch.infos()

    def reset_slots(
        self,
        slots: Iterable[int],
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Reset the sub-envs of ``slots`` only, each with ``options`` (None: ``reset`` is called without
        the keyword, as Stable-Baselines3 calls it); ``seed`` as in :meth:`reset`, for all slots.

        Returns every slot's observation (the batch) and a list of each slot's reset info (``{}`` for
        the slots not reset): per env, not batched.
        """
        numbers = _slot_numbers(list(slots), self.num_envs, "slots").tolist()
        pending = self._reset_call
        try:
            self._reset_async_slots(numbers, seed, NO_OPTIONS if options is None else options)
            self._collect_reset(timeout)
        except BaseException:
            if self._reset_call is not pending:
                self._abandon_pending("reset")
            raise
        return self._batch.observations_out(self.copy), self._batch.per_env_infos()[0]

    def _collect_reset(self, timeout: float | None) -> None:
        self._check_waiting("reset", "reset_wait", "reset_async")
        call, self._reset_call, self._waiting_for = self._reset_call, None, None
        if call is None:  # (_check_waiting: a reset_async is waiting, which left its call)
            raise NoAsyncCallError("Calling `reset_wait` without any prior call to `reset_async`.", "reset")
        self._finish_reset(call, timeout)
        batch, slots = self._batch, call.slots
        batch.terminations[slots] = False
        batch.truncations[slots] = False
        self._autoreset_envs[slots] = False
        self._start_episodes()
        batch.gather()

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with its action; as ``SyncVectorEnv.step`` (autoreset happens in the clients).

        A slot whose client was lost reports ``truncated=True`` and ``infos["client_lost"]``; in
        ``SAME_STEP`` mode its ``final_obs`` is its last observation and it restarts with a replacement
        client's reset, which this call waits for. A slot without a client otherwise waits for one
        (up to ``connect_timeout``).
        """
        pending = self._step_call  # a step_async of the caller's own, which this call must leave alone
        try:
            self.step_async(actions)
            return self.step_wait()
        except BaseException:
            if self._step_call is not pending:  # an interrupt between the two halves leaves no step pending
                self._abandon_pending("step")
            raise

    def step_async(self, actions: Any) -> None:
        """Send the actions of :meth:`step` and return at once; :meth:`step_wait` collects the results.

        Raises:
            AlreadyPendingCallError: a :meth:`step_async` or :meth:`reset_async` is waiting for its
                ``*_wait``, or partial batches have results outstanding (see :meth:`recv`).
        """
        self._check_idle("step_async")
        self._ensure_spaces()
        if self.autoreset_mode is AutoresetMode.DISABLED and self._autoreset_envs.any():
            raise AssertionError(
                f"autoreset_mode=DISABLED and the episodes of slots {np.flatnonzero(self._autoreset_envs).tolist()} "
                "have ended: reset them with reset(options={'reset_mask': mask}) before stepping"
            )
        if self._step_in_slabs(actions):
            return
        self._record_previous()
        build = commands.step(
            actions, self.num_envs, self._single_action_space, self._action_leaf_spaces, self._action_space
        )(commands.whole)
        self._batch.clear_infos()
        if self.empty_slots == "mask":
            stepped, self._masked = self._served_slots()
        else:
            stepped = self._wait_for_clients(self._episodes.still_running)
        landing = self._batch.landing(arrivals=[])  # (slot, seq) of each result that lands
        self._step_call = self._server.start(
            self._server.members.clients_of(stepped), build, landing, reply_kind=Kind.RESULT, what="step"
        )
        self._waiting_for = "step"

    def _record_previous(self) -> None:
        """Count the results the last lock-step step returned in the fleet's figures (``status()``), if not yet:
        the batch holds them until the next results land."""
        rows, self._unrecorded = self._unrecorded, None
        if rows is None:
            return
        batch = self._batch
        if rows is _EVERY_SLOT:
            self._server.fleet.record(batch.rewards, self._autoreset_envs)
        else:
            self._server.fleet.record(batch.rewards[rows], self._autoreset_envs[rows], rows)

    def _served_slots(self) -> tuple[list[int], list[int]]:
        """``empty_slots="mask"``: the slots to step now, those whose client is there, and the slots to return
        masked. In SAME_STEP mode a slot whose loss was reported without a replacement is reset first when a
        client serves it again: its row is then the reset, masked too."""
        self._drain_events()
        owners = self._server.members.slots
        ready = sorted(slot for slot in self._episodes.awaiting_reset if owners[slot] is not None)
        if ready:  # (an autoreset, which SyncVectorEnv calls without arguments)
            self._reset_slots(ready, None, NO_OPTIONS, "the reset of a replacement client")
            owners = self._server.members.slots
        running = self._episodes.still_running()
        stepped = [slot for slot in running if owners[slot] is not None and slot not in ready]
        masked = [slot for slot in running if owners[slot] is None or slot in ready]
        return stepped, masked

    def _step_in_slabs(self, actions: Any) -> bool:
        """:meth:`step_async` for the common case, every slot served and stepped by members whose slabs take the
        actions as they are (PROTOCOL.md §13.6): a numpy batch of a single array space's own dtype. False (nothing
        done) otherwise."""
        if not self._fits_slabs(actions, self.num_envs):
            return False
        members = self._server.slab_members()
        if members is None:
            return False
        self._batch.clear_infos()
        landing = self._batch.landing(arrivals=[])
        exchange = self._server.start_in_slabs(members, actions, landing)
        if exchange is None:
            return False
        self._step_call = exchange
        self._waiting_for = "step"
        self._record_previous()  # (while the clients step: off the round trip's path)
        return True

    def _fits_slabs(self, actions: Any, count: int) -> bool:
        """Whether ``actions`` may be written in the clients' slabs as they are: a numpy batch of ``count`` rows in
        the single action space's own dtype (an array space), with no join, loss, loss report or reset of a
        replacement (``empty_slots="mask"``) to take in first."""
        shape = self._slab_action_shape
        return (
            shape is not None  # (first: numpy takes a dtype compared with None for float64)
            and type(actions) is np.ndarray
            and actions.dtype == self._slab_action_dtype
            and actions.shape == (count, *shape[1:])
            and not self._server.has_events
            and not self._episodes.any_unreported
            and not self._episodes.awaiting_reset
        )

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of :meth:`step_async`, as :meth:`step` returns them.

        Args:
            timeout: seconds to wait for the clients' results (default: ``timeout`` of the constructor).

        Raises:
            NoAsyncCallError: no :meth:`step_async` is waiting.
            RemoteTimeoutError: some client did not answer in time (also a ``multiprocessing.TimeoutError``,
                as ``AsyncVectorEnv`` raises). This step's results are lost: replies that come later are
                dropped, never mixed into a later call, and the vector env can be used again.
        """
        self._collect_step(timeout)
        return self._batch.step_results(self.copy)

    def step_wait_per_env(
        self, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], list[tuple[Any, dict] | None]]:
        """:meth:`step_wait` with per-env infos instead of batched ones: ``(obs, rewards, terminations,
        truncations, infos, finals)``, where ``infos[i]`` is slot ``i``'s info and ``finals[i]`` its
        ``(final_obs, final_info)`` when its episode ended in this step (SAME_STEP mode), else None."""
        self._collect_step(timeout)
        observations, rewards, terminations, truncations, (infos, finals) = self._batch.step_results(
            self.copy, per_env=True
        )
        return observations, rewards, terminations, truncations, infos, finals

    def _collect_step(self, timeout: float | None) -> None:
        self._check_waiting("step", "step_wait", "step_async")
        # _check_waiting: a step_async is waiting, which left its exchange (no check on the step path)
        exchange: Exchange = self._step_call  # pyright: ignore[reportAssignmentType]
        self._step_call = self._waiting_for = None
        timeout = self.timeout if timeout is None else timeout
        try:
            self._server.finish(exchange, time.monotonic() + timeout, timeout)
        except BaseException:
            self._server.abandon(exchange)  # (an interrupt as finish() was entered, before it could)
            raise
        finally:
            self._drain_events()
        if self._episodes.any_unreported:  # (a slot whose result landed returns it; a loss after it waits a step)
            sink = exchange.sink  # (a step's sink is the batch's Landing, with arrivals)
            landed = {slot for slot, _ in sink.arrivals or ()} if isinstance(sink, Landing) else set()
            self._report_lost_slots([slot for slot in range(self.num_envs) if slot not in landed])
        batch = self._batch
        masked, self._masked = self._masked, []
        if masked:
            batch.write_masked(masked)
        batch.gather()
        np.logical_or(batch.terminations, batch.truncations, out=self._autoreset_envs)
        # the fleet's figures take these results in at the next call, while its STEP is out (_record_previous)
        self._unrecorded = np.setdiff1d(np.arange(self.num_envs), masked) if masked else _EVERY_SLOT

    # -- partial batches (EnvPool's send / recv) --------------------------------------------------

    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Start resetting every slot and return at once; :meth:`recv` returns the resets as they arrive.

        The start of EnvPool's asynchronous loop (``seed`` and ``options`` as in :meth:`reset`). Results
        that arrived but were not yet returned by :meth:`recv` are dropped. Slots without a client are
        reset when one joins.

        Raises:
            AlreadyPendingCallError: a ``*_async`` call is waiting, or slots still have actions in flight.
        """
        self._check_partial("async_reset")
        self._record_previous()  # (partial batches land in the same batch)
        seed = self._seeds(seed)
        if options is not None and "reset_mask" in options:
            raise ValueError("async_reset() resets every slot; options['reset_mask'] is for reset()")
        self._ensure_spaces()
        partial = self._partial
        if partial is None:  # (_ensure_spaces() made it)
            raise RuntimeError("partial batches need the spaces, which no client brought")
        outstanding = partial.table.outstanding()
        if outstanding:
            raise AlreadyPendingCallError(
                f"Calling `async_reset` while slots {protocol.format_slots(outstanding)} still have results "
                "coming: recv() them first",
                "recv",
            )
        batch = self._batch
        batch.clear_infos()
        batch.terminations[:] = False
        batch.truncations[:] = False
        self._autoreset_envs[:] = False
        self._episodes.forget(range(self.num_envs))
        self._episodes.reset_done(range(self.num_envs))
        self._start_episodes()
        partial.reset_all(seed, options)

    def send(self, actions: Any, env_id: Any = None) -> None:
        """Send ``actions`` to the slots ``env_id`` (all if None) and return at once (EnvPool's ``send``).

        ``actions`` holds one action per id, in the order of ``env_id`` (e.g. ``infos["env_id"]`` of the
        last :meth:`recv`). Each slot's result comes back through :meth:`recv`.

        Raises:
            ValueError: an id is out of range or repeated, a slot already has an action in flight or a
                result :meth:`recv` has not returned, or waits for a reset (its client was lost while
                :meth:`step` masked it), or the number of actions does not match.
            AlreadyPendingCallError: a :meth:`step_async` or :meth:`reset_async` is waiting.
            ResetNeeded: no reset started the episodes yet (call :meth:`async_reset`).
        """
        self._check_partial("send")
        self._record_previous()  # (partial batches land in the same batch)
        if not self._episodes.started:
            raise ResetNeeded("Calling `send` before the slots were reset: call async_reset() (or reset()) first")
        ids = _slot_numbers(env_id, self.num_envs, "env_id")
        if not ids.size:
            raise ValueError("env_id is empty: send() needs at least one slot")
        # the episodes started: a reset made the spaces known, and the partial batches (no check per step)
        partial: PartialBatches = self._partial  # pyright: ignore[reportAssignmentType]
        busy = ids[partial.table.busy[ids]]
        if len(busy):
            raise ValueError(
                f"send(): slots {protocol.format_slots(sorted(busy.tolist()))} already have an action in flight or a "
                "result that recv() has not returned"
            )
        awaiting_reset = self._episodes.awaiting_reset
        awaiting = sorted(awaiting_reset.intersection(ids.tolist())) if awaiting_reset else []
        if awaiting:
            raise ValueError(
                f"send(): slots {protocol.format_slots(awaiting)} lost their clients while step() masked them "
                "(empty_slots='mask') and wait for a reset: step() resets them once a client serves them, or reset "
                "them yourself (async_reset(), or reset(options={'reset_mask': mask}))"
            )
        count, space = len(ids), self._single_action_space
        if self._fits_slabs(actions, count) and partial.send_in_slabs(ids.tolist(), actions):
            return
        batched = self._action_space if count == self.num_envs else self._action_batches[count]
        messages = commands.step(actions, count, space, self._action_leaf_spaces, batched)
        self._drain_events()
        partial.send(ids.tolist(), messages, lambda: list(iterate(batched, actions)))

    def recv(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of ``batch_size`` slots, as soon as that many have arrived (EnvPool's ``recv``).

        Returns ``(obs, rewards, terminations, truncations, infos)`` for exactly those slots, in arrival
        order; ``infos["env_id"]`` (int32) names their slots, and the other infos are batched over them as
        ``step`` batches them over all slots. Slots reset themselves when their episode ends, in the
        vector's autoreset mode. With fewer than ``batch_size`` slots outstanding, it returns them all
        (a smaller batch: how a loop collects its last results).

        Args:
            timeout: seconds to wait (default: ``timeout`` of the constructor). On a timeout (or an
                interrupt, e.g. Ctrl-C) the slots still working stay in flight: a later ``recv`` returns
                their results; a result cut short mid-message by an interrupt is lost, and its slot
                takes actions again.

        Raises:
            NoAsyncCallError: no slot has an action in flight or a result waiting.
            RemoteEnvError: an env raised (the error names its slot); that slot has no result and takes actions
                again, every other slot returns its result (PROTOCOL.md §5.6).
            RemoteTimeoutError: fewer than ``batch_size`` results came in time.
        """
        self._check_partial("recv")
        partial = self._partial
        no_slot = "Calling `recv` with no slot in flight: send() actions (or async_reset()) first"
        if partial is None:  # (no partial batches before the spaces are known)
            raise NoAsyncCallError(no_slot, "send")
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        server = self._server
        while True:
            self._drain_events()
            if partial.dispatch_parked():
                self._drain_events()  # losses while sending them: collect() reports those it finds
            error = partial.collect()
            if error is not None:
                raise error
            outstanding = partial.table.busy_count()
            if not outstanding:  # (a result an interrupt cut short leaves its slot idle)
                raise NoAsyncCallError(no_slot, "send")
            size = min(self.batch_size, outstanding)
            if partial.table.ready_count() >= size:
                results = partial.take(size)
                server.fleet.record(results[1], results[2] | results[3], results[4]["env_id"])
                return results
            if time.monotonic() > deadline:
                raise RemoteTimeoutError(
                    f"recv() timed out after {timeout:g} s: {partial.table.ready_count()} of the {size} results it "
                    f"waits for arrived; {format_outstanding(partial.table)} (they stay in flight: a later recv() "
                    "returns them)"
                )
            server.wait(partial.news(size), deadline)

    def render(self) -> tuple[Any, ...]:
        """The sub-envs' rendered frames, one per slot."""
        return self.call("render")

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every sub-env (reached through wrappers) or read it if not callable; one result per slot."""
        return self.call_slots(range(self.num_envs), name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attribute ``name`` of every sub-env (reached through wrappers), one per slot."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set ``name`` on every sub-env: one value per slot, or one value for all (as ``SyncVectorEnv``)."""
        self.set_attr_slots(range(self.num_envs), name, values)

    def call_slots(self, slots: Iterable[int], name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """:meth:`call` on the sub-envs of ``slots`` only (distinct); one result per slot, in that order."""
        command = {"name": name, "args": list(args), "kwargs": kwargs}
        return self._call_command(slots, command, f"call({name!r})")

    def has_attr_slots(self, slots: Iterable[int], name: str) -> tuple[bool, ...]:
        """Whether each sub-env of ``slots`` has the attribute ``name`` (through wrappers); nothing is called."""
        return self._call_command(slots, {"name": name, "query": HAS_ATTR_QUERY}, f"has_attr({name!r})")

    def _call_command(self, slots: Iterable[int], command: dict[str, Any], what: str) -> tuple[Any, ...]:
        self._check_no_call("call")
        return self._call_clients(Kind.CALL, lambda plan: command, what, slots)

    def set_attr_slots(self, slots: Iterable[int], name: str, values: Any, *, outermost: bool = False) -> None:
        """:meth:`set_attr` on the sub-envs of ``slots`` only (distinct): one value per slot, or one for all.

        ``outermost``: set it on each env's outermost wrapper (``setattr``, as SB3's ``DummyVecEnv``), not
        through the wrappers onto the one that has it (``set_wrapper_attr``).
        """
        self._check_no_call("set_attr")
        slots = list(slots)
        if not isinstance(values, (list, tuple)):
            values = [values for _ in slots]
        if len(values) != len(slots):
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {len(slots)} environments."
            )
        value_of = dict(zip(slots, values, strict=True))
        extra = {"outermost": True} if outermost else {}  # the field's default is false (PROTOCOL.md §5.3)
        self._call_clients(
            Kind.SET_ATTR,
            lambda plan: {"name": name, "values": [value_of[slot] for slot in plan.slots], **extra},
            f"set_attr({name!r})",
            slots,
        )

    def close_extras(self, timeout: float = 5.0, stop_clients: bool = False, **kwargs: Any) -> None:
        """Tell the clients the run is over, reap the local client processes and release the endpoint.

        Clients exit then, except those that keep serving across runs (``EnvClient(keep_serving=True)``,
        ``gym-remote client --keep-serving``): they wait for the next learner, unless ``stop_clients`` is true
        (``envs.close(stop_clients=True)``), which tells them to exit too.

        A call still pending (``step_async``/``reset_async`` without its ``*_wait``) is abandoned, with
        a warning, as ``AsyncVectorEnv`` warns.
        """
        if self._waiting_for is not None:
            warnings.warn(
                f"Calling `close` while waiting for a pending call to `{self._waiting_for}` to complete.",
                UserWarning,
                stacklevel=3,
            )
            self._waiting_for = self._step_call = self._reset_call = None
        if self._finalizer is not None:
            self._finalizer.detach()
        for endpoint in self._metrics:
            endpoint.close()
        _release(self._built_server(), self._launcher, timeout, stop_clients)

    # -- internals ---------------------------------------------------------------------------------

    def _abandon_pending(self, call: str) -> None:
        """Forget a ``call`` (``"step"`` or ``"reset"``) whose ``*_async`` half went out and whose ``*_wait`` half
        never came (its replies are dropped as late)."""
        if self._waiting_for != call:
            return
        exchange = self._step_call if call == "step" else (self._reset_call.exchange if self._reset_call else None)
        self._waiting_for = self._step_call = self._reset_call = None
        if exchange is not None:
            self._server.abandon(exchange)

    def _built_server(self) -> SlotServer | None:
        """The server, or None if the constructor raised before it was made."""
        return vars(self).get("_server")

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"{type(self).__name__} is closed; it cannot be used any more")

    def _check_no_call(self, name: str) -> None:
        """Refuse ``name`` while a ``step_async`` / ``reset_async`` waits for its ``*_wait`` (as AsyncVectorEnv)."""
        self._check_open()
        if self._waiting_for is not None:
            raise AlreadyPendingCallError(
                f"Calling `{name}` while waiting for a pending call to `{self._waiting_for}` to complete",
                self._waiting_for,
            )

    def _check_idle(self, name: str) -> None:
        """Refuse a lock-step call while any call, lock-step or partial, has results outstanding."""
        self._check_no_call(name)
        if self._partial is not None and self._partial.table.any_busy():
            raise AlreadyPendingCallError(
                f"Calling `{name}` while partial batches are under way: slots "
                f"{protocol.format_slots(np.flatnonzero(self._partial.table.busy).tolist())} have results that "
                "recv() has not returned yet; recv() them first",
                "recv",
            )

    def _check_waiting(self, call: str, name: str, start: str) -> None:
        self._check_open()
        if self._waiting_for != call:
            raise NoAsyncCallError(f"Calling `{name}` without any prior call to `{start}`.", call)

    def _check_partial(self, name: str) -> None:
        self._check_no_call(name)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            raise ValueError(f"{name}() needs an autoreset mode (NEXT_STEP or SAME_STEP), not DISABLED")

    def _seeds(self, seed: int | list[int | None] | None) -> list[int | None]:
        """One seed per slot, as ``SyncVectorEnv.reset`` spreads them."""
        if seed is None:
            seed = [None for _ in range(self.num_envs)]
        elif isinstance(seed, int):
            seed = [seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise argument_error(
                ValueError,
                "If seeds are passed as a list the length must match "
                f"num_envs={self.num_envs} but got length={len(seed)}.",
            )
        return seed

    def _start_episodes(self) -> None:
        self._episodes.start()
        # From now on a replacement client's envs start as if their episode had ended, so that in
        # NEXT_STEP mode their first step is the autoreset step that delivers their reset observation.
        self._server.members.start_episodes(reset_first=self.autoreset_mode is AutoresetMode.NEXT_STEP)

    def _wait_for_clients(
        self,
        slots_needed: Callable[[], list[int]],
        resetting: AbstractSet[int] = frozenset(),
        deadline: float | None = None,
    ) -> list[int]:
        """Wait (up to ``connect_timeout``, or ``deadline``) until the slots ``slots_needed()`` names all have a client.

        The slots needed are asked again after every message handled, as clients may be lost meanwhile.
        ``resetting``: slots about to be reset, whose losses meanwhile need no report (a new episode starts).
        """
        start = time.monotonic()
        end = start + self.connect_timeout if deadline is None else min(deadline, start + self.connect_timeout)
        while True:
            self._drain_events()
            self._episodes.forget(resetting)
            slots = slots_needed()
            empty = self._server.members.empty_slots(slots)
            if not empty:
                return slots
            now = time.monotonic()
            if now > end:
                raise RemoteTimeoutError(self._server.empty_slots_message(end - start, "their slots", empty))
            self._server.remind_empty(empty, now - start, end - start)
            self._server.poll()

    def _start_reset(
        self, slots: list[int], seed: list | None, options: Any, what: str, drop_reports: bool = True
    ) -> _ResetCall:
        """Send RESET for ``slots`` to the clients serving them now; :meth:`_finish_reset` does the rest.

        ``drop_reports``: losses in these slots need no report any more (a new episode starts there).
        """
        call = _ResetCall(list(slots), set(slots), seed, options, what, drop_reports)
        self._drain_events()
        self._record_previous()  # (before a reset's results land over them)
        self._server.fleet.restart(call.slots)
        if drop_reports:
            self._episodes.forget(call.remaining)
        self._send_resets(call)
        return call

    def _send_resets(self, call: _ResetCall) -> None:
        owners = self._server.members.slots
        served_by = [(slot, owner) for slot in sorted(call.remaining) if (owner := owners[slot]) is not None]
        if not served_by:
            return
        served = [slot for slot, _ in served_by]
        plans = commands.plans_for(owners, served)
        plan_of = commands.lookup(plans)
        build = commands.reset(call.seed, call.options, plan_of)
        call.reset_by.update((slot, owner.identity) for slot, owner in served_by)
        call.exchange = self._server.start(
            self._server.members.clients_of(served),
            build,
            self._batch.landing(plan_of, call.landed),
            reply_kind=Kind.RESULT,
            what=call.what,
        )

    def _finish_reset(self, call: _ResetCall, timeout: float | None = None) -> None:
        """Wait for the resets of ``call``: for clients to serve its slots, again where a client is lost meanwhile."""
        total = self.connect_timeout + self.timeout if timeout is None else timeout
        deadline = time.monotonic() + total
        try:
            while True:
                if call.exchange is not None:  # each round waits at most `timeout` (or what is left of the given one)
                    left = max(0.0, deadline - time.monotonic())
                    round_timeout = min(self.timeout, left) if timeout is None else left
                    exchange, call.exchange = call.exchange, None
                    try:
                        self._server.finish(exchange, time.monotonic() + round_timeout, round_timeout)
                    except BaseException:
                        self._server.abandon(exchange)  # (an interrupt as finish() was entered, before it could)
                        raise
                    finally:
                        reset = [slot for slot, _ in call.landed]
                        call.remaining.difference_update(reset)
                        self._episodes.reset_done(reset)
                        self._drain_events()
                if not call.remaining:
                    return
                if time.monotonic() > deadline:  # clients keep getting lost before they answer
                    raise RemoteTimeoutError(
                        f"{call.what}: slots {protocol.format_slots(sorted(call.remaining))} were not reset within "
                        f"{total:g} s: they lost their clients, or had none; see the log for why"
                    )
                resetting = call.remaining if call.drop_reports else frozenset()
                self._wait_for_clients(lambda: sorted(call.remaining), resetting, deadline)
                self._send_resets(call)
        finally:
            if call.exchange is not None:  # interrupted before its round was awaited
                self._server.abandon(call.exchange)

    def _reset_slots(
        self, slots: list[int], seed: list | None, options: Any, what: str, drop_reports: bool = True
    ) -> dict[int, bytes]:
        """Reset the envs of ``slots``, waiting for clients where needed, again where a client is lost meanwhile;
        the identity of the client that reset each slot."""
        call = self._start_reset(slots, seed, options, what, drop_reports)
        self._finish_reset(call)
        return call.reset_by

    def _report_lost_slots(self, slots: list[int]) -> None:
        """End the episodes of those of ``slots`` whose client was lost: truncated, ``client_lost`` in their infos."""
        lost = self._episodes.begin_reports(self._batch, slots)
        if lost and self._episodes.reset_replacements and self.empty_slots == "mask":
            owners = self._server.members.slots
            alone = [slot for slot in lost if owners[slot] is None]  # no replacement to wait for: report now
            if alone:
                self._episodes.report_without_replacement(self._batch, alone)
                lost = [slot for slot in lost if owners[slot] is not None]
        if not lost:
            return
        if self._episodes.reset_replacements:  # the next episode starts now, with a replacement
            # an autoreset, which SyncVectorEnv calls without arguments
            try:
                reset_by = self._reset_slots(
                    lost, None, NO_OPTIONS, "the reset of a replacement client", drop_reports=False
                )
            except BaseException:
                self._episodes.retry_reports(lost)  # the next step reports them again
                raise
            self._episodes.finish_reports(self._batch, lost, reset_by)

    def _call_clients(
        self, kind: Kind, command_for: Callable[[commands.Plan], dict], what: str, slots: Iterable[int]
    ) -> tuple[Any, ...]:
        """Send ``kind`` to the clients of ``slots`` (each client's command for its envs among them);
        the CALL results, one per slot in the order of ``slots``."""
        numbers: list[int] = _slot_numbers(list(slots), self.num_envs, "indices").tolist()
        self._drain_events()
        unreachable = self._episodes.unreported(numbers)
        if unreachable:
            raise ClientLostError(
                f"{what} cannot reach slots {protocol.format_slots(sorted(unreachable))}: their client was lost (the "
                "next step() reports it, and a new client takes over)"
            )
        self._wait_for_clients(lambda: numbers)
        plans = commands.plans_for(self._server.members.slots, numbers)
        sink = _CallResults(kind, commands.lookup(plans))
        build = commands.call(kind, what, command_for, sink.plan_of)
        clients = self._server.members.clients_of(numbers)
        try:
            lost = self._server.exchange(
                clients, build, sink, reply_kind=Kind.CALL_RESULT, timeout=self.timeout, what=what
            )
        finally:
            self._drain_events()
        if lost:
            gone = sorted(slot for client in lost for slot in client.slots)
            raise ClientLostError(f"{what} failed: the clients of slots {protocol.format_slots(gone)} were lost")
        return tuple(sink.results.get(slot) for slot in numbers)


class _CallResults:
    """The sink of a CALL or SET_ATTR: each slot's result, by slot."""

    def __init__(self, kind: Kind, plan_of: commands.PlanOf) -> None:
        self.kind = kind
        self.plan_of = plan_of
        self.results: dict[int, Any] = {}

    def targets(self, client: ClientInfo, header: protocol.Header) -> list[np.ndarray]:
        raise ProtocolError("a RESULT does not answer a CALL")

    def land(self, client: ClientInfo, header: protocol.Header, scalars: bytes | None, value: Any) -> None:
        values = value.get("results") if isinstance(value, dict) else None
        if self.kind == Kind.CALL:
            plan = self.plan_of(client)
            if not isinstance(values, list) or len(values) != len(plan.slots):
                raise ProtocolError(f"CALL_RESULT must carry {len(plan.slots)} results")
            self.results.update(zip(plan.slots, values, strict=True))


@dataclass(eq=False)
class _ResetCall:
    """A reset under way: the slots still to reset and the round of RESET commands in flight."""

    slots: list[int]
    remaining: set[int]
    seed: list | None
    options: Any
    what: str
    drop_reports: bool
    exchange: Exchange | None = None
    landed: list[tuple[int, int]] = field(default_factory=list)  # (slot, seq) of each RESULT landed, in order
    reset_by: dict[int, bytes] = field(default_factory=dict)  # slot -> the client its last RESET went to


def _slot_numbers(slots: Any, num_envs: int, name: str) -> np.ndarray:
    """``slots`` (called ``name`` in errors) as an array of distinct slot numbers, maybe empty (None: all)."""
    if slots is None:
        return np.arange(num_envs)
    ids = np.asarray(slots)
    if ids.ndim == 0:
        ids = ids.reshape(1)
    if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
        raise ValueError(f"{name} must be a 1-d array of slot numbers, got {slots!r}")
    numbers = ids.tolist()  # (a list's min, max and set beat numpy's for the few slots of a call)
    if numbers and (min(numbers) < 0 or max(numbers) >= num_envs):
        raise ValueError(f"{name} must hold slots from 0 to {num_envs - 1}, got {numbers}")
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"{name} names a slot twice: {numbers}")
    return ids.astype(np.intp)


def _release(
    server: SlotServer | None, launcher: Launcher | None, timeout: float = 2.0, stop_clients: bool = False
) -> None:
    """Tell the clients the run is over (``stop_clients``: to exit, even those that keep serving), then end the
    launcher's (local processes are reaped, their directory removed).

    Also the finalizer of a vector env dropped without ``close()``: it holds no reference to it.
    """
    try:
        if server is not None:
            server.close(
                timeout,
                gone=lambda client: (
                    launcher is not None and client.launch_index is not None and launcher.exited(client.launch_index)
                ),
                stop_clients=stop_clients,
            )
    finally:
        if launcher is not None:
            launcher.stop(timeout)


def _security(
    bind: str, options: SecurityOptions, launched: bool
) -> tuple[ServerSecurity | None, ClientSecurity | None]:
    """The server's security on ``bind`` from ``options``, and the keys of the clients its launcher
    starts with reserved slots (``launched``).

    Local clients prove themselves with a random token per process; they also get a key pair of their
    own when the server uses CURVE, which it always does on a non-loopback address.
    """
    check_endpoint(bind, "bind", binding=True)
    security = server_security(options.server_key, options.authorized_keys, options.secret)
    if security is None and launched and not is_local_endpoint(bind):
        security = ServerSecurity(KeyPair.generate(), AuthorizedKeys(), "local clients only")
    if security is None and not is_local_endpoint(bind):
        if not options.insecure:
            raise ValueError(
                f"bind={bind!r} is reachable from other machines, and the server has no authentication: anyone "
                "who reaches it could serve slots and read the traffic. Give server_key and authorized_keys "
                "(gym-remote keygen; --server-key and --authorized-keys), or secret (--secret-file); or insecure=True "
                "(--insecure) on a network you trust"
            )
        logger.warning("listening on %s without authentication or encryption (insecure)", bind)
    if security is None or not launched:
        return security, None
    local_keys = KeyPair.generate()
    security.authorized.add(local_keys.public, "local")
    return security, ClientSecurity(security.keys.public, local_keys)


def _is_space_pair(mode: Any) -> bool:
    return isinstance(mode, tuple) and len(mode) == 2 and all(isinstance(space, gym.Space) for space in mode)


@dataclass(frozen=True)
class _Serving:
    """What the server of every form is built with, from the constructor's arguments."""

    bind: str | None
    spin: float | None
    liveness_timeout: float
    name: str
    data_plane: str
    observation_space: gym.Space | None
    action_space: gym.Space | None

    def learner_spin(self, local_processes: int) -> float:
        """``spin`` if given; by default none when ``local_processes`` clients on this machine need every core
        (see :func:`~gym_remote.server.default_spin`)."""
        if self.spin is not None:
            return self.spin
        return default_spin(local_processes, shared_memory=self.data_plane == "shm" and shared.AVAILABLE)


def _security_options(security: SecurityOptions | None, given: SecurityOptions) -> SecurityOptions:
    """``security``, else the options ``given`` as keyword arguments (which must then be left at their defaults)."""
    if security is None:
        return given
    if given != SecurityOptions():
        raise ValueError("give the security options as security=SecurityOptions(...) or as keyword arguments, not both")
    return security


def _duration(value: float | None, name: str) -> float:
    """A timeout in seconds; None means without limit (``math.inf``)."""
    if value is None:
        return math.inf
    if not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds (or None for no limit), got {value!r}")
    return float(value)


def _checked_observation_mode(observation_mode: Any) -> Any:
    if not (observation_mode in ("same", "different") or _is_space_pair(observation_mode)):
        raise ValueError(
            "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
            f"observation space, actual got {observation_mode}"
        )
    return observation_mode


def _checked_num_envs(
    env_fns: list[Callable[[], gym.Env]] | None,
    num_envs: int | None,
    observation_space: gym.Space | None,
    action_space: gym.Space | None,
) -> int:
    """The number of slots, ``len(env_fns)`` or else ``num_envs``; the spaces are only for the server form."""
    if env_fns is not None:
        if not env_fns:
            raise ValueError("env_fns is empty: a vector env needs at least one env")
        if num_envs is not None and num_envs != len(env_fns):
            raise ValueError(f"num_envs={num_envs} does not match len(env_fns)={len(env_fns)}")
        num_envs = len(env_fns)
        if observation_space is not None or action_space is not None:
            raise ValueError(
                "observation_space and action_space are for the server form (env_fns=None); with env_fns the "
                "spaces come from the envs (observation_mode can set a custom batched observation space)"
            )
    elif num_envs is None or num_envs < 1:
        raise ValueError("RemoteVectorEnv needs env_fns, or num_envs >= 1 for remote clients to join")
    if (observation_space is None) != (action_space is None):
        raise ValueError("give both observation_space and action_space, or neither")
    return int(num_envs)


def _checked_final_info_format(final_info_format: str, autoreset_mode: AutoresetMode) -> str:
    if final_info_format not in ("gymnasium", "legacy"):
        raise ValueError(f"final_info_format must be 'gymnasium' or 'legacy', got {final_info_format!r}")
    if final_info_format == "legacy" and autoreset_mode is not AutoresetMode.SAME_STEP:
        raise ValueError(
            "final_info_format='legacy' is Gymnasium 0.29's layout, whose autoreset happened in the same "
            f"step: pass autoreset_mode='SameStep' too (got {autoreset_mode.value!r})"
        )
    return final_info_format


_EVERY_SLOT = slice(None)
"""The rows of a step that returned every slot (see ``RemoteVectorEnv._record_previous``)."""


def _checked_empty_slots(empty_slots: str, autoreset_mode: AutoresetMode) -> str:
    if empty_slots not in ("wait", "mask"):
        raise ValueError(f"empty_slots must be 'wait' or 'mask', got {empty_slots!r}")
    if empty_slots == "mask" and autoreset_mode is AutoresetMode.DISABLED:
        raise ValueError("empty_slots='mask' needs an autoreset mode (NEXT_STEP or SAME_STEP), not DISABLED")
    return empty_slots


def _checked_batch_size(batch_size: int | None, num_envs: int, autoreset_mode: AutoresetMode) -> int:
    """``batch_size``, by default ``num_envs`` (whole batches)."""
    size = num_envs if batch_size is None else int(batch_size)
    if not 1 <= size <= num_envs:
        raise ValueError(f"batch_size must be between 1 and num_envs={num_envs}, got {batch_size}")
    if size < num_envs and autoreset_mode is AutoresetMode.DISABLED:
        raise ValueError(
            "partial batches (batch_size < num_envs) need an autoreset mode: with AutoresetMode.DISABLED "
            "a finished slot could only be reset with all the others"
        )
    return size


def _check_reset_mask(reset_mask: Any, num_envs: int) -> None:
    """The checks (and messages) of ``SyncVectorEnv.reset`` for ``options["reset_mask"]``."""
    name = RESET_MASK_NAME
    if not isinstance(reset_mask, np.ndarray):
        raise argument_error(TypeError, f"{name} must be a numpy array, got {type(reset_mask)}")
    if reset_mask.shape != (num_envs,):
        raise argument_error(ValueError, f"{name} must have shape `({num_envs},)`, got {reset_mask.shape}")
    if reset_mask.dtype != np.bool_:
        raise argument_error(TypeError, f"{name} must have `dtype=np.bool_`, got {reset_mask.dtype}")
    if not np.any(reset_mask):
        which = "a boolean array" if CHECKS_BY_ASSERT else "a boolean array with at least one True value"
        raise argument_error(ValueError, f"{name} must contain {which}, got reset_mask={reset_mask}")
