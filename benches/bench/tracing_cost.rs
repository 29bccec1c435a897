//! `tracing_cost`: what `--otlp-endpoint` costs `grpc_cycle@64`. Two `leased` on the run's Redis
//! (the release binary as child processes, the chart's settings), which differ only in that
//! flag:
//! - `tracing_off`: no `--otlp-endpoint`, as deployed by default: the spans are disabled where
//!   they are made;
//! - `tracing_on`: `--otlp-endpoint` to an OTLP/gRPC receiver in the bench's process that accepts
//!   every export and discards it (`harness::otlp`), so every RPC and store call makes a span that
//!   is exported.
//!
//! Each runs `grpc_cycle@64`'s workload (64 callers, each a try-once Acquire then Release on its
//! own name) in rounds in which the two take turns, the order alternating from round to round (as
//! `durable_grants` does), so that a drift of the machine's speed weighs on both alike. Rows:
//! `grpc_cycle_tracing_off@64` and `grpc_cycle_tracing_on@64`, the latter with its ratio to the
//! former and the overhead in %. The receiver shares the bench's cores: what it costs to decode
//! the exports is paid by the machine, as a collector on the same host would.

use tonic::transport::Channel;

use crate::{
    BenchResult, Run,
    harness::{leased::LeasedProcess, otlp::OtlpReceiver},
    measure::{Metered, Row, Samples, thousands},
    procs, workload,
};

/// Callers, as in `grpc_cycle@64`.
const CALLERS: usize = 64;

/// One of the two servers.
struct Server {
    label: &'static str,
    channels: Vec<Channel>,
    _process: Metered<LeasedProcess>,
}

pub async fn tracing_cost(run: &Run) -> BenchResult<Vec<Row>> {
    let receiver = OtlpReceiver::start_discarding().await;
    let traced = ["--otlp-endpoint".to_owned(), receiver.endpoint()];
    let mut servers = Vec::new();
    for (label, tracing_args) in [("tracing_off", &[][..]), ("tracing_on", &traced[..])] {
        let args = [&run.leased_args()[..], tracing_args].concat();
        let process =
            procs::start_leased(label, Some(&run.redis.url()), &args, &run.args.server_log).await?;
        let channels = procs::connections(&process, run.channels.len()).await?;
        servers.push(Server {
            label,
            channels,
            _process: process,
        });
    }

    let mut parts: Vec<Vec<Samples>> = servers.iter().map(|_| Vec::new()).collect();
    for round in 0..run.rounds_in_turns() {
        for turn in 0..servers.len() {
            let index = (round as usize + turn) % servers.len();
            let server = &servers[index];
            let prefix = format!("bench/tracing_cost/{}/cycle", server.label);
            let budget = run.round_budget(round);
            let samples =
                workload::measure_grpc_cycles(&server.channels, CALLERS, &prefix, budget).await?;
            parts[index].push(samples);
        }
    }
    let exported_spans = receiver.span_count();
    if exported_spans == 0 {
        return Err("tracing_on exported no span to the receiver".into());
    }

    let by_round: Vec<Vec<f64>> = parts
        .iter()
        .map(|parts| parts.iter().map(|part| part.ops_per_s().round()).collect())
        .collect();
    let [off, on]: [Samples; 2] = parts
        .into_iter()
        .map(Samples::merge)
        .collect::<Vec<_>>()
        .try_into()
        .map_err(|_| "two servers")?;
    let ratio = on.ops_per_s() / off.ops_per_s();
    let overhead_percent = (1.0 - ratio) * 100.0;
    eprintln!(
        "bench: tracing_cost: grpc_cycle@{CALLERS} {} ops/s with tracing off, {} ops/s with \
         tracing on ({exported_spans} spans exported): overhead {overhead_percent:.1}%",
        thousands(off.ops_per_s()),
        thousands(on.ops_per_s()),
    );
    let workload = format!(
        "Acquire + Release over gRPC as in grpc_cycle@{CALLERS} ({CALLERS} callers, one name each), \
         in turns; {} HTTP/2 connections",
        run.channels.len()
    );
    let off_row = Row::new(
        format!("grpc_cycle_tracing_off@{CALLERS}"),
        &off,
        format!("{workload}; no --otlp-endpoint"),
    )
    .with("ops_per_s_by_round", by_round[0].clone());
    let on_row = Row::new(
        format!("grpc_cycle_tracing_on@{CALLERS}"),
        &on,
        format!(
            "{workload}; --otlp-endpoint to a receiver that discards ({exported_spans} spans \
             exported); {ratio:.3} × the {} ops/s of tracing off, overhead \
             {overhead_percent:.1}%",
            thousands(off.ops_per_s())
        ),
    )
    .with("ops_per_s_by_round", by_round[1].clone())
    .with("ratio_to_baseline", (ratio * 1000.0).round() / 1000.0)
    .with("overhead_percent", (overhead_percent * 10.0).round() / 10.0)
    .with("exported_spans", exported_spans);
    Ok(vec![off_row, on_row])
}
