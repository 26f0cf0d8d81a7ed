"""Unit, property-based and fuzz tests for :mod:`gym_remote.protocol` (headers, RESULT frames, value sections)."""

from __future__ import annotations

import math
import struct
from typing import Any

import cloudpickle
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gym_remote import protocol
from gym_remote.errors import EncodeError, ProtocolError
from gym_remote.protocol import (
    FLAG_CROWDED,
    FLAG_DTYPES,
    FLAG_SUBSET,
    FLAG_VALUE,
    HEADER_SIZE,
    MAGIC,
    PROTOCOL_VERSION,
    Header,
    Kind,
    ResultFrame,
    add_flags,
    format_slots,
    index_frame,
    kind_name,
    message,
    pack_header,
    pack_step_header,
    parse_header,
    parse_index_frame,
    parse_one_result,
    parse_result_scalars,
    read_value,
    value_frames,
)

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

U16 = st.integers(0, 0xFFFF)
U64 = st.integers(0, 2**64 - 1)
KNOWN_KINDS = sorted(int(kind) for kind in Kind)
UNKNOWN_KINDS = [kind for kind in range(256) if kind not in KNOWN_KINDS]


def wire(frames: list[Any]) -> list[bytes]:
    """What the peer receives for each frame (pyzmq copies it with the buffer protocol)."""
    return [zmq.Frame(frame).bytes for frame in frames]


class Foo:
    def __init__(self, x: int = 1) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return type(other) is Foo and other.x == self.x


# ---------------------------------------------------------------------------------------------------
# constants


def test_constants():
    assert HEADER_SIZE == 16
    assert MAGIC == b"GR"
    assert PROTOCOL_VERSION == 2
    assert FLAG_VALUE == 1
    assert protocol.MAX_ENVS_PER_CLIENT == 0xFFFF


def test_kind_values_are_stable():
    assert {kind.name: int(kind) for kind in Kind} == {
        "HELLO": 1,
        "WELCOME": 2,
        "REFUSE": 3,
        "BYE": 4,
        "CLOSE": 5,
        "PING": 6,
        "EVICT": 7,
        "STATUS": 8,
        "STATUS_REPORT": 9,
        "RESET": 10,
        "STEP": 11,
        "CALL": 12,
        "SET_ATTR": 13,
        "RESULT": 20,
        "CALL_RESULT": 21,
        "ERROR": 22,
    }


def test_all_public_names_exist():
    for name in protocol.__all__:
        assert hasattr(protocol, name)


# ---------------------------------------------------------------------------------------------------
# headers


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_pack_parse_header_roundtrip_every_kind(kind):
    for seq, count, flags in [(0, 0, 0), (1, 1, FLAG_VALUE), (2**64 - 1, 0xFFFF, 0xFFFF), (12345, 7, 0)]:
        frame = pack_header(kind, seq, count, flags)
        assert type(frame) is bytes and len(frame) == HEADER_SIZE
        assert frame[:2] == MAGIC and frame[2] == PROTOCOL_VERSION and frame[3] == int(kind)
        header = parse_header(frame)
        assert header == Header(PROTOCOL_VERSION, int(kind), flags, count, seq)
        assert header.kind == kind and header.version == PROTOCOL_VERSION
        assert header.seq == seq and header.count == count and header.flags == flags


def test_pack_header_defaults():
    assert parse_header(pack_header(Kind.HELLO)) == Header(PROTOCOL_VERSION, Kind.HELLO, 0, 0, 0)


def test_header_layout_is_little_endian():
    frame = pack_header(Kind.STEP, seq=0x0102030405060708, count=0x0A0B, flags=0x0C0D)
    assert frame == b"GR" + bytes([2, 11]) + bytes([0x0D, 0x0C, 0x0B, 0x0A]) + bytes([8, 7, 6, 5, 4, 3, 2, 1])


def test_added_flags_keep_the_header_and_what_follows_it():
    frame = pack_step_header(7, 3, [np.dtype(np.float64)], subset=True)
    marked = add_flags(frame, FLAG_CROWDED)
    assert type(marked) is bytes and marked[HEADER_SIZE:] == frame[HEADER_SIZE:]
    assert parse_header(marked) == parse_header(frame)._replace(flags=parse_header(frame).flags | FLAG_CROWDED)
    assert add_flags(marked, FLAG_CROWDED) == marked


