"""``gym-remote status``: ask a running learner for its fleet, over its own endpoint (PROTOCOL.md §9.1).

:func:`query_status` connects as a client would (the same keys or secret), sends STATUS and returns the
STATUS_REPORT's value; :func:`format_status` lays it out as a table for a terminal.

Example (a learner listening on loopback)::

    from gym_remote.status import format_status, query_status

    print(format_status(query_status("tcp://127.0.0.1:5555")))
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from gym_remote import protocol
from gym_remote.errors import JoinRefusedError, ProtocolError, RemoteTimeoutError
from gym_remote.links.reach import why_unreachable
from gym_remote.links.zeromq import (
    FOR_NOW_ZAP_STATUSES,
    HANDSHAKE_FAILURES,
    ConnectionEvent,
    Dealer,
    new_context,
    terminate,
)
from gym_remote.protocol import Kind
from gym_remote.security import KeySource, check_endpoint, client_security

__all__ = ["query_status", "StatusClient", "format_status"]

logger = logging.getLogger(__name__)

ASK_AGAIN_AFTER = 1.0
"""Seconds :meth:`StatusClient.query` waits for an answer before it asks again (twice as long each time after):
a learner drops the requests beyond 10 a second, and an answer that arrives malformed is lost (PROTOCOL.md §9.1)."""


def query_status(
    address: str,
    *,
    timeout: float = 10.0,
    server_key: KeySource | None = None,
    client_key: KeySource | None = None,
    secret: str | bytes | None = None,
) -> dict[str, Any]:
    """The status of the learner at ``address``: the value of its STATUS_REPORT (PROTOCOL.md §9.1).

    One question on a connection of its own; :class:`StatusClient` asks again and again on one connection.

    Raises:
        RemoteTimeoutError: no answer within ``timeout`` seconds (no server there, or a learner that is not inside
            a call: it answers while it steps).
        JoinRefusedError: the server turned down the connection (wrong keys or secret, or none where it needs them).
        PermissionError: the learner serves only the clients it launched, and reports to no one.
    """
    with StatusClient(address, server_key=server_key, client_key=client_key, secret=secret) as client:
        return client.query(timeout)


class StatusClient:
    """A connection to the learner at ``address`` that asks for its status as often as :meth:`query` is called
    (``gym-remote status --watch``): one ZeroMQ context and handshake for all the questions."""

    def __init__(
        self,
        address: str,
        *,
        server_key: KeySource | None = None,
        client_key: KeySource | None = None,
        secret: str | bytes | None = None,
    ) -> None:
        check_endpoint(address, "address")
        self.address = address
        self._secured = server_key is not None or secret is not None
        security = client_security(server_key, client_key, secret)
        self._context = new_context()
        identity = f"status-{uuid.uuid4().hex}".encode()
        try:
            self._dealer = Dealer(self._context, address, identity, liveness_timeout=10.0, security=security)
        except BaseException:
            terminate(self._context)
            raise
        self._seq = 0
        self._connected = False
        self._cut = 0

    def query(self, timeout: float = 10.0) -> dict[str, Any]:
        """The learner's status now (see :func:`query_status` for what it raises).

        Asks again when no answer came within :data:`ASK_AGAIN_AFTER` (then twice as long each time), and at
        once when a message arrives malformed; an answer to any of this call's requests will do.
        """
        deadline = time.monotonic() + timeout
        first = seq = self._ask()
        wait = ASK_AGAIN_AFTER
        ask_again = time.monotonic() + wait
        while (now := time.monotonic()) < deadline:
            if now >= ask_again:
                wait *= 2
                seq, ask_again = self._ask(), now + wait
            self._check_connection()
            self._dealer.flush()
            received = self._dealer.receive(min(0.1, max(0.001, deadline - now)))
            if received is None:
                continue
            frame, cursor = received
            frames = cursor.rest()
            try:
                header = protocol.parse_header(frame)
                value = protocol.read_value(frames) if header.flags & protocol.FLAG_VALUE else None
            except ProtocolError as error:
                logger.debug("dropped a malformed message from %s (%s); asking again", self.address, error)
                seq = self._ask()
                continue
            if not first <= header.seq <= seq:  # (an answer to an earlier call's request, which timed out)
                continue
            if header.kind == Kind.STATUS_REPORT:
                if not isinstance(value, dict):
                    raise ProtocolError(f"the server at {self.address} sent a STATUS_REPORT that is not a dict")
                return value
            if header.kind == Kind.ERROR:
                message = value.get("message") if isinstance(value, dict) else None
                raise PermissionError(f"the server at {self.address} refused the status request: {message}")
        why = "" if self._connected else why_unreachable(self.address)
        hint = (
            f": {why}"
            if why
            else " (a learner answers while it is inside a call, a step or a reset: is it busy elsewhere?)"
        )
        raise RemoteTimeoutError(f"no status from a learner at {self.address} within {timeout:g} s{hint}")

    def _ask(self) -> int:
        """Send a STATUS request; its ``seq``."""
        self._seq += 1
        self._dealer.send([protocol.pack_header(Kind.STATUS, self._seq)])
        return self._seq

    def _check_connection(self) -> None:
        for event, value in self._dealer.events():
            if event is ConnectionEvent.HANDSHAKE_SUCCEEDED:
                self._connected = True
                self._cut = 0
            elif event is ConnectionEvent.HANDSHAKE_CUT:
                self._cut += 1
                if self._cut >= HANDSHAKE_FAILURES:
                    raise JoinRefusedError(_refused(self.address, self._secured), code="handshake")
            elif event is ConnectionEvent.HANDSHAKE_PROTOCOL or (
                event is ConnectionEvent.HANDSHAKE_AUTH and value not in FOR_NOW_ZAP_STATUSES
            ):
                raise JoinRefusedError(_refused(self.address, self._secured), code="handshake")

    def close(self) -> None:
        self._dealer.close(linger=0)
        terminate(self._context)

    def __enter__(self) -> StatusClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _refused(address: str, secured: bool) -> str:
    if secured:
        return (
            f"the server at {address} refused the connection: does this hold the server's secret (--secret-file), or "
            "its public key (--server-key) and an authorized client key (--client-key)?"
        )
    return f"the server at {address} requires authentication: give --secret-file, or --server-key and --client-key"


def format_status(report: dict[str, Any]) -> str:
    """A learner's status as a terminal table: a header, one row per slot, the clients in line.

    >>> report = {"server": "gym_remote", "address": "tcp://10.0.0.5:5555", "uptime": 75.0, "num_envs": 1,
    ...           "served": 1, "security": "none", "counts": {"joined": 1}, "waiting": [], "refused": {},
    ...           "episodes_since": 15.0,
    ...           "slots": [{"slot": 0, "served": True, "client": "sim-1", "host": "node", "pid": 7, "plane": "zmq",
    ...                      "steps": 9000, "steps_per_second": 812.5, "episodes": 40, "mean_return": 22.5,
    ...                      "losses": 0, "rejoins": 0, "last_seen": 0.01, "latency_median": 0.0009,
    ...                      "latency_worst": 0.004}]}
    >>> print(format_status(report))  # doctest: +NORMALIZE_WHITESPACE
    gym_remote at tcp://10.0.0.5:5555: up 1m15s, 1 of 1 slots served, security none
    clients: 1 joined, 0 rejoined, 0 lost, 0 left; refused: none; waiting in line: none; episodes for 1m00s
    slot  client  host  pid  plane  env-steps/s  latency med/max  episodes  mean return  losses  rejoins  last seen
    0     sim-1   node  7    zmq    812          0.9 / 4.0 ms     40        22.50        0       0        0.0 s
    """
    counts = report.get("counts", {})
    refused = report.get("refused", {})
    waiting = report.get("waiting", [])
    since = report.get("episodes_since")
    episodes = (
        "episodes from this status on"
        if since is None or report.get("uptime", 0.0) - since < 1.0
        else f"episodes for {_duration(report.get('uptime', 0.0) - since)}"
    )
    lines = [
        f"{report.get('server', '?')} at {report.get('address', '?')}: up {_duration(report.get('uptime', 0.0))}, "
        f"{report.get('served', 0)} of {report.get('num_envs', 0)} slots served, security {report.get('security')}",
        f"clients: {counts.get('joined', 0)} joined, {counts.get('rejoined', 0)} rejoined, {counts.get('lost', 0)} "
        f"lost, {counts.get('left', 0)} left; refused: "
        + (", ".join(f"{reason} {count}" for reason, count in sorted(refused.items())) or "none")
        + "; waiting in line: "
        + (", ".join(f"{w['name']!r} ({w['num_envs']} envs)" for w in waiting) or "none")
        + f"; {episodes}",
    ]
    header = (
        "slot",
        "client",
        "host",
        "pid",
        "plane",
        "env-steps/s",
        "latency med/max",
        "episodes",
        "mean return",
        "losses",
        "rejoins",
        "last seen",
    )
    rows: list[tuple[str, ...]] = [header]
    for slot in report.get("slots", []):
        mean = slot.get("mean_return")
        common = (
            f"{slot['steps_per_second']:,.0f}",
            "",
            str(slot["episodes"]),
            f"{mean:.2f}" if mean is not None else "-",
            str(slot["losses"]),
        )
        if slot.get("served"):
            median, worst = slot.get("latency_median"), slot.get("latency_worst")
            latency = f"{median * 1e3:.1f} / {worst * 1e3:.1f} ms" if median is not None else "-"
            rows.append(
                (
                    str(slot["slot"]),
                    str(slot["client"]),
                    str(slot["host"]),
                    str(slot["pid"]),
                    str(slot["plane"]),
                    common[0],
                    latency,
                    *common[2:],
                    str(slot["rejoins"]),
                    f"{slot['last_seen']:.1f} s",
                )
            )
        else:
            empty = f"(no client for {_duration(slot.get('empty_for', 0.0))})"
            rows.append((str(slot["slot"]), empty, "", "", "", *common, "", ""))
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
