// Command leased-consumer uses the installed client module against the leased at $LEASED_ADDR:
// acquire, a second caller told who holds it, guard work with the lease's context and fencing
// token, CheckToken, release, and the lease free afterwards. It exits 1 at the first surprise.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/leased-dev/leased/clients/go/lease"
)

func main() {
	if err := run(os.Getenv("LEASED_ADDR")); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	fmt.Println("consumer: acquire, guard, check, release: ok")
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
