"""Stable-Baselines3 on remote envs: :class:`RemoteVecEnv`, a ``VecEnv`` that fronts a RemoteVectorEnv.

SB3 2.x does not take a Gymnasium ``VectorEnv``; this adapter follows SB3's own ``DummyVecEnv``
conventions instead: ``reset()`` returns only the observations (infos in ``reset_infos``), a
finished env is reset in the same step, and ``infos`` is a list of dicts holding
``terminal_observation`` and ``TimeLimit.truncated``. Needs the ``sb3`` extra
(``pip install "gymnasium-remote[sb3]"``).

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

import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'gym_remote.sb3 needs Stable-Baselines3: pip install "gymnasium-remote[sb3]"'
        " (install torch==2.13.0 or your own torch build first)"
    ) from error

from gym_remote.errors import RemoteEnvError
from gym_remote.protocol import WRAPPERS_QUERY
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["RemoteVecEnv"]


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
    ``indices``; values travel as RemoteVectorEnv's ``call`` and ``set_attr`` carry them (plain data,
    or anything in the trusted pickle mode). Like Gymnasium's ``get_attr``, a callable attribute is
    called; ``env_is_wrapped`` compares wrapper classes by module and qualified name.
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
            self.envs._reset_async_slots(group, seeds, options or None)  # as DummyVecEnv: no options, not {}
            observations, infos = self.envs._reset_wait_per_env()
            for index in group:
                self.reset_infos[index] = infos[index]
        if isinstance(self.observation_space, spaces.Dict):
            observations = OrderedDict(observations)
        self._reset_seeds()
        self._reset_options()
        return observations

    def step_async(self, actions: np.ndarray) -> None:
        self.envs.step_async(actions)

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, terminations, truncations, (infos, finals) = self.envs._step_wait_per_env()
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

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call(indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        slots = list(self._get_indices(indices))
        self.envs._set_attr_slots(slots, attr_name, [value] * len(slots))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self._call(indices, method_name, *method_args, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        name = f"{wrapper_class.__module__}.{wrapper_class.__qualname__}"
        return [name in classes for classes in self._call(indices, WRAPPERS_QUERY)]

    def _call(self, indices: VecEnvIndices, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``call`` on the envs of ``indices``; an env without the attribute raises AttributeError, as in SB3."""
        try:
            return list(self.envs._call_slots(self._get_indices(indices), name, *args, **kwargs))
        except RemoteEnvError as error:
            if error.remote_type == "AttributeError":
                raise AttributeError(str(error)) from error
            raise

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return list(self.envs.render())


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
