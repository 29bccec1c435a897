package lease_test

// Fake servers, for what the real one cannot be made to do on demand: answer a renewal only
// after the lease could have expired (the guard must report the loss at TrustedUntil and never
// credit the late answer), and fail Acquire calls in a given way (the client must retry the
// ones that may have been cut off, with the same lease id, and release that id when it stops).

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/leased-dev/leased/clients/go/internal/leasedtest"
	"github.com/leased-dev/leased/clients/go/lease"
	"github.com/leased-dev/leased/clients/go/leasepb"
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
	leasepb.UnimplementedLeaseServiceServer
	ttl   time.Duration
	delay time.Duration
}

func (s *lateRenewals) Acquire(request *leasepb.AcquireRequest, stream leasepb.LeaseService_AcquireServer) error {
	return stream.Send(&leasepb.AcquireResponse{Result: &leasepb.AcquireResponse_Granted{Granted: &leasepb.Granted{
		Name: request.Name, LeaseId: "fake", FencingToken: 1, TtlMs: s.ttl.Milliseconds(),
	}}})
}

func (s *lateRenewals) Renew(stream leasepb.LeaseService_RenewServer) error {
	for {
		request, err := stream.Recv()
		if err != nil {
			return err
		}
		time.Sleep(s.delay)
		err = stream.Send(&leasepb.RenewResponse{Name: request.Name, Result: &leasepb.RenewResponse_Renewed{
			Renewed: &leasepb.Renewed{FencingToken: 1, TtlMs: s.ttl.Milliseconds()},
		}})
		if err != nil {
			return err
		}
	}
}

func (s *lateRenewals) Release(context.Context, *leasepb.ReleaseRequest) (*leasepb.ReleaseResponse, error) {
	return &leasepb.ReleaseResponse{}, nil
}

