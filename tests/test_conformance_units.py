"""The conformance runner's socket-free pieces: placeholders, the comparison of values, the report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from gym_remote.conformance.reference import Twins, differences, unbatch_info
from gym_remote.conformance.report import CheckResult, Report
from gym_remote.conformance.runner import GROUPS, all_checks
from gym_remote.conformance.scripted import repeated_key
from gym_remote.conformance.subject import expand
from gym_remote.probe import ProbeEnv

TEMPLATE = ["client", "{endpoint}", "--n={num_envs}", "--live", "{liveness_timeout}", "{security}", "end"]


def test_placeholders_are_replaced_and_security_becomes_zero_or_more_arguments():
    plain = expand(TEMPLATE, endpoint="tcp://127.0.0.1:9", num_envs=3, liveness_timeout=2.5)
    assert plain == ["client", "tcp://127.0.0.1:9", "--n=3", "--live", "2.5", "end"]
    keys = expand(TEMPLATE, endpoint="e", num_envs=1, liveness_timeout=2, security=["--secret-file", "/s"])
    assert keys == ["client", "e", "--n=1", "--live", "2", "--secret-file", "/s", "end"]
    with pytest.raises(ValueError, match="empty"):
        expand([], endpoint="e", num_envs=1, liveness_timeout=1)


@pytest.mark.parametrize(
    ("actual", "expected", "words"),
    [
        (1, 1.0, ["is 1 (int), expected 1.0 (float)"]),
        ([1, "x"], (1, "x"), ["(list), expected (1, 'x') (tuple)"]),
        (np.int64(3), np.int32(3), ["dtype <i8", "dtype <i4"]),
        (np.zeros(2, np.int64), np.zeros(2), ["dtype <i8", "dtype <f8"]),
        (np.zeros(3), np.zeros(2), ["shape (3,)", "shape (2,)"]),
        ({"a": 1}, {"a": 1, "b": 2}, ["missing ['b']"]),
        ({"a": 1, "c": 3}, {"a": 1}, ["extra ['c']"]),
        ({"b": 1, "a": 2}, {"a": 2, "b": 1}, ["keys ['b', 'a'], expected ['a', 'b'] (in this order)"]),
        (0.0, -0.0, ["0.0 (float), expected -0.0 (float)"]),
        (None, 0, ["None", "0 (int)"]),
        (b"ab", "ab", ["bytes", "str"]),
        (True, 1, ["True (bool)", "1 (int)"]),
    ],
)
def test_differences_name_the_place_and_both_types(actual, expected, words):
    found = differences({"k": actual}, {"k": expected}, "infos")
    assert found and found[0].startswith("infos")
    for word in words:
        assert word in found[0], (word, found)


def test_equal_values_have_no_differences_with_nan_equal_to_nan():
    value = {
        "nan": math.nan,
        "array": np.array([1.0, np.nan]),
        "objects": np.array([None, (1, "x"), b"z"], dtype=object),
        "scalar": np.float32("nan"),
        "nested": {"list": [2**70, None]},
    }
    copy = {
        "nan": math.nan,
        "array": np.array([1.0, np.nan]),
        "objects": np.array([None, (1, "x"), b"z"], dtype=object),
        "scalar": np.float32("nan"),
        "nested": {"list": [2**70, None]},
    }
    assert differences(value, copy, "v") == []
    copy["objects"][1] = [1, "x"]
    assert differences(value, copy, "v") == ["v['objects'][1] is (1, 'x') (tuple), expected [1, 'x'] (list)"]


def test_batched_infos_are_unbatched_by_their_masks():
    infos = {
        "a": np.array([1, 2]),
        "_a": np.array([True, False]),
        "d": {"x": np.array([0, 5]), "_x": np.array([False, True])},
    }
    infos["_d"] = np.array([False, True])
    assert unbatch_info(infos, 0) == {"a": 1}
    assert unbatch_info(infos, 1) == {"d": {"x": 5}}


def test_twins_step_each_slot_on_its_own_in_the_autoreset_mode():
    twins = Twins(2, AutoresetMode.SAME_STEP)
    try:
        obs, reward, terminated, truncated, info = twins.reset(1, seed=0)
        expected_obs, expected_info = ProbeEnv().reset(seed=0)
        in_space_order = {key: obs[key] for key in expected_obs}  # Gymnasium's batched Dict space sorts its keys
        assert differences(in_space_order, expected_obs, "obs") == [] and info == expected_info
        assert (reward, terminated, truncated) == (0.0, False, False)
        action = (np.int64(0), np.zeros(2, np.float32), np.zeros(2, np.int8))
        twins.step(1, action)
        *_, terminated, truncated, info = twins.step(1, action)  # base 0: terminates at step 2 and resets
        assert terminated and not truncated and "final_obs" in info and info["base"] == 11
    finally:
        twins.close()


def test_report_reads_as_text_and_as_json():
    report = Report(command=["c", "{endpoint}"])
    report.results.append(CheckResult("wire", "HELLO is well-formed", True, 0.5))
    assert report.passed
    report.results.append(CheckResult("values", "steps match", False, 1.25, "step 3: infos['half'] int64", "out"))
    assert not report.passed and [result.name for result in report.failures()] == ["steps match"]
    text = report.text()
    assert "pass  wire: HELLO is well-formed" in text and "FAIL  values: steps match (1.2 s)" in text
    assert "step 3: infos['half'] int64" in text and "| out" in text and "1 of 2 checks passed" in text
    document = json.loads(report.dumps())
    assert document["passed"] is False and document["checks"][1]["message"] == "step 3: infos['half'] int64"
    assert not Report(command=["c"]).passed  # no checks: nothing passed


def test_every_group_has_checks_with_distinct_names():
    checks = all_checks()
    assert {check.group for check in checks} == set(GROUPS)
    assert len({check.name for check in checks}) == len(checks)


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (b'{"a": 1, "b": 2}', None),
        (b'["l", {"a": 1}, {"a": 2}]', None),  # (the same key in two objects is no repeat)
        (b'{"a": 1, "a": 2}', "a"),
        (b'{"infos": ["l", {"t": 1, "u": 2, "t": 3}]}', "t"),
        (b'{"x": {"k": 0}, "y": 1, "x": 2}', "x"),
    ],
)
def test_the_scripted_server_finds_a_key_an_object_holds_twice(body, key):
    assert repeated_key(body) == key
