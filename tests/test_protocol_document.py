"""docs/PROTOCOL.md says what the code does: the tests read the document's tables and compare them
with :mod:`gym_remote.protocol` and with the messages real peers exchange on loopback tcp.

* the version, the header layout, the message kinds and the flags against ``gym_remote.protocol``;
* the HELLO fields against a HELLO an :class:`~gym_remote.EnvClient` sends, the WELCOME and REFUSE
  fields against those a :class:`~gym_remote.RemoteVectorEnv` sends;
* a client written from the document alone (a raw DEALER, headers packed with ``struct``, JSON built
  by hand) is welcomed by a RemoteVectorEnv and answers its RESET.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import re
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import zmq

from gym_remote import RemoteVectorEnv, protocol
from tests.helpers import ThreadClient, cartpole_server, hello_frames

DOCUMENT = Path(__file__).resolve().parent.parent / "docs" / "PROTOCOL.md"
RECEIVE_MS = 10_000
"""How long a test's raw socket waits for a message."""


# -- reading the document --------------------------------------------------------------------------


def section(text: str, heading: str) -> str:
    """The text under the heading that starts with ``heading`` (e.g. ``"## 4."``), up to the next
    heading of the same level or above; fenced code blocks are not searched for headings."""
    level = len(heading.split(" ")[0])
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(heading))
    fenced = False
    for end in range(start + 1, len(lines)):
        line = lines[end]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            return "\n".join(lines[start + 1 : end])
    return "\n".join(lines[start + 1 :])


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def table_after(text: str, marker: str) -> list[dict[str, str]]:
    """The first markdown table after ``marker`` in ``text``, as rows keyed by its column names."""
    lines = text[text.index(marker) :].splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("|"))
    columns = _cells(lines[start])
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(columns, _cells(line), strict=True)))
    return rows


def names(cell: str) -> list[str]:
    """The names in backticks in a table cell (``"`name`, `host`"`` -> ``["name", "host"]``)."""
    return re.findall(r"`([^`]+)`", cell)


def stated_int(cell: str) -> int:
    """The first integer in backticks in a table cell."""
    return int(re.search(r"`(\d+)`", cell).group(1))


def keys_of(text: str) -> set[str]:
    """The quoted keys of a JSON object sketched in the document (``{"code", "reason"}``, ``{"code": c}``)."""
    return set(re.findall(r'"(\w+)"\s*[,:}]', text))


@dataclass
class Document:
    """What docs/PROTOCOL.md states about the handshake and the header."""

    title_version: int
    stated_versions: list[int]
    header_format: str
    header_rows: list[dict[str, str]]
    kinds: dict[str, int]
    flags: dict[str, int]
    hello: dict[str, dict[str, str]]
    welcome: dict[str, dict[str, str]]
    refuse_keys: list[set[str]]

    @property
    def version(self) -> int:
        """The version the header carries, from the header table."""
        return stated_int(next(row for row in self.header_rows if names(row["field"]) == ["version"])["meaning"])

    @property
    def required_hello_keys(self) -> set[str]:
        return {key for key, row in self.hello.items() if row["if absent"] == "required"}


