"""The command line's security: ``gym-remote keygen`` and the key and secret flags of ``serve`` and
``client``, run as real processes (each one killed by pid at the end through the ``reaper`` fixture)."""

from __future__ import annotations

import functools
import os
import re
import secrets
import stat
import time
import warnings
from pathlib import Path

import pytest
import zmq
import zmq.auth

from gym_remote.links.gate import PEER_GONE
from gym_remote.security import create_key_files, keys_from_secret, read_secret_file
from tests import helpers
from tests.conftest import REPO_ROOT
from tests.helpers import LoggedProcess, cli_client, free_tcp_address, wait_for_listening, wait_until

finished = functools.partial(helpers.finished, timeout=30)  # these commands end quickly


def assert_clean_failure(process: LoggedProcess, code: int, *fragments: str) -> None:
    """Exit ``code``, every fragment in stderr, and no traceback."""
    assert process.process.returncode == code, process
    for fragment in fragments:
        assert fragment in process.stderr, (fragment, str(process))
    assert "Traceback" not in process.stderr, process


def keygen(run, name: str, directory: Path, via: str = "module") -> LoggedProcess:
    result = finished(run, "keygen", name, "--dir", str(directory), via=via)
    assert result.process.returncode == 0, result
    return result


def start_serve(run, address: str, *security: str) -> LoggedProcess:
    """``gym-remote serve`` of 200 steps on 2 slots at ``address``, with the ``security`` flags."""
    common = ("--num-envs", "2", "--steps", "200", "--no-progress", "--connect-timeout", "60")
    return run("serve", "--bind", address, *common, *security, name="serve")


def wait_for_hello(client: LoggedProcess, address: str) -> None:
    """Until a client started with ``--log-level INFO`` has sent its HELLO to ``address``."""
    hello = f"connecting to {address} with"
    wait_until(lambda: hello in client.stderr or client.process.poll() is not None, 30, f"{client.name}'s HELLO")
    assert client.process.poll() is None, client


def assert_rollout_reported(server: LoggedProcess, steps: int) -> None:
    assert re.search(rf"^{steps} steps in [\d.]+ s: [\d,]+ steps/s$", server.stdout, re.MULTILINE), server
    assert re.search(r"^(\d+ episodes: mean return|no episode finished)", server.stdout, re.MULTILINE), server


# -- help ------------------------------------------------------------------------------------------


def test_top_level_help_lists_keygen(run):
    result = finished(run, "--help", via="script")
    assert result.process.returncode == 0, result
    assert re.search(r"^\s+keygen\s", result.stdout, re.MULTILINE), result.stdout


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("keygen", ["NAME", "--dir", ".key_secret"]),
        ("client", ["--server-key", "--client-key", "--secret-file"]),
        ("serve", ["--server-key", "--authorized-keys", "--secret-file", "--insecure", "--max-connections"]),
    ],
)
def test_help_shows_the_security_flags(run, command, flags):
    result = finished(run, command, "--help", via="script")
    assert result.process.returncode == 0, result
    assert result.stdout.startswith(f"usage: gym-remote {command}"), result
    for flag in flags:
        assert flag in result.stdout, (flag, result.stdout)


# -- keygen ----------------------------------------------------------------------------------------


def test_keygen_writes_a_key_pair(run, tmp_path):
    directory = tmp_path / "keys" / "deeper"  # created on demand
    result = keygen(run, "server", directory, via="script")
    public_path, secret_path = directory / "server.key", directory / "server.key_secret"
    assert f"public key (share it): {public_path}" in result.stdout, result
    assert f"secret key (keep it private): {secret_path}" in result.stdout, result
    assert sorted(os.listdir(directory)) == ["server.key", "server.key_secret"]
    assert stat.S_IMODE(secret_path.stat().st_mode) == 0o600
    assert public_path.stat().st_mode & stat.S_IRUSR and os.access(public_path, os.R_OK)
    public, no_secret = zmq.auth.load_certificate(str(public_path))
    public_again, secret = zmq.auth.load_certificate(str(secret_path))
    assert no_secret is None and public == public_again
    assert zmq.curve_public(secret) == public


