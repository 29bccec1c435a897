//! The paused-clock tests of waiting: queueing, wake-ups, expiries, deadlines and undelivered
//! grants, against a `MemoryStore`.

use super::{tending::RECONCILE_DELAY, *};
use crate::{
    lease::{Limits, QueueEntry, QueueMode, limits::AcquireFields},
    shutdown,
    store::{MemoryStore, memory::test_replica},
};

const NAME: &str = "jobs/nightly";

fn name() -> LeaseName {
    LeaseName(NAME.into())
}

/// Grants `NAME` to "holder" for `ttl_ms`; returns its lease id and fencing token.
async fn hold(store: &MemoryStore, ttl_ms: u64) -> (LeaseId, u64) {
    let lease_id = LeaseId::generate();
    let mut holder = request(ttl_ms as i64, 0);
    holder.holder = "holder".into();
    match store.try_acquire(&holder, &lease_id, None).await {
        Ok(AcquireOutcome::Granted(grant)) => (lease_id, grant.fencing_token),
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// An Acquire of `NAME` by "waiter", validated as the server does.
fn request(ttl_ms: i64, wait_ms: i64) -> ValidatedAcquire {
    let limits = Limits::default();
    limits
        .validate_acquire(AcquireFields {
            name: NAME,
            holder: "waiter".into(),
            ttl_ms,
            wait_ms,
            ..AcquireFields::default()
        })
        .unwrap()
}

/// The next event, which must be `Waiting`: its position and holder token (0 if free).
async fn next_waiting(events: &mut mpsc::Receiver<Result<AcquireEvent>>) -> (u32, u64) {
    match events.recv().await.unwrap().unwrap() {
        AcquireEvent::Waiting(placement) => (
            placement.position,
            placement.occupancy.holder.map_or(0, |h| h.fencing_token),
        ),
        other => panic!("expected Waiting, got {other:?}"),
    }
}

/// The next event, which must be `Granted`: the grant, delivered.
async fn next_grant(events: &mut mpsc::Receiver<Result<AcquireEvent>>) -> Grant {
    match events.recv().await.unwrap().unwrap() {
        AcquireEvent::Granted(delivery) => delivery.deliver(),
        other => panic!("expected Granted, got {other:?}"),
    }
}

/// A try-once call answers in its own task: granted when free, not granted (with the
/// holder) when busy, refused for another limit; a grant whose delivery is
/// dropped is released, so the name is free again at once.
#[tokio::test(start_paused = true)]
async fn try_once_answers_at_once_and_releases_an_undelivered_grant() {
    let replica = test_replica(16);
    let store = replica.store();
    let (_, token) = hold(store, 10_000).await;
    match try_once(&replica, &request(10_000, 0)).await.unwrap() {
        AcquireEvent::NotGranted(occupancy) => {
            assert_eq!(occupancy.holder.map(|h| h.fencing_token), Some(token));
        }
        other => panic!("expected NotGranted, got {other:?}"),
    }
    let mut counting = request(10_000, 0);
    counting.limit = 3;
    let refused = try_once(&replica, &counting).await.unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Refused(Refusal::LimitMismatch {
                asked: 3,
                in_force: 1
            })
        ),
        "{refused:?}"
    );

    let free = test_replica(16);
    let AcquireEvent::Granted(delivery) = try_once(&free, &request(10_000, 0)).await.unwrap()
    else {
        panic!("expected a grant");
    };
    drop(delivery);
    tokio::task::yield_now().await; // the background release
    let described = free.store().describe(&name()).await.unwrap();
    assert!(described.holders.is_empty(), "{described:?}");
}

