"""Stable-Baselines3 on remote envs: :class:`RemoteVecEnv`, a ``VecEnv`` that fronts a RemoteVectorEnv.

SB3 2.x does not take a Gymnasium ``VectorEnv``; this adapter follows SB3's own ``DummyVecEnv``
conventions instead: ``reset()`` returns only the observations (infos in ``reset_infos``), a
finished env is reset in the same step, and ``infos`` is a list of dicts holding
``terminal_observation`` and ``TimeLimit.truncated``. Needs the ``sb3`` extra
(the ``sb3`` extra: ``pip install ".[sb3]"`` from a clone).

Example:
    >>> import gymnasium as gym
    >>> from stable_baselines3 import PPO
    >>> from gym_remote.sb3 import RemoteVecEnv
    >>> venv = RemoteVecEnv([lambda: gym.make("CartPole-v1")] * 4, num_clients=2)
    >>> model = PPO("MlpPolicy", venv, n_steps=64, device="cpu").learn(total_timesteps=256)
    >>> model.num_timesteps
    256
    >>> venv.close()
"""

from __future__ import annotations

import operator
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array

try:
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'gym_remote.sb3 needs Stable-Baselines3: pip install "stable-baselines3>=2.7" (the "sb3" extra;'
        " install torch==2.13.0 or your own torch build first)"
    ) from error

from gym_remote.fleet import fleet_summary
from gym_remote.protocol import WRAPPERS_QUERY
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["RemoteVecEnv", "FleetCallback"]


