//! What users had before leased, measured in the same run on the same machine: a bare
//! `SET NX PX` lock (`redis-benchmark`) and redis-py's `Lock` (a Python script in the project
//! venv). etcd's lock service is in [`crate::etcd`].

use std::{path::PathBuf, process::Command};

use serde_json::Value;

use crate::{BenchResult, measure::Row, procs::installed};

/// `redis-benchmark` sending `SET key val NX PX 30000` (random keys, so nearly all succeed):
/// one round trip per acquire, no release, no fencing token.
pub fn redis_benchmark_setnx(port: u16, concurrency: usize, requests: usize) -> BenchResult<Row> {
    if !installed("redis-benchmark") {
        return Err("redis-benchmark is not installed: run scripts/bench.sh (redis-tools)".into());
    }
    let output = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &concurrency.to_string(), "-n", &requests.to_string()])
        .args(["-r", "1000000", "--csv"])
        .args([
            "SET",
            "bench:setnx:__rand_int__",
            "val",
            "NX",
            "PX",
            "30000",
        ])
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "redis-benchmark failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let csv = String::from_utf8(output.stdout)?;
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let fields: Vec<&str> = csv
        .lines()
        .find(|line| line.starts_with("\"SET"))
        .ok_or_else(|| format!("no result line in redis-benchmark output: {csv}"))?
        .split(',')
        .map(|field| field.trim_matches('"'))
        .collect();
    let number = |index: usize| -> BenchResult<f64> {
        Ok(fields
            .get(index)
            .ok_or("short redis-benchmark line")?
            .parse()?)
    };
    Ok(Row::measured_elsewhere(
        format!("redis_benchmark_setnx@{concurrency}"),
        number(1)?,
        number(4)?,
        number(6)?,
        requests,
        "redis-benchmark: SET NX PX, 1 round trip, no release",
    ))
}

/// The project venv's Python (`LEASED_BENCH_PYTHON` overrides it).
fn python() -> PathBuf {
    std::env::var_os("LEASED_BENCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"))
}

/// redis-py's `Lock`: cycles at 1 and 16 threads and the handoff to one blocked waiter.
pub fn redis_py_lock(port: u16, quick: bool) -> BenchResult<Vec<Row>> {
    let python = python();
    if !python.is_file() {
        return Err(format!(
            "{} not found: run scripts/bench.sh (it creates .venv with redis-py)",
            python.display()
        )
        .into());
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/bench/redis_py_lock.py");
    let mut command = Command::new(python);
    command.arg(script).args(["--port", &port.to_string()]);
    if quick {
        command.arg("--quick");
    }
    let output = command.output()?;
    if !output.status.success() {
        return Err(format!(
            "the redis-py script failed (is redis-py in .venv? run scripts/bench.sh): {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let report: Value = serde_json::from_slice(&output.stdout)?;
    let rows = report["rows"]
        .as_array()
        .ok_or("no rows from the redis-py script")?;
    rows.iter()
        .map(|row| {
            let number = |key: &str| {
                row[key]
                    .as_f64()
                    .ok_or_else(|| format!("redis-py row without {key}: {row}"))
            };
            Ok(Row::measured_elsewhere(
                row["name"].as_str().ok_or("redis-py row without a name")?,
                number("ops_per_s")?,
                number("p50_ms")?,
                number("p99_ms")?,
                number("samples")? as usize,
                row["note"].as_str().unwrap_or_default(),
            ))
        })
        .collect()
}
