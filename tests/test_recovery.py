"""Recovery from faults, with real processes on loopback TCP and ipc.

* the learner (the server process) dies and a new one starts on the same address: remote clients
  notice, rejoin it as new sessions, and a new rollout runs; clients that must not rejoin, or find no
  new server in time, exit 1;
* a remote client is frozen (SIGSTOP): the server declares it lost within the liveness timeout and
  its slots' episodes end (truncated, ``client_lost``); resumed (SIGCONT), it rejoins, or waits in line
  when its slots were taken meanwhile;
* local clients die (SIGKILL, SIGSTOP, crashes at start-up): they are restarted with a backoff, and a
  client that keeps dying without serving a step makes the vector env raise a clear error;
* an env raises in step or reset: ``RemoteEnvError`` naming the slot, with the remote traceback, and
  the vector env stays usable.

Every process a test starts is started through the ``reaper`` fixture (SIGKILLed by pid at
teardown); the local clients a RemoteVectorEnv starts itself are ended by ``close()`` and, should a
test fail half-way, by pid in a ``finally``.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from gym_remote import ClientLostError, RemoteEnvError, RemoteVectorEnv
from tests.envs import make_cartpole
from tests.envs.recovery import (
    make_always_raising,
    make_dies_after_restart,
    make_exiting,
    make_faulty,
    make_flaky,
    make_works_once,
)
from tests.helpers import (
    LoggedProcess,
    child_pids,
    cli_client,
    free_tcp_address,
    is_local_client,
    kill_local_clients,
    pid_alive,
    rows_by_client,
    step_until,
    wait_until,
)

LIVENESS = 2.0
"""liveness_timeout for servers and clients: a silent peer is lost after this many seconds."""

CONNECT_TIMEOUT = 20.0
RECONNECT_TIMEOUT = 30.0

# -- a learner process -----------------------------------------------------------------------------

LEARNER_SCRIPT = """
import json, sys, time
import numpy as np
from gym_remote import RemoteVectorEnv

address, num_envs, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pause, connect_timeout = float(sys.argv[4]), float(sys.argv[5])


def emit(**record):
    print(json.dumps(record), flush=True)


envs = RemoteVectorEnv(
    num_envs=num_envs, bind=address, connect_timeout=connect_timeout, liveness_timeout=2, timeout=30
)
emit(event="listening", address=envs.address)
if steps < 0:  # bound, but busy elsewhere: joins are not handled until it resets or steps
    time.sleep(600)
envs.reset(seed=0)
emit(event="reset", stats=envs.stats())
step = 0
while steps == 0 or step < steps:  # steps == 0: until killed
    _, rewards, terminations, truncations, infos = envs.step(np.zeros(num_envs, dtype=np.int64))
    step += 1
    emit(event="step", step=step, truncations=truncations.tolist(), client_lost="client_lost" in infos)
    time.sleep(pause)
