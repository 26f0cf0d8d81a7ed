"""Values and spaces to frames and back, without pickle.

Pure functions, no sockets: everything here can be unit-tested and fuzzed on its own. The format is
specified in ``docs/PROTOCOL.md`` ("Value encoding" and "Space encoding"); in short, a value becomes
one UTF-8 JSON *body* plus a list of binary *buffers* (numpy arrays and bytes travel as raw buffers,
never inside the JSON):

* ``null``, ``true``/``false``, numbers and strings stand for ``None``, ``bool``, ``int`` (64-bit;
  larger ints are tagged), ``float`` and ``str``; a JSON object stands for a ``dict`` with string keys.
* every other value is a JSON array whose first element is a one-letter tag, e.g.
  ``["a", "<f4", [2, 3], 0]`` is a float32 array of shape (2, 3) whose bytes are buffer 0.

The exact Python and numpy types survive the round trip (``int`` stays ``int``, ``np.float32`` stays
``np.float32``, a tuple stays a tuple) because Gymnasium's info batching picks dtypes from them.
"""

from __future__ import annotations

import functools
import json
import math
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import cloudpickle
import numpy as np
from gymnasium import spaces
from gymnasium.spaces import GraphInstance
from gymnasium.vector.utils import batch_space

from gym_remote.errors import EncodeError, ProtocolError

__all__ = [
    "encode",
    "decode",
    "space_to_value",
    "space_from_value",
    "ArrayLeaf",
    "array_leaf_spaces",
    "batch_leaves",
    "leaves_to_batch",
    "BatchedSpaces",
    "check_dtype",
    "dtype_travels",
]

MAX_DEPTH = 64
"""Deepest nesting of containers a decoded value may have."""
MAX_DIMENSIONS = 32
"""Most dimensions an array may have."""

_ARRAY_KINDS = frozenset("biufcmMUS")
_JSON_SCALAR_KINDS = frozenset("biuf")
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_DTYPE_PATTERN = re.compile(r"[<>|=]?[a-zA-Z?][a-zA-Z0-9]{0,15}(\[\w{1,8}\])?")


