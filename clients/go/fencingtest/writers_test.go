package fencingtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/gomodule/redigo/redis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/leased-dev/leased/clients/go/fencing"
	"github.com/leased-dev/leased/clients/go/lease"
)

// The adapters under test, each as a writer a program would be: it writes a body under a
// lease's token to the resource named key, fenced or (to show what fencing prevents) not.
const (
	postgresFence     = "postgres-fence"      // fencing.Postgres, then the write, in one transaction
	postgresRow       = "postgres-row"        // the row form: a fencing_token column and its trigger
	redisResource     = "redis"               // fencing.Redis.Set (leased_set)
	grpcMemoryMarks   = "grpc-memory-marks"   // the interceptor, marks in process
	grpcPostgresMarks = "grpc-postgres-marks" // the interceptor, marks in PostgreSQL
	grpcRedisMarks    = "grpc-redis-marks"    // the interceptor, marks in Redis
)

var allKinds = []string{postgresFence, postgresRow, redisResource, grpcMemoryMarks, grpcPostgresMarks, grpcRedisMarks}

// target is what a writer needs to reach its resource: plain values, so that a holder process
// builds the same writer from its environment.
type target struct {
	Kind     string
	Fenced   bool
	Postgres string // URL
	Redis    string // the resource Redis's host:port
	Service  string // the gRPC server's host:port
}

func targetFor(kind string, fenced bool) target {
	return target{Kind: kind, Fenced: fenced, Postgres: postgresURL, Redis: resourceURL,
		Service: service.server(kind, fenced).addr}
}

type writer interface {
	write(ctx context.Context, l *lease.Lease, key, body string) error
	close()
}

func newWriter(t target) (writer, error) {
	switch t.Kind {
	case postgresFence, postgresRow:
		db, err := openPostgres(t.Postgres)
		if err != nil {
			return nil, err
		}
		return &postgresWriter{db: db, rowForm: t.Kind == postgresRow, fenced: t.Fenced}, nil
	case redisResource:
		pool := newPool(t.Redis)
		conn := pool.Get()
		defer conn.Close()
		if _, err := conn.Do("PING"); err != nil {
			return nil, err
		}
		return &redisWriter{pool: pool, fenced: t.Fenced}, nil
	default:
		conn, err := dialService(t.Service)
		if err != nil {
			return nil, err
		}
		return &grpcWriter{conn: conn}, nil
	}
}

// postgresWriter upserts the document and records its token in history, in one transaction:
// fenced by fencing.Postgres first (the fence form), or by the trigger on fenced_rows (the row
// form); plain_rows has no trigger.
type postgresWriter struct {
	db      *sql.DB
	rowForm bool
	fenced  bool
}

func (w *postgresWriter) write(ctx context.Context, l *lease.Lease, key, body string) error {
	token := l.FencingToken()
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after a commit, a no-op
	if w.rowForm {
		table := "plain_rows"
		if w.fenced {
			table = "fenced_rows"
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, body, fencing_token) VALUES ($1, $2, $3) "+
			"ON CONFLICT (id) DO UPDATE SET body = excluded.body, fencing_token = excluded.fencing_token",
			key, body, int64(token))
		if err := fencing.PostgresError(err, table+" row "+key, token); err != nil {
			return err
		}
	} else {
		if w.fenced {
			if err := fencing.Postgres(ctx, tx, key, token); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO docs (id, body) VALUES ($1, $2) "+
			"ON CONFLICT (id) DO UPDATE SET body = excluded.body", key, body)
		if err != nil {
			return err
		}
	}
	// Under the lock the fenced write took (the mark's row, or the document's row), so the ids
	// follow the order in which the writes took the resource.
	if _, err := tx.ExecContext(ctx, "INSERT INTO history (resource, token) VALUES ($1, $2)", key, int64(token)); err != nil {
		return err
	}
	return tx.Commit()
}

func (w *postgresWriter) close() { w.db.Close() }

func (w *postgresWriter) read(key string) (string, error) {
	table := "docs"
	if w.rowForm {
		table = "plain_rows"
		if w.fenced {
			table = "fenced_rows"
		}
	}
	var body string
	err := w.db.QueryRow("SELECT body FROM "+table+" WHERE id = $1", key).Scan(&body)
	return body, err
}

func postgresHistory(key string) ([]uint64, error) {
	rows, err := db.Query("SELECT token FROM history WHERE resource = $1 ORDER BY id", key)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tokens []uint64
	for rows.Next() {
		var token int64
		if err := rows.Scan(&token); err != nil {
			return nil, err
		}
		tokens = append(tokens, uint64(token))
	}
	return tokens, rows.Err()
}

