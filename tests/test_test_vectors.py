"""``docs/test-vectors.json``, the protocol's language-neutral test vectors, against the Python codec.

The JSON file is the specification (its format: ``docs/TEST-VECTORS.md``); nothing here regenerates it.
Each vector is one test, named by the vector: decoding gives the described value with its exact type,
canonical vectors are what the encoder writes byte for byte, rejected vectors raise ``ProtocolError``.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.spaces import GraphInstance

from gym_remote import codec, protocol
from gym_remote.errors import ProtocolError

VECTORS_PATH = Path(__file__).resolve().parent.parent / "docs" / "test-vectors.json"
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="ascii"))

# Per section: the keys every vector must have, and those it may have besides.
BODY = ("body", "body_hex")  # exactly one of these
SECTIONS: dict[str, tuple[set[str], set[str]]] = {
    "values": ({"name", "buffers", "value", "canonical"}, {"optional", "note"}),
    "rejected_values": ({"name", "buffers", "why"}, {"note"}),
    "headers": ({"name", "hex", "magic", "version", "kind", "flags", "count", "seq", "canonical"}, {"note"}),
    "rejected_headers": ({"name", "hex", "why"}, {"note"}),
    "index_frames": ({"name", "hex", "count", "hosted", "indexes"}, {"note"}),
    "rejected_index_frames": ({"name", "hex", "count", "hosted", "why"}, {"note"}),
    "result_scalars": ({"name", "hex", "count", "seq", "flags", "rewards", "terminated", "truncated"}, {"note"}),
    "rejected_result_scalars": ({"name", "hex", "count", "why"}, {"note"}),
    "step_dtypes": ({"name", "header", "listing", "leaves", "dtypes", "canonical"}, {"optional", "note"}),
    "rejected_step_dtypes": ({"name", "header", "listing", "leaves", "why"}, {"note"}),
    "spaces": ({"name", "body", "buffers", "space", "canonical"}, {"optional", "note"}),
    "messages": ({"name", "kind", "seq", "count", "flags", "indexes", "value", "frames"}, {"note"}),
}
TOP_LEVEL = {"format", "protocol", "about", *SECTIONS}
HEX = re.compile(r"(?:[0-9a-f]{2})*")
INT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)")
FLOAT_TEXT = re.compile(r"nan|-?inf|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?")


def cases(section: str) -> list:
    """One pytest parameter per vector of ``section``, with the vector's name as its id."""
    vectors = VECTORS.get(section, [])
    return [pytest.param(vector, id=str(vector.get("name", f"{section}[{i}]"))) for i, vector in enumerate(vectors)]


def unhex(text: str) -> bytes:
    assert type(text) is str and HEX.fullmatch(text), f"not lowercase hex: {text!r}"
    return bytes.fromhex(text)


def body_of(vector: dict) -> bytes:
    """The body frame: the UTF-8 of ``body``, or the bytes of ``body_hex``."""
    return vector["body"].encode("utf-8") if "body" in vector else unhex(vector["body_hex"])


def buffers_of(vector: dict) -> list[bytes]:
    return [unhex(buffer) for buffer in vector["buffers"]]


