"""gym_remote.partial.SlotTable without a network: every transition leaves each slot in exactly one
state, with ``parked``, ``in_flight`` and ``ready`` holding exactly the slots in that state (ready in
arrival order); checked transition by transition and against a reference model on random sequences.
"""

from __future__ import annotations

import numpy as np
import pytest

from gym_remote.partial import Parked, SlotState, SlotTable
from gym_remote.protocol import Kind
from gym_remote.server import Exchange

pytestmark = pytest.mark.timeout(30)


def exchange(seq: int = 1) -> Exchange:
    return Exchange(seq=seq, reply_kind=Kind.RESULT, sink=None, what="step")


def assert_consistent(table: SlotTable) -> None:
    """Each container holds exactly the slots of its state; busy and outstanding agree with the states."""
    states = [SlotState(int(value)) for value in table.state]
    assert sorted(table.parked) == [slot for slot, state in enumerate(states) if state == SlotState.PARKED]
    assert sorted(table.in_flight) == [slot for slot, state in enumerate(states) if state == SlotState.IN_FLIGHT]
    assert sorted(table.ready) == [slot for slot, state in enumerate(states) if state == SlotState.READY]
    assert len(set(table.ready)) == len(table.ready), "a slot is ready once"
    assert table.any_parked() == (SlotState.PARKED in states)
    assert table.ready_count() == states.count(SlotState.READY)
    assert table.busy_count() == len(states) - states.count(SlotState.IDLE)
    assert table.any_busy() == (table.busy_count() > 0)
    assert table.busy.tolist() == [state != SlotState.IDLE for state in states]
    assert table.outstanding() == [
        slot for slot, state in enumerate(states) if state in (SlotState.PARKED, SlotState.IN_FLIGHT)
    ]
    for state in SlotState:
        assert table.slots_in(state) == [slot for slot, value in enumerate(states) if value == state]


def test_a_new_table_is_all_idle():
    table = SlotTable(3)
    assert table.slots_in(SlotState.IDLE) == [0, 1, 2]
    assert not table.busy.any() and table.outstanding() == []
    assert table.parked == {} and table.in_flight == {} and list(table.ready) == []
    assert_consistent(table)


def test_park_holds_the_command_of_the_slot():
    table = SlotTable(3)
    command = Parked(Kind.RESET, seed=7, options={"level": 2})
    table.park(1, command)
    assert table.state[1] == SlotState.PARKED
    assert table.parked == {1: command}
    assert table.busy.tolist() == [False, True, False]
    assert table.outstanding() == [1]
    assert_consistent(table)


def test_fly_from_parked_drops_the_parked_command():
    table = SlotTable(3)
    table.park(2, Parked(Kind.STEP, action=1))
    sent = exchange()
    table.fly(2, sent)
    assert table.state[2] == SlotState.IN_FLIGHT
    assert table.parked == {} and table.in_flight == {2: sent}
    assert table.in_flight[2] is sent
    assert table.outstanding() == [2]
    assert_consistent(table)


def test_flying_again_replaces_the_exchange():
    table = SlotTable(2)
    first, second = exchange(1), exchange(2)
    table.fly(0, first)
    table.fly(0, second)
    assert table.in_flight == {0: second} and table.in_flight[0] is second
    assert_consistent(table)


def test_arrivals_are_ready_in_arrival_order():
    table = SlotTable(4)
    for slot in range(4):
        table.fly(slot, exchange(slot + 1))
    for slot in (2, 0, 3):
        table.arrive(slot)
    assert list(table.ready) == [2, 0, 3]
    assert table.in_flight.keys() == {1}
    assert table.outstanding() == [1]
    assert table.busy.all(), "ready results are not returned yet: still busy"
    assert_consistent(table)


def test_ready_lists_the_arrivals_in_order_and_idle_all_returns_them_to_idle():
    table = SlotTable(4)
    for slot in (3, 1, 0):
        table.fly(slot, exchange())
        table.arrive(slot)
    assert table.ready == [3, 1, 0]
    table.idle_all([3, 1])
    assert table.state[3] == SlotState.IDLE and table.state[1] == SlotState.IDLE
    assert list(table.ready) == [0]
    assert table.busy.tolist() == [True, False, False, False]
    assert_consistent(table)
    table.idle_all([])
    assert table.ready == [0]
    table.idle_all([0])
    assert not table.busy.any()
    assert_consistent(table)


def test_the_state_array_and_the_per_slot_transitions_are_one_truth():
    table = SlotTable(3)
    table.fly(2, exchange())
    assert table.state.tolist() == [SlotState.IDLE, SlotState.IDLE, SlotState.IN_FLIGHT]
    table.state[2] = SlotState.READY  # a store through the array is seen by the per-slot reads
    assert table.ready_count() == 1 and table.exchange_of(2) is None
    table.clear()
    assert table.busy_count() == 0 and not table.any_busy()


def test_idle_from_in_flight_drops_the_exchange():
    table = SlotTable(2)
    table.fly(1, exchange())
    table.idle(1)
    assert table.in_flight == {} and table.state[1] == SlotState.IDLE
    assert_consistent(table)