/// A waiter is told `Waiting` (first in line) first, then granted the moment the holder
/// releases: not at the holder's expiry.
#[tokio::test(start_paused = true)]
async fn a_release_wakes_the_waiter_at_once() {
    let replica = test_replica(16);
    let store = replica.store();
    let (holder_id, holder_token) = hold(store, 10_000).await;
    let mut events = acquire(replica.clone(), request(10_000, 60_000), Shutdown::never());
    assert_eq!(next_waiting(&mut events).await, (1, holder_token));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        events.try_recv().is_err(),
        "granted while the lease was held"
    );
    let released_at = Instant::now();
    assert!(
        store
            .release(&name(), &holder_id, &Caller::anyone())
            .await
            .unwrap()
    );
    match events.recv().await.unwrap().unwrap() {
        AcquireEvent::Granted(grant) => assert!(grant.deliver().fencing_token > holder_token),
        other => panic!("expected Granted, got {other:?}"),
    }
    assert_eq!(Instant::now(), released_at);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(replica.waiters().count(), 0);
}

/// Waiters are granted in the order they queued, each told its position, and each moves up
/// as the ones ahead are served.
#[tokio::test(start_paused = true)]
async fn waiters_are_served_first_come_first_served() {
    let replica = test_replica(16);
    let store = replica.store();
    let (mut holder_id, _) = hold(store, 60_000).await;
    let mut waiters = Vec::new();
    for expected in 1..=3 {
        let mut events = acquire(replica.clone(), request(60_000, 60_000), Shutdown::never());
        assert_eq!(next_waiting(&mut events).await.0, expected);
        waiters.push(events);
    }
    for served in 0..3 {
        assert!(
            store
                .release(&name(), &holder_id, &Caller::anyone())
                .await
                .unwrap()
        );
        let grant = match waiters[served].recv().await.unwrap().unwrap() {
            AcquireEvent::Granted(grant) => grant.deliver(),
            other => panic!("waiter {served}: expected Granted, got {other:?}"),
        };
        holder_id = grant.lease_id;
        // Everyone behind moved up by one.
        for (behind, events) in waiters.iter_mut().enumerate().skip(served + 1) {
            let (position, token) = next_waiting(events).await;
            assert_eq!(position as usize, behind - served);
            assert_eq!(token, grant.fencing_token);
        }
    }
}