class _Unencodable(Exception):
    """Raised inside the encoder; carries the path to the offending value outwards."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[tuple[Any, str]] = []  # innermost first while it travels outwards


# ---------------------------------------------------------------------------------------------------
# values -> body + buffers


def encode(value: Any, *, allow_pickle: bool = False, what: str = "value") -> tuple[bytes, list[Any]]:
    """Encode ``value`` as a JSON body and a list of raw buffers.

    Args:
        value: the value to encode (see the module docstring for what travels).
        allow_pickle: pickle values of other types with cloudpickle instead of failing. Only for peers
            that trust each other (see the security notes in the README).
        what: how error messages name the value, e.g. ``"infos of slot 3"``.

    Raises:
        EncodeError: a part of ``value`` cannot travel; the message names the part and its type.

    Example:
        >>> body, buffers = encode({"score": np.float32(0.5), "frame": np.zeros((2, 2), np.uint8)})
        >>> body
        b'{"score":["s","<f4",0.5],"frame":["a","|u1",[2,2],0]}'
        >>> decode(body, [bytes(buffer) for buffer in buffers])
        {'score': np.float32(0.5), 'frame': array([[0, 0],
               [0, 0]], dtype=uint8)}
    """
    buffers: list[Any] = []
    try:
        tree = _Encoder(buffers, allow_pickle).value(value, 0)
    except _Unencodable as failure:
        path = tuple(reversed(failure.path))
        where = what + "".join(text for _, text in path)
        raise EncodeError(f"cannot send {where}: {failure.reason}", reason=failure.reason, path=path) from None
    # ASCII JSON: lone surrogates in str survive as \u escapes, and the body is valid UTF-8 anyway.
    body = json.dumps(tree, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return body.encode("ascii"), buffers


class _Encoder:
    def __init__(self, buffers: list[Any], allow_pickle: bool) -> None:
        self.buffers = buffers
        self.allow_pickle = allow_pickle

    def add_buffer(self, buffer: Any) -> int:
        self.buffers.append(buffer)
        return len(self.buffers) - 1

    def value(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int and _INT64_MIN <= value <= _INT64_MAX:
            return value
        if kind is float and math.isfinite(value):
            return value
        if depth >= MAX_DEPTH:
            raise _Unencodable(f"it is nested deeper than {MAX_DEPTH} levels")
        if kind is int:
            return ["i", format(value, "x")]
        if kind is float:
            return ["f", repr(value)]
        if kind is dict or kind is list or kind is tuple:
            return self.container(value, depth)
        if isinstance(value, np.ndarray):
            return self.array(np.asarray(value), depth)
        if isinstance(value, np.generic):
            return self.numpy_scalar(value)
        if kind is GraphInstance:
            return [
                "g",
                *(self.item(part, name, f".{name}", depth) for name, part in zip(value._fields, value)),
            ]
        if isinstance(value, (bytes, bytearray, memoryview)):
            return ["b", self.add_buffer(bytes(value))]
        if isinstance(value, (dict, list, tuple)) and not self.allow_pickle:
            # Subclasses (OrderedDict, named tuples) travel as their base container.
            return self.container(value, depth)
        return self.pickle(value, f"values of type {kind.__module__}.{kind.__qualname__}")

    def item(self, value: Any, key: Any, text: str, depth: int) -> Any:
        try:
            return self.value(value, depth + 1)
        except _Unencodable as failure:
            failure.path.append((key, text))
            raise

    def container(self, value: Any, depth: int) -> Any:
        if isinstance(value, dict):
            if all(type(key) is str for key in value):
                return {key: self.item(item, key, f"[{key!r}]", depth) for key, item in value.items()}
            tree: list[Any] = ["d"]
            for key, item in value.items():
                tree.append(self.item(key, key, f" (key {key!r})", depth))
                tree.append(self.item(item, key, f"[{key!r}]", depth))
            return tree
        tag = "l" if isinstance(value, list) else "t"
        return [tag, *(self.item(item, index, f"[{index}]", depth) for index, item in enumerate(value))]

    def array(self, array: np.ndarray, depth: int) -> Any:
        dtype = array.dtype
        if array.ndim > MAX_DIMENSIONS:
            raise _Unencodable(f"arrays have at most {MAX_DIMENSIONS} dimensions, this one has {array.ndim}")
        if dtype == np.dtype(object):
            items = [self.item(item, index, f"[{index}]", depth) for index, item in enumerate(array.ravel())]
            return ["o", list(array.shape), items]
        if not dtype_travels(dtype):
            return self.pickle(array, f"numpy arrays of dtype {dtype}")
        # A flat byte view: a plain buffer for ZeroMQ whatever the dtype (datetime) or shape (zeros).
        flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return ["a", dtype.str, list(array.shape), self.add_buffer(flat)]

    def numpy_scalar(self, value: np.generic) -> Any:
        dtype = value.dtype
        if dtype.kind == "b":
            return ["s", dtype.str, bool(value)]
        if dtype.kind in "iu":
            return ["s", dtype.str, int(value)]
        if dtype.kind == "f" and dtype.itemsize <= 8:
            number = float(value)
            return ["s", dtype.str, number if math.isfinite(number) else repr(number)]
        if dtype.kind in "US" and dtype.itemsize == 0:  # an empty string scalar: one NUL unit reads back as ""
            dtype = np.dtype(f"{dtype.byteorder if dtype.kind == 'U' else '|'}{dtype.kind}1")
            return ["S", dtype.str, self.add_buffer(bytes(dtype.itemsize))]
        if not dtype_travels(dtype):
            return self.pickle(value, f"numpy scalars of dtype {dtype}")
        return ["S", dtype.str, self.add_buffer(np.asarray(value).tobytes())]

    def pickle(self, value: Any, description: str) -> Any:
        if not self.allow_pickle:
            raise _Unencodable(
                f"{description} cannot travel without pickle; use None, bool, int, float, str, bytes, list, "
                "tuple, dict, numpy arrays or numpy scalars, or enable the trusted pickle mode "
                "(allow_pickle=True) between peers that trust each other"
            )
        try:
            return ["p", self.add_buffer(cloudpickle.dumps(value))]
        except Exception as error:  # pickling can fail in many ways
            raise _Unencodable(f"cloudpickle failed for {type(value).__qualname__}: {error}") from None


def dtype_travels(dtype: np.dtype) -> bool:
    """Whether arrays of ``dtype`` can travel as raw buffers (plain numbers, bools, strings, datetimes)."""
    return dtype.kind in _ARRAY_KINDS and dtype.fields is None and dtype.itemsize > 0 and not dtype.hasobject


# ---------------------------------------------------------------------------------------------------
# body + buffers -> values


def decode(body: bytes, buffers: Sequence[Any] = (), *, allow_pickle: bool = False) -> Any:
    """Decode a value encoded by :func:`encode`.

    Raises:
        ProtocolError: the body or buffers are malformed, or hold a pickle while ``allow_pickle`` is off.
    """
    try:
        text = bytes(body).decode("utf-8")
        tree = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
        decoder = _Decoder(buffers, allow_pickle)
        value = decoder.value(tree, 0)
        decoder.check_all_used()
        return value
    except ProtocolError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, IndexError, KeyError) as error:
        raise ProtocolError(f"malformed value: {type(error).__name__}: {error}") from None


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"malformed value: bare {name} is not allowed in a body (use the 'f' tag)")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ProtocolError(f"malformed value: the number {text[:40]} is out of range (use the 'f' tag)")
    return number


class _Decoder:
    def __init__(self, buffers: Sequence[Any], allow_pickle: bool) -> None:
        self.buffers = buffers
        self.allow_pickle = allow_pickle
        self.used: set[int] = set()

    def buffer(self, index: Any) -> memoryview:
        if type(index) is not int or not 0 <= index < len(self.buffers):
            raise ProtocolError(f"malformed value: buffer index {index!r} (the message has {len(self.buffers)})")
        self.used.add(index)
        view = memoryview(self.buffers[index])
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")

    def check_all_used(self) -> None:
        """Every buffer frame must be referred to: an extra frame makes a message malformed, it is not padding."""
        if len(self.used) != len(self.buffers):
            unused = len(self.buffers) - len(self.used)
            raise ProtocolError(
                f"malformed value: {unused} of its {len(self.buffers)} buffer frames {'is' if unused == 1 else 'are'} "
                "not referred to by the body"
            )

    def value(self, tree: Any, depth: int) -> Any:
        kind = type(tree)
        if tree is None or kind is bool or kind is int or kind is float or kind is str:
            return tree
        if depth >= MAX_DEPTH:
            raise ProtocolError(f"malformed value: nested deeper than {MAX_DEPTH} levels")
        if kind is dict:
            return {key: self.value(item, depth + 1) for key, item in tree.items()}
        if kind is not list or not tree or type(tree[0]) is not str:
            raise ProtocolError(f"malformed value: untagged JSON array {_preview(tree)}")
        tag = tree[0]
        handler = self._HANDLERS.get(tag)
        if handler is None:
            raise ProtocolError(f"malformed value: unknown tag {tag!r}")
        return handler(self, tree, depth + 1)

    def _list(self, tree: list, depth: int) -> list:
        return [self.value(item, depth) for item in tree[1:]]

    def _tuple(self, tree: list, depth: int) -> tuple:
        return tuple(self.value(item, depth) for item in tree[1:])

    def _dict(self, tree: list, depth: int) -> dict:
        if len(tree) % 2 != 1:
            raise ProtocolError("malformed value: a 'd' array needs key/value pairs")
        result = {}
        for position in range(1, len(tree), 2):
            key = self.value(tree[position], depth)
            try:
                known = key in result
            except TypeError:
                raise ProtocolError(f"malformed value: dict key of type {type(key).__name__} is not hashable") from None
            if known:  # equal under Python's == (1, 1.0 and True are one key): which value is meant? (PROTOCOL.md §3.1)
                raise ProtocolError(f"malformed value: a 'd' array repeats the dict key {_preview(key)}")
            result[key] = self.value(tree[position + 1], depth)
        return result

    def _float(self, tree: list, depth: int) -> float:
        _expect_length(tree, 2)
        if tree[1] not in _NON_FINITE:
            raise ProtocolError(f"malformed value: 'f' tag expects 'nan', 'inf' or '-inf', got {_preview(tree[1])}")
        return _NON_FINITE[tree[1]]

    def _array(self, tree: list, depth: int) -> np.ndarray:
        _expect_length(tree, 4)
        dtype = check_dtype(tree[1])
        shape = _check_shape(tree[2])
        data = self.buffer(tree[3])
        expected = math.prod(shape) * dtype.itemsize
        if data.nbytes != expected:
            raise ProtocolError(
                f"malformed value: array of dtype {dtype} and shape {tuple(shape)} needs {expected} bytes, "
                f"its buffer has {data.nbytes}"
            )
        _check_unicode(dtype, data)
        return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape)

    def _object_array(self, tree: list, depth: int) -> np.ndarray:
        _expect_length(tree, 3)
        shape = _check_shape(tree[1])
        items = tree[2]
        if type(items) is not list or len(items) != math.prod(shape):
            raise ProtocolError("malformed value: 'o' array item count does not match its shape")
        array = np.empty(len(items), dtype=object)
        for index, item in enumerate(items):
            array[index] = self.value(item, depth)
        return array.reshape(shape)

    def _numpy_scalar(self, tree: list, depth: int) -> np.generic:
        _expect_length(tree, 3)
        dtype = check_dtype(tree[1])
        number = tree[2]
        if dtype.kind == "b" and type(number) is bool:
            return dtype.type(number)
        if dtype.kind in "iu" and type(number) is int:
            try:
                return dtype.type(number)
            except OverflowError:
                raise ProtocolError(f"malformed value: {number} does not fit in {dtype}") from None
        if dtype.kind == "f" and dtype.itemsize <= 8:
            if type(number) in (int, float):
                with np.errstate(over="ignore"):
                    scalar = dtype.type(number)
                if not np.isfinite(scalar):
                    raise ProtocolError(f"malformed value: {number} does not fit in {dtype} (use 'inf' for infinity)")
                return scalar
            if type(number) is str and number in _NON_FINITE:
                return dtype.type(_NON_FINITE[number])
        raise ProtocolError(f"malformed value: 's' scalar {_preview(number)} does not suit dtype {dtype}")

    def _raw_scalar(self, tree: list, depth: int) -> np.generic:
        _expect_length(tree, 3)
        dtype = check_dtype(tree[1])
        data = self.buffer(tree[2])
        if data.nbytes != dtype.itemsize:
            raise ProtocolError(
                f"malformed value: scalar of dtype {dtype} needs {dtype.itemsize} bytes, got {data.nbytes}"
            )
        _check_unicode(dtype, data)
        return np.frombuffer(data, dtype=dtype)[0]

    def _bytes(self, tree: list, depth: int) -> bytes:
        _expect_length(tree, 2)
        return self.buffer(tree[1]).tobytes()

    def _graph(self, tree: list, depth: int) -> GraphInstance:
        _expect_length(tree, 4)
        return GraphInstance(*(self.value(part, depth) for part in tree[1:]))

    def _pickle(self, tree: list, depth: int) -> Any:
        _expect_length(tree, 2)
        if not self.allow_pickle:
            raise ProtocolError(
                "the peer sent a pickled value, but pickle is not allowed on this connection "
                "(it would let the peer run code here); only the trusted mode accepts pickles"
            )
        return _unpickle(self.buffer(tree[1]))

    def _big_int(self, tree: list, depth: int) -> int:
        _expect_length(tree, 2)
        digits = tree[1]
        if type(digits) is not str or not re.fullmatch(r"-?[0-9a-f]+", digits):
            raise ProtocolError(f"malformed value: 'i' expects lowercase hex digits, got {_preview(digits)}")
        return int(digits, 16)

    _HANDLERS = {
        "l": _list,
        "t": _tuple,
        "d": _dict,
        "f": _float,
        "a": _array,
        "o": _object_array,
        "s": _numpy_scalar,
        "S": _raw_scalar,
        "b": _bytes,
        "g": _graph,
        "p": _pickle,
        "i": _big_int,
    }


def _expect_length(tree: list, length: int) -> None:
    if len(tree) != length:
        raise ProtocolError(f"malformed value: tag {tree[0]!r} takes {length - 1} fields, got {len(tree) - 1}")


def _check_shape(shape: Any) -> list[int]:
    if type(shape) is not list or len(shape) > MAX_DIMENSIONS or any(type(n) is not int or n < 0 for n in shape):
        raise ProtocolError(f"malformed value: bad array shape {_preview(shape)}")
    return shape


def check_dtype(name: Any) -> np.dtype:
    """Parse a dtype string from the wire, refusing anything that could hold Python objects.

    Raises:
        ProtocolError: ``name`` is not a plain numeric, boolean, string or datetime dtype.
    """
    if type(name) is not str or not _DTYPE_PATTERN.fullmatch(name):
        raise ProtocolError(f"malformed value: bad dtype {_preview(name)}")
    return _parse_dtype(name)


@functools.lru_cache(maxsize=256)
def _parse_dtype(name: str) -> np.dtype:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # deprecated aliases are refused, not warned about
            dtype = np.dtype(name)
    except Exception:  # numpy raises several types for strings it cannot parse
        raise ProtocolError(f"malformed value: unknown dtype {name!r}") from None
    if not dtype_travels(dtype):
        raise ProtocolError(f"malformed value: dtype {name!r} is not allowed on the wire")
    return dtype


def _check_unicode(dtype: np.dtype, data: memoryview) -> None:
    """Refuse 'U' data holding code points that are not characters (numpy would fail when reading them),
    and bool data holding bytes other than 0 and 1."""
    if dtype.kind == "b" and data.nbytes and np.frombuffer(data, dtype=np.uint8).max() > 1:
        raise ProtocolError("malformed value: a bool array or scalar holds a byte other than 0 and 1")
    if dtype.kind == "U" and data.nbytes:
        units = np.frombuffer(data, dtype=dtype.byteorder.replace("|", "=") + "u4")
        if units.max() > 0x10FFFF:
            raise ProtocolError("malformed value: a unicode array holds a code point beyond U+10FFFF")


def _unpickle(data: memoryview) -> Any:
    try:
        return cloudpickle.loads(data)
    except Exception as error:  # a malformed pickle can raise anything
        raise ProtocolError(f"malformed value: unpickling failed: {type(error).__name__}: {error}") from None


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------------
# spaces <-> values

_BOX_LIKE = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
LEAF_SPACES = _BOX_LIKE
"""The spaces whose values are one array each (the leaves of :func:`array_leaf_spaces`)."""


class ArrayLeaf(Protocol):
    """An array leaf space (one of :data:`LEAF_SPACES`) as its users see it: each value is one array of ``shape``
    and ``dtype``."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...