@PROPERTY
@given(st.sampled_from(list(Kind)), U64, U16, U16)
def test_property_header_roundtrip(kind, seq, count, flags):
    frame = pack_header(kind, seq, count, flags)
    assert parse_header(frame) == (PROTOCOL_VERSION, int(kind), flags, count, seq)
    assert parse_header(memoryview(frame)) == parse_header(frame)
    assert parse_header(bytearray(frame)) == parse_header(frame)
    # trailing bytes after the 16-byte header (e.g. RESULT scalars) are allowed
    assert parse_header(frame + b"\x00" * 10) == parse_header(frame)


@pytest.mark.parametrize(
    "kind,seq,count,flags",
    [
        (Kind.STEP, -1, 0, 0),
        (Kind.STEP, 2**64, 0, 0),
        (Kind.STEP, 0, 0x10000, 0),
        (Kind.STEP, 0, -1, 0),
        (Kind.STEP, 0, 0, 0x10000),
    ],
)
def test_pack_header_out_of_range_fields_raise(kind, seq, count, flags):
    with pytest.raises((struct.error, ValueError, OverflowError)):
        pack_header(kind, seq, count, flags)


@pytest.mark.parametrize("length", range(HEADER_SIZE))
def test_short_frame_raises(length):
    frame = pack_header(Kind.RESULT, 5)[:length]
    with pytest.raises(ProtocolError):
        parse_header(frame)


@pytest.mark.parametrize("magic", [b"\x00\x00", b"RG", b"gr", b"GX", b"XR", b"\xff\xff"])
def test_wrong_magic_raises(magic):
    frame = magic + pack_header(Kind.HELLO, 1)[2:]
    with pytest.raises(ProtocolError, match="GR"):
        parse_header(frame)


def test_wrong_magic_with_other_version_still_raises():
    frame = b"XX" + bytes([7, 200]) + bytes(12)
    with pytest.raises(ProtocolError):
        parse_header(frame)


@pytest.mark.parametrize("kind", UNKNOWN_KINDS)
def test_unknown_kind_with_current_version_raises(kind):
    frame = MAGIC + bytes([PROTOCOL_VERSION, kind]) + bytes(12)
    with pytest.raises(ProtocolError, match=str(kind)):
        parse_header(frame)


@pytest.mark.parametrize("version", [0, 1, 3, 255])
@pytest.mark.parametrize("kind", [0, 1, 20, 99, 255])
def test_other_version_is_returned_not_raised(version, kind):
    frame = struct.pack("<2sBBHHQ", MAGIC, version, kind, 3, 4, 5)
    assert parse_header(frame) == Header(version, kind, 3, 4, 5)


@FUZZ
@given(st.binary(max_size=40))
def test_fuzz_parse_header_random_bytes(frame):
    try:
        header = parse_header(frame)
    except ProtocolError:
        assert (
            len(frame) < HEADER_SIZE
            or frame[:2] != MAGIC
            or (frame[2] == PROTOCOL_VERSION and frame[3] not in KNOWN_KINDS)
        )
        return
    assert len(frame) >= HEADER_SIZE and frame[:2] == MAGIC
    assert header == struct.unpack_from("<BBHHQ", frame, 2)
    if header.version == PROTOCOL_VERSION:
        assert header.kind in KNOWN_KINDS


@FUZZ
@given(st.integers(0, 255), st.integers(0, 255), st.binary(min_size=12, max_size=12))
def test_fuzz_parse_header_with_magic(version, kind, rest):
    frame = MAGIC + bytes([version, kind]) + rest
    if version == PROTOCOL_VERSION and kind not in KNOWN_KINDS:
        with pytest.raises(ProtocolError):
            parse_header(frame)
    else:
        header = parse_header(frame)
        assert (header.version, header.kind) == (version, kind)


# ---------------------------------------------------------------------------------------------------
# RESULT frames


