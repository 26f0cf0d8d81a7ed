"""Who may connect: CURVE key pairs, shared secrets, and the gatekeeper that enforces them.

Security lives below the gym_remote protocol, in ZeroMQ's own handshake (ZMTP): with CURVE the
connection is encrypted and the server checks the client's public key before a single gym_remote
message gets through. The gatekeeper answers libzmq's authentication requests (ZAP) in a
thread of its own, because libzmq holds every handshake until the answer comes, whatever the learner
is doing. It also enforces the connection limits that protect a server from floods. What it
decides is :class:`GatePolicy`'s, here; its thread and sockets are in :mod:`gym_remote.links.gate`
(as pyzmq's ZAP policy, ``zmq.auth.base``, lives apart from its thread).

Keys are Z85 text (40 characters), stored in ``zmq.auth``'s certificate files: ``NAME.key`` holds
the public key, ``NAME.key_secret`` the public and the secret key.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import secrets
import stat
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard, Union

import zmq
import zmq.auth
from zmq.utils import z85

__all__ = [
    "KeyPair",
    "ServerSecurity",
    "ClientSecurity",
    "AuthorizedKeys",
    "GatePolicy",
    "create_key_files",
    "keys_from_secret",
    "server_security",
    "client_security",
    "is_local_endpoint",
    "check_endpoint",
    "read_secret_file",
]

logger = logging.getLogger(__name__)

KeySource = Union[str, bytes, "os.PathLike[str]"]
"""A key given as a certificate file's path or as Z85 text."""

KEY_LENGTH = 40
"""Length of a CURVE key in Z85 text."""

SECRET_SALT = b"gym_remote/curve-keys-from-secret/v1"
"""scrypt salt of the shared-secret mode (fixed, so both sides derive the same keys on their own)."""

SCRYPT_COST = {"n": 2**14, "r": 8, "p": 1}
"""scrypt parameters of the shared-secret mode: about 50 ms and 16 MiB per derivation, which makes
guessing a weak secret from a recorded handshake slow (a strong random secret needs none of it)."""

SHORT_SECRET = 16
"""Secrets shorter than this many characters get a warning."""

ZAP_DOMAIN = b"gym_remote"
"""Setting a ZAP domain makes libzmq ask the gatekeeper about NULL (unencrypted) connections too."""

DEFAULT_HANDSHAKE_RATE = 100.0
"""Handshakes per second a single network address may start (with a burst of twice as many)."""

HANDSHAKE_SECONDS = 10.0
"""A connection that has not finished its ZeroMQ handshake within this time is closed."""


@dataclass(frozen=True)
class KeyPair:
    """A CURVE key pair in Z85 text (``secret`` is None for someone else's public key)."""

    public: bytes
    secret: bytes | None = field(default=None, repr=False)  # (kept out of logs and tracebacks)

    @classmethod
    def generate(cls) -> KeyPair:
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    @classmethod
    def from_secret(cls, secret: bytes) -> KeyPair:
        return cls(zmq.curve_public(secret), secret)


# -- key files and secrets -------------------------------------------------------------------------


