//! The gRPC server (ARCHITECTURE.md, "Code map"): `lease.v1.LeaseService` with health and
//! reflection, HTTP/2 limits and keepalive, the side listeners, and a drain on shutdown.
//! Handlers are thin adapters over the lease core; nothing here holds lease state.
//!
//! - `run`: serves one store on given sockets until shutdown, then drains.
//! - `options`: the server's settings and sockets; `routes`: which services each port carries;
//!   `health`: statuses that follow the store and the drain.
//! - `connections`: from `accept` to tonic: the connection cap, the handshake deadline, TLS.
//! - `http_port`: the guards of the plain HTTP/1.1 side ports: a connection cap and deadlines.
//! - `metrics_port`: `GET /metrics`; `console`: the operator's web page and its JSON API, whose
//!   calls go through the same handlers as gRPC calls.
//! - `service`, `acquire`, `renew`: the RPC handlers; `auth`: bearer tokens; `followed_names`:
//!   the bound on names that Watch streams and waiting Acquires follow.

mod acquire;
mod admin;
pub(crate) mod auth;
mod connections;
mod console;
mod followed_names;
mod health;
mod held_leases;
mod http_port;
mod metrics_port;
mod options;
mod renew;
mod routes;
mod rpc_metrics;
mod service;
mod status;
mod watch;

use std::{convert::Infallible, sync::Arc};

use tokio::task::JoinSet;
use tokio_stream::Stream;
use tonic::{service::Routes, transport::Server};

use self::connections::{Connection, Connections};
use crate::{
    error::StartupError,
    lease::{QueueStore, Replica},
    shutdown::Shutdown,
};
pub(crate) use connections::ConnectionLimits;
pub use console::MAX_CONNECTIONS as CONSOLE_MAX_CONNECTIONS;
pub(crate) use followed_names::FollowLimits;
pub use health::LIVENESS_SERVICE;
pub use metrics_port::MAX_CONNECTIONS as METRICS_PORT_MAX_CONNECTIONS;
pub(crate) use options::{Listeners, ServerOptions, TlsFiles};
pub(crate) use service::LeaseServiceImpl;

/// Serves `store` on `listeners` until `shutdown` fires, then drains: health turns NOT_SERVING,
/// waiters and Renew streams end with `UNAVAILABLE`, and in-flight calls get `drain_grace` to finish.
pub(crate) async fn run<S: QueueStore>(
    store: Arc<Replica<S>>,
    options: ServerOptions,
    listeners: Listeners,
    shutdown: Shutdown,
) -> Result<(), StartupError> {
    // Read the TLS files first: a bad one stops the server before anything starts.
    let tls = options.tls.as_ref().map(TlsFiles::acceptor).transpose()?;
    let health = health::Health::start(store.clone(), shutdown.clone()).await;
    // One cap for the gRPC and health ports: both cost file descriptors.
    let connections = Connections::new(options.connections.clone());
    let mut side_listeners = JoinSet::new();
    if let Some(listener) = listeners.metrics {
        let shutdown = shutdown.clone();
        let request_timeout = options.connections.handshake_timeout;
        let hosts = options.metrics_hosts.clone();
        side_listeners.spawn(metrics_port::serve(
            listener,
            request_timeout,
            hosts,
            shutdown,
        ));
    }
    if let Some(listener) = listeners.health {
        if let Ok(address) = listener.local_addr() {
            tracing::info!(%address, "health listening (plaintext)");
        }
        let routes = routes::health_port(&health)?;
        let incoming = connections.incoming(listener, None);
        side_listeners.spawn(serve_health_only(routes, incoming, shutdown.clone()));
    }
    let lease_service = Arc::new(LeaseServiceImpl::new(
        store.clone(),
        &options,
        shutdown.clone(),
    ));
    let admin_service = Arc::new(admin::LeaseAdminServiceImpl::new(store, &options));
    if let Some(listener) = listeners.console {
        let console = console::Console {
            leases: lease_service.clone(),
            admin: admin_service.clone(),
            auth: options.auth.clone(),
            request_timeout: options.connections.handshake_timeout,
            hosts: options.console_hosts.clone(),
        };
        side_listeners.spawn(console::serve(listener, console, shutdown.clone()));
    }
    let routes = routes::grpc_port(lease_service, admin_service, &options, &health)?;
    let address = listeners.grpc.local_addr().map_err(StartupError::Socket)?;
    tracing::info!(
        %address,
        tls = tls.is_some(),
        max_connections = options.connections.max_connections,
        handshake_timeout = ?options.connections.handshake_timeout,
        "leased listening"
    );
    let incoming = connections.incoming(listeners.grpc, tls);
    let result = serve_and_drain(routes, incoming, &options, &shutdown).await;
    health.stop();
    side_listeners.abort_all();
    tracing::info!("leased stopped");
    result
}

/// Serves the gRPC port until `shutdown` fires, then lets in-flight calls finish for up to
/// `drain_grace`.
async fn serve_and_drain(
    routes: Routes,
    incoming: impl Stream<Item = Result<Connection, Infallible>>,
    options: &ServerOptions,
    shutdown: &Shutdown,
) -> Result<(), StartupError> {
    let stop_accepting = {
        let shutdown = shutdown.clone();
        async move { shutdown.fired().await }
    };
    let serving = http2_limits(Server::builder())
        .http2_keepalive_interval(Some(options.keepalive_interval))
        .http2_keepalive_timeout(Some(options.keepalive_timeout))
        .max_concurrent_streams(Some(options.max_concurrent_streams))
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, stop_accepting);
    tokio::pin!(serving);

    tokio::select! {
        result = &mut serving => result.map_err(StartupError::Serve),
        _ = shutdown.fired() => {
            tracing::info!(grace = ?options.drain_grace, "draining");
            match tokio::time::timeout(options.drain_grace, &mut serving).await {
                Ok(result) => result.map_err(StartupError::Serve),
                Err(_) => {
                    tracing::warn!("drain grace expired with calls in flight; stopping anyway");
                    Ok(())
                }
            }
        }
    }
}

/// HTTP/2 limits that hyper and h2 default to, set here so that an upgrade cannot move what the
/// table of answers in docs/src/guarantees.md says: 16 KiB of headers per call (431 past it,
/// GOAWAY far past it), and GOAWAY ENHANCE_YOUR_CALM once 20 streams reset by the client wait to
/// be accepted (rapid reset).
fn http2_limits(builder: Server) -> Server {
    builder
        .http2_max_header_list_size(Some(16 * 1024))
        .http2_max_pending_accept_reset_streams(Some(20))
}

/// The plaintext health port, until `shutdown` fires.
async fn serve_health_only(
    routes: Routes,
    incoming: impl Stream<Item = Result<Connection, Infallible>>,
    shutdown: Shutdown,
) {
    let serving = http2_limits(Server::builder())
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, async move { shutdown.fired().await });
    if let Err(error) = serving.await {
        tracing::error!(%error, "the health listener failed");
    }
}
