package fencing

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leased-dev/leased/clients/go/lease"
)

// Options configure an Interceptor.
type Options struct {
	// Marks keeps the largest token accepted per lease name; nil keeps them in this process
	// (NewMemoryMarks: only as durable as the process).
	Marks MarkStore
	// Optional lets calls that carry neither metadata entry through unchecked. By default every
	// call must carry both (INVALID_ARGUMENT otherwise).
	Optional bool
}

// Interceptor makes a gRPC service a fenced resource. Each call names its lease and carries the
// grant's token in metadata (leased-lease-name, leased-fencing-token: what
// (*lease.Lease).OutgoingContext attaches); a call whose token is below the largest accepted for
// that name is refused with FAILED_PRECONDITION before the handler runs:
//
//	fence := fencing.NewInterceptor(fencing.Options{})
//	server := grpc.NewServer(grpc.UnaryInterceptor(fence.Unary), grpc.StreamInterceptor(fence.Stream))
//
// Bad metadata (one entry without the other, an empty name, a token that is not canonical
// decimal from 1 to MaxToken, an entry given twice) is INVALID_ARGUMENT naming the entry; a
// store that fails is UNAVAILABLE, and the handler does not run.
//
// The unary calls of one lease name run their handlers one at a time in this process (the
// check and the handler under one per-name lock), so a handler's writes for a name land in
// token order even if the service itself pauses mid-call. Streaming calls are checked once,
// when they start; their handlers run concurrently.
type Interceptor struct {
	marks    MarkStore
	optional bool
	turns    turns
}

// NewInterceptor returns an interceptor with opts.
func NewInterceptor(opts Options) *Interceptor {
	marks := opts.Marks
	if marks == nil {
		marks = NewMemoryMarks()
	}
	return &Interceptor{marks: marks, optional: opts.Optional, turns: turns{names: map[string]*turn{}}}
}

// Claim is a call's lease name and fencing token, as the interceptor accepted them.
type Claim struct {
	Name  string
	Token uint64
}

type claimKey struct{}

// ClaimFromContext is the claim the interceptor accepted for the call whose context ctx is;
// false for a call that passed unchecked (Options.Optional) or went through no Interceptor.
func ClaimFromContext(ctx context.Context) (Claim, bool) {
	claim, ok := ctx.Value(claimKey{}).(Claim)
	return claim, ok
}

// Unary is a grpc.UnaryServerInterceptor.
func (f *Interceptor) Unary(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (interface{}, error) {
	claim, err := f.readClaim(ctx)
	if err != nil {
		return nil, err
	}
	if claim == nil {
		return handler(ctx, req)
	}
	release, err := f.turns.take(ctx, claim.Name)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer release()
	if err := f.fence(ctx, claim); err != nil {
		return nil, err
	}
	return handler(context.WithValue(ctx, claimKey{}, *claim), req)
}

// Stream is a grpc.StreamServerInterceptor: the call is checked when it starts.
func (f *Interceptor) Stream(srv interface{}, stream grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := stream.Context()
	claim, err := f.readClaim(ctx)
	if err != nil {
		return err
	}
	if claim == nil {
		return handler(srv, stream)
	}
	if err := f.fence(ctx, claim); err != nil {
		return err
	}
	return handler(srv, &claimedStream{ServerStream: stream, ctx: context.WithValue(ctx, claimKey{}, *claim)})
}

// claimedStream carries the claim in its context.
type claimedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *claimedStream) Context() context.Context { return s.ctx }

// fence checks the claim against the store, as a status error.
func (f *Interceptor) fence(ctx context.Context, claim *Claim) error {
	err := f.marks.Fence(ctx, claim.Name, claim.Token)
	var stale *StaleTokenError
	var invalid *InvalidInputError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &stale):
		return status.Errorf(codes.FailedPrecondition, "stale fencing token %d for lease %q: the highest seen is %d",
			claim.Token, claim.Name, stale.Mark)
	case errors.As(err, &invalid):
		return status.Error(codes.InvalidArgument, invalid.Message)
	}
	return status.Errorf(codes.Unavailable, "the fencing mark store failed: %v", err)
}

// readClaim reads the call's lease name and token; nil for a call with neither when they are
// optional.
func (f *Interceptor) readClaim(ctx context.Context) (*Claim, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	name, err := singleEntry(md, lease.LeaseNameMetadata)
	if err != nil {
		return nil, err
	}
	token, err := singleEntry(md, lease.FencingTokenMetadata)
	if err != nil {
		return nil, err
	}
	switch {
	case name == nil && token == nil && f.optional:
		return nil, nil
	case name == nil && token == nil:
		return nil, status.Errorf(codes.InvalidArgument, "this service is fenced: the call needs %s and %s metadata "+
			"(the lease's name and the fencing token of its grant, e.g. from (*lease.Lease).OutgoingContext)",
			lease.LeaseNameMetadata, lease.FencingTokenMetadata)
	case name == nil:
		return nil, status.Errorf(codes.InvalidArgument, "%s is missing: a call with %s must name its lease",
			lease.LeaseNameMetadata, lease.FencingTokenMetadata)
	case token == nil:
		return nil, status.Errorf(codes.InvalidArgument, "%s is missing: a call with %s must carry its lease's fencing token",
			lease.FencingTokenMetadata, lease.LeaseNameMetadata)
	case *name == "":
		return nil, status.Errorf(codes.InvalidArgument, "%s must not be empty", lease.LeaseNameMetadata)
	}
	parsed, err := ParseToken(lease.FencingTokenMetadata, *token)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &Claim{Name: *name, Token: parsed}, nil
}

// singleEntry is the value of the metadata entry key, or nil; given twice, the call is
// ambiguous.
func singleEntry(md metadata.MD, key string) (*string, error) {
	values := md.Get(key)
	switch len(values) {
	case 0:
		return nil, nil
	case 1:
		return &values[0], nil
	}
	return nil, status.Errorf(codes.InvalidArgument, "%s must be given once, not %d times", key, len(values))
}

// turns is one lock per lease name with calls in flight, so that the unary calls of a name
// take turns; an entry is removed when no call holds or waits for it.
type turns struct {
	mu    sync.Mutex
	names map[string]*turn
}

type turn struct {
	lock  chan struct{} // holds one value while a call has the turn
	users int           // calls holding or waiting
}

// take waits for name's turn (or ctx's end) and returns its release.
func (t *turns) take(ctx context.Context, name string) (release func(), err error) {
	t.mu.Lock()
	entry := t.names[name]
	if entry == nil {
		entry = &turn{lock: make(chan struct{}, 1)}
		t.names[name] = entry
	}
	entry.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		entry.users--
		if entry.users == 0 {
			delete(t.names, name)
		}
		t.mu.Unlock()
	}
	select {
	case entry.lock <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
	return func() {
		<-entry.lock
		leave()
	}, nil
}
