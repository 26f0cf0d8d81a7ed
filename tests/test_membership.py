"""gym_remote.membership without a network: who gets which slot, the waiting line, the slots of a
lost client (free at once), the checks a HELLO must pass (version, form, launch token, spaces, trust), and what the slot
table reports (stats, refusals, the message of a wait that timed out).
"""

from __future__ import annotations

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

from gym_remote import codec, protocol
from gym_remote.membership import Admit, ClientInfo, LaunchSlot, Membership, Peer, Refuse, space_mismatch
from gym_remote.protocol import PROTOCOL_VERSION

pytestmark = pytest.mark.timeout(30)

DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)


class OddDiscrete(gym.spaces.Discrete):
    """A space class Gymnasium does not know: it travels pickled, in the trusted mode only."""


def space_value(space: gym.Space, *, allow_pickle: bool = False):
    return codec.space_to_value(space, allow_pickle=allow_pickle)


def make_hello(
    num_envs: int = 1,
    *,
    observation_space: gym.Space = DISCRETE,
    action_space: gym.Space = DISCRETE,
    name: str = "sim",
    **extra,
) -> dict:
    """A HELLO as a gym_remote client sends it, for ``num_envs`` envs that share their spaces."""
    hello = {
        "protocol": PROTOCOL_VERSION,
        "num_envs": num_envs,
        "name": name,
        "host": "node-1",
        "pid": 4242,
        "session": f"session-{name}",
        "observation_spaces": [space_value(observation_space)],
        "observation_space_index": [0] * num_envs,
        "action_spaces": [space_value(action_space)],
        "action_space_index": [0] * num_envs,
    }
    hello.update(extra)
    return hello


def members_of(num_envs: int = 4, *, observation_mode="same", allow_pickle=None, **kwargs) -> Membership:
    return Membership(num_envs, observation_mode=observation_mode, allow_pickle=allow_pickle, **kwargs)


NO_PEER = Peer()


def admit(members: Membership, identity: bytes, hello: dict, peer: Peer = NO_PEER) -> ClientInfo:
    decision = members.hello(identity, hello, peer)
    assert isinstance(decision, Admit), decision
    return decision.client


def join(members: Membership, identity: bytes, hello: dict, peer: Peer = NO_PEER) -> ClientInfo:
    client = admit(members, identity, hello, peer)
    members.join(client)
    return client


def refuse(members: Membership, identity: bytes, hello: dict) -> Refuse:
    decision = members.hello(identity, hello, Peer())
    assert isinstance(decision, Refuse), decision
    return decision


# -- admission ---------------------------------------------------------------------------------------


def test_clients_take_consecutive_free_slots_in_join_order():
    members = members_of(5)
    first = join(members, b"a", make_hello(2, name="a"))
    second = join(members, b"b", make_hello(3, name="b"))
    assert first.slots == [0, 1]
    assert second.slots == [2, 3, 4]
    assert members.slots == [first, first, second, second, second]
    assert members.served == 5 and members.empty_slots() == []
    assert members.clients_of(range(5)) == [first, second]
    assert members.clients == {b"a": first, b"b": second}


def test_every_slot_answers_follow_joins_and_losses():
    """What every step asks (the clients of all slots, the empty ones) is worked out once per change of the
    slots: each join, loss and clear changes the answer, and a list handed out is the caller's own."""
    members = members_of(4)
    every = list(range(4))
    assert members.clients_of(every) == [] and members.empty_slots() == [0, 1, 2, 3]
    first = join(members, b"a", make_hello(2, name="a"))
    assert members.clients_of(every) == [first] and members.empty_slots() == [2, 3]
    second = join(members, b"b", make_hello(2, name="b"))
    handed_out = members.clients_of(every)
    assert handed_out == [first, second] and members.empty_slots() == []
    handed_out.clear()
    assert members.clients_of(every) == [first, second]
    members.lose(b"a")
    assert members.clients_of(every) == [second] and members.empty_slots() == [0, 1]
    assert members.clients_of([3, 2]) == [second] and members.empty_slots([1, 3]) == [1]
    third = join(members, b"c", make_hello(2, name="c"))
    assert members.clients_of(every) == [third, second] and members.empty_slots() == []
    members.clear()
    assert members.clients_of(every) == [] and members.empty_slots() == [0, 1, 2, 3]


def test_an_admitted_client_serves_nothing_until_it_joins():
    members = members_of(2)
    client = admit(members, b"a", make_hello(2))
    assert members.served == 0 and members.clients == {}
    assert members.observation_space is None
    members.join(client)
    assert members.served == 2 and members.slot_epochs == [1, 1]


