"""The conformance probe env, ``gym_remote/Probe-v0``: the reference env of ``docs/CONFORMANCE.md``.

A client in any language implements this env exactly as the document defines it; the conformance
runner (``gym-remote conformance``) then steps the client's probes through a RemoteVectorEnv and
these Python probes through a SyncVectorEnv and compares every value. Its dynamics are integer
arithmetic on the seed, its floats are exact, and its spaces and infos use every encoding of the
protocol that a client must get right.

>>> import gymnasium as gym
>>> import gym_remote
>>> env = gym.make("gym_remote/Probe-v0")
>>> obs, info = env.reset(seed=7)
>>> int(obs["alpha"]), info["base"], info["seeded"]
(4, 7, True)
>>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
>>> info["t"], info["half"], info["pair"]
(1, 0.5, (1, 'x'))
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["PROBE_ENV_ID", "ProbeEnv", "probe_spaces"]

PROBE_ENV_ID = "gym_remote/Probe-v0"
"""The probe's Gymnasium id, registered when ``gym_remote`` is imported."""

EPISODE_LIMIT = 5
"""Every episode is truncated at this step (and may terminate at the same step)."""

_INT64_LIMIT = 2**63


def probe_spaces() -> tuple[spaces.Dict, spaces.Tuple]:
    """The probe's observation and action spaces, freshly built (unseeded)."""
    observation_space = spaces.Dict(
        [  # a sequence of pairs keeps this key order; a dict would be sorted
            ("zeta", spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)),
            ("alpha", spaces.Discrete(16, start=-3)),
            ("mid", spaces.Tuple((spaces.MultiDiscrete([4, 6]), spaces.MultiBinary(3)))),
        ]
    )
    action_space = spaces.Tuple(
        (
            spaces.Discrete(3, start=-1),
            spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
            spaces.MultiBinary(2),
        )
    )
    return observation_space, action_space


class ProbeEnv(gym.Env):
    """The probe env of ``docs/CONFORMANCE.md`` §1 (read that for the definition; this follows it).

    Args:
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns ``"t=<t> base=<base>"``).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', not {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space, self.action_space = probe_spaces()
        self._draw = 0  # the seed stream: the last base drawn, before the offset
        self._base = 0
        self._level = 0
        self._t = 0
        self._term_step = 0
        self._zeta = np.zeros(2, dtype=np.float32)
        self._bits = np.zeros(2, dtype=np.int8)
        self._seed = -1

    @property
    def np_random_seed(self) -> int:
        """The last seed given to :meth:`reset` (a reset without one keeps it); -1 before any seeded reset.

        Not Gymnasium's random seed drawn when first asked: every implementation of the probe must say the
        same (docs/CONFORMANCE.md §1.6).
        """
        return self._seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._seed = seed
            self._draw = seed % 1000
        else:
            self._draw = (self._draw * 37 + 11) % 1000
        offset = 0
        if isinstance(options, dict) and "offset" in options:  # (a list or str holding "offset" is no dict)
            offset = options["offset"]
            if type(offset) is not int or not 0 <= offset < 1000:
                raise ValueError(f"options['offset'] must be an int in [0, 1000), not {offset!r}")
        self._base = self._draw + offset
        self._level = self._base % 7
        self._t = 0
        self._term_step = 2 + self._base % 5
        self._zeta = np.array([self._base / 4, -self._base / 8], dtype=np.float32)
        self._bits = np.zeros(2, dtype=np.int8)
        info = {"base": self._base, "seeded": seed is not None, "offset": offset}
        return self._observation(), info

    def step(self, action: Any):
        direction, push, bits = action
        direction = _integer(direction)
        push = np.asarray(push, dtype=np.float32)
        self._bits = np.asarray(bits, dtype=np.int8).copy()
        self._t += 1
        self._level += direction
        self._zeta = self._zeta + push * np.float32(0.5)
        t = self._t
        reward = float(self._level) + 0.25 * float(int(self._bits[0]) + 2 * int(self._bits[1]))
        terminated = t == self._term_step
        truncated = t >= EPISODE_LIMIT
        info: dict[str, Any] = {
            "t": t,
            "half": t / 2,
            "even": t % 2 == 0,
            "level": np.int32(self._level),
            "quarter": np.float32(t / 4),
            "vec": np.array([t, -t], dtype=np.int16),
            "pair": (t, "x"),
            "items": [2**64 + t, None, 1.5],
            "none": None,
            "nan": float("nan"),
            "blob": bytes([t, 0, 255]),
            "name": "probé",
        }
        if t % 2 == 1:
            info["odd"] = {"t": t, "inf": float("inf")}
        return self._observation(), reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return f"t={self._t} base={self._base}"
        return None

    def _observation(self) -> dict[str, Any]:
        b, t = self._base, self._t
        return {
            "zeta": self._zeta.copy(),
            "alpha": np.int64(-3 + (b + t) % 16),
            "mid": (
                np.array([(b + t) % 4, (3 * b + t) % 6], dtype=np.int64),
                np.array([self._bits[0], self._bits[1], (b + t) % 2], dtype=np.int8),
            ),
        }


def _integer(value: Any) -> int:
    """A number as Python's ``int()`` converts it (a float truncated toward zero), within the signed 64-bit
    range, as docs/CONFORMANCE.md §1.4 converts the probe's ``direction``.

    Raises:
        ValueError: a NaN, an infinity, or a number outside the signed 64-bit range.
        TypeError: ``value`` is not a number (nor a one-element array of one).
    """
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(())[()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot convert float {value!r} to an integer")
        if not -_INT64_LIMIT <= value < _INT64_LIMIT:
            raise ValueError(f"the float {value!r} is outside the signed 64-bit range")
        return int(value)
    if not isinstance(value, int):  # (bool is an int)
        raise TypeError(f"the direction must be a number, not {type(value).__name__}")
    if not -_INT64_LIMIT <= value < _INT64_LIMIT:
        raise ValueError(f"the int {value} is outside the signed 64-bit range")
    return int(value)
