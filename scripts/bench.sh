#!/usr/bin/env bash
# The benchmark command (CONTRIBUTING.md, "Benchmarks"; the scenarios and figures:
# docs/src/performance.md): installs what the benchmarks need when it is
# missing (redis-server and redis-benchmark, etcd for the etcd peer, the project venv with redis-py),
# then runs every scenario in release mode. Arguments go to the bench: `--quick` for the short CI
# run, `--only grpc_cycle,handoff` for some scenarios. Results: the Markdown tables on stdout and
# target/bench/report.json.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
command -v etcd >/dev/null || missing+=(etcd-server)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} from Debian" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # The packages start system services on fixed ports; the bench starts its own on ephemeral ones.
  as_root systemctl disable --now redis-server etcd >/dev/null 2>&1 || true
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r benches/requirements.txt

# LEASED_BENCH_PROFILE=dev: CI's smoke run, built like the tests (every scenario runs; the numbers
# are not release numbers, and scripts/bench_tables.py refuses its report).
cargo bench --locked --profile "${LEASED_BENCH_PROFILE:-bench}" --bench bench -- "$@"