// redisWriter SETs "<token>:<body>" in the key "{key}:doc", fenced by the mark "fence:{key}"
// (fencing.Redis.Set) or not (a plain SET). SET's GET option answers the value it replaced:
// each accepted write links its token to the one before it, and chains rebuilds the order.
type redisWriter struct {
	pool   *redis.Pool
	fenced bool
}

// redisLinks: per key, "previous token -> token" of each accepted write made by this process.
var redisLinks = struct {
	sync.Mutex
	byKey map[string][][2]uint64
}{byKey: map[string][][2]uint64{}}

func redisKeys(key string) (mark, doc string) { return "fence:{" + key + "}", "{" + key + "}:doc" }

func (w *redisWriter) write(ctx context.Context, l *lease.Lease, key, body string) error {
	token := l.FencingToken()
	mark, doc := redisKeys(key)
	value := fmt.Sprintf("%d:%s", token, body)
	var replaced interface{}
	var err error
	if w.fenced {
		replaced, err = fencing.NewRedis(poolDoer(w.pool)).Set(ctx, mark, doc, token, value, "GET")
	} else {
		conn := w.pool.Get()
		replaced, err = conn.Do("SET", doc, value, "GET")
		conn.Close()
	}
	if err != nil {
		return err
	}
	var previous uint64
	if replaced != nil {
		text, err := redis.String(replaced, nil)
		if err != nil {
			return err
		}
		before, _, _ := strings.Cut(text, ":")
		if previous, err = strconv.ParseUint(before, 10, 64); err != nil {
			return err
		}
	}
	redisLinks.Lock()
	redisLinks.byKey[key] = append(redisLinks.byKey[key], [2]uint64{previous, token})
	redisLinks.Unlock()
	return nil
}

func (w *redisWriter) close() { w.pool.Close() }

func (w *redisWriter) read(key string) (string, error) {
	conn := w.pool.Get()
	defer conn.Close()
	_, doc := redisKeys(key)
	value, err := redis.String(conn.Do("GET", doc))
	_, body, _ := strings.Cut(value, ":")
	return body, err
}

// redisHistory follows the links from the first write (which replaced nothing): the tokens in
// the order Redis applied the writes. A write whose predecessor is missing or taken twice
// would break the chain: an error.
func redisHistory(key string) ([]uint64, error) {
	redisLinks.Lock()
	links := redisLinks.byKey[key]
	redisLinks.Unlock()
	next := map[uint64]uint64{}
	for _, link := range links {
		if _, taken := next[link[0]]; taken {
			return nil, fmt.Errorf("two writes replaced the write of token %d", link[0])
		}
		next[link[0]] = link[1]
	}
	var tokens []uint64
	for token, ok := next[0]; ok; token, ok = next[token] {
		tokens = append(tokens, token)
		if len(tokens) > len(links) {
			return nil, errors.New("the links form a cycle")
		}
	}
	if len(tokens) != len(links) {
		return nil, fmt.Errorf("the chain holds %d of %d writes", len(tokens), len(links))
	}
	return tokens, nil
}

// grpcWriter calls the test service's Write with the lease's metadata attached.
type grpcWriter struct {
	conn *grpc.ClientConn
}

func (w *grpcWriter) write(ctx context.Context, l *lease.Lease, key, body string) error {
	return w.conn.Invoke(l.OutgoingContext(ctx), writeMethod, wrapperspb.String(key+"\n"+body), new(wrapperspb.StringValue))
}

func (w *grpcWriter) close() { w.conn.Close() }

// readBody is the body the resource of t holds under key.
func readBody(t target, w writer, key string) (string, error) {
	switch w := w.(type) {
	case *postgresWriter:
		return w.read(key)
	case *redisWriter:
		return w.read(key)
	}
	return service.server(t.Kind, t.Fenced).body(key), nil
}

// history is the tokens of the accepted writes to key, in the order the resource took them.
func history(t target, key string) ([]uint64, error) {
	switch t.Kind {
	case postgresFence, postgresRow:
		return postgresHistory(key)
	case redisResource:
		return redisHistory(key)
	}
	return service.server(t.Kind, t.Fenced).tokens(key), nil
}

// isStale tells whether err is the resource's refusal of a stale token.
func isStale(err error) bool {
	var stale *fencing.StaleTokenError
	return errors.As(err, &stale) || status.Code(err) == codes.FailedPrecondition
}

// refusedTokens is the refused and the highest token a refusal names.
func refusedTokens(err error) (token, mark uint64, ok bool) {
	var stale *fencing.StaleTokenError
	if errors.As(err, &stale) {
		return stale.Token, stale.Mark, true
	}
	// The interceptor's status: stale fencing token <t> for lease "<name>": the highest seen is <mark>
	var name string
	_, scanErr := fmt.Sscanf(status.Convert(err).Message(), "stale fencing token %d for lease %s the highest seen is %d", &token, &name, &mark)
	return token, mark, scanErr == nil
}
