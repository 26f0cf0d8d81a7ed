"""The env of the chaos soak (``tests/soak``; clients load it with ``--factory tests.envs.soak:make_env``).

Every observation says who produced it and from what, so that the soak's checker can predict each row
exactly from the actions the learner sent to the slot:

====  ==========  ==============================================================================
 0    pid         the client process hosting the env
 1    index       the env's place in its client (0, 1, ... in the order the client made them)
 2    episode     how many resets this env object has had (it keeps counting across rejoins)
 3    step        steps taken in this episode
 4    checksum    :func:`fold` of the actions received in this episode, 0 after a reset
 5    length      the step at which this episode ends: :func:`episode_end` (pid, index, episode)
 6    tag         the last value ``set_attr("tag", ...)`` gave, 0 after a reset
 7    seed        the seed of the last reset, -1 for a reset without one (an autoreset)
 8..  payload     ``payload`` copies of the checksum (large messages when asked for)
====  ==========  ==============================================================================

Actions are ``Discrete(ACTIONS)``; the reward of step ``k`` with action ``a`` is ``10 k + a``; an episode
ends at step ``length``, terminated or truncated as :func:`episode_end` says; every info is
``{"soak_step": step}``. ``get_attr("steps")`` reads the step, ``call("state")`` the whole state.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ACTIONS = 7
FIELDS = ("pid", "index", "episode", "step", "checksum", "length", "tag", "seed")
PID, INDEX, EPISODE, STEP, CHECKSUM, LENGTH, TAG, SEED = range(len(FIELDS))
MODULUS = 2**31 - 1
NO_SEED = -1

_made = itertools.count()


def fold(checksum: int, action: int) -> int:
    """The checksum after one more action: a polynomial hash of the episode's actions, mod 2**31 - 1."""
    return (checksum * 31 + int(action) + 1) % MODULUS


def episode_end(pid: int, index: int, episode: int) -> tuple[int, bool]:
    """Where the episode ``episode`` of env ``index`` of process ``pid`` ends: (its length, 2 to 14 steps;
    whether it terminates there, else it is truncated)."""
    mixed = (pid * 1_000_003 + index * 10_007 + episode * 101) % 2**31
    mixed = (mixed * 1_103_515_245 + 12_345) % 2**31
    return 2 + mixed % 13, bool((mixed >> 8) & 1)


def observation_space(payload: int = 0) -> spaces.Box:
    return spaces.Box(-1, 2**62, (len(FIELDS) + payload,), dtype=np.int64)


class SoakEnv(gym.Env):
    """See the module's docstring. ``payload``: extra observation entries (the checksum repeated)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, payload: int = 0) -> None:
        self.observation_space = observation_space(payload)
        self.action_space = spaces.Discrete(ACTIONS)
        self.payload = payload
        self.pid = os.getpid()
        self.index = next(_made)
        self.episode = 0
        self.steps = 0
        self.checksum = 0
        self.length = 0
        self.terminates = False
        self.tag = 0
        self.seed = NO_SEED

    def state(self) -> tuple[int, ...]:
        """(pid, index, episode, step, checksum, tag): what ``call("state")`` returns."""
        return (self.pid, self.index, self.episode, self.steps, self.checksum, self.tag)

    def _observation(self) -> np.ndarray:
        head = (self.pid, self.index, self.episode, self.steps, self.checksum, self.length, self.tag, self.seed)
        observation = np.full(len(FIELDS) + self.payload, self.checksum, dtype=np.int64)
        observation[: len(FIELDS)] = head
        return observation

    def _info(self) -> dict[str, Any]:
        return {"soak_step": self.steps}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode += 1
        self.steps = 0
        self.checksum = 0
        self.tag = 0
        self.seed = NO_SEED if seed is None else int(seed)
        self.length, self.terminates = episode_end(self.pid, self.index, self.episode)
        return self._observation(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = int(action)
        if not 0 <= action < ACTIONS:
            raise ValueError(f"action {action} is not in Discrete({ACTIONS})")
        if self.steps >= self.length:
            raise RuntimeError(f"env {self.index} of {self.pid}: stepped past the end of episode {self.episode}")
        self.steps += 1
        self.checksum = fold(self.checksum, action)
        ended = self.steps == self.length
        terminated, truncated = ended and self.terminates, ended and not self.terminates
        return self._observation(), float(10 * self.steps + action), terminated, truncated, self._info()


def make_env(payload: int = 0) -> SoakEnv:
    """A :class:`SoakEnv` (``--env-kwargs '{"payload": N}'`` on the command line)."""
    return SoakEnv(payload)
