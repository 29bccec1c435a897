package lease_test

// Own lease ids and the retries they make safe, against the real server: the same id answers
// the same grant, and a wait whose connection is reset is sent again with its id and keeps its
// place in the queue. The retry's edge cases (a stream that ends without an answer, the bound
// on retries, errors that are not retried) are in fake_test.go.

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/leased-dev/leased/clients/go/internal/leasedtest"
	"github.com/leased-dev/leased/clients/go/lease"
	"github.com/leased-dev/leased/clients/go/leasepb"
)

// acquireRecorder records the Acquire requests sent on a connection: how many calls, with
// which lease ids and waits.
type acquireRecorder struct {
	mu       sync.Mutex
	requests []*leasepb.AcquireRequest
}

func (r *acquireRecorder) interceptor() grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		stream, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/lease.v1.LeaseService/Acquire" {
			return stream, err
		}
		return &recordedStream{ClientStream: stream, recorder: r}, nil
	})
}

type recordedStream struct {
	grpc.ClientStream
	recorder *acquireRecorder
}

func (s *recordedStream) SendMsg(m interface{}) error {
	if request, ok := m.(*leasepb.AcquireRequest); ok {
		s.recorder.mu.Lock()
		s.recorder.requests = append(s.recorder.requests, proto.Clone(request).(*leasepb.AcquireRequest))
		s.recorder.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

// sent returns a copy of the requests recorded so far.
func (r *acquireRecorder) sent() []*leasepb.AcquireRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*leasepb.AcquireRequest(nil), r.requests...)
}

// newRecordedClient is newClient with an acquireRecorder on its connection.
func newRecordedClient(t *testing.T, addr string) (*lease.Client, *acquireRecorder) {
	t.Helper()
	recorder := &acquireRecorder{}
	conn, err := leasedtest.Dial(addr, recorder.interceptor())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return lease.NewClient(conn), recorder
}