@pytest.mark.parametrize("count", [0, 1, 3, 64])
def test_result_frame_layout(count):
    result = ResultFrame(count)
    assert len(result.buffer) == HEADER_SIZE + 10 * count
    assert result.rewards.shape == (count,) and result.rewards.dtype == np.dtype("<f8")
    assert result.terminated.shape == (count,) and result.terminated.dtype == np.bool_
    assert result.truncated.shape == (count,) and result.truncated.dtype == np.bool_
    frame = result.pack(9, 0)
    assert parse_header(frame) == Header(PROTOCOL_VERSION, Kind.RESULT, 0, count, 9)


def test_result_frame_roundtrip():
    result = ResultFrame(4)
    result.rewards[:] = [1.5, -0.0, math.inf, math.nan]
    result.terminated[:] = [True, False, False, True]
    result.truncated[:] = [False, False, True, True]
    frame = result.pack(seq=77, flags=FLAG_VALUE)
    header = parse_header(frame)
    assert header == Header(PROTOCOL_VERSION, Kind.RESULT, FLAG_VALUE, 4, 77)
    rewards, terminated, truncated = parse_result_scalars(bytes(frame), header.count)
    assert rewards.tobytes() == np.array([1.5, -0.0, math.inf, math.nan], "<f8").tobytes()
    assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_
    assert terminated.tolist() == [True, False, False, True]
    assert truncated.tolist() == [False, False, True, True]


def test_result_frame_is_refilled_in_place():
    result = ResultFrame(2)
    first = result.pack(1, 0)
    result.rewards[:] = [3.0, 4.0]
    result.terminated[1] = True
    second = result.pack(2, 0)
    assert second is first is result.buffer
    header = parse_header(second)
    assert header.seq == 2
    rewards, terminated, truncated = parse_result_scalars(bytes(second), 2)
    assert (
        rewards.tolist() == [3.0, 4.0] and terminated.tolist() == [False, True] and truncated.tolist() == [False, False]
    )


def test_result_frame_over_the_wire():
    result = ResultFrame(3)
    result.rewards[:] = [0.1, 0.2, 0.3]
    result.truncated[2] = True
    frame = wire([result.pack(5, 0)])[0]
    rewards, terminated, truncated = parse_result_scalars(frame, parse_header(frame).count)
    assert rewards.tolist() == [0.1, 0.2, 0.3]
    assert terminated.tolist() == [False] * 3 and truncated.tolist() == [False, False, True]


@PROPERTY
@given(st.lists(st.tuples(st.floats(), st.booleans(), st.booleans()), max_size=40), U64, U16)
def test_property_result_frame_roundtrip(rows, seq, flags):
    count = len(rows)
    result = ResultFrame(count)
    for index, (reward, term, trunc) in enumerate(rows):
        result.rewards[index] = reward
        result.terminated[index] = term
        result.truncated[index] = trunc
    frame = bytes(result.pack(seq, flags))
    assert parse_header(frame) == Header(PROTOCOL_VERSION, Kind.RESULT, flags, count, seq)
    rewards, terminated, truncated = parse_result_scalars(frame, count)
    assert rewards.tobytes() == np.array([row[0] for row in rows], "<f8").tobytes()
    assert terminated.tolist() == [row[1] for row in rows]
    assert truncated.tolist() == [row[2] for row in rows]


@PROPERTY
@given(st.floats(), st.booleans(), st.booleans(), U64)
def test_property_one_env_result_parses_as_the_arrays_do(reward, terminated, truncated, seq):
    result = ResultFrame(1)
    result.rewards[0], result.terminated[0], result.truncated[0] = reward, terminated, truncated
    for frame in (bytes(result.pack(seq, 0)), memoryview(bytes(result.pack(seq, 0)))):
        one = parse_one_result(frame)
        rewards, terms, truncs = parse_result_scalars(frame, 1)
        assert type(one[0]) is float and type(one[1]) is bool and type(one[2]) is bool
        assert np.array([one[0]], "<f8").tobytes() == rewards.tobytes()
        assert (one[1], one[2]) == (terms[0], truncs[0]) == (terminated, truncated)


@pytest.mark.parametrize(
    "change, error",
    [
        (lambda frame: frame + b"\x00", "header frame of 27 bytes, expected 26 for 1 envs"),
        (lambda frame: frame[:-1], "header frame of 25 bytes, expected 26 for 1 envs"),
        (lambda frame: frame[:-2] + b"\x02\x00", "terminated/truncated bytes must be 0 or 1"),
        (lambda frame: frame[:-1] + b"\xff", "terminated/truncated bytes must be 0 or 1"),
    ],
)
def test_one_env_result_refuses_what_the_arrays_refuse(change, error):
    frame = change(bytes(ResultFrame(1).pack(3, 0)))
    for parse in (parse_one_result, lambda frame: parse_result_scalars(frame, 1)):
        with pytest.raises(ProtocolError, match=error):
            parse(frame)


