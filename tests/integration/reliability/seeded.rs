//! The checker itself: seeded records with double grants, backwards tokens, fencing breaches
//! and overtaken waiters, exclusive, counting and read-write, that it must flag (and clean ones
//! it must not).
//!
//! Each test is a table of [`Case`]s: a record (faults and events) and what the checker must make
//! of it; [`check`] runs every row and names the one that fails.

use std::time::Duration;

use tonic::Code;

use crate::reliability::checker::{
    Checker, Counting, Event, FaultRecord, ReadWrite, Report, Stalled, WaitOutcome, Workload,
};
use crate::reliability::ci_workload;

/// `millis` milliseconds on the checker's clock.
fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// Texts that violations contain (a violation counts when it contains every one), and how many
/// violations do.
type Found = (&'static [&'static str], usize);

/// One seeded record and what the checker must make of it.
struct Case {
    /// The checker's name prefix, and the case's name in a failure.
    name: String,
    workload: Workload,
    faults: Vec<FaultRecord>,
    events: Vec<Event>,
    found: &'static [Found],
    /// How many violations in all, where the case says.
    violations: Option<usize>,
    /// What the case asserts of the report's other figures.
    figures: fn(&Report),
}

impl Case {
    /// A record of `events` without faults, of which nothing is asserted yet.
    fn new(name: impl Into<String>, workload: &Workload, events: Vec<Event>) -> Self {
        Case {
            name: name.into(),
            workload: workload.clone(),
            faults: Vec::new(),
            events,
            found: &[],
            violations: None,
            figures: |_| {},
        }
    }

    /// A record the checker must find nothing wrong with.
    fn clean(name: impl Into<String>, workload: &Workload, events: Vec<Event>) -> Self {
        Case::new(name, workload, events).violations(0)
    }

    fn faults(self, faults: Vec<FaultRecord>) -> Self {
        Case { faults, ..self }
    }

    fn found(self, found: &'static [Found]) -> Self {
        Case { found, ..self }
    }

    fn violations(self, violations: usize) -> Self {
        Case {
            violations: Some(violations),
            ..self
        }
    }

    fn figures(self, figures: fn(&Report)) -> Self {
        Case { figures, ..self }
    }
}

/// Runs each case's record through a checker of its own and asserts what the case expects.
fn check(cases: Vec<Case>) {
    for case in cases {
        let checker = Checker::new(case.workload, &case.name);
        for fault in case.faults {
            checker.record_fault(fault);
        }
        for event in case.events {
            checker.record(event);
        }
        let report = checker.verify();
        let _naming = NamedOnPanic(&case.name, &report.violations);
        for (texts, count) in case.found {
            let found = report
                .violations
                .iter()
                .filter(|violation| texts.iter().all(|text| violation.contains(text)))
                .count();
            assert_eq!(found, *count, "{texts:?}: {:#?}", report.violations);
        }
        if let Some(count) = case.violations {
            assert_eq!(report.violations.len(), count, "{:#?}", report.violations);
        }
        (case.figures)(&report);
    }
}

/// Names the case, and its violations, when one of its assertions fails (the figures' messages
/// do not say which case they are about).
struct NamedOnPanic<'a>(&'a str, &'a [String]);

impl Drop for NamedOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "seeded case {} failed; its violations: {:#?}",
                self.0, self.1
            );
        }
    }
}

/// A workload of `names` exclusive names and no clients of its own, without GC pauses.
fn seeded_workload(names: usize) -> Workload {
    Workload {
        clients: 0,
        names,
        gc_pauses: false,
        ..ci_workload()
    }
}

