"""EnvClient's own failure paths, with real sockets on loopback: addresses it cannot use, a server that
stops reading, envs that raise (``EnvFailure``), and the bounded closing of the server's gatekeeper.

Names added by these changes (``EnvFailure``, ``check_endpoint``, ``links.zeromq.terminate``) are imported
inside the tests, so that each test fails on its own against code that lacks them.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import zmq

from gym_remote import EnvClient, RemoteVectorEnv, codec, protocol
from gym_remote.errors import ClientLostError
from gym_remote.links.gate import Gatekeeper
from gym_remote.links.zeromq import use_curve
from gym_remote.protocol import Kind
from gym_remote.security import AuthorizedKeys, ClientSecurity, KeyPair, ServerSecurity
from tests.envs import RaisingEnv, make_cartpole
from tests.helpers import ThreadClient, wait_until

RECEIVE_MS = 10_000


# -- helpers ---------------------------------------------------------------------------------------


class BlockObsEnv(gym.Env):
    """An env whose observations are 16 KiB, so that a few hundred unread RESULTs fill any buffer."""

    observation_space = gym.spaces.Box(0, 255, (16384,), dtype=np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(16384, dtype=np.uint8), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(16384, dtype=np.uint8), 0.0, False, False, {}


class ScriptedServer:
    """A raw ROUTER in a context of its own that plays the server's part of the handshake (PROTOCOL.md)."""

    def __init__(self, **options: int) -> None:
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.RCVTIMEO, RECEIVE_MS)
        for option, value in options.items():
            self.router.setsockopt(getattr(zmq, option), value)
        self.router.bind("tcp://127.0.0.1:*")
        self.address = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self.identity = b""

    def welcome(self, env: gym.Env, num_envs: int) -> dict[str, Any]:
        """Receive the client's HELLO and welcome it to slots ``0..num_envs-1``; return the HELLO."""
        identity, header, *value = self.router.recv_multipart()
        assert protocol.parse_header(header).kind == Kind.HELLO
        self.identity = identity
        welcome = {
            "protocol": protocol.PROTOCOL_VERSION,
            "server": "scripted",
            "server_session": "scripted",
            "slots": list(range(num_envs)),
            "num_envs": num_envs,
            "autoreset_mode": "NextStep",
            "observation_space": codec.space_to_value(env.observation_space),
            "action_space": codec.space_to_value(env.action_space),
            "allow_pickle": False,
            "liveness_timeout": 10.0,
            "reset_first": False,
            "max_message_bytes": 1 << 30,
        }
        self.send(protocol.message(Kind.WELCOME, welcome))
        return protocol.read_value(value)

    def send(self, frames: list[Any]) -> None:
        self.router.send_multipart([self.identity, *frames])

    def receive(self) -> tuple[protocol.Header, list[bytes]]:
        identity, header, *rest = self.router.recv_multipart()
        return protocol.parse_header(header), rest

    def drain(self, until: Any, timeout: float) -> None:
        """Read (and drop) what the client sends until ``until()`` holds or ``timeout`` s pass."""
        deadline = time.monotonic() + timeout
        while not until() and time.monotonic() < deadline:
            if self.router.poll(50):
                self.router.recv_multipart()

    def close(self) -> None:
        self.router.close(linger=0)
        self.context.term()


def run_in_thread(client: EnvClient) -> ThreadClient:
    return ThreadClient.around(client)


# -- 1. addresses ------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_client_address_without_scheme_is_refused_by_the_constructor():
    with pytest.raises(ValueError, match=r"address='localhost:5555' has no transport scheme.*tcp://.*ipc://"):
        EnvClient("localhost:5555", [make_cartpole])


@pytest.mark.timeout(30)
def test_run_refuses_an_address_zeromq_cannot_connect_to_at_once_and_leaves_nothing_open():
    # passes the constructor's checks (a scheme, a path), but no ipc path may be this long
    client = EnvClient("ipc:///tmp/" + "x" * 200, [make_cartpole], connect_timeout=5)
    started = time.monotonic()
    runner = run_in_thread(client)
    runner.join(10)
    assert time.monotonic() - started < 5, "run() waited instead of failing at once"
    assert isinstance(runner.error, ValueError), repr(runner.error)
    assert "cannot connect to 'ipc:///tmp/xxx" in str(runner.error), runner.error
    assert client._context.closed, "run() left its ZeroMQ context open"


