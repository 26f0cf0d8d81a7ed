"""Stable-Baselines3 through gym_remote.sb3.RemoteVecEnv: what DummyVecEnv gives, and SB3's own
algorithms, wrappers and helpers running on it (real SB3, torch limited to one thread)."""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array
from gymnasium.wrappers import TimeLimit
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecMonitor, VecNormalize

from gym_remote import RemoteVectorEnv
from gym_remote.errors import RemoteEnvError
from gym_remote.sb3 import RemoteVecEnv
from tests.envs import SeedOnlyResetEnv, make_attribute_wrapped_env, make_cartpole, space_env
from tests.helpers import kill_local_clients, pid_alive, wait_until
from tests.test_equivalence import WALL_CLOCK, assert_same

torch.set_num_threads(1)  # OMP_NUM_THREADS=1 is set in conftest.py
pytestmark = pytest.mark.timeout(120)


def space_envs(count: int, **kwargs: Any) -> list[Callable[[], gym.Env]]:
    return [functools.partial(space_env, env_id=index, **kwargs) for index in range(count)]


def attribute_wrapped_envs(count: int) -> list[Callable[[], gym.Env]]:
    return [functools.partial(make_attribute_wrapped_env, env_id=index) for index in range(count)]


short_cartpole = functools.partial(make_cartpole, max_episode_steps=25)
"""CartPole-v1 truncated after 25 steps: short runs see both kinds of episode end."""


def make_monitored_cartpole() -> gym.Env:
    return Monitor(gym.make("CartPole-v1", max_episode_steps=40))


def make_pendulum() -> gym.Env:
    return gym.make("Pendulum-v1", max_episode_steps=30)


@pytest.fixture
def adapters():
    """Makes RemoteVecEnvs and closes them all after the test."""
    made: list[RemoteVecEnv] = []

    def make(*args: Any, **kwargs: Any) -> RemoteVecEnv:
        made.append(RemoteVecEnv(*args, **kwargs))
        return made[-1]

    yield make
    for venv in made:
        venv.close()


def run_side_by_side(dummy, remote, steps: int, seed: int = 0) -> None:
    """Seed, reset and step both with the same random actions; every return and ``reset_infos`` must match."""
    dummy.seed(seed)
    remote.seed(seed)
    assert_same(dummy.reset(), remote.reset(), "reset obs")
    assert_same(dummy.reset_infos, remote.reset_infos, "reset_infos after reset")
    dummy.action_space.seed(seed)
    for step in range(steps):
        actions = np.stack([dummy.action_space.sample() for _ in range(dummy.num_envs)])
        expected, got = dummy.step(actions), remote.step(actions)
        for info in expected[3]:  # DummyVecEnv passes on the env's own type (bool or numpy.bool)
            info["TimeLimit.truncated"] = bool(info["TimeLimit.truncated"])
        assert_same(expected, got, f"step {step}", loose=WALL_CLOCK)
        assert_same(dummy.reset_infos, remote.reset_infos, f"reset_infos at step {step}")


@pytest.mark.parametrize("observation_space", ["box_f32", "dict"])
@pytest.mark.parametrize("num_clients", [1, 3])
def test_steps_as_dummy_vec_env(adapters, observation_space, num_clients):
    env_fns = space_envs(4, observation_space=observation_space, max_steps=7, terminate_prob=0.1)
    dummy = DummyVecEnv(env_fns)
    try:
        run_side_by_side(dummy, adapters(env_fns, num_clients=num_clients), steps=40)
    finally:
        dummy.close()


def test_cartpole_time_limits_as_dummy_vec_env(adapters):
    dummy = DummyVecEnv([short_cartpole] * 3)
    remote = adapters([short_cartpole] * 3, num_clients=2)
    try:
        run_side_by_side(dummy, remote, steps=120, seed=5)
    finally:
        dummy.close()


