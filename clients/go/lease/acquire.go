package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leased-dev/leased/clients/go/leasepb"
)

// acquireRetries is how many times an Acquire that ended UNAVAILABLE, or whose stream ended
// without an answer, is sent again with the same lease id. The first retry waits
// retryBackoff, each next one twice as long.
const (
	acquireRetries = 3
	retryBackoff   = 100 * time.Millisecond
)

// acquireSlack is added to each Acquire call's gRPC deadline beyond the wait left. That deadline
// is only a backstop against a server that never answers: the caller ends a wait with its
// context, through the give-up path, because a gRPC deadline cancels the call at the transport
// without the Release that must follow.
const acquireSlack = 5 * time.Second

// releaseTimeout bounds the releases the client makes on its own (Close, Unlock).
const releaseTimeout = 5 * time.Second

// giveUpReleaseTimeout bounds the Release after a give-up, which the caller waits for: short,
// since the caller is leaving; if it fails, a grant made meanwhile stays held until its TTL.
const giveUpReleaseTimeout = 2 * time.Second

// releaseOnGiveUp is true except in the test that measures what a give-up leaves held without
// the Release (the control of TestGiveUpRacingAReleaseLeavesNothingHeld).
var releaseOnGiveUp = true

// errNoAnswer is an Acquire stream that ended (with OK) before its terminal message.
var errNoAnswer = errors.New("lease: Acquire stream ended without granted or not_granted")

// Acquire asks for the lease name, waiting up to opts.Wait if it is busy. It returns either a
// *Lease, kept alive in the background until released or lost, or a *NotGranted describing the
// holder if the lease stayed busy; contention is not an error.
//
// Each acquisition sends its own lease id (128 random bits from the OS), which makes it safe to
// retry and to give up: an Acquire that ended UNAVAILABLE, or whose stream ended without an
// answer (a connection reset), is sent again with the same id, up to 3 times at 100, 200 and
// 400 ms, with the wait that is left (a retry after the wait is spent tries once: it still picks
// up a grant that an earlier try got). The server answers a retry of a grant it made with that
// grant, and keeps a retried waiter's place in the queue.
//
// Errors are gRPC status errors as the server sent them (codes.InvalidArgument names the bad
// field; codes.FailedPrecondition for a Limit other than the one in force; codes.Unavailable
// once the retries are spent), or ctx.Err() when ctx ends first: the caller gives up the wait.
// A give-up, or an error, cancels the call and then releases the acquisition's id, so that a
// grant that raced it is not left held; Acquire returns once that Release answered (at most 2 s,
// and its failure is not an error of Acquire: see Options.OnGiveUp).
func (c *Client) Acquire(ctx context.Context, name string, opts Options) (*Lease, *NotGranted, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	leaseID, err := newLeaseID()
	if err != nil {
		return nil, nil, err
	}
	holder := opts.Holder
	if holder == "" {
		holder = DefaultHolder()
	}
	request := &leasepb.AcquireRequest{
		Name:        name,
		Holder:      holder,
		TtlMs:       millis(opts.TTL),
		WaitMs:      millis(opts.Wait),
		Limit:       opts.Limit,
		LockDelayMs: millis(opts.LockDelay),
		Shared:      opts.Shared,
		LeaseId:     leaseID,
	}
	// The calls are not bound to ctx: see acquireSlack.
	base := detached{ctx}
	// The server grants no earlier than the first request, and answers a retry with the grant
	// that an earlier try may have got (same expiry): the lease lasts at least a TTL from here.
	requestedAt := time.Now()
	waitEnds := requestedAt.Add(opts.Wait)
	for retry := 0; ; retry++ {
		if retry > 0 {
			request.WaitMs = 0
			if left := time.Until(waitEnds); left > 0 {
				request.WaitMs = millis(left)
			}
		}
		call, err := c.startAcquire(base, request)
		if err != nil {
			if retryable(err) && retry < acquireRetries && pause(ctx, retryBackoff<<retry) {
				continue
			}
			return nil, nil, c.giveUp(ctx, base, request, opts.OnGiveUp, err)
		}
		granted, busy, err := call.answer(ctx, opts.OnWaiting)
		switch {
		case granted != nil:
			return c.guard(ctx, base, granted, opts.Shared, requestedAt)
		case busy != nil:
			return nil, busy, nil
		case ctx.Err() != nil:
			return nil, nil, c.giveUp(ctx, base, request, opts.OnGiveUp, ctx.Err())
		case retryable(err) && retry < acquireRetries && pause(ctx, retryBackoff<<retry):
			continue
		default:
			return nil, nil, c.giveUp(ctx, base, request, opts.OnGiveUp, err)
		}
	}
}

// newLeaseID is a new acquisition's own lease id: 128 bits from the OS's CSPRNG, as 32
// lowercase hex digits. It is the holder's secret; a retry reuses it, nothing else does.
func newLeaseID() (string, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("lease: no random lease id: %w", err)
	}
	return hex.EncodeToString(id[:]), nil
}

// retryable is an Acquire that may have been cut off rather than refused: the server, or the
// way to it, went away. Any other error is the server's answer, and would be again.
func retryable(err error) bool {
	return errors.Is(err, errNoAnswer) || status.Code(err) == codes.Unavailable
}

