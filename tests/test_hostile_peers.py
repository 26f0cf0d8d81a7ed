"""Hostile peers on real sockets: bad bytes never crash the server or a client, and every other slot keeps stepping.

The server under test is a :class:`~gym_remote.RemoteVectorEnv` in server form on loopback tcp (or ipc),
its honest slots served by real :class:`~gym_remote.EnvClient` objects in threads (``ThreadClient``) whose
data must equal a ``SyncVectorEnv`` run with the same seeds and actions. The hostile peer is a
:class:`FakeClient`: a raw ZeroMQ DEALER in the test process that sends arbitrary frames, and can complete
a real handshake and then answer commands with crafted RESULT frames. The client side is checked against
a fake server: a raw ROUTER that welcomes an ``EnvClient`` and then sends it garbage.

Sections:

1. a hypothesis fuzz of a non-member peer's frames interleaved with steps;
2. specific messages from non-members and the reply each gets (ERROR, REFUSE with its code, EVICT);
3. a member whose replies are malformed (lost, EVICT, replaced), stale (dropped) or missing (timeout);
4. frames over ``max_message_bytes``;
5. raw bytes on the port (tcp and ipc) and peers that connect and say nothing;
6. the client side: garbage from the server.

The pure codec/protocol functions are fuzzed in ``test_codec.py`` and ``test_protocol.py``; here the
sockets, the server's message loop and the client's command loop are.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import re
import signal
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import pytest
import zmq
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from gym_remote import GymRemoteError, RemoteTimeoutError, RemoteVectorEnv, codec, protocol
from gym_remote.protocol import FLAG_DTYPES, FLAG_SUBSET, FLAG_VALUE, Kind, format_slots
from tests.envs import make_cartpole
from tests.helpers import ThreadClient, cartpole_server, hello_frames, hello_value, raw_header

CARTPOLE = gym.make("CartPole-v1")
OBS_SPACE, ACT_SPACE = CARTPOLE.observation_space, CARTPOLE.action_space
HEADER = struct.Struct("<2sBBHHQ")
KNOWN_KINDS = sorted(int(kind) for kind in Kind)
LOG = "gym_remote"

# The vector's settings for every server here (short enough that nothing waits long).
TIMEOUT = 20.0
CONNECT_TIMEOUT = 20.0
LIVENESS_TIMEOUT = 2.0


# -- helpers: bounded waits --------------------------------------------------------------------------


class Hang(AssertionError):
    """A block guarded by :func:`bounded` ran too long."""


@contextlib.contextmanager
def bounded(seconds: float, what: str) -> Iterator[None]:
    """Fail, instead of hanging, when the block runs longer than ``seconds`` (SIGALRM raises inside it).

    pytest-timeout's own alarm (if armed) is suspended meanwhile and re-armed with the time it had left.
    """

    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"{what} still running after {seconds:g} s")

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, alarm)
    previous_delay, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay:
            signal.setitimer(signal.ITIMER_REAL, max(0.01, previous_delay - (time.monotonic() - started)))


# -- helpers: messages -------------------------------------------------------------------------------


def result_frames(
    seq: int,
    obs: np.ndarray,
    *,
    rewards: Any = None,
    terminated: Any = None,
    truncated: Any = None,
    count: int | None = None,
    flags: int = 0,
    kind: int = Kind.RESULT,
    version: int = protocol.PROTOCOL_VERSION,
) -> list[bytes]:
    """A RESULT for ``len(obs)`` envs whose every part can be set (PROTOCOL.md §5.4)."""
    k = len(obs)
    rewards = np.ones(k) if rewards is None else rewards
    terminated = np.zeros(k, np.uint8) if terminated is None else terminated
    truncated = np.zeros(k, np.uint8) if truncated is None else truncated
    scalars = (
        np.asarray(rewards, "<f8").tobytes()
        + np.asarray(terminated, np.uint8).tobytes()
        + np.asarray(truncated, np.uint8).tobytes()
    )
    header = raw_header(kind, seq=seq, count=k if count is None else count, flags=flags, version=version)
    return [header + scalars, np.ascontiguousarray(obs, np.float32).tobytes()]


class Message(NamedTuple):
    """One multipart message as received; ``header`` is None if its first frame does not parse."""

    header: protocol.Header | None
    frames: list[bytes]

    @classmethod
    def parse(cls, frames: list[bytes]) -> Message:
        try:
            header = protocol.parse_header(frames[0])
        except GymRemoteError:
            header = None
        return cls(header, frames)

    @property
    def kind(self) -> int | None:
        return None if self.header is None else self.header.kind

    @property
    def value(self) -> Any:
        if self.header is None or not self.header.flags & FLAG_VALUE:
            return None
        return protocol.read_value(self.frames[1:])

    def describe(self) -> str:
        if self.header is None:
            return f"unparsable message {self.frames[:2]!r}"
        return f"{protocol.kind_name(self.header.kind)} seq {self.header.seq}: {self.value!r}"


def pickle_trap(marker: Path) -> bytes:
    """A pickle that creates ``marker`` when unpickled (it calls ``open(marker, "w")``)."""

    class Trap:
        def __reduce__(self) -> tuple:
            return (open, (str(marker), "w"))

    return pickle.dumps(Trap())


def check_trap_works(tmp_path: Path) -> None:
    """The trap really fires when unpickled (so the absence of its marker means it was not unpickled)."""
    control = tmp_path / "control-marker"
    pickle.loads(pickle_trap(control)).close()
    assert control.exists()


# -- helpers: the hostile peer ---------------------------------------------------------------------

CLOSE_SOCKET = object()
"""Returned by a bad-reply function: the member closes its socket instead of answering."""

SILENT = object()
"""Returned by a bad-reply function: the member does not answer (its connection stays alive)."""


class FakeClient:
    """A raw DEALER socket in the test process: sends any frames, keeps what the server sends back.

    It is used from the test's thread, or, after :meth:`serve_as_member`, only from its own thread,
    which completes a real handshake and answers RESET and STEP with crafted RESULTs. Every message
    received either way is appended to :attr:`inbox`.
    """

    def __init__(self, address: str, *, name: str = "hostile", reconnect: bool = True) -> None:
        self.name = name
        self.session = uuid.uuid4().hex
        self.context = zmq.Context()
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, self.session.encode())
        sock.setsockopt(zmq.LINGER, 0)
        if not reconnect:
            sock.setsockopt(zmq.RECONNECT_IVL, -1)
        sock.connect(address)
        self.socket = sock
        self.inbox: list[Message] = []
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._close_request = threading.Event()
        # member state (serve_as_member)
        self.slots: list[int] = []
        self.welcome: dict[str, Any] | None = None
        self.steps = 0
        self.actions: list[np.ndarray] = []
        self.sent_obs: np.ndarray | None = None

    # raw use
    def send(self, frames: list[Any]) -> None:
        self.socket.send_multipart(frames)

    def recv(self, timeout: float) -> Message | None:
        if not self.socket.poll(int(timeout * 1000)):
            return None
        message = Message.parse(self.socket.recv_multipart())
        self.inbox.append(message)
        return message

    def drain(self) -> list[Message]:
        """The messages that arrived so far (no waiting)."""
        messages = []
        while (message := self.recv(0)) is not None:
            messages.append(message)
        return messages

    def hello(self, num_envs: int = 2, **overrides: Any) -> None:
        self.send(hello_frames(self.session, num_envs, name=self.name, **overrides))

    def received(self, kind: int) -> list[Message]:
        return [message for message in list(self.inbox) if message.kind == kind]

    # member use
    def serve_as_member(
        self,
        bad_step: int | None = None,
        bad: Callable[[FakeClient, int, np.ndarray], Any] | None = None,
        num_envs: int = 2,
        every_step: bool = False,
        **hello_overrides: Any,
    ) -> None:
        """Send HELLO, then (in a thread) answer RESET and STEP with valid RESULTs, except STEP number
        ``bad_step``, answered by ``bad(self, seq, obs)``: a list of messages to send, CLOSE_SOCKET or SILENT.

        After ``bad_step`` it answers nothing any more; with ``every_step``, ``bad`` answers every STEP
        and the member goes on answering. The observations it sends are predictable:
        ``-0.5`` after a reset, ``step / 100`` after step ``step`` (:attr:`sent_obs` holds the last ones).
        """
        self.hello(num_envs, **hello_overrides)

        def answer(message: Message) -> Any:
            header = message.header
            if header is None:
                return None
            if header.kind == Kind.WELCOME:
                self.welcome = message.value
                self.slots = list(self.welcome["slots"])
            elif header.kind == Kind.RESET and (bad_step is None or self.steps < bad_step):
                self.sent_obs = np.full((num_envs, 4), -0.5, np.float32)
                self.send(result_frames(header.seq, self.sent_obs, rewards=np.zeros(num_envs)))
            elif header.kind == Kind.STEP and (bad_step is None or every_step or self.steps < bad_step):
                self.steps += 1
                self.actions.append(np.frombuffer(message.frames[1], dtype=np.int64).copy())
                obs = np.full((num_envs, 4), self.steps / 100, np.float32)
                if not every_step and self.steps != bad_step:
                    self.sent_obs = obs
                    self.send(result_frames(header.seq, obs))
                    return None
                outcome = bad(self, header.seq, obs)
                if outcome is CLOSE_SOCKET or outcome is SILENT:
                    return outcome
                for frames in outcome:
                    self.send(frames)
            return None

        def loop() -> None:
            try:
                while not self._stop.is_set():
                    if self._close_request.is_set():
                        self.socket.close(linger=0)
                        return
                    message = self.recv(0.02)
                    if message is not None and answer(message) is CLOSE_SOCKET:
                        self.socket.close(linger=0)
                        return
            except BaseException as error:  # noqa: BLE001 - kept for the test to inspect
                self.error = error

        self.thread = threading.Thread(target=loop, daemon=True, name=f"fake-{self.name}")
        self.thread.start()

    def close_socket_soon(self) -> None:
        """Ask the serving thread to close the socket (the connection drops)."""
        self._close_request.set()
        self.thread.join(5)
        assert not self.thread.is_alive()

    def wait_for(self, kind: int, timeout: float = 10.0, where: Callable[[Message], bool] | None = None) -> Message:
        """The first message of ``kind`` (for which ``where`` holds) received, by the serving thread or,
        if none serves, read here."""
        deadline = time.monotonic() + timeout

        def found() -> list[Message]:
            return [message for message in self.received(kind) if where is None or where(message)]

        while not found():
            assert time.monotonic() < deadline, (
                f"{self.name} got no {protocol.kind_name(kind)} within {timeout} s; "
                f"got {[message.describe() for message in self.inbox]}"
            )
            if self.thread is None:
                self.recv(0.02)
            else:
                time.sleep(0.02)
        return found()[0]

    def close(self) -> None:
        self._stop.set()
        if self.thread is not None:
            self.thread.join(5)
        if not self.socket.closed:
            self.socket.close(linger=0)
        self.context.term()


# -- helpers: the server and its honest clients ------------------------------------------------------


def honest(stack: contextlib.ExitStack, address: str, num_envs: int, name: str) -> ThreadClient:
    client = ThreadClient(address, [make_cartpole] * num_envs, name=name, liveness_timeout=LIVENESS_TIMEOUT)
    stack.callback(client.stop)
    return client


def fake(stack: contextlib.ExitStack, address: str, **kwargs: Any) -> FakeClient:
    client = FakeClient(address, **kwargs)
    stack.callback(client.close)
    return client


class Twin:
    """A ``SyncVectorEnv`` stepped like the honest slots ``rows`` of a RemoteVectorEnv reset with ``seed``."""

    def __init__(self, rows: list[int], seed: int) -> None:
        self.rows = list(rows)
        self.checked = list(rows)  # the rows still compared (see forget)
        self.sync = SyncVectorEnv([make_cartpole] * len(self.rows))
        self.reset_result = self.sync.reset(seed=[seed + row for row in self.rows])

    def check_reset(self, result: tuple) -> None:
        obs, infos = result
        np.testing.assert_array_equal(obs[self.rows], self.reset_result[0])
        assert infos == {}

    def forget(self, rows: list[int]) -> None:
        """Stop comparing ``rows`` (their honest client left); the twin still steps their envs."""
        self.checked = [row for row in self.checked if row not in rows]

    def step(self, actions: np.ndarray) -> tuple:
        return self.sync.step(actions[self.rows])

    def check_step(self, result: tuple, actions: np.ndarray) -> None:
        """The honest rows of ``result`` equal the twin's step; other rows may only carry ``client_lost``."""
        expected = self.step(actions)
        check_batch(result)
        rows, positions = self.checked, [self.rows.index(row) for row in self.checked]
        obs, rewards, terminations, truncations, infos = result
        for got, want, what in zip(
            (obs, rewards, terminations, truncations), expected[:4], ("obs", "rewards", "terminations", "truncations")
        ):
            np.testing.assert_array_equal(got[rows], want[positions], err_msg=f"honest rows {rows}: {what}")
        assert expected[4] == {}
        for key, value in infos.items():
            assert key in ("client_lost", "_client_lost"), f"unexpected info key {key!r}: {infos}"
            assert not value[rows].any(), f"honest rows {rows} report {key}: {infos}"

    def close(self) -> None:
        self.sync.close()


