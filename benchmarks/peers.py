"""The peers practitioners reach for on one machine, as rows of the suite: PufferLib and EnvPool.

Neither is a dependency of gym_remote; a row whose library is missing is skipped, and :func:`missing` says why.
Install them next to the suite's own requirements (PufferLib pins a CUDA torch: install the CPU one first and
PufferLib without its dependencies)::

    pip install torch==2.13.0 && pip install --no-deps pufferlib-core==3.0.23 && pip install psutil
    pip install envpool   # with its dependencies: 1.2.5 on Python 3.11 imports its MuJoCo assets too

Each peer is wrapped into the little of a vector env the suite's measurements use (``num_envs``,
``action_space``, ``reset(seed=)``, ``step(actions)``, ``close()``); the wrappers add no copy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["PufferLibVector", "EnvPoolVector", "missing"]

_REASONS: dict[str, str | None] = {}


def missing(library: str) -> str | None:
    """Why ``library`` (``pufferlib`` or ``envpool``) cannot be measured here, or None if it can."""
    if library not in _REASONS:
        try:
            importlib.import_module("pufferlib.vector" if library == "pufferlib" else library)
        except Exception as error:  # noqa: BLE001 - any failure to import means no row, with its reason
            _REASONS[library] = f"{library} does not import ({type(error).__name__}: {error}); see benchmarks/peers.py"
        else:
            _REASONS[library] = None
    return _REASONS[library]


class PufferLibVector:
    """PufferLib's vectorization of ``make_env``'s Gymnasium env.

    Args:
        make_env: makes one env.
        num_envs: envs in all.
        workers: 0 for its ``Serial`` backend (every env in this process), else its ``Multiprocessing``
            backend with that many worker processes (shared memory, workers that busy-wait).
    """

    def __init__(self, make_env: Callable[[], gym.Env], num_envs: int, workers: int = 0) -> None:
        import pufferlib.emulation
        import pufferlib.vector

        creator = partial(pufferlib.emulation.GymnasiumPufferEnv, env_creator=make_env)
        if workers == 0:
            self._vector = pufferlib.vector.make(creator, num_envs=num_envs, backend=pufferlib.vector.Serial)
        else:
            self._vector = pufferlib.vector.make(
                creator,
                num_envs=num_envs,
                backend=pufferlib.vector.Multiprocessing,
                num_workers=workers,
                batch_size=num_envs,
                zero_copy=True,
                overwork=True,
            )
        self.num_envs = num_envs
        single = make_env()
        self.action_space = gym.vector.utils.batch_space(single.action_space, num_envs)
        single.close()

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, Any]:
        return self._vector.reset(seed=0 if seed is None else seed)

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        return self._vector.step(actions)

    def close(self) -> None:
        self._vector.close()
        for process in getattr(self._vector, "processes", ()):
            process.join(5)


class EnvPoolVector:
    """EnvPool's C++ implementation of the registered env ``task_id`` (``CartPole-v1``): its own env, not a
    Gymnasium one, stepped by ``threads`` C++ threads of the learner's process."""

    def __init__(self, task_id: str, num_envs: int, threads: int = 1) -> None:
        import envpool

        self._pool = envpool.make_gymnasium(task_id, num_envs=num_envs, num_threads=threads)
        self.num_envs = num_envs
        self.action_space = gym.vector.utils.batch_space(self._pool.action_space, num_envs)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, Any]:
        return self._pool.reset()

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        return self._pool.step(np.asarray(actions))

    def close(self) -> None:
        self._pool.close()
