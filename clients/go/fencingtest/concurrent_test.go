package fencingtest

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/leased-dev/leased/clients/go/internal/leasedtest"
	"github.com/leased-dev/leased/clients/go/lease"
)

// pauser freezes a writer's lease renewals, as a paused process would: while it holds mu, no
// renewal leaves the writer's connection to leased, so leased expires the lease after its TTL
// and grants it to another writer, while this one still means to write.
type pauser struct{ mu sync.RWMutex }

func (p *pauser) pause(d time.Duration) {
	p.mu.Lock()
	time.Sleep(d)
	p.mu.Unlock()
}

// renewals holds each message a Renew stream sends until the pause is over.
func (p *pauser) renewals(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	stream, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/Renew") {
		return stream, err
	}
	return &pausedStream{ClientStream: stream, pauser: p}, nil
}

type pausedStream struct {
	grpc.ClientStream
	pauser *pauser
}

func (s *pausedStream) SendMsg(m interface{}) error {
	s.pauser.mu.RLock()
	s.pauser.mu.RUnlock() // only waits for the pause to end
	return s.ClientStream.SendMsg(m)
}

// TestConcurrentWritersWithPauses runs 4 writers per adapter for 3 s: each acquires the lease
// (TTL 200 ms), pauses for 0 to 400 ms with its renewals frozen (so half the time its lease
// expires and another writer gets it), then writes with its token. Afterwards the resource's
// history of accepted tokens must strictly increase (no write accepted after a newer one: 0
// stale writes accepted), and hold exactly the writes the writers saw accepted.
func TestConcurrentWritersWithPauses(t *testing.T) {
	for _, kind := range allKinds {
		kind := kind
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			concurrentWriters(t, kind)
		})
	}
}

func concurrentWriters(t *testing.T, kind string) {
	const (
		writers         = 4
		runFor          = 3 * time.Second
		writesPerWriter = 40 // a bound besides the time
		ttl             = 200 * time.Millisecond
	)
	tg := targetFor(kind, true)
	name := "concurrent-" + kind
	deadline := time.Now().Add(runFor)
	var (
		mu       sync.Mutex
		accepted []uint64
		stale    int
		wg       sync.WaitGroup
	)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := &pauser{}
			conn, err := leasedtest.Dial(stack.Addr, grpc.WithStreamInterceptor(p.renewals))
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			client := lease.NewClient(conn)
			w, err := newWriter(tg)
			if err != nil {
				t.Error(err)
				return
			}
			defer w.close()
			random := rand.New(rand.NewSource(time.Now().UnixNano() + int64(i)))
			for n := 0; n < writesPerWriter && time.Now().Before(deadline); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l, busy, err := client.Acquire(ctx, name, lease.Options{TTL: ttl, Wait: 5 * time.Second})
				if err != nil || busy != nil {
					cancel()
					t.Errorf("writer %d: acquiring: %v %v", i, err, busy)
					return
				}
				p.pause(time.Duration(random.Int63n(int64(2 * ttl))))
				err = w.write(ctx, l, name, fmt.Sprintf("writer %d", i))
				mu.Lock()
				switch {
				case err == nil:
					accepted = append(accepted, l.FencingToken())
				case isStale(err):
					stale++
				default:
					t.Errorf("writer %d, token %d: %v", i, l.FencingToken(), err)
				}
				mu.Unlock()
				_ = l.Close()
				cancel()
			}
		}(i)
	}
	wg.Wait()

	tokens, err := history(tg, name)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("the resource accepted token %d after %d (write %d of %d): a stale write", tokens[i], tokens[i-1], i+1, len(tokens))
		}
	}
	sort.Slice(accepted, func(i, j int) bool { return accepted[i] < accepted[j] })
	if fmt.Sprint(accepted) != fmt.Sprint(tokens) {
		t.Fatalf("the writers saw %d writes accepted, the resource holds %d:\n%v\n%v", len(accepted), len(tokens), accepted, tokens)
	}
	if len(tokens) < 3 {
		t.Fatalf("only %d writes accepted in %s", len(tokens), runFor)
	}
	t.Logf("%s: %d writes accepted, %d refused as stale; the accepted tokens strictly increase (0 stale writes accepted)",
		kind, len(tokens), stale)
}
