"""Launchers: who starts clients for the learner. :class:`LocalClients` are the processes
``RemoteVectorEnv(env_fns)`` starts, watches and reaps.

A :class:`Launcher` is what the :class:`~gym_remote.server.SlotServer` needs of one: the slots it
reserves (``launches``), ``start``, ``poll`` (while the server waits), the news of its clients
(``on_join``, ``on_lost``, ``failed``, ``refused``), ``check_empty`` (while a call waits for
clients) and ``stop``. ``gym_remote.ray.RayClients`` is the other one.

Each local process runs :func:`child_main` on a payload file and serves a contiguous share of the
``env_fns`` (``env_fns[i]`` always serves slot ``i``). The env functions travel with cloudpickle
through a file in a directory only the user can read, never over the network. A launched client
proves it is the one the server started with a random token, and exits on its own when its parent
process is gone, so a crashed or killed training script leaves no orphans behind.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import cloudpickle

from gym_remote.errors import ClientLostError, RemoteEnvError, remote_env_error
from gym_remote.membership import ClientInfo, LaunchSlot, Refuse
from gym_remote.security import ClientSecurity

__all__ = ["Launcher", "LocalClients", "split_evenly"]

logger = logging.getLogger(__name__)


def split_evenly(total: int, parts: int) -> list[tuple[int, int]]:
    """``(first, count)`` of ``parts`` contiguous shares of ``total`` items, the larger shares first."""
    base, extra = divmod(total, parts)
    shares, first = [], 0
    for part in range(parts):
        count = base + (1 if part < extra else 0)
        shares.append((first, count))
        first += count
    return shares


class Launcher(Protocol):
    """Starts clients of the learner's own, and keeps them going.

    ``launches``: slots reserved for the clients it starts, which prove themselves with their
    ``token`` (empty for clients that join as remote clients do). ``local_processes``: how many of
    its clients run on this machine (they need cores the learner would otherwise spin on).
    ``default_bind``: where the server listens unless told otherwise.
    """

    @property
    def launches(self) -> Sequence[LaunchSlot]: ...

    @property
    def local_processes(self) -> int: ...

    @property
    def default_bind(self) -> str: ...

    def start(self, address: str, *, allow_pickle: bool, security: ClientSecurity | None) -> None:
        """Start the clients; they connect to ``address`` (with ``security``'s keys if given)."""

    def poll(self) -> list[tuple[int, int]]:
        """``(launch index, exit code)`` of clients that ended since the last call (the server then
        declares them lost); restarts what is due. Raises when a client cannot be kept going."""
        ...

    def on_join(self, client: ClientInfo) -> None:
        """``client`` joined."""

    def on_lost(self, client: ClientInfo) -> None:
        """``client`` was lost (its launched process, if any, is to end)."""

    def failed(self, index: int, report: dict[str, Any]) -> None:
        """Launched client ``index`` reported that its envs could not be made (an ERROR ``report``)."""

    def refused(self, index: int, refusal: Refuse) -> None:
        """Launched client ``index`` was refused for good."""

    def exited(self, index: int) -> bool:
        """Whether launched client ``index`` is known to have ended (it is not waited for on close)."""
        ...

    def check_empty(self, empty: list[int]) -> None:
        """A call waits for clients to serve the ``empty`` slots (asked again as it waits): raise if the launcher
        knows that some will not come soon (e.g. Ray cannot place them), rather than let the wait run out."""

    def stop(self, timeout: float) -> None:
        """End every client (after the server told them to leave), within ``timeout`` seconds."""


class LocalClients:
    """Client processes serving ``env_fns`` in contiguous shares, restarted when they die.

    Args:
        env_fns: the env functions, ``env_fns[i]`` for slot ``i``.
        num_clients: how many processes share them.
        connect_timeout: how long each client waits for the server's handshake answer.
        liveness_timeout: after how long without a sign of life a client counts the server as gone.
        max_restarts: how many times in a row a client may die without having served a step before
            :meth:`schedule_restart` gives up on it.
        data_plane: the clients offer the server the same-host data plane (see ``RemoteVectorEnv``).
        spin: the clients' ``spin`` over the data plane (see :class:`~gym_remote.EnvClient`).

    A client whose env function raised, or whose envs' spaces do not fit, is not restarted:
    :meth:`poll` raises its error (it would fail the same way again).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable],
        num_clients: int,
        *,
        connect_timeout: float,
        liveness_timeout: float = 10.0,
        max_restarts: int = 3,
        data_plane: bool | str = True,
        spin: float = 0.0,
    ) -> None:
        self.env_fns = list(env_fns)
        self.data_plane = data_plane
        self.spin = spin
        self.workdir = tempfile.mkdtemp(prefix="gym-remote-")  # mode 0700: the payloads and the server's endpoint
        self.connect_timeout = connect_timeout
        self.liveness_timeout = liveness_timeout
        self.max_restarts = max_restarts
        self.slots = [
            LaunchSlot(index=index, first_slot=first, count=count, token="")
            for index, (first, count) in enumerate(split_evenly(len(self.env_fns), num_clients))
        ]
        self.processes: list[subprocess.Popen | None] = [None] * len(self.slots)
        self.restarts = [0] * len(self.slots)
        self.failures = [0] * len(self.slots)
        self._exits_reported: set[int] = set()
        self._due: dict[int, float] = {}
        self._members: dict[int, ClientInfo] = {}  # launch index -> the client its process serves as
        self._served: dict[int, bool] = {}  # launch index -> whether its lost client had served a step
        self._failures: dict[int, dict[str, Any]] = {}  # env functions that raised, by launch index
        self._refusals: dict[int, Refuse] = {}
        self._spawned = 0
        self._address = ""
        self._allow_pickle = False
        self._security: ClientSecurity | None = None
        self._finalizer = weakref.finalize(self, _end, self.processes, self.workdir)

    def start(self, address: str, *, allow_pickle: bool, security: ClientSecurity | None = None) -> None:
        """Start every client process; they connect to ``address`` (with ``security``'s keys if given)."""
        self._address, self._allow_pickle, self._security = address, allow_pickle, security
        for launch in self.slots:
            self._spawn(launch)

    def _spawn(self, launch: LaunchSlot) -> None:
        launch.token = secrets.token_hex(16)  # a new process proves itself with a new token
        self._spawned += 1
        payload = os.path.join(self.workdir, f"client-{launch.index}-{self._spawned}.payload")
        header = {
            "address": self._address,
            "sys_path": sys.path,
            "name": f"local-{launch.index}",
            "connect_timeout": self.connect_timeout,
            "liveness_timeout": self.liveness_timeout,
            "allow_pickle": self._allow_pickle,
            "data_plane": self.data_plane,
            "spin": self.spin,
            "log_level": logging.getLogger("gym_remote").getEffectiveLevel(),
            "launch": {"index": launch.index, "token": launch.token, "parent_pid": os.getpid()},
            "security": self._security.to_payload() if self._security is not None else {},
        }
        share = self.env_fns[launch.first_slot : launch.first_slot + launch.count]
        descriptor = os.open(payload, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(json.dumps(header).encode() + b"\n")
            file.write(cloudpickle.dumps(share))
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD_COMMAND, payload],
            stdin=subprocess.DEVNULL,
            env=_child_environment(),
            start_new_session=True,  # Ctrl-C reaches the learner, which then closes its clients
        )
        self.processes[launch.index] = process
        self._exits_reported.discard(launch.index)
        logger.debug(
            "started local client %d (pid %d) for slots %d-%d",
            launch.index,
            process.pid,
            launch.first_slot,
            launch.first_slot + launch.count - 1,
        )

    @property
    def launches(self) -> list[LaunchSlot]:
        return self.slots

    @property
    def default_bind(self) -> str:
        """The server's endpoint when none is given: a socket in the private directory."""
        return f"ipc://{self.workdir}/server" if os.name == "posix" else "tcp://127.0.0.1:*"

    @property
    def local_processes(self) -> int:
        return len(self.slots)

    def on_join(self, client: ClientInfo) -> None:
        if client.launch_index is not None:
            self._members[client.launch_index] = client
            self._failures.pop(client.launch_index, None)

    def on_lost(self, client: ClientInfo) -> None:
        index = client.launch_index
        if index is not None:
            self._members.pop(index, None)
            if index not in self._exits_reported:  # else poll() has planned its restart already
                self._served[index] = client.steps > 0
            self.kill(index)  # it is restarted once its process has ended

    def failed(self, index: int, report: dict[str, Any]) -> None:
        self._failures[index] = report

    def refused(self, index: int, refusal: Refuse) -> None:
        self._refusals[index] = refusal

    def poll(self) -> list[tuple[int, int]]:
        """Notice dead processes and plan their restarts (after a backoff), restart those due, or give up.

        Raises:
            RemoteEnvError: an env function raised (of the type it raised, naming ``env_fns[i]``).
            RuntimeError: a client was refused (what ``SyncVectorEnv`` raises for envs whose spaces differ).
            ClientLostError: a process died too often in a row without serving a step.
        """
        for index, report in self._failures.items():
            raise self._envs_failed(index, report)
        for index, refusal in self._refusals.items():
            if refusal.code == "spaces":  # what SyncVectorEnv raises for these envs
                raise refusal.error(refusal.reason)
            raise RuntimeError(f"local client {index} was refused: {refusal.reason}")
        exits = self.poll_exits()
        for index, code in exits:
            member = self._members.get(index)
            served = member.steps > 0 if member is not None else self._served.pop(index, False)
            delay = self.schedule_restart(index, served=served)
            if delay is None:
                launch = self.slots[index]
                raise ClientLostError(
                    f"local client {index} (env_fns[{launch.first_slot}:{launch.first_slot + launch.count}]) failed "
                    f"{self.failures[index]} times in a row (last exit code {code}); it is not restarted again"
                )
            logger.warning("local client %d exited with code %d; restarting it in %.1f s", index, code, delay)
        self.start_due()
        return exits

    def _envs_failed(self, index: int, report: dict[str, Any]) -> RemoteEnvError:
        """The error of a local client whose env function raised: of the type it raised, naming the env."""
        launch = self.slots[index]
        position = report.get("index")
        if type(position) is int and 0 <= position < launch.count:
            slot = launch.first_slot + position
            where = f"env_fns[{slot}]"
        else:
            slot, where = None, f"the env functions env_fns[{launch.first_slot}:{launch.first_slot + launch.count}]"
        return remote_env_error(
            f"{where} raised while making its env, in local client {index}: {report.get('type')}: "
            f"{report.get('message')}",
            report,
            slot,
        )

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes if process is not None]

    def exited(self, index: int) -> bool:
        """Whether client ``index``'s process has ended."""
        process = self.processes[index]
        return process is not None and process.poll() is not None

    def check_empty(self, empty: list[int]) -> None:
        pass  # a client that cannot be kept going makes poll() raise

    def poll_exits(self) -> list[tuple[int, int]]:
        """``(index, exit code)`` of the client processes that ended since the last call."""
        exits = []
        for index, process in enumerate(self.processes):
            if process is not None and index not in self._exits_reported and process.poll() is not None:
                self._exits_reported.add(index)
                exits.append((index, process.returncode))
        return exits

    def kill(self, index: int) -> None:
        """End client ``index``'s process (it will be reported by :meth:`poll_exits`)."""
        process = self.processes[index]
        if process is not None and process.poll() is None:
            process.kill()

    def schedule_restart(self, index: int, *, served: bool) -> float | None:
        """Plan a restart of client ``index`` after a backoff; None if it failed too often in a row.

        ``served``: whether the process that ended had served a step (its failure streak then restarts).
        """
        self.failures[index] = 1 if served else self.failures[index] + 1
        if self.failures[index] > self.max_restarts:
            return None
        delay = min(RESTART_BACKOFF_SECONDS * 2 ** (self.failures[index] - 1), MAX_RESTART_BACKOFF_SECONDS)
        self._due[index] = time.monotonic() + delay
        return delay

    def start_due(self) -> None:
        """Restart the clients whose backoff has passed."""
        now = time.monotonic()
        for index, due in list(self._due.items()):
            if now >= due:
                del self._due[index]
                process = self.processes[index]
                if process is not None:
                    process.wait()  # reap the one that ended
                self.restarts[index] += 1
                logger.info("restarting local client %d (restart %d)", index, self.restarts[index])
                self._spawn(self.slots[index])

    def stop(self, timeout: float = 5.0) -> None:
        """Wait up to ``timeout`` for the processes to exit, then terminate and kill what is left."""
        self._due.clear()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process is None:
                continue
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        leftover = [process for process in self.processes if process is not None and process.poll() is None]
        if leftover:
            logger.warning("terminating %d local client(s) that did not exit", len(leftover))
        self._finalizer()


