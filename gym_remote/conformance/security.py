"""The *security* group: CURVE key files and a shared secret work; a key the server does not authorize, a
wrong secret, or no keys at all against a CURVE server make the client exit with an error, not hang."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gym_remote.conformance.check import Check, Context
from gym_remote.conformance.report import CheckFailed
from gym_remote.conformance.values import probe_vector, remote, served_vector
from gym_remote.errors import RemoteTimeoutError
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["CHECKS"]

REFUSAL_SECONDS = 30.0
JOIN_POLL_SECONDS = 0.5


Arguments = Callable[[Context], list[str]]
"""The client's security arguments in a check's context."""
ServerOptions = Callable[[Context], dict[str, Any]]
"""The server's security keyword arguments in a check's context."""


def joins(security: Arguments, server_kwargs: ServerOptions, what: str, key_name: str | None = None):
    """A check that a client started with the arguments ``security(context)`` joins a server made with
    ``server_kwargs(context)`` and steps (and authenticated with the key named ``key_name``)."""

    def check(context: Context) -> None:
        with served_vector(
            context, clients=1, envs_per_client=2, client_security=security(context), **server_kwargs(context)
        ) as envs:
            _reset_once_joined(envs, context, what)
            remote(f"step with {what}", envs.step, envs.action_space.sample())
            names = {row["key"] for row in envs.stats() if row["served"]}
            if key_name is not None and names != {key_name}:
                raise CheckFailed(f"the client authenticated with the keys {sorted(names)}, not with {key_name}")

    return check


def _reset_once_joined(envs: RemoteVectorEnv, context: Context, what: str) -> None:
    """``envs.reset(seed=1)`` once the check's client has joined; a client that exits first fails the check at
    once, with its exit status, rather than after the server's wait for clients."""
    client = context.processes[-1]
    deadline = time.monotonic() + REFUSAL_SECONDS
    while True:
        envs.reset_async(seed=1)
        try:
            envs.reset_wait(timeout=JOIN_POLL_SECONDS)
            return
        except RemoteTimeoutError:
            if not client.running():
                raise CheckFailed(
                    f"{what}: the client exited with status {client.wait(0)} instead of joining (PROTOCOL.md §12)"
                ) from None
            if time.monotonic() > deadline:
                raise CheckFailed(f"{what}: the client did not join within {REFUSAL_SECONDS:g} s") from None


def refused(security: Arguments, server_kwargs: ServerOptions, what: str):
    def check(context: Context) -> None:
        endpoint = context.endpoint()
        envs = probe_vector(endpoint, 1, context.liveness_timeout, **server_kwargs(context))
        try:
            client = context.start_client(endpoint, 1, security=security(context))
            status = client.wait(REFUSAL_SECONDS)
            served = [row for row in envs.stats() if row["served"]]
        finally:
            envs.close()
        if served:
            raise CheckFailed(f"{what}: the server admitted the client ({served}); the handshake must fail")
        if status is None:
            raise CheckFailed(
                f"{what}: the client was still running after {REFUSAL_SECONDS:g} s; it must stop with an error "
                "(PROTOCOL.md §12.4: status 400 is final; a wrong server key fails every handshake)"
            )
        if status == 0:
            raise CheckFailed(f"{what}: the client exited with status 0; a refused client exits with an error status")
        if not client.output().strip():
            raise CheckFailed(f"{what}: the client exited with status {status} but said nothing about why")

    return check


def _curve_server(context: Context) -> dict:
    keys = context.credentials
    return {"server_key": str(keys.server_secret), "authorized_keys": str(keys.authorized_dir)}


def _key_files(secret_key: str) -> Arguments:
    """The client arguments for the server's public key and the client secret key ``secret_key`` of Credentials."""
    return lambda context: [
        "--server-key",
        str(context.credentials.server_public),
        "--client-key",
        str(getattr(context.credentials, secret_key)),
    ]


def _secret_file(field: str) -> Arguments:
    return lambda context: ["--secret-file", str(getattr(context.credentials, field))]


def _padded_secret_file(context: Context) -> list[str]:
    """The shared secret in a file as a Windows editor may save it: a byte-order mark, blanks and ``\\r\\n`` around
    it, which a client drops (PROTOCOL.md §12.2) to derive the server's keys."""
    path = context.credentials.secret_file.with_name("padded-secret")
    if not path.exists():
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(b"\xef\xbb\xbf \t" + context.credentials.secret.encode() + b" \r\n")
    return ["--secret-file", str(path)]


def _secret_server(context: Context) -> dict:
    return {"secret": context.credentials.secret}


CHECKS = [
    Check(
        "security",
        "CURVE key files: the client joins and steps",
        joins(_key_files("client_secret"), _curve_server, "CURVE key files", key_name="client"),
    ),
    Check(
        "security",
        "a shared secret: the client joins and steps",
        joins(
            _padded_secret_file, _secret_server, "a shared secret in a file with a byte-order mark and blanks (§12.2)"
        ),
    ),
    Check(
        "security",
        "a key the server does not authorize: the client exits with an error",
        refused(_key_files("stranger_secret"), _curve_server, "a client key that is not authorized"),
    ),
    Check(
        "security",
        "a wrong secret: the client exits with an error",
        refused(_secret_file("wrong_secret_file"), _secret_server, "a wrong shared secret"),
    ),
    Check(
        "security",
        "no keys against a CURVE server: the client exits with an error",
        refused(lambda context: [], _curve_server, "a plaintext client on a CURVE server"),
    ),
]
