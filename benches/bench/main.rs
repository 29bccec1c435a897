//! leased's benchmarks: throughput, handoff latency and scale, against Redis itself and against
//! what users had before. `cargo bench --bench bench -- [--quick]`, or `scripts/bench.sh`, which
//! first installs the peers' tools. Starts everything it needs on 127.0.0.1 (redis-server, the
//! release `leased` binary as a child process, etcd), runs every scenario, prints Markdown tables
//! and writes `target/bench/report.json`. README.md, "Performance", explains the scenarios.
//!
//! - [`harness`]: the processes (shared with the integration tests, `tests/integration/harness/`).
//! - [`procs`]: the bench's side of them: CPU metering, `target/bench/`, `--leased-bin`.
//! - [`measure`]: closed-loop workers, latency quantiles, result rows and their numbers as the
//!   tables print them.
//! - [`workload`]: the store's scripts called directly, and cycles (of exclusive leases, of
//!   permits of counting leases, and of shared or exclusive grants of read-write leases) and
//!   renewals over gRPC.
//! - [`durable`]: what `--redis-wait-replicas 1` costs cycles and renewals, on a Redis master
//!   with a replica, against `--redis-wait-replicas 0` in turns with it.
//! - [`tracing_cost`]: what `--otlp-endpoint` costs `grpc_cycle@64`, against no tracing in turns
//!   with it.
//! - [`fencing_cost`]: what the fencing middleware (`leased::fencing::FencingLayer`) costs a
//!   gRPC call of `examples/fenced_kv`'s store, against the same store unfenced in turns with it.
//! - [`handoff`]: release-to-grant latency with waiters lined up.
//! - [`fair`]: callers on two replicas taking turns on one name (FIFO fairness), and what a queued
//!   waiter costs in Redis.
//! - [`scale`]: 100,000 held leases; the server's memory per open Renew stream and per lease a
//!   stream holds; Redis memory per held permit of a counting lease.
//! - [`hostile`]: what a connection costs the server, and a flood of 25,000 idle connections.
//! - [`fanout`]: 1,000 watchers of one name: release → the last watcher's event, and every
//!   event delivered to each while the name is granted and released 100 times a second.
//! - [`idle`]: what idle waiters and watchers cost while nothing changes: Redis calls and CPU per
//!   second, the replicas' CPU, their memory per waiter and per watcher.
//! - [`fenced_write`]: what fencing costs a write to PostgreSQL and to Redis as the resource,
//!   against the same write without the token, in turns.
//! - [`redis_calls`]: Redis calls per grant, release, hand-over and watched change.
//! - [`syscalls`]: system calls of the server per grant cycle (`strace -c`), for the cost guard.
//! - [`commandstats`]: Redis calls as `INFO commandstats` counts them.
//! - [`etcd`], [`peers`]: etcd's lock service, `SET NX PX`, redis-py's `Lock`.
//! - [`scenarios`]: each scenario's setup, as `run` calls it.
//! - [`report`]: the targets next to what was measured, `report.json` and the tables.

mod commandstats;
mod durable;
mod etcd;
mod fair;
mod fanout;
mod fenced_write;
mod fencing_cost;
mod handoff;
#[path = "../../tests/integration/harness/mod.rs"]
mod harness;
mod hostile;
mod idle;
#[path = "../../examples/fenced_kv/kv.rs"]
mod kv;
mod measure;
mod peers;
mod procs;
mod redis_calls;
mod report;
mod scale;
mod scenarios;
mod syscalls;
mod tracing_cost;
mod workload;

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::Parser;
use tonic::transport::Channel;

use crate::{
    harness::{leased::LeasedProcess, redis::RedisServer},
    measure::{Budget, Metered, Row},
    report::{report, tables, targets},
    scenarios::{
        durable_grants, etcd_lock, fair_contention, grpc_cycle, grpc_cycle_memory, grpc_renew,
        handoff, held_scale, idle_waiting, permit_memory, redis_benchmark_setnx, redis_calls,
        redis_direct, redis_py_lock, renew_stream_memory, rw_cycle, semaphore_cycle, watch_fanout,
    },
};

/// Errors of a scenario: any error, as text in the report.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Concurrency levels of the cycle scenarios.
const CONCURRENCY: [usize; 3] = [1, 16, 64];

/// Callers, and permits per name (the counting lease's limit), of `semaphore_cycle`.
const SEMAPHORE_CONCURRENCY: usize = 64;
const SEMAPHORE_LIMIT: u32 = 8;

