"""Messages between a RemoteVectorEnv (the server) and its EnvClients, as frames.

Pure functions and constants, no sockets; ``docs/PROTOCOL.md`` is the specification this module
implements. Every message is a ZeroMQ multipart message whose first frame is a 16-byte header::

    magic "GR" | version u8 | kind u8 | flags u16 | count u16 | seq u64      (little-endian)

followed by kind-specific bytes in the same frame (only RESULT and STEP have any), then, when
``flags & FLAG_SUBSET``, an index frame naming the envs a command is for, then the message's array
frames, then, when ``flags & FLAG_VALUE``, a value section: one JSON body frame and the buffer frames
it refers to (see :mod:`gym_remote.codec`).
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from gym_remote import codec
from gym_remote.errors import EncodeError, ProtocolError

__all__ = [
    "PROTOCOL_VERSION",
    "MAGIC",
    "Kind",
    "FLAG_VALUE",
    "FLAG_DTYPES",
    "FLAG_SUBSET",
    "FLAG_CROWDED",
    "FLAG_EACH",
    "WRAPPERS_QUERY",
    "NO_OPTIONS",
    "HAS_ATTR_QUERY",
    "index_frame",
    "parse_index_frame",
    "pack_step_header",
    "parse_step_dtypes",
    "Header",
    "pack_header",
    "add_flags",
    "parse_header",
    "ResultFrame",
    "parse_result_scalars",
    "parse_one_result",
    "value_frames",
    "read_value",
    "message",
    "path_text",
    "kind_name",
    "format_slots",
]

PROTOCOL_VERSION = 2
MAGIC = b"GR"
HEADER = struct.Struct("<2sBBHHQ")
HEADER_SIZE = HEADER.size  # 16

FLAG_VALUE = 0x1
"""A value section (JSON body + buffers) follows the message's array frames."""

FLAG_DTYPES = 0x2
"""STEP only: the action frames have the dtypes listed after the header, not the action space's."""

FLAG_SUBSET = 0x4
"""A command for some of the client's envs: frame 1 lists their indexes; the reply covers only those."""

FLAG_CROWDED = 0x8
"""Commands only, a hint: the server's process has no core to spare for a busy wait (its other threads keep
one busy), so a client should not spin waiting for its next command while commands carry it."""

FLAG_EACH = 0x10
"""STEP only: each env stands alone. The client steps every env of the command even if one raises, and answers
RESULT, whose value section lists the errors per env (``errors``)."""

WRAPPERS_QUERY = "gym_remote:wrappers"
"""A CALL ``name`` no attribute can have: it asks for the classes of each env's wrappers (PROTOCOL.md §5.3)."""


class _NoOptions:
    def __repr__(self) -> str:
        return "NO_OPTIONS"


NO_OPTIONS: Any = _NoOptions()
"""RESET options that leave the field out: the client calls ``env.reset(seed=...)`` without the
``options`` keyword (SB3's convention), where ``None`` travels as ``null`` and is passed (§5.2)."""

HAS_ATTR_QUERY = "has_attr"
"""A CALL ``query``: whether each env has the attribute ``name`` (through wrappers), without calling it (§5.3)."""

MAX_ENVS_PER_CLIENT = 0xFFFF
INDEX = np.dtype("<u2")


class Kind(enum.IntEnum):
    """Message kinds. Client to server: HELLO, BYE, STATUS, RESULT, CALL_RESULT, ERROR; the rest server to client."""

    HELLO = 1
    WELCOME = 2
    REFUSE = 3
    BYE = 4
    CLOSE = 5
    PING = 6
    EVICT = 7
    STATUS = 8
    STATUS_REPORT = 9
    RESET = 10
    STEP = 11
    CALL = 12
    SET_ATTR = 13
    RESULT = 20
    CALL_RESULT = 21
    ERROR = 22


_KINDS = frozenset(int(kind) for kind in Kind)


class Header(NamedTuple):
    """A parsed header frame."""

    version: int
    kind: int
    flags: int
    # the wire's name (PROTOCOL.md), shadowing tuple.count(), which no one calls on a Header
    count: int  # pyright: ignore[reportIncompatibleMethodOverride]
    seq: int


def pack_header(kind: Kind, seq: int = 0, count: int = 0, flags: int = 0) -> bytes:
    """The 16-byte header of a message."""
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, kind, flags, count, seq)


def add_flags(frame: bytes, flags: int) -> bytes:
    """A copy of the header frame ``frame`` (and what follows its 16 bytes) with ``flags`` set as well."""
    magic, version, kind, old, count, seq = HEADER.unpack_from(frame)
    return HEADER.pack(magic, version, kind, old | flags, count, seq) + frame[HEADER_SIZE:]


