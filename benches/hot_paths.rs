//! Micro-benchmarks of the pure functions on every grant's path: name and request validation,
//! lease ids, Redis key building and acquire.lua's reply parsing (README, "Performance").
//!
//! ```sh
//! cargo bench --bench hot_paths
//! ```
//!
//! Not run in CI: the numbers mean something only on a quiet machine, next to a run of the
//! commit before a change.

use divan::{Bencher, black_box};
use fred::types::Value;
use leased::{
    lease::{
        LeaseId, LeaseName, Limits,
        limits::{AcquireFields, parse_name},
    },
    store::redis::{LeaseKeys, parse_acquire_reply},
};

fn main() {
    divan::main();
}

/// A name as a fleet might use: a job, a report, a region.
const NAME: &str = "jobs/nightly-report/eu-west-1";

fn name() -> LeaseName {
    parse_name(NAME).expect("a valid name")
}

#[divan::bench]
fn name_validation() -> LeaseName {
    parse_name(black_box(NAME)).expect("a valid name")
}

#[divan::bench]
fn acquire_validation(bencher: Bencher) {
    let limits = Limits::default();
    bencher.bench(|| {
        limits
            .validate_acquire(AcquireFields {
                name: black_box(NAME),
                holder: black_box("worker-7").to_owned(),
                ttl_ms: 10_000,
                wait_ms: 0,
                limit: 0,
                lock_delay_ms: 0,
                ..AcquireFields::default()
            })
            .expect("a valid request")
    });
}

#[divan::bench]
fn lease_id_generation() -> LeaseId {
    LeaseId::generate()
}

#[divan::bench]
fn key_building(bencher: Bencher) {
    let name = name();
    bencher.bench(|| LeaseKeys::new(black_box("leased:"), black_box(&name)));
}

/// Times `parse_acquire_reply` on a fresh copy of the reply that `reply` builds.
fn reply_parsing(bencher: Bencher, reply: fn() -> Value) {
    let (name, lease_id) = (name(), LeaseId::generate());
    bencher
        .with_inputs(reply)
        .bench_values(|reply| parse_acquire_reply(&name, &lease_id, 1024, reply).expect("parsed"));
}

/// `{1, token, ttl_ms, expires_at_ms, again}`: a grant this call made.
#[divan::bench]
fn granted_reply_parsing(bencher: Bencher) {
    reply_parsing(bencher, || {
        Value::Array(vec![
            Value::Integer(1),
            Value::Integer(1_764_000_000_000_000),
            Value::Integer(10_000),
            Value::Integer(1_764_000_010_000),
            Value::Integer(0),
            Value::Integer(0),
            Value::Integer(0),
        ])
    });
}

/// `{0, position, taken, limit, held, holder, token, remaining_ms, expires_at_ms,
/// lock_delay_ms, shared, due}`: busy, with who holds it (acquire.lua's header).
#[divan::bench]
fn busy_reply_parsing(bencher: Bencher) {
    reply_parsing(bencher, || {
        Value::Array(vec![
            Value::Integer(0),
            Value::Integer(0),
            Value::Integer(1),
            Value::Integer(1),
            Value::Integer(1),
            Value::String("worker-7".into()),
            Value::Integer(1_764_000_000_000_000),
            Value::Integer(8_500),
            Value::Integer(1_764_000_010_000),
            Value::Integer(0),
            Value::Integer(0),
            Value::Integer(0),
        ])
    });
}
