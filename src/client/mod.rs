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
//!     Acquired::NotGranted(busy) => {
//!         println!("busy: held by {:?} with token {}", busy.holder, busy.fencing_token);
//!     }
//! }
//! # Ok(())
//! # }
//! # async fn do_the_work(_token: u64) {}
//! ```
//!
//! Each acquisition sends its own lease id (32 random hex digits), so an Acquire cut off by a
//! connection reset or a replica that stopped is retried with it and answered the same grant. To
//! give up a wait, drop the future (`tokio::time::timeout`, `select!`, an aborted task): in the
//! background the call is cancelled and its lease id released, which ends a grant that was
//! already on its way (or refuses one still coming), so a caller that left never keeps the
//! lease.
//!
//! A counting lease (a semaphore) lets up to N holders hold a name at once, each with its own
//! guard and fencing token: `AcquireOptions::new(ttl).limit(5)`, the same N for every holder of
//! the name. A read-write lease lets shared (read) holders in together and an exclusive one
//! alone: `AcquireOptions::new(ttl).shared(true)`, or [`ReadWriteLease`]. A [`ReentrantLease`]
//! is a handle that one task may lock again while it holds it. [`LeaseClient::describe_lease`]
//! lists every holder, with its mode, and the waiters.
//!
//! `examples/guard.rs` is a runnable program built the same way (acquire with a wait, work until
//! done or lost, release); `tests/client.rs` runs it against a real server.
//!
//! [`LeaseClient::watch`] follows who holds a lease (a [`Stream`](tokio_stream::Stream) of
//! [`WatchEvent`]s: what leader election's followers use, see `examples/leader_election.rs`),
//! [`LeaseClient::check_token`] asks whether a fencing token still holds its lease, and
//! [`LeaseAdminClient`] lists the leases held and revokes one, for operators.

#![warn(missing_docs)]

mod acquire;
mod admin;
mod guard;
mod locks;
mod watch;

use std::{fmt, path::PathBuf, time::Duration};

#[cfg(feature = "client-tls")]
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic::{
    metadata::{Ascii, MetadataValue},
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Channel, Endpoint},
};

pub use admin::{LeaseAdminClient, ListPage, ListedLease};
pub use guard::{LeaseGuard, LostReason};
pub use locks::{ReadWriteLease, ReentrantGuard, ReentrantLease};
pub use watch::{WatchCause, WatchEvent, WatchStream, WatchedGrant};

use crate::proto::{
    CheckTokenRequest, DescribeRequest, DescribeResponse, HolderInfo, ReleaseRequest, WatchRequest,
    lease_service_client::LeaseServiceClient,
};

/// What can go wrong in the client. Contention is not an error: see [`Acquired::NotGranted`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is malformed or the server cannot be reached.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint as given to [`LeaseClient::connect`].
        endpoint: String,
        /// The transport's error: a malformed URI, a refused connection, a TLS failure.
        source: tonic::transport::Error,
    },
    /// The server answered with an error status (bad input, Redis unavailable, ...).
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// Acquire asked for a [`limit`](AcquireOptions::limit) other than the one the name's current
    /// holders were granted with (the server's `FAILED_PRECONDITION`). Every holder of a name must
    /// ask for the same limit; `message` is the server's, naming the limit in force. Nothing was
    /// granted.
    #[error("{message}")]
    LimitMismatch {
        /// The limit this caller asked for.
        requested: u32,
        /// The server's explanation, e.g. "limit 5 differs from the limit in force, 3: ...".
        message: String,
    },
    /// A TLS file cannot be read, or a setting is malformed.
    #[error("{0}")]
    Config(String),
    /// The server broke the contract (e.g. an Acquire stream without a terminal message).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// [`ReentrantLease::lock`] while the lease its levels hold is lost: every level must end
    /// (be dropped) before the handle acquires the name again.
    #[error("{0}")]
    Lost(LostReason),
}

/// The connection to a server, with the bearer token (if any) added to every call: what every
/// generated client of this module is built on.
pub(crate) type Connection = InterceptedService<Channel, BearerToken>;