def parse_header(frame: bytes | memoryview) -> Header:
    """Parse a header frame; the version is returned, not checked, so a peer can answer a mismatch.

    Raises:
        ProtocolError: the frame is too short, lacks the magic bytes, or names an unknown kind.
    """
    if len(frame) < HEADER_SIZE:
        raise ProtocolError(f"malformed message: header frame of {len(frame)} bytes, expected at least {HEADER_SIZE}")
    magic, version, kind, flags, count, seq = HEADER.unpack_from(frame)
    if magic != MAGIC:
        raise ProtocolError(f"malformed message: header starts with {bytes(magic)!r}, expected {MAGIC!r}")
    if version == PROTOCOL_VERSION and kind not in _KINDS:
        raise ProtocolError(f"malformed message: unknown message kind {kind}")
    return Header(version, kind, flags, count, seq)


class ResultFrame:
    """The header frame of a RESULT message, preallocated and refilled in place on every step.

    It carries the header and, for the client's ``count`` envs, ``float64`` rewards then ``uint8``
    terminated and truncated flags. Writing into :attr:`rewards`, :attr:`terminated` and
    :attr:`truncated` writes into the frame.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.buffer = bytearray(HEADER_SIZE + 10 * count)
        self.rewards = np.frombuffer(self.buffer, dtype="<f8", count=count, offset=HEADER_SIZE)
        self.terminated = np.frombuffer(self.buffer, dtype=np.bool_, count=count, offset=HEADER_SIZE + 8 * count)
        self.truncated = np.frombuffer(self.buffer, dtype=np.bool_, count=count, offset=HEADER_SIZE + 9 * count)

    def pack(self, seq: int, flags: int) -> bytearray:
        """Write the header for ``seq`` and return the whole frame."""
        HEADER.pack_into(self.buffer, 0, MAGIC, PROTOCOL_VERSION, Kind.RESULT, flags, self.count, seq)
        return self.buffer

    def pack_subset(self, seq: int, flags: int, indexes: Sequence[int] | np.ndarray) -> bytes:
        """A new frame for the envs ``indexes`` only (the answer to a command with :data:`FLAG_SUBSET`)."""
        return b"".join(
            [
                pack_header(Kind.RESULT, seq, len(indexes), flags),
                self.rewards[indexes].tobytes(),
                self.terminated[indexes].tobytes(),
                self.truncated[indexes].tobytes(),
            ]
        )


def slab_frame_sizes(count: int, observation_space: Any, action_space: Any) -> tuple[list[int], list[int]] | None:
    """The frame sizes of the two messages a data channel's slabs carry (PROTOCOL.md §13.6), for a client of
    ``count`` envs: a STEP for all its envs with array actions in the action space's dtypes, and a RESULT for
    all its envs without a value section. None if either space has no array layout."""
    observation_leaves = codec.array_leaf_spaces(observation_space)
    action_leaves = codec.array_leaf_spaces(action_space)
    if observation_leaves is None or action_leaves is None:
        return None
    step = [HEADER_SIZE, *(count * codec.leaf_bytes(leaf) for leaf in action_leaves)]
    result = [HEADER_SIZE + 10 * count, *(count * codec.leaf_bytes(leaf) for leaf in observation_leaves)]
    return step, result


def pack_step_header(seq: int, count: int, dtypes: Sequence[np.dtype] | None = None, *, subset: bool = False) -> bytes:
    """The header frame of a STEP whose actions travel as array frames.

    ``dtypes`` (one per action leaf) is given when the actions do not have the action space's
    dtypes; the frame then ends with their JSON list and carries :data:`FLAG_DTYPES`. ``subset``:
    an index frame follows (:data:`FLAG_SUBSET`).
    """
    flags = FLAG_SUBSET if subset else 0
    if dtypes is None:
        return pack_header(Kind.STEP, seq, count, flags)
    listing = json.dumps([dtype.str for dtype in dtypes]).encode("ascii")
    return pack_header(Kind.STEP, seq, count, flags | FLAG_DTYPES) + listing


def index_frame(indexes: Sequence[int]) -> bytes:
    """The index frame of a command for some of a client's envs: their indexes as little-endian uint16."""
    return np.asarray(indexes, dtype=INDEX).tobytes()


def parse_index_frame(frame: bytes, count: int, hosted: int) -> list[int]:
    """The env indexes an index frame lists: ``count`` (at least 1) distinct indexes below ``hosted``.

    Raises:
        ProtocolError: the frame does not hold ``count`` distinct indexes of the client's envs.
    """
    if count < 1:
        raise ProtocolError("malformed index frame: a command with FLAG_SUBSET must select at least one env")
    if len(frame) != INDEX.itemsize * count:
        raise ProtocolError(f"malformed index frame: {len(frame)} bytes, expected {INDEX.itemsize * count}")
    indexes = np.frombuffer(frame, dtype=INDEX).tolist()
    if len(set(indexes)) != count or any(index >= hosted for index in indexes):
        raise ProtocolError(f"malformed index frame: {count} distinct indexes below {hosted} expected, got {indexes}")
    return indexes


