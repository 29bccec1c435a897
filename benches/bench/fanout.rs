//! Watch fan-out, with many watchers of one name sharing the run's HTTP/2 connections:
//!
//! - `watch_fanout`: how long after a holder calls Release the last watcher hears of it (its
//!   `RELEASED` event). Each round grants the name, waits until every watcher has seen the grant,
//!   then releases it and times the release call's start to the last watcher's event.
//! - `watch_load`: the same watchers while the name is granted and released at a steady pace
//!   (100 cycles a second, each cycle waiting for its answers): how many cycles the server
//!   sustains, whether every watcher receives every event (counted), how many lagged into a
//!   snapshot instead, and what the server's resident memory does meanwhile.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use leased::proto::{WatchRequest, lease_service_client::LeaseServiceClient, watch_event::Cause};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::{
    BenchResult,
    measure::{Row, Samples, cpu_spent, cpu_times},
    procs::rss_bytes,
    workload::{CYCLE_TTL_MS, acquire_granted, proto_client, release},
};

/// The watched name.
const NAME: &str = "bench/fanout";

/// How long every watcher may take to hear of one change before the run counts as failed.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The pace of `watch_load`.
const LOAD_CYCLES_PER_SECOND: u32 = 100;

/// What a watcher heard, and when.
struct Heard {
    cause: Cause,
    fencing_token: u64,
    at: Instant,
}

/// The size of one measurement.
pub struct Fanout {
    pub watchers: usize,
    /// Measured rounds of `watch_fanout` (one unmeasured round first warms up).
    pub rounds: usize,
    /// Stop the rounds early once this much time has been spent measuring; also how long
    /// `watch_load` runs.
    pub limit: Duration,
}

/// What every watcher counts; read by `watch_load`.
#[derive(Default)]
struct Counts {
    /// GRANTED and RELEASED events, per watcher.
    events: Vec<AtomicUsize>,
    /// Snapshots after the first, all watchers together: they lagged.
    lagged: AtomicUsize,
    /// Whether the watchers report each event with its time (the latency rounds) or only count.
    timing: AtomicBool,
}

