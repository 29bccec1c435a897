#!/usr/bin/env bash
# Holds proto/ to buf's rules (CI runs this from .ci/run):
#   buf lint      the STANDARD rules, with the exceptions listed and justified in proto/buf.yaml;
#   buf format    the canonical layout (fails on any diff; `buf format -w proto` fixes it);
#   buf breaking  no breaking change (the FILE rules) against the released contract,
#                 scripts/buf/baseline.json.
#
# The baseline is a buf image (JSON, pretty-printed so that a change to it reads as a diff) of the
# contract as released. It changes only on purpose, when a new contract is released:
#   scripts/buf/check.sh --update-baseline
# rebuilds it from proto/ as it is now, after lint and format pass; commit it with the release.
#
# buf comes from npm (@bufbuild/buf, pinned in package.json and package-lock.json) and is
# installed into scripts/buf/node_modules by `npm ci` when it is missing or stale.
set -euo pipefail

usage() { echo "usage: $0 [--update-baseline]" >&2; exit 2; }
update_baseline=false
case "${1-}" in
  "") ;;
  --update-baseline) update_baseline=true ;;
  *) usage ;;
esac

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
buf="$here/node_modules/.bin/buf"
baseline="$here/baseline.json"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v npm >/dev/null; then
  echo "installing nodejs and npm from Debian" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

# npm ci again only when the lock file changed since the last install (npm records the installed
# tree in node_modules/.package-lock.json).
if [ ! -x "$buf" ] || [ "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]; then
  echo "installing buf: npm ci in scripts/buf" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "buf $("$buf" --version)" >&2

failed=0
# check WHAT HINT COMMAND...: runs COMMAND, says ok, or FAILED and what to do about it.
check() {
  local what="$1" hint="$2"
  shift 2
  if "$@"; then
    echo "buf $what: ok" >&2
  else
    echo "buf $what: FAILED ($hint)" >&2
    failed=1
  fi
}

check lint "fix the proto, or add a justified exception to proto/buf.yaml" \
  "$buf" lint proto
check "format -d" "the diff above; scripts/buf/node_modules/.bin/buf format -w proto applies it" \
  "$buf" format -d --exit-code proto

if $update_baseline; then
  if [ "$failed" != 0 ]; then
    echo "not updating the baseline: fix lint and format first" >&2
    exit 1
  fi
  # Imports (google/protobuf/timestamp.proto) stay in: buf needs them to read the image back.
  # Source info (comments, line numbers) is left out: comments are not part of the contract.
  "$buf" build proto --exclude-source-info -o "$baseline.tmp#format=json"
  node -e 'const fs = require("fs"); const [src, dst] = process.argv.slice(1);
           fs.writeFileSync(dst, JSON.stringify(JSON.parse(fs.readFileSync(src, "utf8")), null, 1) + "\n");' \
    "$baseline.tmp" "$baseline"
  rm -f "$baseline.tmp"
  echo "baseline updated: $baseline (review the diff and commit it with the release)" >&2
fi

check breaking "old clients would break; if this is a deliberate new release of the contract, run $0 --update-baseline" \
  "$buf" breaking proto --against "$baseline"

exit "$failed"
