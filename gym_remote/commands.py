"""What the learner asks of its clients: RESET, STEP, CALL and SET_ATTR messages, client by client.

A command for a set of slots becomes one message per client serving them. A :class:`Plan` says
which of a client's envs one message is for; a *builder* ``build(client, seq)`` makes the client's
frames (the server calls it for every client before sending anything, so that a value that cannot
be encoded stops a command everywhere). Pure functions: no sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import iterate

from gym_remote import codec, protocol
from gym_remote.membership import ClientInfo
from gym_remote.protocol import NO_OPTIONS, Kind

Builder = Callable[[ClientInfo, int], list[Any]]
"""Makes a client's frames for the command with sequence number ``seq``."""


@dataclass
class Plan:
    """What one command asks of one client.

    ``slots``: the slots it is for, in message order; ``rows``: their rows in the batch of actions
    sent; ``indexes``: their envs' indexes in the client (None: all its envs, in order).
    """

    slots: list[int]
    rows: slice | np.ndarray
    indexes: list[int] | None


PlanOf = Callable[[ClientInfo], Plan]


def whole(client: ClientInfo) -> Plan:
    """The plan of a command for all of a client's envs, whose actions are the rows of its slots."""
    return Plan(client.slots, client.rows, None)


def one_slot(client: ClientInfo, slot: int, row: int = 0) -> Plan:
    """The plan of a command for the env of ``slot`` only, whose action is row ``row``."""
    return Plan([slot], np.asarray([row], dtype=np.intp), None if client.count == 1 else [client.slots.index(slot)])


def plans_for(
    owners: Sequence[ClientInfo | None], slots: Sequence[int], rows: Sequence[int] | None = None
) -> dict[bytes, Plan]:
    """The plans of a command for ``slots`` (each served: ``owners[slot]`` is its client), by client identity.

    Each client gets its slots among ``slots`` in its own env order (``slots[i]`` takes row ``rows[i]``, by
    default ``i``, of a batch of actions).
    """
    # the callers pass only served slots: a check of each here would cost on the step path
    served: Sequence[ClientInfo] = owners  # pyright: ignore[reportAssignmentType]
    grouped: dict[bytes, list[tuple[int, int, int]]] = {}
    for row, slot in zip(range(len(slots)) if rows is None else rows, slots, strict=True):
        client = served[slot]
        grouped.setdefault(client.identity, []).append((client.slots.index(slot), slot, row))
    plans = {}
    for identity, entries in grouped.items():
        entries.sort()
        indexes = [index for index, _, _ in entries]
        whole_client = len(indexes) == served[entries[0][1]].count
        plans[identity] = Plan(
            [slot for _, slot, _ in entries],
            np.asarray([row for _, _, row in entries], dtype=np.intp),
            None if whole_client else indexes,
        )
    return plans


def lookup(plans: dict[bytes, Plan]) -> PlanOf:
    """The plan of each client, from :func:`plans_for`'s result."""
    return lambda client: plans[client.identity]


def step(
    actions: Any,
    count: int,
    action_space: gym.Space,
    leaf_spaces: list[codec.ArrayLeaf] | None,
    batched_space: gym.Space,
) -> Callable[[PlanOf], Builder]:
    """The STEP messages for ``actions``, a batch of ``count`` (``batched_space``: the single
    ``action_space`` batched ``count`` times), checked and split once, for any plans.

    The envs get exactly what ``SyncVectorEnv`` would give them. Numpy arrays of the batch's shape
    travel as array frames, each client getting the rows its plan names, in their own dtype;
    anything else (lists, scalars, odd shapes) travels as values, split by :func:`iterate` as
    ``SyncVectorEnv`` splits it.

    Raises:
        ValueError: ``actions`` does not hold ``count`` actions.
    """
    if leaf_spaces is None or (leaves := _action_leaves(actions, count, action_space, leaf_spaces)) is None:
        per_env = list(iterate(batched_space, actions))
        if len(per_env) != count:
            raise ValueError(f"expected actions for {count} envs, got {len(per_env)}")
        return lambda plan_of: listed_step(per_env, plan_of)
    dtypes = [leaf.dtype for leaf in leaves]
    own_dtypes = all(dtype == space.dtype for dtype, space in zip(dtypes, leaf_spaces, strict=True))

    def messages(plan_of: PlanOf) -> Builder:
        def build(client: ClientInfo, seq: int) -> list[Any]:
            plan = plan_of(client)
            indexes = plan.indexes
            subset = indexes is not None
            rows = [leaf[plan.rows] for leaf in leaves]
            listed = None if own_dtypes else dtypes
            if listed is not None and client.dtypes is not None:
                rows, listed = _accepted_rows(rows, leaf_spaces, client.dtypes)
            header = protocol.pack_step_header(seq, len(plan.slots), listed, subset=subset)
            index_frames = [protocol.index_frame(indexes)] if subset else []
            return [header, *index_frames, *rows]

        return build

    return messages


