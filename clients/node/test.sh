#!/usr/bin/env bash
# Runs the Node.js client's tests against a real leased on a real redis-server, installing what
# they need first when it is missing: node and npm (Debian's nodejs, npm) and redis-server from
# apt, the npm packages with `npm ci`. Safe to run again: the second time installs nothing.
#
# LEASED_BIN picks the server binary (default: <repo>/target/debug/leased, built if missing).
# LEASED_NODE_RACE_CONTROL=1 also runs the give-up race without the Release after the cancel,
# expected to orphan.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v redis-server >/dev/null || missing+=(redis-server)
if ((${#missing[@]})); then
  echo "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cd "$here"
# npm ci wipes node_modules and reinstalls: only do it when the lockfile changed since the last.
stamp=node_modules/.leased-lock-sha256
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$lock_sum" ]]; then
  npm ci --no-audit --no-fund
  echo "$lock_sum" >"$stamp"
fi

if [[ -z "${LEASED_BIN:-}" ]]; then
  export LEASED_BIN="$repo/target/debug/leased"
  if [[ ! -x "$LEASED_BIN" ]]; then
    (cd "$repo" && cargo build --bin leased)
  fi
fi

echo "node $(node --version), npm $(npm --version 2>/dev/null), leased: $LEASED_BIN"
node --test test/*.test.js
