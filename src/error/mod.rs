//! The crate's two error types: [`Error`] for a request that failed (the core's; it knows nothing
//! of gRPC: its one mapping to a status is `server::status`), with the typed [`Refusal`] of a
//! request the rules refuse, and [`StartupError`] for a server that cannot start. ARCHITECTURE.md, "Errors".

use std::{net::SocketAddr, path::PathBuf};

mod refusal;

pub use refusal::{GrantMismatch, Refusal};

/// Everything that can go wrong while serving a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field is out of range. `field` is the proto field name.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },

    /// The store did not answer in time or is unreachable; retrying later may succeed. The detail
    /// is logged (the first of each interval), not returned: clients see a generic message.
    #[error("store unavailable: {0}")]
    Unavailable(String),

    /// Redis made the change, but fewer replicas than `--redis-wait-replicas` confirmed it in
    /// time (`WAIT`): a failover could lose it. A grant is released again before this is
    /// answered; a renewal stays made and the holder retries. The message names the shortfall and
    /// goes to the client (as `UNAVAILABLE`): it holds nothing secret.
    #[error("{0}")]
    NotReplicated(String),

    /// The request is refused (access control, a limit, the lease's state): the reason, typed.
    /// Its status code and message are chosen in `server::status`.
    #[error("refused: {0:?}")]
    Refused(Refusal),

    /// The server is draining after SIGTERM.
    #[error("server is shutting down")]
    ShuttingDown,

    /// A bug, or a store answer that breaks its contract (a Lua error, `WRONGTYPE` on a key that
    /// something else wrote, a malformed reply). Retrying will not help; the lease name is logged
    /// (the first of each interval).
    #[error("internal error on lease {name:?}: {detail}")]
    Internal { name: String, detail: String },
}

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An `INVALID_ARGUMENT` for `field`.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        Error::Refused(refusal)
    }
}

/// Why `leased serve` could not start or stopped serving; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// A non-loopback listen address without access control or `--insecure-listen`.
    #[error(
        "refusing to listen on {address} without access control: anyone who reaches it could \
         take or release any lease. Set --auth-tokens, or pass --insecure-listen"
    )]
    InsecureListen { address: SocketAddr },

    /// A port could not be bound (in use, or not allowed).
    #[error("cannot listen on {address} ({purpose}): {source}")]
    Listen {
        address: SocketAddr,
        /// Which listener: `--listen`, `--health-listen` or `--metrics-listen`.
        purpose: &'static str,
        source: std::io::Error,
    },

    /// The listening socket cannot tell its own address (it is not a bound TCP socket).
    #[error("cannot read the listening socket's address: {0}")]
    Socket(std::io::Error),

    /// `--redis-url` is malformed or names options fred does not know.
    #[error("invalid --redis-url: {0}")]
    RedisUrl(String),

    /// Redis answered, but is older than 7.0: no sharded pub/sub for the wake-ups of waiters.
    #[error(
        "Redis {0} is too old: leased needs Redis 7.0 or newer (sharded pub/sub, SSUBSCRIBE and \
         SPUBLISH, carries the wake-ups of waiting callers). Upgrade Redis"
    )]
    RedisVersion(String),

    /// Redis may evict keys when full, lease keys included.
    #[error(
        "Redis ({server}) has maxmemory-policy {policy}: when it is full it evicts keys, and an \
         evicted lease key is a lease granted again while its holder still holds it. Set \
         maxmemory-policy to noeviction (CONFIG SET maxmemory-policy noeviction, and in \
         redis.conf), or pass --redis-allow-eviction to start anyway"
    )]
    RedisEviction { server: String, policy: String },

    /// Redis holds its leases in a layout newer than this binary knows: a newer `leased` wrote
    /// it, and this one would misread it.
    #[error(
        "Redis holds its leases in layout {held} (key {key}), but this leased knows layouts up to \
         {known} only: a newer leased wrote it, and this one would misread its leases. Run the \
         leased version that wrote layout {held} (or a newer one), or give this one a Redis of \
         its own or another --key-prefix"
    )]
    RedisLayoutNewer { key: String, held: u64, known: u64 },

    /// Redis holds its leases in a layout older than this binary still reads.
    #[error(
        "Redis holds its leases in layout {held} (key {key}), which this leased no longer reads \
         (it reads layouts {oldest} to {known}). Upgrade through an intermediate release first, \
         one that reads layout {held} and writes a newer one, then to this one"
    )]
    RedisLayoutTooOld {
        key: String,
        held: u64,
        oldest: u64,
        known: u64,
    },

    /// The layout key holds something no `leased` writes.
    #[error(
        "Redis's key {key} holds {found}, not a layout version (leased writes an integer there): \
         something else wrote it. Give leased another --key-prefix, or delete the key if nothing \
         of yours needs it (a Redis without it holds layout 1)"
    )]
    RedisLayoutUnknown { key: String, found: String },

    /// The `--auth-tokens` file cannot be read or parsed.
    #[error("cannot load --auth-tokens: {0}")]
    AuthTokens(String),

    /// A TLS certificate or key file cannot be read.
    #[error("cannot read the TLS file {path}: {source}", path = .path.display())]
    TlsFile {
        path: PathBuf,
        source: std::io::Error,
    },

    /// The certificate, key or client CA were read but cannot be used.
    #[error("invalid TLS configuration: {0}")]
    Tls(String),

    /// The gRPC server stopped with an error (after it started serving).
    #[error("the gRPC server failed: {0}")]
    Serve(tonic::transport::Error),

    /// `--otlp-endpoint` is not a URL that traces can be exported to.
    #[error(
        "invalid --otlp-endpoint {endpoint:?}: {reason}; give the collector's OTLP/gRPC URL, \
         e.g. http://otel-collector:4317"
    )]
    OtlpEndpoint { endpoint: String, reason: String },

    /// Flags that contradict each other (clap catches most combinations first).
    #[error("invalid configuration: {0}")]
    Config(&'static str),

    /// Server reflection could not be built from the compiled descriptors (a build problem).
    #[error("cannot build server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}