def check_batch(result: tuple, num_envs: int = 4) -> None:
    """A well-formed step batch."""
    obs, rewards, terminations, truncations, infos = result
    assert obs.shape == (num_envs, 4) and obs.dtype == np.float32
    assert rewards.shape == (num_envs,) and rewards.dtype == np.float64
    assert terminations.shape == truncations.shape == (num_envs,)
    assert terminations.dtype == truncations.dtype == np.bool_
    assert isinstance(infos, dict)


def lost_flags(infos: dict, num_envs: int = 4) -> list[bool]:
    return infos["client_lost"].tolist() if "client_lost" in infos else [False] * num_envs


def step_until(envs: RemoteVectorEnv, twin: Twin | None, rng: np.random.Generator, condition, what: str, limit=200):
    """Step (checking the honest rows against ``twin``) until ``condition()``; at most ``limit`` steps."""
    for _ in range(limit):
        if condition():
            return
        actions = rng.integers(0, 2, size=envs.num_envs)
        with bounded(TIMEOUT + 10, "step"):
            result = envs.step(actions)
        if twin is not None:
            twin.check_step(result, actions)
        time.sleep(0.005)
    assert condition(), f"{what} did not happen within {limit} steps"


def run_steps(envs: RemoteVectorEnv, twin: Twin, rng: np.random.Generator, count: int) -> None:
    """``count`` steps, each checked against ``twin``."""
    for _ in range(count):
        actions = rng.integers(0, 2, size=envs.num_envs)
        with bounded(TIMEOUT + 10, "step"):
            result = envs.step(actions)
        twin.check_step(result, actions)


def served_by_honest_clients(stack: contextlib.ExitStack, seed: int = 0, **kwargs: Any):
    """A 4-slot server, two honest 2-env clients in all slots, reset with ``seed``; its twin; an rng."""
    envs = cartpole_server(stack, 4, **kwargs)
    clients = [honest(stack, envs.address, 2, f"honest-{index}") for index in range(2)]
    with bounded(CONNECT_TIMEOUT + 10, "reset"):
        result = envs.reset(seed=seed)
    twin = Twin(list(range(4)), seed)
    stack.callback(twin.close)
    twin.check_reset(result)
    return envs, clients, twin, np.random.default_rng(seed)


# =====================================================================================================
# 1. fuzz: a non-member peer sends arbitrary frames while the learner steps
# =====================================================================================================

_SESSION = "f" * 32
_OBS2 = np.full((2, 4), 0.25, np.float32)
TEMPLATES: dict[str, list[bytes]] = {
    "hello": hello_frames(_SESSION, 2),
    "hello-wait": hello_frames(_SESSION, 1, wait=True),
    "hello-v3": hello_frames(_SESSION, 2, version=3),
    "result": result_frames(3, _OBS2),
    "result-value": [
        result_frames(3, _OBS2, flags=FLAG_VALUE)[0],
        _OBS2.tobytes(),
        *map(bytes, protocol.value_frames({"infos": [{"x": 1}, {}]})),
    ],
    "step": [protocol.pack_step_header(3, 2), np.array([1, 0], np.int64).tobytes()],
    "error": [bytes(frame) for frame in protocol.message(Kind.ERROR, {"type": "X", "message": "m", "index": None})],
    "bye": [protocol.pack_header(Kind.BYE)],
    "call-result": [bytes(frame) for frame in protocol.message(Kind.CALL_RESULT, {"results": [1, 2]}, seq=3)],
}
HELLO_KEYS = sorted(hello_value(_SESSION))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)

headers = st.builds(
    lambda magic, version, kind, flags, count, seq, tail: HEADER.pack(magic, version, kind, flags, count, seq) + tail,
    st.just(b"GR") | st.binary(min_size=2, max_size=2),
    st.just(1) | st.integers(0, 255),
    st.sampled_from(KNOWN_KINDS) | st.integers(0, 255),
    st.sampled_from([0, FLAG_VALUE, FLAG_DTYPES, FLAG_VALUE | FLAG_DTYPES]) | st.integers(0, 0xFFFF),
    st.sampled_from([0, 1, 2]) | st.integers(0, 0xFFFF),
    st.integers(0, 5) | st.integers(0, 2**64 - 1),
    st.just(b"") | st.binary(max_size=40),
)

mutations = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 99), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 99), st.integers(0, 10**6)),
    st.tuples(st.just("extra"), st.integers(0, 99), st.binary(max_size=32)),
    st.tuples(st.just("drop"), st.integers(0, 99)),
    st.tuples(st.just("swap"), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("header"), st.integers(0, 15), st.integers(0, 255)),
)


