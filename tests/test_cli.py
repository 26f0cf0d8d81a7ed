"""The ``gym-remote`` command line (and ``python -m gym_remote``), run as real processes."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from gym_remote import RemoteVectorEnv, __version__
from tests.helpers import (
    GYM_REMOTE_SCRIPT,
    finished,
    free_tcp_address,
    step_until,
    wait_for_listening,
    wait_until,
)

SUBCOMMANDS = ("client", "demo", "serve", "bench")
FLAGS = {
    "client": [
        "ADDRESS",
        "--env",
        "--factory",
        "--num-envs",
        "--env-kwargs",
        "--name",
        "--connect-timeout",
        "--allow-pickle",
        "--liveness-timeout",
        "--insecure",
        "--secret-file",
        "--log-level",
    ],
    "demo": [
        "--env",
        "--factory",
        "--num-envs",
        "--env-kwargs",
        "--steps",
        "--seed",
        "--autoreset-mode",
        "--no-progress",
        "--num-clients",
        "--bind",
        "--secret-file",
        "--insecure",
        "--log-level",
    ],
    "serve": [
        "--bind",
        "--env",
        "--factory",
        "--env-kwargs",
        "--num-envs",
        "--connect-timeout",
        "--timeout",
        "--liveness-timeout",
        "--steps",
        "--seed",
        "--autoreset-mode",
        "--no-progress",
        "--secret-file",
        "--insecure",
        "--log-level",
    ],
    "bench": ["--env", "--factory", "--num-envs", "--num-clients", "--steps", "--seed", "--log-level"],
}


# -- helpers ---------------------------------------------------------------------------------------


# -- help, version, usage errors -------------------------------------------------------------------


def test_console_script_is_installed():
    assert Path(GYM_REMOTE_SCRIPT).exists(), GYM_REMOTE_SCRIPT


@pytest.mark.parametrize("via", ["script", "module"])
def test_top_level_help_lists_the_subcommands(run, via):
    result = finished(run, "--help", via=via)
    assert result.process.returncode == 0, result
    assert result.stdout.startswith("usage: gym-remote"), result
    for command in SUBCOMMANDS:
        assert re.search(rf"^\s+{command}\s", result.stdout, re.MULTILINE), (command, result.stdout)
    assert "--log-level" in result.stdout and "--version" in result.stdout


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_subcommand_help_lists_its_flags(run, command):
    result = finished(run, command, "--help", via="script")
    assert result.process.returncode == 0, result
    assert result.stdout.startswith(f"usage: gym-remote {command}"), result
    for flag in FLAGS[command]:
        assert flag in result.stdout, (flag, result.stdout)


def test_module_and_console_script_agree(run):
    for args in (["--help"], ["serve", "--help"], ["--version"]):
        script, module = finished(run, *args, via="script"), finished(run, *args, via="module")
        assert script.process.returncode == module.process.returncode == 0
        assert script.stdout == module.stdout, args
    assert module.stdout.strip() == f"gym-remote {__version__}"
    script, module = finished(run, "demo", "--num-envs", "0", via="script"), finished(run, "demo", "--num-envs", "0")
    assert script.process.returncode == module.process.returncode == 2
    assert script.stderr == module.stderr


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["no-such-command"],
        ["client"],  # no ADDRESS
        ["client", "tcp://127.0.0.1:1"],  # neither --env nor --factory
        ["client", "tcp://127.0.0.1:1", "--env", "CartPole-v1", "--factory", "tests.envs:make_cartpole"],
        ["client", "tcp://127.0.0.1:1", "--env", "CartPole-v1", "--connect-timeout", "0"],
        ["client", "tcp://127.0.0.1:1", "--env", "CartPole-v1", "--spin", "-1"],
        ["demo", "--num-envs", "0"],
        ["demo", "--steps", "many"],
        ["demo", "--env-kwargs", "not json"],
        ["demo", "--env-kwargs", "[1, 2]"],
        ["demo", "--autoreset-mode", "Sometimes"],
        ["serve", "--no-such-flag"],
        ["--log-level", "LOUD", "demo"],
    ],
)
def test_bad_usage_exits_2(run, args):
    result = finished(run, *args, via="script")
    assert result.process.returncode == 2, result
    assert "usage: gym-remote" in result.stderr, result
    assert "error:" in result.stderr, result
    assert "Traceback" not in result.stderr, result


@pytest.mark.parametrize(
    "args",
    [
        ["--log-level", "ERROR", "client", "ADDRESS", "--env", "CartPole-v1"],
        ["client", "ADDRESS", "--env", "CartPole-v1", "--log-level", "error"],
    ],
)
def test_the_log_level_is_taken_before_or_after_the_subcommand(run, args):
    address = free_tcp_address()
    args = [address if arg == "ADDRESS" else arg for arg in args]
    result = finished(run, *args, "--connect-timeout", "1", "--no-reconnect", timeout=30)
    assert result.process.returncode == 1, result
    assert "no answer from a server" in result.stderr, result
    assert " INFO " not in result.stderr, result  # a client's default level is INFO


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("FREE_PORT", "nothing listens on port"),
        ("tcp://no-such-host.invalid:5555", "cannot resolve the host name 'no-such-host.invalid'"),
        ("ipc:///nonexistent-dir/gym-remote", "no server socket at /nonexistent-dir/gym-remote"),
    ],
)
def test_a_client_says_why_no_server_answers_while_it_waits_and_when_it_gives_up(run, address, reason):
    address = free_tcp_address() if address == "FREE_PORT" else address
    args = ["client", address, "--env", "CartPole-v1", "--connect-timeout", "6", "--no-reconnect", "--insecure"]
    result = finished(run, *args, timeout=30)
    assert result.process.returncode == 1, result
    said = rf"WARNING client \S+: no server at {re.escape(address)} yet: (.*); trying again"
    warning = re.search(said, result.stderr)
    assert warning and warning.group(1).startswith(reason), result  # said while it still waits
    assert re.search(rf"^gym-remote: error: .* within 6 s: {re.escape(reason)}", result.stderr, re.MULTILINE), result
    assert "Traceback" not in result.stderr and "without authentication" not in result.stderr, result


def test_bench_verdicts_name_the_fastest():
    from gym_remote.cli import bench_verdict

    slower = {"SyncVectorEnv": 800.0, "AsyncVectorEnv": 100.0, "RemoteVectorEnv, 1 client (ipc)": 200.0}
    assert bench_verdict(slower).startswith("verdict: SyncVectorEnv is faster here; the best RemoteVectorEnv layout")
    assert "(RemoteVectorEnv, 1 client (ipc)) makes 0.25x" in bench_verdict(slower)
    faster = {"SyncVectorEnv": 800.0, "AsyncVectorEnv": 1000.0, "RemoteVectorEnv, 2 clients (ipc)": 1500.0}
    assert "RemoteVectorEnv, 2 clients (ipc) makes 1.50x the env-steps/s of AsyncVectorEnv" in bench_verdict(faster)


def test_demo_runs_one_rollout_per_client_count_and_names_the_factory(run):
    args = ["demo", "--factory", "tests.envs:make_cartpole", "--num-envs", "2", "--num-clients", "1,2"]
    result = finished(run, *args, "--steps", "100", "--no-progress", timeout=60)
    assert result.process.returncode == 0, result
    started = re.findall(r"^started (\d) local client\(s\) serving 2 x (\S+) ", result.stdout, re.MULTILINE)
    assert started == [("1", "tests.envs:make_cartpole"), ("2", "tests.envs:make_cartpole")], result
    assert len(re.findall(r"^100 steps in ", result.stdout, re.MULTILINE)) == 2, result


# -- --factory and --env-kwargs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
        ("tests.envs.factories:no_such_factory", "has no attribute 'no_such_factory'"),
        ("tests.envs.factories:NOT_CALLABLE", "is not callable"),
        ("tests.envs.factories", "module:function"),
    ],
)
@pytest.mark.parametrize("command", ["client", "demo"])
def test_bad_factory_exits_nonzero_with_a_clear_message(run, command, factory, expected):
    args = ["client", free_tcp_address()] if command == "client" else ["demo", "--no-progress", "--steps", "10"]
    result = finished(run, *args, "--factory", factory, "--num-envs", "2", timeout=30)
    assert result.process.returncode not in (0, None), result
    assert expected in result.stderr, result
    assert "Traceback" not in result.stderr, result


MODULE_IN_THE_WORKING_DIRECTORY = """
import gymnasium as gym

