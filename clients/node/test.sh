#!/usr/bin/env bash
# Tests the Node.js client as users get it: `npm pack` makes the package's tarball, which is
# installed into a consumer project outside clients/node (<target>/node-client: test/'s files,
# package.json and lockfile), and the tests run there, importing `leased-client` from
# node_modules, against a real leased on a real redis-server. Installs what is missing first:
# node, npm and redis-server from apt, the consumer's npm packages with `npm ci`. Safe to run
# again: the second time installs only the fresh tarball.
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

# The fencing tests read the SQL and the Redis Functions library from the repository's fencing/
# and start PostgreSQL with its scripts/postgres-scratch.sh.
export LEASED_REPO="$repo"

target="${CARGO_TARGET_DIR:-$repo/target}"
if [[ -z "${LEASED_BIN:-}" ]]; then
  export LEASED_BIN="$target/debug/leased"
  if [[ ! -x "$LEASED_BIN" ]]; then
    (cd "$repo" && cargo build --bin leased)
  fi
fi

npm_flags=(--prefer-offline --no-audit --no-fund --loglevel=error)
consumer="$target/node-client"
mkdir -p "$consumer"
# The package, as `npm publish` would upload it (prepack copies the proto in).
tarball="$(cd "$here" && npm pack --silent --pack-destination "$consumer")"
# The consumer project: everything but its node_modules is replaced by test/'s files.
find "$consumer" -mindepth 1 -maxdepth 1 ! -name node_modules ! -name "$tarball" -exec rm -rf {} +
cp -r "$here/test/." "$consumer/"
cd "$consumer"
# npm ci wipes node_modules and reinstalls: only do it when the lockfile changed since the last.
stamp=node_modules/.leased-lock-sha256
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$lock_sum" ]]; then
  npm ci "${npm_flags[@]}"
  echo "$lock_sum" >"$stamp"
fi
# --no-save: the tarball's name and checksum change with every build, the lockfile must not.
npm install --no-save "${npm_flags[@]}" "./$tarball"

echo "node $(node --version), npm $(npm --version), $tarball ($(stat -c %s "$tarball") bytes), leased: $LEASED_BIN"
# The files wait on timers and servers far more than they compute: run them side by side, two at
# a time (four at a time on a loaded 2-core machine failed 1 run of 9, on a keepalive's timing).
# The fencing files run after the others, beside each other: they start dozens of holder processes
# and a PostgreSQL, and beside the keepalive and give-up timing tests they failed 2 runs of 5 on a
# loaded 2-core machine (where those tests alone passed).
other_tests=()
for file in ./*.test.js; do
  [[ $file == ./fencing* ]] || other_tests+=("$file")
done
node --test --test-concurrency=2 "${other_tests[@]}"
node --test --test-concurrency=2 ./fencing*.test.js
