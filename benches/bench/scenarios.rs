//! The scenarios `run` calls, each from the shared [`Run`](crate::Run) (the Redis server, the
//! `leased` server and its connections, the budget) to its result rows.

use std::time::Duration;

use leased::lease::limits::parse_name;

use crate::{
    BenchResult, FANOUT_WATCHERS, RENEW_STREAMS, RW_CONCURRENCY, RW_NAMES, RW_SHARED_PERCENT, Run,
    SEMAPHORE_CONCURRENCY, SEMAPHORE_LIMIT,
    commandstats::{CallMeter, Calls, per_unit},
    durable,
    etcd::{EtcdContender, EtcdCycle},
    fair, fanout,
    handoff::{self, LeasedContender},
    idle,
    measure::{
        Around, Row, Samples, TurnRatio, Turns, Worker, closed_loop, closed_loop_kept, in_turns,
        thousands,
    },
    peers, procs, redis_calls as calls, scale,
    workload::{self, DirectCycle, DirectRenew, RwTally},
};

/// Callers of the `@N` rows that are measured in turns with `grpc_cycle@N` for a target's ratio
/// (`redis_direct@64`, `etcd_lock@64`, `semaphore_cycle@64`).
const PAIRED_CALLERS: usize = 64;

/// `redis_direct@N`: acquire + release through the store in this process, no gRPC; and
/// `redis_direct_renew@64`, renewals so. The rows that a target divides (`redis_direct@64` by
/// `grpc_cycle@64`, `redis_direct_renew@64` by `grpc_renew`) are measured in turns with the gRPC
/// side ([`Turns`]), and carry the ratio of each turn and their median (`in_turns`).
pub(crate) async fn redis_direct(run: &Run) -> BenchResult<Vec<Row>> {
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
        let name = format!("redis_direct@{concurrency}");
        let row_note = format!("acquire.lua + release.lua; {note}");
        rows.push(cycle_row(run, "direct", name, row_note, workers).await?);
    }

    let mut direct = Vec::new();
    for worker in 0..64 {
        let name = format!("bench/direct-renew/{worker}");
        direct.push(DirectRenew::holding(store.clone(), &name).await?);
    }
    let streams = renew_streams(run, "bench/direct/grpc-renew").await?;
    let (direct, streams) = (
        tokio::sync::Mutex::new(direct),
        tokio::sync::Mutex::new(streams),
    );
    let turns = in_turns(
        run.rounds_in_turns(),
        |round| closed_loop_kept(&streams, run.round_budget(round)),
        |round| closed_loop_kept(&direct, run.round_budget(round)),
    )
    .await?;
    let name = "redis_direct_renew@64";
    let ratio = turns.ratio("grpc_renew", name, Around::Numerator);
    rows.push(paired_row(
        name.to_owned(),
        format!("renew.lua; {note}"),
        &format!("grpc_renew's workload of {RENEW_STREAMS} Renew streams"),
        turns,
        &ratio,
    ));
    Ok(rows)
}

/// The row of cycle `workers` measured alone, or, at [`PAIRED_CALLERS`] callers, in turns with
/// `grpc_cycle@64`'s workload (`scenario` names the gRPC side's leases).
async fn cycle_row<W: Worker>(
    run: &Run,
    scenario: &str,
    name: String,
    note: String,
    workers: Vec<W>,
) -> BenchResult<Row> {
    if workers.len() != PAIRED_CALLERS {
        let (samples, _) = closed_loop(workers, run.budget).await?;
        return Ok(Row::new(name, &samples, note));
    }
    let slot = tokio::sync::Mutex::new(workers);
    let turns = in_turns(
        run.rounds_in_turns(),
        |round| grpc_cycle_turn(run, scenario, round),
        |round| closed_loop_kept(&slot, run.round_budget(round)),
    )
    .await?;
    let grpc = format!("grpc_cycle@{PAIRED_CALLERS}");
    let ratio = turns.ratio(&grpc, &name, Around::Numerator);
    Ok(paired_row(name, note, &grpc, turns, &ratio))
}

/// One round of `grpc_cycle@64`'s workload (64 callers, one name each, Acquire + Release), for a
/// row measured in turns with it.
async fn grpc_cycle_turn(run: &Run, scenario: &str, round: u32) -> BenchResult<Samples> {
    let prefix = format!("bench/{scenario}/grpc-cycle-{round}");
    workload::measure_grpc_cycles(
        &run.channels,
        PAIRED_CALLERS,
        &prefix,
        run.round_budget(round),
    )
    .await
}

