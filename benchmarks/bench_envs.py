"""The envs the benchmark suite steps, besides CartPole-v1: each isolates one cost."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class NullEnv(gym.Env):
    """Costs nothing: CartPole's spaces (4 float32 observations, 2 actions), never ends. Only transport is left."""

    observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self._obs = np.zeros(4, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self._obs, 1.0, False, False, {}


class BusyEnv(NullEnv):
    """Burns ``seconds`` of CPU per step (a busy loop, not a sleep): an env whose physics costs ~1 ms."""

    def __init__(self, seconds: float = 0.001) -> None:
        super().__init__()
        self.seconds = seconds

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return super().step(action)


class FramesEnv(gym.Env):
    """Atari-sized observations: 4 stacked 84x84 uint8 frames, a new array every step; 18 actions.

    Episodes last 1000 steps, as a short Atari game would, so autoreset is part of the cost.
    """

    observation_space = spaces.Box(0, 255, (84, 84, 4), np.uint8)
    action_space = spaces.Discrete(18)

    def __init__(self, episode_steps: int = 1000) -> None:
        self.episode_steps = episode_steps
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._steps = 0
        return self._frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._steps += 1
        return self._frame(), float(action), False, self._steps >= self.episode_steps, {}

    def _frame(self) -> np.ndarray:
        return np.full(self.observation_space.shape, self._steps % 256, dtype=np.uint8)