/// While someone waits, nobody jumps the queue: a try-once caller is not granted even in the
/// instant the lease is free.
#[tokio::test(start_paused = true)]
async fn a_try_once_caller_never_overtakes_a_waiter() {
    let replica = test_replica(16);
    let store = replica.store();
    let (holder_id, _) = hold(store, 60_000).await;
    let mut waiter = acquire(replica.clone(), request(60_000, 60_000), Shutdown::never());
    next_waiting(&mut waiter).await;
    // Released and retried in the same instant, before the waiter's task runs.
    assert!(
        store
            .release(&name(), &holder_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let outcome = store
        .try_acquire(&request(1_000, 0), &LeaseId::generate(), None)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        AcquireOutcome::Busy {
            // Free, and due to the first in line.
            occupancy: Occupancy {
                due: 1,
                ..Occupancy::free()
            },
            position: 0
        }
    );
    next_grant(&mut waiter).await;
}

/// With nobody releasing, the first in line wakes just after the holder's expiry (by
/// `EXPIRY_SLACK`, or at a tending read that finds it expired) and is granted then: never
/// before, and no long delay after.
#[tokio::test(start_paused = true)]
async fn the_holders_expiry_wakes_the_first_in_line() {
    let replica = test_replica(16);
    let store = replica.store();
    let expiry = Instant::now() + Duration::from_secs(1);
    hold(store, 1_000).await;
    let mut events = acquire(replica.clone(), request(10_000, 60_000), Shutdown::never());
    next_waiting(&mut events).await;
    next_grant(&mut events).await;
    let granted_at = Instant::now();
    assert!(granted_at >= expiry, "granted before the expiry");
    assert!(granted_at <= expiry + EXPIRY_SLACK + Duration::from_millis(1));
}

/// A lease that stays busy ends the wait at its deadline exactly, with the holder's info, and
/// the caller leaves the queue.
#[tokio::test(start_paused = true)]
async fn the_deadline_ends_the_wait_with_not_granted() {
    let replica = test_replica(16);
    let store = replica.store();
    let (_, holder_token) = hold(store, 60_000).await;
    let start = Instant::now();
    let mut events = acquire(replica.clone(), request(10_000, 5_000), Shutdown::never());
    next_waiting(&mut events).await;
    match events.recv().await.unwrap().unwrap() {
        AcquireEvent::NotGranted(Occupancy {
            holder: Some(info), ..
        }) => {
            assert_eq!(info.holder, "holder");
            assert_eq!(info.fencing_token, holder_token);
        }
        other => panic!("expected NotGranted, got {other:?}"),
    }
    assert_eq!(Instant::now() - start, Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(replica.waiters().count(), 0);
    assert_eq!(queued(store).await, 0);
}

/// `wait` zero tries once: an immediate answer, no `Waiting`, no registered waiter.
#[tokio::test(start_paused = true)]
async fn a_zero_wait_tries_once() {
    let replica = test_replica(16);
    let store = replica.store();
    let start = Instant::now();
    let mut events = acquire(replica.clone(), request(10_000, 0), Shutdown::never());
    next_grant(&mut events).await;
    let mut events = acquire(replica.clone(), request(10_000, 0), Shutdown::never());
    assert!(matches!(
        events.recv().await.unwrap().unwrap(),
        AcquireEvent::NotGranted(Occupancy {
            holder: Some(_),
            ..
        })
    ));
    assert_eq!(Instant::now(), start);
    assert_eq!(replica.waiters().count(), 0);
    assert_eq!(queued(store).await, 0);
}

/// How many entries the store's queue of `NAME` holds.
async fn queued(store: &MemoryStore) -> usize {
    store.queued_here(&name()).await.unwrap().len()
}

/// A caller that leaves mid-wait (drops the receiver) leaves the queue, and the one behind it
/// moves up.
#[tokio::test(start_paused = true)]
async fn dropping_the_receiver_leaves_the_queue() {
    let replica = test_replica(16);
    let store = replica.store();
    hold(store, 60_000).await;
    let mut first = acquire(replica.clone(), request(10_000, 60_000), Shutdown::never());
    assert_eq!(next_waiting(&mut first).await.0, 1);
    let mut second = acquire(replica.clone(), request(10_000, 60_000), Shutdown::never());
    assert_eq!(next_waiting(&mut second).await.0, 2);
    assert_eq!(replica.waiters().count(), 2);
    drop(first);
    assert_eq!(next_waiting(&mut second).await.0, 1);
    assert_eq!(replica.waiters().count(), 1);
    assert_eq!(queued(store).await, 1);
}

/// A grant that can no longer be delivered (the caller already left) is released at once, so
/// the lease does not stay held by nobody until its TTL.
#[tokio::test(start_paused = true)]
async fn an_undelivered_grant_is_released() {
    let replica = test_replica(16);
    let store = replica.store();
    // The receiver is gone before the task runs: it is granted the free lease, cannot say so.
    drop(acquire(
        replica.clone(),
        request(60_000, 60_000),
        Shutdown::never(),
    ));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(store.describe(&name()).await.unwrap().holders.is_empty());
}

/// A store call whose outcome is unknown may be run by Redis after the release that undoes it
/// (after a stall, commands on different connections run in no fixed order): the undo goes on
/// until it ends the grant, at doubling intervals, and stops after the grant's TTL and a margin.
#[tokio::test(start_paused = true)]
async fn an_unknown_outcome_is_released_even_when_the_grant_comes_later() {
    let replica = test_replica(16);
    let store = replica.store();
    let lease_id = LeaseId::generate();
    let late = request(10_000, 0);
    release_in_background(&replica, &name(), &lease_id, late.ttl, Undo::Maybe);
    // The first tries find nothing; then the delayed acquire runs.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let granted = store.try_acquire(&late, &lease_id, None).await.unwrap();
    assert!(matches!(granted, AcquireOutcome::Granted(_)), "{granted:?}");
    // Tries at 0, 0.25, 0.75 and 1.75 s: the one at 1.75 s ends the grant.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(store.describe(&name()).await.unwrap().holders.len(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        store.describe(&name()).await.unwrap().holders.is_empty(),
        "the late grant is released at the next try"
    );
    // A grant known to be made is released once: the same id granted again afterwards stays.
    release_in_background(&replica, &name(), &lease_id, late.ttl, Undo::Made);
    tokio::time::sleep(Duration::from_millis(1)).await;
    store.try_acquire(&late, &lease_id, None).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(store.describe(&name()).await.unwrap().holders.len(), 1);
    assert!(
        store
            .release(&name(), &lease_id, &Caller::anyone())
            .await
            .unwrap()
    );
    // An unknown outcome is tried for its TTL and the margin, then no more: its tries run at
    // 0, 0.25, 0.75, ... 63.75 s, and the next would be at 127.75 s.
    let other_id = LeaseId::generate();
    release_in_background(&replica, &name(), &other_id, late.ttl, Undo::Maybe);
    tokio::time::sleep(Duration::from_secs(75)).await;
    store
        .try_acquire(&request(120_000, 0), &other_id, None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        store.describe(&name()).await.unwrap().holders.len(),
        1,
        "tried past the TTL and the margin"
    );
}

/// A grant that reached the stream's buffer but was never taken out (the caller's cancel
/// arrived first) is released when the stream is dropped, and the next in line gets it.
#[tokio::test(start_paused = true)]
async fn a_grant_left_in_the_stream_buffer_is_released_to_the_next() {
    let replica = test_replica(16);
    let store = replica.store();
    let (holder_id, _) = hold(store, 60_000).await;
    let mut first = acquire(replica.clone(), request(60_000, 60_000), Shutdown::never());
    next_waiting(&mut first).await;
    let mut second = acquire(replica.clone(), request(60_000, 60_000), Shutdown::never());
    next_waiting(&mut second).await;
    assert!(
        store
            .release(&name(), &holder_id, &Caller::anyone())
            .await
            .unwrap()
    );
    // Let the first waiter's grant land in its buffer, then leave without reading it.
    tokio::time::sleep(Duration::from_millis(1)).await;
    drop(first);
    let start = Instant::now();
    loop {
        match second.recv().await.unwrap().unwrap() {
            AcquireEvent::Waiting(_) => continue,
            AcquireEvent::Granted(delivery) => {
                delivery.deliver();
                break;
            }
            other => panic!("expected Granted, got {other:?}"),
        }
    }
    assert_eq!(
        Instant::now(),
        start,
        "handed on at once, not after the TTL"
    );
}

/// Queues an entry of this replica that no caller owns, as an attempt does that runs in the
/// store after the server gave up on it (a stall past the timeout).
async fn queue_callerless_entry(replica: &Replica<MemoryStore>) -> QueueEntry {
    let entry = QueueEntry {
        replica: replica.waiters().replica().to_owned(),
        sequence: 999999,
        mode: QueueMode::Exclusive,
    };
    let outcome = replica
        .store()
        .try_acquire(&request(1_000, 60_000), &LeaseId::generate(), Some(&entry))
        .await
        .unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Busy { .. }),
        "{outcome:?}"
    );
    entry
}

