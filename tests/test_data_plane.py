"""The same-host data plane end to end: who is served over it, what happens when either side dies, and
peers that try to misuse it. Real processes, real sockets; the results are compared with SyncVectorEnv.

The rest of the suite runs over whichever plane is the default (on, unless ``GYM_REMOTE_DATA_PLANE=off``);
The suite runs it both ways (``--data-plane all``, the default).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space, iterate

from gym_remote import RemoteVectorEnv
from gym_remote.links import channel, shared
from gym_remote.links.channel import Listener
from gym_remote.protocol import Kind
from tests.conftest import subprocess_env
from tests.envs import ActionEchoEnv, make_cartpole
from tests.envs.faults import make_counter
from tests.helpers import (
    ChannelMember,
    ThreadClient,
    assert_same_steps,
    cartpole_server,
    cli_client,
    data_channel_name,
    free_tcp_address,
    listening,
    mapped_shared_blocks,
    pid_alive,
    raw_header,
    wait_until,
)

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the data plane needs Linux's abstract Unix sockets"
    ),
]

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


LOCAL = "shm" if shared.AVAILABLE else "uds"
"""The plane of a Python client on the learner's host with the data plane on by default."""


def planes(envs: RemoteVectorEnv) -> list[str]:
    return [row.get("plane") for row in envs.stats()]


# -- who is served over it ---------------------------------------------------------------------------


@pytest.mark.parametrize("use_plane", ["shm", "uds", False], ids=["shm", "uds", "zmq"])
@pytest.mark.parametrize("mode", MODES, ids=[mode.value for mode in MODES])
def test_local_clients_match_sync_over_every_plane(mode, use_plane):
    env_fns = [functools.partial(make_cartpole, max_episode_steps=15)] * 4
    expected = SyncVectorEnv(env_fns, autoreset_mode=mode)
    envs = RemoteVectorEnv(env_fns, num_clients=2, autoreset_mode=mode, data_plane=use_plane)
    try:
        assert planes(envs) == [channel.wanted(use_plane) or "zmq"] * 4
        rng = np.random.default_rng(3)
        steps = 8 if mode is AutoresetMode.DISABLED else 60  # DISABLED: before any episode can end
        actions = [rng.integers(0, 2, size=4) for _ in range(steps)]
        assert_same_steps(envs, expected, actions, seed=11)
    finally:
        envs.close()
        expected.close()


def slab_channels(envs: RemoteVectorEnv) -> list[channel.Channel]:
    """The learner's ends of the members' data channels, each of which must use its slabs."""
    channels = list(envs._server.mux.channels.values())
    assert channels and all(link.slabs for link in channels)
    return channels


@pytest.mark.skipif(not shared.AVAILABLE, reason="shared-memory mailboxes need x86-64 Linux")
@pytest.mark.parametrize("num_clients", [1, 2])
@pytest.mark.parametrize(
    ("mode", "record_stats"),
    [(AutoresetMode.NEXT_STEP, False), (AutoresetMode.NEXT_STEP, True), (AutoresetMode.SAME_STEP, False)],
    ids=["NextStep", "NextStep-episode infos", "SameStep"],
)
def test_steps_travel_in_the_slabs_and_match_sync(mode, record_stats, num_clients):
    """Every STEP of a numpy batch of actions goes in the clients' slabs, and every RESULT without infos or final
    observations comes back in them (the rest as messages): the returns are SyncVectorEnv's."""
    env_fns = [functools.partial(make_cartpole, record_stats=record_stats, max_episode_steps=15)] * 4
    expected = SyncVectorEnv(env_fns, autoreset_mode=mode)
    envs = RemoteVectorEnv(env_fns, num_clients=num_clients, autoreset_mode=mode, data_plane="shm")
    try:
        rng = np.random.default_rng(5)
        actions = [rng.integers(0, 2, size=4) for _ in range(60)]
        ended = assert_same_steps(envs, expected, actions, seed=7)
        channels = slab_channels(envs)
        assert ended >= 8
        assert sum(link.slab_posts for link in channels) == 60 * num_clients
        taken = sum(link.slab_takes for link in channels)  # the reset's RESULTs, and the steps'
        if mode is AutoresetMode.NEXT_STEP and not record_stats:
            assert taken == 61 * num_clients
        else:  # a RESULT with the infos or the final observation of an episode's end is a message
            assert 61 * num_clients - ended <= taken < 61 * num_clients
    finally:
        envs.close()
        expected.close()


