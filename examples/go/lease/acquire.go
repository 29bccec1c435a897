package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	leasev1 "leased/examples/go/gen/leasev1"
)

// GiveUpGrace is how long the client keeps reading an Acquire stream after the caller gave up
// the wait (its context was cancelled or passed its deadline). The server may have sent a grant
// just before the cancellation reached it; the client releases such a grant at once instead of
// leaving it held, by nobody, until its TTL. The caller does not wait for the grace.
const GiveUpGrace = time.Second

// giveUpGrace is GiveUpGrace, except in tests that measure what happens without it. Zero cancels
// the call at once and ignores whatever arrives, as a naive client would.
var giveUpGrace = GiveUpGrace

// acquireSlack is added to the Acquire call's gRPC deadline beyond the wait and the grace. That
// deadline is only a backstop against a server that never answers: the caller ends a wait with
// its context, through the give-up path, because a gRPC deadline cancels the call at the
// transport and loses a grant in flight.
const acquireSlack = 5 * time.Second

// releaseTimeout bounds the releases the client makes on its own (Close, abandoned grants).
const releaseTimeout = 5 * time.Second

// Acquire asks for the lease name, waiting up to opts.Wait if it is busy. It returns either a
// *Lease, kept alive in the background until released or lost, or a *NotGranted describing the
// holder if the lease stayed busy; contention is not an error.
//
// Errors are gRPC status errors as the server sent them (codes.InvalidArgument names the bad
// field; codes.FailedPrecondition for a Limit other than the one in force; codes.Unavailable),
// or ctx.Err() when ctx ends first: the caller gives up the wait and Acquire returns at once.
// A grant that arrives after that, within GiveUpGrace, is released in the background (see
// Options.OnAbandonedGrant).
func (c *Client) Acquire(ctx context.Context, name string, opts Options) (*Lease, *NotGranted, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	holder := opts.Holder
	if holder == "" {
		holder = DefaultHolder()
	}
	request := &leasev1.AcquireRequest{
		Name:        name,
		Holder:      holder,
		TtlMs:       millis(opts.TTL),
		WaitMs:      millis(opts.Wait),
		Limit:       opts.Limit,
		LockDelayMs: millis(opts.LockDelay),
	}
	// The call is not bound to ctx: see acquireSlack.
	base := detached{ctx}
	callCtx, cancelCall := context.WithTimeout(base, opts.Wait+GiveUpGrace+acquireSlack)
	// The server grants no earlier than now, so the lease lasts at least a TTL from here.
	requestedAt := time.Now()
	stream, err := c.rpc.Acquire(callCtx, request, callOptions...)
	if err != nil {
		cancelCall()
		return nil, nil, err
	}
	call := &acquireCall{
		client:      c,
		base:        base,
		stream:      stream,
		cancel:      cancelCall,
		grace:       giveUpGrace,
		messages:    make(chan acquireMessage),
		gaveUp:      make(chan struct{}),
		onAbandoned: opts.OnAbandonedGrant,
	}
	go call.read()
	for {
		select {
		case <-ctx.Done():
			call.giveUp()
			return nil, nil, ctx.Err()
		case message := <-call.messages:
			if message.err != nil {
				return nil, nil, message.err
			}
			switch result := message.response.Result.(type) {
			case *leasev1.AcquireResponse_Waiting:
				if opts.OnWaiting != nil {
					opts.OnWaiting(waitingFrom(result.Waiting))
				}
			case *leasev1.AcquireResponse_NotGranted:
				return nil, notGrantedFrom(result.NotGranted), nil
			case *leasev1.AcquireResponse_Granted:
				if err := ctx.Err(); err != nil {
					// ctx ended while OnWaiting ran: the caller gave up, so the grant is not theirs.
					go call.releaseAbandoned(result.Granted)
					return nil, nil, err
				}
				return c.guard(ctx, base, result.Granted, requestedAt)
			default:
				return nil, nil, errors.New("lease: Acquire sent an empty message")
			}
		}
	}
}

// acquireCall is one Acquire stream. A goroutine reads it and hands each message to the caller
// over an unbuffered channel, so that a message is either taken by the caller or, once the
// caller gave up, handled by the reader: a grant is never dropped between the two.
type acquireCall struct {
	client      *Client
	base        context.Context // the caller's values, without its cancellation
	stream      leasev1.LeaseService_AcquireClient
	cancel      context.CancelFunc // ends the call
	grace       time.Duration
	messages    chan acquireMessage
	gaveUp      chan struct{} // closed when the caller gives up
	onAbandoned func(AbandonedGrant)
}

type acquireMessage struct {
	response *leasev1.AcquireResponse
	err      error
}

// read hands the stream's messages to the caller until the terminal one, then reads the stream
// to its end, so that the call finishes with OK rather than a cancellation.
func (a *acquireCall) read() {
	defer a.cancel()
	for {
		response, err := a.stream.Recv()
		if err == io.EOF {
			err = errors.New("lease: Acquire stream ended without granted or not_granted")
		}
		select {
		case a.messages <- acquireMessage{response, err}:
			if err != nil {
				return
			}
			if response.GetWaiting() == nil {
				a.drain()
				return
			}
		case <-a.gaveUp:
			a.readAfterGiveUp(response, err)
			return
		}
	}
}