def decode_quietly(body: bytes, buffers: list[bytes]) -> Any:
    """``codec.decode`` with warnings turned into errors: decoding a vector must not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return codec.decode(body, buffers)


# ---------------------------------------------------------------------------------------------------
# descriptions -> Python values


def build(desc: dict) -> Any:
    """The Python value a value description stands for (strict: a malformed description fails)."""
    kind = desc["type"]
    fields = set(desc) - {"type"}

    def expect(*names: str) -> None:
        assert fields == set(names), f"a {kind!r} description has the keys {sorted(names)}, not {sorted(fields)}"

    if kind == "none":
        expect()
        return None
    if kind == "bool":
        expect("value")
        assert type(desc["value"]) is bool
        return desc["value"]
    if kind == "int":
        expect("value")
        assert INT_TEXT.fullmatch(desc["value"]), desc
        return int(desc["value"])
    if kind == "float":
        expect("value")
        assert FLOAT_TEXT.fullmatch(desc["value"]), desc
        return float(desc["value"])
    if kind == "str":
        if "codepoints" in desc:
            expect("codepoints")
            return "".join(chr(point) for point in desc["codepoints"])
        expect("value")
        assert type(desc["value"]) is str
        return desc["value"]
    if kind == "bytes":
        expect("hex")
        return unhex(desc["hex"])
    if kind in ("list", "tuple"):
        expect("items")
        items = [build(item) for item in desc["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        expect("items")
        pairs = [(build(key), build(value)) for key, value in desc["items"]]
        result = dict(pairs)
        assert len(result) == len(pairs), f"repeated keys in {desc}"
        return result
    if kind == "ndarray":
        expect("dtype", "shape", "hex")
        dtype = np.dtype(desc["dtype"])
        return np.frombuffer(unhex(desc["hex"]), dtype=dtype).reshape(desc["shape"]).copy()
    if kind == "object_array":
        expect("shape", "items")
        array = np.empty(len(desc["items"]), dtype=object)
        for index, item in enumerate(desc["items"]):
            array[index] = build(item)
        return array.reshape(desc["shape"])
    if kind == "numpy_scalar":
        dtype = np.dtype(desc["dtype"])
        if "hex" in desc:
            expect("dtype", "hex")
            return np.frombuffer(unhex(desc["hex"]), dtype=dtype)[0]
        expect("dtype", "value")
        value = desc["value"]
        if dtype.kind == "b":
            assert type(value) is bool
            return dtype.type(value)
        if dtype.kind in "iu":
            assert INT_TEXT.fullmatch(value), desc
            return dtype.type(int(value))
        assert dtype.kind == "f" and FLOAT_TEXT.fullmatch(value), desc
        return dtype.type(float(value))
    if kind == "graph":
        expect("nodes", "edges", "edge_links")
        return GraphInstance(build(desc["nodes"]), build(desc["edges"]), build(desc["edge_links"]))
    if kind == "nested":
        expect("container", "levels", "innermost", *(["key"] if desc["container"] == "dict" else []))
        value = build(desc["innermost"])
        for _ in range(desc["levels"]):
            value = [value] if desc["container"] == "list" else {desc["key"]: value}
        return value
    raise AssertionError(f"unknown description type {kind!r}")


def same_float(actual: float, expected: float) -> bool:
    """Equal as IEEE doubles: NaN equals NaN, and the sign of zero counts."""
    if math.isnan(expected):
        return math.isnan(actual)
    return actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected)


def assert_same(actual: Any, expected: Any, where: str = "value") -> None:
    """``actual`` is ``expected`` with exactly the same types all the way down."""
    assert type(actual) is type(expected), f"{where}: {type(actual).__name__} instead of {type(expected).__name__}"
    if isinstance(expected, (np.ndarray, np.generic)):
        assert actual.dtype.str == expected.dtype.str, f"{where}: dtype {actual.dtype.str}, not {expected.dtype.str}"
    if isinstance(expected, np.ndarray):
        assert actual.shape == expected.shape, f"{where}: shape {actual.shape} instead of {expected.shape}"
        if expected.dtype == object:
            for index, (got, want) in enumerate(zip(actual.ravel(), expected.ravel())):
                assert_same(got, want, f"{where}.flat[{index}]")
        else:
            assert actual.tobytes() == expected.tobytes(), f"{where}: {actual!r} instead of {expected!r}"
    elif isinstance(expected, np.generic):
        if expected.dtype.kind in "US":  # the value, not the bytes: a numpy str scalar has no padding
            assert actual == expected, f"{where}: {actual!r} instead of {expected!r}"
        else:
            assert actual.tobytes() == expected.tobytes(), f"{where}: {actual!r} instead of {expected!r}"
    elif isinstance(expected, float):
        assert same_float(actual, expected), f"{where}: {actual!r} instead of {expected!r}"
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{where}: keys {list(actual)!r} instead of {list(expected)!r}"
        for (got_key, got), (want_key, want) in zip(actual.items(), expected.items()):
            assert_same(got_key, want_key, f"{where} (key {want_key!r})")
            assert_same(got, want, f"{where}[{want_key!r}]")
    elif isinstance(expected, (list, tuple)):  # GraphInstance included: a named tuple, compared part by part
        assert len(actual) == len(expected), f"{where}: {len(actual)} items instead of {len(expected)}"
        for index, (got, want) in enumerate(zip(actual, expected)):
            assert_same(got, want, f"{where}[{index}]")
    else:
        assert actual == expected, f"{where}: {actual!r} instead of {expected!r}"


# ---------------------------------------------------------------------------------------------------
# space descriptions -> spaces


def build_space(desc: dict) -> spaces.Space:
    """The (unseeded unless ``rng`` is given) Gymnasium space a neutral space description stands for."""
    name = desc["space"]
    if name == "Box":
        space = spaces.Box(low=build(desc["low"]), high=build(desc["high"]), dtype=np.dtype(desc["dtype"]))
    elif name == "Discrete":
        dtype = np.dtype(desc["dtype"])
        extra = {} if dtype == np.int64 else {"dtype": dtype}
        space = spaces.Discrete(desc["n"], start=desc["start"], **extra)
    elif name == "MultiDiscrete":
        space = spaces.MultiDiscrete(build(desc["nvec"]), dtype=np.dtype(desc["dtype"]), start=build(desc["start"]))
    elif name == "MultiBinary":
        space = spaces.MultiBinary(desc["n"])
    elif name == "Dict":
        space = spaces.Dict([(key, build_space(sub)) for key, sub in desc["spaces"]])
    elif name == "Tuple":
        space = spaces.Tuple([build_space(sub) for sub in desc["spaces"]])
    elif name == "Text":
        space = spaces.Text(desc["max_length"], min_length=desc["min_length"], charset=desc["charset"])
    elif name == "Sequence":
        space = spaces.Sequence(build_space(desc["feature_space"]), stack=desc["stack"])
    elif name == "OneOf":
        space = spaces.OneOf([build_space(sub) for sub in desc["spaces"]])
    else:
        raise AssertionError(f"unknown space {name!r}")
    if "rng" in desc:
        state = build(desc["rng"])
        bit_generator = getattr(np.random, state["bit_generator"])()
        bit_generator.state = state
        space._np_random = np.random.Generator(bit_generator)
    return space


def assert_same_space(actual: spaces.Space, expected: spaces.Space, where: str = "space") -> None:
    """The same space class, parameters, dtypes, key order and generator state."""
    assert type(actual) is type(expected), f"{where}: {type(actual).__name__} instead of {type(expected).__name__}"
    if isinstance(expected, spaces.Box):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, f"{where}: {actual} != {expected}"
        assert_same(actual.low, expected.low, f"{where}.low")
        assert_same(actual.high, expected.high, f"{where}.high")
    elif isinstance(expected, spaces.Discrete):
        assert (actual.n, actual.start, actual.dtype) == (expected.n, expected.start, expected.dtype), where
    elif isinstance(expected, spaces.MultiDiscrete):
        assert actual.dtype == expected.dtype, where
        assert_same(actual.nvec, expected.nvec, f"{where}.nvec")
        assert_same(actual.start, expected.start, f"{where}.start")
    elif isinstance(expected, spaces.MultiBinary):
        assert actual.shape == expected.shape, f"{where}: {actual} != {expected}"
    elif isinstance(expected, spaces.Dict):
        assert list(actual.spaces) == list(expected.spaces), f"{where}: keys {list(actual.spaces)}"
        for key in expected.spaces:
            assert_same_space(actual.spaces[key], expected.spaces[key], f"{where}[{key!r}]")
    elif isinstance(expected, (spaces.Tuple, spaces.OneOf)):
        assert len(actual.spaces) == len(expected.spaces), where
        for index, (got, want) in enumerate(zip(actual.spaces, expected.spaces)):
            assert_same_space(got, want, f"{where}[{index}]")
    elif isinstance(expected, spaces.Sequence):
        assert actual.stack == expected.stack, where
        assert_same_space(actual.feature_space, expected.feature_space, f"{where}.feature_space")
    else:
        assert actual == expected, f"{where}: {actual} != {expected}"
    got_rng, want_rng = actual._np_random, expected._np_random
    assert (got_rng is None) == (want_rng is None), f"{where}: generator {got_rng} instead of {want_rng}"
    if want_rng is not None:
        assert got_rng.bit_generator.state == want_rng.bit_generator.state, f"{where}: generator state differs"


# ---------------------------------------------------------------------------------------------------
# the file itself


def test_the_file_is_well_formed():
    """Known sections, unique names, and every vector has exactly the keys its section requires."""
    assert VECTORS["format"] == 1 and VECTORS["protocol"] == protocol.PROTOCOL_VERSION
    assert set(VECTORS) <= TOP_LEVEL, f"unknown top-level keys {set(VECTORS) - TOP_LEVEL}"
    problems: list[str] = []
    names: list[str] = []
    for section, (required, allowed) in SECTIONS.items():
        vectors = VECTORS.get(section)
        if not isinstance(vectors, list) or not vectors:
            problems.append(f"section {section!r} is missing or empty")
            continue
        for index, vector in enumerate(vectors):
            label = f"{section}[{index}] {vector.get('name')!r}"
            names.append(vector.get("name"))
            keys = set(vector)
            needs_body = section in ("values", "rejected_values")
            body_keys = keys & set(BODY)
            if needs_body and len(body_keys) != 1:
                problems.append(f"{label}: needs exactly one of {BODY}")
            missing = required - keys
            unknown = keys - required - allowed - (set(BODY) if needs_body else set())
            if missing or unknown:
                problems.append(f"{label}: missing {sorted(missing)}, unknown {sorted(unknown)}")
            if type(vector.get("name")) is not str or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.+-]*", vector["name"]):
                problems.append(f"{label}: a name is letters, digits, '.', '+' and '-'")
            if "canonical" in required and type(vector.get("canonical")) is not bool:
                problems.append(f"{label}: canonical must be true or false")
            if vector.get("canonical") is True and "body_hex" in vector:
                problems.append(f"{label}: a canonical body is ASCII text ('body')")
            if "optional" in vector and vector["optional"] is not True:
                problems.append(f"{label}: optional is true or absent")
    repeated = sorted({name for name in names if names.count(name) > 1}, key=str)
    assert not repeated, f"repeated names: {repeated}"
    assert not problems, "\n".join(problems)


def test_every_description_is_well_formed():
    """Every value and space description builds (a malformed one would otherwise fail only its own test)."""
    problems = []
    for section, key in (("values", "value"), ("messages", "value")):
        for vector in VECTORS[section]:
            if vector[key] is None and section == "messages":
                continue
            try:
                build(vector[key])
            except Exception as error:
                problems.append(f"{vector['name']}: {type(error).__name__}: {error}")
    for vector in VECTORS["spaces"]:
        try:
            build_space(vector["space"])
        except Exception as error:
            problems.append(f"{vector['name']}: {type(error).__name__}: {error}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("vector", cases("values"))
def test_value(vector):
    """The body and buffers decode to the described value; a canonical one is what ``encode`` writes."""
    body, buffers = body_of(vector), buffers_of(vector)
    expected = build(vector["value"])
    assert_same(decode_quietly(body, buffers), expected)
    if vector["canonical"]:
        got_body, got_buffers = codec.encode(expected)
        assert got_body == body
        assert [bytes(buffer) for buffer in got_buffers] == buffers


@pytest.mark.parametrize("vector", cases("rejected_values"))
def test_rejected_value(vector, monkeypatch):
    """Decoding raises ``ProtocolError`` (no other exception, no warning) and unpickles nothing."""
    unpickled = []
    monkeypatch.setattr(codec.cloudpickle, "loads", lambda *args, **kwargs: unpickled.append(args))
    with pytest.raises(ProtocolError) as raised:
        decode_quietly(body_of(vector), buffers_of(vector))
    assert raised.type is ProtocolError
    assert not unpickled


# ---------------------------------------------------------------------------------------------------
# frames


@pytest.mark.parametrize("vector", cases("headers"))
def test_header(vector):
    """``parse_header`` reads the fields; a canonical header is what ``pack_header`` writes."""
    frame = unhex(vector["hex"])
    assert frame[:2] == vector["magic"].encode("ascii")
    seq = int(vector["seq"])
    fields = (vector["version"], vector["kind"], vector["flags"], vector["count"], seq)
    assert protocol.parse_header(frame) == protocol.Header(*fields)
    if vector["canonical"]:
        assert vector["version"] == protocol.PROTOCOL_VERSION
        kind = protocol.Kind(vector["kind"])
        assert protocol.pack_header(kind, seq, vector["count"], vector["flags"]) == frame


@pytest.mark.parametrize("vector", cases("rejected_headers"))
def test_rejected_header(vector):
    with pytest.raises(ProtocolError):
        protocol.parse_header(unhex(vector["hex"]))


@pytest.mark.parametrize("vector", cases("index_frames"))
def test_index_frame(vector):
    """``parse_index_frame`` reads the indexes in order; ``index_frame`` writes the same bytes."""
    frame = unhex(vector["hex"])
    assert protocol.parse_index_frame(frame, vector["count"], vector["hosted"]) == vector["indexes"]
    assert protocol.index_frame(vector["indexes"]) == frame


@pytest.mark.parametrize("vector", cases("rejected_index_frames"))
def test_rejected_index_frame(vector):
    with pytest.raises(ProtocolError):
        protocol.parse_index_frame(unhex(vector["hex"]), vector["count"], vector["hosted"])


@pytest.mark.parametrize("vector", cases("result_scalars"))
def test_result_scalars(vector):
    """RESULT's frame 0 parses to the rewards and flags; ``ResultFrame`` writes the same bytes."""
    frame = unhex(vector["hex"])
    count, seq = vector["count"], int(vector["seq"])
    assert protocol.parse_header(frame) == protocol.Header(2, protocol.Kind.RESULT, vector["flags"], count, seq)
    rewards, terminated, truncated = protocol.parse_result_scalars(frame, count)
    expected_rewards = [float(text) for text in vector["rewards"]]
    assert len(rewards) == count and all(map(same_float, rewards.tolist(), expected_rewards)), rewards
    assert terminated.tolist() == vector["terminated"] and truncated.tolist() == vector["truncated"]
    packed = protocol.ResultFrame(count)
    packed.rewards[:] = expected_rewards
    packed.terminated[:] = vector["terminated"]
    packed.truncated[:] = vector["truncated"]
    assert bytes(packed.pack(seq, vector["flags"])) == frame