@pytest.mark.skipif(not shared.AVAILABLE, reason="shared-memory mailboxes need x86-64 Linux")
def test_partial_batches_of_whole_clients_travel_in_the_slabs_both_ways():
    """send()/recv() of one client's slots at a time: each STEP goes in the client's slab, and each RESULT comes
    back in its slab, however the learner's waits interleave the two clients (the learner lets go of a reply as
    soon as it has landed it, so that the client's next one finds the slab free)."""
    env_fns = [functools.partial(make_cartpole, max_episode_steps=15)] * 4
    envs = RemoteVectorEnv(env_fns, num_clients=2, batch_size=2, data_plane="shm")
    try:
        envs.async_reset(seed=7)
        for _ in range(2):  # the resets, one message per slot
            envs.recv()
        envs.send(np.zeros(2, dtype=np.int64), [0, 1])
        envs.send(np.zeros(2, dtype=np.int64), [2, 3])
        cycles = 200
        for _ in range(cycles):
            *_, infos = envs.recv()
            slots = infos["env_id"].tolist()
            assert slots in ([0, 1], [2, 3])
            envs.send(np.ones(2, dtype=np.int64), slots)
        channels = slab_channels(envs)
        for _ in range(2):
            envs.recv()
        assert sum(link.slab_posts for link in channels) == cycles + 2
        assert sum(link.slab_takes for link in channels) == cycles + 2
    finally:
        envs.close()


@pytest.mark.skipif(not shared.AVAILABLE, reason="shared-memory mailboxes need x86-64 Linux")
def test_actions_the_slab_cannot_carry_as_they_are_travel_as_messages():
    """Actions of another dtype than the action space's, lists, and batches whose rows are not contiguous reach
    the envs exactly as SyncVectorEnv hands them over."""
    env_fns = [functools.partial(ActionEchoEnv, "discrete")] * 4
    expected = SyncVectorEnv(env_fns)
    envs = RemoteVectorEnv(env_fns, num_clients=2, data_plane="shm")
    try:
        wide = np.arange(8, dtype=np.int64).reshape(4, 2) % 3
        batches = [
            np.array([0, 1, 2, 1]),
            np.array([2, 1, 0, 1], dtype=np.int32),
            [1, 2, 0, 0],
            wide[:, 1],  # a view with a stride: each client's rows are copied before they are written
            np.array([1, 1, 2, 0]),
        ]
        assert_same_steps(envs, expected, batches, seed=3)
        assert sum(link.slab_posts for link in slab_channels(envs)) == 3 * 2  # the int64 batches
    finally:
        envs.close()
        expected.close()


def test_a_float64_array_for_an_action_space_without_an_array_layout_gets_gymnasiums_error():
    """A Tuple action space has no slab layout: a float64 array given to send() (numpy reads a dtype compared with
    None as float64) takes the path of every other batch, over every plane: Gymnasium's error for splitting it."""
    env_fns = [functools.partial(ActionEchoEnv, "tuple")] * 2
    batched = batch_space(ActionEchoEnv("tuple").action_space, 2)
    with pytest.raises(Exception) as expected:
        list(iterate(batched, np.zeros(2)))
    errors = {}
    for plane in ("shm" if shared.AVAILABLE else "uds", False):
        envs = RemoteVectorEnv(env_fns, num_clients=1, batch_size=2, data_plane=plane)
        try:
            envs.async_reset(seed=0)
            envs.recv()
            with pytest.raises(Exception) as raised:
                envs.send(np.zeros(2), [0, 1])
            errors[plane] = (type(raised.value), str(raised.value))
        finally:
            envs.close()
    assert set(errors.values()) == {(type(expected.value), str(expected.value))}, errors


