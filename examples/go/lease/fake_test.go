package lease_test

// A fake server that answers a renewal only after the lease could have expired: the guard must
// report the loss at TrustedUntil and never credit the late answer. (The real server cannot be
// made to answer late on demand.)

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	leasev1 "leased/examples/go/gen/leasev1"
	"leased/examples/go/internal/leasedtest"
	"leased/examples/go/lease"
)

// serverCodec is the server side of lease's codec: grpc-go 1.33 has no per-server codec
// option, so it replaces the "proto" codec of this test binary.
type serverCodec struct{}

func (serverCodec) Marshal(v interface{}) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (serverCodec) Unmarshal(data []byte, v interface{}) error {
	return proto.Unmarshal(data, v.(proto.Message))
}
func (serverCodec) Name() string { return "proto" }

// lateRenewals grants every Acquire, and answers each renewal `renewed` after delay.
type lateRenewals struct {
	leasev1.UnimplementedLeaseServiceServer
	ttl   time.Duration
	delay time.Duration
}

func (s *lateRenewals) Acquire(request *leasev1.AcquireRequest, stream leasev1.LeaseService_AcquireServer) error {
	return stream.Send(&leasev1.AcquireResponse{Result: &leasev1.AcquireResponse_Granted{Granted: &leasev1.Granted{
		Name: request.Name, LeaseId: "fake", FencingToken: 1, TtlMs: s.ttl.Milliseconds(),
	}}})
}

func (s *lateRenewals) Renew(stream leasev1.LeaseService_RenewServer) error {
	for {
		request, err := stream.Recv()
		if err != nil {
			return err
		}
		time.Sleep(s.delay)
		err = stream.Send(&leasev1.RenewResponse{Name: request.Name, Result: &leasev1.RenewResponse_Renewed{
			Renewed: &leasev1.Renewed{FencingToken: 1, TtlMs: s.ttl.Milliseconds()},
		}})
		if err != nil {
			return err
		}
	}
}

func (s *lateRenewals) Release(context.Context, *leasev1.ReleaseRequest) (*leasev1.ReleaseResponse, error) {
	return &leasev1.ReleaseResponse{}, nil
}

func TestARenewalAnsweredAfterTheTrustEndedIsNeverCredited(t *testing.T) {
	encoding.RegisterCodec(serverCodec{})
	const ttl = time.Second // renewal at 333 ms, trust until 950 ms
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	// The first renewal is answered at 333 + 750 ms: 133 ms after the trust ended.
	leasev1.RegisterLeaseServiceServer(server, &lateRenewals{ttl: ttl, delay: 750 * time.Millisecond})
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()
	conn, err := leasedtest.Dial(listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	requested := time.Now()
	l, _, err := lease.NewClient(conn).Acquire(context.Background(), "late", lease.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lost := waitLost(t, l, 5*time.Second)
	lostAt := time.Since(requested)
	trustedUntil := l.TrustedUntil()
	t.Logf("loss reported %d ms after the Acquire was sent: %s", lostAt.Milliseconds(), lost.Reason)
	// Trust ends at 950 ms after the client sent the Acquire (a little after `requested`); the
	// late answer is sent at 1083 ms. Never past the TTL.
	if lostAt > ttl || !lost.Unreachable {
		t.Fatalf("loss %+v at %s, want Unreachable within the TTL", *lost, lostAt)
	}
	// The late `renewed` arrives now: it must change nothing.
	time.Sleep(500 * time.Millisecond)
	if got := l.TrustedUntil(); !got.Equal(trustedUntil) || l.Err() == nil {
		t.Fatalf("a late answer moved the trust by %s (Err %v)", got.Sub(trustedUntil), l.Err())
	}
}
