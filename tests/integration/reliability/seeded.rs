//! The checker itself: seeded records with double grants, backwards tokens, fencing breaches
//! and overtaken waiters, exclusive, counting and read-write, that it must flag (and clean ones
//! it must not).

use std::time::Duration;

use crate::reliability::checker::{Checker, Counting, ReadWrite, Workload};
use crate::reliability::ci_workload;

/// The checker finds what it looks for: a seeded record with an overlap, a backwards token, a
/// refused rightful write and an accepted stale write yields exactly those violations, and the
/// same overlap inside a data-loss window is reported apart instead.
#[test]
fn checker_flags_seeded_violations() {
    use crate::reliability::checker::{Event, FaultRecord};
    let ms = Duration::from_millis;
    let workload = Workload {
        clients: 0,
        names: 2,
        gc_pauses: false,
        ..ci_workload()
    };
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

    let clean = Checker::new(workload.clone(), "clean");
    for event in [
        granted(0, 0, 100, 0, 5),
        write(0, 0, 100, 10, true),
        Event::Renewed {
            lease: 0,
            replica: 0,
            sent: ms(150),
            received: ms(160),
            ttl: ms(500),
        },
        Event::ReleaseCalled {
            lease: 0,
            at: ms(600),
        },
        granted(1, 0, 101, 590, 640),
        write(1, 0, 101, 650, true),
    ] {
        clean.record(event);
    }
    let report = clean.verify();
    assert!(report.violations.is_empty(), "{:?}", report.violations);

    let broken = Checker::new(workload.clone(), "broken");
    for event in [
        // Lease 1 is granted while lease 0 is still held (it renewed), with a smaller token.
        granted(0, 0, 100, 0, 5),
        write(0, 0, 100, 10, true),
        Event::Renewed {
            lease: 0,
            replica: 0,
            sent: ms(150),
            received: ms(160),
            ttl: ms(500),
        },
        granted(1, 0, 90, 300, 310),
        // Lease 0 is refused inside its own interval, and a stale token is accepted.
        write(2, 1, 50, 20, true),
        write(3, 1, 60, 30, true),
        write(2, 1, 50, 40, true),
    ] {
        broken.record(event);
    }
    broken.record(granted(2, 1, 50, 0, 1));
    broken.record(granted(3, 1, 60, 25, 26));
    let report = broken.verify();
    let found = |what: &str| {
        report
            .violations
            .iter()
            .filter(|violation| violation.contains(what))
            .count()
    };
    assert_eq!(found("overlap"), 2, "{:#?}", report.violations);
    assert_eq!(found("backwards"), 1, "{:#?}", report.violations);
    assert_eq!(
        found("stale token 50 accepted"),
        1,
        "{:#?}",
        report.violations
    );

    let refused = Checker::new(workload.clone(), "refused");
    for event in [granted(0, 0, 100, 0, 5), write(0, 0, 100, 10, false)] {
        refused.record(event);
    }
    let report = refused.verify();
    assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
    assert!(report.violations[0].contains("refused a write"));

    let lost_data = Checker::new(workload, "lost-data");
    lost_data.record_fault(FaultRecord {
        kind: "redis_restart_empty",
        start: ms(100),
        end: ms(120),
        data_loss: true,
        ..Default::default()
    });
    for event in [granted(0, 0, 100, 0, 5), granted(1, 0, 200, 200, 210)] {
        lost_data.record(event);
    }
    let report = lost_data.verify();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.overlaps_in_data_loss_windows, 1);
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
    use crate::reliability::checker::{Event, FaultRecord, Stalled, WaitOutcome};
    use tonic::Code;
    let ms = Duration::from_millis;
    let workload = Workload {
        clients: 0,
        names: 2,
        gc_pauses: false,
        redis_timeout: ms(1_000),
        ..ci_workload()
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

    let clean = Checker::new(workload.clone(), "failures-clean");
    clean.record_fault(stall.clone());
    for event in [
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
    ]
    .into_iter()
    .chain(allowed.clone())
    {
        clean.record(event);
    }
    let report = clean.verify();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let checked = report.stalled_calls["net_black_hole"];
    assert_eq!(
        (checked.calls, checked.failed, checked.longest),
        (2, 1, ms(1_050))
    );
    assert_eq!(checked.median_failure, ms(1_050));
    assert_eq!(report.takeovers_checked, 1);
    assert_eq!(report.gave_up["Renew"], 1);

    let broken = Checker::new(workload, "failures-broken");
    broken.record_fault(stall);
    for event in [
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
    ]
    .into_iter()
    .chain(allowed)
    {
        broken.record(event);
    }
    let report = broken.verify();
    let found = |what: &str| {
        report
            .violations
            .iter()
            .filter(|violation| violation.contains(what))
            .count()
    };
    let expected = [
        "granted again with token 99 after the GC-paused lease 0",
        "renewed after its TTL passed",
        "token 200 granted twice",
        "the GC-paused holder's stale token 200 was accepted",
        "write with stale token 200 accepted after 201",
        "answered Internal",
        "answered InvalidArgument",
        "failed Cancelled at 8s: no answer before the call's deadline",
        "sent at 10.1s during net_black_hole (10s..13s), first answered after 2.95s",
        "sent at 10.2s during net_black_hole (10s..13s), first answered after 2.81s",
        "failed Unknown: a stalled Redis must make calls answer UNAVAILABLE",
        "net_black_hole: the calls it made fail answered after 1.4s (median of 5)",
    ];
    for what in expected {
        assert_eq!(found(what), 1, "{what}: {:#?}", report.violations);
    }
    assert_eq!(
        report.violations.len(),
        expected.len(),
        "{:#?}",
        report.violations
    );
}

