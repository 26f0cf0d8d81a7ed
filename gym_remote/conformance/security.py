"""The *security* group: CURVE key files and a shared secret work; a key the server does not authorize, a
wrong secret, or no keys at all against a CURVE server make the client exit with an error, not hang."""

from __future__ import annotations

from collections.abc import Sequence

from gym_remote.conformance.report import CheckFailed
from gym_remote.conformance.runner import Check, Context
from gym_remote.conformance.values import probe_vector, remote, served_vector

__all__ = ["CHECKS"]

REFUSAL_SECONDS = 30.0


def key_files(context: Context) -> list[str]:
    keys = context.credentials
    return ["--server-key", str(keys.server_public), "--client-key", str(keys.client_secret)]


def with_key_files(context: Context) -> None:
    keys = context.credentials
    with served_vector(
        context,
        clients=1,
        envs_per_client=2,
        client_security=key_files(context),
        server_key=str(keys.server_secret),
        authorized_keys=str(keys.authorized_dir),
    ) as envs:
        remote("reset with CURVE key files", envs.reset, seed=1)
        remote("step with CURVE key files", envs.step, envs.action_space.sample())
        names = {row["key"] for row in envs.stats() if row["served"]}
        if names != {"client"}:
            raise CheckFailed(f"the client authenticated with the keys {sorted(names)}, not with client.key_secret")


def with_secret(context: Context) -> None:
    keys = context.credentials
    with served_vector(
        context,
        clients=1,
        envs_per_client=2,
        client_security=["--secret-file", str(keys.secret_file)],
        secret=keys.secret,
    ) as envs:
        remote("reset with a shared secret", envs.reset, seed=1)
        remote("step with a shared secret", envs.step, envs.action_space.sample())


def refused(security: Sequence[str], server_kwargs, what: str):
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


def _stranger(context: Context) -> list[str]:
    keys = context.credentials
    return ["--server-key", str(keys.server_public), "--client-key", str(keys.stranger_secret)]


CHECKS = [
    Check("security", "CURVE key files: the client joins and steps", with_key_files),
    Check("security", "a shared secret: the client joins and steps", with_secret),
    Check(
        "security",
        "a key the server does not authorize: the client exits with an error",
        refused(_stranger, _curve_server, "a client key that is not authorized"),
    ),
    Check(
        "security",
        "a wrong secret: the client exits with an error",
        refused(
            lambda context: ["--secret-file", str(context.credentials.wrong_secret_file)],
            lambda context: {"secret": context.credentials.secret},
            "a wrong shared secret",
        ),
    ),
    Check(
        "security",
        "no keys against a CURVE server: the client exits with an error",
        refused(lambda context: [], _curve_server, "a plaintext client on a CURVE server"),
    ),
]
