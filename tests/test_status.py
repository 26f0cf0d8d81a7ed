"""``gym-remote status`` (gym_remote/status.py) against real learners and clients, and the learner's side of it
(PROTOCOL.md §9.1; the figures come from gym_remote/fleet.py)."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import threading
import time
import uuid

import gymnasium as gym
import numpy as np
import pytest
import zmq

from gym_remote import RemoteVectorEnv, protocol
from gym_remote.errors import JoinRefusedError, RemoteTimeoutError
from gym_remote.fleet import FleetRecorder
from gym_remote.links import zeromq as zeromq_link
from gym_remote.protocol import Kind
from gym_remote.security import create_key_files, read_secret_file
from gym_remote.status import format_status, query_status
from tests.helpers import (
    GYM_REMOTE_SCRIPT,
    finished,
    free_tcp_address,
    interrupting_send,
    wait_for_listening,
    wait_until,
)

# -- the recorder ---------------------------------------------------------------------------------------


def test_the_recorder_counts_steps_episodes_and_returns_per_slot():
    recorder = FleetRecorder(3)
    recorder.count_episodes(0.0)
    recorder.record(np.array([1.0, 1.0, 1.0]), np.array([False, False, True]))
    recorder.record(np.array([2.0, 0.5]), np.array([True, False]), rows=np.array([0, 2]))
    recorder.restart([1])  # a reset drops the return under way, and ends no episode
    recorder.record(np.array([1.0, 1.0, 1.0]), np.array([False, True, False]))
    assert recorder.steps.tolist() == [3, 2, 3]
    assert recorder.episodes.tolist() == [1, 1, 1]
    assert recorder.return_sums.tolist() == [3.0, 1.0, 1.0]


def test_until_someone_asks_the_recorder_counts_only_steps():
    recorder = FleetRecorder(2)
    recorder.record(np.array([1.0, 1.0]), np.array([True, False]))
    recorder.record(np.array([2.0]), np.array([True]), rows=np.array([1]))
    assert recorder.episodes_since is None and recorder.steps.tolist() == [1, 2]
    assert recorder.episodes.tolist() == [0, 0] and recorder.return_sums.tolist() == [0.0, 0.0]
    recorder.count_episodes(12.5)
    recorder.count_episodes(99.0)  # (counting began once)
    recorder.record(np.array([3.0, 4.0]), np.array([True, True]))
    assert recorder.episodes_since == 12.5 and recorder.episodes.tolist() == [1, 1]
    assert recorder.return_sums.tolist() == [3.0, 4.0]


def test_the_recorder_measures_rates_over_its_window_and_latencies_from_its_samples():
    recorder = FleetRecorder(2)
    recorder.sample(100.0, {0: 0.002, 1: None})
    for _ in range(50):
        recorder.record(np.zeros(2), np.zeros(2, dtype=bool))
    recorder.sample(100.5, {0: 0.010})  # within a second of the last sample: not taken
    recorder.sample(101.0, {0: 0.004})
    assert recorder.rates(102.0).tolist() == [25.0, 25.0]  # 50 steps since the first sample, 2 s before
    assert recorder.latency(0) == (0.003, 0.004) and recorder.latency(1) == (None, None)
    recorder.forget_latencies([0])
    assert recorder.latency(0) == (None, None)


def test_an_empty_slot_is_shown_as_waiting_for_a_client():
    report = {
        "server": "s",
        "address": "ipc:///x",
        "uptime": 3725.0,
        "num_envs": 1,
        "served": 0,
        "security": "none",
        "counts": {"joined": 1, "lost": 1},
        "waiting": [{"name": "big", "host": "h", "pid": 1, "num_envs": 4}],
        "refused": {"spaces": 2},
        "slots": [
            {"slot": 0, "served": False, "steps": 5, "steps_per_second": 0.0, "episodes": 0, "mean_return": None}
            | {"losses": 1, "empty_for": 61.0}
        ],
    }
    text = format_status(report)
    assert "up 1h02m, 0 of 1 slots served" in text and "1 lost" in text
    assert text.splitlines()[1].endswith("; episodes from this status on")
    assert "refused: spaces 2; waiting in line: 'big' (4 envs)" in text
    assert re.search(r"^0\s+\(no client for 1m01s\)\s+0\s+0\s+-\s+1$", text, re.MULTILINE), text


# -- a learner with clients -----------------------------------------------------------------------------


def serve_with_clients(run, address: str, *security: str, clients: tuple[tuple[str, ...], ...] = ((), ())):
    """``gym-remote serve`` of CartPole slots at ``address`` stepping for a long time, and 2-env clients (each with the
    extra arguments given) that fill them, all joined."""
    slots = 2 * len(clients)
    serve = ["serve", "--bind", address, "--env", "CartPole-v1", "--num-envs", str(slots), "--steps", "100000000"]
    server = run(*serve, "--no-progress", *security, name="serve")
    wait_for_listening(server)
    for index, extra in enumerate(clients):
        client = ["client", address, "--env", "CartPole-v1", "--num-envs", "2", "--name", f"sim-{index}"]
        run(*client, *security, *extra, name=f"sim-{index}")
    wait_until(lambda: f"{slots} of {slots} slots served" in server.stderr, 30, "the clients to join")
    return server


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_status_shows_each_slots_client_and_figures_as_a_table_and_as_json(run, tmp_path, transport):
    address = free_tcp_address() if transport == "tcp" else f"ipc://{tmp_path}/learner"
    serve_with_clients(run, address, clients=((), ("--no-data-plane",)))
    first = finished(run, "status", address, "--json", timeout=30)  # episodes count from the first status on
    assert first.process.returncode == 0 and json.loads(first.stdout)["episodes_since"] is not None, str(first)
    time.sleep(2.5)  # some episodes end, rates and latencies get sampled
    shown = finished(run, "status", address, timeout=30)
    assert shown.process.returncode == 0, str(shown)
    assert f"gym_remote at {address}: up " in shown.stdout and "4 of 4 slots served" in shown.stdout, shown.stdout
    rows = re.findall(
        r"^(\d)\s+(sim-\d)\s+\S+\s+\d+\s+(\w+)\s+([\d,]+)\s+([\d.]+ / [\d.]+ ms)\s+(\d+)", shown.stdout, re.M
    )
    assert sorted(row[1] for row in rows) == ["sim-0", "sim-0", "sim-1", "sim-1"], shown.stdout
    planes = {row[1]: row[2] for row in rows}
    assert planes["sim-1"] == "zmq" and planes["sim-0"] in ("shm", "uds"), shown.stdout
    assert all(int(row[3].replace(",", "")) > 0 and int(row[5]) > 0 for row in rows), shown.stdout

    as_json = finished(run, "status", address, "--json", timeout=30)
    report = json.loads(as_json.stdout)
    assert report["protocol"] == protocol.PROTOCOL_VERSION and report["num_envs"] == report["served"] == 4
    assert report["counts"]["joined"] == 2 and report["waiting"] == [] and report["refused"] == {}
    for slot in report["slots"]:
        assert slot["served"] and slot["client"] in ("sim-0", "sim-1") and slot["steps"] > 0
        assert slot["episodes"] > 0 and 5 < slot["mean_return"] < 200  # CartPole with random actions
        assert slot["latency_median"] is not None and slot["latency_worst"] >= slot["latency_median"]
        assert slot["losses"] == 0 and slot["rejoins"] == 0


def test_status_with_keys_answers_an_authorized_peer_and_refuses_the_others(run, tmp_path):
    keys = tmp_path / "keys"
    create_key_files("server", keys)
    create_key_files("sim", keys / "clients")
    create_key_files("stranger", tmp_path / "other")
    address = free_tcp_address()
    server_side = ("--server-key", str(keys / "server.key_secret"), "--authorized-keys", str(keys / "clients"))
    serve = ["serve", "--bind", address, "--env", "CartPole-v1", "--num-envs", "2", "--steps", "100000000"]
    server = run(*serve, "--no-progress", *server_side, name="serve")
    wait_for_listening(server)
    client_side = ("--server-key", str(keys / "server.key"), "--client-key", str(keys / "clients" / "sim.key_secret"))
    run("client", address, "--env", "CartPole-v1", "--num-envs", "2", "--name", "sim", *client_side, name="sim")
    wait_until(lambda: "2 of 2 slots served" in server.stderr, 30, "the client to join")

    shown = finished(run, "status", address, *client_side, timeout=30)
    assert shown.process.returncode == 0 and "sim" in shown.stdout, str(shown)
    stranger = (
        "--server-key",
        str(keys / "server.key"),
        "--client-key",
        str(tmp_path / "other" / "stranger.key_secret"),
    )
    for refused in (
        finished(run, "status", address, "--timeout", "10", timeout=30),
        finished(run, "status", address, *stranger, timeout=30),
    ):
        assert refused.process.returncode == 1, str(refused)
        assert "gym-remote: error:" in refused.stderr and "sim" not in refused.stdout + refused.stderr, str(refused)
    assert server.process.poll() is None, str(server)


def test_status_with_a_secret_answers_its_holders_only(run, tmp_path):
    secret, wrong = tmp_path / "secret", tmp_path / "wrong"
    for path in (secret, wrong):
        assert finished(run, "secret", str(path)).process.returncode == 0
    address = free_tcp_address()
    serve_with_clients(run, address, "--secret-file", str(secret), clients=((),))
    shown = finished(run, "status", address, "--secret-file", str(secret), "--json", timeout=30)
    assert shown.process.returncode == 0, str(shown)
    assert json.loads(shown.stdout)["security"] == "CURVE (secret)"
    with pytest.raises(JoinRefusedError, match="does this hold the server's secret"):
        query_status(address, secret=read_secret_file(wrong), timeout=10)
    with pytest.raises((JoinRefusedError, RemoteTimeoutError)):
        query_status(address, timeout=5)  # no credentials: the CURVE server never hears the request


def test_a_learner_that_serves_only_its_own_clients_reports_to_no_one(stack):
    envs = RemoteVectorEnv([lambda: gym.make("CartPole-v1")] * 2, bind="tcp://127.0.0.1:*")
    stack.callback(envs.close)
    envs.reset(seed=0)
    with pytest.raises(PermissionError, match="reports to no one"):
        ask_while_stepping(envs, lambda: query_status(envs.address, timeout=10))


def test_status_answers_at_most_ten_requests_a_second_and_a_dropped_one_is_asked_again(stack):
    envs = RemoteVectorEnv(num_envs=1, observation_space=gym.spaces.Discrete(2), action_space=gym.spaces.Discrete(2))
    stack.callback(envs.close)
    context = zmq.Context()
    stack.callback(context.term)
    peer = context.socket(zmq.DEALER)
    stack.callback(peer.close, 0)
    peer.setsockopt(zmq.ROUTING_ID, uuid.uuid4().hex.encode())
    peer.connect(envs.address)
    for seq in range(1, 16):
        peer.send(protocol.pack_header(Kind.STATUS, seq))
    answered = []
    deadline = time.monotonic() + 0.8  # (less than a second: the window does not move on)
    while time.monotonic() < deadline:
        envs._server.poll()
        while peer.poll(0):
            frames = peer.recv_multipart()
            header = protocol.parse_header(frames[0])
            assert header.kind == Kind.STATUS_REPORT
            answered.append(header.seq)
    assert answered == list(range(1, 11))
    # a status client whose request is dropped asks again a second later
    started = time.monotonic()
    report = ask_while_stepping(envs, lambda: query_status(envs.address, timeout=10), step=envs._server.poll)
    seconds = time.monotonic() - started
    assert report["num_envs"] == 1 and 0.2 < seconds < 5, seconds


@pytest.mark.timeout(120)
def test_a_status_answer_an_interrupt_cut_short_is_asked_for_again(run, tmp_path, monkeypatch, caplog, stack):
    """A learner Ctrl-C'ed inside the send of a STATUS_REPORT finishes it at its next send, the frame in doubt
    sent again (PROTOCOL.md §14). For every frame of it, interrupted before or after it is queued: the status
    client gets a report, and it dropped a malformed answer (and asked again) exactly when a frame went out twice.
    A doubled frame used to end ``gym-remote status --watch`` with a ProtocolError (found by the chaos soak)."""
    address = f"ipc://{tmp_path}/learner"
    spaces = gym.make("CartPole-v1")
    envs = RemoteVectorEnv(
        num_envs=1, observation_space=spaces.observation_space, action_space=spaces.action_space, bind=address
    )
    stack.callback(envs.close)
    run("client", address, "--env", "CartPole-v1", "--num-envs", "1", "--no-data-plane", name="sim")
    envs.reset(seed=0)
    compiled = zeromq_link._queue
    caplog.set_level(logging.DEBUG, logger="gym_remote.status")
    report_frames = 3  # routing id, header, value
    for when in ("before", "after"):
        for number in range(1, report_frames + 1):
            case = f"frame {number} of the report interrupted {when} it was queued"
            interrupting = interrupting_send(compiled, number, when == "before", first=_status_routing_id)
            monkeypatch.setattr(zeromq_link, "_queue", interrupting)
            caplog.clear()
            interrupts = 0

            def step():
                nonlocal interrupts
                try:
                    envs.step(envs.action_space.sample())
                except KeyboardInterrupt:
                    interrupts += 1

            try:
                report = ask_while_stepping(envs, lambda: query_status(address, timeout=30), step=step)
            except Exception as error:
                raise AssertionError(f"{case}: {error!r}") from error
            finally:
                monkeypatch.setattr(zeromq_link, "_queue", compiled)
            assert report["num_envs"] == 1 and report["served"] == 1, case
            assert interrupts == 1, f"{case}: {interrupts} steps interrupted"
            malformed = [record for record in caplog.records if "dropped a malformed message" in record.getMessage()]
            doubled = when == "after" and number < report_frames  # (a last frame sent twice is dropped by the router)
            assert len(malformed) == doubled, f"{case}: {[record.getMessage() for record in malformed]}"


def _status_routing_id(frame) -> bool:
    """Whether ``frame`` is a status client's routing id: the first frame of a message to it."""
    return isinstance(frame, bytes) and frame.startswith(b"status-")


