//! leased's benchmarks: throughput, handoff latency and scale, against Redis itself and against
//! what users had before. `cargo bench --bench bench -- [--quick]`, or `scripts/bench.sh`, which
//! first installs the peers' tools. Starts everything it needs on 127.0.0.1 (redis-server, the
//! release `leased` binary as a child process, etcd), runs every scenario, prints Markdown tables
//! and writes `target/bench/report.json`. README.md, "Performance", explains the scenarios.
//!
//! - [`harness`]: the processes (shared with the integration tests, `tests/harness/`).
//! - [`procs`]: the bench's side of them: CPU metering, `target/bench/`, `--leased-bin`.
//! - [`measure`]: closed-loop workers, latency quantiles, result rows.
//! - [`workload`]: the store's scripts called directly, and cycles (of exclusive leases and of
//!   permits of counting leases) and renewals over gRPC.
//! - [`handoff`]: release-to-grant latency with waiters lined up.
//! - [`fair`]: callers on two replicas taking turns on one name (FIFO fairness), and what a queued
//!   waiter costs in Redis.
//! - [`scale`]: 100,000 held leases; the server's memory per open Renew stream and per lease a
//!   stream holds; Redis memory per held permit of a counting lease.
//! - [`hostile`]: what a connection costs the server, and a flood of 25,000 idle connections.
//! - [`fanout`]: 1,000 watchers of one name: release → the last watcher's event, and every
//!   event delivered to each while the name is granted and released 100 times a second.
//! - [`etcd`], [`peers`]: etcd's lock service, `SET NX PX`, redis-py's `Lock`.

mod etcd;
mod fair;
mod fanout;
mod handoff;
#[path = "../../tests/harness/mod.rs"]
mod harness;
mod hostile;
mod measure;
mod peers;
mod procs;
mod scale;
mod workload;

