"""One soak run: set up the learner and its clients, run the learner, then check what is left behind.

``python -m tests.soak --seconds 3600 --seed 123`` prints the seed first, a summary at the end, and
exits 0 if every check held, 1 otherwise (after the seed, the failure and the event log's last lines).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gym_remote import RemoteVectorEnv
from tests.envs.soak import ACTIONS, observation_space
from tests.helpers import mapped_shared_blocks
from tests.soak.checker import TOLERANCES, Checker
from tests.soak.events import EventLog, LibraryLog
from tests.soak.learner import Learner, SoakFailure
from tests.soak.schedule import KINDS, LIVENESS, NUM_ENVS, Parameters, fault_schedule, learner_rng, parameters
from tests.soak.supervisor import FaultInjector, Supervisor, plane_for
from tests.soak.watcher import StatusWatcher

RSS_GROWTH_BASE, RSS_GROWTH_PER_HOUR = 16 * 2**20, 16 * 2**20
"""Bytes the learner's process may grow between the first measurement after the warm-up and the end: 16 MiB,
and 16 MiB more per hour of run. Allocator noise and the checker's bounded records stay far below (10
minutes grew ~2 MiB); a leak of 200 bytes per call (some 300 calls a second) passes it within 10 minutes."""
FAILURE_LOG_LINES = 300


@dataclass
class Summary:
    seed: int
    seconds: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    interrupts: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    loss_reports: int = 0
    episodes_ended: int = 0
    call_results: int = 0
    worst: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind -> (latency, its bound)
    rss_growth: int | None = None
    rss: tuple[int, int] | None = None
    rss_bound: float = 0.0
    clients: dict[str, int] = field(default_factory=dict)
    status_reports: int = 0
    slowest_status: float = 0.0

    def lines(self) -> list[str]:
        faults = {**self.faults, "interrupt": sum(self.interrupts.values())}
        out = [
            f"soak seed={self.seed}: {self.seconds:.0f} s",
            "faults injected: " + ", ".join(f"{k}={v}" for k, v in sorted(faults.items())),
            "calls: " + ", ".join(f"{k}={v}" for k, v in sorted(self.calls.items())),
            "interrupted calls: " + (", ".join(f"{k}={v}" for k, v in sorted(self.interrupts.items())) or "none"),
            f"rows checked: {self.rows} (episodes ended: {self.episodes_ended}), call results checked: "
            f"{self.call_results}, loss reports: {self.loss_reports}",
            "worst latency: "
            + ", ".join(f"{k} {lat:.3f} s (bound {bound:.2f})" for k, (lat, bound) in sorted(self.worst.items())),
            "clients started: " + ", ".join(f"{k}={v}" for k, v in sorted(self.clients.items())),
            f"status reports checked: {self.status_reports} (slowest answer {self.slowest_status:.2f} s)",
        ]
        if self.rss is not None and self.rss_growth is not None:
            out.append(
                f"learner RSS: {self.rss[0] / 2**20:.1f} MiB after warm-up, {self.rss[1] / 2**20:.1f} MiB at the end, "
                f"growth {self.rss_growth / 2**20:+.1f} MiB (bound {self.rss_bound / 2**20:.0f})"
            )
        return out


def data_plane_name(address: str) -> str:
    """The abstract socket name of the learner's data plane (PROTOCOL.md §13.1), as /proc/net/unix shows it."""
    return "@gym_remote/data/" + hashlib.sha256(address.encode()).hexdigest()[:40]


def child_pids() -> list[int]:
    me = str(os.getpid())
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                children.append(int(entry))
    return children


def shared_memory_files() -> set[str]:
    """What ``/dev/shm`` holds (the shared blocks are memfds, which never appear there: nothing must)."""
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def leftovers(address: str, ipc_path: Path | None, tmpdir: Path, shm_before: set[str]) -> list[str]:
    """What the closed learner and its exited clients must not have left: processes, socket names, files, shared
    memory (in ``/dev/shm``, or mapped into the learner)."""
    problems = []
    added = sorted(shared_memory_files() - shm_before)
    if added:
        problems.append(f"files left in /dev/shm: {added[:20]}")
    mapped = mapped_shared_blocks()
    if mapped:
        problems.append(f"shared blocks still mapped into the learner: {mapped[:5]}")
    children = child_pids()
    if children:
        problems.append(f"child processes still there: {children}")
    name = data_plane_name(address)
    with open("/proc/net/unix") as unix:
        if any(line.split()[-1] == name for line in unix.read().splitlines()[1:] if len(line.split()) >= 8):
            problems.append(f"the data plane's socket name {name} is still bound")
    if ipc_path is not None and ipc_path.exists():
        problems.append(f"the ipc endpoint's file {ipc_path} is still there")
    left = sorted(str(path.relative_to(tmpdir)) for path in tmpdir.rglob("*"))
    if left:
        problems.append(f"temporary files left in {tmpdir}: {left[:20]}")
    return problems