/// `watch_fanout` and `watch_load` with `sizes.watchers` watchers on `channels`; the server's
/// RSS is read from `server_pid`.
pub async fn watch_fanout(
    sizes: &Fanout,
    channels: &[Channel],
    server_pid: u32,
) -> BenchResult<Vec<Row>> {
    let rss_before = rss_bytes(server_pid)?;
    let (heard, mut hearing) = mpsc::unbounded_channel();
    let counts = Arc::new(Counts {
        events: (0..sizes.watchers).map(|_| AtomicUsize::new(0)).collect(),
        timing: AtomicBool::new(true),
        ..Counts::default()
    });
    let mut watchers = tokio::task::JoinSet::new();
    let opened = Instant::now();
    for index in 0..sizes.watchers {
        let mut client = LeaseServiceClient::new(channels[index % channels.len()].clone());
        let mut events = client
            .watch(WatchRequest { name: NAME.into() })
            .await?
            .into_inner();
        let (heard, counts) = (heard.clone(), counts.clone());
        watchers.spawn(async move {
            let mut first = true;
            while let Some(event) = events.message().await? {
                match event.cause() {
                    Cause::Snapshot if first => {}
                    Cause::Snapshot => _ = counts.lagged.fetch_add(1, Ordering::Relaxed),
                    _ => _ = counts.events[index].fetch_add(1, Ordering::Relaxed),
                }
                first = false;
                if counts.timing.load(Ordering::Relaxed) {
                    let heard_now = Heard {
                        cause: event.cause(),
                        fencing_token: event.fencing_token,
                        at: Instant::now(),
                    };
                    if heard.send(heard_now).is_err() {
                        break;
                    }
                }
            }
            BenchResult::Ok(())
        });
    }
    drop(heard);
    // Every watcher's first event is its snapshot.
    for _ in 0..sizes.watchers {
        let first = next_heard(&mut hearing).await?;
        if first.cause != Cause::Snapshot {
            return Err(format!("a watcher's first event was {:?}", first.cause).into());
        }
    }
    let open_elapsed = opened.elapsed();
    let rss_open = rss_bytes(server_pid)?;

    let mut client = proto_client(&channels[0]);
    let mut release_to_last = Vec::new();
    let mut release_to_first = Vec::new();
    let started = Instant::now();
    let mut measuring_from = started;
    let mut cpu_at_start = cpu_times();
    for round in 0..=sizes.rounds {
        if round == 1 {
            measuring_from = Instant::now();
            cpu_at_start = cpu_times();
        }
        let granted = acquire_granted(&mut client, NAME, CYCLE_TTL_MS).await?;
        let token = granted.fencing_token;
        hear_from_all(&mut hearing, sizes.watchers, Cause::Granted, token).await?;
        let released_at = Instant::now();
        release(&mut client, granted.name, granted.lease_id).await?;
        let times = hear_from_all(&mut hearing, sizes.watchers, Cause::Released, token).await?;
        if round > 0 {
            let last = times.iter().max().expect("at least one watcher");
            let first = times.iter().min().expect("at least one watcher");
            release_to_last.push(last.saturating_duration_since(released_at));
            release_to_first.push(first.saturating_duration_since(released_at));
        }
        if round > 0 && measuring_from.elapsed() >= sizes.limit {
            break;
        }
    }
    let elapsed = measuring_from.elapsed();
    let cpu = cpu_spent(&cpu_at_start, cpu_times());
    let lagged_in_rounds = counts.lagged.load(Ordering::Relaxed);

    counts.timing.store(false, Ordering::Relaxed);
    let load = steady_load(sizes, &counts, channels, server_pid).await;
    watchers.abort_all();
    while let Some(joined) = watchers.join_next().await {
        if let Ok(Err(error)) = joined {
            return Err(format!("a watcher failed: {error}").into());
        }
    }

    let rounds = release_to_last.len();
    let samples = Samples {
        latencies: release_to_last,
        elapsed,
        cpu,
        ..Samples::default()
    };
    let first = Samples {
        latencies: release_to_first,
        ..Samples::default()
    };
    let watchers = sizes.watchers;
    let per_watcher_kib = rss_open.saturating_sub(rss_before) as f64 / 1024.0 / watchers as f64;
    let fanout = Row::new(
        "watch_fanout",
        &samples,
        format!(
            "Release call → the last of {watchers} watchers' RELEASED event (the first's: p50 \
             {:.3} ms), Redis store; ops = rounds of grant and release, {rounds} measured; {} \
             HTTP/2 connections; server RSS +{:.1} KiB per watcher{}",
            first.quantile_ms(0.5),
            channels.len(),
            per_watcher_kib,
            lagged_note(lagged_in_rounds),
        ),
    )
    .with("watchers", watchers)
    .with("rounds", rounds)
    .with("grpc_connections", channels.len())
    .with("first_watcher_p50_ms", round3(first.quantile_ms(0.5)))
    .with("first_watcher_p99_ms", round3(first.quantile_ms(0.99)))
    .with("lagged_snapshots", lagged_in_rounds)
    .with("open_watchers_s", round3(open_elapsed.as_secs_f64()))
    .with("server_rss_before_bytes", rss_before)
    .with("server_rss_watching_bytes", rss_open)
    .with("server_rss_kib_per_watcher", round3(per_watcher_kib));
    let load = match load {
        Ok(row) => row,
        Err(error) => Row::failed("watch_load", error.to_string()),
    };
    Ok(vec![fanout, load])
}

