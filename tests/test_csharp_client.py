"""The C# client (clients/csharp: a P/Invoke binding over the C ABI of clients/cpp) under Mono: its command-line
client GymRemote.Client.exe passes the conformance suite, run by the native client's own loop and frame-paced (one
pump a frame, each step answered on the next frame by FramePacedDriver); values of every kind cross the native
handles and come back to the bit; the Client refuses what the C interface cannot take; the command line exits as
the C probe client does; a Python, a C++ and a C# client serve one vector as SyncVectorEnv steps."""

from __future__ import annotations

import json
import re
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
from gym_remote.probe import ProbeEnv
from tests.conftest import CSHARP_SOURCE
from tests.helpers import cartpole_server, free_tcp_address, probe_client_template, rows_by_client
from tests.test_csharp import CORE_DTYPES, VALUES, exact, harness_answers

pytestmark = pytest.mark.timeout(300)

MODES = {"run": [], "frame-paced": ["--frame-paced"]}
"""run: Client.Run (the native client's loop); frame-paced: FramePacedDriver, one Pump(0) per ~1 ms frame."""


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
    its slot goes to the next client at once, not after the learner's 60 s liveness timeout; and the log sink that
    domain set is dropped with it (the native library lives on, and logs to stderr again)."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cpp_build))
    endpoint = free_tcp_address()
    envs = probe_vector(endpoint, 1, liveness_timeout=60.0)
    try:
        harness = reaper.popen(
            [shutil.which("mono") or "mono", str(csharp_build / "GymRemote.Harness.exe")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        command = {"op": "domain_client", "endpoint": endpoint, "no_server": free_tcp_address()}
        harness.stdin.write(json.dumps(command) + "\n")
        harness.stdin.flush()
        envs.reset(seed=1)  # served by the C# client
        answer = json.loads(harness.stdout.readline())
        assert answer == {"ok": True, "state": "Member", "after": "Timeout"}, answer
        reaper.popen([sys.executable, "-m", "gym_remote", "client", endpoint, "--env", "gym_remote/Probe-v0"])
        started = time.monotonic()
        envs.reset(seed=2)  # the harness process lives on: only the domain's end can have freed the slot
        assert time.monotonic() - started < 20, "the slot was freed only when the learner's liveness timeout ran out"
        _, log = harness.communicate(timeout=30)  # (closes stdin: the harness exits)
        assert harness.returncode == 0, log
        mine = [line for line in log.splitlines() if command["no_server"] in line]
        assert mine and not [line for line in mine if "the reloaded domain's sink" in line], log
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


MIXED = {"run": AutoresetMode.NEXT_STEP, "frame-paced": AutoresetMode.SAME_STEP}
"""The C# mode of the mixed vector, and the autoreset mode it runs under (each mode meets one of the two)."""


@pytest.mark.parametrize("mode", list(MIXED))
def test_python_cpp_and_csharp_clients_serve_one_vector_as_sync_vector_env_steps(
    csharp_client, cpp_build, reaper, mode
):
    """One RemoteVectorEnv of 6 probe slots, 2 served by each of a Python, a C++ and a C# client, steps as a
    SyncVectorEnv of 6 Python probes: seeds from 2**64 - 3 up, across 2**64, reach every client's envs whole, in
    32 random steps every slot autoresets at least 5 times (the probe truncates at step 5), and every slot's
    np_random_seed is its own.
    Every client runs the same probe, so the order in which they join decides who serves which slot but not what a
    slot answers."""
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
        seeds = [2**64 - 3 + slot for slot in range(6)]
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


UNITY_STAND_IN = r"""
namespace UnityEngine
{
    // The engine's base class; the engine calls a behaviour's messages (OnEnable, FixedUpdate ...) by name.
    public class MonoBehaviour
    {
    }

    public static class Debug
    {
        public static void Log(object message) { System.Console.Error.WriteLine("Log: " + message); }

        public static void LogWarning(object message) { System.Console.Error.WriteLine("LogWarning: " + message); }

        public static void LogError(object message) { System.Console.Error.WriteLine("LogError: " + message); }
    }
}

namespace UnityEditor
{
    public static class AssemblyReloadEvents
    {
        public delegate void AssemblyReloadCallback();

        public static event AssemblyReloadCallback beforeAssemblyReload;

        // the test's, not Unity's: what the editor does before it reloads the assemblies
        public static void RaiseBeforeAssemblyReload()
        {
            AssemblyReloadCallback handlers = beforeAssemblyReload;
            if (handlers != null) handlers();
        }
    }
}

// The engine's frame loop: every host enabled, a FixedUpdate each a frame until the file args[2] appears, then a
// domain reload; the process lives on until its stdin closes, then exits 0 if every client closed on the reload.
static class FrameLoop
{
    static int Main(string[] args)
    {
        var hosts = new ProbeHost[int.Parse(args[1])];
        for (int i = 0; i < hosts.Length; i++)
        {
            hosts[i] = new ProbeHost { endpoint = args[0], clientName = "unity" + i, livenessTimeout = 2f };
            Send(hosts[i], "OnEnable");
        }
        System.DateTime end = System.DateTime.UtcNow.AddSeconds(60);
        while (!System.IO.File.Exists(args[2]))
        {
            if (System.DateTime.UtcNow > end) return 3;
            foreach (ProbeHost host in hosts) Send(host, "FixedUpdate");
            System.Threading.Thread.Sleep(1);
        }
        UnityEditor.AssemblyReloadEvents.RaiseBeforeAssemblyReload();
        int serving = 0;
        foreach (ProbeHost host in hosts) if (host.Serving) serving += 1;
        System.Console.In.ReadToEnd();
        foreach (ProbeHost host in hosts) Send(host, "OnDisable");
        return serving == 0 ? 0 : 4;
    }

    // as the engine does: the most derived method of that name, whatever its access
    static void Send(object behaviour, string message)
    {
        const System.Reflection.BindingFlags Any = System.Reflection.BindingFlags.Instance |
            System.Reflection.BindingFlags.Public | System.Reflection.BindingFlags.NonPublic |
            System.Reflection.BindingFlags.DeclaredOnly;
        for (System.Type type = behaviour.GetType(); type != null; type = type.BaseType)
        {
            System.Reflection.MethodInfo method = type.GetMethod(message, Any);
            if (method != null)
            {
                method.Invoke(behaviour, null);
                return;
            }
        }
        throw new System.MissingMethodException(behaviour.GetType().Name, message);
    }
}
"""


def _unity_guide_code() -> list[str]:
    """The C# code blocks of the README's Unity section, in order."""
    text = (CSHARP_SOURCE / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Unity (and other engines)\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"\n```csharp\n(.*?)\n```\n", section, flags=re.DOTALL)


def test_the_unity_guide_serves_a_vector_frame_by_frame(csharp_client, csharp_build, reaper, tmp_path):
    """The README's Unity MonoBehaviour, compiled as it is written (for a player, and for the editor, which the
    test runs) against GymRemote.dll and a stand-in of the engine types it uses, and driven as the engine would
    (OnEnable, then FixedUpdate once a frame): two hosts serve a 2-slot RemoteVectorEnv as SyncVectorEnv steps,
    each step answered a frame after it was asked, across autoresets and with seeds above 2**63; then
    beforeAssemblyReload closes both clients, whose BYE frees their slots for a Python client at once (the learner's
    liveness timeout is 60 s, and the engine's process lives on)."""
    blocks = _unity_guide_code()
    assert len(blocks) == 2 and "class GymRemoteHost : MonoBehaviour" in blocks[0], blocks
    sources = []
    for name, code in (("Host.cs", blocks[0]), ("Probe.cs", blocks[1]), ("Engine.cs", UNITY_STAND_IN)):
        (tmp_path / name).write_text(code, encoding="utf-8")
        sources.append(str(tmp_path / name))
    shutil.copy(csharp_build / "GymRemote.dll", tmp_path)
    compiler = [
        "mcs",
        "-langversion:7.2",
        "-warnaserror+",
        "-r:System.Numerics.dll",
        f"-r:{tmp_path / 'GymRemote.dll'}",
    ]
    for where, defines in (("a player", []), ("the editor", ["-define:UNITY_EDITOR"])):
        program = tmp_path / f"Unity{len(defines)}.exe"
        done = subprocess.run(
            [*compiler, *defines, f"-out:{program}", *sources], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"the guide's code does not compile for {where}:\n{done.stdout}\n{done.stderr}"
    endpoint, reload = free_tcp_address(), tmp_path / "reload"
    envs = probe_vector(endpoint, 2, liveness_timeout=60.0)
    reference = SyncVectorEnv([ProbeEnv] * 2)
    try:
        engine = reaper.popen(
            [csharp_client[0], str(program), endpoint, "2", str(reload)],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seed = 2**64 - 1
        found = differences(envs.reset(seed=seed), reference.reset(seed=seed), "reset")
        assert sorted(rows_by_client(envs.stats())) == ["unity0", "unity1"]
        envs.action_space.seed(7)
        for step in range(12):
            actions = envs.action_space.sample()
            found += differences(envs.step(actions), reference.step(actions), f"step {step}")
        assert list(envs.get_attr("np_random_seed")) == [seed, seed + 1]
        assert not found, "\n".join(found)
        reload.touch()
        python = [sys.executable, "-m", "gym_remote", "client", endpoint, "--env", "gym_remote/Probe-v0"]
        reaper.popen([*python, "--num-envs", "2", "--name", "python"])
        started = time.monotonic()
        envs.reset(seed=1)
        assert time.monotonic() - started < 20, "the slots were freed only when the learner's liveness timeout ran out"
        assert sorted(rows_by_client(envs.stats())) == ["python"]
        _, log = engine.communicate(timeout=30)
        assert engine.returncode == 0, f"{engine.returncode}: a client outlived the domain reload\n{log}"
        assert "LogError" not in log and "LogWarning" not in log, log
    finally:
        envs.close()
        reference.close()
