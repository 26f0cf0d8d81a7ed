"""Security over real sockets: CURVE keys, shared secrets, private local servers, connection limits.

Every server here is a real :class:`~gym_remote.RemoteVectorEnv` on loopback tcp (or ipc), every honest
client a real :class:`~gym_remote.EnvClient` (in a thread, ``ThreadClient``) serving CartPole, and the
honest slots' data must equal a ``SyncVectorEnv`` run with the same seeds and actions while intruders try
their luck. Intruders are raw ZeroMQ DEALERs (with or without CURVE keys), raw TCP sockets and clients with
the wrong keys; floods come from the loopback address 127.0.0.2 (``tcp://127.0.0.2:0;127.0.0.1:PORT``), so
that their per-address handshake budget is not the honest clients' (127.0.0.1).

Sections:

1. CURVE with key files: who gets in (the authorized key) and who does not (plaintext client, unauthorized
   key, wrong server key, a raw plaintext DEALER), and why; keys added to the authorized directory later;
2. encryption is real: a TCP relay between client and server records no readable byte of the traffic
   (and, as a control, it does without CURVE);
3. shared secrets: right and wrong secret, conflicting arguments, short-secret warning; EnvClients whose
   mechanism does not match the server's (plaintext vs CURVE, either way);
4. private local servers: launched clients only (ipc, tcp, with a secret);
5. pickles from an authorized peer are never unpickled;
6. limits: connection flood (CURVE and plaintext servers), handshake-rate flood, oversized frames, messages
   with too many frames;
7. the bind check: no non-loopback address without authentication.

Two tests guard against bugs found while writing these: a client whose security mechanism did not match the
server's could block forever sending its HELLO, and a client refused as "too many connections" (then ZAP
status 300) hung 10 s per attempt and then gave up blaming its server key, or (refused before its HELLO was
queued) never connected again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import zmq
import zmq.auth
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import SyncVectorEnv
from zmq.utils.monitor import recv_monitor_message

from gym_remote import EnvClient, JoinRefusedError, RemoteVectorEnv, protocol
from gym_remote.conformance.relay import Relay
from gym_remote.links.base import MAX_FRAMES
from gym_remote.protocol import FLAG_VALUE, Kind
from gym_remote.security import AuthorizedKeys, SecurityOptions, create_key_files
from tests.envs import make_cartpole
from tests.helpers import ThreadClient, cartpole_server, free_tcp_address, hello_frames, step_until, wait_until

CARTPOLE = gym.make("CartPole-v1")
OBS_SPACE, ACT_SPACE = CARTPOLE.observation_space, CARTPOLE.action_space
LOG = "gym_remote"

TIMEOUT = 20.0
CONNECT_TIMEOUT = 20.0
LIVENESS_TIMEOUT = 2.0
FAIL_FAST = 8.0
"""connect_timeout of clients expected to be turned away: a refusal must come well before it."""

SECRET = "correct-horse-battery-staple-8d1e4f"
FLOOD_SOURCE = "127.0.0.2"


# -- keys ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Keys:
    """Key files made with ``create_key_files``: ``all`` holds every pair, ``authorized`` the public keys
    of alice, bob and carol (mallory's key exists but is not authorized)."""

    all: Path
    authorized: Path

    @property
    def server_secret(self) -> str:
        return str(self.all / "server.key_secret")

    def public(self, name: str) -> str:
        return str(self.all / f"{name}.key")

    def secret(self, name: str) -> str:
        return str(self.all / f"{name}.key_secret")

    def client(self, name: str, server: str = "server") -> dict[str, str]:
        """EnvClient keyword arguments: ``server``'s public key, ``name``'s key pair."""
        return {"server_key": self.public(server), "client_key": self.secret(name)}

    def curve(self, name: str) -> tuple[bytes, bytes, bytes]:
        """(server public, client public, client secret) for a raw CURVE socket."""
        server_public, _ = zmq.auth.load_certificate(self.public("server"))
        public, secret = zmq.auth.load_certificate(self.secret(name))
        return server_public, public, secret


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Keys:
    root = tmp_path_factory.mktemp("keys")
    every, authorized = root / "all", root / "authorized"
    for name in ("server", "alice", "bob", "carol", "mallory"):
        public, secret = create_key_files(name, every)
        assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    authorized.mkdir()
    for name in ("alice", "bob", "carol"):
        shutil.copy(every / f"{name}.key", authorized)
    return Keys(every, authorized)


# -- servers, clients, twins -----------------------------------------------------------------------


def curve_server(stack: contextlib.ExitStack, keys: Keys, num_envs: int, **kwargs: Any) -> RemoteVectorEnv:
    kwargs.update(server_key=keys.server_secret, authorized_keys=str(keys.authorized))
    return cartpole_server(stack, num_envs, **kwargs)


def start_client(stack: contextlib.ExitStack, address: str, num_envs: int, name: str, **kwargs: Any) -> ThreadClient:
    kwargs.setdefault("liveness_timeout", LIVENESS_TIMEOUT)
    kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT)
    client = ThreadClient(address, [make_cartpole] * num_envs, name=name, **kwargs)
    stack.callback(client.stop)
    return client


def failing_client(stack: contextlib.ExitStack, address: str, name: str, **kwargs: Any) -> ThreadClient:
    """A client expected to be turned away: it does not wait in line, and gives up after FAIL_FAST s."""
    return start_client(stack, address, 1, name, connect_timeout=FAIL_FAST, wait_for_slot=False, **kwargs)