def _fields(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """Rows of a field table by key; a row naming several keys (`` `a`, `b` ``) stands for each."""
    return {key: row for row in rows for key in names(row["key"])}


@functools.cache
def document() -> Document:
    """docs/PROTOCOL.md, read once."""
    text = DOCUMENT.read_text()
    header = section(text, "### 2.1")
    kinds = section(text, "## 4.")
    handshake = section(text, "## 7.")
    hello = _fields(table_after(handshake, "the client sends HELLO"))
    welcome = _fields(table_after(handshake, "WELCOME's value"))
    refuse_cell = next(row for row in table_after(kinds, "") if row["kind"] == "REFUSE")["value section"]
    return Document(
        title_version=int(re.match(r"# .*, version (\d+)\n", text).group(1)),
        stated_versions=[
            *(int(number) for number in re.findall(r"This document is version (\d+)", text)),
            stated_int(hello["protocol"]["meaning"]),
            stated_int(welcome["protocol"]["meaning"]),
        ],
        header_format=re.search(r"`struct` format: `([^`]+)`", header).group(1),
        header_rows=table_after(header, "| offset"),
        kinds={row["kind"]: int(row["value"]) for row in table_after(kinds, "")},
        flags={names(row["flag"])[0]: int(row["value"]) for row in table_after(header, "| flag |")},
        hello=hello,
        welcome=welcome,
        refuse_keys=[keys_of(refuse_cell), keys_of(re.search(r"REFUSE with `([^`]*)`", handshake).group(1))],
    )


# -- the version, the header, the kinds, the flags -------------------------------------------------


def test_every_version_the_document_states_is_the_protocol_version():
    doc = document()
    assert doc.title_version == protocol.PROTOCOL_VERSION
    assert doc.version == protocol.PROTOCOL_VERSION
    assert doc.stated_versions == [protocol.PROTOCOL_VERSION] * len(doc.stated_versions)
    assert len(doc.stated_versions) >= 3  # §10, HELLO's and WELCOME's `protocol`


def test_header_table_is_the_header_protocol_packs():
    doc = document()
    assert doc.header_format == protocol.HEADER.format
    fields = [names(row["field"])[0] for row in doc.header_rows]
    assert fields == ["magic", *protocol.Header._fields]
    sizes = [struct.calcsize("<" + code) for code in re.findall(r"\d*[a-zA-Z]", protocol.HEADER.format.lstrip("<"))]
    assert [int(row["size"]) for row in doc.header_rows] == sizes
    assert [int(row["offset"]) for row in doc.header_rows] == [sum(sizes[:index]) for index in range(len(sizes))]
    assert names(doc.header_rows[0]["meaning"]) == [protocol.MAGIC.decode()]
    assert sum(sizes) == protocol.HEADER_SIZE == 16


def test_message_kind_table_is_protocol_kind():
    assert document().kinds == {kind.name: int(kind) for kind in protocol.Kind}


def test_flag_table_is_the_protocol_flags():
    flags = {name: getattr(protocol, name) for name in protocol.__all__ if name.startswith("FLAG_")}
    assert document().flags == flags


# -- the handshake's fields, as real peers send them ---------------------------------------------


def test_hello_fields_are_those_an_env_client_sends():
    doc = document()
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.RCVTIMEO, RECEIVE_MS)
    client = None
    try:
        router.bind("tcp://127.0.0.1:*")
        address = router.getsockopt_string(zmq.LAST_ENDPOINT)
        client = ThreadClient(address, [lambda: gym.make("CartPole-v1")] * 2, name="documented", connect_timeout=15)
        identity, header, body, *buffers = router.recv_multipart()
        magic, version, kind, flags, count, seq = struct.unpack(doc.header_format, header)
        assert (magic, version, kind, count, seq) == (b"GR", doc.version, doc.kinds["HELLO"], 2, 0)
        assert flags == doc.flags["FLAG_VALUE"]
        sent = json.loads(body)
    finally:
        if client is not None:
            client.stop()
        router.close()
        context.term()
    assert not set(sent) - set(doc.hello), f"HELLO fields the document does not describe: {set(sent) - set(doc.hello)}"
    assert not set(doc.hello) - set(sent), f"documented HELLO fields not sent: {set(doc.hello) - set(sent)}"
    assert sent["protocol"] == doc.version and sent["num_envs"] == 2
    assert identity == sent["session"].encode(), "the session is the routing id"


def server_answer(envs: RemoteVectorEnv, dealer: zmq.Socket, timeout: float = 10.0) -> list[bytes]:
    """The server's answer to what ``dealer`` sent; the server handles joins only while it is polled."""
    deadline = time.monotonic() + timeout
    while not dealer.poll(0):
        assert time.monotonic() < deadline, f"no answer from the server within {timeout} s"
        envs._server.poll()
    return dealer.recv_multipart()


@contextlib.contextmanager
def raw_dealer(address: str):
    """A DEALER connected to ``address`` with a fresh routing id (its session), closed afterwards."""
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    session = uuid.uuid4().hex
    dealer.setsockopt(zmq.ROUTING_ID, session.encode())
    dealer.connect(address)
    try:
        yield dealer, session
    finally:
        dealer.close()
        context.term()


def test_welcome_fields_are_those_the_server_sends(stack):
    doc = document()
    envs = cartpole_server(stack, 1)
    with raw_dealer(envs.address) as (dealer, session):
        dealer.send_multipart(hello_frames(session, 1))
        header, body, *buffers = server_answer(envs, dealer)
    magic, version, kind, flags, count, seq = struct.unpack(doc.header_format, header)
    assert (magic, version, kind, count, seq) == (b"GR", doc.version, doc.kinds["WELCOME"], 0, 0)
    assert flags == doc.flags["FLAG_VALUE"]
    sent = json.loads(body)
    assert set(sent) == set(doc.welcome), (
        f"sent, not documented: {set(sent) - set(doc.welcome)}; documented, not sent: {set(doc.welcome) - set(sent)}"
    )
    assert sent["protocol"] == doc.version and sent["slots"] == ["l", 0]  # a list, tagged (§3.2)
    assert sent["max_message_bytes"] == envs._server.max_message_bytes


