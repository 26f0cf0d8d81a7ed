"""The test suite's envs and env factories (``tests.envs``), shared by every test module.

Everything here and in the submodules is module level, so ``cloudpickle`` ships the env functions to
the client processes by reference (the clients get the parent's ``sys.path``), and every factory
works as ``gym-remote client ... --factory tests.envs[.SUBMODULE]:NAME``.

This module holds what many tests use:

* :func:`make_cartpole` builds the real ``CartPole-v1`` (optionally with ``RecordEpisodeStatistics``;
  keyword arguments such as ``max_episode_steps`` go to ``gym.make``).
* :func:`make_space` builds a named space from :data:`SPACES` (every space Gymnasium ships, and nestings).
* :class:`SpaceEnv` is one generic env: it samples observations from its (seeded) observation space,
  draws rewards, terminations and truncations from ``self.np_random`` and reports infos of many exact
  types (see :meth:`SpaceEnv.make_info`), so that ``SyncVectorEnv`` and ``RemoteVectorEnv`` given the
  same seeds and actions must agree on every value.
* :func:`make_wrapped_env` puts a :class:`SpaceEnv` under Gymnasium wrappers (attributes reached
  through ``get_wrapper_attr``); :class:`ActionEchoEnv`, :class:`LooseObsEnv`, :class:`RaisingEnv`,
  :class:`Counter`, :class:`Napper` ... are small envs with one peculiarity each.

The submodules hold the envs of one group of tests:

* :mod:`tests.envs.factories`: CartPole with readable attributes (``Probe``), broken, failing and
  stalling factories (membership, lifecycle and command-line tests);
* :mod:`tests.envs.async_calls`: envs that sleep or raise once on cue (``step_async`` / ``step_wait`` tests);
* :mod:`tests.envs.faults`: :class:`~tests.envs.faults.CounterEnv`, deterministic in its seed, steps and
  actions (fault tests);
* :mod:`tests.envs.partial`: :class:`~tests.envs.partial.TimedEnv`, with a given time per step (partial-batch tests);
* :mod:`tests.envs.recovery`: envs that fail on demand or at construction (recovery tests).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections import OrderedDict
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.spaces.utils import flatten

INF = np.inf


class TaggedBox(spaces.Box):
    """A user-defined subclass of a Gymnasium space (travels pickled, in the trusted mode)."""

    tag = "tagged"


def _box_f32(shape=(3,)):
    return spaces.Box(-1.0, 1.0, shape, dtype=np.float32)


SPACES: dict[str, Any] = {
    # Box, several dtypes and bounds
    "box_f32": lambda: spaces.Box(-1.0, 1.0, (3,), dtype=np.float32),
    "box_f64_2d": lambda: spaces.Box(-5.0, 5.0, (2, 2), dtype=np.float64),
    "box_f16": lambda: spaces.Box(-2.0, 2.0, (3,), dtype=np.float16),
    "box_u8_image": lambda: spaces.Box(0, 255, (4, 4, 3), dtype=np.uint8),
    "box_i64": lambda: spaces.Box(-(2**40), 2**40, (3,), dtype=np.int64),
    "box_i8": lambda: spaces.Box(-128, 127, (2, 3), dtype=np.int8),
    "box_bool": lambda: spaces.Box(0, 1, (5,), dtype=np.bool_),
    "box_unbounded": lambda: spaces.Box(-INF, INF, (4,), dtype=np.float32),
    "box_half_bounded": lambda: spaces.Box(np.array([-INF, 0.0, -1.0]), np.array([0.0, INF, INF]), dtype=np.float64),
    "box_scalar": lambda: spaces.Box(-1.0, 1.0, (), dtype=np.float32),
    "box_subclass": lambda: TaggedBox(-1.0, 1.0, (2,), dtype=np.float32),
    # Discrete, MultiDiscrete, MultiBinary
    "discrete": lambda: spaces.Discrete(5),
    "discrete_start": lambda: spaces.Discrete(5, start=-2),
    "multi_discrete": lambda: spaces.MultiDiscrete([3, 4, 5]),
    "multi_discrete_start": lambda: spaces.MultiDiscrete([3, 4, 5], start=[-1, 0, 7]),
    "multi_discrete_2d": lambda: spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), dtype=np.int32),
    "multi_binary": lambda: spaces.MultiBinary(6),
    "multi_binary_2d": lambda: spaces.MultiBinary([2, 3]),
    # containers of array spaces
    "dict": lambda: spaces.Dict({"pos": _box_f32((2,)), "id": spaces.Discrete(4, start=1)}),
    "tuple": lambda: spaces.Tuple((spaces.Discrete(3), _box_f32((2,)), spaces.MultiBinary(2))),
    "dict_of_tuple_of_box": lambda: spaces.Dict(
        {
            "pair": spaces.Tuple((_box_f32((2,)), spaces.Box(0, 9, (3,), dtype=np.int64))),
            "inner": spaces.Dict({"flag": spaces.MultiBinary(1), "level": spaces.Discrete(3)}),
        }
    ),
    # spaces without a fixed shape
    "text": lambda: spaces.Text(max_length=8),
    "text_charset": lambda: spaces.Text(max_length=5, min_length=2, charset="abcé☃"),
    "graph_edges": lambda: spaces.Graph(node_space=_box_f32((2,)), edge_space=spaces.Discrete(3)),
    "graph_box_edges": lambda: spaces.Graph(
        node_space=spaces.Discrete(4), edge_space=spaces.Box(0.0, 1.0, (2,), dtype=np.float32)
    ),
    "graph_no_edges": lambda: spaces.Graph(node_space=spaces.Discrete(4), edge_space=None),
    "sequence": lambda: spaces.Sequence(_box_f32((2,)), stack=False),
    "sequence_stack": lambda: spaces.Sequence(_box_f32((2,)), stack=True),
    "sequence_discrete_stack": lambda: spaces.Sequence(spaces.Discrete(4), stack=True),
    "sequence_of_dict": lambda: spaces.Sequence(
        spaces.Dict({"a": spaces.Discrete(3), "b": _box_f32((1,))}), stack=False
    ),
    "oneof": lambda: spaces.OneOf((spaces.Discrete(3), _box_f32((2,)))),
    # nestings mixing both kinds
    "tuple_with_text": lambda: spaces.Tuple((spaces.Text(max_length=4), spaces.Discrete(2))),
    "dict_with_sequence": lambda: spaces.Dict({"seq": spaces.Sequence(spaces.Discrete(5)), "pos": _box_f32((2,))}),
    "dict_with_graph_and_oneof": lambda: spaces.Dict(
        {
            "graph": spaces.Graph(node_space=spaces.Discrete(3), edge_space=None),
            "choice": spaces.OneOf((spaces.MultiBinary(2), spaces.Text(max_length=3))),
        }
    ),
}
"""Space factories by name."""

ACTION_SPACES: dict[str, Any] = {
    "discrete": lambda: spaces.Discrete(3),
    "discrete_start": lambda: spaces.Discrete(4, start=-1),
    "box": lambda: spaces.Box(-1.0, 1.0, (2,), dtype=np.float32),
    "box_f64_2d": lambda: spaces.Box(-3.0, 3.0, (2, 2), dtype=np.float64),
    "multi_discrete": lambda: spaces.MultiDiscrete([3, 2, 4], start=[0, -1, 5]),
    "multi_binary": lambda: spaces.MultiBinary(3),
    "dict": lambda: spaces.Dict({"move": spaces.Box(-1.0, 1.0, (2,), dtype=np.float32), "fire": spaces.Discrete(2)}),
    "tuple": lambda: spaces.Tuple((spaces.Discrete(3), spaces.MultiDiscrete([2, 2]))),
    "text": lambda: spaces.Text(max_length=4),
    "tuple_with_text": lambda: spaces.Tuple((spaces.Discrete(2), spaces.Text(max_length=3))),
}


def make_space(name_or_space: str | gym.Space, table: dict[str, Any] = SPACES) -> gym.Space:
    """A fresh space: ``table[name]()`` for a name, or the space itself."""
    if isinstance(name_or_space, gym.Space):
        return copy.deepcopy(name_or_space)
    return table[name_or_space]()


@dataclasses.dataclass
class Payload:
    """A custom object in infos: only travels in the trusted pickle mode (local clients)."""

    label: str
    value: int


class Point(tuple):
    """A tuple subclass with a custom ``__eq__``-free identity (compared as a tuple)."""


class SpaceEnv(gym.Env):
    """A generic deterministic env over any observation and action space.

    Args:
        observation_space: a :data:`SPACES` name or a space.
        action_space: an :data:`ACTION_SPACES` name or a space.
        env_id: this env's index; changes the types of rewards, flags and infos.
        max_steps: truncate after this many steps.
        terminate_prob: probability to terminate at each step.
        info_kind: ``"rich"`` (many exact types, keys only in some envs or steps), ``"none"`` (always
            ``{}``), ``"sparse"`` (only a few keys, on few steps) or ``"exotic"`` (rich plus bytes,
            custom objects, non-finite floats, numpy str/complex scalars ...).
        render_mode: None or ``"rgb_array"``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 7, "custom": {"answer": 42, "tags": ("a", "b")}}

    def __init__(
        self,
        observation_space: str | gym.Space = "box_f32",
        action_space: str | gym.Space = "discrete",
        env_id: int = 0,
        max_steps: int = 20,
        terminate_prob: float = 0.05,
        info_kind: str = "rich",
        render_mode: str | None = None,
    ) -> None:
        self.observation_space = make_space(observation_space)
        self.action_space = make_space(action_space, ACTION_SPACES)
        self.env_id = env_id
        self.max_steps = max_steps
        self.terminate_prob = terminate_prob
        self.info_kind = info_kind
        self.render_mode = render_mode
        self.steps = 0
        self.episodes = 0
        self.total_reward = 0.0
        self.last_obs: Any = None
        self.custom_attr = f"env-{env_id}"
        self.scale = 1.0

    # -- the Env API -----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.steps = 0
        self.episodes += 1
        self.total_reward = 0.0
        obs = self.observation_space.sample()
        self.last_obs = obs
        info = self.make_info("reset", None, False)
        if self.info_kind != "none" and options is not None:
            info["options"] = dict(options)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"env {self.env_id}: action {action!r} is not in {self.action_space}")
        self.steps += 1
        rng = self.np_random
        obs = self.observation_space.sample()
        self.last_obs = obs
        # the reward depends on the action, so a wrong action shows up as a wrong reward
        base = float(rng.uniform(-1.0, 1.0)) + 0.001 * float(np.sum(flatten(self.action_space, action)))
        kind = self.env_id % 3
        reward: Any = base if kind == 0 else np.float32(base) if kind == 1 else int(round(base * 10))
        terminated = bool(rng.random() < self.terminate_prob)
        truncated = self.steps >= self.max_steps
        if self.env_id % 2:
            terminated, truncated = np.bool_(terminated), np.bool_(truncated)
        self.total_reward += float(reward)
        info = self.make_info("step", action, bool(terminated or truncated))
        return obs, reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((4, 5, 3), dtype=np.uint8)
        frame[..., 0] = self.steps % 256
        frame[..., 1] = self.env_id
        frame[..., 2] = self.episodes % 256
        return frame

    # -- extra methods and attributes, for call / get_attr / set_attr ----------------------------

    def scaled(self, x: float, factor: float = 1.0) -> float:
        return x * factor * self.scale + self.env_id

    def describe(self, *, verbose: bool = False) -> dict:
        described = {"id": self.env_id, "steps": self.steps, "scale": self.scale, "custom_attr": self.custom_attr}
        if verbose:
            described["array"] = np.arange(3, dtype=np.int16) + self.env_id
        return described

    # -- infos -----------------------------------------------------------------------------------

    def make_info(self, where: str, action: Any, done: bool) -> dict[str, Any]:
        if self.info_kind == "none":
            return {}
        rng = self.np_random
        i = self.env_id
        if self.info_kind == "sparse":
            info: dict[str, Any] = {}
            if rng.random() < 0.1:
                info["rare"] = int(rng.integers(100))
            if done:
                info["episode_end"] = {"length": self.steps, "return": self.total_reward}
            return info
        info = {
            "where": where,  # str
            "steps": self.steps,  # int
            "env_id": i,
            "ratio": float(rng.random()),  # float
            "flag": bool(rng.random() < 0.5),  # bool
            "nothing": None,
            "np_f32": np.float32(rng.random()),
            "np_i64": np.int64(rng.integers(-100, 100)),
            "np_u8": np.uint8(rng.integers(0, 256)),
            "np_bool": np.bool_(rng.random() < 0.5),  # not a np.number: an object array
            "arr_f32": rng.random((2, 3)).astype(np.float32),
            "arr_u8": rng.integers(0, 256, size=4, dtype=np.uint8),
            "arr_bool": rng.random(3) < 0.5,
            "arr_i16_0d": np.array(rng.integers(-5, 5), dtype=np.int16),
            "arr_f64_empty": np.zeros((0, 2)),
            "a_list": [1, "two", 3.0, [np.int32(4)]],
            "a_tuple": (i, "x", None),
            "nested": {"level": i, "inner": {"value": np.float64(rng.random()), "tag": "deep"}},
        }
        # keys that only some envs report, and only on some steps
        if rng.random() < 0.3:
            info["sometimes"] = int(rng.integers(10))
        if i % 2 == 0:
            info["even_only"] = np.float32(i)
        if i % 3 == 2:
            info["third_only"] = {"x": np.arange(2, dtype=np.int64) * i, "y": "third"}
        if where == "step" and self.steps % 4 == 0:
            info["every_fourth"] = {"n": self.steps, "arr": np.full(2, self.steps, dtype=np.int32)}
        # the first env to report a key fixes the batch dtype (int, float, bool, np.int32, np.bool_)
        choice = int(rng.integers(5))
        info["mixed_num"] = [
            int(rng.integers(-9, 9)),
            float(rng.uniform(-9, 9)),
            bool(rng.random() < 0.5),
            np.int32(rng.integers(-9, 9)),
            np.float32(rng.uniform(-9, 9)),
        ][choice]
        if rng.random() < 0.4:
            info["mixed_sometimes"] = (2.75 + i) if (self.steps + i) % 2 else (3 + i)
        # deterministic cases of the rule: env 0 reports an int (or a bool, or np.int8), later envs a
        # float (2.75 + i is truncated), an int (stored as True) or a large int (wraps around in int8)
        info["int_then_float"] = 3 if i == 0 else 2.75 + i
        info["bool_then_int"] = True if i == 0 else 5 * i
        info["float_then_int"] = 0.5 if i == 0 else i
        info["np_int8_then_int"] = np.int8(-1) if i == 0 else 100 * i % 128
        if i > 0:  # env 0 never reports it: env 1 fixes the dtype
            info["from_env_1"] = np.float32(i / 3) if i == 1 else i * 7
        if done:
            info["episode_end"] = {"length": self.steps, "return": self.total_reward}
        if action is not None:
            info["action"] = action
        if self.info_kind == "exotic":
            info.update(
                {
                    "bytes": b"\x00\xffraw" + bytes([i]),
                    "np_str": np.str_(f"s{i}"),
                    "np_c64": np.complex64(1.5 - 2j * i),
                    "arr_c128": np.array([1 + 1j, i - 0.5j]),
                    "arr_str": np.array(["ab", "cde"]),
                    "arr_dt64": np.array(["2024-01-02", "1999-12-31"], dtype="datetime64[D]"),
                    "np_f16": np.float16(0.5 + i),
                    "big_int": 2**62 + i,
                    "neg_zero": -0.0,
                    "inf": float("inf"),
                    "neg_inf_f32": np.float32(-np.inf),
                    "nan": float("nan"),
                    "arr_nan": np.array([np.nan, 1.0, np.inf], dtype=np.float32),
                    "empty_list": [],
                    "empty_tuple": (),
                    "empty_dict": {},
                    "ordered": OrderedDict([("b", 1), ("a", 2)]),
                    "payload": Payload("p", i),
                    "point": Point((i, i + 1)),
                    "obj_array": np.array([None, "x", 3], dtype=object),
                    "unicode_kéy ☃": "välue ☃",
                    7: "an int key",
                }
            )
        return info