// pause waits d before a retry; false if ctx ended first (the caller gave up).
func pause(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// giveUp ends an acquisition that will not hand a lease over (the caller gave up, or an error):
// its call is already cancelled, so Release(name, id) now ends a grant that raced the give-up,
// whichever way the race went. The release is best effort: it is reported to onGiveUp, never
// returned. It returns err, the reason for giving up.
func (c *Client) giveUp(ctx, base context.Context, request *leasepb.AcquireRequest, onGiveUp func(GiveUp), err error) error {
	if ctx.Err() != nil {
		err = ctx.Err() // the caller's reason, whatever the call answered meanwhile
	}
	if !releaseOnGiveUp {
		return err
	}
	releaseCtx, cancel := context.WithTimeout(base, giveUpReleaseTimeout)
	released, releaseErr := c.Release(releaseCtx, request.Name, request.LeaseId)
	cancel()
	if onGiveUp != nil {
		onGiveUp(GiveUp{Name: request.Name, Cause: err, Released: released, Err: releaseErr})
	}
	return err
}

// acquireCall is one Acquire stream. A goroutine reads it and hands each message to the caller,
// until the terminal message or the end of the stream.
type acquireCall struct {
	stream   leasepb.LeaseService_AcquireClient
	cancel   context.CancelFunc // ends the call
	messages chan acquireMessage
	done     chan struct{} // closed when the reader has returned, after the stream ended
}

type acquireMessage struct {
	response *leasepb.AcquireResponse
	err      error
}

func (c *Client) startAcquire(base context.Context, request *leasepb.AcquireRequest) (*acquireCall, error) {
	wait := time.Duration(request.WaitMs) * time.Millisecond
	callCtx, cancel := context.WithTimeout(base, wait+acquireSlack)
	stream, err := c.rpc.Acquire(callCtx, request, callOptions...)
	if err != nil {
		cancel()
		return nil, err
	}
	call := &acquireCall{
		stream:   stream,
		cancel:   cancel,
		messages: make(chan acquireMessage),
		done:     make(chan struct{}),
	}
	go call.read()
	return call, nil
}

// answer waits for the call's terminal message: a grant, a *NotGranted, or an error (ctx.Err()
// when the caller gave up; the call is then cancelled, and has ended).
func (a *acquireCall) answer(ctx context.Context, onWaiting func(Waiting)) (*leasepb.Granted, *NotGranted, error) {
	for {
		select {
		case <-ctx.Done():
			a.end()
			return nil, nil, ctx.Err()
		case message := <-a.messages:
			if message.err != nil {
				return nil, nil, message.err
			}
			switch result := message.response.Result.(type) {
			case *leasepb.AcquireResponse_Waiting:
				if onWaiting != nil {
					onWaiting(waitingFrom(result.Waiting))
				}
			case *leasepb.AcquireResponse_NotGranted:
				return nil, notGrantedFrom(result.NotGranted), nil
			case *leasepb.AcquireResponse_Granted:
				if err := ctx.Err(); err != nil {
					// ctx ended while OnWaiting ran: the caller gave up, so the grant is not theirs.
					a.end()
					return nil, nil, err
				}
				return result.Granted, nil, nil
			default:
				a.end()
				return nil, nil, errors.New("lease: Acquire sent an empty message")
			}
		}
	}
}

// end cancels the call and returns once the stream has ended: grpc-go has then queued the
// cancellation (RST_STREAM) on the connection, so a Release sent next reaches the server after
// it. Messages that arrive meanwhile are dropped: the give-up's Release covers a grant among them.
func (a *acquireCall) end() {
	a.cancel()
	for {
		select {
		case <-a.messages:
		case <-a.done:
			return
		}
	}
}

// read hands the stream's messages to the caller until the terminal one or an error, then reads
// the stream to its end, so that the call finishes with OK rather than a cancellation.
func (a *acquireCall) read() {
	defer close(a.done)
	defer a.cancel()
	for {
		response, err := a.stream.Recv()
		if err == io.EOF {
			err = errNoAnswer
		}
		a.messages <- acquireMessage{response, err}
		if err != nil {
			return
		}
		if response.GetWaiting() == nil {
			a.drain()
			return
		}
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
func (c *Client) guard(ctx, base context.Context, granted *leasepb.Granted, shared bool, requestedAt time.Time) (*Lease, *NotGranted, error) {
	ttl := time.Duration(granted.TtlMs) * time.Millisecond
	keepaliveCtx, stop := context.WithCancel(base)
	renewals := &renewer{
		client:  c,
		ctx:     keepaliveCtx,
		request: &leasepb.RenewRequest{Name: granted.Name, LeaseId: granted.LeaseId},
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
	return startLease(c, base, granted, shared, ttl, trustFrom, renewals, stop), nil, nil
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

func waitingFrom(w *leasepb.Waiting) Waiting {
	return Waiting{
		Holder:       w.Holder,
		FencingToken: w.FencingToken,
		Remaining:    remaining(w.RemainingMs),
		Position:     w.Position,
		Held:         w.Held,
		Limit:        w.Limit,
	}
}

func notGrantedFrom(n *leasepb.NotGranted) *NotGranted {
	return &NotGranted{
		Holder:       n.Holder,
		FencingToken: n.FencingToken,
		Remaining:    remaining(n.RemainingMs),
		Held:         n.Held,
		Limit:        n.Limit,
	}
}