def leaf_bytes(space: ArrayLeaf) -> int:
    """The bytes of one value of the array leaf ``space`` (one of :data:`LEAF_SPACES`)."""
    return int(np.prod(space.shape, dtype=np.int64)) * np.dtype(space.dtype).itemsize


def space_to_value(space: spaces.Space, *, allow_pickle: bool = False) -> Any:
    """Describe ``space`` as a value that :func:`encode` can send (see ``docs/PROTOCOL.md``).

    Gymnasium's own space classes travel as plain descriptions. Other classes travel pickled when
    ``allow_pickle`` is on; otherwise a subclass of a Gymnasium space travels as that base class, and
    anything else raises :class:`EncodeError`.
    """
    kind = type(space)
    if allow_pickle and kind.__module__.split(".")[0] != "gymnasium":
        return {"space": "pickle", "data": cloudpickle.dumps(space)}
    description = _describe_space(space, allow_pickle)
    rng = space._np_random  # None until the space is seeded or first sampled
    if rng is not None:
        description["rng"] = rng_to_value(rng)
    return description


def _describe_space(space: spaces.Space, allow_pickle: bool) -> dict[str, Any]:
    kind = type(space)
    if isinstance(space, spaces.Box):
        return {"space": "Box", "low": np.asarray(space.low), "high": np.asarray(space.high), "dtype": space.dtype.str}
    if isinstance(space, spaces.Discrete):
        dtype = np.dtype(getattr(space, "dtype", np.int64))
        return {"space": "Discrete", "n": int(space.n), "start": int(space.start), "dtype": dtype.str}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "space": "MultiDiscrete",
            "nvec": np.asarray(space.nvec),
            "start": np.asarray(space.start),
            "dtype": space.dtype.str,
        }
    if isinstance(space, spaces.MultiBinary):
        n = np.asarray(space.n)
        return {"space": "MultiBinary", "n": int(n) if n.ndim == 0 else [int(v) for v in n]}
    if isinstance(space, spaces.Dict):
        return {
            "space": "Dict",
            "spaces": [[key, space_to_value(sub, allow_pickle=allow_pickle)] for key, sub in space.spaces.items()],
        }
    if isinstance(space, spaces.Tuple):
        return {"space": "Tuple", "spaces": [space_to_value(sub, allow_pickle=allow_pickle) for sub in space.spaces]}
    if isinstance(space, spaces.Text):
        charset = "".join(getattr(space, "_char_list", space.characters))
        return {"space": "Text", "min_length": space.min_length, "max_length": space.max_length, "charset": charset}
    if isinstance(space, spaces.Graph):
        edge = None if space.edge_space is None else space_to_value(space.edge_space, allow_pickle=allow_pickle)
        return {
            "space": "Graph",
            "node_space": space_to_value(space.node_space, allow_pickle=allow_pickle),
            "edge_space": edge,
        }
    if isinstance(space, spaces.Sequence):
        return {
            "space": "Sequence",
            "feature_space": space_to_value(space.feature_space, allow_pickle=allow_pickle),
            "stack": bool(space.stack),
        }
    if isinstance(space, spaces.OneOf):
        return {"space": "OneOf", "spaces": [space_to_value(sub, allow_pickle=allow_pickle) for sub in space.spaces]}
    raise EncodeError(
        f"cannot send the space {space!r}: {kind.__qualname__} is not one of Gymnasium's space classes; "
        "use Gymnasium spaces, or enable the trusted pickle mode (allow_pickle=True)"
    )


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
"""NumPy's bit generators, by the names their ``state`` dicts carry."""


