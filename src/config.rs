//! `leased serve` settings: flags, environment variables, and their documented defaults. Plain
//! values only: `app` turns them into the server's and the store's options.

use std::{ffi::OsString, fmt, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

/// Settings of `leased serve`. Durations take a unit: `500ms`, `30s`, `10m`, `24h`.
#[derive(Args, Clone, Debug)]
pub struct ServeConfig {
    /// Address to serve gRPC on. A non-loopback address exposes the service to the network.
    #[arg(long, env = "LEASED_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    /// Redis URL (redis://, rediss://, redis-sentinel://, redis-cluster://). Without it, leases live
    /// in this process only (the embedded store): fine for a first run, lost on restart.
    #[arg(long, env = "LEASED_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<RedisUrl>,

    /// Longest TTL a client may ask for.
    #[arg(long, env = "LEASED_MAX_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    pub max_ttl: Duration,

    /// Longest time a client may wait in Acquire.
    #[arg(long, env = "LEASED_MAX_WAIT", default_value = "10m", value_parser = humantime::parse_duration)]
    pub max_wait: Duration,

    /// Most permits a counting lease may have (Acquire's `limit`; more get INVALID_ARGUMENT), and
    /// most shared grants of a read-write lease at once (more get RESOURCE_EXHAUSTED).
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

    /// Answer a grant or a renewal only once this many Redis replicas have it (Redis WAIT; on
    /// Cluster, replicas of the name's master). Fewer in time: the call answers UNAVAILABLE and
    /// a grant is released again. 0: answer once the master has it, as Redis replicates
    /// asynchronously (a failover may lose it).
    #[arg(long, env = "LEASED_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_wait_replicas: u32,

    /// How long a grant or renewal waits for --redis-wait-replicas replicas (default: the
    /// --redis-timeout).
    #[arg(long, env = "LEASED_REDIS_WAIT_TIMEOUT", value_parser = humantime::parse_duration)]
    pub redis_wait_timeout: Option<Duration>,

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

    /// A name the metrics port answers to besides its IP addresses and localhost, such as its
    /// Service's DNS name (repeatable, or comma-separated). A request whose Host names another
    /// answers 421 Misdirected Request, so that a web page whose name was re-pointed at this
    /// address (DNS rebinding) cannot read the metrics.
    #[arg(long = "metrics-host", env = "LEASED_METRICS_HOST", value_name = "NAME", value_delimiter = ',', value_parser = host_name)]
    pub metrics_hosts: Vec<String>,

    /// Serve the operator's console (a web page: leases, live holders, revoke) over HTTP on this
    /// address (off when unset). Plain HTTP: keep it on loopback (kubectl port-forward) or behind
    /// a TLS proxy; off loopback it needs --auth-tokens or --insecure-listen, as --listen does.
    #[arg(long, env = "LEASED_CONSOLE_LISTEN")]
    pub console_listen: Option<SocketAddr>,

    /// A name the console answers to besides its IP addresses and localhost, such as the name of
    /// the TLS proxy in front of it (repeatable, or comma-separated). A request whose Host names
    /// another answers 421 Misdirected Request, so that a web page whose name was re-pointed at
    /// this address (DNS rebinding) cannot list or revoke.
    #[arg(long = "console-host", env = "LEASED_CONSOLE_HOST", value_name = "NAME", value_delimiter = ',', value_parser = host_name)]
    pub console_hosts: Vec<String>,

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

    /// Export a trace span of every RPC, with its store calls as child spans, over OTLP/gRPC to
    /// this collector (http:// or https://, e.g. http://otel-collector:4317). Off when unset:
    /// nothing is recorded.
    #[arg(long, env = "LEASED_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// With --otlp-endpoint, the share of RPCs traced, from 0.0 to 1.0 (head sampling, decided
    /// before the span is made: an RPC left out costs no span). A caller's W3C `traceparent` on
    /// an authenticated call decides instead: traced if its sampled flag is set, not otherwise.
    #[arg(long, env = "LEASED_OTLP_SAMPLE_RATIO", value_name = "RATIO", default_value_t = 1.0, value_parser = sample_ratio)]
    pub otlp_sample_ratio: f64,
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

/// `--otlp-sample-ratio`: a number from 0 to 1.
fn sample_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err("a ratio from 0.0 to 1.0 (0.1: one RPC in ten traced)".to_owned()),
    }
}