@PROPERTY
@given(
    st.lists(st.tuples(st.floats(allow_nan=False), st.booleans(), st.booleans()), min_size=1, max_size=30),
    st.data(),
    U64,
)
def test_property_result_frame_subset_holds_the_selected_envs_in_order(rows, data, seq):
    count = len(rows)
    result = ResultFrame(count)
    for index, (reward, term, trunc) in enumerate(rows):
        result.rewards[index], result.terminated[index], result.truncated[index] = reward, term, trunc
    indexes = data.draw(st.permutations(range(count)).flatmap(lambda p: st.just(p[: data.draw(st.integers(1, count))])))
    frame = result.pack_subset(seq, FLAG_VALUE, np.asarray(indexes, dtype=np.intp))
    assert parse_header(frame) == Header(PROTOCOL_VERSION, Kind.RESULT, FLAG_VALUE, len(indexes), seq)
    rewards, terminated, truncated = parse_result_scalars(frame, len(indexes))
    assert rewards.tolist() == [rows[index][0] for index in indexes]
    assert terminated.tolist() == [rows[index][1] for index in indexes]
    assert truncated.tolist() == [rows[index][2] for index in indexes]
    assert result.rewards.tolist() == [row[0] for row in rows]  # the full frame is left as it was


@PROPERTY
@given(st.integers(1, 3000).flatmap(lambda k: st.tuples(st.just(k), st.permutations(range(k)))), st.data())
def test_property_index_frame_roundtrip(hosted_and_order, data):
    hosted, order = hosted_and_order
    indexes = order[: data.draw(st.integers(1, min(hosted, 50)))]
    frame = index_frame(indexes)
    assert len(frame) == 2 * len(indexes)
    assert parse_index_frame(frame, len(indexes), hosted) == list(indexes)


@pytest.mark.parametrize(
    "frame, count, hosted, problem",
    [
        (index_frame([0, 1]), 3, 4, "bytes"),  # too short for count
        (index_frame([0, 1, 2]) + b"\x00", 3, 4, "bytes"),  # odd length
        (index_frame([1, 1]), 2, 4, "distinct"),  # repeated
        (index_frame([0, 4]), 2, 4, "below 4"),  # out of range
        (index_frame([65535]), 1, 3, "below 3"),
        (b"", 1, 1, "bytes"),
        (b"", 0, 3, "at least one env"),
    ],
)
def test_parse_index_frame_rejects_malformed_frames(frame, count, hosted, problem):
    with pytest.raises(ProtocolError, match=problem):
        parse_index_frame(frame, count, hosted)


def test_message_with_indexes_carries_the_index_frame_before_the_value():
    frames = message(Kind.RESET, {"seeds": [7, None], "options": None}, seq=5, count=2, indexes=[3, 0])
    header = parse_header(frames[0])
    assert header == Header(PROTOCOL_VERSION, Kind.RESET, FLAG_VALUE | FLAG_SUBSET, 2, 5)
    assert parse_index_frame(frames[1], 2, 4) == [3, 0]
    assert read_value(wire(frames[2:])) == {"seeds": [7, None], "options": None}
    bare = message(Kind.STEP, seq=1, count=1, indexes=[2])
    assert parse_header(bare[0]).flags == FLAG_SUBSET and parse_index_frame(bare[1], 1, 3) == [2]


def test_step_header_subset_flag_combines_with_dtypes():
    frame = pack_step_header(4, 2, [np.dtype("<f8")], subset=True)
    header = parse_header(frame)
    assert header.flags == FLAG_SUBSET | FLAG_DTYPES and header.count == 2
    assert protocol.parse_step_dtypes(frame, 1) == [np.dtype("<f8")]
    assert parse_header(pack_step_header(4, 2)).flags == 0


