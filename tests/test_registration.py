"""``gym.make_vec("gym_remote/RemoteVectorEnv-v0", ...)``: a RemoteVectorEnv that steps as make_vec's SyncVectorEnv."""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from gym_remote import REMOTE_VECTOR_ENV_ID, RemoteVectorEnv
from tests.helpers import assert_same_steps, child_pids, is_local_client

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("autoreset_mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_make_vec_steps_as_sync(autoreset_mode):
    env_kwargs = {"max_episode_steps": 30}
    remote = gym.make_vec(
        REMOTE_VECTOR_ENV_ID,
        num_envs=4,
        env_id="CartPole-v1",
        env_kwargs=env_kwargs,
        num_clients=2,
        autoreset_mode=autoreset_mode,
    )
    sync = gym.make_vec(
        "CartPole-v1",
        num_envs=4,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": autoreset_mode},
        **env_kwargs,
    )
    try:
        assert isinstance(remote, RemoteVectorEnv) and remote.autoreset_mode is autoreset_mode
        assert remote.spec.id == REMOTE_VECTOR_ENV_ID
        assert remote.spec.kwargs["env_id"] == "CartPole-v1" and remote.spec.kwargs["num_envs"] == 4
        assert remote.single_observation_space == sync.single_observation_space
        rng = np.random.default_rng(3)
        ended = assert_same_steps(remote, sync, (rng.integers(0, 2, size=4) for _ in range(80)), seed=3)
        assert ended > 4
    finally:
        remote.close()
        sync.close()


def test_make_vec_without_env_id_is_a_server_for_remote_clients():
    envs = gym.make_vec(REMOTE_VECTOR_ENV_ID, num_envs=3, bind="tcp://127.0.0.1:*", connect_timeout=5)
    try:
        assert isinstance(envs, RemoteVectorEnv) and envs.num_envs == 3 and envs.num_clients == 0
        assert envs.address.startswith("tcp://127.0.0.1:")
    finally:
        envs.close()
    with pytest.raises(ValueError, match="env_kwargs are for env_id"):
        gym.make_vec(REMOTE_VECTOR_ENV_ID, num_envs=2, env_kwargs={"max_episode_steps": 5})


@pytest.mark.parametrize("autoreset_mode", [AutoresetMode.SAME_STEP, "Disabled"])
def test_make_vec_refuses_another_autoreset_mode_when_rllib_builds_it(autoreset_mode):
    """RLlib samples assuming next-step autoreset (tests/rllib runs the real thing). The check knows RLlib by its
    callers' modules, so a function of a module named as RLlib's env runner stands in for it here."""
    runner = types.ModuleType("ray.rllib.env.stand_in_env_runner")
    exec("import gymnasium as gym\ndef make_env(**kwargs):\n    return gym.make_vec(**kwargs)\n", runner.__dict__)
    before = child_pids(is_local_client)
    with pytest.raises(ValueError) as refused:
        runner.make_env(id=REMOTE_VECTOR_ENV_ID, num_envs=2, env_id="CartPole-v1", autoreset_mode=autoreset_mode)
    mode = AutoresetMode(autoreset_mode).value
    assert str(refused.value).startswith(
        f"RLlib (ray.rllib.env.stand_in_env_runner) is building a RemoteVectorEnv with autoreset_mode='{mode}'"
    )
    assert "pass autoreset_mode='NextStep'" in str(refused.value)
    assert child_pids(is_local_client) == before  # refused before any client started
