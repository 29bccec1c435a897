//! leased: a gRPC lease service with fencing tokens.
//!
//! - [`proto`]: the generated `lease.v1` types, client and server (the contract).
//! - [`lease`]: the core: names, lease ids, limits, the [`lease::LeaseStore`] trait, and the
//!   waiting policy of `Acquire`.
//! - [`store`]: the Redis store (one Lua script per atomic operation) and the embedded store.
//! - [`server`]: the tonic server: handlers, health, reflection, drain on shutdown.
//! - [`client`]: the Rust client: `LeaseClient` and the self-renewing `LeaseGuard`.
//! - [`cli`]: the client subcommands of the `leased` binary (`acquire`, `run`, ...).
//! - [`config`]: `leased serve` flags and environment variables.
//! - [`error`]: the one error type and its mapping to gRPC status codes.

pub mod cli;
pub mod client;
pub mod config;
pub mod error;
pub mod lease;
pub mod proto;
pub mod server;
pub mod shutdown;
pub mod store;

use tokio::net::TcpListener;

use crate::{config::ServeConfig, shutdown::Shutdown, store::MemoryStore, store::RedisStore};

/// Runs `leased serve` on `listener` until `shutdown` fires: on Redis when a URL is configured,
/// otherwise on the embedded store.
pub async fn serve(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let options = config.server_options();
    match config.redis_options() {
        Some(redis) => {
            tracing::info!(store = "redis", "starting");
            let store = std::sync::Arc::new(RedisStore::connect(&redis)?);
            server::run(store, options, listener, shutdown).await
        }
        None => {
            tracing::info!(
                store = "memory",
                "starting on the embedded store: leases live in this process only"
            );
            let store = MemoryStore::new(config.max_waiters_per_name);
            server::run(store, options, listener, shutdown).await
        }
    }
}