def test_keygen_refuses_to_overwrite(run, tmp_path):
    keygen(run, "alice", tmp_path)
    before = {path.name: path.read_bytes() for path in tmp_path.glob("alice.*")}
    again = finished(run, "keygen", "alice", "--dir", str(tmp_path))
    assert_clean_failure(again, 1, "gym-remote: error:", "exists already", "alice.key")
    assert {path.name: path.read_bytes() for path in tmp_path.glob("alice.*")} == before


@pytest.mark.parametrize("name", ["../evil", "a/b", "", ".hidden"])
def test_keygen_rejects_a_bad_name(run, tmp_path, name):
    directory = tmp_path / "keys"
    result = finished(run, "keygen", name, "--dir", str(directory))
    assert_clean_failure(result, 2, "gym-remote: error:", "plain file name")
    assert not directory.exists()
    assert not (tmp_path / "evil.key").exists()


def test_the_readmes_secret_recipe_makes_a_file_only_its_owner_reads(run, tmp_path):
    readme = (REPO_ROOT / "README.md").read_text()
    recipe = re.search(r"Make it long and random, in a file only you can read:\s*`gym-remote ([^`]+)`", readme)
    assert recipe, "the README's recipe for a secret file"
    made = finished(run, *recipe.group(1).split(), cwd=str(tmp_path), via="script")
    assert made.process.returncode == 0, made
    path = tmp_path / recipe.group(1).split()[-1]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text()
    assert secret.endswith("\n") and len(secret.strip()) >= 43
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither "readable by other users" nor "short"
        assert read_secret_file(path) == secret.strip()
        keys_from_secret(secret.strip())
    again = finished(run, *recipe.group(1).split(), cwd=str(tmp_path))
    assert_clean_failure(again, 1, "gym-remote: error:", "exists already")
    assert path.read_text() == secret


# -- serve and client with keys ----------------------------------------------------------------------


def test_serve_and_client_with_keys(run, reaper, tmp_path):
    keys, clients, others = tmp_path / "keys", tmp_path / "clients", tmp_path / "others"
    keygen(run, "server", keys)
    keygen(run, "alice", clients)
    keygen(run, "mallory", others)  # a valid key pair, but not among the authorized keys
    address = free_tcp_address()
    client_args = ("--env", "CartPole-v1", "--num-envs", "2", "--connect-timeout", "20")
    # The clients to be refused start first, and the server once they have sent their HELLO: a client whose
    # connection is refused before it sends HELLO can hang (test_unauthorized_clients_with_slow_envs_exit).
    plain = cli_client(reaper, tmp_path, "plain", address, *client_args, log_level="INFO")
    stranger = cli_client(
        reaper,
        tmp_path,
        "mallory",
        address,
        *client_args,
        "--server-key",
        str(keys / "server.key"),
        "--client-key",
        str(others / "mallory.key_secret"),
        log_level="INFO",
    )
    for client in (plain, stranger):
        wait_for_hello(client, address)
    server = start_serve(
        run, address, "--server-key", str(keys / "server.key_secret"), "--authorized-keys", str(clients)
    )
    wait_for_listening(server)
    assert "--server-key SERVER.key --client-key CLIENT.key_secret" in server.stdout, server
    plain.wait(30)
    assert_clean_failure(plain, 1, "requires authentication")
    stranger.wait(30)
    assert_clean_failure(stranger, 1, "authorized_keys", "ZAP status 400")
    assert server.process.poll() is None, server  # refused clients take no slot; the server waits on

    alice = cli_client(
        reaper,
        tmp_path,
        "alice",
        address,
        *client_args,
        "--server-key",
        str(keys / "server.key"),
        "--client-key",
        str(clients / "alice.key_secret"),
    )
    assert server.wait(60) == 0, server
    assert alice.wait(15) == 0, alice
    assert_rollout_reported(server, 200)
    assert "key not authorized" in server.stderr, server  # the gatekeeper's log of mallory's attempt
    assert "Traceback" not in server.stderr + alice.stderr