class Twin:
    """A ``SyncVectorEnv`` stepped like the slots ``rows`` of a RemoteVectorEnv reset with ``seed``."""

    def __init__(self, stack: contextlib.ExitStack, rows: list[int], seed: int) -> None:
        self.rows = list(rows)
        self.checked = list(rows)
        self.sync = SyncVectorEnv([make_cartpole] * len(self.rows))
        stack.callback(self.sync.close)
        self.reset_result = self.sync.reset(seed=[seed + row for row in self.rows])
        self.rng = np.random.default_rng(seed)
        self.steps = 0

    def reset(self, envs: RemoteVectorEnv, seed: int) -> None:
        obs, infos = envs.reset(seed=seed)
        if self.rows == list(range(envs.num_envs)):
            assert data_equivalence((obs, infos), self.reset_result, exact=True)
        else:
            assert data_equivalence(obs[self.rows], self.reset_result[0], exact=True)

    def forget(self, rows: list[int]) -> None:
        """Stop comparing ``rows`` (their client left); the twin still steps their envs."""
        self.checked = [row for row in self.checked if row not in rows]

    def step(self, envs: RemoteVectorEnv) -> tuple:
        """One step of ``envs`` with random actions; the checked rows must equal the twin's."""
        actions = self.rng.integers(0, 2, size=envs.num_envs)
        result = envs.step(actions)
        expected = self.sync.step(actions[self.rows])
        self.steps += 1
        if self.checked == list(range(envs.num_envs)):
            assert data_equivalence(result, expected, exact=True), f"step {self.steps}: {result} != {expected}"
            return result
        positions = [self.rows.index(row) for row in self.checked]
        for got, want, what in zip(result[:4], expected[:4], ("obs", "rewards", "terminations", "truncations")):
            assert data_equivalence(got[self.checked], want[positions], exact=True), f"rows {self.checked}: {what}"
        for key, value in result[4].items():
            assert key in ("client_lost", "_client_lost"), result[4]
            assert not value[self.checked].any(), result[4]
        return result

    def run(self, envs: RemoteVectorEnv, count: int) -> None:
        for _ in range(count):
            self.step(envs)

    def step_for(self, envs: RemoteVectorEnv, seconds: float) -> None:
        """Step (checking every step) for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.step(envs)
            time.sleep(0.002)


def keys_in_use(envs: RemoteVectorEnv) -> list[str]:
    return [row.get("key") for row in envs.stats()]


def clients_in_use(envs: RemoteVectorEnv) -> list[str]:
    return [row.get("client") for row in envs.stats()]


def denied(envs: RemoteVectorEnv, reason: str) -> int:
    return envs.server_stats()["handshakes_denied"].get(reason, 0)


def refusal_of(client: ThreadClient) -> JoinRefusedError:
    assert isinstance(client.error, JoinRefusedError), f"{client.client.name}: {client.error!r}"
    return client.error


# -- raw peers --------------------------------------------------------------------------------------


def from_source(address: str, source: str) -> str:
    """``address`` (tcp on 127.0.0.1) connected to from the local address ``source`` (libzmq's src;dst)."""
    host, port = address[len("tcp://") :].rsplit(":", 1)
    return f"tcp://{source}:0;{host}:{port}"


@dataclass
class Reply:
    kind: int
    value: Any


class RawPeer:
    """A raw ZeroMQ DEALER in the test process: plaintext, or CURVE with ``curve=(server, public, secret)``.

    Its socket monitor keeps every connection event (:meth:`events`), so a test can see a connection
    succeed its handshake, fail it, or be cut off.
    """

    def __init__(
        self,
        address: str,
        *,
        curve: tuple[bytes, bytes, bytes] | None = None,
        source: str | None = None,
        reconnect: bool = True,
        context: zmq.Context | None = None,
    ) -> None:
        self.own_context = context is None
        self.context = zmq.Context() if context is None else context
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        self.session = uuid.uuid4().hex
        sock.setsockopt(zmq.ROUTING_ID, self.session.encode())
        if curve is not None:
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve
        if not reconnect:
            sock.setsockopt(zmq.RECONNECT_IVL, -1)
        # libzmq drops a DEALER's queue when its handshake fails for good: a send would then block forever
        sock.setsockopt(zmq.SNDTIMEO, 5000)
        self.monitor = sock.get_monitor_socket()
        sock.connect(address if source is None else from_source(address, source))
        self.socket = sock
        self.seen: list[tuple[zmq.Event, int]] = []

    def send(self, frames: list[Any]) -> None:
        self.socket.send_multipart(frames)

    def try_send(self, frames: list[Any]) -> bool:
        """Send, or return False if the message cannot even be queued (no connection can take it)."""
        try:
            self.socket.send_multipart(frames)
            return True
        except zmq.Again:
            return False

    def recv(self, timeout: float = 0.0) -> Reply | None:
        if not self.socket.poll(int(timeout * 1000)):
            return None
        frames = self.socket.recv_multipart()
        header = protocol.parse_header(frames[0])
        value = protocol.read_value(frames[1:]) if header.flags & FLAG_VALUE else None
        return Reply(header.kind, value)

    def events(self) -> list[zmq.Event]:
        """Every connection event so far."""
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            self.seen.append((event["event"], event["value"]))
        return [event for event, _ in self.seen]

    def auth_failures(self) -> list[int]:
        """The ZAP statuses of the handshakes the server turned down (HANDSHAKE_FAILED_AUTH events)."""
        self.events()
        return [int(value) for event, value in self.seen if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH]

    def close(self) -> None:
        if not self.socket.closed:
            self.socket.disable_monitor()
            self.monitor.close(linger=0)
            self.socket.close(linger=0)
        if self.own_context:
            self.context.term()


def raw_peer(stack: contextlib.ExitStack, address: str, **kwargs: Any) -> RawPeer:
    peer = RawPeer(address, **kwargs)
    stack.callback(peer.close)
    return peer


def reply_while_stepping(envs: RemoteVectorEnv, twin: Twin, peer: RawPeer, timeout: float = 10.0) -> Reply:
    """Step (the server reads messages while it steps) until ``peer`` gets a reply."""
    replies: list[Reply] = []

    def got_reply() -> bool:
        reply = peer.recv()
        if reply is not None:
            replies.append(reply)
        return bool(replies)

    step_until(envs, got_reply, timeout, "a reply to the raw peer", step=lambda: twin.step(envs))
    return replies[0]


# =====================================================================================================
# 1. CURVE with key files
# =====================================================================================================


def test_curve_keys_let_in_the_authorized_client_and_nobody_else(keys, stack, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    envs = curve_server(stack, keys, 2)
    stats = envs.server_stats()
    assert stats["security"] == "CURVE (keys)" and stats["address"] == envs.address
    # intruders start before the authorized client: free slots are there for the taking
    started = time.monotonic()
    intruders = {
        "plaintext": failing_client(stack, envs.address, "plaintext"),
        "unauthorized": failing_client(stack, envs.address, "unauthorized", **keys.client("mallory")),
        "wrong server key": failing_client(stack, envs.address, "wrong-server-key", **keys.client("alice", "bob")),
    }
    alice = start_client(stack, envs.address, 2, "alice", **keys.client("alice"))
    twin = Twin(stack, [0, 1], seed=5)
    twin.reset(envs, seed=5)
    assert clients_in_use(envs) == ["alice", "alice"] and keys_in_use(envs) == ["alice", "alice"]

    took: dict[str, float] = {}

    def all_turned_away() -> bool:
        for name, client in intruders.items():
            if client.done and name not in took:
                took[name] = time.monotonic() - started
        return len(took) == len(intruders)

    step_until(envs, all_turned_away, FAIL_FAST + 5, "the intruders to give up", step=lambda: twin.step(envs))
    codes = {name: refusal_of(client).code for name, client in intruders.items()}
    assert codes == {"plaintext": "handshake", "unauthorized": "unauthorized", "wrong server key": "handshake"}
    assert "authentication" in str(intruders["plaintext"].error)  # the mismatch, or 3 cut-off handshakes
    assert "authorized_keys" in str(intruders["unauthorized"].error)
    assert "server_key" in str(intruders["wrong server key"].error)
    assert all(seconds < 5.0 for seconds in took.values()), took
    twin.run(envs, 20)
    # the intruders never got past the gate: no slot, no place in line, no HELLO refused
    stats = envs.server_stats()
    assert stats["handshakes_denied"].get("key not authorized", 0) >= 1, stats
    assert stats["clients"] == 1 and stats["waiting"] == 0 and stats["recent_refusals"] == [], stats
    assert clients_in_use(envs) == ["alice", "alice"] and keys_in_use(envs) == ["alice", "alice"]
    assert [row["address"] for row in envs.stats()] == ["127.0.0.1", "127.0.0.1"]
    assert alice.error is None and not alice.done


def test_a_plaintext_hello_gets_no_reply_from_a_curve_server(keys, stack, caplog):
    """A raw plaintext DEALER's HELLO never reaches the protocol; the same HELLO over CURVE with an
    authorized key does (control: it is answered, REFUSE 'full')."""
    envs = curve_server(stack, keys, 1)
    start_client(stack, envs.address, 1, "alice", **keys.client("alice"))
    twin = Twin(stack, [0], seed=6)
    twin.reset(envs, seed=6)
    before = envs.server_stats()
    caplog.set_level(logging.INFO, logger=LOG)
    caplog.clear()
    plain = raw_peer(stack, envs.address)
    plain.try_send(hello_frames(plain.session, 1))  # queued right away, unless the handshake failed already
    twin.step_for(envs, 1.5)
    assert plain.recv(0.2) is None, "a plaintext peer got an answer from a CURVE server"
    assert zmq.EVENT_HANDSHAKE_SUCCEEDED not in plain.events()
    failed = {zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL}
    assert failed.intersection(plain.events()), plain.events()
    after = envs.server_stats()
    assert after["recent_refusals"] == [] and after["clients"] == 1 and after["waiting"] == 0, after
    assert after["handshakes_accepted"] == before["handshakes_accepted"], (before, after)
    server_records = [record.getMessage() for record in caplog.records if record.name == "gym_remote.server"]
    assert server_records == [], server_records
    # control: the same HELLO from an authorized CURVE peer reaches the server and is answered
    authorized = raw_peer(stack, envs.address, curve=keys.curve("bob"))
    authorized.send(hello_frames(authorized.session, 1))
    reply = reply_while_stepping(envs, twin, authorized)
    assert reply.kind == Kind.REFUSE and reply.value["code"] == "full", reply
    assert envs.server_stats()["recent_refusals"], "the control HELLO was not refused"
    assert zmq.EVENT_HANDSHAKE_SUCCEEDED in authorized.events()
    assert clients_in_use(envs) == ["alice"]


def test_a_key_added_to_the_authorized_directory_lets_its_client_in(keys, stack, tmp_path):
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    shutil.copy(keys.public("alice"), authorized)
    envs = cartpole_server(stack, 2, server_key=keys.server_secret, authorized_keys=str(authorized))
    start_client(stack, envs.address, 1, "alice", **keys.client("alice"))
    early = failing_client(stack, envs.address, "carol-early", **keys.client("carol"))
    early.join(FAIL_FAST + 5)
    assert refusal_of(early).code == "unauthorized"
    denied_at = time.monotonic()
    assert denied(envs, "key not authorized") == 1
    shutil.copy(keys.public("carol"), authorized)
    time.sleep(max(0.0, AuthorizedKeys.RESCAN_SECONDS + 0.2 - (time.monotonic() - denied_at)))
    carol = start_client(stack, envs.address, 1, "carol", **keys.client("carol"))
    twin = Twin(stack, [0, 1], seed=7)
    twin.reset(envs, seed=7)
    assert sorted(clients_in_use(envs)) == ["alice", "carol"] and sorted(keys_in_use(envs)) == ["alice", "carol"]
    twin.run(envs, 20)
    assert carol.error is None and denied(envs, "key not authorized") == 1


# =====================================================================================================
# 2. encryption is real
# =====================================================================================================


@pytest.mark.parametrize("mode", ["plaintext", "keys", "secret"])
def test_a_relay_between_client_and_server_sees_only_ciphertext(mode, keys, stack):
    name = "zebra-client-123"
    server_security: dict[str, Any] = {
        "plaintext": {},
        "keys": {"server_key": keys.server_secret, "authorized_keys": str(keys.authorized)},
        "secret": {"secret": SECRET},
    }[mode]
    client_security = {"plaintext": {}, "keys": keys.client("alice"), "secret": {"secret": SECRET}}[mode]
    envs = cartpole_server(stack, 1, **server_security)
    relay = Relay.to(envs.address, record=True)
    stack.callback(relay.close)
    client = start_client(stack, relay.endpoint, 1, name, **client_security)
    twin = Twin(stack, [0], seed=8)
    twin.reset(envs, seed=8)
    twin.run(envs, 30)
    assert clients_in_use(envs) == [name]
    assert keys_in_use(envs) == [{"plaintext": "", "keys": "alice", "secret": "secret"}[mode]]
    envs.close()
    client.join(10)
    relay.close()
    assert client.error is None and relay.connections >= 1
    recorded = bytes(relay.to_server) + bytes(relay.to_client)
    assert len(relay.to_server) > 1000 and len(relay.to_client) > 1000, (len(relay.to_server), len(relay.to_client))
    readable = {
        "client name": name.encode(),
        "Box space": b'"Box"',
        "Discrete space": b'"Discrete"',
        "metadata": b"render_fps",
        "first observation": twin.reset_result[0][0].tobytes(),
    }
    seen = sorted(what for what, marker in readable.items() if marker in recorded)
    if mode == "plaintext":  # the control: without CURVE all of it is there to read
        assert seen == sorted(readable), seen
    else:
        assert seen == [], f"readable on the wire with {mode}: {seen}"
        for never in (b"CartPole", b"zebra", SECRET.encode(), b"gym_remote"):
            assert never not in recorded, never


# =====================================================================================================
# 3. shared secrets
# =====================================================================================================


def test_shared_secret_lets_in_the_right_secret_only(stack, caplog):
    envs = cartpole_server(stack, 1, secret=SECRET)
    assert envs.server_stats()["security"] == "CURVE (secret)"
    wrong = failing_client(stack, envs.address, "wrong-secret", secret=SECRET + "x")
    plaintext = failing_client(stack, envs.address, "no-secret")
    right = start_client(stack, envs.address, 1, "right-secret", secret=SECRET)
    twin = Twin(stack, [0], seed=9)
    twin.reset(envs, seed=9)
    assert keys_in_use(envs) == ["secret"] and clients_in_use(envs) == ["right-secret"]
    step_until(envs, lambda: wrong.done and plaintext.done, FAIL_FAST + 5, "the refusals", step=lambda: twin.step(envs))
    assert refusal_of(wrong).code == "handshake" and "secret" in str(wrong.error)
    assert refusal_of(plaintext).code == "handshake" and "authentication" in str(plaintext.error)
    twin.run(envs, 10)
    stats = envs.server_stats()
    assert stats["clients"] == 1 and stats["recent_refusals"] == [], stats
    assert right.error is None and not right.done


def test_secret_and_keys_at_once_are_refused_on_both_sides(keys):
    with pytest.raises(ValueError, match="not both"):
        RemoteVectorEnv(num_envs=1, server_key=keys.server_secret, authorized_keys=str(keys.authorized), secret=SECRET)
    with pytest.raises(ValueError, match="not both"):
        EnvClient("tcp://127.0.0.1:1", [make_cartpole], secret=SECRET, **keys.client("alice"))
    with pytest.raises(ValueError, match="not both"):
        EnvClient("tcp://127.0.0.1:1", [make_cartpole], secret=SECRET, client_key=keys.secret("alice"))
    with pytest.raises(ValueError, match="needs both"):
        EnvClient("tcp://127.0.0.1:1", [make_cartpole], server_key=keys.public("server"))
    with pytest.raises(ValueError, match="authorized_keys"):
        RemoteVectorEnv(num_envs=1, server_key=keys.server_secret)


def test_a_short_secret_warns_and_a_long_one_does_not():
    with pytest.warns(UserWarning, match="only 15 characters"):
        envs = RemoteVectorEnv(num_envs=1, secret="a" * 15)
    envs.close()
    with pytest.warns(UserWarning, match="only 5 characters"):
        EnvClient("tcp://127.0.0.1:1", [make_cartpole], secret="short")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RemoteVectorEnv(num_envs=1, secret="b" * 16).close()
        EnvClient("tcp://127.0.0.1:1", [make_cartpole], secret="b" * 16)


MISMATCH_CLIENTS = r"""
import json, os, sys, threading, time
import gymnasium as gym
from gym_remote import EnvClient, JoinRefusedError

def slow_cartpole():
    time.sleep(0.5)  # the client's socket is connected meanwhile: its handshake fails before its HELLO is sent
    return gym.make("CartPole-v1")

curve_address, plain_address, secret, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
outcomes = {}

def run(name, address, **security):
    try:
        EnvClient(address, [slow_cartpole], name=name, connect_timeout=3, wait_for_slot=False, **security).run()
        outcomes[name] = "joined"
    except JoinRefusedError as error:
        outcomes[name] = "refused: " + error.code
    except Exception as error:
        outcomes[name] = type(error).__name__ + ": " + str(error)

threads = {}
for index in range(count):
    threads[f"plaintext-{index}"] = threading.Thread(
        target=run, args=(f"plaintext-{index}", curve_address), daemon=True
    )
    threads[f"curve-{index}"] = threading.Thread(
        target=run, args=(f"curve-{index}", plain_address), kwargs={"secret": secret}, daemon=True
    )
for thread in threads.values():
    thread.start()
deadline = time.monotonic() + 6
for thread in threads.values():
    thread.join(max(0.0, deadline - time.monotonic()))
print(json.dumps({name: outcomes.get(name, "still running") for name in threads}), flush=True)
os._exit(0)  # threads stuck in a send cannot hold the process
"""


def test_clients_whose_security_does_not_match_the_servers_are_refused_promptly(stack, reaper):
    """Plaintext clients on a CURVE server and CURVE clients on a plain server stop with code "handshake".

    Each client's envs take 0.5 s to make, so its handshake has failed before it sends HELLO. libzmq then
    drops the DEALER's queue: a blocking send of the HELLO used to hang forever (ignoring connect_timeout and
    stop()), for about half of such clients; 8 clients each way make a regression all but certain to show.
    The clients run in a subprocess (ended by pid), so that a hung one cannot outlive the test."""
    curve = cartpole_server(stack, 1, secret=SECRET)
    plain = cartpole_server(stack, 1)
    count = 8
    process = reaper.popen(
        [sys.executable, "-c", MISMATCH_CLIENTS, curve.address, plain.address, SECRET, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = process.communicate(timeout=40)
    lines = out.strip().splitlines()
    assert lines, f"the client process printed no outcomes\nstderr:\n{err}"
    outcomes = json.loads(lines[-1])
    stuck = sorted(name for name, outcome in outcomes.items() if outcome == "still running")
    assert stuck == [], f"{len(stuck)} of {2 * count} clients still running 6 s after starting: {stuck}"
    assert outcomes == dict.fromkeys(outcomes, "refused: handshake") and len(outcomes) == 2 * count, outcomes
    assert curve.server_stats()["clients"] == plain.server_stats()["clients"] == 0


# =====================================================================================================
# 4. private local servers
# =====================================================================================================


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"num_clients": 2}, id="ipc"),
        pytest.param({"num_clients": 1, "bind": "tcp://127.0.0.1:*"}, id="tcp"),
        pytest.param({"num_clients": 2, "secret": SECRET}, id="secret"),
    ],
)
def test_a_server_of_local_clients_refuses_strangers(options, stack):
    envs = RemoteVectorEnv(
        [make_cartpole] * 2,
        connect_timeout=CONNECT_TIMEOUT,
        timeout=TIMEOUT,
        liveness_timeout=LIVENESS_TIMEOUT,
        **options,
    )
    stack.callback(envs.close)
    assert stat.S_IMODE(os.stat(envs._launcher.workdir).st_mode) == 0o700
    secret = options.get("secret")
    assert envs.server_stats()["security"] == ("CURVE (secret)" if secret else "none")
    local_pids = {row["pid"] for row in envs.stats()}
    assert all(row["local"] for row in envs.stats()) and os.getpid() not in local_pids
    assert keys_in_use(envs) == (["local", "local"] if secret else ["", ""])
    twin = Twin(stack, [0, 1], seed=10)
    twin.reset(envs, seed=10)
    stranger = failing_client(stack, envs.address, "stranger", **({"secret": secret} if secret else {}))
    plaintext = failing_client(stack, envs.address, "plaintext-stranger") if secret else None
    step_until(
        envs,
        lambda: stranger.done and (plaintext is None or plaintext.done),
        FAIL_FAST + 5,
        "the strangers to be refused",
        step=lambda: twin.step(envs),
    )
    assert refusal_of(stranger).code == "private" and "local clients" in str(stranger.error)
    if plaintext is not None:
        assert refusal_of(plaintext).code == "handshake"
    twin.run(envs, 20)
    assert all(row["local"] for row in envs.stats()) and {row["pid"] for row in envs.stats()} == local_pids
    assert envs.num_clients == options["num_clients"]


