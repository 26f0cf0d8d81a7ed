"""Env factories for the recovery tests (``tests/test_recovery.py``).

Every factory is a module-level function, so it travels to local client processes by reference and
works as ``gym-remote client ... --factory tests.envs.recovery:NAME``. The envs are CartPole-v1
underneath (same spaces as ``tests.envs.factories``). Factories that must behave differently from one
process to the next (fail a few times, then work) count their constructions in a file, because each
construction happens in a new client process.
"""

from __future__ import annotations

import builtins
import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym


class Faulty(gym.Wrapper):
    """CartPole whose next ``step`` or ``reset`` can be made to raise once, through ``set_attr``.

    ``set_attr("fail_next_step", [False, True, ...])`` arms slot 1: its next step raises ``ValueError``
    (and disarms it); ``fail_next_reset`` does the same for ``reset`` with ``RuntimeError``;
    ``stall_next_step`` (seconds) makes the next step spin the CPU that long, holding the GIL.
    """

    def __init__(self, env: gym.Env, label: str) -> None:
        super().__init__(env)
        self.label = label
        self.pid = os.getpid()
        self.fail_next_step = False
        self.fail_next_reset = False
        self.stall_next_step = 0.0

    def step(self, action: Any):
        if self.fail_next_step:
            self.fail_next_step = False
            raise ValueError(f"deliberate step failure in faulty env {self.label}")
        if self.stall_next_step:
            until = time.monotonic() + self.stall_next_step
            self.stall_next_step = 0.0
            while time.monotonic() < until:  # busy: a slow env, not a sleeping one
                pass
        return self.env.step(action)

    def reset(self, **kwargs: Any):
        if self.fail_next_reset:
            self.fail_next_reset = False
            raise RuntimeError(f"deliberate reset failure in faulty env {self.label}")
        return self.env.reset(**kwargs)


def make_faulty(label: str = "?") -> gym.Env:
    """CartPole that fails on demand (see :class:`Faulty`); ``get_attr("label")`` echoes ``label``."""
    return Faulty(gym.make("CartPole-v1"), str(label))


def count_construction(counter: str) -> int:
    """Add one to the number kept in the file ``counter``; return the new number (1 the first time)."""
    path = Path(counter)
    count = int(path.read_text() or "0") + 1 if path.exists() else 1
    path.write_text(str(count))
    return count


def make_always_raising(
    counter: str, message: str = "crash-loop-env-would-not-build", error_type: str = "RuntimeError"
) -> gym.Env:
    """Raises ``error_type`` (a built-in's name or ``gymnasium.error.NAME``) at every construction."""
    count = count_construction(counter)
    kind = getattr(gym.error, error_type.rsplit(".", 1)[-1]) if "." in error_type else getattr(builtins, error_type)
    raise kind(f"{message} (construction {count})")


def make_exiting(counter: str, code: int = 3) -> gym.Env:
    """Ends its process at every construction with ``os._exit(code)``: nothing is reported."""
    count_construction(counter)
    os._exit(code)


def make_flaky(counter: str, failures: int = 2, how: str = "raise") -> gym.Env:
    """Fails its first ``failures`` constructions (``how``: "raise" or "exit"), then makes CartPole."""
    count = count_construction(counter)
    if count <= failures:
        if how == "exit":
            os._exit(4)
        raise RuntimeError(f"flaky start-up failure {count} of {failures}")
    return Faulty(gym.make("CartPole-v1"), f"flaky-{count}")


def make_works_once(counter: str) -> gym.Env:
    """Builds CartPole the first time only; every later construction raises (a crash loop after a restart)."""
    count = count_construction(counter)
    if count > 1:
        raise RuntimeError(f"works-once env cannot be built again (construction {count})")
    return Faulty(gym.make("CartPole-v1"), "works-once")


class _Dying(gym.Wrapper):
    """Ends its process (``os._exit(5)``) at its first reset or step: a crash inside the env, unreported."""

    def reset(self, **kwargs: Any):
        os._exit(5)

    def step(self, action: Any):
        os._exit(5)


def make_dies_after_restart(counter: str) -> gym.Env:
    """Works in its first process; in every later one, the process dies at the env's first reset or step."""
    count = count_construction(counter)
    env = Faulty(gym.make("CartPole-v1"), f"incarnation-{count}")
    return env if count == 1 else _Dying(env)
