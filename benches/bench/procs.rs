//! The bench's side of the processes, which the shared [`crate::harness`] starts: each one's CPU
//! time metered under a label, logs and scratch files in `target/bench/`, the release binary or
//! `--leased-bin`, and errors as [`BenchResult`].

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use tonic::transport::{Channel, Endpoint};

use crate::{
    BenchResult,
    harness::{
        etcd::EtcdServer,
        free_port,
        leased::{LeasedProcess, Log},
        poll_until_async,
        proc::rss_kib,
        redis::RedisServer,
    },
    measure::Metered,
};

/// Where a run writes its report, logs and scratch files: `target/bench/`.
pub fn bench_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("bench");
    std::fs::create_dir_all(&dir).expect("cannot create target/bench");
    dir
}

/// Whether `program` can be started (is on `PATH`).
pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// The `leased` binary the bench starts instead of the one cargo built (`--leased-bin`).
pub static LEASED_BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// A `redis-server` without persistence, its CPU time metered as `redis`.
pub fn start_redis() -> BenchResult<Metered<RedisServer>> {
    start_redis_as("redis")
}

/// [`start_redis`] for a scenario's own Redis beside the run's, its CPU time metered as `label`.
pub fn start_redis_as(label: &str) -> BenchResult<Metered<RedisServer>> {
    let redis = RedisServer::try_start()
        .map_err(|e| format!("{e}; run scripts/bench.sh to install redis-server"))?;
    Ok(Metered::new(label, redis.pid(), redis))
}

/// A `redis-server` without persistence replicating `master` (`--replicaof`), its CPU time
/// metered as `label`; answers once its first sync is done (`master_link_status:up`, and the
/// master counts it in `connected_slaves`), since `WAIT` counts it only from then on.
pub async fn start_replica_as(
    label: &str,
    master: &RedisServer,
) -> BenchResult<Metered<RedisServer>> {
    let master_port = master.port.to_string();
    let replica =
        RedisServer::try_start_with(free_port(), &["--replicaof", "127.0.0.1", &master_port])?;
    let replica = Metered::new(label, replica.pid(), replica);
    poll_until_async(
        "the Redis replica's first sync (master_link_status:up)",
        Duration::from_secs(20),
        || {
            let up = replica
                .info_field("replication", "master_link_status")
                .is_some_and(|status| status == "up")
                && master
                    .info_field("replication", "connected_slaves")
                    .and_then(|count| count.parse::<u32>().ok())
                    .is_some_and(|count| count >= 1);
            std::future::ready(up)
        },
    )
    .await?;
    Ok(replica)
}

/// `leased serve` as a child process (on Redis when `redis_url` is set), logging to
/// `target/bench/leased-<label>.log`, its CPU time metered as `leased` for the main server (on
/// Redis, label `redis`) and as `leased-<label>` for any other (the embedded store, a second
/// replica on the same Redis).
pub async fn start_leased(
    label: &str,
    redis_url: Option<&str>,
    extra_args: &[String],
    log_level: &str,
) -> BenchResult<Metered<LeasedProcess>> {
    let helm = helm_config()?;
    let mut serve = LeasedProcess::serve()
        .args(extra_args)
        .log(Log::File(bench_dir().join(format!("leased-{label}.log"))))
        .log_level(log_level);
    if let Some(url) = redis_url {
        let timeout = helm.iter().find(|(key, _)| key == "LEASED_REDIS_TIMEOUT");
        serve = serve
            .redis(url)
            .redis_timeout(timeout.map_or("2s", |(_, value)| value.as_str()));
    }
    serve = serve.envs(helm.into_iter().filter(|(key, _)| key != "RUST_LOG"));
    if let Some(program) = LEASED_BIN.get() {
        serve = serve.program(program.clone());
    }
    let server = serve.try_start().await?;
    eprintln!(
        "bench: leased ({label}) is pid {} on {}",
        server.pid(),
        server.address
    );
    let cpu_label = match (redis_url, label) {
        (Some(_), "redis") => "leased".to_owned(),
        _ => format!("leased-{label}"),
    };
    Ok(Metered::new(&cpu_label, server.pid(), server))
}

/// A one-member etcd with its data and log in `target/bench/`, its CPU time metered as `etcd`.
pub async fn start_etcd() -> BenchResult<Metered<EtcdServer>> {
    if !installed("etcd") {
        return Err("etcd is not installed: run scripts/bench.sh (Debian etcd-server)".into());
    }
    let etcd = EtcdServer::try_start(&bench_dir()).await?;
    Ok(Metered::new("etcd", etcd.pid(), etcd))
}

/// `connections` separate HTTP/2 connections to `server`.
pub async fn connections(server: &LeasedProcess, connections: usize) -> BenchResult<Vec<Channel>> {
    let mut channels = Vec::with_capacity(connections);
    for _ in 0..connections.max(1) {
        channels.push(connect(server.address).await?);
    }
    Ok(channels)
}

