//! A Redis replica stopped (SIGSTOP) again and again under `--redis-wait-replicas 1`, while the
//! clients acquire with lease ids of their own, cut some of their Acquires short and retry them
//! through either `leased` replica. Issue 51: a retry that met a `WAIT` shortfall released the
//! grant that its holder had already been answered, and another client was granted the name. A
//! shortfall must answer `UNAVAILABLE` and leave a grant that a call was answered held: no two
//! holders at once, no token backwards, no holder told `lost` to another holder while it held.

use std::time::Duration;

use crate::common::*;
use crate::reliability::checker::{
    Checker, Counting, Event, OwnIdCuts, ReadWrite, Report, Rng, Workload, until,
};
use crate::reliability::{
    COUNTING_LIMIT, SHARED_PERCENT, assert_report, ci_workload, long_run_seconds, one_at_a_time,
    start_clients,
};

/// How long `leased` waits for the Redis replica to confirm a grant or renewal
/// (`--redis-wait-timeout`): a grant or renewal it does not confirm by then answers `UNAVAILABLE`.
const WAIT_TIMEOUT: Duration = Duration::from_millis(500);

/// The fault's kind in the record.
const REPLICA_STOPPED: &str = "redis_replica_sigstop";

/// How long the run goes on after the last stop: the retried own ids settle, and the queues are
/// checked for FIFO away from the fault (each fault window lasts the longest TTL past its end).
const CALM_TAIL: Duration = Duration::from_secs(9);

/// A Redis master with one replica, and two `leased` processes on the master that answer grants
/// and renewals only once the replica has them (`--redis-wait-replicas 1`).
struct Topology {
    _master: RedisServer,
    replica: RedisServer,
    leased: Vec<LeasedProcess>,
    metrics_ports: Vec<u16>,
}

impl Topology {
    async fn start(test: &str) -> Self {
        let master = RedisServer::start();
        // Synced first: WAIT counts a replica only once its first sync is done.
        let replica = RedisServer::start_replica_of(&master);
        let dir = log_dir(test);
        let mut metrics_ports = Vec::new();
        let mut leased = Vec::new();
        for index in 0..2 {
            // A free port can be taken by another test's process before leased binds it (seen
            // once: "Address already in use"): a few tries, each with a fresh port.
            let mut attempt = 0;
            let (process, metrics_port) = loop {
                attempt += 1;
                let metrics_port = free_port();
                let started = LeasedProcess::serve()
                    .redis(&master.url())
                    .args([
                        "--redis-wait-replicas".to_owned(),
                        "1".to_owned(),
                        "--redis-wait-timeout".to_owned(),
                        format!("{}ms", WAIT_TIMEOUT.as_millis()),
                        "--metrics-listen".to_owned(),
                        format!("127.0.0.1:{metrics_port}"),
                    ])
                    .log(Log::File(dir.join(format!("leased-{index}.log"))))
                    .try_start()
                    .await;
                match started {
                    Ok(process) => break (process, metrics_port),
                    Err(error) if attempt < 3 => eprintln!("leased {index}: {error}; again"),
                    Err(error) => panic!("leased {index}: {error}"),
                }
            };
            leased.push(process);
            metrics_ports.push(metrics_port);
        }
        Topology {
            _master: master,
            replica,
            leased,
            metrics_ports,
        }
    }

    fn endpoints(&self) -> Vec<String> {
        self.leased.iter().map(LeasedProcess::endpoint).collect()
    }

    /// The grants and renewals that the replica did not confirm in time, as the `leased`
    /// processes counted them.
    fn shortfalls(&self) -> f64 {
        self.metrics_ports
            .iter()
            .map(|port| metric_sample(&scrape_metrics(*port), "leased_redis_wait_shortfalls_total"))
            .sum()
    }
}

/// 8 clients on 3 exclusive names, each Acquire with the client's own lease id and 30 % of the
/// attempts cut 20–300 ms after they were sent (before the WAIT timeout, so that retries meet
/// the grant of the attempt they retry while it waits for the replica). TTLs of 2–4 s outlast
/// most stops: a holder still holds when the replica resumes, so a grant undone behind its back
/// shows as another holder granted meanwhile. A grant answered to a retry counts from the first
/// attempt.
fn own_id_workload() -> Workload {
    Workload {
        clients: 8,
        names: 3,
        counting: Counting {
            clients: 0,
            names: 0,
            limit: COUNTING_LIMIT,
        },
        read_write: ReadWrite {
            clients: 0,
            names: 0,
            shared_percent: SHARED_PERCENT,
        },
        ttl_ms: (2_000, 4_000),
        // Holds long enough to renew a few times: renewals fail while the replica is stopped,
        // and the holder then asks for its grant again (issue 51's retry of a held own id).
        max_hold_ms: 2_000,
        // An abandoned lease would keep one of the few names for up to 4 s.
        abandon_percent: 0,
        gc_pauses: false,
        own_id_cuts: Some(OwnIdCuts {
            percent: 30,
            after_ms: (20, 300),
        }),
        ..ci_workload()
    }
}

