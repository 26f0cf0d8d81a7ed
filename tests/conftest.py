"""Shared fixtures: every process a test starts is ended by the test, by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("OMP_NUM_THREADS", "1")


def subprocess_env() -> dict[str, str]:
    """Environment for child processes: the repository (and so ``tests.envs``) importable."""
    env = dict(os.environ)
    paths = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


class ProcessReaper:
    """Starts processes for a test and kills every one of them, by pid, when the test ends."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []

    def popen(self, args: list[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("env", subprocess_env())
        kwargs.setdefault("cwd", str(REPO_ROOT))
        process = subprocess.Popen(args, **kwargs)
        self.processes.append(process)
        return process

    def cli(self, *args: str, **kwargs) -> subprocess.Popen:
        """Start ``python -m gym_remote ARGS``."""
        return self.popen([sys.executable, "-m", "gym_remote", *args], **kwargs)

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def reaper():
    """A :class:`ProcessReaper`; all its processes are SIGKILLed and reaped after the test."""
    reaper = ProcessReaper()
    yield reaper
    reaper.kill_all()


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def free_tcp_address() -> str:
    """A ``tcp://127.0.0.1:PORT`` address whose port was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