/// The checker finds what it looks for: a seeded record with an overlap, a backwards token, a
/// refused rightful write and an accepted stale write yields exactly those violations, and the
/// same overlap inside a data-loss window is reported apart instead.
#[test]
fn checker_flags_seeded_violations() {
    let workload = seeded_workload(2);
    let granted = |lease, name, token, sent, received| Event::Granted {
        lease,
        client: 0,
        replica: 0,
        name,
        token,
        ttl: ms(500),
        sent: ms(sent),
        received: ms(received),
        first_sent: ms(sent),
        shared: false,
        waited: false,
    };
    let write = |lease, name, token, at, accepted| Event::Write {
        lease,
        name,
        token,
        at: ms(at),
        accepted,
        stale_on_purpose: false,
    };
    let renewed = Event::Renewed {
        lease: 0,
        replica: 0,
        sent: ms(150),
        received: ms(160),
        ttl: ms(500),
    };

    check(vec![
        Case::clean(
            "clean",
            &workload,
            vec![
                granted(0, 0, 100, 0, 5),
                write(0, 0, 100, 10, true),
                renewed.clone(),
                Event::ReleaseCalled {
                    lease: 0,
                    at: ms(600),
                },
                granted(1, 0, 101, 590, 640),
                write(1, 0, 101, 650, true),
            ],
        ),
        Case::new(
            "broken",
            &workload,
            vec![
                // Lease 1 is granted while lease 0 is still held (it renewed), with a smaller
                // token.
                granted(0, 0, 100, 0, 5),
                write(0, 0, 100, 10, true),
                renewed,
                granted(1, 0, 90, 300, 310),
                // Lease 0 is refused inside its own interval, and a stale token is accepted.
                write(2, 1, 50, 20, true),
                write(3, 1, 60, 30, true),
                write(2, 1, 50, 40, true),
                granted(2, 1, 50, 0, 1),
                granted(3, 1, 60, 25, 26),
            ],
        )
        .found(&[
            (&["overlap"], 2),
            (&["backwards"], 1),
            (&["stale token 50 accepted"], 1),
        ]),
        Case::new(
            "refused",
            &workload,
            vec![granted(0, 0, 100, 0, 5), write(0, 0, 100, 10, false)],
        )
        .violations(1)
        .found(&[(&["refused a write"], 1)]),
        Case::clean(
            "lost-data",
            &workload,
            vec![granted(0, 0, 100, 0, 5), granted(1, 0, 200, 200, 210)],
        )
        .faults(vec![FaultRecord {
            kind: "redis_restart_empty",
            start: ms(100),
            end: ms(120),
            data_loss: true,
            ..Default::default()
        }])
        .figures(|report| assert_eq!(report.overlaps_in_data_loss_windows, 1)),
    ]);
}

