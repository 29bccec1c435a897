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
    measure::{Row, Samples, closed_loop},
    peers, procs, redis_calls as calls,
    report::thousands,
    scale,
    workload::{self, DirectCycle, DirectRenew, RwTally},
};

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

pub(crate) async fn grpc_renew(run: &Run) -> BenchResult<Vec<Row>> {
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