# =====================================================================================================
# 5. pickles from an authorized peer
# =====================================================================================================


def pickle_trap(marker: Path) -> bytes:
    """A pickle that creates ``marker`` when unpickled."""

    class Trap:
        def __reduce__(self) -> tuple:
            return (open, (str(marker), "w"))

    return pickle.dumps(Trap())


def test_pickles_in_a_hello_from_an_authorized_curve_peer_are_never_unpickled(keys, stack, tmp_path):
    control = tmp_path / "control"
    pickle.loads(pickle_trap(control)).close()
    assert control.exists(), "the trap does not work"
    marker = tmp_path / "unpickled"
    trap = pickle_trap(marker)
    envs = curve_server(stack, keys, 1)  # allow_pickle=None: remote clients are not trusted, keys or not
    start_client(stack, envs.address, 1, "alice", **keys.client("alice"))
    twin = Twin(stack, [0], seed=11)
    twin.reset(envs, seed=11)
    header = protocol.pack_header(Kind.HELLO, count=1, flags=FLAG_VALUE)
    honest = hello_frames("s", 1, allow_pickle=True, name="__TRAP__")
    field = [header, honest[1].replace(b'"__TRAP__"', f'["p", {len(honest) - 2}]'.encode()), *honest[2:], trap]
    messages = {
        "body": [header, b'["p", 0]', trap],
        "field": field,
        "space": hello_frames("s", 1, allow_pickle=True, observation_spaces=[{"space": "pickle", "data": trap}]),
    }
    for what, frames in messages.items():
        peer = raw_peer(stack, envs.address, curve=keys.curve("bob"))
        peer.send(frames)
        reply = reply_while_stepping(envs, twin, peer)
        assert reply.kind == Kind.REFUSE and reply.value["code"] == "invalid", (what, reply)
        assert "pickle" in reply.value["reason"], (what, reply.value)
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED in peer.events()
    assert not marker.exists(), "the server unpickled an authorized peer's pickle"
    twin.run(envs, 10)
    assert clients_in_use(envs) == ["alice"]