def create_key_files(name: str, directory: str | os.PathLike[str]) -> tuple[str, str]:
    """Write a new key pair as ``DIRECTORY/NAME.key`` (public) and ``DIRECTORY/NAME.key_secret`` (owner-only).

    Raises:
        FileExistsError: one of the two files exists already (keys are never overwritten).
        ValueError: ``name`` is not a plain file name.
    """
    if not name or os.path.basename(name) != name or name.startswith("."):
        raise ValueError(f"key name {name!r} must be a plain file name, e.g. 'server' or 'worker-1'")
    os.makedirs(directory, exist_ok=True)
    public_path = os.path.join(directory, f"{name}.key")
    secret_path = os.path.join(directory, f"{name}.key_secret")
    for path in (public_path, secret_path):
        if os.path.exists(path):
            raise FileExistsError(f"{path} exists already; remove it first to make a new key pair named {name!r}")
    # Create the secret file owner-only before zmq.auth writes into it, so it is never readable by others.
    os.close(os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return zmq.auth.create_certificates(directory, name)


def create_secret_file(path: str | os.PathLike[str]) -> str:
    """Write a new random shared secret (43 URL-safe characters, 256 bits) to ``path``, readable only by its owner.

    Raises:
        FileExistsError: ``path`` exists already (a secret is never overwritten).
    """
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise FileExistsError(f"{os.fspath(path)} exists already; remove it first to make a new secret") from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(secrets.token_urlsafe(32) + "\n")
    return os.fspath(path)


SECRET_FILE_WHITESPACE = " \t\n\v\f\r"
"""What :func:`read_secret_file` strips at both ends: ASCII whitespace only (PROTOCOL.md §12.2)."""


def read_secret_file(path: str | os.PathLike[str]) -> str:
    """The shared secret stored in ``path``: its UTF-8 text, read as it is (no newline translation), without
    one leading byte-order mark and without the ASCII whitespace at both ends (PROTOCOL.md §12.2), as every
    implementation reads it, so that a server and its clients derive the same keys.

    Raises:
        ValueError: the file is not UTF-8 text, or holds nothing but whitespace.
    """
    with open(path, "rb") as file:
        data = file.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"the secret file {os.fspath(path)} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    secret = text.removeprefix("\ufeff").strip(SECRET_FILE_WHITESPACE)
    if not secret:
        raise ValueError(f"the secret file {os.fspath(path)} is empty")
    _warn_if_readable_by_others(path, "secret file")
    return secret


def keys_from_secret(secret: str | bytes) -> tuple[KeyPair, KeyPair]:
    """The server's and the clients' CURVE key pairs derived from a shared secret (see docs/PROTOCOL.md).

    The secret itself never travels: each side derives the key pairs on its own, and the CURVE handshake
    proves that both hold them.
    """
    material = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if not material:
        raise ValueError("the shared secret is empty")
    if len(material) < SHORT_SECRET:
        warnings.warn(
            f"the shared secret has only {len(material)} characters; use a long random one, e.g. from "
            "gym-remote secret PATH",
            stacklevel=3,
        )
    derived = hashlib.scrypt(material, salt=SECRET_SALT, dklen=64, **SCRYPT_COST)
    server, clients = (KeyPair.from_secret(z85.encode(part)) for part in (derived[:32], derived[32:]))
    return server, clients


def load_key(source: KeySource, *, secret: bool, what: str) -> KeyPair:
    """A key pair (``secret=True``) or a public key from a certificate file or from Z85 text.

    Raises:
        ValueError: the source is neither a readable certificate file nor a 40-character Z85 key, or a
            secret key was needed and the file holds only a public key.
    """
    if _is_key_text(source):
        try:
            text = source.encode("ascii") if isinstance(source, str) else source
            if len(z85.decode(text)) != 32:
                raise ValueError("not 32 bytes")
        except Exception:  # z85 decoding of arbitrary text can fail in several ways
            raise ValueError(f"{what}: {source!r} is neither a key file nor a Z85 key") from None
        return KeyPair.from_secret(text) if secret else KeyPair(text)
    path = os.fsdecode(source)
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"{what}: cannot read the key file {path!r}: {error}") from None
    if not secret:
        return KeyPair(public)
    if secret_key is None:
        raise ValueError(f"{what}: {path!r} holds only a public key; give the NAME.key_secret file")
    _warn_if_readable_by_others(path, what)
    return KeyPair(public, secret_key)


