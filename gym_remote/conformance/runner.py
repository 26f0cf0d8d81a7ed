"""Runs the checks against a client command and collects a :class:`~gym_remote.conformance.report.Report`.

The checks (:class:`~gym_remote.conformance.check.Check`) come from the groups ``wire``, ``values``,
``lifecycle`` and ``security``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from gym_remote.conformance import lifecycle, readings, security, values, wire
from gym_remote.conformance.check import Check, Context, Credentials  # Credentials: still importable from here
from gym_remote.conformance.report import CheckFailed, CheckResult, Report

__all__ = ["Check", "Context", "Credentials", "GROUPS", "all_checks", "run"]

logger = logging.getLogger("gym_remote")

GROUPS = ("wire", "values", "lifecycle", "security")

DEFAULT_LIVENESS_TIMEOUT = 2.0


def all_checks() -> list[Check]:
    """Every check, in the order they run: wire, values, lifecycle, security."""
    return [*wire.CHECKS, *readings.CHECKS, *values.CHECKS, *lifecycle.CHECKS, *security.CHECKS]


def run(
    template: Sequence[str],
    *,
    groups: Iterable[str] | None = None,
    names: Iterable[str] | None = None,
    liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
    directory: str | os.PathLike[str] | None = None,
    checks: Sequence[Check] | None = None,
    progress: Callable[[CheckResult], None] | None = None,
) -> Report:
    """Run the checks of ``groups`` (default all; ``names`` picks single checks) against ``template``.

    ``progress`` is given each result as soon as its check ends.
    """
    chosen = list(all_checks() if checks is None else checks)
    if groups is not None:
        wanted = set(groups)
        unknown = wanted - set(GROUPS)
        if unknown:
            raise ValueError(f"unknown check groups {sorted(unknown)}; the groups are {', '.join(GROUPS)}")
        chosen = [check for check in chosen if check.group in wanted]
    if names is not None:
        wanted_names = set(names)
        chosen = [check for check in chosen if check.name in wanted_names]
    report = Report(command=list(template))
    with tempfile.TemporaryDirectory(prefix="gym-remote-conformance-", dir=directory) as scratch:
        for number, check in enumerate(chosen):
            check_directory = Path(scratch) / f"check-{number}"
            check_directory.mkdir()
            result = _run_one(check, template, check_directory, liveness_timeout)
            report.results.append(result)
            if progress is not None:
                progress(result)
    return report


def _run_one(check: Check, template: Sequence[str], directory: Path, liveness_timeout: float) -> CheckResult:
    context = Context(template, directory, liveness_timeout)
    started = time.monotonic()
    message = ""
    try:
        check.run(context)
    except CheckFailed as failure:
        message = str(failure)
    except Exception as error:  # the check could not be carried out: that fails it too, with the cause
        message = f"the check could not run to its end: {type(error).__name__}: {error}\n{traceback.format_exc()}"
    output = context.client_output() if message else ""
    context.end_clients()
    return CheckResult(
        group=check.group,
        name=check.name,
        passed=not message,
        seconds=time.monotonic() - started,
        message=message,
        client_output=output,
    )