def run_soak(
    seed: int,
    seconds: float,
    keep: bool = False,
    out=sys.stdout,
    without: frozenset[str] = frozenset(),
    trace: bool = False,
    tolerate: frozenset[str] = frozenset(),
) -> Summary:
    """Run the soak of ``seed`` for ``seconds``; raise :class:`SoakFailure` (with the seed and the event log's
    last lines) if anything is wrong. ``without``: fault kinds (and ``"interrupt"``) left out, to narrow a
    failure down; ``trace``: every call's rows into the event log's file; ``tolerate``: known library faults
    the checker lets pass (``checker.TOLERANCES``), to look for others."""
    params = parameters(seed)
    print(f"soak seed={seed} seconds={seconds:g} ({params.describe()})", file=out, flush=True)
    replay = (
        f"python -m tests.soak --seed {seed} --seconds {seconds:g}"
        + (f" --without {','.join(sorted(without))}" if without else "")
        + (f" --tolerate {','.join(sorted(tolerate))}" if tolerate else "")
    )
    print(f"replay: {replay}", file=out, flush=True)
    started = time.monotonic()
    shm_before = shared_memory_files()
    workdir = Path(tempfile.mkdtemp(prefix="gym-remote-soak-"))
    tmpdir, sockdir = workdir / "tmp", workdir / "sock"
    tmpdir.mkdir()
    sockdir.mkdir()
    previous_tmp = tempfile.tempdir
    tempfile.tempdir = str(tmpdir)  # the learner's own temporary files go there too
    log = EventLog(started, path=workdir / "events.log", trace=trace)
    library = logging.getLogger("gym_remote")
    handler = LibraryLog(log)
    library.addHandler(handler)
    previous_level = library.level
    library.setLevel(logging.INFO)
    summary = Summary(seed)
    failure: str | None = None
    envs = injector = supervisor = learner = watcher = None
    ipc_path = sockdir / "learner" if params.bind == "ipc" else None
    try:
        envs, supervisor, injector, learner, watcher = _start(
            params, log, workdir, tmpdir, ipc_path, started, without, tolerate
        )
        learner.run(seconds, warmup=min(20.0, seconds / 4))
    except BaseException as error:  # every failure, also Ctrl-C, ends with the seed and the log
        failure = "".join(traceback.format_exception_only(type(error), error)).strip()
        log.add("failure", failure)
        log.add("failure", traceback.format_exc().replace("\n", "\n" + " " * 31))
    finally:
        problems = watcher.stop() if watcher is not None else []
        problems += _finish(envs, supervisor, injector, ipc_path, tmpdir, shm_before, log, settled=failure is None)
        library.removeHandler(handler)
        library.setLevel(previous_level)
        tempfile.tempdir = previous_tmp
    summary.seconds = time.monotonic() - started
    if injector is not None:
        summary.faults = dict(injector.counts)
        summary.clients = _client_counts(supervisor)
    if learner is not None:
        _fill(summary, learner)
    if watcher is not None:
        summary.status_reports, summary.slowest_status = watcher.reports, watcher.slowest
    summary.rss_bound = RSS_GROWTH_BASE + RSS_GROWTH_PER_HOUR * summary.seconds / 3600
    if summary.rss_growth is not None and summary.rss_growth > summary.rss_bound:
        problems.append(f"the learner's RSS grew by {summary.rss_growth / 2**20:.1f} MiB, more than its bound")
    if failure is None and problems:
        failure = "\n".join(problems)
    elif problems:
        failure += "\nand then:\n" + "\n".join(problems)
    for line in summary.lines():
        print(line, file=out, flush=True)
    if failure is not None:
        tail = log.tail(FAILURE_LOG_LINES)
        log.close()
        raise SoakFailure(
            f"SOAK FAILED (seed {seed}; replay: {replay}): {failure}\n"
            f"event log (last {FAILURE_LOG_LINES} lines; all of it and the clients' logs in {workdir}):\n{tail}"
        )
    log.close()
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return summary