use std::{
    fmt::Write as _,
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::Parser;
use leased::lease::limits::parse_name;
use serde_json::{Value, json};
use tonic::transport::Channel;

use crate::{
    etcd::{EtcdContender, EtcdCycle},
    handoff::LeasedContender,
    harness::{leased::LeasedProcess, redis::RedisServer},
    measure::{Budget, Metered, Row, Samples, closed_loop},
    workload::{DirectCycle, DirectRenew},
};

/// Errors of a scenario: any error, as text in the report.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Concurrency levels of the cycle scenarios.
const CONCURRENCY: [usize; 3] = [1, 16, 64];

/// Callers, and permits per name (the counting lease's limit), of `semaphore_cycle`.
const SEMAPHORE_CONCURRENCY: usize = 64;
const SEMAPHORE_LIMIT: u32 = 8;

/// Open Renew streams in `grpc_renew` and `held_scale`.
const RENEW_STREAMS: usize = 1000;

/// Watchers of one name in `watch_fanout`.
const FANOUT_WATCHERS: usize = 1000;

#[derive(Parser, Debug)]
#[command(about = "leased benchmarks (README.md, section Performance)")]
struct Args {
    /// Short measurements and 5,000 held leases instead of 100,000: checks that every scenario
    /// runs (in well under a minute), not the numbers.
    #[arg(long)]
    quick: bool,
    /// Run only these scenarios (comma-separated names, e.g. `grpc_cycle,handoff`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Measure only these caller counts of the `@N` scenarios (comma-separated, from 1, 16, 64),
    /// e.g. `--callers 64` to profile one of them.
    #[arg(long, value_delimiter = ',')]
    callers: Vec<usize>,
    /// HTTP/2 connections that the gRPC callers (and the etcd callers) share.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// `--redis-pool-size` of the server, and the pool of the direct store.
    #[arg(long, default_value_t = 4)]
    redis_pool_size: usize,
    /// Leases held in held_scale (default 100,000, or 5,000 with --quick).
    #[arg(long)]
    held: Option<usize>,
    /// Seconds each measurement runs (default 5, or 1 with --quick); longer runs suit a profiler.
    #[arg(long)]
    seconds: Option<f64>,
    /// RUST_LOG of the leased child processes (their logs go to target/bench/); the default is
    /// the Helm chart's `logLevel`, so that the numbers include what logging costs in
    /// production. The other settings come from the chart too (`procs::helm_config`).
    #[arg(long, default_value = "info")]
    server_log: String,
    /// Serve with this `leased` binary instead of the one cargo built (to compare two builds).
    #[arg(long)]
    leased_bin: Option<std::path::PathBuf>,
    /// Passed by `cargo bench`; without it (under `cargo test --benches`) nothing runs.
    #[arg(long, hide = true)]
    bench: bool,
}

/// What every scenario shares.
struct Run {
    args: Args,
    budget: Budget,
    redis: Metered<RedisServer>,
    server: Metered<LeasedProcess>,
    channels: Vec<Channel>,
}

impl Run {
    fn wants(&self, scenario: &str) -> bool {
        self.args.only.is_empty() || self.args.only.iter().any(|name| name == scenario)
    }

    /// The caller counts of the `@N` scenarios that this run measures.
    fn concurrencies(&self) -> Vec<usize> {
        CONCURRENCY
            .into_iter()
            .filter(|n| self.args.callers.is_empty() || self.args.callers.contains(n))
            .collect()
    }

    fn connections_note(&self) -> String {
        format!("{} HTTP/2 connections", self.channels.len())
    }

    /// Rounds of a measurement taken in turns with another one (`semaphore_cycle` with
    /// `grpc_cycle@64`): a drift of the machine's speed (other processes, thermal) then weighs on
    /// both alike.
    fn rounds_in_turns(&self) -> u32 {
        if self.args.quick { 2 } else { 5 }
    }

    /// The budget of one of those rounds.
    fn round_budget(&self, round: u32) -> Budget {
        Budget {
            // Each kind of cycle warms up fully once; later rounds only refill their pipelines.
            warmup: match round {
                0 => self.budget.warmup,
                _ => Duration::from_millis(100),
            },
            measure: self.budget.measure / self.rounds_in_turns(),
            max_ops_per_worker: self.budget.max_ops_per_worker,
        }
    }

    /// Handoffs measured at most per scenario (also bounded by the budget's time).
    fn handoff_rounds(&self) -> usize {
        match self.args.quick {
            true => 200,
            false => 5000,
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if !args.bench {
        eprintln!("run with `cargo bench --bench bench -- [--quick]`");
        return ExitCode::SUCCESS;
    }
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the wanted scenarios; `Ok(false)` if any of them failed.
async fn run(args: Args) -> BenchResult<bool> {
    let started = Instant::now();
    let budget = match args.quick {
        true => Budget {
            warmup: Duration::from_millis(200),
            measure: Duration::from_millis(1000),
            max_ops_per_worker: 1_000_000,
        },
        false => Budget {
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(5),
            max_ops_per_worker: 10_000_000,
        },
    };
    let budget = Budget {
        measure: args.seconds.map_or(budget.measure, Duration::from_secs_f64),
        ..budget
    };
    let scenario_limit = match args.quick {
        true => Duration::from_secs(60),
        false => Duration::from_secs(600),
    };
    if let Some(path) = &args.leased_bin {
        procs::LEASED_BIN.set(path.clone()).expect("set once");
    }
    measure::meter_cpu("bench", std::process::id());
    let redis = procs::start_redis()?;
    let extra_args = [
        "--redis-pool-size".to_owned(),
        args.redis_pool_size.to_string(),
    ];
    let server =
        procs::start_leased("redis", Some(&redis.url()), &extra_args, &args.server_log).await?;
    let channels = procs::connections(&server, args.connections).await?;
    let run = Run {
        args,
        budget,
        redis,
        server,
        channels,
    };

    let mut rows = Vec::new();
    macro_rules! scenario {
        ($name:literal, $work:expr) => {
            if run.wants($name) {
                rows.extend(scenario($name, scenario_limit, $work).await);
            }
        };
    }
    scenario!("redis_direct", redis_direct(&run));
    scenario!("grpc_cycle", grpc_cycle(&run));
    scenario!("semaphore_cycle", semaphore_cycle(&run));
    scenario!("grpc_cycle_memory", grpc_cycle_memory(&run));
    scenario!("grpc_renew", grpc_renew(&run));
    scenario!("handoff", handoff(&run));
    scenario!("fair_contention", fair_contention(&run));
    scenario!("redis_benchmark_setnx", redis_benchmark_setnx(&run));
    scenario!("redis_py_lock", redis_py_lock(&run));
    scenario!("etcd_lock", etcd_lock(&run));
    scenario!("held_scale", held_scale(&run));
    scenario!("permit_memory", permit_memory(&run));
    scenario!("renew_stream_memory", renew_stream_memory(&run));
    scenario!("watch_fanout", watch_fanout(&run));
    scenario!(
        "hostile_connections",
        hostile::hostile_connections(&run.redis.url(), &run.args.server_log, run.args.quick)
    );

    let targets = targets(&rows, &run);
    let report = report(&run, &rows, &targets, started.elapsed())?;
    println!("{}", tables(&run, &rows, &targets, started.elapsed())?);
    let path = procs::bench_dir().join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
    eprintln!("bench: wrote {}", path.display());
    let failed: Vec<&Row> = rows.iter().filter(|row| row.error.is_some()).collect();
    for row in &failed {
        eprintln!(
            "bench: {} FAILED: {}",
            row.name,
            row.error.as_deref().unwrap_or("")
        );
    }
    Ok(failed.is_empty() && !rows.is_empty())
}

/// Runs one scenario within `limit`; a failure becomes a row that says why.
async fn scenario(
    name: &str,
    limit: Duration,
    work: impl Future<Output = BenchResult<Vec<Row>>>,
) -> Vec<Row> {
    eprintln!("bench: {name} ...");
    let started = Instant::now();
    let rows = match tokio::time::timeout(limit, work).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(error)) => vec![Row::failed(name, error.to_string())],
        Err(_) => vec![Row::failed(
            name,
            format!("did not finish within {limit:?}"),
        )],
    };
    for row in &rows {
        eprintln!(
            "bench:   {:<26} {:>10.0} ops/s  p50 {:>8.3} ms  p99 {:>8.3} ms  {}{}",
            row.name,
            row.ops_per_s,
            row.p50_ms,
            row.p99_ms,
            row.cpu_text(),
            row.error
                .as_ref()
                .map(|e| format!("  FAILED: {e}"))
                .unwrap_or_default()
        );
    }
    eprintln!(
        "bench: {name} took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    rows
}

async fn redis_direct(run: &Run) -> BenchResult<Vec<Row>> {
    let pool = run.args.redis_pool_size;
    let store = workload::direct_store(&run.redis.url(), pool).await?;
    let note = format!("RedisStore + fred in the bench process, no gRPC; pool of {pool}");
    let mut rows = Vec::new();
    for concurrency in run.concurrencies() {
        let workers = (0..concurrency)
            .map(|worker| {
                Ok(DirectCycle {
                    store: store.clone(),
                    name: parse_name(&format!("bench/direct/c{concurrency}/{worker}"))?,
                })
            })
            .collect::<BenchResult<Vec<_>>>()?;
        let (samples, _) = closed_loop(workers, run.budget).await?;
        rows.push(Row::new(
            format!("redis_direct@{concurrency}"),
            &samples,
            format!("acquire.lua + release.lua; {note}"),
        ));
    }
    let mut workers = Vec::new();
    for worker in 0..64 {
        let name = format!("bench/direct-renew/{worker}");
        workers.push(DirectRenew::holding(store.clone(), &name).await?);
    }
    let (samples, _) = closed_loop(workers, run.budget).await?;
    rows.push(Row::new(
        "redis_direct_renew@64",
        &samples,
        format!("renew.lua; {note}"),
    ));
    Ok(rows)
}

async fn grpc_cycle(run: &Run) -> BenchResult<Vec<Row>> {
    let mut rows = Vec::new();
    for concurrency in run.concurrencies() {
        let prefix = format!("bench/cycle/c{concurrency}");
        let samples =
            workload::measure_grpc_cycles(&run.channels, concurrency, &prefix, run.budget).await?;
        rows.push(Row::new(
            format!("grpc_cycle@{concurrency}"),
            &samples,
            format!(
                "Acquire + Release over gRPC, Redis store; {}",
                run.connections_note()
            ),
        ));
    }
    Ok(rows)
}

/// `semaphore_cycle@64`: try-once Acquire of a permit of a counting lease of limit 8, then
/// Release, by 64 callers, 8 on each of 8 names (so every Acquire finds a free permit). Its ratio
/// to `grpc_cycle@64` is measured on the spot, on the same server: the measuring time is cut
/// into rounds, exclusive cycles (64 callers, one name each) and semaphore cycles taking turns,
/// exclusive first and last, so that a drift of the machine's speed (other processes, thermal)
/// weighs on both alike.
async fn semaphore_cycle(run: &Run) -> BenchResult<Vec<Row>> {
    let concurrency = SEMAPHORE_CONCURRENCY;
    let rounds = run.rounds_in_turns();
    let round_budget = |round| run.round_budget(round);
    let (mut exclusive, mut counting) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let prefix = format!("bench/semaphore/exclusive-{round}");
        exclusive.push(
            workload::measure_grpc_cycles(&run.channels, concurrency, &prefix, round_budget(round))
                .await?,
        );
        if round < rounds {
            counting.push(
                workload::measure_semaphore_cycles(
                    &run.channels,
                    concurrency,
                    SEMAPHORE_LIMIT,
                    "bench/semaphore/counting",
                    round_budget(round),
                )
                .await?,
            );
        }
    }
    let per_round = |parts: &[Samples]| -> Vec<f64> {
        parts.iter().map(|part| part.ops_per_s().round()).collect()
    };
    let (exclusive_rounds, counting_rounds) = (per_round(&exclusive), per_round(&counting));
    let (exclusive, samples) = (Samples::merge(exclusive), Samples::merge(counting));
    let ratio = samples.ops_per_s() / exclusive.ops_per_s();
    let names = concurrency / SEMAPHORE_LIMIT as usize;
    let exclusive_cpu = Row::new("", &exclusive, "").extra.remove("cpu_us_per_op");
    Ok(vec![
        Row::new(
            format!("semaphore_cycle@{concurrency}"),
            &samples,
            format!(
                "Acquire (limit {SEMAPHORE_LIMIT}) + Release over gRPC, {SEMAPHORE_LIMIT} callers \
                 on each of {names} names, Redis store; {ratio:.2} × the {} ops/s of \
                 grpc_cycle@{concurrency} measured in turns with it; {}",
                thousands(exclusive.ops_per_s()),
                run.connections_note()
            ),
        )
        .with("limit", SEMAPHORE_LIMIT)
        .with("names", names)
        .with("grpc_cycle_ops_per_s", exclusive.ops_per_s().round())
        .with("grpc_cycle_ops_per_s_by_round", exclusive_rounds)
        .with(
            "grpc_cycle_cpu_us_per_op",
            exclusive_cpu.unwrap_or_default(),
        )
        .with("ops_per_s_by_round", counting_rounds)
        .with("ratio_to_grpc_cycle", (ratio * 1000.0).round() / 1000.0),
    ])
}

async fn grpc_cycle_memory(run: &Run) -> BenchResult<Vec<Row>> {
    let server = procs::start_leased("memory", None, &[], &run.args.server_log).await?;
    let channels = procs::connections(&server, run.channels.len()).await?;
    let mut rows = Vec::new();
    for concurrency in run.concurrencies() {
        let prefix = format!("bench/cycle-memory/c{concurrency}");
        let samples =
            workload::measure_grpc_cycles(&channels, concurrency, &prefix, run.budget).await?;
        rows.push(Row::new(
            format!("grpc_cycle_memory@{concurrency}"),
            &samples,
            format!(
                "Acquire + Release over gRPC, embedded store; {}",
                run.connections_note()
            ),
        ));
    }
    Ok(rows)
}

async fn grpc_renew(run: &Run) -> BenchResult<Vec<Row>> {
    let names = (0..RENEW_STREAMS)
        .map(|index| format!("bench/renew/{index}"))
        .collect();
    let leases = workload::acquire_many(&run.channels, names, workload::CYCLE_TTL_MS, 64).await?;
    let streams =
        workload::open_renew_streams(&run.channels, workload::split_among(leases, RENEW_STREAMS))
            .await?;
    let stream_count = streams.len();
    let (samples, _) = closed_loop(streams, run.budget).await?;
    Ok(vec![Row::new(
        "grpc_renew",
        &samples,
        format!(
            "{stream_count} Renew streams, one lease and one renewal in flight each; {}",
            run.connections_note()
        ),
    )])
}

async fn handoff(run: &Run) -> BenchResult<Vec<Row>> {
    let mut rows = Vec::new();
    for waiters in [1, 16] {
        let contenders = (0..=waiters)
            .map(|index| LeasedContender {
                client: workload::proto_client(&run.channels[index % run.channels.len()]),
                name: format!("bench/handoff/w{waiters}"),
            })
            .collect();
        let samples =
            handoff::handoff(contenders, run.handoff_rounds(), run.budget.measure).await?;
        rows.push(Row::new(
            format!("handoff@{waiters}"),
            &samples,
            format!(
                "Release call → next waiter's `granted`; {waiters} waiter(s) in Acquire, ops = handoffs"
            ),
        ));
    }
    Ok(rows)
}

/// `fair_contention@N` and `fair_queue_memory@W`, on the bench's server and a second replica
/// started on the same Redis with the same binary.
async fn fair_contention(run: &Run) -> BenchResult<Vec<Row>> {
    let extra_args = [
        "--redis-pool-size".to_owned(),
        run.args.redis_pool_size.to_string(),
    ];
    let second = procs::start_leased(
        "2",
        Some(&run.redis.url()),
        &extra_args,
        &run.args.server_log,
    )
    .await?;
    let second_channels = procs::connections(&second, run.channels.len()).await?;
    let replicas = [
        fair::Replica {
            channels: &run.channels,
        },
        fair::Replica {
            channels: &second_channels,
        },
    ];
    let mut rows = fair::contention(&replicas, &run.redis, run.budget).await?;
    rows.extend(fair::queue_memory(&replicas, &run.redis).await?);
    Ok(rows)
}

async fn redis_benchmark_setnx(run: &Run) -> BenchResult<Vec<Row>> {
    let port = run.redis.port;
    let scale = match run.args.quick {
        true => 1,
        false => 5,
    };
    let mut rows = Vec::new();
    for concurrency in run.concurrencies() {
        let requests = scale
            * match concurrency {
                1 => 10_000,
                _ => 60_000,
            };
        let row = tokio::task::spawn_blocking(move || {
            peers::redis_benchmark_setnx(port, concurrency, requests)
        })
        .await??;
        rows.push(row);
    }
    Ok(rows)
}

async fn redis_py_lock(run: &Run) -> BenchResult<Vec<Row>> {
    let (port, quick) = (run.redis.port, run.args.quick);
    tokio::task::spawn_blocking(move || peers::redis_py_lock(port, quick)).await?
}

async fn etcd_lock(run: &Run) -> BenchResult<Vec<Row>> {
    let etcd = procs::start_etcd().await?;
    let mut channels = Vec::new();
    for _ in 0..run.channels.len() {
        channels.push(procs::connect(etcd.client_address).await?);
    }
    let note = format!(
        "etcd 3.4 v3lock Lock + Unlock under a session lease, fsync on; {} HTTP/2 connections",
        channels.len()
    );
    let mut rows = Vec::new();
    for concurrency in run.concurrencies() {
        let mut workers = Vec::new();
        for worker in 0..concurrency {
            let channel = channels[worker % channels.len()].clone();
            let name = format!("bench/etcd/c{concurrency}/{worker}");
            workers.push(EtcdCycle::new(channel, name).await?);
        }
        let (samples, _) = closed_loop(workers, run.budget).await?;
        rows.push(Row::new(
            format!("etcd_lock@{concurrency}"),
            &samples,
            note.clone(),
        ));
    }
    let mut contenders = Vec::new();
    for index in 0..2 {
        let channel = channels[index % channels.len()].clone();
        contenders.push(EtcdContender::new(channel, "bench/etcd/handoff".to_owned()).await?);
    }
    // Each round holds the lock for 150 ms (see `etcd::WATCH_SYNC`): give it more time.
    let limit = run.budget.measure.max(Duration::from_secs(3));
    let samples = handoff::handoff(contenders, run.handoff_rounds(), limit).await?;
    rows.push(Row::new(
        "etcd_lock_handoff@1",
        &samples,
        "Unlock call → the blocked Lock call returns; 1 waiter, lock held 150 ms per round",
    ));
    Ok(rows)
}

async fn held_scale(run: &Run) -> BenchResult<Vec<Row>> {
    // Start from an empty Redis: keys of earlier scenarios expiring meanwhile would skew the
    // memory measured per lease.
    run.redis.query(&["FLUSHALL", "SYNC"])?;
    let scale = scale::Scale {
        held: run
            .args
            .held
            .unwrap_or(if run.args.quick { 5_000 } else { 100_000 }),
        streams: RENEW_STREAMS,
        quick: run.args.quick,
    };
    scale::held_scale(&scale, &run.redis, &run.server, &run.channels, run.budget).await
}

async fn permit_memory(run: &Run) -> BenchResult<Vec<Row>> {
    let sizes = scale::PermitMemory::new(run.args.quick);
    scale::permit_memory(&sizes, &run.redis, &run.channels).await
}

async fn renew_stream_memory(run: &Run) -> BenchResult<Vec<Row>> {
    let sizes = scale::RenewMemory::new(run.args.quick);
    scale::renew_stream_memory(&sizes, &run.redis.url(), &run.args.server_log).await
}

async fn watch_fanout(run: &Run) -> BenchResult<Vec<Row>> {
    let sizes = fanout::Fanout {
        watchers: FANOUT_WATCHERS,
        rounds: match run.args.quick {
            true => 20,
            false => 500,
        },
        limit: run.budget.measure,
    };
    fanout::watch_fanout(&sizes, &run.channels, run.server.pid()).await
}

/// One target of the issue, next to what was measured.
struct Target {
    name: &'static str,
    measured: Option<f64>,
    text: String,
    met: Option<bool>,
}

fn find<'a>(rows: &'a [Row], name: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|row| row.name == name && row.error.is_none())
}

