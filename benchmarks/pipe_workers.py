"""A reference for the suite: plain worker processes over pipes, the design many RL codebases hand-roll.

``PipeWorkers(env_fns, num_workers)`` starts ``num_workers`` processes (``multiprocessing``, the default
start method, as ``AsyncVectorEnv`` does), each hosting a contiguous share of the envs. A step is lock-step:
the parent sends each worker its share of the actions over a ``multiprocessing.Pipe`` (pickled), each
worker steps its envs (resetting an env as soon as its episode ends, the observation returned being the
reset's, as in ``AutoresetMode.SAME_STEP``) and answers with its stacked observations, rewards,
terminations and truncations; the parent concatenates them. No shared memory, no spinning, no infos:
what a plain multiprocessing design with one process per core and several envs per process reaches.

It implements what ``gym_remote.bench.lock_step_rate`` uses (``reset``, ``step``, ``close``, the batched
spaces) for envs with array observations, and nothing more.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

__all__ = ["PipeWorkers"]


def _worker(pipe: Connection, pickled_env_fns: bytes) -> None:
    """Host the envs of ``pickled_env_fns`` (cloudpickled, as AsyncVectorEnv sends them) and answer commands."""
    envs: list[gym.Env] = []
    try:
        envs = [env_fn() for env_fn in cloudpickle.loads(pickled_env_fns)]
        pipe.send(("ok", None))
        while True:
            command, data = pipe.recv()
            if command == "step":
                results = []
                for env, action in zip(envs, data, strict=True):
                    obs, reward, terminated, truncated, _ = env.step(action)
                    if terminated or truncated:
                        obs, _ = env.reset()
                    results.append((obs, reward, terminated, truncated))
                obs, rewards, terminations, truncations = zip(*results, strict=True)
                pipe.send(("ok", (np.stack(obs), np.array(rewards), np.array(terminations), np.array(truncations))))
            elif command == "reset":
                seeds = data if data is not None else [None] * len(envs)
                pipe.send(("ok", np.stack([env.reset(seed=seed)[0] for env, seed in zip(envs, seeds, strict=True)])))
            elif command == "close":
                break
    except (KeyboardInterrupt, EOFError):
        pass
    except Exception:  # noqa: BLE001  (reported to the parent, which raises it)
        try:
            pipe.send(("error", traceback.format_exc()))
        except OSError:
            pass
    finally:
        for env in envs:
            env.close()
        pipe.close()


class PipeWorkers(gym.vector.VectorEnv):
    """``len(env_fns)`` envs in ``num_workers`` processes, stepped lock-step over pipes (see the module)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], num_workers: int, context: str | None = None) -> None:
        super().__init__()
        self.num_envs = len(env_fns)
        if not 1 <= num_workers <= self.num_envs:
            raise ValueError(f"num_workers must be between 1 and the number of envs ({self.num_envs})")
        dummy = env_fns[0]()  # the spaces, as AsyncVectorEnv finds them
        self.single_observation_space, self.single_action_space = dummy.observation_space, dummy.action_space
        self.metadata = {**dummy.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}
        dummy.close()
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        bounds = np.linspace(0, self.num_envs, num_workers + 1).round().astype(int)
        self._shares = [slice(start, stop) for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]
        ctx = multiprocessing.get_context(context)
        self._pipes: list[Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        try:
            for index, share in enumerate(self._shares):
                parent, child = ctx.Pipe()
                process = ctx.Process(
                    target=_worker,
                    args=(child, cloudpickle.dumps(list(env_fns[share]))),
                    name=f"PipeWorker-{index}",
                    daemon=True,
                )
                process.start()
                child.close()
                self._pipes.append(parent)
                self._processes.append(process)
            self._gather()  # every worker has made its envs
        except BaseException:
            self.close()
            raise

    def _gather(self) -> list[Any]:
        answers = [pipe.recv() for pipe in self._pipes]
        errors = [data for status, data in answers if status == "error"]
        if errors:
            raise RuntimeError(f"a pipe worker failed:\n{errors[0]}")
        return [data for _, data in answers]

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if isinstance(seed, int):
            seed = [seed + index for index in range(self.num_envs)]
        for pipe, share in zip(self._pipes, self._shares, strict=True):
            pipe.send(("reset", None if seed is None else seed[share]))
        return np.concatenate(self._gather()), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        actions = np.asarray(actions)
        for pipe, share in zip(self._pipes, self._shares, strict=True):
            pipe.send(("step", actions[share]))
        obs, rewards, terminations, truncations = zip(*self._gather(), strict=True)
        return (
            np.concatenate(obs),
            np.concatenate(rewards),
            np.concatenate(terminations),
            np.concatenate(truncations),
            {},
        )

    def close_extras(self, **kwargs: Any) -> None:
        for pipe in self._pipes:
            try:
                pipe.send(("close", None))
            except OSError:
                pass
        for process in self._processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(1)
        for pipe in self._pipes:
            pipe.close()
        self._pipes, self._processes = [], []