/// A plaintext HTTP/2 connection to `address`, with Nagle off as a latency-minded client would.
pub async fn connect(address: SocketAddr) -> BenchResult<Channel> {
    Ok(Endpoint::from_shared(format!("http://{address}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?)
}

/// Resident memory of `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> BenchResult<u64> {
    Ok(rss_kib(pid)? * 1024)
}

/// The settings the Helm chart ships: the `config:` block of `helm/leased/values.yaml`, as the
/// chart's ConfigMap (`templates/configmap.yaml`) turns it into environment variables, so that
/// the bench serves the configuration users run (JSON logs, the Redis timeout, every limit).
/// The bench's own flags (`--redis-pool-size`, `--server-log`, a scenario's limits) win.
pub fn helm_config() -> BenchResult<Vec<(String, String)>> {
    const VARIABLES: [(&str, &str); 20] = [
        ("maxTtl", "LEASED_MAX_TTL"),
        ("maxWait", "LEASED_MAX_WAIT"),
        ("redisTimeout", "LEASED_REDIS_TIMEOUT"),
        ("redisPoolSize", "LEASED_REDIS_POOL_SIZE"),
        ("keyPrefix", "LEASED_KEY_PREFIX"),
        ("redisCounterKeep", "LEASED_REDIS_COUNTER_KEEP"),
        ("redisWaitReplicas", "LEASED_REDIS_WAIT_REPLICAS"),
        ("redisWaitTimeout", "LEASED_REDIS_WAIT_TIMEOUT"),
        ("maxConcurrentStreams", "LEASED_MAX_CONCURRENT_STREAMS"),
        ("maxWaitersPerName", "LEASED_MAX_WAITERS_PER_NAME"),
        ("maxLimit", "LEASED_MAX_LIMIT"),
        ("maxLeasesPerStream", "LEASED_MAX_LEASES_PER_STREAM"),
        ("maxFollowedNames", "LEASED_MAX_FOLLOWED_NAMES"),
        (
            "maxFollowedNamesPerToken",
            "LEASED_MAX_FOLLOWED_NAMES_PER_TOKEN",
        ),
        ("maxMessageBytes", "LEASED_MAX_MESSAGE_BYTES"),
        ("maxConnections", "LEASED_MAX_CONNECTIONS"),
        ("handshakeTimeout", "LEASED_HANDSHAKE_TIMEOUT"),
        ("drainGraceSeconds", "LEASED_DRAIN_GRACE"),
        ("logFormat", "LEASED_LOG_FORMAT"),
        ("logLevel", "RUST_LOG"),
    ];
    let (path, values) = helm_values()?;
    let mut config = Vec::new();
    let mut found = 0;
    for (key, value) in helm_block(&values, "config") {
        let (_, variable) = VARIABLES
            .iter()
            .find(|(name, _)| *name == key)
            .ok_or_else(|| format!("{path}: config.{key} is new; map it in procs::helm_config"))?;
        found += 1;
        // An empty setting is left out of the ConfigMap (the server's default applies).
        if value.is_empty() {
            continue;
        }
        let value = match key {
            "drainGraceSeconds" => format!("{value}s"),
            _ => value.to_owned(),
        };
        config.push((variable.to_string(), value));
    }
    if found != VARIABLES.len() {
        return Err(format!(
            "{path}: {found} of the {} config settings found",
            VARIABLES.len()
        )
        .into());
    }
    Ok(config)
}

/// The chart's `tracing.sampleRatio` (`LEASED_OTLP_SAMPLE_RATIO` when tracing is on), so that
/// `tracing_cost` traces the share of RPCs that a deployment of the chart does.
pub fn helm_sample_ratio() -> BenchResult<String> {
    let (path, values) = helm_values()?;
    let ratio = helm_block(&values, "tracing")
        .find(|(key, _)| *key == "sampleRatio")
        .map(|(_, value)| value.to_owned())
        .ok_or_else(|| format!("{path}: no tracing.sampleRatio"))?;
    ratio
        .parse::<f64>()
        .map_err(|e| format!("{path}: tracing.sampleRatio {ratio:?}: {e}"))?;
    Ok(ratio)
}

/// `helm/leased/values.yaml`: its path and text.
fn helm_values() -> BenchResult<(&'static str, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/helm/leased/values.yaml");
    let values = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    Ok((path, values))
}

/// The settings of the top-level block `name` of the chart's values, as (key, value) with the
/// value unquoted: the lines indented by two spaces after `name:`, up to the next top-level
/// line; comments, blank lines and deeper lines aside.
fn helm_block<'a>(values: &'a str, name: &str) -> impl Iterator<Item = (&'a str, &'a str)> {
    let header = format!("{name}:");
    values
        .lines()
        .skip_while(move |line| *line != header)
        .skip(1)
        .take_while(|line| line.is_empty() || line.starts_with(' ') || line.starts_with('#'))
        .filter_map(|line| {
            let (key, value) = line.strip_prefix("  ")?.split_once(": ")?;
            (!key.starts_with([' ', '#'])).then(|| (key, value.trim().trim_matches('"')))
        })
}