def rng_to_value(rng: np.random.Generator) -> dict[str, Any]:
    """A random generator's exact state as a value (see ``docs/PROTOCOL.md``, space descriptions)."""
    state = rng.bit_generator.state
    if state.get("bit_generator") not in _BIT_GENERATORS:
        raise EncodeError(f"cannot send a random generator with the bit generator {state.get('bit_generator')!r}")
    return dict(state)


def rng_from_value(value: Any) -> np.random.Generator:
    """A generator in the state :func:`rng_to_value` described.

    Raises:
        ProtocolError: the description is malformed or names an unknown bit generator.
    """
    name = value.get("bit_generator") if type(value) is dict else None
    if name not in _BIT_GENERATORS:
        raise ProtocolError(f"malformed random generator state: bit generator {_preview(name)}")
    bit_generator = getattr(np.random, name)()
    try:
        bit_generator.state = value
    except (TypeError, ValueError, KeyError, OverflowError) as error:
        raise ProtocolError(f"malformed random generator state for {name}: {error}") from None
    return np.random.Generator(bit_generator)


def space_from_value(value: Any, *, allow_pickle: bool = False) -> spaces.Space:
    """Rebuild a space from :func:`space_to_value`'s description.

    Raises:
        ProtocolError: the description is malformed or names an unknown space.
    """
    try:
        return _space_from_value(value, allow_pickle, 0)
    except ProtocolError:
        raise
    except Exception as error:  # the space constructors validate their arguments
        raise ProtocolError(f"malformed space description: {type(error).__name__}: {error}") from None


