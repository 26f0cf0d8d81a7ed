"""A fleet watched from outside: does asking a learner for its status slow its stepping?

The learner is a server-form RemoteVectorEnv of 8 CartPole slots on loopback tcp, served by one
``gym-remote client`` process (over the same-host data plane, as a client on the learner's machine is).
Rows: nobody watching; ``gym-remote status`` asked every second by another process (what ``--watch``
does); the Prometheus endpoint scraped every second by another process; and SyncVectorEnv, a reference
that runs none of gym_remote's code (for ``compare_commits.py``).

    python benchmarks/suite.py --cases watched
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from gym_remote import RemoteVectorEnv

__all__ = ["watched_makers", "WATCHERS"]

STATUS_EVERY_SECOND = """
import sys, time
from gym_remote.status import StatusClient
with StatusClient(sys.argv[1]) as client:  # as gym-remote status --watch asks
    while True:
        started = time.monotonic()
        try:
            client.query(5)
        except Exception:
            pass
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
"""

SCRAPE_EVERY_SECOND = """
import sys, time, urllib.request
while True:
    started = time.monotonic()
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read()
    except Exception:
        pass
    time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
"""

WATCHERS = {
    "Remote fleet, nobody watching": None,
    "Remote fleet, gym-remote status every second": "status",
    "Remote fleet, Prometheus scraped every second": "metrics",
}


class _Fleet(gym.vector.VectorWrapper):
    """The learner, with the processes it needs (its client, a watcher), ended when it closes."""

    def __init__(self, envs: RemoteVectorEnv, client: subprocess.Popen, watcher: subprocess.Popen | None) -> None:
        super().__init__(envs)
        self.client, self.watcher = client, watcher

    def close(self, **kwargs: Any) -> None:
        if self.watcher is not None:
            self.watcher.kill()
            self.watcher.wait(10)
        try:
            super().close(**kwargs)
        finally:
            try:
                self.client.wait(15)
            except subprocess.TimeoutExpired:
                self.client.kill()
                self.client.wait(10)


def _fleet(watch: str | None) -> _Fleet:
    envs = RemoteVectorEnv(num_envs=8, bind="tcp://127.0.0.1:*", connect_timeout=60)
    client_command = [sys.executable, "-m", "gym_remote", "client", envs.address, "--env", "CartPole-v1"]
    client = subprocess.Popen([*client_command, "--num-envs", "8", "--log-level", "WARNING"])
    watcher = None
    if watch == "status":
        watcher = subprocess.Popen([sys.executable, "-c", STATUS_EVERY_SECOND, envs.address])
    elif watch == "metrics":
        port = envs.serve_metrics()
        watcher = subprocess.Popen([sys.executable, "-c", SCRAPE_EVERY_SECOND, str(port)])
    return _Fleet(envs, client, watcher)


def watched_makers() -> dict[str, Callable[[], gym.vector.VectorEnv]]:
    """The rows of the case: SyncVectorEnv (a reference), then the fleet under each watcher."""
    makers: dict[str, Callable[[], gym.vector.VectorEnv]] = {
        "SyncVectorEnv": lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 8)
    }
    for label, watch in WATCHERS.items():
        makers[label] = lambda watch=watch: _fleet(watch)
    return makers