@pytest.mark.parametrize("count", [0, 1, 5])
@pytest.mark.parametrize("delta", [-10, -1, 1, 10])
def test_parse_result_scalars_wrong_length_raises(count, delta):
    frame = bytes(ResultFrame(count).pack(0, 0))
    frame = frame[: len(frame) + delta] if delta < 0 else frame + b"\x00" * delta
    with pytest.raises(ProtocolError):
        parse_result_scalars(frame, count)


def test_parse_result_scalars_count_mismatch_raises():
    frame = bytes(ResultFrame(3).pack(0, 0))
    for count in (0, 2, 4, 100):
        with pytest.raises(ProtocolError):
            parse_result_scalars(frame, count)


@pytest.mark.parametrize("value", [2, 3, 0x80, 0xFF])
@pytest.mark.parametrize("region", ["terminated", "truncated"])
@pytest.mark.parametrize("position", [0, 2])
def test_parse_result_scalars_bad_flag_bytes_raise(value, region, position):
    count = 3
    frame = bytearray(ResultFrame(count).pack(0, 0))
    offset = HEADER_SIZE + (8 if region == "terminated" else 9) * count + position
    frame[offset] = value
    with pytest.raises(ProtocolError):
        parse_result_scalars(bytes(frame), count)


@FUZZ
@given(
    st.integers(0, 8).flatmap(
        lambda n: st.tuples(st.just(n), st.binary(min_size=HEADER_SIZE + 10 * n, max_size=HEADER_SIZE + 10 * n))
    )
)
def test_fuzz_parse_result_scalars(case):
    count, frame = case
    flag_bytes = frame[HEADER_SIZE + 8 * count :]
    try:
        rewards, terminated, truncated = parse_result_scalars(frame, count)
    except ProtocolError:
        assert any(byte > 1 for byte in flag_bytes)
        return
    assert all(byte <= 1 for byte in flag_bytes)
    assert rewards.shape == terminated.shape == truncated.shape == (count,)
    assert rewards.tobytes() == frame[HEADER_SIZE : HEADER_SIZE + 8 * count]
    assert terminated.tolist() == [bool(b) for b in flag_bytes[:count]]
    assert truncated.tolist() == [bool(b) for b in flag_bytes[count:]]


@FUZZ
@given(st.binary(max_size=120), st.integers(0, 12))
def test_fuzz_parse_result_scalars_any_length(frame, count):
    try:
        parse_result_scalars(frame, count)
    except ProtocolError:
        pass


# ---------------------------------------------------------------------------------------------------
# value sections


VALUES = [
    None,
    0,
    "text ✓",
    [1, 2.5, None, "x", b"raw"],
    {"obs": np.arange(6, dtype=np.float32).reshape(2, 3), "info": {"k": np.int64(3)}, 1: (True, -0.0)},
    (np.zeros((2, 0)), np.array(["a", "bc"]), np.bool_(False)),
    {"nan": math.nan, "inf": [math.inf, -math.inf]},
]


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    else:
        assert a == b


@pytest.mark.parametrize("value", VALUES, ids=lambda v: repr(v)[:30])
def test_value_frames_read_value_roundtrip(value):
    frames = value_frames(value)
    assert type(frames[0]) is bytes
    _same(value, read_value(wire(frames)))


def test_value_frames_layout():
    frames = value_frames({"a": b"xy", "b": np.arange(3, dtype=np.uint8)})
    assert len(frames) == 3
    assert wire(frames[1:]) == [b"xy", b"\x00\x01\x02"]


def test_read_value_empty_raises():
    with pytest.raises(ProtocolError):
        read_value([])
    with pytest.raises(ProtocolError):
        read_value(())


@pytest.mark.parametrize(
    "frames",
    [[b""], [b"["], [b'["a","<f4",[2],0]'], [b'["a","<f4",[2],0]', b"\x00"], [b'["b",1]', b"x"], [b"NaN"], [b'["x"]']],
)
def test_read_value_malformed_raises(frames):
    with pytest.raises(ProtocolError):
        read_value(frames)


def test_value_frames_pickle():
    frames = value_frames({"foo": Foo(2)}, allow_pickle=True)
    with pytest.raises(ProtocolError):
        read_value(wire(frames))
    assert read_value(wire(frames), allow_pickle=True) == {"foo": Foo(2)}
    with pytest.raises(EncodeError, match=r"the infos\['foo'\]"):
        value_frames({"foo": Foo(2)}, what="the infos")


