"""The benchmark suite for two commits side by side: ``python benchmarks/compare_commits.py --base REF``.

Case by case, each round runs ``benchmarks/suite.py`` for that case once from a checkout of ``REF`` and once
from the head (this working tree, or ``--head REF``), in an ABBA order (base, head, head, base, ...), so that
a machine that slows down or speeds up weighs on both alike and the two commits' runs of a case are minutes
apart, not a whole suite.

Every suite run measures reference rows that run none of gym_remote's code (Gymnasium's vector envs, plain
pipe workers, the raw echoes and transports) interleaved with RemoteVectorEnv's rows. Each row is read as
its rate over the geometric mean of its case's reference rows in the same run (in the scaling case, those
with the same number of envs), which takes out the drift of the machine between runs; a case without
references (partial) is read in absolute rates. The reference rows themselves run the same code on both
sides, so their head / base is the noise of the measurement: a row is called slower only if its head / base
is below the lowest of theirs.

``--statistic`` says which of a row's runs stand for it. ``best`` (the default): the fastest of all its runs
(every round, every repeat), over the fastest of its group's reference rows. On a shared virtual machine the
noise is one-sided: time stolen by other guests (``steal`` in ``/proc/stat``, 2 to 16 % of a run here, in
bursts of seconds) and other processes only ever slow a run down, so the fastest run is the closest to what
the code can do, and a burst that hits one commit's run of a row does not decide the verdict. ``median``:
the median over the rounds of each run's normalized median.

Any change to the step path reports this table (see DEVELOPERS' guide).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
REFERENCES = ("SyncVectorEnv", "AsyncVectorEnv", "plain workers", "raw ")
"""Label prefixes of the rows that run none of gym_remote's code."""
PEERS = ("PufferLib", "EnvPool")
"""Label prefixes of the other libraries' rows: none of gym_remote's code either, but too erratic to measure the
noise by (PufferLib's workers busy-wait), so they are shown and neither judged nor taken for references."""


def checkout(ref: str, directory: Path) -> Path:
    """A detached worktree of ``ref`` in ``directory``, with a C++ client build if this tree has one: shared with
    it when ``ref``'s clients/cpp is this tree's, else built from ``ref``'s sources (so that its rows measure it)."""
    subprocess.run(["git", "worktree", "add", "--detach", str(directory), ref], cwd=REPOSITORY, check=True)
    build = REPOSITORY / "clients" / "cpp" / "build"
    if not build.is_dir():
        return directory
    same = subprocess.run(["git", "diff", "--quiet", ref, "--", "clients/cpp"], cwd=REPOSITORY).returncode == 0
    if same:
        (directory / "clients" / "cpp" / "build").symlink_to(build)
        return directory
    source = directory / "clients" / "cpp"
    print(f"building {ref}'s C++ client (its clients/cpp differs from this tree's)", flush=True)
    subprocess.run(["cmake", "-S", str(source), "-B", str(source / "build"), "-DCMAKE_BUILD_TYPE=Release"], check=True)
    subprocess.run(["cmake", "--build", str(source / "build"), "-j", str(os.cpu_count() or 1)], check=True)
    return directory


def run_suite(tree: Path, cases: str, repeats: int, output: Path) -> dict:
    """One run of ``tree``'s suite; its JSON report."""
    output.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ, PYTHONPATH=str(tree))
    command = [sys.executable, "benchmarks/suite.py", "--cases", cases, "--repeats", str(repeats)]
    subprocess.run([*command, "--output", str(output)], cwd=tree, env=environment, check=True)
    (report,) = output.glob("suite-*.json")
    return json.loads(report.read_text())


def is_reference(label: str) -> bool:
    return label.startswith(REFERENCES)


def group_of(case: str, label: str) -> str:
    """The rows a row is read against: in the scaling case those with its number of envs, else the case's."""
    return label.rsplit(", ", 1)[1] if case == "scaling" else ""


def over_references(case: str, rates: dict[str, float]) -> dict[tuple[str, str], float]:
    """Each row's rate over the geometric mean of its group's reference rows' rates, by (case, row)."""
    logs: dict[str, list[float]] = {}
    for label, value in rates.items():
        if is_reference(label):
            logs.setdefault(group_of(case, label), []).append(math.log(value))
    found = {}
    for label, value in rates.items():
        group = logs.get(group_of(case, label))
        found[(case, label)] = value / math.exp(statistics.fmean(group)) if group else value
    return found