# =====================================================================================================
# 6. limits
# =====================================================================================================


class Flood:
    """Connections from FLOOD_SOURCE: idle raw TCP sockets and CURVE DEALERs (unauthorized random keys)."""

    def __init__(self, address: str, server_public: bytes) -> None:
        self.address = address
        self.port = int(address.rsplit(":", 1)[1])
        self.server_public = server_public
        self.context = zmq.Context()
        self.raw: list[socket.socket] = []
        self.dealers: list[RawPeer] = []
        self.attempts = 0

    def open_raw(self, count: int) -> None:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((FLOOD_SOURCE, 0))
            sock.settimeout(5)
            sock.connect(("127.0.0.1", self.port))
            self.raw.append(sock)

    def open_dealers(self, count: int) -> list[RawPeer]:
        opened = []
        for _ in range(count):
            public, secret = zmq.curve_keypair()
            opened.append(
                RawPeer(
                    self.address,
                    curve=(self.server_public, public, secret),
                    source=FLOOD_SOURCE,
                    reconnect=False,
                    context=self.context,
                )
            )
            self.attempts += 1
        self.dealers += opened
        return opened

    def close_dealers(self, dealers: list[RawPeer]) -> None:
        for dealer in dealers:
            dealer.close()
            self.dealers.remove(dealer)

    def close(self) -> None:
        for sock in self.raw:
            sock.close()
        self.raw.clear()
        self.close_dealers(list(self.dealers))
        self.context.term()