def _warn_if_readable_by_others(path: str | os.PathLike[str], what: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning("%s %s can be read by other users (mode %o); chmod 600 it", what, os.fspath(path), mode & 0o777)


class AuthorizedKeys:
    """The client public keys a server accepts, each with a name (its certificate file's name).

    Built from directories of ``*.key`` files, single key files and Z85 keys. A key that is not known
    makes the directories be read again (at most once a second), so keys can be added while a server runs.
    """

    RESCAN_SECONDS = 1.0

    def __init__(self, sources: Iterable[KeySource] = ()) -> None:
        self._lock = threading.Lock()
        self._fixed: dict[bytes, str] = {}
        self._directories: list[str] = []
        self._from_directories: dict[bytes, str] = {}
        self._scanned_at = 0.0
        for source in sources:
            if not isinstance(source, bytes) and os.path.isdir(source):
                self._directories.append(os.fsdecode(source))
            else:
                key = load_key(source, secret=False, what="authorized_keys")
                name = "key" if _is_key_text(source) else os.path.splitext(os.path.basename(os.fsdecode(source)))[0]
                self._fixed[key.public] = name
        self._scan()

    def add(self, public: bytes, name: str) -> None:
        with self._lock:
            self._fixed[public] = name

    def __len__(self) -> int:
        with self._lock:
            return len(self._fixed) + len(self._from_directories)

    def lookup(self, public: bytes) -> str | None:
        """The name of an authorized public key (Z85), or None."""
        with self._lock:
            name = self._fixed.get(public) or self._from_directories.get(public)
        if name is None and self._directories and time.monotonic() - self._scanned_at >= self.RESCAN_SECONDS:
            self._scan()
            with self._lock:
                name = self._from_directories.get(public)
        return name

    def _scan(self) -> None:
        found: dict[bytes, str] = {}
        for directory in self._directories:
            try:
                names = sorted(os.listdir(directory))
            except OSError as error:
                logger.warning("cannot read the authorized keys directory %s: %s", directory, error)
                continue
            for file_name in names:
                if not file_name.endswith(".key"):
                    continue
                try:
                    public, _ = zmq.auth.load_certificate(os.path.join(directory, file_name))
                except (OSError, ValueError) as error:
                    logger.warning("skipping the key file %s: %s", file_name, error)
                    continue
                found[public] = file_name[: -len(".key")]
        with self._lock:
            self._from_directories = found
            self._scanned_at = time.monotonic()


def _is_key_text(source: KeySource) -> TypeGuard[str | bytes]:
    """Whether ``source`` is a key written out rather than a file's path (the key files' suffixes decide
    the rare 40-character path)."""
    if not isinstance(source, (str, bytes)) or len(source) != KEY_LENGTH or os.path.exists(source):
        return False
    text = source.decode("ascii", "replace") if isinstance(source, bytes) else source
    return not text.endswith((".key", ".key_secret"))


# -- resolved configurations -----------------------------------------------------------------------


DEFAULT_MAX_MESSAGE_BYTES = 256 << 20
"""Largest frame a peer may send by default (ZMQ_MAXMSGSIZE): 256 MiB; a peer sending more is cut off."""


@dataclass(frozen=True)
class SecurityOptions:
    """Who may connect to a learner's server and what a client may do: ``RemoteVectorEnv``'s security
    arguments in one object (``RemoteVectorEnv(..., security=SecurityOptions(secret=...))``); each
    field means what the keyword argument of the same name means there.

    Example:
        >>> from gym_remote.security import SecurityOptions
        >>> options = SecurityOptions(secret="correct horse battery staple", max_connections=32)
        >>> options.insecure, options.allow_pickle
        (False, None)
    """

    server_key: KeySource | None = field(default=None, repr=False)  # (it may be the secret key's Z85 text)
    authorized_keys: KeySource | Iterable[KeySource] | None = None
    secret: str | bytes | None = field(default=None, repr=False)  # (kept out of logs and tracebacks)
    insecure: bool = False
    allow_pickle: bool | None = None
    max_connections: int | None = None
    handshake_rate: float = DEFAULT_HANDSHAKE_RATE
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


@dataclass
class ServerSecurity:
    """What a server enforces: its CURVE key pair and the client keys it accepts."""

    keys: KeyPair
    authorized: AuthorizedKeys
    how: str  # for logs: "keys", "secret", "keys and secret" or "local clients only"


@dataclass
class ClientSecurity:
    """What a client needs to pass a CURVE server: the server's public key and its own key pair."""

    server_public: bytes
    keys: KeyPair

    def to_payload(self) -> dict[str, str]:
        """For a launched client's payload file (which only the user can read)."""
        if self.keys.secret is None:
            raise ValueError("ClientSecurity.keys holds only a public key: a client needs its secret key too")
        return {"server_key": self.server_public.decode(), "client_key": self.keys.secret.decode()}


def server_security(
    server_key: KeySource | None = None,
    authorized_keys: KeySource | Iterable[KeySource] | None = None,
    secret: str | bytes | None = None,
) -> ServerSecurity | None:
    """The server's security from the user's arguments; None for none (plain, unauthenticated)."""
    if server_key is not None and secret is not None:
        raise ValueError("give server_key or secret, not both: a shared secret defines the server's key pair")
    if secret is not None:
        authorized = AuthorizedKeys(_sources(authorized_keys))
        server_keys, client_keys = keys_from_secret(secret)
        authorized.add(client_keys.public, "secret")
        return ServerSecurity(server_keys, authorized, "keys and secret" if authorized_keys else "secret")
    if server_key is None:
        if authorized_keys is not None:
            raise ValueError("authorized_keys needs server_key (the server's NAME.key_secret) as well")
        return None
    if authorized_keys is None:
        raise ValueError(
            "server_key needs authorized_keys: a directory of the clients' NAME.key files (or a list of keys) "
            "saying who may join"
        )
    authorized = AuthorizedKeys(_sources(authorized_keys))
    keys = load_key(server_key, secret=True, what="server_key")
    if not len(authorized):
        logger.warning("authorized_keys holds no key yet: no client can join until one is added")
    return ServerSecurity(keys, authorized, "keys")


def client_security(
    server_key: KeySource | None = None,
    client_key: KeySource | None = None,
    secret: str | bytes | None = None,
) -> ClientSecurity | None:
    """The client's security from the user's arguments; None for none (plain, unauthenticated)."""
    if secret is not None:
        if server_key is not None or client_key is not None:
            raise ValueError("give secret, or server_key and client_key, not both")
        server_keys, client_keys = keys_from_secret(secret)
        return ClientSecurity(server_keys.public, client_keys)
    if server_key is None and client_key is None:
        return None
    if server_key is None or client_key is None:
        raise ValueError(
            "a CURVE client needs both server_key (the server's NAME.key) and client_key (its own NAME.key_secret)"
        )
    return ClientSecurity(
        load_key(server_key, secret=False, what="server_key").public,
        load_key(client_key, secret=True, what="client_key"),
    )


def _sources(authorized_keys: KeySource | Iterable[KeySource] | None) -> list[KeySource]:
    if authorized_keys is None:
        return []
    if isinstance(authorized_keys, (str, bytes, os.PathLike)):
        return [authorized_keys]
    return list(authorized_keys)


def is_local_endpoint(endpoint: str) -> bool:
    """Whether only this machine can reach ``endpoint``: ``ipc://``, ``inproc://`` or a loopback tcp address."""
    scheme, _, rest = endpoint.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = rest.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "*", an interface name or a host name
        return False


TRANSPORT_SCHEMES = ("tcp", "ipc", "inproc", "tipc", "vmci", "ws", "wss")
"""The ZeroMQ transports a DEALER or ROUTER can use (``tcp``, ``ipc`` and ``inproc`` everywhere)."""


def check_endpoint(endpoint: str, what: str, *, binding: bool = False) -> None:
    """Check that ``endpoint`` is a ZeroMQ address (``tcp://HOST:PORT``, ``ipc://PATH``, ...) before using it.

    ``what`` names it in the message (``"bind"``, ``"address"``); ``binding``: it is to be bound, where a
    tcp port may be ``*`` (any free port).

    Raises:
        TypeError: ``endpoint`` is not a string.
        ValueError: it has no transport scheme (``localhost:5555``), an unknown one, no address after the
            scheme, or (tcp) no port.
    """
    if not isinstance(endpoint, str):
        raise TypeError(f"{what} must be a string such as 'tcp://HOST:PORT', got {type(endpoint).__name__}")
    scheme, separator, rest = endpoint.partition("://")
    if not separator:
        example = f"ipc://{endpoint}" if "/" in endpoint and ":" not in endpoint else f"tcp://{endpoint}"
        raise ValueError(
            f"{what}={endpoint!r} has no transport scheme: write tcp://HOST:PORT or ipc://PATH (e.g. {example!r})"
        )
    if scheme not in TRANSPORT_SCHEMES:
        raise ValueError(
            f"{what}={endpoint!r} has an unknown transport scheme {scheme + '://'!r}: use tcp://HOST:PORT or "
            "ipc://PATH (or inproc://NAME within one process)"
        )
    if not rest:
        raise ValueError(f"{what}={endpoint!r} has no address after {scheme}://")
    if scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not host or not ((port.isdigit() and int(port) <= 65535) or (binding and port == "*")):
            ports = "PORT (up to 65535, or * for any free port)" if binding else "PORT (up to 65535)"
            raise ValueError(f"{what}={endpoint!r} has no valid port: write tcp://HOST:{ports}")
        if host == "*" and not binding:
            raise ValueError(f"{what}={endpoint!r}: * is for binding; connect to the server's host name or address")


# -- the gate's policy --------------------------------------------------------------------------------


DENIAL_LOG_SECONDS = 5.0
"""A denial is logged at most this often per reason, so that a flood cannot flood the log too."""


class GatePolicy:
    """Who may finish a connection handshake (ZAP, RFC 27): the client keys accepted, the connections open at
    once, the handshakes per second one network address may start. No sockets: the gatekeeper
    (:class:`gym_remote.links.gate.Gatekeeper`) asks it from its thread; its counters are locked.

    Args:
        authorized: the client keys accepted (None: plain connections, which are only counted and rated).
        max_connections: connections open at once beyond which new handshakes are refused.
        handshake_rate: handshakes per second one network address may start.
        handshake_burst: handshakes one address may start at once, after a quiet spell (default, and at
            least: twice ``handshake_rate``).
    """

    def __init__(
        self,
        authorized: AuthorizedKeys | None,
        *,
        max_connections: int,
        handshake_rate: float = DEFAULT_HANDSHAKE_RATE,
        handshake_burst: float = 0.0,
    ) -> None:
        self.authorized = authorized
        self.max_connections = int(max_connections)
        self.handshake_rate = float(handshake_rate)
        self.handshake_burst = max(2.0 * self.handshake_rate, float(handshake_burst), 1.0)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._open: set[int] = set()
        self._buckets: dict[str, list[float]] = {}  # address -> [tokens, last refill]
        self._last_log: dict[str, float] = {}
        self.closing = False  # the server is closing: every new handshake is refused for now (to try elsewhere)

    def connection_opened(self, connection: int) -> None:
        with self._lock:
            self._open.add(connection)

    def connection_closed(self, connection: int) -> None:
        with self._lock:
            self._open.discard(connection)

    def handshake_failed(self, peer: str | None, reason: str) -> None:
        """A connection's ZeroMQ handshake failed before any ZAP request, for ``reason`` (in words): with a secret
        or keys, the commonest cause is a client holding another secret or the wrong server key."""
        with self._lock:
            self._counts[reason] += 1
        self._log_denial(peer or "", reason)

    def stats(self) -> dict[str, Any]:
        """Connections open now, handshakes accepted, and handshakes denied by reason."""
        with self._lock:
            counts = dict(self._counts)
            connections = len(self._open)
        accepted = counts.pop("accepted", 0)
        return {"connections": connections, "handshakes_accepted": accepted, "handshakes_denied": counts}

    def answer(self, request: list[bytes]) -> list[bytes]:
        """The ZAP reply to one request (RFC 27): version, request id, status, text, user id, metadata."""
        if len(request) < 6:
            return [b"1.0", b"", b"500", b"malformed ZAP request", b"", b""]
        version, request_id, _domain, address, _identity, mechanism = request[:6]
        credentials = request[6:]
        peer = address.decode("utf-8", "replace")
        status, text, user = self._decide(peer, mechanism, credentials)
        with self._lock:
            self._counts["accepted" if status == b"200" else text] += 1
        if status != b"200" and not self.closing:  # (refusals while closing are expected: clients look elsewhere)
            self._log_denial(peer, text)
        return [version, request_id, status, text.encode(), user.encode() if status == b"200" else b"", b""]

    def _decide(self, peer: str, mechanism: bytes, credentials: list[bytes]) -> tuple[bytes, str, str]:
        with self._lock:
            connections = len(self._open)
        # Temporary refusals use status 500: for 300 libzmq sends the peer no ERROR and holds the
        # connection open until the handshake times out, which keeps a flood's connections alive.
        if self.closing:
            return b"500", "the server is closing", ""
        if connections > self.max_connections:
            return b"500", "too many connections", ""
        if not self._take_token(peer):
            return b"500", "handshake rate exceeded", ""
        if mechanism == b"CURVE" and self.authorized is not None and credentials:
            name = self.authorized.lookup(z85.encode(credentials[0]))
            if name is None:
                return b"400", "key not authorized", ""
            return b"200", "OK", name
        if mechanism == b"NULL" and self.authorized is None:
            return b"200", "OK", ""
        return b"400", f"mechanism {mechanism.decode('ascii', 'replace')} not accepted", ""

    def _take_token(self, peer: str) -> bool:
        """A token bucket per peer address (libzmq names an ipc peer ``localhost:uid:gid:pid``: one per process)."""
        now = time.monotonic()
        bucket = self._buckets.get(peer)
        if bucket is None:
            if len(self._buckets) >= 10_000:  # forget idle addresses rather than grow without bound
                cutoff = now - self.handshake_burst / max(self.handshake_rate, 1e-9)
                self._buckets = {key: value for key, value in self._buckets.items() if value[1] > cutoff}
            bucket = self._buckets[peer] = [self.handshake_burst, now]
        bucket[0] = min(self.handshake_burst, bucket[0] + (now - bucket[1]) * self.handshake_rate)
        bucket[1] = now
        if bucket[0] < 1.0:
            return False
        bucket[0] -= 1.0
        return True

    def _log_denial(self, peer: str, reason: str) -> None:
        """A warning per reason at most every :data:`DENIAL_LOG_SECONDS`."""
        now = time.monotonic()
        if now - self._last_log.get(reason, -1e9) < DENIAL_LOG_SECONDS:
            return
        self._last_log[reason] = now
        with self._lock:
            total = self._counts[reason]
        logger.warning(
            "refused a connection from %s: %s (%d refused for this reason so far)", peer or "local", reason, total
        )
