"""Values that cannot travel without pickle: clear errors that name them, and nothing half done."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

from gym_remote import EncodeError, RemoteEnvError, RemoteVectorEnv


class Opaque:
    """A user type the safe encoding does not know."""


class OpaqueInfoEnv(gym.Wrapper):
    """CartPole whose info holds an :class:`Opaque` on the step given."""

    def __init__(self, on_step: int) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.on_step = on_step
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.on_step:
            info = {**info, "stats": [1, Opaque()]}
        return obs, reward, terminated, truncated, info


def cartpole():
    return gym.make("CartPole-v1")


def test_unencodable_action_is_refused_before_any_env_steps():
    env_fns = [cartpole for _ in range(4)]
    remote = RemoteVectorEnv(env_fns, num_clients=2, allow_pickle=False)
    sync = gym.vector.SyncVectorEnv(env_fns)
    try:
        assert data_equivalence(remote.reset(seed=3), sync.reset(seed=3), exact=True)
        with pytest.raises(EncodeError, match=r"the action for slot 3: values of type .*Opaque cannot travel"):
            remote.step([0, 1, 0, Opaque()])  # slot 3's value fails: no client may have stepped
        for actions in ([1, 0, 1, 0], np.array([0, 0, 1, 1])):
            assert data_equivalence(remote.step(actions), sync.step(actions), exact=True)
    finally:
        remote.close()
        sync.close()


def test_unencodable_reset_option_names_it():
    remote = RemoteVectorEnv([cartpole, cartpole], num_clients=1, allow_pickle=False)
    try:
        with pytest.raises(EncodeError, match=r"reset options\['curriculum'\].*Opaque"):
            remote.reset(seed=0, options={"curriculum": Opaque()})
        obs, _ = remote.reset(seed=0)
        assert obs.shape == (2, 4)
    finally:
        remote.close()


def test_unencodable_info_fails_the_step_with_its_place_and_slot():
    remote = RemoteVectorEnv([cartpole, lambda: OpaqueInfoEnv(on_step=2)], num_clients=2, allow_pickle=False)
    try:
        remote.reset(seed=0)
        remote.step(np.array([0, 0]))
        expected = r"step failed in slot 1 .*the info of slot 1\['stats'\]\[1\]: .*Opaque"
        with pytest.raises(RemoteEnvError, match=expected) as raised:
            remote.step(np.array([0, 0]))
        assert raised.value.remote_type == "EncodeError"
        remote.reset(seed=1)  # usable again
        remote.step(np.array([1, 1]))
    finally:
        remote.close()


def test_an_unencodable_info_in_partial_batches_costs_no_other_slot_of_its_command_its_result():
    fns = [lambda: OpaqueInfoEnv(on_step=1), cartpole]  # one client: one command for both slots
    remote = RemoteVectorEnv(fns, num_clients=1, batch_size=1, allow_pickle=False)
    twin = cartpole()
    try:
        remote.async_reset(seed=0)
        returned = {}
        for _ in range(2):
            obs, *_, infos = remote.recv()
            returned[int(infos["env_id"][0])] = obs[0]
        assert data_equivalence(returned[1], twin.reset(seed=1)[0])  # (async_reset seeds slot s with seed + s)
        remote.send(np.array([0, 1]), [0, 1])
        with pytest.raises(RemoteEnvError, match=r"step failed in slot 0 .*the info of slot 0\['stats'\]") as raised:
            remote.recv()
        assert raised.value.remote_type == "EncodeError" and raised.value.slot == 0
        obs, rewards, _, _, infos = remote.recv()  # slot 1 was stepped, and its result came
        assert infos["env_id"].tolist() == [1]
        assert data_equivalence(obs[0], twin.step(1)[0])
        remote.send(np.array([0]), [0])  # slot 0 takes actions again
        assert remote.recv()[4]["env_id"].tolist() == [0]
    finally:
        remote.close()


def test_trusted_local_clients_pickle_what_the_safe_encoding_cannot():
    remote = RemoteVectorEnv([cartpole, lambda: OpaqueInfoEnv(on_step=1)], num_clients=2)
    try:
        remote.reset(seed=0)
        _, _, _, _, infos = remote.step(np.array([0, 0]))
        assert isinstance(infos["stats"][1][1], Opaque) and infos["_stats"].tolist() == [False, True]
        generators = remote.np_random
        assert all(isinstance(generator, np.random.Generator) for generator in generators)
    finally:
        remote.close()
