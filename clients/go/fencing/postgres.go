package fencing

import (
	"context"
	"database/sql"
	"errors"
	"strings"
)

// The SQLSTATEs of fencing/postgres/leased_fencing.sql.
const (
	sqlStateStale   = "LF001" // a larger token was seen
	sqlStateInvalid = "22023" // invalid_parameter_value: the message starts with the argument
)

// Postgres fences a write in the caller's transaction: it calls leased.fence(resource, token),
// which refuses token if a larger one was recorded for resource, and otherwise records it (an
// equal token passes: one holder writes many times). Call it first, then write, then commit:
// the check and the write commit or fail together, and the mark's row lock, held until tx ends,
// makes the fenced transactions of one resource commit one at a time, in token order.
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	if err := fencing.Postgres(ctx, tx, "orders", l.FencingToken()); err != nil {
//		return err // *fencing.StaleTokenError: a newer holder wrote; stop
//	}
//	if _, err := tx.ExecContext(ctx, "UPDATE orders SET ..."); err != nil { return err }
//	return tx.Commit()
//
// Errors: *StaleTokenError (SQLSTATE LF001; the transaction is aborted: roll it back);
// *InvalidInputError for a token of 0 or above MaxToken (refused before anything is sent, the
// transaction stays usable) or SQLSTATE 22023 (an empty resource key, or one over 1024 bytes);
// otherwise the driver's error. Any driver works (lib/pq, pgx's stdlib): the SQLSTATE is read
// through its error's SQLState method.
func Postgres(ctx context.Context, tx *sql.Tx, resource string, token uint64) error {
	if err := CheckToken("token", token); err != nil {
		return err
	}
	var mark int64
	err := tx.QueryRowContext(ctx, "SELECT leased.fence($1, $2)", resource, int64(token)).Scan(&mark)
	return PostgresError(err, resource, token)
}

// PostgresError maps a PostgreSQL error of a fenced write to this package's errors:
// SQLSTATE LF001 to a *StaleTokenError for resource and token (Mark read from the message),
// 22023 to an *InvalidInputError; any other error (nil included) is returned as it is. Use it
// with the row-level form, on the error of an INSERT or UPDATE of a table guarded by
// leased.fencing_token_guard:
//
//	_, err := tx.ExecContext(ctx, "UPDATE orders SET total = $1, fencing_token = $2 WHERE id = $3", total, int64(token), id)
//	if err = fencing.PostgresError(err, "orders row 7", token); err != nil { ... }
func PostgresError(err error, resource string, token uint64) error {
	var withState interface{ SQLState() string }
	if err == nil || !errors.As(err, &withState) {
		return err
	}
	switch withState.SQLState() {
	case sqlStateStale:
		mark, _ := markInStaleMessage(err.Error())
		return &StaleTokenError{Resource: resource, Token: token, Mark: mark, Err: err}
	case sqlStateInvalid:
		// lib/pq prefixes "pq: "; pgx suffixes " (SQLSTATE 22023)": the message proper names
		// the argument either way.
		return &InvalidInputError{Message: strings.TrimPrefix(err.Error(), "pq: "), Err: err}
	}
	return err
}
