"""The *lifecycle* group: a killed client is replaced, a restarted server is rejoined, a frozen client is
lost within the liveness timeout, a frozen server is noticed by the client's own heartbeats, and the
client exits when the vector closes."""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

import numpy as np
from gymnasium.vector.utils import iterate

from gym_remote.conformance.check import Check, Context
from gym_remote.conformance.relay import Relay
from gym_remote.conformance.report import CheckFailed
from gym_remote.conformance.subject import ClientProcess, wait_for
from gym_remote.conformance.values import WAIT_SECONDS, probe_vector, remote, served_vector
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["CHECKS"]

DETECTION_SLACK = 2.5
"""Seconds a loss may take beyond the liveness timeout (heartbeat interval, probe interval, scheduling)."""

REJOIN_SECONDS = 20.0
EXIT_SECONDS = 10.0


def slots_of(envs: RemoteVectorEnv, process: ClientProcess) -> tuple[list[int], str]:
    """The slots ``process`` serves and its session; CheckFailed if it serves none."""
    rows = [row for row in envs.stats() if row["served"] and row.get("pid") == process.pid]
    if not rows:
        pids = sorted({row["pid"] for row in envs.stats() if row["served"]})
        raise CheckFailed(
            f"no slot is served by the client process {process.pid} (the slots' clients gave the pids {pids}): "
            "HELLO's pid must be the client's own process id (PROTOCOL.md §7)"
        )
    return [row["slot"] for row in rows], rows[0]["session"]


