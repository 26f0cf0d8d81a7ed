"""gym_remote.security piece by piece: key files, secrets, key loading, authorized keys, the argument
rules of server_security/client_security, loopback detection, and the Gatekeeper's decisions as real
ZeroMQ connections see them (CURVE and plain clients against a ROUTER whose ZAP requests it answers).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import stat
import threading
import time
import traceback
import warnings
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest
import zmq
import zmq.auth
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

import gym_remote.security as security
from gym_remote import RemoteVectorEnv
from gym_remote.links.gate import ZAP_ENDPOINT, Gatekeeper, handshake_failure_reason
from gym_remote.links.zeromq import use_curve
from gym_remote.security import (
    AuthorizedKeys,
    ClientSecurity,
    GatePolicy,
    KeyPair,
    SecurityOptions,
    ServerSecurity,
    client_security,
    create_key_files,
    is_local_endpoint,
    keys_from_secret,
    load_key,
    read_secret_file,
    server_security,
)
from gym_remote.vector_env import _security
from tests.helpers import call_interrupted_at, wait_until

LOGGER = "gym_remote.security"
LONG_SECRET = "correct-horse-battery-staple-0123456789"
OTHER_SECRET = "another-long-shared-secret-abcdefghij"


def _key_pair(directory: Path, name: str) -> KeyPair:
    """``create_key_files(name, directory)`` and the pair read back with zmq.auth."""
    create_key_files(name, directory)
    public, secret = zmq.auth.load_certificate(str(directory / f"{name}.key_secret"))
    return KeyPair(public, secret)


# -- KeyPair -----------------------------------------------------------------------------------------


def test_key_pair_generate_and_from_secret_agree():
    pair = KeyPair.generate()
    assert len(pair.public) == len(pair.secret) == 40
    assert KeyPair.from_secret(pair.secret) == pair
    assert KeyPair.generate() != pair
    assert KeyPair(pair.public).secret is None


def test_reprs_keep_secrets_out_of_logs_and_tracebacks():
    """What a log line or a traceback shows of the security objects never holds a secret or a secret key."""
    pair = KeyPair.generate()
    options = SecurityOptions(server_key=pair.secret.decode(), secret="correct horse battery staple")
    server = ServerSecurity(pair, AuthorizedKeys(), "secret")
    client = ClientSecurity(KeyPair.generate().public, pair)
    for shown in (repr(pair), repr(options), str(options), repr(server), repr(client)):
        assert pair.secret.decode() not in shown and "horse" not in shown, shown
    assert pair.public.decode() in repr(pair)


# -- key files ---------------------------------------------------------------------------------------


def test_create_key_files_writes_a_loadable_pair(tmp_path):
    directory = tmp_path / "new" / "keys"  # created on demand
    public_path, secret_path = create_key_files("worker-1", directory)
    assert public_path == str(directory / "worker-1.key")
    assert secret_path == str(directory / "worker-1.key_secret")
    public, no_secret = zmq.auth.load_certificate(public_path)
    public_again, secret = zmq.auth.load_certificate(secret_path)
    assert no_secret is None
    assert public == public_again and len(public) == 40
    assert zmq.curve_public(secret) == public
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600
    assert os.stat(public_path).st_mode & stat.S_IRUSR
    assert sorted(os.listdir(directory)) == ["worker-1.key", "worker-1.key_secret"]
    # each call makes a new pair
    other_public, _ = zmq.auth.load_certificate(create_key_files("worker-2", directory)[0])
    assert other_public != public


def test_create_key_files_secret_is_owner_only_whatever_the_umask(tmp_path):
    previous = os.umask(0)
    try:
        _, secret_path = create_key_files("open-umask", tmp_path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600


@pytest.mark.parametrize("existing", ["alice.key", "alice.key_secret", "both"])
def test_create_key_files_never_overwrites(tmp_path, existing):
    if existing == "both":
        create_key_files("alice", tmp_path)
    else:
        (tmp_path / existing).write_text("keep me\n")
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    with pytest.raises(FileExistsError, match="exists already"):
        create_key_files("alice", tmp_path)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


@pytest.mark.parametrize("name", ["", "../x", "a/b", "/abs", ".hidden", ".", ".."])
def test_create_key_files_rejects_names_that_are_not_plain(tmp_path, name):
    directory = tmp_path / "keys"
    with pytest.raises(ValueError, match="plain file name"):
        create_key_files(name, directory)
    assert not directory.exists()  # checked before anything is created


# -- secrets -----------------------------------------------------------------------------------------


def test_read_secret_file_strips_whitespace_and_keeps_quiet_when_private(tmp_path, caplog):
    path = tmp_path / "secret"
    path.write_text(f"  {LONG_SECRET} \n\n")
    path.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert read_secret_file(path) == LONG_SECRET
        assert read_secret_file(str(path)) == LONG_SECRET
    assert not caplog.records


@pytest.mark.parametrize(
    ("content", "secret"),
    [
        (b"\xef\xbb\xbf" + LONG_SECRET.encode() + b"\r\n", LONG_SECRET),  # a Windows editor's file
        (b" \t\v\f" + LONG_SECRET.encode() + b"\n\n", LONG_SECRET),
        (LONG_SECRET.encode() + "\u00a0".encode(), LONG_SECRET + "\u00a0"),  # only ASCII whitespace is stripped
        (b"a\r\nb" + LONG_SECRET.encode(), "a\r\nb" + LONG_SECRET),  # no newline translation inside
        (b"\xef\xbb\xbf\xef\xbb\xbf" + LONG_SECRET.encode(), "\ufeff" + LONG_SECRET),  # one mark only
    ],
)
def test_read_secret_file_drops_one_byte_order_mark_and_the_ascii_whitespace_around(tmp_path, content, secret):
    path = tmp_path / "secret"
    path.write_bytes(content)
    path.chmod(0o600)
    assert read_secret_file(path) == secret


def test_read_secret_file_refuses_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"\xff" + LONG_SECRET.encode())
    path.chmod(0o600)
    with pytest.raises(ValueError, match="not UTF-8"):
        read_secret_file(path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_read_secret_file_warns_when_others_can_read_it(tmp_path, caplog, mode):
    path = tmp_path / "secret"
    path.write_text(LONG_SECRET)
    path.chmod(mode)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert read_secret_file(path) == LONG_SECRET
    messages = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    assert len(messages) == 1 and "chmod 600" in messages[0] and str(path) in messages[0], messages


@pytest.mark.parametrize("content", ["", "\n", "  \t\n  "])
def test_read_secret_file_rejects_an_empty_secret(tmp_path, content):
    path = tmp_path / "secret"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(ValueError, match="empty"):
        read_secret_file(path)


def test_keys_from_secret_is_deterministic_and_distinct():
    server, clients = keys_from_secret(LONG_SECRET)
    assert keys_from_secret(LONG_SECRET) == (server, clients)
    assert keys_from_secret(LONG_SECRET.encode()) == (server, clients)  # str and its UTF-8 bytes agree
    assert server != clients
    for pair in (server, clients):
        assert len(pair.public) == len(pair.secret) == 40
        assert zmq.curve_public(pair.secret) == pair.public
    other_server, other_clients = keys_from_secret(OTHER_SECRET)
    assert {other_server.public, other_clients.public}.isdisjoint({server.public, clients.public})


def test_keys_from_secret_follows_the_documented_derivation():
    import hashlib

    derived = hashlib.scrypt(
        LONG_SECRET.encode(), salt=b"gym_remote/curve-keys-from-secret/v1", n=2**14, r=8, p=1, dklen=64
    )
    server, clients = keys_from_secret(LONG_SECRET)
    assert server.secret == z85.encode(derived[:32])
    assert clients.secret == z85.encode(derived[32:])


def test_keys_from_secret_warns_about_short_secrets():
    with pytest.warns(UserWarning, match="only 15 characters"):
        keys_from_secret("a" * 15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        keys_from_secret("a" * 16)


@pytest.mark.parametrize("secret", ["", b""])
def test_keys_from_secret_rejects_an_empty_secret(secret):
    with pytest.raises(ValueError, match="empty"):
        keys_from_secret(secret)


# -- load_key ----------------------------------------------------------------------------------------


def test_load_key_from_files_and_z85_text(tmp_path):
    alice = _key_pair(tmp_path, "alice")
    for source in (tmp_path / "alice.key_secret", str(tmp_path / "alice.key_secret")):
        assert load_key(source, secret=True, what="client_key") == alice
        assert load_key(source, secret=False, what="server_key") == KeyPair(alice.public)
    assert load_key(tmp_path / "alice.key", secret=False, what="server_key") == KeyPair(alice.public)
    assert load_key(alice.public.decode(), secret=False, what="server_key") == KeyPair(alice.public)
    assert load_key(alice.public, secret=False, what="server_key") == KeyPair(alice.public)
    assert load_key(alice.secret.decode(), secret=True, what="client_key") == alice
    assert load_key(alice.secret, secret=True, what="client_key") == alice


def test_load_key_missing_file(tmp_path):
    missing = tmp_path / "nobody.key"
    with pytest.raises(ValueError, match=r"server_key: cannot read the key file .*nobody\.key"):
        load_key(missing, secret=False, what="server_key")


def test_load_key_file_that_is_not_a_certificate(tmp_path):
    path = tmp_path / "junk.key"
    path.write_text("hello, world\n")
    with pytest.raises(ValueError, match="authorized_keys: cannot read the key file"):
        load_key(path, secret=False, what="authorized_keys")


def test_load_key_public_only_file_when_a_secret_is_needed(tmp_path):
    _key_pair(tmp_path, "alice")
    with pytest.raises(
        ValueError, match=r"client_key: .*alice\.key' holds only a public key; give the NAME\.key_secret"
    ):
        load_key(tmp_path / "alice.key", secret=True, what="client_key")


@pytest.mark.parametrize(
    "text",
    [
        "~" * 40,  # not in the Z85 alphabet
        b"~" * 40,
        "0123456789" * 3 + "_" * 10,
        "#" * 40,  # Z85 characters whose 5-character groups overflow 32 bits
        b"#" * 40,
        "é" * 40,  # not ASCII
    ],
)
def test_load_key_rejects_garbage_text_with_a_clear_message(text):
    with pytest.raises(ValueError, match="server_key: .* is neither a key file nor a Z85 key"):
        load_key(text, secret=False, what="server_key")


def test_load_key_reports_a_missing_file_whose_path_is_40_characters():
    """A 40-character path is ambiguous with a Z85 key; the key files' suffixes settle it."""
    path = "/home/alice/keys/clients/worker-0001.key"
    assert len(path) == 40 and not os.path.exists(path)
    with pytest.raises(ValueError, match="cannot read the key file"):
        load_key(path, secret=False, what="authorized_keys")