def _space_from_value(value: Any, allow_pickle: bool, depth: int) -> spaces.Space:
    if type(value) is not dict or "space" not in value:
        raise ProtocolError(f"malformed space description: {_preview(value)}")
    if depth > MAX_DEPTH:
        raise ProtocolError(f"malformed space description: nested deeper than {MAX_DEPTH} levels")

    space = _build_space(value, allow_pickle, depth)
    if "rng" in value and value["space"] != "pickle":
        space._np_random = rng_from_value(value["rng"])
    return space


def _build_space(value: dict, allow_pickle: bool, depth: int) -> spaces.Space:
    def sub(item: Any) -> spaces.Space:
        return _space_from_value(item, allow_pickle, depth + 1)

    name = value["space"]
    if name == "Box":
        return spaces.Box(
            low=_array_field(value, "low"), high=_array_field(value, "high"), dtype=check_dtype(value["dtype"])
        )
    if name == "Discrete":
        n, start = _int_field(value, "n"), _int_field(value, "start")
        dtype = check_dtype(value.get("dtype", "<i8"))
        return spaces.Discrete(n, start=start) if dtype == np.int64 else spaces.Discrete(n, start=start, dtype=dtype)
    if name == "MultiDiscrete":
        return spaces.MultiDiscrete(
            _array_field(value, "nvec"), dtype=check_dtype(value["dtype"]), start=_array_field(value, "start")
        )
    if name == "MultiBinary":
        n = value["n"]
        if not (type(n) is int or (type(n) is list and all(type(v) is int for v in n))):
            raise ProtocolError(f"malformed space description: MultiBinary n={_preview(n)}")
        return spaces.MultiBinary(n)
    if name == "Dict":
        pairs = _list_field(value, "spaces")
        if any(type(pair) is not list or len(pair) != 2 for pair in pairs):
            raise ProtocolError("malformed space description: Dict spaces must be [key, space] pairs")
        return spaces.Dict([(key, sub(item)) for key, item in pairs])  # a sequence keeps the key order
    if name == "Tuple":
        return spaces.Tuple([sub(item) for item in _list_field(value, "spaces")])
    if name == "Text":
        charset = value["charset"]
        if type(charset) is not str or not charset:
            raise ProtocolError("malformed space description: Text charset must be a non-empty string")
        return spaces.Text(_int_field(value, "max_length"), min_length=_int_field(value, "min_length"), charset=charset)
    if name == "Graph":
        edge = value["edge_space"]
        return spaces.Graph(node_space=sub(value["node_space"]), edge_space=None if edge is None else sub(edge))
    if name == "Sequence":
        stack = value["stack"]
        if type(stack) is not bool:
            raise ProtocolError("malformed space description: Sequence stack must be a bool")
        return spaces.Sequence(sub(value["feature_space"]), stack=stack)
    if name == "OneOf":
        return spaces.OneOf([sub(item) for item in _list_field(value, "spaces")])
    if name == "pickle":
        if not allow_pickle:
            raise ProtocolError("the peer sent a pickled space, but pickle is not allowed on this connection")
        data = value["data"]
        if type(data) is not bytes:
            raise ProtocolError("malformed space description: pickle data must be bytes")
        space = _unpickle(memoryview(data))
        if not isinstance(space, spaces.Space):
            raise ProtocolError(f"a pickled space unpickled to {type(space).__name__}, not a Space")
        return space
    raise ProtocolError(f"malformed space description: unknown space {_preview(name)}")


