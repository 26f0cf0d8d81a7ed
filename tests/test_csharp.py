"""The C# library (clients/csharp) against Python, bit for bit: its probe env against gym_remote/probe.py and its
CartPole against ``gym.make("CartPole-v1")``, driven through GymRemote.Harness.exe (JSON lines on stdin and stdout,
run under Mono). The same command script runs in the harness and in :func:`python_answers`, the harness's
behaviour over the Python envs; the answers must be equal, errors (type, module and message) included."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from gym_remote.codec import check_dtype, space_to_value
from gym_remote.conformance.wire import action_rows, probe_actions
from gym_remote.errors import ProtocolError
from gym_remote.probe import ProbeEnv

HARNESS_SECONDS = 60


# -- the harness's exact value form (see clients/csharp/harness/Harness.cs) ---------------------------------------


def exact(value: Any) -> Any:
    """``value`` in the harness's form: floats as the hex of their bits, arrays and scalars as dtype, shape and the
    hex of their bytes, so that comparing two forms compares types and bits."""
    if isinstance(value, np.generic):  # first: np.float64 is a float, np.str_ a str
        return ["s", value.dtype.str, value.tobytes().hex()]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return ["o", list(value.shape), [exact(item) for item in value.ravel()]]
        return ["a", value.dtype.str, list(value.shape), np.ascontiguousarray(value).tobytes().hex()]
    if isinstance(value, spaces.GraphInstance):  # before tuples: a GraphInstance is a NamedTuple
        return ["g", *(exact(part) for part in value)]
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else ["i", f"{'-' if value < 0 else ''}{abs(value):x}"]
    if isinstance(value, float):
        return ["f", struct.pack(">d", value).hex()]
    if isinstance(value, bytes):
        return ["b", value.hex()]
    if isinstance(value, (list, tuple)):
        return ["l" if isinstance(value, list) else "t", *(exact(item) for item in value)]
    if isinstance(value, dict):
        if all(type(key) is str for key in value):
            return {key: exact(item) for key, item in value.items()}
        return ["d", *(exact(part) for pair in value.items() for part in pair)]
    raise TypeError(f"the harness form has no place for {value!r}")


def from_exact(form: Any) -> Any:
    """The Python value of a harness form (the inverse of :func:`exact`)."""
    if form is None or isinstance(form, (bool, str, int)):
        return form
    if isinstance(form, dict):
        return {key: from_exact(item) for key, item in form.items()}
    tag, rest = form[0], form[1:]
    if tag == "f":
        return struct.unpack(">d", bytes.fromhex(rest[0]))[0]
    if tag == "i":
        return int(rest[0], 16)
    if tag == "b":
        return bytes.fromhex(rest[0])
    if tag in ("l", "t"):
        items = [from_exact(item) for item in rest]
        return items if tag == "l" else tuple(items)
    if tag == "d":
        return {from_exact(rest[i]): from_exact(rest[i + 1]) for i in range(0, len(rest), 2)}
    if tag == "s":
        return np.frombuffer(bytes.fromhex(rest[1]), dtype=rest[0])[0]
    if tag == "a":
        return np.frombuffer(bytes.fromhex(rest[2]), dtype=rest[0]).reshape(rest[1]).copy()
    if tag == "g":
        return spaces.GraphInstance(*(from_exact(part) for part in rest))
    if tag == "o":
        array = np.empty(len(rest[1]), dtype=object)
        for position, item in enumerate(rest[1]):  # one by one: a list item stays one item
            array[position] = from_exact(item)
        return array.reshape(rest[0])
    raise ValueError(f"unknown harness tag {tag!r}")


# -- one script, two interpreters ----------------------------------------------------------------------------------


def python_answers(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the harness answers to ``script``, computed with the Python envs."""
    env: Any = None
    answers = []
    for command in script:
        try:
            op = command["op"]
            if op == "make":
                if command["env"] == "Probe":
                    env = ProbeEnv(render_mode=command.get("render_mode"))
                else:
                    env = gym.make("CartPole-v1")
                answer = {
                    "class_name": type(env.unwrapped).__name__,
                    "observation_space": exact(space_to_value(env.observation_space)),
                    "action_space": exact(space_to_value(env.action_space)),
                    "metadata": exact(env.metadata),
                    "render_mode": env.render_mode,
                }
            elif op == "reset":
                kwargs = {"options": from_exact(command["options"])} if "options" in command else {}
                observation, info = env.reset(seed=command.get("seed"), **kwargs)
                answer = {"observation": exact(observation), "info": exact(info)}
            elif op == "step":
                observation, reward, terminated, truncated, info = env.step(from_exact(command["action"]))
                answer = {
                    "observation": exact(observation),
                    "reward": exact(reward),
                    "terminated": exact(terminated),
                    "truncated": exact(truncated),
                    "info": exact(info),
                }
            elif op == "get_attr":
                found = hasattr(env.unwrapped, command["name"])
                answer = {"found": found, "value": exact(getattr(env.unwrapped, command["name"])) if found else None}
            elif op == "set_attr":
                found = hasattr(env.unwrapped, command["name"])
                setattr(env.unwrapped, command["name"], from_exact(command["value"]))
                answer = {"found": found}
            elif op == "render":
                answer = {"value": exact(env.render())}
            else:
                raise ValueError(f"the script has an unknown op {op!r}")
            answers.append({"ok": True, **answer})
        except Exception as error:  # the harness answers every error the env raises
            kind = type(error)
            answers.append({"ok": False, "type": kind.__name__, "module": kind.__module__, "message": str(error)})
    return answers


