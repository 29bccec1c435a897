//! The gRPC server: `lease.v1.LeaseService` plus health and reflection, HTTP/2 limits and
//! keepalive, and a drain on shutdown. Handlers are thin adapters over the lease core.

mod acquire;
pub mod auth;
mod renew;
mod service;

use std::{path::PathBuf, sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{
    server::NamedService,
    transport::{Certificate, Identity, Server, ServerTlsConfig, server::TcpIncoming},
};
use tonic_health::server::HealthReporter;

use crate::{
    lease::{LeaseStore, Limits},
    proto::{self, lease_service_server::LeaseServiceServer},
    shutdown::Shutdown,
};
pub use service::LeaseServiceImpl;

/// The health service name that reports only that the process is alive (not Redis, not draining).
pub const LIVENESS_SERVICE: &str = "leased.liveness";

/// How often the health status re-checks that the store answers.
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Settings of the gRPC server itself (the store has its own).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Bounds on TTLs and waits.
    pub limits: Limits,
    /// HTTP/2 streams per connection; each open `Acquire` or `Renew` is one.
    pub max_concurrent_streams: u32,
    /// Largest request message accepted, in bytes.
    pub max_message_bytes: usize,
    /// Distinct leases one `Renew` stream may renew.
    pub max_leases_per_renew_stream: usize,
    /// HTTP/2 PING interval: how a frozen client is noticed.
    pub keepalive_interval: Duration,
    /// How long to wait for a PING answer before closing the connection.
    pub keepalive_timeout: Duration,
    /// After a shutdown starts, how long in-flight calls may take before the server stops anyway.
    pub drain_grace: Duration,
    /// TLS on the gRPC port (mTLS with a client CA); plaintext when `None`.
    pub tls: Option<TlsFiles>,
    /// Bearer-token access control; everyone may do anything when `None`.
    pub auth: Option<Arc<auth::Authenticator>>,
}

/// PEM files for TLS on the gRPC port.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With a client CA, clients must present a certificate it signed (mTLS).
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    fn server_config(&self) -> Result<ServerTlsConfig, String> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        let mut config = ServerTlsConfig::new()
            .identity(Identity::from_pem(read(&self.cert)?, read(&self.key)?));
        if let Some(client_ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(read(client_ca)?));
        }
        Ok(config)
    }
}

/// The sockets one server serves on.
#[derive(Debug)]
pub struct Listeners {
    /// `lease.v1.LeaseService`, health and reflection.
    pub grpc: TcpListener,
    /// Plaintext `grpc.health.v1` only, for Kubernetes probes when the gRPC port has TLS.
    pub health: Option<TcpListener>,
    /// Prometheus `GET /metrics`.
    pub metrics: Option<TcpListener>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            limits: Limits::default(),
            max_concurrent_streams: 1024,
            max_message_bytes: 16 * 1024,
            max_leases_per_renew_stream: 1024,
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            drain_grace: Duration::from_secs(10),
            tls: None,
            auth: None,
        }
    }
}

/// Serves `store` on `listener` until `shutdown` fires, then drains: health turns NOT_SERVING,
/// waiters and Renew streams end with `UNAVAILABLE`, and in-flight calls get `drain_grace` to finish.
pub async fn run<S: LeaseStore>(
    store: Arc<S>,
    options: ServerOptions,
    listeners: Listeners,
    shutdown: Shutdown,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let listener = listeners.grpc;
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    set_serving::<S>(&health_reporter, false).await;
    // Liveness: SERVING while the process runs, whatever Redis does, so that a Redis outage takes
    // pods out of rotation (readiness, "") without restarting them.
    health_reporter
        .set_service_status(LIVENESS_SERVICE, tonic_health::ServingStatus::Serving)
        .await;
    let health_task = tokio::spawn(report_health(
        store.clone(),
        health_reporter.clone(),
        shutdown.clone(),
    ));

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let lease_service =
        LeaseServiceServer::new(LeaseServiceImpl::new(store, &options, shutdown.clone()))
            .max_decoding_message_size(options.max_message_bytes);
    let mut side_servers = tokio::task::JoinSet::new();
    if let Some(listener) = listeners.metrics {
        side_servers.spawn(crate::metrics::serve(listener, shutdown.clone()));
    }
    if let Some(listener) = listeners.health {
        tracing::info!(address = %listener.local_addr()?, "health listening (plaintext)");
        let stop = {
            let shutdown = shutdown.clone();
            async move { shutdown.fired().await }
        };
        let health_reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let health_only = Server::builder()
            .add_service(health_service.clone())
            .add_service(health_reflection().build_v1()?)
            .add_service(health_reflection().build_v1alpha()?)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop);
        side_servers.spawn(async move { health_only.await.map_err(std::io::Error::other) });
    }

    let mut builder = Server::builder();
    if let Some(tls) = &options.tls {
        builder = builder.tls_config(tls.server_config()?)?;
    }

    tracing::info!(address = %listener.local_addr()?, "leased listening");
    let stop_accepting = {
        let shutdown = shutdown.clone();
        async move { shutdown.fired().await }
    };
    let serve = builder
        .http2_keepalive_interval(Some(options.keepalive_interval))
        .http2_keepalive_timeout(Some(options.keepalive_timeout))
        .max_concurrent_streams(Some(options.max_concurrent_streams))
        .add_service(health_service)
        .add_service(reflection().build_v1()?)
        // grpcurl 1.8 speaks only v1alpha.
        .add_service(reflection().build_v1alpha()?)
        .add_service(lease_service)
        // `Server::tcp_nodelay` is ignored for an incoming stream: set it on each accepted socket, or
        // Nagle holds back small HTTP/2 frames for a delayed ACK (40 ms per call on Linux).
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            stop_accepting,
        );
    tokio::pin!(serve);

    tokio::select! {
        result = &mut serve => result?,
        _ = shutdown.fired() => {
            tracing::info!(grace = ?options.drain_grace, "draining");
            match tokio::time::timeout(options.drain_grace, &mut serve).await {
                Ok(result) => result?,
                Err(_) => tracing::warn!("drain grace expired with calls in flight; stopping anyway"),
            }
        }
    }
    health_task.abort();
    side_servers.abort_all();
    tracing::info!("leased stopped");
    Ok(())
}

/// SERVING while the store answers pings and the server is not draining; NOT_SERVING otherwise.
async fn report_health<S: LeaseStore>(store: Arc<S>, reporter: HealthReporter, shutdown: Shutdown) {
    let mut serving = false;
    let mut interval = tokio::time::interval(HEALTH_CHECK_INTERVAL);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = shutdown.fired() => {
                set_serving::<S>(&reporter, false).await;
                return;
            }
        }
        let reachable = match store.ping().await {
            Ok(()) => true,
            Err(error) => {
                if serving {
                    tracing::warn!(%error, "store unreachable; health is NOT_SERVING");
                }
                false
            }
        };
        if reachable != serving {
            serving = reachable;
            if serving {
                tracing::info!("store reachable; health is SERVING");
            }
            set_serving::<S>(&reporter, serving).await;
        }
    }
}

/// Sets both the overall status (`""`) and the `lease.v1.LeaseService` status.
async fn set_serving<S: LeaseStore>(reporter: &HealthReporter, serving: bool) {
    use tonic_health::ServingStatus;
    let status = match serving {
        true => ServingStatus::Serving,
        false => ServingStatus::NotServing,
    };
    reporter.set_service_status("", status).await;
    let lease_service = <LeaseServiceServer<LeaseServiceImpl<S>> as NamedService>::NAME;
    reporter.set_service_status(lease_service, status).await;
}