@pytest.mark.parametrize("vector", cases("rejected_result_scalars"))
def test_rejected_result_scalars(vector):
    with pytest.raises(ProtocolError):
        protocol.parse_result_scalars(unhex(vector["hex"]), vector["count"])


def step_frame(vector: dict) -> bytes:
    return unhex(vector["header"]) + vector["listing"].encode("utf-8")


@pytest.mark.parametrize("vector", cases("step_dtypes"))
def test_step_dtypes(vector):
    """A STEP frame 0 with FLAG_DTYPES lists one dtype per leaf; ``pack_step_header`` writes canonical ones."""
    frame = step_frame(vector)
    header = protocol.parse_header(frame)
    assert header.kind == protocol.Kind.STEP and header.flags & protocol.FLAG_DTYPES
    assert [dtype.str for dtype in protocol.parse_step_dtypes(frame, vector["leaves"])] == vector["dtypes"]
    if vector["canonical"]:
        dtypes = [np.dtype(name) for name in vector["dtypes"]]
        subset = bool(header.flags & protocol.FLAG_SUBSET)
        assert protocol.pack_step_header(header.seq, header.count, dtypes, subset=subset) == frame


@pytest.mark.parametrize("vector", cases("rejected_step_dtypes"))
def test_rejected_step_dtypes(vector):
    with pytest.raises(ProtocolError):
        protocol.parse_step_dtypes(step_frame(vector), vector["leaves"])


