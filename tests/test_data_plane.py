"""The same-host data plane end to end: who is served over it, what happens when either side dies, and
peers that try to misuse it. Real processes, real sockets; the results are compared with SyncVectorEnv.

The rest of the suite runs over whichever plane is the default (on, unless ``GYM_REMOTE_DATA_PLANE=off``);
``.ci/run`` runs it both ways.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest
import zmq
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gym_remote import RemoteVectorEnv, channel, protocol
from gym_remote.protocol import Kind
from tests.conftest import subprocess_env
from tests.envs import make_cartpole
from tests.envs.faults import make_counter
from tests.helpers import (
    ThreadClient,
    assert_same_steps,
    cartpole_server,
    cli_client,
    hello_frames,
    pid_alive,
    raw_header,
    wait_until,
)

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not channel.AVAILABLE, reason="the data plane needs Linux's abstract Unix sockets"),
]

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


def planes(envs: RemoteVectorEnv) -> list[str]:
    return [row.get("plane") for row in envs.stats()]


def listening(name: bytes) -> bool:
    """Whether an abstract Unix socket of that name is open on this machine (``/proc/net/unix``)."""
    wanted = "@" + name[1:].decode()
    with open("/proc/net/unix") as table:
        return any(line.split()[-1] == wanted for line in table.readlines()[1:] if len(line.split()) >= 8)


# -- who is served over it ---------------------------------------------------------------------------


@pytest.mark.parametrize("use_plane", [True, False], ids=["uds", "zmq"])
@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
def test_local_clients_match_sync_over_either_plane(mode, use_plane):
    env_fns = [functools.partial(make_cartpole, max_episode_steps=15)] * 4
    expected = SyncVectorEnv(env_fns, autoreset_mode=mode)
    envs = RemoteVectorEnv(env_fns, num_clients=2, autoreset_mode=mode, data_plane=use_plane)
    try:
        assert planes(envs) == ["uds" if use_plane else "zmq"] * 4
        rng = np.random.default_rng(3)
        steps = 8 if mode is AutoresetMode.DISABLED else 60  # DISABLED: before any episode can end
        actions = [rng.integers(0, 2, size=4) for _ in range(steps)]
        assert_same_steps(envs, expected, actions, seed=11)
    finally:
        envs.close()
        expected.close()


def test_the_environment_variable_turns_it_off(monkeypatch):
    monkeypatch.setenv(channel.ENV_SWITCH, "off")
    with contextlib.closing(RemoteVectorEnv([make_cartpole] * 2, num_clients=1)) as envs:
        envs.reset(seed=0)
        assert planes(envs) == ["zmq", "zmq"]


def test_an_explicit_choice_wins_over_the_environment_variable(monkeypatch):
    monkeypatch.setenv(channel.ENV_SWITCH, "off")
    with contextlib.closing(RemoteVectorEnv([make_cartpole] * 2, num_clients=1, data_plane=True)) as envs:
        envs.reset(seed=0)
        assert planes(envs) == ["uds", "uds"]


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_an_external_client_on_this_host_is_served_over_it(stack, thread_clients, tmp_path, transport):
    bind = f"ipc://{tmp_path}/server" if transport == "ipc" else "tcp://127.0.0.1:*"
    envs = cartpole_server(stack, 3, bind=bind)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole] * 2, name="fast"))
    thread_clients.append(ThreadClient(envs.address, [make_cartpole], name="plain", data_plane=False))
    envs.reset(seed=0)
    by_client = {row["client"]: row["plane"] for row in envs.stats()}
    assert by_client == {"fast": "uds", "plain": "zmq"}
    for _ in range(30):
        _, _, _, _, infos = envs.step(envs.action_space.sample())
        assert not infos.get("client_lost", np.zeros(3)).any()


def test_a_cli_client_offers_it_unless_told_not_to(stack, reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=2, bind=f"ipc://{tmp_path}/server", timeout=30, connect_timeout=30)
    stack.callback(envs.close)
    args = ("--factory", "tests.envs.faults:make_counter", "--connect-timeout", "30")
    cli_client(reaper, tmp_path, "near", envs.address, *args, "--spin", "0.0001")
    cli_client(reaper, tmp_path, "forced", envs.address, *args, "--no-data-plane")
    envs.reset(seed=0)
    for _ in range(20):
        envs.step(np.zeros(2, dtype=np.int64))
    assert {row["client"]: row["plane"] for row in envs.stats()} == {"near": "uds", "forced": "zmq"}


def test_a_server_without_it_serves_everyone_over_zeromq(stack, thread_clients):
    envs = cartpole_server(stack, 2, data_plane=False)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole] * 2))
    envs.reset(seed=0)
    assert planes(envs) == ["zmq", "zmq"]
    assert not listening(channel.address_for(envs.address))


def test_the_listener_is_gone_when_the_server_closes():
    envs = RemoteVectorEnv([make_cartpole], num_clients=1)
    name = channel.address_for(envs.address)
    assert listening(name)
    envs.close()
    assert not listening(name)


# -- either side dying -------------------------------------------------------------------------------


def test_a_sigkilled_local_client_is_noticed_at_once_and_replaced():
    env_fns = [functools.partial(make_counter, max_steps=1000)] * 2
    with contextlib.closing(RemoteVectorEnv(env_fns, num_clients=2, liveness_timeout=30)) as envs:
        envs.reset(seed=0)
        victim = envs.stats()[1]["pid"]
        assert planes(envs) == ["uds", "uds"]
        os.kill(victim, signal.SIGKILL)
        started = time.monotonic()
        _, _, _, truncations, infos = envs.step(np.zeros(2, dtype=np.int64))
        assert time.monotonic() - started < 1.0  # the channel's end of file, not the 30 s liveness timeout
        assert infos["client_lost"][1] and truncations[1] and not truncations[0]
        wait_until(
            lambda: (envs.step(np.zeros(2, dtype=np.int64)), envs.stats()[1].get("pid") not in (None, victim))[1],
            30,
            "a restarted client",
        )
        assert planes(envs) == ["uds", "uds"]


LEARNER = """
import functools, json, sys, time
import numpy as np
from gym_remote import RemoteVectorEnv, channel
from tests.envs.faults import make_counter
envs = RemoteVectorEnv([functools.partial(make_counter, max_steps=10**6, step_seconds=0.05)] * 2, num_clients=2)
envs.reset(seed=0)
print(json.dumps({
    "pids": [row["pid"] for row in envs.stats()],
    "planes": [row["plane"] for row in envs.stats()],
    "workdir": envs.launcher.workdir,
    "name": channel.address_for(envs.address).hex(),
}), flush=True)
while True:
    envs.step(np.zeros(2, dtype=np.int64))