/// The generated client, with the bearer token (if any) added to every call.
pub(crate) type GrpcClient = LeaseServiceClient<Connection>;

/// A connection to a `leased` server. Cheap to clone; clones share the HTTP/2 connection.
#[derive(Clone, Debug)]
pub struct LeaseClient {
    grpc: GrpcClient,
    /// Kept to open [`LeaseAdminClient`]s on the same connection.
    connection: Connection,
}

/// How to reach a server that uses TLS, mTLS or access control. `Default` is plaintext, no token.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// PEM CA bundle to trust for an `https://` endpoint (default: the system's roots). TLS needs
    /// the `client-tls` feature (on with `server`, the default).
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

/// How to acquire: TTL, how long to wait for a busy lease, who is asking, how many may hold the
/// name at once, the lock-delay after an expiry, the mode, and (rarely) the lease id.
#[derive(Clone)]
pub struct AcquireOptions {
    /// How long the lease lives without a renewal; the guard renews at a third of it.
    pub ttl: Duration,
    /// How long to wait in line for a busy lease; zero (the default) answers at once.
    pub wait: Duration,
    /// Who is asking, shown to other callers and operators: a host and process name, never a
    /// secret (anyone who may Describe the lease reads it).
    pub holder: String,
    /// How many holders may hold the name at once: 0 (the default) or 1 is an exclusive lease.
    pub limit: u32,
    /// How long the name (this permit) stays ungranted after this grant expires; zero by default.
    pub lock_delay: Duration,
    /// A shared (read) grant of a read-write lease; false (the default) is exclusive.
    pub shared: bool,
    /// The lease id to acquire with; `None` (the default) makes a fresh random one for each
    /// acquisition. See [`lease_id`](Self::lease_id).
    pub lease_id: Option<String>,
}

