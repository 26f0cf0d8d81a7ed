"""Unit tests for :mod:`gym_remote.commands`: plans and the messages built from them (no sockets)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from gym_remote import codec, commands, membership, protocol
from gym_remote.errors import EncodeError, ProtocolError
from gym_remote.protocol import FLAG_DTYPES, FLAG_SUBSET, FLAG_VALUE, Kind
from gym_remote.server import ClientInfo


def client(slots: list[int], name: str = "c") -> ClientInfo:
    info = ClientInfo(
        identity=name.encode(),
        name=name,
        host="h",
        pid=1,
        session=name,
        slots=slots,
        trusted=False,
        observation_spaces=[],
        action_spaces=[],
        metadata={},
        render_mode=None,
    )
    consecutive = slots == list(range(slots[0], slots[0] + len(slots)))
    info.slot_slice = slice(slots[0], slots[0] + len(slots)) if consecutive else None
    info.slot_index = np.asarray(slots, dtype=np.intp)
    return info


def owners_of(*clients: ClientInfo, num_envs: int) -> list[ClientInfo | None]:
    owners: list[ClientInfo | None] = [None] * num_envs
    for each in clients:
        for slot in each.slots:
            owners[slot] = each
    return owners


def test_plans_group_slots_by_client_in_each_clients_env_order():
    a, b = client([0, 1, 2], "a"), client([5, 3], "b")  # b hosts slot 5 as env 0, slot 3 as env 1
    plans = commands.plans_for(owners_of(a, b, num_envs=6), [3, 2, 0, 5])
    assert plans[b"a"].slots == [0, 2] and plans[b"a"].indexes == [0, 2] and plans[b"a"].rows.tolist() == [2, 1]
    assert plans[b"b"].slots == [5, 3] and plans[b"b"].indexes is None  # all of b's envs: no subset
    assert plans[b"b"].rows.tolist() == [3, 0]


def test_one_slot_plans_name_the_env_only_for_clients_with_several():
    assert commands.one_slot(client([4]), 4, row=2).indexes is None
    plan = commands.one_slot(client([1, 7, 3]), 3, row=5)
    assert plan.slots == [3] and plan.indexes == [2] and plan.rows.tolist() == [5]


def test_array_step_sends_each_client_its_rows_with_an_index_frame_for_a_subset():
    space = spaces.Box(-1, 1, (2,), np.float32)
    actions = np.arange(8, dtype=np.float32).reshape(4, 2)
    a = client([0, 1, 2], "a")
    plans = commands.plans_for(owners_of(a, client([3], "b"), num_envs=4), [2, 3, 0])  # rows 0, 1, 2
    messages = commands.step(actions[:3], 3, space, codec.array_leaf_spaces(space), batch_space(space, 3))
    frames = messages(commands.lookup(plans))(a, 7)
    header = protocol.parse_header(frames[0])
    assert (header.kind, header.count, header.seq, header.flags) == (Kind.STEP, 2, 7, FLAG_SUBSET)
    assert protocol.parse_index_frame(frames[1], 2, 3) == [0, 2]
    np.testing.assert_array_equal(frames[2], actions[[2, 0]])  # slot 0 (row 2), then slot 2 (row 0)


def test_array_step_keeps_the_actions_dtype():
    space = spaces.Box(-1, 1, (1,), np.float32)
    messages = commands.step(np.zeros((2, 1)), 2, space, codec.array_leaf_spaces(space), batch_space(space, 2))
    frames = messages(commands.whole)(client([0, 1]), 1)
    assert protocol.parse_header(frames[0]).flags == FLAG_DTYPES
    assert protocol.parse_step_dtypes(frames[0], 1) == [np.dtype("<f8")]


CORE_DTYPES = ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f4", "<f8"]


def test_a_client_that_lists_its_dtypes_gets_the_others_cast_to_the_spaces_dtype():
    space = spaces.Tuple((spaces.Box(-1, 1, (1,), np.float32), spaces.Discrete(3)))
    actions = (np.array([[0.5], [0.25]], dtype=np.float16), np.array([2, 1], dtype=np.int32))
    messages = commands.step(actions, 2, space, codec.array_leaf_spaces(space), batch_space(space, 2))
    core = client([0, 1])
    core.dtypes = membership.accepted_dtypes(CORE_DTYPES)
    frames = messages(commands.whole)(core, 3)
    assert protocol.parse_step_dtypes(frames[0], 2) == [np.dtype("<f4"), np.dtype("<i4")]  # int32 is core
    assert frames[1].dtype == np.float32 and frames[1].tolist() == [[0.5], [0.25]]
    narrow = client([0, 1])
    narrow.dtypes = membership.accepted_dtypes(["<f4", "<i8"])
    frames = messages(commands.whole)(narrow, 4)
    assert protocol.parse_header(frames[0]).flags == 0  # both cast to the spaces' own dtypes
    assert (frames[1].dtype, frames[2].dtype) == (np.float32, np.int64) and frames[2].tolist() == [2, 1]
    frames = messages(commands.whole)(client([0, 1]), 5)  # no list: any dtype, as the learner gave it
    assert protocol.parse_step_dtypes(frames[0], 2) == [np.dtype("<f2"), np.dtype("<i4")]


@pytest.mark.parametrize("listed", ["<f4", ["<f4", 3], ["|O8"], ["<f4,<f4"]])
def test_a_hello_dtypes_list_that_is_not_dtype_strings_is_malformed(listed):
    with pytest.raises((ProtocolError, ValueError, TypeError)):
        membership.accepted_dtypes(listed)
    assert membership.accepted_dtypes(None) is None


def test_lists_travel_as_values_split_like_sync_vector_env():
    space = spaces.Discrete(3)
    messages = commands.step([2, 0], 2, space, codec.array_leaf_spaces(space), batch_space(space, 2))
    frames = messages(commands.lookup({b"c": commands.one_slot(client([4, 9]), 9, row=0)}))(client([4, 9]), 3)
    assert protocol.parse_header(frames[0]).flags == FLAG_VALUE | FLAG_SUBSET
    assert protocol.read_value(frames[2:]) == {"actions": [2]}


@pytest.mark.parametrize("actions", [np.zeros(3, dtype=np.int64), [0, 1, 2]])
def test_step_refuses_the_wrong_number_of_actions(actions):
    space = spaces.Discrete(3)
    with pytest.raises(ValueError):
        commands.step(actions, 2, space, codec.array_leaf_spaces(space), batch_space(space, 2))


def test_reset_sends_the_seeds_of_the_plans_slots():
    c = client([2, 3, 4])
    plans = commands.plans_for(owners_of(c, num_envs=5), [4, 2])
    frames = commands.reset([10, 11, 12, 13, 14], {"x": 1}, commands.lookup(plans))(c, 5)
    header = protocol.parse_header(frames[0])
    assert (header.kind, header.count, header.flags) == (Kind.RESET, 2, FLAG_VALUE | FLAG_SUBSET)
    assert protocol.parse_index_frame(frames[1], 2, 3) == [0, 2]
    assert protocol.read_value(frames[2:]) == {"seeds": [12, 14], "options": {"x": 1}}


def test_unencodable_values_are_named_by_slot():
    c = client([6, 7])
    with pytest.raises(EncodeError, match="cannot send the reset seeds for slot 7: "):
        commands.reset([None] * 6 + [1, object()], None, commands.whole)(c, 1)
    with pytest.raises(EncodeError, match=r"cannot send argument 0 of call\('f'\): "):
        commands.call(Kind.CALL, "call('f')", lambda _: {"name": "f", "args": [object()], "kwargs": {}})(c, 1)


def test_plans_give_each_slot_the_row_it_was_given():
    a, b = client([0, 1], "a"), client([2], "b")
    plans = commands.plans_for(owners_of(a, b, num_envs=3), [2, 1], rows=[5, 3])
    assert plans[b"a"].slots == [1] and plans[b"a"].rows.tolist() == [3] and plans[b"a"].indexes == [1]
    assert plans[b"b"].slots == [2] and plans[b"b"].rows.tolist() == [5] and plans[b"b"].indexes is None