"""


def test_a_sigkilled_learner_leaves_no_socket_or_shared_memory_behind(reaper):
    shm_before = set(os.listdir("/dev/shm"))
    learner = reaper.popen([sys.executable, "-c", LEARNER], stdout=subprocess.PIPE, env=subprocess_env())
    facts = json.loads(learner.stdout.readline())
    assert facts["planes"] == ["uds", "uds"]
    name = bytes.fromhex(facts["name"])
    assert listening(name) and os.path.isdir(facts["workdir"])
    time.sleep(0.3)  # mid-step: the envs take 50 ms a step
    os.kill(learner.pid, signal.SIGKILL)
    learner.wait(10)
    wait_until(lambda: not any(pid_alive(pid) for pid in facts["pids"]), 10, "the local clients to exit")
    assert not listening(name)
    assert not os.path.exists(facts["workdir"]), os.listdir(facts["workdir"])
    assert set(os.listdir("/dev/shm")) <= shm_before


# -- peers that misuse it ----------------------------------------------------------------------------


class ChannelMember(threading.Thread):
    """A member written by hand, in a thread: it greets the server's data channel (or lets ``greeting``
    decide which token its HELLO names), then answers RESET and STEP with valid RESULTs on whichever plane
    the WELCOME chose, except that ``bad_step(seq)``, if given, answers the first STEP."""

    def __init__(self, address: str, *, token: bytes | None = None, bad_step=None, max_frame_bytes: int = 1 << 30):
        super().__init__(daemon=True)
        self.address, self.bad_step = address, bad_step
        self.session = uuid.uuid4().hex
        self.data = None
        if token is None:
            token = channel.new_token()
            self.data = channel.connect(channel.address_for(address), token, timeout=2, max_frame_bytes=max_frame_bytes)
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
            dealer.send_multipart(hello_frames(self.session, 1, data_channel={"token": self.token.hex()}))
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
                if over_channel:
                    self.data.send(reply, 5)
                else:
                    dealer.send_multipart(reply)
        except BaseException as error:  # noqa: BLE001 - kept for the test to inspect
            self.error = error
        finally:
            dealer.close(0)
            context.term()
            if self.data is not None:
                self.data.close()

    def _next(self, dealer, over_channel: bool):
        if over_channel:
            try:
                record = self.data.read_until(time.monotonic() + 0.1)
            except channel.ChannelClosed:
                self.done.set()
                return None
            return None if record is None else [bytes(frame) for frame in record.frames]
        return dealer.recv_multipart() if dealer.poll(100) else None

    def stop(self) -> None:
        self.done.set()
        self.join(5)


def test_a_channel_greeted_by_another_process_is_not_taken(stack, thread_clients):
    envs = cartpole_server(stack, 2)
    token = channel.new_token()
    greeter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); "
            "s.connect(bytes.fromhex(sys.argv[1])); s.sendall(b'GR-DATA2' + bytes.fromhex(sys.argv[2])); "
            "time.sleep(30)",
            channel.address_for(envs.address).hex(),
            token.hex(),
        ]
    )
    stack.callback(lambda: (greeter.kill(), greeter.wait(10)))
    time.sleep(0.5)  # greeted before the HELLO, as a client would
    member = ChannelMember(envs.address, token=token)  # its HELLO names this process, not the greeter
    member.start()
    stack.callback(member.stop)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole], name="honest"))
    envs.reset(seed=0)
    assert member.welcome is not None and member.welcome["data_channel"] is False
    assert {row["client"]: row["plane"] for row in envs.stats()} == {"hostile": "zmq", "honest": "uds"}
    for _ in range(5):
        _, _, _, truncations, _ = envs.step(envs.action_space.sample())
        assert not truncations.any()
    assert member.error is None, repr(member.error)


def test_an_oversized_frame_on_a_channel_loses_only_its_sender(stack, thread_clients):
    envs = cartpole_server(stack, 2, max_message_bytes=1 << 16)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole], name="honest"))

    def oversized(seq: int) -> list:
        return [raw_header(Kind.RESULT, seq=seq, count=1) + bytes(10), np.zeros(1 << 17, dtype=np.uint8)]

    member = ChannelMember(envs.address, bad_step=oversized)
    member.start()
    stack.callback(member.stop)
    envs.reset(seed=0)
    assert member.welcome["data_channel"] is True
    hostile = next(row["slot"] for row in envs.stats() if row["client"] == "hostile")
    started = time.monotonic()
    obs, _, _, truncations, infos = envs.step(envs.action_space.sample())
    assert time.monotonic() - started < 5
    assert truncations[hostile] and infos["client_lost"][hostile]
    assert not truncations[1 - hostile] and not infos["client_lost"][1 - hostile]
    assert not envs.stats()[hostile]["served"]
    wait_until(member.done.is_set, 10, "the hostile member to see its channel closed")


# -- another host ------------------------------------------------------------------------------------


@pytest.fixture
def other_host():
    """A network namespace ("another host") joined to this one by a veth pair on a private /30 with no
    default route: this side 10.213.7.1, the other 10.213.7.2. Torn down after the test."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to make a network namespace")
    name, here, there = f"gr-host-{os.getpid()}", f"grh{os.getpid() % 100000}", f"grp{os.getpid() % 100000}"
    commands = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", here, "type", "veth", "peer", "name", there],
        ["ip", "link", "set", there, "netns", name],
        ["ip", "addr", "add", "10.213.7.1/30", "dev", here],
        ["ip", "link", "set", here, "up"],
        ["ip", "netns", "exec", name, "ip", "addr", "add", "10.213.7.2/30", "dev", there],
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


def test_a_client_on_another_host_is_served_over_zeromq(stack, reaper, tmp_path, other_host):
    envs = RemoteVectorEnv(num_envs=2, bind="tcp://10.213.7.1:*", insecure=True, timeout=30, connect_timeout=30)
    stack.callback(envs.close)
    assert listening(channel.address_for(envs.address))  # the server offers it, to this host
    args = ("--factory", "tests.envs.faults:make_counter", "--connect-timeout", "30")
    remote = reaper.popen(
        [
            "ip",
            "netns",
            "exec",
            other_host,
            sys.executable,
            "-m",
            "gym_remote",
            "client",
            envs.address,
            "--name",
            "far",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    near = reaper.popen([sys.executable, "-m", "gym_remote", "client", envs.address, "--name", "near", *args])
    envs.reset(seed=0)
    for _ in range(5):
        envs.step(np.zeros(2, dtype=np.int64))
    assert {row["client"]: row["plane"] for row in envs.stats()} == {"far": "zmq", "near": "uds"}
    assert remote.poll() is None and near.poll() is None
