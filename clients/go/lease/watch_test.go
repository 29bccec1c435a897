package lease_test

// Watch and CheckToken against the real server: the events of a leader election as a follower
// sees them, and what CheckToken says of a token before, during and after its grant.

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leased-dev/leased/clients/go/lease"
)

// events reads a watcher's events into a channel, so that a test can wait for one with a timeout.
func events(w *lease.Watcher) <-chan lease.Event {
	out := make(chan lease.Event)
	go func() {
		defer close(out)
		for {
			event, err := w.Next()
			if err != nil {
				return
			}
			out <- event
		}
	}()
	return out
}

func nextEvent(t *testing.T, events <-chan lease.Event, cause lease.Cause) lease.Event {
	t.Helper()
	select {
	case event, ok := <-events:
		if !ok {
			t.Fatalf("the watch ended while waiting for %v", cause)
		}
		if event.Cause != cause {
			t.Fatalf("want a %v event, got %+v", cause, event)
		}
		return event
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v event within 10 s", cause)
	}
	return lease.Event{}
}

func TestWatchFollowsALeaderElection(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, "")
	const name = "go-watch-election"
	watchCtx, stopWatching := context.WithCancel(ctx)
	watcher, err := c.Watch(watchCtx, name)
	if err != nil {
		t.Fatal(err)
	}
	seen := events(watcher)
	if e := nextEvent(t, seen, lease.Snapshot); e.Held || e.FencingToken != 0 {
		t.Fatalf("the first event is the state of a free lease: %+v", e)
	}

	// Candidate a leads; b campaigns with a waiting Acquire.
	a := mustAcquire(ctx, t, c, name, lease.Options{TTL: 5 * time.Second, Holder: "candidate-a"})
	if e := nextEvent(t, seen, lease.Granted); e.Holder != "candidate-a" || e.FencingToken != a.FencingToken() || !e.Held {
		t.Fatalf("GRANTED to a: %+v (a's token %d)", e, a.FencingToken())
	}
	type result struct {
		lease *lease.Lease
		err   error
	}
	campaign := make(chan result, 1)
	candidateB := newClient(t, "") // a process of its own
	go func() {
		l, _, err := candidateB.Acquire(ctx, name, lease.Options{TTL: 5 * time.Second, Wait: 30 * time.Second, Holder: "candidate-b"})
		campaign <- result{l, err}
	}()

	// a steps down: followers see it released, then b granted with a larger token.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, seen, lease.Released)
	b := <-campaign
	if b.err != nil || b.lease == nil {
		t.Fatalf("b's campaign: %+v", b)
	}
	defer b.lease.Close()
	e := nextEvent(t, seen, lease.Granted)
	if e.Holder != "candidate-b" || e.FencingToken != b.lease.FencingToken() || e.FencingToken <= a.FencingToken() {
		t.Fatalf("GRANTED to b: %+v (a's token %d, b's %d)", e, a.FencingToken(), b.lease.FencingToken())
	}

	// An operator revokes b: the event carries the reason.
	if _, err := c.Revoke(ctx, name, "drain", 0); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, seen, lease.Revoked); e.Reason != "drain" || e.Held {
		t.Fatalf("REVOKED: %+v", e)
	}

	// Cancelling the watch's context ends it, with codes.Canceled.
	stopWatching()
	for range seen {
	}
	if _, err := watcher.Next(); status.Code(err) != codes.Canceled {
		t.Fatalf("Next after cancel: %v", err)
	}
}

func TestCheckTokenIsCurrentOnlyWhileItsGrantHolds(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, "")
	const name = "go-check-token"
	l := mustAcquire(ctx, t, c, name, lease.Options{TTL: 5 * time.Second})
	check, err := c.CheckToken(ctx, name, l.FencingToken())
	if err != nil || check != (lease.TokenCheck{Current: true, CurrentToken: l.FencingToken(), Held: true}) {
		t.Fatalf("while held: %+v, %v", check, err)
	}
	if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check, err = c.CheckToken(ctx, name, l.FencingToken())
	if err != nil || check != (lease.TokenCheck{}) {
		t.Fatalf("after release: %+v, %v", check, err)
	}
	next := mustAcquire(ctx, t, c, name, lease.Options{TTL: 5 * time.Second})
	check, err = c.CheckToken(ctx, name, l.FencingToken())
	if err != nil || check != (lease.TokenCheck{CurrentToken: next.FencingToken(), Held: true}) {
		t.Fatalf("the old token once another grant holds: %+v, %v", check, err)
	}
	if _, err := c.CheckToken(ctx, name, 0); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("token 0: %v", err)
	}
}
