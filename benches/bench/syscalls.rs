//! `syscalls`: system calls of the server process per grant cycle (a try-once Acquire of a free
//! name and its Release), as `strace -c -f -p` counts them, on a Redis and one `leased` of its
//! own, so that nothing else wakes that server. A count, not a time: it stays put from run to run
//! where CPU time and throughput drift, so `scripts/cost-guard.sh` checks it in CI against
//! `benches/cost-baseline.json`. Rows:
//! - `syscalls@1`: [`CYCLES`] cycles one after another from one caller;
//! - `syscalls@8`: [`CYCLES`] cycles in all from 8 concurrent callers on one HTTP/2 connection
//!   (batching there depends on timing: information, not guarded);
//! - `syscalls_idle`: the same server doing nothing for as long as `syscalls@1` took, per second.
//!
//! Each cycle row has the idle rate times its own duration taken out, per system call (the
//! health ping to Redis each second, timers), and reports `syscalls_per_cycle` (all),
//! `write_syscalls_per_cycle` (writes to sockets, [`WRITE_SYSCALLS`]: the same in every run at
//! one caller) and `io_syscalls_per_cycle` (those and the reads, [`READ_SYSCALLS`]: a
//! message that arrives in two pieces takes two reads, so they vary by a few %). How the threads
//! happened to meet moves the rest (`epoll_wait`, `futex`, `sched_yield`).
//! Latencies are under strace, which slows every system call: only the counts mean anything.