def ask_while_stepping(envs, ask, step=None):
    """Call ``ask`` in a thread while ``envs`` steps here (a learner answers STATUS while inside a call); ``step``,
    if given, is what a step is."""
    outcome = {}

    def target():
        try:
            outcome["value"] = ask()
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    while thread.is_alive():
        if step is None:
            envs.step(envs.action_space.sample())
        else:
            step()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# -- --watch in a real terminal -------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (./run-tests installs it)")
def test_watch_redraws_the_table_in_a_terminal_until_ctrl_c(run, tmp_path):
    address = free_tcp_address()
    server = serve_with_clients(run, address)
    session = f"gr-status-{uuid.uuid4().hex[:8]}"
    exit_file = tmp_path / "exit-code"
    command = f"{GYM_REMOTE_SCRIPT} status {address} --watch --interval 0.5; echo $? > {exit_file}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "30", command], check=True, timeout=30
    )
    try:

        def screen() -> str:
            done = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True, timeout=10
            )
            return done.stdout

        wait_until(lambda: "sim-1" in screen() and "Ctrl-C to stop" in screen(), 30, "the table on the screen")
        first = screen()
        assert first.count("gym_remote at ") == 1, first  # redrawn in place, not scrolled
        stamp = re.search(r"^(\d\d:\d\d:\d\d), every 0.5 s; Ctrl-C to stop$", first, re.MULTILINE).group(1)
        wait_until(lambda: stamp not in screen(), 10, "the table to be redrawn")
        assert len(re.findall(r"^\d\s+sim-\d\s", screen(), re.MULTILINE)) == 4, screen()
        subprocess.run(["tmux", "send-keys", "-t", session, "C-c"], check=True, timeout=10)
        wait_until(exit_file.exists, 10, "status --watch to end on Ctrl-C")
        assert exit_file.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=10)
    assert server.process.poll() is None
