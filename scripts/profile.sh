#!/usr/bin/env bash
# A CPU flame graph of the `leased` server while the bench drives one scenario (CONTRIBUTING.md,
# "Profiling"): runs `scripts/bench.sh --only <scenario> --callers <N>` with long measurements,
# samples the server with `perf record` (the cpu-clock software event, which works where hardware
# counters do not, DWARF call graphs), and renders the samples with inferno.
#
#   scripts/profile.sh                                  # grpc_cycle@64 -> target/profile/grpc_cycle@64.svg
#   scripts/profile.sh --callers 1 --out target/profile/before@1 --leased-bin /tmp/leased-old
#
# Writes <out>.svg (the flame graph), <out>.folded (the collapsed stacks) and prints the functions
# with the most samples, self and inclusive. Installs linux-perf and inferno when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

scenario=grpc_cycle callers=64 seconds=20 out="" bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --scenario) scenario="$2"; shift 2 ;;
    --callers) callers="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) bench_args+=("$1"); shift ;;
  esac
done
out="${out:-target/profile/${scenario}@${callers}}"
mkdir -p "$(dirname "$out")"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v perf >/dev/null; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
fi
if ! command -v inferno-flamegraph >/dev/null; then
  cargo install --locked inferno
fi
# Samples of another process, and kernel frames: allowed for root; say why it fails otherwise.
if [ "$(cat /proc/sys/kernel/perf_event_paranoid)" -gt 1 ] && [ "$(id -u)" != 0 ]; then
  echo "profile: kernel.perf_event_paranoid > 1; run as root or lower it" >&2
  exit 1
fi

log="$out.bench.log"
scripts/bench.sh --only "$scenario" --callers "$callers" --seconds "$seconds" "${bench_args[@]}" \
  >"$out.bench.md" 2>"$log" &
bench=$!
trap 'kill $bench 2>/dev/null || true' EXIT

# The server's pid, then the start of the scenario (the server has started and Redis is warm).
pid=""
for _ in $(seq 1 1200); do
  pid="$(sed -n 's/^bench: leased (redis) is pid \([0-9]*\) .*/\1/p' "$log" | head -1)"
  if [ -n "$pid" ] && grep -q "^bench: $scenario \.\.\." "$log"; then break; fi
  if ! kill -0 $bench 2>/dev/null; then echo "profile: the bench stopped; see $log" >&2; exit 1; fi
  sleep 0.5
done
[ -n "$pid" ] || { echo "profile: no leased pid in $log" >&2; exit 1; }
sleep 2
record_s=$(( ${seconds%.*} - 4 ))
[ "$record_s" -ge 2 ] || record_s=2
echo "profile: sampling leased (pid $pid) for ${record_s} s during $scenario@$callers" >&2
perf record -q -F 499 -e cpu-clock --call-graph dwarf,32768 -p "$pid" -o "$out.perf.data" \
  -- sleep "$record_s" 2>/dev/null
wait $bench || true
trap - EXIT

perf script -i "$out.perf.data" 2>/dev/null | inferno-collapse-perf --kernel >"$out.folded"
inferno-flamegraph --title "leased, $scenario@$callers" <"$out.folded" >"$out.svg"
rm -f "$out.perf.data"
grep "$scenario@$callers" "$out.bench.md" || true
python3 scripts/profile_top.py "$out.folded"
echo "profile: wrote $out.svg" >&2
