//! `idle_waiting`: what waiting and watching cost while nothing changes. Names are held (TTL 1 h,
//! never renewed, so none expires), callers wait on them in `Acquire` (`wait_ms` 600,000, the
//! most the chart's `maxWait` allows, so they stay waiting), others watch them; once the setup
//! has settled (2 s), a window of 10 s in which nobody acquires, releases, renews or leaves
//! measures:
//! - Redis calls per second: the sum of `calls` over every `cmdstat_*` of `INFO commandstats`
//!   (`CONFIG RESETSTAT` at the window's start), which counts the commands scripts run too; and
//!   the scripts called per second (`EVALSHA`, `FCALL`), with the commands that made the calls;
//! - Redis's CPU and each replica's, in % of one core (`/proc/<pid>/stat` over the window);
//! - the replicas' resident memory per idle watcher and per idle waiter: their RSS after minus
//!   before lining them up (the watchers first, then the waiters), over how many were lined up.
//!
//! Each configuration runs on its own redis-server and its own `leased` replicas (the release
//! binary as child processes), so that nothing else calls that Redis and memory that an earlier
//! configuration freed cannot hide what the next one allocates:
//! - `idle_waiting_a`: 1,000 names held, one waiter per name, 1 replica;
//! - `idle_waiting_b`: the same with one waiter per name on each of 2 replicas (2,000 waiters);
//! - `idle_waiting_c`: 1,000 held names watched (one Watch stream each), 1 replica;
//! - `idle_waiting_d`: the target, 10,000 names held, one waiter per name on each of 2 replicas
//!   (20,000 waiters), and 1,000 of the names watched, half through each replica.
//!
//! `--quick` runs `idle_waiting_d` alone, scaled down (1,000 names, 100 watched, a 3 s window).
//! The waiters' and watchers' streams stay open, unread after their first message, through the
//! window. Each row also says whether the setup had really settled: the replicas' shard channel
//! subscriptions (`ssub` of `CLIENT LIST`, read just before and after the window) next to the
//! names they listen to, and the streams that had anything more to say by the window's end (with
//! nothing changing, none should).

use std::{
    fmt::Write as _,
    pin::pin,
    sync::Arc,
    task::{Context, Waker},
    time::{Duration, Instant},
};

use leased::proto::{
    AcquireResponse, DescribeRequest, WatchEvent, WatchRequest,
    lease_service_client::LeaseServiceClient, watch_event::Cause,
};
use serde_json::Value;
use tokio::{sync::Semaphore, task::JoinSet};
use tonic::{Streaming, transport::Channel};

use crate::{
    BenchResult,
    commandstats::{CallMeter, top_commands},
    harness::{leased::LeasedProcess, redis::RedisServer},
    measure::{Metered, Row, Samples, cpu_spent, cpu_times, measured, thousands},
    procs::{self, rss_bytes},
    workload::{acquire_many, queue_waiter},
};

/// TTL of the held names: far longer than a configuration runs, so that none expires.
const HELD_TTL_MS: i64 = 3_600_000;

/// `wait_ms` of the waiters: the most the chart's `maxWait` (10m) allows.
const WAIT_MS: i64 = 600_000;

/// How long the setup settles before the window.
const SETTLE: Duration = Duration::from_secs(2);

/// Waiters and watchers per HTTP/2 connection, below `--max-concurrent-streams` (1,024).
const STREAMS_PER_CONNECTION: usize = 500;

/// Calls in flight while the held names are taken.
const HOLD_CONCURRENCY: usize = 64;

/// Acquire and Watch calls in flight while the waiters and watchers line up.
const LINE_UP_CONCURRENCY: usize = 256;

/// How long lining up one replica's waiters (or watchers) may take before the run fails.
const LINE_UP_TIMEOUT: Duration = Duration::from_secs(240);

/// Commands named in a row's note, by calls.
const TOP_COMMANDS: usize = 5;

/// One configuration.
pub struct Idle {
    /// `a` to `d`: the row is `idle_waiting_<label>`.
    pub label: &'static str,
    /// Names held (TTL 1 h) through the first replica.
    pub held: usize,
    pub replicas: usize,
    /// Whether every replica has one waiter on each held name.
    pub waiters: bool,
    /// Held names watched (the first ones), one Watch stream each, through the replicas in turn.
    pub watched: usize,
    /// How long the calls and the CPU are measured.
    pub window: Duration,
    pub quick: bool,
}

impl Idle {
    /// The configurations a run measures: `a` to `d`, or with `--quick` `d` alone, scaled down.
    pub fn configs(quick: bool) -> Vec<Idle> {
        let window = Duration::from_secs(10);
        let config = |label, held, replicas, waiters, watched| Idle {
            label,
            held,
            replicas,
            waiters,
            watched,
            window,
            quick,
        };
        match quick {
            true => vec![Idle {
                window: Duration::from_secs(3),
                ..config("d", 1_000, 2, true, 100)
            }],
            false => vec![
                config("a", 1_000, 1, true, 0),
                config("b", 1_000, 2, true, 0),
                config("c", 1_000, 1, false, 1_000),
                config("d", 10_000, 2, true, 1_000),
            ],
        }
    }

    fn waiters_per_replica(&self) -> usize {
        match self.waiters {
            true => self.held,
            false => 0,
        }
    }

    /// The watched names that replica `index` follows.
    fn watched_by(&self, index: usize, names: &[String]) -> Vec<String> {
        names[..self.watched]
            .iter()
            .skip(index)
            .step_by(self.replicas)
            .cloned()
            .collect()
    }

    /// What the configuration is, for the tables.
    fn text(&self) -> String {
        let mut text = format!("{} held", thousands(self.held as f64));
        if self.waiters {
            let per_replica = match self.replicas {
                1 => String::new(),
                n => format!(", one per name on each of {n} replicas"),
            };
            write!(
                text,
                ", {} waiters{per_replica}",
                thousands((self.held * self.replicas) as f64)
            )
            .expect("a String");
        }
        if self.watched > 0 {
            write!(text, ", {} watched", thousands(self.watched as f64)).expect("a String");
        }
        if self.replicas == 1 {
            text.push_str(", 1 replica");
        }
        text
    }
}

/// `idle_waiting`: each configuration in turn, a failed one as a row that says why.
pub async fn idle_waiting(configs: &[Idle], leased_args: &[String], server_log: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for config in configs {
        let name = format!("idle_waiting_{}", config.label);
        eprintln!("bench:   {name}: {}", config.text());
        let row = match measure(config, &name, leased_args, server_log).await {
            Ok(row) => row,
            Err(error) => Row::failed(name, error.to_string()),
        };
        rows.push(row);
    }
    rows
}

/// One `leased` replica of a configuration, with its connections.
struct Replica {
    server: Metered<LeasedProcess>,
    channels: Vec<Channel>,
}

/// A configuration set up: its processes, the open streams and what lining them up took. Dropped
/// in this order: the streams, the replicas, Redis.
struct SetUp {
    waiting: Vec<Streaming<AcquireResponse>>,
    watching: Vec<Streaming<WatchEvent>>,
    replicas: Vec<Replica>,
    redis: Metered<RedisServer>,
    /// Names with waiters or watchers, summed over the replicas.
    listened: usize,
    /// Acquire or Watch call → its first message, of each waiter and watcher.
    latencies: Vec<Duration>,
    lined_up: Duration,
    /// The replicas' RSS before the watchers, after them, and after the waiters.
    rss_start: Vec<u64>,
    rss_watching: Vec<u64>,
    rss_waiting: Vec<u64>,
}

/// Starts a Redis and the replicas, takes the held names through the first replica (their
/// holders never release: the leases outlive the configuration), then lines up the watchers and
/// the waiters, reading the replicas' RSS before and after each.
async fn set_up(config: &Idle, leased_args: &[String], server_log: &str) -> BenchResult<SetUp> {
    let redis = procs::start_redis_as("redis-idle")?;
    let names: Vec<String> = (0..config.held)
        .map(|index| format!("bench/idle/{index:05}"))
        .collect();
    let mut replicas = Vec::new();
    let mut listened = 0;
    for index in 0..config.replicas {
        let label = format!("idle-{}", index + 1);
        let server =
            procs::start_leased(&label, Some(&redis.url()), leased_args, server_log).await?;
        let watched = config.watched_by(index, &names).len();
        let streams = config.waiters_per_replica() + watched;
        let channels =
            procs::connections(&server, streams.div_ceil(STREAMS_PER_CONNECTION)).await?;
        warm_up(&channels).await?;
        replicas.push(Replica { server, channels });
        // The watched names are among the waited ones.
        listened += config.waiters_per_replica().max(watched);
    }
    acquire_many(
        &replicas[0].channels,
        names.clone(),
        HELD_TTL_MS,
        HOLD_CONCURRENCY,
    )
    .await?;
    let rss_start = settled_rss(&replicas).await?;

    // Watchers first: before the waiters, the replicas do nothing else that allocates.
    let lining_up = Instant::now();
    let mut latencies = Vec::new();
    let mut watching = Vec::new();
    for (index, replica) in replicas.iter().enumerate() {
        let watched = config.watched_by(index, &names);
        let (streams, times) = line_up(&replica.channels, &watched, open_watch).await?;
        watching.extend(streams);
        latencies.extend(times);
    }
    let rss_watching = settled_rss(&replicas).await?;
    let mut waiting = Vec::new();
    if config.waiters {
        for replica in &replicas {
            let (streams, times) = line_up(&replica.channels, &names, open_waiter).await?;
            waiting.extend(streams);
            latencies.extend(times);
        }
    }
    let rss_waiting = settled_rss(&replicas).await?;
    Ok(SetUp {
        waiting,
        watching,
        replicas,
        redis,
        listened,
        latencies,
        lined_up: lining_up.elapsed(),
        rss_start,
        rss_watching,
        rss_waiting,
    })
}

/// One configuration: set up, settle, then the window.
async fn measure(
    config: &Idle,
    name: &str,
    leased_args: &[String],
    server_log: &str,
) -> BenchResult<Row> {
    let mut setup = set_up(config, leased_args, server_log).await?;
    tokio::time::sleep(SETTLE).await;

    let redis = &setup.redis;
    // Read outside the window: CLIENT LIST is not counted in it.
    let subscribed_before = shard_subscriptions(redis)?;
    let mut meter = CallMeter::reset(redis)?;
    let cpu_before = cpu_times();
    let window_started = Instant::now();
    tokio::time::sleep(config.window).await;
    let calls = meter.read()?;
    let cpu = cpu_spent(&cpu_before, cpu_times());
    let window = window_started.elapsed().as_secs_f64();
    let subscribed_after = shard_subscriptions(redis)?;
    let news = with_news(&mut setup.waiting) + with_news(&mut setup.watching);

    let percent = |label: &str| {
        let spent = cpu.iter().find(|(known, _)| known == label)?.1;
        Some((spent.as_secs_f64() * 1000.0 / window).round() / 10.0)
    };
    let redis_cpu = percent(redis.label()).ok_or("Redis's CPU time was not read")?;
    let replica_cpu = setup
        .replicas
        .iter()
        .map(|replica| percent(replica.server.label()).ok_or("a replica's CPU time was not read"))
        .collect::<Result<Vec<f64>, _>>()?;
    // Signed: a replica's RSS can fall meanwhile (the allocator returning memory), and a
    // negative figure says that the growth was lost in that noise.
    let grown = |after: &[u64], before: &[u64]| -> f64 {
        let sum = |rss: &[u64]| rss.iter().sum::<u64>() as f64;
        sum(after) - sum(before)
    };
    let per = |bytes: f64, count: usize| (count > 0).then(|| bytes / count as f64);
    let (waiters, watchers) = (setup.waiting.len(), setup.watching.len());
    let per_watcher = per(grown(&setup.rss_watching, &setup.rss_start), watchers);
    let per_waiter = per(grown(&setup.rss_waiting, &setup.rss_watching), waiters);

    let calls_per_s = calls.total() as f64 / window;
    let scripts_per_s = calls.scripts() as f64 / window;
    let kib = |bytes: Option<f64>| match bytes {
        Some(bytes) => format!("{:.1} KiB", bytes / 1024.0),
        None => "-".to_owned(),
    };
    let replica_cpu_text = replica_cpu
        .iter()
        .map(|percent| format!("{percent:.1}%"))
        .collect::<Vec<_>>()
        .join(" / ");
    let quick = match config.quick {
        true => " (--quick; the full run has 10,000 names, 1,000 watched and a 10 s window)",
        false => "",
    };
    let listened = setup.listened;
    let note = format!(
        "{}; nothing changing for {window:.0} s: Redis {} calls/s ({} scripts/s; {}), Redis CPU \
         {redis_cpu:.1}% of a core, replica CPU {replica_cpu_text}; server RSS {} per idle \
         waiter, {} per idle watcher; the replicas' shard subscriptions {subscribed_before} at the \
         window's start, {subscribed_after} at its end, of the {listened} names they listen to; \
         {news} streams heard more than their first message; ops = waiters and watchers lined up, \
         latency = the call → its first message{quick}",
        config.text(),
        thousands(calls_per_s),
        thousands(scripts_per_s),
        calls.breakdown(window, TOP_COMMANDS),
        kib(per_waiter),
        kib(per_watcher),
    );
    let connections: usize = setup.replicas.iter().map(|r| r.channels.len()).sum();
    let samples = Samples {
        latencies: std::mem::take(&mut setup.latencies),
        elapsed: setup.lined_up,
        ..Samples::default()
    };
    Ok(Row::new(name, &samples, note)
        .with("config", config.text())
        .with("replicas", config.replicas)
        .with("held", config.held)
        .with("waiters", waiters)
        .with("watchers", watchers)
        .with("window_s", (window * 10.0).round() / 10.0)
        .with("redis_calls_per_s", calls_per_s.round())
        .with("redis_scripts_per_s", scripts_per_s.round())
        .with("redis_calls_per_s_by_command", calls.to_json(window))
        .with("redis_cpu_percent", redis_cpu)
        .with("replica_cpu_percent", replica_cpu)
        .with("server_rss_start_bytes", setup.rss_start.clone())
        .with("server_rss_watching_bytes", setup.rss_watching.clone())
        .with("server_rss_waiting_bytes", setup.rss_waiting.clone())
        .with("server_rss_bytes_per_waiter", per_waiter.map(f64::round))
        .with("server_rss_bytes_per_watcher", per_watcher.map(f64::round))
        .with("listened_names", listened)
        .with("shard_subscriptions_window_start", subscribed_before)
        .with("shard_subscriptions_window_end", subscribed_after)
        .with("streams_with_news", news)
        .with("grpc_connections", connections))
}

/// Shard channel subscriptions of every client of `redis` (the `ssub` of `CLIENT LIST`): each
/// replica subscribes to the wake-ups of every name it listens to (waiters or watchers here).
fn shard_subscriptions(redis: &RedisServer) -> BenchResult<u64> {
    let clients = redis.query(&["CLIENT", "LIST"])?;
    let clients = clients.as_str().ok_or("CLIENT LIST answered no text")?;
    let mut total = 0;
    for field in clients.split_whitespace() {
        if let Some(count) = field.strip_prefix("ssub=") {
            total += count.parse::<u64>()?;
        }
    }
    Ok(total)
}

/// One Describe on each connection, so that the connections' own memory is in place before the
/// first RSS reading.
async fn warm_up(channels: &[Channel]) -> BenchResult<()> {
    for channel in channels {
        LeaseServiceClient::new(channel.clone())
            .describe(DescribeRequest {
                name: "bench/idle/warm-up".to_owned(),
            })
            .await?;
    }
    Ok(())
}

/// Each replica's resident memory once what was just done has settled.
async fn settled_rss(replicas: &[Replica]) -> BenchResult<Vec<u64>> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    replicas
        .iter()
        .map(|replica| rss_bytes(replica.server.pid()))
        .collect()
}

/// Opens one stream per name with `open`, round-robin over `channels`, at most
/// [`LINE_UP_CONCURRENCY`] calls at a time: the streams, and how long each took to answer.
async fn line_up<T, F>(
    channels: &[Channel],
    names: &[String],
    open: fn(LeaseServiceClient<Channel>, String) -> F,
) -> BenchResult<(Vec<Streaming<T>>, Vec<Duration>)>
where
    T: Send + 'static,
    F: Future<Output = BenchResult<Streaming<T>>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(LINE_UP_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for (index, name) in names.iter().enumerate() {
        let client = LeaseServiceClient::new(channels[index % channels.len()].clone());
        let opening = open(client, name.clone());
        let permits = permits.clone();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await?;
            let started = Instant::now();
            let stream = opening.await?;
            BenchResult::Ok((stream, started.elapsed()))
        });
    }
    let mut streams = Vec::with_capacity(names.len());
    let mut latencies = Vec::with_capacity(names.len());
    let joined = tokio::time::timeout(LINE_UP_TIMEOUT, async {
        while let Some(joined) = tasks.join_next().await {
            let (stream, latency) = joined??;
            streams.push(stream);
            latencies.push(latency);
        }
        BenchResult::Ok(())
    })
    .await;
    joined.map_err(|_| {
        format!(
            "{} of {} streams lined up within {LINE_UP_TIMEOUT:?}",
            streams.len(),
            names.len()
        )
    })??;
    Ok((streams, latencies))
}

