"""Env factories for the membership, lifecycle and command-line tests.

Every factory is a module-level function returning a Gymnasium env, so it travels to local client
processes by reference and works as ``gym-remote ... --factory tests.envs.factories:NAME``.
All envs are CartPole-v1 underneath (same spaces), with a :class:`Probe` wrapper on top that exposes
plain attributes (``index``, ``tag``, ``pid``, ``env_kwargs``) for ``get_attr``. Plain CartPole is
:func:`tests.envs.make_cartpole`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

NOT_CALLABLE = 42
"""An attribute that exists but is not a factory (for the bad ``--factory`` test)."""


class Probe(gym.Wrapper):
    """CartPole with readable attributes; optionally fails or stalls inside ``step``.

    Args:
        env: the wrapped env.
        index: the construction index (``env_fns[index]``), read back with ``get_attr("index")``.
        tag: any string, read back with ``get_attr("tag")``.
        env_kwargs: the keyword arguments the factory received.
        fail_after: raise ``ValueError`` on this step after a reset (None: never).
        marker: a file created when a step starts (with ``stall_seconds``).
        stall_seconds: how long each step sleeps (0: not at all).
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        index: int | None = None,
        tag: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        fail_after: int | None = None,
        marker: str | None = None,
        stall_seconds: float = 0.0,
    ) -> None:
        super().__init__(env)
        self.index = index
        self.tag = tag
        self.env_kwargs = dict(env_kwargs or {})
        self.pid = os.getpid()
        self.fail_after = fail_after
        self.marker = marker
        self.stall_seconds = stall_seconds
        self.steps_since_reset = 0

    def reset(self, **kwargs: Any):
        self.steps_since_reset = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any):
        self.steps_since_reset += 1
        if self.fail_after is not None and self.steps_since_reset >= self.fail_after:
            raise ValueError(f"deliberate step failure in env {self.index} at step {self.steps_since_reset}")
        if self.stall_seconds:
            if self.marker is not None:
                Path(self.marker).write_text(str(os.getpid()))
            time.sleep(self.stall_seconds)
        return self.env.step(action)


def make_mountaincar() -> gym.Env:
    """MountainCar-v0: spaces that differ from CartPole's."""
    return gym.make("MountainCar-v0")


def make_indexed(index: int) -> gym.Env:
    """CartPole that reports its construction index and its process id through ``get_attr``."""
    return Probe(gym.make("CartPole-v1"), index=index)


def make_tagged(tag: str, **kwargs: Any) -> gym.Env:
    """CartPole whose ``tag`` and ``env_kwargs`` attributes echo the factory's arguments (for ``--env-kwargs``)."""
    return Probe(gym.make("CartPole-v1", **kwargs), tag=tag, env_kwargs=kwargs)


def make_broken(message: str = "deliberate construction failure") -> gym.Env:
    """An env function that raises at construction."""
    raise RuntimeError(message)


def make_step_failer(index: int, fail_after: int | None = 3) -> gym.Env:
    """CartPole that raises ``ValueError`` on its ``fail_after``-th step after each reset."""
    return Probe(gym.make("CartPole-v1"), index=index, fail_after=fail_after)


def make_staller(marker: str, stall_seconds: float = 60.0) -> gym.Env:
    """CartPole whose steps create ``marker`` and then sleep ``stall_seconds``."""
    return Probe(gym.make("CartPole-v1"), marker=marker, stall_seconds=stall_seconds)