@pytest.mark.parametrize(
    ("endpoint", "binding", "message"),
    [
        ("localhost:5555", True, r"bind='localhost:5555' has no transport scheme.*'tcp://localhost:5555'"),
        ("/tmp/server", True, r"no transport scheme.*'ipc:///tmp/server'"),
        ("foo://127.0.0.1:5555", True, r"unknown transport scheme 'foo://'"),
        ("tcp://", True, r"no address after tcp://"),
        ("tcp://127.0.0.1", True, r"no valid port"),
        ("tcp://127.0.0.1:70000", True, r"no valid port"),
        ("tcp://127.0.0.1:*", False, r"no valid port"),  # * only binds
        ("tcp://*:5555", False, r"\* is for binding"),
    ],
)
@pytest.mark.timeout(30)
def test_check_endpoint_names_what_is_wrong(endpoint, binding, message):
    from gym_remote.security import check_endpoint

    with pytest.raises(ValueError, match=message):
        check_endpoint(endpoint, "bind" if binding else "address", binding=binding)


@pytest.mark.parametrize(
    ("endpoint", "binding"),
    [
        ("tcp://127.0.0.1:5555", False),
        ("tcp://[::1]:5555", False),
        ("tcp://127.0.0.1:*", True),
        ("tcp://*:5555", True),
        ("ipc:///tmp/gym-remote/server", False),
        ("inproc://server", True),
    ],
)
@pytest.mark.timeout(30)
def test_check_endpoint_accepts_zeromq_endpoints(endpoint, binding):
    from gym_remote.security import check_endpoint

    check_endpoint(endpoint, "bind", binding=binding)


@pytest.mark.timeout(30)
def test_remote_vector_env_bind_without_scheme_says_the_scheme_is_missing():
    with pytest.raises(ValueError, match=r"bind='localhost:5555' has no transport scheme"):
        RemoteVectorEnv(num_envs=1, bind="localhost:5555")


@pytest.mark.timeout(60)
def test_cli_client_address_without_scheme_exits_2_at_once(run):
    client = run("client", "localhost:5555", "--env", "CartPole-v1", "--connect-timeout", "30")
    assert client.wait(20) == 2, client
    assert "address='localhost:5555' has no transport scheme" in client.stderr, client
    assert "tcp://" in client.stderr and "ipc://" in client.stderr, client


# -- 2. closing is bounded ------------------------------------------------------------------------


def _thread_is_in(thread: threading.Thread, function: str) -> bool:
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


@pytest.mark.timeout(60)
def test_gatekeeper_close_is_bounded_while_its_thread_is_stuck_and_the_context_terminates():
    """The thread blocks in a key lookup (the test holds the keys' lock, as a slow key directory would)."""
    server_keys, client_keys = KeyPair.generate(), KeyPair.generate()
    authorized = AuthorizedKeys([client_keys.public])
    context, peers_context = zmq.Context(), zmq.Context()
    gatekeeper = Gatekeeper(context, authorized, max_connections=10)
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    use_curve(router, ServerSecurity(server_keys, authorized, "keys"))
    gatekeeper.watch(router)
    gatekeeper.start()
    router.bind("tcp://127.0.0.1:*")
    peer = peers_context.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    use_curve(peer, ClientSecurity(server_keys.public, client_keys))
    terminating = threading.Thread(target=context.term, daemon=True)
    authorized._lock.acquire()
    try:
        peer.connect(router.getsockopt_string(zmq.LAST_ENDPOINT))
        wait_until(lambda: _thread_is_in(gatekeeper._thread, "lookup"), 10, "the gatekeeper to wait in a key lookup")
        started = time.monotonic()
        closed = gatekeeper.close(router)
        took = time.monotonic() - started
        router.close(linger=0)
        terminating.start()
        terminating.join(5)
        assert not terminating.is_alive(), "context.term() waits for the stuck gatekeeper's sockets"
        assert took < 5.5, f"Gatekeeper.close() took {took:.1f} s, beyond its 5 s timeout"
        assert closed is True, "close() returns True once the gatekeeper's sockets are closed"
    finally:
        authorized._lock.release()
        peer.close(linger=0)
        peers_context.term()
    gatekeeper._thread.join(5)
    assert not gatekeeper._thread.is_alive(), "the gatekeeper thread did not end once it got unstuck"
    terminating.join(5)
    assert not terminating.is_alive()


