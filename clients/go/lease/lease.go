package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/leased-dev/leased/clients/go/leasepb"
)

// ErrLost matches (errors.Is) every error that Lease.Err returns.
var ErrLost = errors.New("lease lost")

// LostError says why a lease can no longer be trusted.
type LostError struct {
	Name string
	// Reason is the server's ("expired or released", "held by another holder", "revoked: "
	// and the operator's reason), or why no renewal was answered in time.
	Reason string
	// Unreachable is true when no renewal was answered in time: the server may still hold the
	// lease for a moment, but this holder can no longer know, and must stop as if it had lost.
	Unreachable bool
}

func (e *LostError) Error() string { return fmt.Sprintf("lease %q lost: %s", e.Name, e.Reason) }

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Lease is a granted lease, renewed in the background every TTL/3 over one Renew stream until
// it is released or lost. Its methods are safe for concurrent use. Release it (Close, or Release)
// when done: until then it stays held, even if nothing uses it any more.
type Lease struct {
	client  *Client
	base    context.Context // the Acquire caller's values, for the release
	name    string
	leaseID string
	token   uint64
	ttl     time.Duration
	shared  bool

	stop  context.CancelFunc // ends the keepalive: on release, and on loss
	ended <-chan struct{}    // closed by stop
	done  chan struct{}      // closed when the keepalive goroutine has returned

	mu           sync.Mutex
	trustedUntil time.Time   // the lease may be gone on the server from this moment on
	trustTimer   *time.Timer // reports the loss at trustedUntil
	lastFailure  string      // why the last renewal failed, for the loss report
	err          *LostError  // non-nil once lost
	lost         chan struct{}
	released     bool

	releaseOnce sync.Once
}

// trustWindow is how long after a renewal was sent the holder may trust the lease: a little
// less than the TTL, leaving room for clocks that run at slightly different rates. The server
// moves the expiry a TTL past the moment it reads the renewal, which is after it was sent.
func trustWindow(ttl time.Duration) time.Duration { return ttl - ttl/20 }

// startLease guards a grant whose trust counts from trustFrom: the send of the Acquire request,
// or of the renewal that confirmed the grant after a long wait.
func startLease(c *Client, base context.Context, granted *leasepb.Granted, shared bool, ttl time.Duration,
	trustFrom time.Time, renewals *renewer, stop context.CancelFunc) *Lease {
	l := &Lease{
		client:       c,
		base:         base,
		name:         granted.Name,
		leaseID:      granted.LeaseId,
		token:        granted.FencingToken,
		ttl:          ttl,
		shared:       shared,
		stop:         stop,
		ended:        renewals.ctx.Done(),
		done:         make(chan struct{}),
		trustedUntil: trustFrom.Add(trustWindow(ttl)),
		lastFailure:  "no renewal was sent",
		lost:         make(chan struct{}),
	}
	l.mu.Lock()
	l.trustTimer = time.AfterFunc(time.Until(l.trustedUntil), l.trustExpired)
	l.mu.Unlock()
	go l.keepalive(renewals, trustFrom.Add(ttl/3))
	return l
}

// Name is the lease's name.
func (l *Lease) Name() string { return l.name }

// FencingToken is larger than every token granted before for this name: pass it to the
// resource the lease protects, which must reject writes with a smaller token than it has seen.
func (l *Lease) FencingToken() uint64 { return l.token }

// LeaseID is the holder's secret, needed to renew and release: keep it private.
func (l *Lease) LeaseID() string { return l.leaseID }

// TTL is the granted TTL.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Shared is true for a shared (read) grant (Options.Shared, RWLock.RLock).
func (l *Lease) Shared() bool { return l.shared }

// TrustedUntil is when the holder must stop trusting the lease unless a renewal answers
// before: TTL - TTL/20 after the last successful renewal was sent.
func (l *Lease) TrustedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.trustedUntil
}

// Lost is closed when the lease can no longer be trusted: a renewal answered that it is gone,
// or none was answered before TrustedUntil. It is never closed by a release.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is nil until Lost is closed, then a *LostError saying why (errors.Is(err, ErrLost)).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		return nil
	}
	return l.err
}

