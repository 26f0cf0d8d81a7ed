"""The soak's client processes: the supervisor that starts and ends them, and the fault injector.

:class:`Supervisor` starts ``gym-remote client`` processes (``python -m gym_remote client``) hosting
1-3 soak envs each, on every plane (``plane_for``), and ends every one of them by pid. The
:class:`FaultInjector` thread follows the seed's fault schedule: it SIGKILLs, SIGTERMs and SIGSTOPs
clients, starts extra ones, and starts the replacements that keep the slots served.

Nothing here touches the learner: what the learner must know (clients started, faults that end a
membership, what each fault may cost a call) goes through :attr:`FaultInjector.notes`, a queue the
learner drains after each call, each note put there *before* its signal goes out.

Replacements: a lost client of ``k`` envs is replaced by clients hosting ``k`` envs in all. When the
supervisor knows that no one else waits in line (the learner's last ``stats()`` shows every live client
serving, and none is frozen), one client of ``k`` envs (or a split) replaces it; otherwise ``k``
one-env clients do, so that whatever joins first, the freed slots can all be filled.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_remote.links import shared
from tests.soak.events import EventLog
from tests.soak.schedule import LIVENESS, NUM_ENVS, PlannedFault

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_EXTRA_ENVS = 5  # envs beyond NUM_ENVS that may wait in line at once (extras, rejoined clients)
JOIN_SECONDS = 4.0  # a replacement process starts, imports and joins within this (2 cores, shared)
KILL_GRACE = {"kill": 0.0, "term": 0.3, "freeze": LIVENESS + 1.5}
"""Seconds after a fault from which its membership may answer no command (a freeze: the server must
have noticed: a heartbeat interval, the liveness timeout and a probe interval)."""


def plane_for(choice: float, zmq_share: float) -> str:
    """The plane of a client started with the random ``choice`` in [0, 1): ZeroMQ for a ``zmq_share`` of them,
    the rest split evenly between the data channel with shared-memory mailboxes and its socket alone (the
    socket alone only where the host has no mailboxes)."""
    if choice < zmq_share:
        return "zmq"
    if not shared.AVAILABLE:
        return "uds"
    return "shm" if (choice - zmq_share) / (1.0 - zmq_share) < 0.5 else "uds"


@dataclass
class Client:
    """One client process the soak started."""

    number: int
    name: str
    size: int
    plane: str  # "shm", "uds" or "zmq" (--no-data-plane); see plane_for
    process: subprocess.Popen
    log_path: Path
    started: float
    ended_by: str = ""  # "kill" or "term" once the soak ended it
    frozen_until: float = 0.0
    exit_seen: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return not self.ended_by and self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class Note:
    """A fact for the learner: ``kind`` is ``client``, ``fault``, ``freeze_end``, ``cost`` or ``failure``."""

    kind: str
    values: dict[str, Any] = field(default_factory=dict)


class Supervisor:
    """Starts client processes, ends each by pid, and watches that none exits on its own."""

    def __init__(self, address: str, workdir: Path, tmpdir: Path, payload: int, log: EventLog) -> None:
        self.address = address
        self.logs = workdir / "clients"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.tmpdir = tmpdir
        self.payload = payload
        self.log = log
        self.clients: list[Client] = []
        self.lock = threading.Lock()
        self.environment = {key: value for key, value in os.environ.items() if key != "GYM_REMOTE_DATA_PLANE"}
        paths = [str(REPO_ROOT), *filter(None, self.environment.get("PYTHONPATH", "").split(os.pathsep))]
        self.environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        self.environment["TMPDIR"] = str(tmpdir)

    def start(self, size: int, plane: str, why: str) -> Client:
        number = len(self.clients) + 1
        name = f"c{number}"
        log_path = self.logs / f"{name}.log"
        command = [
            sys.executable, "-m", "gym_remote", "--log-level", "INFO", "client", self.address,
            "--factory", "tests.envs.soak:make_env", "--num-envs", str(size), "--name", name,
            "--env-kwargs", json.dumps({"payload": self.payload}), "--liveness-timeout", str(LIVENESS),
            "--connect-timeout", "60",
        ]  # fmt: skip
        environment = dict(self.environment)
        if plane == "zmq":
            command.append("--no-data-plane")
        else:
            environment["GYM_REMOTE_DATA_PLANE"] = plane  # "shm" or "uds": the data channel's kind
        with open(log_path, "w") as output:
            process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=environment)
        client = Client(number, name, size, plane, process, log_path, time.monotonic())
        with self.lock:
            self.clients.append(client)
        self.log.add("start", f"{name} pid {process.pid}: {size} env(s) on {plane} ({why})")
        return client

    def alive(self) -> list[Client]:
        with self.lock:
            return [client for client in self.clients if client.alive]

    def signal(self, client: Client, signum: int) -> None:
        try:
            os.kill(client.pid, signum)
        except ProcessLookupError:
            pass

    def unexpected_exits(self) -> list[Client]:
        """Clients that exited without the soak ending them (each reported once)."""
        exited = []
        with self.lock:
            for client in self.clients:
                if not client.exit_seen and client.process.poll() is not None:
                    client.exit_seen = True
                    self.log.add("exit", f"{client.name} pid {client.pid} exited: {client.process.returncode}")
                    if not client.ended_by:
                        exited.append(client)
        return exited

    def finish(self, timeout: float) -> list[str]:
        """After the learner closed: every client must exit by itself within ``timeout``; those that do not
        are killed (by pid). Returns what went wrong."""
        problems = []
        for client in self.clients:
            self.signal(client, signal.SIGCONT)
        deadline = time.monotonic() + timeout
        for client in self.clients:
            try:
                code = client.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems.append(
                    f"{client.name} (pid {client.pid}) still running {timeout:g} s after close:\n{client.log_tail()}"
                )
                self.kill_all()
                continue
            if not client.ended_by and code != 0:
                problems.append(
                    f"{client.name} (pid {client.pid}) exited with {code} after close:\n{client.log_tail()}"
                )
        return problems

    def kill_all(self) -> None:
        """SIGKILL (by pid) and reap every client still running."""
        for client in self.clients:
            if client.process.poll() is None:
                self.signal(client, signal.SIGKILL)
            try:
                client.process.wait(10)
            except subprocess.TimeoutExpired:
                pass


class FaultInjector(threading.Thread):
    """Runs the fault schedule against the supervisor's clients, and keeps the slots served."""

    def __init__(
        self, supervisor: Supervisor, schedule: Iterator[PlannedFault], zmq_share: float, log: EventLog, started: float
    ) -> None:
        super().__init__(name="fault-injector", daemon=True)
        self.supervisor = supervisor
        self.schedule = schedule
        self.zmq_share = zmq_share
        self.log = log
        self.started = started
        self.notes: queue.Queue[Note] = queue.Queue()
        self.counts: dict[str, int] = {}
        self.members: frozenset[int] = frozenset()  # pids serving slots at the learner's last stats()
        self.members_at = 0.0
        self.all_served = False
        self._thaws: list[tuple[float, Client, Any]] = []  # (when, client, fault id) to SIGCONT
        self._stopping = threading.Event()
        self._paused = threading.Event()
        self._idle = threading.Event()
        self._last_start = 0.0
        self._next_trim = 0.0
        self._fault_ids = iter(range(1, 10**9))

    # -- the learner's side --------------------------------------------------------------------

    def seen_members(self, pids: frozenset[int], all_served: bool, when: float) -> None:
        self.members, self.all_served, self.members_at = pids, all_served, when

    def pause(self, timeout: float) -> bool:
        """Inject nothing new; wait until no client is frozen. False if that took longer than ``timeout``."""
        self._idle.clear()
        self._paused.set()
        return self._idle.wait(timeout)

    def resume(self, shift: float) -> None:
        """Go on; the schedule's remaining faults move ``shift`` seconds later (the pause does not eat them)."""
        self.started += shift
        self._paused.clear()

    def expect_joins(self) -> None:
        """The clients just started must join before the learner's next call can return: it may take that long."""
        self._note("cost", at=time.monotonic(), cost=JOIN_SECONDS)

    def _note(self, what: str, **values: Any) -> None:
        self.notes.put(Note(what, values))

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)

    def start_client(self, size: int, plane: str, why: str) -> Client:
        client = self.supervisor.start(size, plane, why)
        self._last_start = client.started
        self._note("client", pid=client.pid, size=size, plane=plane, at=client.started)
        return client

    # -- the thread ----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except BaseException:  # the learner must hear of it: a soak without faults would pass for nothing
            self._note("failure", text=f"the fault injector failed:\n{traceback.format_exc()}")
            raise

    def _run(self) -> None:
        planned = next(self.schedule)
        while not self._stopping.is_set():
            now = time.monotonic()
            self._thaw_due(now)
            for client in self.supervisor.unexpected_exits():
                text = f"client {client.name} (pid {client.pid}) exited on its own with {client.process.returncode}"
                self._note("failure", text=f"{text}:\n{client.log_tail()}")
            if self._paused.is_set():
                if not self._thaws:
                    self._idle.set()
                time.sleep(0.01)
                continue
            if now >= self.started + planned.at:
                self._inject(planned)
                planned = next(self.schedule)
            if now >= self._next_trim:
                self._trim_line()
                self._next_trim = now + 1.0
            time.sleep(0.005)

    def _trim_line(self) -> None:
        """SIGTERM the longest waiting client while more than MAX_EXTRA_ENVS envs wait in line (replacements
        and rejoined clients pile up there), so that a soak of hours keeps a bounded number of processes."""
        if self._capacity() - NUM_ENVS <= MAX_EXTRA_ENVS:
            return
        waiting = [
            client
            for client in self.supervisor.alive()
            if not client.frozen_until and client.pid not in self.members and self.members_at > client.started + 1.0
        ]
        if waiting:
            self._end(waiting[0], "term", None)

    def _thaw_due(self, now: float) -> None:
        for _, client, fault_id in [thaw for thaw in self._thaws if thaw[0] <= now]:
            self.supervisor.signal(client, signal.SIGCONT)
            ended = time.monotonic()
            client.frozen_until = 0.0
            if fault_id is not None:
                self._note("freeze_end", fault=fault_id, at=ended)
            self.log.add("thaw", f"{client.name} pid {client.pid} SIGCONT")
        self._thaws = [thaw for thaw in self._thaws if thaw[0] > now]

    def _pick(self, fraction: float, clients: list[Client]) -> Client | None:
        return clients[int(fraction * len(clients))] if clients else None

    def _inject(self, planned: PlannedFault) -> None:
        alive = self.supervisor.alive()
        unfrozen = [client for client in alive if not client.frozen_until]
        kind = planned.kind
        if kind == "extra":
            self._start_extra(planned)
            return
        if kind in ("kill", "term"):
            victim = self._pick(planned.victims[0], alive if kind == "kill" else unfrozen)
            if victim is not None:
                self._end(victim, kind, planned)
            return
        victims: list[Client] = []
        pool = unfrozen
        if kind == "multi_freeze":  # members, so that the learner waits for all of them at once
            members = [client for client in unfrozen if client.pid in self.members]
            pool = members if len(members) >= len(planned.victims) else unfrozen
        for fraction in planned.victims:
            victim = self._pick(fraction, [c for c in pool if c not in victims])
            if victim is not None:
                victims.append(victim)
        if not victims:
            return
        self.counts[kind] = self.counts.get(kind, 0) + 1
        start = time.monotonic()
        long = kind != "brief_freeze"
        fault_ids = []
        for victim in victims:
            fault_id = None
            if long:
                fault_id = next(self._fault_ids)
                self._note(
                    "fault", id=fault_id, kind="freeze", pid=victim.pid, at=start, takes_effect=KILL_GRACE["freeze"]
                )
            fault_ids.append(fault_id)
        # the cost a call may pay: the brief freeze itself, or the loss found (and a replacement joined)
        cost = planned.duration if not long else max(KILL_GRACE["freeze"], JOIN_SECONDS)
        self._note("cost", at=start, cost=cost)
        for victim, fault_id in zip(victims, fault_ids):
            self.supervisor.signal(victim, signal.SIGSTOP)
            victim.frozen_until = start + planned.duration
            self._thaws.append((start + planned.duration, victim, fault_id))
        names = ", ".join(f"{v.name} pid {v.pid}" for v in victims)
        self.log.add("fault", f"{planned.describe()}: SIGSTOP {names}")
        if long:
            for victim in victims:
                self._replace(victim, planned, why=f"{victim.name} frozen")

    def _end(self, victim: Client, kind: str, planned: PlannedFault | None) -> None:
        """SIGKILL or SIGTERM ``victim`` and replace it (``planned`` None: a trim of the line, not replaced)."""
        counted = kind if planned is not None else "trim"
        self.counts[counted] = self.counts.get(counted, 0) + 1
        start = time.monotonic()
        member = victim.pid in self.members
        self._note(
            "fault", id=next(self._fault_ids), kind=kind, pid=victim.pid, at=start, takes_effect=KILL_GRACE[kind]
        )
        self._note("cost", at=start, cost=JOIN_SECONDS)
        victim.ended_by = kind
        self.supervisor.signal(victim, signal.SIGKILL if kind == "kill" else signal.SIGTERM)
        if kind == "kill" or victim.frozen_until:
            self.supervisor.signal(victim, signal.SIGCONT)  # a SIGTERMed frozen client must wake to leave
        what = planned.describe() if planned is not None else "trimming the line"
        self.log.add(
            "fault",
            f"{what}: {'SIGKILL' if kind == 'kill' else 'SIGTERM'} {victim.name} "
            f"pid {victim.pid} ({'a member' if member else 'not seen serving'})",
        )
        if planned is not None:
            self._replace(victim, planned, why=f"{victim.name} {kind}ed")

    def _capacity(self, leaving: Client | None = None) -> int:
        """Envs hosted by the live clients that are not frozen (and are not ``leaving``)."""
        return sum(c.size for c in self.supervisor.alive() if not c.frozen_until and c is not leaving)

    def _line_known_empty(self) -> bool:
        alive = self.supervisor.alive()
        return (
            self.members_at > self._last_start
            and all(client.pid in self.members for client in alive)
            and not any(client.frozen_until for client in alive)
        )

    def _replace(self, victim: Client, planned: PlannedFault, why: str) -> None:
        """Start clients hosting ``victim.size`` envs in all (see the module's docstring), unless enough
        capacity waits in line already."""
        seen_waiting = self.members_at > victim.started and victim.pid not in self.members
        if seen_waiting and self._capacity(leaving=victim) > NUM_ENVS:
            self.log.add("supervise", f"no replacement for {victim.name}: it was waiting in line, enough others wait")
            return
        plane = plane_for(planned.choice, self.zmq_share)
        if self._line_known_empty() and victim.size > 1:
            sizes = [victim.size] if planned.choice < 0.7 else [1] * victim.size
        else:
            sizes = [1] * victim.size
        if len(sizes) == 1 and victim.size > 1:  # what a learner must not deadlock on (see the summary)
            self.counts["multi_env_replacement"] = self.counts.get("multi_env_replacement", 0) + 1
        for size in sizes:
            self.start_client(size, plane, f"replaces {why}")

    def _start_extra(self, planned: PlannedFault) -> None:
        waiting = self._capacity() - NUM_ENVS
        if not self.all_served or self.members_at <= self._last_start or waiting >= MAX_EXTRA_ENVS:
            self.log.add("supervise", f"{planned.describe()}: skipped (slots not all served, or enough waiting)")
            return
        self.counts["extra"] = self.counts.get("extra", 0) + 1
        size = 1 if planned.choice < 0.6 else 2
        plane = plane_for((planned.choice * 7) % 1, self.zmq_share)
        self.start_client(size, plane, "extra, waits in line")