def _array_field(value: dict, key: str) -> np.ndarray:
    field = value[key]
    if not isinstance(field, np.ndarray):
        raise ProtocolError(f"malformed space description: {key} must be an array")
    return field


def _int_field(value: dict, key: str) -> int:
    field = value[key]
    if type(field) is not int:
        raise ProtocolError(f"malformed space description: {key} must be an int")
    return field


def _list_field(value: dict, key: str) -> list:
    field = value[key]
    if type(field) is not list:
        raise ProtocolError(f"malformed space description: {key} must be a list")
    return field


# ---------------------------------------------------------------------------------------------------
# array layouts


class BatchedSpaces:
    """``space`` batched ``count`` times (``batched[count]``), each made once: ``batch_space`` takes
    tens of microseconds, too long for every partial batch."""

    def __init__(self, space: spaces.Space) -> None:
        self.space = space
        self._made: dict[int, spaces.Space] = {}

    def __getitem__(self, count: int) -> spaces.Space:
        batched = self._made.get(count)
        if batched is None:
            batched = self._made[count] = batch_space(self.space, count)
        return batched


def array_leaf_spaces(space: spaces.Space) -> list[ArrayLeaf] | None:
    """The array leaves of ``space`` in wire order, or ``None`` if its samples are not fixed-size arrays.

    Box, Discrete, MultiDiscrete and MultiBinary are leaves; Dict (in its key order) and Tuple nest
    them. A batch of such a space is one array per leaf, which travels as one raw frame per leaf.
    """
    if isinstance(space, _BOX_LIKE):
        # Gymnasium types the shape and dtype of Discrete, MultiDiscrete and MultiBinary as Space's, optional; a
        # built one has both
        return [space]  # pyright: ignore[reportReturnType]
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        children = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        leaves: list[ArrayLeaf] = []
        for child in children:
            child_leaves = array_leaf_spaces(child)
            if child_leaves is None:
                return None
            leaves.extend(child_leaves)
        return leaves
    return None


