"""Gymnasium's vector wrappers on a RemoteVectorEnv give what they give on a SyncVectorEnv."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import vector as vector_wrappers

from gym_remote import RemoteVectorEnv
from tests.envs import make_cartpole
from tests.helpers import assert_same_steps

short_cartpole = functools.partial(make_cartpole, max_episode_steps=60)
"""CartPole-v1 truncated after 60 steps."""


def wrap(envs: gym.vector.VectorEnv) -> tuple[gym.vector.VectorEnv, vector_wrappers.RecordEpisodeStatistics]:
    recorder = vector_wrappers.RecordEpisodeStatistics(envs)
    envs = vector_wrappers.NormalizeObservation(recorder)
    envs = vector_wrappers.NormalizeReward(envs)
    return vector_wrappers.TransformReward(envs, lambda rewards: 2.0 * rewards), recorder


@pytest.mark.parametrize("num_clients", [1, 3])
def test_wrapped_remote_matches_wrapped_sync(num_clients):
    env_fns = [short_cartpole for _ in range(6)]
    sync, sync_recorder = wrap(gym.vector.SyncVectorEnv(env_fns))
    remote, remote_recorder = wrap(RemoteVectorEnv(env_fns, num_clients=num_clients))
    try:
        assert remote.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert remote.observation_space == sync.observation_space
        rng = np.random.default_rng(7)
        episodes = assert_same_steps(remote, sync, (rng.integers(0, 2, size=6) for _ in range(300)), seed=7)
        assert episodes > 6  # both kinds of episode end happened: falls and the 60-step limit
        assert len(remote_recorder.return_queue) == episodes
        assert list(remote_recorder.return_queue) == list(sync_recorder.return_queue)
        assert list(remote_recorder.length_queue) == list(sync_recorder.length_queue)
    finally:
        remote.close()
        sync.close()


def make_pendulum():
    return gym.make("Pendulum-v1", max_episode_steps=40)


def wrap_actions_and_observations(envs: gym.vector.VectorEnv) -> gym.vector.VectorEnv:
    envs = vector_wrappers.RescaleAction(envs, min_action=np.float32(-1), max_action=np.float32(1))
    envs = vector_wrappers.ClipAction(envs)  # clips to [-1, 1], which is rescaled to Pendulum's [-2, 2]
    return vector_wrappers.TransformObservation(envs, lambda observations: 2.0 * observations + 1.0)


def test_action_and_observation_wrappers_match_sync():
    env_fns = [make_pendulum for _ in range(3)]
    sync = wrap_actions_and_observations(gym.vector.SyncVectorEnv(env_fns))
    remote = wrap_actions_and_observations(RemoteVectorEnv(env_fns, num_clients=2))
    try:
        assert remote.action_space == sync.action_space
        rng = np.random.default_rng(4)
        # some actions out of [-1, 1]: clipped
        actions = (rng.uniform(-1.5, 1.5, size=(3, 1)).astype(np.float32) for _ in range(90))
        assert_same_steps(remote, sync, actions, seed=4)
    finally:
        remote.close()
        sync.close()
