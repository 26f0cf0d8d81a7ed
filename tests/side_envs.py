"""Virtual environments of their own, for the tests whose dependencies cannot be the suite's.

Some promises are about other versions than the ones the suite runs on: that the package works on the oldest
versions ``pyproject.toml`` allows, and with RLlib, whose ``ray[rllib]`` pins an older Gymnasium than the
suite's. A test of such a promise runs pytest on some test files inside a :class:`SideEnvironment`: a virtual
environment under ``.venvs/`` at the repository root, made on first use, this package installed in it
editable. Its directory is named by a digest of what goes into it (``pyproject.toml`` and the requirements),
so a changed requirement makes a new one, and an environment whose making was interrupted is made again.

Making an environment takes minutes (downloads), so a test does its work through a :class:`SideRun`, marked
``@pytest.mark.side_run(RUN)``: ``tests/conftest.py`` starts every collected one in the background when
collection ends and puts its test last, where it waits for the run's end; the run overlaps the rest of the suite.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
SIDE_ENVS_DIR = REPO_ROOT / ".venvs"
INSTALL_TIMEOUT = 900.0
"""Seconds one ``pip install`` may take (downloads from the package index included)."""
TEST_TOOLS = ("pytest>=7", "pytest-timeout>=2.1")
BUILD_TOOLS = ("setuptools>=77", "wheel")
_COMPLETE = "complete"
PARENT_VARIABLE = "GYM_REMOTE_SIDE_RUN_PARENT"
"""Set in a side run's pytest to the pid of the suite that started it (``tests/conftest.py``: the run ends itself
if that process dies without stopping it, as when it is SIGKILLed)."""


def project_metadata() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def oldest_allowed(requirements: Sequence[str]) -> list[str]:
    """Each requirement pinned to its lower bound: ``"numpy>=1.23.2"`` becomes ``"numpy==1.23.2"``.

    >>> oldest_allowed(["gymnasium>=1.1,<2", "tqdm>=4.60"])
    ['gymnasium==1.1', 'tqdm==4.60']
    """
    pinned = []
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.\[\]-]+)\s*>=\s*([^,;\s]+)(\s*,.*)?", requirement)
        if match is None:
            raise ValueError(f"{requirement!r} has no lower bound (>=) to pin")
        pinned.append(f"{match.group(1)}=={match.group(2)}")
    return pinned


@dataclass(frozen=True)
class SideEnvironment:
    """A virtual environment made by installing ``steps`` in order (each a list of pip requirements), then this
    package editable and without dependencies."""

    name: str
    steps: tuple[tuple[str, ...], ...]

    @functools.cached_property
    def path(self) -> Path:
        recipe = json.dumps(
            [self.steps, (REPO_ROOT / "pyproject.toml").read_text(), sys.version_info[:2]], sort_keys=True
        )
        return SIDE_ENVS_DIR / f"{self.name}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def making_budget(self) -> float:
        """Seconds making the environment may take: each of its pip installs, the venv and this package."""
        return INSTALL_TIMEOUT * (len(self.steps) + 3)

    def making_commands(self) -> list[list[str]]:
        """The commands that make the environment, in order: the venv, each step, then this package."""
        pip = [str(self.python), "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-compile"]
        return [
            [_base_python(), "-m", "venv", str(self.path)],
            *([*pip, *step] for step in (*self.steps, (*BUILD_TOOLS, *TEST_TOOLS))),
            [*pip, "--no-deps", "--no-build-isolation", "-e", str(REPO_ROOT)],
        ]

    def ensure(self, call: Callable[[list[str]], None]) -> Path:
        """The environment's interpreter, the environment made first (each command run by ``call``) if it is
        missing or was left half made."""
        SIDE_ENVS_DIR.mkdir(exist_ok=True)
        with _locked(SIDE_ENVS_DIR / f"{self.name}.lock", timeout=self.making_budget):
            if not (self.path / _COMPLETE).exists():
                for stale in SIDE_ENVS_DIR.glob(f"{self.name}-*"):
                    shutil.rmtree(stale)
                for command in self.making_commands():
                    call(command)
                (self.path / _COMPLETE).write_text(json.dumps(self.steps))
        return self.python

    def child_env(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment variables of a process run in this environment."""
        child_env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
        child_env.update(OMP_NUM_THREADS="1", VIRTUAL_ENV=str(self.path), **(env or {}))
        child_env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{child_env.get('PATH', '')}"
        return child_env


