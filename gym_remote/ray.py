"""Clients on a Ray cluster: :class:`RayVectorEnv`, a RemoteVectorEnv whose clients run as Ray actors.

When one machine is not enough, Ray places the env clients across the cluster with the resources
each needs, and restarts an actor whose process dies; the learner's RemoteVectorEnv gives the
restarted client's envs the slots the dead one left (its episodes end with ``truncated`` and
``infos["client_lost"]``, as for any lost client). Needs the ``ray`` extra
(the ``ray`` extra: ``pip install ".[ray]"`` from a clone) and ``ray.init()`` before the vector env is built.

Example (a local Ray instance)::

    import ray
    from gym_remote.ray import RayVectorEnv

    ray.init(num_cpus=4)
    envs = RayVectorEnv([lambda: gym.make("CartPole-v1")] * 8, num_clients=4, num_cpus_per_client=1)
    obs, infos = envs.reset(seed=0)
    envs.close()  # the clients leave and their actors end
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

try:
    import ray
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError('gym_remote.ray needs Ray: pip install "ray>=2.40" (the "ray" extra)') from error

from gym_remote.client import EnvClient
from gym_remote.launch import LaunchSlot, split_evenly
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["RayClients", "RayVectorEnv"]

logger = logging.getLogger(__name__)


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


class RayClients:
    """A :class:`~gym_remote.launch.Launcher` whose clients are Ray actors placed on the cluster.

    ``env_fns`` are split into ``num_clients`` contiguous shares, one actor each. The actors join as
    remote clients do (no slots are reserved for them), so ``env_fns[i]`` need not end up in slot ``i``.
    Ray restarts an actor whose process dies (up to ``max_restarts`` times), and its client rejoins.

    Args: as :class:`RayVectorEnv`'s of the same names; ``secret`` is given to the clients.
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
        self.options = {
            "num_cpus": num_cpus_per_client,
            "num_gpus": num_gpus_per_client,
            "resources": resources_per_client or {},
            "max_restarts": max_restarts,
            "max_task_retries": max_restarts,
        }
        self.client_kwargs = dict(client_kwargs or {})
        if secret is not None:
            self.client_kwargs.setdefault("secret", secret)
        self.default_bind = _default_bind()
        self.actors: list[Any] = []
        self._runs: list[Any] = []

    def start(self, address: str, *, allow_pickle: bool, security: Any = None) -> None:
        """Start one actor per share of ``env_fns``; each serves its envs to ``address``."""
        actor_class = ray.remote(_ClientActor)
        for index, (first, size) in enumerate(split_evenly(len(self.env_fns), self.num_clients)):
            # (Any: Ray's types see an actor's methods as plain functions, without their .remote)
            actor: Any = actor_class.options(**self.options).remote()
            self.actors.append(actor)
            share = self.env_fns[first : first + size]
            self._runs.append(actor.serve.remote(address, share, f"ray-{index}", self.client_kwargs))
        logger.info("started %d Ray actors serving %d envs at %s", self.num_clients, len(self.env_fns), address)

    def poll(self) -> list[tuple[int, int]]:
        return []  # Ray restarts the actors; their clients rejoin as remote clients do

    def on_join(self, client: Any) -> None:
        pass

    def on_lost(self, client: Any) -> None:
        pass

    def failed(self, index: int, report: dict[str, Any]) -> None:
        pass

    def refused(self, index: int, refusal: Any) -> None:
        pass

    def exited(self, index: int) -> bool:
        return False

    def stop(self, timeout: float) -> None:
        """Wait for the clients to return (the server told them to leave), then end the actors."""
        deadline = time.monotonic() + timeout
        for run in self._runs:
            try:
                ray.get(run, timeout=max(0.1, deadline - time.monotonic()))
            except Exception as error:  # a client that failed or did not return: ended below
                logger.debug("a Ray client ended with %r", error)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors, self._runs = [], []


class RayVectorEnv(RemoteVectorEnv):
    """A :class:`~gym_remote.RemoteVectorEnv` whose clients are Ray actors placed on the cluster:
    ``RemoteVectorEnv(num_envs=len(env_fns), launcher=RayClients(env_fns, ...))``.

    ``env_fns`` are split into ``num_clients`` contiguous shares, one actor each. Clients take slots
    in the order they join (as remote clients do), so ``env_fns[i]`` need not end up in slot ``i``.

    Args:
        env_fns: functions that each make one env (they travel to the actors with Ray's serializer).
        num_clients: actors to start (default: the cluster's CPUs, at most ``len(env_fns)``).
        num_cpus_per_client: CPUs each actor reserves (Ray's ``num_cpus``).
        num_gpus_per_client: GPUs each actor reserves (Ray's ``num_gpus``).
        resources_per_client: custom Ray resources each actor reserves, e.g. ``{"simulator": 1}``.
        max_restarts: how often Ray restarts an actor whose process died (and reruns its client).
        bind: the endpoint the actors connect to (default: a free ``tcp://`` port on loopback if
            the cluster is just this node, else on this node's Ray address). Beyond loopback it
            needs ``secret`` (given to the clients too) or keys, or ``insecure=True`` on a network
            you trust. (A one-node cluster that an autoscaler grows later needs ``bind`` given.)
        client_kwargs: more :class:`~gym_remote.EnvClient` arguments (``liveness_timeout``, ...).
        **kwargs: the RemoteVectorEnv's other arguments (``autoreset_mode``, ``timeout``, ``secret`` ...).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_clients: int | None = None,
        num_cpus_per_client: float = 1.0,
        num_gpus_per_client: float = 0.0,
        resources_per_client: dict[str, float] | None = None,
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
            max_restarts=max_restarts,
            client_kwargs=client_kwargs,
            secret=kwargs["security"].secret if kwargs.get("security") is not None else kwargs.get("secret"),
        )
        super().__init__(num_envs=len(launcher.env_fns), bind=bind, launcher=launcher, **kwargs)
        self._ray_clients = launcher

    @property
    def actors(self) -> list[Any]:
        """The clients' Ray actor handles, one per client share of ``env_fns``."""
        return list(self._ray_clients.actors)