# ---------------------------------------------------------------------------------------------------
# spaces and whole messages


@pytest.mark.parametrize("vector", cases("spaces"))
def test_space(vector):
    """The description decodes to the described space; a canonical one is what ``space_to_value`` sends."""
    body, buffers = body_of(vector), buffers_of(vector)
    expected = build_space(vector["space"])
    assert_same_space(codec.space_from_value(decode_quietly(body, buffers)), expected)
    if vector["canonical"]:
        got_body, got_buffers = codec.encode(codec.space_to_value(expected))
        assert got_body == body
        assert [bytes(buffer) for buffer in got_buffers] == buffers


def test_probe_spaces_are_the_probe_vectors():
    """The two probe vectors describe ``gym_remote.probe.probe_spaces()``."""
    probe = pytest.importorskip("gym_remote.probe")
    by_name = {vector["name"]: vector for vector in VECTORS["spaces"]}
    observation_space, action_space = probe.probe_spaces()
    assert_same_space(build_space(by_name["probe-observation-space"]["space"]), observation_space)
    assert_same_space(build_space(by_name["probe-action-space"]["space"]), action_space)


@pytest.mark.parametrize("vector", cases("messages"))
def test_message(vector):
    """``protocol.message`` writes these frames, and they read back as the header, indexes and value."""
    frames = [unhex(frame) for frame in vector["frames"]]
    value = None if vector["value"] is None else build(vector["value"])
    kind, seq, count, indexes = protocol.Kind(vector["kind"]), int(vector["seq"]), vector["count"], vector["indexes"]
    written = protocol.message(kind, value, seq=seq, count=count, indexes=indexes)
    assert [bytes(frame) for frame in written] == frames
    header = protocol.parse_header(frames[0])
    assert header == protocol.Header(2, kind, vector["flags"], count, seq)
    rest = frames[1:]
    if header.flags & protocol.FLAG_SUBSET:
        assert protocol.parse_index_frame(rest[0], count, max(indexes) + 1) == indexes
        rest = rest[1:]
    if header.flags & protocol.FLAG_VALUE:
        assert_same(protocol.read_value(rest), value)
    else:
        assert value is None and not rest