/// An Acquire that waits on `name` as long as allowed, once it has answered `waiting`.
async fn open_waiter(
    mut client: LeaseServiceClient<Channel>,
    name: String,
) -> BenchResult<Streaming<AcquireResponse>> {
    queue_waiter(&mut client, &name, WAIT_MS).await
}

/// A Watch of `name`, once it has sent its first event (the snapshot).
async fn open_watch(
    mut client: LeaseServiceClient<Channel>,
    name: String,
) -> BenchResult<Streaming<WatchEvent>> {
    let mut events = client
        .watch(WatchRequest { name: name.clone() })
        .await?
        .into_inner();
    let first = events.message().await?.ok_or("a Watch ended at once")?;
    match first.cause() {
        Cause::Snapshot => Ok(events),
        other => Err(format!("the first event of a Watch of {name} was {other:?}").into()),
    }
}

/// How many of `streams` have something more to read at once (a message, their end or an
/// error): each is polled once, without waiting.
fn with_news<T>(streams: &mut [Streaming<T>]) -> usize {
    let mut context = Context::from_waker(Waker::noop());
    let mut ready = 0;
    for stream in streams {
        if pin!(stream.message()).poll(&mut context).is_ready() {
            ready += 1;
        }
    }
    ready
}

/// The table of the `idle_waiting` rows, if the run has any.
pub fn table(rows: &[Row]) -> Option<String> {
    let rows = measured(rows, "idle_waiting_");
    if rows.is_empty() {
        return None;
    }
    let mut out = String::from(
        "| config | what | Redis calls/s | scripts/s | Redis CPU | replica CPU | RSS per waiter \
         | RSS per watcher | subscribed (start → end of window) | top commands per s |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|---|\n",
    );
    for row in rows {
        let get = |key: &str| row.extra.get(key).cloned().unwrap_or(Value::Null);
        let number = |key: &str| get(key).as_f64();
        let count = |key: &str| thousands(number(key).unwrap_or(f64::NAN));
        let kib = |key: &str| {
            number(key).map_or("-".to_owned(), |bytes| format!("{:.1} KiB", bytes / 1024.0))
        };
        let replica_cpu = match get("replica_cpu_percent") {
            Value::Array(values) => values
                .iter()
                .filter_map(Value::as_f64)
                .map(|percent| format!("{percent:.1}%"))
                .collect::<Vec<_>>()
                .join(" / "),
            _ => String::new(),
        };
        let top = top_commands(&get("redis_calls_per_s_by_command"), TOP_COMMANDS);
        writeln!(
            out,
            "| {} | {} | {} | {} | {:.1}% | {replica_cpu} | {} | {} | {} → {} of {} | {top} |",
            row.name,
            get("config").as_str().unwrap_or(""),
            thousands(number("redis_calls_per_s").unwrap_or(f64::NAN)),
            thousands(number("redis_scripts_per_s").unwrap_or(f64::NAN)),
            number("redis_cpu_percent").unwrap_or(f64::NAN),
            kib("server_rss_bytes_per_waiter"),
            kib("server_rss_bytes_per_watcher"),
            count("shard_subscriptions_window_start"),
            count("shard_subscriptions_window_end"),
            count("listened_names"),
        )
        .expect("a String");
    }
    Some(out)
}
