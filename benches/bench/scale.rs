//! `held_scale`: many leases held at once and kept alive over 1,000 Renew streams, as a large
//! fleet would. Measures what holding them costs (Redis memory per lease, the server's resident
//! memory) and the cycle rate of other callers meanwhile.
//!
//! `renew_stream_memory`: the server's resident memory per open Renew stream and per lease a
//! stream holds, and what renewals answering `lost` add (nothing should stay).
//!
//! `permit_memory`: Redis memory per held permit of a counting lease, next to that of an
//! exclusive lease measured the same way.

use std::time::{Duration, Instant};

use leased::{
    lease::{LeaseId, limits::MAX_NAME_BYTES},
    proto::{Granted, renew_response},
};
use tokio::{sync::watch, task::JoinSet, time::MissedTickBehavior};
use tonic::transport::Channel;

use crate::{
    BenchResult,
    harness::{leased::LeasedProcess, redis::RedisServer},
    measure::{Budget, Metered, Row, Samples, closed_loop},
    procs::{self, rss_bytes},
    workload::{
        RenewStream, acquire_many, acquire_many_permits, measure_grpc_cycles, open_renew_streams,
        split_among,
    },
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

/// Sizes of `permit_memory`.
pub struct PermitMemory {
    /// Names in each case (each an exclusive lease, or a counting lease of `limit`).
    pub names: usize,
    pub limit: u32,
    pub quick: bool,
}

impl PermitMemory {
    pub fn new(quick: bool) -> Self {
        PermitMemory {
            names: if quick { 1_000 } else { 10_000 },
            limit: 8,
            quick,
        }
    }
}

/// `permit_memory`: Redis `used_memory` per held permit, each case on an emptied Redis:
/// - `permit_memory_exclusive`: one exclusive lease per name (the baseline);
/// - `permit_memory_counting_full`: counting leases of `limit`, every permit held;
/// - `permit_memory_counting_one`: counting leases of `limit`, one permit held each (the name's
///   own records are not shared with other permits).
///
/// Ops are the Acquire calls that took the permits. Each row has `redis_bytes_per_permit` and
/// the `MEMORY USAGE` of each key of one name; the counting rows also their ratio to the
/// exclusive lease's bytes.
pub async fn permit_memory(
    sizes: &PermitMemory,
    redis: &RedisServer,
    channels: &[Channel],
) -> BenchResult<Vec<Row>> {
    let limit = sizes.limit;
    let exclusive = held_permits(redis, channels, "exclusive", sizes.names, 1, 0).await?;
    let full = held_permits(redis, channels, "full", sizes.names, limit, limit).await?;
    let one = held_permits(redis, channels, "one", sizes.names, 1, limit).await?;
    redis.query(&["FLUSHALL", "SYNC"])?;

    let names = sizes.names;
    let quick = quick_note(sizes.quick, "10,000 names");
    let row = |name: &str, case: &HeldPermits, note: String| {
        let ratio = case.bytes_per_permit / exclusive.bytes_per_permit;
        Row::new(name, &case.samples, note)
            .with("names", names)
            .with("limit", case.limit)
            .with("permits_held", case.permits)
            .with("redis_used_memory_delta_bytes", case.delta_bytes)
            .with("redis_bytes_per_permit", case.bytes_per_permit.round())
            .with("redis_memory_usage_per_key", case.key_bytes.clone())
            .with("ratio_to_exclusive", round3(ratio))
    };
    let exclusive_row = row(
        "permit_memory_exclusive",
        &exclusive,
        format!(
            "{names} exclusive leases held: Redis {:.0} B per lease{quick}",
            exclusive.bytes_per_permit
        ),
    );
    let counting_note = |case: &HeldPermits, held: &str| {
        format!(
            "{names} counting leases of limit {limit}, {held} held: Redis {:.0} B per permit, \
             {:.2} × an exclusive lease's{quick}",
            case.bytes_per_permit,
            case.bytes_per_permit / exclusive.bytes_per_permit
        )
    };
    let full_note = counting_note(&full, &format!("all {limit} permits"));
    let one_note = counting_note(&one, "1 permit");
    Ok(vec![
        exclusive_row,
        row("permit_memory_counting_full", &full, full_note),
        row("permit_memory_counting_one", &one, one_note),
    ])
}

/// What holding permits cost Redis in one case of `permit_memory`.
struct HeldPermits {
    limit: u32,
    permits: usize,
    delta_bytes: i64,
    bytes_per_permit: f64,
    key_bytes: serde_json::Value,
    samples: Samples,
}

/// On an emptied Redis, takes `per_name` permits of each of `names` names (`limit` 0: exclusive
/// leases) and measures what Redis's `used_memory` grew by.
async fn held_permits(
    redis: &RedisServer,
    channels: &[Channel],
    case: &str,
    names: usize,
    per_name: u32,
    limit: u32,
) -> BenchResult<HeldPermits> {
    redis.query(&["FLUSHALL", "SYNC"])?;
    // Let the server's connections settle after the flush (nothing of the run stays in Redis).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = used_memory(redis)?;
    let requests: Vec<String> = (0..names)
        .flat_map(|index| {
            let name = format!("bench/permits/{case}/{index:06}");
            std::iter::repeat_n(name, per_name as usize)
        })
        .collect();
    let first = requests[0].clone();
    let permits = requests.len();
    let (granted, samples) =
        acquire_many_permits(channels, requests, HELD_TTL_MS, CONCURRENCY, limit).await?;
    if granted.len() != permits {
        return Err(format!("{} of {permits} permits granted", granted.len()).into());
    }
    let delta_bytes = used_memory(redis)? - before;
    Ok(HeldPermits {
        limit,
        permits,
        delta_bytes,
        bytes_per_permit: delta_bytes as f64 / permits as f64,
        key_bytes: keys_bytes(redis, &first)?,
        samples,
    })
}

/// `MEMORY USAGE` of every key of one name (found by its hash tag), by the part after the tag
/// (`lease` for the key with no suffix).
fn keys_bytes(redis: &RedisServer, name: &str) -> BenchResult<serde_json::Value> {
    let tagged = format!("leased:{{{name}}}");
    let keys = match redis.query(&["KEYS", &format!("{tagged}*")])? {
        crate::harness::redis::Resp::Array(Some(keys)) => keys,
        other => return Err(format!("KEYS answered {other:?}").into()),
    };
    let mut bytes = serde_json::Map::new();
    for key in keys {
        let key = key.as_str().ok_or("KEYS answered a non-string")?.to_owned();
        let usage = redis.query(&["MEMORY", "USAGE", &key])?.as_int();
        let usage = usage.ok_or_else(|| format!("MEMORY USAGE {key} answered no number"))?;
        let part = key[tagged.len()..].trim_start_matches(':');
        let part = if part.is_empty() { "lease" } else { part };
        bytes.insert(part.to_owned(), usage.into());
    }
    Ok(bytes.into())
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Sizes of `renew_stream_memory`.
pub struct RenewMemory {
    /// Open Renew streams that hold nothing.
    pub open_streams: usize,
    /// Streams, and leases held on each, for the cost of one held lease.
    pub holding_streams: usize,
    pub held_per_stream: usize,
    /// The amplification probe: streams, and distinct never-held names renewed on each.
    pub probe_streams: usize,
    pub probe_names: usize,
    pub quick: bool,
}

impl RenewMemory {
    pub fn new(quick: bool) -> Self {
        match quick {
            true => RenewMemory {
                open_streams: 1_000,
                holding_streams: 20,
                held_per_stream: 500,
                probe_streams: 100,
                probe_names: 1_024,
                quick,
            },
            false => RenewMemory {
                open_streams: 5_000,
                holding_streams: 100,
                held_per_stream: 1_000,
                probe_streams: 400,
                probe_names: 1_024,
                quick,
            },
        }
    }
}

/// Renew streams per HTTP/2 connection, below `--max-concurrent-streams` (1,024).
const STREAMS_PER_CONNECTION: usize = 500;

/// TTL of the leases held in `renew_stream_memory_held`: they outlive the scenario.
const MEMORY_HELD_TTL_MS: i64 = 300_000;

/// `renew_stream_memory`: what a Renew stream costs the server's resident memory. Each part runs
/// on a fresh `leased` (Redis store), so that memory freed by an earlier part cannot hide what
/// the next one allocates:
/// - `renew_stream_memory_open`: streams that hold nothing (each answered one `lost` renewal);
/// - `renew_stream_memory_held`: each held lease (256-byte names), and a second renewal pass of
///   the same leases, which should add nothing;
/// - `renew_stream_memory_lost`: the amplification probe, streams renewing distinct
///   256-byte names with random lease ids, every renewal answering `lost`.
pub async fn renew_stream_memory(
    sizes: &RenewMemory,
    redis_url: &str,
    server_log: &str,
) -> BenchResult<Vec<Row>> {
    Ok(vec![
        open_streams_memory(sizes, redis_url, server_log).await?,
        held_lease_memory(sizes, redis_url, server_log).await?,
        lost_renewal_memory(sizes, redis_url, server_log).await?,
    ])
}

async fn open_streams_memory(
    sizes: &RenewMemory,
    redis_url: &str,
    server_log: &str,
) -> BenchResult<Row> {
    let count = sizes.open_streams;
    let (server, channels) =
        memory_server("renew-memory-open", count, redis_url, server_log).await?;
    let rss_before = settled_rss(&server).await?;
    let started = Instant::now();
    let (streams, latencies) =
        open_bare_streams(&channels, count, "bench/renew-memory/open").await?;
    let elapsed = started.elapsed();
    let rss_open = settled_rss(&server).await?;
    let per_stream_kib = kib(rss_open.saturating_sub(rss_before)) / count as f64;
    drop(streams);
    let samples = Samples {
        latencies,
        elapsed,
        ..Samples::default()
    };
    Ok(Row::new(
        "renew_stream_memory_open",
        &samples,
        format!(
            "{count} open Renew streams holding nothing (ops = open + one `lost` renewal) over {} \
             connections: server RSS +{per_stream_kib:.1} KiB per stream{}",
            channels.len(),
            quick_note(sizes.quick, "5,000 streams"),
        ),
    )
    .with("streams", count)
    .with("grpc_connections", channels.len())
    .with("server_rss_before_bytes", rss_before)
    .with("server_rss_open_bytes", rss_open)
    .with("server_rss_kib_per_stream", round1(per_stream_kib)))
}

async fn held_lease_memory(
    sizes: &RenewMemory,
    redis_url: &str,
    server_log: &str,
) -> BenchResult<Row> {
    let (stream_count, per_stream) = (sizes.holding_streams, sizes.held_per_stream);
    let held = stream_count * per_stream;
    let (server, channels) =
        memory_server("renew-memory-held", stream_count, redis_url, server_log).await?;
    let names = (0..held)
        .map(|index| long_name(&format!("bench/renew-memory/held/{index:07}/")))
        .collect();
    let leases = acquire_many(&channels, names, MEMORY_HELD_TTL_MS, CONCURRENCY).await?;
    let (streams, _) =
        open_bare_streams(&channels, stream_count, "bench/renew-memory/held").await?;
    let rss_empty = settled_rss(&server).await?;

    let groups = split_among(leases, stream_count);
    let started = Instant::now();
    let (streams, groups, mut latencies) = renew_each(streams, groups, "renewed").await?;
    let elapsed = started.elapsed();
    let rss_held = settled_rss(&server).await?;
    let (streams, _, again) = renew_each(streams, groups, "renewed").await?;
    latencies.extend(again);
    let rss_renewed_again = settled_rss(&server).await?;
    drop(streams);

    let per_lease_bytes = rss_held.saturating_sub(rss_empty) as f64 / held as f64;
    let second_pass_kib = kib(rss_renewed_again.saturating_sub(rss_held));
    let samples = Samples {
        latencies,
        elapsed: elapsed * 2,
        ..Samples::default()
    };
    Ok(Row::new(
        "renew_stream_memory_held",
        &samples,
        format!(
            "{held} leases with 256-byte names held on {stream_count} Renew streams (ops = \
             renewals, two passes): server RSS +{per_lease_bytes:.0} B per held lease; the second \
             pass added {second_pass_kib:.0} KiB{}",
            quick_note(sizes.quick, "100,000 held"),
        ),
    )
    .with("held", held)
    .with("renew_streams", stream_count)
    .with("server_rss_streams_empty_bytes", rss_empty)
    .with("server_rss_held_bytes", rss_held)
    .with("server_rss_renewed_again_bytes", rss_renewed_again)
    .with("server_rss_bytes_per_held_lease", per_lease_bytes.round())
    .with("server_rss_second_pass_kib", second_pass_kib.round()))
}

async fn lost_renewal_memory(
    sizes: &RenewMemory,
    redis_url: &str,
    server_log: &str,
) -> BenchResult<Row> {
    let (stream_count, per_stream) = (sizes.probe_streams, sizes.probe_names);
    let renewals = stream_count * per_stream;
    let (server, channels) =
        memory_server("renew-memory-lost", stream_count, redis_url, server_log).await?;
    let rss_before = settled_rss(&server).await?;
    let (streams, _) =
        open_bare_streams(&channels, stream_count, "bench/renew-memory/lost").await?;
    let rss_open = settled_rss(&server).await?;

    // Never-held names with random lease ids, distinct across the whole probe, in two halves:
    // the first also grows the working memory of `stream_count` renewals in flight (buffers,
    // the store's futures) to its peak, which the allocator keeps; so state kept per name would
    // show as growth in the second half.
    let half = per_stream / 2;
    let never_held = |range: std::ops::Range<usize>| -> Vec<Vec<Granted>> {
        (0..stream_count)
            .map(|stream| {
                range
                    .clone()
                    .map(|index| Granted {
                        name: long_name(&format!(
                            "bench/renew-memory/lost/{stream:04}/{index:05}/"
                        )),
                        lease_id: LeaseId::generate().expose().to_owned(),
                        ..Granted::default()
                    })
                    .collect()
            })
            .collect()
    };
    let (first_half, second_half) = (never_held(0..half), never_held(half..per_stream));
    let started = Instant::now();
    let (streams, _, mut latencies) = renew_each(streams, first_half, "lost").await?;
    let rss_half = settled_rss(&server).await?;
    let (streams, _, second) = renew_each(streams, second_half, "lost").await?;
    latencies.extend(second);
    let elapsed = started.elapsed();
    let rss_after = settled_rss(&server).await?;
    drop(streams);

    let added_kib = kib(rss_after.saturating_sub(rss_open));
    let second_half_kib = kib(rss_after.saturating_sub(rss_half));
    let samples = Samples {
        latencies,
        elapsed,
        ..Samples::default()
    };
    Ok(Row::new(
        "renew_stream_memory_lost",
        &samples,
        format!(
            "{stream_count} Renew streams × {per_stream} distinct 256-byte names with random lease \
             ids, every renewal `lost`: server RSS \
             +{added_kib:.0} KiB after opening the streams, of which the second half of the \
             renewals added {second_half_kib:.0} KiB{}",
            quick_note(sizes.quick, "400 streams"),
        ),
    )
    .with("renewals", renewals)
    .with("renew_streams", stream_count)
    .with("server_rss_before_bytes", rss_before)
    .with("server_rss_open_bytes", rss_open)
    .with("server_rss_half_bytes", rss_half)
    .with("server_rss_after_bytes", rss_after)
    .with("server_rss_added_by_lost_kib", added_kib.round())
    .with(
        "server_rss_added_by_second_half_kib",
        second_half_kib.round(),
    ))
}

/// A fresh `leased` on `redis_url` and enough connections for `streams` Renew streams, each
/// connection used once so that its own memory is counted before any measurement.
async fn memory_server(
    label: &str,
    streams: usize,
    redis_url: &str,
    server_log: &str,
) -> BenchResult<(Metered<LeasedProcess>, Vec<Channel>)> {
    let server = procs::start_leased(label, Some(redis_url), &[], server_log).await?;
    let channels = procs::connections(&server, streams.div_ceil(STREAMS_PER_CONNECTION)).await?;
    let (warm, _) = open_bare_streams(&channels, channels.len(), "bench/renew-memory/warm").await?;
    drop(warm);
    Ok((server, channels))
}

/// Renews `lease` (any name and lease id) on `stream` and says what it was answered: "renewed",
/// "lost" or "no result".
async fn renew_kind(stream: &mut RenewStream, lease: &Granted) -> BenchResult<&'static str> {
    let response = stream
        .renew(lease.name.clone(), lease.lease_id.clone())
        .await?;
    Ok(match response.result {
        Some(renew_response::Result::Renewed(_)) => "renewed",
        Some(renew_response::Result::Lost(_)) => "lost",
        None => "no result",
    })
}

/// Opens `count` Renew streams round-robin over `channels`, each answering one `lost` renewal of
/// a never-held name (so the server has set the stream up), and how long each took.
async fn open_bare_streams(
    channels: &[Channel],
    count: usize,
    prefix: &str,
) -> BenchResult<(Vec<RenewStream>, Vec<Duration>)> {
    let mut tasks = JoinSet::new();
    for index in 0..count {
        let channel = channels[index % channels.len()].clone();
        let never_held = Granted {
            name: format!("{prefix}/never-held/{index}"),
            lease_id: LeaseId::generate().expose().to_owned(),
            ..Granted::default()
        };
        tasks.spawn(async move {
            let started = Instant::now();
            let mut stream = RenewStream::open(channel, Vec::new()).await?;
            match renew_kind(&mut stream, &never_held).await? {
                "lost" => BenchResult::Ok((stream, started.elapsed())),
                other => Err(format!("a never-held name was answered {other}").into()),
            }
        });
    }
    let mut streams = Vec::with_capacity(count);
    let mut latencies = Vec::with_capacity(count);
    while let Some(joined) = tasks.join_next().await {
        let (stream, latency) = joined??;
        streams.push(stream);
        latencies.push(latency);
    }
    Ok((streams, latencies))
}

/// Each stream renews its group of leases in turn, all streams at once; every answer must be
/// `expected`. Answers the streams and groups back, and the latency of each renewal.
async fn renew_each(
    streams: Vec<RenewStream>,
    groups: Vec<Vec<Granted>>,
    expected: &'static str,
) -> BenchResult<(Vec<RenewStream>, Vec<Vec<Granted>>, Vec<Duration>)> {
    let mut tasks = JoinSet::new();
    for (mut stream, group) in streams.into_iter().zip(groups) {
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(group.len());
            for lease in &group {
                let started = Instant::now();
                let answer = renew_kind(&mut stream, lease).await?;
                if answer != expected {
                    return Err(format!("a renewal was answered {answer}, not {expected}").into());
                }
                latencies.push(started.elapsed());
            }
            BenchResult::Ok((stream, group, latencies))
        });
    }
    let (mut streams, mut groups, mut latencies) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(joined) = tasks.join_next().await {
        let (stream, group, some) = joined??;
        streams.push(stream);
        groups.push(group);
        latencies.extend(some);
    }
    Ok((streams, groups, latencies))
}

/// The server's resident memory once what was just done has settled.
async fn settled_rss(server: &LeasedProcess) -> BenchResult<u64> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    rss_bytes(server.pid())
}

/// A valid lease name of the longest length (256 bytes) starting with `prefix`.
fn long_name(prefix: &str) -> String {
    let mut name = prefix.to_owned();
    name.extend(std::iter::repeat_n(
        'x',
        MAX_NAME_BYTES.saturating_sub(name.len()),
    ));
    name
}

fn kib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0
}

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

fn quick_note(quick: bool, full: &str) -> String {
    match quick {
        true => format!(" (--quick; the full run has {full})"),
        false => String::new(),
    }
}