// startFake serves service on a loopback port for the test, and returns a client of it.
func startFake(t *testing.T, service leasepb.LeaseServiceServer) *lease.Client {
	t.Helper()
	encoding.RegisterCodec(serverCodec{})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	leasepb.RegisterLeaseServiceServer(server, service)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	conn, err := leasedtest.Dial(listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return lease.NewClient(conn)
}

func TestARenewalAnsweredAfterTheTrustEndedIsNeverCredited(t *testing.T) {
	const ttl = time.Second // renewal at 333 ms, trust until 950 ms
	// The first renewal is answered at 333 + 750 ms: 133 ms after the trust ended.
	client := startFake(t, &lateRenewals{ttl: ttl, delay: 750 * time.Millisecond})

	requested := time.Now()
	l, _, err := client.Acquire(context.Background(), "late", lease.Options{TTL: ttl})
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

// fault is how flakyAcquire answers one Acquire call.
type fault int

const (
	grant       fault = iota
	unavailable       // UNAVAILABLE, as when the server drains or its Redis does not answer
	noAnswer          // a `waiting`, then the stream ends with OK: no terminal message
	internal          // INTERNAL: the server's answer, which a retry would get again
)

// flakyAcquire answers the Acquire calls with faults in turn (then grants), and records every
// Acquire and Release request.
type flakyAcquire struct {
	leasepb.UnimplementedLeaseServiceServer
	faults []fault

	mu       sync.Mutex
	acquires []*leasepb.AcquireRequest
	releases []*leasepb.ReleaseRequest
}

func (s *flakyAcquire) Acquire(request *leasepb.AcquireRequest, stream leasepb.LeaseService_AcquireServer) error {
	s.mu.Lock()
	call := len(s.acquires)
	s.acquires = append(s.acquires, request)
	s.mu.Unlock()
	how := grant
	if call < len(s.faults) {
		how = s.faults[call]
	}
	switch how {
	case unavailable:
		return status.Error(codes.Unavailable, "the store did not answer")
	case noAnswer:
		return stream.Send(&leasepb.AcquireResponse{Result: &leasepb.AcquireResponse_Waiting{Waiting: &leasepb.Waiting{
			Holder: "someone", FencingToken: 1, Position: 1, Held: 1, Limit: 1,
		}}})
	case internal:
		return status.Error(codes.Internal, "a script failed")
	}
	return stream.Send(&leasepb.AcquireResponse{Result: &leasepb.AcquireResponse_Granted{Granted: &leasepb.Granted{
		Name: request.Name, LeaseId: request.LeaseId, FencingToken: 2, TtlMs: request.TtlMs,
	}}})
}

func (s *flakyAcquire) Release(_ context.Context, request *leasepb.ReleaseRequest) (*leasepb.ReleaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = append(s.releases, request)
	return &leasepb.ReleaseResponse{}, nil
}

func (s *flakyAcquire) recorded() ([]*leasepb.AcquireRequest, []*leasepb.ReleaseRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*leasepb.AcquireRequest(nil), s.acquires...), append([]*leasepb.ReleaseRequest(nil), s.releases...)
}

// sameID checks that every request carries one own lease id, and returns it.
func sameID(t *testing.T, requests []*leasepb.AcquireRequest) string {
	t.Helper()
	id := requests[0].LeaseId
	if !ownLeaseID.MatchString(id) {
		t.Fatalf("lease id %q is not 32 lowercase hex digits", id)
	}
	for i, request := range requests {
		if request.LeaseId != id {
			t.Fatalf("request %d sent lease id %q, the first %q", i, request.LeaseId, id)
		}
	}
	return id
}

func TestAcquireCutOffIsRetriedWithTheSameIDAndTheWaitLeft(t *testing.T) {
	fake := &flakyAcquire{faults: []fault{unavailable, noAnswer, unavailable}}
	client := startFake(t, fake)
	started := time.Now()
	l, busy, err := client.Acquire(context.Background(), "flaky", lease.Options{TTL: time.Minute, Wait: 10 * time.Second})
	if err != nil || busy != nil {
		t.Fatalf("Acquire = %v, %v; want granted on the fourth try", busy, err)
	}
	took := time.Since(started)
	acquires, releases := fake.recorded()
	id := sameID(t, acquires)
	if len(acquires) != 4 || l.LeaseID() != id || len(releases) != 0 {
		t.Fatalf("%d Acquire requests, %d releases, lease id %q; want 4 tries of %q and no release",
			len(acquires), len(releases), l.LeaseID(), id)
	}
	// The waits sent shrink by the backoffs (100, 200, 400 ms) and what the calls took.
	for i := 1; i < len(acquires); i++ {
		if acquires[i].WaitMs >= acquires[i-1].WaitMs {
			t.Errorf("retry %d sent wait_ms %d, not less than the %d before", i, acquires[i].WaitMs, acquires[i-1].WaitMs)
		}
	}
	if spent := 10_000 - acquires[3].WaitMs; spent < 700 || spent > took.Milliseconds()+1 {
		t.Errorf("the last retry sent wait_ms %d: %d ms spent, want the 700 ms of backoff and at most the %d ms it took",
			acquires[3].WaitMs, spent, took.Milliseconds())
	}
	t.Logf("granted on the fourth try after %d ms; wait_ms sent: %d, %d, %d, %d", took.Milliseconds(),
		acquires[0].WaitMs, acquires[1].WaitMs, acquires[2].WaitMs, acquires[3].WaitMs)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, releases = fake.recorded(); len(releases) != 1 || releases[0].LeaseId != id {
		t.Fatalf("releases after Close: %v, want one of %q", releases, id)
	}
}

// A try-once Acquire is retried as a try-once: it still picks up a grant an earlier try got.
func TestTryOnceIsRetriedAsATryOnce(t *testing.T) {
	fake := &flakyAcquire{faults: []fault{unavailable}}
	l, _, err := startFake(t, fake).Acquire(context.Background(), "flaky-once", lease.Options{TTL: time.Minute})
	if err != nil || l == nil {
		t.Fatalf("Acquire = %v, %v", l, err)
	}
	defer l.Close()
	acquires, _ := fake.recorded()
	sameID(t, acquires)
	if len(acquires) != 2 || acquires[0].WaitMs != 0 || acquires[1].WaitMs != 0 {
		t.Fatalf("Acquire requests %v, want two with wait_ms 0", acquires)
	}
}

func TestRetriesAreBoundedAndTheIDIsReleasedAfterThem(t *testing.T) {
	fake := &flakyAcquire{faults: []fault{unavailable, noAnswer, unavailable, unavailable, grant}}
	var gaveUp []lease.GiveUp
	l, busy, err := startFake(t, fake).Acquire(context.Background(), "flaky-down", lease.Options{
		TTL: time.Minute, Wait: 10 * time.Second,
		OnGiveUp: func(g lease.GiveUp) { gaveUp = append(gaveUp, g) },
	})
	if status.Code(err) != codes.Unavailable || l != nil || busy != nil {
		t.Fatalf("Acquire = %v, %v, %v; want UNAVAILABLE after the retries", l, busy, err)
	}
	acquires, releases := fake.recorded()
	id := sameID(t, acquires)
	if len(acquires) != 4 {
		t.Fatalf("%d Acquire requests, want 1 and 3 retries", len(acquires))
	}
	if len(releases) != 1 || releases[0].LeaseId != id || releases[0].Name != "flaky-down" {
		t.Fatalf("releases %v, want one of %q: a try may have been granted", releases, id)
	}
	if len(gaveUp) != 1 || gaveUp[0].Cause != err || gaveUp[0].Err != nil {
		t.Fatalf("OnGiveUp saw %+v", gaveUp)
	}
}

func TestAnAnswerOtherThanUnavailableIsNotRetried(t *testing.T) {
	fake := &flakyAcquire{faults: []fault{internal}}
	_, _, err := startFake(t, fake).Acquire(context.Background(), "flaky-internal", lease.Options{TTL: time.Minute})
	if status.Code(err) != codes.Internal {
		t.Fatalf("Acquire: %v, want INTERNAL", err)
	}
	acquires, releases := fake.recorded()
	if len(acquires) != 1 || len(releases) != 1 || releases[0].LeaseId != acquires[0].LeaseId {
		t.Fatalf("%d Acquire requests and releases %v; want one request, then its id released", len(acquires), releases)
	}
}