def test_the_environment_variable_turns_it_off(monkeypatch):
    monkeypatch.setenv("GYM_REMOTE_DATA_PLANE", "off")
    with contextlib.closing(RemoteVectorEnv([make_cartpole] * 2, num_clients=1)) as envs:
        envs.reset(seed=0)
        assert planes(envs) == ["zmq", "zmq"]


def test_an_explicit_choice_wins_over_the_environment_variable(monkeypatch):
    monkeypatch.setenv("GYM_REMOTE_DATA_PLANE", "off")
    with contextlib.closing(RemoteVectorEnv([make_cartpole] * 2, num_clients=1, data_plane=True)) as envs:
        envs.reset(seed=0)
        assert planes(envs) == [LOCAL, LOCAL]


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_an_external_client_on_this_host_is_served_over_it(stack, thread_clients, tmp_path, transport):
    bind = f"ipc://{tmp_path}/server" if transport == "ipc" else "tcp://127.0.0.1:*"
    envs = cartpole_server(stack, 3, bind=bind)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole] * 2, name="fast"))
    thread_clients.append(ThreadClient(envs.address, [make_cartpole], name="plain", data_plane=False))
    envs.reset(seed=0)
    by_client = {row["client"]: row["plane"] for row in envs.stats()}
    assert by_client == {"fast": LOCAL, "plain": "zmq"}
    for _ in range(30):
        _, _, _, _, infos = envs.step(envs.action_space.sample())
        assert not infos.get("client_lost", np.zeros(3)).any()


def test_a_hello_whose_handling_an_interrupt_cut_short_still_gets_it(stack, thread_clients, monkeypatch):
    """Ctrl-C right after the listener handed out a client's channel, before the server kept it: the HELLO is
    handled again by the next call, and the client is served over its channel (the soak found it on ZeroMQ)."""
    envs = cartpole_server(stack, 1)
    take = Listener.take
    interrupted = []

    def take_then_interrupt(self, token, pid, claimant=b""):
        channel = take(self, token, pid, claimant)
        if channel is not None and not interrupted:
            interrupted.append(claimant)
            raise KeyboardInterrupt
        return channel

    monkeypatch.setattr(Listener, "take", take_then_interrupt)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole], name="cut"))
    with pytest.raises(KeyboardInterrupt):
        envs.reset(seed=0)
    envs.reset(seed=0)
    assert interrupted and planes(envs) == [LOCAL]
    envs.step(envs.action_space.sample())


def test_a_cli_client_offers_it_unless_told_not_to(stack, reaper, tmp_path):
    envs = RemoteVectorEnv(num_envs=2, bind=f"ipc://{tmp_path}/server", timeout=30, connect_timeout=30)
    stack.callback(envs.close)
    args = ("--factory", "tests.envs.faults:make_counter", "--connect-timeout", "30")
    cli_client(reaper, tmp_path, "near", envs.address, *args, "--spin", "0.0001")
    cli_client(reaper, tmp_path, "forced", envs.address, *args, "--no-data-plane")
    envs.reset(seed=0)
    for _ in range(20):
        envs.step(np.zeros(2, dtype=np.int64))
    assert {row["client"]: row["plane"] for row in envs.stats()} == {"near": LOCAL, "forced": "zmq"}


def test_a_server_without_it_serves_everyone_over_zeromq(stack, thread_clients):
    envs = cartpole_server(stack, 2, data_plane=False)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole] * 2))
    envs.reset(seed=0)
    assert planes(envs) == ["zmq", "zmq"]
    assert not listening(data_channel_name(envs.address))


def test_the_listener_is_gone_when_the_server_closes():
    envs = RemoteVectorEnv([make_cartpole], num_clients=1)
    name = data_channel_name(envs.address)
    assert listening(name)
    envs.close()
    assert not listening(name)


# -- either side dying -------------------------------------------------------------------------------


