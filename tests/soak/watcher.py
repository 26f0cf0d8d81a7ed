"""An operator's ``gym-remote status --watch`` during the soak: a thread that asks the learner for its status
about once a second, on one connection, and checks each report against the last and against the clients
the supervisor started. What it finds wrong is a soak failure at the end."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from gym_remote.status import StatusClient
from tests.soak.events import EventLog
from tests.soak.schedule import NUM_ENVS
from tests.soak.supervisor import Supervisor

ANSWER_WITHIN = 30.0
"""Seconds a status request may wait for its answer: the learner answers inside its calls, and at a quiet point
it may spend up to 20 s outside them while the injector ends a fault."""


class StatusWatcher(threading.Thread):
    """Asks for the learner's status every 0.5-1.5 s (drawn from ``seed``) until :meth:`stop`."""

    def __init__(self, address: str, supervisor: Supervisor, log: EventLog, seed: int) -> None:
        super().__init__(name="soak-status", daemon=True)
        self.address = address
        self.supervisor = supervisor
        self.log = log
        self.rng = random.Random(f"status-{seed}")
        self.problems: list[str] = []
        self.reports = 0
        self.slowest = 0.0  # seconds from a request to its answer
        self._stopping = threading.Event()
        self._last: dict[str, Any] | None = None

    def run(self) -> None:
        try:
            with StatusClient(self.address) as client:
                while not self._stopping.wait(self.rng.uniform(0.5, 1.5)):
                    asked = time.monotonic()
                    try:
                        report = client.query(ANSWER_WITHIN)
                    except Exception as error:  # (a timeout among them)
                        if not self._stopping.is_set():
                            self._problem(f"a status request failed: {type(error).__name__}: {error}")
                        return
                    self.slowest = max(self.slowest, time.monotonic() - asked)
                    self.reports += 1
                    self._check(report)
        except Exception as error:
            self._problem(f"the status watcher failed: {type(error).__name__}: {error}")

    def stop(self) -> list[str]:
        """Stop asking; what was found wrong."""
        self._stopping.set()
        self.join(ANSWER_WITHIN + 5)
        if self.is_alive():
            self._problem("the status watcher did not stop")
        return self.problems

    def _problem(self, text: str) -> None:
        self.log.add("failure", f"status: {text}")
        self.problems.append(text)

    def _check(self, report: dict[str, Any]) -> None:
        slots = report.get("slots", [])
        if report.get("num_envs") != NUM_ENVS or [row.get("slot") for row in slots] != list(range(NUM_ENVS)):
            self._problem(f"a report of other slots: num_envs {report.get('num_envs')}, {len(slots)} slot rows")
            return
        served = [row for row in slots if row["served"]]
        if report["served"] != len(served):
            self._problem(f"served {report['served']}, but {len(served)} slot rows are served")
        with self.supervisor.lock:
            started = {client.pid: client for client in self.supervisor.clients}
        for row in served:
            client = started.get(row.get("pid"))
            if client is None or client.name != row.get("client"):
                self._problem(f"slot {row['slot']}: served by {row.get('client')} pid {row.get('pid')}, never started")
            elif client.plane == "zmq" and row.get("plane") != "zmq":
                self._problem(f"slot {row['slot']}: {client.name} started without a data plane shows {row['plane']}")
        last = self._last
        self._last = report
        if last is None:
            return
        if report["uptime"] <= last["uptime"] or report["episodes_since"] != last["episodes_since"]:
            self._problem(
                f"uptime {last['uptime']} then {report['uptime']}, episodes since {last['episodes_since']} "
                f"then {report['episodes_since']}"
            )
        for before, now in zip(last["slots"], slots):
            for key in ("steps", "episodes", "losses"):
                if now[key] < before[key]:
                    self._problem(f"slot {now['slot']}: {key} went down from {before[key]} to {now[key]}")
        for key, count in last["counts"].items():
            if report["counts"].get(key, 0) < count:
                self._problem(f"the count {key} went down from {count} to {report['counts'].get(key, 0)}")