var ownLeaseID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// rawAcquire sends one Acquire through the generated stub and returns its terminal message.
func rawAcquire(ctx context.Context, t *testing.T, request *leasepb.AcquireRequest) *leasepb.AcquireResponse {
	t.Helper()
	conn, err := leasedtest.Dial(stack.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := leasepb.NewLeaseServiceClient(conn).Acquire(ctx, request, lease.CallOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	for {
		response, err := stream.Recv()
		if err != nil {
			t.Fatalf("Acquire(%v): %v", request, err)
		}
		if response.GetWaiting() == nil {
			return response
		}
	}
}

func TestEveryAcquisitionSendsItsOwnLeaseID(t *testing.T) {
	ctx := testContext(t)
	c, recorder := newRecordedClient(t, stack.Addr)
	first := mustAcquire(ctx, t, c, "go-own-id-1", lease.Options{TTL: 10 * time.Second})
	second := mustAcquire(ctx, t, c, "go-own-id-2", lease.Options{TTL: 10 * time.Second})
	sent := recorder.sent()
	if len(sent) != 2 || sent[0].LeaseId != first.LeaseID() || sent[1].LeaseId != second.LeaseID() {
		t.Fatalf("sent %v; granted ids %q, %q", sent, first.LeaseID(), second.LeaseID())
	}
	for _, id := range []string{first.LeaseID(), second.LeaseID()} {
		if !ownLeaseID.MatchString(id) {
			t.Errorf("lease id %q is not 32 lowercase hex digits", id)
		}
	}
	if first.LeaseID() == second.LeaseID() {
		t.Errorf("two acquisitions sent the same lease id %q", first.LeaseID())
	}
}

// Two Acquires with the same own lease id answer the same grant: what makes a retry safe.
func TestTheSameLeaseIDAnswersTheSameGrant(t *testing.T) {
	ctx := testContext(t)
	l := mustAcquire(ctx, t, newClient(t, ""), "go-same-id", lease.Options{TTL: 10 * time.Second})
	again := rawAcquire(ctx, t, &leasepb.AcquireRequest{Name: "go-same-id", TtlMs: 10_000, LeaseId: l.LeaseID()})
	granted := again.GetGranted()
	if granted == nil || granted.FencingToken != l.FencingToken() || granted.LeaseId != l.LeaseID() {
		t.Fatalf("Acquire with the held lease id = %v, want the grant with token %d", again, l.FencingToken())
	}
	// The same answer twice, expiry included; another id is refused.
	request := &leasepb.AcquireRequest{Name: "go-same-id-raw", TtlMs: 10_000, LeaseId: "go-test-lease-id-0123456789"}
	one := rawAcquire(ctx, t, request).GetGranted()
	if one == nil {
		t.Fatal("the first raw Acquire was not granted")
	}
	defer newClient(t, "").Release(ctx, request.Name, request.LeaseId)
	two := rawAcquire(ctx, t, request).GetGranted()
	if two == nil || two.FencingToken != one.FencingToken || !two.ExpiresAt.AsTime().Equal(one.ExpiresAt.AsTime()) {
		t.Fatalf("second Acquire with the same id = %v, want %v", two, one)
	}
	other := proto.Clone(request).(*leasepb.AcquireRequest)
	other.LeaseId = "go-test-lease-id-another-one"
	if busy := rawAcquire(ctx, t, other).GetNotGranted(); busy == nil || busy.FencingToken != one.FencingToken {
		t.Fatalf("Acquire with another id was not refused with the holder's token %d", one.FencingToken)
	}
}

// A waiting Acquire whose connection is reset is retried on a new one with the same lease id,
// the wait that is left, and its place in the queue: a waiter queued behind it stays behind.
func TestAWaitCutOffIsRetriedWithTheSameIDAndKeepsItsPlace(t *testing.T) {
	ctx := testContext(t)
	const name = "go-retry-cut"
	proxy, err := leasedtest.StartProxy(stack.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	h := mustAcquire(ctx, t, newClient(t, ""), name, lease.Options{TTL: 30 * time.Second, Holder: "H"})

	type result struct {
		lease *lease.Lease
		busy  *lease.NotGranted
		err   error
	}
	waitFor := func(c *lease.Client, holder string, positions chan<- uint32) <-chan result {
		done := make(chan result, 1)
		go func() {
			l, busy, err := c.Acquire(ctx, name, lease.Options{
				TTL: 30 * time.Second, Wait: 60 * time.Second, Holder: holder,
				OnWaiting: func(w lease.Waiting) { positions <- w.Position },
			})
			done <- result{l, busy, err}
		}()
		return done
	}
	nextPosition := func(who string, positions <-chan uint32) uint32 {
		t.Helper()
		select {
		case p := <-positions:
			return p
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no waiting message within 10 s", who)
			return 0
		}
	}
	cutClient, recorder := newRecordedClient(t, proxy.Addr)
	cutPositions, otherPositions := make(chan uint32, 100), make(chan uint32, 100)
	cutDone := waitFor(cutClient, "cut", cutPositions)
	if p := nextPosition("cut", cutPositions); p != 1 {
		t.Fatalf("cut: position %d, want 1", p)
	}
	otherDone := waitFor(newClient(t, ""), "other", otherPositions)
	if p := nextPosition("other", otherPositions); p != 2 {
		t.Fatalf("other: position %d, want 2", p)
	}

	if cut := proxy.Cut(); cut != 1 {
		t.Fatalf("the proxy cut %d connections, want 1", cut)
	}
	if p := nextPosition("cut, after the retry", cutPositions); p != 1 {
		t.Errorf("cut: position %d after the retry, want its place, 1", p)
	}
	sent := recorder.sent()
	if len(sent) != 2 || sent[1].LeaseId != sent[0].LeaseId || sent[1].WaitMs >= sent[0].WaitMs || sent[1].WaitMs < 50_000 {
		t.Fatalf("Acquire requests sent: %v; want a retry with the same id and the wait left", sent)
	}
	t.Logf("retried after the reset: wait_ms %d, then %d, same id", sent[0].WaitMs, sent[1].WaitMs)

	if released, err := h.Release(ctx); !released || err != nil {
		t.Fatalf("H: Release = %v, %v", released, err)
	}
	var cut result
	select {
	case cut = <-cutDone:
	case r := <-otherDone:
		t.Fatalf("the waiter queued behind was served first: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("the retried waiter was not granted within 10 s of the release")
	}
	if cut.err != nil || cut.lease == nil || cut.lease.LeaseID() != sent[0].LeaseId {
		t.Fatalf("cut: %+v, want granted with lease id %q", cut, sent[0].LeaseId)
	}
	if err := cut.lease.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case other := <-otherDone:
		if other.err != nil || other.lease == nil {
			t.Fatalf("other: %+v", other)
		}
		other.lease.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the second waiter was not granted within 10 s")
	}
}