/// Callers, read-write names, and the share of shared Acquires (in %) of `rw_cycle`.
const RW_CONCURRENCY: usize = 64;
const RW_NAMES: usize = 8;
const RW_SHARED_PERCENT: u64 = 90;

/// Open Renew streams in `grpc_renew` and `held_scale`.
const RENEW_STREAMS: usize = 1000;

/// Watchers of one name in `watch_fanout`.
const FANOUT_WATCHERS: usize = 1000;

#[derive(Parser, Debug)]
#[command(about = "leased benchmarks (README.md, section Performance)")]
struct Args {
    /// Short measurements and 5,000 held leases instead of 100,000: checks that every scenario
    /// runs (in well under a minute), not the numbers. `durable_grants` runs only when `--only`
    /// names it.
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

    /// [`wants`](Self::wants) for a scenario that `--quick` leaves out unless `--only` names it.
    fn wants_beyond_quick(&self, scenario: &str) -> bool {
        self.wants(scenario) && (!self.args.quick || !self.args.only.is_empty())
    }

    /// The caller counts of the `@N` scenarios that this run measures.
    fn concurrencies(&self) -> Vec<usize> {
        CONCURRENCY
            .into_iter()
            .filter(|n| self.args.callers.is_empty() || self.args.callers.contains(n))
            .collect()
    }

    /// The flags of every `leased` the bench starts on Redis, beside the chart's settings.
    fn leased_args(&self) -> [String; 2] {
        [
            "--redis-pool-size".to_owned(),
            self.args.redis_pool_size.to_string(),
        ]
    }

    fn connections_note(&self) -> String {
        format!("{} HTTP/2 connections", self.channels.len())
    }

    /// Rounds of a measurement taken in turns with another one (`semaphore_cycle` and `rw_cycle`
    /// with `grpc_cycle@64`): a drift of the machine's speed (other processes, thermal) then
    /// weighs on both alike.
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
        // A relative path is taken from the working directory (cargo runs the bench in the
        // package's root; `scripts/bench.sh` makes it absolute from where it was run).
        let path = std::fs::canonicalize(path)
            .map_err(|e| format!("--leased-bin {}: {e}", path.display()))?;
        procs::LEASED_BIN.set(path).expect("set once");
    }
    if cfg!(debug_assertions) {
        eprintln!(
            "bench: a dev build (LEASED_BENCH_PROFILE=dev): every scenario runs, but the figures \
             are not release figures; `scripts/bench.sh` builds release"
        );
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
    scenario!("rw_cycle", rw_cycle(&run));
    scenario!("grpc_cycle_memory", grpc_cycle_memory(&run));
    scenario!("grpc_renew", grpc_renew(&run));
    scenario!("tracing_cost", tracing_cost::tracing_cost(&run));
    scenario!("fencing_cost", fencing_cost::fencing_cost(&run));
    // Not in --quick (CI) unless named: four servers in turns on a Redis pair of its own take 18 s
    // even there.
    if run.wants_beyond_quick("durable_grants") {
        rows.extend(scenario("durable_grants", scenario_limit, durable_grants(&run)).await);
    }
    scenario!("handoff", handoff(&run));
    scenario!("fair_contention", fair_contention(&run));
    scenario!("redis_benchmark_setnx", redis_benchmark_setnx(&run));
    scenario!("redis_py_lock", redis_py_lock(&run));
    scenario!("etcd_lock", etcd_lock(&run));
    scenario!("held_scale", held_scale(&run));
    scenario!("permit_memory", permit_memory(&run));
    scenario!("renew_stream_memory", renew_stream_memory(&run));
    scenario!("watch_fanout", watch_fanout(&run));
    scenario!("idle_waiting", idle_waiting(&run));
    scenario!("redis_calls", redis_calls(&run));
    // Not in --quick unless named: scripts/cost-guard.sh runs it in CI (strace, 17 s).
    if run.wants_beyond_quick("syscalls") {
        let leased_args = run.leased_args();
        let work = syscalls::syscalls(&leased_args, &run.args.server_log);
        rows.extend(scenario("syscalls", scenario_limit, work).await);
    }
    scenario!(
        "fenced_write_postgres",
        fenced_write::fenced_write_postgres(&run)
    );
    scenario!("fenced_write_redis", fenced_write::fenced_write_redis(&run));
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