def test_serve_and_client_with_a_secret_file(run, reaper, tmp_path):
    secret_file, wrong_file = tmp_path / "secret", tmp_path / "wrong"
    secret_file.write_text(secrets.token_urlsafe(32) + "\n")
    secret_file.chmod(0o600)
    wrong_file.write_text(secrets.token_urlsafe(32) + "\n")
    wrong_file.chmod(0o644)  # also: readable by others, which is warned about
    address = free_tcp_address()
    server = start_serve(run, address, "--secret-file", str(secret_file))
    wait_for_listening(server)
    assert f"--secret-file {secret_file}" in server.stdout, server
    client_args = ("--env", "CartPole-v1", "--num-envs", "2", "--connect-timeout", "20")

    wrong = cli_client(reaper, tmp_path, "wrong", address, *client_args, "--secret-file", str(wrong_file))
    wrong.wait(30)
    assert_clean_failure(wrong, 1, "handshake", "does this client hold the server's secret (--secret-file")
    assert "can be read by other users" in wrong.stderr and "chmod 600" in wrong.stderr, wrong
    assert "dropped before a WELCOME" not in wrong.stderr, wrong
    assert server.process.poll() is None, server
    # (the peer's address is read when its connection's event is, which on a busy machine can be after it closed)
    assert re.search(
        f"refused a connection from (127.0.0.1|{PEER_GONE}): its CURVE handshake failed: the client holds another "
        "secret",
        server.stderr,
    ), server.stderr

    good = cli_client(reaper, tmp_path, "good", address, *client_args, "--secret-file", str(secret_file))
    assert server.wait(60) == 0, server
    assert good.wait(15) == 0, good
    assert_rollout_reported(server, 200)
    assert "can be read by other users" not in server.stderr + good.stderr
    assert "Traceback" not in server.stderr + good.stderr


# -- refusing to run -----------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "*"])
def test_serve_on_a_network_address_without_keys_exits_2(run, host):
    port = free_tcp_address().rsplit(":", 1)[1]
    result = finished(
        run, "serve", "--bind", f"tcp://{host}:{port}", "--num-envs", "1", "--steps", "10", "--no-progress"
    )
    assert_clean_failure(result, 2, "gym-remote: error:", "insecure", "server_key")
    for option in ("--server-key", "--authorized-keys", "--secret-file", "--insecure"):  # the CLI's own words too
        assert option in result.stderr, (option, str(result))
    assert "listening on" not in result.stdout, result


