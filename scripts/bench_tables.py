#!/usr/bin/env python3
"""Writes the bench's figures into the docs from one run's report, so that they cannot drift.

The docs mark what comes from the bench with HTML comments (invisible in the book):

    <!-- bench table:scenarios -->  ...a table...  <!-- /bench -->
    p99 of <!-- bench idle_flood:p99_ms:.1f -->9.6<!-- /bench --> ms

A spec is `table:NAME` (a Markdown table the bench made: report["tables"][NAME]) or
`SOURCE:PATH[:SCALE]:FORMAT`: SOURCE is a scenario's row name (`grpc_cycle@64`, `idle_flood`) or
`report` (the report's top level), PATH dotted keys into it (`cpu_us_per_op.leased`,
`in_turns.median`, a list index as a number), SCALE `/1024` or `*100` applied first, FORMAT a
Python format spec (`,.0f` for 10,082; `.1f`; `s` for text). Everything between a spec and its
`<!-- /bench -->` is replaced.

The report the docs come from is committed as docs/src/bench-report.json: a run's report lives
in target/ (not committed, overwritten by every --quick or --only run), and the check needs the
very report the docs were made from.

    scripts/bench_tables.py --from target/bench/report.json   # take a full run's report, rewrite the docs
    scripts/bench_tables.py                                    # rewrite the docs from the committed report
    scripts/bench_tables.py --check                            # fail if the docs differ from it (scripts/docs.sh)

Python standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = Path("docs/src/bench-report.json")
# The files scanned for markers, relative to the root (docs/src is scanned whole).
TOP_FILES = ("README.md", "CONTRIBUTING.md", "ARCHITECTURE.md")
SPEC = r"[A-Za-z0-9_@.:/,+*\-]+"
MARKED = re.compile(r"<!-- bench (" + SPEC + r") -->(.*?)<!-- /bench -->", re.DOTALL)
STRAY = re.compile(r"<!-- (?:bench " + SPEC + r"|/bench) -->")
RERUN = "scripts/bench.sh && scripts/bench_tables.py --from target/bench/report.json"


class SpecError(Exception):
    pass


def doc_files(root: Path) -> list[Path]:
    files = [root / name for name in TOP_FILES if (root / name).exists()]
    files += sorted((root / "docs" / "src").rglob("*.md"))
    return files


def partial_reasons(report: dict) -> list[str]:
    """Why `report` is not a full run's, or what it lacks; empty if it is fine for the docs."""
    reasons = []
    if "tables" not in report:
        reasons.append("no `tables` (a report of an older bench)")
    if report.get("quick", True):
        reasons.append("--quick")
    if report.get("only"):
        reasons.append("--only " + ",".join(report["only"]))
    if report.get("environment", {}).get("build", "release") != "release":
        reasons.append("a " + report["environment"]["build"] + " build (CI's smoke run)")
    if report.get("callers"):
        reasons.append("--callers " + ",".join(map(str, report["callers"])))
    failed = [row["name"] for row in report.get("scenarios", []) if row.get("error")]
    if failed:
        reasons.append("failed scenarios: " + ", ".join(failed))
    return reasons


def lookup(report: dict, source: str, path: str):
    if source == "report":
        value = report
    else:
        rows = [r for r in report.get("scenarios", []) if r.get("name") == source]
        if not rows:
            raise SpecError(f"no scenario {source!r} in the report")
        value = rows[0]
    for key in path.split("."):
        if isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise SpecError(f"{source} has no {path!r}")
    if value is None:
        raise SpecError(f"{source}:{path} is null (not measured)")
    return value


