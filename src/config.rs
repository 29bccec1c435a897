//! `leased serve` settings: flags, environment variables, and their documented defaults.

use std::{net::SocketAddr, time::Duration};

use clap::{Args, ValueEnum};

use crate::{lease::Limits, server::ServerOptions, store::RedisOptions};

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

    /// Distinct leases one Renew stream may renew; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASED_MAX_LEASES_PER_STREAM", default_value_t = 1024)]
    pub max_leases_per_stream: usize,

    /// Largest request message accepted, in bytes.
    #[arg(long, env = "LEASED_MAX_MESSAGE_BYTES", default_value_t = 16 * 1024)]
    pub max_message_bytes: usize,

    /// After SIGTERM, how long in-flight calls may take before the server exits anyway.
    #[arg(long, env = "LEASED_DRAIN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_grace: Duration,

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
    /// The gRPC server's settings.
    pub fn server_options(&self) -> ServerOptions {
        ServerOptions {
            limits: Limits {
                max_ttl: self.max_ttl,
                max_wait: self.max_wait,
            },
            max_concurrent_streams: self.max_concurrent_streams,
            max_message_bytes: self.max_message_bytes,
            max_leases_per_renew_stream: self.max_leases_per_stream,
            drain_grace: self.drain_grace,
            ..ServerOptions::default()
        }
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