@pytest.mark.parametrize(
    "freed, taken",
    [((b"1", b"3", b"4"), [3, 4]), ((b"0", b"2", b"4"), [0, 2])],
    ids=["a-consecutive-run-is-preferred", "else-the-first-free-slots"],
)
def test_a_joining_client_takes_consecutive_slots_when_it_can(freed, taken):
    members = members_of(5)
    for identity in (b"0", b"1", b"2", b"3", b"4"):
        join(members, identity, make_hello(1, name=identity.decode()))
    for identity in freed:
        members.lose(identity)
    assert admit(members, b"new", make_hello(2)).slots == taken


def test_a_full_vector_refuses_a_client_that_does_not_wait():
    members = members_of(2)
    join(members, b"a", make_hello(2))
    refusal = refuse(members, b"b", make_hello(1))
    assert refusal.code == "full"
    assert refusal.waiting is False
    assert "no free slot" in refusal.reason and "0 are free" in refusal.reason
    assert b"b" not in members.waiting
    assert members.refusals == [f"'sim': {refusal.reason}"]


def test_a_client_that_offers_more_envs_than_are_free_is_refused():
    members = members_of(3)
    join(members, b"a", make_hello(2))
    refusal = refuse(members, b"b", make_hello(2))
    assert refusal.code == "full" and "1 is free" in refusal.reason and "offers 2 envs" in refusal.reason
    assert members.empty_slots() == [2]


def test_a_client_that_may_wait_is_put_in_line_with_its_position():
    members = members_of(1)
    join(members, b"member", make_hello(1))
    first = refuse(members, b"w1", make_hello(1, name="w1", wait=True))
    second = refuse(members, b"w2", make_hello(1, name="w2", wait=True))
    assert (first.code, first.waiting) == ("full", True)
    assert (second.code, second.waiting) == ("full", True)
    assert first.reason.endswith("waiting in line at position 1")
    assert second.reason.endswith("waiting in line at position 2")
    assert list(members.waiting) == [b"w1", b"w2"]
    assert members.refusals == [], "waiting in line is not a refusal for good"


def test_a_repeated_hello_from_a_waiter_keeps_its_place_in_line():
    members = members_of(1)
    join(members, b"member", make_hello(1))
    refuse(members, b"w1", make_hello(1, wait=True))
    refuse(members, b"w2", make_hello(1, wait=True))
    again = refuse(members, b"w1", make_hello(1, wait=True))
    assert again.waiting and again.reason.endswith("position 1")
    assert list(members.waiting) == [b"w1", b"w2"]


def test_a_waiter_is_admitted_into_the_slots_a_lost_client_freed():
    members = members_of(3)
    join(members, b"a", make_hello(1, name="a"))
    join(members, b"b", make_hello(2, name="b"))
    refuse(members, b"w1", make_hello(2, name="w1", wait=True))
    refuse(members, b"w2", make_hello(1, name="w2", wait=True))
    assert members.admit_waiter(b"w1") is None, "nothing is free yet: it keeps waiting"
    assert list(members.waiting) == [b"w1", b"w2"]

    lost = members.lose(b"b")
    assert lost is not None and lost.slots == [1, 2]
    assert members.empty_slots() == [1, 2]
    decision = members.admit_waiter(b"w1")
    assert isinstance(decision, Admit) and decision.client.slots == [1, 2]
    assert decision.client.name == "w1"
    members.join(decision.client)
    assert list(members.waiting) == [b"w2"], "joining takes the client out of the line"
    assert members.admit_waiter(b"w2") is None
    assert list(members.waiting) == [b"w2"]


def test_admit_waiter_of_a_client_not_in_line_answers_nothing():
    members = members_of(2)
    assert members.admit_waiter(b"stranger") is None
    assert members.clients == {}


def test_a_waiter_that_leaves_the_line_gives_up_its_place():
    members = members_of(1)
    join(members, b"member", make_hello(1))
    refuse(members, b"w1", make_hello(1, wait=True))
    refuse(members, b"w2", make_hello(1, wait=True))
    assert members.leave_line(b"w1") is True
    assert members.leave_line(b"w1") is False
    assert members.leave_line(b"never-waited") is False
    assert refuse(members, b"w2", make_hello(1, wait=True)).reason.endswith("position 1")
    members.lose(b"member")
    assert members.admit_waiter(b"w1") is None


def test_a_full_waiting_line_refuses_for_good():
    members = members_of(1, max_waiting=2)
    join(members, b"member", make_hello(1))
    refuse(members, b"w1", make_hello(1, wait=True))
    refuse(members, b"w2", make_hello(1, wait=True))
    refusal = refuse(members, b"w3", make_hello(1, wait=True))
    assert refusal.code == "full" and refusal.waiting is False
    assert "the waiting line is full (2)" in refusal.reason
    assert list(members.waiting) == [b"w1", b"w2"]
    assert members.refusals == [f"'sim': {refusal.reason}"]


