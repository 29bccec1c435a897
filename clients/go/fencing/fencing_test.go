package fencing

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// The rules that need no store; fencingtest/ tests every adapter against real ones.

func TestParseTokenTakesOnlyCanonicalDecimalInRange(t *testing.T) {
	for text, want := range map[string]uint64{"1": 1, "1800000000000000": 1_800_000_000_000_000, "9223372036854775807": MaxToken} {
		if token, err := ParseToken("t", text); err != nil || token != want {
			t.Errorf("ParseToken(%q) = %d, %v; want %d", text, token, err, want)
		}
	}
	for _, text := range []string{"", "0", "-5", "+5", "05", "12a", " 5", "5 ", "9223372036854775808", "18446744073709551616", "1e3", "٣"} {
		_, err := ParseToken("leased-fencing-token", text)
		var invalid *InvalidInputError
		if !errors.As(err, &invalid) || !strings.HasPrefix(invalid.Message, "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not ") {
			t.Errorf("ParseToken(%q): want an InvalidInputError naming the argument, got %v", text, err)
		}
	}
}

func TestCheckTokenBoundary(t *testing.T) {
	if err := CheckToken("token", MaxToken); err != nil {
		t.Errorf("2^63-1: %v", err)
	}
	for _, token := range []uint64{0, MaxToken + 1} {
		if err := CheckToken("token", token); err == nil {
			t.Errorf("%d: accepted", token)
		}
	}
}

func TestRedisErrorsMapToTheSameErrors(t *testing.T) {
	stale := redisError(errors.New("STALETOKEN stale fencing token 5 for fence:{o}: the highest seen is 9223372036854775807"), "fence:{o}", 5)
	var staleErr *StaleTokenError
	if !errors.As(stale, &staleErr) || staleErr.Mark != MaxToken || staleErr.Token != 5 || staleErr.Resource != "fence:{o}" {
		t.Errorf("STALETOKEN: %#v", stale)
	}
	bad := redisError(errors.New("BADTOKEN token must be a fencing token from 1 to 9223372036854775807, not 'x'"), "m", 5)
	var invalid *InvalidInputError
	if !errors.As(bad, &invalid) || !strings.HasPrefix(invalid.Message, "token must be") {
		t.Errorf("BADTOKEN: %#v", bad)
	}
	other := errors.New("ERR unknown function")
	if redisError(other, "m", 5) != other {
		t.Error("another error is not returned as it is")
	}
}

func TestMarkInStaleMessageReadsEitherDriver(t *testing.T) {
	for message, want := range map[string]uint64{
		"pq: stale fencing token 5 for resource 'r': the highest seen is 7":                     7,
		"ERROR: stale fencing token 5 for resource 'r': the highest seen is 7 (SQLSTATE LF001)": 7,
	} {
		if mark, ok := markInStaleMessage(message); !ok || mark != want {
			t.Errorf("%q: %d, %v", message, mark, ok)
		}
	}
}

func TestMemoryMarksPassEqualAndRefuseSmaller(t *testing.T) {
	marks := NewMemoryMarks()
	ctx := context.Background()
	for _, token := range []uint64{5, 5, 9} {
		if err := marks.Fence(ctx, "n", token); err != nil {
			t.Fatalf("token %d: %v", token, err)
		}
	}
	var stale *StaleTokenError
	if err := marks.Fence(ctx, "n", 8); !errors.As(err, &stale) || stale.Mark != 9 {
		t.Fatalf("token 8 after 9: %v", err)
	}
	if err := marks.Fence(ctx, "other", 1); err != nil {
		t.Fatalf("another name has its own mark: %v", err)
	}
}

func TestTurnsAreDroppedWhenNoCallHoldsThem(t *testing.T) {
	turns := turns{names: map[string]*turn{}}
	release, err := turns.take(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := turns.take(ctx, "n"); err == nil {
		t.Fatal("a second call took a held turn")
	}
	release()
	if len(turns.names) != 0 {
		t.Fatalf("%d turns left behind", len(turns.names))
	}
}

// BenchmarkUnaryInterceptor is the interceptor's cost per call with marks in process: reading
// the metadata, the name's turn, the mark (no network; go test -bench Unary ./fencing).
func BenchmarkUnaryInterceptor(b *testing.B) {
	fence := NewInterceptor(Options{})
	ctx := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("leased-lease-name", "bench", "leased-fencing-token", "1795923240368830"))
	handler := func(context.Context, interface{}) (interface{}, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/bench.Service/Call"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := fence.Unary(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
