#!/usr/bin/env bash
# The cost guard (CONTRIBUTING.md, "Benchmarks"; CI runs it): counts per operation that do not
# drift with the machine's speed, against the committed benches/cost-baseline.json: Redis calls
# per grant, release and hand-over (the `redis_calls` scenario) and the server's system calls per
# grant cycle (`syscalls`, strace -c). Fails when one is over its baseline's tolerance: a change
# that adds a Redis call or a tenth of the system calls to an operation.
#
#   scripts/cost-guard.sh                    # check (dev build, as CI; LEASED_BENCH_PROFILE=bench for release)
#   scripts/cost-guard.sh --update-baseline  # take the figures as the new baseline (tolerances kept);
#                                            # commit benches/cost-baseline.json saying why they moved
#
# Other arguments go to scripts/bench.sh (e.g. --leased-bin PATH). scripts/bench.sh installs what
# is missing (redis-server, strace).
set -euo pipefail

update=()
bench_args=()
for arg in "$@"; do
  case "$arg" in
    --update-baseline) update=(--update-baseline) ;;
    *) bench_args+=("$arg") ;;
  esac
done

# bench.sh resolves relative paths from here, then moves to the repository's root.
here="$(cd "$(dirname "$0")/.." && pwd)"
LEASED_BENCH_PROFILE="${LEASED_BENCH_PROFILE:-dev}" "$here/scripts/bench.sh" \
  --only redis_calls,syscalls ${bench_args[@]+"${bench_args[@]}"}
python3 "$here/scripts/cost_guard.py" "${CARGO_TARGET_DIR:-$here/target}/bench/report.json" \
  "$here/benches/cost-baseline.json" ${update[@]+"${update[@]}"}