/// The checks nobody would otherwise see fail: a paused holder renewed after its TTL passed, a
/// token granted twice, a paused holder's stale write accepted, a name taken over after a pause
/// with a token not above the paused one, calls answered INTERNAL, INVALID_ARGUMENT or CANCELLED
/// (a deadline passed on the server), calls sent while Redis stalled answered past the cap or
/// failed with another code than UNAVAILABLE, and a stall whose failures answered late on the
/// median. The same record's allowed failures (UNAVAILABLE within the timeout, a client
/// that stopped waiting on its own, a slow failure outside the stall) are not flagged.
#[test]
fn checker_flags_seeded_pause_token_and_failure_violations() {
    let workload = Workload {
        redis_timeout: ms(1_000),
        ..seeded_workload(2)
    };
    let granted = |lease, name, token, sent, received| Event::Granted {
        lease,
        client: 0,
        replica: 0,
        name,
        token,
        ttl: ms(300),
        sent: ms(sent),
        received: ms(received),
        first_sent: ms(sent),
        shared: false,
        waited: false,
    };
    let failed = |rpc, code, replica, sent, ended, gave_up| Event::Failed {
        rpc,
        code,
        replica,
        sent: ms(sent),
        ended: ms(ended),
        gave_up,
        after_waiting: false,
    };
    let waited = |replica, sent, queued, ended| Event::Waited {
        client: 1,
        replica,
        name: 1,
        shared: false,
        sent: ms(sent),
        wait: ms(5_000),
        queued: ms(queued),
        position: 1,
        ended: ms(ended),
        outcome: WaitOutcome::NotGranted,
    };
    // Redis stalled for replica 1 from 10 s to 13 s.
    let stall = FaultRecord {
        kind: "net_black_hole",
        start: ms(10_000),
        end: ms(13_000),
        stalled: Stalled::Replicas(vec![1]),
        ..Default::default()
    };
    let allowed = [
        // UNAVAILABLE within the timeout + margin, from the stalled replica.
        failed("Acquire", Code::Unavailable, 1, 10_100, 11_150, false),
        // A client that stopped waiting on its own: not an answer.
        failed("Renew", Code::DeadlineExceeded, 1, 10_200, 10_500, true),
        // Another replica, not stalled: slow, but not held to the stall's bound.
        failed("Acquire", Code::Unavailable, 0, 10_100, 14_000, false),
        // Sent after the stall ended.
        failed("Release", Code::Unavailable, 1, 13_100, 16_000, false),
        // Told `waiting` within the bound, then waited its 5 s out.
        waited(1, 12_500, 13_010, 17_500),
    ];

    let clean = [
        granted(0, 0, 100, 0, 5),
        granted(1, 0, 101, 400, 405),
        Event::TakenOverAfterPause {
            lease: 0,
            name: 0,
            paused_token: 100,
            next_token: 101,
        },
        Event::RenewAfterPause {
            lease: 0,
            lost: true,
        },
    ];
    let broken = [
        // Name 0: the paused lease 0 renewed after lease 1 (a waiter that asked before lease 0
        // was granted, so the token order check cannot see it) took the name over, with a token
        // below lease 0's.
        granted(0, 0, 100, 0, 5),
        granted(1, 0, 99, 3, 405),
        Event::TakenOverAfterPause {
            lease: 0,
            name: 0,
            paused_token: 100,
            next_token: 99,
        },
        Event::RenewAfterPause {
            lease: 0,
            lost: false,
        },
        // Name 1: token 200 granted twice (the views apart, each asked before the other was
        // granted: neither an overlap nor a backwards token), and the paused holder's stale
        // write accepted.
        granted(2, 1, 200, 1_000, 1_005),
        granted(3, 1, 201, 1_400, 1_405),
        granted(4, 1, 200, 1_003, 2_005),
        Event::Write {
            lease: 3,
            name: 1,
            token: 201,
            at: ms(1_410),
            accepted: true,
            stale_on_purpose: false,
        },
        Event::Write {
            lease: 2,
            name: 1,
            token: 200,
            at: ms(1_420),
            accepted: true,
            stale_on_purpose: true,
        },
        failed("Acquire", Code::Internal, 0, 3_000, 3_001, false),
        failed("Acquire", Code::InvalidArgument, 0, 3_000, 3_001, false),
        failed("Acquire", Code::Cancelled, 0, 3_000, 8_000, false),
        // From the stalled replica: a failure and a `waiting` held until Redis came back, and
        // a failure with another code than UNAVAILABLE.
        failed("Acquire", Code::Unavailable, 1, 10_100, 13_050, false),
        waited(1, 10_200, 13_010, 14_000),
        failed("Renew", Code::Unknown, 1, 11_000, 11_200, false),
        // Two more failures under the cap, but late enough to make the median late.
        failed("Release", Code::Unavailable, 1, 12_000, 13_400, false),
        failed("Renew", Code::Unavailable, 1, 12_100, 13_500, false),
    ];
    const BROKEN_FOUND: &[Found] = &[
        (
            &["granted again with token 99 after the GC-paused lease 0"],
            1,
        ),
        (&["renewed after its TTL passed"], 1),
        (&["token 200 granted twice"], 1),
        (&["the GC-paused holder's stale token 200 was accepted"], 1),
        (&["write with stale token 200 accepted after 201"], 1),
        (&["answered Internal"], 1),
        (&["answered InvalidArgument"], 1),
        (
            &["failed Cancelled at 8s: no answer before the call's deadline"],
            1,
        ),
        (
            &["sent at 10.1s during net_black_hole (10s..13s), first answered after 2.95s"],
            1,
        ),
        (
            &["sent at 10.2s during net_black_hole (10s..13s), first answered after 2.81s"],
            1,
        ),
        (
            &["failed Unknown: a stalled Redis must make calls answer UNAVAILABLE"],
            1,
        ),
        (
            &["net_black_hole: the calls it made fail answered after 1.4s (median of 5)"],
            1,
        ),
    ];

    check(vec![
        Case::clean(
            "failures-clean",
            &workload,
            clean.into_iter().chain(allowed.clone()).collect(),
        )
        .faults(vec![stall.clone()])
        .figures(|report| {
            let checked = report.stalled_calls["net_black_hole"];
            assert_eq!(
                (checked.calls, checked.failed, checked.longest),
                (2, 1, ms(1_050))
            );
            assert_eq!(checked.median_failure, ms(1_050));
            assert_eq!(report.takeovers_checked, 1);
            assert_eq!(report.gave_up["Renew"], 1);
        }),
        Case::new(
            "failures-broken",
            &workload,
            broken.into_iter().chain(allowed).collect(),
        )
        .faults(vec![stall])
        .found(BROKEN_FOUND)
        .violations(BROKEN_FOUND.len()),
    ]);
}

