#!/usr/bin/env bash
# The rolling-upgrade check: builds the `leased` binary of OLD_REV and of the working tree, then
# runs tests/integration/upgrade.rs (ignored by `cargo test`), which replaces two replicas of the
# old binary by the new one, one at a time, while holders renew and waiters wait through both, and
# prints the leases lost (must be 0), the tokens and the FIFO order it checked, and its figures.
#
#   scripts/upgrade-check.sh OLD_REV        e.g. scripts/upgrade-check.sh v0.1.0
#
# Both binaries are debug builds (the test's load is light, and a debug build of an old commit
# takes minutes less than a release build). OLD_REV is built once, from a temporary git worktree,
# into its own target directory, target/upgrade-check/<commit>/ (under $CARGO_TARGET_DIR if set),
# and reused from there by later runs. Not part of CI (.ci/run): building an old commit is too
# slow. CONTRIBUTING.md, "Upgrades".
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ]; then
  echo "usage: $0 OLD_REV" >&2
  exit 2
fi
commit="$(git rev-parse --verify "$1^{commit}")"
target="${CARGO_TARGET_DIR:-$PWD/target}"
old_target="$target/upgrade-check/$commit"
old_bin="$old_target/debug/leased"

if [ -x "$old_bin" ]; then
  echo "== reusing the old binary $old_bin ($1 = $commit)" >&2
else
  echo "== building leased at $1 ($commit) into $old_target" >&2
  worktree="$(mktemp -d)"
  trap 'git worktree remove --force "$worktree"' EXIT
  git worktree add --detach --quiet "$worktree" "$commit"
  (cd "$worktree" && CARGO_TARGET_DIR="$old_target" cargo build --locked --bin leased)
fi

echo "== building leased from the working tree" >&2
cargo build --locked --bin leased
echo "== rolling upgrade: $old_bin -> $target/debug/leased" >&2
LEASED_OLD_BIN="$old_bin" cargo test --locked --test integration upgrade:: -- --ignored --nocapture
