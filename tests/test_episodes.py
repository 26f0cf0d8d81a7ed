"""gym_remote.episodes with a real ResultBatch and no network: what a lost client's slots report
(truncated, reward 0, ``client_lost``), when (only once the episodes began), and how SAME_STEP keeps
a report pending until the replacement's reset, with retry and forget.
"""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from gym_remote.batch import ResultBatch
from gym_remote.episodes import Episodes

pytestmark = pytest.mark.timeout(30)

SPACE = gym.spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32)
IMMEDIATE_MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED]


def filled_batch(num_envs: int = 4) -> ResultBatch:
    """A batch whose every slot holds a result of its own: observation (slot, -slot), reward slot + 1,
    terminated, an info and a final pair, so that what a report changes shows."""
    batch = ResultBatch(SPACE, num_envs)
    for slot in range(num_envs):
        batch.observations[slot] = [slot, -slot]
        batch.rewards[slot] = slot + 1.0
        batch.terminations[slot] = True
        batch.truncations[slot] = False
        batch.slot_infos[slot] = {"old": slot}
        batch.slot_finals[slot] = (np.array([9.0, 9.0], dtype=np.float32), {"old_final": slot})
    return batch


def started(mode: AutoresetMode) -> Episodes:
    episodes = Episodes(4, mode)
    episodes.start()
    return episodes


def assert_untouched(batch: ResultBatch, slot: int) -> None:
    assert batch.rewards[slot] == slot + 1.0
    assert bool(batch.terminations[slot]) is True and bool(batch.truncations[slot]) is False
    assert batch.slot_infos[slot] == {"old": slot}
    assert batch.slot_finals[slot][1] == {"old_final": slot}


def assert_reported(batch: ResultBatch, slot: int) -> None:
    assert batch.rewards[slot] == 0.0
    assert bool(batch.terminations[slot]) is False and bool(batch.truncations[slot]) is True
    assert batch.slot_infos[slot]["client_lost"] is True


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_a_loss_before_the_episodes_start_records_nothing(mode):
    episodes = Episodes(4, mode)
    batch = filled_batch()
    episodes.client_lost([0, 1], "its connection is gone")
    assert episodes.started is False
    assert episodes.unreported(range(4)) == []
    assert episodes.begin_reports(batch) == []
    for slot in range(4):
        assert_untouched(batch, slot)
    episodes.start()
    assert episodes.unreported(range(4)) == [], "starting later does not revive an earlier loss"


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_a_loss_after_the_start_is_unreported_in_the_order_asked(mode):
    episodes = started(mode)
    episodes.client_lost([3, 1], "it left")
    assert episodes.unreported([0, 1, 2, 3]) == [1, 3]
    assert episodes.unreported([3, 2, 1]) == [3, 1]
    assert episodes.unreported([]) == []


@pytest.mark.parametrize("mode", IMMEDIATE_MODES)
def test_without_same_step_a_report_is_written_at_once(mode):
    episodes = started(mode)
    assert episodes.reset_replacements is False
    batch = filled_batch()
    episodes.client_lost([1, 2], "its connection is gone")
    assert episodes.begin_reports(batch) == [1, 2]
    for slot in (1, 2):
        assert_reported(batch, slot)
        assert batch.slot_infos[slot] == {"client_lost": True}, "the lost client's own info is dropped"
        assert slot not in batch.slot_finals, "no final observation outside SAME_STEP"
    for slot in (0, 3):
        assert_untouched(batch, slot)
    assert episodes.unreported(range(4)) == []
    assert episodes.begin_reports(batch) == [], "a loss is reported once"


@pytest.mark.parametrize("mode", IMMEDIATE_MODES)
def test_begin_reports_reports_only_the_slots_named(mode):
    episodes = started(mode)
    batch = filled_batch()
    episodes.client_lost([0, 2, 3], "gone")
    assert episodes.begin_reports(batch, [3, 3, 1, 0]) == [0, 3]
    assert_reported(batch, 0)
    assert_reported(batch, 3)
    assert_untouched(batch, 1)
    assert_untouched(batch, 2)
    assert episodes.unreported(range(4)) == [2]
    assert episodes.begin_reports(batch, [1]) == []
    assert episodes.begin_reports(batch) == [2]


