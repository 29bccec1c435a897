"""scripts/bench_tables.py: the docs' bench figures are written from one report, and the check
fails when they differ from the committed one (scripts/docs.sh runs the check on the real docs).
No server: a report and docs of a few lines in a temporary root.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("bench_tables", ROOT / "scripts" / "bench_tables.py")
assert SPEC is not None and SPEC.loader is not None
bench_tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench_tables)

REPORT = {
    "quick": False,
    "only": [],
    "callers": [],
    "elapsed_s": 251.3,
    "environment": {"commit": "abc123def456", "cores": 2},
    "scenarios": [
        {"name": "idle_flood", "p99_ms": 5.919, "server_fds_max": 10082},
        {"name": "idle_connection_memory", "p50_ms": None, "rss_bytes_per_connection": 2560.0},
        {
            "name": "etcd_lock@64",
            "in_turns": {"median": 1.851, "by_turn": [1.8, 1.851, 1.9]},
            "cpu_us_per_op": {"etcd": 204.0},
        },
    ],
    "tables": {"scenarios": "| scenario | ops/s |\n|---|--:|\n| idle_flood | 214 |\n"},
}

DOC = """# Perf

At <!-- bench report:environment.commit:s -->old<!-- /bench --> (<!-- bench report:elapsed_s:.0f -->1<!-- /bench --> s):

<!-- bench table:scenarios -->
| stale |
<!-- /bench -->

| 10 | p99 <!-- bench idle_flood:p99_ms:.1f -->9.6<!-- /bench --> ms, <!-- bench idle_flood:server_fds_max:,.0f -->10,054<!-- /bench --> fds, <!-- bench idle_connection_memory:rss_bytes_per_connection:/1024:.1f -->2.4<!-- /bench --> KiB | x |

The ratio is <!-- bench etcd_lock@64:in_turns.median:.2f -->1.7<!-- /bench --> (turn 2: <!-- bench etcd_lock@64:in_turns.by_turn.1:.2f -->?<!-- /bench -->).
"""


def setup(tmp_path: Path, report: dict = REPORT, doc: str = DOC) -> Path:
    (tmp_path / "docs" / "src").mkdir(parents=True)
    (tmp_path / "README.md").write_text("# readme, no figures\n")
    (tmp_path / "docs" / "src" / "perf.md").write_text(doc)
    source = tmp_path / "report.json"
    source.write_text(json.dumps(report, indent=2) + "\n")
    return source


def run(tmp_path: Path, *args: str) -> int:
    return bench_tables.main(["--root", str(tmp_path), *args])


def test_writes_every_marked_figure_and_table_from_the_report(tmp_path: Path) -> None:
    source = setup(tmp_path)
    assert run(tmp_path, "--from", str(source)) == 0
    assert (tmp_path / "docs" / "src" / "bench-report.json").read_text() == source.read_text()
    text = (tmp_path / "docs" / "src" / "perf.md").read_text()
    assert "At <!-- bench report:environment.commit:s -->abc123def456<!-- /bench --> (" in text
    assert "elapsed_s:.0f -->251<!-- /bench --> s)" in text
    assert "<!-- bench table:scenarios -->\n\n| scenario | ops/s |\n|---|--:|\n| idle_flood | 214 |\n\n<!-- /bench -->" in text
    assert "| stale |" not in text
    assert "p99_ms:.1f -->5.9<!-- /bench --> ms" in text
    assert "server_fds_max:,.0f -->10,082<!-- /bench --> fds" in text
    assert ":/1024:.1f -->2.5<!-- /bench --> KiB" in text
    assert "in_turns.median:.2f -->1.85<!-- /bench --> (turn 2: " in text
    assert "by_turn.1:.2f -->1.85<!-- /bench -->)" in text
    # Generated once, the docs equal what the report makes: the check passes, and a second run
    # changes nothing.
    assert run(tmp_path, "--check") == 0
    assert run(tmp_path) == 0
    assert (tmp_path / "docs" / "src" / "perf.md").read_text() == text


def test_check_fails_when_a_figure_was_edited_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = setup(tmp_path)
    assert run(tmp_path, "--from", str(source)) == 0
    doc = tmp_path / "docs" / "src" / "perf.md"
    doc.write_text(doc.read_text().replace("-->5.9<!--", "-->9.6<!--"))
    capsys.readouterr()
    assert run(tmp_path, "--check") == 1
    out = capsys.readouterr().out
    assert "-| 10 | p99 <!-- bench idle_flood:p99_ms:.1f -->9.6" in out
    assert "+| 10 | p99 <!-- bench idle_flood:p99_ms:.1f -->5.9" in out


def test_check_fails_when_the_committed_report_changed(tmp_path: Path) -> None:
    source = setup(tmp_path)
    assert run(tmp_path, "--from", str(source)) == 0
    newer = json.loads(json.dumps(REPORT))
    newer["scenarios"][0]["server_fds_max"] = 10054
    (tmp_path / "docs" / "src" / "bench-report.json").write_text(json.dumps(newer))
    assert run(tmp_path, "--check") == 1


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"quick": True}, "--quick"),
        ({"only": ["idle_flood"]}, "--only idle_flood"),
        ({"callers": [64]}, "--callers 64"),
        ({"environment": {"commit": "abc123def456", "cores": 2, "build": "dev"}}, "a dev build"),
    ],
)
def test_a_partial_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, reason: str
) -> None:
    source = setup(tmp_path, {**REPORT, **change})
    assert run(tmp_path, "--from", str(source)) == 1
    assert reason in capsys.readouterr().err
    assert not (tmp_path / "docs" / "src" / "bench-report.json").exists()


def test_a_figure_the_report_lacks_fails_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = DOC + "Missing: <!-- bench held_scale:server_rss_bytes:/1e6:.1f -->112.8<!-- /bench -->.\n"
    source = setup(tmp_path, doc=doc)
    assert run(tmp_path, "--from", str(source)) == 1
    assert "no scenario 'held_scale'" in capsys.readouterr().err
    assert (tmp_path / "docs" / "src" / "perf.md").read_text() == doc
    assert run(tmp_path, "--check") == 1


def test_an_unpaired_marker_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = setup(tmp_path, doc=DOC + "Open: <!-- bench idle_flood:p99_ms:.1f -->5.9 and no end.\n")
    assert run(tmp_path, "--from", str(source)) == 1
    assert "unpaired markers" in capsys.readouterr().err


def test_a_marker_left_open_before_another_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = "Open: <!-- bench idle_flood:p99_ms:.1f -->5.9 " + DOC
    source = setup(tmp_path, doc=doc)
    assert run(tmp_path, "--from", str(source)) == 1
    assert "is not closed before the next one" in capsys.readouterr().err
    assert (tmp_path / "docs" / "src" / "perf.md").read_text() == doc


def test_the_docs_match_the_committed_report() -> None:
    """The real docs against docs/src/bench-report.json (as scripts/docs.sh checks them)."""
    assert bench_tables.main(["--check"]) == 0


def test_a_figure_at_the_start_of_a_line_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Markdown would read the line as an HTML block and split the paragraph there."""
    doc = DOC + "A paragraph that goes on\n  <!-- bench idle_flood:p99_ms:.1f -->5.9<!-- /bench --> ms.\n"
    source = setup(tmp_path, doc=doc)
    assert run(tmp_path, "--from", str(source)) == 1
    assert "perf.md:13: a figure's marker begins the line" in capsys.readouterr().err
