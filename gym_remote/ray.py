"""Clients on a Ray cluster: :class:`RayVectorEnv`, a RemoteVectorEnv whose clients run as Ray actors.

When one machine is not enough, Ray places the env clients across the cluster with the resources
each needs, and restarts an actor whose process dies; the learner's RemoteVectorEnv gives the
restarted client's envs the slots the dead one left (its episodes end with ``truncated`` and
``infos["client_lost"]``, as for any lost client). Needs the ``ray`` extra
(the ``ray`` extra: ``pip install ".[ray]"`` from a clone) and ``ray.init()`` before the vector env is built.

Each client's actor takes Ray's actor options (``client_options``: ``num_cpus``, ``num_gpus``,
``resources``, ``scheduling_strategy`` ...), or the clients share a placement group
(``placement_strategy="SPREAD"`` ...). When Ray cannot run a client's actor (no alive node has room
for it after a node was lost, or it is dead), a call that waits for its slots raises
:class:`RayPlacementError` after ``placement_timeout`` instead of waiting out ``connect_timeout``;
with ``empty_slots="mask"`` the steps go on with its slots masked until Ray finds room.

Example (a local Ray instance)::

    import ray
    from gym_remote.ray import RayVectorEnv

    ray.init(num_cpus=4)
    envs = RayVectorEnv([lambda: gym.make("CartPole-v1")] * 8, num_clients=4, num_cpus_per_client=1)
    obs, infos = envs.reset(seed=0)
    envs.close()  # the clients leave and their actors end
"""

from __future__ import annotations

import difflib
import functools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

try:
    import ray
    from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
    from ray.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        NodeLabelSchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError('gym_remote.ray needs Ray: pip install "ray>=2.40" (the "ray" extra)') from error

from gym_remote.client import EnvClient
from gym_remote.errors import ClientLostError
from gym_remote.launch import split_evenly
from gym_remote.membership import LaunchSlot
from gym_remote.protocol import format_slots
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["CLIENT_OPTIONS", "PLACEMENT_STRATEGIES", "RayClients", "RayPlacementError", "RayVectorEnv"]

logger = logging.getLogger(__name__)

CLIENT_OPTIONS = (
    "num_cpus",
    "num_gpus",
    "memory",
    "resources",
    "accelerator_type",
    "scheduling_strategy",
    "runtime_env",
    "label_selector",
)
"""The Ray actor options (``ActorClass.options(...)``) a client's entry of ``client_options`` may set."""

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
"""The strategies of a placement group (``ray.util.placement_group``) that ``placement_strategy`` may name."""

_SET_BY_RAY_VECTOR_ENV = {
    "max_restarts": "its max_restarts argument",
    "max_task_retries": "its max_restarts argument",
    "lifetime": "the actors end with the vector env",
    "name": "the clients are named ray-0, ray-1, ...",
    "namespace": "the actors live in the driver's namespace",
    "get_if_exists": "each vector env starts actors of its own",
    "max_concurrency": "an actor serves one client",
    "placement_group": "give scheduling_strategy=PlacementGroupSchedulingStrategy(...) or placement_strategy",
    "placement_group_bundle_index": "give scheduling_strategy=PlacementGroupSchedulingStrategy(...)",
}
"""Actor options a client's entry of ``client_options`` may not set, and why."""

_UNPLACED_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "RESTARTING")
"""States of an actor in Ray's actor table that, without a worker address, mean: not placed on a node yet."""

CHECK_SECONDS = 0.5
"""How often (at most) the launcher asks Ray about the actors of clients that are not serving."""

UNREPORTED_GRACE_SECONDS = 10.0
"""Least time an actor placed by node affinity may go unplaced before it counts as left without room: Ray does not
report such requests as queued, so only free resources tell, and a worker that Ray is starting for the actor holds
them (for seconds on a busy node) before the actor shows as placed."""


class RayPlacementError(ClientLostError):
    """Ray cannot run a client's actor now: it has waited ``placement_timeout`` for a node with room, or it is
    dead (restarted ``max_restarts`` times, or pinned to a node that is gone). Raised by a call that needs its
    slots; the vector env stays usable, and once Ray places the actor its client serves the slots again."""


