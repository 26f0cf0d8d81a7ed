"""The C# client (clients/csharp: a P/Invoke binding over the C ABI of clients/cpp) under Mono: its command-line
client GymRemote.Client.exe passes the conformance suite, run by the native client's own loop and frame-paced (one
pump a frame, each step answered on the next frame by FramePacedDriver); values of every kind cross the native
handles and come back to the bit; the Client refuses what the C interface cannot take; the command line exits as
the C probe client does."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gym_remote.conformance import GROUPS, run
from gym_remote.conformance.reference import differences
from gym_remote.conformance.values import probe_vector
from tests.helpers import cartpole_server, free_tcp_address, probe_client_template
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
    if isinstance(value, (list, tuple)):  # (a GraphInstance too)
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
    {"é😀": 1, "": 2, "a\x00b": 3},
    [[[[[[[[[[1]]]]]]]]]],
    spaces.GraphInstance(np.ones((3, 2), dtype=np.float32), None, None),
    spaces.GraphInstance(np.arange(3), np.array([0.5, -1.0]), np.array([[0, 1], [1, 2]])),
    [spaces.GraphInstance(np.zeros((0, 1), dtype=np.uint8), np.zeros((0,)), np.zeros((0, 2), dtype=np.int64))],
]


def test_values_of_every_kind_cross_the_native_handles_exactly(cpp_build, csharp_build, monkeypatch):
    """Value -> gr_value -> Value gives the same value to the bit for every kind the C interface has (big ints of
    both signs, -0.0 and NaN, bytes, nested lists and tuples, dicts with any keys, scalars and arrays of every core
    dtype, object arrays, graphs); what it has no form for (other dtypes, lone surrogates) is refused with a clear
    error."""
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
    """Envs of one client share their spaces; a bad endpoint is named; a good client starts in state New, and
    CompleteStep without a pending step, for an env it does not host or with StepResult.Pending says so."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cpp_build))
    endpoint = free_tcp_address()
    script = [
        {"op": "client", "envs": ["Probe", "Probe"], "endpoint": endpoint},
        {"op": "client", "envs": ["CartPole"], "endpoint": endpoint},
        {"op": "client", "envs": ["Probe", "CartPole"], "endpoint": endpoint},
        {"op": "client", "envs": ["Probe"], "endpoint": "localhost:5555"},
    ]
    good, cartpole, mixed, bad = harness_answers(csharp_build, script)
    for answer, hosted in ((good, 2), (cartpole, 1)):
        misuses = [answer.pop(key) for key in ("complete_unasked", "complete_other_env", "complete_pending")]
        assert misuses[0] == "GymRemoteException: CompleteStep(env 0): no step is pending (none was)", misuses
        out_of_range = f"ArgumentOutOfRangeException: the client hosts envs 0..{hosted - 1}, not {hosted}"
        assert misuses[1].startswith(out_of_range), misuses
        assert misuses[2].startswith("ArgumentException: CompleteStep takes the step's result, not "), misuses
        version = answer.pop("abi_version")
        assert answer == {"ok": True, "state": "New", "pending_env": -1, "slots": 0}, answer
        assert version >> 16 == 1 and version >= 0x10100, f"C ABI {version:#x}: the binding uses 1.1's gr_dict_key_data"
    assert mixed["type"] == "ArgumentException" and "env 1 has the observation space" in mixed["message"], mixed
    assert bad["type"] == "ArgumentException" and "ClientOptions.Endpoint" in bad["message"], bad
    assert "'localhost:5555'" in bad["message"], bad


def test_the_native_log_lines_reach_a_csharp_sink(cpp_build, csharp_build, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cpp_build))
    endpoint = free_tcp_address()
    (answer,) = harness_answers(csharp_build, [{"op": "log_sink", "endpoint": endpoint}])
    assert answer["ok"] and answer["status"] == "Timeout" and "no answer from a server" in answer["error"], answer
    lines = answer["lines"][1:]  # ["l", ["t", level, message], ...]
    assert ["t", "Info", f"client {answer['error'].split()[1]} connecting to {endpoint} with 1 envs"] in lines, lines


PYTHON_ERRORS = {  # .NET exception -> the Python exception the learner raises (README.md's table)
    "System.ArgumentException": "ValueError",
    "System.Text.DecoderFallbackException": "ValueError",  # (an ArgumentException)
    "System.InvalidCastException": "TypeError",
    "System.IndexOutOfRangeException": "IndexError",
    "System.Collections.Generic.KeyNotFoundException": "KeyError",
    "System.NotImplementedException": "NotImplementedError",
    "System.OverflowException": "OverflowError",
    "System.DivideByZeroException": "ZeroDivisionError",
    "System.OutOfMemoryException": "MemoryError",
    "System.InvalidOperationException": "RuntimeError",
    "System.NotSupportedException": "RuntimeError",
    "GymRemote.GymRemoteException": None,  # no (string) constructor: the harness says so
}


