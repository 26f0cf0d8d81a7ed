"""Deterministic env factories for the fault tests (``--factory tests.envs.faults:make_counter``).

:class:`CounterEnv` makes every value it reports depend on its seed, its step count and the actions it
was given, so a lost, duplicated or misrouted step (or a reset with the wrong seed) shows up as a
difference against a ``SyncVectorEnv`` driven with the same seeds and actions. An env that was never
seeded is still deterministic: its generator starts from ``default_seed`` (by default ``seed_base``
plus the number of CounterEnvs made before it in the process), so the envs of a replacement client,
whose first reset carries no seed, can be predicted too.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

_made = itertools.count()


class CounterEnv(gym.Env):
    """Observation ``[steps, sum of actions, random draw]``; rewards, flags and infos follow the seed.

    Args:
        seed_base: with ``default_seed=None``, the unseeded generator starts from ``seed_base + n``
            where ``n`` counts the CounterEnvs made earlier in this process (0, 1, ... in a client).
        default_seed: the unseeded generator's seed (overrides ``seed_base``).
        max_steps: truncate after this many steps.
        terminate_prob: probability to terminate at each step.
        step_seconds: how long each step takes.
        busy: spend ``step_seconds`` in a busy loop holding the GIL (instead of sleeping).
        stall_seed: a reset with this seed first creates ``marker`` (if given), then sleeps ``stall_seconds``.
        stall_seconds: how long such a reset sleeps.
        marker: a file created when a stalling reset starts.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        seed_base: int = 0,
        default_seed: int | None = None,
        max_steps: int = 12,
        terminate_prob: float = 0.1,
        step_seconds: float = 0.0,
        busy: bool = False,
        stall_seed: int | None = None,
        stall_seconds: float = 0.0,
        marker: str | None = None,
    ) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (3,), dtype=np.float64)
        self.action_space = spaces.Discrete(3)
        self.instance = next(_made)
        self.default_seed = seed_base + self.instance if default_seed is None else default_seed
        self._np_random, self._np_random_seed = seeding.np_random(self.default_seed)
        self.max_steps = max_steps
        self.terminate_prob = terminate_prob
        self.step_seconds = step_seconds
        self.busy = busy
        self.stall_seed = stall_seed
        self.stall_seconds = stall_seconds
        self.marker = marker
        self.steps = 0
        self.episodes = 0
        self.action_sum = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if self.stall_seed is not None and seed == self.stall_seed:
            if self.marker is not None:
                Path(self.marker).write_text(str(os.getpid()))
            time.sleep(self.stall_seconds)
        super().reset(seed=seed)
        self.steps = 0
        self.episodes += 1
        self.action_sum = 0
        draw = float(self.np_random.uniform())
        obs = np.array([0.0, float(self.episodes), draw])
        return obs, {"t": 0, "episode": self.episodes, "draw": draw}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.step_seconds:
            if self.busy:
                until = time.monotonic() + self.step_seconds
                while time.monotonic() < until:
                    pass
            else:
                time.sleep(self.step_seconds)
        action = int(action)
        self.steps += 1
        self.action_sum += action
        draw = float(self.np_random.uniform())
        obs = np.array([float(self.steps), float(self.action_sum), draw])
        reward = draw + 0.5 * action
        terminated = bool(self.np_random.random() < self.terminate_prob)
        truncated = self.steps >= self.max_steps
        info: dict[str, Any] = {"t": self.steps, "episode": self.episodes, "draw": draw, "action": action}
        if self.steps % 2 == 0:
            info["even"] = self.steps  # a key only some slots report
        return obs, reward, terminated, truncated, info


def make_counter(**kwargs: Any) -> CounterEnv:
    """A :class:`CounterEnv` (``kwargs`` as its arguments; ``--env-kwargs`` on the command line)."""
    return CounterEnv(**kwargs)


class ActionDigestEnv(gym.Env):
    """An env whose actions are byte arrays and whose observation tells what it received.

    Action: ``Box(0, 255, (action_bytes,), uint8)``. Observation (float64): ``[steps, first byte, last byte,
    uniform, total]`` and ``padding`` zeros: the steps since its reset, the first and last byte of the last
    action, 1.0 if every byte of that action was the same, and the sum of every byte of every action since
    the reset. An action filled with one value ``v`` thus shows whether it arrived whole (``uniform``, and
    first = last = ``v``), and ``total`` which actions arrived. ``padding`` makes replies of some size.
    Episodes never end. The envs of a process share their space objects: comparing two large Boxes takes
    long, and a client compares its envs' spaces unless they are the same objects.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    _spaces: dict[tuple[int, int], tuple[spaces.Box, spaces.Box]] = {}

    def __init__(self, action_bytes: int = 1 << 20, padding: int = 0) -> None:
        key = (action_bytes, padding)
        if key not in self._spaces:
            self._spaces[key] = (
                spaces.Box(-np.inf, np.inf, (5 + padding,), dtype=np.float64),
                spaces.Box(0, 255, (action_bytes,), dtype=np.uint8),
            )
        self.observation_space, self.action_space = self._spaces[key]
        self.steps = 0
        self.total = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.steps = self.total = 0
        return np.zeros(self.observation_space.shape), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = np.asarray(action, dtype=np.uint8)
        self.steps += 1
        self.total += int(action.sum(dtype=np.uint64))
        obs = np.zeros(self.observation_space.shape)
        obs[:5] = [self.steps, action[0], action[-1], float(action.min() == action.max()), self.total]
        return obs, 0.0, False, False, {}


def make_action_digest(**kwargs: Any) -> ActionDigestEnv:
    """An :class:`ActionDigestEnv` (``kwargs`` as its arguments; ``--env-kwargs`` on the command line)."""
    return ActionDigestEnv(**kwargs)
