package fencingtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/leased-dev/leased/clients/go/fencing"
	"github.com/leased-dev/leased/clients/go/lease"
)

const (
	maxToken   = fencing.MaxToken // 2^63-1: accepted
	aboveRange = maxToken + 1     // 2^63: refused
)

func wantInvalid(t *testing.T, err error, what, prefix string) {
	t.Helper()
	var invalid *fencing.InvalidInputError
	if !errors.As(err, &invalid) {
		t.Fatalf("%s: want an *InvalidInputError, got %T: %v", what, err, err)
	}
	if !strings.HasPrefix(invalid.Message, prefix) {
		t.Fatalf("%s: the message %q does not start with %q", what, invalid.Message, prefix)
	}
}

func wantStale(t *testing.T, err error, what string, token, mark uint64) {
	t.Helper()
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) {
		t.Fatalf("%s: want a *StaleTokenError, got %T: %v", what, err, err)
	}
	if stale.Token != token || stale.Mark != mark {
		t.Fatalf("%s: refused token %d with mark %d, want %d and %d", what, stale.Token, stale.Mark, token, mark)
	}
}

// inTx runs f in a transaction and returns its error, rolling back.
func inTx(t *testing.T, f func(tx *sql.Tx) error) error {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() // after a commit, a no-op
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func TestPostgresBadInputAndTheBoundary(t *testing.T) {
	ctx := context.Background()
	const resource = "boundary-postgres"
	// Out of range: refused before anything is sent, so the transaction stays usable.
	for _, token := range []uint64{0, aboveRange, ^uint64(0)} {
		err := inTx(t, func(tx *sql.Tx) error {
			err := fencing.Postgres(ctx, tx, resource, token)
			var one int
			if scanErr := tx.QueryRow("SELECT 1").Scan(&one); scanErr != nil {
				t.Fatalf("token %d: the transaction is no longer usable: %v", token, scanErr)
			}
			return err
		})
		wantInvalid(t, err, fmt.Sprint("token ", token), "token must be a fencing token from 1 to 9223372036854775807, not ")
	}
	// PostgreSQL's own refusals of bad input, SQLSTATE 22023.
	err := inTx(t, func(tx *sql.Tx) error { return fencing.Postgres(ctx, tx, "", 5) })
	wantInvalid(t, err, "an empty resource", "resource must be a non-empty resource key")
	err = inTx(t, func(tx *sql.Tx) error { return fencing.Postgres(ctx, tx, strings.Repeat("r", 1025), 5) })
	wantInvalid(t, err, "a 1025-byte resource", "resource must be at most 1024 bytes")

	// 2^63-1 is accepted, and stays the mark: equal passes, below is refused.
	if err := inTx(t, func(tx *sql.Tx) error { return fencing.Postgres(ctx, tx, resource, maxToken) }); err != nil {
		t.Fatalf("token 2^63-1: %v", err)
	}
	if err := inTx(t, func(tx *sql.Tx) error { return fencing.Postgres(ctx, tx, resource, maxToken) }); err != nil {
		t.Fatalf("token 2^63-1 again (equal to the mark): %v", err)
	}
	err = inTx(t, func(tx *sql.Tx) error { return fencing.Postgres(ctx, tx, resource, 5) })
	wantStale(t, err, "token 5 after 2^63-1", 5, maxToken)
}

func TestPostgresRowFormBadInputAndTheBoundary(t *testing.T) {
	upsert := func(token int64) error {
		_, err := db.Exec("INSERT INTO fenced_rows (id, body, fencing_token) VALUES ('boundary', 'b', $1) "+
			"ON CONFLICT (id) DO UPDATE SET body = excluded.body, fencing_token = excluded.fencing_token", token)
		return fencing.PostgresError(err, "fenced_rows row boundary", uint64(token))
	}
	for _, token := range []int64{0, -5} {
		wantInvalid(t, upsert(token), fmt.Sprint("fencing_token ", token), "fencing_token must be a fencing token from 1 to 9223372036854775807, not ")
	}
	if err := upsert(int64(maxToken)); err != nil {
		t.Fatalf("fencing_token 2^63-1: %v", err)
	}
	wantStale(t, upsert(5), "fencing_token 5 after 2^63-1", 5, maxToken)
}

func TestRedisBadInputAndTheBoundary(t *testing.T) {
	ctx := context.Background()
	fenced := fencing.NewRedis(poolDoer(resource))
	mark, doc := redisKeys("boundary-redis")
	for _, token := range []uint64{0, aboveRange} {
		_, err := fenced.Set(ctx, mark, doc, token, "v")
		wantInvalid(t, err, fmt.Sprint("token ", token), "token must be a fencing token from 1 to 9223372036854775807, not ")
	}
	conn := resource.Get()
	defer conn.Close()
	if n, err := redis.Int(conn.Do("EXISTS", mark, doc)); err != nil || n != 0 {
		t.Fatalf("a refused token wrote something: EXISTS = %d, %v", n, err)
	}
	// Redis's own refusal (BADTOKEN), for a token the helper cannot send: through the same
	// client, mapped the same way.
	err := fencing.NewRedis(fencing.RedisDoFunc(func(ctx context.Context, command string, args ...interface{}) (interface{}, error) {
		args[3] = "-5" // FCALL leased_fence 1 <mark> <token>
		return poolDoer(resource)(ctx, command, args...)
	})).Fence(ctx, mark, 5)
	wantInvalid(t, err, "token -5 sent to Redis", "token must be a fencing token from 1 to 9223372036854775807, not '-5'")

	if _, err := fenced.Set(ctx, mark, doc, maxToken, "max"); err != nil {
		t.Fatalf("token 2^63-1: %v", err)
	}
	if _, err := fenced.HSet(ctx, mark, "{boundary-redis}:hash", maxToken, "field", "max"); err != nil {
		t.Fatalf("HSET with token 2^63-1 (equal to the mark): %v", err)
	}
	_, err = fenced.Set(ctx, mark, doc, 5, "stale")
	wantStale(t, err, "SET with token 5 after 2^63-1", 5, maxToken)
	_, err = fenced.Del(ctx, mark, 5, doc)
	wantStale(t, err, "DEL with token 5 after 2^63-1", 5, maxToken)
	wantStale(t, fenced.Fence(ctx, mark, 5), "Fence with token 5 after 2^63-1", 5, maxToken)
	if body, err := redis.String(conn.Do("GET", doc)); err != nil || body != "max" {
		t.Fatalf("the document holds %q (%v), not the last accepted write", body, err)
	}
	if n, err := fenced.Del(ctx, mark, maxToken, doc); err != nil || n.(int64) != 1 {
		t.Fatalf("DEL with the mark's token: %v, %v", n, err)
	}
}

// callWrite calls the in-process-marks server's Write with md as the call's metadata.
func callWrite(conn *grpc.ClientConn, md metadata.MD, key string) error {
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	defer cancel()
	return conn.Invoke(ctx, writeMethod, wrapperspb.String(key+"\nbody"), new(wrapperspb.StringValue))
}

func TestInterceptorRefusesBadMetadata(t *testing.T) {
	server := service.memoryMarks
	conn, err := dialService(server.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const name, token = lease.LeaseNameMetadata, lease.FencingTokenMetadata
	cases := []struct {
		md   metadata.MD
		want string
	}{
		{metadata.MD{}, "this service is fenced: the call needs leased-lease-name and leased-fencing-token metadata"},
		{metadata.Pairs(token, "5"), "leased-lease-name is missing"},
		{metadata.Pairs(name, "bad-meta"), "leased-fencing-token is missing"},
		{metadata.Pairs(name, "", token, "5"), "leased-lease-name must not be empty"},
		{metadata.Pairs(name, "bad-meta", token, "5", token, "6"), "leased-fencing-token must be given once"},
	}
	for _, bad := range []string{"0", "-5", "05", "12a", "+5", " 5", "", "9223372036854775808", "18446744073709551616", strings.Repeat("9", 60)} {
		cases = append(cases, struct {
			md   metadata.MD
			want string
		}{metadata.Pairs(name, "bad-meta", token, bad), `leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not "`})
	}
	before := server.handlerRuns()
	for _, c := range cases {
		err := callWrite(conn, c.md, "bad-meta")
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("metadata %v: want INVALID_ARGUMENT %q, got %v", c.md, c.want, err)
		}
	}
	if runs := server.handlerRuns() - before; runs != 0 {
		t.Fatalf("the handler ran %d times for refused calls", runs)
	}
	long := callWrite(conn, metadata.Pairs(name, "bad-meta", token, strings.Repeat("9", 60)), "bad-meta")
	if message := status.Convert(long).Message(); !strings.HasSuffix(message, `not "`+strings.Repeat("9", 40)+`"…`) {
		t.Errorf("a 60-character token is not cut to 40 in %q", message)
	}

	// The boundary: 2^63-1 passes and stays the mark; below it is refused, naming both tokens.
	if err := callWrite(conn, metadata.Pairs(name, "boundary-grpc", token, "9223372036854775807"), "boundary-grpc"); err != nil {
		t.Fatalf("token 2^63-1: %v", err)
	}
	err = callWrite(conn, metadata.Pairs(name, "boundary-grpc", token, "5"), "boundary-grpc")
	want := `stale fencing token 5 for lease "boundary-grpc": the highest seen is 9223372036854775807`
	if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != want {
		t.Fatalf("token 5 after 2^63-1: want FAILED_PRECONDITION %q, got %v", want, err)
	}
}

// fencedServer starts a server of the test service behind an interceptor with opts, and
// connects to it; both end with the test.
func fencedServer(t *testing.T, opts fencing.Options) (*docServer, *grpc.ClientConn) {
	fence := fencing.NewInterceptor(opts)
	server, err := startDocServer(grpc.UnaryInterceptor(fence.Unary), grpc.StreamInterceptor(fence.Stream))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.server.Stop)
	conn, err := dialService(server.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return server, conn
}

func TestInterceptorOptionalLetsUnmarkedCallsThrough(t *testing.T) {
	_, conn := fencedServer(t, fencing.Options{Optional: true})
	if err := callWrite(conn, metadata.MD{}, "optional"); err != nil {
		t.Fatalf("a call without metadata, fencing optional: %v", err)
	}
	// A call that carries a token is still checked.
	if err := callWrite(conn, metadata.Pairs(lease.LeaseNameMetadata, "optional", lease.FencingTokenMetadata, "0"), "optional"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("token 0, fencing optional: want INVALID_ARGUMENT, got %v", err)
	}
}

func TestInterceptorStoreFailureIsUnavailable(t *testing.T) {
	// A PostgreSQL that is not there: nothing listens on port 1.
	gone, err := sql.Open("postgres", "postgresql://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	server, conn := fencedServer(t, fencing.Options{Marks: fencing.NewPostgresMarks(gone, "grpc:")})
	err = callWrite(conn, metadata.Pairs(lease.LeaseNameMetadata, "store-down", lease.FencingTokenMetadata, "5"), "store-down")
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "the fencing mark store failed") {
		t.Fatalf("a store that fails: want UNAVAILABLE, got %v", err)
	}
	if server.handlerRuns() != 0 {
		t.Fatal("the handler ran although the store failed")
	}
}

// TestStreamInterceptorChecksTheStart: a stream is checked when it starts, with the same
// refusals as a unary call.
func TestStreamInterceptorChecksTheStart(t *testing.T) {
	conn, err := dialService(service.memoryMarks.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	appendTwo := func(md metadata.MD) (string, error) {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
		defer cancel()
		stream, err := conn.NewStream(ctx, &docsDesc.Streams[0], appendMethod)
		if err != nil {
			return "", err
		}
		for _, body := range []string{"one", "two"} {
			if err := stream.SendMsg(wrapperspb.String("stream\n" + body)); err != nil {
				break // the server ended the call: RecvMsg says why
			}
		}
		if err := stream.CloseSend(); err != nil {
			return "", err
		}
		reply := new(wrapperspb.StringValue)
		err = stream.RecvMsg(reply)
		return reply.Value, err
	}
	pairs := func(token string) metadata.MD {
		return metadata.Pairs(lease.LeaseNameMetadata, "stream", lease.FencingTokenMetadata, token)
	}
	if reply, err := appendTwo(pairs("10")); err != nil || reply != "2 written" {
		t.Fatalf("a stream with token 10: %q, %v", reply, err)
	}
	if _, err := appendTwo(pairs("9")); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a stream with token 9 after 10: want FAILED_PRECONDITION, got %v", err)
	}
	if _, err := appendTwo(pairs("12a")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a stream with token 12a: want INVALID_ARGUMENT, got %v", err)
	}
	if _, err := appendTwo(metadata.MD{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a stream without metadata: want INVALID_ARGUMENT, got %v", err)
	}
}

// TestUnaryHandlersOfANameTakeTurns: the in-process form of the paused holder. A call with
// token 10 whose handler stalls mid-write holds its name's turn; a call with token 11 that
// arrives meanwhile waits for it, so the writes land in token order and the resource ends with
// the newer call's body. A call with token 9 that waits behind them is refused.
func TestUnaryHandlersOfANameTakeTurns(t *testing.T) {
	server, conn := fencedServer(t, fencing.Options{})
	call := func(token, body string) error {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(),
			metadata.Pairs(lease.LeaseNameMetadata, "turns", lease.FencingTokenMetadata, token)), 10*time.Second)
		defer cancel()
		return conn.Invoke(ctx, writeMethod, wrapperspb.String("turns\n"+body), new(wrapperspb.StringValue))
	}
	stalled := make(chan error, 1)
	go func() { stalled <- call("10", "pause 400ms") }()
	time.Sleep(100 * time.Millisecond) // the stalled call has its turn by now
	if err := call("11", "newer"); err != nil {
		t.Fatalf("token 11: %v", err)
	}
	if err := <-stalled; err != nil {
		t.Fatalf("token 10 (stalled): %v", err)
	}
	if err := call("9", "older"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("token 9 after 11: want FAILED_PRECONDITION, got %v", err)
	}
	if tokens, body := server.tokens("turns"), server.body("turns"); fmt.Sprint(tokens) != "[10 11]" || body != "newer" {
		t.Fatalf("the writes landed as %v and the resource holds %q; want [10 11] and \"newer\"", tokens, body)
	}
}