fn targets(rows: &[Row], run: &Run) -> Vec<Target> {
    let mut targets = Vec::new();
    let mut ratio_target = |name, numerator: &str, denominator: &str, goal: f64| {
        let (measured, text) = match (find(rows, numerator), find(rows, denominator)) {
            (Some(n), Some(d)) => {
                let ratio = n.ops_per_s / d.ops_per_s;
                let text = format!("{ratio:.2} ({:.0} / {:.0} ops/s)", n.ops_per_s, d.ops_per_s);
                (Some(ratio), text)
            }
            _ => (None, "not measured".to_owned()),
        };
        targets.push(Target {
            name,
            measured,
            text,
            met: measured.map(|ratio| ratio >= goal),
        });
    };
    ratio_target(
        "grpc_cycle@64 ≥ 0.5 × redis_direct@64",
        "grpc_cycle@64",
        "redis_direct@64",
        0.5,
    );
    ratio_target(
        "grpc_renew ≥ 0.5 × redis_direct_renew@64",
        "grpc_renew",
        "redis_direct_renew@64",
        0.5,
    );
    ratio_target(
        "grpc_cycle@64 ≥ 2 × etcd_lock@64",
        "grpc_cycle@64",
        "etcd_lock@64",
        2.0,
    );
    // The server's CPU per acquire + release, as the row's CPU column reports it.
    for (name, row, budget_us) in [
        (
            "leased CPU per grpc_cycle@64 ≤ 90 µs",
            "grpc_cycle@64",
            90.0,
        ),
        (
            "leased CPU per grpc_cycle@1 ≤ 200 µs",
            "grpc_cycle@1",
            200.0,
        ),
    ] {
        let cpu = find(rows, row).and_then(|row| {
            let Some(Value::Object(per_op)) = row.extra.get("cpu_us_per_op") else {
                return None;
            };
            per_op.get("leased")?.as_f64()
        });
        targets.push(Target {
            name,
            measured: cpu,
            text: cpu.map_or("not measured".into(), |us| format!("{us:.0} µs")),
            met: cpu.map(|us| us <= budget_us),
        });
    }
    // Against the exclusive cycles measured in turns with it, not the `grpc_cycle@64` row.
    let semaphore = find(rows, "semaphore_cycle@64").and_then(|row| {
        let exclusive = row.extra.get("grpc_cycle_ops_per_s")?.as_f64()?;
        Some((row.ops_per_s, exclusive))
    });
    let ratio = semaphore.map(|(counting, exclusive)| counting / exclusive);
    targets.push(Target {
        name: "semaphore_cycle@64 (limit 8) ≥ 0.75 × grpc_cycle@64",
        measured: ratio,
        text: match semaphore {
            Some((counting, exclusive)) => format!(
                "{:.2} ({counting:.0} / {exclusive:.0} ops/s, grpc_cycle@64 measured in turns \
                 with it)",
                counting / exclusive
            ),
            None => "not measured".to_owned(),
        },
        met: ratio.map(|ratio| ratio >= 0.75),
    });
    let handoff = find(rows, "handoff@1");
    for (name, quantile, goal) in [
        ("handoff@1 p50 ≤ 1 ms", handoff.map(|row| row.p50_ms), 1.0),
        ("handoff@1 p99 ≤ 5 ms", handoff.map(|row| row.p99_ms), 5.0),
    ] {
        targets.push(Target {
            name,
            measured: quantile,
            text: quantile.map_or("not measured".into(), |ms| format!("{ms:.3} ms")),
            met: quantile.map(|ms| ms <= goal),
        });
    }
    let fair = find(rows, "fair_contention@16");
    let fairness = fair.and_then(|row| row.extra.get("fairness_min_max")?.as_f64());
    targets.push(Target {
        name: "fair_contention@16 grants per caller min/max ≥ 0.8",
        measured: fairness,
        text: fairness.map_or("not measured".into(), |ratio| {
            let count = |key| fair.and_then(|row| row.extra.get(key)?.as_u64());
            let (min, max) = (
                count("grants_per_caller_min"),
                count("grants_per_caller_max"),
            );
            format!(
                "{ratio:.2} ({} / {} grants)",
                min.unwrap_or_default(),
                max.unwrap_or_default()
            )
        }),
        met: fairness.map(|ratio| ratio >= 0.8),
    });
    let queued = find(rows, "fair_queue_memory@1000");
    let per_waiter = queued.and_then(|row| row.extra.get("redis_bytes_per_waiter")?.as_f64());
    targets.push(Target {
        name: "≤ 200 B of Redis memory per queued waiter (1,000 on one name)",
        measured: per_waiter,
        text: per_waiter.map_or("not measured".into(), |bytes| format!("{bytes:.0} B")),
        met: per_waiter.map(|bytes| bytes <= 200.0),
    });
    let held = find(rows, "held_scale");
    let held_count = held.and_then(|row| row.extra.get("held")?.as_u64());
    let scaled = match run.args.quick {
        true => format!(" ({} held: --quick)", held_count.unwrap_or_default()),
        false => String::new(),
    };
    let per_lease = held.and_then(|row| row.extra.get("redis_bytes_per_lease")?.as_f64());
    targets.push(Target {
        name: "≤ 400 B of Redis memory per held lease",
        measured: per_lease,
        text: per_lease.map_or("not measured".into(), |b| format!("{b:.0} B{scaled}")),
        met: per_lease.map(|bytes| bytes <= 400.0),
    });
    let permit_ratio = |name| {
        let row = find(rows, name)?;
        let ratio = row.extra.get("ratio_to_exclusive")?.as_f64()?;
        let bytes = row.extra.get("redis_bytes_per_permit")?.as_f64()?;
        Some((ratio, bytes))
    };
    let exclusive_bytes = find(rows, "permit_memory_exclusive")
        .and_then(|row| row.extra.get("redis_bytes_per_permit")?.as_f64());
    let (full, one) = (
        permit_ratio("permit_memory_counting_full"),
        permit_ratio("permit_memory_counting_one"),
    );
    let worst = full.zip(one).map(|(full, one)| full.0.max(one.0));
    targets.push(Target {
        name: "Redis memory per held permit (limit 8) ≤ 1.5 × per exclusive lease",
        measured: worst,
        text: match (full, one, exclusive_bytes) {
            (Some(full), Some(one), Some(exclusive)) => format!(
                "{:.2} with all 8 held ({:.0} B), {:.2} with 1 held ({:.0} B); exclusive {exclusive:.0} B",
                full.0, full.1, one.0, one.1
            ),
            _ => "not measured".to_owned(),
        },
        met: worst.map(|ratio| ratio <= 1.5),
    });
    let rss = held.and_then(|row| row.extra.get("server_rss_bytes")?.as_f64());
    targets.push(Target {
        name: "server RSS ≤ 200 MB with 100,000 held and 1,000 streams",
        measured: rss.map(|bytes| bytes / 1e6),
        text: rss.map_or("not measured".into(), |b| {
            format!("{:.1} MB{scaled}", b / 1e6)
        }),
        met: rss.map(|bytes| bytes <= 200e6),
    });
    targets
}

