"""Conformance of a client, in any language, to the gym_remote protocol (docs/CONFORMANCE.md).

``gym-remote conformance -- CLIENT_COMMAND...`` runs every check; from Python:

>>> from gym_remote.conformance import run
>>> report = run(["gym-remote", "client", "{endpoint}", "--env", "gym_remote/Probe-v0",
...               "--num-envs", "{num_envs}", "{security}"], groups=["security"])  # doctest: +SKIP
>>> report.passed  # doctest: +SKIP
True
"""

from __future__ import annotations

from gym_remote.conformance.check import Check, Context
from gym_remote.conformance.report import CheckFailed, CheckResult, Report
from gym_remote.conformance.runner import GROUPS, all_checks, run

__all__ = ["GROUPS", "Check", "CheckFailed", "CheckResult", "Context", "Report", "all_checks", "run"]