def _accepted_rows(
    rows: list[np.ndarray], leaf_spaces: list[codec.ArrayLeaf], accepted: frozenset[np.dtype]
) -> tuple[list[np.ndarray], list[np.dtype] | None]:
    """``rows`` with every leaf whose dtype the client does not accept cast to its space's dtype (HELLO
    ``dtypes``), and the dtype listing they need (None: all are their spaces' own dtypes)."""
    cast = [row if row.dtype in accepted else row.astype(space.dtype) for row, space in zip(rows, leaf_spaces)]
    own = all(row.dtype == space.dtype for row, space in zip(cast, leaf_spaces))
    return cast, None if own else [row.dtype for row in cast]


def _action_leaves(
    actions: Any, count: int, action_space: gym.Space, leaf_spaces: list[codec.ArrayLeaf]
) -> list[np.ndarray] | None:
    """The array leaves of a batch of actions, or None unless all are numpy arrays of the batch's shape."""
    try:
        values = codec.batch_leaves(action_space, actions)
    except (KeyError, TypeError, IndexError, ValueError):
        return None
    leaves = []
    for space, value in zip(leaf_spaces, values, strict=True):
        if (
            type(value) is not np.ndarray
            or value.shape != (count, *space.shape)
            or not codec.dtype_travels(value.dtype)
        ):
            return None
        leaves.append(np.ascontiguousarray(value))
    return leaves


def listed_step(actions: list[Any], plan_of: PlanOf) -> Builder:
    """STEP messages for actions already split per env (``actions[row]``), sent as values."""

    def build(client: ClientInfo, seq: int) -> list[Any]:
        plan = plan_of(client)
        rows = plan.rows
        selected = actions[rows] if isinstance(rows, slice) else [actions[row] for row in rows]
        return command(
            Kind.STEP,
            client,
            seq,
            {"actions": selected},
            lambda path: f"the action for slot {plan.slots[path[1][0]]}{protocol.path_text(path[2:])}",
            plan.indexes,
        )

    return build


def reset(seed: Sequence[int | None] | None, options: Any, plan_of: PlanOf) -> Builder:
    """RESET messages: slot ``s`` seeded with ``seed[s]``; each client resets the slots of its plan."""

    def build(client: ClientInfo, seq: int) -> list[Any]:
        plan = plan_of(client)
        value = {"seeds": [None if seed is None else seed[slot] for slot in plan.slots]}
        if options is not NO_OPTIONS:
            value["options"] = options
        return command(Kind.RESET, client, seq, value, lambda path: _reset_label(plan.slots, path), plan.indexes)

    return build


def call(kind: Kind, what: str, value_for: Callable[[Plan], dict], plan_of: PlanOf = whole) -> Builder:
    """CALL or SET_ATTR messages (``what`` names the call in errors) for the envs of each client's plan,
    with the value ``value_for(plan)``."""

    def build(client: ClientInfo, seq: int) -> list[Any]:
        plan = plan_of(client)
        label = lambda path: _call_label(plan.slots, what, path)  # noqa: E731
        return command(kind, client, seq, value_for(plan), label, plan.indexes)

    return build


def command(
    kind: Kind,
    client: ClientInfo,
    seq: int,
    value: dict,
    label: protocol.Label,
    indexes: list[int] | None = None,
) -> list[Any]:
    """A command message for ``client``'s envs (those ``indexes`` if given), pickling only if it is trusted."""
    count = client.count if indexes is None else len(indexes)
    return protocol.message(
        kind, value, seq=seq, count=count, allow_pickle=client.trusted, label=label, indexes=indexes
    )


def _reset_label(slots: list[int], path: tuple[tuple[Any, str], ...]) -> str:
    if path[0][0] == "options":
        return "reset options" + protocol.path_text(path[1:])
    return f"the reset {path[0][0]} for slot {slots[path[1][0]]}"


def _call_label(slots: list[int], what: str, path: tuple[tuple[Any, str], ...]) -> str:
    field, rest = path[0][0], protocol.path_text(path[2:])
    if field == "args":
        return f"argument {path[1][0]} of {what}{rest}"
    if field == "kwargs":
        return f"keyword argument {path[1][0]!r} of {what}{rest}"
    return f"the value for slot {slots[path[1][0]]} in {what}{rest}"
