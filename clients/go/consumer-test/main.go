// Command leased-consumer uses the installed client module against the leased at $LEASED_ADDR:
// acquire, a second caller told who holds it, guard work with the lease's context and fencing
// token, CheckToken, the fencing metadata through package fencing's interceptor (installed
// without any database or Redis driver), release, and the lease free afterwards. It exits 1 at
// the first surprise.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leased-dev/leased/clients/go/fencing"
	"github.com/leased-dev/leased/clients/go/lease"
)

func main() {
	if err := run(os.Getenv("LEASED_ADDR")); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	fmt.Println("consumer: acquire, guard, check, fencing metadata, release: ok")
}

func run(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, addr, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		return err
	}
	defer conn.Close()
	client := lease.NewClient(conn)
	opts := lease.Options{TTL: 5 * time.Second, Holder: "consumer-a"}

	l, busy, err := client.Acquire(ctx, "consumer/report", opts)
	if err != nil || busy != nil {
		return fmt.Errorf("acquire: err %v, busy %v", err, busy)
	}
	defer l.Close()

	other := opts
	other.Holder = "consumer-b"
	if _, busy, err := client.Acquire(ctx, "consumer/report", other); err != nil || busy == nil || busy.Holder != "consumer-a" {
		return fmt.Errorf("second acquire while held: want not granted to consumer-a, got busy %+v, err %v", busy, err)
	}

	work, stop := l.Context(ctx) // the guard: cancelled the moment the lease may be gone
	defer stop()
	if work.Err() != nil || l.FencingToken() == 0 {
		return fmt.Errorf("guard: context %v, token %d", work.Err(), l.FencingToken())
	}
	check, err := client.CheckToken(ctx, "consumer/report", l.FencingToken())
	if err != nil || !check.Current {
		return fmt.Errorf("check token %d while held: %+v, %v", l.FencingToken(), check, err)
	}

	// The guard's metadata, as a fenced service's interceptor receives it: accepted once, then
	// refused to an older token.
	fence := fencing.NewInterceptor(fencing.Options{})
	outgoing, _ := metadata.FromOutgoingContext(l.OutgoingContext(ctx))
	handled := func(context.Context, interface{}) (interface{}, error) { return "handled", nil }
	if reply, err := fence.Unary(metadata.NewIncomingContext(ctx, outgoing), nil, &grpc.UnaryServerInfo{}, handled); err != nil || reply != "handled" {
		return fmt.Errorf("fenced call with the lease's metadata: %v, %v", reply, err)
	}
	older := metadata.Pairs(lease.LeaseNameMetadata, l.Name(), lease.FencingTokenMetadata, fmt.Sprint(l.FencingToken()-1))
	if _, err := fence.Unary(metadata.NewIncomingContext(ctx, older), nil, &grpc.UnaryServerInfo{}, handled); status.Code(err) != codes.FailedPrecondition {
		return fmt.Errorf("fenced call with an older token: want FAILED_PRECONDITION, got %v", err)
	}

	if released, err := l.Release(ctx); err != nil || !released {
		return fmt.Errorf("release: released %v, err %v", released, err)
	}
	select {
	case <-work.Done(): // the guard ends with the release
	case <-time.After(5 * time.Second):
		return fmt.Errorf("the lease's context was not cancelled by the release")
	}
	description, err := client.Describe(ctx, "consumer/report")
	if err != nil || description.Held {
		return fmt.Errorf("describe after release: %+v, %v", description, err)
	}
	return nil
}
