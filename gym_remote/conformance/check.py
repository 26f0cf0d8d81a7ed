"""What a check is and what it works with: :class:`Check` and its :class:`Context`.

A check is a function of a :class:`Context`; it starts the client processes it needs through the
context (which ends them all, by pid, when the check ends) and raises
:class:`~gym_remote.conformance.report.CheckFailed` with a message naming what the client got wrong.
The check groups (``wire``, ``values``, ``lifecycle``, ``security``) import this module; the runner
imports them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gym_remote.conformance.subject import ClientProcess, expand, free_tcp_endpoint
from gym_remote.security import create_key_files

__all__ = ["Check", "Context", "Credentials"]


@dataclass(frozen=True)
class Check:
    """One check: ``run(context)`` returns when the client passed and raises CheckFailed when it did not."""

    group: str
    name: str
    run: Callable[[Context], None]


@dataclass(frozen=True)
class Credentials:
    """Key files and a secret for the security checks, made once per run in the run's directory."""

    server_public: Path
    server_secret: Path
    client_public: Path
    client_secret: Path
    stranger_secret: Path
    """A client key pair the servers do not authorize."""
    authorized_dir: Path
    """A directory holding only the authorized client's public key."""
    secret_file: Path
    wrong_secret_file: Path
    secret: str


class Context:
    """What a check works with: the client command, fresh addresses, credentials, and its processes."""

    def __init__(self, template: Sequence[str], directory: Path, liveness_timeout: float) -> None:
        self.template = list(template)
        self.directory = directory
        self.liveness_timeout = liveness_timeout
        self.processes: list[ClientProcess] = []
        self._credentials: Credentials | None = None
        self._started = 0

    def endpoint(self) -> str:
        """A ``tcp://127.0.0.1:PORT`` address whose port was free a moment ago."""
        return free_tcp_endpoint()

    def start_client(
        self, endpoint: str, num_envs: int = 1, security: Sequence[str] = (), liveness_timeout: float | None = None
    ) -> ClientProcess:
        """Start the client command for ``endpoint``; the context ends it when the check ends."""
        self._started += 1
        command = expand(
            self.template,
            endpoint=endpoint,
            num_envs=num_envs,
            liveness_timeout=self.liveness_timeout if liveness_timeout is None else liveness_timeout,
            security=security,
        )
        return self.start(command, f"client-{self._started}")

    def start(self, command: list[str], label: str) -> ClientProcess:
        """Start any process (a helper learner, say); the context ends it when the check ends."""
        process = ClientProcess(command, self.directory, label)
        self.processes.append(process)
        return process

    @property
    def credentials(self) -> Credentials:
        if self._credentials is None:
            self._credentials = _make_credentials(self.directory / "keys")
        return self._credentials

    def end_clients(self) -> None:
        for process in self.processes:
            process.end()

    def client_output(self) -> str:
        """The output tails of the processes this check started (the last three)."""
        parts = []
        for process in self.processes[-3:]:
            output = process.output()
            status = "running" if process.running() else f"exit status {process.process.returncode}"
            parts.append(f"[{process.label}, pid {process.pid}, {status}]\n{output or '(no output)'}")
        return "\n".join(parts)


def _make_credentials(directory: Path) -> Credentials:
    directory.mkdir(mode=0o700)
    server_public, server_secret = create_key_files("server", directory / "server")
    client_public, client_secret = create_key_files("client", directory / "client")
    _, stranger_secret = create_key_files("stranger", directory / "stranger")
    authorized = directory / "authorized"
    authorized.mkdir(mode=0o700)
    (authorized / "client.key").write_bytes(Path(client_public).read_bytes())
    secret = os.urandom(24).hex()
    secret_file, wrong_secret_file = directory / "secret", directory / "wrong-secret"
    for path, text in ((secret_file, secret), (wrong_secret_file, os.urandom(24).hex())):
        path.write_text(text + "\n")
        path.chmod(0o600)
    return Credentials(
        server_public=Path(server_public),
        server_secret=Path(server_secret),
        client_public=Path(client_public),
        client_secret=Path(client_secret),
        stranger_secret=Path(stranger_secret),
        authorized_dir=authorized,
        secret_file=secret_file,
        wrong_secret_file=wrong_secret_file,
        secret=secret,
    )
