//! `held_scale`: many leases held at once and kept alive over 1,000 Renew streams, as a large
//! fleet would. Measures what holding them costs (Redis memory per lease, the server's resident
//! memory) and the cycle rate of other callers meanwhile.

use std::time::{Duration, Instant};

use tokio::{sync::watch, task::JoinSet, time::MissedTickBehavior};
use tonic::transport::Channel;

use crate::{
    BenchResult,
    harness::{leased::LeasedProcess, redis::RedisServer},
    measure::{Budget, Row, closed_loop},
    procs::rss_bytes,
    workload::{RenewStream, acquire_many, measure_grpc_cycles, open_renew_streams, split_among},
};

/// TTL of the held leases: they must outlive acquiring all of them and the first renewal pass.
const HELD_TTL_MS: i64 = 120_000;

/// Each held lease is renewed this often while the cycles run.
const RENEW_PERIOD: Duration = Duration::from_secs(20);

/// Callers acquiring the held leases (and running the cycles meanwhile).
const CONCURRENCY: usize = 64;

pub struct Scale {
    pub held: usize,
    pub streams: usize,
    pub quick: bool,
}

pub async fn held_scale(
    scale: &Scale,
    redis: &RedisServer,
    server: &LeasedProcess,
    channels: &[Channel],
    budget: Budget,
) -> BenchResult<Vec<Row>> {
    let rss_before = rss_bytes(server.pid())?;
    let used_memory_before = used_memory(redis)?;

    let names = (0..scale.held)
        .map(|index| format!("bench/held/{index:06}"))
        .collect();
    let acquire_started = Instant::now();
    let leases = acquire_many(channels, names, HELD_TTL_MS, CONCURRENCY).await?;
    let acquire_ops_per_s = scale.held as f64 / acquire_started.elapsed().as_secs_f64();
    let used_memory_held = used_memory(redis)?;
    let redis_bytes_per_lease = (used_memory_held - used_memory_before) as f64 / scale.held as f64;
    let key_bytes = lease_key_bytes(redis, &leases[0].name)?;

    // One pass over every lease, all streams at once: renewals per second at this scale.
    let streams = open_renew_streams(channels, split_among(leases, scale.streams)).await?;
    let stream_count = streams.len();
    let pass_budget = Budget {
        warmup: Duration::ZERO,
        measure: Duration::from_secs(300),
        max_ops_per_worker: scale.held.div_ceil(stream_count) as u64,
    };
    let (renew_pass, streams) = closed_loop(streams, pass_budget).await?;

    // Keep renewing in the background while other callers cycle.
    let (stop, stopped) = watch::channel(false);
    let mut renewers = JoinSet::new();
    for (index, stream) in streams.into_iter().enumerate() {
        let offset = RENEW_PERIOD.mul_f64(index as f64 / stream_count as f64);
        renewers.spawn(keep_renewing(stream, offset, stopped.clone()));
    }
    let cycles = measure_grpc_cycles(channels, CONCURRENCY, "bench/held-cycle", budget).await?;
    let rss_held = rss_bytes(server.pid())?;
    stop.send_replace(true);
    let mut renewals_meanwhile = 0;
    while let Some(joined) = renewers.join_next().await {
        renewals_meanwhile += joined??;
    }

    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let held_note = match scale.quick {
        true => format!("{} held (--quick; the full run holds 100,000)", scale.held),
        false => format!("{} held", scale.held),
    };
    let cycles_row = Row::new(
        "held_scale",
        &cycles,
        format!(
            "grpc_cycle@{CONCURRENCY} while {held_note} and renewed every {}s over {stream_count} \
             streams; server RSS {:.1} MiB (leased child process), Redis {:.0} B/lease",
            RENEW_PERIOD.as_secs(),
            mib(rss_held),
            redis_bytes_per_lease,
        ),
    )
    .with("held", scale.held)
    .with("renew_streams", stream_count)
    .with("grpc_connections", channels.len())
    .with("server_rss_bytes", rss_held)
    .with("server_rss_mib", (mib(rss_held) * 10.0).round() / 10.0)
    .with(
        "server_rss_before_mib",
        (mib(rss_before) * 10.0).round() / 10.0,
    )
    .with(
        "redis_used_memory_delta_bytes",
        used_memory_held - used_memory_before,
    )
    .with("redis_bytes_per_lease", redis_bytes_per_lease.round())
    .with("redis_memory_usage_per_key", key_bytes)
    .with("acquire_ops_per_s", acquire_ops_per_s.round())
    .with("renewals_during_cycles", renewals_meanwhile);
    let pass_row = Row::new(
        "held_scale_renew_pass",
        &renew_pass,
        format!("one renewal of each of the {held_note} leases, {stream_count} streams at once"),
    );
    Ok(vec![cycles_row, pass_row])
}

/// Renews the stream's leases in turn, each once per [`RENEW_PERIOD`], until `stop`; answers how
/// many renewals it made.
async fn keep_renewing(
    mut stream: RenewStream,
    offset: Duration,
    mut stop: watch::Receiver<bool>,
) -> BenchResult<u64> {
    let every = RENEW_PERIOD / stream.lease_count().max(1) as u32;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + offset, every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut renewals = 0;
    loop {
        tokio::select! {
            // `stop` changes once, to true (or its sender is gone): either way, stop.
            _ = stop.changed() => return Ok(renewals),
            _ = ticks.tick() => {
                stream.renew_next().await?;
                renewals += 1;
            }
        }
    }
}

/// `MEMORY USAGE` of each key of one lease: what a held lease costs in Redis, key by key.
fn lease_key_bytes(redis: &RedisServer, name: &str) -> BenchResult<serde_json::Value> {
    let lease = format!("leased:{{{name}}}");
    let mut bytes = serde_json::Map::new();
    for (part, key) in [
        ("lease", lease.clone()),
        ("owner", format!("{lease}:owner")),
        ("fence", format!("{lease}:fence")),
    ] {
        let usage = redis.query(&["MEMORY", "USAGE", &key])?.as_int();
        let usage = usage.ok_or_else(|| format!("MEMORY USAGE {key} answered no number"))?;
        bytes.insert(part.to_owned(), usage.into());
    }
    Ok(bytes.into())
}

/// Redis's `used_memory` (`INFO memory`), in bytes.
fn used_memory(redis: &RedisServer) -> BenchResult<i64> {
    let used = redis.info_field("memory", "used_memory");
    Ok(used.ok_or("INFO memory has no used_memory")?.parse()?)
}
