//! `leased serve` settings: flags, environment variables, and their documented defaults. Plain
//! values only: `app` turns them into the server's and the store's options.

use std::{ffi::OsString, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

/// Settings of `leased serve`. Durations take a unit: `500ms`, `30s`, `10m`, `24h`.
#[derive(Args, Clone, Debug)]
pub struct ServeConfig {
    /// Address to serve gRPC on. A non-loopback address exposes the service to the network.
    #[arg(long, env = "LEASED_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    /// Redis URL (redis://, rediss://, redis-sentinel://, redis-cluster://). Without it, leases live
    /// in this process only (the embedded store): fine for a first run, lost on restart.
    #[arg(long, env = "LEASED_REDIS_URL")]
    pub redis_url: Option<String>,

    /// Longest TTL a client may ask for.
    #[arg(long, env = "LEASED_MAX_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    pub max_ttl: Duration,

    /// Longest time a client may wait in Acquire.
    #[arg(long, env = "LEASED_MAX_WAIT", default_value = "10m", value_parser = humantime::parse_duration)]
    pub max_wait: Duration,

    /// Most permits a counting lease may have (Acquire's `limit`); more get INVALID_ARGUMENT.
    #[arg(long, env = "LEASED_MAX_LIMIT", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_limit: u32,

    /// Each Redis command fails with UNAVAILABLE after this long (Redis down, stalled or partitioned).
    #[arg(long, env = "LEASED_REDIS_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub redis_timeout: Duration,

    /// Redis connections for commands; each pipelines many concurrent requests.
    #[arg(long, env = "LEASED_REDIS_POOL_SIZE", default_value_t = 4)]
    pub redis_pool_size: usize,

    /// Prefix of every Redis key and of the release channel.
    #[arg(long, env = "LEASED_KEY_PREFIX", default_value = "leased:")]
    pub key_prefix: String,

    /// How long a name's fencing counter stays in Redis after its last grant ends; then nothing
    /// of the name is left. Tokens keep increasing after it lapses (they never fall below Redis
    /// time in microseconds) unless Redis's clock steps back by more than this.
    #[arg(long, env = "LEASED_REDIS_COUNTER_KEEP", default_value = "10m", value_parser = humantime::parse_duration)]
    pub redis_counter_keep: Duration,

    /// Start even though Redis's maxmemory-policy is not noeviction. A full Redis then evicts
    /// keys, lease keys too, and an evicted lease is granted again while its holder still holds
    /// it; the server logs an error and sets leased_redis_eviction_unsafe to 1.
    #[arg(long, env = "LEASED_REDIS_ALLOW_EVICTION")]
    pub redis_allow_eviction: bool,

    /// Concurrent HTTP/2 streams per client connection (each open Acquire or Renew is one).
    #[arg(long, env = "LEASED_MAX_CONCURRENT_STREAMS", default_value_t = 1024)]
    pub max_concurrent_streams: u32,

    /// Concurrent waiters on one lease name; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASED_MAX_WAITERS_PER_NAME", default_value_t = 1024)]
    pub max_waiters_per_name: usize,

    /// Distinct lease names that Watch streams and waiting Acquires may follow on this server
    /// (each costs a subscription to the name's changes); a call that would follow one more
    /// answers RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASED_MAX_FOLLOWED_NAMES", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_followed_names: u64,

    /// Distinct lease names that the Watch streams and waiting Acquires of one token may follow
    /// on this server (with --auth-tokens).
    #[arg(long, env = "LEASED_MAX_FOLLOWED_NAMES_PER_TOKEN", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_followed_names_per_token: u64,

    /// Leases one Renew stream may hold at once (renewed and not yet lost, released or expired);
    /// a renewal of one more gets RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASED_MAX_LEASES_PER_STREAM", default_value_t = 1024)]
    pub max_leases_per_stream: usize,

    /// Open client connections, on the gRPC and health ports together, handshakes included
    /// (default 10000, or fewer if the open-file limit is lower). At the limit a new connection
    /// takes the place of the oldest one still in its handshake, or is closed at once if none is.
    #[arg(long, env = "LEASED_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,

    /// A new connection must complete TLS (if on), the HTTP/2 preface and its first SETTINGS
    /// frame within this, or it is closed.
    #[arg(long, env = "LEASED_HANDSHAKE_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub handshake_timeout: Duration,

    /// Largest request message accepted, in bytes.
    #[arg(long, env = "LEASED_MAX_MESSAGE_BYTES", default_value_t = 16 * 1024)]
    pub max_message_bytes: usize,

    /// After SIGTERM, how long in-flight calls may take before the server exits anyway.
    #[arg(long, env = "LEASED_DRAIN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_grace: Duration,

    /// Serve Prometheus metrics over HTTP at /metrics on this address (off when unset).
    #[arg(long, env = "LEASED_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Serve a plaintext grpc.health.v1 on this address too, for Kubernetes probes when the gRPC
    /// port has TLS (off when unset).
    #[arg(long, env = "LEASED_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,

    /// PEM certificate chain for TLS on the gRPC port (with --tls-key).
    #[arg(long, env = "LEASED_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for TLS on the gRPC port (with --tls-cert).
    #[arg(long, env = "LEASED_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA bundle: clients must present a certificate it signed (mTLS). Needs --tls-cert.
    #[arg(long, env = "LEASED_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// JSON file of bearer tokens, each allowed name prefixes and operations (access control).
    /// Reloaded on SIGHUP.
    #[arg(long, env = "LEASED_AUTH_TOKENS")]
    pub auth_tokens: Option<PathBuf>,

    /// Allow listening on a non-loopback address without --auth-tokens: anyone who can reach the
    /// port can then take or release any lease.
    #[arg(long, env = "LEASED_INSECURE_LISTEN")]
    pub insecure_listen: bool,

    /// Log format; the level is set by RUST_LOG (default info).
    #[arg(long, env = "LEASED_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl ServeConfig {
    /// Parses `leased serve` flags (and `LEASED_*` variables) as the binary does; for embedding
    /// the server, e.g. in tests.
    pub fn from_args<I: IntoIterator<Item = T>, T: Into<OsString> + Clone>(
        args: I,
    ) -> Result<Self, clap::Error> {
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            config: ServeConfig,
        }
        let args = std::iter::once(OsString::from("serve")).chain(args.into_iter().map(Into::into));
        Ok(<Serve as clap::Parser>::try_parse_from(args)?.config)
    }
}
