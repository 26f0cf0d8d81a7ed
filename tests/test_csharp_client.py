"""The C# client (clients/csharp: a P/Invoke binding over the C ABI of clients/cpp) under Mono: its command-line
client GymRemote.Client.exe passes the conformance suite, run by the native client's own loop and frame-paced (one
pump a frame, each step answered on the next frame by FramePacedDriver); values of every kind cross the native
handles and come back to the bit; the Client refuses what the C interface cannot take; the command line exits as
the C probe client does; a Python, a C++ and a C# client serve one vector as SyncVectorEnv steps."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gym_remote.conformance import GROUPS, run
from gym_remote.conformance.reference import differences
from gym_remote.conformance.values import probe_vector
from gym_remote.probe import ProbeEnv
from tests.helpers import free_tcp_address, probe_client_template, rows_by_client
from tests.test_csharp import CORE_DTYPES, VALUES, exact, harness_answers

pytestmark = pytest.mark.timeout(300)

MODES = {"run": [], "frame-paced": ["--frame-paced"]}
"""run: Client.Run (the native client's loop); frame-paced: FramePacedDriver, one Pump(0) per ~1 ms frame."""


@pytest.fixture
def csharp_client(cpp_build, csharp_build, monkeypatch) -> list[str]:
    """The command of GymRemote.Client.exe under Mono, with libgym_remote.so found through LD_LIBRARY_PATH."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cpp_build))
    mono = shutil.which("mono")
    assert mono is not None
    return [mono, str(csharp_build / "GymRemote.Client.exe")]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("group", GROUPS)
def test_the_csharp_client_passes_the_conformance_suite(csharp_client, group, mode):
    report = run(probe_client_template(csharp_client, *MODES[mode]), groups=[group])
    assert report.results and report.passed, report.text()


def _has_c_form(value) -> bool:
    """Whether the C interface carries ``value``: core dtypes only (PROTOCOL.md §3.4), UTF-8 text only."""
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype != object:
        return value.dtype.str in CORE_DTYPES
    if isinstance(value, (list, tuple)):
        return all(_has_c_form(item) for item in value)
    if isinstance(value, dict):
        return all(_has_c_form(key) and _has_c_form(item) for key, item in value.items())
    return True


NATIVE_VALUES = [
    *VALUES,
    *(np.arange(-3, 3).astype(dtype).reshape(2, 3) for dtype in CORE_DTYPES),
    *(np.dtype(dtype).type(1) for dtype in CORE_DTYPES),
    np.float32("nan"),
    np.float64(-0.0),
    np.zeros((2, 0, 3), dtype=np.uint16),
    np.array([b"x", 2**70, (1.5,), {"k": [None]}], dtype=object).reshape(2, 2),
    {2**64: "big", -(2**70): "negative big", 1.5: b"float", None: "none", (1, "t"): {"nested": (2,)}},
    {"é😀": 1, "": 2},
    [[[[[[[[[[1]]]]]]]]]],
]


def test_values_of_every_kind_cross_the_native_handles_exactly(cpp_build, csharp_build, monkeypatch):
    """Value -> gr_value -> Value gives the same value to the bit for every kind the C interface has (big ints of
    both signs, -0.0 and NaN, bytes, nested lists and tuples, dicts with any keys, scalars and arrays of every core
    dtype, object arrays); what it has no form for (other dtypes, lone surrogates) is refused with a clear error."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cpp_build))
    script = [{"op": "native_echo", "value": exact(value)} for value in NATIVE_VALUES]
    answers = harness_answers(csharp_build, script)
    carried = 0
    for value, answer in zip(NATIVE_VALUES, answers):
        if _has_c_form(value):
            assert answer == {"ok": True, "value": exact(value)}, f"{value!r}: {answer}"
            carried += 1
        else:
            assert not answer["ok"], f"{value!r} has no C form, yet came back: {answer}"
            assert any(word in answer["message"] for word in ("dtype", "surrogate")), answer
    assert carried > len(NATIVE_VALUES) - 8


def test_a_client_refuses_what_the_c_interface_cannot_take(cpp_build, csharp_build, monkeypatch):
    """Envs of one client share their spaces; a bad endpoint is named; a good client starts in state New."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cpp_build))
    endpoint = free_tcp_address()
    script = [
        {"op": "client", "envs": ["Probe", "Probe"], "endpoint": endpoint},
        {"op": "client", "envs": ["CartPole"], "endpoint": endpoint},
        {"op": "client", "envs": ["Probe", "CartPole"], "endpoint": endpoint},
        {"op": "client", "envs": ["Probe"], "endpoint": "localhost:5555"},
    ]
    good, cartpole, mixed, bad = harness_answers(csharp_build, script)
    for answer in (good, cartpole):
        assert answer == {"ok": True, "state": "New", "abi_version": 1 << 16, "pending_env": -1, "slots": 0}, answer
    assert mixed["type"] == "ArgumentException" and "env 1 has the observation space" in mixed["message"], mixed
    assert bad["type"] == "ArgumentException" and "ClientOptions.Endpoint" in bad["message"], bad
    assert "'localhost:5555'" in bad["message"], bad


def _exit_status(command: list[str], after: float, send: signal.Signals | None) -> tuple[int, str]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if send is not None:
            time.sleep(after)
            process.send_signal(send)
        _, error = process.communicate(timeout=30)
        return process.returncode, error
    finally:
        process.kill()
        process.wait()


def test_the_command_line_exits_as_the_c_probe_client(csharp_client):
    """2 for bad usage, 1 when no server answers, 130 on SIGINT and 143 on SIGTERM (the client says BYE first)."""
    endpoint = free_tcp_address()
    status, error = _exit_status([*csharp_client, endpoint, "--num-envs", "0"], 0, None)
    assert status == 2 and "argument --num-envs: must be an int in 1..65535, got 0" in error, error
    status, error = _exit_status([*csharp_client, endpoint, "--env", "pong"], 0, None)
    assert status == 2 and "invalid choice: pong" in error, error
    status, error = _exit_status([*csharp_client, endpoint, "--no-reconnect", "--connect-timeout", "0.5"], 0, None)
    assert status == 1 and "no answer from a server" in error, error
    for send, expected in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        status, error = _exit_status([*csharp_client, endpoint, "--env", "cartpole"], 1.5, send)
        assert status == expected, f"{send.name}: {status}: {error}"


MIXED = {"run": AutoresetMode.NEXT_STEP, "frame-paced": AutoresetMode.SAME_STEP}
"""The C# mode of the mixed vector, and the autoreset mode it runs under (each mode meets one of the two)."""


@pytest.mark.parametrize("mode", list(MIXED))
def test_python_cpp_and_csharp_clients_serve_one_vector_as_sync_vector_env_steps(
    csharp_client, cpp_build, reaper, mode
):
    """One RemoteVectorEnv of 6 probe slots, 2 served by each of a Python, a C++ and a C# client, steps as a
    SyncVectorEnv of 6 Python probes: seeds above 2**63, some above 2**64, reach the Python and C# envs whole,
    32 random steps cross 6 autoresets (the probe truncates at step 5), and every slot's np_random_seed is its own.
    Every client runs the same probe, so the order in which they join decides who serves which slot but not what a
    slot answers. The C++ probe keeps ``Env::reset``, which takes seeds in the signed 64-bit range only
    (clients/cpp/README.md), so its slots, found in the stats once all have joined, get the largest it takes."""
    endpoint = free_tcp_address()
    envs = probe_vector(endpoint, 6, liveness_timeout=2.0, mode=MIXED[mode])
    reference = SyncVectorEnv([ProbeEnv] * 6, autoreset_mode=MIXED[mode])
    try:
        python = [sys.executable, "-m", "gym_remote", "client", endpoint, "--env", "gym_remote/Probe-v0"]
        cpp = [str(cpp_build / "gym_remote_probe_client"), endpoint]
        csharp = [*csharp_client, endpoint, "--env", "probe", *MODES[mode]]
        for name, command in (("python", python), ("cpp", cpp), ("csharp", csharp)):
            reaper.popen([*command, "--num-envs", "2", "--name", name])
        envs.get_attr("render_mode")  # returns once every slot is served
        served = {name: [row["slot"] for row in rows] for name, rows in rows_by_client(envs.stats()).items()}
        assert {name: len(slots) for name, slots in served.items()} == {"python": 2, "cpp": 2, "csharp": 2}, served
        seeds = [2**63 - 1 - slot if slot in served["cpp"] else 2**64 - 3 + slot for slot in range(6)]
        found = differences(envs.reset(seed=seeds), reference.reset(seed=seeds), "reset")
        envs.action_space.seed(5)
        for step in range(32):
            actions = envs.action_space.sample()
            found += differences(envs.step(actions), reference.step(actions), f"step {step}")
        assert list(envs.get_attr("np_random_seed")) == seeds
        assert not found, "\n".join(found)
    finally:
        envs.close()
        reference.close()
