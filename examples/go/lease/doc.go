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
// Giving up a wait is done with the context passed to Acquire (cancel, deadline): Acquire returns
// ctx.Err() at once, while the client keeps reading the Acquire stream for GiveUpGrace in the
// background and releases a grant that arrives anyway, which would otherwise stay held until
// its TTL.
package lease