@pytest.mark.timeout(30)
def test_terminate_gives_up_after_its_timeout_on_a_socket_left_open(caplog):
    from gym_remote.links import zeromq

    context = zmq.Context()
    left_open = context.socket(zmq.PAIR)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="gym_remote.links.zeromq"):
        assert zeromq.terminate(context, 0.3) is False
    assert time.monotonic() - started < 2
    assert any("did not terminate within 0.3 s" in record.getMessage() for record in caplog.records)
    left_open.close(linger=0)  # the termination under way in the background finishes now
    wait_until(lambda: context.closed, 5, "the context to terminate once its last socket closed")
    assert zeromq.terminate(zmq.Context(), 5) is True


# -- 3. sends are bounded --------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_client_whose_server_stops_reading_counts_it_as_gone_within_the_liveness_timeout(caplog):
    """A server that sends RESETs but never reads the RESULTs: the client's queue fills; its send must end.

    The commands come in bursts the client keeps up with (its receive queue never fills: libzmq 4.3.5 can
    abort on a heartbeat timeout while a receive queue is full, libzmq#3937).
    """
    server = ScriptedServer(RCVHWM=1, RCVBUF=4096)
    client = EnvClient(server.address, [BlockObsEnv], liveness_timeout=3.0, reconnect=False, connect_timeout=20)
    runner = None
    try:
        with caplog.at_level(logging.WARNING, logger="gym_remote.client"):
            runner = run_in_thread(client)
            server.welcome(BlockObsEnv(), 1)
            # more RESULTs (16 KiB each) than the client's queue (even its old 1000 messages), the kernel's
            # buffers and the server's one-message receive queue hold between them
            for burst in range(8):
                for seq in range(1, 201):
                    server.send(protocol.message(Kind.RESET, {"seeds": [None]}, seq=burst * 200 + seq, count=1))
                time.sleep(0.03)
            runner.thread.join(20)
            assert runner.done, "EnvClient.run() is still blocked sending to a server that stopped reading"
        assert isinstance(runner.error, ClientLostError), repr(runner.error)
        assert "took nothing from this client for" in str(runner.error), runner.error
        assert any("counting the server as gone" in record.getMessage() for record in caplog.records)
    finally:
        if runner is not None and not runner.done:  # unblock it, so that it ends too
            client.stop()
            server.drain(lambda: runner.done, 20)
        server.close()


@pytest.mark.timeout(60)
def test_client_whose_server_stops_reading_rejoins_when_reconnecting():
    """The same, with reconnection on: the client gives up on that connection and says HELLO again."""
    server = ScriptedServer(RCVHWM=1, RCVBUF=4096)
    client = EnvClient(server.address, [BlockObsEnv], liveness_timeout=2.0, connect_timeout=20, reconnect_timeout=20)
    runner = run_in_thread(client)
    try:
        first = server.welcome(BlockObsEnv(), 1)
        for seq in range(1, 801):
            server.send(protocol.message(Kind.RESET, {"seeds": [None]}, seq=seq, count=1))
            if seq % 200 == 0:
                time.sleep(0.03)
        wait_until(lambda: client.rejoins == 1, 20, "the client to give up on the server that stopped reading")
        # reading again: the old connection's RESULTs come first (the server's queue held some); then the HELLO
        deadline = time.monotonic() + 30
        hello = None
        while hello is None and time.monotonic() < deadline:
            if not server.router.poll(100):
                continue
            identity, header, *rest = server.router.recv_multipart()
            if protocol.parse_header(header).kind == Kind.HELLO:
                hello = protocol.read_value(rest)
        assert hello is not None, "the client did not rejoin after its server stopped reading"
        assert hello["previous_session"] == first["session"] and hello["rejoins"] == 1, hello
    finally:
        client.stop()
        server.drain(lambda: runner.done, 20)
        runner.join(10)
        server.close()