emit(event="done", stats=envs.stats())
envs.close()
emit(event="closed")
"""


class Learner(LoggedProcess):
    """A learner process (``LEARNER_SCRIPT``) serving ``num_envs`` slots at ``address``.

    It prints one JSON record per line: ``listening``, ``reset`` (with ``stats()``), one ``step`` per
    step, and, when ``steps`` > 0, ``done`` (with ``stats()``) and ``closed``. ``steps`` = 0: it steps
    until killed; ``steps`` < 0: it binds, then sleeps without handling joins. Its ``reset`` waits up to
    ``connect_timeout`` for clients.
    """

    def __init__(
        self,
        reaper,
        tmp_path: Path,
        name: str,
        address: str,
        num_envs: int,
        steps: int = 0,
        pause: float = 0.005,
        connect_timeout: float = 30.0,
    ) -> None:
        script = tmp_path / "learner.py"
        if not script.exists():
            script.write_text(LEARNER_SCRIPT)
        super().__init__(
            reaper,
            tmp_path,
            name,
            [sys.executable, str(script), address, str(num_envs), str(steps), str(pause), str(connect_timeout)],
        )

    def records(self) -> list[dict[str, Any]]:
        """The records printed so far (complete lines only)."""
        text = self.stdout
        return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]

    def record(self, event: str) -> dict[str, Any] | None:
        return next((record for record in self.records() if record["event"] == event), None)

    def steps_done(self) -> int:
        return sum(record["event"] == "step" for record in self.records())

    def wait_for(self, condition, timeout: float, what: str) -> None:
        """Wait until ``condition()``; fail at once (with the learner's stderr) if the learner exits first."""

        def check() -> bool:
            if condition():
                return True
            if self.process.poll() is not None:
                if condition():
                    return True
                raise AssertionError(
                    f"learner {self.name} exited ({self.process.returncode}) before {what}:\n{self.stderr}"
                )
            return False

        wait_until(check, timeout, f"{what} (learner {self.name})")

    def kill(self) -> float:
        """SIGKILL the learner; return the (monotonic) time of the kill."""
        os.kill(self.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        assert self.process.wait(timeout=10) == -signal.SIGKILL
        return killed_at

    def finish(self, timeout: float) -> None:
        code = self.wait(timeout)
        assert code == 0, f"learner {self.name} exited with {code}:\n{self.stderr}"
        assert self.record("closed") is not None


def start_client(reaper, tmp_path: Path, name: str, address: str, *flags: str, num_envs: int = 2) -> LoggedProcess:
    """A ``gym-remote client`` process (CartPole by default), output in files, INFO logs on stderr."""
    if "--factory" not in flags and "--env" not in flags:
        flags = ("--env", "CartPole-v1", *flags)
    return cli_client(
        reaper,
        tmp_path,
        name,
        address,
        "--num-envs",
        str(num_envs),
        "--connect-timeout",
        str(CONNECT_TIMEOUT * 1.5),
        "--reconnect-timeout",
        str(RECONNECT_TIMEOUT),
        "--liveness-timeout",
        str(LIVENESS),
        *flags,  # later flags win
        log_level="INFO",
    )


def assert_served_by(stats: list[dict[str, Any]], clients: list[LoggedProcess], rejoins: int) -> None:
    """Every slot is served, by the processes of ``clients`` (2 slots each), each with ``rejoins`` rejoins."""
    assert all(row["served"] for row in stats), stats
    grouped = rows_by_client(stats)
    assert sorted(grouped) == sorted(client.name for client in clients), stats
    for client in clients:
        rows = grouped[client.name]
        assert len(rows) == 2, stats
        assert {row["pid"] for row in rows} == {client.pid}, stats
        assert [row["rejoins"] for row in rows] == [rejoins, rejoins], (client.name, stats)


def sessions_of(stats: list[dict[str, Any]]) -> dict[str, str]:
    return {name: rows[0]["session"] for name, rows in rows_by_client(stats).items()}


# -- the learner dies and comes back ----------------------------------------------------------------


@pytest.mark.timeout(180)
def test_learner_killed_mid_rollout_and_restarted_clients_rejoin(reaper, tmp_path):
    address = free_tcp_address()
    first = Learner(reaper, tmp_path, "learner-1", address, num_envs=4)
    clients = [start_client(reaper, tmp_path, f"client-{index}", address) for index in range(2)]
    first.wait_for(lambda: first.steps_done() >= 30, 60, "30 steps of the first rollout")
    old_stats = first.record("reset")["stats"]
    assert_served_by(old_stats, clients, rejoins=0)
    assert not any(record.get("client_lost") for record in first.records() if record["event"] == "step")

    first.kill()
    for client in clients:
        assert client.process.poll() is None, f"client {client.name} exited with its server:\n{client.stderr}"

    second = Learner(reaper, tmp_path, "learner-2", address, num_envs=4, steps=200)
    second.wait_for(lambda: second.record("closed") is not None, 60, "the second rollout to complete")
    second.finish(timeout=15)
    steps = [record for record in second.records() if record["event"] == "step"]
    assert len(steps) == 200
    assert not any(record["client_lost"] for record in steps), "a client was lost in the second rollout"
    for stats in (second.record("reset")["stats"], second.record("done")["stats"]):
        assert_served_by(stats, clients, rejoins=1)
    new_sessions = sessions_of(second.record("reset")["stats"])
    old_sessions = sessions_of(old_stats)
    assert all(new_sessions[client.name] != old_sessions[client.name] for client in clients), (
        old_sessions,
        new_sessions,
    )
    for client in clients:
        assert client.wait(timeout=15) == 0, client.stderr
        assert "lost the server" in client.stderr, client.stderr


@pytest.mark.timeout(180)
def test_clients_started_first_follow_two_learner_restarts(reaper, tmp_path):
    address = free_tcp_address()
    clients = [start_client(reaper, tmp_path, f"early-{index}", address) for index in range(2)]
    for client in clients:  # up and knocking before anything listens at the address
        wait_until(lambda client=client: "connecting to" in client.stderr, 30, f"{client.name} to send HELLO")
        assert client.process.poll() is None, client.stderr

    sessions_seen: dict[str, set[str]] = {client.name: set() for client in clients}
    for generation in range(2):  # two learners in a row die mid-rollout
        learner = Learner(reaper, tmp_path, f"doomed-{generation}", address, num_envs=4)
        learner.wait_for(lambda learner=learner: learner.steps_done() >= 20, 60, "20 steps")
        stats = learner.record("reset")["stats"]
        assert_served_by(stats, clients, rejoins=generation)
        for name, session in sessions_of(stats).items():
            sessions_seen[name].add(session)
        learner.kill()

    last = Learner(reaper, tmp_path, "survivor", address, num_envs=4, steps=100)
    last.wait_for(lambda: last.record("closed") is not None, 60, "the last rollout to complete")
    last.finish(timeout=15)
    assert_served_by(last.record("done")["stats"], clients, rejoins=2)
    for name, session in sessions_of(last.record("done")["stats"]).items():
        sessions_seen[name].add(session)
    assert all(len(sessions) == 3 for sessions in sessions_seen.values()), sessions_seen  # a new session each time
    for client in clients:
        assert client.wait(timeout=15) == 0, client.stderr


@pytest.mark.timeout(180)
def test_client_waiting_in_line_when_the_learner_dies_joins_the_next_learner(reaper, tmp_path):
    address = free_tcp_address()
    first = Learner(reaper, tmp_path, "small-learner", address, num_envs=2)
    member = start_client(reaper, tmp_path, "member", address)
    first.wait_for(lambda: first.steps_done() >= 5, 60, "5 steps")
    waiter = start_client(reaper, tmp_path, "waiter", address)  # finds no free slot: waits in line
    wait_until(lambda: "waiting in line" in waiter.stderr, 30, "the waiter to be put in line")
    assert_served_by(first.record("reset")["stats"], [member], rejoins=0)

    first.kill()
    second = Learner(reaper, tmp_path, "big-learner", address, num_envs=4, steps=50, connect_timeout=20)
    # the new learner's reset waits (connect_timeout=20) until both clients serve its 4 slots
    second.wait_for(lambda: second.record("closed") is not None, 35, "the rollout with both clients")
    second.finish(timeout=15)
    stats = second.record("done")["stats"]
    assert sorted(rows_by_client(stats)) == ["member", "waiter"], stats
    assert [row["rejoins"] for row in rows_by_client(stats)["member"]] == [1, 1]
    for client in (member, waiter):
        assert client.wait(timeout=15) == 0, client.stderr


@pytest.mark.timeout(180)
def test_client_whose_hello_went_unanswered_joins_the_next_learner(reaper, tmp_path):
    """The learner bound its address, then died before handling joins (e.g. while it built its model)."""
    address = free_tcp_address()
    first = Learner(reaper, tmp_path, "stillborn", address, num_envs=2, steps=-1)
    first.wait_for(lambda: first.record("listening") is not None, 30, "the learner to bind")
    client = start_client(reaper, tmp_path, "early", address)
    wait_until(lambda: "connecting to" in client.stderr, 30, "the client to send HELLO")
    time.sleep(1.0)  # its HELLO reaches the learner, which does not answer yet
    first.kill()
    second = Learner(reaper, tmp_path, "next", address, num_envs=2, steps=20, connect_timeout=20)
    second.wait_for(lambda: second.record("closed") is not None, 35, "the rollout with the early client")
    second.finish(timeout=15)
    assert sorted(rows_by_client(second.record("done")["stats"])) == ["early"]
    assert client.wait(timeout=15) == 0, client.stderr


def test_client_without_reconnect_exits_1_when_the_learner_dies(reaper, tmp_path):
    address = free_tcp_address()
    learner = Learner(reaper, tmp_path, "learner", address, num_envs=2)
    # a long liveness timeout: a killed process on this machine is noticed at once anyway
    client = start_client(reaper, tmp_path, "one-shot", address, "--no-reconnect", "--liveness-timeout", "60")
    learner.wait_for(lambda: learner.steps_done() >= 10, 60, "10 steps")
    killed_at = learner.kill()
    code = client.wait(timeout=15)
    elapsed = time.monotonic() - killed_at
    stderr = client.stderr
    assert code == 1, stderr
    assert "gym-remote: error:" in stderr and "lost the server" in stderr and address in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert elapsed < 5, f"the client took {elapsed:.1f} s to exit after its server was killed"


def test_client_gives_up_rejoining_after_its_reconnect_timeout(reaper, tmp_path):
    address = free_tcp_address()
    learner = Learner(reaper, tmp_path, "learner", address, num_envs=2)
    client = start_client(reaper, tmp_path, "patient", address, "--reconnect-timeout", "3", "--liveness-timeout", "60")
    learner.wait_for(lambda: learner.steps_done() >= 10, 60, "10 steps")
    killed_at = learner.kill()  # and no new learner comes
    code = client.wait(timeout=20)
    elapsed = time.monotonic() - killed_at
    stderr = client.stderr
    assert code == 1, stderr
    assert "gym-remote: error:" in stderr and "no answer from a server" in stderr and "3 s" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert 2.5 < elapsed < 8, f"the client exited {elapsed:.1f} s after its server was killed (reconnect timeout 3 s)"


@pytest.mark.timeout(180)
def test_frozen_learner_is_noticed_within_the_liveness_timeout_and_clients_join_the_next(reaper, tmp_path):
    address = free_tcp_address()
    first = Learner(reaper, tmp_path, "frozen-learner", address, num_envs=4)
    clients = [start_client(reaper, tmp_path, f"client-{index}", address) for index in range(2)]
    first.wait_for(lambda: first.steps_done() >= 20, 60, "20 steps")
    os.kill(first.pid, signal.SIGSTOP)  # its connections stay open, but nothing answers the heartbeats
    frozen_at = time.monotonic()
    wait_until(
        lambda: all("lost the server" in client.stderr for client in clients),
        2 * LIVENESS + 3,
        "the clients to notice that their learner froze",
    )
    noticed = time.monotonic() - frozen_at
    assert noticed > LIVENESS / 2, f"noticed after {noticed:.1f} s: too early for a heartbeat timeout"
    first.kill()  # SIGKILL ends a stopped process too

    second = Learner(reaper, tmp_path, "next-learner", address, num_envs=4, steps=50)
    second.wait_for(lambda: second.record("closed") is not None, 45, "the next rollout to complete")
    second.finish(timeout=15)
    assert_served_by(second.record("done")["stats"], clients, rejoins=1)
    for client in clients:
        assert client.wait(timeout=15) == 0, client.stderr


def test_client_does_not_hang_on_a_learner_that_stays_frozen(reaper, tmp_path):
    address = free_tcp_address()
    learner = Learner(reaper, tmp_path, "learner", address, num_envs=2)
    client = start_client(reaper, tmp_path, "bounded", address, "--reconnect-timeout", "3")
    learner.wait_for(lambda: learner.steps_done() >= 10, 60, "10 steps")
    os.kill(learner.pid, signal.SIGSTOP)  # frozen for good (SIGKILLed by the reaper at teardown)
    frozen_at = time.monotonic()
    code = client.wait(timeout=2 * LIVENESS + 3 + 10)
    elapsed = time.monotonic() - frozen_at
    assert code == 1, client.stderr
    assert "lost the server" in client.stderr and "no answer from a server" in client.stderr, client.stderr
    assert elapsed < 2 * LIVENESS + 3 + 5, f"exited {elapsed:.1f} s after its learner froze"


# -- a remote client freezes ------------------------------------------------------------------------


def step_zeros(envs: RemoteVectorEnv):
    return envs.step(np.zeros(envs.num_envs, dtype=np.int64))


def steps_without_loss(envs: RemoteVectorEnv, count: int) -> tuple:
    """``count`` steps with zero actions, none of which reports a lost client; the last step's results."""
    for _ in range(count):
        results = step_zeros(envs)
        assert "client_lost" not in results[4]
    return results


def slots_of(envs: RemoteVectorEnv, pid: int) -> list[int]:
    return [row["slot"] for row in envs.stats() if row["served"] and row["pid"] == pid]


def step_until_lost(envs: RemoteVectorEnv, bound: float):
    """Step until a step reports ``client_lost``; return that step's results and how long it took."""
    started = time.monotonic()
    while True:
        results = step_zeros(envs)
        elapsed = time.monotonic() - started
        if "client_lost" in results[4]:
            return results, elapsed
        assert elapsed < bound, f"no client_lost reported within {elapsed:.1f} s"


def test_frozen_client_is_lost_within_the_liveness_timeout_and_rejoins_when_resumed(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=4, liveness_timeout=LIVENESS, connect_timeout=CONNECT_TIMEOUT, timeout=60)
    try:
        frozen = start_client(reaper, tmp_path, "frozen", envs.address)
        steady = start_client(reaper, tmp_path, "steady", envs.address)
        envs.reset(seed=0)
        before = envs.stats()
        assert_served_by(before, [frozen, steady], rejoins=0)
        frozen_slots = slots_of(envs, frozen.pid)
        mask = [slot in frozen_slots for slot in range(4)]
        for _ in range(10):
            step_zeros(envs)

        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            (_, rewards, terminations, truncations, infos), elapsed = step_until_lost(envs, 2 * LIVENESS + 3)
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        assert elapsed < 2 * LIVENESS + 3, f"the frozen client was declared lost after {elapsed:.1f} s"
        assert truncations.tolist() == mask and not terminations[frozen_slots].any()
        assert rewards[frozen_slots].tolist() == [0.0, 0.0]
        assert infos["client_lost"].tolist() == mask and infos["_client_lost"].tolist() == mask

        # resumed, it finds out it was dropped and rejoins; this step waits for it (connect_timeout)
        started = time.monotonic()
        _, rewards, terminations, truncations, infos = step_zeros(envs)
        assert time.monotonic() - started < 15
        assert not truncations.any() and not terminations.any() and "client_lost" not in infos
        assert rewards[frozen_slots].tolist() == [0.0, 0.0]  # its envs' autoreset step
        after = envs.stats()
        assert slots_of(envs, frozen.pid) == frozen_slots
        grouped = rows_by_client(after)
        assert [row["rejoins"] for row in grouped["frozen"]] == [1, 1]
        assert [row["rejoins"] for row in grouped["steady"]] == [0, 0]
        assert sessions_of(after)["frozen"] != sessions_of(before)["frozen"]
        assert sessions_of(after)["steady"] == sessions_of(before)["steady"]
        steps_without_loss(envs, 20)
    finally:
        envs.close()
    for client in (frozen, steady):
        assert client.wait(timeout=15) == 0, client.stderr


def test_resumed_client_whose_slots_were_taken_waits_in_line(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=4, liveness_timeout=LIVENESS, connect_timeout=CONNECT_TIMEOUT, timeout=60)
    try:
        frozen = start_client(reaper, tmp_path, "frozen", envs.address)
        steady = start_client(reaper, tmp_path, "steady", envs.address)
        envs.reset(seed=0)
        frozen_slots = slots_of(envs, frozen.pid)
        spare = start_client(reaper, tmp_path, "spare", envs.address)  # no free slot: waits in line
        # the server handles its HELLO while it steps
        step_until(
            envs,
            lambda: "waiting in line" in spare.stderr,
            30,
            "the spare client to be put in line",
            lambda: step_zeros(envs),
            output=spare,
        )

        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            (_, _, _, truncations, infos), elapsed = step_until_lost(envs, 2 * LIVENESS + 3)
            assert truncations[frozen_slots].all() and infos["client_lost"][frozen_slots].all()
            _, rewards, _, truncations, infos = step_zeros(envs)  # the spare took over
            assert not truncations.any() and "client_lost" not in infos
            assert slots_of(envs, spare.pid) == frozen_slots
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        assert elapsed < 2 * LIVENESS + 3

        # resumed, it rejoins and finds no free slot
        step_until(
            envs,
            lambda: frozen.stderr.count("waiting in line") >= 1,
            20,
            "the resumed client to get in line",
            lambda: steps_without_loss(envs, 1),
            output=frozen,
        )
        assert frozen.process.poll() is None, frozen.stderr

        os.kill(spare.pid, signal.SIGKILL)  # a slot frees up: the one in line gets it
        (_, _, _, truncations, infos), _ = step_until_lost(envs, 10)
        assert infos["client_lost"][frozen_slots].all()
        step_zeros(envs)
        assert slots_of(envs, frozen.pid) == frozen_slots
        assert [row["rejoins"] for row in rows_by_client(envs.stats())["frozen"]] == [1, 1]
        steps_without_loss(envs, 10)
    finally:
        envs.close()
    for client in (frozen, steady):
        assert client.wait(timeout=15) == 0, client.stderr


def test_client_waiting_in_line_gives_up_after_its_slot_timeout(reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=2, liveness_timeout=LIVENESS, connect_timeout=CONNECT_TIMEOUT, timeout=60)
    try:
        member = start_client(reaper, tmp_path, "member", envs.address)
        envs.reset(seed=0)
        waiter = start_client(reaper, tmp_path, "waiter", envs.address, "--slot-timeout", "2")

        def step_slowly() -> None:
            step_zeros(envs)
            time.sleep(0.01)

        # the server handles its HELLO while it steps
        step_until(
            envs,
            lambda: waiter.process.poll() is not None,
            30,
            "the waiting client to give up",
            step_slowly,
            output=waiter,
        )
        assert waiter.process.returncode == 1, waiter.stderr
        assert "waiting in line" in waiter.stderr, waiter.stderr
        assert "gym-remote: error:" in waiter.stderr and "freed up within 2 s" in waiter.stderr, waiter.stderr
        _, _, _, _, infos = step_zeros(envs)
        assert "client_lost" not in infos
    finally:
        envs.close()
    assert member.wait(timeout=15) == 0, member.stderr


# -- supervised local clients -----------------------------------------------------------------------


def local_client_children() -> set[int]:
    """Pids of this process's children that are local client processes still running."""
    return child_pids(lambda pid: pid_alive(pid) and is_local_client(pid))


class LocalRun:
    """A RemoteVectorEnv with local clients; remembers every client pid it had, to end them by pid."""

    def __init__(self, env_fns, **kwargs) -> None:
        kwargs.setdefault("num_clients", 2)
        kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT)
        kwargs.setdefault("liveness_timeout", LIVENESS)
        kwargs.setdefault("timeout", 60)
        self.envs = RemoteVectorEnv(env_fns, **kwargs)
        self.seen: set[int] = set(self.envs._launcher.pids)

    def pids(self) -> list[int]:
        pids = list(self.envs._launcher.pids)
        self.seen.update(pids)
        return pids

    def close(self) -> None:
        try:
            self.envs.close()
        finally:
            self.seen.update(self.envs._launcher.pids)
            kill_local_clients(self.seen)


def kill_and_wait(pid: int, sig: int = signal.SIGKILL) -> None:
    os.kill(pid, sig)
    if sig == signal.SIGKILL:
        wait_until(lambda: not pid_alive(pid), 10, f"local client {pid} to die")


def test_killed_local_client_is_restarted_and_the_run_goes_on():
    run = LocalRun([make_cartpole] * 4, max_restarts=2)
    envs = run.envs
    try:
        envs.reset(seed=0)
        for _ in range(5):
            step_zeros(envs)
        victim = run.pids()[1]  # serves slots 2-3
        kill_and_wait(victim)
        _, rewards, terminations, truncations, infos = step_zeros(envs)  # the step that notices
        assert truncations.tolist() == [False, False, True, True]
        assert not terminations[2:].any() and rewards[2:].tolist() == [0.0, 0.0]
        assert infos["client_lost"].tolist() == [False, False, True, True]

        started = time.monotonic()
        obs, rewards, terminations, truncations, infos = step_zeros(envs)  # the restarted client's autoreset step
        waited = time.monotonic() - started
        assert waited < 10, f"the restart took {waited:.1f} s (backoff 0.5 s)"
        assert rewards[2:].tolist() == [0.0, 0.0] and not truncations.any() and not terminations[2:].any()
        assert "client_lost" not in infos
        assert envs.observation_space.contains(obs)
        assert np.abs(obs[2:]).max() <= 0.05, obs  # CartPole's reset observations
        pids = run.pids()
        assert pids[0] != victim and pids[1] != victim and pid_alive(pids[1])
        stats = envs.stats()
        assert [row["restarts"] for row in stats] == [0, 0, 1, 1]
        assert [row["pid"] for row in stats] == [pids[0], pids[0], pids[1], pids[1]]
        assert all(row["local"] for row in stats)
        envs.reset(seed=1)
        steps_without_loss(envs, 20)
    finally:
        run.close()


@pytest.mark.parametrize("mode", ["SameStep", "Disabled"])
def test_killed_local_client_in_the_other_autoreset_modes(mode):
    run = LocalRun([make_cartpole] * 4, autoreset_mode=mode, max_restarts=2)
    envs = run.envs
    try:
        envs.reset(seed=0)
        for _ in range(3):  # too few steps for a CartPole episode to end
            last_obs, *_ = step_zeros(envs)
        victim = run.pids()[1]
        kill_and_wait(victim)
        obs, rewards, terminations, truncations, infos = step_zeros(envs)
        assert truncations.tolist() == [False, False, True, True] and not terminations.any()
        assert rewards[2:].tolist() == [0.0, 0.0]
        assert infos["client_lost"].tolist() == [False, False, True, True]
        if mode == "SameStep":
            # the episode ends with the last observation, and the replacement's reset starts the next one
            assert infos["_final_obs"].tolist() == [False, False, True, True]
            for slot in (2, 3):
                np.testing.assert_array_equal(infos["final_obs"][slot], last_obs[slot])
            assert np.abs(obs[2:]).max() <= 0.05, obs  # CartPole's reset observations
        else:
            with pytest.raises(AssertionError, match="reset"):
                step_zeros(envs)  # ended episodes must be reset first
            obs, _ = envs.reset(options={"reset_mask": truncations})  # waits for the restarted client
            assert np.abs(obs[2:]).max() <= 0.05, obs
        assert run.pids()[1] != victim
        assert [row["restarts"] for row in envs.stats()] == [0, 0, 1, 1]
        for _ in range(3):
            _, _, _, truncations, infos = step_zeros(envs)
            assert not truncations.any() and "client_lost" not in infos
    finally:
        run.close()


def test_restart_backoff_resets_after_a_client_served_steps():
    """Killed 5 times, each incarnation having served steps: restarted every time (max_restarts=2)."""
    run = LocalRun([make_cartpole] * 4, max_restarts=2)
    envs = run.envs
    try:
        envs.reset(seed=0)
        for kill in range(1, 6):
            for _ in range(3):
                step_zeros(envs)
            victim = run.pids()[1]
            kill_and_wait(victim)
            _, _, _, truncations, infos = step_zeros(envs)
            assert truncations[2:].all() and infos["client_lost"].tolist() == [False, False, True, True], kill
            started = time.monotonic()
            _, rewards, _, truncations, infos = step_zeros(envs)
            waited = time.monotonic() - started
            # the failure streak restarted at 1 each time: the backoff stays 0.5 s (a 5th failure in a
            # row would have waited 8 s, and with max_restarts=2 would not have been restarted at all)
            assert waited < 6, f"restart {kill} took {waited:.1f} s"
            assert not truncations.any() and rewards[2:].tolist() == [0.0, 0.0] and "client_lost" not in infos
            assert run.pids()[1] != victim
            assert [row["restarts"] for row in envs.stats()] == [0, 0, kill, kill]
        assert len(run.seen) == 2 + 5
    finally:
        run.close()


def test_frozen_local_client_is_replaced_by_a_restart():
    run = LocalRun([make_cartpole] * 4, max_restarts=2)
    envs = run.envs
    try:
        envs.reset(seed=0)
        step_zeros(envs)
        victim = run.pids()[1]
        os.kill(victim, signal.SIGSTOP)
        try:
            (_, _, _, truncations, infos), elapsed = step_until_lost(envs, 2 * LIVENESS + 3)
            assert elapsed < 2 * LIVENESS + 3, f"the frozen local client was declared lost after {elapsed:.1f} s"
            assert truncations.tolist() == [False, False, True, True] and infos["client_lost"][2:].all()
            _, rewards, _, truncations, infos = step_zeros(envs)
            assert not truncations.any() and "client_lost" not in infos and rewards[2:].tolist() == [0.0, 0.0]
            assert run.pids()[1] != victim
            assert not pid_alive(victim), "the frozen client was not ended"
            assert [row["restarts"] for row in envs.stats()] == [0, 0, 1, 1]
        finally:
            if pid_alive(victim):
                os.kill(victim, signal.SIGCONT)
    finally:
        run.close()


@pytest.mark.parametrize("error_type", ["RuntimeError", "KeyError", "gymnasium.error.DependencyNotInstalled"])
def test_env_fn_raising_makes_the_constructor_raise_its_error_at_once(tmp_path, error_type):
    """An env that cannot be made fails the same way again: no restarts, the error has the env's type."""
    counter = tmp_path / "constructions"
    before = local_client_children()
    started = time.monotonic()
    with pytest.raises(RemoteEnvError) as caught:
        RemoteVectorEnv(
            [make_cartpole, make_cartpole, functools.partial(make_always_raising, str(counter), error_type=error_type)],
            num_clients=2,
            connect_timeout=60,
            liveness_timeout=LIVENESS,
            max_restarts=2,
        )
    elapsed = time.monotonic() - started
    error = caught.value
    assert elapsed < 3, f"raised after {elapsed:.1f} s"
    assert counter.read_text() == "1", "an env function that raised was called again"
    expected = {"RuntimeError": RuntimeError, "KeyError": KeyError}.get(error_type, gym.error.DependencyNotInstalled)
    assert isinstance(error, expected), type(error).__mro__
    assert error.slot == 2
    text = str(error)
    assert "env_fns[2]" in text and "local client 1" in text and "crash-loop-env-would-not-build" in text, text
    assert error.remote_type == error_type.rsplit(".", 1)[-1]
    assert "Traceback" in error.remote_traceback and "crash-loop-env-would-not-build" in error.remote_traceback
    assert "envs/recovery.py" in error.remote_traceback
    assert error.remote_traceback.strip() in text
    wait_until(lambda: not (local_client_children() - before), 10, "the local clients to be ended")


def test_client_dying_silently_at_start_up_makes_the_constructor_raise_client_lost(tmp_path):
    counter = tmp_path / "constructions"
    before = local_client_children()
    started = time.monotonic()
    with pytest.raises(ClientLostError) as caught:
        RemoteVectorEnv(
            [make_cartpole, functools.partial(make_exiting, str(counter), 3)],
            num_clients=2,
            connect_timeout=60,
            liveness_timeout=LIVENESS,
            max_restarts=2,
        )
    elapsed = time.monotonic() - started
    assert not isinstance(caught.value, RemoteEnvError)
    assert elapsed < 12, f"gave up after {elapsed:.1f} s"
    assert counter.read_text() == "3"
    text = str(caught.value)
    assert "local client 1" in text and "3 times in a row" in text and "exit code 3" in text, text
    wait_until(lambda: not (local_client_children() - before), 10, "the local clients to be ended")


def test_process_exiting_at_start_up_is_restarted_until_it_works(tmp_path):
    counter = tmp_path / "constructions"
    run = LocalRun(
        [functools.partial(make_faulty, "steady"), functools.partial(make_flaky, str(counter), 2, "exit")],
        max_restarts=2,
        connect_timeout=30,
    )
    envs = run.envs
    try:
        assert counter.read_text() == "3"
        assert [row["restarts"] for row in envs.stats()] == [0, 2]
        assert envs.get_attr("label") == ("steady", "flaky-3")
        envs.reset(seed=0)
        steps_without_loss(envs, 20)
    finally:
        run.close()


def test_replacement_whose_env_fn_raises_makes_step_raise_at_once(tmp_path):
    counter = tmp_path / "constructions"
    run = LocalRun([make_cartpole, functools.partial(make_works_once, str(counter))], max_restarts=2)
    envs = run.envs
    try:
        envs.reset(seed=0)
        for _ in range(5):
            step_zeros(envs)
        kill_and_wait(run.pids()[1])
        _, _, _, truncations, infos = step_zeros(envs)
        assert truncations.tolist() == [False, True] and infos["client_lost"].tolist() == [False, True]
        started = time.monotonic()
        with pytest.raises(RuntimeError) as caught:
            step_zeros(envs)  # waits for the replacement, whose env cannot be made
        elapsed = time.monotonic() - started
        assert elapsed < 5, f"step() gave up after {elapsed:.1f} s"
        assert counter.read_text() == "2", "expected one restart after the kill, and no restart of the failure"
        assert isinstance(caught.value, RemoteEnvError) and caught.value.slot == 1
        assert "env_fns[1]" in str(caught.value)
        assert "works-once env cannot be built again" in caught.value.remote_traceback
    finally:
        run.close()


def test_replacement_dying_in_its_first_step_counts_as_a_failure_in_a_row(tmp_path):
    """A restarted client that joins but dies before answering anything has not served: max_restarts applies."""
    counter = tmp_path / "constructions"
    run = LocalRun([make_cartpole, functools.partial(make_dies_after_restart, str(counter))], max_restarts=2)
    envs = run.envs
    try:
        envs.reset(seed=0)
        for _ in range(3):
            step_zeros(envs)
        kill_and_wait(run.pids()[1])
        started = time.monotonic()
        losses = 0
        with pytest.raises(ClientLostError) as caught:
            while time.monotonic() - started < 30:
                _, _, _, truncations, infos = step_zeros(envs)
                if "client_lost" in infos:
                    assert truncations.tolist() == [False, True] and infos["client_lost"].tolist() == [False, True]
                    losses += 1
        elapsed = time.monotonic() - started
        assert elapsed < 15, f"gave up after {elapsed:.1f} s"
        assert counter.read_text() == "3", "expected max_restarts=2 restarts after the kill"
        # the kill and the first replacement's death are reported as truncations; the step that
        # notices the second replacement's death gives up and raises, unless the end of its data
        # channel showed that death as a loss first (then it is reported too, and the next step raises)
        assert losses in (2, 3), losses
        text = str(caught.value)
        assert "local client 1" in text and "3 times in a row" in text and "exit code 5" in text, text
    finally:
        run.close()


# -- errors inside an env -----------------------------------------------------------------------------


@pytest.fixture(params=["local", "remote"])
def faulty_envs(request, reaper, tmp_path):
    """Four Faulty envs (slot i labelled "i" for local clients): two local clients, or two remote ones."""
    if request.param == "local":
        run = LocalRun([functools.partial(make_faulty, str(index)) for index in range(4)])
        try:
            yield run.envs
        finally:
            run.close()
        return
    envs = RemoteVectorEnv(num_envs=4, liveness_timeout=LIVENESS, connect_timeout=CONNECT_TIMEOUT, timeout=60)
    clients = [
        start_client(reaper, tmp_path, f"faulty-{index}", envs.address, "--factory", "tests.envs.recovery:make_faulty")
        for index in range(2)
    ]
    try:
        envs.reset(seed=0)  # waits for both clients
        yield envs
    finally:
        envs.close()
    for client in clients:
        assert client.wait(timeout=15) == 0, client.stderr


def assert_remote_env_error(error: RemoteEnvError, slot: int, remote_type: str, message: str) -> None:
    text = str(error)
    assert error.slot == slot, text
    assert f"slot {slot}" in text, text
    assert error.remote_type == remote_type, text
    assert message in text
    assert "Traceback" in error.remote_traceback and message in error.remote_traceback
    assert "envs/recovery.py" in error.remote_traceback  # where it was raised, in the client
    assert error.remote_traceback.strip() in text


def test_env_error_in_step_names_the_slot_and_reset_recovers(faulty_envs):
    envs = faulty_envs
    envs.reset(seed=0)
    sessions = sessions_of(envs.stats())
    for _ in range(3):
        step_zeros(envs)
    envs.set_attr("fail_next_step", [False, False, True, False])
    with pytest.raises(RemoteEnvError) as caught:
        step_zeros(envs)
    assert_remote_env_error(caught.value, 2, "ValueError", "deliberate step failure in faulty env")

    obs, _ = envs.reset(seed=1)
    assert obs.shape == (4, 4)
    obs = steps_without_loss(envs, 30)[0]
    assert envs.observation_space.contains(obs)
    assert envs.get_attr("fail_next_step") == (False,) * 4
    assert sessions_of(envs.stats()) == sessions, "an env error must not cost the client its membership"


def test_env_error_in_reset_names_the_slot_and_reset_recovers(faulty_envs):
    envs = faulty_envs
    envs.reset(seed=0)
    sessions = sessions_of(envs.stats())
    envs.set_attr("fail_next_reset", [False, True, False, False])
    with pytest.raises(RemoteEnvError) as caught:
        envs.reset(seed=2)
    assert_remote_env_error(caught.value, 1, "RuntimeError", "deliberate reset failure in faulty env")

    envs.set_attr("fail_next_reset", [False, False, False, True])
    with pytest.raises(RemoteEnvError) as caught:  # a masked reset that fails
        envs.reset(options={"reset_mask": np.array([False, False, True, True])})
    assert_remote_env_error(caught.value, 3, "RuntimeError", "deliberate reset failure in faulty env")

    obs, _ = envs.reset(seed=3)
    assert obs.shape == (4, 4)
    steps_without_loss(envs, 30)
    assert sessions_of(envs.stats()) == sessions


# -- busy is not dead ---------------------------------------------------------------------------------


def test_busy_learner_and_slow_env_are_not_mistaken_for_lost(faulty_envs):
    """Heartbeats are answered whatever the learner or the env is doing: silence in Python is not death."""
    envs = faulty_envs
    envs.reset(seed=0)
    sessions = sessions_of(envs.stats())
    step_zeros(envs)
    time.sleep(2 * LIVENESS + 1)  # the learner does something else for a while
    _, _, _, truncations, infos = step_zeros(envs)
    assert not truncations.any() and "client_lost" not in infos
    envs.set_attr("stall_next_step", [0.0, 0.0, 2 * LIVENESS + 1, 0.0])  # slot 2's env spins for 5 s
    started = time.monotonic()
    _, _, _, truncations, infos = step_zeros(envs)
    assert time.monotonic() - started >= 2 * LIVENESS + 1
    assert not truncations.any() and "client_lost" not in infos
    for _ in range(5):
        _, _, _, truncations, infos = step_zeros(envs)
        assert not truncations.any() and "client_lost" not in infos
    assert sessions_of(envs.stats()) == sessions
    assert all(row["rejoins"] == 0 and row.get("restarts", 0) == 0 for row in envs.stats())
