"""The conformance probe env (gym_remote/probe.py) is the env docs/CONFORMANCE.md §1 defines."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import gym_remote  # noqa: F401  (registers gym_remote/Probe-v0)
from gym_remote import codec
from gym_remote.probe import PROBE_ENV_ID, ProbeEnv, probe_spaces


def action(direction: int, push: tuple[float, float], pressed: tuple[int, int]):
    return np.int64(direction), np.array(push, dtype=np.float32), np.array(pressed, dtype=np.int8)


def test_spaces_are_the_documented_ones_with_keys_in_their_order():
    observation_space, action_space = probe_spaces()
    assert list(observation_space.spaces) == ["zeta", "alpha", "mid"]
    zeta = observation_space["zeta"]
    assert zeta.dtype == np.float32 and zeta.shape == (2,)
    assert np.all(np.isneginf(zeta.low)) and np.all(np.isposinf(zeta.high))
    assert (observation_space["alpha"].n, observation_space["alpha"].start) == (16, -3)
    multi_discrete, multi_binary = observation_space["mid"].spaces
    assert multi_discrete.nvec.tolist() == [4, 6] and multi_binary.n == 3
    direction, push, pressed = action_space.spaces
    assert (direction.n, direction.start) == (3, -1)
    assert push.dtype == np.float32 and push.low.tolist() == [-1, -1] and push.high.tolist() == [1, 1]
    assert pressed.n == 2


def test_reset_follows_the_seed_stream_and_the_offset_option():
    env = ProbeEnv()
    obs, info = env.reset(seed=1234)
    assert info == {"base": 234, "seeded": True, "offset": 0}
    assert list(info) == ["base", "seeded", "offset"]
    assert obs["zeta"].tolist() == [58.5, -29.25] and obs["zeta"].dtype == np.float32
    assert obs["alpha"] == -3 + 234 % 16
    assert obs["mid"][0].tolist() == [234 % 4, (3 * 234) % 6] and obs["mid"][1].tolist() == [0, 0, 0]
    _, info = env.reset()  # no seed: draw = (234 * 37 + 11) % 1000
    assert info["base"] == (234 * 37 + 11) % 1000 and info["seeded"] is False
    _, info = env.reset(seed=5, options={"offset": 7})
    assert info == {"base": 12, "seeded": True, "offset": 7}
    assert ProbeEnv().reset()[1]["base"] == 11  # a fresh env's stream starts at 0


@pytest.mark.parametrize("offset", [-1, 1000, 2.0, True, "3", np.int64(5), 2**70])
def test_reset_refuses_a_bad_offset(offset):
    with pytest.raises(ValueError, match="offset"):
        ProbeEnv().reset(seed=0, options={"offset": offset})


@pytest.mark.parametrize("options", [None, {}, ["offset"], "offset", ("offset",)])
def test_options_that_are_no_dict_with_an_offset_mean_offset_0(options):
    assert ProbeEnv().reset(seed=3, options=options)[1]["offset"] == 0


def test_np_random_seed_is_the_last_seed_given_and_minus_1_before_any():
    env = gym.make(PROBE_ENV_ID)
    assert env.get_wrapper_attr("np_random_seed") == -1  # not a random seed drawn when asked
    env.reset()
    assert env.get_wrapper_attr("np_random_seed") == -1
    env.reset(seed=17)
    env.reset()  # a reset without a seed keeps it
    assert env.get_wrapper_attr("np_random_seed") == 17


@pytest.mark.parametrize(
    ("direction", "level_change"),
    [
        (np.int64(-1), -1),
        (True, 1),
        (np.float64(0.7), 0),
        (-1.5, -1),
        (np.array([1.0], dtype=np.float32), 1),
        (np.uint8(1), 1),
    ],
)
def test_a_direction_is_converted_as_int_converts_a_number(direction, level_change):
    env = ProbeEnv()
    env.reset(seed=0)
    level = env._level
    env.step((direction, np.zeros(2, dtype=np.float32), np.zeros(2, dtype=np.int8)))
    assert env._level == level + level_change


@pytest.mark.parametrize(
    ("direction", "error"),
    [
        (math.nan, ValueError),
        (math.inf, ValueError),
        (1e19, ValueError),
        (2**63, ValueError),
        (np.uint64(2**63), ValueError),
        ("1", TypeError),
        (b"1", TypeError),
        (None, TypeError),
        ([1, 0], TypeError),
        (np.array([1, 0]), TypeError),
    ],
)
def test_a_direction_that_is_no_64_bit_number_raises_before_the_step_changes_anything(direction, error):
    env = ProbeEnv()
    env.reset(seed=0)
    before = (env._t, env._level, env._zeta.tolist())
    with pytest.raises(error):
        env.step((direction, np.ones(2, dtype=np.float32), np.ones(2, dtype=np.int8)))
    assert (env._t, env._level, env._zeta.tolist()) == before


def test_steps_follow_the_documented_dynamics_and_end_on_the_documented_steps():
    env = ProbeEnv()
    env.reset(seed=3)  # base 3: level 3, term_step 2 + 3 % 5 = 5
    obs, reward, terminated, truncated, info = env.step(action(1, (0.5, -1.0), (1, 0)))
    assert obs["zeta"].tolist() == [0.75 + 0.25, -0.375 - 0.5]
    assert reward == 4.25 and type(reward) is float
    assert (terminated, truncated) == (False, False)
    assert obs["mid"][1].tolist() == [1, 0, (3 + 1) % 2]
    for _ in range(3):
        _, _, terminated, truncated, _ = env.step(action(0, (0, 0), (0, 0)))
        assert not (terminated or truncated)
    _, _, terminated, truncated, _ = env.step(action(0, (0, 0), (0, 0)))
    assert (terminated, truncated) == (True, True)  # term_step 5 is also the truncation step
    env.reset(seed=0)  # term_step 2
    env.step(action(0, (0, 0), (0, 0)))
    assert env.step(action(0, (0, 0), (0, 0)))[2:4] == (True, False)


def test_float32_arithmetic_is_float32_whatever_dtype_the_push_arrives_in():
    as32, as64 = ProbeEnv(), ProbeEnv()
    as32.reset(seed=1)
    as64.reset(seed=1)
    push = np.array([0.1, 1 / 3], dtype=np.float32)
    for _ in range(4):
        obs32 = as32.step((0, push, np.zeros(2, np.int8)))[0]
        obs64 = as64.step((0, push.astype(np.float64), np.zeros(2, np.int8)))[0]
    assert obs32["zeta"].dtype == obs64["zeta"].dtype == np.float32
    assert obs32["zeta"].tobytes() == obs64["zeta"].tobytes()


def test_step_infos_have_every_documented_type_in_order():
    env = ProbeEnv()
    env.reset(seed=0)
    *_, info = env.step(action(0, (0, 0), (0, 0)))
    assert list(info) == [
        "t", "half", "even", "level", "quarter", "vec", "pair", "items", "none", "nan", "blob", "name", "odd",
    ]  # fmt: skip
    assert type(info["t"]) is int and type(info["half"]) is float and type(info["even"]) is bool
    assert type(info["level"]) is np.int32 and type(info["quarter"]) is np.float32
    assert info["vec"].dtype == np.int16 and info["vec"].tolist() == [1, -1]
    assert info["pair"] == (1, "x") and info["items"] == [2**64 + 1, None, 1.5]
    assert info["none"] is None and math.isnan(info["nan"]) and info["blob"] == b"\x01\x00\xff"
    assert info["name"] == "probé" and info["odd"] == {"t": 1, "inf": math.inf}
    *_, info = env.step(action(0, (0, 0), (0, 0)))
    assert "odd" not in info and info["half"] == 1.0 and type(info["half"]) is float


def test_the_documented_encodings_of_a_step_info():
    env = ProbeEnv()
    env.reset(seed=0)
    *_, info = env.step(action(0, (0, 0), (0, 0)))
    body, buffers = codec.encode(info)
    assert body.decode() == (
        '{"t":1,"half":0.5,"even":false,"level":["s","<i4",0],"quarter":["s","<f4",0.25],'
        '"vec":["a","<i2",[2],0],"pair":["t",1,"x"],"items":["l",["i","10000000000000001"],null,1.5],'
        '"none":null,"nan":["f","nan"],"blob":["b",1],"name":"prob\\u00e9","odd":{"t":1,"inf":["f","inf"]}}'
    )
    assert [bytes(buffer) for buffer in buffers] == [b"\x01\x00\xff\xff", b"\x01\x00\xff"]


def test_registered_id_makes_the_probe_whose_values_stay_in_its_spaces():
    env = gym.make(PROBE_ENV_ID)
    assert isinstance(env.unwrapped, ProbeEnv)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    for _ in range(40):
        assert env.observation_space.contains(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    assert env.unwrapped.render() is None
    assert ProbeEnv(render_mode="ansi").render() == "t=0 base=0"
    with pytest.raises(ValueError, match="render_mode"):
        ProbeEnv(render_mode="human")