def test_a_sigkilled_local_client_is_noticed_at_once_and_replaced():
    env_fns = [functools.partial(make_counter, max_steps=1000)] * 2
    with contextlib.closing(RemoteVectorEnv(env_fns, num_clients=2, liveness_timeout=30)) as envs:
        envs.reset(seed=0)
        victim = envs.stats()[1]["pid"]
        assert planes(envs) == [LOCAL, LOCAL]
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
        assert planes(envs) == [LOCAL, LOCAL]
    assert not mapped_shared_blocks(), "the closed learner still maps a shared block"


LEARNER = """
import functools, json, sys, time
import numpy as np
from gym_remote import RemoteVectorEnv
from tests.envs.faults import make_counter
envs = RemoteVectorEnv([functools.partial(make_counter, max_steps=10**6, step_seconds=0.05)] * 2, num_clients=2)
envs.reset(seed=0)
print(json.dumps({
    "pids": [row["pid"] for row in envs.stats()],
    "planes": [row["plane"] for row in envs.stats()],
    "workdir": envs.launcher.workdir,
    "address": envs.address,
}), flush=True)
while True:
    envs.step(np.zeros(2, dtype=np.int64))
"""


def test_a_sigkilled_learner_leaves_no_socket_or_shared_memory_behind(reaper):
    shm_before = set(os.listdir("/dev/shm"))
    learner = reaper.popen([sys.executable, "-c", LEARNER], stdout=subprocess.PIPE, env=subprocess_env())
    facts = json.loads(learner.stdout.readline())
    assert facts["planes"] == [LOCAL, LOCAL]
    name = data_channel_name(facts["address"])
    assert listening(name) and os.path.isdir(facts["workdir"])
    time.sleep(0.3)  # mid-step: the envs take 50 ms a step
    os.kill(learner.pid, signal.SIGKILL)
    learner.wait(10)
    wait_until(lambda: not any(pid_alive(pid) for pid in facts["pids"]), 10, "the local clients to exit")
    assert not listening(name)
    assert not os.path.exists(facts["workdir"]), os.listdir(facts["workdir"])
    assert set(os.listdir("/dev/shm")) <= shm_before


# -- peers that misuse it ----------------------------------------------------------------------------


def _unsealed_block() -> int:
    """A memfd laid out as a shared block but not sealed: a client could shrink it under the learner's reads."""
    fd = os.memfd_create("gym_remote-data")
    os.ftruncate(fd, 4096 + 2 * 65536)
    os.pwrite(fd, shared.MAGIC + struct.pack("@QQ", 65536, 65536), 0)
    return fd


@pytest.mark.skipif(not shared.AVAILABLE, reason="shared-memory mailboxes need x86-64 Linux")
def test_a_shared_block_the_learner_cannot_trust_is_refused_and_its_client_served_over_the_socket(
    stack, thread_clients, caplog
):
    envs = cartpole_server(stack, 2)
    block = _unsealed_block()
    stack.callback(os.close, block)
    member = ChannelMember(envs.address, block_fd=block)
    member.start()
    stack.callback(member.stop)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole], name="honest"))
    with caplog.at_level("WARNING", logger="gym_remote"):
        envs.reset(seed=0)
    assert member.welcome["data_channel"] is True and member.welcome["shared_memory"] is False
    assert "not sealed against shrinking" in caplog.text
    assert {row["client"]: row["plane"] for row in envs.stats()} == {"hostile": "uds", "honest": LOCAL}
    os.ftruncate(block, 0)  # what the seal is for: nothing of it is mapped by the learner
    for _ in range(5):
        _, _, _, truncations, _ = envs.step(envs.action_space.sample())
        assert not truncations.any()