/// A `--console-host` or `--metrics-host` name, lowercase and without a trailing dot, as the
/// side ports compare a request's Host. Ports and IP addresses are refused: every port and every
/// IP address is accepted anyway, and a value with them would look like a restriction it is not.
fn host_name(text: &str) -> Result<String, String> {
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    if name.is_empty() {
        return Err("empty: give a host name, e.g. leases.example.com".to_owned());
    }
    let unbracketed = name.trim_start_matches('[').trim_end_matches(']');
    if unbracketed.parse::<std::net::IpAddr>().is_ok() {
        return Err("an IP address is always accepted: give a name".to_owned());
    }
    if name.contains([':', '/']) {
        return Err("a name only, without a scheme or a port: every port is accepted".to_owned());
    }
    let labels_valid = name.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_'))
    });
    if !labels_valid {
        return Err("not a host name: dot-separated letters, digits, '-' and '_'".to_owned());
    }
    Ok(name)
}

/// A Redis URL, which may hold passwords: `Debug` shows it with them replaced by `***`
/// ([`RedisUrl::redacted`]), so that the settings can be printed whole; there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl(String);

impl RedisUrl {
    /// The URL as given, passwords included: for connecting, never for a log line.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The URL with the password of its user info (`redis://user:***@host:6379/0`,
    /// `redis://:***@host`) and the value of any query parameter whose name holds "password"
    /// (`sentinelPassword=***`) replaced by `***`.
    ///
    /// The user info ends at the last `@` before the query, or, when there is none there, at the
    /// last `@` of the whole URL: a password with an unescaped `/`, `?`, `#` or `@` is hidden
    /// whole too (at worst more than the password is hidden, never less).
    pub fn redacted(&self) -> String {
        let url = self.0.as_str();
        let (scheme, rest) = match url.find("://") {
            Some(index) => url.split_at(index + 3),
            None => ("", url),
        };
        let before_query = rest.find('?').map_or(rest, |index| &rest[..index]);
        let user_info_end = before_query.rfind('@').or_else(|| rest.rfind('@'));
        let (user_info, after) = match user_info_end {
            Some(index) => rest.split_at(index),
            None => ("", rest),
        };
        let user_info = match user_info.split_once(':') {
            Some((user, password)) if !password.is_empty() => format!("{user}:***"),
            _ => user_info.to_owned(),
        };
        let after = match after.split_once('?') {
            Some((path, query)) => format!("{path}?{}", redact_query(query)),
            None => after.to_owned(),
        };
        format!("{scheme}{user_info}{after}")
    }
}

