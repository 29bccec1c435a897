#!/usr/bin/env python3
"""The ratios of a run in turns (`scripts/bench.sh --baseline-bin PATH`): candidate / baseline.

Reads DIR/<turn>-cand.json and DIR/<turn>-base.json (each a target/bench/report.json), and prints,
for each row both sides measured (e.g. grpc_cycle@64, handoff@1), per turn: ops/s of each side and
their ratio, the leased processes' CPU µs per operation and their ratio, p50 and its ratio; then
the median ratio of each over the turns. Writes DIR/summary.json with the same. A ratio above 1 is
more ops/s, more CPU, a longer p50 for the candidate. Standard library only.

    scripts/bench_turns.py target/bench/turns [--candidate PATH --baseline PATH]
"""

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

# name in the summary, title in the table, decimals shown, how to read it from a row of report.json
FIGURES = [
    ("ops_per_s", "ops/s", 0, lambda row: row.get("ops_per_s")),
    ("leased_cpu_us_per_op", "leased CPU µs/op", 0, lambda row: leased_cpu(row)),
    ("p50_ms", "p50 ms", 3, lambda row: row.get("p50_ms")),
]


def leased_cpu(row):
    """CPU µs per operation of every leased process the row metered (`leased`, `leased-<label>`:
    the servers of a scenario of its own; the idle ones add about nothing)."""
    per_op = row.get("cpu_us_per_op")
    if not isinstance(per_op, dict):
        return None
    values = [v for label, v in per_op.items() if label == "leased" or label.startswith("leased-")]
    if not values:
        return None
    return sum(values)


def rows_of(path):
    report = json.loads(path.read_text())
    return {
        row["name"]: row
        for row in report.get("scenarios", [])
        if not row.get("error")
    }


def ratio(candidate, baseline):
    if candidate is None or baseline is None or not baseline:
        return None
    return candidate / baseline


def number(value, digits):
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="the turns' reports (target/bench/turns)")
    parser.add_argument("--candidate", default=None, help="the candidate binary, for the summary")
    parser.add_argument("--baseline", default=None, help="the baseline binary, for the summary")
    args = parser.parse_args()

    turns = {}
    for path in sorted(args.dir.glob("*.json")):
        match = re.fullmatch(r"(\d+)-(cand|base)\.json", path.name)
        if match:
            turns.setdefault(int(match[1]), {})[match[2]] = rows_of(path)
    complete = sorted(turn for turn, sides in turns.items() if len(sides) == 2)
    if not complete:
        print(f"bench_turns: no turn with both reports in {args.dir}", file=sys.stderr)
        return 1
    missing = sorted(set(turns) - set(complete))
    if missing:
        print(f"bench_turns: turns {missing} miss a report; left out", file=sys.stderr)

    names = []
    for turn in complete:
        for name in turns[turn]["cand"]:
            if name in turns[turn]["base"] and name not in names:
                names.append(name)

    summary = {
        "candidate": args.candidate,
        "baseline": args.baseline,
        "turns": complete,
        "ratio": "candidate / baseline",
        "rows": {},
    }
    print(f"candidate: {args.candidate or '?'}")
    print(f"baseline:  {args.baseline or '?'}")
    print(f"{len(complete)} turns; ratios are candidate / baseline (ops/s up is better, CPU and p50 down)")
    for name in names:
        per_turn = []
        for turn in complete:
            cand, base = turns[turn]["cand"].get(name), turns[turn]["base"].get(name)
            if cand is None or base is None:
                continue
            entry = {"turn": turn, "order": "cand, base" if turn <= max(turns) // 2 else "base, cand"}
            for key, _, _, read in FIGURES:
                c, b = read(cand), read(base)
                entry[key] = {"cand": c, "base": b, "ratio": ratio(c, b)}
            per_turn.append(entry)
        medians = {}
        for key, _, _, _ in FIGURES:
            ratios = [e[key]["ratio"] for e in per_turn if e[key]["ratio"] is not None]
            medians[key] = round(statistics.median(ratios), 4) if ratios else None
        summary["rows"][name] = {"by_turn": per_turn, "median_ratio": medians}

        print()
        print(f"## {name}")
        print()
        header = "| turn |"
        rule = "|--:|"
        for _, title, _, _ in FIGURES:
            header += f" {title} cand | base | ratio |"
            rule += "--:|--:|--:|"
        print(header)
        print(rule)
        for entry in per_turn:
            line = f"| {entry['turn']} |"
            for key, _, digits, _ in FIGURES:
                figure = entry[key]
                line += (
                    f" {number(figure['cand'], digits)} | {number(figure['base'], digits)} |"
                    f" {number(figure['ratio'], 3)} |"
                )
            print(line)
        line = "| median |"
        for key, _, _, _ in FIGURES:
            line += f" | | **{number(medians[key], 3)}** |"
        print(line)

    out = args.dir / "summary.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nbench_turns: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
