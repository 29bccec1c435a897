package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leased-dev/leased/clients/go/internal/leasedtest"
	"github.com/leased-dev/leased/clients/go/lease"
)

var stack *leasedtest.Stack

func TestMain(m *testing.M) {
	var err error
	stack, err = leasedtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot start redis-server and leased:", err)
		os.Exit(1)
	}
	code := m.Run()
	stack.Stop()
	os.Exit(code)
}

// output is a bytes.Buffer that the example and the test may use at once.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func client(t *testing.T) *lease.Client {
	conn, err := leasedtest.Dial(stack.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return lease.NewClient(conn)
}

func TestExampleWorksThenReleases(t *testing.T) {
	var stdout, stderr output
	// The work outlasts the TTL twice over: the keepalive holds the lease meanwhile.
	code := run(context.Background(), []string{"-addr", stack.Addr, "-name", "go-example-ok",
		"-ttl", "900ms", "-work", "2s"}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "working with fencing token") ||
		!strings.Contains(stdout.String(), "done; released: true") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	d, err := client(t).Describe(context.Background(), "go-example-ok")
	if err != nil || d.Held {
		t.Fatalf("after the example: Describe = %+v, %v", d, err)
	}
}

func TestExampleReportsABusyLease(t *testing.T) {
	ctx := context.Background()
	l, _, err := client(t).Acquire(ctx, "go-example-busy", lease.Options{TTL: 10 * time.Second, Holder: "someone"})
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer l.Close()
	var stdout, stderr output
	code := run(ctx, []string{"-addr", stack.Addr, "-name", "go-example-busy", "-wait", "0s"}, &stdout, &stderr)
	if code != exitBusy || !strings.Contains(stdout.String(), `busy: held by "someone"`) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}

func TestExampleStopsItsWorkWhenTheLeaseIsLost(t *testing.T) {
	var stdout, stderr output
	exited := make(chan int, 1)
	go func() {
		exited <- run(context.Background(), []string{"-addr", stack.Addr, "-name", "go-example-lost",
			"-ttl", "1500ms", "-work", "1m"}, &stdout, &stderr)
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stdout.String(), "granted"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not granted within 10 s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	}
	if _, err := client(t).Revoke(context.Background(), "go-example-lost", "test", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != exitLost || !strings.Contains(stderr.String(), "revoked: test") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the example did not stop within 10 s of the revoke")
	}
}
