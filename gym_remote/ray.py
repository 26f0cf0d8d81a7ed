"""Clients on a Ray cluster: :class:`RayVectorEnv`, a RemoteVectorEnv whose clients run as Ray actors.

When one machine is not enough, Ray places the env clients across the cluster with the resources
each needs, and restarts an actor whose process dies; the learner's RemoteVectorEnv gives the
restarted client's envs the slots the dead one left (its episodes end with ``truncated`` and
``infos["client_lost"]``, as for any lost client). Needs the ``ray`` extra
(``pip install "gymnasium-remote[ray]"``) and ``ray.init()`` before the vector env is built.

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
    raise ImportError('gym_remote.ray needs Ray: pip install "gymnasium-remote[ray]"') from error

from gym_remote.client import EnvClient
from gym_remote.launch import split_evenly
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["RayVectorEnv"]

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


class RayVectorEnv(RemoteVectorEnv):
    """A :class:`~gym_remote.RemoteVectorEnv` whose clients are Ray actors placed on the cluster.

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
        if not ray.is_initialized():
            raise RuntimeError("RayVectorEnv needs a Ray cluster: call ray.init() (or ray.init(address=...)) first")
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("env_fns is empty: a vector env needs at least one env")
        cpus = int(ray.cluster_resources().get("CPU", 1))
        count = num_clients if num_clients is not None else max(1, min(cpus, len(env_fns)))
        if not 1 <= count <= len(env_fns):
            raise ValueError(f"num_clients must be between 1 and len(env_fns)={len(env_fns)}, got {count}")
        self._actors: list[Any] = []
        self._runs: list[Any] = []
        super().__init__(num_envs=len(env_fns), bind=bind or _default_bind(), **kwargs)
        client_kwargs = dict(client_kwargs or {})
        if kwargs.get("secret") is not None:
            client_kwargs.setdefault("secret", kwargs["secret"])
        actor_class = ray.remote(_ClientActor)
        for index, (first, size) in enumerate(split_evenly(len(env_fns), count)):
            actor = actor_class.options(
                num_cpus=num_cpus_per_client,
                num_gpus=num_gpus_per_client,
                resources=resources_per_client or {},
                max_restarts=max_restarts,
                max_task_retries=max_restarts,
            ).remote()
            self._actors.append(actor)
            name = f"ray-{index}"
            self._runs.append(actor.serve.remote(self.address, env_fns[first : first + size], name, client_kwargs))
        logger.info("started %d Ray actors serving %d envs at %s", count, len(env_fns), self.address)

    @property
    def actors(self) -> list[Any]:
        """The clients' Ray actor handles, one per client share of ``env_fns``."""
        return list(self._actors)

    def close_extras(self, timeout: float = 5.0, **kwargs: Any) -> None:
        """Close the server (the clients leave when told), then end the actors."""
        try:
            super().close_extras(timeout=timeout, **kwargs)
        finally:
            if self._runs:
                deadline = time.monotonic() + timeout
                for run in self._runs:  # their clients return once the server said CLOSE
                    try:
                        ray.get(run, timeout=max(0.1, deadline - time.monotonic()))
                    except Exception as error:  # a client that failed or did not return: ended below
                        logger.debug("a Ray client ended with %r", error)
            for actor in self._actors:
                ray.kill(actor, no_restart=True)
            self._actors, self._runs = [], []
