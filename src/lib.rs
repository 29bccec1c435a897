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
pub mod metrics;
pub mod proto;
pub mod server;
pub mod shutdown;
pub mod store;

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::{
    config::ServeConfig,
    server::{Listeners, auth::Authenticator},
    shutdown::Shutdown,
    store::{MemoryStore, RedisStore},
};

/// Runs `leased serve` on `listener` until `shutdown` fires: on Redis when a URL is configured,
/// otherwise on the embedded store. Binds the metrics and health ports if configured.
pub async fn serve(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let options = config.server_options()?;
    config.check_listen_address(listener.local_addr()?)?;
    if let Some(auth) = &options.auth {
        tokio::spawn(reload_on_sighup(auth.clone()));
    }
    let listeners = Listeners {
        grpc: listener,
        health: bind(config.health_listen).await?,
        metrics: bind(config.metrics_listen).await?,
    };
    match config.redis_options() {
        Some(redis) => {
            tracing::info!(store = "redis", "starting");
            let store = Arc::new(RedisStore::connect(&redis)?);
            server::run(store, options, listeners, shutdown).await
        }
        None => {
            tracing::info!(
                store = "memory",
                "starting on the embedded store: leases live in this process only"
            );
            let store = MemoryStore::new(config.max_waiters_per_name);
            server::run(store, options, listeners, shutdown).await
        }
    }
}

async fn bind(address: Option<std::net::SocketAddr>) -> std::io::Result<Option<TcpListener>> {
    match address {
        Some(address) => Ok(Some(TcpListener::bind(address).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {address}: {e}"))
        })?)),
        None => Ok(None),
    }
}

/// Re-reads the auth tokens file on every SIGHUP; open streams keep their principal.
async fn reload_on_sighup(auth: Arc<Authenticator>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot install a SIGHUP handler; auth tokens will not reload");
        return;
    };
    while hangups.recv().await.is_some() {
        match auth.reload() {
            Ok(count) => tracing::info!(tokens = count, "auth tokens reloaded"),
            Err(error) => tracing::error!(%error, "auth tokens not reloaded; the old ones stay"),
        }
    }
}
