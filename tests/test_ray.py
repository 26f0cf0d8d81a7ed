"""gym_remote.ray.RayVectorEnv: clients as actors of a real local Ray instance, on loopback."""

from __future__ import annotations

import functools
import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
import ray

from gym_remote.ray import RayPlacementError, RayVectorEnv
from tests.envs import make_cartpole
from tests.helpers import assert_same_steps, pid_alive, ray_instance, step_until, wait_until

pytestmark = pytest.mark.timeout(120)


short_cartpole = functools.partial(make_cartpole, max_episode_steps=30)
"""CartPole-v1 truncated after 30 steps."""


@pytest.fixture(scope="module")
def local_ray():
    """A Ray instance of 2 CPUs on 127.0.0.1 (see conftest.py), shut down after the module; its processes
    ended by pid."""
    with ray_instance(num_cpus=2, resources={"simulator": 2}, include_dashboard=False, log_to_driver=False):
        yield


def test_needs_ray_init():
    if ray.is_initialized():
        pytest.skip("Ray is running in this process")
    with pytest.raises(RuntimeError, match="ray.init"):
        RayVectorEnv([short_cartpole])


def test_ray_clients_step_as_sync(local_ray):
    env_fns = [short_cartpole] * 4
    envs = RayVectorEnv(env_fns, num_clients=2, num_cpus_per_client=0.5, resources_per_client={"simulator": 1})
    sync = gym.vector.SyncVectorEnv(env_fns)
    try:
        assert envs.address.startswith("tcp://127.0.0.1:") and len(envs.actors) == 2
        rng = np.random.default_rng(0)
        assert_same_steps(envs, sync, (rng.integers(0, 2, size=4) for _ in range(60)), seed=0)
        assert envs.num_clients == 2
        assert sorted({row["client"] for row in envs.stats()}) == ["ray-0", "ray-1"]
        pids = {row["pid"] for row in envs.stats()}
    finally:
        envs.close()
        sync.close()
    wait_until(lambda: not any(pid_alive(pid) for pid in pids), 15, "the actors' processes to end")


def test_a_killed_actor_is_restarted_and_serves_again(local_ray):
    envs = RayVectorEnv(
        [short_cartpole] * 4,
        num_clients=2,
        num_cpus_per_client=0.5,
        max_restarts=2,
        liveness_timeout=2.0,
        connect_timeout=60.0,
        client_kwargs={"liveness_timeout": 2.0},
    )
    try:
        envs.reset(seed=1)
        victim = envs.stats()[0]
        os.kill(victim["pid"], signal.SIGKILL)
        lost = []

        def step():
            _, _, _, truncations, infos = envs.step(envs.action_space.sample())
            if "client_lost" in infos:
                lost.extend(np.flatnonzero(infos["_client_lost"]).tolist())

        step_until(envs, lambda: bool(lost), 30, "the killed client's slots to report client_lost", step=step)
        assert lost == [0, 1]
        step_until(
            envs,
            lambda: all(row["served"] for row in envs.stats()) and envs.num_clients == 2,
            60,
            "Ray to restart the actor and its client to rejoin",
            step=step,
        )
        pids = {row["pid"] for row in envs.stats()}
        assert victim["pid"] not in pids and len(pids) == 2
        restarted = next(
            row for row in envs.stats() if row["pid"] != victim["pid"] and row["client"] == victim["client"]
        )
        assert restarted["slot"] in (0, 1)  # the free slots the lost client left
    finally:
        envs.close()
    wait_until(lambda: not any(pid_alive(pid) for pid in pids), 15, "the actors' processes to end")


