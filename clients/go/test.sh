#!/usr/bin/env bash
# Tests the Go client module (github.com/leased-dev/leased/clients/go) against a real leased on
# a real redis-server, in module mode and offline, from Debian 12's packages: Go 1.19, grpc-go
# 1.33.3 and protobuf-go 1.28.1 (their sources under /usr/share/gocode), protoc and
# protoc-gen-go-grpc. Installs what is missing (as root), then:
#   1. checks that the committed stubs in leasepb/ are what generate.sh makes from proto/;
#   2. gofmt, go vet and go test ./... (extra arguments go to go test, e.g. -run Revoke), then
#      the same for fencingtest/ (a module of its own: package fencing against lib/pq, redigo,
#      a scratch PostgreSQL from scripts/postgres-scratch.sh and a second redis-server);
#   3. zips the module as a proxy would serve it, serves it from a file:// proxy, and builds and
#      runs consumer-test/ (a separate module) against it: the module as a user installs it.
#
# Offline: the Go module proxy is unreachable here, and Debian does not ship the go.mod of every
# module in grpc-go's requirement graph. So the module's own go.mod stays as users need it, and
# the test builds use copies (.build/test.mod, .build/consumer/go.mod) with replace directives:
# each dependency to Debian's source tree, and each module Debian lacks to an empty stand-in
# (only its go.mod is ever read: none of its packages is built, or the build would fail).
#
# LEASED_BIN: the leased binary to test against; default <target>/debug/leased, built with
# cargo if missing. SKIP_CONSUMER=1 skips step 3 (e.g. with -run).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=v0.1.0 # the version the consumer installs; tag clients/go/v0.1.0 to publish it

