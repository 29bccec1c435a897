//! The integration tests: one test binary, so that the process [`harness`] and the gRPC helpers
//! of [`common`] are compiled once. Each module below is one topic (and was once a binary of its
//! own); `cargo test --test integration <module>::` runs one, e.g. `reliability::`.
//!
//! Everything here runs in one process. What a test changes for the whole process must stay
//! harmless to the others: the descriptor limit is only ever raised (`harness::proc`), the
//! tracing subscriber is installed once by whichever in-process server starts first, the metrics
//! of in-process servers are process-wide (tests that count exactly run `leased` as a child
//! process, the others compare before and after with a lower bound). The tests that want both
//! cores take turns with each other and with the scenarios of tight timing: `common::heavy_turn`
//! and `common::steady_turn`.

mod common;
mod harness;

mod cli;
mod client;
mod conformance;
mod console;
mod counting;
mod fair_waiting;
mod fencing;
mod fencing_middleware;
mod grpcurl;
mod guard_faults;
mod hostile_clients;
mod leader_election;
mod limits;
mod operations;
mod read_write;
mod redis_cluster;
mod redis_store;
mod reliability;
mod security;
mod traces;
mod upgrade;
mod watch_admin;