def test_refuse_fields_are_those_the_server_sends(stack):
    doc = document()
    envs = cartpole_server(stack, 1)
    with raw_dealer(envs.address) as (dealer, session):
        dealer.send_multipart(hello_frames(session, 1, protocol=protocol.PROTOCOL_VERSION + 1))
        header, body, *buffers = server_answer(envs, dealer)
    assert header[3] == doc.kinds["REFUSE"]
    sent = json.loads(body)
    assert sent["code"] == "version"
    for documented in doc.refuse_keys:
        assert documented == set(sent)


# -- a client written from the document alone ----------------------------------------------------

OBSERVATION = (0.25, -0.5)
OBSERVATION_SPACE = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)


class MinimalClient:
    """A client for one env with a ``Box(-1, 1, (2,), float32)`` observation and a ``Discrete(2)``
    action, written from the document: its numbers (version, kinds, flags, header layout) and which
    HELLO fields it must send are read from it; it answers RESET with :data:`OBSERVATION` and CLOSE
    with BYE, in a thread of its own."""

    def __init__(self, address: str, doc: Document) -> None:
        self.doc = doc
        self.session = uuid.uuid4().hex
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 1000)
        self.socket.setsockopt(zmq.RCVTIMEO, RECEIVE_MS)
        self.socket.setsockopt(zmq.ROUTING_ID, self.session.encode())
        self.socket.connect(address)
        self.welcome: dict[str, Any] | None = None
        self.refusal: dict[str, Any] | None = None
        self.reset_seeds: list[Any] = []
        self.said_bye = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def header(self, kind: str, *, flags: int = 0, count: int = 0, seq: int = 0) -> bytes:
        return struct.pack(self.doc.header_format, b"GR", self.doc.version, self.doc.kinds[kind], flags, count, seq)

    def hello(self) -> tuple[dict[str, Any], list[bytes]]:
        """The HELLO's value, its required fields and a name, and its buffers (the Box's bounds)."""
        box = {"space": "Box", "low": ["a", "<f4", [2], 0], "high": ["a", "<f4", [2], 1], "dtype": "<f4"}
        values = {
            "protocol": stated_int(self.doc.hello["protocol"]["meaning"]),
            "num_envs": 1,
            "observation_spaces": ["l", box],  # lists travel tagged (§3.2)
            "observation_space_index": ["l", 0],
            "action_spaces": ["l", {"space": "Discrete", "n": 2, "start": 0}],
            "action_space_index": ["l", 0],
            "name": "minimal",
        }
        unknown = self.doc.required_hello_keys - set(values)
        assert not unknown, f"the document requires HELLO fields this client does not know: {unknown}"
        value = {key: values[key] for key in [*self.doc.required_hello_keys, "name"]}
        return value, [struct.pack("<2f", -1.0, -1.0), struct.pack("<2f", 1.0, 1.0)]

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as error:  # noqa: BLE001 - kept for the test to inspect
            self.error = error
        finally:
            self.socket.close()
            self.context.term()

    def _receive(self) -> tuple[str, int, int, int, list[bytes]]:
        """The next message: its kind's name, flags, count, seq and its frames after the header."""
        header, *rest = self.socket.recv_multipart()  # zmq.Again after RECEIVE_MS
        magic, version, kind, flags, count, seq = struct.unpack_from(self.doc.header_format, header)
        assert magic == b"GR" and version == self.doc.version, header
        by_number = {number: name for name, number in self.doc.kinds.items()}
        return by_number[kind], flags, count, seq, rest

    def _serve(self) -> None:
        value_flag = self.doc.flags["FLAG_VALUE"]
        hello, buffers = self.hello()
        header = self.header("HELLO", flags=value_flag, count=1)
        self.socket.send_multipart([header, json.dumps(hello).encode(), *buffers])
        kind, flags, count, seq, rest = self._receive()
        if kind == "REFUSE":
            self.refusal = json.loads(rest[0])
            return
        assert kind == "WELCOME" and flags == value_flag, kind
        self.welcome = json.loads(rest[0])  # its spaces' arrays are in the buffers that follow
        for _ in range(100):
            kind, flags, count, seq, rest = self._receive()
            if kind == "PING":
                continue
            if kind == "CLOSE":
                self.socket.send(self.header("BYE", seq=seq))
                self.said_bye = True
                return
            assert kind == "RESET" and flags == value_flag and count == 1, (kind, flags, count)
            tag, seed = json.loads(rest[0])["seeds"]
            assert tag == "l", tag
            self.reset_seeds.append(seed)
            scalars = struct.pack("<d", 0.0) + bytes([0]) + bytes([0])  # reward, terminated, truncated
            result = [
                self.header("RESULT", flags=value_flag, count=1, seq=seq) + scalars,
                struct.pack("<2f", *OBSERVATION),
                json.dumps({"infos": ["l", {"seed": seed}]}).encode(),
            ]
            self.socket.send_multipart(result)
        raise AssertionError("more than 100 messages without a CLOSE")

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the minimal client still runs after {timeout} s"
        assert self.error is None, repr(self.error)


