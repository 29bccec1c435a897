package fencing

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// RedisDoer sends one command to Redis and returns its reply, a Redis error reply as an error
// whose message is the reply's text. It keeps this package free of any Redis client: adapt
// yours in a line, e.g. redigo (one connection per goroutine, or a Pool's Get per call):
//
//	fencing.RedisDoFunc(func(ctx context.Context, command string, args ...interface{}) (interface{}, error) {
//		return conn.Do(command, args...)
//	})
//
// or go-redis: return rdb.Do(ctx, append([]interface{}{command}, args...)...).Result().
type RedisDoer interface {
	Do(ctx context.Context, command string, args ...interface{}) (interface{}, error)
}

// RedisDoFunc is a function that is a RedisDoer.
type RedisDoFunc func(ctx context.Context, command string, args ...interface{}) (interface{}, error)

// Do calls f.
func (f RedisDoFunc) Do(ctx context.Context, command string, args ...interface{}) (interface{}, error) {
	return f(ctx, command, args...)
}

// Redis writes to a Redis that is the resource, through the leased_fencing Functions library
// (fencing/redis/leased_fencing.lua; load it once: redis-cli -x FUNCTION LOAD REPLACE <
// leased_fencing.lua). Each write names a mark key, which holds the largest token accepted for
// the resource it guards (e.g. "fence:{orders}" for the keys "{orders}:*": in a Cluster the
// mark and the keys share a hash slot). A token below the mark is refused and nothing is
// written; otherwise the token becomes the mark and the write is done, in one atomic call.
//
// Errors: *StaleTokenError (STALETOKEN; Resource is the mark key), *InvalidInputError for a
// token of 0 or above MaxToken (refused before anything is sent) or BADTOKEN, otherwise the
// client's error. Tokens travel as decimal text and are compared exactly.
type Redis struct {
	conn RedisDoer
}

// NewRedis writes through conn.
func NewRedis(conn RedisDoer) *Redis { return &Redis{conn: conn} }

// Fence checks token against mark and records it, writing nothing else (FCALL leased_fence):
// for a write the library has no fenced form of, made right after by the same holder. Prefer
// Set, HSet and Del, which check and write in one atomic call.
func (r *Redis) Fence(ctx context.Context, mark string, token uint64) error {
	_, err := r.fcall(ctx, "leased_fence", []string{mark}, mark, token)
	return err
}

// Set is SET key value [options...] if token is not below mark's (FCALL leased_set); options
// are SET's, e.g. "PX", 5000 or "GET". It returns SET's reply.
func (r *Redis) Set(ctx context.Context, mark, key string, token uint64, value interface{}, options ...interface{}) (interface{}, error) {
	return r.fcall(ctx, "leased_set", []string{mark, key}, mark, token, append([]interface{}{value}, options...)...)
}

// HSet is HSET key field value [field value ...] if token is not below mark's (FCALL
// leased_hset). It returns HSET's reply (the number of fields added).
func (r *Redis) HSet(ctx context.Context, mark, key string, token uint64, fieldValues ...interface{}) (interface{}, error) {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return nil, &InvalidInputError{Message: fmt.Sprintf("fieldValues must be field value pairs, not %d values", len(fieldValues))}
	}
	return r.fcall(ctx, "leased_hset", []string{mark, key}, mark, token, fieldValues...)
}

// Del is DEL keys... if token is not below mark's (FCALL leased_del). It returns DEL's reply
// (the number of keys removed).
func (r *Redis) Del(ctx context.Context, mark string, token uint64, keys ...string) (interface{}, error) {
	if len(keys) == 0 {
		return nil, &InvalidInputError{Message: "keys must name at least one key"}
	}
	return r.fcall(ctx, "leased_del", append([]string{mark}, keys...), mark, token)
}

// fcall sends FCALL function len(keys) keys... token args... and maps the library's errors.
func (r *Redis) fcall(ctx context.Context, function string, keys []string, mark string, token uint64, args ...interface{}) (interface{}, error) {
	if err := CheckToken("token", token); err != nil {
		return nil, err
	}
	command := make([]interface{}, 0, 3+len(keys)+len(args))
	command = append(command, function, len(keys))
	for _, key := range keys {
		command = append(command, key)
	}
	command = append(command, strconv.FormatUint(token, 10))
	command = append(command, args...)
	reply, err := r.conn.Do(ctx, "FCALL", command...)
	if err != nil {
		return nil, redisError(err, mark, token)
	}
	return reply, nil
}

// redisError maps the leased_fencing library's error replies: STALETOKEN to a
// *StaleTokenError, BADTOKEN to an *InvalidInputError; others are returned as they are.
func redisError(err error, mark string, token uint64) error {
	message := err.Error()
	switch {
	case strings.HasPrefix(message, "STALETOKEN "):
		seen, _ := markInStaleMessage(message)
		return &StaleTokenError{Resource: mark, Token: token, Mark: seen, Err: err}
	case strings.HasPrefix(message, "BADTOKEN "):
		return &InvalidInputError{Message: strings.TrimPrefix(message, "BADTOKEN "), Err: err}
	}
	return err
}
