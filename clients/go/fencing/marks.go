package fencing

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// MarkStore keeps the interceptors' marks: the largest fencing token accepted per lease name.
// Fence refuses token with a *StaleTokenError when a larger one was recorded for name, and
// otherwise records it (an equal token passes: one holder calls many times). Any other error
// means the store could not answer: the call is refused with UNAVAILABLE.
type MarkStore interface {
	Fence(ctx context.Context, name string, token uint64) error
}

// MemoryMarks keeps the marks in this process, the interceptors' default. It is only as durable
// as the process: a restarted service accepts any token until it sees a newer one, and two
// replicas of a service keep separate marks. Use PostgresMarks or RedisMarks when that matters.
// It keeps one entry per lease name ever seen.
type MemoryMarks struct {
	mu    sync.Mutex
	marks map[string]uint64
}

// NewMemoryMarks returns an empty in-process store.
func NewMemoryMarks() *MemoryMarks { return &MemoryMarks{marks: map[string]uint64{}} }

// Fence implements MarkStore.
func (m *MemoryMarks) Fence(_ context.Context, name string, token uint64) error {
	if err := CheckToken("token", token); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mark := m.marks[name]; token < mark {
		return &StaleTokenError{Resource: name, Token: token, Mark: mark}
	}
	m.marks[name] = token
	return nil
}

// PostgresMarks keeps the marks in PostgreSQL (leased.fence_marks, fencing/postgres/
// leased_fencing.sql applied), under the resource key prefix+name: as durable as the database,
// and shared by every replica of the service. Each check is one autocommitted SELECT
// leased.fence(...).
type PostgresMarks struct {
	db     *sql.DB
	prefix string
}

// NewPostgresMarks keeps the marks in db, each lease name under prefix+name (e.g. "grpc:").
func NewPostgresMarks(db *sql.DB, prefix string) *PostgresMarks {
	return &PostgresMarks{db: db, prefix: prefix}
}

// Fence implements MarkStore.
func (p *PostgresMarks) Fence(ctx context.Context, name string, token uint64) error {
	if err := CheckToken("token", token); err != nil {
		return err
	}
	var mark int64
	err := p.db.QueryRowContext(ctx, "SELECT leased.fence($1, $2)", p.prefix+name, int64(token)).Scan(&mark)
	return PostgresError(err, name, token)
}

// RedisMarks keeps the marks in Redis (the leased_fencing library loaded), in the key
// prefix+name (FCALL leased_fence): as durable as that Redis's data, and shared by every
// replica of the service. conn must be safe for concurrent use (with redigo, a Pool's Get per
// call).
type RedisMarks struct {
	redis  *Redis
	prefix string
}

// NewRedisMarks keeps the marks in Redis through conn, each lease name in the key prefix+name
// (e.g. "fence:grpc:").
func NewRedisMarks(conn RedisDoer, prefix string) *RedisMarks {
	return &RedisMarks{redis: NewRedis(conn), prefix: prefix}
}

// Fence implements MarkStore.
func (r *RedisMarks) Fence(ctx context.Context, name string, token uint64) error {
	err := r.redis.Fence(ctx, r.prefix+name, token)
	var stale *StaleTokenError
	if errors.As(err, &stale) {
		stale.Resource = name // the lease name, not the key it is kept in
	}
	return err
}