@pytest.fixture
def key_files(tmp_path):
    """Key files (written in-process: keygen itself is tested above), secret files, and their names."""
    create_key_files("server", tmp_path / "keys")
    create_key_files("alice", tmp_path / "clients")
    empty, secret = tmp_path / "empty-secret", tmp_path / "secret"
    empty.write_text("\n")
    secret.write_text(secrets.token_urlsafe(32))
    for path in (empty, secret):
        path.chmod(0o600)
    return {
        "SERVER_SECRET": str(tmp_path / "keys" / "server.key_secret"),
        "SERVER_PUBLIC": str(tmp_path / "keys" / "server.key"),
        "ALICE_SECRET": str(tmp_path / "clients" / "alice.key_secret"),
        "ALICE_PUBLIC": str(tmp_path / "clients" / "alice.key"),
        "CLIENTS": str(tmp_path / "clients"),
        "MISSING": str(tmp_path / "missing.key"),
        "EMPTY_SECRET": str(empty),
        "SECRET": str(secret),
    }


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["client", "--server-key", "SERVER_PUBLIC"], 2, "needs both server_key"),
        (["client", "--client-key", "ALICE_SECRET"], 2, "needs both server_key"),
        (["client", "--server-key", "SERVER_PUBLIC", "--client-key", "ALICE_PUBLIC"], 2, "holds only a public key"),
        (["client", "--server-key", "MISSING", "--client-key", "ALICE_SECRET"], 2, "cannot read the key file"),
        (["client", "--secret-file", "EMPTY_SECRET"], 2, "is empty"),
        (["client", "--secret-file", "SECRET", "--server-key", "SERVER_PUBLIC"], 2, "not both"),
        (["client", "--secret-file", "MISSING"], 1, "No such file"),
        (["serve", "--server-key", "SERVER_SECRET"], 2, "server_key needs authorized_keys"),
        (["serve", "--authorized-keys", "CLIENTS"], 2, "authorized_keys needs server_key"),
        (["serve", "--secret-file", "EMPTY_SECRET"], 2, "is empty"),
        (
            ["serve", "--server-key", "SERVER_SECRET", "--authorized-keys", "CLIENTS", "--secret-file", "SECRET"],
            2,
            "not both",
        ),
        (["serve", "--server-key", "SERVER_PUBLIC", "--authorized-keys", "CLIENTS"], 2, "holds only a public key"),
        (["serve", "--server-key", "SERVER_SECRET", "--authorized-keys", "MISSING"], 2, "cannot read the key file"),
    ],
)
def test_bad_security_arguments_fail_cleanly(run, key_files, args, code, message):
    command, *flags = args
    flags = [key_files.get(flag, flag) for flag in flags]
    if command == "client":
        full = ["client", free_tcp_address(), "--env", "CartPole-v1", "--connect-timeout", "5", *flags]
    else:
        full = ["serve", "--bind", free_tcp_address(), "--num-envs", "1", "--steps", "10", "--connect-timeout", "5"]
        full += ["--no-progress", *flags]
    result = finished(run, *full)
    assert_clean_failure(result, code, "gym-remote: error:", message)
    assert "listening on" not in result.stdout, result


def test_garbage_key_text_is_a_usage_error(run):
    garbage = "#" * 40
    result = finished(
        run, "client", free_tcp_address(), "--env", "CartPole-v1", "--server-key", garbage, "--client-key", garbage
    )
    assert_clean_failure(result, 2, "neither a key file nor a Z85 key")


def slow_cartpole(delay: float = 1.0):
    """CartPole that takes ``delay`` seconds to make (a child process's ``--factory``)."""
    import time

    import gymnasium as gym

    time.sleep(delay)
    return gym.make("CartPole-v1")


def test_unauthorized_clients_with_slow_envs_exit(run, reaper, tmp_path):
    """Eight clients whose envs take 2 s to make: libzmq gives up on about half of their connections meanwhile."""
    from gym_remote import RemoteVectorEnv

    create_key_files("server", tmp_path / "keys")
    create_key_files("alice", tmp_path / "clients")
    create_key_files("mallory", tmp_path / "others")
    envs = RemoteVectorEnv(
        num_envs=1,
        server_key=str(tmp_path / "keys" / "server.key_secret"),
        authorized_keys=str(tmp_path / "clients"),
        connect_timeout=30,
    )
    try:
        clients = [
            cli_client(
                reaper,
                tmp_path,
                f"mallory{index}",
                envs.address,
                "--factory",
                "tests.test_cli_security:slow_cartpole",
                "--env-kwargs",
                '{"delay": 2.0}',
                "--connect-timeout",
                "3",
                "--server-key",
                str(tmp_path / "keys" / "server.key"),
                "--client-key",
                str(tmp_path / "others" / "mallory.key_secret"),
            )
            for index in range(8)
        ]
        deadline = time.monotonic() + 12  # each should be done after about 1 + 2 + 3 s at most
        wait_until(
            lambda: all(client.process.poll() is not None for client in clients) or time.monotonic() > deadline,
            15,
            "the clients",
        )
        hung = [client.name for client in clients if client.process.poll() is None]
        assert not hung, f"still running after 12 s, silently: {hung}"
        for client in clients:
            assert_clean_failure(client, 1, "authorized_keys")
    finally:
        envs.close()