def parse_step_dtypes(frame: bytes, leaves: int) -> list[np.dtype]:
    """The action dtypes listed in a STEP header frame that carries :data:`FLAG_DTYPES`.

    Raises:
        ProtocolError: the listing is malformed, names a dtype not allowed on the wire, or has the
            wrong length.
    """
    try:
        names = json.loads(bytes(frame[HEADER_SIZE:]).decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("malformed STEP: the dtype listing after the header is not JSON") from None
    if type(names) is not list or len(names) != leaves:
        raise ProtocolError(f"malformed STEP: expected {leaves} action dtypes after the header")
    return [codec.check_dtype(name) for name in names]


def parse_result_scalars(frame: bytes, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of the rewards, terminated and truncated arrays in a RESULT header frame.

    Raises:
        ProtocolError: the frame's length does not fit ``count`` envs, or a flag is neither 0 nor 1.
    """
    if len(frame) != HEADER_SIZE + 10 * count:
        raise ProtocolError(
            f"malformed RESULT: header frame of {len(frame)} bytes, "
            f"expected {HEADER_SIZE + 10 * count} for {count} envs"
        )
    flags_start = HEADER_SIZE + 8 * count
    if bytes(frame[flags_start:]).translate(None, b"\x00\x01"):  # a byte other than 0 or 1 is left
        raise ProtocolError("malformed RESULT: terminated/truncated bytes must be 0 or 1")
    rewards = np.frombuffer(frame, "<f8", count, HEADER_SIZE)  # (positional arguments: keywords cost more)
    terminated = np.frombuffer(frame, np.bool_, count, flags_start)
    return rewards, terminated, np.frombuffer(frame, np.bool_, count, flags_start + count)


def parse_one_result(frame: bytes) -> tuple[float, bool, bool]:
    """:func:`parse_result_scalars` for one env, as Python values: a few times faster than arrays of one.

    Raises:
        ProtocolError: as :func:`parse_result_scalars`.
    """
    if len(frame) != _ONE_RESULT_SIZE or frame[_ONE_RESULT_SIZE - 2] > 1 or frame[_ONE_RESULT_SIZE - 1] > 1:
        parse_result_scalars(frame, 1)  # (raises the error that says what is wrong)
    return _ONE_RESULT.unpack_from(frame, HEADER_SIZE)


_ONE_RESULT = struct.Struct("<d??")
_ONE_RESULT_SIZE = HEADER_SIZE + _ONE_RESULT.size


Label = Callable[[tuple[tuple[Any, str], ...]], str]
"""Names the place of a value that cannot be encoded, from its path in the message (for errors)."""


def value_frames(
    value: Any, *, allow_pickle: bool = False, what: str = "value", label: Label | None = None
) -> list[Any]:
    """A value section: ``[body, *buffers]`` (see :func:`gym_remote.codec.encode`).

    Raises:
        EncodeError: a part of ``value`` cannot travel; ``label(path)`` (if given) names its place in
            the error, else ``what`` followed by the path.
    """
    try:
        body, buffers = codec.encode(value, allow_pickle=allow_pickle, what=what)
    except EncodeError as error:
        if label is None:
            raise
        raise EncodeError(
            f"cannot send {label(error.path)}: {error.reason}", reason=error.reason, path=error.path
        ) from None
    return [body, *buffers]


def path_text(path: Sequence[tuple[Any, str]]) -> str:
    """The readable form of (part of) an :class:`EncodeError` path, e.g. ``"['stats'][1]"``."""
    return "".join(text for _, text in path)


def read_value(frames: Sequence[Any], *, allow_pickle: bool = False) -> Any:
    """Decode a value section (the inverse of :func:`value_frames`).

    Raises:
        ProtocolError: the section is missing or malformed.
    """
    if not frames:
        raise ProtocolError("malformed message: the value section is missing")
    return codec.decode(frames[0], frames[1:], allow_pickle=allow_pickle)


def message(
    kind: Kind,
    value: Any = None,
    *,
    seq: int = 0,
    count: int = 0,
    allow_pickle: bool = False,
    what: str = "value",
    label: Label | None = None,
    indexes: Sequence[int] | None = None,
) -> list[Any]:
    """A whole control message: header, the index frame if ``indexes`` is given, and a value section
    unless ``value`` is None."""
    subset = [] if indexes is None else [index_frame(indexes)]
    flags = 0 if indexes is None else FLAG_SUBSET
    if value is None:
        return [pack_header(kind, seq, count, flags), *subset]
    frames = value_frames(value, allow_pickle=allow_pickle, what=what, label=label)
    return [pack_header(kind, seq, count, flags | FLAG_VALUE), *subset, *frames]


def kind_name(kind: int) -> str:
    """The name of a message kind, for logs and errors."""
    try:
        return Kind(kind).name
    except ValueError:
        return f"kind {kind}"


def format_slots(slots: Sequence[int]) -> str:
    """Slot numbers for humans.

    >>> format_slots([0, 1, 2, 5])
    '0-2,5'
    """
    if not len(slots):
        return "none"
    parts = []
    start = previous = slots[0]
    for slot in [*slots[1:], None]:
        if slot is not None and slot == previous + 1:
            previous = slot
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if slot is not None:
            start = previous = slot
    return ",".join(parts)
