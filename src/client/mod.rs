//! The Rust client: [`LeaseClient`] acquires leases; a [`LeaseGuard`] keeps one alive over a
//! `Renew` stream and tells its holder when to stop trusting it.
//!
//! ```no_run
//! use std::time::Duration;
//! use leased::client::{AcquireOptions, Acquired, LeaseClient};
//!
//! # async fn example() -> Result<(), leased::client::ClientError> {
//! let client = LeaseClient::connect("http://127.0.0.1:50051").await?;
//! let options = AcquireOptions::new(Duration::from_secs(15)).wait(Duration::from_secs(60));
//! match client.acquire("nightly-report", options).await? {
//!     Acquired::Granted(guard) => {
//!         // Pass the token to the resource the lease protects; it rejects smaller ones.
//!         println!("{} is ours with fencing token {}", guard.name(), guard.fencing_token());
//!         tokio::select! {
//!             _ = do_the_work(guard.fencing_token()) => {}
//!             reason = guard.lost() => eprintln!("lease lost ({reason}); stopping"),
//!         }
//!         guard.release().await?;
//!     }
//!     Acquired::NotGranted(holder) => {
//!         println!("busy: held by {:?} with token {}", holder.holder, holder.fencing_token);
//!     }
//! }
//! # Ok(())
//! # }
//! # async fn do_the_work(_token: u64) {}
//! ```
//!
//! `examples/guard.rs` is a runnable program built the same way (acquire with a wait, work until
//! done or lost, release); `tests/client.rs` runs it against a real server.

mod guard;

use std::{path::PathBuf, time::Duration};

use tokio_stream::StreamExt;
use tonic::{
    metadata::{Ascii, MetadataValue},
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
};

pub use guard::{LeaseGuard, LostReason};

use crate::proto::{
    AcquireRequest, DescribeRequest, ReleaseRequest, RenewRequest, RenewResponse, acquire_response,
    lease_service_client::LeaseServiceClient, renew_response,
};

/// What can go wrong in the client. Contention is not an error: see [`Acquired::NotGranted`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is malformed or the server cannot be reached.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: tonic::transport::Error,
    },
    /// The server answered with an error status (bad input, Redis unavailable, ...).
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// A TLS file cannot be read, or a setting is malformed.
    #[error("{0}")]
    Config(String),
    /// The server broke the contract (e.g. an Acquire stream without a terminal message).
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// The generated client, with the bearer token (if any) added to every call.
pub(crate) type GrpcClient = LeaseServiceClient<InterceptedService<Channel, BearerToken>>;

/// A connection to a `leased` server. Cheap to clone; clones share the HTTP/2 connection.
#[derive(Clone, Debug)]
pub struct LeaseClient {
    grpc: GrpcClient,
}

/// How to reach a server that uses TLS, mTLS or access control. `Default` is plaintext, no token.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// PEM CA bundle to trust for an `https://` endpoint (default: the system's roots).
    pub ca_cert: Option<PathBuf>,
    /// PEM client certificate and key, for servers that require mTLS.
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// Bearer token, for servers started with `--auth-tokens`.
    pub token: Option<String>,
}

/// Adds `authorization: Bearer TOKEN` to every request when a token is set.
#[derive(Clone, Debug)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// How to acquire: TTL, how long to wait for a busy lease, and who is asking.
#[derive(Clone, Debug)]
pub struct AcquireOptions {
    pub ttl: Duration,
    pub wait: Duration,
    pub holder: String,
}

impl AcquireOptions {
    /// A TTL, no waiting, and this host and process as the holder.
    pub fn new(ttl: Duration) -> Self {
        AcquireOptions {
            ttl,
            wait: Duration::ZERO,
            holder: default_holder(),
        }
    }

    /// Wait up to `wait` for a busy lease.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Describe the holder to others (shown by `Describe`).
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }
}

/// `hostname/pid`: enough for an operator to find the process that holds a lease.
pub fn default_holder() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most `buffer.len()` bytes into the buffer we own.
    let hostname = match unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } {
        0 => {
            let end = buffer.iter().position(|b| *b == 0).unwrap_or(buffer.len());
            String::from_utf8_lossy(&buffer[..end]).into_owned()
        }
        _ => "unknown-host".to_owned(),
    };
    format!("{hostname}/{}", std::process::id())
}

/// The answer to [`LeaseClient::acquire`].
// Returned once per acquire and matched at once: boxing the guard would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Acquired {
    /// The lease is ours, kept alive until released or dropped.
    Granted(LeaseGuard),
    /// Someone else holds it (for the whole wait).
    NotGranted(CurrentHolder),
}

/// Who holds a lease, as anyone may see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentHolder {
    pub holder: String,
    pub fencing_token: u64,
    /// Time until the lease expires unless renewed; `None` if it has no expiry.
    pub remaining: Option<Duration>,
}

impl CurrentHolder {
    fn new(holder: String, fencing_token: u64, remaining_ms: i64) -> Self {
        CurrentHolder {
            holder,
            fencing_token,
            remaining: u64::try_from(remaining_ms).ok().map(Duration::from_millis),
        }
    }
}

/// A lease as the server granted it, without a keepalive (what `leased acquire` prints).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantedLease {
    pub name: String,
    pub lease_id: String,
    pub fencing_token: u64,
    pub ttl: Duration,
    /// Unix milliseconds on the server's store clock.
    pub expires_at_ms: i64,
}