def space_env(**kwargs: Any) -> SpaceEnv:
    """``SpaceEnv(**kwargs)``: a module-level function for ``functools.partial``."""
    return SpaceEnv(**kwargs)


def make_wrapped_env(env_id: int = 0, **kwargs: Any) -> gym.Env:
    """A :class:`SpaceEnv` under several Gymnasium wrappers; ``custom_attr`` lives on the inner env."""
    env = SpaceEnv(env_id=env_id, **kwargs)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.TimeLimit(env, max_episode_steps=1000)
    env = gym.wrappers.OrderEnforcing(env)
    return env


def make_cartpole(record_stats: bool = False, **kwargs: Any) -> gym.Env:
    """The real ``CartPole-v1``, optionally with ``RecordEpisodeStatistics`` inside (``kwargs`` go to ``gym.make``,
    e.g. ``max_episode_steps=25``)."""
    env = gym.make("CartPole-v1", **kwargs)
    if record_stats:
        env = gym.wrappers.RecordEpisodeStatistics(env)
    return env


class ActionEchoEnv(gym.Env):
    """Reports the action exactly as it arrives (type, dtype, value) and computes its reward from it.

    ``SyncVectorEnv`` hands each env the items of the batched actions as the user gave them (a Python
    int from a list, a float64 row of a float64 array for a float32 ``Box`` ...), so this env's infos and
    rewards show any conversion made on the way.
    """

    def __init__(self, action_space: str | gym.Space = "box") -> None:
        self.action_space = make_space(action_space, ACTION_SPACES)
        self.observation_space = spaces.Box(-INF, INF, (2,), dtype=np.float64)
        self.state = np.zeros(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-1.0, 1.0, 2)
        return self.state.copy(), {}

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        total = _total(action)
        self.state = self.state * 0.9 + total  # float64 arithmetic on the action as received
        info = {
            "action": action,
            "action_type": type(action).__qualname__,
            "action_dtype": str(getattr(action, "dtype", None)),
            "action_repr": repr(action),
        }
        return self.state.copy(), total, False, False, info


