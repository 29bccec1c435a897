"""The proto is held to buf's rules (scripts/buf/check.sh), and `buf breaking` really guards the
released contract: edits of a temporary copy of proto/ that keep old clients working pass, edits
that break them fail with the rule that names the break.

buf is the one `scripts/buf/check.sh` installs from npm into scripts/buf/node_modules (CI runs that
script before the tests). Run from the repository root:
`.venv/bin/pytest -q tests/python/test_proto_contract.py`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROTO = REPO / "proto"
PROTO_FILE = Path("lease/v1/lease.proto")
BASELINE = REPO / "scripts" / "buf" / "baseline.json"
BUF = REPO / "scripts" / "buf" / "node_modules" / ".bin" / "buf"


@pytest.fixture(scope="module")
def buf() -> Path:
    if not BUF.exists():
        pytest.fail(
            f"{BUF.relative_to(REPO)} is missing: run scripts/buf/check.sh first "
            "(it installs buf from npm with `npm ci` in scripts/buf)"
        )
    return BUF


def run_buf(buf: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(buf), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def breaking_rules(buf: Path, module: Path) -> list[str]:
    """The breaking rules that `module` violates against the released contract (empty: none)."""
    run = run_buf(buf, "breaking", module, "--against", BASELINE, "--error-format", "json")
    if run.returncode == 0:
        return []
    # buf exits 100 when it found violations; anything else means it could not check at all.
    assert run.returncode == 100, f"buf breaking failed to run:\n{run.stderr}{run.stdout}"
    return [json.loads(line)["type"] for line in run.stdout.splitlines() if line.strip()]


def edited_copy(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """A copy of proto/ (buf.yaml included) with each `old` text of lease.proto replaced by `new`.
    Each `old` must occur exactly once, so that an edit never silently misses its target."""
    module = tmp_path / "proto"
    shutil.copytree(PROTO, module)
    path = module / PROTO_FILE
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in lease.proto"
        text = text.replace(old, new)
    path.write_text(text)
    return module


def test_the_proto_passes_lint_format_and_breaking(buf: Path) -> None:
    lint = run_buf(buf, "lint", PROTO)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run_buf(buf, "format", "-d", "--exit-code", PROTO)
    assert fmt.returncode == 0, f"run `buf format -w proto`:\n{fmt.stdout}{fmt.stderr}"
    assert breaking_rules(buf, PROTO) == []


def test_the_lint_exception_covers_only_the_watch_rpc(buf: Path) -> None:
    # buf.yaml can only except a rule for a whole file; this keeps the exception to the one RPC it
    # was written for: STANDARD without any exception must report exactly that one line.
    strict = json.dumps({"version": "v2", "lint": {"use": ["STANDARD"]}})
    lint = run_buf(buf, "lint", PROTO, "--config", strict, "--error-format", "json")
    found = [json.loads(line) for line in lint.stdout.splitlines() if line.strip()]
    assert [(f["type"], "WatchEvent" in f["message"]) for f in found] == [
        ("RPC_RESPONSE_STANDARD_NAME", True)
    ], lint.stdout + lint.stderr


def test_adding_a_field_and_an_rpc_is_not_breaking(buf: Path, tmp_path: Path) -> None:
    module = edited_copy(
        tmp_path,
        (
            "  string lease_id = 8;\n}",
            "  string lease_id = 8;\n  // A new optional field.\n  string note = 9;\n}",
        ),
        (
            "  rpc CheckToken(CheckTokenRequest) returns (CheckTokenResponse);\n",
            "  rpc CheckToken(CheckTokenRequest) returns (CheckTokenResponse);\n\n"
            "  // A new RPC.\n  rpc Ping(PingRequest) returns (PingResponse);\n",
        ),
        ("message CheckTokenRequest {",
         "message PingRequest {}\n\nmessage PingResponse {}\n\nmessage CheckTokenRequest {"),
    )
    assert run_buf(buf, "lint", module).returncode == 0
    assert breaking_rules(buf, module) == []


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        # The same name under another number: old peers read and write the wrong field.
        (("  string lease_id = 2;\n  // The new TTL", "  string lease_id = 12;\n  // The new TTL"),
         "FIELD_NO_DELETE"),
        # int64 -> int32: a large value decodes truncated.
        (("  int64 wait_ms = 4;", "  int32 wait_ms = 4;"), "FIELD_SAME_TYPE"),
        # A released RPC disappears: old clients get UNIMPLEMENTED.
        (("  rpc CheckToken(CheckTokenRequest) returns (CheckTokenResponse);\n", ""),
         "RPC_NO_DELETE"),
        # Same number, new name: the wire is unchanged, but JSON and generated code break.
        (("  uint64 fencing_token = 3;\n  // The granted TTL",
          "  uint64 token = 3;\n  // The granted TTL"), "FIELD_SAME_NAME"),
    ],
    ids=["renumber-field", "retype-field", "remove-rpc", "rename-field"],
)
def test_breaking_edits_fail_with_the_rule_that_names_them(
    buf: Path, tmp_path: Path, edit: tuple[str, str], rule: str
) -> None:
    assert rule in breaking_rules(buf, edited_copy(tmp_path, edit))
