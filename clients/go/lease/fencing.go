package lease

import (
	"context"
	"strconv"

	"google.golang.org/grpc/metadata"
)

// The metadata convention of fenced services (proto/lease/v1/lease.proto's header comment): a
// call to a service that fences its writes carries the lease's name and the grant's fencing
// token, in canonical decimal. Package fencing's interceptors read them.
const (
	LeaseNameMetadata    = "leased-lease-name"
	FencingTokenMetadata = "leased-fencing-token"
)

// FencingMetadata is the metadata pair a call to a fenced service carries for this lease: its
// name and its fencing token.
func (l *Lease) FencingMetadata() metadata.MD {
	return metadata.Pairs(LeaseNameMetadata, l.name, FencingTokenMetadata, strconv.FormatUint(l.token, 10))
}

// OutgoingContext returns a copy of ctx whose outgoing metadata also carries the lease's name
// and fencing token: make the calls to a fenced service with it.
//
//	_, err := docs.Write(l.OutgoingContext(ctx), request)
//
// It does not check that the lease is still held (a pause can come after any check): the
// service's fencing interceptor refuses the call if a newer holder called first.
func (l *Lease) OutgoingContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx,
		LeaseNameMetadata, l.name, FencingTokenMetadata, strconv.FormatUint(l.token, 10))
}