def test_load_key_warns_about_a_secret_file_others_can_read(tmp_path, caplog):
    _key_pair(tmp_path, "alice")
    path = tmp_path / "alice.key_secret"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_key(path, secret=True, what="client_key")
        assert not caplog.records
        path.chmod(0o644)
        load_key(path, secret=True, what="client_key")
        load_key(path, secret=False, what="server_key")  # only a public key taken: no warning
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1 and "client_key" in messages[0] and "chmod 600" in messages[0], messages


# -- AuthorizedKeys ----------------------------------------------------------------------------------


def test_authorized_keys_from_directories_files_and_z85(tmp_path):
    clients, more = tmp_path / "clients", tmp_path / "more"
    alice, bob = _key_pair(clients, "alice"), _key_pair(clients, "bob")
    carol, dave = _key_pair(more, "carol"), _key_pair(more, "dave")
    (clients / "README").write_text("not a key\n")
    (clients / "broken.key").write_text("garbage\n")  # skipped with a warning
    erin, frank = KeyPair.generate(), KeyPair.generate()
    keys = AuthorizedKeys(
        [clients, str(more / "carol.key"), more / "dave.key_secret", erin.public.decode(), frank.public]
    )
    assert keys.lookup(alice.public) == "alice"
    assert keys.lookup(bob.public) == "bob"
    assert keys.lookup(carol.public) == "carol"
    assert keys.lookup(dave.public) == "dave"  # a .key_secret file given on its own: its public key
    assert keys.lookup(erin.public) == keys.lookup(frank.public) == "key"
    assert keys.lookup(KeyPair.generate().public) is None
    assert len(keys) == 6
    keys.add(KeyPair.generate().public, "extra")
    assert len(keys) == 7


