"""``gym.make_vec`` support: the id ``gym_remote/RemoteVectorEnv-v0``, registered when gym_remote is imported.

Gymnasium picks a vector env by the env id's ``vector_entry_point``, so an existing id such as
``CartPole-v1`` cannot be pointed at RemoteVectorEnv; this id takes the env id as an argument:

>>> import gymnasium as gym
>>> import gym_remote
>>> envs = gym.make_vec("gym_remote/RemoteVectorEnv-v0", num_envs=4, env_id="CartPole-v1", num_clients=2)
>>> type(envs).__name__, envs.num_envs, envs.spec.kwargs["env_id"]
('RemoteVectorEnv', 4, 'CartPole-v1')
>>> envs.close()
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from gym_remote.probe import PROBE_ENV_ID
from gym_remote.rllib import check_autoreset_mode
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["REMOTE_VECTOR_ENV_ID", "make_remote_vector_env", "register"]

REMOTE_VECTOR_ENV_ID = "gym_remote/RemoteVectorEnv-v0"
"""The id to give ``gym.make_vec`` for a RemoteVectorEnv."""


def make_remote_vector_env(
    num_envs: int = 1, *, env_id: str | None = None, env_kwargs: dict[str, Any] | None = None, **kwargs: Any
) -> RemoteVectorEnv:
    """The id's vector entry point: ``num_envs`` envs ``gym.make(env_id, **env_kwargs)`` in local clients,
    or, without ``env_id``, a server whose ``num_envs`` slots remote clients fill.

    ``kwargs`` are RemoteVectorEnv's (``num_clients``, ``autoreset_mode``, ``bind``, ...). Built by RLlib, it
    refuses any autoreset mode but NEXT_STEP (:func:`gym_remote.rllib.check_autoreset_mode`), before any
    client starts.
    """
    check_autoreset_mode(kwargs.get("autoreset_mode", AutoresetMode.NEXT_STEP))  # (RemoteVectorEnv's default)
    if env_id is None:
        if env_kwargs:
            raise ValueError("env_kwargs are for env_id; without env_id the clients choose their envs")
        return RemoteVectorEnv(num_envs=num_envs, **kwargs)
    make_env = functools.partial(gym.make, env_id, **(env_kwargs or {}))
    return RemoteVectorEnv([make_env] * num_envs, **kwargs)


def register() -> None:
    """Register :data:`REMOTE_VECTOR_ENV_ID` and the conformance probe env ``gym_remote/Probe-v0`` (once)."""
    if REMOTE_VECTOR_ENV_ID not in gym.registry:
        gym.register(id=REMOTE_VECTOR_ENV_ID, vector_entry_point=f"{__name__}:make_remote_vector_env")
    if PROBE_ENV_ID not in gym.registry:
        # No env checker: it warns about the probe's infinite Box bounds, which are there on purpose.
        gym.register(id=PROBE_ENV_ID, entry_point="gym_remote.probe:ProbeEnv", disable_env_checker=True)