/// FIFO: a waiter overtaken by a later caller (granted with a smaller token, or before the
/// waiter's wait ran out), a wait cut short and a position 0 are flagged; the same overtake inside
/// a fault window is not, and a GC pause does not hide one.
#[test]
fn checker_flags_seeded_overtakes() {
    let workload = seeded_workload(2);
    let granted = |lease, client, name, token, sent, received| Event::Granted {
        lease,
        client,
        replica: client % 2,
        name,
        token,
        ttl: ms(500),
        sent: ms(sent),
        received: ms(received),
        first_sent: ms(sent),
        shared: false,
        waited: false,
    };
    let released = |lease, at| Event::ReleaseCalled { lease, at: ms(at) };
    // Client `client` sent an Acquire waiting `wait` ms at `sent`, was first told `waiting` at
    // `queued` with `position`, and the call ended at `ended` with `outcome`.
    let waited = |client, name, (sent, wait), (queued, position), ended, outcome| Event::Waited {
        client,
        replica: client % 2,
        name,
        shared: false,
        sent: ms(sent),
        wait: ms(wait),
        queued: ms(queued),
        position,
        ended: ms(ended),
        outcome,
    };
    let fault = |kind, start, end| FaultRecord {
        kind,
        start: ms(start),
        end: ms(end),
        data_loss: false,
        ..Default::default()
    };

    check(vec![
        // Z asked before X was queued and may go first; Y asked after and comes after X.
        Case::clean(
            "fifo-clean",
            &workload,
            vec![
                granted(0, 3, 0, 99, 5, 250),
                released(0, 290),
                waited(1, 0, (0, 1000), (10, 1), 300, WaitOutcome::Granted(100)),
                granted(1, 1, 0, 100, 0, 300),
                released(1, 390),
                granted(2, 2, 0, 101, 20, 400),
                released(2, 500),
            ],
        )
        .figures(|report| assert_eq!((report.waiters, report.fifo_pairs_checked), (1, 1))),
        Case::new(
            "fifo-broken",
            &workload,
            vec![
                // Name 0: Y1 asked after X1 was queued and got a smaller token: an overtake.
                granted(0, 2, 0, 100, 20, 300),
                released(0, 390),
                waited(1, 0, (0, 1000), (10, 1), 400, WaitOutcome::Granted(101)),
                granted(1, 1, 0, 101, 0, 400),
                // Name 1: Y2 was granted while X2 could still wait (until 500): an overtake. Y3
                // was granted after X2's wait ran out: fine.
                waited(3, 1, (0, 500), (10, 2), 505, WaitOutcome::NotGranted),
                granted(2, 4, 1, 200, 50, 100),
                released(2, 200),
                granted(3, 5, 1, 201, 60, 520),
                // Name 1: X3 reported position 0 and was answered not_granted 800 ms early.
                waited(6, 1, (1000, 1000), (1010, 0), 1200, WaitOutcome::NotGranted),
                // Name 0: the same overtake as X1's, but inside a fault window: not checked.
                granted(4, 8, 0, 299, 1950, 2050),
                released(4, 2400),
                waited(
                    7,
                    0,
                    (1900, 1000),
                    (1910, 1),
                    2500,
                    WaitOutcome::Granted(300),
                ),
                granted(5, 7, 0, 300, 1900, 2500),
            ],
        )
        // A GC pause over everything: it must not hide an overtake.
        .faults(vec![
            fault("gc_pause", 0, 5_000),
            fault("net_cut", 2_000, 2_100),
        ])
        .found(&[
            (&["overtake"], 2),
            (&["before its wait"], 1),
            (&["reported position 0"], 1),
        ])
        .violations(4)
        .figures(|report| {
            assert_eq!(report.overtakes, 2);
            assert_eq!(report.waits_cut_short, 1);
            assert_eq!(report.waiters, 4);
            assert_eq!(report.waiters_unchecked, 1);
            assert_eq!(report.fifo_pairs_checked, 3);
        }),
    ]);
}