def test_authorized_keys_skips_broken_files_with_a_warning(tmp_path, caplog):
    alice = _key_pair(tmp_path, "alice")
    (tmp_path / "broken.key").write_text("garbage\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        keys = AuthorizedKeys([tmp_path])
    assert keys.lookup(alice.public) == "alice" and len(keys) == 1
    assert any("broken.key" in record.getMessage() for record in caplog.records), caplog.records


def test_authorized_keys_rejects_a_missing_file(tmp_path):
    with pytest.raises(ValueError, match="authorized_keys: cannot read the key file"):
        AuthorizedKeys([tmp_path / "missing.key"])


def test_authorized_keys_empty():
    keys = AuthorizedKeys()
    assert len(keys) == 0 and keys.lookup(KeyPair.generate().public) is None


def test_authorized_keys_rescans_directories_at_most_once_per_interval(tmp_path, monkeypatch):
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(security, "time", SimpleNamespace(monotonic=lambda: clock.now))
    known = _key_pair(tmp_path, "known")
    keys = AuthorizedKeys([tmp_path])
    scans = []
    original_scan = keys._scan
    monkeypatch.setattr(keys, "_scan", lambda: (scans.append(clock.now), original_scan())[1])

    late = _key_pair(tmp_path, "late")  # added while the "server" runs
    clock.now += 0.5
    assert keys.lookup(late.public) is None  # scanned less than RESCAN_SECONDS ago: no rescan
    assert keys.lookup(known.public) == "known"
    assert scans == []
    clock.now += AuthorizedKeys.RESCAN_SECONDS - 0.5
    assert keys.lookup(late.public) == "late"  # an unknown key makes it read the directory again
    assert scans == [clock.now]
    assert keys.lookup(late.public) == "late" and keys.lookup(known.public) == "known"  # known: no rescan
    stranger = KeyPair.generate().public
    for _ in range(5):
        clock.now += 0.1
        assert keys.lookup(stranger) is None
    assert len(scans) == 1  # a flood of unknown keys reads the directory at most once per interval
    clock.now += 0.6
    os.remove(tmp_path / "known.key")  # a removed file takes its key away at the next rescan
    assert keys.lookup(stranger) is None
    assert len(scans) == 2
    assert keys.lookup(known.public) is None
    assert keys.lookup(late.public) == "late"


def test_authorized_keys_added_keys_survive_rescans(tmp_path, monkeypatch):
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(security, "time", SimpleNamespace(monotonic=lambda: clock.now))
    keys = AuthorizedKeys([tmp_path])
    added = KeyPair.generate().public
    keys.add(added, "local")
    clock.now += 10
    assert keys.lookup(KeyPair.generate().public) is None  # a rescan
    assert keys.lookup(added) == "local"


# -- server_security / client_security ---------------------------------------------------------------


@pytest.fixture
def keys_dir(tmp_path):
    """``server`` and ``alice`` key pairs in ``tmp_path/keys`` and ``tmp_path/clients``."""
    server = _key_pair(tmp_path / "keys", "server")
    alice = _key_pair(tmp_path / "clients", "alice")
    return SimpleNamespace(root=tmp_path, server=server, alice=alice, clients=tmp_path / "clients")


def test_no_security_means_none():
    assert server_security() is None
    assert client_security() is None


def test_server_security_with_keys(keys_dir):
    result = server_security(keys_dir.root / "keys" / "server.key_secret", keys_dir.clients)
    assert isinstance(result, ServerSecurity)
    assert result.how == "keys"
    assert result.keys == keys_dir.server
    assert result.authorized.lookup(keys_dir.alice.public) == "alice"
    # a list of sources and Z85 text work too
    listed = server_security(keys_dir.server.secret.decode(), [str(keys_dir.clients / "alice.key")])
    assert listed.keys == keys_dir.server and listed.authorized.lookup(keys_dir.alice.public) == "alice"


def test_server_security_warns_when_no_client_can_join(tmp_path, caplog):
    server = _key_pair(tmp_path / "keys", "server")
    (tmp_path / "empty").mkdir()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        result = server_security(server.secret, tmp_path / "empty")
    assert result.how == "keys" and len(result.authorized) == 0
    assert any("no client can join" in record.getMessage() for record in caplog.records), caplog.records


def test_server_security_with_a_secret():
    server, clients = keys_from_secret(LONG_SECRET)
    result = server_security(secret=LONG_SECRET)
    assert result.how == "secret"
    assert result.keys == server
    assert result.authorized.lookup(clients.public) == "secret"
    assert len(result.authorized) == 1


def test_server_security_with_a_secret_and_authorized_keys(keys_dir):
    _, clients = keys_from_secret(LONG_SECRET)
    result = server_security(authorized_keys=keys_dir.clients, secret=LONG_SECRET)
    assert result.how == "keys and secret"
    assert result.authorized.lookup(clients.public) == "secret"
    assert result.authorized.lookup(keys_dir.alice.public) == "alice"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"authorized_keys": "CLIENTS"}, "authorized_keys needs server_key"),
        ({"server_key": "SERVER"}, "server_key needs authorized_keys"),
        ({"server_key": "SERVER", "authorized_keys": "CLIENTS", "secret": LONG_SECRET}, "not both"),
        ({"server_key": "SERVER", "secret": LONG_SECRET}, "not both"),
        ({"server_key": "SERVER_PUBLIC", "authorized_keys": "CLIENTS"}, "holds only a public key"),
        ({"server_key": "MISSING", "authorized_keys": "CLIENTS"}, "server_key: cannot read the key file"),
    ],
)
def test_server_security_argument_errors(keys_dir, arguments, message):
    paths = {
        "CLIENTS": keys_dir.clients,
        "SERVER": keys_dir.root / "keys" / "server.key_secret",
        "SERVER_PUBLIC": keys_dir.root / "keys" / "server.key",
        "MISSING": keys_dir.root / "keys" / "missing.key_secret",
    }
    resolved = {name: paths.get(value, value) for name, value in arguments.items()}
    with pytest.raises(ValueError, match=message):
        server_security(**resolved)


def test_client_security_with_keys(keys_dir):
    result = client_security(keys_dir.root / "keys" / "server.key", keys_dir.clients / "alice.key_secret")
    assert isinstance(result, ClientSecurity)
    assert result.server_public == keys_dir.server.public
    assert result.keys == keys_dir.alice
    assert result.to_payload() == {
        "server_key": keys_dir.server.public.decode(),
        "client_key": keys_dir.alice.secret.decode(),
    }
    # a server's secret file also gives its public key
    same = client_security(keys_dir.root / "keys" / "server.key_secret", keys_dir.alice.secret)
    assert same == result


