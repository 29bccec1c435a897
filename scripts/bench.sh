#!/usr/bin/env bash
# The benchmark command (CONTRIBUTING.md, "Benchmarks"; the scenarios and figures:
# docs/src/performance.md): installs what the benchmarks need when it is
# missing (redis-server and redis-benchmark, etcd for the etcd peer, strace for the `syscalls`
# scenario, the project venv with redis-py),
# then runs every scenario in release mode. Arguments go to the bench: `--quick` for the short CI
# run, `--only grpc_cycle,handoff` for some scenarios. Results: the Markdown tables on stdout and
# target/bench/report.json.
#
# `--baseline-bin PATH [--turns N]`: the scenarios in turns against another leased binary in one
# run (N runs of each, default 4, alternating, the order swapped halfway: C B, C B, B C, B C), the
# candidate being `--leased-bin` or else the leased this build makes (built once, copied). Each
# run's report goes to target/bench/turns/<turn>-<cand|base>.json, then scripts/bench_turns.py
# prints each row's ratios per turn and their median and writes target/bench/turns/summary.json.
set -euo pipefail

# Paths given relative to where the command was run (before the cd below).
absolute() {
  case "$1" in
    /*) realpath -ms -- "$1" ;;
    *) realpath -ms -- "$PWD/$1" ;;
  esac
}
bench_args=()
leased_bin=""
baseline_bin=""
turns=4
while [ $# -gt 0 ]; do
  case "$1" in
    --leased-bin | --baseline-bin | --turns)
      if [ $# -lt 2 ]; then
        echo "bench.sh: $1 needs a value" >&2
        exit 2
      fi
      option="$1" value="$2"
      shift 2
      ;;
    --leased-bin=* | --baseline-bin=* | --turns=*)
      option="${1%%=*}" value="${1#*=}"
      shift
      ;;
    *)
      bench_args+=("$1")
      shift
      continue
      ;;
  esac
  case "$option" in
    --leased-bin) leased_bin="$(absolute "$value")" ;;
    --baseline-bin) baseline_bin="$(absolute "$value")" ;;
    --turns) turns="$value" ;;
  esac
done
for binary in "$leased_bin" "$baseline_bin"; do
  if [ -n "$binary" ] && [ ! -x "$binary" ]; then
    echo "bench.sh: $binary is not an executable file" >&2
    exit 2
  fi
done
if ! [[ "$turns" =~ ^[1-9][0-9]*$ ]]; then
  echo "bench.sh: --turns wants a positive number, not $turns" >&2
  exit 2
fi

cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
command -v etcd >/dev/null || missing+=(etcd-server)
# The cost guard's `syscalls` scenario (scripts/cost-guard.sh) counts system calls with strace.
command -v strace >/dev/null || missing+=(strace)
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
profile="${LEASED_BENCH_PROFILE:-bench}"
if [ -z "$baseline_bin" ]; then
  cargo bench --locked --profile "$profile" --bench bench -- \
    ${leased_bin:+--leased-bin "$leased_bin"} ${bench_args[@]+"${bench_args[@]}"}
  exit
fi

# In turns: build once, then run the bench executable itself (no cargo between the runs, so no
# rebuild can change the candidate halfway).
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
turns_dir="$target_dir/bench/turns"
rm -rf "$turns_dir"
mkdir -p "$turns_dir"
executables="$(cargo bench --locked --profile "$profile" --bench bench --no-run \
  --message-format=json-render-diagnostics |
  python3 -c 'import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable"):
        print(message["target"]["name"], message["executable"])')"
bench_exe="$(awk '$1 == "bench" { print $2 }' <<<"$executables")"
built_leased="$(awk '$1 == "leased" { print $2 }' <<<"$executables")"
if [ -z "$bench_exe" ] || [ -z "$built_leased" ]; then
  echo "bench.sh: cargo named no bench or leased executable: $executables" >&2
  exit 1
fi
if [ -z "$leased_bin" ]; then
  # The leased this build made, as the bench would serve it; copied so that it stays put.
  cp "$built_leased" "$turns_dir/leased-candidate"
  leased_bin="$turns_dir/leased-candidate"
fi
echo "bench.sh: $turns turns of candidate $leased_bin against baseline $baseline_bin" >&2
failed=0
for turn in $(seq 1 "$turns"); do
  if [ "$turn" -le $((turns / 2)) ]; then order="cand base"; else order="base cand"; fi
  for side in $order; do
    binary="$leased_bin"
    [ "$side" = base ] && binary="$baseline_bin"
    echo "bench.sh: turn $turn of $turns, $side ($binary)" >&2
    rm -f "$target_dir/bench/report.json"
    # The tables go to <turn>-<side>.md; the bench's progress (stderr) shows.
    if ! "$bench_exe" --bench ${bench_args[@]+"${bench_args[@]}"} --leased-bin "$binary" \
      >"$turns_dir/$turn-$side.md"; then
      echo "bench.sh: turn $turn, $side: the bench failed" >&2
      failed=1
    fi
    if [ -f "$target_dir/bench/report.json" ]; then
      cp "$target_dir/bench/report.json" "$turns_dir/$turn-$side.json"
    fi
  done
done
python3 scripts/bench_turns.py "$turns_dir" --candidate "$leased_bin" --baseline "$baseline_bin"
exit "$failed"
