//! leased: a gRPC lease service with fencing tokens. ARCHITECTURE.md has the bird's-eye view,
//! the invariants and the code map; this is the crate map.
//!
//! Cargo features: `server` (the default) builds everything below; `client` alone builds only
//! [`client`] and [`proto`], without any of the server's crates (no Redis client, HTTP server,
//! Prometheus or TLS server side): `leased = { default-features = false, features =
//! ["client"] }`. `client-tls` adds `https://` endpoints to the client. `fencing-postgres` and
//! `fencing-redis` (both in the default build) add the fencing adapters
//! `fencing::postgres` (tokio-postgres) and `fencing::redis` (fred).
//!
//! - [`proto`]: the generated `lease.v1` types and client (and server, with `server`).
//! - [`client`]: the Rust client: `LeaseClient` and the self-renewing `LeaseGuard`.
//! - [`fencing`]: tokens checked where the data lives: the metadata convention and the mark
//!   stores of the fencing adapters.
// The server's modules are listed only in a build that has them, so that the docs of a
// client-only build link to nothing it lacks.
#![cfg_attr(
    feature = "server",
    doc = "
With `server`:
- [`lease`]: the core: names, lease ids, limits, the [`lease::LeaseStore`] trait, the events
  a store reports, and the waiting and watching of callers. It knows nothing of gRPC.
- [`store`]: the Redis store (one Lua script per atomic operation) and the embedded store.
- [`server`]: the tonic server: handlers, auth, health, reflection, connections, drain.
- [`app`]: `leased serve` wired together: settings to options, the store, ports, signals.
- [`config`]: `leased serve` flags and environment variables, plain settings.
- [`cli`]: the client subcommands of the `leased` binary (`acquire`, `run`, ...).
- [`error`]: the request error of the core and the startup error.
- [`metrics`]: the Prometheus registry and its HTTP endpoint.
- [`shutdown`]: the signal that starts the drain.
- [`telemetry`]: the RPCs' trace spans and their OTLP export (`--otlp-endpoint`).
- [`throttle`]: at most one line per interval for log lines that could repeat per request."
)]

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client")]
pub mod fencing;
pub mod proto;

#[cfg(feature = "server")]
pub mod app;
#[cfg(feature = "server")]
pub mod cli;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod error;
#[cfg(feature = "server")]
pub mod lease;
#[cfg(feature = "server")]
pub mod metrics;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod shutdown;
#[cfg(feature = "server")]
pub mod store;
#[cfg(feature = "server")]
pub mod telemetry;
#[cfg(feature = "server")]
pub mod throttle;

#[cfg(feature = "server")]
pub use app::serve;