def test_client_and_server_derive_matching_keys_from_a_secret():
    client = client_security(secret=LONG_SECRET)
    server = server_security(secret=LONG_SECRET)
    assert client.server_public == server.keys.public
    assert server.authorized.lookup(client.keys.public) == "secret"
    wrong = client_security(secret=OTHER_SECRET)
    assert wrong.server_public != server.keys.public
    assert server.authorized.lookup(wrong.keys.public) is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"server_key": "SERVER_PUBLIC"}, "needs both server_key"),
        ({"client_key": "ALICE_SECRET"}, "needs both server_key"),
        ({"secret": LONG_SECRET, "server_key": "SERVER_PUBLIC"}, "not both"),
        ({"secret": LONG_SECRET, "client_key": "ALICE_SECRET"}, "not both"),
        ({"secret": LONG_SECRET, "server_key": "SERVER_PUBLIC", "client_key": "ALICE_SECRET"}, "not both"),
        ({"server_key": "SERVER_PUBLIC", "client_key": "ALICE_PUBLIC"}, "client_key: .*holds only a public key"),
        ({"server_key": "MISSING", "client_key": "ALICE_SECRET"}, "server_key: cannot read the key file"),
        ({"server_key": "SERVER_PUBLIC", "client_key": "~" * 40}, "client_key: .*neither a key file nor a Z85 key"),
        ({"secret": ""}, "empty"),
    ],
)
def test_client_security_argument_errors(keys_dir, arguments, message):
    paths = {
        "SERVER_PUBLIC": keys_dir.root / "keys" / "server.key",
        "ALICE_SECRET": keys_dir.clients / "alice.key_secret",
        "ALICE_PUBLIC": keys_dir.clients / "alice.key",
        "MISSING": keys_dir.root / "keys" / "missing.key",
    }
    resolved = {name: paths.get(value, value) for name, value in arguments.items()}
    with pytest.raises(ValueError, match=message):
        client_security(**resolved)


# -- is_local_endpoint and RemoteVectorEnv's choice -----------------------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    [
        "ipc:///tmp/gym-remote/server",
        "inproc://server",
        "tcp://127.0.0.1:5555",
        "tcp://127.0.0.1:*",
        "tcp://127.1.2.3:80",
        "tcp://localhost:5555",
        "tcp://[::1]:5555",
    ],
)
def test_local_endpoints(endpoint):
    assert is_local_endpoint(endpoint) is True


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp://0.0.0.0:5555",
        "tcp://*:5555",
        "tcp://10.0.0.5:5555",
        "tcp://192.168.1.2:*",
        "tcp://[::]:5555",
        "tcp://eth0:5555",
        "tcp://example.com:5555",
        "tcp://localhost.example.com:5555",
        "udp://127.0.0.1:5555",
        "ws://127.0.0.1:5555",
    ],
)
def test_endpoints_reachable_from_elsewhere(endpoint):
    assert is_local_endpoint(endpoint) is False


def test_launched_clients_on_a_network_bind_get_ephemeral_curve():
    server, local = _security("tcp://0.0.0.0:5555", SecurityOptions(), True)
    assert isinstance(server, ServerSecurity) and server.how == "local clients only"
    assert zmq.curve_public(server.keys.secret) == server.keys.public
    assert isinstance(local, ClientSecurity)
    assert local.server_public == server.keys.public
    assert server.authorized.lookup(local.keys.public) == "local"
    assert len(server.authorized) == 1
    again, _ = _security("tcp://0.0.0.0:5555", SecurityOptions(), True)
    assert again.keys != server.keys  # a fresh pair each time


def test_network_bind_without_security_or_launched_clients_is_refused(caplog):
    with pytest.raises(ValueError, match="insecure"):
        _security("tcp://0.0.0.0:5555", SecurityOptions(), False)
    with caplog.at_level(logging.WARNING, logger="gym_remote"):
        assert _security("tcp://0.0.0.0:5555", SecurityOptions(insecure=True), False) == (None, None)
    assert any("without authentication or encryption (insecure)" in record.getMessage() for record in caplog.records), (
        caplog.records
    )


@pytest.mark.parametrize("bind", ["tcp://127.0.0.1:*", "ipc:///tmp/x/server"])
def test_loopback_without_security_stays_plain(bind):
    assert _security(bind, SecurityOptions(), False) == (None, None)
    assert _security(bind, SecurityOptions(), True) == (None, None)


def test_launched_clients_with_a_secret_get_a_key_of_their_own():
    server, local = _security("tcp://127.0.0.1:*", SecurityOptions(secret=LONG_SECRET), True)
    assert server.how == "secret"
    assert local.server_public == server.keys.public
    assert server.authorized.lookup(local.keys.public) == "local"
    assert local.keys != keys_from_secret(LONG_SECRET)[1]


# -- the Gatekeeper through real connections -----------------------------------------------------------

OUTCOMES = {
    zmq.EVENT_HANDSHAKE_SUCCEEDED,
    zmq.EVENT_HANDSHAKE_FAILED_AUTH,
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
}


def close_gatekeeper(gatekeeper: Gatekeeper, sock: zmq.Socket | None = None) -> None:
    """``gatekeeper.close(sock)``; its thread must be gone afterwards."""
    gatekeeper.close(sock)
    assert not gatekeeper._thread.is_alive()


