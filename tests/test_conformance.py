"""The conformance suite (gym_remote/conformance, docs/CONFORMANCE.md) passes the Python client and fails
clients with a deliberate flaw, with a message that names the flaw."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gym_remote.conformance import GROUPS, run, security, wire
from tests.conftest import REPO_ROOT

PROBE_CLIENT = ["client", "{endpoint}", "--env", "gym_remote/Probe-v0", "--num-envs", "{num_envs}"]
PROBE_CLIENT += ["--liveness-timeout", "{liveness_timeout}", "{security}"]
PYTHON_CLIENT = [sys.executable, "-m", "gym_remote", *PROBE_CLIENT]


def broken_client(flaw: str) -> list[str]:
    """The Python client with one flaw (tests/broken_clients.py)."""
    return [sys.executable, "-m", "tests.broken_clients", flaw, *PROBE_CLIENT]


@pytest.fixture(autouse=True)
def importable_tests(monkeypatch):
    """The clients the runner starts can import ``tests.broken_clients``."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.chdir(REPO_ROOT)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("group", [group for group in GROUPS if group != "wire"])
def test_the_python_client_passes(group):
    report = run(PYTHON_CLIENT, groups=[group])
    assert report.results and report.passed, report.text()


@pytest.mark.timeout(300)
@pytest.mark.alternate_planes  # the wire checks' scripted server offers no data channel: one plane tells all
@pytest.mark.parametrize("group", ["wire"])
def test_the_python_client_passes_the_wire_checks(group):
    test_the_python_client_passes(group)


def failure(report, name: str):
    by_name = {result.name: result for result in report.results}
    assert name in by_name, f"no check named {name!r}: {list(by_name)}"
    result = by_name[name]
    assert not result.passed, f"the broken client passed {name!r}:\n{report.text()}"
    return result


SETTLED_READINGS = (
    "settled readings: malformed commands are ProtocolErrors, equal and repeated dict keys, flags of other kinds"
)
FLAWS = [  # (flaw of tests/broken_clients.py, the check that must fail, what its message must say)
    ("floats-as-ints", "lock-step batches match SyncVectorEnv, NextStep", ["infos['half']", "dtype <i8", "dtype <f8"]),
    (
        "sync-autoreset-flags",
        "an env that raises stops a lock-step step; the others keep their own autoreset state",
        ["env 0 must reset", "slot 0", "§5.6"],
    ),
    (
        "random-seed",
        "calls and attributes match SyncVectorEnv",
        ["get_attr('np_random_seed') before any seeded reset[0]", "expected -1"],
    ),
    (
        "secret-bom-kept",
        "a shared secret: the client joins and steps",
        ["byte-order mark", "§12.2", "exited with status 1 instead of joining"],
    ),
    (
        "host-error-names",
        SETTLED_READINGS,
        ["a CALL without 'args' and 'kwargs'", "'InvalidDataException'", "'gym_remote.errors'", "§8"],
    ),
    ("equal-keys-kept", SETTLED_READINGS, ["ERROR", "'d' value has the keys 1 and 1.0", "§3.1"]),
    (
        "each-ignored",
        "an env that raises in a partial batch (FLAG_EACH) costs no other env its result",
        ["no result of slots 0 and 1", "not answer ERROR", "§5.6"],
    ),
]


@pytest.mark.parametrize(("flaw", "name", "fragments"), FLAWS, ids=[flaw for flaw, _, _ in FLAWS])
def test_a_flawed_client_fails_the_check_for_its_flaw_saying_what_is_wrong(flaw, name, fragments):
    result = failure(run(broken_client(flaw), names=[name]), name)
    assert all(fragment in result.message for fragment in fragments), result.message
    assert result.seconds < 20  # (a client that exits is failed at once, not after the server's wait for clients)


@pytest.mark.timeout(180)
def test_a_client_without_heartbeats_fails_the_lifecycle_check_naming_them():
    name = "the client's heartbeats notice a silent server, and it rejoins"
    result = failure(run(broken_client("no-heartbeats"), names=[name]), name)
    assert "ZMQ_HEARTBEAT_IVL" in result.message and "§8.1" in result.message