/// The workload the seeded counting tests replay events against: name 0 exclusive, name 1 a
/// counting lease of limit 3, no clients of their own.
fn seeded_counting_workload() -> Workload {
    Workload {
        counting: Counting {
            clients: 0,
            names: 1,
            limit: 3,
        },
        ..seeded_workload(1)
    }
}

/// A grant of `name` to `lease` (its own client, on replica 0), exclusive or a permit, on its
/// first attempt: the counting and read-write records'.
fn granted_to_own_client(
    lease: usize,
    name: usize,
    token: u64,
    ttl: u64,
    (sent, received): (u64, u64),
) -> Event {
    Event::Granted {
        lease,
        client: lease,
        replica: 0,
        name,
        token,
        ttl: ms(ttl),
        sent: ms(sent),
        received: ms(received),
        first_sent: ms(sent),
        shared: false,
        waited: false,
    }
}

/// A Release of `lease` called at `at`.
fn released(lease: usize, at: u64) -> Event {
    Event::ReleaseCalled { lease, at: ms(at) }
}

/// Counting names: four holders' views overlapping on a name of limit 3, a wrong `held` or
/// `limit` in `waiting`/`not_granted` and a FAILED_PRECONDITION are flagged; three holders at
/// once are not.
#[test]
fn checker_flags_seeded_counting_violations() {
    let workload = seeded_counting_workload();
    let granted = |lease, name, token, sent, received| {
        granted_to_own_client(lease, name, token, 500, (sent, received))
    };
    let occupancy = |name, held, limit| Event::Occupancy { name, held, limit };
    // Three permits held at once, then a fourth holder once they were released.
    let three_at_once = [
        granted(0, 1, 100, 0, 5),
        granted(1, 1, 101, 10, 15),
        granted(2, 1, 102, 20, 25),
        released(0, 400),
        released(1, 400),
        released(2, 400),
        granted(3, 1, 200, 390, 405),
        released(3, 600),
        occupancy(1, 3, 3),
        occupancy(1, 0, 0),
        occupancy(0, 1, 1),
    ];

    check(vec![
        Case::clean("counting-clean", &workload, three_at_once.to_vec()).figures(|report| {
            assert_eq!(report.counting_grants, 4);
            assert_eq!(report.max_holders_counting, 3);
            assert_eq!(report.max_reported_held, 3);
        }),
        Case::new(
            "counting-broken",
            &workload,
            three_at_once
                .into_iter()
                .chain([
                    // A fourth holder while the three hold it.
                    granted(4, 1, 150, 30, 35),
                    released(4, 300),
                    // Four held of limit 3; a limit that nobody asked for; an exclusive name said
                    // to have 3.
                    occupancy(1, 4, 3),
                    occupancy(1, 1, 5),
                    occupancy(0, 1, 3),
                    Event::Failed {
                        rpc: "Acquire",
                        code: Code::FailedPrecondition,
                        replica: 0,
                        sent: ms(40),
                        ended: ms(41),
                        gave_up: false,
                        after_waiting: false,
                    },
                ])
                .collect(),
        )
        .found(&[
            (&["views of 4 holders overlap"], 1),
            (&["permits held of limit"], 3),
            (&["FailedPrecondition"], 1),
        ])
        .violations(5)
        .figures(|report| assert_eq!(report.max_holders_counting, 4)),
    ]);
}

/// FIFO on a counting name: a later caller that took the last free permit while a waiter was in
/// line overtook it; one that took a second free permit (the waiter could have had the other) is
/// not checked.
#[test]
fn checker_flags_seeded_counting_overtakes() {
    let workload = seeded_counting_workload();
    let granted = |lease, name, token, sent, received| {
        granted_to_own_client(lease, name, token, 2_000, (sent, received))
    };
    // Holders 0 and 1 keep two permits until `second_ends`; holder 2 frees the third at 100.
    // X (lease 3) waits from 50 and is granted at 300, after Y (lease 4), which asked at 60 and
    // was granted at 110 with a smaller token.
    let record = |second_ends| {
        vec![
            granted(0, 1, 100, 0, 5),
            granted(1, 1, 101, 0, 5),
            granted(2, 1, 102, 2, 6),
            released(2, 100),
            released(1, second_ends),
            released(0, 1_000),
            Event::Waited {
                client: 3,
                replica: 0,
                name: 1,
                shared: false,
                sent: ms(50),
                wait: ms(2_000),
                queued: ms(55),
                position: 1,
                ended: ms(300),
                outcome: WaitOutcome::Granted(104),
            },
            granted(3, 1, 104, 50, 300),
            released(3, 400),
            granted(4, 1, 103, 60, 110),
            released(4, 200),
        ]
    };

    check(vec![
        Case::new("counting-overtaken", &workload, record(1_000))
            .violations(1)
            .figures(|report| {
                assert_eq!(report.overtakes, 1);
                assert_eq!(report.counting_fifo_pairs_checked, 1);
            }),
        // Holder 1 released at 80: two permits were free when Y was granted.
        Case::clean("counting-two-free", &workload, record(80))
            .figures(|report| assert_eq!(report.counting_fifo_pairs_checked, 0)),
    ]);
}

