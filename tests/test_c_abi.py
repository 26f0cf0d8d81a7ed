"""The C interface of the C++ client (clients/cpp/include/gym_remote/gym_remote.h): a probe client written
in C against it alone passes the conformance suite, pumped by its own loop and also frame-paced (one pump a
frame, each step answered on the next frame), and serves a vector next to a Python client as SyncVectorEnv."""

from __future__ import annotations

import sys

import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gym_remote.conformance import GROUPS, run
from gym_remote.conformance.reference import differences
from gym_remote.conformance.values import probe_vector
from gym_remote.probe import ProbeEnv
from tests.helpers import free_tcp_address, probe_client_template

pytestmark = pytest.mark.timeout(300)

MODES = {"run": [], "frame-paced": ["--frame-paced"]}
"""run: gr_client_run (start, then pump until the end); frame-paced: one gr_client_pump(client, 0) per ~1 ms frame."""


def c_probe_client(build, *arguments: str) -> list[str]:
    return [str(build / "gym_remote_probe_client_c"), *arguments]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("group", GROUPS)
def test_the_c_probe_client_passes_the_conformance_suite(cpp_build, group, mode):
    template = probe_client_template(c_probe_client(cpp_build), *MODES[mode])
    report = run(template, groups=[group])
    assert report.results and report.passed, report.text()


@pytest.mark.parametrize("mode", list(MODES))
def test_the_c_client_and_a_python_client_serve_one_vector_as_sync_vector_env_steps(cpp_build, reaper, mode):
    """Seeds above 2**63 reach the C env whole; steps answered a frame later keep the vector exact."""
    endpoint = free_tcp_address()
    autoreset = AutoresetMode.SAME_STEP
    envs = probe_vector(endpoint, 4, liveness_timeout=2.0, mode=autoreset)
    reference = SyncVectorEnv([ProbeEnv] * 4, autoreset_mode=autoreset)
    try:
        reaper.popen(c_probe_client(cpp_build, endpoint, "--num-envs", "2", "--name", "c", *MODES[mode]))
        python = [sys.executable, "-m", "gym_remote", "client", endpoint, "--env", "gym_remote/Probe-v0"]
        reaper.popen([*python, "--num-envs", "2", "--name", "python"])
        found = differences(envs.reset(seed=2**64 - 3), reference.reset(seed=2**64 - 3), "reset")
        envs.action_space.seed(3)
        for step in range(30):
            actions = envs.action_space.sample()
            found += differences(envs.step(actions), reference.step(actions), f"step {step}")
        seeds = envs.get_attr("np_random_seed")
        assert list(seeds) == [2**64 - 3 + i for i in range(4)], seeds
        assert not found, "\n".join(found)
    finally:
        envs.close()
        reference.close()
