"""The single-file examples run as their users run them (briefly)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, subprocess_env
from tests.helpers import free_tcp_address

PPO = REPO_ROOT / "examples" / "cleanrl_ppo.py"

TRAINING_STEPS = 20_480
"""40 of the example's updates (4 envs, 128 steps each)."""

LEARNED_RETURN = 50.0
"""What the mean return of the last 20 episodes reaches on CartPole in TRAINING_STEPS (seed 1); random actions
average about 22."""


@pytest.mark.timeout(180)
def test_cleanrl_ppo_trains_a_few_thousand_steps(reaper, tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    board = tmp_path / "runs"
    process = reaper.popen(
        [
            sys.executable,
            str(PPO),
            *("--total-timesteps", "4096", "--num-envs", "4", "--num-clients", "2", "--tensorboard", str(board)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**subprocess_env(), "OMP_NUM_THREADS": "1"},
    )
    output, _ = process.communicate(timeout=150)
    assert process.returncode == 0, output
    updates = [line for line in output.splitlines() if line.startswith("step ")]
    assert len(updates) == 4096 // (4 * 128)
    final = float(output.strip().splitlines()[-1].rsplit(":", 1)[1])
    assert math.isfinite(final) and 9 <= final <= 500  # CartPole returns, from episodes that ended
    events = event_accumulator.EventAccumulator(str(board))
    events.Reload()
    served = [event.value for event in events.Scalars("fleet/served")]
    assert served == [4.0] * len(updates)  # the fleet's figures, at each update, next to the curves
    assert len(events.Scalars("charts/mean_return_last_20")) == len(updates)
    assert events.Scalars("fleet/episodes")[-1].value > 0


def curve(output: str) -> list[tuple[int, float]]:
    """The example's (step, mean return) after each update, from its output."""
    return [(int(line.split()[1]), float(line.split()[7])) for line in output.splitlines() if line.startswith("step ")]


@pytest.mark.timeout(360)
def test_cleanrl_ppo_learns_cartpole_the_same_from_python_cpp_and_csharp_clients(cpp_build, csharp_client, reaper):
    """Each client's CartPole is Gymnasium's, bit for bit: the same seeds and actions make the same episodes, so
    PPO's whole learning curve is the same, and it reaches the same return, whichever language steps the envs."""
    clients = {
        "python": [sys.executable, "-m", "gym_remote", "client", "--env", "CartPole-v1", "--num-envs", "4"],
        "cpp": [str(cpp_build / "gym_remote_cartpole_client"), "--num-envs", "4"],
        "csharp": [*csharp_client, "--env", "cartpole", "--num-envs", "4"],
    }
    learners = {}
    for name, client in clients.items():  # all at once: each learner and client is mostly waiting on the other
        endpoint = free_tcp_address()
        learner = [sys.executable, str(PPO), "--bind", endpoint, "--num-envs", "4"]
        learners[name] = reaper.popen(
            [*learner, "--total-timesteps", str(TRAINING_STEPS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**subprocess_env(), "OMP_NUM_THREADS": "1"},
        )
        reaper.popen([*client, endpoint], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    curves = {}
    for name, learner in learners.items():
        output, _ = learner.communicate(timeout=300)
        assert learner.returncode == 0, f"{name}: {output[-3000:]}"
        curves[name] = curve(output)
        assert len(curves[name]) == TRAINING_STEPS // (4 * 128), f"{name}: {output[-3000:]}"
    for name, steps in curves.items():
        assert steps == curves["python"], f"{name} learned otherwise than on Gymnasium's CartPole"
        assert steps[-1][1] >= LEARNED_RETURN, f"{name}: {steps}"
