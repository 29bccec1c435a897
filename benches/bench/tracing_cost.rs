//! `tracing_cost`: what `--otlp-endpoint` costs `grpc_cycle@64`. Three `leased` on the run's
//! Redis (the release binary as child processes, the chart's settings), which differ only in
//! their tracing flags:
//! - `tracing_off`: no `--otlp-endpoint`, as deployed by default: the spans are disabled where
//!   they are made;
//! - `tracing_on`: `--otlp-endpoint` to an OTLP/gRPC receiver in the bench's process that accepts
//!   every export and discards it (`harness::otlp`), at the chart's `tracing.sampleRatio` (0.1:
//!   head sampling, so about one RPC in ten, and its store calls, makes a span that is
//!   exported; the others make none): what a deployment of the chart that turns tracing on pays;
//! - `tracing_all`: the same at `--otlp-sample-ratio 1` (leased's own default), every RPC and
//!   store call traced.
//!
//! Each runs `grpc_cycle@64`'s workload (64 callers, each a try-once Acquire then Release on its
//! own name) in rounds in which the three take turns, the order rotating from round to round (as
//! `durable_grants` does), so that a drift of the machine's speed weighs on all alike. Rows:
//! `grpc_cycle_tracing_off@64`, `grpc_cycle_tracing_on@64` and `grpc_cycle_tracing_all@64`, the
//! last two with their ratio to the first and the overhead in %; the target ("tracing_cost
//! overhead ≤ 5 %") is `tracing_on`'s. Each traced server has a receiver of its own, so that each
//! row counts its own exported spans. The receivers share the bench's cores: what it costs to
//! decode the exports is paid by the machine, as a collector on the same host would.

use tonic::transport::Channel;

use crate::{
    BenchResult, Run,
    harness::{leased::LeasedProcess, otlp::OtlpReceiver},
    measure::{Metered, Row, Samples, thousands},
    procs, workload,
};

/// Callers, as in `grpc_cycle@64`.
const CALLERS: usize = 64;

/// One of the three servers.
struct Server {
    label: &'static str,
    channels: Vec<Channel>,
    /// Where its spans go, when it traces, and the ratio it traces at.
    traced: Option<(OtlpReceiver, String)>,
    _process: Metered<LeasedProcess>,
}

pub async fn tracing_cost(run: &Run) -> BenchResult<Vec<Row>> {
    let chart_ratio = procs::helm_sample_ratio()?;
    let mut servers = Vec::new();
    for (label, ratio) in [
        ("tracing_off", None),
        ("tracing_on", Some(chart_ratio.clone())),
        ("tracing_all", Some("1".to_owned())),
    ] {
        let mut args = run.leased_args().to_vec();
        let traced = match ratio {
            None => None,
            Some(ratio) => {
                let receiver = OtlpReceiver::start_discarding().await;
                args.extend([
                    "--otlp-endpoint".to_owned(),
                    receiver.endpoint(),
                    "--otlp-sample-ratio".to_owned(),
                    ratio.clone(),
                ]);
                Some((receiver, ratio))
            }
        };
        let process =
            procs::start_leased(label, Some(&run.redis.url()), &args, &run.args.server_log).await?;
        let channels = procs::connections(&process, run.channels.len()).await?;
        servers.push(Server {
            label,
            channels,
            traced,
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

    let workload = format!(
        "Acquire + Release over gRPC as in grpc_cycle@{CALLERS} ({CALLERS} callers, one name each), \
         in turns; {} HTTP/2 connections",
        run.channels.len()
    );
    let by_rounds: Vec<Vec<f64>> = parts
        .iter()
        .map(|parts| parts.iter().map(|part| part.ops_per_s().round()).collect())
        .collect();
    let merged: Vec<Samples> = parts.into_iter().map(Samples::merge).collect();
    let off = &merged[0];
    let mut rows = Vec::new();
    let mut summary = format!(
        "bench: tracing_cost: grpc_cycle@{CALLERS} {} ops/s with tracing off",
        thousands(off.ops_per_s())
    );
    for ((server, samples), by_round) in servers.iter().zip(&merged).zip(by_rounds) {
        let name = format!("grpc_cycle_{}@{CALLERS}", server.label);
        let Some((receiver, ratio)) = &server.traced else {
            let row = Row::new(name, samples, format!("{workload}; no --otlp-endpoint"));
            rows.push(row.with("ops_per_s_by_round", by_round));
            continue;
        };
        let exported_spans = receiver.span_count();
        if exported_spans == 0 {
            return Err(format!("{} exported no span to the receiver", server.label).into());
        }
        let ratio_to_off = samples.ops_per_s() / off.ops_per_s();
        let overhead_percent = (1.0 - ratio_to_off) * 100.0;
        summary.push_str(&format!(
            ", {} ops/s with {} (--otlp-sample-ratio {ratio}, {exported_spans} spans exported): \
             overhead {overhead_percent:.1}%",
            thousands(samples.ops_per_s()),
            server.label,
        ));
        let row = Row::new(
            name,
            samples,
            format!(
                "{workload}; --otlp-endpoint to a receiver that discards, --otlp-sample-ratio \
                 {ratio} ({exported_spans} spans exported); {ratio_to_off:.3} × the {} ops/s of \
                 tracing off, overhead {overhead_percent:.1}%",
                thousands(off.ops_per_s())
            ),
        )
        .with("ops_per_s_by_round", by_round)
        .with("sample_ratio", ratio.parse::<f64>().unwrap_or(f64::NAN))
        .with(
            "ratio_to_baseline",
            (ratio_to_off * 1000.0).round() / 1000.0,
        )
        .with("overhead_percent", (overhead_percent * 10.0).round() / 10.0)
        .with("exported_spans", exported_spans);
        rows.push(row);
    }
    eprintln!("{summary}");
    Ok(rows)
}