/// A callerless entry at the head of the queue is woken when the lease frees; nobody here
/// holds it, so it is taken out, and the caller behind it is granted in the same instant.
#[tokio::test(start_paused = true)]
async fn a_woken_entry_without_a_caller_is_taken_out() {
    let replica = test_replica(16);
    let store = replica.store();
    let (holder_id, _) = hold(store, 60_000).await;
    let mut keeper = acquire(replica.clone(), request(60_000, 60_000), Shutdown::never());
    assert_eq!(next_waiting(&mut keeper).await.0, 1);
    let ghost = queue_callerless_entry(&replica).await;
    let mut waiter = acquire(replica.clone(), request(60_000, 60_000), Shutdown::never());
    assert_eq!(next_waiting(&mut waiter).await.0, 3);
    // The keeper leaves: the ghost is now first in line, then the waiter.
    drop(keeper);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(queued(store).await, 2);

    let released_at = Instant::now();
    assert!(
        store
            .release(&name(), &holder_id, &Caller::anyone())
            .await
            .unwrap()
    );
    loop {
        match waiter.recv().await.unwrap().unwrap() {
            AcquireEvent::Waiting(_) => continue,
            AcquireEvent::Granted(delivery) => break drop(delivery.deliver()),
            other => panic!("expected Granted, got {other:?}"),
        }
    }
    assert_eq!(Instant::now(), released_at, "the ghost held up the queue");
    assert!(!store.queued_here(&name()).await.unwrap().contains(&ghost));
}

