"""The ``gym-remote`` command (also ``python -m gym_remote``).

Subcommands:

* ``client ADDRESS --env ID`` serves envs to a RemoteVectorEnv at ADDRESS until it closes;
* ``demo`` runs a rollout on CartPole through local clients and reports speed and episode statistics;
* ``serve`` runs the same rollout on a server that remote clients join;
* ``bench`` measures an env's steps per second in SyncVectorEnv, AsyncVectorEnv and RemoteVectorEnv;
* ``keygen NAME --dir DIR`` writes a CURVE key pair (``DIR/NAME.key``, ``DIR/NAME.key_secret``);
* ``secret PATH`` writes a new random shared secret, readable only by you;
* ``status ADDRESS`` shows a running learner's fleet (``--watch`` live, ``--json`` for scripts);
* ``conformance -- CLIENT_COMMAND...`` checks a client, in any language, against the protocol
  (docs/CONFORMANCE.md).

Exit codes: 0 done, 1 failed at run time (refused, timed out, env error), 2 bad usage, 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from gym_remote import __version__
from gym_remote.errors import GymRemoteError, RemoteTimeoutError

__all__ = ["main", "build_parser", "make_env_fns"]

logger = logging.getLogger("gym_remote")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143


def build_parser() -> argparse.ArgumentParser:
    """The ``gym-remote`` command line: its global options and a subparser for each subcommand."""
    parser = argparse.ArgumentParser(
        prog="gym-remote",
        description="Gymnasium vector envs whose environments run in ZeroMQ clients, local or remote.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_log_level(parser, default=None)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _add_client,
        _add_demo,
        _add_serve,
        _add_status,
        _add_bench,
        _add_keygen,
        _add_secret,
        _add_conformance,
    ):
        add_command(commands)
    for command in commands.choices.values():
        _add_log_level(command, default=argparse.SUPPRESS)  # before or after the subcommand: the same option
    return parser


DEFAULT_LOG_LEVELS = {"client": "INFO", "serve": "INFO"}
"""A client and a server tell their story (joins, refusals, losses, rejoins, closes, one line each) by
default; the other subcommands only their warnings."""


def _add_log_level(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument(
        "--log-level",
        default=default,
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log verbosity (default: INFO for client and serve, WARNING for the others)",
    )


def _add_client(commands: argparse._SubParsersAction) -> None:
    client = commands.add_parser(
        "client",
        help="serve envs to a RemoteVectorEnv until it closes",
        description="Serve envs to the RemoteVectorEnv listening at ADDRESS until it closes.",
    )
    client.add_argument("address", metavar="ADDRESS", help="the server's endpoint, e.g. tcp://10.0.0.5:5555")
    _add_env_arguments(client, default_env=None, default_num_envs=1)
    client.add_argument("--name", help="this client's name in logs (default: host:pid)")
    client.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the server to answer; 'inf' waits forever (default: %(default)s)",
    )
    client.add_argument(
        "--exit-if-full",
        action="store_true",
        help="exit (status 1) when the server has no free slot, instead of waiting in line for one",
    )
    client.add_argument(
        "--slot-timeout",
        type=_seconds,
        default=3600.0,
        metavar="SECONDS",
        help="how long to wait in line for a free slot; 'inf' waits forever (default: %(default)s)",
    )
    client.add_argument(
        "--keep-serving",
        action="store_true",
        help="stay up across learner runs: when a run ends or the learner is lost, wait for the next learner at "
        "ADDRESS without limit; exit only when a learner tells its clients to stop (serve --stop-clients), on "
        "SIGTERM or Ctrl-C",
    )
    client.add_argument(
        "--no-reconnect",
        action="store_true",
        help="exit (status 1) when the server goes away, instead of rejoining the next server at ADDRESS",
    )
    client.add_argument(
        "--reconnect-timeout",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="how long to try to rejoin after the server went away; 'inf' tries forever (default: %(default)s)",
    )
    _add_liveness_timeout(client, "the server")
    client.add_argument(
        "--allow-pickle",
        action="store_true",
        help="trusted mode: exchange pickles with the server (only with a server you trust)",
    )
    client.add_argument(
        "--no-data-plane",
        action="store_true",
        help="send everything over ZeroMQ, even to a server on this machine (default: a Unix socket there)",
    )
    client.add_argument(
        "--spin",
        type=_non_negative_seconds,
        default=0.0,
        metavar="SECONDS",
        help="over the data plane, busy-check this long for the next command after answering one; saves a "
        "wake-up per step, takes a core (default: %(default)s, never)",
    )
    security = _add_client_security(client, "security (for a server that uses CURVE keys or a shared secret)")
    security.add_argument(
        "--insecure",
        action="store_true",
        help="connect beyond loopback without authentication, knowingly (no warning; only on a network you trust)",
    )
    client.set_defaults(handler=_run_client)


def _add_demo(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help="a rollout through local client processes, with statistics",
        description="Run a random-action rollout through local client processes and report "
        "steps per second and episode statistics.",
    )
    _add_env_arguments(demo, default_env="CartPole-v1", default_num_envs=8)
    _add_rollout_arguments(demo)
    _add_num_clients(demo, "client processes; several counts run one rollout each (default: the CPU count)")
    demo.add_argument("--bind", help="endpoint for the local clients (default: a private ipc:// path)")
    _add_server_security(demo)
    demo.set_defaults(handler=_run_demo)


def _add_serve(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve",
        help="a rollout on a server that remote clients join",
        description="Listen for remote clients ('gym-remote client ADDRESS ...'), run a "
        "random-action rollout once every slot is served, then close them.",
    )
    serve.add_argument("--bind", default="tcp://127.0.0.1:5555", help="endpoint to listen on (default: %(default)s)")
    _add_env_arguments(serve, default_env=None, default_num_envs=8, required=False)
    serve.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for clients to fill the slots (and for a lost client's replacement); 'inf' waits "
        "forever (default: %(default)s)",
    )
    serve.add_argument(
        "--timeout",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="how long a step or reset may take; 'inf' waits forever (default: %(default)s)",
    )
    _add_liveness_timeout(serve, "a client")
    serve.add_argument(
        "--stop-clients",
        action="store_true",
        help="at the end, tell the clients to exit, even those started with --keep-serving (default: tell them the "
        "run is over, which ends only the clients that do not keep serving)",
    )
    _add_rollout_arguments(serve)
    _add_server_security(serve)
    serve.set_defaults(handler=_run_serve)


def _add_status(commands: argparse._SubParsersAction) -> None:
    status = commands.add_parser(
        "status",
        help="show a running learner's fleet: who serves each slot, how fast, how well",
        description="Ask the learner at ADDRESS for its fleet, with the keys or secret its clients use: per slot "
        "the client, its env-steps/s, step latency, episodes and mean return, losses and rejoins; the clients in "
        "line and the refusals. A learner answers while it steps.",
    )
    status.add_argument("address", metavar="ADDRESS", help="the learner's endpoint, e.g. tcp://10.0.0.5:5555")
    shown = status.add_mutually_exclusive_group()
    shown.add_argument("--watch", action="store_true", help="refresh the table in place until Ctrl-C")
    shown.add_argument("--json", action="store_true", help="print the status as JSON (PROTOCOL.md §9.1)")
    status.add_argument(
        "--interval", type=_seconds, default=1.0, metavar="SECONDS", help="--watch's refresh (default: %(default)s)"
    )
    status.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the learner's answer (default: %(default)s)",
    )
    _add_client_security(status, "security (as the learner's clients)")
    status.set_defaults(handler=_run_status)


def _add_client_security(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    security = parser.add_argument_group(title)
    security.add_argument("--server-key", metavar="PATH", help="the server's public key file (NAME.key)")
    security.add_argument("--client-key", metavar="PATH", help="this client's secret key file (NAME.key_secret)")
    _add_secret_file_argument(security)
    return security


def _add_server_security(parser: argparse.ArgumentParser) -> None:
    security = parser.add_argument_group("security (required to listen beyond loopback)")
    security.add_argument("--server-key", metavar="PATH", help="this server's secret key file (NAME.key_secret)")
    security.add_argument(
        "--authorized-keys",
        metavar="PATH",
        action="append",
        help="a directory of the clients' public key files (NAME.key), or one such file; repeatable",
    )
    _add_secret_file_argument(security)
    security.add_argument(
        "--insecure",
        action="store_true",
        help="listen on a non-loopback address without authentication (only on a network you trust)",
    )
    security.add_argument(
        "--max-connections",
        type=_positive_int,
        metavar="N",
        help="connections open at once beyond which new ones are refused (default: 4 x num-envs + 64)",
    )


def _add_liveness_timeout(parser: argparse.ArgumentParser, peer: str) -> None:
    parser.add_argument(
        "--liveness-timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help=f"silence after which {peer} counts as gone; set it on both sides (default: %(default)s)",
    )


def _add_num_clients(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--num-clients", type=_positive_ints, metavar="N[,N...]", help=help)


def _add_bench(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser(
        "bench",
        help="steps per second of an env in Sync-, Async- and RemoteVectorEnv, side by side",
        description="Measure the env-steps per second of your env stepped with random actions by "
        "Gymnasium's SyncVectorEnv and AsyncVectorEnv and by RemoteVectorEnv with local clients, the "
        "vector envs taking turns; print the medians and their ratios. Does remote stepping pay off "
        "for this env on this machine?",
    )
    _add_env_arguments(bench, default_env="CartPole-v1", default_num_envs=8)
    bench.add_argument(
        "--steps", type=_positive_int, default=2000, help="vector steps per measurement (default: %(default)s)"
    )
    bench.add_argument("--repeats", type=_positive_int, default=3, help="measurements per vector env (default: 3)")
    bench.add_argument("--seed", type=int, default=0, help="seed for resets and actions (default: %(default)s)")
    _add_num_clients(bench, "RemoteVectorEnv layouts: local client counts (default: 1 and the CPU count)")
    bench.add_argument(
        "--transport", choices=["ipc", "tcp"], default="ipc", help="the local clients' transport (default: ipc)"
    )
    bench.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    bench.set_defaults(handler=_run_bench)


def _add_keygen(commands: argparse._SubParsersAction) -> None:
    keygen = commands.add_parser(
        "keygen",
        help="write a CURVE key pair for a server or a client",
        description="Write a new CURVE key pair: DIR/NAME.key (the public key, to share) and "
        "DIR/NAME.key_secret (readable only by you, never to share). A server is given its "
        "NAME.key_secret and a directory of its clients' NAME.key files; a client its own "
        "NAME.key_secret and the server's NAME.key.",
    )
    keygen.add_argument("name", metavar="NAME", help="the key pair's name, e.g. server or worker-1")
    keygen.add_argument("--dir", default=".", help="directory to write into (default: the current one)")
    keygen.set_defaults(handler=_run_keygen)


def _add_secret(commands: argparse._SubParsersAction) -> None:
    secret = commands.add_parser(
        "secret",
        help="write a new shared secret for a server and its clients",
        description="Write a new random shared secret (256 bits) to PATH, readable only by you, for --secret-file "
        "on the server and on each client (copy it to their machines as securely as an SSH key).",
    )
    secret.add_argument("path", metavar="PATH", help="the file to create; an existing file is never overwritten")
    secret.set_defaults(handler=_run_secret)


def _add_conformance(commands: argparse._SubParsersAction) -> None:
    conformance = commands.add_parser(
        "conformance",
        help="check a client, in any language, against the protocol",
        description="Start CLIENT_COMMAND (with {endpoint}, {num_envs}, {liveness_timeout} and {security} "
        "filled in) for each check, and check what it does: its probe envs' values against SyncVectorEnv, "
        "the wire, its lifecycle and security. See docs/CONFORMANCE.md.",
    )
    conformance.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    conformance.add_argument(
        "--only",
        metavar="GROUPS",
        type=lambda text: [group.strip() for group in text.split(",") if group.strip()],
        help="comma-separated groups to run: wire, values, lifecycle, security (default: all)",
    )
    conformance.add_argument(
        "--liveness-timeout",
        type=_seconds,
        default=2.0,
        metavar="SECONDS",
        help="the liveness timeout of the servers and the clients (default: %(default)s)",
    )
    conformance.add_argument(
        "client_command",
        nargs=argparse.REMAINDER,
        metavar="-- CLIENT_COMMAND...",
        help="the client to check, e.g. -- gym-remote client {endpoint} --env gym_remote/Probe-v0 "
        "--num-envs {num_envs} --liveness-timeout {liveness_timeout} {security}",
    )
    conformance.set_defaults(handler=_run_conformance)


def _add_secret_file_argument(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--secret-file",
        metavar="PATH",
        help="a file holding a shared secret (instead of key files); the same on server and clients",
    )


def _add_env_arguments(
    parser: argparse.ArgumentParser, default_env: str | None, default_num_envs: int, required: bool = True
) -> None:
    source = parser.add_mutually_exclusive_group(required=required and default_env is None)
    source.add_argument(
        "--env",
        default=default_env,
        metavar="ENV_ID",
        help="a registered Gymnasium env id, e.g. CartPole-v1 ('module:EnvId' imports module first)",
    )
    source.add_argument(
        "--factory", metavar="MODULE:FUNCTION", help="a function that returns an env, called with the --env-kwargs"
    )
    parser.add_argument(
        "--num-envs", type=_positive_int, default=default_num_envs, help="number of envs (default: %(default)s)"
    )
    parser.add_argument(
        "--env-kwargs",
        type=_json_object,
        default={},
        metavar="JSON",
        help="keyword arguments for the env, as a JSON object, e.g. '{\"max_episode_steps\": 200}'",
    )


def _add_rollout_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps", type=_positive_int, default=50_000, help="env steps to take in all (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for resets and actions (default: %(default)s)")
    parser.add_argument(
        "--autoreset-mode",
        default="NextStep",
        choices=["NextStep", "SameStep", "Disabled"],
        help="Gymnasium autoreset mode (default: %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show a progress bar")


def make_env_fns(env: str | None, factory: str | None, num_envs: int, env_kwargs: dict[str, Any]) -> list[Callable]:
    """Env functions from the command line's ``--env``/``--factory`` and ``--env-kwargs``."""
    if factory is not None:
        function = _import_factory(factory)
        return [functools.partial(function, **env_kwargs) for _ in range(num_envs)]
    if env is None:
        raise ValueError("give --env ENV_ID or --factory MODULE:FUNCTION")
    module_name, _, env_id = env.rpartition(":")
    if module_name:  # import it here, so that a typo is told once, not by every client process
        _import_module(module_name, f"--env {env!r}")
    return [functools.partial(gym.make, env, **env_kwargs) for _ in range(num_envs)]