def poll_until(envs: RemoteVectorEnv, condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Let the server handle joins (it does only while polled) until ``condition()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        envs._server.poll()


def test_client_written_from_the_document_is_welcomed_and_answers_a_reset():
    doc = document()
    envs = RemoteVectorEnv(
        num_envs=1,
        bind="tcp://127.0.0.1:*",
        observation_space=OBSERVATION_SPACE,
        action_space=ACTION_SPACE,
        timeout=20,
        connect_timeout=20,
    )
    client = None
    try:
        client = MinimalClient(envs.address, doc)
        poll_until(envs, lambda: client.welcome or client.refusal or client.error, 15, "WELCOME or REFUSE")
        assert client.refusal is None, f"the server refused a client written from the document: {client.refusal}"
        assert client.error is None, repr(client.error)
        assert client.welcome["slots"] == ["l", 0] and client.welcome["protocol"] == doc.version
        obs, infos = envs.reset(seed=123)
        assert obs.dtype == np.float32 and obs.tolist() == [list(np.float32(OBSERVATION))]
        assert infos["seed"].tolist() == [123] and infos["_seed"].tolist() == [True]
        assert client.reset_seeds == [123]
    finally:
        envs.close()
        if client is not None:
            client.join(15)
    assert client.said_bye


# -- the client's choices (§11.1) -------------------------------------------------------------------

CPP_CLIENT = Path(__file__).resolve().parent.parent / "clients" / "cpp"


def _numbers(cell: str) -> tuple[float, ...]:
    """The numbers of a table cell (``"0.5–2 s"`` -> ``(0.5, 2.0)``, ``"120 s"`` -> ``(120.0,)``)."""
    return tuple(float(number) for number in re.findall(r"\d+(?:\.\d+)?", cell))


def _cpp(name: str) -> tuple[float, ...]:
    """The numbers of a C++ client constant (``constexpr ... kName = 2.0;``) or option (``double name = 1.0;``)."""
    sources = (CPP_CLIENT / "src" / "client.cpp").read_text() + (
        CPP_CLIENT / "include" / "gym_remote" / "client.hpp"
    ).read_text()
    value = re.search(rf"(?:constexpr \w+ {name}(?:\[\d+\])?|double {name}) = ([^;]+);", sources).group(1)
    return _numbers(value)


def test_the_table_of_a_clients_choices_is_what_the_python_and_cpp_clients_do():
    from gym_remote import client
    from gym_remote.links.zeromq import HANDSHAKE_FAILURES

    defaults = inspect.signature(client.EnvClient).parameters
    both = {  # each row: (the Python client's value, the C++ client's)
        "first repeat of an unanswered HELLO": ((client.HELLO_REPEAT_SECONDS,), _cpp("kHelloRepeatSeconds")),
        "longest time between repeats (each doubles)": (
            (client.MAX_HELLO_REPEAT_SECONDS,),
            _cpp("kMaxHelloRepeatSeconds"),
        ),
        "connect timeout (no answer to HELLO)": ((defaults["connect_timeout"].default,), _cpp("connect_timeout")),
        "slot timeout (waiting in line)": ((defaults["slot_timeout"].default,), _cpp("slot_timeout")),
        "reconnect timeout (rejoining a lost server)": (
            (defaults["reconnect_timeout"].default,),
            _cpp("reconnect_timeout"),
        ),
        "`HANDSHAKE_FAILED_NO_DETAIL` in a row before stopping": ((HANDSHAKE_FAILURES,), _cpp("kHandshakeFailures")),
        "wait after a ZAP 500": (client.NOT_NOW_WAIT_SECONDS, _cpp("kNotNowWaitSeconds")),
        "`ZMQ_LINGER` of a socket closed to start a new session": (
            (client.NEW_SESSION_LINGER_MS,),
            _cpp("kNewSessionLingerMs"),
        ),
        "`ZMQ_LINGER` of the last socket, closed when the client stops": (
            (client.LAST_LINGER_MS,),
            _cpp("kCloseLingerMs"),
        ),
    }
    rows = table_after(section(DOCUMENT.read_text(), "### 11.1"), "| what |")
    stated = {row["what"]: _numbers(row["gym_remote"]) for row in rows}
    assert set(stated) == set(both), "the table's rows are not the choices this test knows"
    for what, (python, cpp) in both.items():
        assert stated[what] == tuple(map(float, python)) == cpp, (
            f"{what}: document {stated[what]}, Python {python}, C++ {cpp}"
        )
    reconnect = next(row for row in rows if row["what"].startswith("reconnect timeout"))
    assert _numbers(reconnect["bounds"]) == (60.0,) and stated[reconnect["what"]][0] >= 60