def test_a_waiter_already_in_a_full_line_keeps_its_place():
    members = members_of(1, max_waiting=1)
    join(members, b"member", make_hello(1))
    refuse(members, b"w1", make_hello(1, wait=True))
    again = refuse(members, b"w1", make_hello(1, wait=True))
    assert again.waiting is True and list(members.waiting) == [b"w1"]


def test_a_client_larger_than_the_whole_vector_is_not_kept_waiting():
    members = members_of(2)
    refusal = refuse(members, b"big", make_hello(5, wait=True))
    assert refusal.waiting is False and refusal.code == "invalid" and "2 slots" in refusal.reason
    assert b"big" not in members.waiting


# -- lost clients' slots -------------------------------------------------------------------------------


@pytest.mark.parametrize("episodes_started", [False, True], ids=["before-the-episodes", "while-they-run"])
def test_a_lost_clients_slots_are_free_for_others_at_once(episodes_started):
    """Whether or not the loss is reported yet (the episodes' business), the slots are free: a replacement,
    or a client waiting in line, takes them at once (a replacement's envs start as if their episode had ended)."""
    members = members_of(3)
    join(members, b"a", make_hello(2, name="a"))
    join(members, b"b", make_hello(1, name="b"))
    if episodes_started:
        members.start_episodes(reset_first=True)
    refuse(members, b"w", make_hello(2, wait=True))
    members.lose(b"a")
    assert members.empty_slots() == [0, 1] and members.can_admit() is True
    decision = members.admit_waiter(b"w")
    assert isinstance(decision, Admit) and decision.client.slots == [0, 1]


def test_episodes_started_tell_new_clients_to_reset_first():
    members = members_of(1)
    assert members.reset_first is False
    members.start_episodes(reset_first=True)
    assert members.reset_first is True
    members.start_episodes(reset_first=False)
    assert members.reset_first is False


def test_losing_an_unknown_client_changes_nothing():
    members = members_of(2)
    client = join(members, b"a", make_hello(1))
    members.start_episodes(reset_first=True)
    assert members.lose(b"nobody") is None
    assert members.slots[0] is client and members.empty_slots() == [1]


def test_a_slot_counts_how_many_memberships_served_it():
    members = members_of(2)
    join(members, b"a", make_hello(1, name="a"))
    members.lose(b"a")
    join(members, b"b", make_hello(2, name="b"))
    assert members.slot_epochs == [2, 1]


# -- protocol version --------------------------------------------------------------------------------


def test_parse_hello_returns_the_value_of_a_well_formed_hello():
    members = members_of(2)
    hello = make_hello(2)
    parsed = members.parse_hello(b"a", PROTOCOL_VERSION, protocol.value_frames(hello))
    assert parsed == hello


def test_parse_hello_reads_the_value_section_of_a_hello_message():
    members = members_of(2)
    hello = make_hello(1)
    header, *frames = protocol.message(protocol.Kind.HELLO, hello, count=1)
    parsed_header = protocol.parse_header(header)
    assert members.parse_hello(b"a", parsed_header.version, frames) == hello


@pytest.mark.parametrize("version", [1, PROTOCOL_VERSION + 1, 255])
def test_a_header_of_another_protocol_version_is_refused(version):
    members = members_of(2)
    refusal = members.parse_hello(b"a", version, protocol.value_frames(make_hello(1)))
    assert isinstance(refusal, Refuse)
    assert refusal.code == "version" and refusal.waiting is False
    assert f"the server speaks {PROTOCOL_VERSION}, the client {version}" in refusal.reason
    assert members.refusals == [refusal.reason]


@pytest.mark.parametrize("version", [1, PROTOCOL_VERSION + 1, "2", None])
def test_a_hello_naming_another_protocol_version_is_refused(version):
    members = members_of(2)
    refusal = refuse(members, b"a", make_hello(1, protocol=version, wait=True))
    assert refusal.code == "version" and refusal.waiting is False
    assert f"the client {version}" in refusal.reason
    assert members.waiting == {}


def test_a_hello_without_a_protocol_field_is_refused_for_its_version():
    members = members_of(2)
    hello = make_hello(1)
    del hello["protocol"]
    assert refuse(members, b"a", hello).code == "version"


# -- malformed HELLOs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "words"),
    [
        (protocol.value_frames([1, 2]), "HELLO must carry a dict"),
        (protocol.value_frames("hello"), "HELLO must carry a dict"),
        ([], "the value section is missing"),
        ([b"not json"], "malformed value"),
    ],
)
def test_parse_hello_refuses_what_is_not_a_hello_dict(frames, words):
    members = members_of(2)
    refusal = members.parse_hello(b"a", PROTOCOL_VERSION, frames)
    assert isinstance(refusal, Refuse)
    assert refusal.code == "invalid" and refusal.waiting is False
    assert refusal.reason.startswith("malformed HELLO: ")
    assert words in refusal.reason