def test_read_value_refuses_malicious_pickle(tmp_path):
    marker = tmp_path / "marker"

    class Evil:
        def __reduce__(self):
            return (marker.write_text, ("pwned",))

    with pytest.raises(ProtocolError):
        read_value([b'{"x":["p",0]}', cloudpickle.dumps(Evil())])
    assert not marker.exists()


@PROPERTY
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), st.binary(max_size=8)),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.lists(children, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=4), children, max_size=4),
            st.dictionaries(st.integers(), children, max_size=4),
        ),
        max_leaves=15,
    )
)
def test_property_value_section_roundtrip(value):
    _same(value, read_value(wire(value_frames(value))))


@FUZZ
@given(st.lists(st.binary(max_size=60), max_size=4))
def test_fuzz_read_value(frames):
    try:
        read_value(frames)
    except ProtocolError:
        pass


# ---------------------------------------------------------------------------------------------------
# whole messages


def test_message_without_value():
    frames = message(Kind.RESET, seq=3, count=2)
    assert len(frames) == 1
    assert parse_header(frames[0]) == Header(PROTOCOL_VERSION, Kind.RESET, 0, 2, 3)


def test_message_with_value():
    value = {"seeds": [1, None], "options": {"x": np.float32(0.5)}}
    frames = message(Kind.CALL, value, seq=9, count=4)
    header = parse_header(frames[0])
    assert header == Header(PROTOCOL_VERSION, Kind.CALL, FLAG_VALUE, 4, 9)
    assert header.flags & FLAG_VALUE
    _same(value, read_value(wire(frames[1:])))


def test_message_with_unencodable_value_names_it():
    with pytest.raises(EncodeError, match=r"call arguments\[0\]"):
        message(Kind.CALL, [Foo()], what="call arguments")


def test_message_trusted_mode():
    frames = message(Kind.CALL_RESULT, Foo(5), allow_pickle=True)
    assert read_value(wire(frames[1:]), allow_pickle=True) == Foo(5)


# ---------------------------------------------------------------------------------------------------
# names and slots


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_kind_name_known(kind):
    assert kind_name(kind) == kind.name
    assert kind_name(int(kind)) == kind.name


@pytest.mark.parametrize("kind", [0, 14, 19, 23, 99, 255, -1, 1000])
def test_kind_name_unknown(kind):
    assert kind_name(kind) == f"kind {kind}"


@pytest.mark.parametrize(
    "slots,text",
    [
        ([], "none"),
        ((), "none"),
        ([0], "0"),
        ([7], "7"),
        ([0, 1], "0-1"),
        ([0, 1, 2, 5], "0-2,5"),
        ([1, 3, 5], "1,3,5"),
        ([3, 4, 5, 6], "3-6"),
        ([0, 2, 3, 4, 7, 8], "0,2-4,7-8"),
        ([0, 1, 2, 3, 10, 11, 12, 20], "0-3,10-12,20"),
        (range(10), "0-9"),
        ((4, 5), "4-5"),
        (np.array([0, 1, 2, 5]), "0-2,5"),
        (np.array([], dtype=np.int64), "none"),
        ([65534, 65535], "65534-65535"),
    ],
)
def test_format_slots(slots, text):
    assert format_slots(slots) == text


def _parse_slots(text: str) -> list[int]:
    if text == "none":
        return []
    result = []
    for part in text.split(","):
        if "-" in part:
            first, last = part.split("-")
            result.extend(range(int(first), int(last) + 1))
        else:
            result.append(int(part))
    return result


@PROPERTY
@given(st.sets(st.integers(0, 300), max_size=40))
def test_property_format_slots_is_compact_and_lossless(slots):
    slots = sorted(slots)
    text = format_slots(slots)
    assert _parse_slots(text) == slots
    # maximal runs: no two adjacent parts could be merged
    if slots:
        parts = text.split(",")
        ends = [int(part.split("-")[-1]) for part in parts]
        starts = [int(part.split("-")[0]) for part in parts]
        assert all(starts[i + 1] > ends[i] + 1 for i in range(len(parts) - 1))
        assert all("-" not in part or int(part.split("-")[0]) < int(part.split("-")[1]) for part in parts)