@pytest.mark.skipif(not shared.AVAILABLE, reason="shared-memory mailboxes need x86-64 Linux")
@pytest.mark.parametrize(
    ("flag_byte", "kind", "reason"),
    [(2, Kind.RESULT, "terminated/truncated bytes must be 0 or 1"), (0, Kind.CALL_RESULT, "expected RESULT")],
    ids=["a flag byte of 2", "another kind"],
)
def test_a_malformed_result_in_a_slab_loses_only_its_client(caplog, flag_byte, kind, reason):
    """What a client posts in its slab is checked as a message would be: a RESULT whose flag byte is neither 0 nor
    1, or a header of another kind, loses that client with the reason in the log; the other slot's step lands."""
    env_fns = [functools.partial(make_cartpole)] * 2
    envs = RemoteVectorEnv(env_fns, num_clients=2, data_plane="shm")
    try:
        envs.reset(seed=0)
        first = envs._server.members.slots[0]
        link = envs._server.mux.channels[first.identity]
        assert link.slabs
        seq = envs._server._seq + 1  # the next step's
        header = raw_header(kind, seq=seq, count=1) + struct.pack("<d", 1.0) + bytes([flag_byte, 0])
        pid = envs.stats()[0]["pid"]
        os.kill(pid, signal.SIGSTOP)  # (so that its own RESULT cannot come first)
        try:
            link._slab_in.post(link._messages_taken + 1, [header, np.zeros(4, np.float32)])  # as the client would
            with caplog.at_level("ERROR", logger="gym_remote"):
                observations, _, _, truncations, infos = envs.step(np.array([0, 1]))
        finally:
            os.kill(pid, signal.SIGCONT)
        assert reason in caplog.text and "local-0" in caplog.text
        assert truncations[0] and infos["client_lost"][0] and not infos["_client_lost"][1]
        assert observations[1].any()  # slot 1 stepped
        envs.step(np.array([1, 1]))  # and the vector goes on (slot 0 with a new client)
    finally:
        envs.close()


def test_a_channel_greeted_by_another_process_is_not_taken(stack, thread_clients):
    envs = cartpole_server(stack, 2)
    token = secrets.token_bytes(16)
    greeter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); "
            "s.connect(bytes.fromhex(sys.argv[1])); s.sendall(b'GR-DATA2' + bytes.fromhex(sys.argv[2])); "
            "time.sleep(30)",
            data_channel_name(envs.address).hex(),
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
    assert {row["client"]: row["plane"] for row in envs.stats()} == {"hostile": "zmq", "honest": LOCAL}
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


def test_a_client_on_another_host_is_served_over_zeromq(stack, reaper, tmp_path, other_host):
    envs = RemoteVectorEnv(num_envs=2, bind="tcp://10.213.7.1:*", insecure=True, timeout=30, connect_timeout=30)
    stack.callback(envs.close)
    assert listening(data_channel_name(envs.address))  # the server offers it, to this host
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
    assert {row["client"]: row["plane"] for row in envs.stats()} == {"far": "zmq", "near": LOCAL}
    assert remote.poll() is None and near.poll() is None


def peak_rss_bytes() -> int:
    """This process's peak resident set size since :func:`reset_peak_rss` (``VmHWM``)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


LIMIT = 256 << 20  # the default max_message_bytes


@pytest.mark.parametrize(
    "lengths",
    [[LIMIT, LIMIT], [LIMIT] * 65_536],
    ids=["2-frames-at-the-limit", "65536-frames-at-the-limit"],
)
def test_a_record_header_announcing_huge_frames_costs_the_learner_no_memory(stack, thread_clients, lengths):
    """A member answers a STEP with only a record header announcing frames as large as the limit allows
    (20 bytes for two of 256 MiB; or 65,536 of them, 16 TiB in all), then hangs up: the learner allocates
    nothing on the peer's word, loses that member with a reason, and the other client keeps stepping (with
    a spare, waiting in line, in the lost member's slot)."""
    envs = cartpole_server(stack, 2)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole], name="honest"))
    header_only = struct.pack(f"<I{len(lengths)}Q", len(lengths), *lengths)
    member = ChannelMember(envs.address, bad_step=lambda seq: header_only)
    member.start()
    stack.callback(member.stop)
    envs.reset(seed=0)
    assert member.welcome["data_channel"] is True
    hostile = next(row["slot"] for row in envs.stats() if row["client"] == "hostile")
    thread_clients.append(ThreadClient(envs.address, [make_cartpole], name="spare"))  # waits in line
    reset_peak_rss()
    before = peak_rss_bytes()
    _, _, _, truncations, infos = envs.step(envs.action_space.sample())  # no MemoryError
    grown = peak_rss_bytes() - before
    assert grown < 64 << 20, f"the learner's peak memory grew by {grown >> 20} MiB on a record header"
    assert truncations[hostile] and infos["client_lost"][hostile]
    assert not truncations[1 - hostile] and not infos["client_lost"][1 - hostile]
    assert envs.stats()[hostile].get("client") != "hostile"  # the spare may have taken its place already
    for _ in range(10):
        _, _, _, truncations, infos = envs.step(envs.action_space.sample())
        assert not truncations[1 - hostile] and not infos.get("client_lost", np.zeros(2, bool))[1 - hostile]