def test_a_hello_without_num_envs_is_refused_as_invalid():
    members = members_of(2)
    hello = make_hello(1)
    del hello["num_envs"]
    refusal = refuse(members, b"a", hello)
    assert refusal.code == "invalid" and "KeyError" in refusal.reason and "num_envs" in refusal.reason


@pytest.mark.parametrize("count", [0, -1, protocol.MAX_ENVS_PER_CLIENT + 1, "2", 1.0, True, None])
def test_a_hello_whose_num_envs_is_not_an_int_in_range_is_refused_as_invalid(count):
    members = members_of(2)
    hello = make_hello(1)
    hello["num_envs"] = count
    refusal = refuse(members, b"a", hello)
    assert refusal.code == "invalid"
    assert f"num_envs must be an int from 1 to {protocol.MAX_ENVS_PER_CLIENT}" in refusal.reason
    assert members.clients == {} and members.served == 0


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"observation_space_index": [1]}, "observation_space_index refers to a space that is not there"),
        ({"observation_space_index": [-1]}, "observation_space_index refers to a space that is not there"),
        ({"observation_space_index": ["0"]}, "observation_space_index refers to a space that is not there"),
        ({"action_space_index": [3]}, "action_space_index refers to a space that is not there"),
        ({"observation_space_index": [0, 0]}, "observation_spaces / observation_space_index do not describe 1 envs"),
        ({"action_spaces": {"space": "Discrete"}}, "action_spaces / action_space_index do not describe 1 envs"),
        ({"observation_spaces": [{"space": "NoSuchSpace"}]}, "space"),
        ({"observation_spaces": [42]}, "malformed space description"),
        ({"pid": "4242"}, "pid and rejoins must be ints, metadata a dict"),
        ({"rejoins": 1.5}, "pid and rejoins must be ints, metadata a dict"),
        ({"metadata": ["render_fps"]}, "pid and rejoins must be ints, metadata a dict"),
    ],
)
def test_a_hello_with_a_malformed_field_is_refused_as_invalid_naming_it(change, words):
    members = members_of(2)
    refusal = refuse(members, b"a", make_hello(1, **change))
    assert refusal.code == "invalid" and refusal.waiting is False
    assert refusal.reason.startswith("malformed HELLO: ")
    assert words in refusal.reason
    assert members.clients == {}


def test_a_malformed_hello_is_refused_for_good_even_if_it_may_wait():
    members = members_of(1)
    join(members, b"member", make_hello(1))
    refusal = refuse(members, b"a", make_hello(1, wait=True, observation_space_index=[7]))
    assert refusal.code == "invalid" and refusal.waiting is False
    assert members.waiting == {}


def test_absent_optional_fields_take_their_defaults():
    members = members_of(1)
    hello = {
        "protocol": PROTOCOL_VERSION,
        "num_envs": 1,
        "observation_spaces": [space_value(DISCRETE)],
        "observation_space_index": [0],
        "action_spaces": [space_value(DISCRETE)],
        "action_space_index": [0],
    }
    client = admit(members, b"a", hello)
    assert (client.name, client.host, client.pid, client.session) == ("?", "?", 0, "")
    assert (client.metadata, client.render_mode, client.rejoins, client.trusted) == ({}, None, 0, False)
    assert client.launch_index is None


def test_long_names_are_cut_and_the_peer_is_recorded():
    members = members_of(1)
    hello = make_hello(1, name="n" * 500, host="h" * 500, session="s" * 100, render_mode=3, rejoins=2)
    client = admit(members, b"a", hello, Peer(address="10.0.0.7", key="alice"))
    assert client.name == "n" * 200 and client.host == "h" * 200 and client.session == "s" * 64
    assert client.render_mode is None, "a render_mode that is not a str is dropped"
    assert (client.peer_address, client.key, client.rejoins) == ("10.0.0.7", "alice", 2)


# -- spaces ------------------------------------------------------------------------------------------


def test_same_mode_refuses_a_launched_clients_observation_space_in_gymnasiums_words():
    launches = [LaunchSlot(index=0, first_slot=0, count=1, token="t0"), LaunchSlot(1, 1, 1, "t1")]
    members = members_of(2, vector_class="MyVector", launches=launches)
    join(members, b"a", make_hello(1, observation_space=BOX, launch={"index": 0, "token": "t0"}))
    other = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    launched = make_hello(1, observation_space=other, wait=True, launch={"index": 1, "token": "t1"})
    refusal = refuse(members, b"b", launched)
    assert refusal.code == "spaces" and refusal.waiting is False and refusal.launch_index == 1
    assert refusal.error is RuntimeError
    assert refusal.reason.startswith(
        "MyVector(..., observation_mode='same') however the sub-environments observation spaces are not equivalent."
    )
    assert f"single_observation_space={BOX}" in refusal.reason
    assert "If this is intentional, use `observation_mode='different'` instead." in refusal.reason
    assert refusal.reason.endswith("(the client's env 0)")
    assert members.empty_slots() == [1]