/// FIFO: a waiter overtaken by a later caller (granted with a smaller token, or before the
/// waiter's wait ran out), a wait cut short and a position 0 are flagged; the same overtake inside
/// a fault window is not, and a GC pause does not hide one.
#[test]
fn checker_flags_seeded_overtakes() {
    use crate::reliability::checker::{Event, FaultRecord, WaitOutcome};
    let ms = Duration::from_millis;
    let workload = Workload {
        clients: 0,
        names: 2,
        gc_pauses: false,
        ..ci_workload()
    };
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

    // Z asked before X was queued and may go first; Y asked after and comes after X.
    let clean = Checker::new(workload.clone(), "fifo-clean");
    for event in [
        granted(0, 3, 0, 99, 5, 250),
        released(0, 290),
        waited(1, 0, (0, 1000), (10, 1), 300, WaitOutcome::Granted(100)),
        granted(1, 1, 0, 100, 0, 300),
        released(1, 390),
        granted(2, 2, 0, 101, 20, 400),
        released(2, 500),
    ] {
        clean.record(event);
    }
    let report = clean.verify();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!((report.waiters, report.fifo_pairs_checked), (1, 1));

    let broken = Checker::new(workload, "fifo-broken");
    // A GC pause over everything: it must not hide an overtake.
    broken.record_fault(FaultRecord {
        kind: "gc_pause",
        start: ms(0),
        end: ms(5_000),
        data_loss: false,
        ..Default::default()
    });
    broken.record_fault(FaultRecord {
        kind: "net_cut",
        start: ms(2_000),
        end: ms(2_100),
        data_loss: false,
        ..Default::default()
    });
    for event in [
        // Name 0: Y1 asked after X1 was queued and got a smaller token: an overtake.
        granted(0, 2, 0, 100, 20, 300),
        released(0, 390),
        waited(1, 0, (0, 1000), (10, 1), 400, WaitOutcome::Granted(101)),
        granted(1, 1, 0, 101, 0, 400),
        // Name 1: Y2 was granted while X2 could still wait (until 500): an overtake. Y3 was
        // granted after X2's wait ran out: fine.
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
    ] {
        broken.record(event);
    }
    let report = broken.verify();
    let found = |what: &str| {
        report
            .violations
            .iter()
            .filter(|violation| violation.contains(what))
            .count()
    };
    assert_eq!(report.overtakes, 2, "{:#?}", report.violations);
    assert_eq!(found("overtake"), 2, "{:#?}", report.violations);
    assert_eq!(report.waits_cut_short, 1, "{:#?}", report.violations);
    assert_eq!(found("before its wait"), 1, "{:#?}", report.violations);
    assert_eq!(found("reported position 0"), 1, "{:#?}", report.violations);
    assert_eq!(report.violations.len(), 4, "{:#?}", report.violations);
    assert_eq!(report.waiters, 4);
    assert_eq!(report.waiters_unchecked, 1);
    assert_eq!(report.fifo_pairs_checked, 3);
}

