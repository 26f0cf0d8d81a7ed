"""Virtual environments of their own, for the tests whose dependencies cannot be the suite's.

Some promises are about other versions than the ones the suite runs on: that the package works on the oldest
versions ``pyproject.toml`` allows, and with RLlib, whose ``ray[rllib]`` pins an older Gymnasium than the
suite's. A test of such a promise runs pytest on some test files inside a :class:`SideEnvironment`: a virtual
environment under ``.venvs/`` at the repository root, made on first use, this package installed in it
editable. Its directory is named by a digest of what goes into it (``pyproject.toml`` and the requirements),
so a changed requirement makes a new one, and an environment whose making was interrupted is made again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
SIDE_ENVS_DIR = REPO_ROOT / ".venvs"
INSTALL_TIMEOUT = 900.0
"""Seconds one ``pip install`` may take (downloads from the package index included)."""
TEST_TOOLS = ("pytest>=7", "pytest-timeout>=2.1")
BUILD_TOOLS = ("setuptools>=77", "wheel")
_COMPLETE = "complete"


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

    @property
    def path(self) -> Path:
        recipe = json.dumps(
            [self.steps, (REPO_ROOT / "pyproject.toml").read_text(), sys.version_info[:2]], sort_keys=True
        )
        return SIDE_ENVS_DIR / f"{self.name}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def ensure(self) -> Path:
        """The environment's interpreter, the environment made first if it is missing or was left half made."""
        path = self.path
        SIDE_ENVS_DIR.mkdir(exist_ok=True)
        with _locked(SIDE_ENVS_DIR / f"{self.name}.lock", timeout=INSTALL_TIMEOUT * (len(self.steps) + 3)):
            if (path / _COMPLETE).exists():
                return self.python
            for stale in SIDE_ENVS_DIR.glob(f"{self.name}-*"):
                shutil.rmtree(stale)
            subprocess.run([_base_python(), "-m", "venv", str(path)], check=True, timeout=120)
            for step in (*self.steps, (*BUILD_TOOLS, *TEST_TOOLS)):
                self._pip("install", *step)
            self._pip("install", "--no-deps", "--no-build-isolation", "-e", str(REPO_ROOT))
            (path / _COMPLETE).write_text(json.dumps(self.steps))
        return self.python

    def run_pytest(self, args: Sequence[str], *, timeout: float, env: dict[str, str] | None = None) -> None:
        """Run ``python -m pytest ARGS`` in the environment (made first if need be) from the repository root;
        raise ``AssertionError`` with the end of its output if it fails."""
        python = self.ensure()
        child_env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
        child_env.update(OMP_NUM_THREADS="1", VIRTUAL_ENV=str(self.path), **(env or {}))
        child_env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{child_env.get('PATH', '')}"
        command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
        try:
            result = subprocess.run(
                command, cwd=REPO_ROOT, env=child_env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as timed_out:
            output = timed_out.stdout.decode(errors="replace") if timed_out.stdout else ""  # bytes, even so
            raise AssertionError(f"pytest in {self.name} ran over {timeout} s:\n{_tail(output)}") from None
        if result.returncode != 0:
            raise AssertionError(
                f"pytest in {self.name} exited with {result.returncode}:\n{_tail(result.stdout + result.stderr)}"
            )

    def _pip(self, *args: str) -> None:
        subprocess.run(
            [str(self.python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
            check=True,
            timeout=INSTALL_TIMEOUT,
        )


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
