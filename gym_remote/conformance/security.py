"""The *security* group: CURVE key files and a shared secret work; a key the server does not authorize, a
wrong secret, or no keys at all against a CURVE server make the client exit with an error, not hang."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gym_remote.conformance.check import Check, Context
from gym_remote.conformance.report import CheckFailed
from gym_remote.conformance.values import probe_vector, remote, served_vector

__all__ = ["CHECKS"]

REFUSAL_SECONDS = 30.0


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
            remote(f"reset with {what}", envs.reset, seed=1)
            remote(f"step with {what}", envs.step, envs.action_space.sample())
            names = {row["key"] for row in envs.stats() if row["served"]}
            if key_name is not None and names != {key_name}:
                raise CheckFailed(f"the client authenticated with the keys {sorted(names)}, not with {key_name}")

    return check


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
        joins(_secret_file("secret_file"), _secret_server, "a shared secret"),
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