class SideRun:
    """``python -m pytest ARGS`` (from the repository root) in a :class:`SideEnvironment`, made first if need be,
    on a thread of its own from :meth:`start` on; :meth:`result` waits for it and fails as it did."""

    started: ClassVar[list[SideRun]] = []
    """Every run started in this process (so that an interrupted suite can stop them)."""

    def __init__(
        self, environment: SideEnvironment, args: Sequence[str], *, timeout: float, env: dict[str, str] | None = None
    ) -> None:
        self.environment, self.args, self.timeout, self.env = environment, list(args), timeout, env or {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen | None = None
        self._stopped = False
        self._failure: str | None = None
        self._passed = False

    def __repr__(self) -> str:
        return f"SideRun({self.environment.name}: pytest {' '.join(self.args)})"

    @property
    def budget(self) -> float:
        """Seconds the run may take, making its environment included."""
        return self.timeout + self.environment.making_budget

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=repr(self), daemon=True)
            SideRun.started.append(self)
            self._thread.start()

    def result(self) -> None:
        """Wait for the run (started now if it was not); raise ``AssertionError`` with its output's end if it
        failed."""
        self.start()
        assert self._thread is not None
        self._thread.join(self.budget)
        if self._thread.is_alive():
            self.stop()
            raise AssertionError(f"{self!r} did not end within {self.budget} s")
        if not self._passed:
            raise AssertionError(self._failure or f"{self!r} ended without a result")

    def stop(self) -> None:
        """End the process the run is waiting for and every process it started (its process group)."""
        with self._lock:
            self._stopped = True
            process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def _run(self) -> None:
        try:
            python = self.environment.ensure(
                lambda command: self._call(command, INSTALL_TIMEOUT, self.environment.child_env())
            )
            command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *self.args]
            env = {**self.env, PARENT_VARIABLE: str(os.getpid())}
            self._call(command, self.timeout, self.environment.child_env(env))
        except _Failed as failed:
            self._failure = str(failed)
        except Exception as error:  # (on this thread, nothing would show it otherwise)
            self._failure = f"{self!r}: {error!r}"
        else:
            self._passed = True

    def _call(self, command: list[str], timeout: float, env: Mapping[str, str]) -> None:
        """Run ``command`` from the repository root, in a process group of its own that :meth:`stop` ends, at a
        lower priority than the suite's own tests (whose timings it must not disturb)."""
        with self._lock:
            if self._stopped:
                raise _Failed(f"{self!r} was stopped")
            self._process = process = subprocess.Popen(
                ["nice", "-n", "10", *command],
                cwd=REPO_ROOT,
                env=dict(env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            output, _ = process.communicate()
            raise _Failed(f"{self!r}: {' '.join(command[:6])} ... ran over {timeout} s:\n{_tail(output)}") from None
        if process.returncode != 0:
            raise _Failed(f"{self!r}: {' '.join(command[:6])} ... exited with {process.returncode}:\n{_tail(output)}")


class _Failed(Exception):
    """A command of a side run failed (its message says which and how)."""


def _base_python() -> str:
    """The interpreter the running one is made from, outside any virtual environment."""
    return getattr(sys, "_base_executable", None) or sys.executable


def _tail(text: str, lines: int = 150) -> str:
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def _locked(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (two test runs making the same environment take turns)."""
    with open(path, "w") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path} stayed locked for {timeout} s") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


OLDEST = SideEnvironment("oldest", (tuple(oldest_allowed(project_metadata()["dependencies"])),))
"""The oldest versions of its dependencies that ``pyproject.toml`` allows."""

RLLIB = SideEnvironment(
    "rllib",
    (("torch==2.13.0",), (*project_metadata()["dependencies"], *project_metadata()["optional-dependencies"]["rllib"])),
)
"""RLlib (the ``rllib`` extra), which pins its own Gymnasium; torch's CPU build first, so that no CUDA build is
pulled in."""
