// Package fencing makes the resource a lease protects check the lease's fencing token, so that
// a holder paused past its lease (GC, a stopped VM, a slow disk) cannot write after a newer
// holder did: the resource keeps the largest token it has accepted (its mark) and refuses a
// smaller one. Three forms, one error vocabulary:
//
//   - PostgreSQL (fencing/postgres/leased_fencing.sql, applied once per database): Postgres
//     calls leased.fence in the caller's transaction, so the check and the write commit or fail
//     together; PostgresError maps the errors of the row-level form (a fencing_token column
//     guarded by the leased.fencing_token_guard trigger).
//   - Redis as the resource (the leased_fencing Functions library,
//     fencing/redis/leased_fencing.lua): Redis's Set, HSet, Del and Fence, each one atomic call.
//   - Your own gRPC services: UnaryServerInterceptor and StreamServerInterceptor refuse a call
//     whose leased-fencing-token is below the mark of its leased-lease-name, with marks in
//     process (the default), in PostgreSQL or in Redis. Clients attach the metadata with
//     (*lease.Lease).OutgoingContext.
//
// A refusal is a *StaleTokenError (Token, Mark, Resource): this holder lost its lease to a
// newer one and must stop writing; retrying with the same token cannot succeed. Bad input (a
// token of 0 or above MaxToken, an empty resource key) is an *InvalidInputError naming the
// argument; tokens out of range are refused before anything is sent.
//
// The package imports no database or Redis driver: Postgres takes a *sql.Tx of any driver, and
// Redis takes anything with a Do method (RedisDoer), so a program that only uses leases
// downloads neither.
//
// Fencing suits exclusive grants: one mark per resource refuses the older of two concurrent
// permit holders of a counting lease (Limit > 1), and shared (read) grants order reads after
// writes, not readers among themselves.
//
// Tokens are 64-bit: leased's are floored at the grant's Unix time in microseconds (about
// 1.8e15 in 2026), and every adapter stores them as a signed 64-bit integer (PostgreSQL bigint)
// or its exact decimal text (Redis), so 1 to MaxToken (2^63-1) is the range: they fit until
// the year 2255 and beyond.
package fencing
