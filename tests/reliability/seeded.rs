//! The checker itself: seeded records with double grants, backwards tokens, fencing breaches
//! and overtaken waiters, exclusive and counting, that it must flag (and clean ones it must not).

use std::time::Duration;

use crate::checker::{Checker, Counting, Workload};
use crate::ci_workload;

/// The checker finds what it looks for: a seeded record with an overlap, a backwards token, a
/// refused rightful write and an accepted stale write yields exactly those violations, and the
/// same overlap inside a data-loss window is reported apart instead.
#[test]
fn checker_flags_seeded_violations() {
    use crate::checker::{Event, FaultRecord};
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
    });
    for event in [granted(0, 0, 100, 0, 5), granted(1, 0, 200, 200, 210)] {
        lost_data.record(event);
    }
    let report = lost_data.verify();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.overlaps_in_data_loss_windows, 1);
}

/// FIFO: a waiter overtaken by a later caller (granted with a smaller token, or before the
/// waiter's wait ran out), a wait cut short and a position 0 are flagged; the same overtake inside
/// a fault window is not, and a GC pause does not hide one.
#[test]
fn checker_flags_seeded_overtakes() {
    use crate::checker::{Event, FaultRecord, WaitOutcome};
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
    };
    let released = |lease, at| Event::ReleaseCalled { lease, at: ms(at) };
    // Client `client` sent an Acquire waiting `wait` ms at `sent`, was first told `waiting` at
    // `queued` with `position`, and the call ended at `ended` with `outcome`.
    let waited = |client, name, (sent, wait), (queued, position), ended, outcome| Event::Waited {
        client,
        replica: client % 2,
        name,
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
    });
    broken.record_fault(FaultRecord {
        kind: "net_cut",
        start: ms(2_000),
        end: ms(2_100),
        data_loss: false,
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
    use crate::checker::Event;
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
    use crate::checker::{Event, WaitOutcome};
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
