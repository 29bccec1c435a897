// The Go client of leased as a Go module: `go get github.com/leased-dev/leased/clients/go@v0.1.0`.
// The versions required are the oldest tested (Debian 12's packages, clients/go/test.sh); a
// program that requires newer ones gets those (minimal version selection).
module github.com/leased-dev/leased/clients/go

go 1.19

require (
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