// Context returns a copy of parent that is cancelled when the lease is lost or released: run
// the work the lease protects under it. Call cancel when the work is done.
func (l *Lease) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	ctx, cancel = context.WithCancel(parent)
	go func() {
		select {
		case <-l.ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Release stops the keepalive and releases the lease. It reports whether the lease was still
// held (false if it had expired, was revoked or taken over). Releasing again is a no-op that
// returns false.
func (l *Lease) Release(ctx context.Context) (bool, error) {
	first := false
	l.releaseOnce.Do(func() { first = true })
	if !first {
		return false, nil
	}
	l.mu.Lock()
	l.released = true
	l.trustTimer.Stop()
	l.mu.Unlock()
	l.stop()
	<-l.done // no renewal may race the release
	return l.client.Release(ctx, l.name, l.leaseID)
}

// Close releases the lease (see Release), waiting at most 5 s for the server.
func (l *Lease) Close() error {
	ctx, cancel := context.WithTimeout(l.base, releaseTimeout)
	defer cancel()
	_, err := l.Release(ctx)
	return err
}

// keepalive renews every TTL/3, counted from each renewal's send, and retries a failed renewal
// every TTL/20 (at least 20 ms) on a new stream. It returns once the lease is released or lost;
// the loss at TrustedUntil is reported by trustTimer, whatever this goroutine is doing then.
func (l *Lease) keepalive(renewals *renewer, firstRenewal time.Time) {
	defer close(l.done)
	defer renewals.close()
	period := l.ttl / 3
	retryDelay := l.ttl / 20
	if retryDelay < 20*time.Millisecond {
		retryDelay = 20 * time.Millisecond
	}
	timer := time.NewTimer(time.Until(firstRenewal))
	defer timer.Stop()
	for {
		select {
		case <-l.ended:
			return
		case <-timer.C:
		}
		l.renewalSent()
		sentAt := time.Now()
		response, err := renewals.renew(renewals.ctx)
		var next time.Time
		switch {
		case renewals.ctx.Err() != nil:
			return // released or lost meanwhile: whatever came back no longer matters
		case err != nil:
			l.renewalFailed(err)
			next = time.Now().Add(retryDelay)
		case response.GetLost() != nil:
			l.lose(response.GetLost().GetReason(), false)
			return
		default:
			ttl := time.Duration(response.GetRenewed().GetTtlMs()) * time.Millisecond
			if !l.credit(sentAt, ttl) {
				return
			}
			next = sentAt.Add(period)
		}
		timer.Reset(time.Until(next))
	}
}

// credit extends the trust after a renewal sent at sentAt was answered, unless the answer came
// after the trust had ended: such an answer is never credited, and the lease is lost.
func (l *Lease) credit(sentAt time.Time, ttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || l.released {
		return false
	}
	if !time.Now().Before(l.trustedUntil) {
		l.loseLocked("a renewal was answered only after the lease could have expired", true)
		return false
	}
	if ttl <= 0 {
		ttl = l.ttl
	}
	l.trustedUntil = sentAt.Add(trustWindow(ttl))
	l.trustTimer.Reset(time.Until(l.trustedUntil))
	return true
}

// renewalSent records, for the loss report, that an answer is awaited.
func (l *Lease) renewalSent() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastFailure = "a renewal was sent and not answered"
}

func (l *Lease) renewalFailed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastFailure = "last renewal failed: " + err.Error()
}

// trustExpired runs on trustTimer, at trustedUntil.
func (l *Lease) trustExpired() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || l.released || time.Now().Before(l.trustedUntil) {
		return // a renewal moved trustedUntil, and re-armed the timer
	}
	l.loseLocked("no renewal answered before the lease could expire ("+l.lastFailure+")", true)
}

func (l *Lease) lose(reason string, unreachable bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loseLocked(reason, unreachable)
}

func (l *Lease) loseLocked(reason string, unreachable bool) {
	if l.err != nil || l.released {
		return
	}
	l.err = &LostError{Name: l.name, Reason: reason, Unreachable: unreachable}
	l.trustTimer.Stop()
	close(l.lost)
	l.stop() // once lost, stop renewing
}

// renewer sends renewals over one Renew stream, opened on first use. A stream that failed, or
// whose answer was given up on, is discarded (never read again) so that a late answer cannot be
// taken for the answer to a newer request; the next renewal opens a new one.
type renewer struct {
	client  *Client
	ctx     context.Context // the keepalive's: streams live under it
	request *leasepb.RenewRequest
	stream  *renewStream
}

type renewStream struct {
	call    leasepb.LeaseService_RenewClient
	cancel  context.CancelFunc
	replies chan renewReply
}

type renewReply struct {
	response *leasepb.RenewResponse
	err      error
}

// renew sends one renewal and waits for its answer, or until ctx ends.
func (r *renewer) renew(ctx context.Context) (*leasepb.RenewResponse, error) {
	if r.stream == nil {
		stream, err := r.open()
		if err != nil {
			return nil, err
		}
		r.stream = stream
	}
	stream := r.stream
	sendErr := stream.call.Send(r.request)
	select {
	case reply := <-stream.replies:
		if reply.err != nil {
			r.close()
			return nil, reply.err
		}
		if sendErr != nil || reply.response.Result == nil {
			r.close()
			return nil, errors.New("lease: unexpected answer on the Renew stream")
		}
		return reply.response, nil
	case <-ctx.Done():
		r.close()
		return nil, ctx.Err()
	}
}

func (r *renewer) open() (*renewStream, error) {
	ctx, cancel := context.WithCancel(r.ctx)
	call, err := r.client.rpc.Renew(ctx, callOptions...)
	if err != nil {
		cancel()
		return nil, err
	}
	stream := &renewStream{call: call, cancel: cancel, replies: make(chan renewReply, 1)}
	go stream.read(ctx)
	return stream, nil
}

// read moves the stream's answers (then the error that ended it) onto replies. After a failed
// Send (io.EOF: the stream ended), the error that ended it is what Recv returns.
func (s *renewStream) read(ctx context.Context) {
	for {
		response, err := s.call.Recv()
		if err == io.EOF {
			err = errors.New("the server ended the Renew stream")
		}
		select {
		case s.replies <- renewReply{response, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// close discards the current stream, if any.
func (r *renewer) close() {
	if r.stream != nil {
		r.stream.cancel()
		r.stream = nil
	}
}