def test_connection_flood_is_refused_and_joined_clients_keep_stepping(keys, stack):
    envs = curve_server(stack, keys, 2, max_connections=8)
    start_client(stack, envs.address, 1, "alice", **keys.client("alice"))
    bob = start_client(stack, envs.address, 1, "bob", **keys.client("bob"))
    twin = Twin(stack, [0, 1], seed=12)
    twin.reset(envs, seed=12)
    assert envs.server_stats()["connections"] == 2
    flood = Flood(envs.address, keys.curve("server")[0])
    stack.callback(flood.close)
    flood.open_raw(30)
    twin.step_for(envs, 0.3)
    flood.open_dealers(30)
    step_until(envs, lambda: denied(envs, "too many connections") >= 10, 10, "refusals", step=lambda: twin.step(envs))
    stats = envs.server_stats()
    assert stats["connections"] > 8 and stats["handshakes_accepted"] == 2 and stats["clients"] == 2, stats
    assert not any(zmq.EVENT_HANDSHAKE_SUCCEEDED in dealer.events() for dealer in flood.dealers)
    # PROTOCOL.md 12.4: the refusal is "not now" (500), told to the peer, whose connection closes at once
    step_until(
        envs,
        lambda: all(dealer.auth_failures() for dealer in flood.dealers),
        5,
        "every flood DEALER to be told",
        step=lambda: twin.step(envs),
    )
    assert {status for dealer in flood.dealers for status in dealer.auth_failures()} == {500}
    step_until(
        envs,
        lambda: envs.server_stats()["connections"] == 2 + len(flood.raw),
        5,
        "the refused connections to close",
        step=lambda: twin.step(envs),
    )
    twin.step_for(envs, 0.5)
    flood.close()
    step_until(
        envs,
        lambda: envs.server_stats()["connections"] == 2,
        5,
        "the flood's connections to close",
        step=lambda: twin.step(envs),
    )
    # a new honest client gets in: it takes bob's slot once bob leaves
    carol = start_client(stack, envs.address, 1, "carol", **keys.client("carol"))
    step_until(envs, lambda: envs.server_stats()["waiting"] == 1, 10, "carol in line", step=lambda: twin.step(envs))
    bob_slot = clients_in_use(envs).index("bob")  # alice and bob joined at once: either may hold slot 0
    bob.stop()
    twin.forget([bob_slot])
    step_until(
        envs,
        lambda: clients_in_use(envs)[bob_slot] == "carol",
        10,
        f"carol to take slot {bob_slot}",
        step=lambda: twin.step(envs),
    )
    twin.run(envs, 10)
    assert sorted(keys_in_use(envs)) == ["alice", "carol"] and carol.error is None