/// After an attempt without an answer, the name's entries are reconciled with the callers
/// here (twice, half a second apart): a callerless entry goes, a live one stays.
#[tokio::test(start_paused = true)]
async fn reconciling_removes_only_entries_without_a_caller() {
    let replica = test_replica(16);
    let store = replica.store();
    hold(store, 60_000).await;
    let mut waiter = acquire(replica.clone(), request(60_000, 60_000), Shutdown::never());
    assert_eq!(next_waiting(&mut waiter).await.0, 1);
    let ghost = queue_callerless_entry(&replica).await;
    // Not woken and not reconciled: it stays.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(queued(store).await, 2);

    replica.waiters().reconcile(NAME);
    let round = RECONCILE_DELAY + Duration::from_millis(1);
    tokio::time::sleep(round).await;
    let queued = store.queued_here(&name()).await.unwrap();
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert!(!queued.contains(&ghost));
    // The second round, half a second later, takes out an entry that came after the first (a
    // late attempt behind other commands); the waiter still waits, first.
    let ghost = queue_callerless_entry(&replica).await;
    tokio::time::sleep(round).await;
    assert!(!store.queued_here(&name()).await.unwrap().contains(&ghost));
    assert!(matches!(
        waiter.try_recv(),
        Err(mpsc::error::TryRecvError::Empty)
    ));
    assert_eq!(replica.waiters().count(), 1);
}

/// The queue is bounded: past `max_waiters_per_name`, a waiter is refused with
/// `QueueFull`; a try-once caller still gets its answer.
#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_more_waiters() {
    let replica = test_replica(2);
    let store = replica.store();
    hold(store, 60_000).await;
    let mut kept = Vec::new();
    for _ in 0..2 {
        let mut events = acquire(replica.clone(), request(10_000, 60_000), Shutdown::never());
        next_waiting(&mut events).await;
        kept.push(events);
    }
    let mut refused = acquire(replica.clone(), request(10_000, 60_000), Shutdown::never());
    assert!(matches!(
        refused.recv().await.unwrap(),
        Err(Error::Refused(Refusal::QueueFull { limit: 2 }))
    ));
    let mut once = acquire(replica.clone(), request(10_000, 0), Shutdown::never());
    assert!(matches!(
        once.recv().await.unwrap().unwrap(),
        AcquireEvent::NotGranted(Occupancy {
            holder: Some(_),
            ..
        })
    ));
}

/// An Acquire of `NAME` with a limit and a lock-delay.
fn counting_request(ttl_ms: i64, wait_ms: i64, limit: u32, lock_delay_ms: i64) -> ValidatedAcquire {
    Limits::default()
        .validate_acquire(AcquireFields {
            name: NAME,
            holder: "waiter".into(),
            ttl_ms,
            wait_ms,
            limit,
            lock_delay_ms,
            ..AcquireFields::default()
        })
        .unwrap()
}

/// Takes a permit of `NAME` at once; panics if none is free.
async fn take(store: &MemoryStore, request: &ValidatedAcquire) -> (LeaseId, Grant) {
    let lease_id = LeaseId::generate();
    match store.try_acquire(request, &lease_id, None).await {
        Ok(AcquireOutcome::Granted(grant)) => (lease_id, grant),
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Two permits taken, two callers waiting: the first permit to expire goes to the first in
/// line at its expiry (not before), the second to the second; each expiry frees one permit.
#[tokio::test(start_paused = true)]
async fn each_expiring_permit_goes_to_the_next_in_line() {
    let replica = test_replica(16);
    let store = replica.store();
    let start = Instant::now();
    take(store, &counting_request(1_000, 0, 2, 0)).await;
    take(store, &counting_request(3_000, 0, 2, 0)).await;
    let mut first = acquire(
        replica.clone(),
        counting_request(60_000, 60_000, 2, 0),
        Shutdown::never(),
    );
    assert_eq!(next_waiting(&mut first).await.0, 1);
    let mut second = acquire(
        replica.clone(),
        counting_request(60_000, 60_000, 2, 0),
        Shutdown::never(),
    );
    assert_eq!(next_waiting(&mut second).await.0, 2);

    let first_grant = loop {
        match first.recv().await.unwrap().unwrap() {
            AcquireEvent::Granted(delivery) => break delivery.deliver(),
            AcquireEvent::Waiting(_) => continue,
            other => panic!("expected Granted, got {other:?}"),
        }
    };
    let first_at = Instant::now() - start;
    assert!(
        first_at >= Duration::from_secs(1),
        "granted at {first_at:?}"
    );
    assert!(first_at <= Duration::from_millis(1_000) + EXPIRY_SLACK + Duration::from_millis(1));

    let second_grant = loop {
        match second.recv().await.unwrap().unwrap() {
            AcquireEvent::Granted(delivery) => break delivery.deliver(),
            AcquireEvent::Waiting(_) => continue,
            other => panic!("expected Granted, got {other:?}"),
        }
    };
    let second_at = Instant::now() - start;
    assert!(
        second_at >= Duration::from_secs(3),
        "granted at {second_at:?}"
    );
    assert!(second_at <= Duration::from_millis(3_000) + EXPIRY_SLACK + Duration::from_millis(1));
    assert!(second_grant.fencing_token > first_grant.fencing_token);
}

/// A lease with a lock-delay that expires stays taken until the delay has passed: the waiter
/// is granted at expiry + delay, and is told so (`remaining_ms` counts the delay).
#[tokio::test(start_paused = true)]
async fn an_expiry_is_followed_by_the_lock_delay() {
    let replica = test_replica(16);
    let store = replica.store();
    let start = Instant::now();
    take(store, &counting_request(1_000, 0, 1, 500)).await;
    let mut events = acquire(replica.clone(), request(10_000, 60_000), Shutdown::never());
    match events.recv().await.unwrap().unwrap() {
        AcquireEvent::Waiting(placement) => {
            let holder = placement.occupancy.holder.expect("a holder");
            assert_eq!(holder.expiry.unwrap().remaining_ms, 1_500);
        }
        other => panic!("expected Waiting, got {other:?}"),
    }
    next_grant(&mut events).await;
    let granted_at = Instant::now() - start;
    assert!(
        granted_at >= Duration::from_millis(1_500),
        "granted at {granted_at:?}"
    );
    assert!(granted_at <= Duration::from_millis(1_500) + EXPIRY_SLACK + Duration::from_millis(1));
}

/// A release ends a lease with a lock-delay at once: no delay for the next in line.
#[tokio::test(start_paused = true)]
async fn a_release_skips_the_lock_delay() {
    let replica = test_replica(16);
    let store = replica.store();
    let (holder_id, _) = take(store, &counting_request(10_000, 0, 1, 5_000)).await;
    let mut events = acquire(replica.clone(), request(10_000, 60_000), Shutdown::never());
    next_waiting(&mut events).await;
    let released_at = Instant::now();
    assert!(
        store
            .release(&name(), &holder_id, &Caller::anyone())
            .await
            .unwrap()
    );
    next_grant(&mut events).await;
    assert_eq!(Instant::now(), released_at);
}

/// Another limit than the holders' is refused, naming the limit in force.
#[tokio::test(start_paused = true)]
async fn a_limit_other_than_the_holders_is_refused() {
    let replica = test_replica(16);
    let store = replica.store();
    take(store, &counting_request(10_000, 0, 3, 0)).await;
    let mut events = acquire(
        replica.clone(),
        counting_request(10_000, 0, 2, 0),
        Shutdown::never(),
    );
    match events.recv().await.unwrap() {
        Err(Error::Refused(Refusal::LimitMismatch {
            asked: 2,
            in_force: 3,
        })) => {}
        other => panic!("expected the limit in force, 3, got {other:?}"),
    }
}

/// Shutdown ends a waiter with `ShuttingDown` at once and removes it.
#[tokio::test(start_paused = true)]
async fn shutdown_ends_the_wait() {
    let replica = test_replica(16);
    let store = replica.store();
    hold(store, 60_000).await;
    let (trigger, shutdown) = shutdown::channel();
    let mut events = acquire(replica.clone(), request(10_000, 60_000), shutdown);
    next_waiting(&mut events).await;
    let start = Instant::now();
    trigger.fire();
    assert!(matches!(
        events.recv().await.unwrap(),
        Err(Error::ShuttingDown)
    ));
    assert_eq!(Instant::now(), start);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(replica.waiters().count(), 0);
}

/// Readers waiting behind a writer are all granted at its release, together, and the writer
/// queued behind them is granted only when the last of them has released; a reader that came
/// after that writer waits for it.
#[tokio::test(start_paused = true)]
async fn readers_behind_a_writer_are_granted_together_and_the_next_writer_waits_for_them() {
    let replica = test_replica(16);
    let store = replica.store();
    let (holder_id, _) = hold(store, 60_000).await;
    let shared = |wait_ms| ValidatedAcquire {
        shared: true,
        ..request(60_000, wait_ms)
    };
    let mut readers = Vec::new();
    for position in 1..=3 {
        let mut events = acquire(replica.clone(), shared(60_000), Shutdown::never());
        assert_eq!(next_waiting(&mut events).await.0, position);
        readers.push(events);
    }
    let mut writer = acquire(replica.clone(), request(60_000, 60_000), Shutdown::never());
    assert_eq!(next_waiting(&mut writer).await.0, 4);
    let mut late_reader = acquire(replica.clone(), shared(60_000), Shutdown::never());
    assert_eq!(next_waiting(&mut late_reader).await.0, 5);

    assert!(
        store
            .release(&name(), &holder_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let mut grants = Vec::new();
    for events in &mut readers {
        // Their positions may move first; then the grant, with no time passing.
        let grant = loop {
            match events.recv().await.unwrap().unwrap() {
                AcquireEvent::Waiting(_) => continue,
                AcquireEvent::Granted(delivery) => break delivery.deliver(),
                other => panic!("expected a grant, got {other:?}"),
            }
        };
        grants.push(grant);
    }
    assert_eq!(store.describe(&name()).await.unwrap().holders.len(), 3);
    for grant in &grants[..2] {
        assert!(
            store
                .release(&name(), &grant.lease_id, &Caller::anyone())
                .await
                .unwrap()
        );
    }
    // Two of three readers gone: the writer still waits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    while let Ok(event) = writer.try_recv() {
        assert!(matches!(event, Ok(AcquireEvent::Waiting(_))), "{event:?}");
    }
    assert!(
        store
            .release(&name(), &grants[2].lease_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let written = loop {
        match writer.recv().await.unwrap().unwrap() {
            AcquireEvent::Waiting(_) => continue,
            AcquireEvent::Granted(delivery) => break delivery.deliver(),
            other => panic!("expected the writer granted, got {other:?}"),
        }
    };
    assert!(written.fencing_token > grants[2].fencing_token);
    // The late reader still waits for the writer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    while let Ok(event) = late_reader.try_recv() {
        assert!(matches!(event, Ok(AcquireEvent::Waiting(_))), "{event:?}");
    }
}