def step_until(envs: RemoteVectorEnv, condition, timeout: float, what: str) -> Any:
    """Step random actions until ``condition(results)`` holds, and return that step's results.

    Raises CheckFailed after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        results = remote(what, envs.step, envs.action_space.sample())
        if condition(results):
            return results
        if time.monotonic() > deadline:
            raise CheckFailed(f"{what}: not within {timeout:g} s")
        time.sleep(0.02)


def lost(slots: list[int]):
    def condition(results) -> bool:
        infos, truncations = results[4], results[3]
        mask = infos.get("_client_lost")
        return mask is not None and bool(np.all(mask[slots])) and bool(np.all(truncations[slots]))

    return condition


def rejoined(envs: RemoteVectorEnv, slots: list[int], old_session: str, pid: int | None):
    def condition(results) -> bool:
        rows = {row["slot"]: row for row in envs.stats()}
        return all(
            rows[slot]["served"]
            and rows[slot]["session"] != old_session
            and (pid is None or rows[slot].get("pid") == pid)
            for slot in slots
        )

    return condition


def killed_client_is_replaced(context: Context) -> None:
    with served_vector(context, clients=2, envs_per_client=2) as envs:
        remote("reset(seed=1)", envs.reset, seed=1)
        remote("step", envs.step, envs.action_space.sample())
        victim = context.processes[0]
        slots, session = slots_of(envs, victim)
        victim.signal(signal.SIGKILL)
        step_until(
            envs,
            lost(slots),
            context.liveness_timeout + DETECTION_SLACK,
            f"the slots {slots} of the SIGKILLed client reported as truncated with infos['client_lost']",
        )
        replacement = context.start_client(envs.server_stats()["address"], 2)
        step_until(
            envs,
            rejoined(envs, slots, session, replacement.pid),
            WAIT_SECONDS,
            f"a replacement client serving the slots {slots}",
        )
        for _ in range(3):
            results = remote("step with the replacement", envs.step, envs.action_space.sample())
            observations = list(iterate(envs.observation_space, results[0]))
            if not all(envs.single_observation_space.contains(observations[slot]) for slot in slots):
                raise CheckFailed(f"the replacement's observations are outside the observation space: {results[0]}")


def restarted_server_is_rejoined(context: Context) -> None:
    endpoint = context.endpoint()
    learner = context.start(
        [sys.executable, "-m", "gym_remote.conformance.learner", endpoint, "2", f"{context.liveness_timeout:g}"],
        "learner",
    )
    client = context.start_client(endpoint, 2)
    if not wait_for(lambda: learner.stdout_path.read_text().strip() or not learner.running(), WAIT_SECONDS):
        raise CheckFailed(f"the client did not join a learner at {endpoint} within {WAIT_SECONDS:g} s")
    text = learner.stdout_path.read_text().strip()
    if not text:
        raise CheckFailed(f"the first learner ended before its clients stepped:\n{learner.output()}")
    old_sessions = json.loads(text)["sessions"]
    learner.signal(signal.SIGKILL)
    learner.wait(10)
    envs = probe_vector(endpoint, 2, context.liveness_timeout)
    try:
        remote(
            f"the client rejoining a new learner at {endpoint} after the first was SIGKILLed (reset)",
            envs.reset,
            seed=1,
        )
        rows = [row for row in envs.stats() if row["served"]]
        if any(row["session"] in old_sessions for row in rows):
            raise CheckFailed(
                "the client rejoined with the session it had before; a client joins again as a new session, "
                "with previous_session set (PROTOCOL.md §8.1, §8.2)"
            )
        if any(row.get("pid") != client.pid for row in rows):
            raise CheckFailed(f"the new learner's slots are not served by the client process {client.pid}: {rows}")
        for _ in range(3):
            remote("step after rejoining", envs.step, envs.action_space.sample())
    finally:
        envs.close()


def frozen_client_is_lost(context: Context) -> None:
    with served_vector(context, clients=2, envs_per_client=2) as envs:
        remote("reset(seed=1)", envs.reset, seed=1)
        frozen = context.processes[0]
        slots, session = slots_of(envs, frozen)
        frozen.signal(signal.SIGSTOP)
        started = time.monotonic()
        limit = context.liveness_timeout + DETECTION_SLACK
        step_until(envs, lost(slots), limit, f"the slots {slots} of the SIGSTOPped client reported as lost")
        elapsed = time.monotonic() - started
        if elapsed > limit:
            raise CheckFailed(
                f"the frozen client was declared lost after {elapsed:.1f} s, more than the liveness timeout "
                f"({context.liveness_timeout:g} s) allows: its connection must answer ZMTP heartbeats only while "
                "the process runs (PROTOCOL.md §8.1)"
            )
        frozen.signal(signal.SIGCONT)
        step_until(
            envs,
            rejoined(envs, slots, session, frozen.pid),
            REJOIN_SECONDS,
            f"the client, resumed (SIGCONT) after it was lost, joining again as a new session for the slots {slots}",
        )


def frozen_server_is_noticed(context: Context) -> None:
    endpoint = context.endpoint()
    with Relay.to(endpoint) as relay:
        with served_vector(
            context, clients=1, envs_per_client=2, endpoint=endpoint, client_endpoint=relay.endpoint
        ) as envs:
            remote("reset(seed=1) through a relay", envs.reset, seed=1)
            slots, session = slots_of(envs, context.processes[0])
            if relay.freeze() == 0:
                raise CheckFailed("the client has no connection open through the relay")
            started = time.monotonic()
            limit = context.liveness_timeout + DETECTION_SLACK
            if not wait_for(relay.frozen_closed_by_client, limit):
                raise CheckFailed(
                    f"the client kept a connection to a silent server open for more than {limit:g} s (liveness "
                    f"timeout {context.liveness_timeout:g} s): it must enable ZMTP heartbeats with ZMQ_HEARTBEAT_IVL, "
                    "ZMQ_HEARTBEAT_TIMEOUT and ZMQ_HEARTBEAT_TTL from its liveness timeout, so that libzmq closes "
                    "a connection that shows no sign of life (PROTOCOL.md §1, §8.1)"
                )
            noticed = time.monotonic() - started
            step_until(
                envs,
                rejoined(envs, slots, session, context.processes[0].pid),
                REJOIN_SECONDS,
                f"the client rejoining after it dropped the silent connection ({noticed:.1f} s after the freeze)",
            )


def client_exits_when_told(context: Context) -> None:
    with served_vector(context, clients=2, envs_per_client=1) as envs:
        remote("reset(seed=1)", envs.reset, seed=1)
        remote("step", envs.step, envs.action_space.sample())
    for process in context.processes:
        status = process.wait(EXIT_SECONDS)
        if status is None:
            raise CheckFailed(
                f"the client {process.pid} was still running {EXIT_SECONDS:g} s after the vector env closed: a "
                "client answers CLOSE with BYE and exits (PROTOCOL.md §9)"
            )
        if status != 0:
            raise CheckFailed(f"the client {process.pid} exited with status {status} after CLOSE; it must exit with 0")


CHECKS = [
    Check("lifecycle", "a SIGKILLed client's slots are truncated and a replacement joins", killed_client_is_replaced),
    Check("lifecycle", "the client rejoins a restarted learner as a new session", restarted_server_is_rejoined),
    Check("lifecycle", "a frozen (SIGSTOP) client is lost within the liveness timeout", frozen_client_is_lost),
    Check("lifecycle", "the client's heartbeats notice a silent server, and it rejoins", frozen_server_is_noticed),
    Check("lifecycle", "the client exits with status 0 when the vector env closes", client_exits_when_told),
]
