//! Reliability under faults: clients contend for a few names through several real `leased`
//! processes on one Redis while the test injects faults, and the checker (`reliability/checker.rs`)
//! proves from the record that no lease was double-granted, no token went backwards, and (away
//! from faults) no waiter was overtaken by a caller that asked after it was queued. Every run
//! also has counting names (counting leases of limit 3, with their own clients), checked through
//! the same faults: never more than 3 holders at once, and the same token and FIFO rules; and
//! read-write names (with their own clients, each call shared or exclusive at random): no
//! exclusive view overlaps another view, shared views do overlap, and FIFO holds between the
//! modes.
//!
//! CI runs a bounded schedule of every fault once. The long runs are `#[ignore]`d:
//!
//! ```text
//! LEASED_CHECKER_SECONDS=600 cargo test --test integration reliability:: -- --ignored --nocapture
//! ```
//!
//! (`LEASED_CHECKER_SEED` replays a client schedule.)
//!
//! One module per topic: `standalone` (faults on one Redis), `failover` (Sentinel failovers and
//! the caveat after one), `cluster_failover` (a Redis Cluster master killed and failed over, with
//! and without `--redis-wait-replicas`), `replica_stalls` (a Redis replica stopped again and again
//! under `--redis-wait-replicas 1` while clients cut and retry Acquires of their own lease ids:
//! issue 51), `seeded` (the checker flags seeded violations); what they share is below.

mod checker;
mod cluster_failover;
mod failover;
mod replica_stalls;
mod seeded;
mod standalone;

use std::{sync::Arc, time::Duration};

use crate::common::{log_dir, now_unix_ms};
use checker::{Checker, Counting, GcPauses, ReadWrite, Report, Workload};
use tokio::{sync::RwLockWriteGuard, task::JoinHandle};

/// The checker tests load both cores; run them one at a time, and apart from the other tests that
/// do.
async fn one_at_a_time() -> RwLockWriteGuard<'static, ()> {
    crate::common::heavy_turn().await
}

