"""Env factories for the step_async / step_wait tests (``tests.test_async_calls``).

Module-level functions, so they travel to local client processes by reference and work as
``gym-remote client ... --factory tests.envs.async_calls:NAME``. Every env is CartPole-v1 underneath,
stepped and reset unchanged, so a ``SyncVectorEnv`` of plain CartPole-v1 (:func:`tests.envs.make_cartpole`)
is its exact twin.

Misbehaviour is switched on from the test through files in ``control`` (a directory):

* ``step-I`` / ``reset-I``: the next step / reset of env ``I`` deletes the file, creates
  ``entered-step-I`` / ``entered-reset-I`` and sleeps the number of seconds written in it;
* ``fail-step-I`` / ``fail-reset-I``: the next step / reset of env ``I`` deletes the file and raises
  ``ValueError`` (before touching the env).

Each file acts once, so a test knows exactly which call misbehaves.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gymnasium as gym


class Controlled(gym.Wrapper):
    """CartPole whose steps and resets sleep or raise once when the test drops a file (see module doc)."""

    def __init__(self, env: gym.Env, control: str, index: int, step_seconds: float = 0.0) -> None:
        super().__init__(env)
        self.control = Path(control)
        self.index = index
        self.step_seconds = step_seconds
        self.label = f"env-{index}"

    def _take(self, name: str) -> str | None:
        """The text of ``control/NAME`` if it exists, deleting it; None otherwise."""
        path = self.control / name
        try:
            text = path.read_text()
            path.unlink()
        except FileNotFoundError:
            return None
        return text

    def _misbehave(self, what: str) -> None:
        if self._take(f"fail-{what}-{self.index}") is not None:
            raise ValueError(f"deliberate {what} failure in env {self.index}")
        seconds = self._take(f"{what}-{self.index}")
        if seconds is not None:
            (self.control / f"entered-{what}-{self.index}").write_text(str(time.monotonic()))
            time.sleep(float(seconds))

    def reset(self, **kwargs: Any):
        self._misbehave("reset")
        return self.env.reset(**kwargs)

    def step(self, action: Any):
        self._misbehave("step")
        if self.step_seconds:
            time.sleep(self.step_seconds)
        return self.env.step(action)


def make_controlled(control: str, index: int, step_seconds: float = 0.0) -> gym.Env:
    """CartPole-v1 under :class:`Controlled`; every step sleeps ``step_seconds`` besides."""
    return Controlled(gym.make("CartPole-v1"), control, index, step_seconds)