/// The lease id is a secret: shown only as set or not.
impl fmt::Debug for AcquireOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcquireOptions")
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("holder", &self.holder)
            .field("limit", &self.limit)
            .field("lock_delay", &self.lock_delay)
            .field("shared", &self.shared)
            .field("lease_id", &self.lease_id.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl AcquireOptions {
    /// A TTL, no waiting, this host and process as the holder, an exclusive lease, no lock-delay,
    /// a fresh lease id for each acquisition.
    pub fn new(ttl: Duration) -> Self {
        AcquireOptions {
            ttl,
            wait: Duration::ZERO,
            holder: default_holder(),
            limit: 0,
            lock_delay: Duration::ZERO,
            shared: false,
            lease_id: None,
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

    /// Let up to `limit` holders hold the name at once: a counting lease (a semaphore) of
    /// `limit` permits. Each grant is one permit with its own guard, lease id and fencing token
    /// (larger than every earlier grant of the name, whichever permit), renewed, released and
    /// expiring on its own. 0 or 1 is an exclusive lease. Every holder of a name must ask for the
    /// same limit: while any permit is taken, another limit fails with
    /// [`ClientError::LimitMismatch`]. At most the server's `--max-limit` (default 10,000).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Lock-delay (up to 60 s): if this grant ends by expiry (the holder stopped renewing: it
    /// died, or is paused or cut off and may still believe it holds the lease), nobody is granted
    /// the name (this permit, for a counting lease) until `delay` after the expiry, so that such a
    /// holder has time to notice before the next one starts. A release ends the lease at once,
    /// without delay. Sent in milliseconds.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Ask for a shared (read) grant: the shared grants of a name coexist, an exclusive grant
    /// (the default) excludes every other, which makes the name a read-write lock. Both modes
    /// wait in one queue, in order: a waiting exclusive caller holds back the shared callers
    /// behind it. Only with limit 0 or 1 (a counting lease has no modes). There is no upgrade
    /// or downgrade: release, then acquire again.
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// Acquire with this lease id (22 to 128 characters of `A-Z a-z 0-9 _ -`) instead of a fresh
    /// random one. An Acquire whose id already holds the name is answered that grant again (same
    /// token, same expiry), so repeating an acquisition with its id is safe (`leased acquire
    /// --lease-id`); giving such an acquisition up, or its failing, releases the id, and with it
    /// the grant. The id is the holder's secret: make it 128 bits or more from a secure random
    /// generator, and use a new one for each new acquisition.
    pub fn lease_id(mut self, lease_id: impl Into<String>) -> Self {
        self.lease_id = Some(lease_id.into());
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
    /// Someone else holds it (for the whole wait); every permit, for a counting lease.
    NotGranted(NotGranted),
}

/// Why [`LeaseClient::acquire`] did not grant: the lease stayed busy for the whole wait.
///
/// `holder`, `fencing_token` and `remaining` describe the holder of an exclusive lease, or the
/// permit that frees soonest of a counting lease (the one a waiter would get next); `held` and
/// `limit` say how full the name is. An empty `holder` with token 0, zero `remaining` and
/// `held` 0 means nobody holds it right now, but it is being handed to a caller waiting ahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotGranted {
    /// Who holds the lease (or the permit that frees soonest), as it named itself.
    pub holder: String,
    /// That holder's fencing token.
    pub fencing_token: u64,
    /// Time until that holder's lease (permit) frees unless renewed, lock-delay included; `None`
    /// if it has no expiry.
    pub remaining: Option<Duration>,
    /// Permits taken: held, or in their lock-delay (1 for a held exclusive lease).
    pub held: u32,
    /// The limit in force: 1 for an exclusive or read-write lease, N for a counting lease; 0
    /// when no permit is taken.
    pub limit: u32,
}

impl NotGranted {
    /// The same answer built from a `Describe`: the permit that frees soonest, how many are taken.
    fn from_description(description: &LeaseDescription) -> Self {
        let held = u32::try_from(description.holders.len()).unwrap_or(u32::MAX);
        match description.frees_first() {
            Some(soonest) => NotGranted {
                holder: soonest.holder.clone(),
                fencing_token: soonest.fencing_token,
                remaining: soonest.remaining,
                held,
                limit: description.limit,
            },
            // Free right now: as the server says it, being handed to a caller ahead.
            None => NotGranted {
                holder: String::new(),
                fencing_token: 0,
                remaining: Some(Duration::ZERO),
                held: 0,
                limit: 0,
            },
        }
    }
}

/// One holder of a lease (one permit of a counting lease), as anyone may see it: never its
/// lease id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentHolder {
    /// Who holds it, as it named itself.
    pub holder: String,
    /// The holder's fencing token.
    pub fencing_token: u64,
    /// Time until the lease (this permit) frees unless renewed, lock-delay included; `None` if it
    /// has no expiry.
    pub remaining: Option<Duration>,
    /// A shared (read) grant of a read-write lease; false for an exclusive grant and for the
    /// permits of a counting lease.
    pub shared: bool,
}

impl CurrentHolder {
    /// An exclusive holder, from the single-holder fields of a server from before `holders`.
    fn new(holder: String, fencing_token: u64, remaining_ms: i64) -> Self {
        CurrentHolder {
            holder,
            fencing_token,
            remaining: remaining_from_ms(remaining_ms),
            shared: false,
        }
    }

    fn from_wire(info: HolderInfo) -> Self {
        CurrentHolder {
            shared: info.shared,
            ..CurrentHolder::new(info.holder, info.fencing_token, info.remaining_ms)
        }
    }
}

/// Everything `Describe` tells anyone about a lease ([`LeaseClient::describe_lease`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseDescription {
    /// The limit in force: 1 for an exclusive or read-write lease, N for a counting lease; 0
    /// when nobody holds it.
    pub limit: u32,
    /// Every permit taken (held, or in its lock-delay after an expiry), by increasing fencing
    /// token; empty when the lease is free. An exclusive lease has at most one.
    pub holders: Vec<CurrentHolder>,
    /// Callers waiting for the name, on every replica. May be non-zero while the lease is free:
    /// it is being handed to the first of them.
    pub waiters: u32,
}

impl LeaseDescription {
    /// True if any permit is taken (held, or in its lock-delay).
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// The holder whose permit frees soonest (a permit without expiry last): the one a waiter
    /// gets next, as in [`NotGranted`].
    pub fn frees_first(&self) -> Option<&CurrentHolder> {
        self.holders
            .iter()
            .min_by_key(|h| h.remaining.unwrap_or(Duration::MAX))
    }

    fn from_reply(reply: DescribeResponse) -> Self {
        let mut holders: Vec<CurrentHolder> = reply
            .holders
            .into_iter()
            .map(CurrentHolder::from_wire)
            .collect();
        let mut limit = reply.limit;
        // A server from before counting leases sends only the single-holder fields.
        if reply.held && holders.is_empty() {
            holders.push(CurrentHolder::new(
                reply.holder,
                reply.fencing_token,
                reply.remaining_ms,
            ));
            limit = limit.max(1);
        }
        LeaseDescription {
            limit,
            holders,
            waiters: reply.waiters,
        }
    }
}

/// A lease as the server granted it, without a keepalive (what `leased acquire` prints).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantedLease {
    /// The lease's name.
    pub name: String,
    /// The holder's secret: renew and release with it, never log or show it.
    pub lease_id: String,
    /// The grant's fencing token: pass it to the resource the lease protects.
    pub fencing_token: u64,
    /// The TTL the server granted.
    pub ttl: Duration,
    /// Unix milliseconds on the server's store clock.
    pub expires_at_ms: i64,
    /// A shared (read) grant of a read-write lease.
    pub shared: bool,
}