@pytest.mark.alternate_planes  # (the scripted server speaks ZeroMQ alone: the plane does not matter)
@pytest.mark.parametrize(
    ("flaw", "name", "said"),
    [
        ("value-actions-of-env-0", "STEP with FLAG_VALUE", "STEP with FLAG_VALUE, actions as Python tuples"),
        ("any-version", "malformed headers and frames are refused", "a RESET with header version 3"),
        ("strict-flags", "malformed headers and frames are refused", "a RESET with the flag bit 15"),
        ("unpickles", "values a client must refuse get ERROR", "a pickle (tag p) to a client not in trusted mode"),
        ("flat-object-arrays", "optional tags o, S, g are read exactly or refused", "tag 'o'"),
        ("own-spaces", "WELCOME's spaces set the array layouts", "the client must use WELCOME's single spaces"),
        ("seeds-mod-2-64", "seeds of any size are taken exactly", "RESET with the seeds [2**64 + 7, 2**200 + 3"),
        ("set-attr-ignores-subset", "FLAG_SUBSET commands", "CALL mark after SET_ATTR for envs [2, 0]"),
        ("hello-once", "an unanswered HELLO is said again", "sends the same HELLO again"),
        ("no-rejoin", "a learner back after a while is rejoined", "reconnects with backoff"),
        ("zap-at-once", "ZAP status 500: wait, then connect again", "wait 0.5-2 s and connect again"),
        ("has-attr-calls", "CALL and SET_ATTR", "a STEP after has_attr 'reset'"),
        ("each-errors-dropped", "FLAG_SUBSET commands", "'errors' is None, expected a list of 2 entries"),
        ("unknown-kind-own-seq", "malformed commands get ERROR", "expected ERROR with seq 0, but got ERROR echoing"),
        ("loose-offset", "the probe refuses offsets that are not plain ints in [0, 1000)", "options['offset'] is 1000"),
        ("repeated-key", "RESET and STEP are answered (NextStep)", "the key 'infos' twice"),
        ("unwelcomed-previous", "a learner back after a while is rejoined", "stays what it was, null"),
    ],
)
def test_a_client_with_a_flaw_fails_the_wire_check_for_it_saying_what_it_did(flaw, name, said):
    result = failure(run(broken_client(flaw), names=[name]), name)
    assert said in result.message, result.message


@pytest.mark.alternate_planes
@pytest.mark.parametrize(
    ("flaw", "group", "wait", "name", "said"),
    [
        (
            "full-waits",
            wire,
            "REFUSED_EXIT_SECONDS",
            "REFUSE for good: exit non-zero",
            "still runs 2 s after a REFUSE with code 'full' and waiting false",
        ),
        (
            "counts-anew",
            security,
            "REFUSAL_SECONDS",
            "a wrong secret: the client exits with an error",
            "the client was still running after 2 s",
        ),
    ],
    ids=["full-waits", "counts-anew"],
)
def test_a_client_that_never_stops_when_it_must_fails_the_check_for_it(monkeypatch, flaw, group, wait, name, said):
    monkeypatch.setattr(group, wait, 2.0)  # (the check's 30 s wait for the client to exit, shortened)
    result = failure(run(broken_client(flaw), names=[name]), name)
    assert said in result.message, result.message


def test_the_command_line_writes_a_json_report_and_exits_by_the_result(tmp_path):
    path = tmp_path / "report.json"
    command = [sys.executable, "-m", "gym_remote", "conformance", "--only", "security", "--json", str(path), "--"]
    done = subprocess.run([*command, *PYTHON_CLIENT], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 of 5 checks passed" in done.stdout
    report = json.loads(path.read_text())
    for check in report["checks"]:  # each check's line once, as it ran
        assert done.stdout.count(f"{check['group']}: {check['name']} (") == 1, done.stdout
    assert report["passed"] is True and len(report["checks"]) == 5
    assert all(check["group"] == "security" for check in report["checks"])

    missing = [*command, str(tmp_path / "no-such-client"), "{endpoint}"]
    done = subprocess.run(missing, capture_output=True, text=True, timeout=100)
    assert done.returncode == 1
    assert "cannot start the client command" in done.stdout and "no-such-client" in done.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [([], "give the client command after --"), (["--", "client"], "must contain {endpoint}")],
)
def test_the_command_line_refuses_a_command_it_cannot_run(arguments, message):
    command = [sys.executable, "-m", "gym_remote", "conformance", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr
    bad_group = [sys.executable, "-m", "gym_remote", "conformance", "--only", "speed", "--", "c", "{endpoint}"]
    done = subprocess.run(bad_group, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown check groups ['speed']" in done.stderr
