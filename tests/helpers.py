"""Helpers shared by the test modules (the fixtures, ``reaper`` among them, are in ``conftest.py``).

* :class:`ThreadClient`: an :class:`~gym_remote.EnvClient` running in a thread of the test process;
* :class:`LoggedProcess`: a process started through the ``reaper`` fixture, its output in files, and
  the command lines on top of it (:func:`gym_remote`, :func:`cli_client`, :func:`probe_client_template`);
* processes by pid: :func:`pid_alive`, :func:`child_pids`, :func:`is_local_client`,
  :func:`kill_local_clients`, :class:`KillWhenMarked`; a Ray instance whose processes end with it:
  :func:`ray_instance`;
* waiting: :func:`wait_until`, :func:`step_until`; who serves what: :func:`rows_by_client`;
  the same steps on two vector envs: :func:`assert_same_steps`;
  an address: :func:`free_tcp_address`;
* raw protocol messages for peers that are not EnvClients: :func:`raw_header`, :func:`hello_value`,
  :func:`hello_frames`;
* the same-host data plane spoken by hand (PROTOCOL.md §13): :func:`data_channel_name`,
  :func:`listening`, :func:`greet_data_channel`, :func:`record`, :func:`read_record`, and
  :class:`ChannelMember`, a member written by hand.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import zmq
from gymnasium.utils.env_checker import data_equivalence

from gym_remote import EnvClient, RemoteVectorEnv, codec, protocol
from gym_remote.conformance.subject import free_tcp_endpoint as free_tcp_address  # noqa: F401 (for the tests)
from gym_remote.conformance.subject import wait_for
from gym_remote.protocol import FLAG_VALUE, Kind

GYM_REMOTE_SCRIPT = str(Path(sys.executable).with_name("gym-remote"))
"""The ``gym-remote`` console script of the interpreter running the tests."""


# -- comparing ------------------------------------------------------------------------------------


def assert_same_steps(
    remote: gym.vector.VectorEnv, sync: gym.vector.VectorEnv, actions: Iterable[Any], seed: int
) -> int:
    """Reset both with ``seed`` and step both with each batch of ``actions``: every return must be the
    same (``data_equivalence``, exact; an episode's wall-clock time ``infos["episode"]["t"]`` aside).

    Returns:
        How many episodes ended.
    """
    assert data_equivalence(remote.reset(seed=seed), sync.reset(seed=seed), exact=True)
    ended = 0
    for step, batch in enumerate(actions):
        got, expected = remote.step(batch), sync.step(batch)
        for infos in (got[4], expected[4]):
            infos.get("episode", {}).pop("t", None)
        assert data_equivalence(got, expected, exact=True), f"step {step}: {got} != {expected}"
        ended += int(sum(got[2] | got[3]))
    return ended


# -- waiting ---------------------------------------------------------------------------------------


def interrupt_at_call(number: int, interrupt: type[BaseException], within: str = "") -> Callable:
    """A trace function for ``sys.settrace`` that raises ``interrupt`` at the ``number``-th Python function entry
    (1-based), as a Ctrl-C that came there would; ``within``: count only functions whose file's path contains it
    (e.g. ``"/gym_remote/"``: not a weak reference's callback, where Python ignores what is raised). Destructors
    (``__del__``), where Python ignores it too, are never counted."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "call" and within in frame.f_code.co_filename and frame.f_code.co_name != "__del__":
            count += 1
            if count == number:
                raise interrupt
        return None

    return trace


def call_interrupted_at(
    number: int, interrupt: type[BaseException], call: Callable[[], Any], within: str = ""
) -> tuple[bool, Any]:
    """``call()`` with ``interrupt`` raised at its ``number``-th Python function entry (see
    :func:`interrupt_at_call`): ``(True, None)`` if it was cut short there, else ``(False, what it returned)``."""
    sys.settrace(interrupt_at_call(number, interrupt, within))
    try:
        return False, call()
    except interrupt:
        return True, None
    finally:
        sys.settrace(None)


def interrupting_send(
    send: Callable[..., Any],
    number: int,
    before: bool,
    interrupt: type[BaseException] = KeyboardInterrupt,
    first: Callable[[Any], bool] = lambda frame: True,
) -> Callable[..., Any]:
    """pyzmq's compiled ``send`` (``gym_remote.links.zeromq._queue``), raising ``interrupt`` once, in the main thread,
    at the ``number``-th frame counted from the first for which ``first(frame)`` holds, ``before`` the frame is
    queued or after: an interrupt out of the compiled send, on either side of the queueing."""
    counted = 0

    def interrupting(sock, frame, *rest):
        nonlocal counted
        if counted < number and threading.current_thread() is threading.main_thread() and (counted or first(frame)):
            counted += 1
            if counted == number and before:
                raise interrupt
            result = send(sock, frame, *rest)
            if counted == number:
                raise interrupt
            return result
        return send(sock, frame, *rest)

    return interrupting


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    if not wait_for(condition, timeout, interval):
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def step_until(
    envs: RemoteVectorEnv,
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    step: Callable[[], Any] | None = None,
    output: LoggedProcess | None = None,
) -> int:
    """Step ``envs`` (which lets the server handle joins) until ``condition()``; return how many steps it took.

    Each step is ``step()``; without one, ``envs.step`` with random actions from its action space. On a
    timeout the test fails, showing the ``output`` of a process if one is given.
    """
    if step is None:

        def step() -> Any:
            return envs.step(envs.action_space.sample())

    deadline = time.monotonic() + timeout
    steps = 0
    while not condition():
        if time.monotonic() > deadline:
            shown = "" if output is None else f"\n{output}"
            raise AssertionError(f"timed out after {timeout} s (and {steps} steps) waiting for {what}{shown}")
        step()
        steps += 1
    return steps


# -- garbage collection ----------------------------------------------------------------------------


@contextlib.contextmanager
def garbage_collection_paused():
    """No cyclic garbage collection inside: for tests that raise from a signal handler at random moments, so that
    the interrupt never lands in the finalizer of another test's garbage (Python reports it as unraisable)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def interrupts_at_random_moments(interrupt: type[BaseException] = KeyboardInterrupt):
    """For tests that raise ``interrupt`` from a signal handler at random moments: no cyclic garbage collection
    inside (see :func:`garbage_collection_paused`), and an ``interrupt`` that lands in a destructor reference
    counting runs (a zero-copy ZeroMQ frame's, say), which Python ignores and reports as unraisable, as it
    would a Ctrl-C there, is dropped; anything else unraisable is reported as before."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, interrupt):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        with garbage_collection_paused():
            yield
    finally:
        sys.unraisablehook = previous


# -- EnvClients in threads -------------------------------------------------------------------------


class ThreadClient:
    """An :class:`EnvClient` whose ``run()`` runs in a daemon thread of the test process; keeps what it raised."""

    def __init__(self, address: str, env_fns, **kwargs: Any) -> None:
        """Start ``EnvClient(address, env_fns, **kwargs)`` (``connect_timeout`` 30 s unless given)."""
        kwargs.setdefault("connect_timeout", 30)
        self._start(EnvClient(address, env_fns, **kwargs))

    @classmethod
    def around(cls, client: EnvClient) -> ThreadClient:
        """Start the ``run()`` of an EnvClient made elsewhere (a subclass, say)."""
        thread_client = cls.__new__(cls)
        thread_client._start(client)
        return thread_client

    def _start(self, client: EnvClient) -> None:
        self.client = client
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.client.run()
        except BaseException as error:  # noqa: BLE001 - kept for the test to inspect
            self.error = error

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"EnvClient.run() still running after {timeout} s"

    def finish(self, timeout: float) -> None:
        """Join; ``run()`` must have ended without an error."""
        self.join(timeout)
        assert self.error is None, repr(self.error)

    def stop(self) -> None:
        self.client.stop()
        self.thread.join(5)


# -- processes with their output in files ----------------------------------------------------------


class LoggedProcess:
    """A process started through the ``reaper`` fixture, its stdout and stderr in ``tmp_path/NAME.out|.err``."""

    def __init__(self, reaper, tmp_path: Path, name: str, command: list[str], **popen: Any) -> None:
        self.name = name
        self.stdout_path, self.stderr_path = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        with open(self.stdout_path, "w") as out, open(self.stderr_path, "w") as err:
            self.process = reaper.popen(command, stdout=out, stderr=err, **popen)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait(self, timeout: float) -> int:
        """The exit code; fail the test (with the output) if the process is still running after ``timeout`` s."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout} s\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"
            ) from None

    def __str__(self) -> str:
        return f"{self.name}: exit {self.process.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def gym_remote(reaper, tmp_path: Path, name: str, *args: str, via: str = "module", **popen: Any) -> LoggedProcess:
    """``python -m gym_remote ARGS`` (``via="script"``: the ``gym-remote`` console script); ``popen`` goes to
    ``subprocess.Popen`` (e.g. ``cwd``)."""
    prefix = [GYM_REMOTE_SCRIPT] if via == "script" else [sys.executable, "-m", "gym_remote"]
    return LoggedProcess(reaper, tmp_path, name, [*prefix, *args], **popen)


def cli_client(
    reaper, tmp_path: Path, name: str, address: str, *args: str, log_level: str = "WARNING"
) -> LoggedProcess:
    """``gym-remote --log-level LOG_LEVEL client ADDRESS --name NAME ARGS``."""
    return gym_remote(reaper, tmp_path, name, "--log-level", log_level, "client", address, "--name", name, *args)


def probe_client_template(command: list[str], *extra: str) -> list[str]:
    """The conformance runner's template for a probe client with gym_remote_probe_client's command line."""
    return [
        *command,
        "{endpoint}",
        "--num-envs",
        "{num_envs}",
        "--liveness-timeout",
        "{liveness_timeout}",
        *extra,
        "{security}",
    ]


# -- processes by pid ------------------------------------------------------------------------------


def finished(
    run: Callable[..., LoggedProcess], *args: str, timeout: float = 60, via: str = "module", **popen: Any
) -> LoggedProcess:
    """Run ``gym-remote ARGS`` through the ``run`` fixture and wait up to ``timeout`` seconds for it to end."""
    process = run(*args, via=via, **popen)
    process.wait(timeout)
    return process


def wait_for_listening(server: LoggedProcess) -> None:
    """Until ``gym-remote serve`` says where it listens; it must still be running then."""
    wait_until(lambda: "listening on" in server.stdout or server.process.poll() is not None, 30, "the server to listen")
    assert server.process.poll() is None, server


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...); None without such a process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` used so far, in seconds (10 ms steps)."""
    fields = _stat_fields(pid)
    assert fields is not None, f"no process {pid}"
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def child_pids(predicate: Callable[[int], bool] | None = None) -> set[int]:
    """Pids of this process's children (running or zombie), those for which ``predicate(pid)`` holds if given."""
    children = set()
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and fields[1] == me and (predicate is None or predicate(int(entry))):
            children.add(int(entry))
    return children


@contextlib.contextmanager
def ray_instance(**init_kwargs: Any) -> Iterator[None]:
    """A new Ray instance, ``ray.init(address="local", **init_kwargs)``, for the block (never one that another
    process runs on this machine), then ``ray.shutdown()``; the processes it started are ended by pid (SIGKILL for
    those still running 15 s later)."""
    import ray

    before = child_pids()
    ray.init(address="local", **init_kwargs)
    try:
        yield
    finally:
        ray.shutdown()
        started = child_pids() - before
        deadline = time.monotonic() + 15
        while any(pid_alive(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in started:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def is_local_client(pid: int) -> bool:
    """True if ``pid`` is a local client process (``python -m gym_remote.launch``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return b"gym_remote.launch" in file.read()
    except (FileNotFoundError, ProcessLookupError):
        return False


def kill_local_clients(pids: Iterable[int]) -> None:
    """SIGKILL (by pid) those of ``pids`` that are still running local clients: a failed test leaves nothing behind."""
    for pid in pids:
        if pid_alive(pid) and is_local_client(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class KillWhenMarked:
    """A daemon thread that SIGKILLs ``pid`` as soon as the file ``marker`` exists (waiting up to ``timeout`` s)."""

    def __init__(self, pid: int, marker: Path, timeout: float = 30) -> None:
        self.killed = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(pid, marker, timeout), daemon=True)
        self.thread.start()

    def _run(self, pid: int, marker: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if marker.exists():
            os.kill(pid, signal.SIGKILL)
            self.killed.set()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)


# -- servers ---------------------------------------------------------------------------------------


def rows_by_client(stats: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The ``stats()`` rows of served slots, grouped by client name."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in stats:
        if row["served"]:
            grouped.setdefault(row["client"], []).append(row)
    return grouped


# -- raw protocol messages (for peers that are not EnvClients) ---------------------------------------

_HEADER = struct.Struct("<2sBBHHQ")
_CARTPOLE = gym.make("CartPole-v1")
_CARTPOLE_OBSERVATION_SPACE, _CARTPOLE_ACTION_SPACE = _CARTPOLE.observation_space, _CARTPOLE.action_space


def raw_header(
    kind: int,
    *,
    seq: int = 0,
    count: int = 0,
    flags: int = 0,
    version: int = protocol.PROTOCOL_VERSION,
    magic: bytes = b"GR",
) -> bytes:
    """A 16-byte header with any field values (unknown kinds and versions included)."""
    return _HEADER.pack(magic, version, kind, flags, count, seq)


def hello_value(session: str, num_envs: int = 2, **overrides: Any) -> dict[str, Any]:
    """The HELLO an honest CartPole client hosting ``num_envs`` envs sends (see PROTOCOL.md §7)."""
    value = {
        "protocol": protocol.PROTOCOL_VERSION,
        "name": "hostile",
        "host": "test-host",
        "pid": os.getpid(),
        "session": session,
        "previous_session": None,
        "rejoins": 0,
        "wait": False,
        "num_envs": num_envs,
        "observation_spaces": [codec.space_to_value(_CARTPOLE_OBSERVATION_SPACE)],
        "observation_space_index": [0] * num_envs,
        "action_spaces": [codec.space_to_value(_CARTPOLE_ACTION_SPACE)],
        "action_space_index": [0] * num_envs,
        "metadata": {"render_fps": 50},
        "metadata_pickle": None,
        "render_mode": None,
        "allow_pickle": False,
        "launch": None,
    }
    value.update(overrides)
    return value


def hello_frames(
    session: str,
    num_envs: int = 2,
    *,
    version: int = protocol.PROTOCOL_VERSION,
    fields: dict[str, Any] | None = None,
    **overrides: Any,
) -> list[bytes]:
    """A HELLO message: header ``version`` and ``count=num_envs``, value from :func:`hello_value` with
    ``fields`` and ``overrides`` (where one of those is ``None``, the key is left out)."""
    changes = {**(fields or {}), **overrides}
    value = {**hello_value(session, num_envs), **changes}
    value = {key: item for key, item in value.items() if not (key in changes and item is None)}
    body, *buffers = protocol.value_frames(value)
    return [raw_header(Kind.HELLO, count=num_envs, flags=FLAG_VALUE, version=version), body, *map(bytes, buffers)]


def cartpole_server(stack: contextlib.ExitStack, num_envs: int, **kwargs: Any) -> RemoteVectorEnv:
    """A RemoteVectorEnv in server form for CartPole clients on loopback tcp, closed by ``stack``.

    Short waits (20 s for replies and clients, 2 s liveness) unless ``kwargs`` say otherwise.
    """
    options: dict[str, Any] = dict(
        num_envs=num_envs,
        bind="tcp://127.0.0.1:*",
        observation_space=_CARTPOLE_OBSERVATION_SPACE,
        action_space=_CARTPOLE_ACTION_SPACE,
        timeout=20.0,
        connect_timeout=20.0,
        liveness_timeout=2.0,
    )
    options.update(kwargs)
    envs = RemoteVectorEnv(**options)
    stack.callback(envs.close)
    return envs


# -- the same-host data plane, spoken by hand (PROTOCOL.md §13) ---------------------------------------

DATA_GREETING_MAGIC = b"GR-DATA2"


def data_channel_name(address: str) -> bytes:
    """The abstract Unix socket name of the data channel of the server at ``address`` (PROTOCOL.md §13.1)."""
    return b"\0gym_remote/data/" + hashlib.sha256(address.encode()).hexdigest()[:40].encode()


def listening(name: bytes) -> bool:
    """Whether an abstract Unix socket of that name listens on this machine (``/proc/net/unix``)."""
    wanted = "@" + name[1:].decode()
    with open("/proc/net/unix") as table:  # Num RefCount Protocol Flags Type St Inode Path
        rows = [line.split() for line in table.readlines()[1:]]
    return any(len(row) >= 8 and row[-1] == wanted and row[3] == "00010000" for row in rows)  # __SO_ACCEPTCON


def greet_data_channel(
    address: str, token: bytes | None = None, timeout: float = 5.0, block_fd: int | None = None
) -> tuple[socket.socket, bytes]:
    """Connect to the data channel of the server at ``address`` and greet it (PROTOCOL.md §13.2), handing over
    ``block_fd`` as its shared block if given (§13.5).

    Returns the connected socket (blocking, with ``timeout``) and the token (random unless given).
    """
    token = secrets.token_bytes(16) if token is None else token
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(data_channel_name(address))
        if block_fd is None:
            sock.sendall(DATA_GREETING_MAGIC + token)
        else:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", block_fd))]
            sock.sendmsg([DATA_GREETING_MAGIC + token], rights)
    except BaseException:
        sock.close()
        raise
    return sock, token


def record(frames: Iterable[Any]) -> bytes:
    """One message as a data channel record: ``u32 count | count x u64 lengths | the frames`` (§13.3)."""
    blobs = [bytes(memoryview(frame).cast("B")) for frame in frames]
    return struct.pack(f"<I{len(blobs)}Q", len(blobs), *map(len, blobs)) + b"".join(blobs)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, have = [], 0
    while have < size:
        chunk = sock.recv(size - have)
        if not chunk:
            raise EOFError("the data channel closed")
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)


def read_record(sock: socket.socket) -> list[bytes]:
    """The next record on a data channel, as its frames (waits as long as the socket's timeout allows).

    Raises:
        EOFError: the channel closed.
        TimeoutError: nothing (or not all of it) came within the socket's timeout.
    """
    (count,) = struct.unpack("<I", _read_exactly(sock, 4))
    lengths = struct.unpack(f"<{count}Q", _read_exactly(sock, 8 * count))
    return [_read_exactly(sock, length) for length in lengths]


class ChannelMember(threading.Thread):
    """A CartPole member written by hand, in a thread, from raw bytes only (``done`` is set once it stopped).

    It greets the server's data channel (unless ``token`` is given: then its HELLO names that token, which
    this process did not greet with; handing over ``block_fd`` as a shared block if given, whose mailboxes it
    never uses), and answers RESET and STEP with valid RESULTs on whichever plane the
    WELCOME chose, except that ``bad_step(seq)``, if given, answers the first STEP: with frames (sent as
    one message), or with ``bytes``, written as they are on the data channel, which it then closes.
    """

    def __init__(
        self,
        address: str,
        *,
        token: bytes | None = None,
        bad_step=None,
        name: str = "hostile",
        block_fd: int | None = None,
    ):
        super().__init__(daemon=True)
        self.address, self.bad_step, self.name = address, bad_step, name
        self.session = secrets.token_hex(16)
        self.data: socket.socket | None = None
        if token is None:
            self.data, token = greet_data_channel(address, block_fd=block_fd)
        self.token = token
        self.welcome: dict | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.ROUTING_ID, self.session.encode())
        dealer.connect(self.address)
        try:
            hello = hello_frames(self.session, 1, name=self.name, data_channel={"token": self.token.hex()})
            dealer.send_multipart(hello)
            while self.welcome is None and not self.done.is_set():
                if dealer.poll(100):
                    frames = dealer.recv_multipart()
                    if protocol.parse_header(frames[0]).kind == Kind.WELCOME:
                        self.welcome = protocol.read_value(frames[1:])
            over_channel = self.welcome is not None and self.welcome["data_channel"]
            while not self.done.is_set():
                frames = self._next(dealer, over_channel)
                if frames is None:
                    continue
                header = protocol.parse_header(frames[0])
                if header.kind == Kind.STEP and self.bad_step is not None:
                    reply, self.bad_step = self.bad_step(header.seq), None
                elif header.kind in (Kind.RESET, Kind.STEP):
                    reply = [raw_header(Kind.RESULT, seq=header.seq, count=1) + bytes(10), np.zeros(4, np.float32)]
                else:
                    continue
                if isinstance(reply, bytes):
                    self.data.sendall(reply)
                    self.data.close()
                    self.done.set()
                elif over_channel:
                    self.data.sendall(record(reply))
                else:
                    dealer.send_multipart(reply)
        except BaseException as error:  # noqa: BLE001 - kept for the test to inspect
            self.error = error
        finally:
            dealer.close(0)
            context.term()
            if self.data is not None:
                self.data.close()
            self.done.set()

    def _next(self, dealer: zmq.Socket, over_channel: bool) -> list[bytes] | None:
        if not over_channel:
            return dealer.recv_multipart() if dealer.poll(100) else None
        self.data.settimeout(0.1)
        try:
            ready = self.data.recv(1, socket.MSG_PEEK)
        except (TimeoutError, BlockingIOError):
            return None
        except ConnectionError:
            ready = b""
        if not ready:  # the server closed the channel
            self.done.set()
            return None
        self.data.settimeout(5)
        return read_record(self.data)

    def stop(self) -> None:
        self.done.set()
        self.join(5)


def mapped_shared_blocks() -> list[str]:
    """The data channels' shared blocks (memfds named ``gym_remote-data``) still mapped into this process."""
    with open("/proc/self/maps") as maps:
        return [line.strip() for line in maps if "gym_remote-data" in line]