/// The answer to [`LeaseClient::check_token`], true when it was sent: it can be stale by the time
/// it arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenCheck {
    /// The lease is held with exactly this token (for a counting lease: one of its permits is).
    /// False once that grant was released, expired (its lock-delay counts as expired) or revoked.
    pub current: bool,
    /// The token checked, when `current`; otherwise the largest token held now, 0 when nobody
    /// holds the lease.
    pub current_token: u64,
    /// Anyone holds the lease now.
    pub held: bool,
}

impl LeaseClient {
    /// Connects to `endpoint`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, ClientError> {
        Self::connect_with(endpoint, &ConnectOptions::default()).await
    }

    /// Connects with TLS settings and a bearer token (`https://` endpoints use TLS).
    ///
    /// ```no_run
    /// # use leased::client::{ClientError, ConnectOptions, LeaseClient};
    /// # async fn example() -> Result<(), ClientError> {
    /// let options = ConnectOptions {
    ///     token: std::env::var("LEASED_TOKEN").ok(),
    ///     ..ConnectOptions::default()
    /// };
    /// let client = LeaseClient::connect_with("http://leased.internal:50051", &options).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Self, ClientError> {
        let connection = connect(endpoint.into(), options).await?;
        Ok(LeaseClient {
            grpc: LeaseServiceClient::new(connection.clone()),
            connection,
        })
    }

    /// The operators' calls (List, Revoke) over this client's connection, with its TLS settings
    /// and bearer token.
    pub fn admin(&self) -> LeaseAdminClient {
        LeaseAdminClient::on(self.connection.clone())
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

    /// Who holds `name`, if anyone: the holder of an exclusive lease; for a counting lease, the
    /// holder with the smallest fencing token (see [`describe_lease`](Self::describe_lease) for
    /// every holder).
    pub async fn describe(&self, name: &str) -> Result<Option<CurrentHolder>, ClientError> {
        Ok(self.describe_lease(name).await?.holders.into_iter().next())
    }

    /// Every holder of `name` (every permit taken, for a counting lease), the limit in force and
    /// how many callers wait. One `Describe` call: a consistent snapshot.
    pub async fn describe_lease(&self, name: &str) -> Result<LeaseDescription, ClientError> {
        let request = DescribeRequest {
            name: name.to_owned(),
        };
        let reply = self.grpc.clone().describe(request).await?.into_inner();
        Ok(LeaseDescription::from_reply(reply))
    }

    /// Follows who holds `name`: a stream of [`WatchEvent`]s that starts with a
    /// [`Snapshot`](WatchCause::Snapshot) of the current state, then one event per change of
    /// holder (granted, released, expired, revoked; renewals are not events), in order, with the
    /// tokens of grants increasing. The server sends a fresh snapshot whenever it may have missed
    /// events (a Redis reconnect or failover, a watcher too slow to read): take a snapshot as the
    /// whole truth.
    ///
    /// The stream does not end on its own. It yields one `Err` and ends when the server refuses
    /// the watch (bad name, no `watch` permission: the error may come from this call or as the
    /// first item), shuts down (`UNAVAILABLE`) or the connection breaks; watching again is safe,
    /// since the first event of every watch is a snapshot.
    ///
    /// A follower of leader election, which learns who leads without polling:
    ///
    /// ```no_run
    /// use leased::client::{ClientError, LeaseClient};
    /// use tokio_stream::StreamExt;
    ///
    /// # async fn example(client: LeaseClient) -> Result<(), ClientError> {
    /// let mut events = client.watch("leader").await?;
    /// while let Some(event) = events.next().await {
    ///     let event = event?; // the stream's last item is the error that ended it
    ///     match event.current_holder() {
    ///         Some(leader) => println!("{} leads ({})", leader.holder, event.cause),
    ///         None => println!("no leader ({})", event.cause),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(&self, name: &str) -> Result<WatchStream, ClientError> {
        let request = WatchRequest {
            name: name.to_owned(),
        };
        let events = self.grpc.clone().watch(request).await?.into_inner();
        Ok(WatchStream::new(events))
    }

    /// Whether `fencing_token` is the token of a grant that holds `name` now (Chubby's
    /// CheckSequencer), for a resource that cannot store tokens itself. The answer can be stale by
    /// the time it arrives; a resource that keeps the highest token it has seen and rejects
    /// smaller ones is the stronger check. Token 0 is `INVALID_ARGUMENT`.
    ///
    /// ```no_run
    /// # use leased::client::{ClientError, LeaseClient};
    /// # async fn example(client: LeaseClient, token: u64) -> Result<(), ClientError> {
    /// if !client.check_token("nightly-report", token).await?.current {
    ///     return Ok(()); // that grant ended: refuse the write
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_token(
        &self,
        name: &str,
        fencing_token: u64,
    ) -> Result<TokenCheck, ClientError> {
        let request = CheckTokenRequest {
            name: name.to_owned(),
            fencing_token,
        };
        let reply = self.grpc.clone().check_token(request).await?.into_inner();
        Ok(TokenCheck {
            current: reply.current,
            current_token: reply.current_token,
            held: reply.held,
        })
    }

    pub(crate) fn grpc(&self) -> GrpcClient {
        self.grpc.clone()
    }
}