def test_the_first_clients_own_envs_must_share_its_first_envs_spaces():
    members = members_of(2)
    other = gym.spaces.Discrete(4)
    hello = make_hello(2)
    hello["observation_spaces"].append(space_value(other))
    hello["observation_space_index"] = [0, 1]
    refusal = refuse(members, b"a", hello)
    assert refusal.code == "spaces" and refusal.reason.startswith("the observation space of its env 1, Discrete(4),")


def test_an_action_space_that_differs_is_refused():
    members = members_of(2, observation_mode="different")
    join(members, b"a", make_hello(1))
    refusal = refuse(members, b"b", make_hello(1, action_space=gym.spaces.Discrete(4)))
    assert refusal.code == "spaces" and refusal.error is RuntimeError
    assert refusal.reason.startswith(
        "the action space of its env 0, Discrete(4), differs from the vector's, Discrete(3)"
    )
    kind, reason = space_mismatch("different", DISCRETE, DISCRETE, DISCRETE, gym.spaces.Discrete(4))
    assert kind is RuntimeError and "Sub-environment action space doesn't make the `single_action_space`" in reason
    assert "single_action_space=Discrete(3)" in reason


def test_different_mode_admits_a_box_of_the_same_shape_with_other_bounds():
    members = members_of(2, observation_mode="different")
    join(members, b"a", make_hello(1, observation_space=BOX))
    other = gym.spaces.Box(-5.0, 5.0, shape=(2,), dtype=np.float32)
    client = join(members, b"b", make_hello(1, observation_space=other))
    assert client.slots == [1]
    assert members.observation_space_of(0) == BOX
    assert members.observation_space_of(1) == other
    assert members.spaces_for(client) == (BOX, DISCRETE), "WELCOME carries the vector's spaces, not its own"


def test_different_mode_refuses_a_box_of_another_shape_with_gymnasiums_error():
    members = members_of(2, observation_mode="different")
    join(members, b"a", make_hello(1, observation_space=BOX))
    other = gym.spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
    refusal = refuse(members, b"b", make_hello(1, observation_space=other))
    assert refusal.code == "spaces"
    assert refusal.error is ValueError
    assert refusal.reason.startswith(f"the observation space of its env 0, {other}, cannot be batched (") and (
        "shape" in refusal.reason
    )


def test_a_custom_space_pair_only_needs_the_same_shape_and_dtype():
    custom = (BOX, gym.spaces.Box(0.0, 1.0, shape=(4, 2), dtype=np.float32))
    members = members_of(2, observation_mode=custom)
    join(members, b"a", make_hello(1, observation_space=BOX))
    assert isinstance(members.hello(b"b", make_hello(1, observation_space=gym.spaces.Box(-9, 9, (2,))), Peer()), Admit)
    refusal = refuse(members, b"c", make_hello(1, observation_space=gym.spaces.Box(0, 1, (2,), dtype=np.float64)))
    assert refusal.code == "spaces" and "does not share shape and dtype with the vector's" in refusal.reason


def test_space_mismatch_is_none_for_matching_spaces():
    assert space_mismatch("same", BOX, DISCRETE, gym.spaces.Box(0.0, 1.0, (2,), np.float32), DISCRETE) is None
    assert space_mismatch("different", BOX, DISCRETE, gym.spaces.Box(-1.0, 2.0, (2,), np.float32), DISCRETE) is None


def test_space_mismatch_names_the_vector_class():
    kind, reason = space_mismatch("same", BOX, DISCRETE, DISCRETE, DISCRETE, vector_class="Vec")
    assert kind is RuntimeError and reason.startswith("Vec(..., observation_mode='same')")


def test_the_first_client_to_join_brings_the_spaces():
    members = members_of(2)
    client = admit(members, b"a", make_hello(1, observation_space=BOX))
    assert members.observation_space is None and members.action_space is None
    assert members.spaces_for(client) == (BOX, DISCRETE)
    members.join(client)
    assert (members.observation_space, members.action_space) == (BOX, DISCRETE)
    later = admit(members, b"b", make_hello(1, observation_space=gym.spaces.Box(0.0, 1.0, (2,), np.float32)))
    assert members.spaces_for(later) == (BOX, DISCRETE)


def test_spaces_set_in_advance_are_what_clients_must_match():
    members = members_of(2)
    members.set_spaces(BOX, DISCRETE)
    assert refuse(members, b"a", make_hello(1)).code == "spaces"
    client = join(members, b"b", make_hello(1, observation_space=BOX))
    assert members.observation_space is BOX, "joining does not replace spaces that were given"
    assert members.spaces_for(client)[0] is BOX


