//! The gRPC server's settings ([`ServerOptions`]) and the sockets it serves on ([`Listeners`]).

use std::{path::PathBuf, sync::Arc, time::Duration};

use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{auth::Authenticator, connections::ConnectionLimits, followed_names::FollowLimits};
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
    /// Distinct names that Watch streams and waiting Acquires may follow, per replica and token.
    pub followed_names: FollowLimits,
    /// The cap on open connections and the handshake deadline.
    pub connections: ConnectionLimits,
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
    /// Names the console answers to besides IP addresses and `localhost` (`--console-host`).
    pub console_hosts: Vec<String>,
    /// Names the metrics port answers to besides IP addresses and `localhost` (`--metrics-host`).
    pub metrics_hosts: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            limits: Limits::default(),
            max_concurrent_streams: 1024,
            max_message_bytes: 16 * 1024,
            max_leases_per_renew_stream: 1024,
            followed_names: FollowLimits::default(),
            connections: ConnectionLimits::default(),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            drain_grace: Duration::from_secs(10),
            tls: None,
            auth: None,
            console_hosts: Vec::new(),
            metrics_hosts: Vec::new(),
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
    /// Connections offer HTTP/2 only (ALPN `h2`), as gRPC needs.
    pub(super) fn acceptor(&self) -> Result<TlsAcceptor, StartupError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| StartupError::TlsFile {
                path: path.clone(),
                source,
            })
        };
        let invalid = |what: &str, path: &PathBuf, error: &dyn std::fmt::Display| {
            StartupError::Tls(format!("{what} {}: {error}", path.display()))
        };
        let certs = CertificateDer::pem_slice_iter(&read(&self.cert)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| invalid("certificate", &self.cert, &error))?;
        let key = PrivateKeyDer::from_pem_slice(&read(&self.key)?)
            .map_err(|error| invalid("private key", &self.key, &error))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| StartupError::Tls(error.to_string()))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&read(path)?) {
                    let cert = cert.map_err(|error| invalid("client CA", path, &error))?;
                    roots
                        .add(cert)
                        .map_err(|error| invalid("client CA", path, &error))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|error| invalid("client CA", path, &error))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|error| invalid("certificate and key", &self.cert, &error))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
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
    /// The operator's console.
    pub console: Option<TcpListener>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's options print whole without a secret: the tokens file's tokens never show
    /// (the Authenticator's `Debug` counts them), and TLS is file paths only.
    #[test]
    fn debug_of_the_options_never_shows_a_token() {
        let path = std::env::temp_dir().join(format!(
            "leased-options-debug-{}-{:?}.json",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(
            &path,
            r#"{"tokens": [{"client": "ops", "token": "hunter2-0123456789abcdef",
                "prefixes": [""], "operations": ["revoke"]}]}"#,
        )
        .unwrap();
        let auth = Authenticator::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let options = ServerOptions {
            auth: Some(Arc::new(auth)),
            tls: Some(TlsFiles {
                cert: "server.pem".into(),
                key: "server.key".into(),
                client_ca: Some("ca.pem".into()),
            }),
            ..ServerOptions::default()
        };
        for debug in [format!("{options:?}"), format!("{options:#?}")] {
            assert!(!debug.contains("hunter2"), "{debug}");
            assert!(debug.contains("server.key"), "{debug}");
        }
    }
}