def render(report: dict, spec: str) -> str:
    parts = spec.split(":")
    if parts[0] == "table" and len(parts) == 2:
        tables = report.get("tables", {})
        if parts[1] not in tables:
            raise SpecError(f"no table {parts[1]!r} in the report")
        return "\n\n" + tables[parts[1]].rstrip("\n") + "\n\n"
    if len(parts) not in (3, 4):
        raise SpecError(f"bad spec {spec!r}: SOURCE:PATH[:SCALE]:FORMAT or table:NAME")
    source, path, *rest = parts
    fmt = rest[-1]
    value = lookup(report, source, path)
    if len(rest) == 2:
        scale = rest[0]
        if not re.fullmatch(r"[/*][0-9.e+]+", scale):
            raise SpecError(f"bad scale {scale!r} in {spec!r}: /N or *N")
        factor = float(scale[1:])
        value = value / factor if scale[0] == "/" else value * factor
    try:
        return format(value, fmt)
    except (TypeError, ValueError) as error:
        raise SpecError(f"{spec!r}: cannot format {value!r} with {fmt!r}: {error}") from None


def generate(text: str, report: dict, where: str, errors: list[str]) -> str:
    def replace(match: re.Match) -> str:
        spec = match.group(1)
        if STRAY.search(match.group(2)):
            errors.append(f"{where}: the marker of {spec!r} is not closed before the next one")
            return match.group(0)
        try:
            body = render(report, spec)
        except SpecError as error:
            errors.append(f"{where}: {error}")
            body = match.group(2)
        return f"<!-- bench {spec} -->{body}<!-- /bench -->"

    for number, line in enumerate(text.splitlines(), 1):
        opening = re.match(r"\s*<!-- bench (" + SPEC + r") -->", line)
        if opening and not opening.group(1).startswith("table:"):
            # Markdown reads a line that starts with a comment as an HTML block, which ends the
            # paragraph the figure is in.
            errors.append(f"{where}:{number}: a figure's marker begins the line; reflow it")
    out = MARKED.sub(replace, text)
    stray = STRAY.findall(MARKED.sub("", text))
    if stray:
        errors.append(f"{where}: unpaired markers {stray}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="a run's report.json to take")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument(
        "--allow-partial", action="store_true", help="accept a --quick or --only report (tests)"
    )
    args = parser.parse_args(argv)
    root = args.root
    committed = root / COMMITTED

    if args.source is not None:
        if args.check:
            parser.error("--from and --check do not go together")
        report = json.loads(args.source.read_text())
        reasons = partial_reasons(report)
        if reasons and not args.allow_partial:
            print(
                f"bench_tables: {args.source} is not a full run's report ({'; '.join(reasons)}); "
                f"run `scripts/bench.sh` without --quick/--only/--callers",
                file=sys.stderr,
            )
            return 1
        shutil.copyfile(args.source, committed)
        print(f"bench_tables: copied {args.source} to {COMMITTED}")

    if not committed.exists():
        print(
            f"bench_tables: {COMMITTED} does not exist yet: the docs' bench sections are not "
            f"generated (run `{RERUN}`)",
            file=sys.stderr,
        )
        return 0 if args.check else 1
    report = json.loads(committed.read_text())
    errors = []
    reasons = partial_reasons(report)
    if reasons and not args.allow_partial:
        errors.append(f"{COMMITTED} is not a full run's report: {'; '.join(reasons)}")

    changed = []
    for path in doc_files(root):
        text = path.read_text()
        if "bench" not in text:
            continue
        where = str(path.relative_to(root))
        new = generate(text, report, where, errors)
        if new != text:
            changed.append((path, where, text, new))

    if errors:
        for error in errors:
            print(f"bench_tables: {error}", file=sys.stderr)
        return 1
    if args.check:
        for _, where, old, new in changed:
            sys.stdout.writelines(
                difflib.unified_diff(
                    old.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    f"{where} (as committed)",
                    f"{where} (from {COMMITTED})",
                )
            )
        if changed:
            print(
                f"bench_tables: the docs' bench figures differ from {COMMITTED}; "
                f"run scripts/bench_tables.py (or `{RERUN}` for a new run)",
                file=sys.stderr,
            )
            return 1
        return 0
    for path, where, _, new in changed:
        path.write_text(new)
        print(f"bench_tables: rewrote {where}")
    if not changed:
        print("bench_tables: the docs already match the report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