def _default_bind() -> str:
    """Loopback when the cluster is this one node (all actors run here); else this node's cluster address."""
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    node_id = ray.get_runtime_context().get_node_id()
    if len(nodes) == 1 and nodes[0].get("NodeID") == node_id:
        return "tcp://127.0.0.1:*"
    here = [node["NodeManagerAddress"] for node in nodes if node.get("NodeID") == node_id]
    return f"tcp://{here[0] if here else ray.util.get_node_ip_address()}:*"


class _ClientActor:
    """A Ray actor that serves its envs to the vector env at ``address`` until the vector env closes."""

    def serve(self, address: str, env_fns: Sequence[Callable[[], gym.Env]], name: str, kwargs: dict) -> str:
        EnvClient(address, env_fns, name=name, **kwargs).run()
        return name


# -- what Ray says about its cluster and actors (its private or autoscaler calls are here; any may fail, and
# then nothing is concluded from it: a wait runs up to connect_timeout, as it would without these checks) -----


class _ClusterView:
    """The alive nodes with their total resources; and, asked of Ray when first needed, those free now (``free``)
    and the shapes of the resource requests Ray has queued for want of room (``pending``); None if Ray does not
    tell."""

    def __init__(self) -> None:
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        self.totals: dict[str, dict[str, float]] = {node["NodeID"]: dict(node.get("Resources", {})) for node in nodes}
        self.addresses = {node["NodeID"]: node.get("NodeManagerAddress", "?") for node in nodes}

    @functools.cached_property
    def free(self) -> dict[str, dict[str, float]] | None:
        try:
            from ray._private import state

            available = state.available_resources_per_node()
        except Exception as error:
            logger.debug("Ray's free resources per node are not available: %r", error)
            return None
        return {node: dict(available.get(node, {})) for node in self.totals}

    @functools.cached_property
    def pending(self) -> list[dict[str, float]] | None:
        try:
            from ray.autoscaler.v2.sdk import get_cluster_status

            demands = get_cluster_status(ray.get_runtime_context().gcs_address, timeout=2).resource_demands
        except Exception as error:
            logger.debug("Ray's queued resource requests are not available: %r", error)
            return None
        return [dict(request.bundle) for demand in demands.ray_task_actor_demand for request in demand.bundles_by_count]

    def queued(self, demand: Mapping[str, float]) -> bool | None:
        """Whether Ray has a request of ``demand``'s shape queued for want of room (None if Ray does not tell)."""
        if self.pending is None:
            return None
        return any(
            set(request) == set(demand) and all(abs(request[key] - demand[key]) < 1e-6 for key in demand)
            for request in self.pending
        )

    def free_for(self, demand: Mapping[str, float], nodes: Sequence[str] | None = None) -> bool:
        """Whether one of ``nodes`` (default: any alive node) has ``demand`` free now (True if Ray does not tell)."""
        if self.free is None:
            return True
        return any(
            _fits(demand, self.free[node]) for node in (self.free if nodes is None else nodes) if node in self.free
        )

    def describe(self, keys: Sequence[str]) -> str:
        """The alive nodes, each with its free and total amounts of the resources ``keys``."""

        def amounts(node: str) -> str:
            free = self.free.get(node, {}) if self.free is not None else {}
            totals = self.totals[node]
            return ", ".join(f"{key} {free.get(key, 0.0):g}/{totals.get(key, 0.0):g}" for key in keys)

        return "; ".join(f"{node[:8]} ({self.addresses[node]}): {amounts(node)}" for node in self.totals) or "none"


def _actor_state(actor: Any) -> dict[str, Any] | None:
    """The actor's row in Ray's actor table (``State``, ``Address``, ``DeathCause`` ...), or None if not to be had."""
    try:
        from ray._private import state

        return state.actors(actor_id=actor._actor_id.hex())
    except Exception as error:
        logger.debug("Ray's actor table is not available: %r", error)
        return None