@pytest.mark.timeout(60)
def test_a_client_whose_hello_goes_unanswered_says_it_again_and_ignores_the_second_welcome(monkeypatch):
    """The learner drops a HELLO an interrupt cut short while it read it (PROTOCOL.md §7): the client sends the
    same HELLO again after a while without an answer (2 s; shortened here), then after twice as long; once
    welcomed, it ignores the WELCOME that answers a repeat, and serves."""
    from gym_remote import client as client_module

    HELLO_REPEAT_SECONDS = 0.4
    monkeypatch.setattr(client_module, "HELLO_REPEAT_SECONDS", HELLO_REPEAT_SECONDS)
    server = ScriptedServer()
    runner = None
    try:
        client = EnvClient(server.address, [make_cartpole], data_plane=False, connect_timeout=30)
        runner = run_in_thread(client)
        first = server.router.recv_multipart()  # dropped, as the learner drops a HELLO cut short
        first_at = time.monotonic()
        second = server.router.recv_multipart()
        second_at = time.monotonic()
        third = server.router.recv_multipart()
        third_at = time.monotonic()
        assert first == second == third, "a repeated HELLO differs from the first"
        assert protocol.parse_header(first[1]).kind == Kind.HELLO
        assert HELLO_REPEAT_SECONDS * 0.9 <= second_at - first_at < HELLO_REPEAT_SECONDS + 1.0
        assert 2 * HELLO_REPEAT_SECONDS * 0.9 <= third_at - second_at < 2 * HELLO_REPEAT_SECONDS + 1.0
        server.identity = first[0]
        welcome = {
            "protocol": protocol.PROTOCOL_VERSION,
            "server": "scripted",
            "server_session": "scripted",
            "slots": [0],
            "num_envs": 1,
            "autoreset_mode": "NextStep",
            "observation_space": codec.space_to_value(make_cartpole().observation_space),
            "action_space": codec.space_to_value(make_cartpole().action_space),
            "allow_pickle": False,
            "liveness_timeout": 10.0,
            "reset_first": False,
            "max_message_bytes": 1 << 30,
        }
        server.send(protocol.message(Kind.WELCOME, welcome))
        server.send(protocol.message(Kind.WELCOME, welcome))  # the answer to a repeat
        server.send(protocol.message(Kind.RESET, {"seeds": [7]}, seq=1, count=1))
        server.router.setsockopt(zmq.RCVTIMEO, RECEIVE_MS)
        header, _ = server.receive()
        assert (header.kind, header.seq) == (Kind.RESULT, 1), f"got {protocol.kind_name(header.kind)}"
        server.router.setsockopt(zmq.RCVTIMEO, int(3 * HELLO_REPEAT_SECONDS * 1000))
        with pytest.raises(zmq.Again):  # welcomed: no more repeats, and no ERROR for the second WELCOME
            server.router.recv_multipart()
    finally:
        if runner is not None:
            runner.client.stop()
            runner.join(20)
        server.close()
    assert runner.error is None, repr(runner.error)


# -- 4. env errors name their env ------------------------------------------------------------------


def _hosted(*envs: gym.Env):
    from gym_remote.client import HostedEnvs

    hosted = HostedEnvs(envs)
    hosted.configure(envs[0].observation_space, envs[0].action_space, gym.vector.AutoresetMode.NEXT_STEP)
    return hosted


@pytest.mark.timeout(30)
def test_hosted_envs_raise_env_failure_naming_the_env_and_wrapping_its_error():
    from gym_remote.client import EnvFailure

    hosted = _hosted(RaisingEnv(), RaisingEnv("KeyError"), RaisingEnv("custom"))
    assert not hasattr(hosted, "failed_index")
    hosted.reset([0, 1, 2], None, None)
    cases = [
        (lambda: hosted.step([0, 1, 1]), 1, KeyError),  # the first env to raise, in order
        (lambda: hosted.step([1], [2]), 2, "CustomEnvError"),
        (lambda: hosted.reset([None], {"fail": True}, [1]), 1, KeyError),
        (lambda: hosted.call("fail", [], {}, [0, 2]), 0, ValueError),
        (lambda: hosted.call("broken", [], {}, [2]), 2, "CustomEnvError"),
        (lambda: hosted.call("no_such_attribute", [], {}, None), 0, AttributeError),
        (lambda: hosted.set_attr("fragile", [1, 2], [1, 0]), 1, KeyError),
    ]
    for command, index, kind in cases:
        with pytest.raises(EnvFailure) as caught:
            command()
        failure = caught.value
        assert failure.index == index
        if isinstance(kind, str):
            assert type(failure.error).__name__ == kind
        else:
            assert type(failure.error) is kind
        assert failure.__cause__ is failure.error
        assert f"env {index}: {type(failure.error).__name__}" in str(failure)
    assert hosted.call("no_such_attribute", [], {}, None, "has_attr") == [False, False, False]