def harness_answers(build: Path, script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The C# harness's answers to ``script``, run under Mono (the process ends within the timeout)."""
    mono = shutil.which("mono")
    assert mono is not None
    done = subprocess.run(
        [mono, str(build / "GymRemote.Harness.exe")],
        input="".join(json.dumps(command) + "\n" for command in script),
        capture_output=True,
        text=True,
        timeout=HARNESS_SECONDS,
    )
    assert done.returncode == 0, f"the harness exited with {done.returncode}: {done.stderr[-3000:]}"
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(script), f"{len(script)} commands got {len(answers)} answers: {done.stderr[-3000:]}"
    return answers


def difference(expected: Any, got: Any, path: str = "") -> str | None:
    """Where two harness forms differ (dict keys in order), or None."""
    if isinstance(expected, dict) and isinstance(got, dict):
        if list(expected) != list(got):
            return f"{path or 'the answer'} has the keys {list(got)}, expected {list(expected)}"
        for key in expected:
            found = difference(expected[key], got[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        for position, (want, have) in enumerate(zip(expected, got)):
            found = difference(want, have, f"{path}[{position}]")
            if found:
                return found
        return None
    if type(expected) is not type(got) or expected != got:
        return f"{path or 'the answer'} is {got!r}, expected {expected!r}"
    return None


def assert_same_answers(build: Path, script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs ``script`` in C# and in Python and asserts equal answers; returns them."""
    expected = python_answers(script)
    got = harness_answers(build, script)
    for number, (command, want, have) in enumerate(zip(script, expected, got)):
        found = difference(want, have)
        assert found is None, f"command {number} {json.dumps(command)[:300]}: {found}"
    return expected


def disassembly(assembly: Path) -> str:
    """The IL text of ``assembly`` (Mono's ikdasm)."""
    ikdasm = shutil.which("ikdasm")
    assert ikdasm is not None, "ikdasm is part of mono-devel"
    done = subprocess.run([ikdasm, str(assembly)], capture_output=True, text=True, timeout=HARNESS_SECONDS)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_library_uses_only_netstandard_types(csharp_build):
    """Every framework type GymRemote.dll refers to is in .NET Standard 2.0 (Mono's netstandard facade forwards
    it), so that Unity and Godot .NET take the library as it is. Members are not checked: Mono ships no
    netstandard reference assembly with members."""
    mono = shutil.which("mono")
    assert mono is not None
    facade = Path(mono).resolve().parents[1] / "lib" / "mono" / "4.5" / "Facades" / "netstandard.dll"
    standard = set(re.findall(r"\.class extern forwarder (\S+)", disassembly(facade)))
    used = set(re.findall(r"\[[\w.]+\](System[\w.`]*)", disassembly(csharp_build / "GymRemote.dll")))
    assert len(standard) > 2000 and "System.Numerics.BigInteger" in used
    assert used - standard == set(), "types outside .NET Standard 2.0"


def test_readme_example_compiles(csharp_build, tmp_path):
    """The examples of clients/csharp/README.md compile against the library as they are written there, each a file
    of its own (the Unity guide's, which need UnityEngine, are tested in test_csharp_client.py)."""
    readme = (Path(__file__).resolve().parent.parent / "clients" / "csharp" / "README.md").read_text()
    before_unity = readme.split("\n## Unity (and other engines)\n", 1)[0]
    blocks = re.findall(r"```csharp\n(.*?)```", before_unity, flags=re.DOTALL)
    assert len(blocks) >= 2, "the README has lost its C# examples (an env, a client)"
    sources = [tmp_path / f"Example{index}.cs" for index in range(len(blocks))]
    for source, block in zip(sources, blocks):
        source.write_text(block)
    mcs = shutil.which("mcs")
    assert mcs is not None
    command = [mcs, "-langversion:7.2", "-warnaserror+", "-target:library", "-r:System.Numerics.dll"]
    command += [f"-r:{csharp_build / 'GymRemote.dll'}", f"-out:{tmp_path / 'Example.dll'}", *map(str, sources)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HARNESS_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr


ACCEPTED_DTYPES = ["<f4", ">f8", "=f4", "f8", "|b1", "b1", "|u1", "u1", "<u1", "|i8", "<i2", ">u4", "<u8", "float32"]
ACCEPTED_DTYPES += ["int64", "bool", "<U5", "|S3", "<S3", "<M8[ns]", ">m8[s]", "<m8", ">c16", "<f2", "<f16"]
REFUSED_DTYPES = ["O", "|O", "|V4", "<i3", "<i0", "<f3", "<b2", "<m8[]", "<f8[ns]", "<x4", "", "<", "[('a', '<f4')]"]


def test_dtypes_read_as_the_codec_reads_them(csharp_build):
    """DType.Parse takes the dtype strings gym_remote's codec takes, and names them by NumPy's ``dtype.str``;
    object, void, odd sizes and malformed strings are refused with ArgumentException."""
    script = [{"op": "make", "env": "Probe"}] + [
        {"op": "dtype", "text": text} for text in ACCEPTED_DTYPES + REFUSED_DTYPES
    ]
    got = harness_answers(csharp_build, script)[1:]
    for text, answer in zip(ACCEPTED_DTYPES, got):
        assert answer == {"ok": True, "value": check_dtype(text).str}, f"{text!r}: {answer}"
    for text, answer in zip(REFUSED_DTYPES, got[len(ACCEPTED_DTYPES) :]):
        with pytest.raises(ProtocolError):
            check_dtype(text)
        assert not answer["ok"] and answer["type"] == "ArgumentException", f"{text!r}: {answer}"
        assert repr(text) in answer["message"] if text else "dtype" in answer["message"], answer


# -- values ----------------------------------------------------------------------------------------------------------

VALUES = [
    *(0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**200, -(2**100)),
    *(0.0, -0.0, float("nan"), float("inf"), -float("inf"), 5e-324, 1.7976931348623157e308, 0.1, 1e16, 1e-05),
    *("", "probé", "\ud800", "😀", "it's", 'say "hi"', "tab\tnew\nline\x7f\x85\xa0\u2028"),
    *(b"", bytes(range(256)), b"it's"),
    *(None, True, False, [], (), (1,), [1, (2, "x")], {"a": 1, "b": [None]}, {}, {1: "one", (1, 2): "two", "s": 3}),
    *(np.float32(0.1), np.int8(-5), np.uint64(2**64 - 1), np.bool_(False), np.float64(float("nan")), np.int64(7)),
    np.zeros((0,), dtype=np.float32),
    np.zeros((2, 0, 3)),
    np.arange(6, dtype=np.int16).reshape(2, 3),
    np.array([True, False]),
    np.array(["ab", "é"], dtype="<U3"),
    np.array([b"x", b"yz"], dtype="|S2"),
    np.array([1, 2], dtype="<M8[ns]"),
    np.array([1.5, -2.0], dtype=">f8"),
    np.array([1 + 2j], dtype="<c16"),
    np.array(3, dtype=np.uint8),
    np.array([1, "x", None], dtype=object),
]
# what Value.Repr() gives as Python's repr (NumPy pads the items of float and bool arrays and breaks lines of 2-d
# ones; Value.Repr does not)
REPR_VALUES = [value for value in VALUES if not isinstance(value, np.ndarray)]
REPR_VALUES += [np.array([1, 2]), np.array([3, -4], dtype=np.int16), np.array(5, dtype=np.uint8), np.float32(3.25)]
REPR_VALUES += [np.array([True, False]), np.array([10, -200, 3], dtype=np.int32)]
REPR_VALUES += [1e15, 1.5e16, 123.456, 1e-4, 2.5e-7, -1e300, 1 / 3, np.float32(1 / 3), np.float64(1e22)]


def test_values_read_back_and_compare_exactly(csharp_build):
    """Every kind of value reads into a Value and writes back to the bit (big ints, -0.0 and NaN, lone surrogates,
    keys that are not strings, arrays of every dtype kind, object arrays); two values are equal exactly when they are
    the same value to the bit (dict keys in order), with equal hashes then; a dict given one key twice, or two keys
    equal under Python's == (1 and True), is refused."""
    pairs = [(a, b) for a in VALUES[::3] for b in VALUES[::3]]
    pairs += [(1, 1.0), (1, True), (0.0, -0.0), ([1], (1,)), ({"a": 1, "b": 2}, {"b": 2, "a": 1})]
    pairs += [(np.float32(1), np.float64(1)), (np.zeros(2), np.zeros((1, 2))), (2**70, 2**70), ([1.5], [1.5])]
    script: list[dict[str, Any]] = [{"op": "make", "env": "Probe"}]
    script += [{"op": "echo", "value": exact(value)} for value in VALUES]
    script += [{"op": "equal", "left": exact(a), "right": exact(b)} for a, b in pairs]
    script += [{"op": "echo", "value": ["d", 1, "a", 1, "b"]}, {"op": "echo", "value": ["d", 1, "a", True, "b"]}]
    got = harness_answers(csharp_build, script)[1:]
    for value, answer in zip(VALUES, got):
        assert answer == {"ok": True, "value": exact(value)}, f"{value!r}: {answer}"
    for (a, b), answer in zip(pairs, got[len(VALUES) :]):
        same = json.dumps(exact(a)) == json.dumps(exact(b))
        assert answer["ok"], f"{a!r} and {b!r}: {answer}"
        assert answer["value"] is same and (answer["same_hash"] or not same), f"{a!r} and {b!r}: {answer}"
    for answer, second in zip(got[-2:], ("1", "True")):
        assert not answer["ok"] and f"1 (entry 0) and {second} (entry 1) are equal under" in answer["message"], answer


CORE_DTYPES = ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f4", "<f8"]
KEYS: list[Any] = [  # hashable values that may be keys of a 'd' value (PROTOCOL.md §3.1)
    *(0, 1, -1, 2, 255, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), 2**100),
    *(0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 2.0, 255.0, 2.0**53, 2.0**63, 2.0**64, 2.0**100, float("nan"), float("inf")),
    *(-float("inf"), 1e308, True, False, None),
    *(np.dtype(dtype).type(1) for dtype in CORE_DTYPES),
    *(np.dtype(dtype).type(0) for dtype in CORE_DTYPES),
    *(np.float32(0.1), np.float32(0.5), np.float32(-0.0), np.float32("nan"), np.float32("inf"), np.float64(0.1)),
    *(np.int64(-1), np.int8(-1), np.uint8(255), np.uint64(2**64 - 1), np.int64(2**63 - 1), np.float32(2.0**24)),
    *(np.float64(2.0**53), np.float32(2.0**64), np.float64(2.0**63)),
    *("", "a", "1", "é", "😀", "offset", np.str_("a"), np.str_("é"), np.str_("😀"), np.str_("offset")),
    *(b"", b"a", b"1", b"a\x00", np.bytes_(b"a")),
    *((), (1,), (True,), (1.0,), (np.int8(1),), (1, "a"), (True, np.str_("a")), (1.0, "a"), ("a", 1), ((1,),)),
    *(((1.0,),), (float("nan"),), (1, b"a"), (1, np.bytes_(b"a")), (0, ()), (-0.0, ())),
]
KEY_FORMS = [exact(key) for key in KEYS]
KEY_FORMS += [["s", ">f8", "3ff0000000000000"], ["s", ">i4", "00000001"], ["s", ">u8", "ffffffffffffffff"]]
KEY_FORMS += [  # NumPy drops trailing NULs: "a", "a", b"a", b""
    ["s", "<U3", "61" + "0" * 22],
    ["s", ">U2", "0000006100000000"],
    ["s", "|S3", "610000"],
    ["s", "|S2", "0000"],
]


def test_dict_keys_equal_as_in_python(csharp_build):
    """Value.PythonKeys decides whether two keys are one key of a Python dict (equal under ==, PROTOCOL.md §3.1) as
    Python does, for every pair of ints (64-bit bounds, big), floats (-0.0, NaN, infinities, not whole), bools,
    None, NumPy scalars of every core dtype (big-endian too), str and bytes with their NumPy scalars (trailing NULs
    dropped as NumPy drops them) and tuples of them: its hashes agree, and Value.Dict refuses exactly the equal
    pairs, naming both keys. Python's side is ``right in {left: ...}`` (hash, then ==) over values read afresh, as
    gym_remote's decoder checks a 'd' value: under NumPy 2's rules, ``np.float32(0.1) == 0.1`` is true (0.1 is cast
    to float32) though the values differ and their hashes do too, and a dict keeps both, as the C# side does. The one
    corner where a dict merges keys of different values (clients/csharp/README.md) is checked to stay apart in C#."""
    pairs = list(itertools.combinations_with_replacement(KEY_FORMS, 2))
    script: list[dict[str, Any]] = [{"op": "make", "env": "Probe"}]
    script += [{"op": "key_equal", "left": left, "right": right} for left, right in pairs]
    script += [{"op": "echo", "value": ["d", ["l", 1], 2]}, {"op": "echo", "value": ["d", ["t", 1, ["l"]], 2]}]
    corner = (np.float64(2.0**120), 2**120 + 2**61 - 1)  # values differ; NumPy rounds the int, the hashes collide
    script.append({"op": "key_equal", "left": exact(corner[0]), "right": exact(corner[1])})
    got = harness_answers(csharp_build, script)[1:]
    assert corner[1] in {corner[0]: None} and got[-1]["value"] is False, "the corner README.md describes"
    got = got[:-1]
    cast_equal = 0
    for (left_form, right_form), answer in zip(pairs, got):
        left, right = from_exact(left_form), from_exact(right_form)  # each read afresh: a NaN is not itself
        equal = right in {left: None}
        if all(isinstance(key, (int, float, np.number)) for key in (left, right)):  # (bool is an int)
            with contextlib.suppress(OverflowError), np.errstate(over="ignore"):  # (big ints to NumPy dtypes)
                cast_equal += bool(left == right) and not equal
        shown = f"{left!r} and {right!r}"
        assert answer["ok"] and answer["value"] is equal, f"{shown}: {answer}"
        assert answer["same_hash"] or not equal, f"{shown}: equal keys with different hashes"
        assert (answer["refused"] is not None) is equal, f"{shown}: {answer}"
        if equal and all(type(key) in (int, float, bool, str, bytes) for key in (left, right)):
            assert f"{left!r} (entry 0) and {right!r} (entry 1) are equal" in answer["refused"], answer
    assert sum(answer["value"] for answer in got[: len(pairs)]) > 2 * len(KEY_FORMS) and cast_equal > 5
    for answer, kind in zip(got[len(pairs) :], ("list", "list")):
        assert not answer["ok"] and answer["type"] == "ArgumentException", answer
        assert f"unhashable type: '{kind}'" in answer["message"], answer


def test_value_repr_is_pythons(csharp_build):
    """Value.Repr(), which error messages quote, is Python's repr: quotes and escapes of str and bytes, the
    shortest float text in repr's notation, NumPy scalars and one-dimensional integer arrays."""
    script = [{"op": "make", "env": "Probe"}] + [{"op": "repr", "value": exact(value)} for value in REPR_VALUES]
    got = harness_answers(csharp_build, script)[1:]
    for value, answer in zip(REPR_VALUES, got):
        assert answer == {"ok": True, "value": repr(value)}, f"{value!r}: {answer}"


# -- the space classes ----------------------------------------------------------------------------------------------

SPACE_CATALOG = [  # the spaces of Harness.cs's Catalog, in its order
    spaces.Box(-1.5, 2.5, shape=(2, 3), dtype=np.float64),
    spaces.Box(np.array([0, -5]), np.array([10, 5]), dtype=np.int32),
    spaces.Box(0, 255, shape=(2, 2), dtype=np.uint8),
    spaces.Discrete(5, start=2, dtype=np.int32),
    spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[0, 1], [-1, 0]])),
    spaces.MultiBinary([2, 3]),
    spaces.MultiBinary(4),
    spaces.Text(5, min_length=2, charset="abc"),
    spaces.Graph(spaces.Box(0, 1, shape=(3,), dtype=np.float32), spaces.Discrete(4)),
    spaces.Graph(spaces.Discrete(2), None),
    spaces.Sequence(spaces.Discrete(3), stack=True),
    spaces.OneOf((spaces.Discrete(2), spaces.Box(-1, 1, shape=(2,), dtype=np.float32))),
    spaces.Tuple((spaces.Discrete(2), spaces.Dict([("b", spaces.MultiBinary(2)), ("a", spaces.Text(3))]))),
]

MEMBERS = [  # (space, value): members, and values that miss by shape, bounds, dtype or type
    (0, np.zeros((2, 3))),
    (0, np.zeros((2, 3), dtype=np.float32)),
    (0, np.full((2, 3), 3.0)),
    (0, np.zeros((3, 2))),
    (0, np.zeros((2, 3), dtype=np.int64)),
    (1, np.array([5, 0], dtype=np.int32)),
    (1, np.array([11, 0], dtype=np.int32)),
    (1, np.array([5, 0], dtype=np.int64)),
    (1, np.array([5, 0], dtype=np.int16)),
    (1, np.array([5.0, 0.0])),
    (2, np.array([[0, 255], [7, 9]], dtype=np.uint8)),
    (2, np.array([[0, 127], [7, 9]], dtype=np.int8)),
    (3, 2),
    (3, 6),
    (3, 7),
    (3, 1),
    (3, np.int64(4)),
    (3, np.array(3, dtype=np.uint8)),
    (3, 3.0),
    (3, np.bool_(True)),
    (3, "3"),
    (4, np.array([[1, 3], [2, 4]])),
    (4, np.array([[2, 3], [0, 0]])),
    (4, np.array([[1, 3], [2, 4]], dtype=np.float64)),
    (4, np.array([[True, True], [False, True]])),
    (5, np.array([[0, 1, 1], [1, 0, 0]], dtype=np.int8)),
    (5, np.array([[0, 1, 2], [1, 0, 0]], dtype=np.int8)),
    (5, np.array([[0, 1.0, 1], [1, 0, 0]])),
    (6, np.array([1, 0, 1, 1], dtype=np.int8)),
    (6, np.array([1, 0, 1], dtype=np.int8)),
    (7, "abca"),
    (7, "a"),
    (7, "abcabc"),
    (7, "abd"),
    (7, 5),
    (11, (1, np.array([0.5, -0.5], dtype=np.float32))),
    (11, (0, np.array([0.5, -0.5], dtype=np.float32))),
    (11, (2, 0)),
    (12, (1, {"b": np.array([1, 0], dtype=np.int8), "a": "xyz"})),
    (12, (1, {"b": np.array([1, 0], dtype=np.int8)})),
    (12, [1, {"b": np.array([1, 0], dtype=np.int8), "a": "xyz"}]),
]


def without_rng(description: Any) -> Any:
    """A space description without the random generators' states (Gymnasium seeds some sub-spaces of a Graph; the
    C# spaces do not sample, so they have none)."""
    if isinstance(description, dict):
        return {key: without_rng(value) for key, value in description.items() if key != "rng"}
    if isinstance(description, list):
        return [without_rng(item) for item in description]
    return description


def test_spaces_describe_and_contain_as_gymnasium(csharp_build):
    """Each space class of the library describes itself as gym_remote's codec describes the same Gymnasium space
    (PROTOCOL.md 7.2), and answers ``contains`` as Gymnasium does for arrays, scalars, ints, strs and tuples."""
    script = [{"op": "make", "env": "Probe"}, {"op": "catalog"}]
    script += [{"op": "contains", "space": index, "value": exact(value)} for index, value in MEMBERS]
    expected = [{"value": exact([without_rng(space_to_value(space)) for space in SPACE_CATALOG])}]
    expected += [{"value": bool(SPACE_CATALOG[index].contains(value))} for index, value in MEMBERS]
    got = harness_answers(csharp_build, script)[1:]
    for number, (command, want, have) in enumerate(zip(script[1:], expected, got)):
        found = difference({"ok": True, **want}, have)
        assert found is None, f"command {number + 1} {json.dumps(command)[:300]}: {found}"
    assert {True, False} == {answer["value"] for answer in got[1:]}


# -- the probe env --------------------------------------------------------------------------------------------------


def probe_script(seed: int | None, env: int, push_dtype: str = "<f4", dtypes: tuple[str, str] | None = None):
    """Env ``env`` of the conformance runner's three: a seeded reset, then the runner's fixed actions for 14 steps
    (resetting when an episode ends), resets with options, and ``render``."""
    script: list[dict[str, Any]] = [
        {"op": "make", "env": "Probe", "render_mode": "ansi"},
        {"op": "reset", "seed": seed},
    ]
    for step in range(1, 15):
        direction, push, pressed = action_rows(probe_actions(step, 3, push_dtype=push_dtype))[env]
        if dtypes is not None:  # the FLAG_DTYPES forms: another integer dtype for direction, bools for pressed
            direction, pressed = np.asarray(direction, dtype=dtypes[0])[()], pressed.astype(dtypes[1])
        script.append({"op": "step", "action": exact((direction, push, pressed))})
        script.append({"op": "render"})
        if step % 5 == 0:
            script.append({"op": "reset", "seed": None})
    script += [
        {"op": "reset", "seed": None, "options": {"offset": 7}},
        {"op": "step", "action": exact(action_rows(probe_actions(7, 3))[env])},
        {"op": "reset", "seed": 3, "options": None},
        {"op": "reset", "seed": None, "options": {"offset": 999, "other": "ignored"}},
    ]
    return script


@pytest.mark.parametrize("env", [0, 1, 2])
def test_probe_matches_python_probe(csharp_build, env):
    """The runner's actions (float32 pushes, then float64 ones with int32 directions and bool presses) from a seed
    whose episode terminates and truncates at once, a seed above 2**64 and no seed: every observation, reward,
    flag, info and render the same."""
    seed = [8, 2**64 + 1234, None][env]
    script = probe_script(seed, env) + probe_script(seed, env, push_dtype="<f8", dtypes=("<i4", "|b1"))[1:]
    answers = assert_same_answers(csharp_build, script)
    assert all(answer["ok"] for answer in answers)
    assert any(answer.get("terminated") and answer.get("truncated") for answer in answers) or env != 0
    assert any(answer.get("terminated") and not answer.get("truncated") for answer in answers)


def test_probe_spaces_and_errors_match(csharp_build):
    """The probe's class name, spaces (their protocol descriptions) and metadata; bad offsets and bad actions
    raise the same errors, at the same point of a step (the state after a failed step is Python's)."""
    good = action_rows(probe_actions(1, 1))[0]
    push3 = np.zeros(3, dtype=np.float32)
    script: list[dict[str, Any]] = [{"op": "make", "env": "Probe"}, {"op": "reset", "seed": 11}]
    script.append({"op": "reset", "seed": -5})
    for offset in (1000, -1, 1.5, "x", "it's", "\\", True, None, 2**70):
        script.append({"op": "reset", "seed": 11, "options": {"offset": exact(offset)}})
    for action in (
        5,
        (1, 2),
        (good[0], push3, good[2]),  # fails after t and level changed
        (good[0], good[1], np.zeros(1, dtype=np.int8)),  # fails after zeta changed
        (1.7, [0.25], [1, 0]),  # a float direction is truncated, one push broadcast, lists converted
        (np.int64(-1), good[1], np.array([1, 1, 1], dtype=np.int8)),
        good,
    ):
        script.append({"op": "step", "action": exact(action)})
    script.append({"op": "render"})
    script.append({"op": "get_attr", "name": "state"})
    answers = assert_same_answers(csharp_build, script)
    assert [answer["ok"] for answer in answers[2:19]] == [False] * 10 + [False, False, False, False, True, True, True]


def test_probe_np_random_seed_matches(csharp_build):
    """``np_random_seed`` (CONFORMANCE.md §1.6): -1 before any seeded reset (an unseeded one too), then the last seed
    given, of any size; kept by unseeded resets, by a refused negative seed, and set by a seeded reset whose offset
    is then refused (probe.py keeps the seed before it checks the offset)."""
    seed = {"op": "get_attr", "name": "np_random_seed"}
    script: list[dict[str, Any]] = [{"op": "make", "env": "Probe"}, seed, {"op": "reset", "seed": None}, seed]
    script += [{"op": "reset", "seed": 11}, seed, {"op": "reset", "seed": None}, seed]
    script += [{"op": "reset", "seed": 2**64 + 5}, seed, {"op": "reset", "seed": -5}, seed]
    script += [{"op": "reset", "seed": 0, "options": {"offset": 1000}}, seed, {"op": "reset", "seed": None}, seed]
    answers = assert_same_answers(csharp_build, script)
    seeds = [answer["value"] for answer in answers if "found" in answer]
    assert seeds == [-1, -1, 11, 11, ["i", f"{2**64 + 5:x}"], ["i", f"{2**64 + 5:x}"], 0, 0]


DIRECTIONS = [  # (CONFORMANCE.md §1.4) taken as Python's int() takes them, within int64; refused before any change
    *(True, False, 0, 2, -(2**31), 2**63, -(2**63) - 1, 2**70),
    *(0.7, -1.5, -0.0, 5e-324, 1e9, 2.0**63, -(2.0**63) - 2048, 1e19, float("nan")),
    *(float("inf"), -float("inf")),
    *(np.bool_(True), np.int8(-1), np.int16(1), np.int32(-1), np.uint8(1), np.uint16(1), np.uint32(1), np.int64(1)),
    *(np.uint64(2**63), np.uint64(2**64 - 1), np.float32(0.7), np.float32(-1.5), np.float64(-0.9)),
    *(np.float32("nan"), np.float64("-inf"), np.float32(1e19), np.float64(-1e19), np.float32(-16777216.0)),
    *(np.array(1), np.array([1]), np.array([[-1.7]]), np.array([0.5], dtype=np.float32), np.array([True])),
    *(np.array([1, 0]), np.zeros(0), np.array(["x"]), np.array([b"x"]), np.array([1 + 2j]), np.array([np.nan])),
    *(np.array([2**64 - 1], dtype=np.uint64), np.array([1], dtype=object), np.array([-2.5], dtype=object)),
    *(np.array(["x"], dtype=object), np.array([np.float32(0.5)], dtype=object)),
    *("1", b"1", None, [1], (1,), {"a": 1}, np.str_("1"), np.bytes_(b"1"), np.complex128(1)),
]


def test_probe_converts_direction_as_python(csharp_build):
    """Every kind of direction (bools, ints at and beyond int64's bounds, floats truncated or refused as NaN, infinite
    or out of range, NumPy scalars of the core dtypes, one-item arrays of numbers, object arrays, strings, bytes,
    null, lists, complex): the same result or the same error (type and message), and after an error the state is
    unchanged (the good step that follows is the same). Not compared: float16 and datetime64 directions, which the
    C# probe does not convert (NotSupportedException)."""
    good = action_rows(probe_actions(1, 1))[0]
    script: list[dict[str, Any]] = [{"op": "make", "env": "Probe"}]
    for direction in DIRECTIONS:
        script.append({"op": "reset", "seed": 11})
        script.append({"op": "step", "action": exact((direction, good[1], good[2]))})
        script.append({"op": "step", "action": exact(good)})
    answers = assert_same_answers(csharp_build, script)
    outcomes = {answer.get("type") for answer in answers[2::3]}
    assert outcomes == {None, "ValueError", "TypeError"}, outcomes


OPTIONS = [  # (CONFORMANCE.md §1.3) the offset is read from a dict only, and must be an exact int in [0, 1000)
    *(["offset"], "offset", ("offset",), None, 5, {}, {"other": 5}, {"offset": 0}, {"offset": 999}),
    *({np.str_("offset"): 5}, {b"offset": 5}, {"offset": np.int64(5)}, {"offset": 5.0}, {"offset": False}),
    *({"offset": [5]}, {"offset": -(2**70)}, {"offset": 1000}),
]


def test_probe_reads_offset_as_python(csharp_build):
    """Options that are no dict (a list or str holding "offset", a tuple, None, an int) give offset 0; a dict's
    "offset" is found as Python finds it (under a NumPy str key too, not under a bytes key) and must be a plain
    int in range: NumPy ints, floats, bools and lists are refused with the same ValueError."""
    script: list[dict[str, Any]] = [{"op": "make", "env": "Probe"}]
    script += [{"op": "reset", "seed": 11, "options": exact(options)} for options in OPTIONS]
    answers = assert_same_answers(csharp_build, script)
    assert [answer["info"]["offset"] for answer in answers[1:11]] == [0] * 8 + [999, 5]


def test_probe_rounds_float64_pushes_to_float32(csharp_build):
    """Pushes of float64 with all their bits are rounded to float32 before they are halved and added, as NumPy's
    ``np.asarray(push, dtype=np.float32)``; 60 steps from zeta near 0, where a sum in float64 would differ."""
    rng = np.random.default_rng(5)
    script: list[dict[str, Any]] = [{"op": "make", "env": "Probe"}, {"op": "reset", "seed": 1000}]
    for _ in range(60):
        action = (int(rng.integers(-1, 2)), rng.uniform(-1, 1, 2) * 2.0 ** -int(rng.integers(0, 20)), [1, 0])
        script.append({"op": "step", "action": exact(action)})
    answers = assert_same_answers(csharp_build, script)
    assert all(answer["ok"] for answer in answers)


# -- CartPole -------------------------------------------------------------------------------------------------------


def cartpole_script(seeds: list[int], steps: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Episodes from ``seeds`` (then unseeded resets, which continue the generator) with random actions, and one
    balanced by a simple controller until the 500-step time limit truncates it."""
    expected_env = gym.make("CartPole-v1")
    script: list[dict[str, Any]] = [{"op": "make", "env": "CartPole"}]
    for seed in seeds:
        script.append({"op": "reset", "seed": seed})
        expected_env.reset(seed=seed)
        taken = 0
        while taken < steps:
            action = int(rng.integers(2))
            script.append({"op": "step", "action": action})
            _, _, terminated, truncated, _ = expected_env.step(action)
            taken += 1
            if terminated or truncated:
                script.append({"op": "reset", "seed": None})
                expected_env.reset()
    script.append({"op": "reset", "seed": 5, "options": {"low": exact(-0.01), "high": exact(0.01)}})
    state = expected_env.reset(seed=5, options={"low": -0.01, "high": 0.01})[0]
    for _ in range(500):  # push toward where the pole falls: it stays up until truncated
        action = int(state[2] + 0.5 * state[3] > 0)
        script.append({"op": "step", "action": action})
        state, _, terminated, truncated, _ = expected_env.step(action)
    assert truncated and not terminated, "the controller did not hold the pole for 500 steps"
    script.append({"op": "get_attr", "name": "state"})
    return script


def test_cartpole_matches_gymnasium_from_seeds(csharp_build):
    """The same seeds (small, 2**32 + 7, 2**64 + 3, above 2**128) and random actions: every observation, reward,
    termination and truncation of gym.make("CartPole-v1"), including unseeded resets that continue the generator,
    reset bounds from options, and the time limit."""
    seeds = [0, 1, 42, 2**32 + 7, 2**64 + 3, 2**160 + 2**140 + 99]  # the last fills more than SeedSequence's pool
    script = cartpole_script(seeds, 120, np.random.default_rng(2027))
    answers = assert_same_answers(csharp_build, script)
    assert all(answer["ok"] for answer in answers)
    assert sum(answer.get("terminated") is True for answer in answers) >= 10


@pytest.mark.filterwarnings("ignore:.*already returned terminated = True")
def test_cartpole_matches_gymnasium_from_states_set(csharp_build):
    """States set through the ``state`` attribute (inside and near the thresholds, and fast ones): each stepped
    with random actions until it terminates, then stepped past the end (reward 0), as Gymnasium does."""
    rng = np.random.default_rng(31)
    scale = np.array([2.4, 3.0, 0.21, 3.5])
    states = [rng.uniform(-scale, scale) for _ in range(40)]
    states += [rng.uniform(-scale, scale) * [1, 8, 1, 12] for _ in range(10)]  # fast: the pole's term rivals the force
    states += [np.array([2.39, 1.0, 0.2, 2.0]), np.array([-2.4, -0.5, -0.2094, -0.1]), np.array([0.0, 0.0, 0.0, 0.0])]
    script: list[dict[str, Any]] = [{"op": "make", "env": "CartPole"}]
    for number, state in enumerate(states):
        script.append({"op": "reset", "seed": number})
        script.append({"op": "set_attr", "name": "state", "value": exact(state.astype(np.float64))})
        script.append({"op": "get_attr", "name": "state"})
        for _ in range(12):  # the float64 state after each step too: a last-bit difference may vanish in float32
            script.append({"op": "step", "action": int(rng.integers(2))})
            script.append({"op": "get_attr", "name": "state"})
    answers = assert_same_answers(csharp_build, script)
    assert all(answer["ok"] for answer in answers)
    rewards = [from_exact(answer["reward"]) for answer in answers if "reward" in answer]
    assert 0.0 in rewards and 1.0 in rewards


def test_cartpole_spaces_and_errors_match(csharp_build):
    """CartPole's class name, spaces and metadata, and the assertion for actions outside Discrete(2)."""
    script: list[dict[str, Any]] = [{"op": "make", "env": "CartPole"}, {"op": "reset", "seed": 9}]
    for action in (2, -1, 1.0, np.int64(5), np.bool_(True), np.array([1]), "1", np.int32(1), np.array(0), True):
        script.append({"op": "step", "action": exact(action)})
    script.append({"op": "reset", "seed": 9, "options": {"low": exact(0.5), "high": exact(0.1)}})
    script.append({"op": "reset", "seed": -(2**70)})
    answers = assert_same_answers(csharp_build, script)
    assert [answer["ok"] for answer in answers[2:-2]] == [False] * 7 + [True] * 3
    assert not answers[-2]["ok"] and not answers[-1]["ok"]