def test_same_step_prepares_the_last_observation_as_final_obs():
    episodes = started(AutoresetMode.SAME_STEP)
    assert episodes.reset_replacements is True
    batch = filled_batch()
    episodes.client_lost([2], "gone")
    assert episodes.begin_reports(batch) == [2]
    assert 2 not in batch.slot_infos, "the lost client's info is dropped"
    # nothing is written until the replacement's reset: the result still is the old one, and the final is
    # kept aside (a RESULT landing in the slot meanwhile, the replacement's reset, replaces its finals)
    assert batch.rewards[2] == 3.0 and bool(batch.truncations[2]) is False and 2 not in batch.slot_finals
    assert episodes.unreported(range(4)) == [2]
    batch.observations[2] = [7.0, 7.0]  # the replacement's reset lands in the row
    episodes.finish_reports(batch, [2])
    final_obs, final_info = batch.slot_finals[2]
    np.testing.assert_array_equal(final_obs, np.array([2.0, -2.0], dtype=np.float32))
    assert final_info == {"client_lost": True}
    for slot in (0, 1, 3):
        assert_untouched(batch, slot)


def test_same_step_does_not_begin_a_pending_report_twice():
    episodes = started(AutoresetMode.SAME_STEP)
    batch = filled_batch()
    episodes.client_lost([0, 1], "gone")
    assert episodes.begin_reports(batch, [0]) == [0]
    assert episodes.begin_reports(batch) == [1]
    assert episodes.begin_reports(batch) == []
    assert episodes.begin_reports(batch, [0, 1]) == []
    assert episodes.unreported(range(4)) == [0, 1]


def test_same_step_finish_reports_writes_the_loss_into_the_replacements_reset():
    episodes = started(AutoresetMode.SAME_STEP)
    batch = filled_batch()
    episodes.client_lost([1], "gone")
    episodes.begin_reports(batch)
    batch.slot_infos[1] = {"reset_info": 5}  # what the replacement's reset returned
    episodes.finish_reports(batch, [1])
    assert_reported(batch, 1)
    assert batch.slot_infos[1] == {"reset_info": 5, "client_lost": True}
    assert batch.slot_finals[1][1] == {"client_lost": True}
    assert episodes.unreported(range(4)) == []
    assert episodes.begin_reports(batch) == []


def test_same_step_retry_lets_a_failed_report_begin_again():
    episodes = started(AutoresetMode.SAME_STEP)
    batch = filled_batch()
    episodes.client_lost([0, 3], "gone")
    assert episodes.begin_reports(batch) == [0, 3]
    episodes.retry_reports([3])
    assert episodes.unreported(range(4)) == [0, 3], "a retried loss is still unreported"
    assert episodes.begin_reports(batch) == [3]
    episodes.finish_reports(batch, [3])
    assert batch.slot_finals[3][1] == {"client_lost": True}


def test_forget_drops_unreported_losses():
    episodes = started(AutoresetMode.NEXT_STEP)
    batch = filled_batch()
    episodes.client_lost([0, 1, 2], "gone")
    episodes.forget([1, 5])
    assert episodes.unreported(range(4)) == [0, 2]
    assert episodes.begin_reports(batch) == [0, 2]
    assert_untouched(batch, 1)


def test_forget_drops_a_pending_report_so_a_new_loss_begins_afresh():
    episodes = started(AutoresetMode.SAME_STEP)
    batch = filled_batch()
    episodes.client_lost([2], "gone")
    episodes.begin_reports(batch)
    episodes.forget([2])
    assert episodes.unreported(range(4)) == []
    assert episodes.begin_reports(batch) == []
    episodes.client_lost([2], "gone again")
    assert episodes.begin_reports(batch) == [2], "the forgotten report no longer blocks a new one"


def test_a_slot_lost_twice_is_reported_once():
    episodes = started(AutoresetMode.NEXT_STEP)
    batch = filled_batch()
    episodes.client_lost([1], "first")
    episodes.client_lost([1], "second")
    assert episodes.unreported(range(4)) == [1]
    assert episodes.begin_reports(batch) == [1]
    assert episodes.begin_reports(batch) == []


