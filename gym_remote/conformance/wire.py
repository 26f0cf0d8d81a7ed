"""The wire checks: a scripted server drives the client message by message and reads every reply.

Each check starts the client (hosting :data:`NUM_ENVS` probe envs, ``docs/CONFORMANCE.md``) against a
:class:`~gym_remote.conformance.scripted.ScriptedServer`, sends it what ``docs/PROTOCOL.md`` lets a
server send, and compares what comes back with what the document requires: the replies' kinds,
``seq`` and layout, and their values against Python probes (:class:`gym_remote.probe.ProbeEnv`)
stepped as PROTOCOL.md §5.4 says a client steps its envs. Every wait is bounded by a few seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import concatenate, create_empty_array

from gym_remote import codec, protocol
from gym_remote.conformance.check import Check, Context
from gym_remote.conformance.reference import describe, difference, preview, same_number
from gym_remote.conformance.report import CheckFailed
from gym_remote.conformance.scripted import (
    ABSENT,
    HELLO_SECONDS,
    REPLY_SECONDS,
    Received,
    Result,
    ScriptedServer,
    ZapGatekeeper,
    leaf_names,
)
from gym_remote.conformance.subject import ClientProcess
from gym_remote.errors import ProtocolError
from gym_remote.probe import ProbeEnv, probe_spaces
from gym_remote.protocol import HAS_ATTR_QUERY, WRAPPERS_QUERY, Kind

__all__ = ["CHECKS", "CORE_DTYPES", "NUM_ENVS"]

logger = logging.getLogger("gym_remote")

GROUP = "wire"

NUM_ENVS = 3
"""How many probe envs each client of these checks hosts."""

CORE_DTYPES = ("|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f4", "<f8")
"""The dtypes a HELLO's ``dtypes`` listing (if it has one) must include."""

PROBE_METADATA = {"render_modes": ["ansi"], "render_fps": 4}

SEEDS = [10, 3, 7]
"""Seeds whose episodes end at different steps: env 0 terminates at t=2, env 2 at t=4, env 1 both
terminates and truncates at t=5 (``term_step = 2 + base % 5``, CONFORMANCE.md §1.3)."""

EXIT_SECONDS = 10.0
"""How long a client that was sent CLOSE has to exit."""

REFUSED_EXIT_SECONDS = 30.0
"""How long a client refused for good has to exit (CONFORMANCE.md §2)."""

UNKNOWN_KIND = 99
"""A message kind no version of the protocol has."""

_MISSING = object()


# -- the reference: Python probes stepped as PROTOCOL.md §5.4 says -----------------------------------


@dataclass
class Expected:
    """What a client's RESULT must hold for the envs a command was for, in its order."""

    rewards: list[float]
    terminated: list[bool]
    truncated: list[bool]
    obs: list[Any]
    infos: list[dict]
    final: list[tuple[Any, dict] | None] | None


class Reference:
    """``count`` Python probes with per-env autoreset flags, for the autoreset mode a WELCOME named."""

    def __init__(self, count: int, autoreset_mode: str = "NextStep", reset_first: bool = False) -> None:
        self.envs = [ProbeEnv() for _ in range(count)]
        self.mode = autoreset_mode
        self.autoreset = [bool(reset_first)] * count

    def reset(
        self, seeds: Sequence[int | None], options: Any = ABSENT, indexes: Sequence[int] | None = None
    ) -> Expected:
        """``env.reset(seed=..., options=...)`` (no ``options`` keyword when ABSENT) for the envs ``indexes``."""
        obs, infos = [], []
        keywords = {} if options is ABSENT else {"options": options}
        for index, seed in zip(self._selected(indexes), seeds, strict=True):
            observation, info = self.envs[index].reset(seed=seed, **keywords)
            self.autoreset[index] = False
            obs.append(observation)
            infos.append(info)
        count = len(obs)
        return Expected([0.0] * count, [False] * count, [False] * count, obs, infos, None)

    def step(self, actions: Sequence[Any], indexes: Sequence[int] | None = None) -> Expected:
        """Step the envs ``indexes`` (all if None) with one action each, as PROTOCOL.md §5.4's pseudocode."""
        expected = Expected([], [], [], [], [], None)
        envs = list(self._selected(indexes))
        for position, (index, action) in enumerate(zip(envs, actions, strict=True)):
            env = self.envs[index]
            if self.mode == "NextStep" and self.autoreset[index]:
                observation, info = env.reset()
                reward, terminated, truncated = 0.0, False, False
            else:
                observation, reward, terminated, truncated, info = env.step(action)
                if self.mode == "SameStep" and (terminated or truncated):
                    if expected.final is None:
                        no_finals: list[tuple[Any, dict] | None] = [None] * len(envs)
                        expected.final = no_finals
                    expected.final[position] = (observation, info)
                    observation, info = env.reset()
            self.autoreset[index] = terminated or truncated
            expected.rewards.append(float(reward))
            expected.terminated.append(bool(terminated))
            expected.truncated.append(bool(truncated))
            expected.obs.append(observation)
            expected.infos.append(info)
        return expected

    def _selected(self, indexes: Sequence[int] | None) -> Sequence[int]:
        return range(len(self.envs)) if indexes is None else indexes