/// Ratios to Redis itself and to the peers, for the report.
fn ratios(rows: &[Row]) -> serde_json::Map<String, Value> {
    let mut ratios = serde_json::Map::new();
    let throughput = [
        ("grpc_cycle@64", "redis_direct@64"),
        ("grpc_cycle@16", "redis_direct@16"),
        ("grpc_cycle@1", "redis_direct@1"),
        ("grpc_renew", "redis_direct_renew@64"),
        ("grpc_cycle_memory@64", "grpc_cycle@64"),
        ("semaphore_cycle@64", "grpc_cycle@64"),
        ("grpc_cycle@64", "etcd_lock@64"),
        ("grpc_cycle@16", "redis_py_lock@16"),
        ("grpc_cycle@64", "redis_benchmark_setnx@64"),
        ("held_scale", "grpc_cycle@64"),
    ];
    for (numerator, denominator) in throughput {
        if let (Some(n), Some(d)) = (find(rows, numerator), find(rows, denominator)) {
            let ratio = n.ops_per_s / d.ops_per_s;
            ratios.insert(
                format!("{numerator} / {denominator} ops_per_s"),
                json!((ratio * 1000.0).round() / 1000.0),
            );
        }
    }
    for peer in ["redis_py_lock_handoff@1", "etcd_lock_handoff@1"] {
        if let (Some(ours), Some(theirs)) = (find(rows, "handoff@1"), find(rows, peer)) {
            ratios.insert(
                format!("{peer} / handoff@1 p50_ms"),
                json!((theirs.p50_ms / ours.p50_ms * 10.0).round() / 10.0),
            );
        }
    }
    ratios
}