fn seed() -> u64 {
    std::env::var("LEASED_CHECKER_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// How long the ignored long runs last.
fn long_run_seconds() -> u64 {
    std::env::var("LEASED_CHECKER_SECONDS")
        .ok()
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or(600)
}

/// The standalone replicas' `--redis-timeout` (the harness's), which the checker holds the calls
/// that a stalled Redis made fail to.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// The limit of the counting names.
const COUNTING_LIMIT: u32 = 3;

/// How many of the calls of the read-write names' clients ask for a shared grant, in %.
const SHARED_PERCENT: u64 = 60;

fn ci_workload() -> Workload {
    Workload {
        clients: 16,
        names: 4,
        // Six clients per counting name: more than its 3 permits, so that callers wait.
        counting: Counting {
            clients: 12,
            names: 2,
            limit: COUNTING_LIMIT,
        },
        // Six clients per read-write name, so that shared grants coexist and callers of both
        // modes wait.
        read_write: ReadWrite {
            clients: 12,
            names: 2,
            shared_percent: SHARED_PERCENT,
        },
        ttl_ms: (300, 1_200),
        max_hold_ms: 800,
        max_wait_ms: 2_000,
        abandon_percent: 10,
        gc_pauses: true,
        seed: seed(),
        redis_timeout: REDIS_TIMEOUT,
        own_id_cuts: None,
    }
}

/// The clients and the GC-pause holder of one run.
struct Clients {
    tasks: Vec<JoinHandle<()>>,
    gc_pauses: Option<JoinHandle<GcPauses>>,
}

fn start_clients(checker: &Arc<Checker>, endpoints: &[String]) -> Clients {
    let workload = &checker.workload;
    println!(
        "seed {} ({} clients, {} names; {} clients, {} counting names of limit {}; {} clients, {} \
         read-write names, {} % of calls shared)",
        workload.seed,
        workload.clients,
        workload.names,
        workload.counting.clients,
        workload.counting.names,
        workload.counting.limit,
        workload.read_write.clients,
        workload.read_write.names,
        workload.read_write.shared_percent
    );
    let tasks = (0..checker.workload.all_clients())
        .map(|index| {
            tokio::spawn(checker::run_client(
                checker.clone(),
                index,
                endpoints.to_vec(),
            ))
        })
        .collect();
    let gc_pauses = checker
        .workload
        .gc_pauses
        .then(|| tokio::spawn(checker::run_gc_pauses(checker.clone(), endpoints.to_vec())));
    Clients { tasks, gc_pauses }
}

impl Clients {
    /// Stops the clients and returns how many GC pauses completed.
    async fn stop(self, checker: &Checker) -> GcPauses {
        checker.stop();
        for task in self.tasks {
            task.await.expect("a client panicked");
        }
        match self.gc_pauses {
            Some(task) => task.await.expect("the GC-pause holder panicked"),
            None => GcPauses::default(),
        }
    }
}

/// `min_gc_pauses` of each kind (on exclusive, counting and read-write names) must have
/// completed. With violations, first prints what the servers of `test` (its log directory)
/// warned of.
fn assert_report(
    report: &Report,
    checker: &Checker,
    test: &str,
    gc_pauses: GcPauses,
    min_gc_pauses: usize,
) {
    let workload = &checker.workload;
    if !report.violations.is_empty() {
        print_server_warnings(checker, test);
    }
    println!(
        "GC pauses completed: {} on exclusive names, {} on counting names, {} on read-write names",
        gc_pauses.exclusive, gc_pauses.counting, gc_pauses.read_write
    );
    assert!(report.grants >= 50, "too few grants to prove anything");
    if workload.counting.clients > 0 {
        let limit = workload.counting.limit as usize;
        assert!(
            report.counting_grants >= 50,
            "too few grants of counting names to prove anything"
        );
        assert!(
            report.max_holders_counting >= limit,
            "the views of {limit} holders of a counting name never overlapped (at most {}): the \
             limit was never reached, so the check proves nothing",
            report.max_holders_counting
        );
        assert!(
            report.max_reported_held >= workload.counting.limit,
            "no waiter of a counting name was told that every permit was taken"
        );
        assert!(
            gc_pauses.counting >= min_gc_pauses,
            "the GC-pause scenario never completed on a counting name"
        );
    }
    if workload.read_write.clients > 0 {
        assert!(
            report.rw_exclusive_grants >= 20 && report.rw_shared_grants >= 20,
            "too few grants of read-write names to prove anything: {} exclusive, {} shared",
            report.rw_exclusive_grants,
            report.rw_shared_grants
        );
        assert!(
            report.max_shared_holders >= 2,
            "no two shared views of a read-write name overlapped: the run never showed that \
             shared grants coexist"
        );
        assert!(
            report.mode_fifo_pairs.exclusive_then_shared > 0,
            "no shared caller that asked after an exclusive waiter was queued was checked: the \
             FIFO check between modes proves nothing"
        );
        assert!(
            gc_pauses.read_write >= min_gc_pauses,
            "the GC-pause scenario never completed on a read-write name"
        );
    }
    assert!(
        report.fifo_pairs_checked > 0,
        "no waiter's place in line was checked: the FIFO check proves nothing"
    );
    assert_eq!(
        report.overtakes,
        0,
        "waiters were overtaken, first: {}",
        report
            .violations
            .iter()
            .find(|violation| violation.contains("overtake"))
            .map_or("", String::as_str)
    );
    assert!(
        gc_pauses.exclusive >= min_gc_pauses,
        "the GC-pause scenario never completed"
    );
    // Each completed pause recorded the token of the grant that took its name over (checked to
    // be above the paused one) and, on a name it wrote to, its stale write (refused by the
    // resource only because that token was above). Both are violations otherwise.
    assert!(
        report.takeovers_checked >= gc_pauses.exclusive + gc_pauses.counting + gc_pauses.read_write,
        "a completed GC pause recorded no takeover"
    );
    assert!(
        report.stale_writes_rejected >= gc_pauses.exclusive + gc_pauses.read_write,
        "a GC-paused holder's stale write was not made"
    );
    assert!(
        report.violations.is_empty(),
        "{} violations, first: {}",
        report.violations.len(),
        report.violations[0]
    );
}

/// The warnings and errors that the servers of `test` logged (its log directory), each on the
/// checker's clock: CI keeps only a failed test's output, and these tell what the servers saw.
fn print_server_warnings(checker: &Checker, test: &str) {
    const MOST_PER_LOG: usize = 150;
    // The logs stamp UTC (`2026-11-25T07:56:10.157724Z`): compared as seconds of the day.
    let day = 86_400.0;
    let origin = (now_unix_ms() as f64 / 1_000.0 - checker.now().as_secs_f64()) % day;
    let seconds_of_day = |line: &str| -> Option<f64> {
        let time = line.get(11..26)?;
        let mut parts = time.split(':');
        let hours: f64 = parts.next()?.parse().ok()?;
        let minutes: f64 = parts.next()?.parse().ok()?;
        let seconds: f64 = parts.next()?.parse().ok()?;
        Some(hours * 3600.0 + minutes * 60.0 + seconds)
    };
    let Ok(entries) = std::fs::read_dir(log_dir(test)) else {
        return;
    };
    let mut logs: Vec<_> = entries.flatten().map(|entry| entry.path()).collect();
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let file = log.file_name().unwrap_or_default().to_string_lossy();
        println!("-- warnings and errors in {file}, on the checker's clock --");
        let warnings = text
            .lines()
            .filter(|line| line.contains(" WARN leased") || line.contains(" ERROR leased"));
        for line in warnings.take(MOST_PER_LOG) {
            match seconds_of_day(line) {
                Some(at) => {
                    // Within half a day either way of the origin (a run may cross midnight).
                    let offset = (at - origin + day + day / 2.0) % day - day / 2.0;
                    println!("[{offset:7.2}s]{}", line.get(27..).unwrap_or(line));
                }
                None => println!("{line}"),
            }
        }
    }
}

/// Runs `call` until it answers something other than UNAVAILABLE (for up to 20 s).
async fn retry_unavailable<T, F: std::future::Future<Output = Result<T, tonic::Status>>>(
    mut call: impl FnMut() -> F,
) -> T {
    let start = std::time::Instant::now();
    loop {
        match call().await {
            Ok(answer) => return answer,
            Err(status) if status.code() == tonic::Code::Unavailable => {
                assert!(start.elapsed() < Duration::from_secs(20), "{status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
}