def probe_actions(step: int, count: int, push_dtype: str = "<f4") -> list[np.ndarray]:
    """Fixed actions for step ``step``: the leaf arrays (direction, push, pressed) for ``count`` envs."""
    direction = np.array([(step + env) % 3 - 1 for env in range(count)], dtype="<i8")
    push = np.array(
        [[0.1 * ((step + env) % 5) - 0.2, 0.75 - 0.25 * ((step * env + 1) % 4)] for env in range(count)],
        dtype=push_dtype,
    )
    pressed = np.array([[(step + env) % 2, (step // 2 + env) % 2] for env in range(count)], dtype="|i1")
    return [direction, push, pressed]


def action_rows(actions: Sequence[np.ndarray]) -> list[tuple]:
    """The per-env actions of leaf arrays, as a client splits them (``iterate``)."""
    return [tuple(leaf[row] for leaf in actions) for row in range(len(actions[0]))]


# -- comparing values ------------------------------------------------------------------------------


def observation_difference(space: spaces.Space, got: Any, expected: Any, path: str) -> str | None:
    """Where an observation sent as a value (a ``final_obs``) differs from the probe's: its structure
    (dict keys in order, tuples), and per leaf a numpy array or scalar of the leaf's dtype, shape and values."""
    if isinstance(space, spaces.Dict):
        keys = list(space.spaces)
        if type(got) is not dict or list(got) != keys:
            return f"{path} is {describe(got)}, expected a dict with the keys {keys} (in this order)"
        for key in keys:
            found = observation_difference(space.spaces[key], got[key], expected[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(space, spaces.Tuple):
        if type(got) is not tuple or len(got) != len(space.spaces):
            return f"{path} is {describe(got)}, expected a tuple of {len(space.spaces)}"
        for position, child in enumerate(space.spaces):
            found = observation_difference(child, got[position], expected[position], f"{path}[{position}]")
            if found:
                return found
        return None
    wanted = np.asarray(expected)
    if not isinstance(got, (np.ndarray, np.generic)):
        dtype = np.dtype(space.dtype).str  # (a leaf: its dtype is set)
        return f"{path} is {describe(got)}, expected a numpy value of dtype {dtype}, shape {space.shape}"
    array = np.asarray(got)
    if array.dtype != space.dtype or array.shape != space.shape or not np.array_equal(array, wanted):
        return f"{path} is {describe(got)}, expected {describe(wanted)}"
    return None


def observation_leaves(space: spaces.Space, observations: Sequence[Any]) -> list[np.ndarray]:
    """The probe observations batched into the array layout's leaves, as a RESULT carries them."""
    batch = create_empty_array(space, n=len(observations), fn=np.zeros)
    concatenate(space, observations, batch)
    return codec.batch_leaves(space, batch)


# -- driving a client ------------------------------------------------------------------------------


class Driven:
    """A client joined to a scripted server, and the reference probes its commands are compared with."""

    def __init__(
        self,
        server: ScriptedServer,
        process: ClientProcess,
        hello: Received,
        slots: Sequence[int],
        autoreset_mode: str,
        reset_first: bool,
    ) -> None:
        self.server = server
        self.process = process
        self.hello = hello
        self.slots = list(slots)
        self.reference = Reference(len(self.slots), autoreset_mode, reset_first)
        self.names = leaf_names(server.observation_space)

    def reset(
        self,
        seeds: Sequence[int | None],
        *,
        options: Any = ABSENT,
        indexes: Sequence[int] | None = None,
        what: str = "RESET",
    ) -> Result:
        """Send RESET, expect its RESULT and compare it with the reference's reset."""
        seq = self.server.send_reset(seeds, options=options, indexes=indexes)
        result = self.answer(seq, len(seeds), f"{what}; PROTOCOL.md §5.2: a RESET is answered by a RESULT")
        self.compare(result, self.reference.reset(seeds, options, indexes), indexes, what)
        return result

    def step(
        self,
        actions: Sequence[np.ndarray],
        *,
        indexes: Sequence[int] | None = None,
        dtypes: Sequence[str] | None = None,
        what: str = "STEP",
    ) -> Result:
        """Send STEP, expect its RESULT and compare it with the reference's step."""
        seq = self.server.send_step(actions, indexes=indexes, dtypes=dtypes)
        result = self.answer(seq, len(actions[0]), f"{what}; PROTOCOL.md §5.4: a STEP is answered by a RESULT")
        self.compare(result, self.reference.step(action_rows(actions), indexes), indexes, what)
        return result

    def step_values(self, actions: Sequence[Any], *, indexes: Sequence[int] | None = None, what: str) -> Result:
        """Send STEP in form 3 (FLAG_VALUE: ``{"actions": [...]}``), expect its RESULT and compare it."""
        server = self.server
        count = len(actions)
        seq = server.send(Kind.STEP, {"actions": list(actions)}, seq=server.next_seq(), count=count, indexes=indexes)
        result = self.answer(seq, count, f"{what}; PROTOCOL.md §5.4: a STEP is answered by a RESULT")
        self.compare(result, self.reference.step(actions, indexes), indexes, what)
        return result

    def answer(self, seq: int, count: int, why: str) -> Result:
        return self.server.parse_result(self.server.expect(Kind.RESULT, seq=seq, why=why), count)

    def compare(self, result: Result, expected: Expected, indexes: Sequence[int] | None, what: str) -> None:
        """Fail with every difference between ``result`` and ``expected`` (up to a dozen)."""
        envs = range(len(self.slots)) if indexes is None else indexes
        space = self.server.observation_space
        wanted_leaves = observation_leaves(space, expected.obs)
        problems: list[str] = []
        for position, index in enumerate(envs):
            who = f"env {index} (slot {self.slots[index]})"
            for name, got, wanted in (
                ("reward", float(result.rewards[position]), expected.rewards[position]),
                ("terminated", bool(result.terminated[position]), expected.terminated[position]),
                ("truncated", bool(result.truncated[position]), expected.truncated[position]),
            ):
                if not same_number(got, wanted):
                    problems.append(f"{who}: {name} is {got!r}, expected {wanted!r}")
            for name, leaf, wanted_leaf in zip(self.names, result.observations, wanted_leaves):
                if not np.array_equal(leaf[position], wanted_leaf[position], equal_nan=leaf.dtype.kind == "f"):
                    problems.append(
                        f"{who}: observation {name} is {leaf[position].tolist()}, "
                        f"expected {wanted_leaf[position].tolist()}"
                    )
            if result.infos is None:
                if expected.infos[position]:
                    problems.append(
                        f"{who}: the RESULT has no 'infos', expected the info {preview(expected.infos[position])}"
                    )
            else:
                found = difference(result.infos[position], expected.infos[position], f"{who}: info")
                if found:
                    problems.append(found)
            problems.extend(self._final_problems(result, expected, position, who))
        if problems:
            shown = "\n".join(f"  {problem}" for problem in problems[:12])
            if len(problems) > 12:
                shown += f"\n  ... and {len(problems) - 12} more"
            raise self.server.fail(
                f"{what}: the RESULT (seq {result.seq}) differs from the Python probe's:\n{shown}\n"
                "(CONFORMANCE.md §1 defines the probe; PROTOCOL.md §5.2 and §5.4 what a RESULT carries, "
                "infos with their exact types, §3)"
            )

    def _final_problems(self, result: Result, expected: Expected, position: int, who: str) -> list[str]:
        got = None if result.final is None else result.final[position]
        wanted = None if expected.final is None else expected.final[position]
        if wanted is None:
            if got is not None:
                return [f"{who}: 'final' holds {preview(got)}, but its episode did not end in this step (§5.4)"]
            return []
        if result.final is None:
            return [f"{who}: its episode ended in a SameStep step, but the RESULT has no 'final' list (§5.4)"]
        if type(got) is not tuple or len(got) != 2:
            return [f"{who}: its 'final' entry is {describe(got)}, expected a tuple (final_obs, final_info) (§5.4)"]
        space = self.server.observation_space
        found = observation_difference(space, got[0], wanted[0], f"{who}: final_obs") or difference(
            got[1], wanted[1], f"{who}: final_info"
        )
        return [found] if found else []

    def call(self, name: str, count: int | None = None, **options: Any) -> list[Any]:
        """Send CALL and return the results of its CALL_RESULT (checked to be a list of one per env)."""
        seq = self.server.send_call(name, **options)
        received = self.server.expect(
            Kind.CALL_RESULT, seq=seq, why="PROTOCOL.md §5.3: a CALL is answered by a CALL_RESULT"
        )
        return call_results(self.server, received, len(self.slots) if count is None else count)


def call_results(server: ScriptedServer, received: Received, count: int) -> list[Any]:
    """The ``results`` list of a CALL_RESULT, checked to hold ``count`` entries."""
    value = received.value
    results = value.get("results", _MISSING) if type(value) is dict else _MISSING
    if type(results) is not list or len(results) != count:
        raise server.fail(
            f"the CALL_RESULT (seq {received.seq}) carries {preview(value)}, expected {{'results': [...]}} with "
            f"{count} results, one per env (PROTOCOL.md §5.3)"
        )
    return results


def expect_error(server: ScriptedServer, seq: int, why: str, *, untrusted: bool = False) -> dict[str, Any]:
    """The client's ERROR echoing ``seq`` (``untrusted``: with seq 0 instead, for a message whose header cannot
    be trusted), its value checked to have §8's form."""
    received = server.expect(Kind.ERROR, seq=None if untrusted else seq, why=why)
    if untrusted and received.seq != 0:
        raise server.fail(
            f"expected ERROR with seq 0, but got ERROR echoing the message's seq {received.seq}: the header of this "
            f"message cannot be trusted, so its seq is not echoed ({why})"
        )
    report = received.value
    problems = []
    if type(report) is not dict:
        problems.append(f"its value is {preview(report)}, not a dict")
    else:
        for key in ("type", "message"):
            if type(report.get(key)) is not str:
                problems.append(f"{key!r} is {preview(report.get(key, 'absent'))}, expected a string")
        if "traceback" in report and type(report["traceback"]) is not str:
            problems.append(f"'traceback' is {preview(report['traceback'])}, expected a string")
        index = report.get("index")
        if index is not None and (type(index) is not int or not 0 <= index < server.hosted):
            problems.append(f"'index' is {preview(index)}, expected null or a local env index below {server.hosted}")
    if problems:
        raise server.fail(
            f"the client's ERROR (seq {seq}) is not of the form PROTOCOL.md §8 gives ({{'type', 'module', 'message', "
            f"'traceback', 'index', 'name', 'launch'}}): " + "; ".join(problems)
        )
    return report


@contextmanager
def joined(
    context: Context,
    *,
    slots: Sequence[int] | None = None,
    num_envs: int = 8,
    autoreset_mode: str = "NextStep",
    reset_first: bool = False,
    observation_space: spaces.Dict | None = None,
    **welcome: Any,
) -> Iterator[Driven]:
    """A client of :data:`NUM_ENVS` probes started against a scripted server, and welcomed (with
    ``observation_space`` as the vector's single observation space, if given)."""
    endpoint = context.endpoint()
    with ScriptedServer(endpoint, liveness_timeout=context.liveness_timeout) as server:
        if observation_space is not None:
            server.use_observation_space(observation_space)
        process = server.watch(context.start_client(endpoint, NUM_ENVS))
        logger.debug("wire check: %s started for the scripted server at %s", process, endpoint)
        hello = server.expect_hello(count=NUM_ENVS)
        slots = list(range(NUM_ENVS)) if slots is None else list(slots)
        server.send_welcome(slots, num_envs=num_envs, autoreset_mode=autoreset_mode, reset_first=reset_first, **welcome)
        yield Driven(server, process, hello, slots, autoreset_mode, reset_first)


# -- HELLO -----------------------------------------------------------------------------------------


def hello_problems(received: Received, count: int, previous: str | None = None) -> list[str]:
    """What is wrong with a HELLO from a client of ``count`` probes (§7); ``previous``: the session it
    had before (a HELLO after EVICT), None for a client's first HELLO."""
    problems: list[str] = []
    header, hello = received.header, received.value
    if header.count != count:
        problems.append(f"header count is {header.count}, expected k = {count} (§2.1)")
    if header.seq != 0:
        problems.append(f"header seq is {header.seq}, expected 0: a HELLO answers no command (§2.1)")
    if not isinstance(hello, dict):
        return [*problems, f"its value is {preview(hello)}, not a dict (§7)"]

    def check(key: str, ok: Callable[[Any], bool], expected: str, default: Any = _MISSING) -> Any:
        value = hello.get(key, default)
        if value is _MISSING:
            problems.append(f"{key!r} is missing, expected {expected}")
        elif not ok(value):
            problems.append(f"{key!r} is {describe(value)}, expected {expected}")
        return value

    check("protocol", lambda v: type(v) is int and v == 2, "2")
    check("num_envs", lambda v: type(v) is int and v == count, f"{count} (the --num-envs it was started with)")
    session = check("session", lambda v: type(v) is str and v != "", "a non-empty string, its routing id")
    if type(session) is str and session and session.encode() != received.identity:
        problems.append(
            f"'session' is {session!r} but the ZeroMQ routing id is {received.identity[:64]!r}: a client sets "
            "ZMQ_ROUTING_ID to its session (§1, §7)"
        )
    check("pid", lambda v: type(v) is int and v > 0, "the client's process id, an int > 0")
    for key in ("name", "host"):
        check(key, lambda v: type(v) is str, "a string", "?")
    probe = dict(zip(("observation", "action"), probe_spaces()))
    for which, space in probe.items():
        problems.extend(_space_problems(hello, which, space, count))
    metadata = hello.get("metadata", {})
    found = difference(metadata, PROBE_METADATA, "'metadata'")
    if found:
        problems.append(f"{found} (CONFORMANCE.md §1.1)")
    check("metadata_pickle", lambda v: v is None, "null (no trusted mode)", None)
    check("render_mode", lambda v: v is None, "null (CONFORMANCE.md §1.1)", None)
    check("allow_pickle", lambda v: v is False, "false: the client was not asked for the trusted mode", False)
    check("wait", lambda v: v is True, "true: the conformance runner's clients wait in line (CONFORMANCE.md §2)")
    check("launch", lambda v: v is None, "null: the client was not launched by the server (§7.1)", None)
    if previous is None:
        check("previous_session", lambda v: v is None, "null: a new client had no session before", None)
        check("rejoins", lambda v: type(v) is int and v == 0, "0 on a client's first HELLO", 0)
    else:
        check(
            "previous_session",
            lambda v: v == previous,
            f"the evicted session {previous!r} (§7; §11 step 4: on EVICT start again with previous_session set "
            "to the evicted one)",
            None,
        )
        check("rejoins", lambda v: type(v) is int and v >= 0, "an int >= 0", 0)
    offer = hello.get("data_channel")
    if offer is not None:
        token = offer.get("token") if type(offer) is dict else None
        if type(token) is not str or len(token) != 32 or token.strip("0123456789abcdef"):
            problems.append(
                f"'data_channel' is {describe(offer)}, expected null or {{'token': 32 lowercase hex}} (§13.2)"
            )
    if hello.get("dtypes") is not None:
        problems.extend(_dtype_problems(hello["dtypes"]))
    return problems


def _space_problems(hello: dict[str, Any], which: str, space: spaces.Space, count: int) -> list[str]:
    distinct, index = hello.get(f"{which}_spaces"), hello.get(f"{which}_space_index")
    if type(distinct) is not list or not distinct:
        return [f"'{which}_spaces' is {preview(distinct)}, expected a non-empty list of space descriptions (§7.2)"]
    decoded = []
    for position, description in enumerate(distinct):
        try:
            decoded.append(codec.space_from_value(description))
        except ProtocolError as error:
            return [f"'{which}_spaces'[{position}] does not decode as a space description (§7.2): {error}"]
    if (
        type(index) is not list
        or len(index) != count
        or any(type(i) is not int or not 0 <= i < len(decoded) for i in index)
    ):
        return [
            f"'{which}_space_index' is {preview(index)}, expected a list of {count} ints below {len(decoded)} "
            "(positions in the list of distinct spaces, §7)"
        ]
    for env, position in enumerate(index):
        if decoded[position] != space:
            return [
                f"env {env}'s {which} space is {decoded[position]}, expected the probe's {space} "
                "(CONFORMANCE.md §1.1, in its key order)"
            ]
    return []


def _dtype_problems(listing: Any) -> list[str]:
    if type(listing) is not list or any(type(name) is not str for name in listing):
        return [f"'dtypes' is {preview(listing)}, expected null or a list of dtype strings (§7)"]
    names = set()
    for name in listing:
        try:
            names.add(codec.check_dtype(name).str)
        except ProtocolError as error:
            return [f"'dtypes' lists {name!r}, which is not a dtype allowed on the wire (§3.4): {error}"]
    missing = [name for name in CORE_DTYPES if name not in names]
    return [f"'dtypes' lacks the core dtypes {missing}, which every client handles (§3.4)"] if missing else []


def check_hello(context: Context) -> None:
    """Two clients' HELLOs: every field of §7 well-formed, sessions equal to routing ids and distinct."""
    endpoint = context.endpoint()
    with ScriptedServer(endpoint, liveness_timeout=context.liveness_timeout) as server:
        for _ in range(2):
            server.watch(context.start_client(endpoint, NUM_ENVS))
        why = "two clients were started, so two HELLOs are due (PROTOCOL.md §7)"
        hellos = [server.expect(Kind.HELLO, timeout=HELLO_SECONDS, count=None, why=why)]
        why += "; a second HELLO that never arrives can mean that both clients used the same routing id (§1)"
        hellos.append(server.expect(Kind.HELLO, timeout=HELLO_SECONDS, count=None, why=why))
        for number, received in enumerate(hellos, 1):
            problems = hello_problems(received, NUM_ENVS)
            if problems:
                shown = "\n".join(f"  {problem}" for problem in problems)
                raise server.fail(f"HELLO number {number} is not as PROTOCOL.md §7 requires:\n{shown}")
        if hellos[0].value["session"] == hellos[1].value["session"]:
            raise server.fail(
                f"two runs of the client sent the same session {hellos[0].value['session']!r}: a session is unique "
                "per client run (§1, §7)"
            )


# -- RESET, STEP and RESULT ------------------------------------------------------------------------


def check_reset_and_step(context: Context) -> None:
    """NextStep: RESETs (seeds, no seeds, options, null options) and STEPs, through an autoreset,
    compared with the Python probes; slots that are not the client's own numbers."""
    with joined(context, slots=[4, 5, 6], num_envs=8) as client:
        client.reset(SEEDS, what="RESET with seeds and no 'options' key")
        for step in range(1, 7):
            client.step(probe_actions(step, NUM_ENVS), what=f"STEP number {step} (NextStep)")
        client.reset([None, 5, None], options={"offset": 7}, what="RESET with null seeds and options {'offset': 7}")
        client.step(probe_actions(7, NUM_ENVS), what="the STEP after it")
        client.reset([1, 2, 3], options=None, what="RESET with 'options' null")
        client.step(probe_actions(8, NUM_ENVS), what="the STEP after it")


BIG_SEEDS = {
    "[2**63 - 1, 2**63, 2**64 - 1]": [2**63 - 1, 2**63, 2**64 - 1],
    "[2**64 + 7, 2**200 + 3, 2**63 - 1]": [2**64 + 7, 2**200 + 3, 2**63 - 1],
}
"""Seeds at and beyond the 64-bit limits, two RESETs' worth (by how they are written): Gymnasium's
``reset(seed=...)`` takes an int of any size, and so must the probe (CONFORMANCE.md §1.3). Their draws
(``seed % 1000``) differ from those of a seed taken modulo 2**64 or clipped to 2**63 - 1."""


def check_big_seeds(context: Context) -> None:
    """RESETs with seeds from 2**63 - 1 to 2**200 + 3 give the Python probes' observations and infos, the seed
    stream goes on from them (an unseeded RESET), and ``np_random_seed`` is each seed exactly."""
    with joined(context) as client:
        for written, seeds in BIG_SEEDS.items():
            client.reset(seeds, what=f"RESET with the seeds {written} (CONFORMANCE.md §1.3: no upper bound)")
            found = difference(client.call("np_random_seed"), seeds, f"CALL np_random_seed after the seeds {written}")
            if found:
                raise client.server.fail(
                    f"{found}: np_random_seed is the last seed given to reset, that exact int (CONFORMANCE.md §1.6)"
                )
        client.reset([None] * NUM_ENVS, what="an unseeded RESET after them (the seed stream goes on from seed % 1000)")


def check_same_step(context: Context) -> None:
    """SameStep: an episode's end comes with its ``final`` entry, and the reset observation and info."""
    with joined(context, autoreset_mode="SameStep") as client:
        client.reset(SEEDS)
        for step in range(1, 7):
            client.step(probe_actions(step, NUM_ENVS), what=f"STEP number {step} (SameStep)")


STEP_DTYPE_LISTINGS = (
    ["<i2", "<f4", "|u1"],
    ["|u1", "<f8", "<u2"],
    ["<u2", "<f4", "<u4"],
    ["<u4", "<f8", "<u8"],
    ["<u8", "<f4", "<i2"],
)
"""FLAG_DTYPES listings that, with the check's first two, put every core dtype in a STEP's array frames."""


def check_step_dtypes(context: Context) -> None:
    """FLAG_DTYPES: actions in the listed dtypes (float64 for the Box leaf, int32, bool, and every other core
    dtype) give the results the Python probes give for the same actions; also together with FLAG_SUBSET."""
    with joined(context) as client:
        client.reset(SEEDS)
        client.step(
            probe_actions(1, NUM_ENVS, push_dtype="<f8"),
            dtypes=["<i8", "<f8", "|i1"],
            what="STEP with FLAG_DTYPES ['<i8', '<f8', '|i1']",
        )
        client.step(
            probe_actions(2, NUM_ENVS, push_dtype="<f8"),
            dtypes=["<i4", "<f8", "|b1"],
            what="STEP with FLAG_DTYPES ['<i4', '<f8', '|b1']",
        )
        client.step(
            probe_actions(3, 1, push_dtype="<f8"),
            indexes=[1],
            dtypes=["<i8", "<f8", "|i1"],
            what="STEP with FLAG_DTYPES and FLAG_SUBSET for env 1",
        )
        for step, dtypes in enumerate(STEP_DTYPE_LISTINGS, 4):
            actions = probe_actions(step, NUM_ENVS)
            if np.dtype(dtypes[0]).kind == "u":
                actions[0] = np.abs(actions[0])  # (a direction of -1 has no unsigned form)
            listed = [np.ascontiguousarray(leaf, dtype=dtype) for leaf, dtype in zip(actions, dtypes)]
            client.step(listed, dtypes=dtypes, what=f"STEP with FLAG_DTYPES {dtypes} (core dtypes, §3.4)")
        client.step(probe_actions(4 + len(STEP_DTYPE_LISTINGS), NUM_ENVS), what="a plain STEP after them")


def check_step_values(context: Context) -> None:
    """FLAG_VALUE (form 3): actions as values, Python tuples and lists or numpy arrays of other dtypes, give the
    results the Python probes give for the same actions; also together with FLAG_SUBSET."""
    with joined(context) as client:
        client.reset(SEEDS)
        python_actions = [(1, [0.5, -0.25], [1, 0]), (0, (0.1, 0.2), (0, 1)), (-1, [-1.0, 1.0], [1, 1])]
        client.step_values(python_actions, what="STEP with FLAG_VALUE, actions as Python tuples and lists")
        numpy_actions = [
            (np.int32(-1), np.array([0.125, 0.75], dtype="<f8"), np.array([True, False])),
            (np.int64(1), np.array([-0.5, 0.0], dtype="<f4"), np.array([0, 1], dtype="|u1")),
            (np.int16(0), np.array([1.0, -1.0], dtype="<f8"), np.array([1, 1], dtype="<i8")),
        ]
        client.step_values(numpy_actions, what="STEP with FLAG_VALUE, actions as numpy arrays of other dtypes")
        client.step_values(
            [(1, [0.25, 0.25], [0, 0])], indexes=[2], what="STEP with FLAG_VALUE and FLAG_SUBSET for env 2"
        )
        client.step(probe_actions(4, NUM_ENVS), what="a plain STEP after them")


def check_queued_commands(context: Context) -> None:
    """RESET, STEP and CALL sent back to back are answered in order, each echoing its (64-bit) seq."""
    with joined(context) as client:
        server = client.server
        server.seq = 1 << 40  # seqs beyond 32 bits must be echoed whole
        actions = probe_actions(1, NUM_ENVS)
        sent = [
            server.send_reset(SEEDS),
            server.send_step(actions),
            server.send_call("np_random_seed"),
        ]
        why = "PROTOCOL.md §6: a client answers every command exactly once, in order, and may have several queued"
        first = client.answer(sent[0], NUM_ENVS, why)
        client.compare(first, client.reference.reset(SEEDS), None, "the queued RESET")
        second = client.answer(sent[1], NUM_ENVS, why)
        client.compare(second, client.reference.step(action_rows(actions)), None, "the queued STEP")
        results = call_results(server, server.expect(Kind.CALL_RESULT, seq=sent[2], why=why), NUM_ENVS)
        found = difference(results, SEEDS, "the results of CALL np_random_seed")
        if found:
            raise server.fail(f"{found}: each env's np_random_seed is the seed of its last reset")


def check_subsets(context: Context) -> None:
    """FLAG_SUBSET: RESET, STEP, CALL and SET_ATTR for envs [2, 0] cover those envs in that order; env 1 is
    untouched."""
    with joined(context) as client:
        rule = "PROTOCOL.md §5.5: everything per env follows the order of the index frame; the other envs are untouched"

        def seeds_are(expected: list[int], indexes: list[int] | None = None) -> None:
            results = client.call("np_random_seed", count=len(expected), indexes=indexes)
            shown = "" if indexes is None else f" for envs {indexes}"
            found = difference(results, expected, f"CALL np_random_seed{shown}: the results")
            if found:
                raise client.server.fail(f"{found} ({rule})")

        client.reset(SEEDS)
        client.step(probe_actions(1, NUM_ENVS))
        client.reset([21, 22], indexes=[2, 0], what="RESET with FLAG_SUBSET for envs [2, 0] and seeds [21, 22]")
        seeds_are([22, SEEDS[1], 21])
        client.step(probe_actions(2, 2), indexes=[2, 0], what="STEP with FLAG_SUBSET for envs [2, 0]")
        seeds_are([21, 22], indexes=[2, 0])
        seeds_are([SEEDS[1]], indexes=[1])
        _set_attr(client.server, "mark", ["a", "b", "c"])
        _set_attr(client.server, "mark", ["z", ("x",)], indexes=[2, 0])
        found = difference(client.call("mark"), [("x",), "b", "z"], "CALL mark after SET_ATTR for envs [2, 0]")
        if found:
            raise client.server.fail(f"{found} ({rule})")
        _each_with_a_failure(client)
        client.step(
            probe_actions(3, NUM_ENVS),
            what="a STEP for all envs after them (env 1 must not have been stepped or reset by the subset commands)",
        )


def _each_with_a_failure(client: Driven) -> None:
    """A STEP with FLAG_SUBSET and FLAG_EACH for envs [2, 0] in which env 2 gets a NaN direction: a RESULT whose
    ``errors`` names env 2's ValueError, env 2's entries blank (its last observation, reward 0, no flags, ``{}``),
    env 0's as its probe's (PROTOCOL.md §5.6)."""
    server = client.server
    what = "a STEP with FLAG_SUBSET and FLAG_EACH for envs [2, 0], env 2 with a NaN direction"
    rule = (
        "PROTOCOL.md §5.6: a STEP with FLAG_EACH steps every env of the command and answers with a RESULT whose "
        "'errors' has one entry per env: null, or the report an ERROR would carry ({'type', 'module', 'message', "
        "'traceback'}); an env that raised keeps its last observation, its reward and flags are 0, its info {}"
    )
    actions = [np.array([np.nan, 0.0]), np.zeros((2, 2), np.float32), np.zeros((2, 2), np.int8)]
    seq = server.next_seq()
    frames = server.step_frames(seq, actions, indexes=[2, 0], dtypes=["<f8", "<f4", "|i1"])
    frames[0] = protocol.add_flags(frames[0], protocol.FLAG_EACH)
    server.send_raw(frames, f"STEP seq {seq}, count 2, FLAG_SUBSET indexes [2, 0], FLAG_EACH: {what}")
    result = client.answer(seq, 2, f"{what}; {rule}")
    stepped = client.reference.step(action_rows(actions)[1:], indexes=[0])
    blank = client.reference.envs[2]._observation()  # (env 2 raised before its state changed: CONFORMANCE.md §1.4)
    finals = None if stepped.final is None else [None, *stepped.final]
    expected = Expected(
        [0.0, *stepped.rewards],
        [False, *stepped.terminated],
        [False, *stepped.truncated],
        [blank, *stepped.obs],
        [{}, *stepped.infos],
        finals,
    )
    client.compare(result, expected, [2, 0], what)
    errors = result.value.get("errors")
    problems = []
    if type(errors) is not list or len(errors) != 2:
        problems.append(f"'errors' is {preview(errors)}, expected a list of 2 entries, one per env of the command")
    else:
        if errors[1] is not None:
            problems.append(f"the entry of env 0, which did not raise, is {preview(errors[1])}, expected null")
        report = errors[0]
        if type(report) is not dict:
            problems.append(f"the entry of env 2 is {preview(report)}, expected the report of its ValueError")
        else:
            found = (report.get("type"), report.get("module"))
            if found != ("ValueError", "builtins"):
                problems.append(
                    f"env 2's error has type {found[0]!r} and module {found[1]!r}, expected 'ValueError', 'builtins'"
                )
            if type(report.get("message")) is not str:
                problems.append(f"env 2's error has the message {preview(report.get('message'))}, expected a string")
            if "traceback" in report and type(report["traceback"]) is not str:
                problems.append(f"env 2's error has the traceback {preview(report['traceback'])}, expected a string")
    if problems:
        raise server.fail(f"{what}: the RESULT (seq {seq}) " + "; ".join(problems) + f" ({rule})")


# -- malformed commands ----------------------------------------------------------------------------


def check_malformed_commands(context: Context) -> None:
    """Malformed commands are answered with ERROR echoing their seq (a message of an unknown kind: seq 0), and the
    client keeps serving."""
    with joined(context) as client:
        server = client.server
        client.reset(SEEDS)

        def step_with(change: Callable[[list[Any]], list[Any]], note: str) -> Callable[[], int]:
            def send() -> int:
                seq = server.next_seq()
                frames = change(server.step_frames(seq, probe_actions(1, NUM_ENVS)))
                server.send_raw(frames, f"STEP seq {seq}, count {NUM_ENVS}: {note}")
                return seq

            return send

        def shorten(frames: list[Any]) -> list[Any]:
            return [*frames[:2], frames[2].tobytes()[:-1], *frames[3:]]

        def unknown_kind() -> int:
            seq = server.next_seq()
            frame = protocol.HEADER.pack(protocol.MAGIC, protocol.PROTOCOL_VERSION, UNKNOWN_KIND, 0, 0, seq)
            server.send_raw([frame], f"a message of the unknown kind {UNKNOWN_KIND}, seq {seq}")
            return seq

        cases: list[tuple[str, str, Callable[[], int]]] = [
            (
                "a STEP whose action frame for the Box leaf is one byte short",
                "§5.1: an array frame holds exactly k * prod(shape) * itemsize bytes",
                step_with(shorten, "the Box leaf's frame one byte short"),
            ),
            (
                "a STEP that lacks its last action frame",
                "§5.4: one array frame per leaf of the action space",
                step_with(lambda frames: frames[:-1], "without the MultiBinary leaf's frame"),
            ),
            (
                "a RESET whose index frame repeats an index ([1, 1])",
                "§5.5: a client must reject an index frame with a repeated index",
                lambda: server.send_reset([1, 2], indexes=[1, 1]),
            ),
            (
                f"a RESET whose index frame names env {NUM_ENVS} of {NUM_ENVS}",
                "§5.5: a client must reject an index frame with an index >= k",
                lambda: server.send_reset([1], indexes=[NUM_ENVS]),
            ),
            (
                "a RESET with FLAG_SUBSET and count 0 (an empty index frame)",
                "§5.5: a client must reject an index frame with count 0",
                lambda: server.send_reset([], indexes=[]),
            ),
            (
                "a RESET with count 2 whose index frame holds one index (2 bytes)",
                "§5.5: a client must reject an index frame of the wrong length",
                lambda: server.send_reset([1, 2], indexes=[0], count=2),
            ),
            (
                f"a RESET with count 2 and no FLAG_SUBSET to a client of {NUM_ENVS} envs",
                "§2.1, §5.2: without FLAG_SUBSET a command's count is the client's k",
                lambda: server.send_reset([1, 2], count=2),
            ),
            (
                f"a RESET for {NUM_ENVS} envs with 2 seeds",
                "§5.2: one seed per env the command is for",
                lambda: server.send_reset([1, 2], count=NUM_ENVS),
            ),
            (
                "a CALL with the unknown query 'no_such_query'",
                "§5.3: a query that is not null and not a known query is an error (ERROR)",
                lambda: server.send_call("render", query="no_such_query"),
            ),
            (
                f"a message of the unknown kind {UNKNOWN_KIND}",
                "§2.1: version 2 with a kind that is not in §4 is malformed and answered with ERROR seq 0, as a "
                "header without the magic is: nothing in it can be trusted, its seq included",
                unknown_kind,
            ),
        ]
        for description, rule, send in cases:
            seq = send()
            untrusted = send is unknown_kind
            answer = "ERROR with seq 0" if untrusted else "ERROR echoing its seq"
            expect_error(
                server,
                seq,
                f"PROTOCOL.md {rule}; §8, §11: a command the client cannot handle is answered with {answer}. The "
                f"command was {description}",
                untrusted=untrusted,
            )
            client.reset(SEEDS, what=f"a valid RESET after {description} (the client keeps serving, §8)")


# -- malformed messages and values a client must refuse ---------------------------------------------


def _after_malformed(client: Driven, seq: int, what: str, rule: str, answer: str) -> None:
    """Read the client's answer to the malformed message ``what`` (seq ``seq``), then the RESULT of a valid RESET
    sent right after it (the client keeps serving).

    ``answer``: ``"ERROR seq 0"`` (nothing in the header can be trusted), ``"ERROR"`` (echoing ``seq``), or
    ``"RESULT"`` (the message is handled as the valid RESET it would be without what is wrong).
    """
    server = client.server
    follow = server.send_reset(SEEDS)
    because = f"PROTOCOL.md {rule}; the client answers it with {answer} and keeps serving (§2.1, §8, §11)"
    received = server.receive(REPLY_SECONDS, stop_on_exit=True)
    wanted_seq = 0 if answer == "ERROR seq 0" else seq
    wanted_kind = Kind.RESULT if answer == "RESULT" else Kind.ERROR
    if received is None or received.kind != wanted_kind or received.seq != wanted_seq:
        got = f"nothing within {REPLY_SECONDS:g} s" if received is None else received.describe()
        raise server.fail(
            f"after {what} (seq {seq}) and a valid RESET (seq {follow}), the client sent {got} ({because})"
        )
    if answer == "RESULT":
        client.compare(server.parse_result(received, NUM_ENVS), client.reference.reset(SEEDS), None, what)
    result = client.answer(follow, NUM_ENVS, f"the valid RESET after {what} ({because})")
    client.compare(result, client.reference.reset(SEEDS), None, f"the valid RESET after {what}")


def check_malformed_frames(context: Context) -> None:
    """Headers a client must not take for commands: short or without the magic (ERROR, seq 0), a routing id in
    front of the header (ERROR, seq 0), another version, a frame twice, a missing value section (ERROR echoing the
    seq); flags it does not know, or on a kind they are not for, are ignored (a RESULT)."""
    with joined(context) as client:
        server = client.server
        client.reset(SEEDS)

        def reset_frames(
            seq: int, *, flags: int = protocol.FLAG_VALUE, version: int = protocol.PROTOCOL_VERSION
        ) -> list[Any]:
            frames = protocol.message(Kind.RESET, {"seeds": list(SEEDS)}, seq=seq, count=NUM_ENVS)
            frames[0] = protocol.HEADER.pack(protocol.MAGIC, version, Kind.RESET, flags, NUM_ENVS, seq)
            return frames

        cases: list[tuple[str, str, Callable[[int], list[Any]], str]] = [
            (
                "a RESET whose header frame is cut to 10 bytes",
                "§2.1: a frame shorter than 16 bytes is malformed, and nothing in it can be trusted, its seq included",
                lambda seq: [reset_frames(seq)[0][:10], *reset_frames(seq)[1:]],
                "ERROR seq 0",
            ),
            (
                "a RESET whose header starts with b'XR' instead of the magic b'GR'",
                "§2.1: a frame without the magic is malformed, and nothing in it can be trusted, its seq included",
                lambda seq: [b"XR" + reset_frames(seq)[0][2:], *reset_frames(seq)[1:]],
                "ERROR seq 0",
            ),
            (
                "a RESET with a routing id frame in front of its header (an interrupted send, §14)",
                "§14: such a command is malformed, and the client answers ERROR and keeps serving; its frame 0 has no "
                "magic, so no seq can be read (§2.1)",
                lambda seq: [b"0123456789abcdef0123456789abcdef", *reset_frames(seq)],
                "ERROR seq 0",
            ),
            (
                "a RESET with header version 3",
                "§2.1, §10: a command of another version is not read on (the 16 header bytes keep their layout in "
                "every version, so its seq can be echoed)",
                lambda seq: reset_frames(seq, version=3),
                "ERROR",
            ),
            (
                "a RESET with FLAG_VALUE and no value section",
                "§2: the value section is present iff flags & FLAG_VALUE",
                lambda seq: reset_frames(seq)[:1],
                "ERROR",
            ),
            (
                "a STEP whose last action frame arrives twice (an interrupted send, §14)",
                "§5.4, §14: one array frame per leaf; such a command is malformed",
                lambda seq: (lambda frames: [*frames, frames[-1]])(server.step_frames(seq, probe_actions(1, NUM_ENVS))),
                "ERROR",
            ),
            (
                "a RESET with the flag bit 15, which no version defines",
                "§2.1: senders set other bits to 0; a receiver ignores bits it does not know (the message is "
                "handled as if they were 0), so that a hint such as FLAG_CROWDED can be added within a version",
                lambda seq: reset_frames(seq, flags=protocol.FLAG_VALUE | 0x8000),
                "RESULT",
            ),
            (
                "a RESET with FLAG_DTYPES, a flag for STEP only",
                "§2.1: FLAG_DTYPES is for STEP only; a defined flag on a kind it is not defined for is ignored",
                lambda seq: reset_frames(seq, flags=protocol.FLAG_VALUE | protocol.FLAG_DTYPES),
                "RESULT",
            ),
        ]
        for what, rule, frames_for, answer in cases:
            seq = server.next_seq()
            server.send_raw(frames_for(seq), f"seq {seq}: {what}")
            _after_malformed(client, seq, what, rule, answer)
        client.step(probe_actions(1, NUM_ENVS), what="a STEP after the malformed messages (the client keeps serving)")


def _send_set_attr_body(server: ScriptedServer, body: bytes, buffers: Sequence[bytes], what: str) -> int:
    """Send SET_ATTR for every env with the raw value section ``body``, ``buffers``; returns its seq."""
    seq = server.next_seq()
    header = protocol.pack_header(Kind.SET_ATTR, seq, NUM_ENVS, protocol.FLAG_VALUE)
    server.send_raw([header, body, *buffers], f"SET_ATTR seq {seq}: {what}")
    return seq


def _set_attr_body(name: str, values_json: str) -> bytes:
    """The body of a SET_ATTR of ``name`` whose ``values`` list holds the raw JSON ``values_json``."""
    return f'{{"name":"{name}","values":["l",{values_json}]}}'.encode()


def _nested(levels: int) -> str:
    """A value nested ``levels`` lists deep around 0 (each list tagged, so a level of its own)."""
    return '["l",' * levels + "0" + "]" * levels


INVALID_VALUES: list[tuple[str, str, str, list[bytes]]] = [
    ("§3.1: numbers that overflow are invalid", "a float that overflows (1e400)", "1e400", []),
    ("§3.1: bare NaN/Infinity tokens are invalid", "a bare NaN token", "NaN", []),
    ("§3.1: plain (untagged) JSON arrays are invalid", "an untagged array [1, 2]", "[1,2]", []),
    ("§3.2: a tag no version has is not a value", "the unknown tag 'z'", '["z",1]', []),
    (
        "§3.1: nesting deeper than 64 levels is invalid",
        "a list nested 63 deep in a value (the body's object is at level 0, its 'values' at 1, each value at 2: the "
        "innermost list is at level 64)",
        _nested(63),
        [],
    ),
    ("§3.2: keys of tag d must be hashable", "a dict (tag d) whose key is a list", '["d",["l",1],2]', []),
    ("§3.2: a number that does not fit the dtype is invalid", "the scalar ['s', '|u1', 256]", '["s","|u1",256]', []),
    (
        "§3.2: a number that does not fit the dtype is invalid",
        "the scalar ['s', '<f4', 1e300]",
        '["s","<f4",1e300]',
        [],
    ),
    ("§3.2: a number that does not fit the dtype is invalid", "the scalar ['s', '|i1', -129]", '["s","|i1",-129]', []),
    ("§3.2: the bytes of |b1 data are 0 or 1", "a |b1 array holding the byte 2", '["a","|b1",[2],0]', [b"\x01\x02"]),
    ("§3.2: the value of a |b1 scalar is a JSON bool", "the scalar ['s', '|b1', 2]", '["s","|b1",2]', []),
    (
        "§3.2: buffer i holds exactly prod(shape) * itemsize bytes",
        "an <i4 array of shape [2] in 4 bytes",
        '["a","<i4",[2],0]',
        [bytes(4)],
    ),
    ("§3.4: void (V) dtypes are refused", "an array of dtype |V4", '["a","|V4",[1],0]', [bytes(4)]),
    ("§3.4: dtype strings with commas are refused", "an array of dtype '<i4,<i4'", '["a","<i4,<i4",[1],0]', [bytes(8)]),
    ("§3.4: object (O) dtypes are refused", "an array of dtype |O", '["a","|O",[1],0]', [bytes(8)]),
    (
        "§3.4: U data must hold valid code points (<= U+10FFFF)",
        "a <U1 array holding the code point 0x110000",
        '["a","<U1",[1],0]',
        [(0x110000).to_bytes(4, "little")],
    ),
    (
        "§3.2, §11: a receiver not in trusted mode must reject tag p without unpickling",
        "a pickle (tag p) to a client not in trusted mode",
        '["p",0]',
        [b"\x80\x05N."],
    ),
    (
        "§2.2: a buffer frame the body does not name makes the value malformed",
        "a buffer frame no tag names",
        "0",
        [b"x"],
    ),
]
"""Values a client must refuse: (the rule, what the value is, its JSON text, its buffer frames)."""


def check_invalid_values(context: Context) -> None:
    """Value sections a client must refuse (PROTOCOL.md §2.2, §3) are answered with ERROR, and the client keeps
    serving; a body that is not JSON or not UTF-8 too; a value nested to the limit (level 64) is still read."""
    with joined(context) as client:
        server = client.server
        client.reset(SEEDS)
        cases = [
            (rule, what, _set_attr_body("refused", f"null,{text},null"), buffers)
            for rule, what, text, buffers in INVALID_VALUES
        ]
        cases.append(("§3.1: the body is JSON", "a body cut short", b'{"name":"refused","values":["l",', []))
        cases.append(
            (
                "§3.1: the body must be valid UTF-8",
                "a body holding the byte 0xff in a string",
                b'{"name":"refused","values":["l",null,"\xff",null]}',
                [],
            )
        )
        for rule, what, body, buffers in cases:
            seq = _send_set_attr_body(server, body, buffers, what)
            expect_error(
                server,
                seq,
                f"PROTOCOL.md {rule}. SET_ATTR carried {what}: a command whose value the client cannot decode is "
                "answered with ERROR echoing its seq (§8, §11)",
            )
        body = _set_attr_body("deep", f"{_nested(62)},0,0")
        seq = _send_set_attr_body(
            server, body, [], "a list nested 62 deep in env 0's value (its innermost at level 63)"
        )
        server.expect(
            Kind.CALL_RESULT,
            seq=seq,
            why="PROTOCOL.md §3.1: nesting up to 64 levels is valid (the body's object is at level 0, its 'values' "
            "list at 1, each value at 2; this one's innermost list is at level 63)",
        )
        client.reset(SEEDS, what="a RESET after the refused values (the client keeps serving, §8)")


OPTIONAL_TAGS: list[tuple[str, Any]] = [
    ("o", np.array([1, "x", None, (2.5,)], dtype=object).reshape(2, 2)),
    ("S", np.complex128(1.5 - 2j)),
    ("g", spaces.GraphInstance(np.arange(4, dtype="<f4").reshape(2, 2), None, np.array([[0, 1]], dtype="<i8"))),
]
"""A value for each optional tag (PROTOCOL.md §11): read exactly, or refused with ERROR."""


def check_optional_tags(context: Context) -> None:
    """Tags o, S and g (optional, PROTOCOL.md §11): a SET_ATTR carrying one is either answered and the value comes
    back exactly, or answered with ERROR; the client keeps serving either way."""
    with joined(context) as client:
        server = client.server
        client.reset(SEEDS)
        for tag, value in OPTIONAL_TAGS:
            name = f"tag_{tag}"
            seq = server.send_set_attr(name, [value] * NUM_ENVS)
            received = server.receive(REPLY_SECONDS, stop_on_exit=True)
            if received is not None and received.kind == Kind.ERROR and received.seq == seq:
                continue
            if received is None or received.kind != Kind.CALL_RESULT or received.seq != seq:
                got = "nothing" if received is None else received.describe()
                raise server.fail(
                    f"SET_ATTR {name!r} with a value of tag {tag!r} ({preview(value)}) was answered with {got}, "
                    f"expected CALL_RESULT or ERROR echoing seq {seq} (PROTOCOL.md §11: tags o, S, g are optional; "
                    "a client that does not read one answers ERROR)"
                )
            for number, got in enumerate(client.call(name)):
                found = difference(got, value, f"CALL {name}'s result for env {number}")
                if found:
                    raise server.fail(
                        f"{found}. The client took the value of tag {tag!r}, so it must give it back exactly "
                        "(PROTOCOL.md §3.2, §11)"
                    )
        client.reset(SEEDS, what="a RESET after the optional tags")


# -- CALL and SET_ATTR -----------------------------------------------------------------------------


def _set_attr(server: ScriptedServer, name: str, values: Sequence[Any], **options: Any) -> None:
    """SET_ATTR (``options``: ``outermost``, ``indexes``), answered by CALL_RESULT with null results."""
    seq = server.send_set_attr(name, values, **options)
    received = server.expect(Kind.CALL_RESULT, seq=seq, why="PROTOCOL.md §5.3: SET_ATTR is answered by CALL_RESULT")
    if received.value != {"results": None}:
        raise server.fail(
            f"SET_ATTR {name!r} was answered with {preview(received.value)}, expected {{'results': None}} "
            "(PROTOCOL.md §5.3)"
        )


def _has_attr_calls_nothing(client: Driven) -> None:
    """has_attr of the env's methods ``reset`` and ``step`` reads them, never calls them (PROTOCOL.md §5.3): each is
    answered with a bool per env (whether a client counts a method as an attribute is its own), and the envs then
    step on from where they were, not from a reset."""
    rule = "PROTOCOL.md §5.3: the has_attr query answers true or false per env; the attribute is read, never called"
    for step, name in enumerate(("reset", "step"), start=1):
        answers = client.call(name, query=HAS_ATTR_QUERY)
        if any(type(answer) is not bool for answer in answers):
            raise client.server.fail(f"has_attr {name!r} answered {preview(answers)}, expected a bool per env ({rule})")
        client.step(
            probe_actions(step, NUM_ENVS),
            what=f"a STEP after has_attr {name!r} (the envs step on from where they were: {rule})",
        )


def check_call_and_set_attr(context: Context) -> None:
    """CALL and SET_ATTR with the names every client answers (PROTOCOL.md §11): render, np_random_seed,
    metadata, render_mode, the wrappers query, has_attr, attributes set and read back, and a missing
    attribute (an AttributeError)."""
    with joined(context) as client:
        server = client.server

        def same(got: Any, expected: Any, what: str, rule: str) -> None:
            found = difference(got, expected, what)
            if found:
                raise server.fail(f"{found} ({rule})")

        unseeded = client.call("np_random_seed")
        if any(type(seed) is not int for seed in unseeded):
            raise server.fail(
                f"CALL np_random_seed before any reset answered {preview(unseeded)}, expected an int per env "
                "(PROTOCOL.md §11)"
            )
        seeds = [11, 12, 13]
        client.reset(seeds)
        same(client.call("render"), [None] * NUM_ENVS, "CALL render's results", "CONFORMANCE.md §1.6: render() is null")
        same(
            client.call("np_random_seed"),
            seeds,
            "CALL np_random_seed's results",
            "PROTOCOL.md §11: the last seed given to the env's reset",
        )
        same(
            client.call("metadata"),
            [PROBE_METADATA] * NUM_ENVS,
            "CALL metadata's results",
            "PROTOCOL.md §11: the env's metadata, as in HELLO",
        )
        same(client.call("render_mode"), [None] * NUM_ENVS, "CALL render_mode's results", "PROTOCOL.md §11")
        wrappers = client.call(WRAPPERS_QUERY)
        if any(type(names) is not list or any(type(name) is not str for name in names) for names in wrappers):
            raise server.fail(
                f"CALL {WRAPPERS_QUERY!r} answered {preview(wrappers)}, expected for each env a list of "
                "'module.qualname' strings ([] for an env without wrappers) (PROTOCOL.md §5.3, §11)"
            )
        rule = "PROTOCOL.md §5.3, §11: the has_attr query answers whether each env has the attribute"
        same(client.call("render", query=HAS_ATTR_QUERY), [True] * NUM_ENVS, "has_attr 'render'", rule)
        same(client.call("no_such_attribute", query=HAS_ATTR_QUERY), [False] * NUM_ENVS, "has_attr of a missing", rule)
        _has_attr_calls_nothing(client)
        values = ["a", 2, 3.5]
        _set_attr(server, "label", values)
        rule = "PROTOCOL.md §5.3, §11: a name an earlier SET_ATTR set answers the value it set, exactly (§3)"
        same(client.call("label"), values, "CALL label's results after SET_ATTR label", rule)
        same(client.call("label", query=HAS_ATTR_QUERY), [True] * NUM_ENVS, "has_attr 'label' after SET_ATTR", rule)
        _set_attr(server, "tag", [True, None, "z"], outermost=True)
        same(client.call("tag"), [True, None, "z"], "CALL tag's results after SET_ATTR with outermost true", rule)
        seq = server.send_call("no_such_attribute")
        report = expect_error(
            server, seq, "PROTOCOL.md §5.3, §8, §11: a CALL of an attribute no env has is answered with AttributeError"
        )
        if report.get("type") != "AttributeError" or report.get("module") != "builtins" or report.get("index") is None:
            raise server.fail(
                f"CALL no_such_attribute was answered with an ERROR of type {preview(report.get('type'))}, module "
                f"{preview(report.get('module', 'absent'))} and index {preview(report.get('index', 'absent'))}, "
                "expected 'AttributeError', 'builtins' and the local index of the env (PROTOCOL.md §11): the learner "
                "raises it as an AttributeError only then (§8), which getattr and hasattr rely on"
            )
        client.reset(seeds, what="a RESET after the failed CALL (the client keeps serving, §8)")


def tagged_values() -> list[Any]:
    """One value per env using every tag a client must read (PROTOCOL.md §11: ``l t d f i a s b``)."""
    return [
        {
            "tuple": (1, "x", (2.5, None)),
            "int keys": {1: "one", (2, 3): [True, False], -4: -0.0},
            "nan": float("nan"),
            "inf": [float("inf"), float("-inf")],
            "big": [2**64 + 3, -(2**70)],
            "floats": [1.0, 0.1, 1e300, -2.5e-300],
        },
        {
            "array": np.arange(6, dtype="<i2").reshape(2, 3),
            "empty": np.zeros((0, 2), dtype="<f8"),
            "bits": np.array([True, False, True], dtype="|b1"),
            "scalars": (np.float32(0.1), np.uint64(2**64 - 1), np.int8(-128), np.bool_(True), np.float64("nan")),
            "bytes": b"\x00\xffbytes",
        },
        ["probé \U0001f600", "", [], {}, (), np.array([[1.5, -2.0]], dtype="<f4")],
    ]


def core_dtype_values() -> list[Any]:
    """One value per env holding, for every core dtype (PROTOCOL.md §3.4), arrays (env 0: its extremes, env 2:
    shape (2, 0) and ()) and numpy scalars (env 1: its extremes)."""
    extremes = {}
    for name in CORE_DTYPES:
        dtype = np.dtype(name)
        if dtype.kind == "b":
            extremes[name] = [False, True]
        elif dtype.kind == "f":
            extremes[name] = [float(np.finfo(dtype).min), float(np.finfo(dtype).smallest_subnormal)]
        else:
            extremes[name] = [int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)]
    return [
        {name: np.array(pair, dtype=name) for name, pair in extremes.items()},
        {name: tuple(np.array(pair, dtype=name)) for name, pair in extremes.items()},
        [(np.zeros((2, 0), dtype=name), np.array(extremes[name][1], dtype=name)) for name in CORE_DTYPES],
    ]


def check_set_attr_values(context: Context) -> None:
    """SET_ATTR values using every tag a client must read, and arrays and scalars of every core dtype, come back
    from CALL exactly as they were set."""
    with joined(context) as client:
        client.reset(SEEDS)
        for name, values in (("payload", tagged_values()), ("core_dtypes", core_dtype_values())):
            _set_attr(client.server, name, values)
            for number, (got, expected) in enumerate(zip(client.call(name), values)):
                found = difference(got, expected, f"CALL {name}'s result for env {number}")
                if found:
                    raise client.server.fail(
                        f"{found}. PROTOCOL.md §11: a name an earlier SET_ATTR set answers the value it set, exactly "
                        "as it arrived; a client reads the tags l t d f i a s b and the core dtypes, and keeps exact "
                        "types (§3, §3.4)"
                    )


# -- control messages ------------------------------------------------------------------------------


def check_ping_ignored(context: Context) -> None:
    """PING is not answered: after PING and RESET, the next message is RESET's RESULT."""
    with joined(context) as client:
        client.server.send_ping()
        client.reset(SEEDS, what="RESET after a PING (PROTOCOL.md §4, §8.1, §11: a client ignores PING)")
        client.server.send_ping()
        client.server.send_ping()
        client.step(probe_actions(1, NUM_ENVS), what="STEP after two PINGs (a client ignores PING)")


def check_server_error_ignored(context: Context) -> None:
    """The server's ERROR (seq 0) is informative: not answered, and the client keeps serving."""
    with joined(context) as client:
        client.reset(SEEDS)
        client.server.send_error("conformance check: a malformed message (this ERROR is informative)")
        client.reset(
            SEEDS,
            what="RESET after the server's ERROR (PROTOCOL.md §8: an ERROR from the server is only logged, not "
            "answered)",
        )


def check_evict(context: Context) -> None:
    """EVICT: the client joins again with a new HELLO from a new session (a new routing id), then serves."""
    with joined(context) as client:
        server = client.server
        client.reset(SEEDS)
        old_identity, old_session = server.peer, client.hello.value.get("session")
        server.send_evict("conformance check: this membership ends")
        why = (
            "PROTOCOL.md §8.2: a client receiving EVICT ends its session and joins again as a new one; §11: on EVICT "
            "start again with a new routing id"
        )
        deadline = time.monotonic() + 2 * REPLY_SECONDS
        while True:
            received = server.receive(max(0.0, deadline - time.monotonic()), stop_on_exit=True)
            if received is None:
                raise server.fail(
                    f"expected a new HELLO within {2 * REPLY_SECONDS:g} s of EVICT, but nothing came ({why})"
                )
            if received.kind == Kind.BYE and received.identity == old_identity:
                continue  # a goodbye from the evicted session is harmless
            if received.kind != Kind.HELLO:
                raise server.fail(f"expected a new HELLO after EVICT, but got {received.describe()} ({why})")
            break
        if received.identity == old_identity:
            raise server.fail(
                f"the HELLO after EVICT came from the evicted routing id {received.identity[:64]!r} ({why})"
            )
        problems = hello_problems(received, NUM_ENVS, previous=old_session)
        if problems:
            shown = "\n".join(f"  {problem}" for problem in problems)
            raise server.fail(f"the HELLO after EVICT is not as PROTOCOL.md §7 requires:\n{shown}")
        server.send_welcome(client.slots, identity=received.identity, num_envs=8)
        client.reference = Reference(NUM_ENVS)
        client.reset(SEEDS, what="RESET of the new session")


def check_close(context: Context) -> None:
    """CLOSE is answered with BYE echoing its seq, and the client exits with status 0 within 10 s."""
    with joined(context) as client:
        server = client.server
        client.reset(SEEDS)
        seq = server.send_close()
        received = server.expect(Kind.BYE, seq=seq, why="PROTOCOL.md §9: a client receiving CLOSE answers BYE")
        if received.value is not None:
            raise server.fail(f"the BYE carries a value section {preview(received.value)}; BYE has none (§4)")
        status = client.process.wait(EXIT_SECONDS)
        if status is None:
            raise server.fail(
                f"the client still runs {EXIT_SECONDS:g} s after its BYE: after CLOSE a client closes its envs and "
                "exits with status 0, it does not reconnect (PROTOCOL.md §9, CONFORMANCE.md §2)"
            )
        if status != 0:
            raise server.fail(f"the client exited with status {status} after CLOSE, expected 0 (CONFORMANCE.md §2)")


def check_refused(context: Context) -> None:
    """REFUSE for good (code "spaces", a version REFUSE with header version 3, and code "full" with waiting false,
    a waiting line that is full itself, PROTOCOL.md §10): the client exits with a non-zero status within 30 s."""
    first, second, third = context.endpoint(), context.endpoint(), context.endpoint()
    with (
        ScriptedServer(first, liveness_timeout=context.liveness_timeout) as spaces_server,
        ScriptedServer(second, liveness_timeout=context.liveness_timeout) as version_server,
        ScriptedServer(third, liveness_timeout=context.liveness_timeout) as full_server,
    ):
        cases = [
            (spaces_server, spaces_server.watch(context.start_client(first, NUM_ENVS)), "a REFUSE with code 'spaces'"),
            (
                version_server,
                version_server.watch(context.start_client(second, NUM_ENVS)),
                "a REFUSE with code 'version' and header version 3 (a server of another version, PROTOCOL.md §7)",
            ),
            (
                full_server,
                full_server.watch(context.start_client(third, NUM_ENVS)),
                "a REFUSE with code 'full' and waiting false (the waiting line is full too, PROTOCOL.md §10)",
            ),
        ]
        spaces_server.expect_hello()
        spaces_server.send_refuse("spaces", "conformance check: the spaces differ from the vector's", waiting=False)
        version_server.expect_hello()
        version_server.send_refuse(
            "version", "protocol version mismatch: the server speaks 3, the client 2", waiting=False, version=3
        )
        full_server.expect_hello()
        full_server.send_refuse("full", "conformance check: the waiting line is full", waiting=False)
        deadline = time.monotonic() + REFUSED_EXIT_SECONDS
        for server, process, what in cases:
            status = process.wait(max(0.0, deadline - time.monotonic()))
            if status is None:
                raise server.fail(
                    f"the client still runs {REFUSED_EXIT_SECONDS:g} s after {what} with waiting false: a client "
                    "refused for good reports the reason and stops (PROTOCOL.md §7), with a non-zero status "
                    "(CONFORMANCE.md §2)"
                )
            if status == 0:
                raise server.fail(
                    f"the client exited with status 0 after {what}: a client refused for good exits with a non-zero "
                    "status (CONFORMANCE.md §2)"
                )


def check_waiting_in_line(context: Context) -> None:
    """REFUSE "full" with waiting true: the client stays, silent, until an unprompted WELCOME; then serves."""
    endpoint = context.endpoint()
    with ScriptedServer(endpoint, liveness_timeout=context.liveness_timeout) as server:
        process = server.watch(context.start_client(endpoint, NUM_ENVS))
        hello = server.expect_hello(count=NUM_ENVS)
        server.send_refuse("full", "no free slot: this client is number 1 in line", waiting=True)
        server.expect_silence(
            1.0, why="PROTOCOL.md §7.3: a client in line stays connected and waits for the WELCOME the server sends"
        )
        if not process.running():
            raise server.fail(
                f"the client exited (status {process.process.returncode}) after a REFUSE with waiting true: it is "
                "in line and keeps waiting for a WELCOME (PROTOCOL.md §7, §7.3)"
            )
        slots = [1, 2, 3]
        server.send_welcome(slots, num_envs=4)
        client = Driven(server, process, hello, slots, "NextStep", False)
        client.reset(SEEDS, what="RESET after the unprompted WELCOME (PROTOCOL.md §7.3)")


def check_reset_first(context: Context) -> None:
    """WELCOME's reset_first: the first STEP (no RESET before it) resets the envs, as an autoreset step;
    a WELCOME key the client does not know is ignored."""
    with joined(
        context, reset_first=True, conformance_extra={"note": "a key of a later version: clients ignore it"}
    ) as client:
        why = (
            "the WELCOME said reset_first true (PROTOCOL.md §7, §8.2: the first STEP resets the envs, in NextStep "
            "mode) and carried a key the client does not know, 'conformance_extra' (§7: a client ignores it)"
        )
        client.step(probe_actions(1, NUM_ENVS), what=f"the first STEP: {why}")
        client.step(probe_actions(2, NUM_ENVS), what="the second STEP")


def check_welcome_spaces(context: Context) -> None:
    """The array layouts follow WELCOME's spaces, not the client's own: a WELCOME whose observation Dict has the
    probe's keys in another order (an equal space) gets RESULTs whose observation frames are in that order."""
    probe = probe_spaces()[0]
    reordered = spaces.Dict([(key, probe.spaces[key]) for key in ("mid", "alpha", "zeta")])
    with joined(context, observation_space=reordered) as client:
        why = (
            "the WELCOME's observation space is the probe's Dict with its keys in the order mid, alpha, zeta; "
            "PROTOCOL.md §7: the client must use WELCOME's single spaces for array layouts (§5.1: leaves in the "
            "space's key order)"
        )
        try:
            client.reset(SEEDS, what=f"RESET: {why}")
            client.step(probe_actions(1, NUM_ENVS), what=f"STEP: {why}")
        except CheckFailed as failure:  # (a RESULT in the client's own layout can fail on its frames' sizes)
            raise CheckFailed(f"{failure}\n({why})") from None


# -- coming and going ------------------------------------------------------------------------------

HELLO_REPEAT_SECONDS = 2.0
"""After how long without an answer a client says its HELLO again (PROTOCOL.md §7)."""

AWAY_SECONDS = 3.0
"""How long the learner of :func:`check_learner_back` stays away: long enough for several failed connection
attempts, short enough to keep the suite quick."""


def check_hello_repeated(context: Context) -> None:
    """A HELLO that gets no answer is said again, the same, after about 2 s (PROTOCOL.md §7); then the client
    serves the WELCOME that answers it."""
    endpoint = context.endpoint()
    with ScriptedServer(endpoint, liveness_timeout=context.liveness_timeout) as server:
        process = server.watch(context.start_client(endpoint, NUM_ENVS))
        first = server.expect_hello(count=NUM_ENVS)
        said = time.monotonic()
        why = (
            "PROTOCOL.md §7: a client that has had no answer to its HELLO for 2 s sends the same HELLO again (the "
            "learner drops a HELLO an interrupt cut short, and nothing else would answer it)"
        )
        again = server.expect(Kind.HELLO, timeout=2 * HELLO_REPEAT_SECONDS, count=NUM_ENVS, why=why)
        waited = time.monotonic() - said
        changed = difference(again.value, first.value, "the second HELLO's value")
        if again.identity != first.identity or changed:
            raise server.fail(
                f"the second HELLO is not the first said again (routing id {again.identity[:64]!r} against "
                f"{first.identity[:64]!r}; {changed or 'the same value'}): {why}"
            )
        if waited < 0.75 * HELLO_REPEAT_SECONDS:
            raise server.fail(f"the HELLO came again {waited:.2f} s after the first, expected after 2 s ({why})")
        server.send_welcome(list(range(NUM_ENVS)), num_envs=NUM_ENVS)
        client = Driven(server, process, first, list(range(NUM_ENVS)), "NextStep", False)
        client.reset(SEEDS, what="RESET after the WELCOME that answered the repeated HELLO")


def check_learner_back(context: Context) -> None:
    """The learner goes away (its socket closes) and is back at the same address only after a few seconds: the
    client keeps trying and joins it as a new session, with previous_session set. Before that, a learner that goes
    away without answering the client's first HELLO: that session was never welcomed, so the next HELLO, from a new
    routing id, still has previous_session null (PROTOCOL.md §11.1)."""
    endpoint = context.endpoint()
    with ScriptedServer(endpoint, liveness_timeout=context.liveness_timeout) as unanswered:
        process = context.start_client(endpoint, NUM_ENVS)  # (not watched: closing this server must not end it)
        dropped = unanswered.expect_hello(count=NUM_ENVS)
    with ScriptedServer(endpoint, liveness_timeout=context.liveness_timeout) as first:
        first.watch(process)
        hello = first.expect_hello(count=NUM_ENVS)
        problems = hello_problems(hello, NUM_ENVS)  # (previous_session null, also after the unanswered HELLO)
        if hello.identity == dropped.identity:
            problems.append("it comes from the routing id of the HELLO before (§11.1: a new socket and routing id)")
        if problems:
            shown = "\n".join(f"  {problem}" for problem in problems)
            raise first.fail(
                "the learner went away without answering the client's first HELLO and came back: the client's next "
                "HELLO is not as PROTOCOL.md §7, §11.1 require (a DISCONNECTED before WELCOME: a new socket and "
                f"session; a session that never got a WELCOME is no membership, so previous_session stays what it "
                f"was, null):\n{shown}"
            )
        first.send_welcome(list(range(NUM_ENVS)), num_envs=NUM_ENVS)
        Driven(first, process, hello, list(range(NUM_ENVS)), "NextStep", False).reset(SEEDS)
        first.clients.remove(process)  # (closing this server must not end it)
    time.sleep(AWAY_SECONDS)
    with ScriptedServer(endpoint, liveness_timeout=context.liveness_timeout) as second:
        second.watch(process)
        if not process.running():
            raise second.fail(
                f"the client exited (status {process.process.returncode}) within {AWAY_SECONDS:g} s of losing its "
                "learner: it reconnects with backoff and joins the server at the address again (PROTOCOL.md §8.1, "
                "§11 step 5; CONFORMANCE.md §2: for at least 60 s)"
            )
        why = (
            f"the learner was away for {AWAY_SECONDS:g} s and is back at the same address; PROTOCOL.md §8.1, §11 step "
            "5: the client reconnects with backoff and joins again as a new session"
        )
        rejoined = second.expect(Kind.HELLO, timeout=HELLO_SECONDS, count=NUM_ENVS, why=why)
        second.peer = rejoined.identity
        problems = hello_problems(rejoined, NUM_ENVS, previous=hello.value.get("session"))
        if rejoined.identity == hello.identity:
            problems.append("it comes from the routing id of the lost session (§8.2: a new session)")
        if problems:
            shown = "\n".join(f"  {problem}" for problem in problems)
            raise second.fail(f"the HELLO to the learner that came back is not as PROTOCOL.md §7 requires:\n{shown}")
        second.send_welcome(list(range(NUM_ENVS)), num_envs=NUM_ENVS)
        client = Driven(second, process, rejoined, list(range(NUM_ENVS)), "NextStep", False)
        seq = second.send_reset(SEEDS)
        received = second.receive(REPLY_SECONDS, stop_on_exit=True)
        while received is not None and received.kind == Kind.HELLO and received.identity == rejoined.identity:
            # HELLOs said again while the learner was away may arrive queued behind the first (§7)
            received = second.receive(REPLY_SECONDS, stop_on_exit=True)
        if received is None or received.kind != Kind.RESULT or received.seq != seq:
            got = "nothing" if received is None else received.describe()
            raise second.fail(f"expected RESULT echoing seq {seq} for the RESET after the rejoin, but got {got} (§5.2)")
        client.compare(second.parse_result(received, NUM_ENVS), client.reference.reset(SEEDS), None, "the RESET")


def check_zap_not_now(context: Context) -> None:
    """ZAP status 500 ("not now", PROTOCOL.md §12.4): the client neither stops nor retries at once (as libzmq's
    own reconnection would, 0.1 s later) but waits 0.5 to 2 s, connects again and joins."""
    endpoint = context.endpoint()
    with ScriptedServer(endpoint, liveness_timeout=context.liveness_timeout, zap_domain=b"gym_remote") as server:
        gatekeeper = ZapGatekeeper(server)
        try:
            process = server.watch(context.start_client(endpoint, NUM_ENVS))
            why = (
                "its first handshake was answered with ZAP status 500; PROTOCOL.md §11 step 6, §12.4: wait 0.5-2 s "
                "and connect again"
            )
            hello = server.expect(Kind.HELLO, timeout=HELLO_SECONDS, count=NUM_ENVS, why=why)
            arrived = time.monotonic()
            refused = [when for when, status in gatekeeper.answered if status == b"500"]
            if not refused:
                raise server.fail("the client's HELLO came without a handshake that the gatekeeper refused first")
            waited = arrived - refused[0]
            if waited < 0.4:
                raise server.fail(f"the client's HELLO came {waited:.2f} s after the ZAP status 500 ({why})")
            server.peer = hello.identity
            server.send_welcome(list(range(NUM_ENVS)), num_envs=NUM_ENVS)
            Driven(server, process, hello, list(range(NUM_ENVS)), "NextStep", False).reset(SEEDS)
        finally:
            gatekeeper.close()


CHECKS: list[Check] = [
    Check(GROUP, "HELLO is well-formed", check_hello),
    Check(GROUP, "RESET and STEP are answered (NextStep)", check_reset_and_step),
    Check(GROUP, "seeds of any size are taken exactly", check_big_seeds),
    Check(GROUP, "SameStep episode ends carry 'final'", check_same_step),
    Check(GROUP, "STEP with FLAG_DTYPES", check_step_dtypes),
    Check(GROUP, "STEP with FLAG_VALUE", check_step_values),
    Check(GROUP, "queued commands are answered in order", check_queued_commands),
    Check(GROUP, "FLAG_SUBSET commands", check_subsets),
    Check(GROUP, "malformed commands get ERROR", check_malformed_commands),
    Check(GROUP, "malformed headers and frames are refused", check_malformed_frames),
    Check(GROUP, "values a client must refuse get ERROR", check_invalid_values),
    Check(GROUP, "optional tags o, S, g are read exactly or refused", check_optional_tags),
    Check(GROUP, "CALL and SET_ATTR", check_call_and_set_attr),
    Check(GROUP, "SET_ATTR values come back exactly", check_set_attr_values),
    Check(GROUP, "PING is not answered", check_ping_ignored),
    Check(GROUP, "the server's ERROR is not answered", check_server_error_ignored),
    Check(GROUP, "EVICT: rejoin as a new session", check_evict),
    Check(GROUP, "CLOSE: BYE, then exit 0", check_close),
    Check(GROUP, "REFUSE for good: exit non-zero", check_refused),
    Check(GROUP, "REFUSE full: wait in line", check_waiting_in_line),
    Check(GROUP, "WELCOME reset_first", check_reset_first),
    Check(GROUP, "WELCOME's spaces set the array layouts", check_welcome_spaces),
    Check(GROUP, "an unanswered HELLO is said again", check_hello_repeated),
    Check(GROUP, "a learner back after a while is rejoined", check_learner_back),
    Check(GROUP, "ZAP status 500: wait, then connect again", check_zap_not_now),
]
"""The wire group, in the order it runs."""