def slow_cartpole() -> gym.Env:
    """CartPole that takes 0.5 s to make: a client's socket connects (and is answered) meanwhile."""
    time.sleep(0.5)
    return gym.make("CartPole-v1")


def test_clients_turned_away_for_too_many_connections_get_in_soon_after_the_flood(keys, stack):
    """Clients that connect during a 3 s connection flood are refused and try again (PROTOCOL.md 12.4: 0.5-2 s
    later): none gives up (their keys are right), and once the flood is gone all get in within a few seconds.

    Each client's envs take 0.5 s to make, so it is refused before it sends its HELLO. Regressions this
    catches: with ZAP status 300 (the gatekeeper's first version) libzmq sent the peer nothing and held the
    connection until the 10 s handshake timer, and the client, counting cut-off handshakes, stopped with
    JoinRefusedError(code="handshake") asking whether its server_key was right; and a client refused before
    its HELLO was queued kept retrying the send on its dead socket (libzmq had dropped its queue) until
    connect_timeout, never connecting again."""
    count = 8
    envs = curve_server(stack, keys, count, max_connections=count + 2)
    flood = Flood(envs.address, keys.curve("server")[0])
    stack.callback(flood.close)
    flood.open_raw(count + 3)
    wait_until(lambda: envs.server_stats()["connections"] == count + 3, 5, "the flood's connections")
    clients = [
        ThreadClient(
            envs.address,
            [slow_cartpole],
            name=f"client-{index}",
            connect_timeout=12,
            liveness_timeout=LIVENESS_TIMEOUT,
            **keys.client("alice"),
        )
        for index in range(count)
    ]
    for client in clients:
        stack.callback(client.stop)
    wait_until(lambda: denied(envs, "too many connections") >= count, 5, "every client to be turned away")
    time.sleep(3.0)  # the server stays busy for a while
    flood.close()
    wait_until(lambda: envs.server_stats()["connections"] <= count, 5, "the flood's connections to close")
    gave_up = {client.client.name: repr(client.error) for client in clients if client.done}
    assert gave_up == {}, f"clients gave up while the server was busy: {gave_up}"
    assert denied(envs, "too many connections") >= 2 * count, "the clients did not try again during the flood"
    deadline = time.monotonic() + 4
    while envs.server_stats()["handshakes_accepted"] < count and time.monotonic() < deadline:
        time.sleep(0.05)
    accepted = envs.server_stats()["handshakes_accepted"]
    assert accepted == count, f"{count - accepted} of {count} clients not in 4 s after the flood ended"
    twin = Twin(stack, list(range(count)), seed=13)
    twin.reset(envs, seed=13)
    twin.run(envs, 5)
    assert not any(client.done for client in clients)