def mutate(frames: list[bytes], operations: list[tuple]) -> list[bytes]:
    """Apply byte-level mutations (flipped bytes, truncated/extra/dropped/swapped frames) to a message."""
    frames = [bytearray(frame) for frame in frames]
    for operation in operations:
        name, *args = operation
        index = args[0] % len(frames)
        if name == "flip" and frames[index]:
            frames[index][args[1] % len(frames[index])] ^= args[2]
        elif name == "truncate":
            del frames[index][args[1] % (len(frames[index]) + 1) :]
        elif name == "extra":
            frames.insert(index + 1, bytearray(args[1]))
        elif name == "drop" and len(frames) > 1:
            del frames[index]
        elif name == "swap":
            other = args[1] % len(frames)
            frames[index], frames[other] = frames[other], frames[index]
        elif name == "header" and len(frames[0]) > args[0]:
            frames[0][args[0]] = args[1]
    return [bytes(frame) for frame in frames]


@st.composite
def hostile_messages(draw) -> list[bytes]:
    """One multipart message a hostile peer might send."""
    form = draw(st.sampled_from(["random", "header", "mutated", "hello-field", "hello-field"]))
    if form == "random":
        return draw(st.lists(st.binary(max_size=64), min_size=1, max_size=4))
    if form == "header":
        return [draw(headers), *draw(st.lists(st.binary(max_size=64), max_size=4))]
    if form == "mutated":
        template = TEMPLATES[draw(st.sampled_from(sorted(TEMPLATES)))]
        return mutate(template, draw(st.lists(mutations, max_size=3)))
    # a HELLO whose fields hold unexpected values (or are missing)
    hello = hello_value(_SESSION, 2, wait=draw(st.booleans()))
    for key in draw(st.lists(st.sampled_from([*HELLO_KEYS, "extra"]), min_size=1, max_size=3)):
        if draw(st.booleans()):
            hello[key] = draw(json_values)
        else:
            hello.pop(key, None)
    count = draw(st.sampled_from([0, 1, 2, 65535]))
    return [bytes(frame) for frame in protocol.message(Kind.HELLO, hello, count=count)]


STEP = "step"
REPLY_KINDS = {Kind.ERROR, Kind.REFUSE, Kind.EVICT, Kind.STATUS_REPORT}  # (any peer may ask for the status, §9.1)


