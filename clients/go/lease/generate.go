package lease

// The stubs are generated from the proto (the one source of truth) into ../gen, which is not
// checked in. protoc-gen-go is built from Debian's golang-google-protobuf-dev sources, because
// the protoc-gen-go on PATH may be Debian's old v1.3 generator (golang-goprotobuf-dev).
// Run through test.sh, which sets up the GOPATH these commands need.

//go:generate go build -o ../.build/bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
//go:generate protoc -I ../../../proto --plugin=protoc-gen-go=../.build/bin/protoc-gen-go --go_out=.. --go_opt=module=leased/clients/go --go_opt=Mlease/v1/lease.proto=leased/clients/go/gen/leasev1 --go-grpc_out=.. --go-grpc_opt=module=leased/clients/go --go-grpc_opt=Mlease/v1/lease.proto=leased/clients/go/gen/leasev1 lease/v1/lease.proto