def _import_factory(spec: str) -> Callable:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--factory must look like 'module:function', got {spec!r}")
    module = _import_module(module_name, f"--factory {spec!r}")
    function: Any = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise ValueError(f"--factory {spec!r}: module {module_name!r} has no attribute {attribute!r}")
    if not callable(function):
        raise ValueError(f"--factory {spec!r}: {attribute!r} is not callable")
    return function


def _import_module(name: str, option: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ValueError(
            f"{option}: cannot import module {name!r}: {error} (searched the current directory "
            f"{os.getcwd()} and the installed packages; run from the directory that holds it, or add that "
            "directory to PYTHONPATH)"
        ) from None


def _run_client(args: argparse.Namespace) -> int:
    from gym_remote.client import EnvClient

    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # leave cleanly (BYE) rather than vanish
    env_fns = make_env_fns(args.env, args.factory, args.num_envs, args.env_kwargs)
    client = EnvClient(
        args.address,
        env_fns,
        name=args.name,
        connect_timeout=args.connect_timeout,
        wait_for_slot=not args.exit_if_full,
        slot_timeout=args.slot_timeout,
        reconnect=not args.no_reconnect,
        reconnect_timeout=args.reconnect_timeout,
        liveness_timeout=args.liveness_timeout,
        allow_pickle=args.allow_pickle,
        server_key=args.server_key,
        client_key=args.client_key,
        secret=_secret(args),
        insecure=args.insecure,
        keep_serving=args.keep_serving,
        data_plane=False if args.no_data_plane else None,
        spin=args.spin,
    )
    client.run()
    return EXIT_OK


def _secret(args: argparse.Namespace) -> str | None:
    from gym_remote.security import read_secret_file

    return read_secret_file(args.secret_file) if args.secret_file else None


def _run_keygen(args: argparse.Namespace) -> int:
    from gym_remote.security import create_key_files

    public, secret = create_key_files(args.name, args.dir)
    print(f"public key (share it): {public}\nsecret key (keep it private): {secret}")
    return EXIT_OK


def _run_status(args: argparse.Namespace) -> int:
    from gym_remote.status import StatusClient, format_status

    timeout = args.timeout if args.timeout is not None else 3600.0
    with StatusClient(
        args.address, server_key=args.server_key, client_key=args.client_key, secret=_secret(args)
    ) as client:
        if not args.watch:
            report = client.query(timeout)
            print(json.dumps(report, indent=2) if args.json else format_status(report))
            return EXIT_OK
        try:
            while True:
                started = time.monotonic()
                try:
                    text = format_status(client.query(timeout))
                except (RemoteTimeoutError, PermissionError) as error:  # (a learner between runs answers later)
                    text = f"gym-remote status: {error}"
                stamp = time.strftime("%H:%M:%S")
                sys.stdout.write(f"\x1b[H\x1b[2J{text}\n\n{stamp}, every {args.interval:g} s; Ctrl-C to stop\n")
                sys.stdout.flush()
                time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
        except KeyboardInterrupt:  # the way out of --watch
            sys.stdout.write("\n")
            return EXIT_OK


def _run_secret(args: argparse.Namespace) -> int:
    from gym_remote.security import create_secret_file

    print(f"shared secret (keep it private; give it to the server and its clients): {create_secret_file(args.path)}")
    return EXIT_OK


def _run_conformance(args: argparse.Namespace) -> int:
    from gym_remote.conformance import runner

    command = args.client_command[1:] if args.client_command[:1] == ["--"] else args.client_command
    if not command:
        raise ValueError("give the client command after --, e.g. gym-remote conformance -- ./my_client {endpoint}")
    if "{endpoint}" not in " ".join(command):
        raise ValueError("the client command must contain {endpoint}, where the address to connect to goes")
    if args.log_level == "WARNING":
        # The checks lose, kill and refuse clients on purpose; the servers' warnings about it are noise here.
        logging.getLogger("gym_remote").setLevel(logging.ERROR)

    def progress(result) -> None:
        print(result.line(), flush=True)

    report = runner.run(command, groups=args.only, liveness_timeout=args.liveness_timeout, progress=progress)
    print()
    print(report.text(check_lines=False))  # the check lines were printed as they ran
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            file.write(report.dumps() + "\n")
    return EXIT_OK if report.passed else EXIT_FAILED


def _run_demo(args: argparse.Namespace) -> int:
    from gym_remote.vector_env import RemoteVectorEnv

    env_fns = make_env_fns(args.env, args.factory, args.num_envs, args.env_kwargs)
    for num_clients in args.num_clients or [None]:
        started = time.perf_counter()
        envs = RemoteVectorEnv(
            env_fns,
            autoreset_mode=args.autoreset_mode,
            num_clients=num_clients,
            bind=args.bind,
            **_server_security(args),
        )
        try:
            print(
                f"started {envs.num_clients} local client(s) serving {envs.num_envs} x {_env_label(args)} "
                f"at {envs.address} in {time.perf_counter() - started:.2f} s"
            )
            _report(rollout(envs, args.steps, args.seed, progress=not args.no_progress))
        finally:
            envs.close()
    return EXIT_OK


def _run_serve(args: argparse.Namespace) -> int:
    from gym_remote.vector_env import RemoteVectorEnv

    spaces = _spaces_of(args)
    envs = RemoteVectorEnv(
        num_envs=args.num_envs,
        bind=args.bind,
        autoreset_mode=args.autoreset_mode,
        timeout=args.timeout,
        connect_timeout=args.connect_timeout,
        liveness_timeout=args.liveness_timeout,
        observation_space=spaces[0],
        action_space=spaces[1],
        **_server_security(args),
    )
    if args.secret_file is not None:
        credentials = f" --secret-file {args.secret_file}"
    elif args.server_key is not None:
        credentials = " --server-key SERVER.key --client-key CLIENT.key_secret"
    else:
        credentials = ""
    source = f"--factory {args.factory}" if args.factory else f"--env {args.env or 'ENV_ID'}"
    if args.env_kwargs:
        source += f" --env-kwargs '{json.dumps(args.env_kwargs)}'"
    try:
        elsewhere = "" if len(envs.addresses) == 1 else f" (also at {', '.join(envs.addresses[1:])})"
        print(
            f"listening on {envs.address}{elsewhere} for {envs.num_envs} envs; start clients with:\n"
            f"  gym-remote client {envs.address} {source} --num-envs N{credentials}",
            flush=True,
        )
        _report(rollout(envs, args.steps, args.seed, progress=not args.no_progress))
    finally:
        envs.close(stop_clients=args.stop_clients)
    return EXIT_OK


def _server_security(args: argparse.Namespace) -> dict[str, Any]:
    """The security keyword arguments of a RemoteVectorEnv from the server's command-line options."""
    return {
        "server_key": args.server_key,
        "authorized_keys": args.authorized_keys,
        "secret": _secret(args),
        "insecure": args.insecure,
        "max_connections": args.max_connections,
    }


def _spaces_of(args: argparse.Namespace) -> tuple[gym.Space | None, gym.Space | None]:
    """The single spaces of the env that ``--env``/``--factory`` names (made once, then closed), or Nones."""
    if args.env is None and args.factory is None:
        return None, None
    env = make_env_fns(args.env, args.factory, 1, args.env_kwargs)[0]()
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _env_label(args: argparse.Namespace) -> str:
    return args.factory or args.env


def _run_bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from gym_remote.bench import format_table, interleaved_medians, lock_step_rate
    from gym_remote.vector_env import RemoteVectorEnv

    env_fns = make_env_fns(args.env, args.factory, args.num_envs, args.env_kwargs)
    layouts = args.num_clients or sorted({1, min(os.cpu_count() or 1, args.num_envs)})
    if max(layouts) > args.num_envs:
        raise ValueError(f"--num-clients: at most --num-envs ({args.num_envs}) clients, got {max(layouts)}")
    bind = "tcp://127.0.0.1:*" if args.transport == "tcp" else None
    makers: dict[str, Callable[[], gym.vector.VectorEnv]] = {
        "SyncVectorEnv": lambda: gym.vector.SyncVectorEnv(env_fns),
        "AsyncVectorEnv": lambda: gym.vector.AsyncVectorEnv(env_fns, shared_memory=True),
    }
    for clients in layouts:
        label = f"RemoteVectorEnv, {clients} client{'s' if clients > 1 else ''} ({args.transport})"
        makers[label] = lambda clients=clients: RemoteVectorEnv(env_fns, num_clients=clients, bind=bind)
    measure = lock_step_rate(args.steps, max(10, args.steps // 10), seed=args.seed)
    cases = {label: (make, measure) for label, make in makers.items()}
    with tqdm(
        total=len(cases) * args.repeats, unit="run", disable=args.no_progress, desc="bench", file=sys.stderr
    ) as bar:
        medians = interleaved_medians(cases, args.repeats, on_run=lambda name: bar.update(1))
    title = (
        f"{args.num_envs} x {_env_label(args)}, {args.steps} steps, median of {args.repeats} runs "
        "(the vector envs taking turns)"
    )
    ratios = {"x Sync": "SyncVectorEnv", "x Async": "AsyncVectorEnv"}
    print(format_table(title, medians, "env-steps/s", ratios))
    print(bench_verdict(medians))
    return EXIT_OK


def bench_verdict(medians: dict[str, float]) -> str:
    """One line that answers ``gym-remote bench``'s question from its medians: which is fastest, and why."""
    remote = {name: rate for name, rate in medians.items() if name.startswith("RemoteVectorEnv")}
    local = {name: rate for name, rate in medians.items() if name not in remote}
    best_remote, best_local = max(remote, key=remote.__getitem__), max(local, key=local.__getitem__)
    ratio = remote[best_remote] / local[best_local]
    if ratio >= 1:
        return (
            f"verdict: remote stepping pays off for this env on this machine: {best_remote} makes {ratio:.2f}x "
            f"the env-steps/s of {best_local}, the faster of Gymnasium's vector envs"
        )
    return (
        f"verdict: {best_local} is faster here; the best RemoteVectorEnv layout ({best_remote}) makes {ratio:.2f}x "
        "its env-steps/s. Remote stepping pays when an env step costs more than a message round trip (a slow "
        "simulator, one client per core), or to take the envs off this machine"
    )


def rollout(envs: gym.vector.VectorEnv, steps: int, seed: int, *, progress: bool = True) -> dict[str, float]:
    """Step ``envs`` with random actions for about ``steps`` env steps; return speed and episode statistics."""
    from gymnasium.wrappers.vector import RecordEpisodeStatistics
    from tqdm import tqdm

    recorder = RecordEpisodeStatistics(envs, buffer_length=10_000)
    recorder.reset(seed=seed)
    recorder.action_space.seed(seed)
    autoreset_disabled = envs.metadata["autoreset_mode"].value == "Disabled"
    iterations = max(1, steps // envs.num_envs)
    started = time.perf_counter()
    with tqdm(
        total=iterations * envs.num_envs,
        unit="step",
        unit_scale=True,
        disable=not progress,
        desc="rollout",
        file=sys.stderr,
    ) as bar:
        for _ in range(iterations):
            _, _, terminations, truncations, _ = recorder.step(recorder.action_space.sample())
            if autoreset_disabled and (terminations | truncations).any():
                recorder.reset(options={"reset_mask": terminations | truncations})
            bar.update(envs.num_envs)
    elapsed = time.perf_counter() - started
    returns = np.asarray(recorder.return_queue, dtype=np.float64)
    lengths = np.asarray(recorder.length_queue, dtype=np.float64)
    return {
        "steps": iterations * envs.num_envs,
        "seconds": elapsed,
        "steps_per_second": iterations * envs.num_envs / elapsed,
        "episodes": len(returns),
        "mean_return": float(returns.mean()) if len(returns) else float("nan"),
        "mean_length": float(lengths.mean()) if len(lengths) else float("nan"),
    }


def _report(stats: dict[str, float]) -> None:
    print(f"{stats['steps']} steps in {stats['seconds']:.2f} s: {stats['steps_per_second']:,.0f} steps/s")
    if stats["episodes"]:
        print(
            f"{stats['episodes']} episodes: mean return {stats['mean_return']:.2f}, "
            f"mean length {stats['mean_length']:.1f}"
        )
    else:
        print("no episode finished")


def _import_from_working_directory() -> None:
    """Put the current directory first on ``sys.path``, as ``python -m gym_remote`` does (the console script
    would not), so that ``--factory myenvs:make_env`` finds ``./myenvs.py``; local clients inherit the path."""
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_TERMINATED)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_ints(text: str) -> list[int]:
    try:
        return sorted({_positive_int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be positive integers separated by commas, got {text!r}") from None


def _seconds(text: str) -> float | None:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return None if value == float("inf") else value


def _non_negative_seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a duration in seconds >= 0, got {text}")
    return value


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"key\": 1}'")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_level is None:
        args.log_level = DEFAULT_LOG_LEVELS.get(args.command, "WARNING")
    _import_from_working_directory()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ValueError as error:
        if isinstance(error, GymRemoteError):
            print(f"gym-remote: error: {error}", file=sys.stderr)
            return EXIT_FAILED
        parser.exit(EXIT_USAGE, f"gym-remote: error: {error}\n")
    except (GymRemoteError, OSError, RuntimeError, TimeoutError, ConnectionError, gym.error.Error) as error:
        print(f"gym-remote: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED
