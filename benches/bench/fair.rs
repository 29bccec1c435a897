//! Fair waiting across replicas. `fair_contention@N`: N callers on two `leased` replicas of one
//! Redis (alternating between them) take turns on one name: each waits in `Acquire` until granted,
//! holds the lease 1 ms and releases it, again and again. With FIFO waiting every caller gets
//! about the same share of the grants, whichever replica it uses. `fair_queue_memory@W`: what W
//! callers queued on one name cost in Redis (the name's `:queue` sorted set).

use std::time::{Duration, Instant};

use leased::proto::{
    AcquireRequest, AcquireResponse, acquire_response, lease_service_client::LeaseServiceClient,
};
use tonic::{Streaming, transport::Channel};

use crate::{
    BenchResult,
    harness::redis::{RedisServer, Resp},
    measure::{Budget, Row, Samples, Worker, closed_loop},
    workload::{acquire_granted, proto_client, release},
};

/// Concurrency levels of `fair_contention`.
pub const CALLERS: [usize; 2] = [4, 16];

/// Waiters queued on one name in `fair_queue_memory`: a small queue (a listpack sorted set) and
/// a large one (a skiplist).
pub const QUEUED: [usize; 2] = [100, 1000];

/// `wait_ms` and `ttl_ms` of the contending callers: far more than a run of turns takes.
const WAIT_MS: i64 = 10_000;
const TTL_MS: i64 = 10_000;

/// How long a caller holds the lease before it releases it.
const HOLD: Duration = Duration::from_millis(1);

/// How long the queued waiters of `fair_queue_memory` may wait, and its holder hold.
const QUEUED_MS: i64 = 120_000;

/// How long to wait for a name's queue keys to disappear once nobody waits.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The Redis key prefix of the bench's servers (the default `--key-prefix`).
const KEY_PREFIX: &str = "leased:";

/// One `leased` replica as the bench sees it: its connections.
pub struct Replica<'a> {
    pub channels: &'a [Channel],
}

/// The caller `index` of many spread over `replicas`: alternately on each replica, and round-robin
/// over each replica's connections. Answers the replica's index and the channel.
fn channel_for<'a>(replicas: &[Replica<'a>], index: usize) -> (usize, &'a Channel) {
    let replica = index % replicas.len();
    let channels = replicas[replica].channels;
    (
        replica,
        &channels[(index / replicas.len()) % channels.len()],
    )
}

/// A caller that waits for the shared name, holds it [`HOLD`] and releases it; its latency is
/// the wait alone (the Acquire call until `granted`).
struct FairCaller {
    client: LeaseServiceClient<Channel>,
    replica: usize,
    name: String,
    last_wait: Duration,
    /// Acquire calls that were answered `waiting` before `granted`.
    waited: u64,
    calls: u64,
    max_position: u32,
}

impl Worker for FairCaller {
    async fn op(&mut self) -> BenchResult<()> {
        let started = Instant::now();
        let request = AcquireRequest {
            name: self.name.clone(),
            holder: "bench".to_owned(),
            ttl_ms: TTL_MS,
            wait_ms: WAIT_MS,
            ..Default::default()
        };
        let mut stream = self.client.acquire(request).await?.into_inner();
        let mut waited = false;
        let granted = loop {
            let message = stream
                .message()
                .await?
                .ok_or("Acquire ended without a terminal message")?;
            match message.result {
                Some(acquire_response::Result::Waiting(waiting)) => {
                    waited = true;
                    self.max_position = self.max_position.max(waiting.position);
                }
                Some(acquire_response::Result::Granted(granted)) => break granted,
                Some(acquire_response::Result::NotGranted(_)) => {
                    return Err(format!("a caller was not granted within {WAIT_MS} ms").into());
                }
                None => {}
            }
        };
        self.last_wait = started.elapsed();
        self.calls += 1;
        self.waited += u64::from(waited);
        tokio::time::sleep(HOLD).await;
        release(&mut self.client, granted.name, granted.lease_id).await
    }

    fn latency(&self, _whole: Duration) -> Duration {
        self.last_wait
    }
}

/// `fair_contention@N` for each N of [`CALLERS`].
pub async fn contention(
    replicas: &[Replica<'_>],
    redis: &RedisServer,
    budget: Budget,
) -> BenchResult<Vec<Row>> {
    let mut rows = Vec::new();
    for callers in CALLERS {
        let name = format!("bench/fair/c{callers}");
        let workers = (0..callers)
            .map(|index| {
                let (replica, channel) = channel_for(replicas, index);
                FairCaller {
                    client: proto_client(channel),
                    replica,
                    name: name.clone(),
                    last_wait: Duration::ZERO,
                    waited: 0,
                    calls: 0,
                    max_position: 0,
                }
            })
            .collect();
        let (samples, workers) = closed_loop(workers, budget).await?;
        let gone = queue_keys_gone(redis, &name).await?;
        let cleanup = cleanup_text(gone, "the last caller left");
        rows.push(contention_row(
            callers,
            replicas.len(),
            &samples,
            &workers,
            &cleanup,
        ));
    }
    Ok(rows)
}

fn contention_row(
    callers: usize,
    replica_count: usize,
    samples: &Samples,
    workers: &[FairCaller],
    cleanup: &str,
) -> Row {
    let min = samples.per_worker.iter().copied().min().unwrap_or(0);
    let max = samples.per_worker.iter().copied().max().unwrap_or(0);
    let ratio = match max {
        0 => 0.0,
        max => min as f64 / max as f64,
    };
    let mut per_replica = vec![0usize; replica_count];
    for (worker, grants) in workers.iter().zip(&samples.per_worker) {
        per_replica[worker.replica] += grants;
    }
    let calls: u64 = workers.iter().map(|worker| worker.calls).sum();
    let waited: u64 = workers.iter().map(|worker| worker.waited).sum();
    let waited_percent = match calls {
        0 => 0.0,
        calls => waited as f64 * 100.0 / calls as f64,
    };
    let max_position = workers.iter().map(|w| w.max_position).max().unwrap_or(0);
    let per_replica_text = per_replica
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" / ");
    Row::new(
        format!("fair_contention@{callers}"),
        samples,
        format!(
            "Acquire (wait) → `granted` on one name, hold 1 ms, Release; {callers} callers \
             alternating over {replica_count} replicas, ops = grants; grants per caller min {min} \
             / max {max} = {ratio:.2}; per replica {per_replica_text}; {waited_percent:.0}% of \
             calls waited, highest position {max_position}; {cleanup}"
        ),
    )
    .with("replicas", replica_count)
    .with("grants_per_caller_min", min)
    .with("grants_per_caller_max", max)
    .with("fairness_min_max", (ratio * 1000.0).round() / 1000.0)
    .with("grants_per_replica", per_replica)
    .with("waited_percent", waited_percent.round())
    .with("max_position", max_position)
    .with("queue_cleanup", cleanup)
}

/// `fair_queue_memory@W` for each W of [`QUEUED`].
pub async fn queue_memory(replicas: &[Replica<'_>], redis: &RedisServer) -> BenchResult<Vec<Row>> {
    let mut rows = Vec::new();
    for waiters in QUEUED {
        rows.push(queue_memory_of(replicas, redis, waiters).await?);
    }
    Ok(rows)
}

/// A waiter lined up in `fair_queue_memory`: its open Acquire stream (dropping it cancels the
/// wait), how long the call took to answer `waiting`, and the position it reported.
type Queued = (Streaming<AcquireResponse>, Duration, u32);

async fn queue_memory_of(
    replicas: &[Replica<'_>],
    redis: &RedisServer,
    waiters: usize,
) -> BenchResult<Row> {
    let name = format!("bench/fair-memory/w{waiters}");
    let mut holder_client = proto_client(replicas[0].channels.first().ok_or("no connection")?);
    let held = acquire_granted(&mut holder_client, &name, QUEUED_MS).await?;

    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..waiters {
        let (_, channel) = channel_for(replicas, index);
        let mut client = proto_client(channel);
        let name = name.clone();
        tasks.spawn(async move {
            let call_started = Instant::now();
            let request = AcquireRequest {
                name,
                holder: "bench".to_owned(),
                ttl_ms: QUEUED_MS,
                wait_ms: QUEUED_MS,
                ..Default::default()
            };
            let mut stream = client.acquire(request).await?.into_inner();
            let first = stream
                .message()
                .await?
                .ok_or("Acquire ended without a message")?;
            match first.result {
                Some(acquire_response::Result::Waiting(waiting)) => {
                    BenchResult::Ok((stream, call_started.elapsed(), waiting.position))
                }
                other => Err(format!("a queued caller was answered {other:?}, not waiting").into()),
            }
        });
    }
    let mut queued: Vec<Queued> = Vec::with_capacity(waiters);
    let joined = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(joined) = tasks.join_next().await {
            queued.push(joined??);
        }
        BenchResult::Ok(())
    })
    .await;
    joined.map_err(|_| format!("{waiters} callers did not all line up within 60 s"))??;
    let samples = Samples {
        latencies: queued.iter().map(|(_, latency, _)| *latency).collect(),
        elapsed: started.elapsed(),
        ..Samples::default()
    };

    let queue = queue_key(&name);
    let queue_bytes = memory_usage(redis, &queue)?;
    let in_queue = redis.query(&["ZCARD", &queue])?.as_int().unwrap_or(0);
    let encoding = match redis.query(&["OBJECT", "ENCODING", &queue]) {
        Ok(reply) => reply.as_str().unwrap_or("none").to_owned(),
        Err(_) => "none".to_owned(),
    };
    // Only a queue that holds every waiter measures what a waiter costs.
    let per_waiter = (in_queue == waiters as i64).then(|| queue_bytes as f64 / waiters as f64);
    let per_waiter_text = match per_waiter {
        Some(bytes) => format!("Redis {bytes:.0} B per queued waiter"),
        None => format!("NOT MEASURED: the queue holds {in_queue} of {waiters} waiters"),
    };
    let mut positions: Vec<u32> = queued.iter().map(|(_, _, position)| *position).collect();
    positions.sort_unstable();
    let exact = positions
        .iter()
        .enumerate()
        .all(|(index, position)| *position as usize == index + 1);
    let positions_text = match exact {
        true => format!("positions 1..{waiters} reported once each"),
        false => {
            positions.dedup();
            format!(
                "{} distinct positions reported, {}..{}",
                positions.len(),
                positions.first().copied().unwrap_or(0),
                positions.last().copied().unwrap_or(0)
            )
        }
    };

    // The waiters leave (their streams drop, cancelling the waits); then the holder releases.
    drop(queued);
    let gone = queue_keys_gone(redis, &name).await?;
    let mut cleanup = cleanup_text(gone, "the waiters left");
    release(&mut holder_client, held.name, held.lease_id).await?;
    if gone.is_none() {
        let gone = queue_keys_gone(redis, &name).await?;
        cleanup = format!("{cleanup}, {}", cleanup_text(gone, "the holder released"));
    }

    Ok(Row::new(
        format!("fair_queue_memory@{waiters}"),
        &samples,
        format!(
            "{waiters} callers queued on one name over {} replicas, ops = callers lined up, \
             latency = Acquire call → first `waiting`; {per_waiter_text} (MEMORY USAGE: queue \
             {queue_bytes} B {encoding}, {in_queue} entries); {positions_text}; {cleanup}",
            replicas.len()
        ),
    )
    .with("waiters", waiters)
    .with("redis_bytes_per_waiter", per_waiter.map(f64::round))
    .with("queue_memory_usage", queue_bytes)
    .with("queue_encoding", encoding)
    .with("queue_entries", in_queue)
    .with("positions_exact", exact)
    .with("queue_cleanup", cleanup))
}

/// The `:queue` key of `name`.
fn queue_key(name: &str) -> String {
    format!("{KEY_PREFIX}{{{name}}}:queue")
}

/// `MEMORY USAGE key SAMPLES 0` (every element counted), 0 for a missing key.
fn memory_usage(redis: &RedisServer, key: &str) -> BenchResult<i64> {
    match redis.query(&["MEMORY", "USAGE", key, "SAMPLES", "0"])? {
        Resp::Int(bytes) => Ok(bytes),
        Resp::Bulk(None) => Ok(0),
        other => Err(format!("MEMORY USAGE {key} answered {other:?}").into()),
    }
}

/// Waits (up to [`CLEANUP_TIMEOUT`]) until the queue keys of `name` are gone: how long that
/// took, or None if they stayed.
async fn queue_keys_gone(redis: &RedisServer, name: &str) -> BenchResult<Option<Duration>> {
    let queue = queue_key(name);
    let started = Instant::now();
    loop {
        if redis.query(&["EXISTS", &queue])?.as_int() == Some(0) {
            return Ok(Some(started.elapsed()));
        }
        if started.elapsed() >= CLEANUP_TIMEOUT {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `queue keys gone 3 ms after <event>`, or that they stayed.
fn cleanup_text(gone: Option<Duration>, event: &str) -> String {
    match gone {
        Some(after) => format!(
            "queue keys gone {:.0} ms after {event}",
            after.as_secs_f64() * 1000.0
        ),
        None => format!(
            "QUEUE KEYS LEFT {} s after {event}",
            CLEANUP_TIMEOUT.as_secs()
        ),
    }
}
