"""gym_remote.ray.RayVectorEnv on a Ray cluster of several nodes, all on this machine (loopback): where each
client's actor runs, and what a vector does when a node is removed while it steps, with room on the other
nodes for the lost clients and without."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from gym_remote.ray import RayPlacementError, RayVectorEnv
from tests.envs import make_cartpole
from tests.helpers import assert_same_steps, pid_alive, step_until, wait_until

pytestmark = pytest.mark.timeout(240)

LOOPBACK = "127.0.0.1"
"""Every node's address: without it, ray.init takes the machine's external address and retries it forever."""
NODE_ARGS = {"node_ip_address": LOOPBACK, "object_store_memory": 80 * 2**20}


class NodeRecorded(gym.Wrapper):
    """CartPole-v1 truncated after 30 steps, which knows the Ray node it was made on (``ray_node``)."""

    def __init__(self) -> None:
        super().__init__(make_cartpole(max_episode_steps=30))
        self.ray_node = ray.get_runtime_context().get_node_id()


def _descendants() -> set[int]:
    """The pids of this process's children, their children, and so on."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _processes_of(session: str) -> list[int]:
    """What ``ps`` shows of a Ray session: the processes whose command line names its directory."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                if session.encode() in file.read():
                    pids.append(int(entry))
        except (ValueError, OSError):
            continue
    return [pid for pid in pids if pid_alive(pid)]


class Nodes:
    """A three-node loopback cluster: the head (2 CPUs; the driver's node) and worker nodes of 1 CPU each, one
    of them with a ``renderer``."""

    def __init__(self) -> None:
        self.cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "num_cpus": 2})
        head = self.cluster.head_node
        assert head is not None
        self.head: str = head.node_id
        self.session = os.path.basename(head.get_session_dir_path())
        self.workers: list = []
        for renderer in (True, False):
            self.add(renderer)
        ray.init(address=self.cluster.address, _node_ip_address=LOOPBACK, log_to_driver=False)
        self.cluster.wait_for_nodes()

    def add(self, renderer: bool | None = None) -> str:
        """Add a worker node (with the renderer if no alive node has it); its node id."""
        if renderer is None:
            renderer = not any("renderer" in node.get("Resources", {}) for node in ray.nodes() if node["Alive"])
        node = self.cluster.add_node(**NODE_ARGS, num_cpus=1, resources={"renderer": 1} if renderer else {})
        self.workers.append(node)
        return node.node_id

    def ensure(self, count: int) -> None:
        """Add worker nodes until ``count`` are alive."""
        while len(self.workers) < count:
            self.add()
        self.cluster.wait_for_nodes()

    def remove(self, node_id: str) -> None:
        node = next(node for node in self.workers if node.node_id == node_id)
        self.workers.remove(node)
        self.cluster.remove_node(node)

    def with_renderer(self) -> str:
        return next(node["NodeID"] for node in ray.nodes() if node["Alive"] and "renderer" in node.get("Resources", {}))

    def shutdown(self) -> None:
        """Shut Ray down; then no process of the cluster is left (what ``ps`` shows)."""
        started = _descendants()
        try:
            ray.shutdown()
        finally:
            self.cluster.shutdown()
        left = lambda: [pid for pid in started if pid_alive(pid)] + _processes_of(self.session)  # noqa: E731
        try:
            wait_until(lambda: not left(), 30, "the cluster's processes to end")
        finally:
            for pid in left():
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def nodes():
    if ray.is_initialized():
        pytest.skip("Ray is running in this process already")
    nodes = Nodes()
    try:
        yield nodes
    finally:
        nodes.shutdown()


@pytest.fixture
def three_nodes(nodes):
    """The cluster with its two worker nodes (nodes a test removed are replaced)."""
    nodes.ensure(2)
    return nodes


def pinned(*node_ids: str, soft: bool = True) -> list[dict]:
    """``client_options`` that place client ``i`` on node ``node_ids[i]`` (``soft``: elsewhere if it cannot)."""
    return [{"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=soft)} for node in node_ids]


def served_nodes(envs: RayVectorEnv) -> dict[str, set[str]]:
    """The nodes each client's envs were made on, as the envs themselves tell (by client name)."""
    env_nodes = envs.get_attr("ray_node")
    seen: dict[str, set[str]] = {}
    for row in envs.stats():
        seen.setdefault(row["client"], set()).add(env_nodes[row["slot"]])
    return seen


def test_each_client_runs_where_its_options_place_it(three_nodes):
    head, renderer = three_nodes.head, three_nodes.with_renderer()
    other = next(node.node_id for node in three_nodes.workers if node.node_id != renderer)
    env_fns = [NodeRecorded] * 6
    envs = RayVectorEnv(
        env_fns,
        num_clients=3,
        client_options=[
            {"resources": {"renderer": 1}},  # where the renderer is
            pinned(other, soft=False)[0],
            {"num_cpus": 2, "scheduling_strategy": "SPREAD"},  # only the head has 2 CPUs
        ],
        liveness_timeout=2.0,
        client_kwargs={"liveness_timeout": 2.0},
        connect_timeout=60,
    )
    sync = gym.vector.SyncVectorEnv(env_fns)
    try:
        rng = np.random.default_rng(1)
        assert_same_steps(envs, sync, (rng.integers(0, 2, size=6) for _ in range(40)), seed=3)
        assert envs.node_ids() == [renderer, other, head]
        assert served_nodes(envs) == {"ray-0": {renderer}, "ray-1": {other}, "ray-2": {head}}

        stepper = Stepper(envs)  # ray-1 may run nowhere else: once its node is gone, Ray lets its actor die
        lost_slots = slots_of(envs, "ray-1")
        stepper.while_removing(three_nodes, other)
        assert sorted(stepper.lost) == lost_slots
        started = time.monotonic()
        with pytest.raises(RayPlacementError, match=r"ray-1 \(slots .*its actor is dead.*soft=False"):
            for _ in range(100):
                stepper.step()
        assert time.monotonic() - started < 10
    finally:
        envs.close()
        sync.close()


def test_a_strict_spread_placement_group_puts_each_client_on_a_node_of_its_own(three_nodes):
    envs = RayVectorEnv([NodeRecorded] * 3, num_clients=3, placement_strategy="STRICT_SPREAD", connect_timeout=60)
    try:
        envs.reset(seed=0)
        nodes = envs.node_ids()
        assert sorted(map(str, nodes)) == sorted([three_nodes.head, *(node.node_id for node in three_nodes.workers)])
        assert served_nodes(envs) == {f"ray-{index}": {node} for index, node in enumerate(nodes)}
    finally:
        envs.close()


class Stepper:
    """Steps ``envs`` and keeps what its steps reported: the slots whose client was lost, and the masked ones."""

    def __init__(self, envs: RayVectorEnv) -> None:
        self.envs = envs
        self.lost: list[int] = []
        self.unserved: list[np.ndarray] = []

    def step(self) -> None:
        _, _, _, truncations, infos = self.envs.step(self.envs.action_space.sample())
        if "client_lost" in infos:
            lost = np.flatnonzero(infos["_client_lost"])
            assert truncations[lost].all()
            self.lost.extend(lost.tolist())
        self.unserved.append(np.flatnonzero(infos["_unserved"]) if "unserved" in infos else np.zeros(0, int))

    def while_removing(self, nodes: Nodes, node_id: str, timeout: float = 30) -> None:
        """Step while ``node_id`` is removed (by another thread), until the loss of its clients is reported."""
        remover = threading.Thread(target=nodes.remove, args=(node_id,))
        remover.start()
        try:
            step_until(self.envs, lambda: bool(self.lost), timeout, "the lost node's slots to report it", self.step)
        finally:
            remover.join(timeout=30)


def slots_of(envs: RayVectorEnv, client: str) -> list[int]:
    return sorted(row["slot"] for row in envs.stats() if row["client"] == client)


def hosting(envs: RayVectorEnv, nodes: Nodes) -> str:
    """A worker node (not the head) on which a client runs."""
    workers = {node.node_id for node in nodes.workers}
    return next(node for node in envs.node_ids() if node is not None and node in workers)


def test_a_lost_node_s_clients_restart_where_there_is_room_and_else_the_next_step_says_so(three_nodes):
    env_fns = [NodeRecorded] * 6
    envs = RayVectorEnv(
        env_fns,
        num_clients=3,
        client_options={"scheduling_strategy": "SPREAD"},  # 3 of the 4 CPUs: the head has 2, the workers 1 each
        liveness_timeout=2.0,
        client_kwargs={"liveness_timeout": 2.0},
        connect_timeout=60,
    )
    sync = gym.vector.SyncVectorEnv(env_fns)
    try:
        rng = np.random.default_rng(2)
        assert_same_steps(envs, sync, (rng.integers(0, 2, size=6) for _ in range(15)), seed=5)  # before any loss
        stepper = Stepper(envs)

        victim = hosting(envs, three_nodes)  # room is left for its client
        client = f"ray-{envs.node_ids().index(victim)}"
        lost_slots = slots_of(envs, client)
        stepper.while_removing(three_nodes, victim)
        assert sorted(stepper.lost) == lost_slots
        step_until(envs, lambda: envs.num_clients == 3, 30, f"{client} to restart on another node", stepper.step)
        assert victim not in envs.node_ids() and None not in envs.node_ids()
        assert served_nodes(envs)[client] == {envs.node_ids()[int(client[4:])]}
        assert slots_of(envs, client) == lost_slots

        stepper.lost.clear()
        victim = hosting(envs, three_nodes)  # the 2 CPUs left cannot take its client too
        client = f"ray-{envs.node_ids().index(victim)}"
        stepper.while_removing(three_nodes, victim)
        started = time.monotonic()
        with pytest.raises(RayPlacementError, match=rf"{client} \(slots .*CPU: 1.*for want of room"):
            for _ in range(100):
                stepper.step()
        waited = time.monotonic() - started
        assert waited < 15, f"the step raised after {waited:.1f} s"  # connect_timeout is 60 s
        assert envs.node_ids().count(None) == 1

        added = three_nodes.add()  # room again: the same vector goes on
        step_until(envs, lambda: envs.num_clients == 3, 30, f"{client} to start on the new node", stepper.step)
        assert added in envs.node_ids() and served_nodes(envs)[client] == {added}
    finally:
        envs.close()
        sync.close()


def test_with_masked_empty_slots_the_steps_go_on_until_there_is_room(three_nodes, caplog):
    head = three_nodes.head
    first, second = (node.node_id for node in three_nodes.workers)
    envs = RayVectorEnv(
        [NodeRecorded] * 8,
        num_clients=4,
        client_options=pinned(head, head, first, second),  # every CPU taken; node affinity: Ray queues nothing
        empty_slots="mask",
        liveness_timeout=2.0,
        client_kwargs={"liveness_timeout": 2.0},
        connect_timeout=60,
    )
    try:
        envs.reset(seed=0)
        lost_slots = slots_of(envs, "ray-3")
        stepper = Stepper(envs)
        with caplog.at_level(logging.WARNING, logger="gym_remote"):
            stepper.while_removing(three_nodes, second)
            assert sorted(stepper.lost) == lost_slots
            step_until(
                envs, lambda: "ray-3 (slots" in caplog.text, 30, "the warning that ray-3 cannot run", stepper.step
            )
        assert "for want of room" in caplog.text
        masked_since = len(stepper.unserved)
        for _ in range(10):
            stepper.step()
        assert all(unserved.tolist() == lost_slots for unserved in stepper.unserved[masked_since:])
        assert envs.node_ids()[3] is None

        added = three_nodes.add()
        step_until(envs, lambda: envs.num_clients == 4, 30, "ray-3 to start on the new node", stepper.step)
        stepper.step()  # (the step after its join resets its slots)
        stepper.step()
        assert len(stepper.unserved[-1]) == 0
        assert envs.node_ids()[3] == added and served_nodes(envs)["ray-3"] == {added}
    finally:
        envs.close()