def test_a_waiter_whose_spaces_no_longer_fit_is_refused_for_good():
    launches = [LaunchSlot(index=0, first_slot=0, count=1, token="t0")]
    members = members_of(2, launches=launches)
    waiting = refuse(members, b"remote", make_hello(1, observation_space=BOX, wait=True))
    assert waiting.waiting and "the spaces are not known yet" in waiting.reason
    join(members, b"launched", make_hello(1, launch={"index": 0, "token": "t0"}))
    decision = members.admit_waiter(b"remote")
    assert isinstance(decision, Refuse) and decision.code == "spaces" and decision.waiting is False
    assert members.waiting == {}


# -- launched clients --------------------------------------------------------------------------------

LAUNCHES = [
    LaunchSlot(index=0, first_slot=0, count=2, token="t0"),
    LaunchSlot(index=1, first_slot=2, count=2, token="t1"),
]


def launched_hello(index: int, token: str | None = None, count: int = 2, **extra) -> dict:
    launch = {"index": index, "token": f"t{index}" if token is None else token}
    return make_hello(count, name=f"launched-{index}", launch=launch, **extra)


def test_a_launched_client_gets_its_reserved_slots_and_is_trusted():
    members = members_of(4, launches=LAUNCHES)
    first = join(members, b"l0", launched_hello(0))
    assert first.slots == [0, 1] and first.launch_index == 0 and first.trusted is True
    second = join(members, b"l1", launched_hello(1))
    assert second.slots == [2, 3] and second.launch_index == 1 and second.trusted is True


def test_launched_clients_may_join_out_of_order_once_the_spaces_are_known():
    members = members_of(4, launches=LAUNCHES)
    members.set_spaces(DISCRETE, DISCRETE)
    assert join(members, b"l1", launched_hello(1)).slots == [2, 3]
    assert join(members, b"l0", launched_hello(0)).slots == [0, 1]


def test_launched_clients_are_not_trusted_when_pickle_is_forbidden():
    members = members_of(4, launches=LAUNCHES, allow_pickle=False)
    assert admit(members, b"l0", launched_hello(0)).trusted is False


def test_a_launched_client_with_a_wrong_token_is_refused_as_invalid():
    members = members_of(4, launches=LAUNCHES)
    refusal = refuse(members, b"l0", launched_hello(0, token="forged", wait=True))
    assert refusal.code == "invalid" and refusal.waiting is False
    assert "launch token is wrong" in refusal.reason
    assert refusal.launch_index is None, "an unverified claim names no launched client"


@pytest.mark.parametrize(
    "launch",
    [{"index": 0, "token": "t1"}, {"index": 5, "token": "t0"}, {"index": "0", "token": "t0"}, {"index": 0}, "t0", 0],
)
def test_verified_launch_accepts_only_the_current_token_of_a_known_index(launch):
    members = members_of(4, launches=LAUNCHES)
    assert members.verified_launch(launch) is None


def test_verified_launch_names_the_launched_client():
    members = members_of(4, launches=LAUNCHES)
    assert members.verified_launch({"index": 1, "token": "t1"}) == 1
    assert members.verified_launch({"index": 0, "token": "t0", "parent_pid": 1}) == 0


def test_a_client_not_launched_is_refused_as_private_when_every_slot_is_reserved():
    members = members_of(4, launches=LAUNCHES)
    members.set_spaces(DISCRETE, DISCRETE)
    refusal = refuse(members, b"remote", make_hello(1, wait=True))
    assert refusal.code == "private" and refusal.waiting is False
    assert "only the local clients it started itself" in refusal.reason


def test_clients_not_launched_take_only_unreserved_slots():
    members = members_of(4, launches=[LaunchSlot(index=0, first_slot=0, count=2, token="t0")])
    join(members, b"l0", launched_hello(0))
    members.lose(b"l0")  # its reserved slots are empty again, not for others
    assert members.empty_slots() == [0, 1, 2, 3]
    assert admit(members, b"remote", make_hello(2)).slots == [2, 3]
    assert refuse(members, b"remote", make_hello(3)).code == "invalid"  # more than the 2 unreserved slots


def test_before_the_spaces_are_known_only_launched_client_0_may_join():
    members = members_of(5, launches=LAUNCHES)
    refusal = refuse(members, b"l1", launched_hello(1))
    assert refusal.code == "full" and refusal.waiting is False
    assert "waiting for the client serving slot 0" in refusal.reason
    assert refusal.launch_index == 1
    remote = refuse(members, b"remote", make_hello(1))
    assert remote.code == "full" and remote.launch_index is None


def test_launched_clients_waiting_for_the_spaces_are_admitted_after_client_0():
    members = members_of(5, launches=LAUNCHES)
    waiting = refuse(members, b"l1", launched_hello(1, wait=True))
    assert waiting.waiting is True and waiting.reason.endswith("position 1")
    refuse(members, b"remote", make_hello(1, wait=True))
    assert members.admit_waiter(b"l1") is None
    join(members, b"l0", launched_hello(0))
    decision = members.admit_waiter(b"l1")
    assert isinstance(decision, Admit) and decision.client.slots == [2, 3]
    decision = members.admit_waiter(b"remote")
    assert isinstance(decision, Admit) and decision.client.slots == [4]


