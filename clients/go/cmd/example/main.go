// Command example holds a lease while it works, as a job of a fleet would: it acquires the
// lease (waiting while it is busy, and saying whom it waits on), passes the fencing token to its
// work, stops the work the moment the lease may be lost, and releases it. Ctrl-C gives up the
// wait, or stops the work.
//
//	go run ./cmd/example -addr 127.0.0.1:50051 -name nightly-report -ttl 15s -wait 1m -work 10s
//
// Exit status, as `leased run`: 0 when the work is done, 75 when the lease stayed busy, 76
// when it was lost during the work, 1 on other errors.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/leased-dev/leased/clients/go/lease"
)

const (
	exitBusy = 75
	exitLost = 76
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("example", flag.ContinueOnError)
	flags.SetOutput(stderr)
	addr := flags.String("addr", "127.0.0.1:50051", "leased's address, host:port")
	name := flags.String("name", "go-example", "the lease to hold")
	ttl := flags.Duration("ttl", 15*time.Second, "the lease's TTL (renewed every third of it)")
	wait := flags.Duration("wait", time.Minute, "how long to wait for a busy lease")
	work := flags.Duration("work", 5*time.Second, "how long the work takes")
	if err := flags.Parse(args); err != nil {
		return 2
	}

	conn, err := grpc.Dial(*addr, grpc.WithInsecure())
	if err != nil {
		fmt.Fprintln(stderr, "example:", err)
		return 1
	}
	defer conn.Close()
	client := lease.NewClient(conn)

	l, busy, err := client.Acquire(ctx, *name, lease.Options{
		TTL:  *ttl,
		Wait: *wait,
		OnWaiting: func(w lease.Waiting) {
			fmt.Fprintf(stdout, "waiting: held by %q (token %d), position %d\n", w.Holder, w.FencingToken, w.Position)
		},
	})
	if err != nil {
		fmt.Fprintln(stderr, "example: acquire:", err)
		return 1
	}
	if busy != nil {
		fmt.Fprintf(stdout, "busy: held by %q (token %d)\n", busy.Holder, busy.FencingToken)
		return exitBusy
	}
	defer l.Close() // a no-op after the Release below; releases on the early returns
	fmt.Fprintf(stdout, "granted %s with fencing token %d\n", l.Name(), l.FencingToken())

	// The work runs under a context that ends when the lease may be gone.
	workCtx, stopWork := l.Context(ctx)
	err = doWork(workCtx, l.FencingToken(), *work, stdout)
	stopWork()
	if lost := l.Err(); lost != nil {
		fmt.Fprintln(stderr, "example: stopped:", lost)
		return exitLost
	}
	if err != nil {
		fmt.Fprintln(stderr, "example: stopped:", err)
		return 1
	}
	releaseCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	released, err := l.Release(releaseCtx)
	if err != nil {
		fmt.Fprintln(stderr, "example: release:", err)
		return 1
	}
	fmt.Fprintf(stdout, "done; released: %v\n", released)
	return 0
}

// doWork stands for the work the lease protects: every second it would write to a resource,
// passing the fencing token so that the resource can refuse a holder that was fenced off.
func doWork(ctx context.Context, fencingToken uint64, duration time.Duration, out io.Writer) error {
	done := time.NewTimer(duration)
	defer done.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			fmt.Fprintf(out, "working with fencing token %d\n", fencingToken)
		}
	}
}
