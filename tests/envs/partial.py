"""Env factories for the partial-batch tests (``tests/test_partial_batches.py``).

Module-level, so they travel to local client processes by reference. :class:`TimedEnv` is
deterministic given its seed and actions, takes a given time per step (sleeping, so that a 2-core
machine can run many of them at once), and puts its ``label`` in every observation and info, so that
a result delivered to the wrong slot, a lost or a repeated step all show up when a slot's results
are compared with the same env stepped alone.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.envs import SpaceEnv


class TimedEnv(gym.Env):
    """A seeded random walk: Box(3) float32 observations ``[label, position, noise]``, Discrete(3) actions.

    Args:
        label: this env's number, in every observation and info.
        delay: seconds each step sleeps.
        max_steps: episodes are truncated after this many steps.
        terminate_prob: the probability that a step terminates the episode.

        stall_at: the step (counted since construction) that writes ``marker`` and then sleeps
            ``stall_seconds`` (a step in flight when its process is killed); None: no stall.

    An action outside the action space raises ``ValueError`` before the env changes: the env
    behaves afterwards as if that step had never been asked for. A first reset without a seed seeds
    the env with ``7919 + label``, so a replacement env started unseeded is deterministic too.
    """

    metadata = {"render_fps": 30}

    def __init__(
        self,
        label: int = 0,
        delay: float = 0.0,
        max_steps: int = 12,
        terminate_prob: float = 0.08,
        stall_at: int | None = None,
        marker: str | None = None,
        stall_seconds: float = 60.0,
    ) -> None:
        self.label = label
        self.stall_at = stall_at
        self.marker = marker
        self.stall_seconds = stall_seconds
        self.total_steps = 0
        self.delay = delay
        self.max_steps = max_steps
        self.terminate_prob = terminate_prob
        self.observation_space = spaces.Box(-1000.0, 1000.0, (3,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.steps = 0
        self.position = 0.0
        self.episodes = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.label, self.position, self.np_random.uniform(-1, 1)], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is None and self._np_random is None:
            seed = 7919 + self.label
        super().reset(seed=seed)
        self.steps = 0
        self.episodes += 1
        self.position = float(self.np_random.uniform(-1, 1))
        info: dict[str, Any] = {"label": self.label, "episode": self.episodes, "steps": 0}
        if options:
            info["options"] = dict(options)
        return self._obs(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"TimedEnv {self.label}: action {action!r} is not in {self.action_space}")
        self.total_steps += 1
        if self.total_steps == self.stall_at:
            if self.marker is not None:
                Path(self.marker).write_text(str(os.getpid()))
            time.sleep(self.stall_seconds)
        if self.delay:
            time.sleep(self.delay)
        self.steps += 1
        move = int(action) - 1
        self.position += move + 0.1 * float(self.np_random.normal())
        reward = float(self.position * 0.5 + move)
        terminated = bool(self.np_random.random() < self.terminate_prob)
        truncated = self.steps >= self.max_steps
        info = {"label": self.label, "episode": self.episodes, "steps": self.steps, "action": int(action)}
        return self._obs(), reward, terminated, truncated, info


def make_timed(
    label: int = 0, delay: float = 0.0, max_steps: int = 12, terminate_prob: float = 0.08, **kwargs: Any
) -> gym.Env:
    """A :class:`TimedEnv`."""
    return TimedEnv(label, delay, max_steps, terminate_prob, **kwargs)


def make_space_env(label: int, observation_space: str, max_steps: int = 9) -> gym.Env:
    """A :class:`~tests.envs.SpaceEnv` with ``observation_space`` (a ``tests.envs.SPACES`` name), Discrete(3)
    actions and sparse infos of fixed types (so batching them does not depend on the batch's first slot)."""
    return SpaceEnv(
        observation_space=observation_space,
        action_space="discrete",
        env_id=label,
        max_steps=max_steps,
        terminate_prob=0.1,
        info_kind="sparse",
    )


def make_timed_exiting_after_reset(label: int, seconds: float) -> gym.Env:
    """A :class:`TimedEnv` whose process ends (``os._exit``) ``seconds`` after its first reset: a client lost
    right after its reset result went out."""
    env = TimedEnv(label, 0.0, 12, 0.0)
    reset = env.reset

    def reset_then_exit(**kwargs: Any) -> tuple[Any, dict]:
        result = reset(**kwargs)
        threading.Timer(seconds, os._exit, (0,)).start()
        return result

    env.reset = reset_then_exit
    return env