def test_reset_options_per_env_as_dummy_vec_env(adapters):
    env_fns = space_envs(4, info_kind="sparse")
    dummy, remote = DummyVecEnv(env_fns), adapters(env_fns, num_clients=2)
    try:
        for venv in (dummy, remote):
            venv.seed(3)
            venv.set_options([{"level": 1}, {}, {"level": 1}, {"level": 2}])
        assert_same(dummy.reset(), remote.reset(), "reset obs")
        assert_same(dummy.reset_infos, remote.reset_infos, "reset_infos")
        assert [info.get("options") for info in remote.reset_infos] == [{"level": 1}, None, {"level": 1}, {"level": 2}]
        # options and seeds are used once
        assert_same(dummy.reset(), remote.reset(), "second reset obs")
        assert all("options" not in info for info in remote.reset_infos)
    finally:
        dummy.close()


def test_attributes_and_methods_reach_only_the_envs_of_indices(adapters):
    env_fns = space_envs(4)
    dummy, remote = DummyVecEnv(env_fns), adapters(env_fns, num_clients=2)
    try:
        for venv in (dummy, remote):
            venv.seed(1)
            venv.reset()
            venv.set_attr("scale", 3.0, indices=[1, 2])
            venv.set_attr("custom_attr", ["a", "list"], indices=2)
        for venv_call in (
            lambda venv: venv.get_attr("scale"),
            lambda venv: venv.get_attr("custom_attr", indices=[2, 0]),
            lambda venv: venv.env_method("scaled", 2.0, factor=0.5),
            lambda venv: venv.env_method("describe", verbose=True, indices=[3, 1]),
            lambda venv: venv.env_method("reset", seed=9, indices=[2]),
            lambda venv: venv.get_attr("steps"),
        ):
            assert_same(venv_call(dummy), venv_call(remote), "call")
        assert remote.get_attr("scale") == [1.0, 3.0, 3.0, 1.0]
        assert remote.has_attr("custom_attr") and not remote.has_attr("no_such_attribute")
    finally:
        dummy.close()


def test_env_is_wrapped(adapters):
    remote = adapters([make_monitored_cartpole, short_cartpole], num_clients=2)
    assert remote.env_is_wrapped(Monitor) == [True, False]
    assert remote.env_is_wrapped(TimeLimit) == [True, True]
    assert remote.env_is_wrapped(gym.Wrapper, indices=[1]) == [True]  # a base class of every wrapper
    assert remote.env_is_wrapped(VecMonitor) == [False, False]  # not an env wrapper at all


def test_images_and_render_mode(adapters):
    remote = adapters(space_envs(3, render_mode="rgb_array"), num_clients=1)
    remote.reset()
    assert remote.render_mode == "rgb_array"
    images = remote.get_images()
    assert [image.shape for image in images] == [(4, 5, 3)] * 3
    assert [int(image[0, 0, 1]) for image in images] == [0, 1, 2]
    assert remote.render().shape[-1] == 3  # SB3 tiles the images
    plain = adapters(space_envs(2), num_clients=1)
    with pytest.warns(UserWarning, match="render mode"):
        assert plain.get_images() == [None, None]


def test_wraps_a_remote_vector_env_built_elsewhere(adapters):
    envs = RemoteVectorEnv([short_cartpole] * 2, num_clients=1, autoreset_mode="SameStep")
    remote = adapters(envs=envs)
    assert remote.reset().shape == (2, 4)
    remote.close()
    assert envs.closed


def test_refuses_what_sb3_cannot_use():
    envs = RemoteVectorEnv([short_cartpole] * 2, num_clients=1)  # NEXT_STEP
    try:
        with pytest.raises(ValueError, match="SameStep"):
            RemoteVecEnv(envs=envs)
        with pytest.raises(ValueError, match="not both"):
            RemoteVecEnv([short_cartpole], envs=envs)
        with pytest.raises(ValueError, match="built already"):
            RemoteVecEnv(envs=envs, num_clients=2)
    finally:
        envs.close()
    with pytest.raises(ValueError, match="not neither"):
        RemoteVecEnv()