def _death_cause(state: dict[str, Any]) -> str:
    """The error message of a dead actor's cause, in one line."""
    cause = " ".join(str(state.get("DeathCause", "")).split())
    if 'error_message: "' in cause:
        cause = cause.split('error_message: "', 1)[1].rsplit('"', 1)[0].replace("\\'", "'")
    return cause or "no cause given"


# -- the clients' actor options ---------------------------------------------------------------------------


def _fits(demand: Mapping[str, float], resources: Mapping[str, float]) -> bool:
    return all(resources.get(key, 0.0) >= amount - 1e-9 for key, amount in demand.items())


def _checked_amount(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{where} must be a number >= 0, got {value!r}")
    return float(value)


def _checked_resources(resources: Any, where: str) -> dict[str, float]:
    if not isinstance(resources, Mapping):
        raise TypeError(f"{where} must be a dict of custom resource names to amounts, got {resources!r}")
    checked = {}
    for key, amount in resources.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: resource names are non-empty strings, got {key!r}")
        if key in ("CPU", "GPU", "memory"):
            raise ValueError(
                f"{where}[{key!r}]: give {key} as {'num_' + key.lower() + 's' if key != 'memory' else key}="
            )
        checked[key] = _checked_amount(amount, f"{where}[{key!r}]")
    return checked


def _checked_strategy(strategy: Any, where: str, alive: Mapping[str, Any]) -> None:
    if strategy is None or strategy in ("DEFAULT", "SPREAD"):
        return
    if isinstance(strategy, NodeAffinitySchedulingStrategy):
        if not strategy.soft and strategy.node_id not in alive:
            raise ValueError(
                f"{where}: node {strategy.node_id!r} is no alive node of the cluster, and soft=False "
                f"(alive nodes: {', '.join(alive) or 'none'})"
            )
        return
    if not isinstance(strategy, (PlacementGroupSchedulingStrategy, NodeLabelSchedulingStrategy)):
        raise ValueError(
            f"{where} must be 'DEFAULT', 'SPREAD', or a NodeAffinitySchedulingStrategy, "
            f"PlacementGroupSchedulingStrategy or NodeLabelSchedulingStrategy, got {strategy!r}"
        )


def _checked_options(options: Mapping[str, Any], where: str, alive: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` for one client's actor, checked key by key; errors name ``where`` and the key."""
    for key in options:
        if key in _SET_BY_RAY_VECTOR_ENV:
            raise ValueError(f"{where}: {key!r} is not a per-client option ({_SET_BY_RAY_VECTOR_ENV[key]})")
        if key not in CLIENT_OPTIONS:
            close = difflib.get_close_matches(str(key), CLIENT_OPTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{where}: unknown key {key!r}{hint}; a client's options are {', '.join(CLIENT_OPTIONS)}")
    checked = dict(options)
    for key in ("num_cpus", "num_gpus", "memory"):
        if key in checked:
            checked[key] = _checked_amount(checked[key], f"{where}[{key!r}]")
    if "resources" in checked:
        checked["resources"] = _checked_resources(checked["resources"], f"{where}['resources']")
    _checked_strategy(checked.get("scheduling_strategy"), f"{where}['scheduling_strategy']", alive)
    try:  # the rest (runtime_env, label_selector, accelerator_type) as Ray checks them
        from ray._common.ray_option_utils import validate_actor_options
    except ImportError:  # pragma: no cover - another Ray version: Ray checks them when the actor starts
        return checked
    try:
        validate_actor_options(checked, in_options=True)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from error
    return checked


def _per_client(client_options: Any, num_clients: int) -> list[tuple[str, Mapping[str, Any]]]:
    """``client_options`` as one ``(name for errors, options)`` per client."""
    if client_options is None:
        return [("client_options", {})] * num_clients
    if isinstance(client_options, Mapping):
        return [("client_options (for every client)", client_options)] * num_clients
    if isinstance(client_options, (str, bytes)) or not isinstance(client_options, Sequence):
        raise TypeError(
            "client_options must be a dict of Ray actor options (for every client) or a list of "
            f"num_clients={num_clients} of them (one per client), got {client_options!r}"
        )
    if len(client_options) != num_clients:
        raise ValueError(
            f"client_options has {len(client_options)} entries, but there are num_clients={num_clients} clients "
            "(one entry per client, None for the defaults)"
        )
    entries = []
    for index, options in enumerate(client_options):
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"client_options[{index}] must be a dict of Ray actor options or None, got {options!r}")
        entries.append((f"client_options[{index}]", options or {}))
    return entries


def _demand(options: Mapping[str, Any]) -> dict[str, float]:
    """The resources an actor with ``options`` reserves, by Ray's names (those it asks none of left out)."""
    demand = {"CPU": options.get("num_cpus", 1.0), "GPU": options.get("num_gpus", 0.0)}
    demand["memory"] = options.get("memory", 0.0)
    demand.update(options.get("resources", {}))
    if options.get("accelerator_type"):
        demand[f"accelerator_type:{options['accelerator_type']}"] = 0.001
    return {key: amount for key, amount in demand.items() if amount > 0}


def _show(demand: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{key}: {amount:g}" for key, amount in demand.items()) + "}"


class RayClients:
    """A :class:`~gym_remote.launch.Launcher` whose clients are Ray actors placed on the cluster.

    ``env_fns`` are split into ``num_clients`` contiguous shares, one actor each. The actors join as
    remote clients do (no slots are reserved for them), so ``env_fns[i]`` need not end up in slot ``i``.
    Ray restarts an actor whose process dies (up to ``max_restarts`` times), and its client rejoins.

    Args: as :class:`RayVectorEnv`'s of the same names; ``secret`` is given to the clients.

    Raises:
        ValueError, TypeError: bad options, naming the client and the key; a client's resources that no alive
            node of the cluster has (unless ``placement_timeout`` is None).
    """

    launches: tuple[LaunchSlot, ...] = ()
    local_processes = 0

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_clients: int | None = None,
        num_cpus_per_client: float = 1.0,
        num_gpus_per_client: float = 0.0,
        resources_per_client: dict[str, float] | None = None,
        client_options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        placement_strategy: str | None = None,
        placement_timeout: float | None = 5.0,
        max_restarts: int = 3,
        client_kwargs: dict[str, Any] | None = None,
        secret: str | bytes | None = None,
    ) -> None:
        if not ray.is_initialized():
            raise RuntimeError("RayVectorEnv needs a Ray cluster: call ray.init() (or ray.init(address=...)) first")
        self.env_fns = list(env_fns)
        if not self.env_fns:
            raise ValueError("env_fns is empty: a vector env needs at least one env")
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.num_clients = num_clients if num_clients is not None else max(1, min(cpus, len(self.env_fns)))
        if not 1 <= self.num_clients <= len(self.env_fns):
            raise ValueError(
                f"num_clients must be between 1 and len(env_fns)={len(self.env_fns)}, got {self.num_clients}"
            )
        if placement_strategy is not None and placement_strategy not in PLACEMENT_STRATEGIES:
            raise ValueError(
                f"placement_strategy must be one of {', '.join(PLACEMENT_STRATEGIES)} or None, "
                f"got {placement_strategy!r}"
            )
        if placement_timeout is not None:
            placement_timeout = _checked_amount(placement_timeout, "placement_timeout")
        self.placement_timeout = math.inf if placement_timeout is None else placement_timeout
        self.placement_strategy = placement_strategy
        defaults = {
            "num_cpus": _checked_amount(num_cpus_per_client, "num_cpus_per_client"),
            "num_gpus": _checked_amount(num_gpus_per_client, "num_gpus_per_client"),
            "resources": _checked_resources(resources_per_client or {}, "resources_per_client"),
        }
        view = _ClusterView()
        self.client_options: list[dict[str, Any]] = []
        """Each client's Ray actor options (the defaults and its entry of ``client_options``)."""
        for where, options in _per_client(client_options, self.num_clients):
            if placement_strategy is not None and "scheduling_strategy" in options:
                raise ValueError(
                    f"{where}: a scheduling_strategy and placement_strategy={placement_strategy!r} "
                    "(the clients' placement group) cannot both be given"
                )
            self.client_options.append(_checked_options({**defaults, **options}, where, view.totals))
        self.demands = [_demand(options) for options in self.client_options]
        """The resources each client's actor reserves, by Ray's names."""
        if placement_strategy is not None and not all(self.demands):
            empty = [index for index, demand in enumerate(self.demands) if not demand]
            raise ValueError(
                f"placement_strategy={placement_strategy!r} makes a bundle of each client's resources, "
                f"but clients {empty} reserve none (give them num_cpus > 0 or a resource)"
            )
        if placement_timeout is not None:
            self._check_feasible(view)
        self.max_restarts = max_restarts
        self.client_kwargs = dict(client_kwargs or {})
        if secret is not None:
            self.client_kwargs.setdefault("secret", secret)
        self.default_bind = _default_bind()
        self.placement_group: PlacementGroup | None = None
        self.actors: list[Any] = []
        self._runs: list[Any] = []
        self._serving: set[int] = set()  # the clients that are members of the vector now
        self._slots: dict[int, list[int]] = {}  # the slots each lost client left
        self._unplaced_since: dict[int, float] = {}  # clients whose actor Ray has not placed, since when
        self._stuck: list[tuple[int, str]] = []  # the last check's clients Ray cannot run, with why
        self._checked_at = -math.inf
        self._warned: set[int] = set()

    def _check_feasible(self, view: _ClusterView) -> None:
        """Raise if no alive node has, in all, the resources a client's actor reserves (Ray would wait forever)."""
        for index, (options, demand) in enumerate(zip(self.client_options, self.demands)):
            strategy = options.get("scheduling_strategy")
            if isinstance(strategy, (PlacementGroupSchedulingStrategy, NodeLabelSchedulingStrategy)):
                continue  # the group's bundles, or node labels: Ray's to judge
            if isinstance(strategy, NodeAffinitySchedulingStrategy) and not strategy.soft:
                nodes = [strategy.node_id]
            else:
                nodes = list(view.totals)
            if not any(_fits(demand, view.totals[node]) for node in nodes):
                where = "its node" if len(nodes) == 1 and len(view.totals) > 1 else "no alive node of the cluster"
                raise ValueError(
                    f"client {index} reserves {_show(demand)}, which {where} has in all "
                    f"(free/total: {view.describe(list(demand))}); for a cluster that an autoscaler grows, "
                    "pass placement_timeout=None"
                )

    def start(self, address: str, *, allow_pickle: bool, security: Any = None) -> None:
        """Start one actor per share of ``env_fns``; each serves its envs to ``address``."""
        options = self.client_options
        if self.placement_strategy is not None:
            options = self._place_group()
        actor_class = ray.remote(_ClientActor)
        for index, (first, size) in enumerate(split_evenly(len(self.env_fns), self.num_clients)):
            # (Any: Ray's types see an actor's methods as plain functions, without their .remote)
            actor: Any = actor_class.options(
                **options[index], max_restarts=self.max_restarts, max_task_retries=self.max_restarts
            ).remote()
            self.actors.append(actor)
            share = self.env_fns[first : first + size]
            self._runs.append(actor.serve.remote(address, share, f"ray-{index}", self.client_kwargs))
        logger.info("started %d Ray actors serving %d envs at %s", self.num_clients, len(self.env_fns), address)

    def _place_group(self) -> list[dict[str, Any]]:
        """Make the clients' placement group (a bundle of each client's resources) and wait up to
        ``placement_timeout`` for Ray to place it; each client's options with its bundle."""
        group = placement_group(self.demands, strategy=self.placement_strategy)
        self.placement_group = group
        if self.placement_timeout < math.inf:
            ready, _ = ray.wait([group.ready()], timeout=self.placement_timeout)
            if not ready:
                demands = {key for demand in self.demands for key in demand}
                raise RayPlacementError(
                    f"Ray did not place the placement group of the {self.num_clients} clients "
                    f"(strategy {self.placement_strategy}, bundles {[_show(demand) for demand in self.demands]}) "
                    f"within placement_timeout={self.placement_timeout:g} s; the alive nodes (free/total): "
                    f"{_ClusterView().describe(sorted(demands))}"
                )
        return [
            {**options, "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)}
            for i, options in enumerate(self.client_options)
        ]

    def _index(self, client: Any) -> int | None:
        """The index of the client of this launcher that ``client`` is (by its name, ``ray-<index>``)."""
        prefix, _, number = client.name.partition("-")
        if prefix == "ray" and number.isdigit() and int(number) < self.num_clients:
            return int(number)
        return None

    def poll(self) -> list[tuple[int, int]]:
        """Warn (once each time) of clients whose actor Ray cannot run now; their slots stay without a client.

        Ray restarts the actors itself; their clients rejoin as remote clients do.
        """
        for index, reason in self._stuck_clients():
            if index not in self._warned:
                self._warned.add(index)
                logger.warning(
                    "Ray client ray-%d (%s) cannot run now: %s; its slots get no client until it does",
                    index,
                    self._left(index),
                    reason,
                )
        return []

    def _left(self, index: int) -> str:
        """The slots client ``index`` left when it was lost, in words."""
        return f"slots {format_slots(self._slots[index])}" if index in self._slots else "not joined yet"

    def check_empty(self, empty: list[int]) -> None:
        """A call waits for clients to serve the ``empty`` slots: raise if Ray cannot run one of this launcher's
        clients (unplaced for ``placement_timeout`` with no room in view, or dead).

        Raises:
            RayPlacementError: naming the clients, their resources, why, and the alive nodes' free resources.
        """
        stuck = self._stuck_clients()
        if not stuck:
            return
        clients = "; ".join(
            f"client ray-{index} ({self._left(index)}, reserving {_show(self.demands[index])}): {reason}"
            for index, reason in stuck
        )
        raise RayPlacementError(
            f"slots {format_slots(empty)} wait for clients that Ray cannot run now: {clients}. A client whose actor "
            "Ray places later (a node joins, resources free up) serves its slots again; empty_slots='mask' steps the "
            "other slots meanwhile, placement_timeout=None waits (up to connect_timeout)"
        )

    def _stuck_clients(self) -> list[tuple[int, str]]:
        """The clients whose actor Ray cannot run now, with why: dead, or not placed for ``placement_timeout`` or
        longer with no room in view. Ray is asked at most every :data:`CHECK_SECONDS`, and only about the actors
        of clients that are not serving."""
        now = time.monotonic()
        if now - self._checked_at < CHECK_SECONDS:
            return self._stuck
        self._checked_at = now
        waiting = [index for index in range(len(self.actors)) if index not in self._serving]
        stuck: list[tuple[int, str]] = []
        view: _ClusterView | None = None
        for index in waiting:
            state = _actor_state(self.actors[index])
            if state is None:
                continue
            if state.get("State") == "DEAD":
                stuck.append((index, f"its actor is dead and Ray does not restart it ({_death_cause(state)})"))
                continue
            if state.get("State") not in _UNPLACED_STATES or state.get("Address", {}).get("Port"):
                self._unplaced_since.pop(index, None)  # running, or placed and starting
                continue
            waited = now - self._unplaced_since.setdefault(index, now)
            if waited < self._placement_limit(index):
                continue
            view = view or _ClusterView()
            if self._has_room(index, view):
                continue  # Ray is about to place it
            demand = self.demands[index]
            stuck.append(
                (
                    index,
                    f"Ray has not placed its actor for {waited:.1f} s, for want of room "
                    f"(free/total: {view.describe(list(demand))})",
                )
            )
        self._stuck = stuck
        return stuck

    def _strategy(self, index: int) -> Any:
        """Client ``index``'s scheduling strategy (its bundle of the clients' placement group, if they have one)."""
        if self.placement_group is not None:
            return PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=index)
        return self.client_options[index].get("scheduling_strategy")

    def _has_room(self, index: int, view: _ClusterView) -> bool:
        """Whether client ``index``'s actor is not left waiting for room, as far as Ray tells: its bundle of a
        placement group has a node; its request is not queued for want of room; or, for a request Ray does not
        report (node affinity), some node has its resources free."""
        strategy = self._strategy(index)
        demand = self.demands[index]
        if isinstance(strategy, PlacementGroupSchedulingStrategy):
            table = placement_group_table(strategy.placement_group)
            if table.get("state") == "CREATED":
                return True
            placed = table.get("bundles_to_node_id", {})
            bundle = strategy.placement_group_bundle_index
            return bool(placed.get(bundle)) if bundle >= 0 else any(placed.values())
        if isinstance(strategy, NodeAffinitySchedulingStrategy):
            return view.free_for(demand, None if strategy.soft else [strategy.node_id])
        queued = view.queued(demand)
        return view.free_for(demand) if queued is None else not queued

    def _placement_limit(self, index: int) -> float:
        """How long client ``index``'s actor may go unplaced before it counts as left without room: a request
        judged by free resources alone (node affinity) gets :data:`UNREPORTED_GRACE_SECONDS` at least, as a
        worker starting for it holds them meanwhile."""
        if isinstance(self._strategy(index), NodeAffinitySchedulingStrategy):
            return max(self.placement_timeout, UNREPORTED_GRACE_SECONDS)
        return self.placement_timeout

    def node_ids(self) -> list[str | None]:
        """The Ray node each client's actor runs on now (None while it is not placed, or if Ray does not tell)."""
        nodes: list[str | None] = []
        for actor in self.actors:
            state = _actor_state(actor)
            alive = state is not None and state.get("State") == "ALIVE"
            nodes.append(state["Address"]["NodeID"] if state is not None and alive else None)
        return nodes

    def on_join(self, client: Any) -> None:
        index = self._index(client)
        if index is not None:
            self._serving.add(index)
            self._warned.discard(index)
            self._unplaced_since.pop(index, None)

    def on_lost(self, client: Any) -> None:
        index = self._index(client)
        if index is not None:
            self._serving.discard(index)
            self._slots[index] = list(client.slots)
            self._checked_at = -math.inf  # (look at its actor at the next check)

    def failed(self, index: int, report: dict[str, Any]) -> None:
        pass

    def refused(self, index: int, refusal: Any) -> None:
        pass

    def exited(self, index: int) -> bool:
        return False

    def stop(self, timeout: float) -> None:
        """Wait for the running clients to return (the server told them to leave), then end the actors and
        remove the placement group."""
        running = [run for run, node in zip(self._runs, self.node_ids()) if node is not None]
        if running:
            _, late = ray.wait(running, num_returns=len(running), timeout=max(0.1, timeout))
            if late:
                logger.debug("%d Ray clients did not return within %.1f s; their actors are killed", len(late), timeout)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        if self.placement_group is not None:
            remove_placement_group(self.placement_group)
        self.actors, self._runs, self.placement_group = [], [], None


class RayVectorEnv(RemoteVectorEnv):
    """A :class:`~gym_remote.RemoteVectorEnv` whose clients are Ray actors placed on the cluster:
    ``RemoteVectorEnv(num_envs=len(env_fns), launcher=RayClients(env_fns, ...))``.

    ``env_fns`` are split into ``num_clients`` contiguous shares, one actor each. Clients take slots
    in the order they join (as remote clients do), so ``env_fns[i]`` need not end up in slot ``i``.

    Where each client runs is Ray's to decide, with what its actor reserves: ``num_cpus_per_client``,
    ``num_gpus_per_client`` and ``resources_per_client`` for every client, and ``client_options`` for Ray's
    other actor options or for some clients alone, e.g. ``[{"resources": {"renderer": 1}}, None]``
    (client 0 where a renderer is free) or ``{"scheduling_strategy": "SPREAD"}``; or the clients share a
    placement group of one bundle each (``placement_strategy``).

    A client whose actor Ray cannot run (no alive node has room for it, for ``placement_timeout``; or it is
    dead: restarted ``max_restarts`` times, or pinned with ``soft=False`` to a node that is gone) makes a call
    that waits for its slots raise :class:`RayPlacementError` (with ``empty_slots="wait"``, the default: the
    next ``step`` after its loss was reported; and ``reset``). With ``empty_slots="mask"`` the steps go on,
    its slots masked, and a warning is logged. Either way its slots are served again once Ray places the
    actor (a node joins, resources free up).

    Args:
        env_fns: functions that each make one env (they travel to the actors with Ray's serializer).
        num_clients: actors to start (default: the cluster's CPUs, at most ``len(env_fns)``).
        num_cpus_per_client: CPUs each actor reserves (Ray's ``num_cpus``).
        num_gpus_per_client: GPUs each actor reserves (Ray's ``num_gpus``).
        resources_per_client: custom Ray resources each actor reserves, e.g. ``{"simulator": 1}``.
        client_options: Ray actor options (as ``ActorClass.options(...)`` takes them; the keys are
            :data:`CLIENT_OPTIONS`): one dict for every client, or a list of one dict (or None) per client.
            A key given here replaces the default of the same name (``resources`` too, whole).
        placement_strategy: ``"PACK"``, ``"SPREAD"``, ``"STRICT_PACK"`` or ``"STRICT_SPREAD"``: the clients
            run in one placement group, a bundle of each client's resources, which Ray places with this
            strategy (waited for up to ``placement_timeout``) and re-places when a node is lost. Not with a
            ``scheduling_strategy`` in ``client_options``.
        placement_timeout: seconds a client's actor may go unplaced for want of room before a call that waits
            for its slots raises (Ray queues its request; or its bundle of a placement group has no node; or, for
            node affinity, whose requests Ray does not report, no node has its resources free: then 10 s at
            least, :data:`UNREPORTED_GRACE_SECONDS`). Ray's queue tells request shapes, not whose: on a cluster
            where others wait for the same resources, an actor whose worker takes longer than this to start
            would be taken for one left without room, so give it more there. ``None``: without limit (a
            cluster that an autoscaler grows; then resources no node has are not refused up front either, and
            calls wait up to ``connect_timeout``).
        max_restarts: how often Ray restarts an actor whose process died (and reruns its client).
        bind: the endpoint the actors connect to (default: a free ``tcp://`` port on loopback if
            the cluster is just this node, else on this node's Ray address). Beyond loopback it
            needs ``secret`` (given to the clients too) or keys, or ``insecure=True`` on a network
            you trust. (A one-node cluster that an autoscaler grows later needs ``bind`` given.)
        client_kwargs: more :class:`~gym_remote.EnvClient` arguments (``liveness_timeout``, ...).
        **kwargs: the RemoteVectorEnv's other arguments (``autoreset_mode``, ``timeout``, ``empty_slots``,
            ``secret`` ...).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_clients: int | None = None,
        num_cpus_per_client: float = 1.0,
        num_gpus_per_client: float = 0.0,
        resources_per_client: dict[str, float] | None = None,
        client_options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        placement_strategy: str | None = None,
        placement_timeout: float | None = 5.0,
        max_restarts: int = 3,
        bind: str | None = None,
        client_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        launcher = RayClients(
            env_fns,
            num_clients=num_clients,
            num_cpus_per_client=num_cpus_per_client,
            num_gpus_per_client=num_gpus_per_client,
            resources_per_client=resources_per_client,
            client_options=client_options,
            placement_strategy=placement_strategy,
            placement_timeout=placement_timeout,
            max_restarts=max_restarts,
            client_kwargs=client_kwargs,
            secret=kwargs["security"].secret if kwargs.get("security") is not None else kwargs.get("secret"),
        )
        self._ray_clients = launcher
        super().__init__(num_envs=len(launcher.env_fns), bind=bind, launcher=launcher, **kwargs)

    @property
    def actors(self) -> list[Any]:
        """The clients' Ray actor handles, one per client share of ``env_fns``."""
        return list(self._ray_clients.actors)

    def node_ids(self) -> list[str | None]:
        """The Ray node each client's actor runs on now (client ``i`` is named ``ray-<i>`` in :meth:`stats`);
        None while Ray has not placed it."""
        return self._ray_clients.node_ids()