def test_a_plaintext_server_has_the_same_limits(stack):
    """The gatekeeper is asked about plaintext (NULL) connections too (its ZAP domain): beyond
    max_connections, a plaintext DEALER's handshake is refused "for now" as well."""
    envs = cartpole_server(stack, 1, max_connections=2)
    assert envs.server_stats()["security"] == "none"
    flood = Flood(envs.address, b"")
    stack.callback(flood.close)
    flood.open_raw(3)
    wait_until(lambda: envs.server_stats()["connections"] == 3, 5, "the flood's connections")
    refused = raw_peer(stack, envs.address, source=FLOOD_SOURCE, reconnect=False)
    wait_until(lambda: refused.auth_failures(), 5, "the plaintext handshake to be refused")
    assert refused.auth_failures() == [500] and denied(envs, "too many connections") == 1
    assert zmq.EVENT_HANDSHAKE_SUCCEEDED not in refused.events()
    flood.close()
    wait_until(lambda: envs.server_stats()["connections"] == 0, 5, "the flood's connections to close")
    client = start_client(stack, envs.address, 1, "plain")
    twin = Twin(stack, [0], seed=17)
    twin.reset(envs, seed=17)
    twin.run(envs, 10)
    assert keys_in_use(envs) == [""] and envs.server_stats()["handshakes_accepted"] == 1 and client.error is None


def test_handshake_rate_flood_is_refused_and_an_honest_client_joins_meanwhile(keys, stack):
    envs = curve_server(stack, keys, 2)
    start_client(stack, envs.address, 1, "alice", **keys.client("alice"))
    wait_until(lambda: envs.server_stats()["handshakes_accepted"] == 1, 10, "alice's handshake")
    flood = Flood(envs.address, keys.curve("server")[0])
    stack.callback(flood.close)
    running = threading.Event()
    stop = threading.Event()
    failures: list[BaseException] = []

    def connect_and_close() -> None:
        """Batches of 10 handshakes every ~20 ms (each closed right after), until stopped."""
        try:
            running.set()
            deadline = time.monotonic() + 30
            while not stop.is_set() and time.monotonic() < deadline and flood.attempts < 3000:
                batch = flood.open_dealers(10)
                time.sleep(0.02)
                flood.close_dealers(batch)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failures.append(error)
        finally:
            running.clear()

    thread = threading.Thread(target=connect_and_close, daemon=True)
    thread.start()
    try:
        wait_until(lambda: denied(envs, "handshake rate exceeded") > 0, 10, "the rate limit to bite")
        bob = start_client(stack, envs.address, 1, "bob", **keys.client("bob"))
        twin = Twin(stack, [0, 1], seed=14)
        twin.reset(envs, seed=14)
        twin.run(envs, 20)
        assert running.is_set(), "the flood ended before the honest client joined"
        wait_until(lambda: flood.attempts >= 150, 10, "150 flood handshakes")
    finally:
        stop.set()
        thread.join(10)
    assert not failures, failures
    stats = envs.server_stats()
    assert stats["handshakes_denied"]["handshake rate exceeded"] > 0, stats
    assert stats["handshakes_accepted"] == 2 and stats["clients"] == 2, stats
    assert (
        sorted(keys_in_use(envs)) == ["alice", "bob"] and [row["address"] for row in envs.stats()] == ["127.0.0.1"] * 2
    )
    twin.run(envs, 10)
    assert bob.error is None