class Peer:
    """A DEALER (in the peers' own context) that connects once and watches its handshake."""

    def __init__(self, context: zmq.Context, address: str, keys: KeyPair | None, server_public: bytes | None) -> None:
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RECONNECT_IVL, -1)  # one handshake per peer: counts stay exact
        if keys is not None:
            use_curve(self.socket, ClientSecurity(server_public, keys))
        self.monitor = self.socket.get_monitor_socket(zmq.EVENT_ALL)
        self.socket.connect(address)
        self.closed = False
        self.result: tuple[int, int] | None = None

    def outcome(self, timeout: float = 5.0) -> tuple[int, int] | None:
        """The handshake's (event, value), or None if nothing was decided within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.result is None:
            remaining = deadline - time.monotonic()
            if not self.monitor.poll(max(0, int(remaining * 1000))):
                return None
            event = recv_monitor_message(self.monitor)
            if event["event"] in OUTCOMES:
                self.result = event["event"], int(event["value"])
        return self.result

    def close(self) -> None:
        if not self.closed:
            self.socket.disable_monitor()
            self.monitor.close(linger=0)
            self.socket.close(linger=0)
            self.closed = True


SUCCEEDED = (zmq.EVENT_HANDSHAKE_SUCCEEDED, 0)
DENIED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400)
MECHANISM_MISMATCH = (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)


class Rig:
    """A ROUTER watched by a Gatekeeper in a context of its own, and peers that connect to it."""

    def __init__(
        self,
        bind: str,
        authorized: AuthorizedKeys | None,
        server_keys: KeyPair | None = None,
        **limits,
    ) -> None:
        self.context = zmq.Context()
        self.peers_context = zmq.Context()
        self.server_keys = server_keys
        self.gatekeeper = Gatekeeper(self.context, authorized, **limits)
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        if server_keys is not None:
            use_curve(self.router, ServerSecurity(server_keys, authorized or AuthorizedKeys(), "keys"))
        self.gatekeeper.watch(self.router)
        self.gatekeeper.start()
        self.router.bind(bind)
        self.address = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self.peers: list[Peer] = []

    def connect(self, keys: KeyPair | None = None, server_public: bytes | None = None) -> Peer:
        if keys is not None and server_public is None:
            server_public = self.server_keys.public
        peer = Peer(self.peers_context, self.address, keys, server_public)
        self.peers.append(peer)
        return peer

    def stats(self) -> dict:
        return self.gatekeeper.stats()

    def decided(self) -> int:
        stats = self.stats()
        return stats["handshakes_accepted"] + sum(stats["handshakes_denied"].values())

    def close(self, timeout: float = 15.0) -> None:
        """Peers first, then gatekeeper.close(router), router.close(0), context.term(): must not hang."""
        errors: list[str] = []

        def close_all() -> None:
            try:
                for peer in self.peers:
                    peer.close()
                self.peers_context.term()
                close_gatekeeper(self.gatekeeper, self.router)
                self.router.close(0)
                self.context.term()
            except BaseException:  # noqa: BLE001 - reported below
                errors.append(traceback.format_exc())

        closer = threading.Thread(target=close_all, daemon=True)
        closer.start()
        closer.join(timeout)
        assert not closer.is_alive(), f"closing the gatekeeper, its router and context hung for {timeout} s"
        if errors:
            pytest.fail("closing raised:\n" + "\n".join(errors), pytrace=False)


@pytest.fixture
def rigs():
    """Make rigs with ``rigs.append(Rig(...))``; each is closed (with a bounded wait) at teardown."""
    made: list[Rig] = []
    yield made
    for rig in made:
        rig.close()


@pytest.fixture
def curve(tmp_path):
    """A server key pair, a directory of authorized keys holding ``alice``, and alice's pair."""
    clients = tmp_path / "clients"
    alice = _key_pair(clients, "alice")
    return SimpleNamespace(server=KeyPair.generate(), clients=clients, alice=alice)


def _tcp() -> str:
    return "tcp://127.0.0.1:*"


def _ipc(tmp_path: Path) -> str:
    return f"ipc://{tmp_path}/router"


def test_gatekeeper_accepts_authorized_keys_and_names_their_user(rigs, curve):
    rig = Rig(_tcp(), AuthorizedKeys([curve.clients]), curve.server, max_connections=10)
    rigs.append(rig)
    peer = rig.connect(curve.alice)
    assert peer.outcome() == SUCCEEDED
    peer.socket.send(b"hello")
    assert rig.router.poll(5000), "no message from the authenticated peer"
    frames = rig.router.recv_multipart(copy=False)
    assert frames[-1].bytes == b"hello"
    assert frames[-1].get("User-Id") == "alice"
    assert rig.stats() == {"connections": 1, "handshakes_accepted": 1, "handshakes_denied": {}}


def test_gatekeeper_names_secret_clients_secret(rigs, tmp_path):
    server = server_security(secret=LONG_SECRET)
    client = client_security(secret=LONG_SECRET)
    rig = Rig(_ipc(tmp_path), server.authorized, server.keys, max_connections=10)
    rigs.append(rig)
    peer = rig.connect(client.keys, client.server_public)
    assert peer.outcome() == SUCCEEDED
    peer.socket.send(b"x")
    assert rig.router.poll(5000)
    assert rig.router.recv_multipart(copy=False)[-1].get("User-Id") == "secret"


def test_gatekeeper_denies_unknown_keys_for_good(rigs, curve):
    rig = Rig(_tcp(), AuthorizedKeys([curve.clients]), curve.server, max_connections=10)
    rigs.append(rig)
    assert rig.connect(KeyPair.generate()).outcome() == DENIED
    assert rig.connect(curve.alice).outcome() == SUCCEEDED
    wait_until(lambda: rig.decided() == 2, 5, "both handshakes to be counted")
    stats = rig.stats()
    assert stats["handshakes_accepted"] == 1 and stats["handshakes_denied"] == {"key not authorized": 1}


def test_gatekeeper_reads_a_key_added_while_it_runs(rigs, curve):
    authorized = AuthorizedKeys([curve.clients])
    authorized.RESCAN_SECONDS = 0.0  # every unknown key rereads the directory
    rig = Rig(_tcp(), authorized, curve.server, max_connections=10)
    rigs.append(rig)
    bob_dir = curve.clients.parent / "staging"
    bob = _key_pair(bob_dir, "bob")
    assert rig.connect(bob).outcome() == DENIED
    os.rename(bob_dir / "bob.key", curve.clients / "bob.key")
    peer = rig.connect(bob)
    assert peer.outcome() == SUCCEEDED
    peer.socket.send(b"x")
    assert rig.router.poll(5000)
    assert rig.router.recv_multipart(copy=False)[-1].get("User-Id") == "bob"


