"""The benchmark suite: RemoteVectorEnv against Gymnasium's SyncVectorEnv and AsyncVectorEnv, every case.

    python benchmarks/suite.py [--quick] [--repeats 3] [--cases cartpole,busy,frames,...]  (all by default)

Prints a table per case, and writes the raw results as JSON (and, with matplotlib installed,
``pip install "gymnasium-remote[bench]"``, a plot) to ``benchmarks/results/``. Every figure is the
median of ``--repeats`` runs after a warm-up; within a case the vector envs take turns, so that
their ratios are measured side by side (absolute speeds drift on shared machines, ratios hold).
``--quick`` runs every case briefly (about a minute), to check that the suite works.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import bench_envs
import cloudpickle
import cpp_clients
import gymnasium as gym
import numpy as np
import partial_batches as partial_case
import peers
import raw_transports
import scale as scale_bench
import zmq
from common import Trainer, interleaved_medians, lock_step_rate
from echo import echo_steps_per_second
from pipe_workers import PipeWorkers
from watched import WATCHERS, watched_makers

from gym_remote import RemoteVectorEnv
from gym_remote.links import channel
from gym_remote.server import default_spin

for module in (bench_envs, partial_case):  # local client processes cannot import this folder: send the code
    cloudpickle.register_pickle_by_value(module)

RESULTS = Path(__file__).resolve().parent / "results"
CORES = os.cpu_count() or 1


@dataclass
class Case:
    """One benchmark case: the rate (per second) of each vector env, and their ratios to ``baseline``."""

    name: str
    title: str
    unit: str
    baseline: str
    medians: dict[str, float] = field(default_factory=dict)
    runs: dict[str, list[float]] = field(default_factory=dict)
    details: dict[str, dict[str, float]] = field(default_factory=dict)  # other figures of the rows, by name

    def ratios(self) -> dict[str, float]:
        return {label: value / self.medians[self.baseline] for label, value in self.medians.items()}


DATA_PLANES = ("shm", "uds")


def transports() -> tuple[str, ...]:
    """RemoteVectorEnv's transports to local clients: ``shm``, the same-host data plane with shared-memory
    mailboxes (the default; x86-64 Linux), ``uds``, its Unix socket alone (Linux), and ZeroMQ with the data
    plane off, over ``ipc://`` and over ``tcp://`` loopback."""
    planes = tuple(plane for plane in DATA_PLANES if channel.wanted(plane) == plane)
    return (*planes, "ipc", "tcp")


def remote(env_fns: list[Callable[[], gym.Env]], transport: str, **kwargs: Any) -> RemoteVectorEnv:
    """A RemoteVectorEnv with local clients over ``transport`` (of :func:`transports`), checked: every slot's
    commands travel over the plane the label says (``shm``, ``uds``, or ZeroMQ for ``ipc`` and ``tcp``)."""
    bind = "tcp://127.0.0.1:*" if transport == "tcp" else None
    data_plane = transport if transport in DATA_PLANES else False
    envs = RemoteVectorEnv(env_fns, bind=bind, data_plane=data_plane, **kwargs)
    expected = transport if transport in DATA_PLANES else "zmq"
    planes = {row.get("plane") for row in envs.stats()}
    if planes != {expected}:
        envs.close()
        raise RuntimeError(f"Remote {transport}: slots on planes {sorted(map(str, planes))}, expected {expected!r}")
    return envs


def vector_envs(make_env: Callable[[], gym.Env], num_envs: int) -> dict[str, Callable[[], gym.vector.VectorEnv]]:
    """The vector envs every case compares: Sync, Async with shared memory, and RemoteVectorEnv with
    local clients over the same-host data plane (shm, uds) and over ZeroMQ (ipc, tcp loopback), each with
    1 client, one per core, and one per env."""
    env_fns = [make_env] * num_envs
    layouts = {"1 client": 1, f"{min(CORES, num_envs)} clients (1/core)": min(CORES, num_envs)}
    layouts[f"{num_envs} clients (1/env)"] = num_envs
    makers: dict[str, Callable[[], gym.vector.VectorEnv]] = {
        "SyncVectorEnv": lambda: gym.vector.SyncVectorEnv(env_fns),
        "AsyncVectorEnv": lambda: gym.vector.AsyncVectorEnv(env_fns, shared_memory=True),
    }
    for transport in transports():
        for layout, clients in layouts.items():
            makers[f"Remote {transport}, {layout}"] = lambda clients=clients, transport=transport: remote(
                env_fns, transport, num_clients=clients
            )
    return makers