def test_dotnet_exceptions_reach_the_learner_as_python_ones(csharp_build):
    script = [{"op": "python_error", "dotnet": name, "message": "what went wrong"} for name in PYTHON_ERRORS]
    for (name, expected), answer in zip(PYTHON_ERRORS.items(), harness_answers(csharp_build, script)):
        if expected is None:
            assert not answer["ok"], answer
            continue
        message = f"{name}: what went wrong" if expected == "RuntimeError" else "what went wrong"
        assert answer == {"ok": True, "type": expected, "module": "builtins", "message": message}, answer


def test_a_missing_library_or_another_major_version_is_refused(csharp_build, tmp_path, monkeypatch):
    """The binding checks gr_abi_version's major before it makes a client, and says what to do when it is absent."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler is not None
    (tmp_path / "empty").mkdir()
    (tmp_path / "v2").mkdir()
    source = tmp_path / "abi2.c"
    source.write_text("unsigned gr_abi_version(void) { return (2u << 16) | (3u << 8); }\n")
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(tmp_path / "v2" / "libgym_remote.so"), str(source)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert built.returncode == 0, built.stderr
    command = [{"op": "client", "envs": ["Probe"], "endpoint": free_tcp_address()}]
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "empty"))
    (missing,) = harness_answers(csharp_build, command)
    assert missing["type"] == "GymRemoteException" and "was not found" in missing["message"], missing
    assert "LD_LIBRARY_PATH" in missing["message"], missing
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "v2"))
    (other,) = harness_answers(csharp_build, command)
    assert other["type"] == "GymRemoteException" and "C ABI version 2.3.0" in other["message"], other
    assert "written for major version 1" in other["message"], other


@pytest.mark.timeout(200)
def test_a_domain_unload_ends_a_client_left_running(cpp_build, csharp_build, reaper, monkeypatch):
    """A client made in an AppDomain and never disposed says BYE when the domain unloads (a Unity domain reload):
    its slot goes to the next client at once, not after the learner's 60 s liveness timeout."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cpp_build))
    endpoint = free_tcp_address()
    envs = probe_vector(endpoint, 1, liveness_timeout=60.0)
    try:
        harness = reaper.popen(
            [shutil.which("mono") or "mono", str(csharp_build / "GymRemote.Harness.exe")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        harness.stdin.write(json.dumps({"op": "domain_client", "endpoint": endpoint}) + "\n")
        harness.stdin.flush()
        envs.reset(seed=1)  # served by the C# client
        answer = json.loads(harness.stdout.readline())
        assert answer == {"ok": True, "state": "Member"}, answer
        reaper.popen([sys.executable, "-m", "gym_remote", "client", endpoint, "--env", "gym_remote/Probe-v0"])
        started = time.monotonic()
        envs.reset(seed=2)  # the harness process lives on: only the domain's end can have freed the slot
        assert time.monotonic() - started < 20, "the slot was freed only when the learner's liveness timeout ran out"
        harness.stdin.close()
        assert harness.wait(30) == 0
    finally:
        envs.close()


@pytest.mark.parametrize("mode", list(MODES))
def test_csharp_cartpoles_serve_a_vector_as_gymnasiums_step_for_step(csharp_client, reaper, stack, mode):
    """Two C# CartPoles behind the command-line client give the vector Gymnasium's CartPole-v1 episodes to the bit
    (through resets, terminations and autoresets), and their own attribute ``state`` is read and set through the
    env's TryGetAttribute / TrySetAttribute."""
    envs = cartpole_server(stack, 2, autoreset_mode=AutoresetMode.SAME_STEP)
    reference = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    stack.callback(reference.close)
    reaper.popen([*csharp_client, envs.address, "--env", "cartpole", "--num-envs", "2", *MODES[mode]])
    found = differences(envs.reset(seed=7), reference.reset(seed=7), "reset")
    rng = np.random.default_rng(7)
    for step in range(120):
        actions = rng.integers(0, 2, size=2)
        found += differences(envs.step(actions), reference.step(actions), f"step {step}")
    assert not found, "\n".join(found)
    state = np.array([0.25, -0.5, 0.0625, 1.0])
    envs.set_attr("state", [state, state * 2])
    got = envs.get_attr("state")
    assert [value.tolist() for value in got] == [state.tolist(), (state * 2).tolist()], got
    reference.set_attr("state", [state, state * 2])  # (down the wrappers to CartPoleEnv.state)
    found = differences(envs.step(np.array([1, 0])), reference.step(np.array([1, 0])), "the step from the states set")
    assert not found, "\n".join(found)


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
