"""Wire checks of the readings PROTOCOL.md settles where two careful clients could differ (issue 27 §1): the
error type of a malformed command, dict keys equal under Python's ``==``, a JSON object's repeated key, and a
defined flag on a kind it is not defined for. A scripted server sends each; every wait is bounded."""

from __future__ import annotations

from typing import Any

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


CHECKS = [
    Check(
        GROUP,
        "settled readings: malformed commands are ProtocolErrors, equal and repeated dict keys, flags of other kinds",
        check_settled_readings,
    )
]