def compare(
    name: str,
    title: str,
    make_env: Callable[[], gym.Env],
    num_envs: int,
    steps: int,
    repeats: int,
    message_bytes: tuple[int, int] | None = None,
    references: dict[str, Callable[[], gym.vector.VectorEnv]] | None = None,
    envpool_id: str | None = None,
) -> Case:
    """Every vector env of :func:`vector_envs` stepping ``make_env``'s env, and the vector envs of
    ``references``, measured the same way, and the peers of :func:`peer_rows`. With ``message_bytes``
    (observation and action bytes per env), also the raw ZeroMQ echo of those messages with one client:
    the transport alone, what a RemoteVectorEnv over ZeroMQ without any cost of its own would add to the
    envs' steps."""
    case = Case(name, title, "env-steps/s", "AsyncVectorEnv")
    measure = lock_step_rate(steps, max(20, steps // 10))
    makers = {**vector_envs(make_env, num_envs), **(references or {})}
    cases = {label: (make, measure) for label, make in makers.items()}
    cases |= peer_rows(make_env, num_envs, steps, envpool_id)
    with tempfile.TemporaryDirectory(prefix="gym-remote-echo-") as workdir:
        if message_bytes is not None:
            cases[ECHO] = echo_case(1, num_envs, message_bytes, steps, f"ipc://{workdir}/echo", default_spin(1))
        case.medians = interleaved_medians(cases, repeats, runs=case.runs)
    return case


ECHO = "raw echo ipc, 1 client (transport alone)"


class _Rate:
    """A measurement that is not a vector env, in the shape ``interleaved_medians`` expects."""

    def __init__(self, function: Callable[..., float], *args: object) -> None:
        self.function, self.args = function, args

    def __call__(self) -> float:
        return self.function(*self.args)

    def close(self) -> None:
        pass


def echo_case(
    clients: int, envs_per_client: int, message_bytes: tuple[int, int], steps: int, address: str, spin: float
) -> tuple[Callable[[], _Rate], Callable[[_Rate], float]]:
    """The raw echo (``echo.py``) as a case of ``interleaved_medians``: ``steps`` rounds over ``clients``
    processes, each answering for ``envs_per_client`` envs of ``message_bytes`` (observation, action)."""
    return (
        lambda: _Rate(echo_steps_per_second, clients, envs_per_client, *message_bytes, steps, address, spin),
        lambda rate: rate(),
    )


def cpp_rows(env: str, spaces: tuple[gym.Space, gym.Space], num_envs: int) -> dict[str, Callable[[], Any]]:
    """The C++ client (clients/cpp) serving ``env``, if it is built: over the data plane with 1 client and one
    per core, and over ZeroMQ ipc with 1 client."""
    if not cpp_clients.available():
        return {}
    per_core = min(CORES, num_envs)
    layouts = {("uds", "1 client"): 1, ("uds", f"{per_core} clients (1/core)"): per_core, ("ipc", "1 client"): 1}
    return {
        f"C++ client, {transport}, {layout}": lambda clients=clients, transport=transport: cpp_clients.CppClients(
            env, spaces, num_envs, clients, transport
        )
        for (transport, layout), clients in layouts.items()
    }


def peer_rows(
    make_env: Callable[[], gym.Env], num_envs: int, steps: int, envpool_id: str | None = None
) -> dict[str, tuple[Callable[[], Any], Callable[[Any], float]]]:
    """PufferLib stepping ``make_env``'s env (``Serial``; ``Multiprocessing`` with 1 worker and one per
    core), and EnvPool's own C++ version of the env ``envpool_id`` (1 thread), where they are installed
    (:mod:`peers`; :func:`main` says why a missing one is left out).

    PufferLib's workers busy-wait, and so does its learner: with as many workers as cores they take turns
    at the cores (a hundred times slower), so that row runs a tenth of the steps."""
    rows: dict[str, tuple[Callable[[], Any], Callable[[Any], float]]] = {}
    measure = lock_step_rate(steps, max(20, steps // 10))
    if peers.missing("pufferlib") is None:
        workers = min(CORES, num_envs)
        rows["PufferLib Serial"] = (lambda: peers.PufferLibVector(make_env, num_envs), measure)
        rows["PufferLib Multiprocessing, 1 worker"] = (lambda: peers.PufferLibVector(make_env, num_envs, 1), measure)
        rows[f"PufferLib Multiprocessing, {workers} workers (1/core)"] = (
            lambda: peers.PufferLibVector(make_env, num_envs, workers),
            lock_step_rate(max(20, steps // 10), 10),
        )
    if envpool_id is not None and peers.missing("envpool") is None:
        rows["EnvPool (C++ env), 1 thread"] = (lambda: peers.EnvPoolVector(envpool_id, num_envs), measure)
    return rows


def pipe_workers_label(workers: int) -> str:
    return f"plain workers over pipes, {workers} worker{'s' if workers > 1 else ''}"


def smoke(steps: int = 1500, repeats: int = 3) -> Case:
    """The regression guard the tests run: CartPole, 8 envs, AsyncVectorEnv against RemoteVectorEnv
    with one local client (over the same-host data plane, where there is one, and over ZeroMQ ipc),
    a few seconds in all."""
    makers = vector_envs(lambda: gym.make("CartPole-v1"), 8)
    measure = lock_step_rate(steps, 100)
    chosen = ("AsyncVectorEnv", *(f"Remote {transport}, 1 client" for transport in transports() if transport != "tcp"))
    case = Case("smoke", "CartPole-v1, 8 envs (smoke)", "env-steps/s", "AsyncVectorEnv")
    case.medians = interleaved_medians({label: (makers[label], measure) for label in chosen}, repeats, runs=case.runs)
    return case


def transport_floor(steps: int, repeats: int) -> Case:
    """A zero-cost env against a raw pyzmq echo of the same messages, 1 client hosting 8 envs and one
    client per core sharing them.

    Each ZeroMQ pair (RemoteVectorEnv with the data plane off, over ipc and tcp, and its echo) waits for
    replies the same way: RemoteVectorEnv's default ``spin`` busy-checks for them when a core is left for
    it (1 client here), and so does its echo; with 1 client the pair that sleeps in libzmq (``spin=0``)
    is measured too. On Linux RemoteVectorEnv over the same-host data plane (shm and uds, default spin and
    ``spin=0``) stands next to the raw floors below ZeroMQ: a Unix socket and shared memory.
    """
    case = Case(
        "floor", "Transport floor: zero-cost env (8 envs) against raw echoes of its messages", "env-steps/s", ""
    )
    measure = lock_step_rate(steps, max(20, steps // 10))
    scratch = tempfile.TemporaryDirectory(prefix="gym-remote-echo-")  # the echoes' ipc sockets
    workdir = scratch.name
    raw = {"raw uds": raw_transports.uds_steps_per_second, "raw shm": raw_transports.shm_steps_per_second}
    # each ZeroMQ layout next to its raw pyzmq echo; the data plane (uds) between the raw floors below ZeroMQ
    data_planes = [plane for plane in DATA_PLANES if plane in transports()]
    order = ["ipc", "tcp"] + (["raw uds", *data_planes, "raw shm"] if raw_transports.available() else [])
    cases = {}
    for clients in (1, CORES):
        spin_by_default = default_spin(clients)
        layout = f"{clients} client{'s' if clients > 1 else ''}"
        for transport in order:
            if transport.startswith("raw "):  # blocks in the kernel, never spins
                cases[f"{transport}, {layout}"] = (
                    lambda function=raw[transport], clients=clients: _Rate(
                        function, clients, 8 // clients, 16, 8, steps
                    ),
                    lambda rate: rate(),
                )
                continue
            for spin in sorted({spin_by_default, 0.0}, reverse=True):
                label = f"{transport}, {layout}" + (", spin=0" if spin != spin_by_default else "")
                if transport not in DATA_PLANES:
                    address = f"ipc://{workdir}/echo-{clients}" if transport == "ipc" else "tcp://127.0.0.1:*"
                    cases[f"raw echo {label}"] = echo_case(clients, 8 // clients, (16, 8), steps, address, spin)
                cases[f"Remote {label}"] = (
                    lambda clients=clients, transport=transport, spin=spin: remote(
                        [bench_envs.NullEnv] * 8, transport, num_clients=clients, spin=spin
                    ),
                    measure,
                )
    null = bench_envs.NullEnv()
    for label, make in cpp_rows("null", (null.observation_space, null.action_space), 8).items():
        cases[label] = (make, measure)
    try:
        case.medians = interleaved_medians(cases, repeats, runs=case.runs)
    finally:
        scratch.cleanup()
    case.baseline = next(iter(case.medians))
    return case


def while_training(steps: int, repeats: int) -> Case:
    """CartPole, 8 envs, stepped while a trainer thread keeps a core busy in the learner's process:
    Sync, Async, and RemoteVectorEnv with 1 local client over the same-host data plane (shm, uds) and over
    ZeroMQ (ipc), each with its default ``spin`` and with ``spin=0``, and over the data plane with 2 clients.
    A wake-up scheme that wins on an idle machine and collapses next to training shows here."""
    case = Case(
        "training", "CartPole-v1, 8 envs, while a trainer thread keeps a core busy", "env-steps/s", "AsyncVectorEnv"
    )
    plain = lock_step_rate(steps, max(20, steps // 10))

    def measure(envs: gym.vector.VectorEnv) -> float:
        with Trainer():
            return plain(envs)

    makers = vector_envs(lambda: gym.make("CartPole-v1"), 8)
    cases = {label: (makers[label], measure) for label in ("SyncVectorEnv", "AsyncVectorEnv")}
    env_fns = [lambda: gym.make("CartPole-v1")] * 8
    for transport in [transport for transport in transports() if transport != "tcp"]:
        for spin, suffix in ((None, ""), (0.0, ", spin=0")):
            cases[f"Remote {transport}, 1 client{suffix}"] = (
                lambda transport=transport, spin=spin: remote(env_fns, transport, num_clients=1, spin=spin),
                measure,
            )
    for plane in DATA_PLANES:
        if plane in transports():
            cases[f"Remote {plane}, 2 clients"] = (lambda plane=plane: remote(env_fns, plane, num_clients=2), measure)
    case.medians = interleaved_medians(cases, repeats, runs=case.runs)
    return case


def scaling(steps: int, repeats: int, sizes: list[int]) -> Case:
    case = Case("scaling", f"Scaling: CartPole-v1, {CORES} clients, num_envs from 1 to {sizes[-1]}", "env-steps/s", "")
    for num_envs in sizes:
        clients = min(CORES, num_envs)
        env_fns = [lambda: gym.make("CartPole-v1")] * num_envs
        measure = lock_step_rate(max(50, steps // num_envs), 20)
        makers = {
            f"SyncVectorEnv, {num_envs} envs": (lambda env_fns=env_fns: gym.vector.SyncVectorEnv(env_fns), measure),
            f"AsyncVectorEnv, {num_envs} envs": (
                lambda env_fns=env_fns: gym.vector.AsyncVectorEnv(env_fns, shared_memory=True),
                measure,
            ),
        }
        for transport in [transport for transport in transports() if transport != "tcp"]:
            makers[f"Remote {transport}, {num_envs} envs"] = (
                lambda env_fns=env_fns, clients=clients, transport=transport: remote(
                    env_fns, transport, num_clients=clients
                ),
                measure,
            )
        case.medians.update(interleaved_medians(makers, repeats, runs=case.runs))
    case.baseline = next(iter(case.medians))
    return case


def partial(seconds: float, repeats: int) -> Case:
    """Partial batches against lock-step: 8 envs of different speeds, one client each (where partial batches
    are for); and CartPole over 2 clients, 8 envs in batches of 4 and 16 in batches of 8 (where they cost)."""
    case = Case("partial", "Partial batches: 8 envs, half take 10 ms a step, the others 1 ms", "env-steps/s", "")
    env_fns = [lambda delay=0.001 * (10 if slot % 2 else 1): partial_case.Sleepy(delay) for slot in range(8)]
    lock_step = lambda envs: partial_case.lock_step(envs, seconds)  # noqa: E731
    partial_batches = lambda envs: partial_case.partial_batches(envs, seconds)  # noqa: E731
    cases = {
        "lock-step step()": (lambda: RemoteVectorEnv(env_fns, num_clients=8), lock_step),
        "send/recv, batch_size=4": (lambda: RemoteVectorEnv(env_fns, num_clients=8, batch_size=4), partial_batches),
    }
    plane = transports()[0]  # the default plane of local clients
    for num_envs in (8, 16):
        cartpoles = [lambda: gym.make("CartPole-v1")] * num_envs
        label = f"CartPole, {num_envs} envs, 2 clients ({plane})"
        cases[f"{label}: lock-step step()"] = (lambda fns=cartpoles: remote(fns, plane, num_clients=2), lock_step)
        cases[f"{label}: send/recv, batch_size={num_envs // 2}"] = (
            lambda fns=cartpoles: remote(fns, plane, num_clients=2, batch_size=len(fns) // 2),
            partial_batches,
        )
    case.medians = interleaved_medians(cases, repeats, runs=case.runs)
    case.baseline = "lock-step step()"
    return case


def scale_case(seconds: float, repeats: int, sizes: list[int]) -> Case:
    """One learner and N zero-cost C++ clients over ZeroMQ tcp, next to a bare ROUTER with C echo clients
    (``scale.py``): client messages per second; in ``details``, the learner's and the clients' CPU per message,
    and join time."""
    case = Case("scale", "One learner, N zero-cost C++ clients of 1 env each, ZeroMQ tcp", "client messages/s", "")
    cpu: dict[str, list[float]] = {}
    clients_cpu: dict[str, list[float]] = {}
    join: dict[str, list[float]] = {}
    for clients in sizes:
        kinds = {
            f"floor (bare ROUTER), {clients} clients": (scale_bench.floor, clients, seconds),
            f"Remote lock-step, {clients} clients": (scale_bench.remote, clients, seconds, False),
            f"Remote partial (batch N/2), {clients} clients": (scale_bench.remote, clients, seconds, True),
        }
        for _ in range(repeats):  # the rows take turns
            for name, (measure, *arguments) in kinds.items():
                row = measure(*arguments)
                case.runs.setdefault(name, []).append(row.rate)
                cpu.setdefault(name, []).append(row.cpu_us)
                clients_cpu.setdefault(name, []).append(row.clients_cpu_us)
                join.setdefault(name, []).append(row.join)
    case.medians = {name: float(np.median(rates)) for name, rates in case.runs.items()}
    case.details = {
        "learner CPU µs per message": {name: float(np.median(values)) for name, values in cpu.items()},
        "clients' CPU µs per message": {name: float(np.median(values)) for name, values in clients_cpu.items()},
        "join seconds (slowest run)": {name: max(values) for name, values in join.items()},
    }
    case.baseline = next(iter(case.medians))
    return case


def watched(steps: int, repeats: int) -> Case:
    """CartPole, 8 envs, one client: stepping while nobody watches, while ``gym-remote status`` asks every second,
    while Prometheus scrapes every second (benchmarks/watched.py)."""
    case = Case(
        "watched", "CartPole-v1, 8 envs, a fleet of one client, watched from outside", "env-steps/s", "SyncVectorEnv"
    )
    measure = lock_step_rate(steps, max(20, steps // 10))
    cases = {label: (make, measure) for label, make in watched_makers().items()}
    case.medians = interleaved_medians(cases, repeats, runs=case.runs)
    return case


def targets(cases: dict[str, Case]) -> list[dict[str, object]]:
    """The issue's targets, as ratios measured in this run."""
    found = []

    def best(case: Case, *prefixes: str) -> tuple[str, float]:
        label = max((label for label in case.medians if label.startswith(prefixes)), key=case.medians.get)
        return label, case.medians[label]

    def add(name: str, value: float, target: float, detail: str, at_most: bool = False) -> None:
        met = value <= target if at_most else value >= target
        found.append({"target": name, "value": round(value, 3), "goal": target, "met": met, "detail": detail})

    for key, against, goal, text in (
        ("cartpole", "SyncVectorEnv", 1.0, "CartPole, 8 envs: best local Remote layout / SyncVectorEnv"),
        ("frames", "AsyncVectorEnv", 10.0, "Atari-sized frames, 8 envs: best Remote layout / AsyncVectorEnv"),
    ):
        if key in cases:
            medians = cases[key].medians
            label, value = best(cases[key], "Remote")
            detail = label
            if ECHO in medians:  # over ZeroMQ a step costs at least the env's own step plus the message round trip
                bound = 1 / (1 / medians[ECHO] + 1 / medians["SyncVectorEnv"])
                detail += f"; ZeroMQ bound without any cost of RemoteVectorEnv's own: {bound / medians[against]:.2f}"
            add(text, value / medians[against], goal, detail)
    for key, text in (("cartpole", "CartPole, 8 envs"), ("frames", "Atari-sized frames, 8 envs")):
        medians = cases[key].medians if key in cases else {}
        if any(label.startswith("PufferLib") for label in medians):
            remote, remote_rate = best(cases[key], "Remote")
            puffer, puffer_rate = best(cases[key], "PufferLib")
            detail = f"{remote}; {puffer}"
            add(f"{text}: best Remote layout / PufferLib's best row", remote_rate / puffer_rate, 1.0, detail)
        for plane in DATA_PLANES:  # informative: the data plane's gain
            if any(label.startswith(f"Remote {plane}") for label in medians):
                plane_label, plane_rate = best(cases[key], f"Remote {plane}")
                zmq_label, zmq_rate = best(cases[key], "Remote ipc", "Remote tcp")
                add(
                    f"{text}: best Remote {plane} layout / best ZeroMQ layout",
                    plane_rate / zmq_rate,
                    1.0,
                    f"{plane_label}; {zmq_label}",
                )
    if "busy" in cases:
        busy = cases["busy"].medians
        workers = pipe_workers_label(min(CORES, 8))
        layout = f"Remote {transports()[0]}, {min(CORES, 8)} clients (1/core)"  # the default plane's layout
        add(f"1 ms env, 8 envs: {layout} / SyncVectorEnv", busy[layout] / busy["SyncVectorEnv"], 1.6, layout)
        add(
            f"1 ms env, {min(CORES, 8)} clients: {layout} / plain workers over pipes",
            busy[layout] / busy[workers],
            0.95,
            workers,
        )
    if "floor" in cases:
        floor = cases["floor"].medians
        zeromq_rows = [label for label in floor if label.startswith(("Remote ipc", "Remote tcp"))]
        for label in zeromq_rows:
            echo = floor["raw echo " + label.removeprefix("Remote ")]
            add(f"transport floor, {label}: step time / raw echo's", echo / floor[label], 1.5, label, at_most=True)
        if {"Remote uds, 1 client", "raw uds, 1 client"} <= set(floor):
            add(
                "zero-cost env, 1 client: Remote uds round / raw uds round",
                floor["raw uds, 1 client"] / floor["Remote uds, 1 client"],
                1.3,
                "Remote uds, 1 client (default spin); raw uds blocks in the kernel",
                at_most=True,
            )
    if "training" in cases:
        training = cases["training"].medians
        for label in [label for label in training if label.startswith(("Remote shm", "Remote uds"))]:
            zmq_label = "Remote ipc, " + label.split(", ", 1)[1]
            if zmq_label in training:
                add(f"while training: {label} / {zmq_label}", training[label] / training[zmq_label], 1.0, label)
    if "partial" in cases:
        medians = cases["partial"].medians
        add("partial batches, batch_size=4 / lock-step", cases["partial"].ratios()["send/recv, batch_size=4"], 1.5, "")
        for label in [label for label in medians if label.startswith("CartPole") and "send/recv" in label]:
            lock_step = label.split(": ")[0] + ": lock-step step()"
            add(f"partial batches, {label} / lock-step", medians[label] / medians[lock_step], 1.0, lock_step)
    if "watched" in cases:
        medians = cases["watched"].medians
        alone = next(label for label, watch in WATCHERS.items() if watch is None)
        for label in [label for label, watch in WATCHERS.items() if watch is not None]:
            add(f"{label} / nobody watching", medians[label] / medians[alone], 0.97, alone)
    if "scale" in cases:
        scaled = cases["scale"]
        cpu, join = scaled.details["learner CPU µs per message"], scaled.details["join seconds (slowest run)"]
        for label in [label for label in scaled.medians if label.startswith("Remote")]:
            clients = label.rsplit(", ", 1)[1]
            floor = f"floor (bare ROUTER), {clients}"
            if clients not in ("256 clients", "1024 clients"):
                continue
            add(f"{label}: messages/s / the floor's", scaled.medians[label] / scaled.medians[floor], 0.9, floor)
            add(f"{label}: learner CPU per message / the floor's", cpu[label] / cpu[floor], 1.3, floor, at_most=True)
            if clients == "1024 clients":
                add(f"{label}: seconds for all to join", join[label], 5.0, "slowest run", at_most=True)
    return found


def machine() -> dict[str, object]:
    return {
        "cpus": CORES,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
    }


def print_case(case: Case) -> None:
    print(f"\n{case.title} ({case.unit}, median of {len(next(iter(case.runs.values())))} runs)")
    width = max(len(label) for label in case.medians) + 2
    ratios = case.ratios()
    print(f"{'':{width}s} {case.unit:>12s} {'x ' + case.baseline:>24s}")
    for label, value in case.medians.items():
        print(f"{label:{width}s} {value:12,.0f} {ratios[label]:24.2f}")
    for what, values in case.details.items():
        print(f"{what}:")
        for label, value in values.items():
            print(f"  {label:{width}s} {value:10.1f}")


def plot(cases: dict[str, Case], path: Path) -> bool:
    """A bar chart per case (a line chart for scaling); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(len(cases), 1, figsize=(10, 3.2 * len(cases)), squeeze=False)
    for axis, case in zip(axes[:, 0], cases.values(), strict=True):
        if case.name == "scaling":
            for kind in ("SyncVectorEnv", "AsyncVectorEnv", "Remote shm", "Remote uds", "Remote ipc"):
                points = [
                    (int(label.rsplit(", ", 1)[1].split()[0]), value)
                    for label, value in case.medians.items()
                    if label.startswith(kind + ",")
                ]
                if not points:  # no data plane on this platform
                    continue
                axis.plot(*zip(*points, strict=True), marker="o", label=kind)
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.set_xlabel("num_envs")
            axis.set_ylabel(case.unit)
            axis.legend(fontsize=8)
        else:
            labels = list(case.medians)
            colors = ["tab:blue" if label.startswith(("Remote", "send/recv")) else "tab:gray" for label in labels]
            bars = axis.barh(labels, [case.medians[label] for label in labels], color=colors)
            ratios = case.ratios()
            axis.bar_label(bars, [f" {ratios[label]:.2f}x" for label in labels], fontsize=7)
            axis.invert_yaxis()
            axis.margins(x=0.12)
            axis.set_xlabel(f"{case.unit} (bar labels: x {case.baseline})")
            axis.tick_params(axis="y", labelsize=8)
        axis.set_title(case.title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


ALL_CASES = ("cartpole", "busy", "frames", "floor", "training", "scaling", "partial", "scale", "watched")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="every case, briefly: checks that the suite works")
    parser.add_argument("--repeats", type=int, default=None, help="runs per vector env (default 3, 1 with --quick)")
    parser.add_argument("--cases", default=",".join(ALL_CASES), help=f"comma-separated, of {', '.join(ALL_CASES)}")
    parser.add_argument("--output", type=Path, default=RESULTS, help="folder for the JSON and the plot")
    parser.add_argument("--replot", type=Path, metavar="JSON", help="only draw the plot of an earlier run's results")
    args = parser.parse_args()
    if args.replot is not None:
        report = json.loads(args.replot.read_text())
        cases = {
            entry["name"]: Case(**{key: entry[key] for key in ("name", "title", "unit", "baseline", "medians", "runs")})
            for entry in report["cases"]
        }
        path = args.replot.with_suffix(".png")
        print(
            f"plot: {path}" if plot(cases, path) else 'plot: needs matplotlib (pip install "gymnasium-remote[bench]")'
        )
        return
    if "uds" not in transports():
        print("The same-host data plane needs Linux: no Remote shm or uds rows.")
    elif "shm" not in transports():
        print("Shared-memory mailboxes need x86-64 Linux: no Remote shm rows.")
    chosen = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(ALL_CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(ALL_CASES)}")
    if "scale" in chosen and scale_bench.missing() is not None:
        print(f"No scale case: {scale_bench.missing()}")
        chosen.remove("scale")
    repeats = args.repeats or (1 if args.quick else 3)
    scale = 0.1 if args.quick else 1.0
    sizes = [1, 8, 64] if args.quick else [1, 2, 4, 8, 16, 32, 64]
    if not cpp_clients.available():
        print(f"No C++ client built in {cpp_clients.BUILD} (see benchmarks/cpp_clients.py): no C++ client rows.")
    if {"cartpole", "busy", "frames"} & set(chosen):
        for library in ("pufferlib", "envpool"):
            reason = peers.missing(library)
            if reason is not None:
                print(f"No {library} rows: {reason}")
    cartpole, busy, frames = "CartPole-v1, 8 envs", "An env whose step burns 1 ms of CPU, 8 envs", "Atari-sized frames"
    reference = gym.make("CartPole-v1")
    runners: dict[str, Callable[[], Case]] = {
        "cartpole": lambda: compare(
            "cartpole",
            cartpole,
            lambda: gym.make("CartPole-v1"),
            8,
            int(4000 * scale),
            repeats,
            (16, 8),
            references=cpp_rows("cartpole", (reference.observation_space, reference.action_space), 8),
            envpool_id="CartPole-v1",
        ),
        "busy": lambda: compare(
            "busy",
            busy,
            bench_envs.BusyEnv,
            8,
            int(400 * scale),
            repeats,
            references={
                pipe_workers_label(min(CORES, 8)): lambda: PipeWorkers([bench_envs.BusyEnv] * 8, min(CORES, 8))
            },
        ),
        "frames": lambda: compare(
            "frames",
            f"{frames} (84x84x4 uint8), 8 envs",
            bench_envs.FramesEnv,
            8,
            int(2000 * scale),
            repeats,
            (84 * 84 * 4, 8),
            # PufferLib hands out views of its buffers: so does RemoteVectorEnv, when asked (views of its batch)
            references={
                f"Remote {transports()[0]}, 1 client, copy=False": lambda: remote(
                    [bench_envs.FramesEnv] * 8, transports()[0], num_clients=1, copy=False
                )
            },
        ),
        "floor": lambda: transport_floor(int(4000 * scale), repeats),
        "training": lambda: while_training(int(4000 * scale), repeats),
        "scaling": lambda: scaling(int(8000 * scale), repeats, sizes),
        "partial": lambda: partial(1.0 if args.quick else 3.0, repeats),
        "scale": lambda: scale_case(1.0 if args.quick else 3.0, repeats, [16] if args.quick else [16, 256, 1024]),
        "watched": lambda: watched(int(40000 * scale), repeats),
    }
    cases: dict[str, Case] = {}
    for name in chosen:
        cases[name] = runners[name]()
        print_case(cases[name])
    found = targets(cases)
    print("\nTargets (ratios measured in this run)")
    for target in found:
        mark = "met" if target["met"] else "MISSED"
        print(f"  {mark:6s} {target['target']}: {target['value']:.2f} (goal {target['goal']}) {target['detail']}")
    args.output.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    report = {
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": {"quick": args.quick, "repeats": repeats, "cases": chosen},
        "cases": [{**asdict(case), "ratios": case.ratios()} for case in cases.values()],
        "targets": found,
    }
    json_path = args.output / f"suite-{stamp}.json"
    json_path.write_text(json.dumps(report, indent=2))
    print(f"\nresults: {json_path}")
    png_path = args.output / f"suite-{stamp}.png"
    if plot(cases, png_path):
        print(f"plot:    {png_path}")
    else:
        print('plot:    skipped (pip install "gymnasium-remote[bench]" for matplotlib)')


if __name__ == "__main__":
    main()
