//! The paused-clock tests of watching: watches of a `MemoryStore`, and of one whose reads fail
//! or whose changes are lost.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use super::{tending::READ_RETRY, view::RELEASE_GRACE};
use crate::{
    lease::{
        AcquireOutcome, Caller, ChangeCause, Grant, LeaseChange, LeaseId, Limits, RenewOutcome,
        ValidatedAcquire,
        limits::AcquireFields,
        test_support::{Operation, Reports, UnreliableStore},
    },
    store::{MemoryStore, memory::test_replica},
};

const NAME: &str = "jobs/leader";

fn name() -> LeaseName {
    LeaseName(NAME.into())
}

/// An Acquire of `NAME` by `holder`, validated as the server does.
fn request(holder: &str, ttl_ms: i64, limit: u32, lock_delay_ms: i64) -> ValidatedAcquire {
    Limits::default()
        .validate_acquire(AcquireFields {
            name: NAME,
            holder: holder.into(),
            ttl_ms,
            limit,
            lock_delay_ms,
            ..AcquireFields::default()
        })
        .unwrap()
}

/// Takes a permit of `NAME` at once; panics if none is free.
async fn take<S: LeaseStore>(store: &S, request: &ValidatedAcquire) -> (LeaseId, Grant) {
    let lease_id = LeaseId::generate();
    match store.try_acquire(request, &lease_id, None).await {
        Ok(AcquireOutcome::Granted(grant)) => (lease_id, grant),
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// The next event, which must come within a minute (of the paused clock).
async fn next(watch: &mut Watch) -> WatchUpdate {
    tokio::time::timeout(Duration::from_secs(60), watch.next())
        .await
        .expect("no event within a minute")
        .expect("the watch failed")
}

/// The next event, which must have this cause and be about this token.
async fn expect(watch: &mut Watch, cause: UpdateCause, token: u64) -> WatchUpdate {
    let event = next(watch).await;
    assert_eq!(event.cause, cause, "{event:?}");
    assert_eq!(event.subject.as_ref().map(|s| s.fencing_token), Some(token));
    event
}

/// No event for `duration`.
async fn assert_quiet(watch: &mut Watch, duration: Duration) {
    if let Ok(event) = tokio::time::timeout(duration, watch.next()).await {
        panic!("expected no event, got {event:?}");
    }
}

fn tokens(event: &WatchUpdate) -> Vec<u64> {
    event.holders.iter().map(|h| h.fencing_token).collect()
}

#[tokio::test(start_paused = true)]
async fn the_first_event_is_a_snapshot() {
    let replica = test_replica(16);
    let store = replica.store();
    let mut watch = Watch::start(&replica, name());
    let free = next(&mut watch).await;
    assert_eq!(free.cause, UpdateCause::Snapshot);
    assert_eq!((free.subject, free.limit, free.holders.len()), (None, 0, 0));

    let (_, grant) = take(store, &request("alpha", 10_000, 1, 0)).await;
    // Once the tending task has applied the grant, a newcomer's snapshot shows it.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let mut late = Watch::start(&replica, name());
    let held = next(&mut late).await;
    assert_eq!(held.cause, UpdateCause::Snapshot);
    let subject = held.subject.clone().expect("a holder");
    assert_eq!(
        (subject.holder.as_str(), subject.fencing_token),
        ("alpha", grant.fencing_token)
    );
    assert_eq!(subject.expiry.unwrap().remaining_ms, 9_999);
    assert_eq!((held.limit, tokens(&held)), (1, vec![grant.fencing_token]));
    // The first watcher saw the grant as it happened.
    expect(&mut watch, UpdateCause::Granted, grant.fencing_token).await;
}

#[tokio::test(start_paused = true)]
async fn grants_releases_and_revokes_arrive_in_order() {
    let replica = test_replica(16);
    let store = replica.store();
    let mut watch = Watch::start(&replica, name());
    next(&mut watch).await;

    let (alpha_id, alpha) = take(store, &request("alpha", 10_000, 1, 0)).await;
    let granted = expect(&mut watch, UpdateCause::Granted, alpha.fencing_token).await;
    assert_eq!(
        (granted.limit, tokens(&granted)),
        (1, vec![alpha.fencing_token])
    );
    assert!(
        store
            .release(&name(), &alpha_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let released = expect(&mut watch, UpdateCause::Released, alpha.fencing_token).await;
    assert_eq!((released.limit, released.holders.len()), (0, 0));

    let (_, beta) = take(store, &request("beta", 10_000, 1, 0)).await;
    assert!(beta.fencing_token > alpha.fencing_token);
    let granted = expect(&mut watch, UpdateCause::Granted, beta.fencing_token).await;
    assert_eq!(granted.subject.unwrap().holder, "beta");
    let revoked = store.revoke(&name(), None, "wedged").await.unwrap();
    assert_eq!(revoked.len(), 1);
    let event = expect(&mut watch, UpdateCause::Revoked, beta.fencing_token).await;
    assert_eq!((event.reason.as_str(), event.holders.len()), ("wedged", 0));
    assert_quiet(&mut watch, Duration::from_secs(30)).await;
}

/// EXPIRED comes when the TTL passes, not at the end of the lock-delay; from then on the
/// lease is not held, although nobody can take it until the delay is over.
#[tokio::test(start_paused = true)]
async fn an_expiry_is_reported_at_the_ttl_not_after_the_lock_delay() {
    let replica = test_replica(16);
    let store = replica.store();
    let start = Instant::now();
    let (_, alpha) = take(store, &request("alpha", 1_000, 1, 500)).await;
    let mut watch = Watch::start(&replica, name());
    expect(&mut watch, UpdateCause::Snapshot, alpha.fencing_token).await;
    let expired = expect(&mut watch, UpdateCause::Expired, alpha.fencing_token).await;
    let at = Instant::now() - start;
    assert!(
        at >= Duration::from_millis(1_000) && at < Duration::from_millis(1_050),
        "expired reported at {at:?}"
    );
    assert!(expired.holders.is_empty());
    assert_eq!(expired.limit, 0);

    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, beta) = take(store, &request("beta", 1_000, 1, 0)).await;
    expect(&mut watch, UpdateCause::Granted, beta.fencing_token).await;
}

/// An exclusive lease that expires and is taken at once by a waiter: EXPIRED, then GRANTED.
#[tokio::test(start_paused = true)]
async fn an_expiry_comes_before_the_next_grant() {
    let replica = test_replica(16);
    let store = replica.store();
    let (_, alpha) = take(store, &request("alpha", 1_000, 1, 0)).await;
    let mut watch = Watch::start(&replica, name());
    next(&mut watch).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // Taken the instant it expires, before the watch's timer has run.
    let (_, beta) = take(store, &request("beta", 1_000, 1, 0)).await;
    expect(&mut watch, UpdateCause::Expired, alpha.fencing_token).await;
    let granted = expect(&mut watch, UpdateCause::Granted, beta.fencing_token).await;
    assert_eq!(tokens(&granted), vec![beta.fencing_token]);
}

#[tokio::test(start_paused = true)]
async fn renewals_are_not_events() {
    let replica = test_replica(16);
    let store = replica.store();
    let (alpha_id, alpha) = take(store, &request("alpha", 1_000, 1, 0)).await;
    let mut watch = Watch::start(&replica, name());
    next(&mut watch).await;
    for _ in 0..10 {
        assert_quiet(&mut watch, Duration::from_millis(400)).await;
        let renewed = store
            .renew(&name(), &alpha_id, None, &Caller::anyone())
            .await
            .unwrap();
        assert!(matches!(renewed, RenewOutcome::Renewed { .. }));
    }
    assert!(
        store
            .release(&name(), &alpha_id, &Caller::anyone())
            .await
            .unwrap()
    );
    expect(&mut watch, UpdateCause::Released, alpha.fencing_token).await;
}

/// A grant reported again, or late (its token not above what the watch knows), is no event.
#[tokio::test(start_paused = true)]
async fn a_stale_grant_is_ignored() {
    let replica = test_replica(16);
    let store = replica.store();
    let mut watch = Watch::start(&replica, name());
    next(&mut watch).await;
    let (alpha_id, alpha) = take(store, &request("alpha", 10_000, 1, 0)).await;
    expect(&mut watch, UpdateCause::Granted, alpha.fencing_token).await;
    for token in [alpha.fencing_token, alpha.fencing_token - 1] {
        let stale = LeaseChange {
            shared: false,
            cause: ChangeCause::Granted,
            holder: "ghost".into(),
            fencing_token: token,
            limit: 1,
            ttl_ms: 10_000,
            expires_at_ms: alpha.expires_at_ms,
            reason: String::new(),
        };
        replica.watchers().changed(NAME, stale);
    }
    // A release of a grant the watch does not know is no event either.
    let unknown = LeaseChange {
        shared: false,
        cause: ChangeCause::Released,
        holder: "ghost".into(),
        fencing_token: alpha.fencing_token - 2,
        limit: 1,
        ttl_ms: 0,
        expires_at_ms: 0,
        reason: String::new(),
    };
    replica.watchers().changed(NAME, unknown);
    assert_quiet(&mut watch, Duration::from_secs(1)).await;
    assert!(
        store
            .release(&name(), &alpha_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let released = expect(&mut watch, UpdateCause::Released, alpha.fencing_token).await;
    assert_eq!(released.subject.unwrap().holder, "alpha");
}

/// A counting lease: one event per permit, each listing every holder after it.
#[tokio::test(start_paused = true)]
async fn a_counting_lease_has_one_event_per_permit() {
    let replica = test_replica(16);
    let store = replica.store();
    let mut watch = Watch::start(&replica, name());
    next(&mut watch).await;
    let mut grants = Vec::new();
    for (index, holder) in ["a", "b", "c"].into_iter().enumerate() {
        let (lease_id, grant) = take(store, &request(holder, 10_000, 3, 0)).await;
        let event = expect(&mut watch, UpdateCause::Granted, grant.fencing_token).await;
        assert_eq!((event.limit, event.holders.len()), (3, index + 1));
        grants.push((lease_id, grant));
    }
    assert!(
        store
            .release(&name(), &grants[1].0, &Caller::anyone())
            .await
            .unwrap()
    );
    let released = expect(&mut watch, UpdateCause::Released, grants[1].1.fencing_token).await;
    assert_eq!(
        tokens(&released),
        vec![grants[0].1.fencing_token, grants[2].1.fencing_token]
    );
    let revoked = store
        .revoke(&name(), Some(grants[2].1.fencing_token), "drain")
        .await
        .unwrap();
    assert_eq!(revoked.len(), 1);
    let event = expect(&mut watch, UpdateCause::Revoked, grants[2].1.fencing_token).await;
    assert_eq!(
        (event.limit, tokens(&event)),
        (3, vec![grants[0].1.fencing_token])
    );
}

/// A watcher that does not read while more events than the buffer holds go by gets one
/// snapshot of the state now instead, then the events after it.
#[tokio::test(start_paused = true)]
async fn a_lagging_watcher_gets_a_snapshot() {
    let replica = test_replica(16);
    let store = replica.store();
    let mut slow = Watch::start(&replica, name());
    let mut fast = Watch::start(&replica, name());
    next(&mut slow).await;
    next(&mut fast).await;
    let mut last = None;
    for round in 0..100 {
        let (lease_id, grant) = take(store, &request("busy", 10_000, 1, 0)).await;
        expect(&mut fast, UpdateCause::Granted, grant.fencing_token).await;
        if round < 99 {
            assert!(
                store
                    .release(&name(), &lease_id, &Caller::anyone())
                    .await
                    .unwrap()
            );
            expect(&mut fast, UpdateCause::Released, grant.fencing_token).await;
        }
        last = Some((lease_id, grant));
    }
    let (last_id, last) = last.unwrap();
    let snapshot = expect(&mut slow, UpdateCause::Snapshot, last.fencing_token).await;
    assert_eq!(tokens(&snapshot), vec![last.fencing_token]);
    assert!(
        store
            .release(&name(), &last_id, &Caller::anyone())
            .await
            .unwrap()
    );
    expect(&mut slow, UpdateCause::Released, last.fencing_token).await;
    expect(&mut fast, UpdateCause::Released, last.fencing_token).await;
}

/// The tending task and the name's entry go when the last watcher leaves; watching again
/// starts afresh.
#[tokio::test(start_paused = true)]
async fn the_tending_ends_with_the_last_watcher() {
    let replica = test_replica(16);
    let store = replica.store();
    let mut first = Watch::start(&replica, name());
    let mut second = Watch::start(&replica, name());
    next(&mut first).await;
    next(&mut second).await;
    assert_eq!(replica.watchers().count(), 2);
    drop(first);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(replica.watchers().is_tended(NAME));
    drop(second);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(replica.watchers().count(), 0);
    assert!(!replica.watchers().is_tended(NAME));

    let (_, alpha) = take(store, &request("alpha", 10_000, 1, 0)).await;
    let mut again = Watch::start(&replica, name());
    expect(&mut again, UpdateCause::Snapshot, alpha.fencing_token).await;
    drop(again);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!replica.watchers().is_tended(NAME));
}

/// `resync` sends a snapshot only when the state differs from the view;
/// `resync_everywhere` always does.
#[tokio::test(start_paused = true)]
async fn a_resync_sends_a_snapshot_when_needed() {
    let replica = test_replica(16);
    let store = replica.store();
    let (_, alpha) = take(store, &request("alpha", 60_000, 1, 0)).await;
    let mut watch = Watch::start(&replica, name());
    next(&mut watch).await;
    replica.watchers().resync(NAME);
    assert_quiet(&mut watch, Duration::from_secs(1)).await;
    replica.watchers().resync_everywhere();
    expect(&mut watch, UpdateCause::Snapshot, alpha.fencing_token).await;
}

/// A [`MemoryStore`] whose reads can fail ([`fail_reads`]), and which can keep its changes from
/// the watchers (as if every message were lost: [`Reports::Lost`]), for the paths a Redis outage
/// takes.
fn unreliable(reports: Reports) -> Arc<Replica<UnreliableStore<MemoryStore>>> {
    UnreliableStore::memory_replica(reports)
}

/// While on, the watch's reads fail.
fn fail_reads(store: &UnreliableStore<MemoryStore>, failing: bool) {
    store.fail(Operation::Describe, failing);
}

/// The first read failing ends the watch with the store's error; a later watch, once the
/// store answers, gets its snapshot.
#[tokio::test(start_paused = true)]
async fn a_first_read_that_fails_is_an_error() {
    let replica = unreliable(Reports::Heard);
    let store = replica.store();
    fail_reads(store, true);
    let mut watch = Watch::start(&replica, name());
    let outcome = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
    assert!(
        matches!(outcome, Ok(Err(Error::Unavailable(_)))),
        "{outcome:?}"
    );
    fail_reads(store, false);
    let mut again = Watch::start(&replica, name());
    let snapshot = next(&mut again).await;
    assert_eq!(snapshot.cause, UpdateCause::Snapshot);
}

/// Reads failing while watching are retried; what changed meanwhile arrives as a snapshot.
#[tokio::test(start_paused = true)]
async fn a_store_outage_ends_in_a_snapshot() {
    let replica = unreliable(Reports::Heard);
    let store = replica.store();
    let mut watch = Watch::start(&replica, name());
    next(&mut watch).await;
    fail_reads(store, true);
    replica.watchers().resync_everywhere(); // a reconnect
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, alpha) = take(store, &request("alpha", 60_000, 1, 0)).await;
    assert_quiet(&mut watch, Duration::from_secs(1)).await;
    let outage_over = Instant::now();
    fail_reads(store, false);
    expect(&mut watch, UpdateCause::Snapshot, alpha.fencing_token).await;
    assert!(Instant::now() - outage_over <= READ_RETRY);
}

/// With every message lost, the reads at the holders' deadlines still tell: a holder gone
/// before its deadline is reported expired after the grace, a grant nobody reported is
/// reported when a read shows it.
#[tokio::test(start_paused = true)]
async fn reads_at_the_deadlines_catch_what_messages_missed() {
    let replica = unreliable(Reports::Lost);
    let store = replica.store();
    let start = Instant::now();
    let (alpha_id, alpha) = take(store, &request("alpha", 1_000, 2, 0)).await;
    let (_, beta) = take(store, &request("beta", 500, 2, 0)).await;
    let mut watch = Watch::start(&replica, name());
    let snapshot = next(&mut watch).await;
    assert_eq!(
        tokens(&snapshot),
        vec![alpha.fencing_token, beta.fencing_token]
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        store
            .release(&name(), &alpha_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let (_, gamma) = take(store, &request("gamma", 5_000, 2, 0)).await;

    expect(&mut watch, UpdateCause::Expired, beta.fencing_token).await;
    assert_eq!(Instant::now() - start, Duration::from_millis(500));
    expect(&mut watch, UpdateCause::Granted, gamma.fencing_token).await;
    expect(&mut watch, UpdateCause::Expired, alpha.fencing_token).await;
    assert_eq!(
        Instant::now() - start,
        Duration::from_millis(500) + RELEASE_GRACE
    );
}

/// A holder gone before its deadline whose release is reported within the grace is
/// released, not expired.
#[tokio::test(start_paused = true)]
async fn a_late_release_report_within_the_grace_is_a_release() {
    let replica = unreliable(Reports::Lost);
    let store = replica.store();
    let (alpha_id, alpha) = take(store, &request("alpha", 1_000, 2, 0)).await;
    let (_, beta) = take(store, &request("beta", 500, 2, 0)).await;
    let mut watch = Watch::start(&replica, name());
    next(&mut watch).await;
    assert!(
        store
            .release(&name(), &alpha_id, &Caller::anyone())
            .await
            .unwrap()
    );
    expect(&mut watch, UpdateCause::Expired, beta.fencing_token).await;
    tokio::time::sleep(RELEASE_GRACE / 2).await;
    let report = LeaseChange {
        shared: false,
        cause: ChangeCause::Released,
        holder: "alpha".into(),
        fencing_token: alpha.fencing_token,
        limit: 2,
        ttl_ms: 0,
        expires_at_ms: alpha.expires_at_ms,
        reason: String::new(),
    };
    replica.watchers().changed(NAME, report);
    let released = expect(&mut watch, UpdateCause::Released, alpha.fencing_token).await;
    assert!(released.holders.is_empty());
    assert_quiet(&mut watch, Duration::from_secs(5)).await;
}

/// Many watchers reading as events come each see every event, once, in order.
#[tokio::test(start_paused = true)]
async fn every_watcher_sees_every_event() {
    const WATCHERS: usize = 50;
    const CYCLES: usize = 100;
    let replica = test_replica(16);
    let store = replica.store();
    let mut readers = Vec::new();
    for _ in 0..WATCHERS {
        let mut watch = Watch::start(&replica, name());
        readers.push(tokio::spawn(async move {
            let mut causes = Vec::new();
            let mut last_granted = 0;
            while causes.len() < 1 + 2 * CYCLES {
                let event = next(&mut watch).await;
                if event.cause == UpdateCause::Granted {
                    let token = event.subject.as_ref().unwrap().fencing_token;
                    assert!(token > last_granted);
                    last_granted = token;
                }
                causes.push(event.cause);
            }
            causes
        }));
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    for _ in 0..CYCLES {
        let (lease_id, _) = take(store, &request("cycling", 10_000, 1, 0)).await;
        assert!(
            store
                .release(&name(), &lease_id, &Caller::anyone())
                .await
                .unwrap()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut expected = vec![UpdateCause::Snapshot];
    for _ in 0..CYCLES {
        expected.extend([UpdateCause::Granted, UpdateCause::Released]);
    }
    for reader in readers {
        assert_eq!(reader.await.unwrap(), expected);
    }
}
