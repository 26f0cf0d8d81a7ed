"""A fast smoke version of the benchmark suite: a large speed regression fails the tests.

Speed is measured in ``benchmarks/`` (see its README); this only guards the floor the project
promises: RemoteVectorEnv steps CartPole at least as fast as AsyncVectorEnv, measured side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gym_remote.links import channel, shared

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import suite  # noqa: E402  (benchmarks/ is not a package)


@pytest.mark.timeout(120)
def test_remote_cartpole_is_not_slower_than_async_vector_env():
    # Timings on a shared machine are noisy: a real regression fails every attempt, a noisy run not.
    attempts = []
    for _ in range(3):
        case = suite.smoke()
        best = max(value for label, value in case.medians.items() if label.startswith("Remote"))
        attempts.append({label: round(value) for label, value in case.medians.items()})
        if best >= case.medians["AsyncVectorEnv"]:
            return
    pytest.fail(f"RemoteVectorEnv stepped CartPole slower than AsyncVectorEnv in 3 attempts: {attempts}")


@pytest.mark.timeout(300)
def test_the_suite_runs_and_writes_its_results(tmp_path, cpp_build):
    scratch = tmp_path / "tmp"  # the suite's temporary files and sockets: none may be left behind
    scratch.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "suite.py"),
            "--quick",
            "--cases",
            "floor,training,partial,scale",
            "--output",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=200,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert not list(scratch.iterdir()), f"the suite left {sorted(path.name for path in scratch.iterdir())}"
    [report] = [json.loads(path.read_text()) for path in tmp_path.glob("suite-*.json")]
    assert [case["name"] for case in report["cases"]] == ["floor", "training", "partial", "scale"]
    linux = sys.platform.startswith("linux")  # the raw floors below ZeroMQ
    uds = channel.AVAILABLE  # the same-host data plane
    shm = uds and shared.AVAILABLE  # and its shared-memory mailboxes
    floor = report["cases"][0]["medians"]
    zmq_rows = {"raw echo ipc, 1 client", "Remote ipc, 1 client", "raw echo tcp, 1 client", "Remote tcp, 1 client"}
    assert zmq_rows <= set(floor), sorted(floor)
    if linux:  # a Unix socket, and shared memory woken through eventfds
        assert {"raw uds, 1 client", "raw shm, 1 client"} <= set(floor), sorted(floor)
    assert ("Remote uds, 1 client" in floor) == uds, sorted(floor)
    assert ("Remote shm, 1 client" in floor) == (shm and linux), sorted(floor)
    per_core = min(suite.CORES, 8)
    cpp_rows = {
        "C++ client, uds, 1 client",
        f"C++ client, uds, {per_core} clients (1/core)",
        "C++ client, ipc, 1 client",
    }
    assert cpp_rows <= set(floor), sorted(floor)  # the C++ client (clients/cpp) next to the Python one
    assert all(value > 0 for value in floor.values())
    training = report["cases"][1]["medians"]
    expected = {"SyncVectorEnv", "AsyncVectorEnv", "Remote ipc, 1 client", "Remote ipc, 1 client, spin=0"}
    for plane, available in (("uds", uds), ("shm", shm)):
        if available:
            expected |= {f"Remote {plane}, 1 client", f"Remote {plane}, 1 client, spin=0", f"Remote {plane}, 2 clients"}
    assert set(training) == expected
    assert all(value > 0 for value in training.values())
    names = {target["target"].split(",")[0] for target in report["targets"]}
    assert names >= {"transport floor", "partial batches"}, sorted(names)
    if uds and linux:
        assert names >= {"zero-cost env", "while training: Remote uds"}, sorted(names)
    assert "Targets (ratios measured in this run)" in result.stdout
    scaled = report["cases"][3]  # one learner and 16 C++ clients, next to a bare ROUTER and 16 C echo clients
    rows = {"floor (bare ROUTER), 16 clients", "Remote lock-step, 16 clients", "Remote partial (batch N/2), 16 clients"}
    assert set(scaled["medians"]) == rows and all(value > 0 for value in scaled["medians"].values())
    assert set(scaled["details"]["learner CPU µs per message"]) == rows
    clients_cpu = scaled["details"]["clients' CPU µs per message"]
    assert set(clients_cpu) == rows and all(value > 0 for value in clients_cpu.values()), clients_cpu