/// Opens the HTTP/2 connection to `endpoint` (TLS for `https://`) that every call shares, with
/// the bearer token of `options` on every request.
async fn connect(endpoint: String, options: &ConnectOptions) -> Result<Connection, ClientError> {
    let connect_error = |source| ClientError::Connect {
        endpoint: endpoint.clone(),
        source,
    };
    let builder = Endpoint::from_shared(endpoint.clone())
        .map_err(connect_error)?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    let builder = match endpoint.starts_with("https://") {
        true => with_tls(builder, options, &endpoint)?,
        false => builder,
    };
    let channel = builder.connect().await.map_err(connect_error)?;
    let token = match &options.token {
        None => None,
        Some(token) => Some(
            format!("Bearer {token}")
                .parse()
                .map_err(|_| ClientError::Config("the token is not valid ASCII".into()))?,
        ),
    };
    Ok(InterceptedService::new(channel, BearerToken(token)))
}

/// `builder` (for `endpoint`) with the TLS settings of `options`.
#[cfg(feature = "client-tls")]
fn with_tls(
    builder: Endpoint,
    options: &ConnectOptions,
    endpoint: &str,
) -> Result<Endpoint, ClientError> {
    builder
        .tls_config(options.tls_config()?)
        .map_err(|source| ClientError::Connect {
            endpoint: endpoint.to_owned(),
            source,
        })
}

