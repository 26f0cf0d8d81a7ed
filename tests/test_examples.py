"""The single-file examples run as their users run them (briefly)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, subprocess_env


@pytest.mark.timeout(180)
def test_cleanrl_ppo_trains_a_few_thousand_steps(reaper, tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    script = REPO_ROOT / "examples" / "cleanrl_ppo.py"
    board = tmp_path / "runs"
    process = reaper.popen(
        [
            sys.executable,
            str(script),
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