/// The workload the seeded counting tests replay events against: name 0 exclusive, name 1 a
/// counting lease of limit 3, no clients of their own.
fn seeded_counting_workload() -> Workload {
    Workload {
        clients: 0,
        names: 1,
        counting: Counting {
            clients: 0,
            names: 1,
            limit: 3,
        },
        gc_pauses: false,
        ..ci_workload()
    }
}

/// Counting names: four holders' views overlapping on a name of limit 3, a wrong `held` or
/// `limit` in `waiting`/`not_granted` and a FAILED_PRECONDITION are flagged; three holders at
/// once are not.
#[test]
fn checker_flags_seeded_counting_violations() {
    use crate::reliability::checker::Event;
    let ms = Duration::from_millis;
    let workload = seeded_counting_workload();
    let granted = |lease, name, token, sent, received| Event::Granted {
        lease,
        client: lease,
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
    let released = |lease, at| Event::ReleaseCalled { lease, at: ms(at) };
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

    let clean = Checker::new(workload.clone(), "counting-clean");
    for event in three_at_once.clone() {
        clean.record(event);
    }
    let report = clean.verify();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(report.counting_grants, 4);
    assert_eq!(report.max_holders_counting, 3);
    assert_eq!(report.max_reported_held, 3);

    let broken = Checker::new(workload, "counting-broken");
    for event in three_at_once.into_iter().chain([
        // A fourth holder while the three hold it.
        granted(4, 1, 150, 30, 35),
        released(4, 300),
        // Four held of limit 3; a limit that nobody asked for; an exclusive name said to have 3.
        occupancy(1, 4, 3),
        occupancy(1, 1, 5),
        occupancy(0, 1, 3),
        Event::Failed {
            rpc: "Acquire",
            code: tonic::Code::FailedPrecondition,
            replica: 0,
            sent: ms(40),
            ended: ms(41),
            gave_up: false,
            after_waiting: false,
        },
    ]) {
        broken.record(event);
    }
    let report = broken.verify();
    let found = |what: &str| {
        report
            .violations
            .iter()
            .filter(|violation| violation.contains(what))
            .count()
    };
    assert_eq!(
        found("views of 4 holders overlap"),
        1,
        "{:#?}",
        report.violations
    );
    assert_eq!(
        found("permits held of limit"),
        3,
        "{:#?}",
        report.violations
    );
    assert_eq!(found("FailedPrecondition"), 1, "{:#?}", report.violations);
    assert_eq!(report.violations.len(), 5, "{:#?}", report.violations);
    assert_eq!(report.max_holders_counting, 4);
}

/// FIFO on a counting name: a later caller that took the last free permit while a waiter was in
/// line overtook it; one that took a second free permit (the waiter could have had the other) is
/// not checked.
#[test]
fn checker_flags_seeded_counting_overtakes() {
    use crate::reliability::checker::{Event, WaitOutcome};
    let ms = Duration::from_millis;
    let workload = seeded_counting_workload();
    let granted = |lease, name, token, sent, received| Event::Granted {
        lease,
        client: lease,
        replica: 0,
        name,
        token,
        ttl: ms(2_000),
        sent: ms(sent),
        received: ms(received),
        first_sent: ms(sent),
        shared: false,
        waited: false,
    };
    let released = |lease, at| Event::ReleaseCalled { lease, at: ms(at) };
    // Holders 0 and 1 keep two permits until `second_ends`; holder 2 frees the third at 100.
    // X (lease 3) waits from 50 and is granted at 300, after Y (lease 4), which asked at 60 and
    // was granted at 110 with a smaller token.
    let run = |prefix: &str, second_ends: u64| {
        let checker = Checker::new(workload.clone(), prefix);
        for event in [
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
        ] {
            checker.record(event);
        }
        checker.verify()
    };

    let overtaken = run("counting-overtaken", 1_000);
    assert_eq!(overtaken.overtakes, 1, "{:#?}", overtaken.violations);
    assert_eq!(overtaken.counting_fifo_pairs_checked, 1);
    assert_eq!(overtaken.violations.len(), 1, "{:#?}", overtaken.violations);

    // Holder 1 released at 80: two permits were free when Y was granted.
    let two_free = run("counting-two-free", 80);
    assert!(two_free.violations.is_empty(), "{:#?}", two_free.violations);
    assert_eq!(two_free.counting_fifo_pairs_checked, 0);
}

/// The workload the seeded read-write tests replay events against: name 0 exclusive, name 1
/// read-write, no clients of their own.
fn seeded_read_write_workload() -> Workload {
    Workload {
        clients: 0,
        names: 1,
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
        gc_pauses: false,
        ..ci_workload()
    }
}

/// The read-write name of [`seeded_read_write_workload`].
const RW: usize = 1;

/// Read-write names: shared views that overlap each other pass (and count as holders at once);
/// an exclusive view that begins while shared views run, a shared view that begins inside an
/// exclusive one, and a limit other than 1 in force are flagged. The same overlap inside a
/// data-loss window is reported apart.
#[test]
fn checker_flags_seeded_mode_overlaps() {
    use crate::reliability::checker::{Event, FaultRecord};
    let ms = Duration::from_millis;
    let workload = seeded_read_write_workload();
    let granted = |lease, shared, token, sent, received| Event::Granted {
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
        waited: false,
    };
    let released = |lease, at| Event::ReleaseCalled { lease, at: ms(at) };
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

    let clean = Checker::new(workload.clone(), "rw-clean");
    for event in shared_together.clone() {
        clean.record(event);
    }
    let report = clean.verify();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(
        (report.rw_shared_grants, report.rw_exclusive_grants),
        (4, 1)
    );
    assert_eq!(report.max_shared_holders, 3);
    assert_eq!(report.max_reported_held_rw, 3);

    let broken = Checker::new(workload.clone(), "rw-broken");
    for event in shared_together.clone().into_iter().chain([
        // A writer while the three readers hold it...
        granted(5, false, 150, 100, 105),
        released(5, 200),
        // ...and a reader while the writer (lease 3) holds it.
        granted(6, true, 201, 440, 450),
        released(6, 500),
        // A limit nobody asked for; shared grants held are not bounded.
        occupancy(1, 3),
        occupancy(5, 1),
    ]) {
        broken.record(event);
    }
    let report = broken.verify();
    let found = |what: &str| {
        report
            .violations
            .iter()
            .filter(|violation| violation.contains(what))
            .count()
    };
    assert_eq!(
        found("an exclusive view overlaps another view"),
        2,
        "{:#?}",
        report.violations
    );
    assert_eq!(found("lease 5 (exclusive"), 1, "{:#?}", report.violations);
    assert_eq!(found("lease 6 (shared"), 1, "{:#?}", report.violations);
    assert_eq!(
        found("permits held of limit 3"),
        1,
        "{:#?}",
        report.violations
    );
    assert_eq!(report.violations.len(), 3, "{:#?}", report.violations);

    // The writer's overlap begins inside a data-loss window: allowed, and counted.
    let lost_data = Checker::new(workload, "rw-lost-data");
    lost_data.record_fault(FaultRecord {
        kind: "redis_restart_empty",
        start: ms(90),
        end: ms(95),
        data_loss: true,
        ..Default::default()
    });
    for event in shared_together
        .into_iter()
        .chain([granted(5, false, 150, 100, 105), released(5, 200)])
    {
        lost_data.record(event);
    }
    let report = lost_data.verify();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(report.overlaps_in_data_loss_windows, 1);
}

/// FIFO between modes: X waits (from 10, queued at 15) behind a holder that keeps the name until
/// 300, and is granted token 102 at 320; Y asked at 50, later, and was granted token 101 at 310,
/// first. That is an overtake when X is exclusive (a later reader barged past a waiting writer,
/// whether it waited or not), when Y is exclusive, and when Y is shared and never waited (granted
/// on its first attempt while X stood in line); a shared Y that waited behind a shared X may be
/// due in the same run: not checked. Y granted after X (token 103) is in order in every case.
#[test]
fn checker_flags_seeded_mode_overtakes() {
    use crate::reliability::checker::{Event, WaitOutcome};
    let ms = Duration::from_millis;
    let workload = seeded_read_write_workload();
    let granted = |lease, shared, waited, token, sent, received| Event::Granted {
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
    };
    let released = |lease, at| Event::ReleaseCalled { lease, at: ms(at) };
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
    /// The modes of one case, and whether Y went first.
    struct Case {
        holder_shared: bool,
        x_shared: bool,
        y_shared: bool,
        y_waited: bool,
        y_first: bool,
    }
    let run = |prefix: &str, case: Case| {
        let checker = Checker::new(workload.clone(), prefix);
        // Y's view is shorter than the clock slack: it overlaps nothing, whatever its mode.
        let (y_token, y_received) = match case.y_first {
            true => (101, 310),
            false => (103, 410),
        };
        for event in [
            granted(0, case.holder_shared, false, 100, 0, 5),
            released(0, 300),
            waited(1, case.x_shared, 10, 15, 320, 102),
            granted(1, case.x_shared, true, 102, 10, 320),
            released(1, 400),
            granted(2, case.y_shared, case.y_waited, y_token, 50, y_received),
            released(2, y_received + 5),
        ] {
            checker.record(event);
        }
        if case.y_waited {
            checker.record(waited(2, case.y_shared, 50, 55, y_received, y_token));
        }
        checker.verify()
    };
    let overtakes = |report: &crate::reliability::checker::Report, what: &str| {
        report
            .violations
            .iter()
            .filter(|violation| violation.contains("overtake") && violation.contains(what))
            .count()
    };

    // Readers hold; a writer waits; a later reader is granted before it.
    for y_waited in [false, true] {
        let report = run(
            "rw-reader-barges",
            Case {
                holder_shared: true,
                x_shared: false,
                y_shared: true,
                y_waited,
                y_first: true,
            },
        );
        assert_eq!(report.overtakes, 1, "{:#?}", report.violations);
        assert_eq!(
            overtakes(
                &report,
                "exclusive client 1 (replica 0; Acquire sent at 10ms"
            ),
            1,
            "{:#?}",
            report.violations
        );
        assert_eq!(
            overtakes(&report, "overtaken by shared client 2"),
            1,
            "{:#?}",
            report.violations
        );
        assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
        assert_eq!(report.mode_fifo_pairs.exclusive_then_shared, 1);
    }

    // A writer holds; a reader waits; a later writer is granted before it.
    let report = run(
        "rw-writer-barges",
        Case {
            holder_shared: false,
            x_shared: true,
            y_shared: false,
            y_waited: true,
            y_first: true,
        },
    );
    assert_eq!(report.overtakes, 1, "{:#?}", report.violations);
    assert_eq!(
        overtakes(&report, "overtaken by exclusive client 2"),
        1,
        "{:#?}",
        report.violations
    );
    assert_eq!(report.mode_fifo_pairs.shared_then_exclusive, 1);

    // A writer holds; a reader waits; a later reader is granted first on its first attempt,
    // which it could only be with nobody in line.
    let report = run(
        "rw-reader-first-attempt",
        Case {
            holder_shared: false,
            x_shared: true,
            y_shared: true,
            y_waited: false,
            y_first: true,
        },
    );
    assert_eq!(report.overtakes, 1, "{:#?}", report.violations);
    assert_eq!(
        overtakes(&report, "it never waited"),
        1,
        "{:#?}",
        report.violations
    );
    assert_eq!(report.mode_fifo_pairs.shared_then_shared_first_attempt, 1);

    // The same, but the later reader waited too: both were due in one run; not checked.
    let report = run(
        "rw-readers-due-together",
        Case {
            holder_shared: false,
            x_shared: true,
            y_shared: true,
            y_waited: true,
            y_first: true,
        },
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(report.mode_fifo_pairs.shared_then_shared_unprovable, 1);
    assert_eq!(report.fifo_pairs_checked, 0);

    // Every mix in order: Y granted after X.
    for (holder_shared, x_shared, y_shared) in [
        (true, false, true),
        (false, false, true),
        (false, true, false),
        (false, false, false),
        (false, true, true),
    ] {
        let report = run(
            "rw-in-order",
            Case {
                holder_shared,
                x_shared,
                y_shared,
                y_waited: false,
                y_first: false,
            },
        );
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        assert_eq!(report.fifo_pairs_checked, 1);
    }
}

/// Own lease ids: a grant answered to a retry counts from its first attempt (its TTL and the
/// tokens before it), a holder told `lost` to another holder while its view ran is flagged, and
/// the same `lost` after its view ended is not.
#[test]
fn checker_counts_retried_own_id_grants_from_the_first_attempt() {
    use crate::reliability::checker::Event;
    let ms = Duration::from_millis;
    let workload = Workload {
        clients: 0,
        names: 1,
        gc_pauses: false,
        ..ci_workload()
    };
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
    let release = |lease, at| Event::ReleaseCalled { lease, at: ms(at) };
    let checker = Checker::new(workload.clone(), "retried");
    // Lease 1 begins at 520, after lease 0's view (400..500) but before 300 + 500: no overlap.
    // Its token is below lease 2's, received before lease 2's first attempt (600).
    for event in [
        granted(0, 100, 0, 300, 400),
        granted(1, 101, 510, 510, 520),
        lost(0, 530),
        release(1, 580),
        granted(2, 102, 600, 900, 950),
    ] {
        checker.record(event);
    }
    let report = checker.verify();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(report.retried_grants, 2);

    let broken = Checker::new(workload, "lost-to-another");
    // Lease 2's first attempt came after lease 1 was received, yet its token is smaller; lease 0
    // is told another holds the name while its view runs.
    for event in [
        granted(0, 100, 0, 300, 400),
        lost(0, 450),
        granted(1, 101, 510, 510, 520),
        release(1, 580),
        granted(2, 99, 600, 900, 950),
    ] {
        broken.record(event);
    }
    let report = broken.verify();
    let found = |what: &str| {
        report
            .violations
            .iter()
            .filter(|violation| violation.contains(what))
            .count()
    };
    assert_eq!(
        found("held by another holder"),
        1,
        "{:#?}",
        report.violations
    );
    assert_eq!(found("backwards"), 1, "{:#?}", report.violations);
    assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);
    assert_eq!(report.lost_to_another_in_view, 1);
}
