// Package lease is a small Go client for leased, a gRPC lease service with fencing tokens
// (lease.v1.LeaseService in proto/lease/v1/lease.proto).
//
// Acquire returns a *Lease that renews itself in the background over one Renew stream, or a
// *NotGranted naming the holder when the lease is busy (contention is not an error):
//
//	conn, err := grpc.Dial("127.0.0.1:50051", grpc.WithInsecure())
//	...
//	client := lease.NewClient(conn)
//	l, busy, err := client.Acquire(ctx, "nightly-report", lease.Options{TTL: 15 * time.Second, Wait: time.Minute})
//	if err != nil {
//		return err // bad input (codes.InvalidArgument), server unavailable, or ctx done
//	}
//	if busy != nil {
//		log.Printf("held by %q (token %d)", busy.Holder, busy.FencingToken)
//		return nil
//	}
//	defer l.Close() // stops the keepalive and releases
//	work, stop := l.Context(ctx) // cancelled the moment the lease may be gone
//	defer stop()
//	return write(work, l.FencingToken())
//
// Lost() is closed, and Err says why, when a renewal answers that the lease is gone (expired,
// released by someone else, revoked) and also when no renewal was answered in time: at the
// latest TTL - TTL/20 after the last successful renewal was sent, before the server could
// expire the lease. Pass the fencing token to the resource the lease protects, which must reject
// writes carrying a smaller token than the largest it has seen.
//
// Each acquisition sends its own lease id, 128 random bits from the OS: an Acquire cut off by
// UNAVAILABLE or a reset connection is sent again with that id (3 retries, within the wait),
// and the server answers a retry with the grant an earlier try got, or keeps its place in the
// queue. Giving up a wait is done with the context passed to Acquire (cancel, deadline): Acquire
// cancels the call, then releases its id, which ends a grant that raced the give-up whichever
// way the race went, and returns ctx.Err(). An error that ends an acquisition does the same.
//
// ReentrantLock is a handle whose Lock calls nest (only the outermost Unlock releases);
// RWLock gives shared (RLock) and exclusive (Lock) grants of one name:
//
//	rw := client.NewRWLock("catalog", lease.Options{TTL: 15 * time.Second, Wait: time.Minute})
//	r, busy, err := rw.RLock(ctx) // readers hold together; a writer waits for them all
//	...
//	defer r.Close()
package lease
