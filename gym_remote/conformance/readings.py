"""Wire checks of the readings PROTOCOL.md settles where two careful clients could differ (issue 27 §1): the
error type of a malformed command, dict keys equal under Python's ``==``, a JSON object's repeated key, a
defined flag on a kind it is not defined for, and the probe's reading of the reset option ``offset``
(CONFORMANCE.md §1.3). A scripted server sends each; every wait is bounded."""

from __future__ import annotations

from typing import Any

import numpy as np

from gym_remote import protocol
from gym_remote.conformance.check import Check, Context
from gym_remote.conformance.reference import preview
from gym_remote.conformance.scripted import ScriptedServer
from gym_remote.conformance.wire import GROUP, NUM_ENVS, SEEDS, Driven, call_results, expect_error, joined
from gym_remote.protocol import Kind

__all__ = ["CHECKS"]

MALFORMED = ("ProtocolError", "gym_remote.errors")
"""The type and module of every client's ERROR for a malformed command (PROTOCOL.md §8)."""


def _send_body(server: ScriptedServer, kind: Kind, body: str, note: str) -> int:
    """A command whose value section is ``body``, written by hand (JSON no Python dict can produce)."""
    seq = server.next_seq()
    header = protocol.pack_header(kind, seq, NUM_ENVS, protocol.FLAG_VALUE)
    server.send_raw([header, body.encode()], f"{kind.name} seq {seq}, count {NUM_ENVS}: {note}")
    return seq


def _expect_malformed(server: ScriptedServer, seq: int, what: str, rule: str) -> None:
    report = expect_error(server, seq, f"PROTOCOL.md {rule}: the command was {what}")
    found = (report.get("type"), report.get("module"), report.get("index"))
    if found != (*MALFORMED, None):
        raise server.fail(
            f"{what} was answered with an ERROR of type {found[0]!r}, module {found[1]!r} and index {found[2]!r}; "
            f"a malformed command is reported as type {MALFORMED[0]!r}, module {MALFORMED[1]!r}, index null in "
            "every language (PROTOCOL.md §8, 'Error types'), so that the learner's error says the same whichever "
            "client found it"
        )


def _repeated_json_key(client: Driven) -> None:
    server = client.server
    body = '{"name":"label","values":["l",{"k":1,"j":0,"k":2},0,0]}'
    seq = _send_body(server, Kind.SET_ATTR, body, "env 0's value is the object {'k': 1, 'j': 0, 'k': 2}")
    received = server.expect(Kind.CALL_RESULT, seq=seq, why="PROTOCOL.md §5.3: SET_ATTR is answered by CALL_RESULT")
    seq = server.send_call("label")
    why = "PROTOCOL.md §11: a CALL of a name SET_ATTR set answers the value it set"
    received = server.expect(Kind.CALL_RESULT, seq=seq, why=why)
    value = call_results(server, received, NUM_ENVS)[0]
    if type(value) is not dict or list(value.items()) != [("k", 2), ("j", 0)]:
        raise server.fail(
            f"a JSON object with the key 'k' twice ({{'k': 1, 'j': 0, 'k': 2}}) came back as {preview(value)}; "
            "a receiver keeps the last value at the place of the first key: {'k': 2, 'j': 0} (PROTOCOL.md §3.1)"
        )


def _flags_of_another_kind(client: Driven) -> None:
    """A RESET with STEP's FLAG_DTYPES and FLAG_EACH set is a plain RESET (PROTOCOL.md §2.1)."""
    seq = client.server.next_seq()
    frames: list[Any] = protocol.message(Kind.RESET, {"seeds": list(SEEDS)}, seq=seq, count=NUM_ENVS)
    flags = protocol.FLAG_VALUE | protocol.FLAG_DTYPES | protocol.FLAG_EACH
    frames[0] = protocol.pack_header(Kind.RESET, seq, NUM_ENVS, flags)
    client.server.send_raw(frames, f"RESET seq {seq}, count {NUM_ENVS} with FLAG_DTYPES and FLAG_EACH set")
    what = "a RESET with FLAG_DTYPES and FLAG_EACH set"
    result = client.answer(seq, NUM_ENVS, f"PROTOCOL.md §2.1: flags defined for another kind are ignored ({what})")
    client.compare(result, client.reference.reset(SEEDS), None, what)


def check_settled_readings(context: Context) -> None:
    with joined(context) as client:
        server = client.server
        client.reset(SEEDS)
        seq = server.send(Kind.CALL, {"name": "render"}, seq=server.next_seq(), count=NUM_ENVS)
        _expect_malformed(server, seq, "a CALL without 'args' and 'kwargs'", "§5.3")
        client.reset(SEEDS, what="a RESET after the malformed CALL (the client keeps serving, §8)")
        body = '{"name":"label","values":["l",["d",1,"a",1.0,"b"],0,0]}'
        seq = _send_body(server, Kind.SET_ATTR, body, "env 0's value is ['d', 1, 'a', 1.0, 'b']")
        _expect_malformed(server, seq, "a SET_ATTR whose 'd' value has the keys 1 and 1.0", "§3.1: 1 == 1.0")
        _repeated_json_key(client)
        _flags_of_another_kind(client)


REFUSED_OFFSETS: list[tuple[str, Any]] = [
    ("1000, the first int past the range", 1000),
    ("-1", -1),
    ("the float 5.0", 5.0),
    ("true (a bool)", True),
    ("a numpy int64 scalar 5 (['s', '<i8', 5])", np.int64(5)),
    ("the big int 2**64 (['i', ...])", 2**64),
]
"""Offsets the probe refuses with ValueError (CONFORMANCE.md §1.3: a plain int in [0, 1000), never converted)."""


def check_probe_offsets(context: Context) -> None:
    """The probe's ``reset`` takes ``options["offset"]`` only as a plain int in ``[0, 1000)`` and refuses any other
    with ValueError, which the client's ERROR names with the env's index; options that are no dict mean offset 0."""
    with joined(context) as client:
        server = client.server
        client.reset(SEEDS)
        for what, offset in REFUSED_OFFSETS:
            seq = server.send_reset(SEEDS, options={"offset": offset})
            command = f"a RESET whose options['offset'] is {what}"
            rule = (
                "CONFORMANCE.md §1.3: the offset must be a plain int in [0, 1000), never converted; any other raises "
                "ValueError (module builtins); PROTOCOL.md §5.6: the client stops at the first env that raises and "
                f"answers ERROR naming it (index 0). The command was {command}"
            )
            report = expect_error(server, seq, rule)
            found = (report.get("type"), report.get("module"), report.get("index"))
            if found != ("ValueError", "builtins", 0):
                raise server.fail(
                    f"{command} was answered with an ERROR of type {found[0]!r}, module {found[1]!r} and index "
                    f"{found[2]!r}, expected 'ValueError', 'builtins' and 0 ({rule})"
                )
            client.reset(SEEDS, what=f"a seeded RESET after {command} (the client keeps serving, §8)")
        client.reset(SEEDS, options={"offset": 999}, what="a RESET with options {'offset': 999}, the largest offset")
        client.reset(
            SEEDS,
            options=["offset", 7],
            what="a RESET whose options are the list ['offset', 7] (no dict, so offset 0: CONFORMANCE.md §1.3)",
        )


CHECKS = [
    Check(
        GROUP,
        "settled readings: malformed commands are ProtocolErrors, equal and repeated dict keys, flags of other kinds",
        check_settled_readings,
    ),
    Check(GROUP, "the probe refuses offsets that are not plain ints in [0, 1000)", check_probe_offsets),
]
