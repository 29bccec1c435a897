//! `durable_grants`: the price of `--redis-wait-replicas`. A Redis master with one replica of its
//! own (`--replicaof`, measured once the replica's first sync is done), and on it one `leased` per
//! configuration (the release binary as child processes, the chart's settings), which differ only
//! in their flags:
//! - `wait0`: `--redis-wait-replicas 0`, on the run's `--redis-pool-size` (4 by default): answered
//!   once the master has it, replicated all the same; the baseline;
//! - `wait1`: `--redis-wait-replicas 1`: a grant or renewal is answered once `WAIT 1`, on the
//!   connection that ran its script, says the replica has it;
//! - `wait0_pool16`, `wait1_pool16`: the same with a pool of 16 connections, since `WAIT` holds
//!   its connection while it waits.
//!
//! Each runs `grpc_cycle@64`'s workload (64 callers, each a try-once Acquire then Release on its
//! own name; the grant waits for the replica, the release does not), then `grpc_renew`'s (1,000
//! Renew streams, one lease and one renewal in flight each). The measuring time of each is cut
//! into rounds in which the configurations take turns, their order rotating from round to round
//! (as `semaphore_cycle` takes turns with `grpc_cycle@64`), so that a drift of the machine's speed
//! weighs on all alike. Rows: `grpc_cycle_<config>@64` and `grpc_renew_<config>`, each with its
//! ratio to `wait0`'s; the CPU column meters the master (`redis-master`), the replica
//! (`redis-replica`) and the configuration's server (`leased-<config>`).

use tonic::transport::Channel;

use crate::{
    BenchResult,
    harness::leased::LeasedProcess,
    measure::{Budget, Metered, Row, Samples, closed_loop, thousands},
    procs,
    workload::{self, RenewStream},
};

/// Callers of the cycles, as in `grpc_cycle@64`.
pub const CALLERS: usize = 64;

/// The pool of the `_pool16` configurations.
pub const LARGE_POOL: usize = 16;

/// One `leased` of the scenario: what tells it apart.
pub struct Config {
    /// `wait0`, `wait1`, `wait0_pool16`, `wait1_pool16`: in the rows' names.
    pub label: String,
    pub wait_replicas: u32,
    pub pool_size: usize,
}

impl Config {
    /// `wait0` (the baseline, first) and `wait1` on the run's pool of `pool_size`, then both on
    /// [`LARGE_POOL`] connections.
    pub fn all(pool_size: usize) -> Vec<Config> {
        let config = |wait_replicas, pool_size, suffix: &str| Config {
            label: format!("wait{wait_replicas}{suffix}"),
            wait_replicas,
            pool_size,
        };
        let large = format!("_pool{LARGE_POOL}");
        vec![
            config(0, pool_size, ""),
            config(1, pool_size, ""),
            config(0, LARGE_POOL, &large),
            config(1, LARGE_POOL, &large),
        ]
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--redis-pool-size".to_owned(),
            self.pool_size.to_string(),
            "--redis-wait-replicas".to_owned(),
            self.wait_replicas.to_string(),
        ]
    }

    /// The flags, and what waits for the replicas: a grant or a renewal (`waited`).
    fn text(&self, waited: &str) -> String {
        let wait = match self.wait_replicas {
            0 => "no WAIT".to_owned(),
            n => format!("WAIT {n} after each {waited}"),
        };
        format!(
            "--redis-wait-replicas {} ({wait}), pool of {}",
            self.wait_replicas, self.pool_size
        )
    }
}

/// The scenario's sizes.
pub struct Durable<'a> {
    /// The baseline first.
    pub configs: Vec<Config>,
    /// The budget of each round: every configuration runs once per round.
    pub rounds: Vec<Budget>,
    /// HTTP/2 connections to each server.
    pub connections: usize,
    /// Renew streams (one lease each) per configuration.
    pub streams: usize,
    pub server_log: &'a str,
}

/// One configuration's server and its connections.
struct Server<'a> {
    config: &'a Config,
    channels: Vec<Channel>,
    _process: Metered<LeasedProcess>,
}

