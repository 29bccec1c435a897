#!/usr/bin/env python3
"""The cost guard: per-operation figures of a bench report against the committed baseline.

Compares the figures named in BASELINE (benches/cost-baseline.json) with REPORT
(target/bench/report.json of `scripts/bench.sh --only redis_calls,syscalls`): Redis calls per
grant, release and hand-over, system calls of the server per grant cycle. These are counts, not
times, so they do not drift with the machine's speed; a change that adds a Redis call or a tenth
of the system calls to an operation goes over its limit. Prints each figure, the baseline, the
limit and a verdict; exits 1 if any figure is over its limit or missing. A figure far below its
baseline (by more than its tolerance) passes with a note: update the baseline to lock the gain in.

Each figure of the baseline:

    "redis calls per grant": {
      "row": "redis_calls_grant",               # the report's row (scenarios[].name)
      "field": "redis_calls_per_op",            # its number
      "minus": ["redis_calls_per_op_by_command.ping"],  # numbers taken off it (optional)
      "value": 9.0,                             # the baseline
      "tolerance": 0.3,                         # limit = value + 0.3; or "10%": value × 1.1
      "check": false                            # optional: printed, never failed (information)
    }

`--update-baseline` writes the report's figures into BASELINE as the new values (tolerances and
everything else kept): do it on purpose, and say why in the commit message.

    scripts/cost_guard.py [REPORT] [BASELINE] [--update-baseline]
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lookup(row, path):
    """`a.b` in a row: row["a"]["b"]; None when absent (an absent command counts 0 in `minus`)."""
    value = row
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def measure(rows, figure):
    """The figure's number in the report, or an error text."""
    row = rows.get(figure["row"])
    if row is None:
        return None, f"no row {figure['row']} in the report"
    if row.get("error"):
        return None, f"{figure['row']} failed: {row['error']}"
    value = lookup(row, figure["field"])
    if not isinstance(value, (int, float)):
        return None, f"{figure['row']} has no number {figure['field']}"
    for path in figure.get("minus", []):
        less = lookup(row, path)
        value -= less if isinstance(less, (int, float)) else 0
    return round(value, 3), None


def allowance(figure):
    """How far above (and below) the baseline a figure may be."""
    tolerance = figure["tolerance"]
    if isinstance(tolerance, str) and tolerance.endswith("%"):
        return abs(figure["value"]) * float(tolerance[:-1]) / 100
    return float(tolerance)


def tolerance_text(figure):
    tolerance = figure["tolerance"]
    return tolerance if isinstance(tolerance, str) else f"+{tolerance:g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "report", nargs="?", type=Path, default=ROOT / "target/bench/report.json"
    )
    parser.add_argument(
        "baseline", nargs="?", type=Path, default=ROOT / "benches/cost-baseline.json"
    )
    parser.add_argument(
        "--update-baseline",
        action="store_true",
        help="write the report's figures into the baseline (tolerances kept)",
    )
    args = parser.parse_args()

    report = json.loads(args.report.read_text())
    baseline = json.loads(args.baseline.read_text())
    rows = {row["name"]: row for row in report.get("scenarios", [])}
    build = report.get("environment", {}).get("build")
    figures = baseline["figures"]

    if args.update_baseline:
        problems = []
        for name, figure in figures.items():
            value, error = measure(rows, figure)
            if error:
                problems.append(f"{name}: {error}")
                continue
            print(f"{name}: {figure['value']:g} -> {value:g}")
            figure["value"] = value
        if problems:
            print("cost guard: baseline NOT updated:", *problems, sep="\n  ", file=sys.stderr)
            return 1
        baseline["build"] = build
        baseline["commit"] = report.get("environment", {}).get("commit")
        args.baseline.write_text(json.dumps(baseline, indent=2, ensure_ascii=False) + "\n")
        print(
            f"cost guard: wrote {args.baseline}; commit it with the reason the costs moved",
            file=sys.stderr,
        )
        return 0

    if baseline.get("build") and build and baseline["build"] != build:
        print(
            f"cost guard: note: the baseline was taken from a {baseline['build']} build, the report "
            f"is of a {build} build (LEASED_BENCH_PROFILE); the counts are alike, not the same",
            file=sys.stderr,
        )
    width = max(len(name) for name in figures)
    print(f"{'figure':<{width}}  {'measured':>9}  {'baseline':>9}  {'limit':>9}  verdict")
    failed, gains = [], []
    for name, figure in figures.items():
        value, error = measure(rows, figure)
        room = allowance(figure)
        limit = figure["value"] + room
        checked = figure.get("check", True)
        if error:
            verdict = f"MISSING: {error}"
            if checked:
                failed.append(name)
        elif not checked:
            verdict = "information (not checked)"
        elif value > limit + 1e-9:
            verdict = f"OVER ({tolerance_text(figure)} allowed)"
            failed.append(name)
        elif value < figure["value"] - room - 1e-9:
            verdict = "ok, far below: update the baseline to lock in the gain"
            gains.append(name)
        else:
            verdict = "ok"
        shown = "-" if value is None else f"{value:g}"
        print(
            f"{name:<{width}}  {shown:>9}  {figure['value']:>9g}  {round(limit, 3):>9g}  {verdict}"
        )
    if gains:
        print(
            f"\ncost guard: {len(gains)} figure(s) far below the baseline; to lock the gain in: "
            "scripts/cost-guard.sh --update-baseline, and commit benches/cost-baseline.json "
            "saying why"
        )
    if failed:
        print(
            f"\ncost guard: FAILED: {', '.join(failed)}. If the cost is meant (a feature that "
            "needs the call), update the baseline on purpose: scripts/cost-guard.sh "
            "--update-baseline, and give the reason in the commit message (CONTRIBUTING.md, "
            "\"Benchmarks\")",
            file=sys.stderr,
        )
        return 1
    print("\ncost guard: every figure within its limit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