def test_fuzz_hostile_non_member_never_disturbs_the_honest_slots(stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    envs, clients, twin, rng = served_by_honest_clients(stack, seed=123)
    sync = twin.sync  # all four slots are honest: the whole batch must equal SyncVectorEnv's
    hostile = fake(stack, envs.address)
    replies: Counter = Counter()
    failures: list[BaseException] = []

    def step_both() -> None:
        actions = rng.integers(0, 2, size=4)
        started = time.monotonic()
        with bounded(TIMEOUT + 10, "step"):
            result = envs.step(actions)
        assert time.monotonic() - started < 10, "a step took long while a hostile peer sent garbage"
        expected = sync.step(actions)
        assert data_equivalence(result, expected, exact=True), f"{result} != {expected}"
        for message in hostile.drain():
            assert message.kind in REPLY_KINDS, f"the hostile peer got {message.describe()}"
            message.value  # every reply the server sends is well-formed  # noqa: B018
            replies[Kind(message.kind).name] += 1

    @settings(
        max_examples=100,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: the shared server's state moves on
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(st.one_of(hostile_messages(), st.just(STEP)), min_size=1, max_size=6))
    @example([[b"\x00random bytes"], STEP])  # -> ERROR
    @example([TEMPLATES["hello"], STEP])  # -> REFUSE (full)
    @example([TEMPLATES["step"], STEP])  # -> EVICT (not a member)
    def run(operations: list) -> None:
        if failures:  # the server and its twin are no longer comparable
            raise failures[0]
        try:
            for operation in [*operations, STEP]:
                if operation == STEP:
                    step_both()
                else:
                    hostile.send(operation)
        except BaseException as error:
            failures.append(error)
            raise

    started = time.monotonic()
    run()
    # let the server handle whatever is still queued, then check everyone is still in place
    quiet = 0
    while quiet < 3:
        before = sum(replies.values())
        step_both()
        quiet = quiet + 1 if sum(replies.values()) == before else 0
    assert time.monotonic() - started < 60
    assert {"ERROR", "REFUSE", "EVICT"} <= set(replies), replies
    assert envs.num_clients == 2
    for client in clients:
        assert [row["slot"] for row in envs.stats() if row["client"] == client.client.name] == client.client.slots
    assert not any(client.done for client in clients)
    assert "dropping a malformed message" in caplog.text


# =====================================================================================================
# 2. specific messages from non-members, and the reply each gets
# =====================================================================================================


def _hello_with(**overrides: Any) -> Callable[[str], list[bytes]]:
    return lambda session: hello_frames(session, 2, fields=overrides)


MOUNTAINCAR = gym.make("MountainCar-v0")

NON_MEMBER_CASES = {
    # id: (frames for the peer's session, expected reply kind, REFUSE code or None, text in the reply)
    "random bytes": (lambda s: [b"\x93\x07\xfe random garbage bytes"], Kind.ERROR, None, "header starts with"),
    "random bytes, several frames": (lambda s: [os.urandom(40), b"", os.urandom(3)], Kind.ERROR, None, "malformed"),
    "empty frame": (lambda s: [b""], Kind.ERROR, None, "header frame of 0 bytes"),
    "header shorter than 16 bytes": (lambda s: [b"GR\x01\x01\x00\x00"], Kind.ERROR, None, "header frame of 6 bytes"),
    "unknown kind": (lambda s: [raw_header(99)], Kind.ERROR, None, "unknown message kind 99"),
    "unknown kind with frames": (lambda s: [raw_header(200, flags=FLAG_VALUE), b"{}"], Kind.ERROR, None, "kind 200"),
    "HELLO with garbage JSON": (
        lambda s: [raw_header(Kind.HELLO, count=2, flags=FLAG_VALUE), b'{"protocol": 1, nope'],
        Kind.REFUSE,
        "invalid",
        "malformed HELLO",
    ),
    "HELLO without its value section": (lambda s: [raw_header(Kind.HELLO, count=2)], Kind.REFUSE, "invalid", "missing"),
    "HELLO body not a dict": (
        lambda s: [raw_header(Kind.HELLO, count=2, flags=FLAG_VALUE), b'["l", 1, 2]'],
        Kind.REFUSE,
        "invalid",
        "HELLO must carry a dict",
    ),
    "HELLO body with a bad buffer index": (
        lambda s: [raw_header(Kind.HELLO, count=2, flags=FLAG_VALUE), b'{"protocol": 1, "x": ["b", 7]}'],
        Kind.REFUSE,
        "invalid",
        "buffer index",
    ),
    "HELLO without num_envs": (_hello_with(num_envs=None), Kind.REFUSE, "invalid", "num_envs"),
    "HELLO with num_envs 0": (_hello_with(num_envs=0), Kind.REFUSE, "invalid", "num_envs"),
    "HELLO with a space index out of range": (
        _hello_with(observation_space_index=[0, 5]),
        Kind.REFUSE,
        "invalid",
        "observation_space_index",
    ),
    "HELLO with a malformed space": (
        _hello_with(observation_spaces=[{"space": "Box", "low": 3}]),
        Kind.REFUSE,
        "invalid",
        "space",
    ),
    "HELLO with header version 3": (lambda s: hello_frames(s, 2, version=3), Kind.REFUSE, "version", "version"),
    "HELLO with header version 0": (lambda s: hello_frames(s, 2, version=0), Kind.REFUSE, "version", "version"),
    "HELLO with protocol 3 in its body": (_hello_with(protocol=3), Kind.REFUSE, "version", "version"),
    "HELLO with protocol '1' in its body": (_hello_with(protocol="1"), Kind.REFUSE, "version", "version"),
    "HELLO with another observation space": (
        _hello_with(observation_spaces=[codec.space_to_value(MOUNTAINCAR.observation_space)]),
        Kind.REFUSE,
        "spaces",
        "observation space",
    ),
    "HELLO with another action space": (
        _hello_with(action_spaces=[codec.space_to_value(MOUNTAINCAR.action_space)]),
        Kind.REFUSE,
        "spaces",
        "action space",
    ),
    "HELLO with a launch token (none launched)": (
        _hello_with(launch={"index": 0, "token": "00" * 16, "parent_pid": 1}),
        Kind.REFUSE,
        "invalid",
        "launch token",
    ),
    "HELLO with a launch that is not a dict": (_hello_with(launch="me"), Kind.REFUSE, "invalid", "launch token"),
    "HELLO with dtypes that are not a list": (_hello_with(dtypes="<f4"), Kind.REFUSE, "invalid", "dtypes"),
    "HELLO with an object dtype in dtypes": (_hello_with(dtypes=["<f4", "|O8"]), Kind.REFUSE, "invalid", "dtype"),
    "STEP from a non-member": (
        lambda s: [protocol.pack_step_header(1, 2), np.array([1, 0], np.int64).tobytes()],
        Kind.EVICT,
        None,
        "not a member",
    ),
    "RESULT from a non-member": (lambda s: result_frames(1, _OBS2), Kind.EVICT, None, "not a member"),
    "RESULT with version 3 from a non-member": (
        lambda s: result_frames(1, _OBS2, version=3),
        Kind.EVICT,
        None,
        "not a member",
    ),
    "CALL_RESULT from a non-member": (lambda s: TEMPLATES["call-result"], Kind.EVICT, None, "not a member"),
}


@pytest.mark.parametrize("case", list(NON_MEMBER_CASES))
def test_non_member_message_gets_a_clear_reply_and_honest_slots_keep_stepping(case, stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    build, kind, code, text = NON_MEMBER_CASES[case]
    envs, clients, twin, rng = served_by_honest_clients(stack, seed=11)
    hostile = fake(stack, envs.address)
    hostile.send(build(hostile.session))
    step_until(envs, twin, rng, lambda: hostile.drain() or hostile.inbox, "a reply to the hostile peer")
    reply = hostile.inbox[0]
    assert reply.kind == kind, reply.describe()
    value = reply.value
    assert isinstance(value, dict), reply.describe()
    if kind == Kind.ERROR:
        assert value["type"] == "ProtocolError" and text in value["message"], value
    elif kind == Kind.REFUSE:
        assert value["code"] == code and text in value["reason"], value
        assert re.search(
            rf"refused (a client|client '.*' from .* \(pid .*\)): {re.escape(value['reason'])}", caplog.text
        )
    else:
        assert text in value["reason"], value
    for _ in range(10):
        actions = rng.integers(0, 2, size=4)
        twin.check_step(envs.step(actions), actions)
    assert [message.kind for message in hostile.drain()] == [], "one message, one reply"
    assert envs.num_clients == 2 and not any(client.done for client in clients)
    if kind == Kind.ERROR:
        assert "dropping a malformed message" in caplog.text
    if kind == Kind.EVICT:
        assert "from a peer that is not a member" in caplog.text


def test_error_report_with_garbage_from_a_non_member_is_logged_and_ignored(stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    envs, clients, twin, rng = served_by_honest_clients(stack, seed=12)
    hostile = fake(stack, envs.address)
    hostile.send([raw_header(Kind.ERROR, flags=FLAG_VALUE), b"{garbage"])
    hostile.send([raw_header(Kind.ERROR, flags=FLAG_VALUE), b'["l", 1]'])
    step_until(envs, twin, rng, lambda: caplog.text.count("ignoring a malformed ERROR") >= 2, "both ERRORs handled")
    hostile.send([b"\x00"])  # still answered afterwards
    step_until(envs, twin, rng, lambda: hostile.drain() or hostile.inbox, "a reply to the hostile peer")
    assert [message.kind for message in hostile.inbox] == [Kind.ERROR]


def test_pickles_in_a_hello_are_never_unpickled(stack, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    check_trap_works(tmp_path)
    marker = tmp_path / "unpickled"
    trap = pickle_trap(marker)
    envs, clients, twin, rng = served_by_honest_clients(stack, seed=13)  # allow_pickle=None: remote peers untrusted
    header = raw_header(Kind.HELLO, count=2, flags=FLAG_VALUE)
    body, *buffers = protocol.value_frames(hello_value("s", 2, name="__TRAP__", allow_pickle=True))
    field_trap = bytes(body).replace(b'"__TRAP__"', f'["p", {len(buffers)}]'.encode())
    messages = {
        "body": [header, b'["p", 0]', trap],
        "field": [header, field_trap, *map(bytes, buffers), trap],
        "space": hello_frames("s", 2, allow_pickle=True, observation_spaces=[{"space": "pickle", "data": trap}]),
    }
    peers = {}
    for name, frames in messages.items():
        peers[name] = fake(stack, envs.address)
        peers[name].send(frames)
    step_until(envs, twin, rng, lambda: all(peer.drain() or peer.inbox for peer in peers.values()), "the refusals")
    for name, peer in peers.items():
        reply = peer.inbox[0]
        assert reply.kind == Kind.REFUSE and reply.value["code"] == "invalid", (name, reply.describe())
        assert "pickle" in reply.value["reason"], (name, reply.value)
    assert not marker.exists(), "the server unpickled a hostile peer's pickle"


def test_wrong_launch_token_is_refused_over_ipc(tmp_path, stack, caplog):
    """Launched clients prove themselves with a token; a peer that guesses it is refused ('invalid')."""
    caplog.set_level(logging.INFO, logger=LOG)
    envs = RemoteVectorEnv([make_cartpole] * 2, num_clients=1, connect_timeout=CONNECT_TIMEOUT, timeout=TIMEOUT)
    stack.callback(envs.close)
    assert envs.address.startswith("ipc://")
    sync = SyncVectorEnv([make_cartpole] * 2)
    stack.callback(sync.close)
    assert data_equivalence(envs.reset(seed=5), sync.reset(seed=5), exact=True)
    peers = []
    for launch in (
        {"index": 0, "token": "00" * 16, "parent_pid": os.getpid()},
        {"index": 0, "token": ["l", 1], "parent_pid": os.getpid()},
        {"index": 7, "token": "00" * 16, "parent_pid": os.getpid()},
    ):
        peer = fake(stack, envs.address)
        peer.hello(2, launch=launch)
        peers.append(peer)
    rng = np.random.default_rng(5)
    deadline = time.monotonic() + 20
    while not all(peer.drain() or peer.inbox for peer in peers):
        assert time.monotonic() < deadline, "no refusal"
        actions = rng.integers(0, 2, size=2)
        assert data_equivalence(envs.step(actions), sync.step(actions), exact=True)
    for peer in peers:
        reply = peer.inbox[0]
        assert reply.kind == Kind.REFUSE and reply.value["code"] == "invalid", reply.describe()
        assert "launch token is wrong" in reply.value["reason"]
    for _ in range(20):
        actions = rng.integers(0, 2, size=2)
        assert data_equivalence(envs.step(actions), sync.step(actions), exact=True)
    assert envs.num_clients == 1


LATE_CHECKED_HELLOS = {
    # HELLO fields the server reads only once it has found free slots for the client
    "pid infinite": {"pid": math.inf},
    "pid a numpy infinity": {"pid": np.float64("-inf")},
    "pid not a number": {"pid": "four"},
    "pid NaN": {"pid": math.nan},
    "metadata not a dict": {"metadata": ["l"]},
}


@pytest.mark.parametrize("case", list(LATE_CHECKED_HELLOS))
def test_malformed_hello_is_refused_when_slots_are_free(case, stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    envs = cartpole_server(stack, 4)
    first = honest(stack, envs.address, 2, "honest-0")
    hostile = fake(stack, envs.address)
    hostile.hello(2, **LATE_CHECKED_HELLOS[case])
    second: list[ThreadClient] = []
    done = threading.Event()

    def second_client_after_the_reply() -> None:  # only once the hostile HELLO was handled
        while not done.is_set():
            if hostile.recv(0.05) is not None:
                second.append(ThreadClient(envs.address, [make_cartpole] * 2, name="honest-1"))
                return

    helper = threading.Thread(target=second_client_after_the_reply, daemon=True)
    helper.start()
    try:
        with bounded(CONNECT_TIMEOUT + 10, "reset"):
            result = envs.reset(seed=21)  # handles the hostile HELLO while it waits for all slots
    finally:
        done.set()
        helper.join(5)
        for client in second:
            stack.callback(client.stop)
    twin = Twin(list(range(4)), 21)
    stack.callback(twin.close)
    twin.check_reset(result)
    assert [message.kind for message in hostile.inbox] == [Kind.REFUSE], [m.describe() for m in hostile.inbox]
    assert hostile.inbox[0].value["code"] == "invalid", hostile.inbox[0].value
    assert sorted(first.client.slots + second[0].client.slots) == [0, 1, 2, 3]  # either may join first
    run_steps(envs, twin, np.random.default_rng(21), 20)


@pytest.mark.parametrize("case", list(LATE_CHECKED_HELLOS))
def test_malformed_hello_waiting_in_line_is_refused_when_a_slot_frees(case, stack, caplog):
    """A malformed HELLO asking to wait in line (server full) is refused at once, never queued; the step
    that later frees a slot is not disturbed by it."""
    caplog.set_level(logging.INFO, logger=LOG)
    envs, clients, twin, rng = served_by_honest_clients(stack, seed=22)
    hostile = fake(stack, envs.address)
    hostile.hello(2, wait=True, **LATE_CHECKED_HELLOS[case])
    step_until(envs, twin, rng, lambda: hostile.drain() or hostile.inbox, "the hostile peer to be answered")
    assert hostile.inbox[0].kind == Kind.REFUSE and hostile.inbox[0].value["waiting"] is False
    assert hostile.inbox[0].value["code"] == "invalid", hostile.inbox[0].value
    assert not envs._server.members.waiting

    leaving = clients[1]
    freed = leaving.client.slots
    leaving.stop()  # says BYE: its slots free up
    assert leaving.done and leaving.error is None, repr(leaving.error)
    actions = rng.integers(0, 2, size=4)
    with bounded(TIMEOUT + 10, "step"):
        result = envs.step(actions)  # sees the BYE; the waiting peer's turn comes
    twin.forget(freed)
    twin.check_step(result, actions)
    obs, rewards, terminations, truncations, infos = result
    assert truncations[freed].all() and lost_flags(infos) == [slot in freed for slot in range(4)], infos
    _replacement_takes_over(stack, envs, freed, twin, rng)


# =====================================================================================================
# 3. a member whose replies are malformed, stale or missing
# =====================================================================================================


def _reply(**kwargs: Any) -> Callable[[FakeClient, int, np.ndarray], list]:
    return lambda peer, seq, obs: [result_frames(seq, obs, **kwargs)]


def _frames(transform: Callable[[list[bytes]], list[bytes]]) -> Callable[[FakeClient, int, np.ndarray], list]:
    return lambda peer, seq, obs: [transform(result_frames(seq, obs))]


def _value_reply(value_frames: Callable[[], list]) -> Callable[[FakeClient, int, np.ndarray], list]:
    def bad(peer: FakeClient, seq: int, obs: np.ndarray) -> list:
        header, observations = result_frames(seq, obs, flags=FLAG_VALUE)
        return [[header, observations, *map(bytes, value_frames())]]

    return bad


MALFORMED_REPLIES = {
    "observation frame 4 bytes short": _frames(lambda f: [f[0], f[1][:-4]]),
    "observation frame 4 bytes long": _frames(lambda f: [f[0], f[1] + b"\0" * 4]),
    "observations as float64": _frames(lambda f: [f[0], np.frombuffer(f[1], np.float32).astype(np.float64).tobytes()]),
    "observations as float16": _frames(lambda f: [f[0], np.frombuffer(f[1], np.float32).astype(np.float16).tobytes()]),
    "missing observation frame": _frames(lambda f: [f[0]]),
    "extra frame": _frames(lambda f: [*f, b"extra"]),
    "header count does not match": _reply(count=3),
    "header count matches a longer scalars part": lambda peer, seq, obs: [
        result_frames(seq, np.concatenate([obs, obs[:1]]), count=3)
    ],
    "scalars part truncated": _frames(lambda f: [f[0][:-3], f[1]]),
    "terminated byte 2": _reply(terminated=[0, 2]),
    "truncated byte 255": _reply(truncated=[255, 0]),
    "value flag with garbage JSON": _value_reply(lambda: [b'{"infos": [}']),
    "value flag without a value section": _reply(flags=FLAG_VALUE),
    "infos not a list": _value_reply(lambda: protocol.value_frames({"infos": "nope"})),
    "info not a dict": _value_reply(lambda: protocol.value_frames({"infos": [{}, ["l", 1]]})),
    "final not a pair": _value_reply(lambda: protocol.value_frames({"final": [None, (1, 2, 3)]})),
    "unknown reply kind": _reply(kind=99),
    "wrong reply kind (CALL_RESULT)": _reply(kind=Kind.CALL_RESULT),
    "wrong reply kind (HELLO)": _reply(kind=Kind.HELLO),
    "reply with protocol version 3": _reply(version=3),
}


def _member_setup(
    stack: contextlib.ExitStack,
    bad_step: int | None,
    bad,
    seed: int,
    server: dict[str, Any] | None = None,
    **fake_kwargs: Any,
):
    """An honest 2-env client and a hostile 2-env member (``bad_step``/``bad`` as in
    :meth:`FakeClient.serve_as_member`) in a 4-slot server (``timeout=6`` unless ``server`` says), reset."""
    envs = cartpole_server(stack, 4, **{"timeout": 6.0, **(server or {})})
    honest_client = honest(stack, envs.address, 2, "honest")
    member = fake(stack, envs.address, **fake_kwargs)
    member.serve_as_member(bad_step, bad)
    with bounded(CONNECT_TIMEOUT + 10, "reset"):
        result = envs.reset(seed=seed)
    assert sorted(honest_client.client.slots + member.slots) == [0, 1, 2, 3]
    twin = Twin(honest_client.client.slots, seed)
    stack.callback(twin.close)
    twin.check_reset(result)
    np.testing.assert_array_equal(result[0][member.slots], member.sent_obs)
    return envs, honest_client, member, twin, np.random.default_rng(seed)


def _good_steps(envs, member, twin, rng, count: int) -> None:
    """``count`` steps in which the member answers well: its rows hold what it sent, its actions are its rows'."""
    for _ in range(count):
        actions = rng.integers(0, 2, size=4)
        with bounded(TIMEOUT + 10, "step"):
            result = envs.step(actions)
        twin.check_step(result, actions)
        np.testing.assert_array_equal(result[0][member.slots], member.sent_obs)
        np.testing.assert_array_equal(result[1][member.slots], 1.0)
        np.testing.assert_array_equal(member.actions[-1], actions[member.slots])
        assert lost_flags(result[4]) == [False] * 4


def _replacement_takes_over(stack, envs, member_slots, twin, rng) -> None:
    replacement = honest(stack, envs.address, 2, "replacement")
    actions = rng.integers(0, 2, size=4)
    with bounded(CONNECT_TIMEOUT + 10, "step"):
        result = envs.step(actions)  # waits for the replacement; its first step is the autoreset
    twin.check_step(result, actions)
    assert replacement.client.slots == member_slots
    assert not result[2][member_slots].any() and not result[3][member_slots].any()
    np.testing.assert_array_equal(result[1][member_slots], 0.0)
    for _ in range(3):
        actions = rng.integers(0, 2, size=4)
        result = envs.step(actions)
        twin.check_step(result, actions)
        np.testing.assert_array_equal(result[1][member_slots], 1.0)
        assert lost_flags(result[4]) == [False] * 4
    assert envs.num_clients == 2


@pytest.mark.parametrize("case", list(MALFORMED_REPLIES))
def test_member_with_a_malformed_reply_is_lost_evicted_and_replaced(case, stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    envs, honest_client, member, twin, rng = _member_setup(stack, 3, MALFORMED_REPLIES[case], seed=31)
    _good_steps(envs, member, twin, rng, 2)

    actions = rng.integers(0, 2, size=4)
    started = time.monotonic()
    with bounded(TIMEOUT + 10, "the step answered with a malformed reply"):
        result = envs.step(actions)  # must not raise because of the member
    assert time.monotonic() - started < 5, "the malformed reply was not noticed at once"
    twin.check_step(result, actions)
    obs, rewards, terminations, truncations, infos = result
    slots = member.slots
    assert truncations[slots].all() and not terminations[slots].any(), (terminations, truncations)
    np.testing.assert_array_equal(rewards[slots], 0.0)
    assert lost_flags(infos) == [slot in slots for slot in range(4)], infos
    evict = member.wait_for(Kind.EVICT)
    assert "malformed reply" in evict.value["reason"], evict.value
    assert "sent a malformed reply" in caplog.text
    assert member.error is None, repr(member.error)

    _replacement_takes_over(stack, envs, slots, twin, rng)
    assert honest_client.error is None and not honest_client.done


def test_member_pickle_in_a_reply_is_not_unpickled(stack, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    check_trap_works(tmp_path)
    marker = tmp_path / "unpickled"
    trap = pickle_trap(marker)
    bad = _value_reply(lambda: [b'{"infos": ["l", {"x": ["p", 0]}, {}]}', trap])
    envs, honest_client, member, twin, rng = _member_setup(stack, 1, bad, seed=32)
    actions = rng.integers(0, 2, size=4)
    result = envs.step(actions)
    twin.check_step(result, actions)
    assert lost_flags(result[4]) == [slot in member.slots for slot in range(4)]
    assert "pickle" in member.wait_for(Kind.EVICT).value["reason"]
    assert not marker.exists()


def test_member_asking_for_pickle_is_not_trusted_and_its_metadata_pickle_not_loaded(stack, tmp_path):
    check_trap_works(tmp_path)
    marker = tmp_path / "unpickled"
    envs = cartpole_server(stack, 4)
    honest(stack, envs.address, 2, "honest")
    member = fake(stack, envs.address)
    member.serve_as_member(allow_pickle=True, metadata_pickle=pickle_trap(marker))
    envs.reset(seed=0)
    assert member.welcome is not None and member.welcome["allow_pickle"] is False
    assert not marker.exists()


def test_member_stale_replies_are_dropped(stack, caplog):
    caplog.set_level(logging.DEBUG, logger=LOG)

    def stale_then_good(peer: FakeClient, seq: int, obs: np.ndarray) -> list:
        peer.sent_obs = obs
        junk = np.full_like(obs, 7.0)
        return [
            result_frames(seq - 1, junk),  # a late reply to the previous command
            result_frames(seq + 5, junk),  # one from the future
            result_frames(0, junk),
            result_frames(seq, obs),  # the real one
        ]

    envs, honest_client, member, twin, rng = _member_setup(stack, 2, stale_then_good, seed=33)
    _good_steps(envs, member, twin, rng, 2)  # the second one is answered after three stale replies
    assert "dropping a late RESULT" in caplog.text
    assert envs.num_clients == 2 and member.received(Kind.EVICT) == []


def test_silent_member_times_out_by_name_then_is_lost_when_it_hangs_up(stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    envs, honest_client, member, twin, rng = _member_setup(stack, 2, lambda peer, seq, obs: SILENT, seed=34)
    _good_steps(envs, member, twin, rng, 1)
    envs.timeout = 2.0
    actions = rng.integers(0, 2, size=4)
    started = time.monotonic()
    with pytest.raises(RemoteTimeoutError) as raised, bounded(TIMEOUT, "the step of a silent member"):
        envs.step(actions)
    assert time.monotonic() - started < 2.0 + 3
    message = str(raised.value)
    assert f"client 'hostile' (slots {format_slots(member.slots)})" in message, message
    twin.step(actions)  # the honest envs did step

    member.close_socket_soon()  # hangs up: noticed by the next command or probe
    actions = rng.integers(0, 2, size=4)
    started = time.monotonic()
    with bounded(TIMEOUT, "the step after the member hung up"):
        result = envs.step(actions)
    assert time.monotonic() - started < LIVENESS_TIMEOUT + 3
    twin.check_step(result, actions)
    assert lost_flags(result[4]) == [slot in member.slots for slot in range(4)]
    envs.timeout = TIMEOUT
    _replacement_takes_over(stack, envs, member.slots, twin, rng)


def test_member_hanging_up_instead_of_answering_is_lost_quickly(stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    envs, honest_client, member, twin, rng = _member_setup(stack, 2, lambda peer, seq, obs: CLOSE_SOCKET, seed=35)
    _good_steps(envs, member, twin, rng, 1)
    actions = rng.integers(0, 2, size=4)
    started = time.monotonic()
    with bounded(TIMEOUT, "the step of a member that hangs up"):
        result = envs.step(actions)
    assert time.monotonic() - started < LIVENESS_TIMEOUT + 3
    twin.check_step(result, actions)
    assert result[3][member.slots].all()
    assert lost_flags(result[4]) == [slot in member.slots for slot in range(4)]
    _replacement_takes_over(stack, envs, member.slots, twin, rng)


def test_fuzz_member_replies_never_disturb_the_honest_slots(stack, caplog):
    """A member answers each STEP with a mutated RESULT followed by the valid one. Whatever the mutation,
    the step returns in bounded time with the honest rows intact; the member's rows hold one of the
    observations it sent, or report client_lost (then a new hostile member takes the slots)."""
    caplog.set_level(logging.INFO, logger=LOG)
    plan: dict[str, Any] = {"mutation": []}

    def mutated_then_valid(peer: FakeClient, seq: int, obs: np.ndarray) -> list:
        valid = result_frames(seq, obs)
        mutated = mutate(valid, plan["mutation"])
        peer.candidates = [frames[1] for frames in (mutated, valid) if len(frames) > 1]
        peer.sent_obs = obs
        return [mutated, valid]

    def new_member() -> FakeClient:
        member = fake(stack, envs.address)
        member.candidates = []
        member.serve_as_member(1, mutated_then_valid, every_step=True)
        return member

    envs = cartpole_server(stack, 4, timeout=6.0)
    honest_client = honest(stack, envs.address, 2, "honest")
    member = new_member()
    with bounded(CONNECT_TIMEOUT + 10, "reset"):
        result = envs.reset(seed=36)
    twin = Twin(honest_client.client.slots, 36)
    stack.callback(twin.close)
    twin.check_reset(result)
    rng = np.random.default_rng(36)
    outcomes: Counter = Counter()
    failures: list[BaseException] = []

    @settings(
        max_examples=100,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(mutations, min_size=1, max_size=3))
    def run(mutation: list) -> None:
        nonlocal member
        if failures:
            raise failures[0]
        try:
            plan["mutation"] = mutation
            actions = rng.integers(0, 2, size=4)
            with bounded(TIMEOUT + 10, "step"):
                result = envs.step(actions)
            twin.check_step(result, actions)
            slots = [slot for slot in range(4) if slot not in twin.rows]
            if lost_flags(result[4]) == [slot in slots for slot in range(4)]:
                assert result[3][slots].all() and not result[2][slots].any()
                outcomes["lost"] += 1
                member.close()  # hangs up, as a lost client would (else up to 100 connections stay open)
                member = new_member()  # joins in the next step
            else:
                assert "client_lost" not in result[4], result[4]
                assert result[0][slots].tobytes() in member.candidates, (result[0][slots], member.candidates)
                outcomes["accepted"] += 1
        except BaseException as error:
            failures.append(error)
            raise

    run()
    assert outcomes["lost"] and outcomes["accepted"], outcomes
    assert honest_client.error is None and not honest_client.done


# =====================================================================================================
# 4. frames over max_message_bytes
# =====================================================================================================

LIMIT = 1 << 20
BIG = 2 << 20


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param(lambda: [os.urandom(BIG)], id="one big frame"),
        pytest.param(
            lambda: [raw_header(Kind.HELLO, count=2, flags=FLAG_VALUE), b"{" + b" " * BIG + b"}"], id="big body"
        ),
    ],
)
def test_oversized_frame_from_a_non_member_cuts_it_off_and_others_keep_stepping(frames, stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    envs, clients, twin, rng = served_by_honest_clients(stack, seed=41, max_message_bytes=LIMIT)
    hostile = fake(stack, envs.address)
    hostile.send(frames())
    for _ in range(30):
        actions = rng.integers(0, 2, size=4)
        twin.check_step(envs.step(actions), actions)
    assert hostile.drain() == [], "the oversized message was not dropped"
    hostile.send([b"\x01 small and malformed"])  # it reconnected; a small message is answered as usual
    step_until(envs, twin, rng, lambda: hostile.drain() or hostile.inbox, "a reply after the reconnection")
    assert hostile.inbox[0].kind == Kind.ERROR
    assert envs.num_clients == 2


def _oversized(peer: FakeClient, seq: int, obs: np.ndarray) -> list:
    header, _ = result_frames(seq, obs)
    return [[header, b"\0" * BIG]]


def test_member_sending_an_oversized_reply_is_lost(stack, caplog):
    """libzmq cuts off the member (its DEALER does not reconnect): the server does not wait for the
    dropped reply; the member's slots report client_lost."""
    caplog.set_level(logging.INFO, logger=LOG)
    envs, honest_client, member, twin, rng = _member_setup(
        stack, 2, _oversized, seed=42, server={"max_message_bytes": LIMIT}, reconnect=False
    )
    _good_steps(envs, member, twin, rng, 1)
    actions = rng.integers(0, 2, size=4)
    started = time.monotonic()
    with bounded(TIMEOUT + 10, "the step answered with an oversized reply"):
        result = envs.step(actions)
    assert time.monotonic() - started < LIVENESS_TIMEOUT + 3
    twin.check_step(result, actions)
    assert lost_flags(result[4]) == [slot in member.slots for slot in range(4)], result[4]
    assert result[3][member.slots].all()
    _replacement_takes_over(stack, envs, member.slots, twin, rng)


def test_member_that_silently_reconnects_after_an_oversized_reply_is_bounded_by_the_timeout(stack):
    """A peer cut off for an oversized frame whose DEALER reconnects under the same routing id, without
    a new HELLO (gym_remote's client does not do this: it rejoins as a new session), looks alive to the
    server: the step ends after the reply timeout with an error naming it, not a hang."""
    envs, honest_client, member, twin, rng = _member_setup(
        stack, 2, _oversized, seed=42, server={"max_message_bytes": LIMIT, "timeout": 3.0}, reconnect=True
    )
    _good_steps(envs, member, twin, rng, 1)
    started = time.monotonic()
    with bounded(TIMEOUT + 10, "the step answered with an oversized reply"):
        with pytest.raises(RemoteTimeoutError, match="timed out after 3 s waiting for step from client"):
            envs.step(rng.integers(0, 2, size=4))
    assert 3.0 <= time.monotonic() - started < 8
    assert honest_client.error is None and not honest_client.done


class BigObservationEnv(gym.Env):
    """Observations of 1 MiB: one env's fit in a 1.5 MiB frame, two envs' (one RESULT frame) do not."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1 << 18,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, np.float32), 1.0, False, False, {}


def test_client_whose_results_exceed_the_limit_gets_a_clear_error_and_no_hang(stack, caplog):
    """An honest EnvClient whose RESULTs are larger than max_message_bytes: the learner must not loop
    forever, and the logs must say that the size limit is the problem."""
    caplog.set_level(logging.INFO, logger=LOG)
    space = BigObservationEnv.observation_space
    envs = cartpole_server(
        stack,
        num_envs=3,
        observation_space=space,
        action_space=BigObservationEnv.action_space,
        timeout=5.0,
        connect_timeout=5.0,
        max_message_bytes=3 << 19,
    )
    small = ThreadClient(envs.address, [BigObservationEnv], name="small", liveness_timeout=LIVENESS_TIMEOUT)
    stack.callback(small.stop)
    large = ThreadClient(envs.address, [BigObservationEnv] * 2, name="large", liveness_timeout=LIVENESS_TIMEOUT)
    stack.callback(large.stop)
    outcome: Any = None
    with bounded(25, "reset with a client whose RESULTs exceed max_message_bytes"):
        try:
            envs.reset(seed=0)
            outcome = "returned"
        except GymRemoteError as error:
            outcome = error
    assert outcome is not None
    messages = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert any(re.search(r"max_message_bytes|too large|size limit", text) for text in messages), messages


# =====================================================================================================
# 5. raw bytes on the port, and peers that connect and say nothing
# =====================================================================================================


def _raw_connect(address: str) -> socket.socket:
    if address.startswith("tcp://"):
        host, port = address[len("tcp://") :].rsplit(":", 1)
        return socket.create_connection((host, int(port)), timeout=5)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(address[len("ipc://") :])
    return sock


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_raw_bytes_and_silent_connections_do_not_disturb_the_server(transport, stack, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    bind = "tcp://127.0.0.1:*" if transport == "tcp" else f"ipc://{tmp_path}/server.sock"
    envs, clients, twin, rng = served_by_honest_clients(stack, seed=51, bind=bind)
    raw = {
        "garbage": os.urandom(8192),
        "zmtp-1.0 frames": b"\x05\x00hell" * 200,
        "greeting then garbage": b"\xff" + b"\x00" * 8 + b"\x7f\x03\x01" + os.urandom(500),
        "partial greeting": b"\xff\x00\x00",
        "silent": b"",
    }
    sockets = {}
    for name, data in raw.items():
        sockets[name] = _raw_connect(envs.address)
        stack.callback(sockets[name].close)
        if data:
            sockets[name].sendall(data)
    silent_dealer = fake(stack, envs.address, name="silent-dealer")  # a ZeroMQ peer that never says HELLO
    started = time.monotonic()
    for _ in range(100):
        actions = rng.integers(0, 2, size=4)
        with bounded(TIMEOUT + 10, "step"):
            result = envs.step(actions)
        twin.check_step(result, actions)
    assert time.monotonic() - started < 20
    # new peers are still accepted and answered
    probe = fake(stack, envs.address, name="probe")
    probe.send([b"GR\x01"])
    step_until(envs, twin, rng, lambda: probe.drain() or probe.inbox, "a reply to a new peer")
    assert probe.inbox[0].kind == Kind.ERROR
    assert "header frame of 3 bytes" in probe.inbox[0].value["message"]
    assert silent_dealer.drain() == []
    assert envs.num_clients == 2 and not any(client.done for client in clients)
    # a peer that stays silent is not a member and holds no slot
    assert all(row["client"].startswith("honest") for row in envs.stats())


# =====================================================================================================
# 6. the client side: a fake server sends garbage to an EnvClient
# =====================================================================================================


class FakeServer:
    """A raw ROUTER bound on loopback that speaks to one EnvClient."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind("tcp://127.0.0.1:*")
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.identity: bytes | None = None

    def recv(self, timeout: float = 10.0) -> Message:
        assert self.socket.poll(int(timeout * 1000)), f"no message from the client within {timeout} s"
        identity, *frames = self.socket.recv_multipart()
        self.identity = identity
        return Message.parse(frames)

    def send(self, frames: list[Any]) -> None:
        self.socket.send_multipart([self.identity, *frames])

    def welcome(self, hello: Message) -> None:
        assert hello.kind == Kind.HELLO, hello.describe()
        value = {
            "protocol": protocol.PROTOCOL_VERSION,
            "server": "fake-server",
            "server_session": uuid.uuid4().hex,
            "slots": [0, 1],
            "num_envs": 2,
            "autoreset_mode": AutoresetMode.NEXT_STEP.value,
            "observation_space": codec.space_to_value(OBS_SPACE),
            "action_space": codec.space_to_value(ACT_SPACE),
            "allow_pickle": False,
            "liveness_timeout": 10.0,
            "reset_first": False,
        }
        self.send(protocol.message(Kind.WELCOME, value))

    def close(self) -> None:
        self.socket.close(linger=0)
        self.context.term()


def _result(message: Message, seq: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    assert message.kind == Kind.RESULT and message.header.seq == seq, message.describe()
    rewards, terminated, truncated = protocol.parse_result_scalars(message.frames[0], 2)
    return np.frombuffer(message.frames[1], np.float32).reshape(2, 4), rewards, terminated, truncated


def _step_command(seq: int, actions: Any, count: int = 2, flags: int = 0, dtypes: bytes = b"") -> list[bytes]:
    return [raw_header(Kind.STEP, seq=seq, count=count, flags=flags) + dtypes, np.asarray(actions).tobytes()]


def _value_command(kind: int, seq: int, body: bytes, *buffers: bytes, count: int = 2) -> list[bytes]:
    return [raw_header(kind, seq=seq, count=count, flags=FLAG_VALUE), body, *buffers]


ACTIONS = np.array([1, 0], np.int64)
GARBAGE_COMMANDS = {
    # id: (frames, seq the ERROR must echo, text in its message)
    "random bytes": ([b"\x17\x99 not a header at all"], 0, "header starts with"),
    "empty frame": ([b""], 0, "header frame of 0 bytes"),
    "short header": ([b"GR\x01"], 0, "header frame of 3 bytes"),
    "unknown kind": ([raw_header(99, seq=5)], 0, "unknown message kind 99"),
    "protocol version 3": ([raw_header(Kind.STEP, seq=6, count=2, version=3), ACTIONS.tobytes()], 6, "version 3"),
    "STEP action frame too short": (
        [raw_header(Kind.STEP, seq=7, count=2), b"\x01\x00\x00"],
        7,
        "of 3 bytes, expected 16",
    ),
    "STEP actions as int32": (_step_command(8, ACTIONS.astype(np.int32)), 8, "array frame of 8 bytes, expected 16"),
    "STEP actions for 3 envs": (_step_command(9, np.array([1, 0, 1]), count=3), 9, "STEP for 3 envs"),
    "STEP without action frames": (_step_command(10, ACTIONS)[:1], 10, "ended before all its array frames"),
    "STEP with an extra frame": (
        [*_step_command(11, ACTIONS), b"extra"],
        11,
        "more frames than the action space needs",
    ),
    "STEP dtype listing not JSON": (
        _step_command(12, ACTIONS, flags=FLAG_DTYPES, dtypes=b"[nope"),
        12,
        "dtype listing",
    ),
    "STEP dtype listing with object dtype": (
        _step_command(13, ACTIONS, flags=FLAG_DTYPES, dtypes=b'["|O"]'),
        13,
        "not allowed",
    ),
    "STEP value with garbage JSON": (_value_command(Kind.STEP, 14, b"{]"), 14, "malformed value"),
    "STEP value with too few actions": (
        _value_command(Kind.STEP, 15, b'{"actions": ["l", 1]}'),
        15,
        "list of 2 actions",
    ),
    "STEP value without actions": (_value_command(Kind.STEP, 16, b"{}"), 16, "actions"),
    "STEP value with a wrongly shaped action": (
        _value_command(Kind.STEP, 17, b'{"actions": ["l", ["a", "<f8", [3], 0], 0]}', np.zeros(3).tobytes()),
        17,
        "invalid",
    ),
    "RESET with garbage JSON": (_value_command(Kind.RESET, 18, b'{"seeds": [1,'), 18, "malformed value"),
    "RESET without its value section": ([raw_header(Kind.RESET, seq=19, count=2)], 19, "without its value section"),
    "RESET value not a dict": (_value_command(Kind.RESET, 20, b'["l", 1, 2]'), 20, ""),
    "RESET value without seeds": (_value_command(Kind.RESET, 21, b'{"options": null}'), 21, "seeds"),
    "CALL with a bad buffer index": (_value_command(Kind.CALL, 22, b'{"name": ["b", 3]}'), 22, "buffer index"),
    "SET_ATTR value not a dict": (_value_command(Kind.SET_ATTR, 23, b"17"), 23, ""),
    "HELLO from the server": ([raw_header(Kind.HELLO, seq=25)], 25, "unexpected HELLO"),
    "EVICT with garbage": ([raw_header(Kind.EVICT, seq=26, flags=FLAG_VALUE), b"{nope"], 26, "malformed value"),
    "STEP subset without its index frame": (
        [raw_header(Kind.STEP, seq=28, count=1, flags=FLAG_SUBSET)],
        28,
        "lacks its index frame",
    ),
    "STEP subset naming an env twice": (
        [raw_header(Kind.STEP, seq=29, count=2, flags=FLAG_SUBSET), protocol.index_frame([1, 1]), ACTIONS.tobytes()],
        29,
        "distinct",
    ),
    "STEP subset naming an env the client lacks": (
        [raw_header(Kind.STEP, seq=30, count=1, flags=FLAG_SUBSET), protocol.index_frame([2]), ACTIONS[:1].tobytes()],
        30,
        "below 2",
    ),
    "STEP subset for 3 of 2 envs": (
        [raw_header(Kind.STEP, seq=31, count=3, flags=FLAG_SUBSET), protocol.index_frame([0, 1, 0])],
        31,
        "distinct",
    ),
    "RESET subset with an odd index frame": (
        [raw_header(Kind.RESET, seq=32, count=1, flags=FLAG_SUBSET | FLAG_VALUE), b"\x00", b'{"seeds": ["l", 1]}'],
        32,
        "index frame",
    ),
    "RESET subset with seeds for 2 of 1 envs": (
        [
            raw_header(Kind.RESET, seq=33, count=1, flags=FLAG_SUBSET | FLAG_VALUE),
            protocol.index_frame([1]),
            b'{"seeds": ["l", 1, 2], "options": null}',
        ],
        33,
        "list of 1 seeds",
    ),
    "CALL subset naming an env the client lacks": (
        [
            raw_header(Kind.CALL, seq=34, count=1, flags=FLAG_SUBSET | FLAG_VALUE),
            protocol.index_frame([5]),
            b'{"name": "spec", "args": ["l"], "kwargs": {}}',
        ],
        34,
        "index",
    ),
    "CALL subset without its index frame": (
        [raw_header(Kind.CALL, seq=35, count=1, flags=FLAG_SUBSET | FLAG_VALUE)],
        35,
        "lacks its index frame",
    ),
    "SET_ATTR with values for 2 of 1 envs": (
        [
            raw_header(Kind.SET_ATTR, seq=36, count=1, flags=FLAG_SUBSET | FLAG_VALUE),
            protocol.index_frame([0]),
            b'{"name": "marker", "values": ["l", 1, 2]}',
        ],
        36,
        "list of 1 values",
    ),
    "SET_ATTR for 3 envs of 2": (
        _value_command(Kind.SET_ATTR, 37, b'{"name": "marker", "values": ["l", 1, 2, 3]}', count=3),
        37,
        "SET_ATTR for 3 envs",
    ),
}


def test_env_client_answers_garbage_with_errors_and_keeps_serving(stack, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    check_trap_works(tmp_path)
    marker = tmp_path / "unpickled"
    server = FakeServer()
    stack.callback(server.close)
    victim = ThreadClient(server.address, [make_cartpole] * 2, name="victim")
    stack.callback(victim.stop)
    server.welcome(server.recv(20))

    reference = [make_cartpole() for _ in range(2)]
    expected_obs = np.stack([env.reset(seed=seed)[0] for env, seed in zip(reference, (5, 6))])
    server.send(protocol.message(Kind.RESET, {"seeds": [5, 6], "options": None}, seq=1, count=2))
    obs, rewards, terminated, truncated = _result(server.recv(), 1)
    np.testing.assert_array_equal(obs, expected_obs)

    commands = dict(GARBAGE_COMMANDS)
    commands["STEP value with a pickle"] = (
        _value_command(Kind.STEP, 27, b'{"actions": ["l", ["p", 0], 0]}', pickle_trap(marker)),
        27,
        "pickle",
    )
    for case, (frames, seq, text) in commands.items():
        server.send(frames)
        reply = server.recv()
        assert reply.kind == Kind.ERROR, (case, reply.describe())
        assert reply.header.seq == seq, (case, reply.describe())
        report = reply.value
        assert text in report["message"], (case, report)
        assert report["name"] == "victim" and report["traceback"], (case, report)
        assert not victim.done, (case, repr(victim.error))
    assert not marker.exists()
    assert caplog.text.count("client victim: ") >= len(commands)

    # a WELCOME after joining answers a repeated HELLO (PROTOCOL.md §7): ignored, whatever it says
    server.send(protocol.message(Kind.WELCOME, {"slots": [5]}, seq=24))
    # still answers a valid STEP correctly (no garbage stepped or reset an env), and nothing before it
    server.send([protocol.pack_step_header(40, 2), ACTIONS])
    obs, rewards, terminated, truncated = _result(server.recv(), 40)
    for index, env in enumerate(reference):
        env_obs, env_reward, env_terminated, env_truncated, _ = env.step(int(ACTIONS[index]))
        np.testing.assert_array_equal(obs[index], env_obs)
        assert (rewards[index], terminated[index], truncated[index]) == (env_reward, env_terminated, env_truncated)

    # and a valid STEP for env 1 only steps env 1, answering for it alone
    server.send([protocol.pack_step_header(42, 1, subset=True), protocol.index_frame([1]), ACTIONS[:1]])
    reply = server.recv()
    assert reply.kind == Kind.RESULT and reply.header.seq == 42 and reply.header.count == 1, reply.describe()
    rewards, terminated, truncated = protocol.parse_result_scalars(reply.frames[0], 1)
    env_obs, env_reward, env_terminated, env_truncated, _ = reference[1].step(int(ACTIONS[0]))
    np.testing.assert_array_equal(np.frombuffer(reply.frames[1], np.float32), env_obs)
    assert (rewards[0], terminated[0], truncated[0]) == (env_reward, env_terminated, env_truncated)
    server.send([protocol.pack_step_header(43, 2), ACTIONS])
    obs, _, _, _ = _result(server.recv(), 43)
    np.testing.assert_array_equal(obs[0], reference[0].step(int(ACTIONS[0]))[0])  # env 0 was not stepped by 42
    np.testing.assert_array_equal(obs[1], reference[1].step(int(ACTIONS[1]))[0])

    # calls for env 1 only: SET_ATTR reaches env 1 alone, CALL answers for it alone
    server.send(protocol.message(Kind.SET_ATTR, {"name": "marker", "values": [7]}, seq=44, count=1, indexes=[1]))
    reply = server.recv()
    assert reply.kind == Kind.CALL_RESULT and reply.header.seq == 44 and reply.value == {"results": None}
    server.send(protocol.message(Kind.CALL, {"name": "marker", "args": [], "kwargs": {}}, seq=45, count=1, indexes=[1]))
    reply = server.recv()
    assert reply.kind == Kind.CALL_RESULT and reply.value == {"results": [7]}, reply.describe()
    server.send(protocol.message(Kind.CALL, {"name": "marker", "args": [], "kwargs": {}}, seq=46, count=1, indexes=[0]))
    reply = server.recv()
    assert reply.kind == Kind.ERROR and "marker" in reply.value["message"], reply.describe()
    query = {"name": protocol.WRAPPERS_QUERY, "args": [], "kwargs": {}}
    server.send(protocol.message(Kind.CALL, query, seq=47, count=2))
    reply = server.recv()
    wrappers = reply.value["results"]
    assert len(wrappers) == 2 and "gymnasium.wrappers.common.TimeLimit" in wrappers[0], reply.describe()
    assert "gymnasium.core.Wrapper" in wrappers[1] and "gymnasium.core.Env" in wrappers[1]

    server.send([protocol.pack_header(Kind.CLOSE, 41)])
    bye = server.recv()
    assert bye.kind == Kind.BYE and bye.header.seq == 41, bye.describe()
    victim.finish(10)


def test_env_client_ignores_garbage_before_its_welcome(stack, caplog):
    """Before WELCOME too, a malformed message from the server is logged and ignored, not fatal."""
    caplog.set_level(logging.INFO, logger=LOG)
    server = FakeServer()
    stack.callback(server.close)
    victim = ThreadClient(server.address, [make_cartpole] * 2, name="victim")
    stack.callback(victim.stop)
    hello = server.recv(20)
    server.send([b"\x00 garbage before the welcome"])
    server.send([raw_header(99)])
    time.sleep(0.5)
    assert not victim.done, f"EnvClient.run() ended on garbage before WELCOME: {victim.error!r}"
    server.welcome(hello)
    server.send(protocol.message(Kind.RESET, {"seeds": [1, 2], "options": None}, seq=1, count=2))
    reply = server.recv()
    while reply.kind == Kind.ERROR and reply.header.seq == 0:  # answering the garbage with ERROR is fine too
        reply = server.recv()
    _result(reply, 1)
    server.send([protocol.pack_header(Kind.CLOSE, 2)])
    bye = server.recv()
    assert bye.kind == Kind.BYE, bye.describe()
    victim.finish(10)
