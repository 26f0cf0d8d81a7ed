"""What a conformance run found: one :class:`CheckResult` per check, as text for a person and JSON for CI.

Socket-free; the runner fills it, the command line prints it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CheckFailed", "CheckResult", "Report"]


class CheckFailed(AssertionError):
    """A check found the client wrong; the message says what it did and what the protocol requires."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check."""

    group: str
    name: str
    passed: bool
    seconds: float
    message: str = ""
    client_output: str = ""
    """The tail of the client's stderr and stdout, when the check failed."""

    def line(self) -> str:
        """``pass  group: name (1.2 s)``, or ``FAIL ...``."""
        return f"{'pass' if self.passed else 'FAIL'}  {self.group}: {self.name} ({self.seconds:.1f} s)"


@dataclass
class Report:
    """Every check's result, in the order they ran."""

    command: list[str]
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(result.passed for result in self.results)

    def failures(self) -> list[CheckResult]:
        return [result for result in self.results if not result.passed]

    def text(self, check_lines: bool = True) -> str:
        """A report a person reads: one line per check (unless ``check_lines`` is false: they were shown as the
        checks ran), then each failure's message and the client's output."""
        lines = [f"conformance of: {' '.join(self.command)}"]
        if check_lines:
            lines.extend(f"  {result.line()}" for result in self.results)
        for result in self.failures():
            lines.append("")
            lines.append(f"FAIL {result.group}: {result.name}")
            lines.extend(f"    {line}" for line in result.message.splitlines())
            if result.client_output:
                lines.append("    the client's output (last lines):")
                lines.extend(f"      | {line}" for line in result.client_output.splitlines())
        passed = sum(result.passed for result in self.results)
        lines.append("")
        lines.append(f"{passed} of {len(self.results)} checks passed" + ("" if self.passed else "; the client fails"))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "passed": self.passed,
            "checks": [asdict(result) for result in self.results],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)