def test_the_secret_reaches_the_clients(local_ray):
    envs = RayVectorEnv([short_cartpole] * 2, num_clients=1, num_cpus_per_client=0.5, secret="a secret for this test")
    try:
        observations, _ = envs.reset(seed=0)
        assert observations.shape == (2, 4)
        assert all(row["served"] and row["key"] for row in envs.stats()), envs.stats()  # joined with a CURVE key
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"client_options": [None, {"num_cpu": 1}]},
            ValueError,
            r"client_options\[1\]: unknown key 'num_cpu' \(did you mean 'num_cpus'\?\)",
        ),
        (
            {"client_options": {"max_restarts": 5}},
            ValueError,
            r"client_options \(for every client\): 'max_restarts' is not a per-client",
        ),
        ({"client_options": [{}]}, ValueError, r"client_options has 1 entries, but there are num_clients=2"),
        ({"client_options": [{}, "SPREAD"]}, TypeError, r"client_options\[1\] must be a dict"),
        (
            {"client_options": [{"num_gpus": -1}, None]},
            ValueError,
            r"client_options\[0\]\['num_gpus'\] must be a number >= 0, got -1",
        ),
        (
            {"client_options": [None, {"resources": {"CPU": 1}}]},
            ValueError,
            r"client_options\[1\]\['resources'\]\['CPU'\]: give CPU as num_cpus=",
        ),
        (
            {"client_options": [None, {"scheduling_strategy": "PACK"}]},
            ValueError,
            r"client_options\[1\]\['scheduling_strategy'\] must be 'DEFAULT', 'SPREAD'",
        ),
        ({"client_options": [None, {"runtime_env": "env"}]}, ValueError, r"client_options\[1\]: .*runtime_env"),
        (
            {"resources_per_client": {"simulator": "one"}},
            ValueError,
            r"resources_per_client\['simulator'\] must be a number",
        ),
        (
            {"placement_strategy": "spread"},
            ValueError,
            r"placement_strategy must be one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD",
        ),
        (
            {"placement_strategy": "SPREAD", "client_options": {"scheduling_strategy": "SPREAD"}},
            ValueError,
            r"cannot both be given",
        ),
        (
            {"client_options": [{"resources": {"renderer": 1}}, None]},
            ValueError,
            r"client 0 reserves \{CPU: 1, renderer: 1\}, which no alive node of the cluster has",
        ),
    ],
    ids=[
        "misspelt key",
        "key set by RayVectorEnv",
        "one entry too few",
        "not a dict",
        "negative amount",
        "CPU as a custom resource",
        "no such strategy",
        "Ray's own check",
        "amount not a number",
        "no such placement strategy",
        "strategy and placement group",
        "resource no node has",
    ],
)
def test_bad_client_options_are_refused_up_front_naming_the_client_and_key(local_ray, kwargs, error, message):
    with pytest.raises(error, match=message):
        RayVectorEnv([short_cartpole] * 2, num_clients=2, **kwargs)


def test_a_client_pinned_to_a_node_that_is_not_there_is_refused(local_ray):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nowhere = NodeAffinitySchedulingStrategy("ab" * 28, soft=False)
    with pytest.raises(
        ValueError, match=r"client_options\[0\]\['scheduling_strategy'\]: node 'abab.*' is no alive node"
    ):
        RayVectorEnv([short_cartpole], num_clients=1, client_options=[{"scheduling_strategy": nowhere}])


def test_a_client_ray_cannot_place_makes_reset_raise_soon(local_ray):
    envs = RayVectorEnv(
        [short_cartpole] * 2, num_clients=2, num_cpus_per_client=1.5, placement_timeout=1.0, connect_timeout=60
    )
    try:
        started = time.monotonic()
        with pytest.raises(
            RayPlacementError, match=r"client ray-\d \(not joined yet, reserving \{CPU: 1.5\}\): .*want of room"
        ):
            envs.reset(seed=0)
        assert time.monotonic() - started < 15  # connect_timeout is 60 s
        wait_until(lambda: envs.node_ids().count(None) == 1, 15, "one client to run, the other to stay unplaced")
    finally:
        envs.close()


def test_a_placement_group_ray_cannot_place_is_refused_and_removed(local_ray):
    from ray.util.placement_group import placement_group_table

    started = time.monotonic()
    with pytest.raises(RayPlacementError, match=r"placement group of the 2 clients \(strategy STRICT_SPREAD"):
        RayVectorEnv(
            [short_cartpole] * 2,
            num_clients=2,
            num_cpus_per_client=0.5,
            placement_strategy="STRICT_SPREAD",
            placement_timeout=1.0,
        )
    assert time.monotonic() - started < 15
    wait_until(
        lambda: all(group["state"] == "REMOVED" for group in placement_group_table().values()),
        10,
        "the placement group to be removed",
    )