gym.register("Corridor-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv", max_episode_steps=20)


def make_env(**kwargs):
    return gym.make("CartPole-v1", **kwargs)
"""


@pytest.mark.parametrize("source", [["--factory", "myenvs:make_env"], ["--env", "myenvs:Corridor-v0"]])
def test_an_env_module_in_the_working_directory_is_found_by_the_console_script(run, tmp_path, source):
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "myenvs.py").write_text(MODULE_IN_THE_WORKING_DIRECTORY)
    args = ["demo", *source, "--num-envs", "2", "--num-clients", "2", "--steps", "200", "--no-progress"]
    result = finished(run, *args, via="script", cwd=str(workdir), timeout=60)
    assert result.process.returncode == 0, result
    assert re.search(r"^200 steps in ", result.stdout, re.MULTILINE), result


@pytest.mark.parametrize("option", ["--factory", "--env"])
def test_a_missing_env_module_is_told_once_with_where_it_was_looked_for(run, tmp_path, option):
    spec = "missing_envs_module:make_env" if option == "--factory" else "missing_envs_module:Corridor-v0"
    result = finished(run, "demo", option, spec, "--num-clients", "2", "--no-progress", via="script", cwd=str(tmp_path))
    assert result.process.returncode == 2, result
    assert result.stderr.count("cannot import module 'missing_envs_module'") == 1, result
    assert f"searched the current directory {tmp_path}" in result.stderr, result
    assert "Traceback" not in result.stderr, result


def test_client_factory_receives_env_kwargs(run):
    envs = RemoteVectorEnv(num_envs=3, connect_timeout=30)
    try:
        client = run(
            "client",
            envs.address,
            "--factory",
            "tests.envs.factories:make_tagged",
            "--num-envs",
            "3",
            "--env-kwargs",
            '{"tag": "hello-kwargs", "max_episode_steps": 7}',
            "--connect-timeout",
            "30",
        )
        envs.reset(seed=0)
        assert envs.get_attr("tag") == ("hello-kwargs",) * 3
        assert envs.get_attr("env_kwargs") == ({"max_episode_steps": 7},) * 3
        assert envs.get_attr("_max_episode_steps") == (7,) * 3  # reached gym.make's TimeLimit
        for _ in range(20):
            envs.step(envs.action_space.sample())
    finally:
        envs.close()
    assert client.wait(10) == 0, client


def test_client_env_kwargs_reach_gym_make(run):
    envs = RemoteVectorEnv(num_envs=2, connect_timeout=30)
    try:
        client = run(
            "client",
            envs.address,
            "--env",
            "CartPole-v1",
            "--num-envs",
            "2",
            "--env-kwargs",
            '{"max_episode_steps": 5}',
            "--connect-timeout",
            "30",
        )
        envs.reset(seed=0)
        assert envs.get_attr("_max_episode_steps") == (5, 5)
        ended = [False, False]
        for _ in range(5):
            _, _, terminations, truncations, _ = envs.step(envs.action_space.sample())
            ended = [a or bool(b) for a, b in zip(ended, terminations | truncations, strict=True)]
        assert all(ended), "every CartPole episode must end within max_episode_steps=5"
    finally:
        envs.close()
    assert client.wait(10) == 0, client


def test_demo_with_factory_and_env_kwargs(run):
    result = finished(
        run,
        "demo",
        "--factory",
        "tests.envs:make_cartpole",
        "--env-kwargs",
        '{"max_episode_steps": 10}',
        "--num-envs",
        "2",
        "--num-clients",
        "1",
        "--steps",
        "400",
        "--no-progress",
        timeout=60,
    )
    assert result.process.returncode == 0, result
    match = re.search(r"(\d+) episodes: mean return ([\d.]+), mean length ([\d.]+)", result.stdout)
    assert match, result
    # 200 iterations of 2 envs; an episode lasts at most 10 steps (+1 autoreset step)
    assert int(match.group(1)) >= 2 * (200 // 11)
    assert float(match.group(3)) <= 10.0


# -- demo, serve, client -----------------------------------------------------------------------------


def test_demo_reports_speed_and_episodes(run):
    result = finished(run, "demo", "--steps", "2000", "--num-envs", "4", "--no-progress", via="script", timeout=90)
    assert result.process.returncode == 0, result
    assert re.search(r"^2000 steps in [\d.]+ s: [\d,]+ steps/s$", result.stdout, re.MULTILINE), result
    match = re.search(r"^(\d+) episodes: mean return ([\d.]+), mean length ([\d.]+)$", result.stdout, re.MULTILINE)
    assert match, result
    episodes, mean_return, mean_length = int(match.group(1)), float(match.group(2)), float(match.group(3))
    assert episodes > 0
    assert 5 < mean_length < 200 and abs(mean_return - mean_length) < 0.1  # CartPole: reward 1 per step
    assert "rollout" not in result.stderr  # --no-progress: no progress bar


def test_bench_measures_every_vector_env(run):
    result = finished(
        run,
        "bench",
        "--factory",
        "tests.envs:make_cartpole",
        "--num-envs",
        "3",
        "--num-clients",
        "1,3",
        "--steps",
        "100",
        "--repeats",
        "2",
        "--transport",
        "tcp",
        timeout=90,
    )
    assert result.process.returncode == 0, result
    rows = dict(re.findall(r"^(\S.*?)\s{2,}([\d,]+)\s+[\d.]+\s+[\d.]+$", result.stdout, re.MULTILINE))
    assert list(rows) == [
        "SyncVectorEnv",
        "AsyncVectorEnv",
        "RemoteVectorEnv, 1 client (tcp)",
        "RemoteVectorEnv, 3 clients (tcp)",
    ], result
    assert all(int(rate.replace(",", "")) > 0 for rate in rows.values())
    assert re.search(r"^\s+env-steps/s\s+x Sync\s+x Async$", result.stdout, re.MULTILINE), result
    assert re.search(r"^SyncVectorEnv\s+[\d,]+\s+1\.00\s+[\d.]+$", result.stdout, re.MULTILINE), result
    assert re.search(r"^AsyncVectorEnv\s+[\d,]+\s+[\d.]+\s+1\.00$", result.stdout, re.MULTILINE), result
    assert re.search(r"^verdict: .+$", result.stdout, re.MULTILINE), result
    assert "3 x tests.envs:make_cartpole, 100 steps" in result.stdout, result  # the factory, not --env's default
    assert "bench" in result.stderr  # the progress bar


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(["--num-clients", "0"], "must be at least 1"), (["--num-envs", "2", "--num-clients", "3"], "at most --num-envs")],
)
def test_bench_refuses_impossible_layouts(run, arguments, message):
    result = finished(run, "bench", *arguments, "--no-progress", timeout=30)
    assert result.process.returncode == 2, result
    assert message in result.stderr, result


def test_serve_with_two_clients_started_afterwards(run):
    address = free_tcp_address()
    server = run(
        "serve",
        "--bind",
        address,
        "--num-envs",
        "4",
        "--steps",
        "2000",
        "--no-progress",
        "--connect-timeout",
        "60",
        via="script",
        name="serve",
    )
    wait_for_listening(server)
    assert address in server.stdout
    clients = [
        run(
            "client",
            address,
            "--env",
            "CartPole-v1",
            "--num-envs",
            "2",
            "--connect-timeout",
            "30",
            via="script",
            name=f"client{index}",
        )
        for index in range(2)
    ]
    assert server.wait(90) == 0, server
    for client in clients:
        assert client.wait(10) == 0, client
    assert re.search(r"^2000 steps in [\d.]+ s: [\d,]+ steps/s$", server.stdout, re.MULTILINE), server
    assert re.search(r"^\d+ episodes: mean return", server.stdout, re.MULTILINE), server


def test_serve_times_out_without_clients(run):
    result = finished(
        run,
        "serve",
        "--bind",
        free_tcp_address(),
        "--num-envs",
        "2",
        "--steps",
        "10",
        "--no-progress",
        "--connect-timeout",
        "1",
        timeout=30,
    )
    assert result.process.returncode == 1, result
    assert "timed out" in result.stderr, result
    assert "Traceback" not in result.stderr, result


def test_client_without_a_server_times_out(run):
    address = free_tcp_address()
    started = time.monotonic()
    result = finished(
        run, "client", address, "--env", "CartPole-v1", "--connect-timeout", "1", via="script", timeout=30
    )
    elapsed = time.monotonic() - started
    assert result.process.returncode == 1, result
    assert "no answer" in result.stderr and "within 1 s" in result.stderr, result
    assert address in result.stderr, result
    assert "Traceback" not in result.stderr, result
    assert elapsed < 15, f"took {elapsed:.1f} s with --connect-timeout 1"


def test_client_interrupted_exits_130(run):
    client = run(
        "--log-level",
        "INFO",
        "client",
        free_tcp_address(),
        "--env",
        "CartPole-v1",
        "--connect-timeout",
        "60",
        via="script",
    )
    wait_until(
        lambda: "connecting to" in client.stderr or client.process.poll() is not None, 30, "the client to send HELLO"
    )
    os.kill(client.process.pid, signal.SIGINT)
    assert client.wait(10) == 130, client
    assert "interrupted" in client.stderr, client


def test_client_refused_for_its_spaces_exits_1(run):
    envs = RemoteVectorEnv(num_envs=2, connect_timeout=30)
    try:
        good = run("client", envs.address, "--env", "CartPole-v1", "--num-envs", "2", "--connect-timeout", "30")
        envs.reset(seed=0)
        bad = run("client", envs.address, "--env", "MountainCar-v0", "--connect-timeout", "30")
        # step, so that the server answers the late HELLO
        step_until(envs, lambda: bad.process.poll() is not None, 30, "the MountainCar client to exit", output=bad)
        assert bad.process.returncode == 1, bad
        assert "refused" in bad.stderr and "observation space" in bad.stderr, bad
    finally:
        envs.close()
    assert good.wait(10) == 0, good


def test_client_waiting_in_line_exits_0_when_the_learner_closes(run):
    envs = RemoteVectorEnv(num_envs=1, connect_timeout=30)
    try:
        serving = run("client", envs.address, "--env", "CartPole-v1", "--connect-timeout", "30")
        envs.reset(seed=0)
        waiting = run(
            "--log-level", "INFO", "client", envs.address, "--env", "CartPole-v1", "--connect-timeout", "30",
            "--name", "second",
        )  # fmt: skip
        step_until(envs, lambda: envs.server_stats()["waiting"] == 1, 30, "the second client to wait in line")
        assert envs.server_stats()["waiting_clients"] == ["second"]
    finally:
        envs.close()
    assert serving.wait(10) == 0, serving
    assert waiting.wait(10) == 0, waiting
    assert "closed before a slot freed up" in waiting.stderr, waiting
    assert "Traceback" not in waiting.stderr, waiting