def _total(value: Any) -> float:
    """The sum of every number in a nested action, in float64 arithmetic."""
    if isinstance(value, dict):
        return sum(_total(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_total(item) for item in value)
    if isinstance(value, str):
        return float(len(value))
    return float(np.sum(np.asarray(value, dtype=np.float64)))


class LooseObsEnv(gym.Env):
    """Returns observations in the loose forms real envs use: float64 arrays for a float32 ``Box``,
    Python lists, Python ints for ``Discrete``, tuples for ``MultiDiscrete``."""

    def __init__(self, kind: str = "box_float64", max_steps: int = 6) -> None:
        self.kind = kind
        self.max_steps = max_steps
        self.action_space = spaces.Discrete(2)
        self.observation_space = {
            "box_float64": spaces.Box(-1.0, 1.0, (3,), dtype=np.float32),
            "box_list": spaces.Box(-1.0, 1.0, (3,), dtype=np.float32),
            "discrete_int": spaces.Discrete(5),
            "multi_discrete_tuple": spaces.MultiDiscrete([4, 4]),
            "dict_mixed": spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), dtype=np.float32), "n": spaces.Discrete(3)}),
        }[kind]
        self.steps = 0

    def _obs(self) -> Any:
        rng = self.np_random
        if self.kind == "box_float64":
            return rng.uniform(-1.0, 1.0, 3)  # float64
        if self.kind == "box_list":
            return [float(x) for x in rng.uniform(-1.0, 1.0, 3)]
        if self.kind == "discrete_int":
            return int(rng.integers(5))
        if self.kind == "multi_discrete_tuple":
            return (int(rng.integers(4)), int(rng.integers(4)))
        return {"pos": rng.uniform(-1.0, 1.0, 2), "n": int(rng.integers(3))}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps += 1
        return self._obs(), 1.0, bool(self.np_random.random() < 0.1), self.steps >= self.max_steps, {}