def hold_connections_as_another_user(name: bytes, count: int) -> tuple[int, int]:
    """Fork a process that becomes user 65534 (nobody) and keeps ``count`` connections to the abstract
    socket ``name`` open, never greeting, opening a new one for each that is closed or refused.

    Returns its pid (the caller kills it) and a pipe that becomes readable once it tried ``count`` times.
    """
    ready_read, ready_write = os.pipe()
    child = os.fork()
    if child:
        os.close(ready_write)
        return child, ready_read
    try:  # the child: no return into the test process, whatever happens
        os.close(ready_read)
        os.setuid(65534)
        held: dict[int, socket.socket] = {}
        poller = select.poll()
        attempts = 0
        while True:
            for fd, _ in poller.poll(0):  # closed by the server: replaced below
                poller.unregister(fd)
                held.pop(fd).close()
            while len(held) < count:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                attempts += 1
                if attempts == count:
                    os.write(ready_write, b"x")
                try:
                    sock.connect(name)
                except OSError:  # EAGAIN: the backlog is full
                    sock.close()
                    break
                held[sock.fileno()] = sock
                poller.register(sock, select.POLLIN)
            time.sleep(0.001)
    finally:
        os._exit(0)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to connect as another user")
def test_connections_held_by_another_user_do_not_keep_a_new_client_off_it(stack, reaper):
    """Another user's process holds 300 connections to the listener open (replacing each one closed),
    never greeting: a client on this host that joins afterwards is still served over the data plane."""
    envs = cartpole_server(stack, 1)
    flooder, ready = hold_connections_as_another_user(data_channel_name(envs.address), 300)
    stack.callback(lambda: (os.kill(flooder, signal.SIGKILL), os.waitpid(flooder, 0)))
    stack.callback(os.close, ready)
    assert select.select([ready], [], [], 10)[0], "the other user's connections were not made"
    client = ThreadClient(envs.address, [make_cartpole], name="newcomer")
    stack.callback(client.stop)
    started = time.monotonic()
    envs.reset(seed=0)
    assert time.monotonic() - started < 10
    assert planes(envs) == [LOCAL]
    for _ in range(10):
        _, _, _, truncations, _ = envs.step(envs.action_space.sample())
        assert not truncations.any()


def test_a_connection_that_never_greets_is_closed_while_the_learner_steps(stack, thread_clients):
    """A process of the learner's own user connects to the listener and sends nothing: the server closes
    that connection within 15 s (it holds no place in the backlog or among the greeted ones for good)."""
    envs = cartpole_server(stack, 1)
    thread_clients.append(ThreadClient(envs.address, [make_cartpole]))
    envs.reset(seed=0)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stack.callback(silent.close)
    silent.connect(data_channel_name(envs.address))
    silent.setblocking(False)

    def closed() -> bool:
        try:
            return silent.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            return False
        except ConnectionError:
            return True

    started = time.monotonic()
    while not closed():
        assert time.monotonic() - started < 15, "a connection that never greeted is still open after 15 s"
        envs.step(envs.action_space.sample())
    assert planes(envs) == [LOCAL]


FORKING_LEARNER = """
import json, os, sys, time
import numpy as np
from gym_remote import RemoteVectorEnv
envs = RemoteVectorEnv(num_envs=2, bind=sys.argv[1], liveness_timeout=30, timeout=60, connect_timeout=60)
print(json.dumps({"address": envs.address}), flush=True)
envs.reset(seed=0)
child = os.fork()  # as multiprocessing's fork start method or a data loader's worker does: no exec
if child == 0:
    time.sleep(60)
    os._exit(0)
print(json.dumps({"planes": [row["plane"] for row in envs.stats()], "child": child}), flush=True)
while True:
    envs.step(np.zeros(2, dtype=np.int64))
"""