/// Every row: the cycles of each configuration, then the renewals of each.
pub async fn durable_grants(durable: &Durable<'_>) -> BenchResult<Vec<Row>> {
    let master = procs::start_redis_as("redis-master")?;
    let _replica = procs::start_replica_as("redis-replica", &master).await?;
    let mut servers = Vec::new();
    for config in &durable.configs {
        let process = procs::start_leased(
            &config.label,
            Some(&master.url()),
            &config.args(),
            durable.server_log,
        )
        .await?;
        let channels = procs::connections(&process, durable.connections).await?;
        servers.push(Server {
            config,
            channels,
            _process: process,
        });
    }
    let setup = format!(
        "Redis master + 1 replica; {} HTTP/2 connections",
        durable.connections
    );

    let mut cycles: Vec<Vec<Samples>> = servers.iter().map(|_| Vec::new()).collect();
    for (round, budget) in durable.rounds.iter().enumerate() {
        for turn in 0..servers.len() {
            let index = (round + turn) % servers.len();
            let server = &servers[index];
            let prefix = format!("bench/durable/{}/cycle", server.config.label);
            let samples =
                workload::measure_grpc_cycles(&server.channels, CALLERS, &prefix, *budget).await?;
            cycles[index].push(samples);
        }
    }

    // Taken only now, so that none of the leases nears its TTL while the cycles run.
    let mut streams: Vec<Vec<RenewStream>> = Vec::new();
    for server in &servers {
        let names = (0..durable.streams)
            .map(|index| format!("bench/durable/{}/renew/{index}", server.config.label))
            .collect();
        let leases =
            workload::acquire_many(&server.channels, names, workload::CYCLE_TTL_MS, CALLERS)
                .await?;
        let groups = workload::split_among(leases, durable.streams);
        streams.push(workload::open_renew_streams(&server.channels, groups).await?);
    }
    let mut renewals: Vec<Vec<Samples>> = servers.iter().map(|_| Vec::new()).collect();
    for (round, budget) in durable.rounds.iter().enumerate() {
        for turn in 0..servers.len() {
            let index = (round + turn) % servers.len();
            let workers = std::mem::take(&mut streams[index]);
            let (samples, workers) = closed_loop(workers, *budget).await?;
            streams[index] = workers;
            renewals[index].push(samples);
        }
    }
    let stream_count = streams[0].len();
    drop(streams);

    let mut rows = config_rows(
        &servers,
        cycles,
        |label| format!("grpc_cycle_{label}@{CALLERS}"),
        &format!(
            "Acquire + Release over gRPC as in grpc_cycle@{CALLERS} ({CALLERS} callers, one name \
             each)"
        ),
        "grant, none after the release",
        &setup,
    );
    rows.extend(config_rows(
        &servers,
        renewals,
        |label| format!("grpc_renew_{label}"),
        &format!(
            "{stream_count} Renew streams, one lease and one renewal in flight each, as in \
             grpc_renew"
        ),
        "renewal",
        &setup,
    ));
    Ok(rows)
}

/// One row per configuration, each with its ratio to the baseline's (the first) throughput.
fn config_rows(
    servers: &[Server<'_>],
    parts: Vec<Vec<Samples>>,
    name: impl Fn(&str) -> String,
    workload: &str,
    waited: &str,
    setup: &str,
) -> Vec<Row> {
    let by_round: Vec<Vec<f64>> = parts
        .iter()
        .map(|parts| parts.iter().map(|part| part.ops_per_s().round()).collect())
        .collect();
    let merged: Vec<Samples> = parts.into_iter().map(Samples::merge).collect();
    let baseline_name = name(&servers[0].config.label);
    let baseline = merged[0].ops_per_s();
    servers
        .iter()
        .zip(merged)
        .zip(by_round)
        .enumerate()
        .map(|(index, ((server, samples), by_round))| {
            let ratio = samples.ops_per_s() / baseline;
            let compared = match index {
                0 => String::new(),
                _ => format!(
                    "; {ratio:.2} × the {} ops/s of {baseline_name} measured in turns with it",
                    thousands(baseline)
                ),
            };
            Row::new(
                name(&server.config.label),
                &samples,
                format!(
                    "{workload}; {}{compared}; {setup}",
                    server.config.text(waited)
                ),
            )
            .with("redis_wait_replicas", server.config.wait_replicas)
            .with("redis_pool_size", server.config.pool_size)
            .with("ops_per_s_by_round", by_round)
            .with("ratio_to_baseline", (ratio * 1000.0).round() / 1000.0)
        })
        .collect()
}