class RemoteVecEnv(VecEnv):
    """A Stable-Baselines3 ``VecEnv`` whose envs are served by a :class:`~gym_remote.RemoteVectorEnv`.

    Args:
        env_fns: functions that each make one env, as for ``DummyVecEnv``: the adapter builds a
            RemoteVectorEnv of them (with local clients) in SAME_STEP autoreset mode, which is SB3's.
        envs: instead of ``env_fns``, a RemoteVectorEnv built with ``autoreset_mode="SameStep"``
            (for example a server that remote clients join); closing the adapter closes it.
        **kwargs: the RemoteVectorEnv's other arguments when built from ``env_fns``
            (``num_clients``, ``bind``, ``timeout``, ...).

    ``get_attr``, ``set_attr``, ``env_method`` and ``env_is_wrapped`` reach only the envs of
    ``indices``, which take every form DummyVecEnv takes: None, an int (negative: from the end) or any
    iterable of them; an env named twice is reached twice, in order. Values travel as RemoteVectorEnv's
    ``call`` and ``set_attr`` carry them (plain data, or anything in the trusted pickle mode). Like
    Gymnasium's ``get_attr``, a callable attribute is called; ``has_attr`` only looks (it calls
    nothing); ``set_attr`` sets the attribute on each env's outermost wrapper, as DummyVecEnv does;
    ``env_is_wrapped`` compares wrapper classes by module and qualified name.

    Actions: ``actions[i]`` is env ``i``'s action, as in DummyVecEnv (rows past ``num_envs`` are
    ignored), or Gymnasium's batched form. For a ``Dict`` action space a mapping is the batched form
    (a dict of batched arrays), any other sequence holds per-env dicts; for a ``Tuple`` space a
    ``tuple`` of ``len(space.spaces)`` batched entries is the batched form, any other sequence (a
    list, say) holds per-env tuples.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]] | None = None,
        *,
        envs: RemoteVectorEnv | None = None,
        **kwargs: Any,
    ) -> None:
        if (env_fns is None) == (envs is None):
            raise ValueError("give either env_fns or envs (a RemoteVectorEnv), not both and not neither")
        if envs is None:
            envs = RemoteVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)
        elif kwargs:
            raise ValueError(f"arguments {sorted(kwargs)} are for building a RemoteVectorEnv; envs is built already")
        if envs.autoreset_mode is not AutoresetMode.SAME_STEP:
            raise ValueError(
                "Stable-Baselines3 resets a finished env in the step that ends its episode: build the "
                f"RemoteVectorEnv with autoreset_mode='SameStep', not {envs.autoreset_mode.value!r}"
            )
        self.envs = envs
        super().__init__(envs.num_envs, envs.single_observation_space, envs.single_action_space)

    # -- stepping ----------------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds of :meth:`seed` and the options of :meth:`set_options` (used once)."""
        seeds = None if all(seed is None for seed in self._seeds) else list(self._seeds)
        observations = None
        for options, group in _groups(self._options):  # envs with different options reset group by group
            # as DummyVecEnv: without options, reset is called without the keyword (not with {})
            observations, infos = self.envs.reset_slots(group, seed=seeds, options=options or None)
            for index in group:
                self.reset_infos[index] = infos[index]
        if observations is None:  # (_groups() gives every env a group)
            raise RuntimeError("reset() found no env to reset")
        if isinstance(self.observation_space, spaces.Dict):
            observations = OrderedDict(observations)
        self._reset_seeds()
        self._reset_options()
        return observations

    def step_async(self, actions: np.ndarray) -> None:
        self.envs.step_async(self._batched(actions))

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, terminations, truncations, infos, finals = self.envs.step_wait_per_env()
        dones = terminations | truncations
        for index, final in enumerate(finals):
            if final is not None:  # the episode ended: its last info here, the reset's in reset_infos
                self.reset_infos[index], infos[index] = infos[index], dict(final[1])
            infos[index]["TimeLimit.truncated"] = bool(truncations[index] and not terminations[index])
            if final is not None:
                infos[index]["terminal_observation"] = final[0]
        if isinstance(self.observation_space, spaces.Dict):
            observations = OrderedDict(observations)
        return observations, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.envs.close()

    # -- the envs' attributes and methods ---------------------------------------------------------

    def has_attr(self, attr_name: str) -> bool:
        """Whether every env has ``attr_name`` (through wrappers), which is read, not called."""
        return all(self.envs.has_attr_slots(range(self.num_envs), attr_name))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call(indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        slots = self._slots(indices)
        for positions in _rounds(slots):
            round_slots = [slots[position] for position in positions]
            self.envs.set_attr_slots(round_slots, attr_name, [value] * len(round_slots), outermost=True)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self._call(indices, method_name, *method_args, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        name = f"{wrapper_class.__module__}.{wrapper_class.__qualname__}"
        return [name in classes for classes in self._call(indices, WRAPPERS_QUERY)]

    def _call(self, indices: VecEnvIndices, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``call`` on the envs of ``indices``; an env without the attribute raises AttributeError, as in SB3."""
        slots = self._slots(indices)
        results: list[Any] = [None] * len(slots)
        for positions in _rounds(slots):
            values = self.envs.call_slots([slots[p] for p in positions], name, *args, **kwargs)
            for position, value in zip(positions, values, strict=True):
                results[position] = value
        return results

    def _slots(self, indices: VecEnvIndices) -> list[int]:
        """The slots ``indices`` names, in order, as DummyVecEnv's ``[self.envs[i] for i in indices]`` picks envs."""
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, (int, np.integer)):
            indices = [indices]
        slots = range(self.num_envs)
        picked = []
        for index in indices:
            try:
                picked.append(slots[operator.index(index)])
            except IndexError:
                raise IndexError(f"env index {index} out of range for {self.num_envs} envs") from None
        return picked

    def _batched(self, actions: Any) -> Any:
        """``actions`` in the batched form RemoteVectorEnv takes, for ``num_envs`` envs (see the class docstring)."""
        space, count = self.action_space, self.num_envs
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            if isinstance(space, spaces.Dict) and isinstance(actions, Mapping):
                return actions
            if isinstance(space, spaces.Tuple) and isinstance(actions, tuple) and _is_batch(space, actions, count):
                return actions
            per_env = [actions[index] for index in range(min(len(actions), count))]
            if len(per_env) != count:
                raise ValueError(f"expected actions for {count} envs, got {len(per_env)}")
            return concatenate(space, per_env, create_empty_array(space, count))
        if isinstance(actions, (list, tuple)) or (isinstance(actions, np.ndarray) and actions.ndim > 0):
            return actions[:count]  # as DummyVecEnv, which steps env i with actions[i], ignores the rest
        return actions

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return list(self.envs.render())


def _rounds(slots: list[int]) -> list[list[int]]:
    """The positions in ``slots`` in rounds that name each slot at most once (its n-th mention in round n):
    RemoteVectorEnv's calls take distinct slots, DummyVecEnv reaches a repeated env once per mention."""
    rounds: list[list[int]] = []
    mentions: dict[int, int] = {}
    for position, slot in enumerate(slots):
        mention = mentions.get(slot, 0)
        mentions[slot] = mention + 1
        if mention == len(rounds):
            rounds.append([])
        rounds[mention].append(position)
    return rounds


def _is_batch(space: gym.Space, value: Any, count: int) -> bool:
    """Whether ``value`` is shaped as Gymnasium's batch of ``count`` samples of ``space`` (dtypes and bounds aside)."""
    if isinstance(space, spaces.Dict):
        return isinstance(value, Mapping) and all(
            key in value and _is_batch(subspace, value[key], count) for key, subspace in space.spaces.items()
        )
    if isinstance(space, spaces.Tuple):
        return (
            isinstance(value, tuple)
            and len(value) == len(space.spaces)
            and all(_is_batch(subspace, item, count) for subspace, item in zip(space.spaces, value))
        )
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        try:
            return np.shape(value) == (count, *(space.shape or ()))  # (Gymnasium types Discrete's shape optional)
        except (ValueError, TypeError):  # a ragged nesting: per-env actions
            return False
    return isinstance(value, (list, tuple, np.ndarray)) and len(value) == count  # batched as a tuple of samples


def _groups(options: list[dict]) -> list[tuple[dict, list[int]]]:
    """The envs' reset options grouped: each distinct options dict, and the envs that have it."""
    groups: list[tuple[dict, list[int]]] = []
    for index, option in enumerate(options):
        for known, members in groups:
            if _same(known, option):
                members.append(index)
                break
        else:
            groups.append((option, [index]))
    return groups


def _same(first: dict, second: dict) -> bool:
    """Whether two options dicts are equal (dicts holding arrays, whose ``==`` is no bool, only if identical)."""
    try:
        return bool(first == second)
    except (ValueError, TypeError):
        return first is second


class FleetCallback(BaseCallback):
    """Writes the fleet's figures to the model's logger (so to TensorBoard, next to the training curves) at the
    end of every rollout, under ``fleet/``: the keys of ``gym_remote.fleet.fleet_summary`` (slots served, clients
    in line, joins, rejoins, losses, refusals, env-steps/s, step latency, episodes and mean return).

    The model's env must be a :class:`RemoteVecEnv`, or SB3 wrappers around one (``VecMonitor``, ``VecNormalize``).

    Example::

        model = PPO("MlpPolicy", VecMonitor(RemoteVecEnv(envs=envs)), tensorboard_log="runs")
        model.learn(100_000, callback=FleetCallback())
    """

    def _on_step(self) -> bool:
        return True

    def _on_training_start(self) -> None:
        self._remote_vector_env().status()  # (episodes count from the first status on)

    def _on_rollout_end(self) -> None:
        for key, value in fleet_summary(self._remote_vector_env().status()).items():
            self.logger.record(f"fleet/{key}", value)

    def _remote_vector_env(self) -> RemoteVectorEnv:
        env = self.training_env
        while not isinstance(env, RemoteVecEnv):
            inner = getattr(env, "venv", None)
            if inner is None:
                name = type(env).__name__
                raise TypeError(f"FleetCallback needs a RemoteVecEnv (or wrappers around one), not {name}")
            env = inner
        return env.envs