@pytest.mark.parametrize(
    ("plane", "transport"), [(LOCAL, "ipc"), ("zmq", "ipc"), ("zmq", "tcp")], ids=["local-ipc", "zmq-ipc", "zmq-tcp"]
)
def test_a_child_the_learner_forked_does_not_keep_its_death_from_the_clients(reaper, tmp_path, plane, transport):
    """The learner forks a child without exec (which outlives it) after its clients joined, and is then
    SIGKILLed: its clients see it gone at once (liveness_timeout is 30 s), and no listener is left under
    the data plane's name, while the child still runs."""
    env = subprocess_env()
    if plane == "zmq":
        env["GYM_REMOTE_DATA_PLANE"] = "off"
    bind = f"ipc://{tmp_path}/server" if transport == "ipc" else "tcp://127.0.0.1:*"
    learner = reaper.popen([sys.executable, "-c", FORKING_LEARNER, bind], stdout=subprocess.PIPE, env=env)
    address = json.loads(learner.stdout.readline())["address"]
    args = ("--factory", "tests.envs.faults:make_counter", "--liveness-timeout", "30", "--no-reconnect")
    if plane == "zmq":
        args += ("--no-data-plane",)
    clients = [cli_client(reaper, tmp_path, f"client{index}", address, *args) for index in range(2)]
    facts = json.loads(learner.stdout.readline())
    child = facts["child"]
    try:
        assert facts["planes"] == [plane, plane]
        time.sleep(0.2)
        os.kill(learner.pid, signal.SIGKILL)
        learner.wait(10)
        started = time.monotonic()
        for client in clients:
            client.wait(max(0.1, 5 - (time.monotonic() - started)))
        assert pid_alive(child)
        assert not listening(data_channel_name(address)), "the forked child still holds the data plane's listener"
    finally:
        os.kill(child, signal.SIGKILL)


PLANE_REPORTING_LEARNER = """
import json, sys
import numpy as np
from gym_remote import RemoteVectorEnv
envs = RemoteVectorEnv(num_envs=1, bind=sys.argv[1], liveness_timeout=2, timeout=30, connect_timeout=30)
envs.reset(seed=0)
for _ in range(5):
    envs.step(np.zeros(1, dtype=np.int64))
print(json.dumps([row["plane"] for row in envs.stats()]), flush=True)
while True:
    envs.step(np.zeros(1, dtype=np.int64))
"""


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_a_client_that_comes_first_or_rejoins_a_restarted_learner_is_served_over_it(reaper, tmp_path, transport):
    """A client on the learner's host started before its learner is served over the data plane once the
    learner is up; and again after the learner was killed and restarted at the same address."""
    address = f"ipc://{tmp_path}/server" if transport == "ipc" else free_tcp_address()
    args = ("--factory", "tests.envs.faults:make_counter", "--connect-timeout", "60", "--liveness-timeout", "2")
    client = cli_client(reaper, tmp_path, "early", address, *args)
    time.sleep(1.0)  # it has said HELLO to nobody yet

    def learner_planes() -> tuple[subprocess.Popen, list[str]]:
        learner = reaper.popen([sys.executable, "-c", PLANE_REPORTING_LEARNER, address], stdout=subprocess.PIPE)
        line = learner.stdout.readline()
        assert line, f"the learner exited with {learner.wait(10)}\n{client}"
        return learner, json.loads(line)

    learner, served = learner_planes()
    assert served == [LOCAL], "a client started before its learner"
    os.kill(learner.pid, signal.SIGKILL)
    learner.wait(10)
    time.sleep(1.0)  # the client sees the learner gone, and says HELLO again to nobody
    learner, served = learner_planes()
    assert served == [LOCAL], "a client that rejoined a restarted learner"
    assert client.process.poll() is None, client