/// Stops the Redis replica for 1–3 s at a time, 1–3 s apart, from `from` until `to` on the
/// checker's clock, each stop recorded as a fault. Returns how many stops there were.
///
/// Not held to the stall bounds of [`Stalled`](crate::reliability::checker::Stalled): a `WAIT`
/// blocks the pooled Redis connection it runs on, so a call whose commands queue behind one or two
/// `WAIT`s answers after more than one `--redis-wait-timeout` (1.83 s was seen against 500 ms).
async fn stop_replica_repeatedly(
    checker: &Checker,
    replica: &RedisServer,
    from: Duration,
    to: Duration,
) -> usize {
    let mut rng = Rng(checker.workload.seed ^ 0x5EED_57A1);
    let mut next = from;
    let mut stops = 0;
    loop {
        let stop_for = Duration::from_millis(rng.range(1_000, 3_000));
        if next + stop_for > to {
            return stops;
        }
        until(checker, next).await;
        let start = checker.now();
        replica.pause();
        tokio::time::sleep(stop_for).await;
        replica.resume();
        checker.fault(REPLICA_STOPPED, start, false);
        stops += 1;
        next = checker.now() + Duration::from_millis(rng.range(1_000, 3_000));
    }
}

/// Acquire attempts in the record: each answered `waiting`, answered at once, or failed (cut
/// ones too) before any `waiting`.
fn acquire_attempts(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|event| {
            matches!(
                event,
                Event::Waited { .. }
                    | Event::NotGranted { .. }
                    | Event::Granted { waited: false, .. }
                    | Event::Failed {
                        rpc: "Acquire",
                        after_waiting: false,
                        ..
                    }
            )
        })
        .count()
}

/// Runs the own-id clients for `run_for` with the replica stopped again and again until
/// [`CALM_TAIL`] before the end, checks the record and prints the run's figures. Returns the
/// report and how many stops there were.
async fn run_with_replica_stops(
    test: &'static str,
    prefix: &str,
    run_for: Duration,
) -> (Report, usize) {
    let topology = Topology::start(test).await;
    let checker = Checker::new(own_id_workload(), prefix);
    let clients = start_clients(&checker, &topology.endpoints());
    let stops = stop_replica_repeatedly(
        &checker,
        &topology.replica,
        Duration::from_secs(3),
        run_for - CALM_TAIL,
    )
    .await;
    until(&checker, run_for).await;
    let gc_pauses = clients.stop(&checker).await;
    let report = checker.verify();
    report.print(&format!(
        "replica stopped {stops} times under --redis-wait-replicas 1, own lease ids cut and \
         retried"
    ));
    let events = checker.events();
    let shortfalls = topology.shortfalls();
    let unavailable: usize = report
        .failures
        .iter()
        .filter(|(call, _)| call.ends_with("Unavailable"))
        .map(|(_, count)| count)
        .sum();
    let cut = report.gave_up.get("Acquire").copied().unwrap_or(0);
    println!(
        "run figures: {} Acquire attempts ({cut} cut by the client), {} grants ({} answered to a \
         retry), {} renewals, {} releases; {unavailable} calls answered UNAVAILABLE; WAIT \
         shortfalls counted by leased: {shortfalls}; overlaps: {}; lost to another holder while \
         held: {}",
        acquire_attempts(&events),
        report.grants,
        report.retried_grants,
        report.renewals,
        report.releases,
        report.overlaps,
        report.lost_to_another_in_view
    );
    assert!(cut > 0, "no Acquire was cut: no retry was needed");
    assert!(
        report.retried_grants > 0,
        "no grant was answered to a retry of an own lease id: issue 51's path was never taken"
    );
    assert!(
        shortfalls > 0.0 && unavailable > 0,
        "the replica's stops made no WAIT shortfall: nothing was tested"
    );
    assert_report(&report, &checker, test, gc_pauses, 0);
    (report, stops)
}

/// Issue 51: with the Redis replica stopped 1–3 s at a time under `--redis-wait-replicas 1`,
/// Acquires of own lease ids cut and retried never leave two holders (about 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_holders_when_own_id_retries_meet_replica_stalls() {
    let _serial = one_at_a_time().await;
    let (_, stops) = run_with_replica_stops(
        "reliability-own-id-replica-stalls",
        "own-id-stalls",
        Duration::from_secs(28),
    )
    .await;
    assert!(stops >= 3, "the replica was stopped only {stops} times");
}

/// Long run (ignored): the same, the replica stopped 1–3 s at a time for
/// `LEASED_CHECKER_SECONDS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long run: LEASED_CHECKER_SECONDS=600 cargo test --test integration reliability:: --
#--ignored"]
async fn long_run_own_id_retries_through_replica_stalls() {
    let _serial = one_at_a_time().await;
    let run_for = Duration::from_secs(long_run_seconds()).max(CALM_TAIL * 3);
    run_with_replica_stops(
        "reliability-long-own-id-replica-stalls",
        "long-own-id-stalls",
        run_for,
    )
    .await;
}