fn environment(run: &Run) -> Value {
    let version = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .ok()
            .and_then(|output| String::from_utf8(output.stdout).ok())
            .and_then(|text| text.lines().next().map(str::to_owned))
    };
    json!({
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "redis_server": run.redis.info_field("server", "redis_version"),
        "etcd": version("etcd", &["--version"]),
        "leased": env!("CARGO_PKG_VERSION"),
        "grpc_connections": run.channels.len(),
        "redis_pool_size": run.args.redis_pool_size,
        "server": "release leased binary as a child process, with the settings of \
                   helm/leased/values.yaml (LEASED_* variables, JSON logs); RUST_LOG="
            .to_owned()
            + &run.args.server_log,
        "warmup_s": run.budget.warmup.as_secs_f64(),
        "measure_s": run.budget.measure.as_secs_f64(),
    })
}

fn report(run: &Run, rows: &[Row], targets: &[Target], elapsed: Duration) -> BenchResult<Value> {
    Ok(json!({
        "quick": run.args.quick,
        "elapsed_s": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "environment": environment(run),
        "scenarios": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
        "ratios": ratios(rows),
        "targets": targets.iter().map(|t| json!({
            "target": t.name,
            "measured": t.measured,
            "text": t.text,
            "met": t.met,
        })).collect::<Vec<_>>(),
    }))
}

