"""Sphinx directives that render the benchmark results in docs/benchmarks/*.json as tables, so that the
figures on the site are the recorded ones, never copied by hand:

* ``benchmark-machine FILE``: when and where a ``benchmarks/suite.py`` run was made, and with what settings;
* ``benchmark-cases FILE``: a table per case, with each row's median, runs and ratio;
* ``benchmark-targets FILE``: the project's speed targets as measured in that run;
* ``benchmark-comparison FILE``: a ``benchmarks/compare_commits.py`` report, summarized case by case.

FILE is relative to the page. Each directive writes MyST Markdown and parses it in place, so it is for
Markdown pages only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from compare_commits import PEERS, is_reference  # noqa: E402  (what compare_commits calls the noise)

SIZED = re.compile(r"^(.+), (\d+) envs$")
"""A row label of the scaling case: a vector env and its number of envs."""


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _table(caption: str, header: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """A MyST ``{table}`` with a caption; ``align`` has an ``l`` or an ``r`` per column."""
    cells = [header, [":---" if side == "l" else "---:" for side in align], *rows]
    lines = ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in cells]
    # a colon fence: a backtick fence's info string, the caption, cannot hold backticks
    return [":::{table} " + caption, ":align: left", ":class: benchmark-table", "", *lines, ":::", ""]


class _BenchmarkDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def report(self) -> dict:
        relative, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        self.env.note_dependency(relative)
        try:
            return json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise self.error(f"{self.name}: cannot read {self.arguments[0]}: {error}") from error

    def markdown(self, report: dict) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(self.markdown(self.report())), self.content_offset, container)
        return container.children


class BenchmarkMachine(_BenchmarkDirective):
    def markdown(self, report: dict) -> list[str]:
        machine, settings = report["machine"], report["settings"]
        when = report["created"].replace("T", " at ")
        cases = ", ".join(f"`{case}`" for case in settings["cases"])
        quick = " (`--quick`)" if settings["quick"] else ""
        return [
            f"**Run of {when}**{quick}: the cases {cases}, {settings['repeats']} runs of each row.",
            f"**Machine**: {machine['cpus']} CPUs, {machine['processor']}, {machine['platform']};",
            f"Python {machine['python']}, gymnasium {machine['gymnasium']}, numpy {machine['numpy']},",
            f"pyzmq {machine['pyzmq']}, libzmq {machine['libzmq']}.",
        ]


class BenchmarkCases(_BenchmarkDirective):
    def markdown(self, report: dict) -> list[str]:
        lines: list[str] = []
        for case in report["cases"]:
            caption = f"{case['title']} (`{case['name']}`)"
            sized = [SIZED.match(label) for label in case["medians"]]
            if all(sized):  # the scaling case: a row per size, a column per vector env
                lines += self.grid(case, caption, [(match[1], int(match[2])) for match in sized if match])
            else:
                lines += self.rows(case, caption)
        return lines

    @staticmethod
    def rows(case: dict, caption: str) -> list[str]:
        """A row per vector env: its median, its slowest and fastest run, its ratio, and any details."""
        baseline = case["baseline"]
        details = case.get("details") or {}
        header = ["row", f"{case['unit']}, median", "runs", f"× {baseline}", *details]
        rows = []
        for label, median in case["medians"].items():
            runs = case["runs"][label]
            # a row of another group ("CartPole, 8 envs, ...: lock-step") is not read against the baseline
            other_group = ": " in label and label.split(": ")[0] != baseline.split(": ")[0]
            ratio = "" if other_group else f"{case['ratios'][label]:.2f}"
            spread = f"{_number(min(runs))}\u00a0to\u00a0{_number(max(runs))}" if len(runs) > 1 else ""
            extra = [_number(values[label]) if label in values else "" for values in details.values()]
            rows.append([label, _number(median), spread, ratio, *extra])
        return _table(caption, header, "lrrr" + "r" * len(details), rows)

    @staticmethod
    def grid(case: dict, caption: str, labels: list[tuple[str, int]]) -> list[str]:
        """Medians, a row per number of envs and a column per vector env."""
        kinds = list(dict.fromkeys(kind for kind, _ in labels))
        sizes = sorted({size for _, size in labels})
        medians = dict(zip(labels, case["medians"].values(), strict=True))
        rows = [
            [str(size), *(_number(medians[kind, size]) if (kind, size) in medians else "" for kind in kinds)]
            for size in sizes
        ]
        return _table(f"{caption}, {case['unit']}, medians", ["envs", *kinds], "r" * (len(kinds) + 1), rows)


class BenchmarkTargets(_BenchmarkDirective):
    def markdown(self, report: dict) -> list[str]:
        rows = []
        for target in report["targets"]:
            value = target["value"]
            measured = f"{value:.2f}" if isinstance(value, int | float) else str(value)
            goal = target["goal"]
            # the JSON records whether it was met, not which way: a goal is an upper bound if only that fits
            at_most = (value <= goal) == target["met"] and (value >= goal) != target["met"]
            goal_text = f"{'≤' if at_most else '≥'}\u00a0{goal}"
            rows.append([target["target"], goal_text, measured, "met" if target["met"] else "missed", target["detail"]])
        met = sum(target["met"] for target in report["targets"])
        caption = f"The targets in this run: {met} of {len(rows)} met"
        return _table(caption, ["target", "goal", "measured", "", "row, or what it is read against"], "lrrll", rows)


class BenchmarkComparison(_BenchmarkDirective):
    def markdown(self, report: dict) -> list[str]:
        by_case: dict[str, dict[str, list[tuple[str, float]]]] = {}
        for row in report["rows"]:
            if row["base"] == row["head"] == 1.0:  # the case's own baseline: 1 by construction
                continue
            kind = "peer" if row["row"].startswith(PEERS) else "reference" if is_reference(row["row"]) else "remote"
            by_case.setdefault(row["case"], {}).setdefault(kind, []).append((row["row"], row["head/base"]))
        rows = []
        for case, kinds in by_case.items():
            references = [value for _, value in kinds.get("reference", [])]
            remote = [value for _, value in kinds.get("remote", [])]
            low = min(references, default=None)
            below = [f"{label} ({value:.3f})" for label, value in kinds.get("remote", []) if low and value < low]
            rows.append(
                [
                    f"`{case}`",
                    _span(references),
                    _span(remote),
                    "; ".join(below) if below else "none" if references else "(no reference rows)",
                ]
            )
        caption = f"head / base, {report.get('head', 'head')} against {report['base']}, {report['rounds']} rounds"
        header = ["case", "reference rows (noise)", "RemoteVectorEnv rows", "RemoteVectorEnv rows below the noise"]
        return _table(caption, header, "lrrl", rows)


def _span(values: list[float]) -> str:
    if not values:
        return ""
    low, high = f"{min(values):.3f}", f"{max(values):.3f}"
    return low if low == high else f"{low}\u00a0to\u00a0{high}"


def setup(app) -> dict[str, object]:
    app.add_directive("benchmark-machine", BenchmarkMachine)
    app.add_directive("benchmark-cases", BenchmarkCases)
    app.add_directive("benchmark-targets", BenchmarkTargets)
    app.add_directive("benchmark-comparison", BenchmarkComparison)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
