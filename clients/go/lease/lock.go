package lease

import (
	"context"
	"errors"
)

// ErrNotLocked is ReentrantLock.Unlock's error when the handle holds no level.
var ErrNotLocked = errors.New("lease: Unlock of a ReentrantLock that is not locked")

// ReentrantLock is a lease held through a handle whose Lock calls nest, for code that may take
// the lock again further down the same call chain. The handle is the owner (Go has no goroutine
// identity to key on): the outermost Lock acquires the lease, a nested Lock while the handle
// holds it returns the same *Lease at once, without a call to the server, and only the Unlock
// that matches the outermost Lock releases it. Every level shares that one *Lease, so a loss
// (Lost, Err, Context) ends them all at once, reported as for any *Lease.
//
// Its methods are safe for concurrent use, but goroutines that share a handle share its hold:
// give each independent owner its own handle (NewReentrantLock), as two handles on one name
// exclude each other like any two callers.
type ReentrantLock struct {
	client *Client
	name   string
	opts   Options

	// turn is taken while a method reads or changes the levels, and through the outermost
	// Lock's wait, so that a second Lock nests in the grant rather than acquiring beside it.
	turn  chan struct{}
	lease *Lease
	depth int
}

// NewReentrantLock returns an unlocked handle on the lease name; each outermost Lock acquires
// it with opts, as Client.Acquire does.
func (c *Client) NewReentrantLock(name string, opts Options) *ReentrantLock {
	return &ReentrantLock{client: c, name: name, opts: opts, turn: make(chan struct{}, 1)}
}

// Lock takes one level. The outermost acquires the lease and answers as Client.Acquire (a
// *NotGranted when it stayed busy; an error, ctx.Err() when ctx ended first): only a *Lease is
// a level. A nested Lock returns the held *Lease at once, or, once that lease is lost, its
// *LostError (errors.Is(err, ErrLost)) without taking a level: the loss ended every level, and
// the levels already taken still need their Unlock.
func (r *ReentrantLock) Lock(ctx context.Context) (*Lease, *NotGranted, error) {
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-r.turn }()
	if r.depth > 0 {
		if err := r.lease.Err(); err != nil {
			return nil, nil, err
		}
		r.depth++
		return r.lease, nil, nil
	}
	l, busy, err := r.client.Acquire(ctx, r.name, r.opts)
	if l != nil {
		r.lease, r.depth = l, 1
	}
	return l, busy, err
}

// Unlock gives back one level; the last one releases the lease as Lease.Close does (waiting at
// most 5 s for the server). Release through Unlock, never through the *Lease, which the other
// levels share. Unlock without a level held returns ErrNotLocked.
func (r *ReentrantLock) Unlock() error {
	r.turn <- struct{}{}
	defer func() { <-r.turn }()
	if r.depth == 0 {
		return ErrNotLocked
	}
	r.depth--
	if r.depth > 0 {
		return nil
	}
	l := r.lease
	r.lease = nil
	return l.Close()
}

// Depth is how many levels the handle holds: 0 when unlocked.
func (r *ReentrantLock) Depth() int {
	r.turn <- struct{}{}
	defer func() { <-r.turn }()
	return r.depth
}

// RWLock is a read-write lock over one lease name: RLock takes a shared grant, which coexists
// with other shared grants, and Lock an exclusive one, which excludes every other grant. Each
// returns the guard that Client.Acquire returns; release it with Close or Release. Readers and
// writers wait in one queue, first come, first served: a writer waiting holds back the readers
// behind it, so a stream of readers cannot starve it.
//
// There is no upgrade from read to write, nor downgrade: release, then acquire again. (Two
// readers that both waited to upgrade would wait for each other forever.)
type RWLock struct {
	client *Client
	name   string
	opts   Options
}

// NewRWLock returns a read-write lock on the lease name, acquired with opts (whose Shared is
// set by each method; Limit must be 0 or 1).
func (c *Client) NewRWLock(name string, opts Options) *RWLock {
	return &RWLock{client: c, name: name, opts: opts}
}

// RLock acquires a shared (read) grant, as Client.Acquire with Options.Shared.
func (rw *RWLock) RLock(ctx context.Context) (*Lease, *NotGranted, error) {
	opts := rw.opts
	opts.Shared = true
	return rw.client.Acquire(ctx, rw.name, opts)
}

// Lock acquires the exclusive (write) grant, as Client.Acquire.
func (rw *RWLock) Lock(ctx context.Context) (*Lease, *NotGranted, error) {
	opts := rw.opts
	opts.Shared = false
	return rw.client.Acquire(ctx, rw.name, opts)
}
