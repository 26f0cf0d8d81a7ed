"""Shared fixtures: every process a test starts is ended by the test, by its pid (helpers: ``tests.helpers``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.helpers import ThreadClient

REPO_ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("OMP_NUM_THREADS", "1")
# Ray's single-machine mode: the test Ray instance (tests/test_ray.py) binds and dials 127.0.0.1 only
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


# tests/rllib needs ray[rllib], whose exact Gymnasium pin keeps it out of this environment: it runs in one of its
# own, as ``python -m pytest tests/rllib`` (an explicit path is collected all the same), which
# tests/test_side_environments.py does
collect_ignore = ["rllib"]


# -- the suite runs over every data plane --------------------------------------------------------------

# Modules that open no socket, choose their planes themselves, or test an API above the transport (the CLI, SB3,
# Ray, the examples) run once, over the default plane. The modules whose promises must
# hold on every link kind run three times: over the same-host data plane with shared-memory mailboxes ("shm",
# the default on x86-64 Linux), over its socket alone ("uds", the fallback), and over ZeroMQ alone ("zmq").
# Every other test runs twice, over the default plane and over ZeroMQ.
EVERY_PLANE_MODULES = {"test_equivalence", "test_faults", "test_partial_batches"}
ONE_PLANE_MODULES = {
    "test_benchmark_smoke",
    "test_c_abi",
    "test_channel",
    "test_cli",
    "test_codec",
    "test_commands",
    "test_conformance_document",
    "test_conformance_units",
    "test_cpp_client",
    "test_csharp",
    "test_csharp_client",
    "test_data_plane",
    "test_docs",
    "test_docs_site",
    "test_episodes",
    "test_examples",
    "test_fleet",
    "test_membership",
    "test_metrics",
    "test_mux",
    "test_packaging",
    "test_partial_state",
    "test_probe",
    "test_protocol",
    "test_protocol_document",
    "test_ray",
    "test_ray_cluster",
    "test_reach",
    "test_relay",
    "test_rllib",
    "test_sb3",
    "test_security_units",
    "test_shared",
    "test_side_environments",
    "test_status",
    "test_soak",
    "test_structure",
    "test_test_vectors",
    "test_typing",
    "test_zeromq",
}


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--data-plane",
        choices=("all", "shm", "uds", "zmq"),
        default="all",
        help="run the socket tests over the same-host data plane with shared memory (shm) or its socket alone "
        "(uds), over ZeroMQ alone (zmq), or each module over its planes (all, the default)",
    )


def _default_plane() -> str:
    from gym_remote.links import shared

    return "shm" if shared.AVAILABLE else "uds"


def planes_of(module: str) -> list[str]:
    """The planes a module's socket tests run over with ``--data-plane all``."""
    default = _default_plane()
    if module in EVERY_PLANE_MODULES:
        return [default, "uds", "zmq"] if default != "uds" else ["uds", "zmq"]
    return [default, "zmq"]


def pytest_generate_tests(metafunc) -> None:
    module = metafunc.module.__name__.rpartition(".")[2]
    if "data_plane" in metafunc.fixturenames and module not in ONE_PLANE_MODULES:
        chosen = metafunc.config.getoption("--data-plane")
        metafunc.parametrize("data_plane", planes_of(module) if chosen == "all" else [chosen], indirect=True)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "alternate_planes: with all planes chosen, each case of the test's matrix runs on one plane, not on each",
    )
    _end_with_the_suite_that_started_this_run()
    config.addinivalue_line(
        "markers",
        "side_run(run): the test waits for a tests.side_envs.SideRun, started in the background when collection "
        "ends; the test runs last",
    )


def pytest_collection_finish(session) -> None:
    """Start the side runs of the tests collected (they overlap the rest of the suite), and order those last."""
    if session.config.option.collectonly:
        return
    session.items.sort(key=lambda item: item.get_closest_marker("side_run") is not None)
    for item in session.items:
        for marker in item.iter_markers("side_run"):
            marker.args[0].start()


def _end_with_the_suite_that_started_this_run() -> None:
    """In a side run's pytest: if the suite that started it dies without stopping it (SIGKILL, SIGTERM), end this
    run and every process it started (its process group), rather than run on orphaned."""
    from tests import side_envs

    parent = os.environ.get(side_envs.PARENT_VARIABLE)
    if parent is None:
        return

    def watch() -> None:
        while os.getppid() == int(parent):
            time.sleep(1.0)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="side run: watch the suite", daemon=True).start()


def pytest_unconfigure(config) -> None:
    """An interrupted run ends its side runs' processes too."""
    from tests import side_envs

    for run in side_envs.SideRun.started:
        run.stop()


def pytest_collection_modifyitems(config, items) -> None:
    """A test marked ``alternate_planes`` (a wide matrix of cases whose subject is not the transport) runs
    each case once: on the plane whose position in its module's planes (:func:`planes_of`) is the sum of the
    positions of its parameter values (each in its own parameter's list), modulo the number of planes. So
    every case runs, and every value of a parameter that varies with another meets every plane, at a
    fraction of the cost."""
    if config.getoption("--data-plane") != "all":
        return
    marked = [
        item
        for item in items
        if item.get_closest_marker("alternate_planes") is not None and "data_plane" in item.callspec.params
    ]
    values: dict[tuple[str, str], list] = {}  # each parameter's values, in order, by test function
    for item in marked:
        for name, value in item.callspec.params.items():
            seen = values.setdefault((item.originalname, name), [])
            if value not in seen:
                seen.append(value)
    dropped = set()
    for item in marked:
        params = item.callspec.params
        planes = planes_of(item.module.__name__.rpartition(".")[2])
        position = sum(values[item.originalname, name].index(v) for name, v in params.items() if name != "data_plane")
        if params["data_plane"] != planes[position % len(planes)]:
            dropped.add(item)
    if dropped:
        config.hook.pytest_deselected(items=[item for item in items if item in dropped])
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture(autouse=True)
def data_plane(request, monkeypatch):
    """The plane a test's servers and clients (also in child processes) use by default: ``"shm"``, ``"uds"`` or
    ``"zmq"`` (``"default"`` in a module that runs once: as the environment says)."""
    from gym_remote.links import channel

    plane = getattr(request, "param", "default")
    if plane in ("shm", "uds"):
        monkeypatch.setenv(channel.ENV_SWITCH, plane)
    elif plane == "zmq":
        monkeypatch.setenv(channel.ENV_SWITCH, "off")
    return plane