class SeedOnlyResetEnv(gym.Env):
    """An env whose ``reset`` takes a seed and no options, as some Stable-Baselines3 envs declare it."""

    def __init__(self, max_steps: int = 5) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.max_steps = max_steps
        self.steps = 0

    def reset(self, seed: int | None = None) -> tuple[Any, dict]:  # type: ignore[override]
        super().reset(seed=seed)
        self.steps = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps += 1
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return obs, float(action) + float(obs[0]), False, self.steps >= self.max_steps, {}


class AttributeWrapper(gym.Wrapper):
    """A plain wrapper that can tell which attributes it holds itself (not those of the env inside)."""

    def own_attr(self, name: str) -> Any:
        return vars(self).get(name)


def make_attribute_wrapped_env(env_id: int = 0, **kwargs: Any) -> gym.Env:
    """A :class:`SpaceEnv` (which has ``scale``) inside an :class:`AttributeWrapper` (which has not)."""
    return AttributeWrapper(SpaceEnv(env_id=env_id, **kwargs))


class RaisingEnv(gym.Env):
    """An env that raises ``error`` (a built-in exception's name, ``gymnasium.error.NAME``, or
    ``"custom"`` for :class:`CustomEnvError`) where told: in ``step`` with action 1, in ``reset`` with
    ``options={"fail": True}``, in the method ``fail()``, reading ``broken`` and setting ``fragile``."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, error: str = "ValueError") -> None:
        self.error = error

    def _raise(self, where: str) -> None:
        if self.error == "custom":
            kind: type[Exception] = CustomEnvError
        elif self.error.startswith("gymnasium.error."):
            kind = getattr(gym.error, self.error.rsplit(".", 1)[-1])
        else:
            kind = getattr(__import__("builtins"), self.error)
        raise kind(f"deliberate {self.error} in {where}")

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if options and options.get("fail"):
            self._raise("reset")
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if action == 1:
            self._raise("step")
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}

    def fail(self) -> None:
        self._raise("fail()")

    @property
    def broken(self) -> int:
        self._raise("broken")
        return 0

    @property
    def fragile(self) -> int:
        return 0

    @fragile.setter
    def fragile(self, value: int) -> None:
        self._raise("fragile")


class CustomEnvError(Exception):
    """An exception class the learner cannot name safely: it arrives as a plain ``RemoteEnvError``."""


class Counter(gym.Env):
    """Counts its own steps: its observation is the number of steps since its reset."""

    observation_space = spaces.Box(0.0, np.inf, (1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps += 1
        return np.full(1, self.steps, dtype=np.float32), 0.0, False, False, {}


class OptionsRequiredEnv(SeedOnlyResetEnv):
    """An env whose ``reset`` requires ``options`` (no default), as Gymnasium's own test envs declare it."""

    def reset(self, seed: int | None, options: dict | None) -> tuple[Any, dict]:  # type: ignore[override]
        return super().reset(seed=seed)


class Napper(Counter):
    """A :class:`Counter` that naps on demand: action 1 sleeps ``NAP_SECONDS`` and ends the episode with
    ``infos["napped"]``; ``reset(options={"nap": True})`` and :meth:`nap` sleep as long."""

    NAP_SECONDS = 1.0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if options and options.get("nap"):
            time.sleep(self.NAP_SECONDS)
            return *super().reset(seed=seed)[:1], {"napped_in_reset": True}
        return super().reset(seed=seed)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        observation, reward, terminated, truncated, info = super().step(action)
        if int(action) == 1:
            time.sleep(self.NAP_SECONDS)
            return observation, 1.0, True, truncated, {"napped": self.steps}
        return observation, reward, terminated, truncated, info

    def nap(self) -> int:
        time.sleep(self.NAP_SECONDS)
        return self.steps