def _as_int(indices: Callable[[], Any]) -> int:
    return int(indices())


def test_indices_take_every_form_dummy_vec_env_takes(adapters):
    env_fns = space_envs(4)
    dummy, remote = DummyVecEnv(env_fns), adapters(env_fns, num_clients=2)
    forms = {
        "None": lambda: None,
        "an int": lambda: 2,
        "a negative int": lambda: -1,
        "a numpy integer": lambda: np.int64(1),
        "a list of numpy and negative ints": lambda: [np.int32(3), -4],
        "a range": lambda: range(1, 3),
        "a tuple": lambda: (0, 2),
        "a numpy array": lambda: np.array([3, 1]),
        "a generator": lambda: (index for index in (2, 0)),
        "an empty list": lambda: [],
        "repeats": lambda: [1, 3, 1, -3, 0],  # env 1 three times
    }
    calls = {
        "get_attr": lambda venv, indices: venv.get_attr("env_id", indices=indices),
        "env_method": lambda venv, indices: venv.env_method("reset", indices=indices),  # once per mention
        "env_is_wrapped": lambda venv, indices: venv.env_is_wrapped(gym.Wrapper, indices=indices),
    }
    try:
        for venv in (dummy, remote):
            venv.seed(2)
            venv.reset()
        for number, (form, indices) in enumerate(forms.items()):
            # DummyVecEnv takes only a Python int as one index (it would iterate a numpy integer)
            dummy_indices = functools.partial(_as_int, indices) if form == "a numpy integer" else indices
            for name, call in calls.items():
                assert_same(call(dummy, dummy_indices()), call(remote, indices()), f"{name} with {form}")
            dummy.set_attr("scale", float(number), indices=dummy_indices())
            remote.set_attr("scale", float(number), indices=indices())
            assert_same(dummy.get_attr("scale"), remote.get_attr("scale"), f"scale after set_attr with {form}")
        assert_same(dummy.get_attr("episodes"), remote.get_attr("episodes"), "episodes")
        # env 1: reset(), then None, a numpy integer, a range, a numpy array, and three times in repeats
        assert remote.get_attr("episodes", indices=[1]) == [1 + 4 + 3]
        for indices in (4, -5, [0, 4], range(3, 6)):
            for venv in (dummy, remote):
                for call in calls.values():
                    with pytest.raises(IndexError):
                        call(venv, indices)
                with pytest.raises(IndexError):
                    venv.set_attr("scale", 9.0, indices=indices)
        assert_same(dummy.get_attr("scale"), remote.get_attr("scale"), "scale after set_attr out of range")
    finally:
        dummy.close()


@pytest.mark.parametrize("action_space", ["discrete", "box", "dict", "tuple"])
def test_actions_as_dummy_vec_env_indexes_them(adapters, action_space):
    """Per-env actions (actions[i] for env i, extras ignored) or Gymnasium's batched form, in turn."""
    env_fns = space_envs(3, action_space=action_space, info_kind="sparse", max_steps=5)
    dummy, remote = DummyVecEnv(env_fns), adapters(env_fns, num_clients=2)
    space = dummy.action_space
    container = isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))
    try:
        for venv in (dummy, remote):
            venv.seed(4)
        assert_same(dummy.reset(), remote.reset(), "reset")
        space.seed(4)
        for step in range(12):
            per_env = [space.sample() for _ in range(dummy.num_envs + 1)]  # one action too many
            if step % 3 == 0:
                actions = per_env
            elif step % 3 == 1:
                actions = tuple(per_env)  # for a Tuple space too: not len(space.spaces) entries
            elif container:
                actions = concatenate(space, per_env[:3], create_empty_array(space, 3))
            else:
                actions = np.stack(per_env)
            expected, got = dummy.step(per_env), remote.step(actions)
            for info in expected[3]:
                info["TimeLimit.truncated"] = bool(info["TimeLimit.truncated"])
            assert_same(expected, got, f"step {step}")
            assert_same(dummy.reset_infos, remote.reset_infos, f"reset_infos at step {step}")
    finally:
        dummy.close()