def subprocess_env() -> dict[str, str]:
    """Environment for child processes: the repository (and so ``tests.envs``) importable."""
    env = dict(os.environ)
    paths = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


class ProcessReaper:
    """Starts processes for a test and kills every one of them, by pid, when the test ends."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []

    def popen(self, args: list[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("env", subprocess_env())
        kwargs.setdefault("cwd", str(REPO_ROOT))
        process = subprocess.Popen(args, **kwargs)
        self.processes.append(process)
        return process

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def reaper():
    """A :class:`ProcessReaper`; all its processes are SIGKILLed and reaped after the test."""
    reaper = ProcessReaper()
    yield reaper
    reaper.kill_all()


@pytest.fixture
def thread_clients():
    """Thread clients (:class:`~tests.helpers.ThreadClient`) put in this list are stopped at teardown."""
    clients: list[ThreadClient] = []
    yield clients
    for client in clients:
        client.stop()


@pytest.fixture
def stack():
    """An ExitStack: teardown in reverse order of registration (servers close before their clients stop)."""
    with contextlib.ExitStack() as exit_stack:
        yield exit_stack


@pytest.fixture
def other_host():
    """A network namespace ("another host") joined to this one by a veth pair on a private /29 with no
    default route: this side 10.213.7.1, the other 10.213.7.2 (no host has the others: 10.213.7.3 is an
    unused address). Torn down after the test."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to make a network namespace")
    name, here, there = f"gr-host-{os.getpid()}", f"grh{os.getpid() % 100000}", f"grp{os.getpid() % 100000}"
    commands = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", here, "type", "veth", "peer", "name", there],
        ["ip", "link", "set", there, "netns", name],
        ["ip", "addr", "add", "10.213.7.1/29", "dev", here],
        ["ip", "link", "set", here, "up"],
        ["ip", "netns", "exec", name, "ip", "addr", "add", "10.213.7.2/29", "dev", there],
        ["ip", "netns", "exec", name, "ip", "link", "set", there, "up"],
        ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
    ]
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True, timeout=10)
        yield name
    except subprocess.CalledProcessError as error:
        pytest.skip(f"cannot make a network namespace: {error.stderr.decode(errors='replace').strip()}")
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


CPP_CLIENT_SOURCE = REPO_ROOT / "clients" / "cpp"
CPP_BUILD_SECONDS = 900


@pytest.fixture(scope="session")
def cpp_build() -> Path:
    """The C++ client (clients/cpp) built with CMake, once per test run: its build directory.

    Needs CMake, g++ and the Debian packages libzmq3-dev, cppzmq-dev, nlohmann-json3-dev and
    libsodium-dev (./run-tests installs them).
    """
    build = CPP_CLIENT_SOURCE / "build"
    steps = (
        ["cmake", "-S", str(CPP_CLIENT_SOURCE), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
        ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)],
    )
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=CPP_BUILD_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as error:
            pytest.fail(f"building the C++ client failed: {' '.join(step)}: {error}")
        if done.returncode != 0:
            pytest.fail(
                f"building the C++ client failed: {' '.join(step)} exited with {done.returncode} (it needs cmake, "
                "g++, libzmq3-dev, cppzmq-dev, nlohmann-json3-dev and libsodium-dev):\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
    return build


CSHARP_SOURCE = REPO_ROOT / "clients" / "csharp"


@pytest.fixture(scope="session")
def csharp_build(tmp_path_factory) -> Path:
    """The C# library and its harness (clients/csharp) built with Mono's mcs, once per test run: the directory
    holding GymRemote.dll and GymRemote.Harness.exe. Skips when Mono is absent (./run-tests installs mono-devel)."""
    missing = [tool for tool in ("mcs", "mono") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"Mono is not installed ({', '.join(missing)} not found): apt-get install mono-devel")
    build = tmp_path_factory.mktemp("csharp")
    try:
        done = subprocess.run(
            ["sh", str(CSHARP_SOURCE / "build.sh"), str(build)], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"building the C# library timed out: {error}")
    if done.returncode != 0:
        pytest.fail(
            f"building the C# library failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return build


@pytest.fixture
def csharp_client(cpp_build, csharp_build, monkeypatch) -> list[str]:
    """The command of GymRemote.Client.exe under Mono, with libgym_remote.so found through LD_LIBRARY_PATH (set for
    the processes the test starts)."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cpp_build))
    mono = shutil.which("mono")
    assert mono is not None
    return [mono, str(csharp_build / "GymRemote.Client.exe")]


@pytest.fixture
def run(reaper, tmp_path):
    """``run(*args, via=..., name=...)`` starts ``gym-remote ARGS`` as a ``LoggedProcess`` (``.wait(timeout)``)."""
    from tests.helpers import gym_remote

    counter = iter(range(1000))

    def start(*args: str, via: str = "module", name: str | None = None, **popen):
        return gym_remote(reaper, tmp_path, name or f"run{next(counter)}", *args, via=via, **popen)

    return start