packages=(
  golang-go                  # go 1.19
  golang-google-grpc-dev     # google.golang.org/grpc 1.33.3
  golang-google-protobuf-dev # google.golang.org/protobuf 1.28.1 (runtime, and protoc-gen-go's source)
  protoc-gen-go-grpc
  protobuf-compiler          # protoc
  libprotobuf-dev            # google/protobuf/timestamp.proto, which lease.proto imports
  redis-server
  golang-github-lib-pq-dev          # github.com/lib/pq 1.10.7, for fencingtest/ only
  golang-github-gomodule-redigo-dev # github.com/gomodule/redigo 1.8.3, for fencingtest/ only
  git # lists the files a tag would hold, for the module zip
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
  export LEASED_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/leased"
  if [[ ! -x $LEASED_BIN ]]; then
    (cd "$repo" && cargo build --bin leased)
  fi
fi

build="$here/.build"
mkdir -p "$build"
export GO111MODULE=on GOPROXY=off GOSUMDB=off GOFLAGS= GOWORK=off
export GOPATH="$build/gopath" GOMODCACHE="$build/modcache"
export GOCACHE="${GOCACHE:-$build/cache}"
# Pure Go: nothing here needs cgo, and Debian's golang-go only recommends gcc. The race
# detector needs cgo: CGO_ENABLED=1 ./test.sh -race (with gcc installed).
export CGO_ENABLED="${CGO_ENABLED:-0}"
cd "$here"
go version

# The replace directives for the offline builds: walks the requirement graph from the go.mod
# files given (default: the module's) through the go.mod files of Debian's trees, one "module
# directory" line per module met. The client module itself, which fencingtest/ requires, is
# replaced with this directory.
debian=/usr/share/gocode/src
client_module=$(awk '$1 == "module" { print $2; exit }' "$here/go.mod")
replacements() {
  local -A seen=()
  local queue=("${@:-$here/go.mod}") file module dir
  while ((${#queue[@]})); do
    file=${queue[0]}
    queue=("${queue[@]:1}")
    for module in $(awk '/^require \(/ { block = 1; next } block && /^\)/ { block = 0 }
        block && NF && $1 !~ /^\/\// { print $1 } /^require [^(]/ { print $2 }' "$file" | tr -d '"'); do # some go.mod files quote paths
      [[ -n ${seen[$module]:-} ]] && continue
      seen[$module]=1
      if [[ $module == "$client_module" ]]; then
        dir=$here
        queue+=("$dir/go.mod")
      elif [[ -f $debian/$module/go.mod ]]; then
        dir=$debian/$module
        queue+=("$dir/go.mod")
      else
        dir=$build/stand-in/$module
        mkdir -p "$dir"
        printf '// Stand-in for a module Debian does not ship (see test.sh).\nmodule %s\n' "$module" >"$dir/go.mod"
      fi
      echo "$module $dir"
    done
  done
}
# replace_all <go.mod> [<replacements>]: adds every replacement (default: the module's) to that
# go.mod.
replace_all() {
  local module dir edits=()
  while read -r module dir; do edits+=("-replace=$module=$dir"); done <"${2:-$build/replacements}"
  go mod edit "${edits[@]}" "$1"
}
replacements >"$build/replacements"
cp go.mod "$build/test.mod"
replace_all "$build/test.mod"
go mod tidy -modfile="$build/test.mod"
export GOFLAGS="-modfile=$build/test.mod" # every go command below on the module itself

# 1. The committed stubs are what the proto gives today.
rm -rf "$build/gen"
./generate.sh "$build/gen"
if ! diff -ru leasepb "$build/gen/leasepb" --exclude=doc.go; then
  echo "leasepb/ differs from what generate.sh makes from proto/: run clients/go/generate.sh and commit" >&2
  exit 1
fi

# 2. Format, vet, and the module's own tests against the real server.
unformatted=$(gofmt -l $(git ls-files -co --exclude-standard "*.go"))
if [[ -n $unformatted ]]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
# -parallel 4: the tests marked parallel mostly sleep (TTLs, waits), so 4 at once fit on 2 cores.
go test -count=1 -parallel 4 -v "$@" ./...

# Package fencing against real drivers and stores, from fencingtest/ (its own module, so that the
# client's go.mod requires no driver): its go.mod copied, with the replacements of its graph.
replacements "$here/fencingtest/go.mod" >"$build/fencing.replacements"
cp fencingtest/go.mod "$build/fencing.mod"
replace_all "$build/fencing.mod" "$build/fencing.replacements"
(
  cd fencingtest
  export GOFLAGS="-modfile=$build/fencing.mod"
  # -e: redigo's own tests import testify's dependencies, which Debian's testify package does not
  # bring as modules; nothing here builds them.
  go mod tidy -e 2>/dev/null
  go vet ./...
  go test -count=1 -parallel 4 -v "$@" ./...
)
[[ -n ${SKIP_CONSUMER:-} ]] && exit 0

# 3. The module as installed: its zip, served by a file:// proxy, in a separate consumer module.
module=$(go list -m)
proxy="$build/proxy"
rm -rf "$proxy" "$build/consumer" "$GOMODCACHE/cache/download/$module" "$GOMODCACHE/$module@$version"
mkdir -p "$proxy/$module/@v"
(cd tools/modzip && GOFLAGS= go build -o "$build/bin/modzip" .)
git ls-files -co --exclude-standard | "$build/bin/modzip" "$module@$version" >"$proxy/$module/@v/$version.zip"
cp go.mod "$proxy/$module/@v/$version.mod"
echo "$version" >"$proxy/$module/@v/list"
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$proxy/$module/@v/$version.info"
echo "module zip: $(wc -c <"$proxy/$module/@v/$version.zip") bytes ($module@$version)"
go build -o "$build/bin/withleased" ./internal/leasedtest/withleased

cp -r consumer-test "$build/consumer"
replace_all "$build/consumer/go.mod"
(
  cd "$build/consumer"
  export GOFLAGS= GOPROXY="file://$proxy"
  go get "$module/lease@$version" "$module/fencing@$version" # what a user runs (with the real proxy, no replacements)
  go build -o "$build/bin/leased-consumer" .
)
"$build/bin/withleased" -- "$build/bin/leased-consumer"
