"""final_info_format="legacy": infos laid out as Gymnasium 0.29's SyncVectorEnv laid them out, for old scripts.

The reference is Gymnasium 0.29's stepping, written out below over single envs: after an episode
ends the env is reset in the same step, the reset's info gets ``final_observation`` and
``final_info``, and every key is batched without descending into dicts.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics

from gym_remote import RemoteVectorEnv
from tests.envs import space_env
from tests.test_equivalence import WALL_CLOCK, assert_same

pytestmark = pytest.mark.timeout(60)


def batch_info_as_gymnasium_029(infos: dict, info: dict, index: int, num_envs: int) -> None:
    for key in info:
        if key not in infos:
            numeric = type(info[key]) in [int, float, bool] or issubclass(type(info[key]), np.number)
            infos[key] = np.zeros(num_envs, dtype=type(info[key])) if numeric else np.array([None] * num_envs)
            infos["_" + key] = np.zeros(num_envs, dtype=bool)
        infos[key][index] = info[key]
        infos["_" + key][index] = True


def step_as_gymnasium_029(envs: list[gym.Env], actions) -> tuple:
    observations, rewards, terminateds, truncateds, infos = [], [], [], [], {}
    for index, (env, action) in enumerate(zip(envs, actions)):
        observation, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            final_observation, final_info = observation, info
            observation, info = env.reset()
            info["final_observation"] = final_observation
            info["final_info"] = final_info
        observations.append(observation)
        rewards.append(reward)
        terminateds.append(terminated)
        truncateds.append(truncated)
        batch_info_as_gymnasium_029(infos, info, index, len(envs))
    return np.stack(observations), np.array(rewards, np.float64), np.array(terminateds), np.array(truncateds), infos


def make_recorded_cartpole() -> gym.Env:
    return RecordEpisodeStatistics(gym.make("CartPole-v1", max_episode_steps=20))


@pytest.mark.parametrize(
    "env_fns",
    [
        [functools.partial(space_env, env_id=index, max_steps=6, terminate_prob=0.1) for index in range(4)],
        [make_recorded_cartpole] * 3,
    ],
    ids=["rich infos", "CartPole with RecordEpisodeStatistics"],
)
@pytest.mark.parametrize("num_clients", [1, 2])
def test_legacy_layout_as_gymnasium_029(env_fns, num_clients):
    reference = [make() for make in env_fns]
    remote = RemoteVectorEnv(env_fns, num_clients=num_clients, autoreset_mode="SameStep", final_info_format="legacy")
    try:
        remote.reset(seed=9)
        for index, env in enumerate(reference):
            env.reset(seed=9 + index)
        remote.action_space.seed(9)
        episodes = 0
        for step in range(60):
            actions = remote.action_space.sample()
            expected = step_as_gymnasium_029(reference, actions)
            got = remote.step(actions)
            assert_same(expected[0], got[0], f"step {step} observations")
            assert_same(expected[4], got[4], f"step {step} infos", loose=WALL_CLOCK)
            np.testing.assert_array_equal(got[1], expected[1])
            np.testing.assert_array_equal(got[2], expected[2])
            np.testing.assert_array_equal(got[3], expected[3])
            # an old CleanRL loop over the episodes that ended
            if "final_info" in got[4]:
                for info in got[4]["final_info"]:
                    if info and "episode" in info:
                        assert info["episode"]["l"] >= 1
                        episodes += 1
        if "CartPole" in repr(reference[0]):
            assert episodes >= 3
    finally:
        remote.close()
        for env in reference:
            env.close()


def test_legacy_layout_needs_same_step_autoreset():
    with pytest.raises(ValueError, match="SameStep"):
        RemoteVectorEnv(num_envs=2, final_info_format="legacy")
    with pytest.raises(ValueError, match="'gymnasium' or 'legacy'"):
        RemoteVectorEnv(num_envs=2, autoreset_mode="SameStep", final_info_format="0.29")
