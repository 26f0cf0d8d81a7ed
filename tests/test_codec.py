"""Unit, property-based and fuzz tests for :mod:`gym_remote.codec`.

Two ways of carrying the buffers from :func:`codec.encode` to :func:`codec.decode` are exercised:

* ``wire``: every buffer goes through ``zmq.Frame(...).bytes``, exactly what a peer receives from
  ``recv_multipart`` (no socket is opened: a ``zmq.Frame`` is a plain in-memory object);
* in process: the very objects returned by ``encode`` are handed to ``decode`` (``decode`` is
  documented as the inverse of ``encode``).
"""

from __future__ import annotations

import collections
import copy
import gc
import json
import math
import pathlib
import string
from typing import Any, NamedTuple

import cloudpickle
import numpy as np
import pytest
import zmq
from gymnasium import spaces
from gymnasium.spaces import GraphInstance
from gymnasium.vector.utils import create_empty_array
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gym_remote import codec
from gym_remote.codec import (
    MAX_DEPTH,
    array_leaf_spaces,
    batch_leaves,
    check_dtype,
    decode,
    encode,
    space_from_value,
    space_to_value,
)
from gym_remote.errors import EncodeError, GymRemoteError, ProtocolError
from tests.helpers import garbage_collection_paused

# ---------------------------------------------------------------------------------------------------
# helpers

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
PROPERTY = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def wire(buffers: list[Any]) -> list[bytes]:
    """What the peer receives for each buffer frame (pyzmq copies it with the buffer protocol)."""
    return [zmq.Frame(buffer).bytes for buffer in buffers]


def _no_constant(name: str) -> Any:
    raise AssertionError(f"encode produced a bare {name} constant")


def check_encoding(body: bytes, buffers: list[Any]) -> None:
    """Invariants of every encoding: UTF-8 JSON without NaN/Infinity constants, buffer-like buffers."""
    assert type(body) is bytes
    json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    for buffer in buffers:
        assert isinstance(buffer, (bytes, np.ndarray))


def roundtrip(value: Any, *, allow_pickle: bool = False) -> Any:
    """encode -> frames as received from ZeroMQ -> decode."""
    body, buffers = encode(value, allow_pickle=allow_pickle)
    check_encoding(body, buffers)
    return decode(body, wire(buffers), allow_pickle=allow_pickle)


def roundtrip_in_process(value: Any, *, allow_pickle: bool = False) -> Any:
    """decode(*encode(value)) with encode's own buffer objects."""
    body, buffers = encode(value, allow_pickle=allow_pickle)
    return decode(body, buffers, allow_pickle=allow_pickle)