use std::{
    collections::BTreeMap,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tonic::transport::Channel;

use crate::{
    BenchResult,
    harness::proc,
    measure::{Row, Samples, measured, thousands},
    procs,
    workload::{CYCLE_TTL_MS, acquire_granted, proto_client, release},
};

/// Cycles counted per row.
pub const CYCLES: usize = 2000;

/// Callers of `syscalls@8`.
const CONCURRENT_CALLERS: usize = 8;

/// Cycles of the warm-up, uncounted (connections, the scripts loaded, the pools filled).
const WARMUP_CYCLES: usize = 200;

/// The system calls that write to a socket (or a pipe): `write_syscalls_per_cycle`.
const WRITE_SYSCALLS: [&str; 5] = ["write", "writev", "sendto", "sendmsg", "sendmmsg"];

/// The system calls that read from one: with the writes, `io_syscalls_per_cycle`.
const READ_SYSCALLS: [&str; 5] = ["read", "readv", "recvfrom", "recvmsg", "recvmmsg"];

/// System calls named per row.
const TOP_SYSCALLS: usize = 8;

/// `syscalls`: every row, on a Redis and a `leased` of its own.
pub async fn syscalls(leased_args: &[String], server_log: &str) -> BenchResult<Vec<Row>> {
    if !procs::installed("strace") {
        return Err("strace is not installed: run scripts/bench.sh (Debian strace)".into());
    }
    let redis = procs::start_redis_as("syscalls-redis")?;
    let server =
        procs::start_leased("syscalls", Some(&redis.url()), leased_args, server_log).await?;
    let channel = procs::connect(server.address).await?;
    let pid = server.pid();

    // Warm-up: both kinds of cycle, so that every connection and buffer exists before counting.
    cycles(&channel, 1, WARMUP_CYCLES, "bench/syscalls/warm-up").await?;
    cycles(
        &channel,
        CONCURRENT_CALLERS,
        WARMUP_CYCLES,
        "bench/syscalls/warm-up",
    )
    .await?;

    let (sequential, sequential_counts) =
        traced(pid, "1", cycles(&channel, 1, CYCLES, "bench/syscalls/c1")).await?;
    let idle_for = sequential.elapsed;
    let (_, idle_counts) = traced(pid, "idle", async {
        tokio::time::sleep(idle_for).await;
        Ok(Samples::default())
    })
    .await?;
    let (concurrent, concurrent_counts) = traced(
        pid,
        "8",
        cycles(&channel, CONCURRENT_CALLERS, CYCLES, "bench/syscalls/c8"),
    )
    .await?;

    let idle_per_s = per(&idle_counts, idle_for.as_secs_f64());
    let idle_total: f64 = idle_per_s.values().map(|count| count.calls).sum();
    Ok(vec![
        cycle_row("syscalls@1", 1, &sequential, &sequential_counts, &idle_per_s),
        cycle_row(
            &format!("syscalls@{CONCURRENT_CALLERS}"),
            CONCURRENT_CALLERS,
            &concurrent,
            &concurrent_counts,
            &idle_per_s,
        ),
        Row::new(
            "syscalls_idle",
            &Samples::default(),
            format!(
                "the server idle for {:.1} s (as long as syscalls@1): {} system calls per second: {}",
                idle_for.as_secs_f64(),
                round1(idle_total),
                breakdown(&calls_of(&idle_per_s))
            ),
        )
        .with("idle_s", round3(idle_for.as_secs_f64()))
        .with("syscalls_per_s", round1(idle_total))
        .with("syscalls_per_s_by_name", to_json(&calls_of(&idle_per_s))),
    ])
}

/// `cycles` grant cycles in all from `callers` concurrent callers on `channel`, each on a name of
/// its own under `prefix`: the latency of each cycle.
async fn cycles(
    channel: &Channel,
    callers: usize,
    cycles: usize,
    prefix: &str,
) -> BenchResult<Samples> {
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(callers);
    for caller in 0..callers {
        let mut client = proto_client(channel);
        let name = format!("{prefix}/c{callers}/{caller}");
        let count = cycles / callers + usize::from(caller < cycles % callers);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(count);
            for _ in 0..count {
                let call = Instant::now();
                let granted = acquire_granted(&mut client, &name, CYCLE_TTL_MS).await?;
                release(&mut client, granted.name, granted.lease_id).await?;
                latencies.push(call.elapsed());
            }
            BenchResult::Ok(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(cycles);
    for task in tasks {
        latencies.extend(task.await??);
    }
    Ok(Samples {
        latencies,
        elapsed: started.elapsed(),
        ..Samples::default()
    })
}

/// Runs `work` with `strace -c -f` attached to `pid` (every thread of it), and answers what
/// `work` answered and the system calls counted, by name.
async fn traced(
    pid: u32,
    label: &str,
    work: impl Future<Output = BenchResult<Samples>>,
) -> BenchResult<(Samples, BTreeMap<String, Count>)> {
    let output = procs::bench_dir().join(format!("strace-syscalls-{label}.txt"));
    let _ = std::fs::remove_file(&output);
    let mut strace = strace_command();
    let mut strace = strace
        .args(["-c", "-f", "-q", "-o"])
        .arg(&output)
        .args(["-p", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start strace: {e}"))?;
    if let Err(error) = attached(pid, &mut strace).await {
        let _ = strace.kill();
        let _ = strace.wait();
        return Err(error);
    }
    let result = work.await;
    // strace detaches on SIGINT and writes its summary.
    proc::signal(strace.id(), libc::SIGINT)?;
    let status = tokio::task::spawn_blocking(move || strace.wait_with_output()).await??;
    let samples = result?;
    let summary = std::fs::read_to_string(&output)
        .map_err(|e| format!("{}: {e} (strace: {status:?})", output.display()))?;
    Ok((samples, parse_summary(&summary)?))
}

/// `strace`, or `sudo -n strace` where Yama lets a process trace only its descendants
/// (`kernel.yama.ptrace_scope` ≥ 1, Ubuntu's default) and this is not root: the server is the
/// bench's child, not strace's. (sudo passes the SIGINT that ends strace on.)
fn strace_command() -> Command {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .unwrap_or(0);
    // SAFETY: geteuid only reads this process's effective user id.
    let root = unsafe { libc::geteuid() } == 0;
    if scope >= 1 && !root && procs::installed("sudo") {
        let mut command = Command::new("sudo");
        command.args(["-n", "strace"]);
        command
    } else {
        Command::new("strace")
    }
}

/// Waits until strace traces every thread of `pid` (each task has a `TracerPid`: strace's, the
/// child of sudo's when sudo runs it).
async fn attached(pid: u32, strace: &mut Child) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = strace.try_wait()? {
            let mut stderr = String::new();
            if let Some(mut pipe) = strace.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
            }
            return Err(format!("strace -p {pid} ended at once ({status}): {stderr}").into());
        }
        if every_task_traced(pid)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("strace did not attach to every thread of {pid} in 10 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn every_task_traced(pid: u32) -> BenchResult<bool> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let status = std::fs::read_to_string(task?.path().join("status")).unwrap_or_default();
        let traced = status
            .lines()
            .find_map(|line| line.strip_prefix("TracerPid:"))
            .is_some_and(|value| value.trim() != "0");
        if !traced {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Calls, and failed calls, per system call from the table `strace -c` writes:
/// `% time  seconds  usecs/call  calls  [errors]  syscall`, then a `total` line.
fn parse_summary(summary: &str) -> BenchResult<BTreeMap<String, Count>> {
    let mut calls = BTreeMap::new();
    for line in summary.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(name), true) = (fields.last(), fields.len() >= 5) else {
            continue;
        };
        let Ok(count) = fields[3].parse::<f64>() else {
            continue;
        };
        if fields[0].parse::<f64>().is_err() || *name == "total" {
            continue;
        }
        let errors = match fields.len() {
            6 => fields[4].parse::<f64>().unwrap_or(0.0),
            _ => 0.0,
        };
        calls.insert(
            (*name).to_owned(),
            Count {
                calls: count,
                errors,
            },
        );
    }
    if calls.is_empty() && !summary.contains("total") {
        return Err(format!("no strace -c table in: {summary}").into());
    }
    Ok(calls)
}

/// Calls of one system call, and how many of them failed (`EAGAIN` of a read with nothing to
/// read, `ETIMEDOUT` of a futex wait).
#[derive(Clone, Copy, Debug, Default)]
struct Count {
    calls: f64,
    errors: f64,
}

/// `counts` divided by `by`.
fn per(counts: &BTreeMap<String, Count>, by: f64) -> BTreeMap<String, Count> {
    let by = by.max(f64::MIN_POSITIVE);
    counts
        .iter()
        .map(|(name, count)| {
            let per = Count {
                calls: count.calls / by,
                errors: count.errors / by,
            };
            (name.clone(), per)
        })
        .collect()
}

/// The calls of each system call in `per`.
fn calls_of(per: &BTreeMap<String, Count>) -> BTreeMap<String, f64> {
    per.iter()
        .map(|(name, count)| (name.clone(), count.calls))
        .collect()
}

/// A cycle row: the counts of `samples`'s cycles, less `idle_per_s` for as long as they took.
fn cycle_row(
    name: &str,
    callers: usize,
    samples: &Samples,
    counts: &BTreeMap<String, Count>,
    idle_per_s: &BTreeMap<String, Count>,
) -> Row {
    let cycles = samples.latencies.len().max(1) as f64;
    let seconds = samples.elapsed.as_secs_f64();
    let net: BTreeMap<String, Count> = counts
        .iter()
        .map(|(syscall, count)| {
            let idle = idle_per_s.get(syscall).copied().unwrap_or_default();
            let net = Count {
                calls: (count.calls - idle.calls * seconds).max(0.0) / cycles,
                errors: (count.errors - idle.errors * seconds).max(0.0) / cycles,
            };
            (syscall.clone(), net)
        })
        .collect();
    let idle_subtracted: f64 =
        idle_per_s.values().map(|count| count.calls).sum::<f64>() * seconds / cycles;
    let total: f64 = net.values().map(|count| count.calls).sum();
    let of = |names: &[&str]| -> Count {
        let counts = names.iter().filter_map(|syscall| net.get(*syscall));
        Count {
            calls: counts.clone().map(|count| count.calls).sum(),
            errors: counts.map(|count| count.errors).sum(),
        }
    };
    let (reads, writes) = (of(&READ_SYSCALLS), of(&WRITE_SYSCALLS));
    let io_calls = reads.calls + writes.calls;
    let io_failed = reads.errors + writes.errors;
    let raw_total: f64 = counts.values().map(|count| count.calls).sum();
    let failed: BTreeMap<String, f64> = net
        .iter()
        .filter(|(_, count)| count.errors > 0.0)
        .map(|(name, count)| (name.clone(), count.errors))
        .collect();
    let net = calls_of(&net);
    Row::new(
        name,
        samples,
        format!(
            "system calls of the server per grant cycle (try-once Acquire + Release), {callers} \
             caller(s), strace -c -f: {} in all, {} socket reads and writes ({} of them found \
             nothing to read); {}; the idle rate taken out ({} per cycle); N = {}; latencies under \
             strace",
            round1(total),
            round1(io_calls),
            round1(io_failed),
            breakdown(&net),
            round1(idle_subtracted),
            thousands(cycles),
        ),
    )
    .with("callers", callers)
    .with("cycles", samples.latencies.len())
    .with("syscalls_per_cycle", round3(total))
    .with("io_syscalls_per_cycle", round3(io_calls))
    .with("write_syscalls_per_cycle", round3(writes.calls))
    .with("read_syscalls_per_cycle", round3(reads.calls))
    .with("io_syscalls_failed_per_cycle", round3(io_failed))
    .with("syscalls_per_cycle_by_name", to_json(&net))
    .with("failed_syscalls_per_cycle_by_name", to_json(&failed))
    .with(
        "idle_syscalls_per_cycle_subtracted",
        round3(idle_subtracted),
    )
    .with("syscalls_counted", raw_total)
}

/// `write 6.0 · read 5.0 · ...`: the most frequent first.
fn breakdown(per: &BTreeMap<String, f64>) -> String {
    let mut sorted: Vec<(&String, &f64)> = per.iter().filter(|(_, n)| **n >= 0.05).collect();
    sorted.sort_by(|a, b| b.1.total_cmp(a.1));
    sorted
        .into_iter()
        .take(TOP_SYSCALLS)
        .map(|(name, n)| format!("{name} {}", round1(*n)))
        .collect::<Vec<_>>()
        .join(" · ")
}

fn to_json(per: &BTreeMap<String, f64>) -> Value {
    per.iter()
        .map(|(name, n)| (name.clone(), json!(round3(*n))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// The table of the `syscalls` rows, if the run has any.
pub fn table(rows: &[Row]) -> Option<String> {
    let rows: Vec<&Row> = measured(rows, "syscalls@");
    if rows.is_empty() {
        return None;
    }
    let mut out = String::from(
        "| cycles | N | syscalls per cycle | socket reads + writes | of them writes | by system call |\n\
         |---|--:|--:|--:|--:|---|\n",
    );
    for row in rows {
        let number = |key: &str| row.extra.get(key).and_then(Value::as_f64);
        let by_name: BTreeMap<String, f64> = row
            .extra
            .get("syscalls_per_cycle_by_name")
            .and_then(Value::as_object)
            .map(|object| {
                object
                    .iter()
                    .filter_map(|(name, n)| Some((name.clone(), n.as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {} |\n",
            row.name,
            thousands(number("cycles").unwrap_or(0.0)),
            number("syscalls_per_cycle").unwrap_or(f64::NAN),
            number("io_syscalls_per_cycle").unwrap_or(f64::NAN),
            number("write_syscalls_per_cycle").unwrap_or(f64::NAN),
            breakdown(&by_name),
        ));
    }
    Some(out)
}
