package lease

import "google.golang.org/grpc"

// SetReleaseOnGiveUp turns the Release after a give-up off (false) for a test, and returns what
// restores it: without it, a give-up leaves a grant that raced it held until its TTL, since the
// server never releases a grant made with the caller's own lease id on its own.
func SetReleaseOnGiveUp(release bool) (restore func()) {
	old := releaseOnGiveUp
	releaseOnGiveUp = release
	return func() { releaseOnGiveUp = old }
}

// CallOptions are the options the client puts on every call (its codec), for tests that call
// the generated stubs directly.
func CallOptions() []grpc.CallOption { return callOptions }
