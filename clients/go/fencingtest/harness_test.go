package fencingtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	_ "github.com/lib/pq"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	"github.com/leased-dev/leased/clients/go/fencing"
	"github.com/leased-dev/leased/clients/go/internal/leasedtest"
	"github.com/leased-dev/leased/clients/go/lease"
)

// repo is the repository's root: the tests read fencing/ and scripts/ from it.
var repo = filepath.Join("..", "..", "..")

// The parts every test shares: leased on its redis-server, PostgreSQL with leased_fencing.sql
// applied, a second redis-server as the resource with the leased_fencing library loaded, and
// the test's gRPC service (see service_test.go).
var (
	stack       *leasedtest.Stack
	postgresURL string
	db          *sql.DB
	resourceURL string // the resource Redis's host:port
	resource    *redis.Pool
	service     *services
)

// schema is the tables the adapters write. docs: the resource of the fence form (its key is
// the resource key); fenced_rows and plain_rows: the row form, with and without the trigger;
// history: every accepted write's token, in the order the writes took the resource's lock.
const schema = `
CREATE TABLE docs (id text PRIMARY KEY, body text NOT NULL);
CREATE TABLE fenced_rows (id text PRIMARY KEY, body text NOT NULL, fencing_token bigint NOT NULL);
CREATE TRIGGER fenced_rows_fencing BEFORE INSERT OR UPDATE ON fenced_rows
  FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
CREATE TABLE plain_rows (id text PRIMARY KEY, body text NOT NULL, fencing_token bigint NOT NULL);
CREATE TABLE history (id bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL);
`

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holderMain()) // this binary, re-executed as holder 1 (holder_test.go)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencingtest:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	stack, err = leasedtest.Start()
	if err != nil {
		return 1, fmt.Errorf("cannot start redis-server and leased: %w", err)
	}
	defer stack.Stop()
	postgresURL, err = stack.StartPostgres(filepath.Join(repo, "scripts", "postgres-scratch.sh"), func(url string) error {
		probe, err := sql.Open("postgres", url)
		if err != nil {
			return err
		}
		defer probe.Close()
		return probe.Ping()
	})
	if err != nil {
		return 1, fmt.Errorf("cannot start PostgreSQL: %w", err)
	}
	if db, err = openPostgres(postgresURL); err != nil {
		return 1, err
	}
	defer db.Close()
	sqlFile, err := os.ReadFile(filepath.Join(repo, "fencing", "postgres", "leased_fencing.sql"))
	if err != nil {
		return 1, err
	}
	if _, err := db.Exec(string(sqlFile)); err != nil {
		return 1, fmt.Errorf("applying leased_fencing.sql: %w", err)
	}
	if _, err := db.Exec(schema); err != nil {
		return 1, fmt.Errorf("creating the tables: %w", err)
	}

	if resourceURL, err = stack.StartRedis(); err != nil {
		return 1, fmt.Errorf("cannot start the resource's redis-server: %w", err)
	}
	resource = newPool(resourceURL)
	defer resource.Close()
	library, err := os.ReadFile(filepath.Join(repo, "fencing", "redis", "leased_fencing.lua"))
	if err != nil {
		return 1, err
	}
	conn := resource.Get()
	_, err = conn.Do("FUNCTION", "LOAD", "REPLACE", library)
	conn.Close()
	if err != nil {
		return 1, fmt.Errorf("loading leased_fencing.lua: %w", err)
	}

	if service, err = startServices(); err != nil {
		return 1, err
	}
	defer service.stop()
	return m.Run(), nil
}

func openPostgres(url string) (*sql.DB, error) {
	db, err := sql.Open("postgres", url)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(20)
	return db, db.Ping()
}

func newPool(addr string) *redis.Pool {
	return &redis.Pool{
		MaxIdle: 8,
		Dial:    func() (redis.Conn, error) { return redis.Dial("tcp", addr) },
	}
}

// poolDoer is the resource Redis as a fencing.RedisDoer: one pooled connection per command,
// so it is safe for concurrent use.
func poolDoer(pool *redis.Pool) fencing.RedisDoFunc {
	return func(ctx context.Context, command string, args ...interface{}) (interface{}, error) {
		conn, err := pool.GetContext(ctx)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.Do(command, args...)
	}
}

// The test service and its callers, holder processes included, encode with protoCodec.
func init() { encoding.RegisterCodec(protoCodec{}) }

// protoCodec encodes with google.golang.org/protobuf, for the test service and its callers:
// Debian's grpc-go encodes through github.com/golang/protobuf 1.3, which cannot (see
// lease/codec.go).
type protoCodec struct{}

func (protoCodec) Marshal(v interface{}) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (protoCodec) Unmarshal(data []byte, v interface{}) error {
	return proto.Unmarshal(data, v.(proto.Message))
}
func (protoCodec) Name() string { return "proto" }

// leaseClient is a client of the test's leased on its own connection.
func leaseClient(t testing.TB) *lease.Client {
	conn, err := leasedtest.Dial(stack.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return lease.NewClient(conn)
}

// acquire acquires name, waiting up to 10 s, or fails the test.
func acquire(t testing.TB, client *lease.Client, name string, ttl time.Duration) *lease.Lease {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	l, busy, err := client.Acquire(ctx, name, lease.Options{TTL: ttl, Wait: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquiring %q: %v", name, err)
	}
	if busy != nil {
		t.Fatalf("acquiring %q: still held by %q after 10 s", name, busy.Holder)
	}
	return l
}

// dialService opens a connection to one of the test service's servers.
func dialService(addr string) (*grpc.ClientConn, error) {
	return grpc.Dial(addr, grpc.WithInsecure())
}