/// The workload the seeded read-write tests replay events against: name 0 exclusive, name 1
/// read-write, no clients of their own.
fn seeded_read_write_workload() -> Workload {
    Workload {
        counting: Counting {
            clients: 0,
            names: 0,
            limit: 3,
        },
        read_write: ReadWrite {
            clients: 0,
            names: 1,
            shared_percent: 50,
        },
        ..seeded_workload(1)
    }
}

/// The read-write name of [`seeded_read_write_workload`].
const RW: usize = 1;

/// A grant of the read-write name to `lease` (its own client, on replica 0), shared or not,
/// after waiting or not.
fn granted_rw(
    lease: usize,
    (shared, waited): (bool, bool),
    token: u64,
    sent: u64,
    received: u64,
) -> Event {
    Event::Granted {
        lease,
        client: lease,
        replica: 0,
        name: RW,
        token,
        ttl: ms(2_000),
        sent: ms(sent),
        received: ms(received),
        first_sent: ms(sent),
        shared,
        waited,
    }
}

/// Read-write names: shared views that overlap each other pass (and count as holders at once);
/// an exclusive view that begins while shared views run, a shared view that begins inside an
/// exclusive one, and a limit other than 1 in force are flagged. The same overlap inside a
/// data-loss window is reported apart.
#[test]
fn checker_flags_seeded_mode_overlaps() {
    let workload = seeded_read_write_workload();
    let granted = |lease, shared, token, sent, received| {
        granted_rw(lease, (shared, false), token, sent, received)
    };
    let write = |lease, token, at| Event::Write {
        lease,
        name: RW,
        token,
        at: ms(at),
        accepted: true,
        stale_on_purpose: false,
    };
    let occupancy = |held, limit| Event::Occupancy {
        name: RW,
        held,
        limit,
    };
    // Three shared holders at once, then a writer once they were released, then a reader.
    let shared_together = [
        granted(0, true, 100, 0, 5),
        granted(1, true, 101, 10, 15),
        granted(2, true, 102, 20, 25),
        released(0, 400),
        released(1, 400),
        released(2, 400),
        granted(3, false, 200, 390, 405),
        write(3, 200, 410),
        released(3, 600),
        granted(4, true, 300, 605, 610),
        released(4, 700),
        occupancy(3, 1),
        occupancy(0, 0),
    ];
    // A writer while the three readers hold it.
    let writer_among_readers = [granted(5, false, 150, 100, 105), released(5, 200)];
    let with = |more: &[Event]| shared_together.iter().chain(more).cloned().collect();

    check(vec![
        Case::clean("rw-clean", &workload, shared_together.to_vec()).figures(|report| {
            assert_eq!(
                (report.rw_shared_grants, report.rw_exclusive_grants),
                (4, 1)
            );
            assert_eq!(report.max_shared_holders, 3);
            assert_eq!(report.max_reported_held_rw, 3);
        }),
        Case::new(
            "rw-broken",
            &workload,
            with(&[
                writer_among_readers[0].clone(),
                writer_among_readers[1].clone(),
                // ...and a reader while the writer (lease 3) holds it.
                granted(6, true, 201, 440, 450),
                released(6, 500),
                // A limit nobody asked for; shared grants held are not bounded.
                occupancy(1, 3),
                occupancy(5, 1),
            ]),
        )
        .found(&[
            (&["an exclusive view overlaps another view"], 2),
            (&["lease 5 (exclusive"], 1),
            (&["lease 6 (shared"], 1),
            (&["permits held of limit 3"], 1),
        ])
        .violations(3),
        // The writer's overlap begins inside a data-loss window: allowed, and counted.
        Case::clean("rw-lost-data", &workload, with(&writer_among_readers))
            .faults(vec![FaultRecord {
                kind: "redis_restart_empty",
                start: ms(90),
                end: ms(95),
                data_loss: true,
                ..Default::default()
            }])
            .figures(|report| assert_eq!(report.overlaps_in_data_loss_windows, 1)),
    ]);
}

