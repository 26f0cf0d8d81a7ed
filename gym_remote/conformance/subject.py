"""The client under test: its command line with the placeholders filled in, and its processes.

:func:`expand` is pure; :class:`ClientProcess` starts one process of the command, keeps its output in
files, and ends it by pid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PLACEHOLDERS", "ClientProcess", "expand", "free_tcp_endpoint", "wait_for"]

PLACEHOLDERS = ("{endpoint}", "{num_envs}", "{liveness_timeout}", "{security}")

OUTPUT_TAIL_LINES = 30


def expand(
    template: Sequence[str],
    *,
    endpoint: str,
    num_envs: int,
    liveness_timeout: float,
    security: Sequence[str] = (),
) -> list[str]:
    """``template`` with its placeholders replaced (docs/CONFORMANCE.md §2).

    An argument that is exactly ``{security}`` becomes the arguments ``security`` (possibly none);
    the other placeholders are replaced wherever they appear in an argument.

    >>> expand(["c", "{endpoint}", "-n", "{num_envs}", "{security}"], endpoint="tcp://h:1", num_envs=2,
    ...        liveness_timeout=3.0, security=["--secret-file", "s"])
    ['c', 'tcp://h:1', '-n', '2', '--secret-file', 's']
    """
    if not template:
        raise ValueError("the client command is empty")
    values = {"{endpoint}": endpoint, "{num_envs}": str(num_envs), "{liveness_timeout}": f"{liveness_timeout:g}"}
    command: list[str] = []
    for argument in template:
        if argument == "{security}":
            command.extend(security)
            continue
        for placeholder, value in values.items():
            argument = argument.replace(placeholder, value)
        command.append(argument)
    return command


class ClientProcess:
    """One run of the client command; its stdout and stderr go to files in ``directory``."""

    def __init__(self, command: list[str], directory: Path, label: str, env: dict[str, str] | None = None) -> None:
        self.command = command
        self.label = label
        self.stdout_path = directory / f"{label}.out"
        self.stderr_path = directory / f"{label}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            try:
                self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
            except OSError as error:
                raise OSError(f"cannot start the client command {command[0]!r}: {error}") from error

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float) -> int | None:
        """The exit status, or None if the process is still running after ``timeout`` seconds."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, signum: int) -> None:
        if self.running():
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def end(self, grace: float = 3.0) -> None:
        """SIGCONT (it may be stopped), SIGTERM, and SIGKILL if it is still running after ``grace`` seconds."""
        if self.running():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            if self.wait(grace) is None:
                self.signal(signal.SIGKILL)
        self.wait(10.0)

    def output(self, lines: int = OUTPUT_TAIL_LINES) -> str:
        """The last ``lines`` lines of its stderr, then of its stdout."""
        parts = []
        for path in (self.stderr_path, self.stdout_path):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if text.strip():
                parts.append("\n".join(text.rstrip().splitlines()[-lines:]))
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"ClientProcess({self.label}, pid {self.pid})"


def free_tcp_endpoint() -> str:
    """A ``tcp://127.0.0.1:PORT`` address whose port was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def wait_for(condition, timeout: float, interval: float = 0.02) -> bool:
    """Poll ``condition`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
