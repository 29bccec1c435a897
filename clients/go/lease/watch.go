// Watch (who holds a lease, as it changes: leader election's followers) and CheckToken.
package lease

import (
	"context"
	"strings"
	"time"

	"github.com/leased-dev/leased/clients/go/leasepb"
)

// Cause is what a watch event reports.
type Cause int

const (
	// Snapshot is the current state: the first event of every watch, and again whenever the
	// server may have missed events (a Redis failover, a watcher too slow to read). Treat it as
	// the whole truth, not as a change.
	Snapshot Cause = Cause(leasepb.WatchEvent_CAUSE_SNAPSHOT)
	// Granted is a new grant: Holder and FencingToken are the new holder's.
	Granted Cause = Cause(leasepb.WatchEvent_CAUSE_GRANTED)
	// Released: the holder released the lease.
	Released Cause = Cause(leasepb.WatchEvent_CAUSE_RELEASED)
	// Expired: the holder's TTL passed without a renewal (its lock-delay, if any, starts now).
	Expired Cause = Cause(leasepb.WatchEvent_CAUSE_EXPIRED)
	// Revoked: an operator revoked the lease; Reason is theirs.
	Revoked Cause = Cause(leasepb.WatchEvent_CAUSE_REVOKED)
)

// String is the cause's name in the proto, without its prefix: "SNAPSHOT", "GRANTED", ...
func (c Cause) String() string {
	return strings.TrimPrefix(leasepb.WatchEvent_Cause(c).String(), "CAUSE_")
}

// Event is one change of a watched lease's holder (renewals are not events). Holder,
// FencingToken and ExpiresAt are those of the grant the event is about: the new holder for
// Granted, the one that ended for Released, Expired and Revoked, the current one for Snapshot
// (empty and 0 when nobody holds it).
type Event struct {
	Name         string
	Cause        Cause
	Held         bool // someone holds the lease after this event
	Holder       string
	FencingToken uint64
	ExpiresAt    time.Time // zero when unset
	Limit        uint32    // the limit after this event (1: exclusive); 0 when free
	Holders      []Holder  // every holder after this event, by increasing token
	Reason       string    // for Revoked: the operator's reason
}

// Watcher is an open Watch stream; Next reads its events in order.
type Watcher struct {
	stream leasepb.LeaseService_WatchClient
}

// Watch follows who holds name: the first event is a Snapshot, then one event per change of
// holder. The stream never ends on its own: cancel ctx to stop watching (Next then returns an
// error). When the server shuts down, Next returns an UNAVAILABLE status error: watch again
// (from any replica), and take the new Snapshot as the state.
func (c *Client) Watch(ctx context.Context, name string) (*Watcher, error) {
	stream, err := c.rpc.Watch(ctx, &leasepb.WatchRequest{Name: name}, callOptions...)
	if err != nil {
		return nil, err
	}
	return &Watcher{stream: stream}, nil
}

// Next blocks until the next event. Errors are gRPC status errors, unwrapped (codes.Canceled
// once the Watch's ctx is done).
func (w *Watcher) Next() (Event, error) {
	e, err := w.stream.Recv()
	if err != nil {
		return Event{}, err
	}
	event := Event{
		Name:         e.Name,
		Cause:        Cause(e.Cause),
		Held:         e.Held,
		Holder:       e.Holder,
		FencingToken: e.FencingToken,
		Limit:        e.Limit,
		Holders:      holdersFrom(e.Holders),
		Reason:       e.Reason,
	}
	if e.ExpiresAt != nil {
		event.ExpiresAt = e.ExpiresAt.AsTime()
	}
	return event, nil
}

// TokenCheck is CheckToken's answer.
type TokenCheck struct {
	// Current is true only while the lease is held with exactly the token checked.
	Current bool
	// CurrentToken is the token that holds the lease now (for a counting lease that is not
	// current: the largest held); 0 when nobody holds it.
	CurrentToken uint64
	// Held is true if anyone holds the lease now.
	Held bool
}

// CheckToken tells whether fencingToken holds name now, for a resource that cannot keep the
// largest token it has seen. The answer may be stale on arrival (the lease can end right after
// the check): a resource that rejects smaller tokens than the largest seen is the stronger check.
func (c *Client) CheckToken(ctx context.Context, name string, fencingToken uint64) (TokenCheck, error) {
	reply, err := c.rpc.CheckToken(ctx,
		&leasepb.CheckTokenRequest{Name: name, FencingToken: fencingToken}, callOptions...)
	if err != nil {
		return TokenCheck{}, err
	}
	return TokenCheck{Current: reply.Current, CurrentToken: reply.CurrentToken, Held: reply.Held}, nil
}