@pytest.mark.parametrize("move", ["park", "fly", "idle", "arrive"])
def test_moving_a_ready_slot_takes_it_out_of_the_arrival_order(move):
    table = SlotTable(3)
    for slot in (0, 1, 2):
        table.arrive(slot)
    if move == "park":
        table.park(1, Parked(Kind.RESET))
    elif move == "fly":
        table.fly(1, exchange())
    elif move == "idle":
        table.idle(1)
    else:
        table.arrive(1)
    expected = [0, 2, 1] if move == "arrive" else [0, 2]
    assert list(table.ready) == expected, "arriving again moves a slot to the end"
    assert_consistent(table)


def test_parking_again_replaces_the_parked_command():
    table = SlotTable(2)
    table.park(0, Parked(Kind.STEP, action=1))
    replacement = Parked(Kind.RESET, seed=3)
    table.park(0, replacement)
    assert table.parked == {0: replacement}
    assert_consistent(table)


def test_a_lost_clients_report_can_park_an_in_flight_slot():
    table = SlotTable(2)
    table.fly(0, exchange())
    table.park(0, Parked(Kind.RESET))
    assert table.in_flight == {} and table.parked.keys() == {0}
    assert_consistent(table)


def test_clear_makes_every_slot_idle():
    table = SlotTable(4)
    table.park(0, Parked(Kind.RESET))
    table.fly(1, exchange())
    table.arrive(2)
    table.clear()
    assert table.slots_in(SlotState.IDLE) == [0, 1, 2, 3]
    assert table.parked == {} and table.in_flight == {} and list(table.ready) == []
    assert_consistent(table)


def test_busy_and_outstanding_tell_waiting_from_returned():
    table = SlotTable(5)
    table.park(0, Parked(Kind.STEP, action=0))
    table.fly(3, exchange())
    table.arrive(4)
    assert table.busy.tolist() == [True, False, False, True, True]
    assert table.outstanding() == [0, 3]
    assert table.slots_in(SlotState.READY) == [4]


# -- randomized against a reference model ------------------------------------------------------------

OPERATIONS = ("park", "fly", "arrive", "idle", "take", "clear")


class Reference:
    """The table as a plain dict slot -> state, the held objects, and an arrival list."""

    def __init__(self, num_envs: int) -> None:
        self.state = {slot: SlotState.IDLE for slot in range(num_envs)}
        self.held: dict[int, object] = {}  # the Parked or Exchange a PARKED / IN_FLIGHT slot holds
        self.arrivals: list[int] = []

    def move(self, slot: int, state: SlotState, held: object = None) -> None:
        if self.state[slot] == SlotState.READY:
            self.arrivals.remove(slot)
        self.held.pop(slot, None)
        self.state[slot] = state
        if state == SlotState.READY:
            self.arrivals.append(slot)
        elif held is not None:
            self.held[slot] = held

    def take_ready(self, count: int) -> list[int]:
        taken, self.arrivals = self.arrivals[:count], self.arrivals[count:]
        for slot in taken:
            self.state[slot] = SlotState.IDLE
        return taken

    def clear(self) -> None:
        for slot in self.state:
            self.state[slot] = SlotState.IDLE
        self.held.clear()
        self.arrivals.clear()


def assert_matches(table: SlotTable, reference: Reference) -> None:
    assert [SlotState(int(value)) for value in table.state] == list(reference.state.values())
    assert list(table.ready) == reference.arrivals
    for slot, held in reference.held.items():
        container = table.parked if reference.state[slot] == SlotState.PARKED else table.in_flight
        assert container[slot] is held
    assert_consistent(table)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_random_transitions_match_a_reference_model(seed):
    rng = np.random.default_rng(seed)
    num_envs = int(rng.integers(1, 7))
    table, reference = SlotTable(num_envs), Reference(num_envs)
    weights = np.array([3, 3, 3, 2, 2, 0.2])
    counts = dict.fromkeys(OPERATIONS, 0)
    for step in range(400):
        operation = OPERATIONS[rng.choice(len(OPERATIONS), p=weights / weights.sum())]
        slot = int(rng.integers(num_envs))
        counts[operation] += 1
        if operation == "park":
            command = Parked(Kind.RESET if rng.random() < 0.5 else Kind.STEP, seed=step, action=step)
            table.park(slot, command)
            reference.move(slot, SlotState.PARKED, command)
        elif operation == "fly":
            sent = exchange(step + 1)
            table.fly(slot, sent)
            reference.move(slot, SlotState.IN_FLIGHT, sent)
        elif operation == "arrive":
            table.arrive(slot)
            reference.move(slot, SlotState.READY)
        elif operation == "idle":
            table.idle(slot)
            reference.move(slot, SlotState.IDLE)
        elif operation == "take":
            count = int(rng.integers(len(reference.arrivals) + 1))
            taken = table.ready[:count]
            table.idle_all(taken)
            assert taken == reference.take_ready(count)
        else:
            table.clear()
            reference.clear()
        assert_matches(table, reference)
    assert all(counts[operation] for operation in ("park", "fly", "arrive", "idle", "take"))