fn tables(run: &Run, rows: &[Row], targets: &[Target], elapsed: Duration) -> BenchResult<String> {
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    writeln!(
        out,
        "leased benchmark ({}, {cores} cores, {:.0} s; everything on this machine)\n",
        if run.args.quick { "--quick" } else { "full" },
        elapsed.as_secs_f64()
    )?;
    writeln!(
        out,
        "| scenario | ops/s | p50 ms | p99 ms | CPU µs per op | notes |"
    )?;
    writeln!(out, "|---|--:|--:|--:|---|---|")?;
    for row in rows {
        match &row.error {
            Some(error) => writeln!(out, "| {} | FAILED | | | | {error} |", row.name)?,
            None => writeln!(
                out,
                "| {} | {} | {:.3} | {:.3} | {} | {} |",
                row.name,
                thousands(row.ops_per_s),
                row.p50_ms,
                row.p99_ms,
                row.cpu_text(),
                row.note
            )?,
        }
    }
    writeln!(out, "\n| target | measured | met |")?;
    writeln!(out, "|---|---|---|")?;
    for target in targets {
        let met = match target.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "n/a",
        };
        writeln!(out, "| {} | {} | {met} |", target.name, target.text)?;
    }
    Ok(out)
}

/// `12345.6` as `12,346`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