class _CountingEnv(gym.Env):
    """Counts its steps (its observation); raises ValueError for action 1 without changing."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.steps = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if action == 1:
            raise ValueError("deliberate")
        self.steps += 1
        return np.full(1, self.steps, np.float32), 1.0, self.steps == 2, False, {"steps": self.steps}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("each", [False, True])
def test_an_env_that_raises_stops_a_step_unless_each_env_stands_alone(each):
    from gym_remote.client import EnvFailure

    hosted = _hosted(_CountingEnv(), _CountingEnv(), _CountingEnv())
    hosted.reset([0, 1, 2], None, None)
    hosted.step([0, 0, 0])  # one step each
    if not each:
        with pytest.raises(EnvFailure) as caught:
            hosted.step([0, 1, 0])
        assert caught.value.index == 1
        assert [env.unwrapped.steps for env in hosted.envs] == [2, 1, 1]  # stopped at the env that raised
        return
    infos, finals, errors = hosted.step([0, 1, 0], None, each=True)
    assert [env.unwrapped.steps for env in hosted.envs] == [2, 1, 2]  # the env after it stepped too
    assert [type(error).__name__ if error else None for error in errors] == [None, "ValueError", None]
    assert infos == [{"steps": 2}, {}, {"steps": 2}] and finals is None
    assert hosted.result.rewards.tolist() == [1.0, 0.0, 1.0]
    assert hosted.result.terminated.tolist() == [True, False, True]
    hosted.gather()
    assert hosted.observations[:, 0].tolist() == [2.0, 1.0, 2.0]  # the failed env keeps its observation
    assert hosted.autoreset == [True, False, True]
    infos, finals, errors = hosted.step([0, 1, 1], [1, 0, 2], each=True)  # in its own order; autoresets
    assert errors == [None, None, None] and [env.unwrapped.steps for env in hosted.envs] == [0, 2, 0]


@pytest.mark.timeout(60)
def test_error_on_the_wire_names_the_env_and_the_original_class():
    """Unchanged on the wire: ERROR carries the env's index and the class the env raised (not EnvFailure)."""
    server = ScriptedServer()
    client = EnvClient(server.address, [RaisingEnv, lambda: RaisingEnv("custom")], connect_timeout=20)
    runner = run_in_thread(client)
    try:
        server.welcome(RaisingEnv(), 2)
        server.send(protocol.message(Kind.RESET, {"seeds": [None, None]}, seq=1, count=2))
        header, _ = server.receive()
        assert (header.kind, header.seq) == (Kind.RESULT, 1)
        server.send([protocol.pack_step_header(2, 2), np.array([0, 1], dtype=np.int64).tobytes()])
        header, rest = server.receive()
        assert (header.kind, header.seq) == (Kind.ERROR, 2)
        report = protocol.read_value(rest)
        assert report["index"] == 1
        assert (report["type"], report["module"]) == ("CustomEnvError", "tests.envs")
        assert "deliberate custom in step" in report["message"] and "CustomEnvError" in report["traceback"]
        server.send(protocol.message(Kind.CALL, {"name": "fail", "args": [], "kwargs": {}}, seq=3, count=2))
        header, rest = server.receive()
        report = protocol.read_value(rest)
        assert (header.kind, report["index"], report["type"], report["module"]) == (
            Kind.ERROR,
            0,
            "ValueError",
            "builtins",
        )
        server.send(protocol.message(Kind.CLOSE, seq=4))
        header, _ = server.receive()
        assert header.kind == Kind.BYE
        runner.finish(10)
    finally:
        client.stop()
        runner.join(10)
        server.close()
