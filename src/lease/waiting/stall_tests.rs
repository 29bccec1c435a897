//! The tending task's check on other replicas' entries that stall a free permit, on the paused
//! clock: the embedded store plays the shared queue, with an entry of a "peer" replica first in
//! line, and [`UnreliableStore::with_peer`] plays the part of the Redis store's `unstall` (the
//! peer's heartbeat).

use super::{
    tending::{STALL_CHECK_INTERVAL, STALL_GRACE, STALL_LIMIT},
    *,
};
use crate::{
    lease::{
        Limits, QueueEntry,
        limits::AcquireFields,
        test_support::{Reports, UnreliableStore},
    },
    store::MemoryStore,
};

const NAME: &str = "jobs/nightly";
/// The peer replica's id.
const PEER: &str = "feedbeef";

fn name() -> LeaseName {
    LeaseName(NAME.into())
}

fn request(wait_ms: i64) -> ValidatedAcquire {
    Limits::default()
        .validate_acquire(AcquireFields {
            name: NAME,
            holder: "waiter".into(),
            ttl_ms: 10_000,
            wait_ms,
            ..AcquireFields::default()
        })
        .unwrap()
}

/// The embedded store, with another replica ("peer") whose liveness the test sets; `unstall`
/// takes the peer's entries out as the Redis store would: all of them once the peer is gone,
/// the stalled ones when overdue.
fn peer_replica(alive: bool) -> Arc<Replica<UnreliableStore<MemoryStore>>> {
    let replica = UnreliableStore::memory_replica(Reports::Heard);
    replica.store().with_peer(PEER, alive);
    replica
}

fn peer_entry() -> QueueEntry {
    QueueEntry::parse(&format!("{PEER}:1")).unwrap()
}

/// A holder, then the peer's entry first in line, then a waiter of this replica (position 2);
/// the holder releases. Returns the waiter's events and the moment of the release.
async fn peer_first_then_release(
    replica: &Arc<Replica<UnreliableStore<MemoryStore>>>,
) -> (mpsc::Receiver<Result<AcquireEvent>>, Instant) {
    let store = replica.store();
    let holder = LeaseId::generate();
    assert!(matches!(
        store.try_acquire(&request(0), &holder, None).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    let peer = store
        .try_acquire(&request(60_000), &LeaseId::generate(), Some(&peer_entry()))
        .await
        .unwrap();
    assert!(
        matches!(peer, AcquireOutcome::Busy { position: 1, .. }),
        "{peer:?}"
    );
    let mut waiter = acquire(replica.clone(), request(60_000), Shutdown::never());
    match waiter.recv().await.unwrap().unwrap() {
        AcquireEvent::Waiting(placement) => assert_eq!(placement.position, 2),
        other => panic!("expected Waiting, got {other:?}"),
    }
    let released_at = Instant::now();
    assert!(
        store
            .release(&name(), &holder, &Caller::anyone())
            .await
            .unwrap()
    );
    (waiter, released_at)
}

/// Waits past `Waiting` events for the grant; the moment it came.
async fn granted_at(waiter: &mut mpsc::Receiver<Result<AcquireEvent>>) -> Instant {
    loop {
        match waiter.recv().await.unwrap().unwrap() {
            AcquireEvent::Waiting(_) => continue,
            AcquireEvent::Granted(delivery) => {
                delivery.deliver();
                return Instant::now();
            }
            other => panic!("expected Granted, got {other:?}"),
        }
    }
}

/// The release wakes the peer's entry, which never takes its permit (the peer is gone): this
/// replica checks it one grace after the wake-up, the store purges it, and the waiter behind it
/// is granted at that moment. One check, not overdue.
#[tokio::test(start_paused = true)]
async fn a_gone_replicas_woken_entry_is_purged_after_the_grace() {
    let replica = peer_replica(false);
    let (mut waiter, released_at) = peer_first_then_release(&replica).await;
    let granted = granted_at(&mut waiter).await;
    assert_eq!(granted - released_at, STALL_GRACE);
    let checks = replica.store().unstalls();
    assert_eq!(checks, [(released_at + STALL_GRACE, false)]);
}

/// The peer lives but never takes its permit (it lost the entry's caller, or every report):
/// checked every 250 ms from one grace after the wake-up, each time repeating the wake-up, and
/// taken out as overdue 5 s after the wake-up; the waiter behind it is granted then.
#[tokio::test(start_paused = true)]
async fn a_live_replicas_stalled_entry_is_taken_out_when_overdue() {
    let replica = peer_replica(true);
    let (mut waiter, released_at) = peer_first_then_release(&replica).await;
    let granted = granted_at(&mut waiter).await;
    let checks = replica.store().unstalls();
    let overdue_at = released_at + STALL_LIMIT;
    assert_eq!(granted, overdue_at);
    let expected =
        1 + ((STALL_LIMIT - STALL_GRACE).as_millis() / STALL_CHECK_INTERVAL.as_millis()) as usize;
    assert_eq!(checks.len(), expected, "{checks:?}");
    for (index, (at, overdue)) in checks.iter().enumerate() {
        assert_eq!(
            *at,
            released_at + STALL_GRACE + STALL_CHECK_INTERVAL * index as u32
        );
        assert_eq!(*overdue, *at == overdue_at);
    }
}