def normalized(report: dict) -> dict[tuple[str, str], float]:
    """Each row's median over the geometric mean of its group's reference rows' medians in the same run."""
    found = {}
    for case in report["cases"]:
        found |= over_references(case["name"], case["medians"])
    return found


def fastest(reports: list[dict]) -> dict[tuple[str, str], float]:
    """Each row's fastest run in any of ``reports`` (one commit's), over its group's reference rows' fastest."""
    best: dict[str, dict[str, float]] = {}
    for report in reports:
        for case in report["cases"]:
            rows = best.setdefault(case["name"], {})
            for label, runs in case["runs"].items():
                rows[label] = max(rows.get(label, 0.0), *runs)
    found = {}
    for case, rates in best.items():
        found |= over_references(case, rates)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare the head with")
    parser.add_argument("--head", default=None, help="a commit to compare (default: this working tree)")
    parser.add_argument("--cases", default="cartpole,busy,frames,floor,training,scaling,partial")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (base, head) or (head, base) runs")
    parser.add_argument("--repeats", type=int, default=2, help="runs per vector env within one suite run")
    parser.add_argument("--statistic", choices=("best", "median"), default="best", help="see above")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "compare")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gym-remote-compare-"))
    trees = {"base": checkout(args.base, work / "base")}
    trees["head"] = REPOSITORY if args.head is None else checkout(args.head, work / "head")
    names = {"base": args.base, "head": args.head or "working tree"}
    values: dict[str, dict[tuple[str, str], list[float]]] = {"base": {}, "head": {}}
    reports: dict[str, list[dict]] = {"base": [], "head": []}
    try:
        for case in [name.strip() for name in args.cases.split(",") if name.strip()]:
            for round_number in range(args.rounds):
                order = ["base", "head"] if round_number % 2 == 0 else ["head", "base"]
                for side in order:
                    print(f"\n== {case}, round {round_number + 1} of {args.rounds}: {side} ({names[side]})", flush=True)
                    report = run_suite(trees[side], case, args.repeats, work / f"{case}-{side}-{round_number}")
                    reports[side].append(report)
                    for key, value in normalized(report).items():
                        values[side].setdefault(key, []).append(value)
    finally:
        for tree in trees.values():
            if tree != REPOSITORY:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPOSITORY, check=False)
    if args.statistic == "best":
        chosen = {side: fastest(reports[side]) for side in ("base", "head")}
        described = f"fastest of {args.rounds} x {args.repeats} runs per commit"
    else:
        chosen = {side: {key: statistics.median(runs) for key, runs in values[side].items()} for side in values}
        described = f"median of {args.rounds} runs per commit"
    table = []
    for key in sorted(set(chosen["base"]) & set(chosen["head"])):
        base, head = chosen["base"][key], chosen["head"][key]
        table.append({"case": key[0], "row": key[1], "base": base, "head": head, "head/base": head / base})
    noise = [entry["head/base"] for entry in table if is_reference(entry["row"])]
    floor = min(noise, default=math.nan)  # no reference rows: no verdicts
    for entry in table:
        if entry["row"].startswith(PEERS):
            entry["verdict"] = "peer"
        elif is_reference(entry["row"]):
            entry["verdict"] = "reference"
        else:
            entry["verdict"] = "slower" if entry["head/base"] < floor else ""
    print(f"\nrate / geometric mean of the case's reference rows, {described}")
    print(f"(base = {names['base']}, head = {names['head']})")
    print(f"{'case':9s} {'row':52s} {'base':>8s} {'head':>8s} {'head/base':>10s}")
    for entry in table:
        print(
            f"{entry['case']:9s} {entry['row'][:52]:52s} {entry['base']:8.3f} {entry['head']:8.3f} "
            f"{entry['head/base']:10.3f}  {entry['verdict']}"
        )
    slower = [entry for entry in table if entry["verdict"] == "slower"]
    judged = [entry for entry in table if entry["verdict"] in ("", "slower")]
    ceiling = max(noise, default=math.nan)
    print(
        f"\nreference rows (the same code on both sides): head/base from {floor:.3f} to {ceiling:.3f};"
        f" rows below {floor:.3f}: {len(slower)} of {len(judged)}"
    )
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / "compare.json"
    serialized = {side: {f"{case}|{row}": runs for (case, row), runs in rows.items()} for side, rows in values.items()}
    summary = {"base": names["base"], "head": names["head"], "rounds": args.rounds, "repeats": args.repeats}
    summary["statistic"] = args.statistic
    summary |= {"noise": [floor, ceiling], "rows": table, "runs": serialized}
    path.write_text(json.dumps(summary, indent=2))
    print(f"\nresults: {path}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