def test_a_refused_launched_client_carries_its_launch_index():
    members = members_of(4, launches=LAUNCHES)
    wrong_count = refuse(members, b"l0", launched_hello(0, count=3))
    assert wrong_count.code == "invalid" and wrong_count.launch_index == 0
    assert "launched client 0 hosts 3 envs, expected 2" in wrong_count.reason
    join(members, b"l0", launched_hello(0))
    wrong_space = refuse(members, b"l1", launched_hello(1, observation_space=BOX))
    assert wrong_space.code == "spaces" and wrong_space.launch_index == 1
    wrong_version = refuse(members, b"l1", launched_hello(1, protocol=1))
    assert wrong_version.code == "version" and wrong_version.launch_index == 1


def test_a_relaunched_client_takes_its_slots_as_soon_as_they_are_free():
    members = members_of(4, launches=LAUNCHES)
    join(members, b"l0", launched_hello(0))
    join(members, b"l1", launched_hello(1))
    members.start_episodes(reset_first=True)
    refusal = refuse(members, b"l1-again", launched_hello(1))  # its old process still serves them
    assert refusal.code == "full" and "the slots of launched client 1 are not free yet" in refusal.reason
    assert refusal.launch_index == 1
    assert refuse(members, b"l1-again", launched_hello(1, wait=True)).waiting is True
    members.lose(b"l1")
    decision = members.admit_waiter(b"l1-again")
    assert isinstance(decision, Admit) and decision.client.slots == [2, 3]


# -- trust -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allow_pickle", "asks", "trusted"),
    [(True, True, True), (True, False, False), (True, None, False), (None, True, False), (False, True, False)],
)
def test_a_remote_client_is_trusted_only_if_the_server_allows_pickle_and_it_asks(allow_pickle, asks, trusted):
    members = members_of(1, allow_pickle=allow_pickle)
    extra = {} if asks is None else {"allow_pickle": asks}
    assert admit(members, b"a", make_hello(1, **extra)).trusted is trusted


def test_a_trusted_client_may_send_pickled_metadata_and_spaces():
    members = members_of(1, allow_pickle=True)
    odd = OddDiscrete(3)
    hello = make_hello(
        1,
        allow_pickle=True,
        metadata={"render_modes": []},
        metadata_pickle=cloudpickle.dumps({"render_fps": 30}),
        observation_spaces=[space_value(odd, allow_pickle=True)],
    )
    assert hello["observation_spaces"][0]["space"] == "pickle"
    client = admit(members, b"a", hello)
    assert client.metadata == {"render_modes": [], "render_fps": 30}
    assert type(client.observation_spaces[0]) is OddDiscrete


def test_an_untrusted_client_cannot_send_pickles():
    members = members_of(1, allow_pickle=None)
    hello = make_hello(1, allow_pickle=True, metadata={"a": 1}, metadata_pickle=cloudpickle.dumps({"b": 2}))
    assert admit(members, b"a", hello).metadata == {"a": 1}, "metadata_pickle is ignored"
    pickled = make_hello(1, allow_pickle=True, observation_spaces=[space_value(OddDiscrete(3), allow_pickle=True)])
    refusal = refuse(members, b"b", pickled)
    assert refusal.code == "invalid" and "pickle is not allowed" in refusal.reason


@pytest.mark.parametrize(("data", "words"), [(b"garbage", "does not unpickle"), (cloudpickle.dumps([1]), "a dict")])
def test_malformed_pickled_metadata_is_refused_as_invalid(data, words):
    members = members_of(1, allow_pickle=True)
    refusal = refuse(members, b"a", make_hello(1, allow_pickle=True, metadata_pickle=data))
    assert refusal.code == "invalid" and "metadata_pickle" in refusal.reason and words in refusal.reason


# -- sessions, refusals, stats -----------------------------------------------------------------------


def test_previous_member_finds_the_member_a_reconnected_client_was():
    members = members_of(2)
    old = join(members, b"old", make_hello(1, session="abc"))
    assert members.previous_member(make_hello(1, previous_session="abc")) is old
    assert members.previous_member(make_hello(1, previous_session="xyz")) is None
    assert members.previous_member(make_hello(1, previous_session=None)) is None
    assert members.previous_member(make_hello(1, previous_session="")) is None
    assert members.previous_member(make_hello(1)) is None
    assert members.previous_member(["previous_session", "abc"]) is None
    members.lose(b"old")
    assert members.previous_member(make_hello(1, previous_session="abc")) is None


def test_an_empty_session_never_matches():
    members = members_of(2)
    join(members, b"a", make_hello(1, session=""))
    assert members.member_with_session("") is None


