#!/usr/bin/env bash
# Generates the Go stubs of proto/lease/v1/lease.proto into <out>/leasepb (default: this
# module's leasepb/, which is committed, since `go get` never runs code generators).
# test.sh runs it into a scratch directory and fails if the result differs from leasepb/, so
# the committed stubs cannot drift from the proto.
#
# Needs protoc with the well-known types (Debian: protobuf-compiler, libprotobuf-dev) and
# protoc-gen-go-grpc on PATH (Debian: protoc-gen-go-grpc 1.33.3, or
# `go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@latest`). protoc-gen-go is built from
# the google.golang.org/protobuf version go.mod requires, so stubs and runtime always match (the
# protoc-gen-go on Debian's PATH may be the old v1.3 one from golang-goprotobuf-dev).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$(mkdir -p "${1:-$here}" && cd "${1:-$here}" && pwd)
module=$(cd "$here" && go list -m)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

(cd "$here" && go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go)
protoc -I "$here/../../proto" --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --go_out="$out" --go_opt=module="$module" \
  --go_opt=Mlease/v1/lease.proto="$module/leasepb;leasepb" \
  --go-grpc_out="$out" --go-grpc_opt=module="$module" \
  --go-grpc_opt=Mlease/v1/lease.proto="$module/leasepb;leasepb" \
  lease/v1/lease.proto