def test_a_report_in_a_dict_observation_batch_keeps_a_copy_of_the_last_observation():
    space = gym.spaces.Dict({"pos": gym.spaces.Box(0, 5, (2,), np.int64), "flag": gym.spaces.Discrete(2)})
    batch = ResultBatch(space, 2)
    batch.observations["pos"][1] = [3, 4]
    batch.observations["flag"][1] = 1
    episodes = started(AutoresetMode.SAME_STEP)
    episodes.client_lost([1], "gone")
    episodes.begin_reports(batch)
    batch.observations["pos"][1] = [0, 0]
    episodes.finish_reports(batch, [1])
    final_obs = batch.slot_finals[1][0]
    np.testing.assert_array_equal(final_obs["pos"], [3, 4])
    assert int(final_obs["flag"]) == 1


@pytest.mark.parametrize("mode", IMMEDIATE_MODES)
def test_each_written_report_logs_one_info_line(mode, caplog):
    caplog.set_level(logging.INFO, logger="gym_remote.episodes")
    episodes = started(mode)
    batch = filled_batch()
    episodes.client_lost([0, 1, 3], "gone")
    episodes.begin_reports(batch, [0, 1])
    episodes.begin_reports(batch)
    episodes.begin_reports(batch)  # nothing left: no line
    records = [record for record in caplog.records if record.name == "gym_remote.episodes"]
    assert [record.levelno for record in records] == [logging.INFO, logging.INFO]
    assert [record.getMessage() for record in records] == [
        "slots 0-1: episodes truncated, their client was lost",
        "slots 3: episodes truncated, their client was lost",
    ]


def test_same_step_logs_when_the_report_is_finished_not_when_it_begins(caplog):
    caplog.set_level(logging.INFO, logger="gym_remote.episodes")
    episodes = started(AutoresetMode.SAME_STEP)
    batch = filled_batch()
    episodes.client_lost([2], "gone")
    episodes.begin_reports(batch)
    assert [r for r in caplog.records if r.name == "gym_remote.episodes"] == []
    episodes.finish_reports(batch, [2])
    messages = [r.getMessage() for r in caplog.records if r.name == "gym_remote.episodes"]
    assert messages == ["slots 2: episodes truncated, their client was lost"]


def test_a_batch_with_no_losses_logs_nothing(caplog):
    caplog.set_level(logging.INFO, logger="gym_remote.episodes")
    episodes = started(AutoresetMode.NEXT_STEP)
    assert episodes.begin_reports(filled_batch()) == []
    assert [r for r in caplog.records if r.name == "gym_remote.episodes"] == []


def test_still_running_names_every_slot_but_the_unreported_ones():
    episodes = started(AutoresetMode.NEXT_STEP)
    assert episodes.still_running() == [0, 1, 2, 3]
    episodes.client_lost([1, 3], "its connection is gone")
    assert episodes.still_running() == [0, 2]
    episodes.begin_reports(filled_batch())
    assert episodes.still_running() == [0, 1, 2, 3]


def test_a_replacement_lost_after_its_reset_landed_is_reported_next_and_one_lost_before_is_not():
    """SAME_STEP: slot 1's loss (client a) waits for a replacement's reset. Replacement b is lost before its
    reset lands: that adds nothing (one report, finished by c's reset). Replacement c is lost after its reset
    landed: its loss ended the episode c began, so slot 1 has a loss to report again."""
    episodes = started(AutoresetMode.SAME_STEP)
    batch = filled_batch()
    episodes.client_lost([1], "a is gone", b"a")
    assert episodes.begin_reports(batch) == [1]
    episodes.client_lost([1], "b is gone", b"b")  # before its reset landed
    episodes.finish_reports(batch, [1], {1: b"c"})  # c's reset landed
    assert episodes.unreported(range(4)) == []
    episodes.client_lost([1], "a is gone", b"a")
    assert episodes.begin_reports(batch) == [1]
    episodes.client_lost([1], "c is gone", b"c")  # its reset had landed: learned of before the report finished
    episodes.finish_reports(batch, [1], {1: b"c"})
    assert episodes.unreported(range(4)) == [1]
    assert episodes.begin_reports(batch) == [1]
