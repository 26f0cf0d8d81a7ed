"""The benchmark suite for two commits side by side: ``python benchmarks/compare_commits.py --base REF``.

Each round runs ``benchmarks/suite.py`` (the cases asked for) once from a checkout of ``REF`` and once from
this working tree, in an ABBA order (base, head, head, base, ...) so that a machine that slows down or
speeds up during the run weighs on both alike. Every suite run measures Gymnasium's vector envs next to
RemoteVectorEnv, so each row is read as its ratio to its case's baseline (``SyncVectorEnv`` and the like)
in the same run; the table shows each row's median ratio for both commits and head / base.

Any change to the step path reports this table (see DEVELOPERS' guide): a row below 1.0 beyond the noise
the table shows between rounds is slower.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent


def checkout(ref: str, directory: Path) -> Path:
    """A detached worktree of ``ref`` in ``directory`` (the C++ client's build, if any, shared with it)."""
    subprocess.run(["git", "worktree", "add", "--detach", str(directory), ref], cwd=REPOSITORY, check=True)
    build = REPOSITORY / "clients" / "cpp" / "build"
    if build.is_dir():
        (directory / "clients" / "cpp" / "build").symlink_to(build)
    return directory


def run_suite(tree: Path, cases: str, repeats: int, output: Path) -> dict:
    """One run of ``tree``'s suite; its JSON report."""
    output.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ, PYTHONPATH=str(tree))
    command = [sys.executable, "benchmarks/suite.py", "--cases", cases, "--repeats", str(repeats)]
    subprocess.run([*command, "--output", str(output)], cwd=tree, env=environment, check=True)
    (report,) = output.glob("suite-*.json")
    return json.loads(report.read_text())


def ratios_of(report: dict) -> dict[tuple[str, str], float]:
    """Each row's ratio to its case's baseline, by (case, row)."""
    return {(case["name"], label): ratio for case in report["cases"] for label, ratio in case["ratios"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare this working tree with")
    parser.add_argument("--cases", default="cartpole,busy,frames,floor,training,scaling,partial")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (base, head) or (head, base) runs")
    parser.add_argument("--repeats", type=int, default=2, help="runs per vector env within one suite run")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "compare")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gym-remote-compare-"))
    base_tree = checkout(args.base, work / "base")
    runs: dict[str, list[dict[tuple[str, str], float]]] = {"base": [], "head": []}
    try:
        for round_number in range(args.rounds):
            order = ["base", "head"] if round_number % 2 == 0 else ["head", "base"]
            for side in order:
                tree, name = (base_tree, args.base) if side == "base" else (REPOSITORY, "HEAD")
                print(f"\n== round {round_number + 1} of {args.rounds}: {side} ({name})")
                report = run_suite(tree, args.cases, args.repeats, work / f"{side}-{round_number}")
                runs[side].append(ratios_of(report))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=REPOSITORY, check=False)
    rows = sorted(set(runs["base"][0]) & set(runs["head"][0]))
    table = []
    for key in rows:
        base = statistics.median(run[key] for run in runs["base"])
        head = statistics.median(run[key] for run in runs["head"])
        spread = max(run[key] for run in runs["head"]) / max(min(run[key] for run in runs["head"]), 1e-12)
        table.append(
            {"case": key[0], "row": key[1], "base": base, "head": head, "head/base": head / base, "spread": spread}
        )
    print(f"\nratios to each case's baseline, median of {args.rounds} runs per commit (base = {args.base})")
    print(f"{'case':10s} {'row':58s} {'base':>8s} {'head':>8s} {'head/base':>10s} {'head spread':>12s}")
    for entry in table:
        print(
            f"{entry['case']:10s} {entry['row'][:58]:58s} {entry['base']:8.3f} {entry['head']:8.3f} "
            f"{entry['head/base']:10.3f} {entry['spread']:12.3f}"
        )
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / "compare.json"
    path.write_text(
        json.dumps(
            {
                "base": args.base,
                "rounds": args.rounds,
                "rows": table,
                "runs": {
                    side: [{f"{case}|{row}": value for (case, row), value in run.items()} for run in side_runs]
                    for side, side_runs in runs.items()
                },
            },
            indent=2,
        )
    )
    print(f"\nresults: {path}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
