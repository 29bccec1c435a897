//! The gRPC server's settings ([`ServerOptions`]) and the sockets it serves on ([`Listeners`]).

use std::{path::PathBuf, sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use super::auth::Authenticator;
use crate::{error::StartupError, lease::Limits};

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
    pub auth: Option<Arc<Authenticator>>,
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

/// PEM files for TLS on the gRPC port.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With a client CA, clients must present a certificate it signed (mTLS).
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Reads the files now, so that a missing or unreadable one stops the server at startup.
    pub(super) fn server_config(&self) -> Result<ServerTlsConfig, StartupError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| StartupError::TlsFile {
                path: path.clone(),
                source,
            })
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
