//! `leased serve` settings: flags, environment variables, and their documented defaults.

use std::{ffi::OsString, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use clap::{Args, ValueEnum};

use crate::{
    error::StartupError,
    lease::Limits,
    server::{
        ServerOptions, TlsFiles,
        auth::Authenticator,
        connections::{self, ConnectionLimits},
    },
    store::RedisOptions,
};

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

    /// Concurrent HTTP/2 streams per client connection (each open Acquire or Renew is one).
    #[arg(long, env = "LEASED_MAX_CONCURRENT_STREAMS", default_value_t = 1024)]
    pub max_concurrent_streams: u32,

    /// Concurrent waiters on one lease name; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASED_MAX_WAITERS_PER_NAME", default_value_t = 1024)]
    pub max_waiters_per_name: usize,

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

    /// Refuses a non-loopback `address` without access control unless `--insecure-listen`.
    pub fn check_listen_address(&self, address: SocketAddr) -> Result<(), StartupError> {
        if self.auth_tokens.is_none() && !address.ip().is_loopback() && !self.insecure_listen {
            return Err(StartupError::InsecureListen { address });
        }
        Ok(())
    }

    /// The gRPC server's settings; loads the auth tokens file.
    pub fn server_options(&self) -> Result<ServerOptions, StartupError> {
        let auth = match &self.auth_tokens {
            Some(path) => Some(Arc::new(
                Authenticator::load(path).map_err(StartupError::AuthTokens)?,
            )),
            None => None,
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
            }),
            (None, None) => None,
            _ => return Err(StartupError::Config("--tls-cert and --tls-key go together")),
        };
        Ok(ServerOptions {
            limits: Limits {
                max_ttl: self.max_ttl,
                max_wait: self.max_wait,
                max_limit: self.max_limit,
            },
            max_concurrent_streams: self.max_concurrent_streams,
            max_message_bytes: self.max_message_bytes,
            max_leases_per_renew_stream: self.max_leases_per_stream,
            connections: self.connection_limits()?,
            drain_grace: self.drain_grace,
            tls,
            auth,
            ..ServerOptions::default()
        })
    }

    /// `--max-connections` (or its default, within the open-file limit) and
    /// `--handshake-timeout`. Warns if an explicit limit leaves no room in the open-file limit:
    /// past it, `accept` fails and waits instead of refusing.
    fn connection_limits(&self) -> Result<ConnectionLimits, StartupError> {
        if self.handshake_timeout.is_zero() {
            return Err(StartupError::Config("--handshake-timeout must be above 0"));
        }
        let fd_limit = connections::fd_limit().unwrap_or(u64::MAX);
        let room = connections::connections_within(fd_limit);
        let max_connections = match self.max_connections {
            Some(0) => return Err(StartupError::Config("--max-connections must be at least 1")),
            Some(max) => {
                if max > room {
                    tracing::warn!(
                        max_connections = max,
                        fd_limit,
                        "--max-connections is above what the open-file limit leaves room for; \
                         raise the limit (ulimit -n) or lower --max-connections"
                    );
                }
                max
            }
            None => connections::DEFAULT_MAX_CONNECTIONS.min(room).max(1),
        };
        Ok(ConnectionLimits {
            max_connections,
            handshake_timeout: self.handshake_timeout,
        })
    }

    /// The Redis store's settings, if a Redis URL is set.
    pub fn redis_options(&self) -> Option<RedisOptions> {
        self.redis_url.as_ref().map(|url| RedisOptions {
            url: url.clone(),
            command_timeout: self.redis_timeout,
            pool_size: self.redis_pool_size,
            key_prefix: self.key_prefix.clone(),
            max_waiters_per_name: self.max_waiters_per_name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_loopback_listen_needs_auth_or_an_explicit_opt_in() {
        let everywhere: SocketAddr = "0.0.0.0:50051".parse().unwrap();
        let loopback: SocketAddr = "127.0.0.1:50051".parse().unwrap();
        let plain = ServeConfig::from_args(Vec::<String>::new()).unwrap();
        assert!(plain.check_listen_address(loopback).is_ok());
        let refused = plain
            .check_listen_address(everywhere)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("--insecure-listen"), "{refused}");
        let opted_in = ServeConfig::from_args(["--insecure-listen"]).unwrap();
        assert!(opted_in.check_listen_address(everywhere).is_ok());
        let with_auth = ServeConfig::from_args(["--auth-tokens", "/tokens.json"]).unwrap();
        assert!(with_auth.check_listen_address(everywhere).is_ok());
    }
}