def test_only_the_last_ten_refusals_are_kept():
    members = members_of(1)
    for number in range(13):
        refuse(members, b"x", make_hello(1, protocol=100 + number))
    assert len(members.refusals) == 10
    assert "the client 103" in members.refusals[0]
    assert "the client 112" in members.refusals[-1]


def test_stats_describe_served_and_empty_slots():
    members = members_of(3, launches=[LaunchSlot(index=0, first_slot=2, count=1, token="t0")])
    members.set_spaces(DISCRETE, DISCRETE)
    remote = join(members, b"a", make_hello(2, session="s-a", rejoins=3), Peer(address="10.1.2.3", key="alice"))
    remote.steps = 17
    rows = members.stats()
    assert [row["slot"] for row in rows] == [0, 1, 2]
    assert [row["served"] for row in rows] == [True, True, False]
    assert [row["epoch"] for row in rows] == [1, 1, 0]
    served = rows[0]
    assert served["client"] == "sim" and served["host"] == "node-1" and served["pid"] == 4242
    assert (served["address"], served["key"], served["session"]) == ("10.1.2.3", "alice", "s-a")
    assert (served["local"], served["steps"], served["rejoins"], served["latency"]) == (False, 17, 3, None)
    assert served["last_seen"] >= 0 and served["connected_for"] >= 0
    assert "empty_for" not in served
    empty = rows[2]
    assert set(empty) == {"slot", "epoch", "served", "empty_for"} and empty["empty_for"] >= 0
    join(members, b"l0", make_hello(1, name="local", launch={"index": 0, "token": "t0"}))
    assert members.stats()[2]["local"] is True and members.stats()[2]["client"] == "local"


def test_the_message_of_a_timed_out_wait_names_the_empty_slots_and_recent_refusals():
    members = members_of(4)
    join(members, b"a", make_hello(1))
    for number in range(4):
        refuse(members, b"x", make_hello(1, protocol=10 + number))
    text = members.empty_slots_message(2.5, "a reset", members.empty_slots(), "tcp://127.0.0.1:5555")
    assert text.startswith("timed out after 2.5 s waiting for clients to serve a reset: slots 1-3 have no client")
    assert "1 of 4 slots are served; clients connect to tcp://127.0.0.1:5555" in text
    assert "the client 10" not in text, "only the last three refusals are quoted"
    assert "the client 11" in text and "the client 13" in text


def test_the_message_of_a_timed_out_wait_without_refusals_has_no_hint():
    members = members_of(2)
    text = members.empty_slots_message(1, "a step", [0, 1], "ipc:///tmp/x")
    assert "clients refused" not in text and text.endswith("clients connect to ipc:///tmp/x")


def test_clear_forgets_members_and_waiters():
    members = members_of(1)
    join(members, b"a", make_hello(1))
    refuse(members, b"w", make_hello(1, wait=True))
    members.clear()
    assert members.clients == {} and members.waiting == {} and members.slots == [None]
    assert members.served == 0


def test_a_client_with_other_spaces_is_told_in_plain_words_which_and_where_the_vectors_came_from():
    members = members_of(4)
    join(members, b"a", make_hello(2, name="first"))
    refusal = refuse(members, b"b", make_hello(2, name="odd", observation_space=BOX))
    assert refusal.code == "spaces" and not refusal.waiting
    assert refusal.reason.startswith(
        f"the observation space of its env 0, {BOX}, differs from the vector's, {DISCRETE}"
    )
    assert "the vector took its spaces from the first client, 'first'" in refusal.reason
    assert "serve --env ENV_ID" in refusal.reason and "observation_mode" not in refusal.reason
    assert refusal.client == "client 'odd' from node-1 (pid 4242)"
    assert members.refusals == [f"'odd': {refusal.reason}"]
    action = refuse(members, b"c", make_hello(2, name="act", action_space=gym.spaces.Discrete(5)))
    assert action.reason.startswith(
        "the action space of its env 0, Discrete(5), differs from the vector's, Discrete(3)"
    )


def test_spaces_given_up_front_are_not_said_to_come_from_a_client():
    members = members_of(2)
    members.set_spaces(DISCRETE, DISCRETE)
    refusal = refuse(members, b"b", make_hello(1, observation_space=BOX))
    assert refusal.reason == f"the observation space of its env 0, {BOX}, differs from the vector's, {DISCRETE}"


def test_a_client_that_waits_in_line_is_named_with_why():
    members = members_of(3)
    join(members, b"a", make_hello(1, name="small"))
    waiting = refuse(members, b"b", make_hello(3, name="big", wait=True))
    assert waiting.waiting and waiting.client == "client 'big' from node-1 (pid 4242)"
    assert "3 slots and 2 are free, this client offers 3 envs; waiting in line at position 1" in waiting.reason