def test_reset_without_options_leaves_out_the_keyword(adapters):
    env_fns = [SeedOnlyResetEnv] * 3  # reset(self, seed=None): no options parameter
    dummy = DummyVecEnv(env_fns)
    try:
        run_side_by_side(dummy, adapters(env_fns, num_clients=2), steps=12, seed=7)
    finally:
        dummy.close()
    envs = RemoteVectorEnv(env_fns, num_clients=1)
    try:  # Gymnasium's face passes options=None, as SyncVectorEnv does
        with pytest.raises(TypeError, match="options"):
            envs.reset(seed=3)
    finally:
        envs.close()


def test_replacement_of_a_lost_client_resets_without_the_options_keyword():
    """The reset of a replacement client is an autoreset: no options keyword, as for envs without one."""
    venv = RemoteVecEnv([SeedOnlyResetEnv] * 2, num_clients=2, liveness_timeout=2.0)
    pids = list(venv.envs._launcher.pids)
    try:
        venv.reset()
        venv.step(np.zeros(2, dtype=np.int64))
        os.kill(pids[1], signal.SIGKILL)
        wait_until(lambda: not pid_alive(pids[1]), 10, "the killed client to die")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the step that reports the loss resets the replacement
            _, _, dones, infos = venv.step(np.zeros(2, dtype=np.int64))
            if infos[1].get("client_lost"):
                break
        assert infos[1].get("client_lost") and dones[1] and infos[1]["TimeLimit.truncated"] is True
        for _ in range(3):
            venv.step(np.ones(2, dtype=np.int64))
        assert venv.get_attr("steps")[1] >= 1
    finally:
        venv.close()
        kill_local_clients(pids)


def test_has_attr_looks_without_calling(adapters):
    env_fns = attribute_wrapped_envs(3)
    dummy, remote = DummyVecEnv(env_fns), adapters(env_fns, num_clients=2)
    try:
        for venv in (dummy, remote):
            venv.seed(0)
            venv.reset()
            venv.set_attr("partial", 1, indices=[0, 2])
        # a method (reset resets), one with required arguments, attributes of the inner env and of the
        # wrapper, one only some envs have, one none has
        names = ["reset", "scaled", "custom_attr", "own_attr", "partial", "no_such_attribute"]
        assert [remote.has_attr(name) for name in names] == [dummy.has_attr(name) for name in names]
        assert [remote.has_attr(name) for name in names] == [True, True, True, True, False, False]
        assert remote.get_attr("episodes") == dummy.get_attr("episodes") == [1, 1, 1]
        with pytest.raises(RemoteEnvError, match="unknown CALL query"):
            remote.envs._call_command([0], {"name": "scale", "query": "no such query"}, "an unknown query")
    finally:
        dummy.close()