def test_a_peer_with_another_servers_key_is_counted_and_logged_with_its_address(rigs, curve, caplog):
    rig = Rig(_tcp(), AuthorizedKeys([curve.clients]), curve.server, max_connections=10)
    rigs.append(rig)
    wrong_server = KeyPair.generate()  # as a client holding another secret derives it
    with caplog.at_level(logging.WARNING, logger="gym_remote"):
        peer = rig.connect(curve.alice, wrong_server.public)
        assert peer.outcome() != SUCCEEDED
        reason = handshake_failure_reason(zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        wait_until(lambda: rig.stats()["handshakes_denied"].get(reason, 0) >= 1, 10, "the failure to be counted")
    assert rig.stats()["handshakes_accepted"] == 0
    assert any(f"refused a connection from 127.0.0.1: {reason}" in record.getMessage() for record in caplog.records), [
        record.getMessage() for record in caplog.records
    ]


@pytest.mark.parametrize("server_uses_curve", [True, False], ids=["plain-peer-curve-server", "curve-peer-plain-server"])
def test_mechanism_mismatch_is_cut_off_before_the_gatekeeper(rigs, curve, server_uses_curve):
    authorized = AuthorizedKeys([curve.clients])
    rig = Rig(
        _tcp(),
        authorized if server_uses_curve else None,
        curve.server if server_uses_curve else None,
        max_connections=10,
    )
    rigs.append(rig)
    peer = rig.connect(None) if server_uses_curve else rig.connect(curve.alice, curve.server.public)
    outcome = peer.outcome()
    # libzmq reports the mismatch, or (a race with the server closing first) a handshake cut off without detail
    assert outcome == MECHANISM_MISMATCH or (
        outcome is not None and outcome[0] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    ), outcome
    time.sleep(0.1)
    stats = rig.stats()  # no ZAP request (the greeting already failed), but the failure is counted
    assert stats["handshakes_accepted"] == 0, stats
    mismatch = handshake_failure_reason(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    assert set(stats["handshakes_denied"]) <= {mismatch}, stats


def test_gatekeeper_accepts_plain_peers_when_it_has_no_keys(rigs, tmp_path):
    rig = Rig(_ipc(tmp_path), None, max_connections=10)
    rigs.append(rig)
    peer = rig.connect()
    assert peer.outcome() == SUCCEEDED
    peer.socket.send(b"x")
    assert rig.router.poll(5000)
    assert rig.router.recv_multipart(copy=False)[-1].get("User-Id") == ""
    assert rig.stats()["handshakes_accepted"] == 1


def test_gatekeeper_denies_a_mechanism_other_than_its_own(rigs, curve):
    # a plain ROUTER whose gatekeeper holds keys: plain peers are not let in unauthenticated
    plain = Rig(_tcp(), AuthorizedKeys([curve.clients]), max_connections=10)
    rigs.append(plain)
    assert plain.connect().outcome() == DENIED
    wait_until(lambda: plain.decided() == 1, 5, "the denial to be counted")
    assert plain.stats()["handshakes_denied"] == {"mechanism NULL not accepted": 1}
    # a CURVE ROUTER whose gatekeeper holds no keys: nobody gets in
    keyless = Rig(_tcp(), None, curve.server, max_connections=10)
    rigs.append(keyless)
    assert keyless.connect(curve.alice).outcome() == DENIED
    wait_until(lambda: keyless.decided() == 1, 5, "the denial to be counted")
    assert keyless.stats()["handshakes_denied"] == {"mechanism CURVE not accepted": 1}


@pytest.mark.parametrize(
    ("plain", "transport"), [(False, "tcp"), (True, "tcp"), (False, "ipc")], ids=["curve-tcp", "plain-tcp", "curve-ipc"]
)
def test_gatekeeper_token_bucket(rigs, curve, tmp_path, plain, transport):
    """One process's handshakes share a bucket (on tcp: one address; on ipc: one peer process)."""
    rate = 1.0
    rig = Rig(
        _tcp() if transport == "tcp" else _ipc(tmp_path),
        None if plain else AuthorizedKeys([curve.clients]),
        None if plain else curve.server,
        max_connections=100,
        handshake_rate=rate,
    )
    rigs.append(rig)
    assert rig.gatekeeper.handshake_burst == 2 * rate
    keys = None if plain else curve.alice
    attempts = 5
    started = time.monotonic()
    peers = [rig.connect(keys) for _ in range(attempts)]
    wait_until(lambda: rig.decided() == attempts, 10, "every handshake to be decided")
    elapsed = time.monotonic() - started
    stats = rig.stats()
    accepted = stats["handshakes_accepted"]
    # a burst of 2 * rate, plus what trickled in meanwhile
    assert 2 * rate <= accepted <= 2 * rate + int(elapsed * rate), (stats, elapsed)
    assert stats["handshakes_denied"] == {"handshake rate exceeded": attempts - accepted}, stats

    def succeeded() -> int:
        return [peer.outcome(timeout=0) for peer in peers].count(SUCCEEDED)

    wait_until(lambda: succeeded() == accepted, 5, "the accepted peers to finish their handshakes")
    time.sleep(0.2)
    assert succeeded() == accepted  # the denied ones never get in
    time.sleep(1.0 / rate)  # one token more
    assert rig.connect(keys).outcome() == SUCCEEDED
    assert rig.stats()["handshakes_accepted"] == accepted + 1


def test_gatekeeper_token_bucket_floor():
    context = zmq.Context()
    try:
        gatekeeper = Gatekeeper(context, None, max_connections=1, handshake_rate=0.1)
        assert gatekeeper.handshake_burst == 1.0  # at least one handshake, however low the rate
        gatekeeper.close()
    finally:
        context.term()


def test_temporarily_denied_peer_is_told_500_at_once(rigs, curve):
    """PROTOCOL.md §12.4: "not now" is status 500, which libzmq tells the peer (for 300 it tells nothing)."""
    rig = Rig(_tcp(), AuthorizedKeys([curve.clients]), curve.server, max_connections=100, handshake_rate=0.5)
    rigs.append(rig)  # burst of 1
    assert rig.connect(curve.alice).outcome() == SUCCEEDED
    second = rig.connect(curve.alice)
    wait_until(lambda: rig.decided() == 2, 5, "the second handshake to be decided")
    assert rig.stats()["handshakes_denied"] == {"handshake rate exceeded": 1}
    assert second.outcome(timeout=3) == (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 500)


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_gatekeeper_max_connections(rigs, curve, tmp_path, transport):
    bind = _tcp() if transport == "tcp" else _ipc(tmp_path)
    rig = Rig(bind, AuthorizedKeys([curve.clients]), curve.server, max_connections=2, handshake_rate=1000)
    rigs.append(rig)
    first = [rig.connect(curve.alice) for _ in range(2)]
    for peer in first:
        assert peer.outcome() == SUCCEEDED
    assert rig.stats()["connections"] == 2
    extra = rig.connect(curve.alice)  # a third one open: more than max_connections
    wait_until(lambda: rig.decided() == 3, 5, "the third handshake to be decided")
    stats = rig.stats()
    assert stats["handshakes_accepted"] == 2 and stats["handshakes_denied"] == {"too many connections": 1}, stats
    assert extra.outcome(timeout=0.2) != SUCCEEDED  # not let in
    for peer in [*first, extra]:
        peer.close()
    wait_until(lambda: rig.stats()["connections"] == 0, 10, "the closed connections to be counted out")
    again = [rig.connect(curve.alice) for _ in range(2)]
    for peer in again:
        assert peer.outcome() == SUCCEEDED
    stats = rig.stats()
    assert stats["connections"] == 2 and stats["handshakes_accepted"] == 4, stats


def test_gatekeeper_counts_denied_connections_until_they_close(rigs, curve):
    rig = Rig(_tcp(), AuthorizedKeys([curve.clients]), curve.server, max_connections=1, handshake_rate=1000)
    rigs.append(rig)
    held = rig.connect(curve.alice)
    assert held.outcome() == SUCCEEDED
    denied = rig.connect(curve.alice)
    wait_until(lambda: rig.decided() == 2, 5, "the second handshake to be decided")
    assert rig.stats()["handshakes_denied"] == {"too many connections": 1}
    held.close()
    denied.close()
    wait_until(lambda: rig.stats()["connections"] == 0, 10, "the connections to be counted out")
    assert rig.connect(curve.alice).outcome() == SUCCEEDED


CHILD_PEER = """
import sys, zmq
context = zmq.Context()
peer = context.socket(zmq.DEALER)
peer.setsockopt(zmq.LINGER, 0)
peer.setsockopt(zmq.RECONNECT_IVL, -1)
monitor = peer.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
peer.connect(sys.argv[1])
print("succeeded" if monitor.poll(1500) else "not let in", flush=True)
peer.disable_monitor()
monitor.close(0)
peer.close(0)
context.term()
"""


def test_ipc_peers_of_other_processes_have_budgets_of_their_own(rigs, reaper, tmp_path):
    """PROTOCOL.md §12.4: libzmq names an ipc peer ``localhost:uid:gid:pid``, so each process has its own budget."""
    import subprocess
    import sys

    rig = Rig(_ipc(tmp_path), None, max_connections=100, handshake_rate=0.5)  # a burst of 1
    rigs.append(rig)
    assert rig.connect().outcome() == SUCCEEDED
    assert rig.connect().outcome() != SUCCEEDED  # this process's budget is spent
    child = reaper.popen([sys.executable, "-c", CHILD_PEER, rig.address], stdout=subprocess.PIPE, text=True)
    output, _ = child.communicate(timeout=30)
    assert child.returncode == 0, output
    assert output.strip() == "succeeded", output  # another process: a budget of its own
    assert rig.stats()["handshakes_denied"] == {"handshake rate exceeded": 1}, (rig.stats(), output)


def test_gatekeeper_close_never_raises_right_after_peers_leave():
    """close() races the thread, which may wake on a connection event and stop first (once a bug: zmq.Again)."""
    deadline = time.monotonic() + 3.0  # a few hundred cycles: the race showed within 100 almost always
    cycles = 0
    while time.monotonic() < deadline:
        cycles += 1
        context, peers_context = zmq.Context(), zmq.Context()
        gatekeeper = Gatekeeper(context, None, max_connections=1)
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        gatekeeper.watch(router)
        gatekeeper.start()
        router.bind("tcp://127.0.0.1:*")
        address = router.getsockopt_string(zmq.LAST_ENDPOINT)
        peers = [peers_context.socket(zmq.DEALER) for _ in range(6)]
        for peer in peers:
            peer.setsockopt(zmq.LINGER, 0)
            peer.connect(address)
        time.sleep(0.01)
        for peer in peers:
            peer.close(0)
        peers_context.term()
        failure = None
        try:
            gatekeeper.close(router)
        except zmq.Again as error:
            failure = error
        # after a failure: its traceback keeps close()'s connected PAIR ("waker") open, and context.term() would
        # hang on it; drop it, end the thread and close again
        failure_text = repr(failure) if failure is not None else None
        if failure is not None:
            failure = None
            gc.collect()
        gatekeeper._thread.join(5)
        gatekeeper.close()
        router.close(0)
        closer = threading.Thread(target=context.term, daemon=True)
        closer.start()
        closer.join(10)
        assert not closer.is_alive(), f"context.term() hung after {cycles} cycles"
        if failure_text is not None:
            print(f"Gatekeeper.close() raised {failure_text} in cycle {cycles}")
            raise zmq.Again(f"Gatekeeper.close() raised {failure_text} in cycle {cycles}")


def test_a_gatekeeper_close_interrupted_at_any_call_can_be_called_again():
    """For every n: close() interrupted at its n-th Python call (threading's included, as a Ctrl-C there
    would), then close() again: it returns within its bound, the thread has ended, and the context terminates."""
    for number in range(1, 400):
        context = zmq.Context()
        gatekeeper = Gatekeeper(context, None, max_connections=1)
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        gatekeeper.watch(router)
        gatekeeper.start()
        cut, _ = call_interrupted_at(number, KeyboardInterrupt, functools.partial(gatekeeper.close, router, 2.0))
        closer = threading.Thread(target=gatekeeper.close, args=(router, 2.0), daemon=True)
        closer.start()
        closer.join(5)
        assert not closer.is_alive(), f"interrupted at call {number}: close() again did not return"
        gatekeeper._thread.join(5)
        assert not gatekeeper._thread.is_alive(), f"interrupted at call {number}: the thread is still running"
        router.close(0)
        terminating = threading.Thread(target=context.term, daemon=True)
        terminating.start()
        terminating.join(10)
        assert not terminating.is_alive(), f"interrupted at call {number}: context.term() hung"
        if not cut:
            break
    assert not cut, "close() was never allowed to finish"


# -- the Gatekeeper's ZAP socket, spoken to directly -----------------------------------------------------


class ZapRig:
    """A Gatekeeper (no watched socket) and a REQ socket on its ZAP endpoint, in one context."""

    def __init__(self, authorized: AuthorizedKeys | None, **limits) -> None:
        self.context = zmq.Context()
        self.gatekeeper = Gatekeeper(
            self.context, authorized, max_connections=limits.pop("max_connections", 10), **limits
        )
        self.gatekeeper.start()
        self.request = self.context.socket(zmq.REQ)
        self.request.setsockopt(zmq.LINGER, 0)
        self.request.setsockopt(zmq.RCVTIMEO, 5000)
        self.request.connect(ZAP_ENDPOINT)
        self.sequence = 0

    def ask(self, *frames: bytes) -> list[bytes]:
        self.request.send_multipart(list(frames))
        return self.request.recv_multipart()

    def handshake(self, address: str, mechanism: bytes, *credentials: bytes) -> list[bytes]:
        self.sequence += 1
        request_id = str(self.sequence).encode()
        reply = self.ask(b"1.0", request_id, b"gym_remote", address.encode(), b"", mechanism, *credentials)
        assert reply[:2] == [b"1.0", request_id] and len(reply) == 6, reply
        return reply[2:5]  # status, text, user id

    def close(self) -> None:
        done = threading.Event()

        def close_all() -> None:
            self.request.close(0)
            close_gatekeeper(self.gatekeeper)
            self.context.term()
            done.set()

        threading.Thread(target=close_all, daemon=True).start()
        assert done.wait(15), "closing the gatekeeper hung"


@pytest.fixture
def zap_rigs():
    made: list[ZapRig] = []
    yield made
    for rig in made:
        rig.close()


def test_zap_answers_a_malformed_request_with_500(zap_rigs):
    rig = ZapRig(None)
    zap_rigs.append(rig)
    assert rig.ask(b"1.0", b"7", b"gym_remote") == [b"1.0", b"", b"500", b"malformed ZAP request", b"", b""]
    # and goes on answering
    assert rig.handshake("127.0.0.1", b"NULL") == [b"200", b"OK", b""]


def test_zap_curve_decisions_and_user_ids(zap_rigs, tmp_path):
    alice = _key_pair(tmp_path, "alice")
    rig = ZapRig(AuthorizedKeys([tmp_path]))
    zap_rigs.append(rig)
    assert rig.handshake("10.0.0.1", b"CURVE", z85.decode(alice.public)) == [b"200", b"OK", b"alice"]
    assert rig.handshake("10.0.0.1", b"CURVE", z85.decode(KeyPair.generate().public)) == [
        b"400",
        b"key not authorized",
        b"",
    ]
    assert rig.handshake("10.0.0.1", b"NULL") == [b"400", b"mechanism NULL not accepted", b""]
    assert rig.handshake("10.0.0.1", b"PLAIN", b"user", b"password") == [b"400", b"mechanism PLAIN not accepted", b""]
    assert rig.gatekeeper.stats() == {
        "connections": 0,
        "handshakes_accepted": 1,
        "handshakes_denied": {
            "key not authorized": 1,
            "mechanism NULL not accepted": 1,
            "mechanism PLAIN not accepted": 1,
        },
    }


def test_zap_token_buckets_are_per_address_and_checked_before_keys(zap_rigs, tmp_path):
    alice = _key_pair(tmp_path, "alice")
    rate = 1.0
    rig = ZapRig(AuthorizedKeys([tmp_path]), handshake_rate=rate)
    zap_rigs.append(rig)
    stranger = z85.decode(KeyPair.generate().public)
    started = time.monotonic()
    replies = [rig.handshake("10.0.0.1", b"CURVE", stranger) for _ in range(4)]
    other = rig.handshake("10.0.0.2", b"CURVE", z85.decode(alice.public))
    elapsed = time.monotonic() - started
    if elapsed < 1.0 / rate:  # no token trickled in meanwhile: exact counts
        assert [reply[:2] for reply in replies] == [
            [b"400", b"key not authorized"],
            [b"400", b"key not authorized"],  # denied keys spend tokens too
            [b"500", b"handshake rate exceeded"],
            [b"500", b"handshake rate exceeded"],
        ]
    else:
        assert [b"500", b"handshake rate exceeded", b""] in replies
    assert other == [b"200", b"OK", b"alice"]  # another address has a bucket of its own


def test_second_gatekeeper_in_a_context_fails_cleanly():
    context = zmq.Context()
    first = Gatekeeper(context, None, max_connections=1)
    try:
        with pytest.raises(zmq.ZMQError):
            Gatekeeper(context, None, max_connections=1)
    finally:
        first.close()
    closer = threading.Thread(target=context.term, daemon=True)
    closer.start()
    closer.join(10)
    assert not closer.is_alive(), "context.term() hung: a failed Gatekeeper left its socket open"


def test_gatekeeper_close_is_idempotent_and_stats_are_copies(zap_rigs):
    rig = ZapRig(None)
    zap_rigs.append(rig)
    rig.handshake("127.0.0.1", b"NULL")
    stats = rig.gatekeeper.stats()
    stats["handshakes_denied"]["made up"] = 1
    assert rig.gatekeeper.stats()["handshakes_denied"] == {}
    close_gatekeeper(rig.gatekeeper)
    assert not rig.gatekeeper._thread.is_alive()
    rig.gatekeeper.close()  # again: nothing to do


def _plain_handshakes(policy: GatePolicy, address: str, count: int) -> list[bytes]:
    """The statuses of ``count`` plain (NULL) handshakes from ``address``, as the ZAP thread asks them."""
    return [policy.answer([b"1.0", b"%d" % index, b"", address.encode(), b"", b"NULL"])[2] for index in range(count)]


def test_a_burst_of_handshakes_from_one_address_is_admitted_up_to_the_burst_then_rated():
    policy = GatePolicy(None, max_connections=10_000, handshake_rate=1.0, handshake_burst=300)
    assert policy.handshake_burst == 300
    statuses = _plain_handshakes(policy, "127.0.0.1", 302)
    assert statuses[:300] == [b"200"] * 300
    assert statuses[-1] == b"500"  # (at most one token trickled in meanwhile)
    assert _plain_handshakes(policy, "127.0.0.2", 1) == [b"200"]  # another address has a bucket of its own
    # the burst is never below twice the rate
    assert GatePolicy(None, max_connections=10, handshake_rate=50.0, handshake_burst=3).handshake_burst == 100


def test_a_server_lets_as_many_clients_as_it_has_slots_join_from_one_address_at_once(tmp_path):
    envs = RemoteVectorEnv(
        num_envs=500,
        bind=f"ipc://{tmp_path}/server",
        observation_space=gym.spaces.Box(-1, 1, (1,)),
        action_space=gym.spaces.Discrete(2),
        connect_timeout=1,
    )
    try:
        policy = envs.unwrapped._server.gatekeeper.policy
        assert _plain_handshakes(policy, "127.0.0.1", 500) == [b"200"] * 500
        assert policy.handshake_burst == 500
    finally:
        envs.close()