/// Without the `client-tls` feature, an `https://` endpoint is a configuration error.
#[cfg(not(feature = "client-tls"))]
fn with_tls(
    builder: Endpoint,
    options: &ConnectOptions,
    endpoint: &str,
) -> Result<Endpoint, ClientError> {
    let _ = (builder, options);
    Err(ClientError::Config(format!(
        "{endpoint} needs TLS: build leased with the client-tls feature"
    )))
}

#[cfg(feature = "client-tls")]
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

/// The wire's `remaining_ms`: -1 (negative) means no expiry.
fn remaining_from_ms(remaining_ms: i64) -> Option<Duration> {
    u64::try_from(remaining_ms).ok().map(Duration::from_millis)
}

/// A wire timestamp as Unix milliseconds.
fn unix_ms(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp.seconds * 1000 + i64::from(timestamp.nanos) / 1_000_000
}

fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::HolderInfo;

    fn holder_info(holder: &str, fencing_token: u64, remaining_ms: i64) -> HolderInfo {
        HolderInfo {
            shared: false,
            holder: holder.into(),
            fencing_token,
            remaining_ms,
            expires_at: None,
        }
    }

    /// The mode of each holder comes through; two shared holders of a read-write lease have
    /// limit 1.
    #[test]
    fn description_keeps_each_holders_mode() {
        let shared = |holder, fencing_token| HolderInfo {
            shared: true,
            ..holder_info(holder, fencing_token, 900)
        };
        let reply = DescribeResponse {
            held: true,
            limit: 1,
            holders: vec![shared("r1", 7), shared("r2", 8)],
            ..Default::default()
        };
        let description = LeaseDescription::from_reply(reply);
        assert!(description.holders.iter().all(|h| h.shared));
        assert_eq!(description.limit, 1);
        let exclusive = LeaseDescription::from_reply(DescribeResponse {
            held: true,
            limit: 1,
            holders: vec![holder_info("w", 9, 900)],
            ..Default::default()
        });
        assert!(!exclusive.holders[0].shared);
    }

    /// The lease id never shows in the options' Debug.
    #[test]
    fn options_debug_hides_the_lease_id() {
        let options =
            AcquireOptions::new(Duration::from_secs(1)).lease_id("s3cret-lease-id-0123456789");
        let shown = format!("{options:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("lease_id: Some(\"<redacted>\")"), "{shown}");
    }

    #[test]
    fn description_lists_every_holder_and_frees_first_is_the_soonest() {
        let reply = DescribeResponse {
            held: true,
            holder: "a".into(),
            fencing_token: 7,
            remaining_ms: 5_000,
            limit: 3,
            holders: vec![
                holder_info("a", 7, 5_000),
                holder_info("b", 8, -1),
                holder_info("c", 9, 1_000),
            ],
            waiters: 2,
            ..Default::default()
        };
        let description = LeaseDescription::from_reply(reply);
        assert!(description.is_held());
        assert_eq!((description.limit, description.waiters), (3, 2));
        let tokens: Vec<u64> = description
            .holders
            .iter()
            .map(|h| h.fencing_token)
            .collect();
        assert_eq!(tokens, [7, 8, 9]);
        assert_eq!(description.holders[1].remaining, None);
        assert_eq!(description.frees_first().unwrap().holder, "c");
    }

    /// A server from before counting leases sends only the single-holder fields: still one
    /// holder of an exclusive lease.
    #[test]
    fn description_from_an_older_server_has_its_one_holder() {
        let reply = DescribeResponse {
            held: true,
            holder: "a".into(),
            fencing_token: 7,
            remaining_ms: 5_000,
            ..Default::default()
        };
        let description = LeaseDescription::from_reply(reply);
        assert_eq!(description.limit, 1);
        assert_eq!(
            description.holders,
            [CurrentHolder::new("a".into(), 7, 5_000)]
        );
        let free = LeaseDescription::from_reply(DescribeResponse::default());
        assert!(!free.is_held());
        assert_eq!((free.limit, free.frees_first()), (0, None));
    }
}