/// A read-write mode, by name.
const SHARED: bool = true;
const EXCLUSIVE: bool = false;

/// The modes of one FIFO-between-modes record (`true`: shared), and whether Y went first.
struct Modes {
    holder_shared: bool,
    x_shared: bool,
    y_shared: bool,
    y_waited: bool,
    y_first: bool,
}

impl Modes {
    /// The holder's, X's and Y's modes; Y granted after X, on its first attempt.
    fn of(holder_shared: bool, x_shared: bool, y_shared: bool) -> Self {
        Modes {
            holder_shared,
            x_shared,
            y_shared,
            y_waited: false,
            y_first: false,
        }
    }

    /// Y granted before X.
    fn y_first(self) -> Self {
        Modes {
            y_first: true,
            ..self
        }
    }

    /// Whether Y waited (was told `waiting`) before its grant.
    fn y_waited(self, y_waited: bool) -> Self {
        Modes { y_waited, ..self }
    }
}

/// The record of [`checker_flags_seeded_mode_overtakes`] in `modes`.
fn mode_overtake_record(modes: Modes) -> Vec<Event> {
    let waited = |client, shared, sent, queued, ended, token| Event::Waited {
        client,
        replica: 0,
        name: RW,
        shared,
        sent: ms(sent),
        wait: ms(2_000),
        queued: ms(queued),
        position: 1,
        ended: ms(ended),
        outcome: WaitOutcome::Granted(token),
    };
    // Y's view is shorter than the clock slack: it overlaps nothing, whatever its mode.
    let (y_token, y_received) = match modes.y_first {
        true => (101, 310),
        false => (103, 410),
    };
    let mut events = vec![
        granted_rw(0, (modes.holder_shared, false), 100, 0, 5),
        released(0, 300),
        waited(1, modes.x_shared, 10, 15, 320, 102),
        granted_rw(1, (modes.x_shared, true), 102, 10, 320),
        released(1, 400),
        granted_rw(2, (modes.y_shared, modes.y_waited), y_token, 50, y_received),
        released(2, y_received + 5),
    ];
    if modes.y_waited {
        events.push(waited(2, modes.y_shared, 50, 55, y_received, y_token));
    }
    events
}