def _start(
    params: Parameters,
    log: EventLog,
    workdir: Path,
    tmpdir: Path,
    ipc_path: Path | None,
    started: float,
    without: frozenset[str],
    tolerate: frozenset[str],
):
    bind = f"ipc://{ipc_path}" if ipc_path is not None else "tcp://127.0.0.1:*"
    envs = RemoteVectorEnv(
        num_envs=NUM_ENVS,
        bind=bind,
        observation_space=observation_space(params.payload),
        action_space=spaces.Discrete(ACTIONS),
        autoreset_mode=AutoresetMode(params.mode),
        batch_size=params.batch_size,
        timeout=30.0,
        connect_timeout=30.0,
        liveness_timeout=LIVENESS,
        data_plane=params.zmq_share < 1.0,  # (without it the learner's router is its only link)
        name="soak",
    )
    log.add("learner", f"listening on {envs.address}")
    supervisor = Supervisor(envs.address, workdir, tmpdir, params.payload, log)
    injector = FaultInjector(supervisor, fault_schedule(params.seed, without), params.zmq_share, log, started)
    planes = random.Random(f"planes-{params.seed}")
    for size in params.initial_sizes:
        injector.start_client(size, plane_for(planes.random(), params.zmq_share), "initial")
    injector.expect_joins()  # the first reset waits for them
    checker = Checker(NUM_ENVS, params.mode, params.payload, tolerate)
    learner = Learner(envs, checker, injector, log, learner_rng(params.seed), started, "interrupt" not in without)
    learner.take_notes()
    injector.start()
    watcher = StatusWatcher(envs.address, supervisor, log, params.seed)
    watcher.start()
    return envs, supervisor, injector, learner, watcher


def _finish(
    envs,
    supervisor,
    injector,
    ipc_path: Path | None,
    tmpdir: Path,
    shm_before: set[str],
    log: EventLog,
    settled: bool,
) -> list[str]:
    """Stop the faults, close the learner, let every client exit, and list what is left behind.

    ``settled``: the run ended well, so every client served or waited in line (``Learner.settle``) and must
    exit on the learner's CLOSE; after a failure, clients may have been frozen or reconnecting then, and
    those still running are only killed."""
    problems: list[str] = []
    if injector is not None and injector.is_alive():
        injector.stop()
    if envs is not None:
        address = envs.address
        try:
            envs.close()
        except Exception as error:
            problems.append(f"close() raised {error!r}")
        log.add("learner", "closed")
    if supervisor is not None:
        stragglers = supervisor.finish(timeout=15.0 if settled else 3.0)
        problems += stragglers if settled else []
        supervisor.kill_all()
    if envs is not None:
        problems += leftovers(address, ipc_path, tmpdir, shm_before)
    return problems


def _client_counts(supervisor: Supervisor) -> dict[str, int]:
    counts: dict[str, int] = {}
    for client in supervisor.clients:
        key = f"{client.size} env(s) {client.plane}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def _fill(summary: Summary, learner: Learner) -> None:
    counts = learner.checker.counts
    summary.calls = dict(learner.calls)
    summary.interrupts = dict(learner.interrupts)
    summary.rows, summary.loss_reports = counts.rows, counts.loss_reports
    summary.episodes_ended, summary.call_results = counts.episodes_ended, counts.call_results
    summary.worst = {kind: (worst.latency, worst.allowance) for kind, worst in learner.worst.items()}
    if len(learner.rss) >= 2:
        summary.rss = (learner.rss[0][1], learner.rss[-1][1])
        summary.rss_growth = learner.rss[-1][1] - learner.rss[0][1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run (default: %(default)s)")
    parser.add_argument("--seed", type=int, help="the seed (default: a random one, printed first)")
    parser.add_argument("--keep", action="store_true", help="keep the event log and client logs after a success")
    parser.add_argument(
        "--without",
        default="",
        help=f"comma-separated fault kinds to leave out, to narrow a failure down: {', '.join(KINDS)}, interrupt",
    )
    parser.add_argument("--trace", action="store_true", help="write every call's rows into the event log's file")
    parser.add_argument(
        "--tolerate",
        default="",
        help="comma-separated known library faults the checker lets pass, to look for others: "
        + "; ".join(f"{name}: {what}" for name, what in TOLERANCES.items()),
    )
    args = parser.parse_args(argv)
    without = frozenset(filter(None, args.without.split(",")))
    unknown = without - set(KINDS) - {"interrupt"}
    if unknown:
        parser.error(f"--without: unknown kinds {sorted(unknown)}")
    tolerate = frozenset(filter(None, args.tolerate.split(",")))
    if tolerate - set(TOLERANCES):
        parser.error(f"--tolerate: unknown {sorted(tolerate - set(TOLERANCES))}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    try:
        run_soak(seed, args.seconds, keep=args.keep, without=without, trace=args.trace, tolerate=tolerate)
    except SoakFailure as failure:
        print(failure, flush=True)
        return 1
    print("soak passed", flush=True)
    return 0