def _same_float(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    """Strict recursive equality: same types everywhere, same dtypes/shapes, NaN equals NaN, -0.0 != 0.0.

    Decoded arrays must be writable.
    """
    assert type(actual) is type(expected), f"{path}: type {type(actual)!r} != {type(expected)!r}"
    if isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.dtype.str == expected.dtype.str, f"{path}: byte order {actual.dtype.str} != {expected.dtype.str}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        assert actual.flags.writeable, f"{path}: decoded array is read-only"
        if expected.dtype == object:
            for index, (item_e, item_a) in enumerate(zip(expected.ravel(), actual.ravel(), strict=True)):
                assert_same(item_e, item_a, f"{path}.flat[{index}]")
        else:
            assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes(), (
                f"{path}: array contents differ: {actual!r} != {expected!r}"
            )
        return
    if isinstance(expected, np.generic):
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        kind = expected.dtype.kind
        if kind == "f":
            assert (np.isnan(expected) and np.isnan(actual)) or (
                expected == actual and np.signbit(expected) == np.signbit(actual)
            ), f"{path}: {actual!r} != {expected!r}"
        elif kind == "c":
            assert _same_float(float(expected.real), float(actual.real)), f"{path}: {actual!r} != {expected!r}"
            assert _same_float(float(expected.imag), float(actual.imag)), f"{path}: {actual!r} != {expected!r}"
        elif kind in "mM":
            assert (np.isnat(expected) and np.isnat(actual)) or expected == actual, (
                f"{path}: {actual!r} != {expected!r}"
            )
        else:
            assert expected == actual, f"{path}: {actual!r} != {expected!r}"
        return
    if type(expected) is float:
        assert _same_float(expected, actual), f"{path}: {actual!r} != {expected!r}"
        return
    if isinstance(expected, dict):
        assert len(actual) == len(expected), f"{path}: {len(actual)} keys != {len(expected)}"
        for index, ((key_e, item_e), (key_a, item_a)) in enumerate(zip(expected.items(), actual.items())):
            assert_same(key_e, key_a, f"{path} (key #{index})")
            assert_same(item_e, item_a, f"{path}[{key_e!r}]")
        return
    if isinstance(expected, (list, tuple)):  # includes GraphInstance and named tuples
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for index, (item_e, item_a) in enumerate(zip(expected, actual)):
            assert_same(item_e, item_a, f"{path}[{index}]")
        return
    assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def assert_roundtrip(value: Any, *, allow_pickle: bool = False) -> Any:
    decoded = roundtrip(value, allow_pickle=allow_pickle)
    assert_same(value, decoded)
    return decoded


# ---------------------------------------------------------------------------------------------------
# module-level helper types (importable, so cloudpickle pickles them by reference)


class Foo:
    def __init__(self, x: int = 1) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return type(other) is Foo and other.x == self.x

    def __hash__(self) -> int:
        return hash(self.x)


class Point(NamedTuple):
    x: int
    y: Any


class MyList(list):
    pass


class Marker:
    """Unpickling this runs code: it writes ``path``."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.write_text, (pathlib.Path(self.path), "pwned"))


def malicious_pickle(marker: pathlib.Path) -> bytes:
    return cloudpickle.dumps(Marker(marker))


# ---------------------------------------------------------------------------------------------------
# 1. exact round trips of plain values

PLAIN_VALUES = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2**31,
    2**63 - 1,
    2**63,
    2**64,
    -(2**64) - 1,
    2**200,
    -(10**100),
    10**4000,
    0.0,
    -0.0,
    1.5,
    -2.25e-300,
    5e-324,
    1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "hello",
    "héllo wörld ✓ 日本語 🐍",
    "\x00\n\t\"'\\",
    "nan",
    "inf",
    b"",
    b"\x00\xff bytes",
    bytes(range(256)),
    [],
    (),
    {},
    [1, "a", None],
    (1,),
    (1, 2.5, "x"),
    {"a": 1, "b": [2, 3]},
    {"": 0, "key with spaces": 1, "ü": 2},
    {1: "a", 2: "b"},
    {(1, 2): "tuple key", (): "empty"},
    {1: "int", "s": "str", (1, "x"): "tuple", None: "none", 2.5: "float", b"k": "bytes"},
    {-0.0: "neg zero"},
    {math.nan: "nan key"},
    {"z": 1, "a": 2, "m": 3},  # insertion order, not sorted
    {3: 1, 1: 2, 2: 3},
    [[[]]],
    ((), [()], {"t": ((1,),)}),
    {"nested": {"deeper": {"deepest": [1, (2, {"x": None})]}}},
    [{1: [2, (3, {4: 5})]}],
]


@pytest.mark.parametrize("value", PLAIN_VALUES, ids=lambda v: repr(v)[:40])
def test_plain_value_roundtrip(value):
    assert_roundtrip(value)


@pytest.mark.parametrize("value", PLAIN_VALUES, ids=lambda v: repr(v)[:40])
def test_plain_value_roundtrip_in_process(value):
    assert_same(value, roundtrip_in_process(value))


def test_bool_is_not_int_and_int_is_not_float():
    decoded = roundtrip([True, 1, 1.0, 0, False, 0.0])
    assert [type(item) for item in decoded] == [bool, int, float, int, bool, float]


def test_negative_zero_keeps_its_sign():
    assert math.copysign(1.0, roundtrip(-0.0)) == -1.0
    assert math.copysign(1.0, roundtrip(0.0)) == 1.0


def test_non_finite_floats_use_the_f_tag():
    body, _ = encode([math.nan, math.inf, -math.inf])
    assert json.loads(body) == ["l", ["f", "nan"], ["f", "inf"], ["f", "-inf"]]


def test_strings_travel_inline_in_the_json_body():
    body, buffers = encode("日本")
    assert buffers == []
    assert json.loads(body.decode("utf-8")) == "日本"
    assert decode('"日本"'.encode(), []) == "日本"  # raw UTF-8 from other encoders is fine too


def test_bytes_travel_as_buffers_not_in_json():
    body, buffers = encode({"blob": b"\x00\x01secret"})
    assert b"secret" not in body
    assert wire(buffers) == [b"\x00\x01secret"]


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_bytes_likes_travel_as_bytes(kind):
    # PROTOCOL.md 3.2: bytes, bytearray and memoryview all travel as bytes.
    decoded = roundtrip(kind(b"\x00abc"))
    assert type(decoded) is bytes and decoded == b"\x00abc"


@pytest.mark.parametrize("value", [10**5000, -(10**5000) - 7, 2**20000], ids=["1e5000", "-1e5000", "2**20000"])
def test_int_beyond_str_digit_limit_roundtrips(value):
    # PROTOCOL.md 3.1: an integer number is a Python int "(arbitrary size)". These have more digits
    # than CPython's default int<->str conversion limit (4300).
    decoded = roundtrip(value)
    assert decoded == value and type(decoded) is int


def test_big_ints_use_the_hex_tag_and_small_ones_plain_json():
    assert json.loads(encode(2**63 - 1)[0]) == 2**63 - 1
    assert json.loads(encode(-(2**63))[0]) == -(2**63)
    assert json.loads(encode(2**63)[0]) == ["i", "8000000000000000"]
    assert json.loads(encode(-(2**64))[0]) == ["i", "-10000000000000000"]


def test_decode_refuses_a_plain_json_int_beyond_the_digit_limit():
    # PROTOCOL.md 3.1: big ints travel with the 'i' tag; a 5000-digit JSON number is refused, not parsed.
    with pytest.raises(ProtocolError):
        decode(b"1" + b"0" * 5000, [])


@pytest.mark.parametrize("bad", [["i", "XYZ"], ["i", 12], ["i", "0x10"], ["i", ""]])
def test_malformed_big_int_tag_is_protocol_error(bad):
    with pytest.raises(ProtocolError):
        decode(json.dumps(bad).encode(), [])


def test_lone_surrogate_string_roundtrips():
    # Python strings may hold lone surrogates; they travel as JSON \u escapes.
    value = {"text": "bad \ud800 surrogate"}
    assert roundtrip(value) == value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 2000])
def test_value_nested_beyond_limit_raises_encode_error(depth):
    # PROTOCOL.md 10: values are nested at most 64 deep; a deeper value cannot travel, so the sender
    # must raise EncodeError (not emit a body every receiver refuses, nor a RecursionError).
    value: Any = []
    for _ in range(depth):
        value = [value]
    with pytest.raises(EncodeError):
        encode(value)


def test_nesting_up_to_max_depth_decodes():
    value: Any = 1
    for _ in range(MAX_DEPTH):
        value = [value]
    assert_roundtrip(value)


def test_nesting_beyond_max_depth_is_refused_on_decode():
    body = ('["l",' * (MAX_DEPTH + 1) + "1" + "]" * (MAX_DEPTH + 1)).encode()
    with pytest.raises(ProtocolError):
        decode(body, [])
    body = ('["l",' * MAX_DEPTH + "1" + "]" * MAX_DEPTH).encode()
    value = decode(body, [])
    for _ in range(MAX_DEPTH):
        value = value[0]
    assert value == 1


# ---------------------------------------------------------------------------------------------------
# numpy arrays

ALL_ARRAY_DTYPES = [
    "?",
    "i1",
    "i2",
    "i4",
    "i8",
    "u1",
    "u2",
    "u4",
    "u8",
    "f2",
    "f4",
    "f8",
    "c8",
    "c16",
    ">i2",
    ">i4",
    ">i8",
    ">u2",
    ">u4",
    ">u8",
    ">f2",
    ">f4",
    ">f8",
    ">c8",
    ">c16",
    "M8[D]",
    "M8[s]",
    "M8[ns]",
    ">M8[ms]",
    "m8[s]",
    "m8[us]",
    ">m8[h]",
    "U1",
    "U7",
    ">U3",
    "S1",
    "S5",
]


def sample_array(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    rng = np.random.default_rng(size + dtype.itemsize)
    if dtype.kind == "b":
        flat = rng.integers(0, 2, size).astype(bool)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        flat = np.array([info.min, info.max, 0, 1][:size] + list(rng.integers(0, 100, max(0, size - 4))), dtype=dtype)
    elif dtype.kind == "f":
        flat = np.array(
            [np.nan, np.inf, -np.inf, -0.0][:size] + list(rng.standard_normal(max(0, size - 4))), dtype=dtype
        )
    elif dtype.kind == "c":
        flat = (rng.standard_normal(size) + 1j * rng.standard_normal(size)).astype(dtype)
        if size:
            flat[0] = complex(np.nan, -0.0)
    elif dtype.kind in "mM":
        flat = rng.integers(-1000, 1000, size).astype(dtype.newbyteorder("=")).astype(dtype)
        if size:
            flat[0] = np.datetime64("NaT") if dtype.kind == "M" else np.timedelta64("NaT")
    elif dtype.kind == "U":
        pool = ["", "a", "é", "日本語", "🐍x", "abcdefg"]
        flat = np.array([pool[i % len(pool)][: dtype.itemsize // 4] for i in range(size)], dtype=dtype)
    else:
        pool = [b"", b"a", b"\x00\xff", b"abcde"]
        flat = np.array([pool[i % len(pool)][: dtype.itemsize] for i in range(size)], dtype=dtype)
    return np.asarray(flat, dtype=dtype).reshape(shape)


@pytest.mark.parametrize("shape", [(5,), (2, 3), (), (0,), (3, 0), (0, 0, 2), (1, 1, 1, 1)], ids=str)
@pytest.mark.parametrize("dtype", ALL_ARRAY_DTYPES)
def test_array_roundtrip(dtype, shape):
    array = sample_array(dtype, shape)
    decoded = assert_roundtrip(array)
    assert decoded.flags.c_contiguous


@pytest.mark.parametrize("shape", [(5,), (2, 3), (), (0,), (3, 0)], ids=str)
@pytest.mark.parametrize("dtype", ["?", "i1", ">i8", "f4", ">c16", "U3", "S2", "M8[s]", ">m8[ms]"])
def test_array_roundtrip_in_process(dtype, shape):
    """decode must accept the buffers that encode itself returned (it is documented as its inverse)."""
    array = sample_array(dtype, shape)
    assert_same(array, roundtrip_in_process(array))


def test_array_dtype_and_byte_order_preserved_in_body():
    body, _ = encode(np.zeros((2, 3), dtype=">f4"))
    assert json.loads(body) == ["a", ">f4", [2, 3], 0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(20, dtype=np.int32)[::3],
        lambda: np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::2],
        lambda: np.arange(12, dtype=np.int16).reshape(3, 4).T,
        lambda: np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        lambda: np.arange(10, dtype=np.uint8)[::-1],
        lambda: np.broadcast_to(np.arange(3, dtype=np.int64), (4, 3)),
        lambda: np.array(["ab", "cde", "f", "gh"]).reshape(2, 2).T,
        lambda: np.arange(8, dtype=">i4").reshape(2, 4)[:, ::2],
    ],
    ids=["step", "2d-slice", "transpose", "fortran", "reversed", "broadcast", "unicode-T", "bigendian-slice"],
)
def test_non_contiguous_and_fortran_arrays(make):
    array = make()
    decoded = assert_roundtrip(array)
    np.testing.assert_array_equal(decoded, array)
    assert decoded.flags.c_contiguous and decoded.flags.writeable


def test_read_only_input_array_decodes_writable():
    array = np.arange(5.0)
    array.flags.writeable = False
    decoded = roundtrip(array)
    assert decoded.flags.writeable
    decoded[0] = 42.0
    assert array[0] == 0.0


def test_decoded_array_does_not_alias_the_received_frame():
    body, buffers = encode(np.arange(4, dtype=np.uint8))
    frame = bytearray(wire(buffers)[0])
    decoded = decode(body, [frame])
    frame[0] = 99
    assert decoded[0] == 0
    decoded[1] = 7
    assert frame[1] == 1


class MyArray(np.ndarray):
    pass


def test_ndarray_subclass_travels_as_ndarray():
    array = np.arange(4.0).reshape(2, 2).view(MyArray)
    decoded = roundtrip(array)
    assert type(decoded) is np.ndarray
    np.testing.assert_array_equal(decoded, np.asarray(array))


# object arrays


def object_array(items: list[Any], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item
    return array.reshape(shape)


OBJECT_ARRAYS = [
    object_array([1, "a", None, 2.5], (4,)),
    object_array([1, "a", None, 2.5, (1, 2), [3]], (2, 3)),
    object_array([{"k": np.float32(1.5)}], ()),
    object_array([], (0,)),
    object_array([], (2, 0)),
    object_array([np.zeros(2), np.arange(3, dtype=np.int8), None], (3,)),
    object_array([b"raw", math.nan, -0.0, 10**30], (2, 2)),
    object_array([object_array([1, 2], (2,)), object_array(["x"], (1,))], (2,)),
    object_array([GraphInstance(np.zeros((2, 1)), None, np.zeros((0, 2), dtype=np.int64))], (1,)),
]


@pytest.mark.parametrize("array", OBJECT_ARRAYS, ids=lambda a: f"{a.shape}:{list(a.ravel())!r}"[:50])
def test_object_array_roundtrip(array):
    assert_roundtrip(array)


def test_fortran_object_array_keeps_element_order():
    array = np.asfortranarray(object_array([1, "b", 3.0, None, (5,), [6]], (2, 3)))
    decoded = assert_roundtrip(array)
    assert decoded[1, 2] == [6] and decoded[0, 1] == "b"


# numpy scalars


def _float_scalars(kind):
    return [
        kind(0.0),
        kind(-0.0),
        kind(1.5),
        kind(math.nan),
        kind(math.inf),
        kind(-math.inf),
        kind(np.finfo(kind).max),
        kind(np.finfo(kind).min),
        kind(np.finfo(kind).tiny),
    ]


NUMPY_SCALARS = [
    np.bool_(True),
    np.bool_(False),
    *[
        kind(value)
        for kind in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
        for value in (np.iinfo(kind).min, np.iinfo(kind).max, 0, 1)
    ],
    *_float_scalars(np.float16),
    *_float_scalars(np.float32),
    *_float_scalars(np.float64),
    np.float32(1 / 3),
    np.float16(1 / 3),
    np.complex64(1 + 2j),
    np.complex128(complex(1.5, -2.5)),
    np.complex128(complex(math.nan, math.inf)),
    np.complex128(complex(-0.0, 0.0)),
    np.longdouble(1) / np.longdouble(3),
    np.longdouble("inf"),
    np.longdouble("nan"),
    np.clongdouble(1 + 1j),
    np.str_("a"),
    np.str_("héllo 🐍"),
    np.bytes_(b"ab\x00c"),
    np.datetime64("2020-01-02T03:04:05"),
    np.datetime64("2020-01-02", "D"),
    np.datetime64("2020-01-02T03:04:05.123456789", "ns"),
    np.datetime64("NaT"),
    np.datetime64("NaT", "s"),
    np.timedelta64(5, "ms"),
    np.timedelta64("NaT"),
]


@pytest.mark.parametrize("scalar", NUMPY_SCALARS, ids=lambda s: f"{type(s).__name__}({s!r})"[:50])
def test_numpy_scalar_roundtrip(scalar):
    assert_roundtrip(scalar)


@pytest.mark.parametrize("scalar", NUMPY_SCALARS, ids=lambda s: f"{type(s).__name__}({s!r})"[:50])
def test_numpy_scalar_roundtrip_in_process(scalar):
    assert_same(scalar, roundtrip_in_process(scalar))


def test_numpy_float_scalars_are_exact():
    for value in (np.float32(0.1), np.float16(0.1), np.float64(0.1), np.float32(-0.0)):
        decoded = roundtrip(value)
        assert type(decoded) is type(value) and decoded.tobytes() == value.tobytes()
    value = np.longdouble(0.1) + np.longdouble(1e-19)
    decoded = roundtrip(value)
    assert type(decoded) is np.longdouble and decoded == value


@pytest.mark.parametrize("scalar", [np.str_(""), np.bytes_(b"")], ids=["str_", "bytes_"])
def test_empty_numpy_string_scalar_roundtrip(scalar):
    # np.str_("") is a perfectly ordinary numpy scalar (e.g. np.array([""])[0]).
    assert_roundtrip(scalar)


def test_numpy_scalars_in_containers_keep_types():
    value = {"reward": np.float32(1.5), "steps": np.int64(3), "flag": np.bool_(True), "plain": 1.5}
    decoded = assert_roundtrip(value)
    assert type(decoded["reward"]) is np.float32 and type(decoded["plain"]) is float


# GraphInstance


@pytest.mark.parametrize(
    "graph",
    [
        GraphInstance(np.zeros((3, 2), np.float32), None, np.zeros((0, 2), np.int64)),
        GraphInstance(np.arange(3), np.ones((2, 4), np.float64), np.array([[0, 1], [1, 2]], np.int64)),
        GraphInstance(np.zeros((0, 1)), np.zeros((0,)), np.zeros((0, 2), np.int32)),
        GraphInstance(np.array([1, 2]), np.array([3]), None),
    ],
)
def test_graph_instance_roundtrip(graph):
    decoded = assert_roundtrip(graph)
    assert type(decoded) is GraphInstance
    assert (decoded.edges is None) == (graph.edges is None)


def test_graph_instance_nested_in_containers():
    graph = GraphInstance(np.zeros((1, 1)), None, np.zeros((0, 2), np.int64))
    assert_roundtrip({"graphs": [graph, (graph,)], 3: graph})


# ---------------------------------------------------------------------------------------------------
# 3. subclasses of dict, list and tuple


def test_ordered_dict_travels_as_dict_without_pickle():
    value = collections.OrderedDict([("b", 1), ("a", 2)])
    decoded = roundtrip(value)
    assert type(decoded) is dict
    assert list(decoded.items()) == [("b", 1), ("a", 2)]


def test_namedtuple_travels_as_tuple_without_pickle():
    decoded = roundtrip(Point(1, [2]))
    assert type(decoded) is tuple
    assert decoded == (1, [2])


def test_defaultdict_and_list_subclass_travel_as_base_without_pickle():
    value = {"dd": collections.defaultdict(list, {1: [2]}), "ml": MyList([1, 2])}
    decoded = roundtrip(value)
    assert type(decoded["dd"]) is dict and decoded["dd"] == {1: [2]}
    assert type(decoded["ml"]) is list and decoded["ml"] == [1, 2]


def test_subclasses_with_unencodable_content_name_the_path():
    with pytest.raises(EncodeError, match=r"infos\['od'\]\[1\]"):
        encode({"od": Point(1, Foo())}, what="infos")


@pytest.mark.parametrize(
    "value",
    [
        collections.OrderedDict([("b", 1), ("a", 2)]),
        Point(1, [2, 3]),
        collections.defaultdict(int, {"x": 1}),
        MyList([1, "x"]),
        {"nested": [collections.OrderedDict(z=1), Point(x=np.float32(1), y=None)]},
    ],
    ids=["OrderedDict", "namedtuple", "defaultdict", "MyList", "nested"],
)
def test_subclasses_keep_exact_type_with_pickle(value):
    decoded = roundtrip(value, allow_pickle=True)
    assert_same(value, decoded)
    assert decoded == value


# ---------------------------------------------------------------------------------------------------
# 4. unsupported values

UNSUPPORTED = [
    (lambda: Foo(3), "Foo"),
    (lambda: lambda x: x + 1, "function"),
    (lambda: {1, 2, 3}, "set"),
    (lambda: frozenset({1}), "frozenset"),
    (lambda: 1 + 2j, "complex"),
    (lambda: np.zeros(2, dtype=[("a", "O"), ("b", "i4")]), "dtype"),
    (lambda: np.zeros(2, dtype=[("a", "i4"), ("b", "f8")]), "dtype"),
    (lambda: np.void(b"ab"), "V2"),
    (lambda: np.zeros(1, dtype=[("a", "i4")])[0], "dtype"),
    (lambda: object(), "object"),
]


@pytest.mark.parametrize("make,type_name", UNSUPPORTED, ids=[name for _, name in UNSUPPORTED])
def test_unsupported_value_raises_encode_error_naming_path_and_type(make, type_name):
    value = make()
    with pytest.raises(EncodeError) as info:
        encode({"a": [1, value]}, what="infos")
    message = str(info.value)
    assert "infos['a'][1]" in message
    assert type_name in message
    assert isinstance(info.value, TypeError) and isinstance(info.value, GymRemoteError)


@pytest.mark.parametrize("make,type_name", UNSUPPORTED, ids=[name for _, name in UNSUPPORTED])
def test_unsupported_value_at_top_level_uses_default_name(make, type_name):
    with pytest.raises(EncodeError, match=r"cannot send value"):
        encode(make())


@pytest.mark.parametrize(
    "value,path",
    [
        ((0, 1, Foo()), "obs[2]"),
        ({"x": {"y": (Foo(),)}}, "obs['x']['y'][0]"),
        (object_array([1, Foo()], (2,)), "obs[1]"),
        ({5: Foo()}, "obs[5]"),
        ({(1, Foo()): 2}, "obs (key (1,"),
        (GraphInstance(np.zeros(1), Foo(), None), "obs.edges"),
        ([[[{1: [Foo()]}]]], "obs[0][0][0][1][0]"),
    ],
    ids=["tuple", "nested-dict", "object-array", "int-key", "bad-key", "graph", "deep"],
)
def test_encode_error_paths(value, path):
    with pytest.raises(EncodeError) as info:
        encode(value, what="obs")
    assert path in str(info.value)
    assert "Foo" in str(info.value)


@pytest.mark.parametrize("make,type_name", UNSUPPORTED, ids=[name for _, name in UNSUPPORTED])
def test_unsupported_values_roundtrip_with_pickle(make, type_name):
    value = make()
    decoded = roundtrip({"a": [1, value]}, allow_pickle=True)["a"][1]
    assert type(decoded) is type(value)
    if callable(value):
        assert decoded(41) == 42
    elif isinstance(value, (np.ndarray, np.void)):
        assert decoded.dtype == value.dtype
        if value.dtype.hasobject:
            assert decoded.tolist() == value.tolist()
        else:
            assert decoded.tobytes() == value.tobytes()
    elif type(value) is object:
        pass
    else:
        assert decoded == value


def test_pickled_values_need_pickle_on_decode_too():
    body, buffers = encode({"x": Foo()}, allow_pickle=True)
    with pytest.raises(ProtocolError, match="pickle"):
        decode(body, wire(buffers))
    assert decode(body, wire(buffers), allow_pickle=True) == {"x": Foo()}


def test_unpicklable_value_with_pickle_raises_encode_error():
    import threading

    with pytest.raises(EncodeError, match=r"infos\['lock'\]"):
        encode({"lock": threading.Lock()}, allow_pickle=True, what="infos")


def test_plain_values_do_not_use_pickle_in_trusted_mode():
    value = {"a": [1, 2.5, "x", b"y", np.zeros(2), np.int8(3), (None,)], 1: 2}
    body, _ = encode(value, allow_pickle=True)
    assert "p" not in set(_tags(json.loads(body)))
    assert_same(value, decode(body, wire(encode(value, allow_pickle=True)[1])))


# ---------------------------------------------------------------------------------------------------
# 5. safety


def test_malicious_pickle_is_live(tmp_path):
    """Sanity check: the payload used below really runs code when unpickled."""
    marker = tmp_path / "marker"
    decode(b'["p",0]', [malicious_pickle(marker)], allow_pickle=True)
    assert marker.exists()


@pytest.mark.parametrize(
    "body",
    [
        b'["p",0]',
        b'{"a":["p",0]}',
        b'["l",1,["t",["p",0]]]',
        b'["d",["p",0],1]',
        b'["d",1,["p",0]]',
        b'["o",[1],[["p",0]]]',
        b'["g",["p",0],null,null]',
        b'["l",["f","nan"],["p",0]]',
    ],
)
def test_pickle_tag_is_refused_and_runs_no_code(tmp_path, body):
    marker = tmp_path / "marker"
    payload = malicious_pickle(marker)
    with pytest.raises(ProtocolError, match="pickle"):
        decode(body, [payload])
    assert not marker.exists()
    with pytest.raises(ProtocolError):
        decode(body, [bytearray(payload)], allow_pickle=False)
    assert not marker.exists()


def test_pickled_space_is_refused_and_runs_no_code(tmp_path):
    marker = tmp_path / "marker"
    description = {"space": "pickle", "data": malicious_pickle(marker)}
    with pytest.raises(ProtocolError, match="pickle"):
        space_from_value(description)
    body, buffers = encode({"observation_space": description})
    with pytest.raises(ProtocolError):
        space_from_value(decode(body, wire(buffers))["observation_space"])
    with pytest.raises(ProtocolError):
        space_from_value({"space": "Tuple", "spaces": [{"space": "Discrete", "n": 2, "start": 0}, description]})
    assert not marker.exists()


VALID_DTYPES = [
    "?",
    "b1",
    "i1",
    "<i2",
    ">i4",
    "i8",
    "u1",
    ">u8",
    "f2",
    "<f4",
    ">f8",
    "c8",
    ">c16",
    "g",
    "G",
    "M8[ns]",
    ">m8[D]",
    "M8",
    "U1",
    "<U10",
    ">U2",
    "S1",
    "|S8",
    "bool",
    "int64",
    "float32",
]


@pytest.mark.parametrize("name", VALID_DTYPES)
def test_check_dtype_accepts_plain_dtypes(name):
    dtype = check_dtype(name)
    assert dtype == np.dtype(name)
    assert not dtype.hasobject


OBJECT_OR_BAD_DTYPES = [
    "O",
    "|O",
    "O8",
    "object",
    "<O",
    "V",
    "V8",
    "|V4",
    "i4,O",
    "O,O",
    "(2,)O",
    "(2,)i4",
    "i4,f8",
    "[('a','O')]",
    "T",
    "S0",
    "U0",
    "S",
    "U",
    "",
    "foo",
    "i3",
    "f3",
    "M8[xyz]",
    "<" * 40 + "i4",
    "U" + "9" * 40,
    "S99999999999999999999",
    ",",
    "(2,",
    "i4,(",
    "i4,,",
    "(,)i4",
    "f8,",
    "[",
]


@pytest.mark.parametrize("name", OBJECT_OR_BAD_DTYPES)
def test_check_dtype_refuses_object_and_bad_dtypes(name):
    with pytest.raises(ProtocolError):
        check_dtype(name)


@pytest.mark.parametrize("name", [None, 4, 4.0, True, ["<f4"], {"descr": "<f4"}, b"<f4", np.dtype("f4"), float])
def test_check_dtype_refuses_non_strings(name):
    with pytest.raises(ProtocolError):
        check_dtype(name)


@pytest.mark.parametrize("name", ["O", "|O", "O,i4", "V8", "V", "i4,i4", "(2,)i4", "T", "S0"])
def test_object_dtypes_refused_by_every_tag(name):
    pointer_bytes = (id(object())).to_bytes(8, "little") * 2
    for tree in (["a", name, [2], 0], ["a", name, [], 0], ["S", name, 0], ["s", name, 0], ["s", name, 1.0]):
        with pytest.raises(ProtocolError):
            decode(json.dumps(tree).encode(), [pointer_bytes])
        with pytest.raises(ProtocolError):
            decode(json.dumps(tree).encode(), [pointer_bytes], allow_pickle=True)


MALFORMED_BODIES = [
    # buffers
    (b'["a","<f4",[2],0]', [b"\x00" * 7]),
    (b'["a","<f4",[2],0]', [b"\x00" * 9]),
    (b'["a","<f4",[2,3],0]', [b"\x00" * 8]),
    (b'["a","<f4",[],0]', [b""]),
    (b'["a","<f4",[0],0]', [b"\x00"]),
    (b'["a","<f4",[2],1]', [b"\x00" * 8]),
    (b'["a","<f4",[2],-1]', [b"\x00" * 8]),
    (b'["a","<f4",[2],0]', []),
    (b'["a","<f4",[2],"0"]', [b"\x00" * 8]),
    (b'["a","<f4",[2],0.0]', [b"\x00" * 8]),
    (b'["a","<f4",[2],true]', [b"\x00" * 8]),
    (b'["a","<f4",[2],null]', [b"\x00" * 8]),
    (b'["b",1]', [b"x"]),
    (b'["b",-1]', [b"x"]),
    (b'["b",false]', [b"x"]),
    (b'["b",[0]]', [b"x"]),
    (b'["S","<c16",0]', [b"\x00" * 15]),
    (b'["S","<c16",1]', [b"\x00" * 16]),
    (b'["p",5]', []),
    # shapes
    (b'["a","<f4",[-1],0]', [b""]),
    (b'["a","<f4",[-2,-2],0]', [b"\x00" * 16]),
    (b'["a","<f4",[1.0],0]', [b"\x00" * 4]),
    (b'["a","<f4",[true],0]', [b"\x00" * 4]),
    (b'["a","<f4",["1"],0]', [b"\x00" * 4]),
    (b'["a","<f4",[null],0]', [b"\x00" * 4]),
    (b'["a","<f4",3,0]', [b"\x00" * 12]),
    (b'["a","<f4",{"0":1},0]', [b"\x00" * 4]),
    (b'["a","<f4",' + json.dumps([1] * 33).encode() + b",0]", [b"\x00" * 4]),
    (b'["a","<f4",' + json.dumps([1] * 100).encode() + b",0]", [b"\x00" * 4]),
    (b'["a","<f4",[4611686018427387904,4611686018427387904],0]', [b""]),
    (b'["a","<f4",[0,99999999999999999999999],0]', [b""]),
    (b'["o",[-1],[]]', []),
    (b'["o",[2],[1]]', []),
    (b'["o",[1],[1,2]]', []),
    (b'["o",[1],1]', []),
    (b'["o",[1],{"a":1}]', []),
    (b'["o",[0,99999999999999999999999],[]]', []),
    (b'["o",' + json.dumps([1] * 33).encode() + b",[1]]", []),
    # tags
    (b'["x"]', []),
    (b'["x",1]', []),
    (b'[""]', []),
    (b'["ll",1]', []),
    (b'["L",1]', []),
    (b'["A","<f4",[1],0]', [b"\x00" * 4]),
    (b"[]", []),
    (b"[1,2]", []),
    (b"[null]", []),
    (b'[["l"]]', []),
    (b'[{"a":1}]', []),
    (b'{"a":[1]}', []),
    (b'{"a":[]}', []),
    (b'["l",[]]', []),
    # field counts and field types
    (b'["f"]', []),
    (b'["f","nan","nan"]', []),
    (b'["f","NaN"]', []),
    (b'["f","Infinity"]', []),
    (b'["f",1.5]', []),
    (b'["f",null]', []),
    (b'["f",["nan"]]', []),
    (b'["f",{"a":1}]', []),
    (b'["a","<f4",[1]]', [b"\x00" * 4]),
    (b'["a","<f4",[1],0,0]', [b"\x00" * 4]),
    (b'["s","<i4"]', []),
    (b'["s","<i4",1,2]', []),
    (b'["s","<i4",true]', []),
    (b'["s","<i4",1.0]', []),
    (b'["s","<i4","1"]', []),
    (b'["s","|i1",300]', []),
    (b'["s","<u8",-1]', []),
    (b'["s","<u8",18446744073709551616]', []),
    (b'["s","|b1",1]', []),
    (b'["s","<f8","NaN"]', []),
    (b'["s","<f8",null]', []),
    (b'["s","<f8",true]', []),
    (b'["s","<f4",' + b"9" * 400 + b"]", []),
    (b'["s","<c16",1.0]', []),
    (b'["s","<M8[s]",1]', []),
    (b'["s","<U1","a"]', []),
    (b'["s","<f16",1.0]', []),
    (b'["s",1,1]', []),
    (b'["S","<f8"]', [b"\x00" * 8]),
    (b'["S",null,0]', [b"\x00" * 8]),
    (b'["b"]', [b""]),
    (b'["b",0,0]', [b""]),
    (b'["g",1,2]', []),
    (b'["g",1,2,3,4]', []),
    (b'["p"]', []),
    (b'["p",0,1]', [b""]),
    (b'["d",1]', []),
    (b'["d",1,2,3]', []),
    (b'["d",["l"],1]', []),
    (b'["d",{"a":1},1]', []),
    (b'["d",["a","<f4",[1],0],1]', [b"\x00" * 4]),
    (b'["d",["o",[0],[]],1]', []),
    (b'["a",["<f4"],[1],0]', [b"\x00" * 4]),
    # raw scalars whose bytes are not a valid code point
    (b'["S","<U1",0]', [b"\x00\x00\x00\x01"]),
    (b'["S",">U1",0]', [b"\x7f\xff\xff\xff"]),
    (b'["S","<U2",0]', [b"a\x00\x00\x00\x00\x00\x11\x00"]),
    # dtype strings numpy parses with ast.literal_eval
    (b'["a",",",[1],0]', [b"\x00" * 4]),
    (b'["a","(2,",[1],0]', [b"\x00" * 8]),
    (b'["S","i4,,",0]', [b"\x00" * 8]),
    (b'["s",",",1]', []),
    (b'["a","<f4","<f4",0]', [b"\x00" * 4]),
    # JSON-level problems
    (b"NaN", []),
    (b"Infinity", []),
    (b"-Infinity", []),
    (b"[NaN]", []),
    (b'{"a":NaN}', []),
    (b'["l",Infinity]', []),
    (b'["s","<f8",NaN]', []),
    (b'["s","<f8",-Infinity]', []),
    (b"", []),
    (b" ", []),
    (b"[", []),
    (b'{"a":', []),
    (b"1 2", []),
    (b'"unterminated', []),
    (b"[1,]", []),
    (b"{'a': 1}", []),
    (b"undefined", []),
    (b"\x00", []),
    (b'"\xc3\x28"', []),
    (b'"\xff\xfe\xfd"', []),
    (b'"\xed\xa0\x80"', []),  # UTF-8 encoded surrogate: not valid UTF-8
    (b'"\x80"', []),
    (b'{"\xe9":1}', []),
    (b'["l",1,"\xc0\xaf"]', []),
]


@pytest.mark.parametrize("body,buffers", MALFORMED_BODIES, ids=lambda x: repr(x)[:60] if isinstance(x, bytes) else None)
def test_malformed_bodies_raise_protocol_error(body, buffers):
    with pytest.raises(ProtocolError):
        decode(body, buffers)
    with pytest.raises(ProtocolError):
        decode(body, buffers, allow_pickle=True)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "latin-1"])
def test_non_utf8_bodies_raise_protocol_error(encoding):
    # The body is specified as UTF-8 JSON; a body in another encoding is malformed.
    body = '["l","é",1]'.encode(encoding)
    with pytest.raises(ProtocolError):
        decode(body, [])


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 10_000, 200_000])
@pytest.mark.parametrize(
    "opener,closer",
    [
        ("[", "]"),
        ('{"a":', "}"),
        ('["l",', "]"),
        ('["t",', "]"),
        ('["o",[1],[', "]]"),
        ('["d",1,', "]"),
        ('["g",', ",null,null]"),
    ],
    ids=["bare-list", "object", "l", "t", "o", "d", "g"],
)
def test_deeply_nested_bodies_raise_protocol_error(depth, opener, closer):
    body = (opener * depth + "1" + closer * depth).encode()
    with pytest.raises(ProtocolError):
        decode(body, [])


def test_depth_limit_is_exact_for_dicts():
    body = ('{"a":' * MAX_DEPTH + "1" + "}" * MAX_DEPTH).encode()
    value = decode(body, [])
    for _ in range(MAX_DEPTH):
        value = value["a"]
    assert value == 1
    body = ('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)).encode()
    with pytest.raises(ProtocolError):
        decode(body, [])


@pytest.mark.parametrize("body", [b"-1e999", b'{"x":["l",1E400]}', b'["s","<f8",1e999]'])
def test_overflowing_json_numbers_are_refused(body):
    # PROTOCOL.md 3.1: a JSON number stands for a *finite* float; non-finite floats use the 'f' tag
    # (or "inf" in an 's' scalar). A number literal that overflows to infinity is malformed.
    with pytest.raises(ProtocolError):
        decode(body, [])


def test_unhashable_decoded_key_is_protocol_error():
    with pytest.raises(ProtocolError, match="hashable"):
        decode(b'["d",["l",1],2]', [])


def test_duplicate_json_keys_do_not_crash():
    assert decode(b'{"a":1,"a":2}', []) in ({"a": 1}, {"a": 2})


def test_accepts_bytes_like_buffers():
    body = b'["l",["a","<i2",[2],0],["b",1]]'
    for kind in (bytes, bytearray, memoryview):
        value = decode(body, [kind(b"\x01\x00\x02\x00"), kind(b"xy")])
        np.testing.assert_array_equal(value[0], np.array([1, 2], dtype="<i2"))
        assert value[1] == b"xy" and type(value[1]) is bytes
        assert value[0].flags.writeable


def test_truncated_pickle_with_pickle_on_is_protocol_error():
    # decode documents ProtocolError for malformed buffers; a cut-off pickle is malformed.
    payload = cloudpickle.dumps(Foo(2))
    for cut in (0, 1, len(payload) // 2, len(payload) - 1):
        with pytest.raises(ProtocolError):
            decode(b'["p",0]', [payload[:cut]], allow_pickle=True)


# ---------------------------------------------------------------------------------------------------
# 2. hypothesis: strategies for every encodable value

ARRAY_DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.datetime64_dtypes(endianness="?"),
    hnp.timedelta64_dtypes(endianness="?"),
    hnp.unicode_string_dtypes(endianness="?", min_len=1, max_len=6),
    hnp.byte_string_dtypes(min_len=1, max_len=6),
)

_LAYOUTS = [
    lambda a: a,
    lambda a: a[::2] if a.ndim else a,
    lambda a: a[::-1] if a.ndim else a,
    lambda a: a.T,
    np.asfortranarray,
]

numpy_arrays = st.builds(
    lambda array, layout: layout(array),
    ARRAY_DTYPES.flatmap(
        lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    ),
    st.sampled_from(_LAYOUTS),
)


def _to_scalar(dtype: np.dtype):
    # np.array(x, dtype)[()] gives the numpy scalar (always in native byte order).
    return hnp.from_dtype(dtype).map(lambda x: np.array(x, dtype=dtype)[()])


numpy_scalars = st.one_of(
    st.one_of(
        hnp.boolean_dtypes(),
        hnp.integer_dtypes(),
        hnp.unsigned_integer_dtypes(),
        hnp.floating_dtypes(sizes=(16, 32, 64)),
        hnp.complex_number_dtypes(),
        hnp.datetime64_dtypes(),
        hnp.timedelta64_dtypes(),
        hnp.unicode_string_dtypes(min_len=1, max_len=6),
        hnp.byte_string_dtypes(min_len=1, max_len=6),
    ).flatmap(_to_scalar),
    st.floats().map(np.longdouble),
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(np.int64),
    st.integers(min_value=0, max_value=2**64 - 1).map(np.uint64),
    st.floats(width=32).map(np.float32),
).filter(
    # Empty np.str_/np.bytes_ scalars (dtype itemsize 0) are refused by encode: covered (and reported)
    # by test_empty_numpy_string_scalar_roundtrip; kept out here so the property checks everything else.
    lambda scalar: scalar.dtype.itemsize > 0
)

python_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**300), max_value=2**300),
    st.floats(),
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan]),
    st.text(max_size=12),
    st.binary(max_size=12),
)

leaves = st.one_of(python_leaves, numpy_scalars, numpy_arrays)

hashable_keys = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=6),
        st.binary(max_size=4),
        st.integers(min_value=-128, max_value=127).map(np.int8),
    ),
    lambda children: st.lists(children, max_size=3).map(tuple),
    max_leaves=4,
)


def _object_arrays(children):
    def build(items):
        shapes = [(len(items),), (len(items), 1), (1, len(items))] + ([()] if len(items) == 1 else [])
        return st.sampled_from(shapes).map(lambda shape: object_array(items, shape))

    return st.lists(children, max_size=4).flatmap(build)


def _graphs(children):
    return st.builds(
        GraphInstance, numpy_arrays, st.one_of(st.none(), numpy_arrays), st.one_of(st.none(), numpy_arrays)
    )


def _containers(children):
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
        st.dictionaries(hashable_keys, children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(-3, 3)), children, max_size=4),
        _object_arrays(children),
        _graphs(children),
    )


values = st.recursive(leaves, _containers, max_leaves=12)


@PROPERTY
@given(values)
def test_property_roundtrip_is_exact(value):
    assert_same(value, roundtrip(value))


@PROPERTY
@given(st.recursive(python_leaves, _containers, max_leaves=12))
def test_property_python_values_roundtrip_in_process(value):
    # No numpy arrays among the leaves (object arrays hold python values only): the in-process path.
    assume(not _has_array_of_kind(value, "mM") and not _has_empty_array(value))
    assert_same(value, roundtrip_in_process(value))


def _walk(value):
    yield value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(key)
            yield from _walk(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item)
    elif isinstance(value, np.ndarray) and value.dtype == object:
        for item in value.ravel():
            yield from _walk(item)


def _has_array_of_kind(value, kinds):
    return any(isinstance(item, np.ndarray) and item.dtype.kind in kinds for item in _walk(value))


def _has_empty_array(value):
    return any(isinstance(item, np.ndarray) and item.dtype != object and item.size == 0 for item in _walk(value))


@PROPERTY
@given(values)
def test_property_encoding_is_json_and_reencodes_identically(value):
    body, buffers = encode(value)
    check_encoding(body, buffers)
    decoded = decode(body, wire(buffers))
    body2, buffers2 = encode(decoded)
    assert body2 == body
    assert wire(buffers2) == wire(buffers)


@PROPERTY
@given(values)
def test_property_trusted_mode_roundtrip_is_exact(value):
    assert_same(value, roundtrip(value, allow_pickle=True))


@PROPERTY
@given(numpy_arrays)
def test_property_arrays_roundtrip(array):
    decoded = roundtrip(array)
    assert_same(array, decoded)
    decoded[...] = np.zeros((), dtype=decoded.dtype)  # writable


@PROPERTY
@given(numpy_scalars)
def test_property_numpy_scalars_roundtrip(scalar):
    assert_same(scalar, roundtrip(scalar))


@PROPERTY
@given(st.dictionaries(hashable_keys, st.integers(), max_size=6))
def test_property_dict_key_order_and_types(value):
    decoded = roundtrip(value)
    assert_same(value, decoded)


# ---------------------------------------------------------------------------------------------------
# 6. fuzzing decode


def _decode_must_not_crash(body: Any, buffers: list[Any], allow_pickle: bool = False) -> None:
    try:
        decode(body, buffers, allow_pickle=allow_pickle)
    except ProtocolError:
        pass


random_buffers = st.lists(st.binary(max_size=40), max_size=4)


@FUZZ
@given(st.binary(max_size=300), random_buffers)
@pytest.mark.timeout(120)
def test_fuzz_random_bytes(body, buffers):
    _decode_must_not_crash(body, buffers)


TAGS = list("ltdfaosSbgp") + ["x", "", "ll", "A"]
DTYPE_NAMES = [
    "<f4",
    ">f8",
    "|b1",
    "<i2",
    "|u1",
    "<u8",
    "<c16",
    "<M8[s]",
    ">m8[ms]",
    "<U2",
    "|S3",
    "<f2",
    "<f16",
    "O",
    "|O",
    "V4",
    "i4,i4",
    "T",
    "S0",
    "(2,)i4",
    "<i8",
    "M8",
]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-3, 6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(TAGS + DTYPE_NAMES + ["nan", "inf", "-inf", "NaN"]),
)


def _json_containers(children):
    return st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.text(max_size=4), children, max_size=4),
        st.tuples(st.sampled_from(TAGS), st.lists(children, max_size=4)).map(lambda t: [t[0], *t[1]]),
        st.tuples(
            st.sampled_from(["a", "S", "s"]),
            st.sampled_from(DTYPE_NAMES),
            st.lists(st.integers(-1, 4), max_size=3),
            st.integers(-1, 4),
        ).map(lambda t: [t[0], t[1], t[2], t[3]] if t[0] == "a" else [t[0], t[1], t[3]]),
        st.tuples(st.lists(st.integers(-1, 3), max_size=3), st.lists(children, max_size=4)).map(lambda t: ["o", *t]),
        st.lists(children, max_size=6).map(lambda items: ["d", *items]),
        st.integers(-1, 4).map(lambda i: ["b", i]),
        st.integers(-1, 4).map(lambda i: ["p", i]),
        st.tuples(children, children, children).map(lambda t: ["g", *t]),
    )


json_trees = st.recursive(json_scalars, _json_containers, max_leaves=25)


@FUZZ
@given(json_trees, random_buffers)
@pytest.mark.timeout(120)
def test_fuzz_json_trees(tree, buffers):
    body = json.dumps(tree).encode()  # may contain bare NaN/Infinity on purpose
    _decode_must_not_crash(body, buffers)


@FUZZ
@given(json_trees, random_buffers)
@pytest.mark.timeout(120)
def test_fuzz_json_trees_trusted_mode_without_pickles(tree, buffers):
    # Pickle on, but no "p" tag (random bytes are never unpickled): only ProtocolError or a value.
    body = json.dumps(tree).encode()
    if b'"p"' in body:
        return
    _decode_must_not_crash(body, buffers, allow_pickle=True)


@FUZZ
@given(json_trees, random_buffers)
@pytest.mark.timeout(120)
def test_fuzz_json_trees_never_unpickle_without_pickle(tree, buffers):
    buffers = [cloudpickle.dumps(Foo())] + buffers
    body = json.dumps(tree).encode()
    try:
        result = decode(body, buffers)
    except ProtocolError:
        return
    assert not any(isinstance(item, Foo) for item in _walk(result))


@FUZZ
@given(st.text(max_size=40))
@example(",")
def test_fuzz_check_dtype(name):
    try:
        dtype = check_dtype(name)
    except ProtocolError:
        return
    assert dtype.kind in "biufcmMUS" and not dtype.hasobject and dtype.fields is None and dtype.itemsize > 0


@FUZZ
@given(
    st.one_of(st.text(max_size=8), st.sampled_from(DTYPE_NAMES)),
    st.lists(st.integers(-2, 5), max_size=4),
    st.binary(max_size=64),
)
def test_fuzz_array_tag(dtype, shape, data):
    body = json.dumps(["a", dtype, shape, 0]).encode()
    try:
        array = decode(body, [data])
    except ProtocolError:
        return
    assert array.nbytes == len(data) and array.shape == tuple(shape) and array.flags.writeable
    assert not array.dtype.hasobject


@st.composite
def mutated_encodings(draw):
    value = draw(values)
    body, buffers = encode(value)
    body = bytearray(body)
    buffers = wire(buffers)
    for _ in range(draw(st.integers(1, 3))):
        mutation = draw(
            st.sampled_from(
                [
                    "flip",
                    "truncate",
                    "insert",
                    "delete",
                    "buf_truncate",
                    "buf_extend",
                    "buf_drop",
                    "buf_swap",
                    "buf_random",
                    "buf_add",
                    "buf_shuffle",
                ]
            )
        )
        if mutation == "flip" and body:
            index = draw(st.integers(0, len(body) - 1))
            body[index] ^= draw(st.integers(1, 255))
        elif mutation == "truncate":
            del body[draw(st.integers(0, len(body))) :]
        elif mutation == "insert":
            body.insert(draw(st.integers(0, len(body))), draw(st.integers(0, 255)))
        elif mutation == "delete" and body:
            del body[draw(st.integers(0, len(body) - 1))]
        elif mutation == "buf_truncate" and buffers:
            index = draw(st.integers(0, len(buffers) - 1))
            buffers[index] = buffers[index][: draw(st.integers(0, max(0, len(buffers[index]) - 1)))]
        elif mutation == "buf_extend" and buffers:
            index = draw(st.integers(0, len(buffers) - 1))
            buffers[index] = buffers[index] + draw(st.binary(min_size=1, max_size=8))
        elif mutation == "buf_drop" and buffers:
            del buffers[draw(st.integers(0, len(buffers) - 1))]
        elif mutation == "buf_swap" and len(buffers) >= 2:
            i = draw(st.integers(0, len(buffers) - 1))
            j = draw(st.integers(0, len(buffers) - 1))
            buffers[i], buffers[j] = buffers[j], buffers[i]
        elif mutation == "buf_random" and buffers:
            buffers[draw(st.integers(0, len(buffers) - 1))] = draw(st.binary(max_size=32))
        elif mutation == "buf_add":
            buffers.append(draw(st.binary(max_size=16)))
        elif mutation == "buf_shuffle":
            buffers = draw(st.permutations(buffers))
    return bytes(body), buffers


@FUZZ
@given(mutated_encodings())
@example((b'["l",["S","<U1",0]]', [b"\x00\x00\x00\x01"]))
@pytest.mark.timeout(180)
def test_fuzz_mutated_valid_encodings(encoding):
    body, buffers = encoding
    _decode_must_not_crash(body, buffers)


@FUZZ
@given(values, st.data())
@pytest.mark.timeout(180)
def test_fuzz_truncated_and_swapped_buffers_never_crash(value, data):
    body, buffers = encode(value)
    buffers = wire(buffers)
    assume(buffers)
    index = data.draw(st.integers(0, len(buffers) - 1))
    truncated = list(buffers)
    truncated[index] = truncated[index][: data.draw(st.integers(0, len(truncated[index])))]
    _decode_must_not_crash(body, truncated)
    _decode_must_not_crash(body, buffers[::-1])
    _decode_must_not_crash(body, buffers[:-1])


# ---------------------------------------------------------------------------------------------------
# 7. spaces


class MySpace(spaces.Space):
    def __init__(self, size: int = 3) -> None:
        super().__init__((size,), np.float32)
        self.size = size

    def sample(self, mask=None, probability=None):
        return np.zeros(self.size, np.float32)

    def contains(self, x) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return type(other) is MySpace and other.size == self.size


class MyBox(spaces.Box):
    pass


def _ordered_dict_space(items):
    return spaces.Dict(collections.OrderedDict(items))


SPACES = {
    "box-f32": spaces.Box(-1.0, 1.0, (3,), np.float32),
    "box-f64-scalar-shape": spaces.Box(-2.5, 7.0, (), np.float64),
    "box-f16": spaces.Box(-1.0, 1.0, (2, 2), np.float16),
    "box-inf": spaces.Box(-np.inf, np.inf, (2, 3), np.float32),
    "box-half-inf": spaces.Box(np.array([0.0, -np.inf]), np.array([np.inf, 1.0]), dtype=np.float64),
    "box-array-bounds": spaces.Box(np.array([[0, 1], [2, 3]], np.float32), np.array([[1, 2], [3, 4]], np.float32)),
    "box-int": spaces.Box(-5, 5, (4,), np.int64),
    "box-int32-array": spaces.Box(np.array([0, -3]), np.array([10, 3]), dtype=np.int32),
    "box-uint8-image": spaces.Box(0, 255, (8, 8, 3), np.uint8),
    "box-bool": spaces.Box(0, 1, (5,), np.bool_),
    "discrete": spaces.Discrete(5),
    "discrete-start": spaces.Discrete(3, start=-1),
    "discrete-big-start": spaces.Discrete(2**40, start=2**41),
    "multidiscrete": spaces.MultiDiscrete([3, 4, 5]),
    "multidiscrete-start-dtype": spaces.MultiDiscrete(
        np.array([[2, 3], [4, 5]]), dtype=np.int32, start=np.array([[1, -1], [0, 10]])
    ),
    "multidiscrete-uint8": spaces.MultiDiscrete([2, 2], dtype=np.uint8),
    "multibinary-int": spaces.MultiBinary(6),
    "multibinary-shape": spaces.MultiBinary([2, 3]),
    "multibinary-shape-np": spaces.MultiBinary(np.array([4, 1])),
    "dict-sorted": spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(0, 1, (2,))}),
    "dict-empty": spaces.Dict({}),
    "tuple": spaces.Tuple([spaces.Discrete(2), spaces.Box(0, 1, (2,))]),
    "tuple-empty": spaces.Tuple([]),
    "text-default": spaces.Text(5),
    "text-charset": spaces.Text(10, min_length=2, charset="zyxé日"),
    "text-digits": spaces.Text(3, min_length=3, charset=string.digits),
    "graph-edges": spaces.Graph(spaces.Box(0, 1, (3,)), spaces.Discrete(4)),
    "graph-no-edges": spaces.Graph(spaces.Discrete(3), None),
    "graph-box-edges": spaces.Graph(spaces.Box(-1, 1, (2, 2)), spaces.Box(0, 1, (1,), np.float64)),
    "sequence": spaces.Sequence(spaces.Discrete(4)),
    "sequence-stack": spaces.Sequence(spaces.Box(0, 1, (2,)), stack=True),
    "oneof": spaces.OneOf([spaces.Discrete(2), spaces.Box(0, 1, (3,))]),
    "nested": spaces.Dict(
        {
            "obs": spaces.Tuple([spaces.Box(0, 1, (2,)), spaces.Dict({"x": spaces.MultiBinary(3)})]),
            "text": spaces.Text(4, charset="ab"),
            "seq": spaces.Sequence(spaces.Dict({"p": spaces.Discrete(3, start=1)})),
            "one": spaces.OneOf([spaces.Tuple([spaces.Discrete(2)]), spaces.Graph(spaces.Discrete(2), None)]),
        }
    ),
    "dict-int-and-str-keys": spaces.Dict({1: spaces.Discrete(2), "a": spaces.Discrete(3)}),
}

UNSORTED_DICT_SPACES = {
    "dict-ordered": _ordered_dict_space([("b", spaces.Discrete(2)), ("a", spaces.Box(0, 1, (2,)))]),
    "dict-unsorted": spaces.Dict(
        {"z": spaces.Discrete(2), "a": spaces.Discrete(3), "m": spaces.MultiBinary(2)}, sort_keys=False
    ),
    "nested-unsorted": spaces.Tuple(
        [
            _ordered_dict_space(
                [
                    ("y", spaces.Discrete(5)),
                    ("x", _ordered_dict_space([("d", spaces.Discrete(2)), ("c", spaces.Discrete(3))])),
                ]
            )
        ]
    ),
}

DTYPED_DISCRETE = {
    "discrete-int32": spaces.Discrete(4, dtype=np.int32),
    "discrete-uint8-start": spaces.Discrete(4, start=2, dtype=np.uint8),
}


def assert_space_same(expected: spaces.Space, actual: spaces.Space, path: str = "space") -> None:
    """Equality plus everything == ignores: exact class, dtypes, exact bounds, key order, charset order."""
    assert type(actual) is type(expected), f"{path}: {type(actual).__name__} != {type(expected).__name__}"
    assert actual == expected, f"{path}: {actual} != {expected}"
    if isinstance(expected, spaces.Box):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        np.testing.assert_array_equal(actual.low, expected.low)
        np.testing.assert_array_equal(actual.high, expected.high)
    elif isinstance(expected, spaces.Discrete):
        assert actual.n == expected.n and actual.start == expected.start and actual.dtype == expected.dtype, (
            f"{path}: {actual!r} (dtype {actual.dtype}) != {expected!r} (dtype {expected.dtype})"
        )
    elif isinstance(expected, spaces.MultiDiscrete):
        assert actual.dtype == expected.dtype
        np.testing.assert_array_equal(actual.nvec, expected.nvec)
        np.testing.assert_array_equal(actual.start, expected.start)
    elif isinstance(expected, spaces.MultiBinary):
        assert actual.shape == expected.shape
    elif isinstance(expected, spaces.Dict):
        assert list(actual.spaces) == list(expected.spaces), (
            f"{path}: key order {list(actual.spaces)} != {list(expected.spaces)}"
        )
        for key in expected.spaces:
            assert_space_same(expected.spaces[key], actual.spaces[key], f"{path}[{key!r}]")
    elif isinstance(expected, (spaces.Tuple, spaces.OneOf)):
        assert len(actual.spaces) == len(expected.spaces)
        for index, (sub_e, sub_a) in enumerate(zip(expected.spaces, actual.spaces)):
            assert_space_same(sub_e, sub_a, f"{path}[{index}]")
    elif isinstance(expected, spaces.Text):
        assert actual.min_length == expected.min_length and actual.max_length == expected.max_length
        assert getattr(actual, "_char_list", None) == getattr(expected, "_char_list", None)
    elif isinstance(expected, spaces.Graph):
        assert_space_same(expected.node_space, actual.node_space, f"{path}.node_space")
        assert (actual.edge_space is None) == (expected.edge_space is None)
        if expected.edge_space is not None:
            assert_space_same(expected.edge_space, actual.edge_space, f"{path}.edge_space")
    elif isinstance(expected, spaces.Sequence):
        assert actual.stack == expected.stack
        assert_space_same(expected.feature_space, actual.feature_space, f"{path}.feature_space")


def space_roundtrip(space: spaces.Space, *, allow_pickle: bool = False) -> spaces.Space:
    description = space_to_value(space, allow_pickle=allow_pickle)
    body, buffers = encode({"space": description}, allow_pickle=allow_pickle)
    check_encoding(body, buffers)
    return space_from_value(decode(body, wire(buffers), allow_pickle=allow_pickle)["space"], allow_pickle=allow_pickle)


SPACE_PATHS = {
    "direct": lambda space: space_from_value(space_to_value(space)),
    "wire": space_roundtrip,
    "trusted": lambda space: space_roundtrip(space, allow_pickle=True),
}


@pytest.mark.parametrize("name", list(SPACES))
def test_space_description_roundtrip_direct(name):
    space = SPACES[name]
    assert_space_same(space, space_from_value(space_to_value(space)))


@pytest.mark.parametrize("name", list(SPACES))
def test_space_roundtrip_through_encode_decode(name):
    space = SPACES[name]
    assert_space_same(space, space_roundtrip(space))


@pytest.mark.parametrize("name", list(SPACES))
def test_space_roundtrip_trusted_mode(name):
    space = SPACES[name]
    description = space_to_value(space, allow_pickle=True)
    assert description["space"] != "pickle"  # Gymnasium's own classes never need pickle
    assert_space_same(space, space_roundtrip(space, allow_pickle=True))


def _tags(tree):
    if isinstance(tree, list):
        if tree and isinstance(tree[0], str):
            yield tree[0]
        for item in tree:
            yield from _tags(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tags(item)


@pytest.mark.parametrize("name", list(SPACES))
def test_space_descriptions_need_no_pickle(name):
    body, _ = encode(space_to_value(SPACES[name]))
    assert "p" not in set(_tags(json.loads(body)))


def test_text_charset_order_survives():
    space = spaces.Text(3, charset="cba")
    decoded = space_roundtrip(space)
    assert "".join(decoded._char_list) == "cba"
    rng_a, rng_b = spaces.Text(3, charset="cba", seed=0), decoded
    rng_b.seed(0)
    assert rng_a.sample() == rng_b.sample()


def test_roundtripped_spaces_sample_identically():
    for name, space in SPACES.items():
        decoded = space_roundtrip(space)
        space.seed(123)
        decoded.seed(123)
        assert_same_sample(space.sample(), decoded.sample(), name)


BIT_GENERATORS = ["PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"]


@pytest.mark.parametrize(
    ("name", "bit_generator"),
    [(name, "PCG64") for name in SPACES] + [(next(iter(SPACES)), other) for other in BIT_GENERATORS[1:]],
)
def test_space_random_state_travels_exactly(name, bit_generator):
    """A seeded space arrives in the same random state (its sub-spaces too): it samples the same values."""
    space = copy.deepcopy(SPACES[name])
    space.seed(7)
    space._np_random = np.random.Generator(getattr(np.random, bit_generator)(11))
    space.sample()  # a state part-way through
    decoded = space_roundtrip(space)
    for _ in range(3):
        assert_same_sample(space.sample(), decoded.sample(), name)


def test_unseeded_space_travels_without_random_state():
    space = spaces.Discrete(4)
    assert "rng" not in space_to_value(space)
    assert space_roundtrip(space)._np_random is None


def assert_same_sample(a, b, name):
    if isinstance(a, dict):
        assert list(a) == list(b), name
        for key in a:
            assert_same_sample(a[key], b[key], name)
    elif isinstance(a, tuple) and type(a) is not GraphInstance:
        for x, y in zip(a, b, strict=True):
            assert_same_sample(x, y, name)
    elif type(a) is GraphInstance:
        assert_same_sample(a.nodes, b.nodes, name)
        assert_same_sample(a.edge_links, b.edge_links, name)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def _box_spaces():
    shapes = st.lists(st.integers(0, 3), max_size=3).map(tuple)
    floats = st.tuples(
        st.sampled_from([np.float16, np.float32, np.float64]),
        shapes,
        st.floats(-10, 0, width=16),
        st.floats(0.5, 10, width=16),
        st.booleans(),
    ).map(lambda t: spaces.Box(-np.inf if t[4] else t[2], t[3], t[1], t[0]))
    ints = st.tuples(
        st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint16]),
        shapes,
        st.integers(0, 5),
        st.integers(6, 100),
    ).map(lambda t: spaces.Box(t[2], t[3], t[1], t[0]))
    bools = shapes.map(lambda shape: spaces.Box(0, 1, shape, np.bool_))
    return st.one_of(floats, ints, bools)


leaf_spaces = st.one_of(
    _box_spaces(),
    st.builds(spaces.Discrete, st.integers(1, 2**40), start=st.integers(-(2**40), 2**40)),
    st.builds(
        lambda nvec, start, dtype: spaces.MultiDiscrete(nvec, dtype=dtype, start=start[: len(nvec)]),
        st.lists(st.integers(1, 100), min_size=1, max_size=4),
        st.lists(st.integers(-5, 5), min_size=4, max_size=4),
        st.sampled_from([np.int64, np.int32, np.int16]),
    ),
    st.builds(spaces.MultiBinary, st.one_of(st.integers(1, 10), st.lists(st.integers(1, 4), min_size=1, max_size=3))),
)

gym_spaces = st.recursive(
    st.one_of(
        leaf_spaces,
        st.builds(
            lambda m, extra, charset: spaces.Text(m + extra, min_length=m, charset=charset),
            st.integers(0, 4),
            st.integers(0, 4),
            st.text(min_size=1, max_size=8),
        ),
    ),
    lambda children: st.one_of(
        st.dictionaries(st.text(max_size=4), children, max_size=3).map(spaces.Dict),
        st.lists(children, max_size=3).map(spaces.Tuple),
        st.lists(children, min_size=1, max_size=3).map(spaces.OneOf),
        st.builds(spaces.Sequence, children, stack=st.booleans()),
        st.builds(
            spaces.Graph,
            st.one_of(
                _box_spaces().filter(lambda b: b.dtype.kind == "f"), st.builds(spaces.Discrete, st.integers(1, 9))
            ),
            st.one_of(st.none(), st.builds(spaces.Discrete, st.integers(1, 9))),
        ),
    ),
    max_leaves=6,
)


@PROPERTY
@given(gym_spaces)
@pytest.mark.filterwarnings("ignore")
def test_property_space_roundtrip(space):
    assert_space_same(space, space_roundtrip(space))
    assert_space_same(space, space_from_value(space_to_value(space)))
    leaves = array_leaf_spaces(space)
    decoded_leaves = array_leaf_spaces(space_roundtrip(space))
    assert (leaves is None) == (decoded_leaves is None)
    if leaves is not None:
        assert [str(leaf) for leaf in leaves] == [str(leaf) for leaf in decoded_leaves]


@pytest.mark.parametrize("path", list(SPACE_PATHS))
@pytest.mark.parametrize("name", list(UNSORTED_DICT_SPACES))
def test_dict_space_key_order_is_preserved(name, path):
    # PROTOCOL.md 7.2 sends Dict spaces "in the space's key order", and 5.1 makes that order the wire
    # order of the array leaves. (Gymnasium's Dict == ignores key order, so check the order itself.)
    space = UNSORTED_DICT_SPACES[name]
    decoded = SPACE_PATHS[path](space)
    assert array_leaf_spaces(decoded) == array_leaf_spaces(space)
    assert [str(leaf) for leaf in array_leaf_spaces(decoded)] == [str(leaf) for leaf in array_leaf_spaces(space)]
    assert_space_same(space, decoded)


def test_dict_space_description_lists_keys_in_order():
    space = UNSORTED_DICT_SPACES["dict-unsorted"]
    assert [key for key, _ in space_to_value(space)["spaces"]] == ["z", "a", "m"]


@pytest.mark.parametrize("path", list(SPACE_PATHS))
@pytest.mark.parametrize("name", list(DTYPED_DISCRETE))
def test_discrete_dtype_is_preserved(name, path):
    # Gymnasium 1.x Discrete has a dtype, and Discrete.__eq__ compares it.
    space = DTYPED_DISCRETE[name]
    decoded = SPACE_PATHS[path](space)
    assert decoded.dtype == space.dtype
    assert decoded == space


def test_custom_space_without_pickle_raises_encode_error():
    with pytest.raises(EncodeError, match="MySpace"):
        space_to_value(MySpace())
    with pytest.raises(EncodeError, match="MySpace"):
        space_to_value(spaces.Dict({"a": spaces.Discrete(2), "b": MySpace()}))
    with pytest.raises(EncodeError):
        space_to_value(spaces.Tuple([MySpace()]))


def test_custom_space_roundtrips_with_pickle():
    decoded = space_roundtrip(MySpace(5), allow_pickle=True)
    assert type(decoded) is MySpace and decoded == MySpace(5)
    nested = spaces.Dict({"custom": MySpace(2), "box": spaces.Box(0, 1, (2,))})
    decoded = space_roundtrip(nested, allow_pickle=True)
    assert type(decoded.spaces["custom"]) is MySpace and decoded == nested


def test_pickled_custom_space_refused_when_decoding_without_pickle():
    description = space_to_value(MySpace(), allow_pickle=True)
    body, buffers = encode(description, allow_pickle=True)
    with pytest.raises(ProtocolError):
        space_from_value(decode(body, wire(buffers), allow_pickle=True))
    assert type(space_from_value(decode(body, wire(buffers), allow_pickle=True), allow_pickle=True)) is MySpace


def test_box_subclass_travels_as_box_without_pickle():
    space = MyBox(0, 1, (3,), np.float32)
    decoded = space_roundtrip(space)
    assert type(decoded) is spaces.Box
    assert decoded == space
    decoded = space_roundtrip(space, allow_pickle=True)
    assert type(decoded) is MyBox and decoded == space


def test_pickled_description_that_is_not_a_space_is_refused():
    with pytest.raises(ProtocolError):
        space_from_value({"space": "pickle", "data": cloudpickle.dumps(5)}, allow_pickle=True)
    with pytest.raises(ProtocolError):
        space_from_value({"space": "pickle", "data": b"garbage"}, allow_pickle=True)


_D2 = {"space": "Discrete", "n": 2, "start": 0}
_ARR = np.array([0.0], np.float32)

MALFORMED_SPACES = [
    None,
    3,
    "Box",
    [],
    ["Box"],
    {},
    {"name": "Box"},
    {"space": "Unknown"},
    {"space": None},
    {"space": 3},
    {"space": ["Box"]},
    {"space": "box"},
    {"space": "Box"},
    {"space": "Box", "low": [0.0], "high": _ARR, "dtype": "<f4"},
    {"space": "Box", "low": _ARR, "high": 1.0, "dtype": "<f4"},
    {"space": "Box", "low": _ARR, "high": _ARR + 1, "dtype": "O"},
    {"space": "Box", "low": _ARR, "high": _ARR + 1, "dtype": "<U3"},
    {"space": "Box", "low": _ARR, "high": _ARR + 1, "dtype": 4},
    {"space": "Box", "low": _ARR, "high": np.zeros(3, np.float32), "dtype": "<f4"},
    {"space": "Discrete", "n": "3", "start": 0},
    {"space": "Discrete", "n": 3.0, "start": 0},
    {"space": "Discrete", "n": True, "start": 0},
    {"space": "Discrete", "n": 3, "start": None},
    {"space": "Discrete", "n": 3},
    {"space": "Discrete", "n": 0, "start": 0},
    {"space": "Discrete", "n": -4, "start": 0},
    {"space": "Discrete", "n": 2**70, "start": 0},
    {"space": "MultiDiscrete", "nvec": [2, 3], "start": np.zeros(2, np.int64), "dtype": "<i8"},
    {"space": "MultiDiscrete", "nvec": np.array([2, 3]), "start": np.zeros(3, np.int64), "dtype": "<i8"},
    {"space": "MultiDiscrete", "nvec": np.array([2, 3]), "start": np.zeros(2, np.int64), "dtype": "|O"},
    {"space": "MultiDiscrete", "nvec": np.array([2, 3]), "start": np.zeros(2, np.int64)},
    {"space": "MultiBinary", "n": "3"},
    {"space": "MultiBinary", "n": 3.0},
    {"space": "MultiBinary", "n": [2, 1.5]},
    {"space": "MultiBinary", "n": [2, "x"]},
    {"space": "MultiBinary", "n": None},
    {"space": "MultiBinary", "n": {"a": 1}},
    {"space": "MultiBinary", "n": -1},
    {"space": "MultiBinary"},
    {"space": "Dict", "spaces": {"a": _D2}},
    {"space": "Dict", "spaces": [["a"]]},
    {"space": "Dict", "spaces": [["a", _D2, 1]]},
    {"space": "Dict", "spaces": [("a", _D2)]},
    {"space": "Dict", "spaces": [["a", 3]]},
    {"space": "Dict", "spaces": [[["unhashable"], _D2]]},
    {"space": "Dict", "spaces": None},
    {"space": "Dict"},
    {"space": "Tuple", "spaces": _D2},
    {"space": "Tuple", "spaces": [_D2, None]},
    {"space": "Tuple", "spaces": [{"space": "Nope"}]},
    {"space": "Tuple", "spaces": "ab"},
    {"space": "Text", "min_length": 1, "max_length": 3, "charset": ""},
    {"space": "Text", "min_length": 1, "max_length": 3, "charset": 5},
    {"space": "Text", "min_length": 1, "max_length": 3, "charset": ["a"]},
    {"space": "Text", "min_length": "1", "max_length": 3, "charset": "ab"},
    {"space": "Text", "min_length": 1, "max_length": None, "charset": "ab"},
    {"space": "Text", "min_length": 5, "max_length": 3, "charset": "ab"},
    {"space": "Text", "min_length": -1, "max_length": 3, "charset": "ab"},
    {"space": "Text", "max_length": 3, "charset": "ab"},
    {"space": "Graph", "node_space": None, "edge_space": None},
    {"space": "Graph", "node_space": _D2},
    {"space": "Graph", "node_space": {"space": "Nope"}, "edge_space": None},
    {"space": "Graph", "node_space": _D2, "edge_space": 3},
    {"space": "Sequence", "feature_space": _D2, "stack": "yes"},
    {"space": "Sequence", "feature_space": _D2, "stack": 1},
    {"space": "Sequence", "feature_space": None, "stack": False},
    {"space": "Sequence", "feature_space": _D2},
    {"space": "OneOf", "spaces": "ab"},
    {"space": "OneOf", "spaces": [3]},
    {"space": "OneOf", "spaces": None},
    {"space": "pickle", "data": cloudpickle.dumps(spaces.Discrete(3))},
    {"space": "pickle"},
    # random generator states
    {**_D2, "rng": None},
    {**_D2, "rng": "PCG64"},
    {**_D2, "rng": {"bit_generator": "RandomState"}},
    {**_D2, "rng": {"bit_generator": "PCG64"}},
    {**_D2, "rng": {"bit_generator": "PCG64", "state": {"state": "1", "inc": 1}, "has_uint32": 0, "uinteger": 0}},
    {**_D2, "rng": {"bit_generator": "MT19937", "state": {"key": np.zeros(3, np.uint32), "pos": 0}}},
    {**_D2, "rng": {"bit_generator": "os.system", "state": {}}},
]


@pytest.mark.parametrize("description", MALFORMED_SPACES, ids=lambda d: repr(d)[:60])
def test_malformed_space_descriptions_raise_protocol_error(description):
    with pytest.raises(ProtocolError):
        space_from_value(description)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 2, 500, 5000])
def test_deeply_nested_space_description_raises_protocol_error(depth):
    description: Any = _D2
    for _ in range(depth):
        description = {"space": "Tuple", "spaces": [description]}
    with pytest.raises(ProtocolError):
        space_from_value(description)


space_descriptions = st.recursive(
    st.one_of(
        st.builds(dict, space=st.just("Discrete"), n=st.integers(-2, 5), start=st.integers(-3, 3)),
        st.builds(
            dict,
            space=st.just("MultiBinary"),
            n=st.one_of(st.integers(-1, 4), st.lists(st.integers(-1, 3), max_size=3)),
        ),
        st.builds(
            dict,
            space=st.just("Box"),
            low=hnp.arrays(
                st.sampled_from([np.float32, np.int64, np.uint8]), st.integers(0, 3), elements=st.integers(0, 3)
            ),
            high=hnp.arrays(
                st.sampled_from([np.float32, np.int64, np.uint8]), st.integers(0, 3), elements=st.integers(1, 5)
            ),
            dtype=st.sampled_from(["<f4", "<i8", "|u1", "|b1", "<f8", "O", "<U1", "<c8"]),
        ),
        st.builds(
            dict,
            space=st.just("MultiDiscrete"),
            nvec=hnp.arrays(np.int64, st.integers(0, 3), elements=st.integers(-1, 5)),
            start=hnp.arrays(np.int64, st.integers(0, 3), elements=st.integers(-3, 3)),
            dtype=st.sampled_from(["<i8", "<i4", "|u1", "<f4"]),
        ),
        st.builds(
            dict,
            space=st.just("Text"),
            min_length=st.integers(-1, 4),
            max_length=st.integers(-1, 6),
            charset=st.text(max_size=5),
        ),
        st.dictionaries(
            st.sampled_from(["space", "n", "start", "spaces", "low", "high", "dtype"]), json_scalars, max_size=4
        ),
    ),
    lambda children: st.one_of(
        st.builds(dict, space=st.just("Tuple"), spaces=st.lists(children, max_size=3)),
        st.builds(dict, space=st.just("OneOf"), spaces=st.lists(children, max_size=3)),
        st.builds(
            dict, space=st.just("Dict"), spaces=st.lists(st.tuples(st.text(max_size=3), children).map(list), max_size=3)
        ),
        st.builds(dict, space=st.just("Sequence"), feature_space=children, stack=st.booleans()),
        st.builds(dict, space=st.just("Graph"), node_space=children, edge_space=st.one_of(st.none(), children)),
    ),
    max_leaves=6,
)


@FUZZ
@given(space_descriptions)
@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore")  # Gymnasium warns about odd bounds and dtypes
def test_fuzz_space_from_value(description):
    try:
        space = space_from_value(description)
    except ProtocolError:
        return
    assert isinstance(space, spaces.Space)
    # whatever was accepted describes itself again identically
    again = space_from_value(space_to_value(space))
    assert again == space


@FUZZ
@given(space_descriptions)
@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore")
def test_fuzz_space_from_value_never_unpickles_without_pickle(description):
    try:
        space_from_value({"space": "Tuple", "spaces": [description, {"space": "pickle", "data": b"\x80"}]})
    except ProtocolError:
        return
    raise AssertionError("a pickled space was accepted with pickle off")


# ---------------------------------------------------------------------------------------------------
# 8. array leaves and batches

_BOX = spaces.Box(0, 1, (2,), np.float32)
_DISC = spaces.Discrete(3)
_MD = spaces.MultiDiscrete([2, 3])
_MB = spaces.MultiBinary([2, 2])


@pytest.mark.parametrize("space", [_BOX, _DISC, _MD, _MB, MyBox(0, 1, (1,))], ids=lambda s: type(s).__name__)
def test_array_leaf_spaces_of_a_leaf(space):
    leaves = array_leaf_spaces(space)
    assert leaves == [space] and leaves[0] is space


def test_array_leaf_spaces_order_for_dict_and_tuple():
    space = spaces.Dict(
        {
            "b": spaces.Tuple([_DISC, spaces.Dict({"y": _MB, "x": _MD})]),
            "a": _BOX,
        }
    )
    # Dict sorts keys by default: a, b; the inner Dict: x, y.
    assert [id(leaf) for leaf in array_leaf_spaces(space)] == [id(_BOX), id(_DISC), id(_MD), id(_MB)]
    unsorted = spaces.Dict({"b": _DISC, "a": _BOX}, sort_keys=False)
    assert [id(leaf) for leaf in array_leaf_spaces(unsorted)] == [id(_DISC), id(_BOX)]
    tuple_space = spaces.Tuple([_MB, spaces.Tuple([_BOX, _DISC]), spaces.Tuple([]), _MD])
    assert [id(leaf) for leaf in array_leaf_spaces(tuple_space)] == [id(_MB), id(_BOX), id(_DISC), id(_MD)]


def test_array_leaf_spaces_of_empty_containers():
    assert array_leaf_spaces(spaces.Tuple([])) == []
    assert array_leaf_spaces(spaces.Dict({})) == []


@pytest.mark.parametrize(
    "space",
    [
        spaces.Text(3),
        spaces.Graph(_BOX, None),
        spaces.Sequence(_DISC),
        spaces.Sequence(_BOX, stack=True),
        spaces.OneOf([_DISC, _BOX]),
        spaces.Dict({"a": _BOX, "t": spaces.Text(2)}),
        spaces.Tuple([_BOX, spaces.Tuple([_DISC, spaces.Sequence(_DISC)])]),
        spaces.Dict({"a": spaces.Dict({"b": spaces.Graph(_DISC, _DISC)})}),
        spaces.Tuple([spaces.OneOf([_DISC])]),
        MySpace(),
    ],
    ids=[
        "text",
        "graph",
        "sequence",
        "sequence-stack",
        "oneof",
        "dict-text",
        "tuple-seq",
        "dict-graph",
        "tuple-oneof",
        "custom",
    ],
)
def test_array_leaf_spaces_none_for_non_array_spaces(space):
    assert array_leaf_spaces(space) is None


BATCH_SPACES = [
    _BOX,
    _DISC,
    _MD,
    _MB,
    spaces.Box(0, 255, (4, 4, 3), np.uint8),
    spaces.Dict({"b": _DISC, "a": spaces.Tuple([_BOX, spaces.Dict({"z": _MB, "y": _MD})])}),
    spaces.Dict({"z": _BOX, "a": _DISC}, sort_keys=False),
    spaces.Tuple([_MB, spaces.Tuple([_BOX]), _DISC]),
]


@pytest.mark.parametrize("space", BATCH_SPACES, ids=lambda s: str(s)[:40])
@pytest.mark.parametrize("n", [1, 3])
def test_batch_leaves_are_views_of_the_batch(space, n):
    batch = create_empty_array(space, n)
    leaves = batch_leaves(space, batch)
    leaf_spaces = array_leaf_spaces(space)
    assert len(leaves) == len(leaf_spaces)
    for leaf, leaf_space in zip(leaves, leaf_spaces):
        assert isinstance(leaf, np.ndarray)
        assert leaf.shape == (n, *leaf_space.shape)
        assert leaf.dtype == leaf_space.dtype
    # writing into each leaf changes the batch itself
    for index, leaf in enumerate(leaves):
        leaf[...] = 1
        flat = _flatten_batch(space, batch)
        assert np.all(flat[index] == 1)
        leaf[...] = 0
        assert np.all(_flatten_batch(space, batch)[index] == 0)


def _flatten_batch(space, batch):
    if isinstance(space, spaces.Dict):
        return [leaf for key, child in space.spaces.items() for leaf in _flatten_batch(child, batch[key])]
    if isinstance(space, spaces.Tuple):
        return [leaf for child, part in zip(space.spaces, batch) for leaf in _flatten_batch(child, part)]
    return [batch]


def test_batch_leaves_identity():
    space = spaces.Dict({"a": _BOX, "b": spaces.Tuple([_DISC, _MB])})
    batch = create_empty_array(space, 2)
    leaves = batch_leaves(space, batch)
    assert leaves[0] is batch["a"]
    assert leaves[1] is batch["b"][0]
    assert leaves[2] is batch["b"][1]


@pytest.mark.parametrize("space", BATCH_SPACES, ids=lambda s: str(s)[:40])
def test_leaves_to_batch_rebuilds_the_batch_and_leaves_no_garbage_cycle(space):
    """The batch made of the leaves is freed as soon as it is dropped: no reference cycle keeps the leaves (the
    observations of a step) alive until the garbage collector's next full pass."""
    batch = create_empty_array(space, 2)
    leaves = [leaf.copy() for leaf in batch_leaves(space, batch)]
    rebuilt = codec.leaves_to_batch(space, leaves)
    assert [leaf is rebuilt_leaf for leaf, rebuilt_leaf in zip(leaves, batch_leaves(space, rebuilt))] == [True] * len(
        leaves
    )
    del rebuilt
    with garbage_collection_paused():
        codec.leaves_to_batch(space, leaves)
        assert gc.collect() == 0, "leaves_to_batch left objects only the garbage collector can free"


def test_all_public_names_exist():
    for name in codec.__all__:
        assert hasattr(codec, name)