def batch_leaves(space: spaces.Space, batch: Any) -> list[np.ndarray]:
    """The leaf arrays of ``batch`` (made by ``create_empty_array(space, n)``), in wire order."""
    if isinstance(space, _BOX_LIKE):
        return [batch]
    if isinstance(space, spaces.Dict):
        return [leaf for key, child in space.spaces.items() for leaf in batch_leaves(child, batch[key])]
    # the rest are Tuples (of array spaces only, as array_leaf_spaces says): no isinstance on the step path
    children = space.spaces  # pyright: ignore[reportAttributeAccessIssue]
    return [leaf for child, part in zip(children, batch, strict=True) for leaf in batch_leaves(child, part)]


def leaves_to_batch(space: spaces.Space, leaves: Sequence[np.ndarray]) -> Any:
    """The batch (array, dict or tuple) of ``space`` made of ``leaves``: the inverse of :func:`batch_leaves`."""
    return _rebuild(space, iter(leaves))


def _rebuild(node: spaces.Space, remaining: Iterator[np.ndarray]) -> Any:
    # a module-level function, not a closure calling itself: that would be a reference cycle holding the
    # leaves (observations, on the step path) until the garbage collector's next full pass
    if isinstance(node, _BOX_LIKE):
        return next(remaining)
    if isinstance(node, spaces.Dict):
        return {key: _rebuild(child, remaining) for key, child in node.spaces.items()}
    # the rest are Tuples (see batch_leaves): no isinstance on the step path
    return tuple(_rebuild(child, remaining) for child in node.spaces)  # pyright: ignore[reportAttributeAccessIssue]