impl LeaseClient {
    /// Connects to `endpoint`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, ClientError> {
        Self::connect_with(endpoint, &ConnectOptions::default()).await
    }

    /// Connects with TLS settings and a bearer token (`https://` endpoints use TLS).
    pub async fn connect_with(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Self, ClientError> {
        let endpoint = endpoint.into();
        let connect_error = |source| ClientError::Connect {
            endpoint: endpoint.clone(),
            source,
        };
        let mut builder = Endpoint::from_shared(endpoint.clone())
            .map_err(connect_error)?
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        if endpoint.starts_with("https://") {
            builder = builder
                .tls_config(options.tls_config()?)
                .map_err(connect_error)?;
        }
        let channel = builder.connect().await.map_err(connect_error)?;
        let token = match &options.token {
            None => None,
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| ClientError::Config("the token is not valid ASCII".into()))?,
            ),
        };
        Ok(LeaseClient {
            grpc: LeaseServiceClient::with_interceptor(channel, BearerToken(token)),
        })
    }

    /// Acquires `name` and keeps it alive with a [`LeaseGuard`], or reports who holds it.
    pub async fn acquire(
        &self,
        name: &str,
        options: AcquireOptions,
    ) -> Result<Acquired, ClientError> {
        // The lease expires on the server no earlier than TTL after this moment.
        let mut requested_at = tokio::time::Instant::now();
        let grant = match self.acquire_once(name, &options).await? {
            Ok(grant) => grant,
            Err(holder) => return Ok(Acquired::NotGranted(holder)),
        };
        // After a long wait, "TTL after the request" may already be past although the grant is
        // fresh: the server granted it at some unknown moment during the wait. Renew once before
        // trusting it, and count from that renewal instead.
        if requested_at.elapsed() > grant.ttl / 3 {
            requested_at = tokio::time::Instant::now();
            let renewal = RenewRequest {
                name: grant.name.clone(),
                lease_id: grant.lease_id.clone(),
                ttl_ms: 0,
            };
            let mut answers = self
                .grpc
                .clone()
                .renew(tokio_stream::iter([renewal]))
                .await?
                .into_inner();
            let renewed = matches!(
                answers.message().await?,
                Some(RenewResponse {
                    result: Some(renew_response::Result::Renewed(_)),
                    ..
                })
            );
            if !renewed {
                let holder = self.describe(name).await?.unwrap_or(CurrentHolder {
                    holder: String::new(),
                    fencing_token: 0,
                    remaining: None,
                });
                return Ok(Acquired::NotGranted(holder));
            }
        }
        Ok(Acquired::Granted(LeaseGuard::start(
            self.clone(),
            grant,
            requested_at,
        )))
    }

    /// Acquires `name` without a keepalive: the lease lasts one TTL unless renewed by its id.
    pub async fn acquire_once(
        &self,
        name: &str,
        options: &AcquireOptions,
    ) -> Result<Result<GrantedLease, CurrentHolder>, ClientError> {
        let request = AcquireRequest {
            name: name.to_owned(),
            holder: options.holder.clone(),
            ttl_ms: duration_ms(options.ttl),
            wait_ms: duration_ms(options.wait),
        };
        let mut stream = self.grpc.clone().acquire(request).await?.into_inner();
        while let Some(message) = stream.next().await {
            match message?.result {
                Some(acquire_response::Result::Waiting(_)) => continue,
                Some(acquire_response::Result::Granted(granted)) => {
                    return Ok(Ok(GrantedLease {
                        name: granted.name,
                        lease_id: granted.lease_id,
                        fencing_token: granted.fencing_token,
                        ttl: Duration::from_millis(granted.ttl_ms.max(0) as u64),
                        expires_at_ms: granted
                            .expires_at
                            .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000),
                    }));
                }
                Some(acquire_response::Result::NotGranted(busy)) => {
                    return Ok(Err(CurrentHolder::new(
                        busy.holder,
                        busy.fencing_token,
                        busy.remaining_ms,
                    )));
                }
                None => return Err(ClientError::Protocol("empty AcquireResponse".into())),
            }
        }
        Err(ClientError::Protocol(
            "Acquire stream ended without granted or not_granted".into(),
        ))
    }

    /// Releases a lease by its id; false if it was no longer held by that id.
    pub async fn release(&self, name: &str, lease_id: &str) -> Result<bool, ClientError> {
        let request = ReleaseRequest {
            name: name.to_owned(),
            lease_id: lease_id.to_owned(),
        };
        Ok(self
            .grpc
            .clone()
            .release(request)
            .await?
            .into_inner()
            .released)
    }

    /// Who holds `name`, if anyone.
    pub async fn describe(&self, name: &str) -> Result<Option<CurrentHolder>, ClientError> {
        let request = DescribeRequest {
            name: name.to_owned(),
        };
        let reply = self.grpc.clone().describe(request).await?.into_inner();
        Ok(reply
            .held
            .then(|| CurrentHolder::new(reply.holder, reply.fencing_token, reply.remaining_ms)))
    }

    pub(crate) fn grpc(&self) -> GrpcClient {
        self.grpc.clone()
    }
}

impl ConnectOptions {
    fn tls_config(&self) -> Result<ClientTlsConfig, ClientError> {
        let read = |path: &PathBuf| {
            std::fs::read(path)
                .map_err(|e| ClientError::Config(format!("cannot read {}: {e}", path.display())))
        };
        let mut tls = ClientTlsConfig::new().with_native_roots();
        if let Some(ca_cert) = &self.ca_cert {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca_cert)?));
        }
        if let Some((cert, key)) = &self.client_identity {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        Ok(tls)
    }
}

fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
