"""What the client's probes must produce, and how a difference is put into words.

Socket-free: :func:`differences` compares two values with their exact types (``int`` against
``float``, tuple against list, numpy dtypes, NaN equal to NaN); :class:`Twins` steps one Python probe
per slot on its own, the reference for partial batches; :func:`unbatch` takes one slot's result out of a
batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space, iterate

from gym_remote.probe import ProbeEnv

__all__ = [
    "MAX_DIFFERENCES",
    "Twins",
    "describe",
    "difference",
    "differences",
    "preview",
    "same_number",
    "unbatch",
    "unbatch_info",
]

MAX_DIFFERENCES = 8


def describe(value: Any) -> str:
    """A value and its exact type, for messages: ``1 (int)``, ``[1, 2] (numpy array, dtype <i2, shape (2,))``."""
    if isinstance(value, np.ndarray):
        return f"{preview(value.tolist())} (numpy array, dtype {value.dtype.str}, shape {value.shape})"
    if isinstance(value, np.generic):
        return f"{preview(value.item())} (numpy scalar, dtype {value.dtype.str})"
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{preview(value)} ({name})"


def preview(value: Any, limit: int = 160) -> str:
    """``repr(value)``, shortened to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def same_number(actual: Any, expected: Any) -> bool:
    """Equal numbers, NaN equal to NaN, and zeros of the same sign."""
    if actual != actual or expected != expected:
        return actual != actual and expected != expected
    if actual == 0 and expected == 0 and np.asarray(expected).dtype.kind in "fc":
        return bool(np.signbit(actual) == np.signbit(expected))
    return bool(actual == expected)


def difference(actual: Any, expected: Any, where: str) -> str | None:
    """The first way ``actual`` differs from ``expected`` (see :func:`differences`), or None."""
    found = differences(actual, expected, where)
    return found[0] if found else None


def differences(actual: Any, expected: Any, where: str) -> list[str]:
    """How ``actual`` differs from ``expected``, one sentence per difference (empty: they are the same).

    Types must be exact (``int`` against ``float``, tuple against list, numpy dtypes), dict keys in
    the same order, NaN equals NaN and zeros keep their sign.
    """
    found: list[str] = []
    _compare(actual, expected, where, found)
    return found


def _compare(actual: Any, expected: Any, where: str, found: list[str]) -> None:
    if len(found) >= MAX_DIFFERENCES:
        return
    mismatch = f"{where} is {describe(actual)}, expected {describe(expected)}"
    if type(actual) is not type(expected):
        found.append(mismatch)
    elif isinstance(expected, dict):
        if list(actual) != list(expected):
            missing = [key for key in expected if key not in actual]
            extra = [key for key in actual if key not in expected]
            how = f"missing {missing}, extra {extra}" if missing or extra else "in this order"
            found.append(f"{where} has the keys {list(actual)}, expected {list(expected)} ({how})")
        for key in expected:
            if key in actual:
                _compare(actual[key], expected[key], f"{where}[{key!r}]", found)
    elif isinstance(expected, (tuple, list)):
        if len(actual) != len(expected):
            found.append(mismatch)
        else:
            for index, (a, e) in enumerate(zip(actual, expected)):
                _compare(a, e, f"{where}[{index}]", found)
    elif isinstance(expected, np.ndarray):
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            found.append(mismatch)
        elif expected.dtype == object:
            for index in np.ndindex(expected.shape):
                _compare(actual[index], expected[index], f"{where}[{', '.join(map(str, index))}]", found)
        elif not np.array_equal(actual, expected, equal_nan=expected.dtype.kind in "fc"):
            found.append(mismatch)
    elif isinstance(expected, np.generic):
        if actual.dtype != expected.dtype or not same_number(actual, expected):
            found.append(mismatch)
    elif isinstance(expected, float):
        if not same_number(actual, expected):
            found.append(mismatch)
    elif actual != expected:
        found.append(mismatch)


def unbatch_info(infos: dict[str, Any], position: int, top: bool = True) -> dict[str, Any]:
    """The info of batch ``position`` from Gymnasium's batched layout (``key`` with its mask ``_key``)."""
    info = {}
    for key, value in infos.items():
        if (isinstance(key, str) and key.startswith("_")) or (top and key == "env_id"):
            continue
        mask = infos.get(f"_{key}")
        if mask is None:
            raise ValueError(f"the batched info {key!r} has no mask {'_' + key!r}")
        if not mask[position]:
            continue
        info[key] = unbatch_info(value, position, top=False) if isinstance(value, dict) else value[position]
    return info


def unbatch(space: Space, results: Sequence[Any], count: int) -> list[tuple[Any, float, bool, bool, dict]]:
    """A batch of ``count`` results ``(obs, rewards, terminations, truncations, infos)``, one tuple per position."""
    obs, rewards, terminations, truncations, infos = results
    observations = list(iterate(batch_space(space, count), obs))
    return [
        (observations[p], float(rewards[p]), bool(terminations[p]), bool(truncations[p]), unbatch_info(infos, p))
        for p in range(count)
    ]


class Twins:
    """One Python probe per slot, each in a one-env SyncVectorEnv of the vector's autoreset mode."""

    def __init__(self, num_envs: int, mode: AutoresetMode) -> None:
        self.envs = [SyncVectorEnv([ProbeEnv], autoreset_mode=mode) for _ in range(num_envs)]

    def reset(self, slot: int, seed: int | None, options: dict[str, Any] | None = None) -> tuple:
        env = self.envs[slot]
        obs, infos = env.reset(seed=seed, options=options)
        results = (obs, np.zeros(1), np.zeros(1, np.bool_), np.zeros(1, np.bool_), infos)
        return unbatch(env.single_observation_space, results, 1)[0]

    def step(self, slot: int, action: Any) -> tuple:
        env = self.envs[slot]
        batched = tuple(np.asarray(part)[None] for part in action)
        return unbatch(env.single_observation_space, env.step(batched), 1)[0]

    def close(self) -> None:
        for env in self.envs:
            env.close()
