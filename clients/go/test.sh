#!/usr/bin/env bash
# Builds the Go client and runs its tests against a real leased on Redis.
#
# Everything comes from Debian 12 packages (the Go module proxy is not needed): the Go
# toolchain, protoc, protoc-gen-go-grpc and the sources of grpc-go and the protobuf runtime
# under /usr/share/gocode, built in GOPATH mode (see docs/src/clients/go.md for why).
# Installs what is missing (as root), generates the stubs into gen/ (not checked in), checks
# gofmt and go vet, then runs go test. Extra arguments go to `go test` (e.g. -run Revoke).
#
# LEASED_BIN: the leased binary to test against; default <repo>/target/debug/leased, built
# with cargo if missing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

packages=(
  golang-go                  # go 1.19
  golang-google-grpc-dev     # google.golang.org/grpc 1.33
  golang-google-protobuf-dev # google.golang.org/protobuf 1.28 (runtime, and protoc-gen-go's source)
  protoc-gen-go-grpc
  protobuf-compiler          # protoc
  libprotobuf-dev            # google/protobuf/timestamp.proto, which lease.proto imports
  redis-server
)
missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ -z ${LEASED_BIN:-} ]]; then
  export LEASED_BIN="$repo/target/debug/leased"
  if [[ ! -x $LEASED_BIN ]]; then
    (cd "$repo" && cargo build --bin leased)
  fi
fi

# GOPATH mode against Debian's sources: module mode would need the go.mod of every module that
# Debian's grpc-go lists (envoyproxy, udpa, uuid, ...), which Debian does not ship and the
# proxy cannot be asked for here. The package's import path is leased/clients/go, through a
# symlink in a private GOPATH.
build="$here/.build"
gopath="$build/gopath"
mkdir -p "$gopath/src/leased/clients"
ln -sfn "$here" "$gopath/src/leased/clients/go"
export GO111MODULE=off GOPROXY=off GOFLAGS=
# Pure Go: nothing here needs cgo, and Debian's golang-go only recommends gcc. The race
# detector needs cgo: CGO_ENABLED=1 ./test.sh -race (with gcc installed).
export CGO_ENABLED="${CGO_ENABLED:-0}"
export GOPATH="$gopath:/usr/share/gocode"
export GOCACHE="${GOCACHE:-$build/cache}"
cd "$gopath/src/leased/clients/go" # through the symlink: go derives import paths from $PWD

go version
go generate ./lease
unformatted=$(gofmt -l lease cmd internal)
if [[ -n $unformatted ]]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
go test -count=1 -v "$@" ./...