def test_an_oversized_frame_from_an_authorized_peer_cuts_it_off(keys, stack):
    limit = 1 << 20
    envs = curve_server(stack, keys, 1, max_message_bytes=limit)
    start_client(stack, envs.address, 1, "alice", **keys.client("alice"))
    twin = Twin(stack, [0], seed=15)
    twin.reset(envs, seed=15)
    peer = raw_peer(stack, envs.address, curve=keys.curve("bob"))
    wait_until(lambda: zmq.EVENT_HANDSHAKE_SUCCEEDED in peer.events(), 5, "the peer's handshake")
    peer.send([protocol.pack_header(Kind.HELLO, count=1, flags=FLAG_VALUE), b"{" + b" " * (2 * limit) + b"}"])
    step_until(
        envs,
        lambda: zmq.EVENT_DISCONNECTED in peer.events(),
        10,
        "the peer to be cut off",
        step=lambda: twin.step(envs),
    )
    twin.step_for(envs, 0.5)
    assert peer.recv(0.1) is None, "the oversized HELLO was answered"
    # the peer reconnects; a small message is answered as usual
    wait_until(lambda: peer.events().count(zmq.EVENT_HANDSHAKE_SUCCEEDED) >= 2, 10, "the peer to reconnect")
    peer.send(hello_frames(peer.session, 1))
    reply = reply_while_stepping(envs, twin, peer)
    assert reply.kind == Kind.REFUSE and reply.value["code"] == "full", reply
    twin.run(envs, 10)
    assert clients_in_use(envs) == ["alice"]


def test_a_hello_with_too_many_frames_is_refused_and_the_server_keeps_serving(keys, stack):
    envs = curve_server(stack, keys, 1)
    start_client(stack, envs.address, 1, "alice", **keys.client("alice"))
    twin = Twin(stack, [0], seed=16)
    twin.reset(envs, seed=16)
    peer = raw_peer(stack, envs.address, curve=keys.curve("bob"))
    frames = hello_frames(peer.session, 1)
    peer.send([*frames, *[b""] * (70_000 - len(frames))])
    assert 70_000 > MAX_FRAMES + 1
    reply = reply_while_stepping(envs, twin, peer, timeout=20)
    assert reply.kind == Kind.REFUSE and reply.value["code"] == "invalid", reply
    assert "frames" in reply.value["reason"] and str(MAX_FRAMES) in reply.value["reason"], reply.value
    # the same peer is still heard: the rest of its long message was discarded, not read as new messages
    peer.send(hello_frames(peer.session, 1))
    reply = reply_while_stepping(envs, twin, peer)
    assert reply.kind == Kind.REFUSE and reply.value["code"] == "full", reply
    assert peer.recv(0.3) is None
    twin.run(envs, 20)
    assert clients_in_use(envs) == ["alice"]


# =====================================================================================================
# 7. the bind check
# =====================================================================================================


def test_a_non_loopback_bind_needs_authentication(keys):
    port = int(free_tcp_address().rsplit(":", 1)[1])
    for bind in (f"tcp://0.0.0.0:{port}", f"tcp://*:{port}"):
        with pytest.raises(ValueError, match="reachable from other machines") as raised:
            RemoteVectorEnv(num_envs=1, bind=bind)
        assert bind in str(raised.value)
        with socket.create_server(("0.0.0.0", port)):  # nothing was bound (or left bound) there
            pass
    # past the check: with insecure=True, a secret or keys, the bind itself is tried (and fails here, as
    # 192.0.2.1 is a documentation address that is not on this machine)
    for options in (
        {"insecure": True},
        {"secret": SECRET},
        {"server_key": keys.server_secret, "authorized_keys": str(keys.authorized)},
    ):
        with pytest.raises(OSError, match="cannot bind"):
            RemoteVectorEnv(num_envs=1, bind="tcp://192.0.2.1:5555", **options)


def test_security_options_in_one_object_act_as_the_keyword_arguments(stack):
    envs = cartpole_server(stack, 1, security=SecurityOptions(secret=SECRET, max_connections=3))
    assert envs.security == SecurityOptions(secret=SECRET, max_connections=3)
    stats = envs.server_stats()
    assert stats["security"] == "CURVE (secret)", stats
    right = start_client(stack, envs.address, 1, "right-secret", secret=SECRET)
    wrong = failing_client(stack, envs.address, "wrong-secret", secret=SECRET + "x")
    twin = Twin(stack, [0], seed=4)
    twin.reset(envs, seed=4)
    twin.run(envs, 5)
    step_until(envs, lambda: wrong.done, FAIL_FAST + 5, "the refusal", step=lambda: twin.step(envs))
    assert refusal_of(wrong).code == "handshake" and right.error is None
    keywords = cartpole_server(stack, 1, secret=SECRET, max_connections=3)
    assert keywords.security == envs.security


def test_security_options_and_security_keywords_at_once_are_refused():
    with pytest.raises(ValueError, match="not both"):
        RemoteVectorEnv(num_envs=1, security=SecurityOptions(secret=SECRET), insecure=True)
    with pytest.raises(ValueError, match="not both"):
        RemoteVectorEnv(num_envs=1, security=SecurityOptions(), allow_pickle=False)