/// The row of the side of `turns` that ran between the other's rounds, with the ratio measured in
/// turns with `other` (what ran around it): the merged rounds in the row's columns, each turn's
/// ratio and their median in `in_turns`, the other side's throughput and CPU beside it.
pub(crate) fn paired_row(
    name: String,
    note: String,
    other: &str,
    turns: Turns,
    ratio: &TurnRatio,
) -> Row {
    let (others, samples) = (Samples::merge(turns.around), Samples::merge(turns.between));
    let other_cpu = Row::new("", &others, "").extra.remove("cpu_us_per_op");
    Row::new(
        name,
        &samples,
        format!(
            "{note}; in turns with {other} ({} ops/s): {} / {} = {}",
            thousands(others.ops_per_s()),
            ratio.numerator,
            ratio.denominator,
            ratio.text()
        ),
    )
    .with("in_turns", ratio.to_json())
    .with("in_turns_with", other)
    .with("in_turns_with_ops_per_s", others.ops_per_s().round())
    .with("in_turns_with_cpu_us_per_op", other_cpu.unwrap_or_default())
}

pub(crate) async fn grpc_cycle(run: &Run) -> BenchResult<Vec<Row>> {
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
pub(crate) async fn semaphore_cycle(run: &Run) -> BenchResult<Vec<Row>> {
    let concurrency = SEMAPHORE_CONCURRENCY;
    let turns = in_turns(
        run.rounds_in_turns(),
        |round| {
            let prefix = format!("bench/semaphore/exclusive-{round}");
            let budget = run.round_budget(round);
            async move {
                workload::measure_grpc_cycles(&run.channels, concurrency, &prefix, budget).await
            }
        },
        |round| {
            workload::measure_semaphore_cycles(
                &run.channels,
                concurrency,
                SEMAPHORE_LIMIT,
                "bench/semaphore/counting",
                run.round_budget(round),
            )
        },
    )
    .await?;
    let name = format!("semaphore_cycle@{concurrency}");
    let ratio = turns.ratio(
        &name,
        &format!("grpc_cycle@{concurrency}"),
        Around::Denominator,
    );
    let names = concurrency / SEMAPHORE_LIMIT as usize;
    let row = paired_row(
        name,
        format!(
            "Acquire (limit {SEMAPHORE_LIMIT}) + Release over gRPC, {SEMAPHORE_LIMIT} callers on \
             each of {names} names, Redis store; {}",
            run.connections_note()
        ),
        &format!("grpc_cycle@{concurrency}"),
        turns,
        &ratio,
    );
    Ok(vec![
        row.with("limit", SEMAPHORE_LIMIT)
            .with("names", names)
            .with("ratio_to_grpc_cycle", ratio.median),
    ])
}

/// `rw_cycle@64`: 64 callers, each cycle a try-once Acquire (as in `grpc_cycle`) of one of 8
/// read-write names drawn at random, shared 90 % of the time and exclusive 10 %, then its Release
/// when granted; a name busy for the mode answers `not_granted` and the cycle ends there. Ops are
/// cycles; the note gives the grants a second and the share of each mode's calls granted. Measured
/// in turns with `grpc_cycle@64` (64 callers, one name each), as `semaphore_cycle` is, and both
/// report Redis's CPU (from `/proc`, as every row's CPU column) and its calls (`INFO
/// commandstats`, the scripts' commands included, warm-ups included on both sides) per grant.
pub(crate) async fn rw_cycle(run: &Run) -> BenchResult<Vec<Row>> {
    let concurrency = RW_CONCURRENCY;
    let rounds = run.rounds_in_turns();
    let names: Vec<String> = (0..RW_NAMES)
        .map(|name| format!("bench/rw/{name}"))
        .collect();
    let mut meter = CallMeter::reset(&run.redis)?;
    let (mut exclusive, mut rw) = (Vec::new(), Vec::new());
    let (mut exclusive_calls, mut rw_calls) = (Calls::default(), Calls::default());
    let (mut exclusive_cycles, mut all, mut measured) = (0, RwTally::default(), RwTally::default());
    for round in 0..=rounds {
        let prefix = format!("bench/rw/exclusive-{round}");
        let workers = workload::grpc_cycle_workers(&run.channels, concurrency, &prefix);
        let before = meter.read()?;
        let (samples, workers) = closed_loop(workers, run.round_budget(round)).await?;
        exclusive_calls.add(&meter.read()?.since(&before));
        exclusive_cycles += workers.iter().map(|worker| worker.cycles).sum::<u64>();
        exclusive.push(samples);
        if round < rounds {
            let workers =
                workload::rw_cycle_workers(&run.channels, concurrency, &names, RW_SHARED_PERCENT);
            let before = meter.read()?;
            let (samples, workers) = closed_loop(workers, run.round_budget(round)).await?;
            rw_calls.add(&meter.read()?.since(&before));
            for worker in &workers {
                all.add(&worker.all);
                measured.add(&worker.measured);
            }
            rw.push(samples);
        }
    }
    let per_round = |parts: &[Samples]| -> Vec<f64> {
        parts.iter().map(|part| part.ops_per_s().round()).collect()
    };
    let (exclusive_rounds, rw_rounds) = (per_round(&exclusive), per_round(&rw));
    let (exclusive, samples) = (Samples::merge(exclusive), Samples::merge(rw));
    if measured.grants() == 0 {
        return Err("rw_cycle: no Acquire was granted".into());
    }
    let grants_per_s = measured.grants() as f64 / samples.elapsed.as_secs_f64();
    let redis_label = run.redis.label();
    let redis_cpu_us = |samples: &Samples, grants: u64| {
        let (_, spent) = samples.cpu.iter().find(|(label, _)| label == redis_label)?;
        Some(spent.as_secs_f64() * 1e6 / grants.max(1) as f64)
    };
    let rw_redis_us = redis_cpu_us(&samples, measured.grants()).unwrap_or(f64::NAN);
    let exclusive_redis_us =
        redis_cpu_us(&exclusive, exclusive.latencies.len() as u64).unwrap_or(f64::NAN);
    let rw_calls_per_grant = rw_calls.total() as f64 / all.grants().max(1) as f64;
    let rw_calls_per_cycle = rw_calls.total() as f64 / all.attempts().max(1) as f64;
    let exclusive_calls_per_cycle = exclusive_calls.total() as f64 / exclusive_cycles.max(1) as f64;
    let ratio = grants_per_s / exclusive.ops_per_s();
    let round3 = |value: f64| (value * 1000.0).round() / 1000.0;
    let round1 = |value: f64| (value * 10.0).round() / 10.0;
    Ok(vec![
        Row::new(
            format!("rw_cycle@{concurrency}"),
            &samples,
            format!(
                "try-once Acquire of one of {RW_NAMES} names, {RW_SHARED_PERCENT} % shared / {} % \
                 exclusive, + Release when granted, over gRPC, Redis store; ops = cycles; {} \
                 grants/s ({:.1} % of shared and {:.1} % of exclusive calls granted), {ratio:.2} \
                 × the {} ops/s of grpc_cycle@{concurrency} measured in turns with it; per grant \
                 Redis {rw_redis_us:.0} µs CPU and {} calls ({} per cycle), grpc_cycle@{concurrency} \
                 {exclusive_redis_us:.0} µs and {}; {}",
                100 - RW_SHARED_PERCENT,
                thousands(grants_per_s),
                measured.shared.granted_percent(),
                measured.exclusive.granted_percent(),
                thousands(exclusive.ops_per_s()),
                per_unit(round3(rw_calls_per_grant)),
                per_unit(round3(rw_calls_per_cycle)),
                per_unit(round3(exclusive_calls_per_cycle)),
                run.connections_note()
            ),
        )
        .with("names", RW_NAMES)
        .with("shared_percent", RW_SHARED_PERCENT)
        .with("grants_per_s", grants_per_s.round())
        .with("shared_calls", measured.shared.attempts)
        .with("shared_grants", measured.shared.grants)
        .with("exclusive_calls", measured.exclusive.attempts)
        .with("exclusive_grants", measured.exclusive.grants)
        .with("redis_cpu_us_per_grant", round1(rw_redis_us))
        .with("redis_calls_per_grant", round3(rw_calls_per_grant))
        .with("redis_calls_per_cycle", round3(rw_calls_per_cycle))
        .with("redis_calls_per_grant_by_command", rw_calls.to_json(all.grants().max(1) as f64))
        .with("ops_per_s_by_round", rw_rounds)
        .with("grpc_cycle_ops_per_s", exclusive.ops_per_s().round())
        .with("grpc_cycle_ops_per_s_by_round", exclusive_rounds)
        .with("grpc_cycle_redis_cpu_us_per_op", round1(exclusive_redis_us))
        .with("grpc_cycle_redis_calls_per_op", round3(exclusive_calls_per_cycle))
        .with("grants_ratio_to_grpc_cycle", round3(ratio)),
    ])
}

pub(crate) async fn grpc_cycle_memory(run: &Run) -> BenchResult<Vec<Row>> {
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

/// `grpc_renew`'s Renew streams: [`RENEW_STREAMS`] leases named `<prefix>/<index>`, one per stream.
async fn renew_streams(run: &Run, prefix: &str) -> BenchResult<Vec<workload::RenewStream>> {
    let names = (0..RENEW_STREAMS)
        .map(|index| format!("{prefix}/{index}"))
        .collect();
    let leases = workload::acquire_many(&run.channels, names, workload::CYCLE_TTL_MS, 64).await?;
    workload::open_renew_streams(&run.channels, workload::split_among(leases, RENEW_STREAMS)).await
}

pub(crate) async fn grpc_renew(run: &Run) -> BenchResult<Vec<Row>> {
    let streams = renew_streams(run, "bench/renew").await?;
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

/// `durable_grants`: `grpc_cycle@64`'s and `grpc_renew`'s workloads with `--redis-wait-replicas`
/// 0 and 1, on the run's pool and on one of 16, taking turns on a Redis master with one replica
/// of its own ([`durable`]).
pub(crate) async fn durable_grants(run: &Run) -> BenchResult<Vec<Row>> {
    let sizes = durable::Durable {
        configs: durable::Config::all(run.args.redis_pool_size),
        rounds: (0..run.rounds_in_turns())
            .map(|round| run.round_budget(round))
            .collect(),
        connections: run.channels.len(),
        streams: RENEW_STREAMS,
        server_log: &run.args.server_log,
    };
    durable::durable_grants(&sizes).await
}

pub(crate) async fn handoff(run: &Run) -> BenchResult<Vec<Row>> {
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
pub(crate) async fn fair_contention(run: &Run) -> BenchResult<Vec<Row>> {
    let second = procs::start_leased(
        "2",
        Some(&run.redis.url()),
        &run.leased_args(),
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

pub(crate) async fn redis_benchmark_setnx(run: &Run) -> BenchResult<Vec<Row>> {
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

pub(crate) async fn redis_py_lock(run: &Run) -> BenchResult<Vec<Row>> {
    let (port, quick) = (run.redis.port, run.args.quick);
    tokio::task::spawn_blocking(move || peers::redis_py_lock(port, quick)).await?
}

pub(crate) async fn etcd_lock(run: &Run) -> BenchResult<Vec<Row>> {
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
        let name = format!("etcd_lock@{concurrency}");
        // The target divides grpc_cycle@64 by etcd_lock@64: both measured in turns, here.
        rows.push(cycle_row(run, "etcd", name, note.clone(), workers).await?);
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

pub(crate) async fn held_scale(run: &Run) -> BenchResult<Vec<Row>> {
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

pub(crate) async fn permit_memory(run: &Run) -> BenchResult<Vec<Row>> {
    let sizes = scale::PermitMemory::new(run.args.quick);
    scale::permit_memory(&sizes, &run.redis, &run.channels).await
}

pub(crate) async fn renew_stream_memory(run: &Run) -> BenchResult<Vec<Row>> {
    let sizes = scale::RenewMemory::new(run.args.quick);
    scale::renew_stream_memory(&sizes, &run.redis.url(), &run.args.server_log).await
}

pub(crate) async fn watch_fanout(run: &Run) -> BenchResult<Vec<Row>> {
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

/// `idle_waiting`: each configuration of [`idle::Idle::configs`] on a Redis and replicas of its
/// own.
pub(crate) async fn idle_waiting(run: &Run) -> BenchResult<Vec<Row>> {
    let configs = idle::Idle::configs(run.args.quick);
    Ok(idle::idle_waiting(&configs, &run.leased_args(), &run.args.server_log).await)
}

/// `redis_calls`: Redis calls per operation, on a Redis and two replicas of its own.
pub(crate) async fn redis_calls(run: &Run) -> BenchResult<Vec<Row>> {
    calls::redis_calls(&run.leased_args(), &run.args.server_log).await
}
