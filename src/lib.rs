//! leased: a gRPC lease service with fencing tokens. ARCHITECTURE.md has the bird's-eye view,
//! the invariants and the Redis key layout; this is the crate map.
//!
//! - [`proto`]: the generated `lease.v1` types, client and server (the contract).
//! - [`lease`]: the core: names, lease ids, limits, the [`lease::LeaseStore`] trait, and the
//!   waiting policy of `Acquire`.
//! - [`store`]: the Redis store (one Lua script per atomic operation) and the embedded store.
//! - [`server`]: the tonic server: handlers, auth, health, reflection, drain on shutdown.
//! - [`client`]: the Rust client: `LeaseClient` and the self-renewing `LeaseGuard`.
//! - [`cli`]: the client subcommands of the `leased` binary (`acquire`, `run`, ...).
//! - [`config`]: `leased serve` flags and environment variables.
//! - [`error`]: the request error and its mapping to gRPC status codes; the startup error.
//! - [`metrics`]: the Prometheus registry and its HTTP endpoint.
//! - [`shutdown`]: the signal that starts the drain.
//! - [`throttle`]: at most one line per interval for log lines that could repeat per request.

pub mod cli;
pub mod client;
pub mod config;
pub mod error;
pub mod lease;
pub mod metrics;
pub mod proto;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod throttle;

pub use server::serve;