def test_set_attr_sets_the_outermost_wrapper_as_dummy_vec_env(adapters):
    env_fns = attribute_wrapped_envs(3)  # the inner env has `scale`, its wrapper has not
    dummy, remote = DummyVecEnv(env_fns), adapters(env_fns, num_clients=2)
    try:
        for venv in (dummy, remote):
            venv.seed(0)
            venv.reset()
            venv.set_attr("scale", 3.0, indices=[0, 2])
        for what, venv_call in (
            ("the wrapper's own scale", lambda venv: venv.env_method("own_attr", "scale")),
            ("the inner env's scale", lambda venv: venv.env_method("describe")),
            ("get_attr", lambda venv: venv.get_attr("scale")),
            ("a method reading the inner env's scale", lambda venv: venv.env_method("scaled", 1.0)),
        ):
            assert_same(venv_call(dummy), venv_call(remote), what)
        assert remote.env_method("own_attr", "scale") == [3.0, None, 3.0]
        assert [described["scale"] for described in remote.env_method("describe")] == [1.0, 1.0, 1.0]
    finally:
        dummy.close()
    # RemoteVectorEnv.set_attr keeps Gymnasium's semantics: through the wrappers, onto the inner env
    sync, envs = SyncVectorEnv(env_fns), RemoteVectorEnv(env_fns, num_clients=1)
    try:
        for venv in (sync, envs):
            venv.set_attr("scale", 2.0)
        assert_same(sync.call("own_attr", "scale"), envs.call("own_attr", "scale"), "the wrapper's own scale")
        assert_same(sync.call("describe"), envs.call("describe"), "the inner env's scale")
        assert envs.call("own_attr", "scale") == (None, None, None)
    finally:
        sync.close()
        envs.close()


# -- SB3's algorithms, wrappers and helpers ---------------------------------------------------------


def test_ppo_learns_and_evaluate_policy_runs(adapters):
    # no VecMonitor: SB3 finds the clients' Monitor wrappers through env_is_wrapped
    venv = adapters([make_monitored_cartpole] * 4, num_clients=2)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=512)
    assert model.num_timesteps >= 512
    mean_reward, std_reward = evaluate_policy(model, venv, n_eval_episodes=4, warn=False)
    assert 0 < mean_reward <= 40 and std_reward >= 0


def test_dqn_learns(adapters):
    venv = adapters([short_cartpole] * 2, num_clients=1)
    model = DQN("MlpPolicy", venv, learning_starts=64, buffer_size=2_000, train_freq=4, seed=0, device="cpu")
    model.learn(total_timesteps=300)
    assert model.num_timesteps >= 300 and model.replay_buffer.size() > 0


def test_sac_learns_with_box_actions(adapters):
    venv = adapters([make_pendulum] * 2, num_clients=2)
    model = SAC("MlpPolicy", venv, learning_starts=40, buffer_size=2_000, batch_size=32, seed=0, device="cpu")
    model.learn(total_timesteps=120)
    assert model.num_timesteps >= 120
    # the replay buffer holds the terminal observations of the episodes that ended (time limit 30)
    assert model.replay_buffer.size() > 0


def test_vec_normalize_and_frame_stack_as_on_dummy_vec_env(adapters):
    def wrap(venv):
        return VecFrameStack(VecNormalize(VecMonitor(venv), gamma=0.9), n_stack=3)

    dummy = wrap(DummyVecEnv([short_cartpole] * 3))
    remote = wrap(adapters([short_cartpole] * 3, num_clients=3))
    try:
        run_side_by_side(dummy, remote, steps=60, seed=11)
    finally:
        dummy.close()


def test_the_fleet_callback_writes_the_fleets_figures_to_tensorboard_during_a_ppo_run(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from gym_remote.sb3 import FleetCallback

    venv = VecMonitor(RemoteVecEnv([make_cartpole] * 2, num_clients=1))
    try:
        model = PPO("MlpPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0, tensorboard_log=str(tmp_path))
        model.learn(total_timesteps=768, callback=FleetCallback())
    finally:
        venv.close()
    (run,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    events = event_accumulator.EventAccumulator(str(run))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"fleet/served", "fleet/env_steps_per_second", "fleet/lost", "fleet/step_latency_median_ms"} <= tags, tags
    assert "rollout/ep_rew_mean" in tags  # next to the training curves
    served = [event.value for event in events.Scalars("fleet/served")]
    assert len(served) == 3 and set(served) == {2.0}, served
    assert [event.value for event in events.Scalars("fleet/lost")] == [0.0] * 3
    assert events.Scalars("fleet/episodes")[-1].value > 0