/// FIFO between modes: X waits (from 10, queued at 15) behind a holder that keeps the name until
/// 300, and is granted token 102 at 320; Y asked at 50, later, and was granted token 101 at 310,
/// first. That is an overtake when X is exclusive (a later reader barged past a waiting writer,
/// whether it waited or not), when Y is exclusive, and when Y is shared and never waited (granted
/// on its first attempt while X stood in line); a shared Y that waited behind a shared X may be
/// due in the same run: not checked. Y granted after X (token 103) is in order in every case.
#[test]
fn checker_flags_seeded_mode_overtakes() {
    let workload = seeded_read_write_workload();
    let case = |name: &str, modes| Case::new(name, &workload, mode_overtake_record(modes));

    // Readers hold; a writer waits; a later reader is granted before it.
    let reader_barges = [("at-once", false), ("queued", true)].map(|(how, y_waited)| {
        let modes = Modes::of(SHARED, EXCLUSIVE, SHARED).y_first();
        case(&format!("rw-reader-barges-{how}"), modes.y_waited(y_waited))
            .found(&[
                (
                    &[
                        "overtake",
                        "exclusive client 1 (replica 0; Acquire sent at 10ms",
                    ],
                    1,
                ),
                (&["overtake", "overtaken by shared client 2"], 1),
            ])
            .violations(1)
            .figures(|report| {
                assert_eq!(report.overtakes, 1);
                assert_eq!(report.mode_fifo_pairs.exclusive_then_shared, 1);
            })
    });
    // Every mix in order: Y granted after X.
    let in_order = [
        (SHARED, EXCLUSIVE, SHARED),
        (EXCLUSIVE, EXCLUSIVE, SHARED),
        (EXCLUSIVE, SHARED, EXCLUSIVE),
        (EXCLUSIVE, EXCLUSIVE, EXCLUSIVE),
        (EXCLUSIVE, SHARED, SHARED),
    ]
    .map(|(holder, x, y)| {
        case(
            &format!("rw-in-order-{holder}-{x}-{y}"),
            Modes::of(holder, x, y),
        )
        .violations(0)
        .figures(|report| assert_eq!(report.fifo_pairs_checked, 1))
    });

    check(
        reader_barges
            .into_iter()
            .chain([
                // A writer holds; a reader waits; a later writer is granted before it.
                case(
                    "rw-writer-barges",
                    Modes::of(EXCLUSIVE, SHARED, EXCLUSIVE)
                        .y_first()
                        .y_waited(true),
                )
                .found(&[(&["overtake", "overtaken by exclusive client 2"], 1)])
                .figures(|report| {
                    assert_eq!(report.overtakes, 1);
                    assert_eq!(report.mode_fifo_pairs.shared_then_exclusive, 1);
                }),
                // A writer holds; a reader waits; a later reader is granted first on its first
                // attempt, which it could only be with nobody in line.
                case(
                    "rw-reader-first-attempt",
                    Modes::of(EXCLUSIVE, SHARED, SHARED).y_first(),
                )
                .found(&[(&["overtake", "it never waited"], 1)])
                .figures(|report| {
                    assert_eq!(report.overtakes, 1);
                    assert_eq!(report.mode_fifo_pairs.shared_then_shared_first_attempt, 1);
                }),
                // The same, but the later reader waited too: both were due in one run; not
                // checked.
                case(
                    "rw-readers-due-together",
                    Modes::of(EXCLUSIVE, SHARED, SHARED)
                        .y_first()
                        .y_waited(true),
                )
                .violations(0)
                .figures(|report| {
                    assert_eq!(report.mode_fifo_pairs.shared_then_shared_unprovable, 1);
                    assert_eq!(report.fifo_pairs_checked, 0);
                }),
            ])
            .chain(in_order)
            .collect(),
    );
}

/// Own lease ids: a grant answered to a retry counts from its first attempt (its TTL and the
/// tokens before it), a holder told `lost` to another holder while its view ran is flagged, and
/// the same `lost` after its view ended is not.
#[test]
fn checker_counts_retried_own_id_grants_from_the_first_attempt() {
    let workload = seeded_workload(1);
    // Lease 0: first attempt sent at 0 (cut), retry sent at 300 and answered at 400; TTL 500.
    let granted = |lease, token, first_sent, sent, received| Event::Granted {
        lease,
        client: 0,
        replica: 0,
        name: 0,
        token,
        ttl: ms(500),
        sent: ms(sent),
        received: ms(received),
        first_sent: ms(first_sent),
        shared: false,
        waited: false,
    };
    let lost = |lease, received| Event::Lost {
        lease,
        received: ms(received),
        by_another: true,
    };

    check(vec![
        // Lease 1 begins at 520, after lease 0's view (400..500) but before 300 + 500: no
        // overlap. Its token is below lease 2's, received before lease 2's first attempt (600).
        Case::clean(
            "retried",
            &workload,
            vec![
                granted(0, 100, 0, 300, 400),
                granted(1, 101, 510, 510, 520),
                lost(0, 530),
                released(1, 580),
                granted(2, 102, 600, 900, 950),
            ],
        )
        .figures(|report| assert_eq!(report.retried_grants, 2)),
        // Lease 2's first attempt came after lease 1 was received, yet its token is smaller;
        // lease 0 is told another holds the name while its view runs.
        Case::new(
            "lost-to-another",
            &workload,
            vec![
                granted(0, 100, 0, 300, 400),
                lost(0, 450),
                granted(1, 101, 510, 510, 520),
                released(1, 580),
                granted(2, 99, 600, 900, 950),
            ],
        )
        .found(&[(&["held by another holder"], 1), (&["backwards"], 1)])
        .violations(2)
        .figures(|report| assert_eq!(report.lost_to_another_in_view, 1)),
    ]);
}
