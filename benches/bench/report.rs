//! The report: the targets next to what was measured, the ratios to the peers, the
//! environment, `report.json` and the Markdown tables.

use std::{fmt::Write as _, time::Duration};

use serde_json::{Value, json};

use crate::{
    BenchResult, Run,
    measure::{Row, thousands},
};

/// One target of the issue, next to what was measured.
pub(crate) struct Target {
    name: &'static str,
    measured: Option<f64>,
    text: String,
    met: Option<bool>,
}

fn find<'a>(rows: &'a [Row], name: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|row| row.name == name && row.error.is_none())
}

pub(crate) fn targets(rows: &[Row], run: &Run) -> Vec<Target> {
    let mut targets = Vec::new();
    // Each ratio comes from the two sides measured in turns within one scenario, on the row that
    // ran between the other's rounds (`in_turns`: each turn's ratio and their median), never from
    // two rows measured minutes apart.
    let mut turn_target = |name, row: &str, goal: f64| {
        let in_turns = find(rows, row).and_then(|row| row.extra.get("in_turns"));
        let median = in_turns.and_then(|ratio| ratio.get("median")?.as_f64());
        targets.push(Target {
            name,
            measured: median,
            text: in_turns.map_or("not measured".into(), turn_text),
            met: median.map(|ratio| ratio >= goal),
        });
    };
    turn_target(
        "grpc_cycle@64 ≥ 0.45 × redis_direct@64",
        "redis_direct@64",
        0.45,
    );
    turn_target(
        "grpc_renew ≥ 0.5 × redis_direct_renew@64",
        "redis_direct_renew@64",
        0.5,
    );
    turn_target("grpc_cycle@64 ≥ 2 × etcd_lock@64", "etcd_lock@64", 2.0);
    turn_target(
        "semaphore_cycle@64 (limit 8) ≥ 0.75 × grpc_cycle@64",
        "semaphore_cycle@64",
        0.75,
    );
    // The server's CPU per acquire + release, as the row's CPU column reports it.
    for (name, row, budget_us) in [
        (
            "leased CPU per grpc_cycle@64 ≤ 65 µs",
            "grpc_cycle@64",
            65.0,
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
    // Tracing on as the chart deploys it (its sample ratio), against tracing off, in turns.
    let tracing = find(rows, "grpc_cycle_tracing_on@64")
        .and_then(|row| row.extra.get("overhead_percent")?.as_f64());
    targets.push(Target {
        name: "tracing_cost overhead ≤ 5 % (grpc_cycle_tracing_on@64, the chart's sample ratio)",
        measured: tracing,
        text: tracing.map_or("not measured".into(), |percent| format!("{percent:.1} %")),
        met: tracing.map(|percent| percent <= 5.0),
    });
    let handoff = find(rows, "handoff@1");
    for (name, quantile, goal) in [
        (
            "handoff@1 p50 ≤ 0.45 ms",
            handoff.map(|row| row.p50_ms),
            0.45,
        ),
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

/// `0.41 (grpc_cycle@64 / redis_direct@64, median of 5 turns: 0.40, 0.41, ...)` from a row's
/// `in_turns`.
fn turn_text(in_turns: &Value) -> String {
    let text = |key: &str| in_turns.get(key).and_then(Value::as_str).unwrap_or("?");
    let by_turn: Vec<String> = in_turns
        .get("by_turn")
        .and_then(Value::as_array)
        .map(|turns| {
            turns
                .iter()
                .filter_map(Value::as_f64)
                .map(|ratio| format!("{ratio:.2}"))
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{:.2} ({} / {}, median of {} turns: {})",
        in_turns
            .get("median")
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN),
        text("numerator"),
        text("denominator"),
        by_turn.len(),
        by_turn.join(", ")
    )
}

/// The throughput ratios measured in turns, for the report: each row's `in_turns` median, the
/// durable configurations' ratios to `wait0`, and `rw_cycle`'s. Ratios of two rows measured
/// minutes apart are left out: a machine whose speed drifts between scenarios skews them.
fn ratios(rows: &[Row]) -> serde_json::Map<String, Value> {
    let mut ratios = serde_json::Map::new();
    for row in rows.iter().filter(|row| row.error.is_none()) {
        if let Some(in_turns) = row.extra.get("in_turns") {
            let text = |key: &str| in_turns.get(key).and_then(Value::as_str).unwrap_or("?");
            ratios.insert(
                format!(
                    "{} / {} ops_per_s (in turns, median)",
                    text("numerator"),
                    text("denominator")
                ),
                in_turns.get("median").cloned().unwrap_or(Value::Null),
            );
        }
        if let (Some(ratio), true) = (
            row.extra.get("ratio_to_baseline"),
            row.name.contains("_wait"),
        ) {
            let baseline = match row.name.starts_with("grpc_renew") {
                true => "grpc_renew_wait0",
                false => "grpc_cycle_wait0@64",
            };
            if row.name != baseline {
                ratios.insert(
                    format!("{} / {baseline} ops_per_s (in turns)", row.name),
                    ratio.clone(),
                );
            }
        }
    }
    // Against the exclusive cycles measured in turns with it: grants, and Redis's CPU per grant.
    if let Some(row) = find(rows, "rw_cycle@64") {
        let number = |key: &str| row.extra.get(key).and_then(Value::as_f64);
        if let Some(ratio) = number("grants_ratio_to_grpc_cycle") {
            ratios.insert(
                "rw_cycle@64 grants_per_s / grpc_cycle@64 ops_per_s (in turns)".to_owned(),
                json!(ratio),
            );
        }
        if let (Some(rw), Some(exclusive)) = (
            number("redis_cpu_us_per_grant"),
            number("grpc_cycle_redis_cpu_us_per_op"),
        ) {
            ratios.insert(
                "rw_cycle@64 / grpc_cycle@64 (in turns) Redis CPU per grant".to_owned(),
                json!((rw / exclusive * 1000.0).round() / 1000.0),
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
        // `cargo bench` builds release; CI's smoke run (`LEASED_BENCH_PROFILE=dev`) does not, and
        // its figures are no release figures: the docs refuse its report.
        "build": if cfg!(debug_assertions) { "dev" } else { "release" },
        // The commit measured (`-dirty`: with changes not committed), for the docs' provenance.
        "commit": version("git", &["describe", "--always", "--dirty", "--abbrev=12"]),
        "grpc_connections": run.channels.len(),
        "redis_pool_size": run.args.redis_pool_size,
        "server": "the leased binary of the same build as a child process, with the settings of \
                   helm/leased/values.yaml (LEASED_* variables, JSON logs); RUST_LOG="
            .to_owned()
            + &run.args.server_log,
        "warmup_s": run.budget.warmup.as_secs_f64(),
        "measure_s": run.budget.measure.as_secs_f64(),
    })
}

pub(crate) fn report(
    run: &Run,
    rows: &[Row],
    targets: &[Target],
    elapsed: Duration,
) -> BenchResult<Value> {
    let mut tables = serde_json::Map::new();
    tables.insert("scenarios".into(), json!(scenario_table(rows)?));
    tables.insert("targets".into(), json!(target_table(targets)?));
    if let Some(table) = crate::idle::table(rows) {
        tables.insert("idle_waiting".into(), json!(table));
    }
    if let Some(table) = crate::redis_calls::table(rows) {
        tables.insert("redis_calls".into(), json!(table));
    }
    if let Some(table) = crate::syscalls::table(rows) {
        tables.insert("syscalls".into(), json!(table));
    }
    Ok(json!({
        "quick": run.args.quick,
        // What ran: `--only`, `--callers` and `--seconds` make a partial report.
        "only": run.args.only,
        "callers": run.args.callers,
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
        // The Markdown tables printed below, as `scripts/bench_tables.py` puts them in the docs.
        "tables": tables,
    }))
}

/// Every row: `| scenario | ops/s | p50 ms | p99 ms | CPU µs per op | notes |`.
fn scenario_table(rows: &[Row]) -> BenchResult<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| scenario | ops/s | p50 ms | p99 ms | CPU µs per op | notes |"
    )?;
    writeln!(out, "|---|--:|--:|--:|---|---|")?;
    for row in rows {
        let ms = |value: f64| match value.is_finite() {
            true => format!("{value:.3}"),
            false => "-".to_owned(),
        };
        match &row.error {
            Some(error) => writeln!(out, "| {} | FAILED | | | | {error} |", row.name)?,
            None => writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                row.name,
                thousands(row.ops_per_s),
                ms(row.p50_ms),
                ms(row.p99_ms),
                row.cpu_text(),
                row.note
            )?,
        }
    }
    Ok(out)
}

/// `| target | measured | met |`.
fn target_table(targets: &[Target]) -> BenchResult<String> {
    let mut out = String::new();
    writeln!(out, "| target | measured | met |")?;
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

pub(crate) fn tables(
    run: &Run,
    rows: &[Row],
    targets: &[Target],
    elapsed: Duration,
) -> BenchResult<String> {
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    writeln!(
        out,
        "leased benchmark ({}, {cores} cores, {:.0} s; everything on this machine)\n",
        if run.args.quick { "--quick" } else { "full" },
        elapsed.as_secs_f64()
    )?;
    write!(out, "{}", scenario_table(rows)?)?;
    if let Some(table) = crate::idle::table(rows) {
        writeln!(
            out,
            "\nIdle waiting and watching, nothing changing (Redis calls: INFO commandstats, \
             scripts' commands included; CPU in % of one core; RSS of the replicas)\n\n{table}"
        )?;
    }
    if let Some(table) = crate::redis_calls::table(rows) {
        writeln!(
            out,
            "\nRedis calls per operation (INFO commandstats, scripts' commands included)\n\n{table}"
        )?;
    }
    if let Some(table) = crate::syscalls::table(rows) {
        writeln!(
            out,
            "\nSystem calls of the server per grant cycle (strace -c -f, the idle rate taken out)\n\n{table}"
        )?;
    }
    writeln!(out)?;
    write!(out, "{}", target_table(targets)?)?;
    Ok(out)
}
