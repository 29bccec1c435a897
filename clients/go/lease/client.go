package lease

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/leased-dev/leased/clients/go/leasepb"
)

// Client calls a leased server over a gRPC connection the caller owns (dial it with the
// transport credentials and per-RPC credentials the server needs; close it when done). It is
// safe for concurrent use.
type Client struct {
	rpc   leasepb.LeaseServiceClient
	admin leasepb.LeaseAdminServiceClient
}

// NewClient returns a client that makes its calls on conn.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{
		rpc:   leasepb.NewLeaseServiceClient(conn),
		admin: leasepb.NewLeaseAdminServiceClient(conn),
	}
}

// Options say how to acquire a lease. Only TTL is required.
type Options struct {
	// TTL is how long the lease lasts without a renewal (10 ms to the server's --max-ttl). The
	// keepalive renews it every TTL/3.
	TTL time.Duration
	// Wait is how long the server may wait for a busy lease; zero tries once. To give up sooner,
	// cancel the context passed to Acquire. Retries after a dropped call wait only what is left.
	Wait time.Duration
	// Holder tells others who holds the lease (Describe, NotGranted); DefaultHolder() if empty.
	Holder string
	// Limit N > 1 asks for one of N permits of a counting lease (a semaphore); 0 or 1 is an
	// exclusive lease. Every holder of a name must ask for the same limit.
	Limit uint32
	// Shared asks for a shared (read) grant: shared grants of a name coexist, an exclusive one
	// (the default) excludes every other. Only with Limit 0 or 1 (codes.InvalidArgument
	// otherwise). RWLock sets it for RLock.
	Shared bool
	// LockDelay keeps the lease from the next holder for this long after it expires (not after
	// a release): time for a holder that was cut off to notice. At most 60 s.
	LockDelay time.Duration
	// OnWaiting, if set, is called with each `waiting` message while the server waits for the
	// lease, on the goroutine that called Acquire.
	OnWaiting func(Waiting)
	// OnGiveUp, if set, is called when Acquire gave up (ctx ended, or an error) and released the
	// acquisition's lease id, on the goroutine that called Acquire, before Acquire returns: how
	// often a give-up ended a grant that raced it, and whether a release failed.
	OnGiveUp func(GiveUp)
}

// Waiting is the server's progress report while Acquire waits: whom it waits on, and the
// caller's place in the queue. For a counting lease, Holder, FencingToken and Remaining describe
// the permit that frees soonest.
type Waiting struct {
	Holder       string
	FencingToken uint64
	// Remaining is the time until that holder's lease frees unless renewed, lock-delay
	// included; negative if it has no expiry.
	Remaining time.Duration
	// Position is the caller's place in the queue across every replica: 1 = next in line.
	Position uint32
	// Held is how many permits are taken (1 for a held exclusive lease); Limit is the limit in
	// force (0 when none is taken).
	Held, Limit uint32
}

// NotGranted is Acquire's answer when the lease stayed busy for the whole wait. For a counting
// lease, Holder, FencingToken and Remaining describe the permit that frees soonest. An empty
// Holder with token 0 means nobody holds it right now: it is being handed to a caller ahead.
type NotGranted struct {
	Holder       string
	FencingToken uint64
	// Remaining is the time until that holder's lease frees unless renewed, lock-delay
	// included; negative if it has no expiry.
	Remaining   time.Duration
	Held, Limit uint32
}

// GiveUp reports the Release that followed a give-up: Acquire returned ctx.Err() or an error
// after sending a request with the acquisition's own lease id, which may have been granted.
type GiveUp struct {
	Name string
	// Cause is what Acquire returned: ctx.Err(), or the error that ended the acquisition.
	Cause error
	// Released is true when the lease had been granted to this acquisition (the grant raced the
	// give-up, or the answer was lost) and the Release ended it.
	Released bool
	// Err is the Release's error, if it failed: a grant made meanwhile then stays held until its
	// TTL.
	Err error
}

// Holder is one holder of a lease (one permit of a counting lease), as anyone may see it.
type Holder struct {
	Holder       string
	FencingToken uint64
	// Remaining is the time until this permit frees unless renewed; negative: no expiry.
	Remaining time.Duration
	// Shared is true for a shared (read) grant, false for an exclusive one and for the permits
	// of a counting lease.
	Shared bool
}

// Description is what Describe tells anyone about a lease.
type Description struct {
	// Held is true if any permit is taken (held, or in its lock-delay).
	Held bool
	// Holders lists every permit taken, by increasing fencing token.
	Holders []Holder
	// Limit is the limit in force: 1 for an exclusive or read-write lease, 0 when the lease is
	// free.
	Limit uint32
	// Waiters is how many callers wait for the lease, on every replica.
	Waiters uint32
}

// DefaultHolder is "hostname/pid": enough for an operator to find the process holding a lease.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// Describe reports who holds name now. Errors are gRPC status errors, unwrapped, so that
// status.Code(err) works (grpc-go 1.33 does not look through wrapped errors).
func (c *Client) Describe(ctx context.Context, name string) (*Description, error) {
	reply, err := c.rpc.Describe(ctx, &leasepb.DescribeRequest{Name: name}, callOptions...)
	if err != nil {
		return nil, err
	}
	return &Description{Held: reply.Held, Holders: holdersFrom(reply.Holders), Limit: reply.Limit,
		Waiters: reply.Waiters}, nil
}

// holdersFrom converts the wire's holders (Describe, Watch).
func holdersFrom(infos []*leasepb.HolderInfo) []Holder {
	var holders []Holder
	for _, h := range infos {
		holders = append(holders, Holder{
			Holder:       h.Holder,
			FencingToken: h.FencingToken,
			Remaining:    remaining(h.RemainingMs),
			Shared:       h.Shared,
		})
	}
	return holders
}

// Release ends a lease by its id, for a process that kept the id (a lease held through a
// *Lease is released with Lease.Release). It reports whether that id still held the lease.
func (c *Client) Release(ctx context.Context, name, leaseID string) (bool, error) {
	reply, err := c.rpc.Release(ctx, &leasepb.ReleaseRequest{Name: name, LeaseId: leaseID},
		callOptions...)
	if err != nil {
		return false, err
	}
	return reply.Released, nil
}

// Revoke ends the lease name whoever holds it (LeaseAdminService.Revoke, for operators): the
// holder's next renewal answers lost with "revoked: " and reason. A non-zero fencingToken
// revokes only the grant with that token. It reports whether a grant was revoked.
func (c *Client) Revoke(ctx context.Context, name, reason string, fencingToken uint64) (bool, error) {
	request := &leasepb.RevokeRequest{Name: name, Reason: reason, FencingToken: fencingToken}
	reply, err := c.admin.Revoke(ctx, request, callOptions...)
	if err != nil {
		return false, err
	}
	return reply.Revoked, nil
}

// remaining converts the wire's remaining_ms, where -1 means no expiry.
func remaining(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// millis converts a duration to the wire's milliseconds, rounding up so that a positive
// duration never becomes 0 (which means something else: try once, keep the TTL).
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