/// `watch_load`: cycles paced at [`LOAD_CYCLES_PER_SECOND`] for `sizes.limit`, then a wait until
/// every watcher has counted every event (or lagged).
async fn steady_load(
    sizes: &Fanout,
    counts: &Counts,
    channels: &[Channel],
    server_pid: u32,
) -> BenchResult<Row> {
    let before: Vec<usize> = counts
        .events
        .iter()
        .map(|count| count.load(Ordering::Relaxed))
        .collect();
    let lagged_before = counts.lagged.load(Ordering::Relaxed);
    let rss_start = rss_bytes(server_pid)?;
    let peak = Arc::new(AtomicU64::new(rss_start));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let (peak, sampling) = (peak.clone(), sampling.clone());
        async move {
            while sampling.load(Ordering::Relaxed) {
                if let Ok(now) = rss_bytes(server_pid) {
                    peak.fetch_max(now, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    let mut client = proto_client(&channels[channels.len() - 1]);
    let mut pace = tokio::time::interval(Duration::from_secs(1) / LOAD_CYCLES_PER_SECOND);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut cycle_latencies = Vec::new();
    let cpu_at_start = cpu_times();
    let started = Instant::now();
    while started.elapsed() < sizes.limit {
        pace.tick().await;
        let cycle_started = Instant::now();
        let granted = acquire_granted(&mut client, NAME, CYCLE_TTL_MS).await?;
        release(&mut client, granted.name, granted.lease_id).await?;
        cycle_latencies.push(cycle_started.elapsed());
    }
    let cycling = started.elapsed();
    let cycles = cycle_latencies.len();
    let expected = 2 * cycles;
    let delivered = |index: usize| counts.events[index].load(Ordering::Relaxed) - before[index];
    let mut drained = None;
    while started.elapsed() < cycling + Duration::from_secs(30) {
        let lagged = counts.lagged.load(Ordering::Relaxed) > lagged_before;
        if lagged || (0..before.len()).all(|index| delivered(index) >= expected) {
            drained = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // CPU until every event was delivered (or the wait gave up): the fan-out's cost is in it.
    let cpu = cpu_spent(&cpu_at_start, cpu_times());
    sampling.store(false, Ordering::Relaxed);
    sampler.await?;
    let peak = peak.load(Ordering::Relaxed);
    let lagged = counts.lagged.load(Ordering::Relaxed) - lagged_before;
    let short = (0..before.len())
        .filter(|index| delivered(*index) < expected)
        .count();
    let least = (0..before.len()).map(delivered).min().unwrap_or_default();
    if lagged == 0 && short > 0 {
        return Err(format!(
            "{short} watchers missed events without a snapshot: the least got {least} of \
             {expected}"
        )
        .into());
    }
    let samples = Samples {
        latencies: cycle_latencies,
        elapsed: cycling,
        cpu,
        ..Samples::default()
    };
    let watchers = sizes.watchers;
    let growth_mib = peak.saturating_sub(rss_start) as f64 / (1024.0 * 1024.0);
    // The last event's delivery after the last cycle, when every watcher got every event.
    let drained_ms = match drained {
        Some(after) if short == 0 => Some(after.saturating_sub(cycling).as_secs_f64() * 1000.0),
        _ => None,
    };
    Ok(Row::new(
        "watch_load",
        &samples,
        format!(
            "Acquire + Release paced at {LOAD_CYCLES_PER_SECOND}/s (ops = cycles, latency = a \
             cycle) with {watchers} watchers of the name: {} events to each, {}; server RSS \
             peak {:.1} MB (+{growth_mib:.1} MB){}",
            expected,
            match drained_ms {
                Some(ms) => format!("all delivered {ms:.0} ms after the last cycle"),
                None => format!("{short} watchers short (the least got {least})"),
            },
            peak as f64 / 1e6,
            lagged_note(lagged),
        ),
    )
    .with("watchers", watchers)
    .with("target_cycles_per_s", LOAD_CYCLES_PER_SECOND)
    .with("events_per_watcher", expected)
    .with("watchers_short", short)
    .with("lagged_snapshots", lagged)
    .with("server_rss_start_bytes", rss_start)
    .with("server_rss_peak_bytes", peak)
    .with("server_rss_growth_mib", round3(growth_mib))
    .with(
        "delivered_after_last_cycle_ms",
        drained_ms.map(|ms| ms.round()),
    ))
}

fn lagged_note(lagged: usize) -> String {
    match lagged {
        0 => String::new(),
        n => format!("; {n} snapshots instead of events (lagging watchers)"),
    }
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

async fn next_heard(hearing: &mut mpsc::UnboundedReceiver<Heard>) -> BenchResult<Heard> {
    match tokio::time::timeout(EVENT_TIMEOUT, hearing.recv()).await {
        Ok(Some(heard)) => Ok(heard),
        Ok(None) => Err("every watch stream ended".into()),
        Err(_) => Err(format!("no watch event within {EVENT_TIMEOUT:?}").into()),
    }
}

/// Waits until `watchers` watchers have heard `cause` for `token` (a snapshot, for a watcher that
/// lagged, tells it the news too): when each heard it.
async fn hear_from_all(
    hearing: &mut mpsc::UnboundedReceiver<Heard>,
    watchers: usize,
    cause: Cause,
    token: u64,
) -> BenchResult<Vec<Instant>> {
    let mut times = Vec::with_capacity(watchers);
    while times.len() < watchers {
        let heard = next_heard(hearing).await?;
        match heard.cause {
            Cause::Snapshot => times.push(heard.at),
            _ if heard.cause == cause && heard.fencing_token == token => times.push(heard.at),
            other => {
                return Err(format!(
                    "expected {cause:?} of token {token}, a watcher heard {other:?} of token {}",
                    heard.fencing_token
                )
                .into());
            }
        }
    }
    Ok(times)
}