RESTART_BACKOFF_SECONDS = 0.5
"""Delay before the first restart of a crashed local client; it doubles with each failure in a row."""

MAX_RESTART_BACKOFF_SECONDS = 10.0


_CHILD_COMMAND = "import sys; from gym_remote.launch import child_main; sys.exit(child_main(sys.argv[1]))"


def _child_environment() -> dict[str, str]:
    """The parent's environment, with gym_remote importable even when it is not installed."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = dict(os.environ)
    paths = [package_root, *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return environment


def _end(processes: list[subprocess.Popen | None], workdir: str) -> None:
    """End the processes, remove the private directory."""
    try:
        _kill(processes)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill(processes: list[subprocess.Popen | None]) -> None:
    """Terminate, then kill, every process still running, and reap them all."""
    alive = [process for process in processes if process is not None and process.poll() is None]
    for process in alive:
        process.terminate()
    deadline = time.monotonic() + 2.0
    for process in alive:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                logger.error("local client pid %d did not die after SIGKILL", process.pid)


def child_main(payload_path: str) -> int:
    """Entry point of a launched client process."""
    with open(payload_path, "rb") as file:
        header = json.loads(file.readline())
        blob = file.read()
    os.unlink(payload_path)
    sys.path[:] = header["sys_path"]
    logging.basicConfig(level=header["log_level"], format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    from gym_remote.client import EnvClient

    launch = header["launch"]
    if os.getppid() != launch["parent_pid"]:
        return 1  # the parent died before this process started
    try:
        env_fns = cloudpickle.loads(blob)
    except Exception:
        env_fns = [_raise_unpickling_error(sys.exc_info()[1])]
    client = EnvClient(
        header["address"],
        env_fns,
        name=header["name"],
        connect_timeout=header["connect_timeout"],
        liveness_timeout=header["liveness_timeout"],
        reconnect=False,  # a new learner starts clients of its own
        slot_timeout=None,  # its slots free up when the learner has reported the previous client's loss
        allow_pickle=header["allow_pickle"],
        data_plane=header["data_plane"],
        spin=header["spin"],
        **header["security"],
        _launch=launch,
    )
    try:
        client.run()
    except Exception as error:  # already reported to the server where it could be
        logging.getLogger(__name__).debug("local client exiting after: %s", error)
        return 1
    finally:
        if os.getppid() != launch["parent_pid"]:  # the learner died without cleaning up (e.g. SIGKILL)
            _remove_private_directory(os.path.dirname(payload_path))
    return 0


def _remove_private_directory(workdir: str) -> None:
    """Remove what a dead learner left in its private directory: the ZeroMQ socket file, then the
    directory itself once no other client of that learner has a file there any more."""
    try:
        os.unlink(os.path.join(workdir, "server"))
    except OSError:
        pass
    try:
        os.rmdir(workdir)
    except OSError:  # another client's payload is still there (it removes the directory when it goes)
        pass


def _raise_unpickling_error(error: BaseException | None) -> Callable:
    def fail() -> None:
        raise RuntimeError(f"could not unpickle the env functions in the client process: {error!r}") from error

    return fail


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