// giveUp tells the reader that the caller will take no more messages, and ends the call after
// the grace (at once without one).
func (a *acquireCall) giveUp() {
	close(a.gaveUp)
	if a.grace <= 0 {
		a.cancel()
		return
	}
	time.AfterFunc(a.grace, a.cancel)
}

// readAfterGiveUp goes on reading, starting with a message the caller did not take, until the
// terminal message, the end of the stream or the end of the grace (which cancels the call and
// so ends Recv), and releases a grant that arrives meanwhile.
func (a *acquireCall) readAfterGiveUp(response *leasev1.AcquireResponse, err error) {
	if a.grace <= 0 {
		return // the tests' naive client: whatever arrives is ignored
	}
	for err == nil {
		if granted := response.GetGranted(); granted != nil {
			a.releaseAbandoned(granted)
			return
		}
		if response.GetWaiting() == nil {
			return // not granted: nothing to release
		}
		response, err = a.stream.Recv()
	}
}

// releaseAbandoned releases a grant the caller gave up before it arrived.
func (a *acquireCall) releaseAbandoned(granted *leasev1.Granted) {
	ctx, cancel := context.WithTimeout(a.base, releaseTimeout)
	defer cancel()
	_, err := a.client.Release(ctx, granted.Name, granted.LeaseId)
	if a.onAbandoned != nil {
		a.onAbandoned(AbandonedGrant{Name: granted.Name, FencingToken: granted.FencingToken, Err: err})
	}
}

func (a *acquireCall) drain() {
	for {
		if _, err := a.stream.Recv(); err != nil {
			return
		}
	}
}

// guard starts the keepalive of a fresh grant and hands the lease over.
func (c *Client) guard(ctx, base context.Context, granted *leasev1.Granted, requestedAt time.Time) (*Lease, *NotGranted, error) {
	ttl := time.Duration(granted.TtlMs) * time.Millisecond
	keepaliveCtx, stop := context.WithCancel(base)
	renewals := &renewer{
		client:  c,
		ctx:     keepaliveCtx,
		request: &leasev1.RenewRequest{Name: granted.Name, LeaseId: granted.LeaseId},
	}
	trustFrom := requestedAt
	// After a long wait, "a TTL after the request" may be nearly over although the grant is
	// fresh: the server granted it at some unknown moment during the wait. Renew once before
	// handing the lease over, and count the trust from that renewal's send instead.
	if time.Since(requestedAt) > ttl/3 {
		trustFrom = time.Now()
		renewCtx, cancel := context.WithDeadline(ctx, trustFrom.Add(trustWindow(ttl)))
		response, err := renewals.renew(renewCtx)
		cancel()
		if err == nil && response.GetLost() != nil {
			// Gone between the grant and now: say who holds it instead.
			stop()
			busy, err := c.notGrantedNow(ctx, granted.Name)
			return nil, busy, err
		}
		if err != nil {
			// Never leave a granted lease unguarded and unreleased.
			stop()
			releaseCtx, cancel := context.WithTimeout(base, releaseTimeout)
			_, _ = c.Release(releaseCtx, granted.Name, granted.LeaseId) // best effort
			cancel()
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("lease %q: the renewal after the wait was not answered in time", granted.Name)
			}
			return nil, nil, err
		}
	}
	return startLease(c, base, granted, ttl, trustFrom, renewals, stop), nil, nil
}

// notGrantedNow describes name as Acquire's NotGranted would: the permit that frees soonest.
func (c *Client) notGrantedNow(ctx context.Context, name string) (*NotGranted, error) {
	description, err := c.Describe(ctx, name)
	if err != nil {
		return nil, err
	}
	busy := &NotGranted{Held: uint32(len(description.Holders)), Limit: description.Limit}
	for i, h := range description.Holders {
		soonest := i == 0 || (h.Remaining >= 0 && (busy.Remaining < 0 || h.Remaining < busy.Remaining))
		if soonest {
			busy.Holder, busy.FencingToken, busy.Remaining = h.Holder, h.FencingToken, h.Remaining
		}
	}
	return busy, nil
}

func waitingFrom(w *leasev1.Waiting) Waiting {
	return Waiting{
		Holder:       w.Holder,
		FencingToken: w.FencingToken,
		Remaining:    remaining(w.RemainingMs),
		Position:     w.Position,
		Held:         w.Held,
		Limit:        w.Limit,
	}
}

func notGrantedFrom(n *leasev1.NotGranted) *NotGranted {
	return &NotGranted{
		Holder:       n.Holder,
		FencingToken: n.FencingToken,
		Remaining:    remaining(n.RemainingMs),
		Held:         n.Held,
		Limit:        n.Limit,
	}
}
