// The tests of package fencing against real drivers: PostgreSQL through lib/pq, Redis through
// redigo (Debian 12's). A module of its own so that the client's go.mod requires neither: a
// program that only uses leases downloads no database driver. test.sh runs it with a copy of
// this file that points the client module at ../ and every dependency at Debian's sources.
module github.com/leased-dev/leased/clients/go/fencingtest

go 1.19

require (
	github.com/gomodule/redigo v1.8.3
	github.com/leased-dev/leased/clients/go v0.1.0
	github.com/lib/pq v1.10.7
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