/// A query string with the value of each parameter whose name (percent-decoded, any case) holds
/// "password" replaced by `***`, up to the next `&` (a `#` in the value is taken as part of it).
fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _))
                if percent_decoded(name)
                    .to_ascii_lowercase()
                    .contains("password") =>
            {
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `%XX` escapes decoded (and `+` as a space, as in a query), lossily: only for comparing names.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = |offset: usize| {
            bytes
                .get(index + offset)
                .and_then(|digit| (*digit as char).to_digit(16))
        };
        match (bytes[index], hex(1), hex(2)) {
            (b'%', Some(high), Some(low)) => {
                decoded.push((high * 16 + low) as u8);
                index += 3;
            }
            (b'+', _, _) => {
                decoded.push(b' ');
                index += 1;
            }
            (byte, _, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisUrl").field(&self.redacted()).finish()
    }
}

impl From<String> for RedisUrl {
    fn from(url: String) -> Self {
        RedisUrl(url)
    }
}

impl From<&str> for RedisUrl {
    fn from(url: &str) -> Self {
        RedisUrl(url.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(url: &str) -> String {
        RedisUrl::from(url).redacted()
    }

    #[test]
    fn the_password_of_the_user_info_is_replaced() {
        assert_eq!(
            redacted("redis://user:s3cret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redacted("redis://:s3cret@host"), "redis://:***@host");
        assert_eq!(
            redacted("rediss://default:s3cret@redis.example:6380"),
            "rediss://default:***@redis.example:6380"
        );
        assert_eq!(
            redacted("redis-cluster://user:s3cret@a:7000?node=b:7001&node=c:7002"),
            "redis-cluster://user:***@a:7000?node=b:7001&node=c:7002"
        );
        assert_eq!(
            redacted(
                "redis-sentinel://user:s3cret@s1:26379/2?sentinelServiceName=mymaster\
                 &sentinelUsername=sentinel-user&sentinelPassword=s3cret2&node=s2:26379"
            ),
            "redis-sentinel://user:***@s1:26379/2?sentinelServiceName=mymaster\
             &sentinelUsername=sentinel-user&sentinelPassword=***&node=s2:26379"
        );
        assert_eq!(
            redacted("redis+unix://user:s3cret@localhost/run/redis.sock"),
            "redis+unix://user:***@localhost/run/redis.sock"
        );
    }

    #[test]
    fn a_url_without_a_password_is_unchanged() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://user@host:6379/1",
            "redis://user:@host",
            "redis+unix:///run/redis@1.sock",
            "redis-cluster://a:7000?node=b:7001",
            "",
        ] {
            assert_eq!(redacted(url), url);
        }
    }

    #[test]
    fn a_password_with_unescaped_delimiters_is_hidden_whole() {
        for url in [
            "redis://:pa/ss@host:6379/0",
            "redis://user:pa@ss@host",
            "redis://user:pa?ss@host",
            "redis://user:pa#ss@host",
            "redis://user:pa?ss@host?sentinelUsername=a@b",
            "user:pass@host:6379",
        ] {
            let redacted = redacted(url);
            assert!(!redacted.contains("pa"), "{url} -> {redacted}");
            assert!(!redacted.contains("ss"), "{url} -> {redacted}");
            assert!(redacted.contains(":***@"), "{url} -> {redacted}");
        }
    }

    #[test]
    fn a_password_query_parameter_is_hidden_in_any_spelling() {
        assert_eq!(
            redacted("redis-sentinel://h:26379?sentinel%50assword=x&PASSWORD=y#z&a=b#frag"),
            "redis-sentinel://h:26379?sentinel%50assword=***&PASSWORD=***&a=b#frag"
        );
    }

    /// `--console-host` and `--metrics-host` repeat or take a comma-separated list; a name is
    /// compared lowercase without its trailing dot; a port, an IP address or a non-name is
    /// refused with the flag named.
    #[test]
    fn host_names_are_names_only() {
        let config = ServeConfig::from_args([
            "--console-host",
            "Leases.Example.",
            "--console-host",
            "a,b-c",
        ])
        .unwrap();
        assert_eq!(config.console_hosts, ["leases.example", "a", "b-c"]);
        assert!(config.metrics_hosts.is_empty());
        for refused in [
            "leases.example:8080",
            "127.0.0.1",
            "[::1]",
            "http://x",
            "a..b",
            "a b",
            "",
        ] {
            let error = ServeConfig::from_args(["--metrics-host", refused])
                .unwrap_err()
                .to_string();
            assert!(error.contains("--metrics-host"), "{refused}: {error}");
        }
    }

    /// `--otlp-sample-ratio` (or `LEASED_OTLP_SAMPLE_RATIO`) is 1 unless set, and a number from 0
    /// to 1: anything else is refused with the flag named.
    #[test]
    fn the_sample_ratio_is_a_number_from_0_to_1() {
        assert_eq!(
            ServeConfig::from_args::<_, &str>([])
                .unwrap()
                .otlp_sample_ratio,
            1.0
        );
        for (given, ratio) in [("0", 0.0), ("0.1", 0.1), ("1", 1.0), ("1.0", 1.0)] {
            let config = ServeConfig::from_args(["--otlp-sample-ratio", given]).unwrap();
            assert_eq!(config.otlp_sample_ratio, ratio);
        }
        for refused in ["-0.1", "1.5", "NaN", "inf", "", "ten percent"] {
            let error = ServeConfig::from_args([format!("--otlp-sample-ratio={refused}")])
                .unwrap_err()
                .to_string();
            assert!(error.contains("--otlp-sample-ratio"), "{refused}: {error}");
        }
    }

    /// The password never appears in the settings' `Debug`, whatever the URL's scheme.
    #[test]
    fn debug_of_the_settings_never_shows_the_redis_password() {
        for url in [
            "redis://user:hunter2-secret@host:6379/0",
            "redis://:hunter2-secret@host",
            "rediss://user:hunter2-secret@host:6380",
            "redis-sentinel://user:hunter2-secret@host:26379/0?sentinelServiceName=m\
             &sentinelPassword=hunter2-secret",
            "redis-cluster://user:hunter2-secret@host:7000?node=other:7001",
        ] {
            let config = ServeConfig::from_args(["--redis-url", url]).unwrap();
            assert_eq!(config.redis_url.as_ref().map(RedisUrl::as_str), Some(url));
            let debug = format!("{config:?}");
            assert!(!debug.contains("hunter2"), "{debug}");
            assert!(debug.contains(":***@host"), "{debug}");
            let pretty = format!("{config:#?}");
            assert!(!pretty.contains("hunter2"), "{pretty}");
        }
    }
}
