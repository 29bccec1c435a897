//! The tending task's check on other replicas' entries that stall a free permit, on the paused
//! clock: the embedded store plays the shared queue, with an entry of a "peer" replica first in
//! line, and [`Peer`] plays the part of the Redis store's `unstall` (the peer's heartbeat).

use std::sync::Mutex;

use super::{
    tending::{STALL_CHECK_INTERVAL, STALL_GRACE, STALL_LIMIT},
    *,
};
use crate::{
    error::Result,
    lease::{
        Description, LeasePage, Limits, ListPrefix, QueueStatus, RenewOutcome, Revoked,
        StoreEvents, limits::AcquireFields,
    },
    store::MemoryStore,
};

const NAME: &str = "jobs/nightly";
const PEER_ENTRY: &str = "peer:1";

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
struct Peer {
    store: Arc<MemoryStore>,
    alive: bool,
    /// Each `unstall` call: when, and whether overdue.
    checks: Mutex<Vec<(Instant, bool)>>,
}

impl Peer {
    fn replica(alive: bool) -> Arc<Replica<Self>> {
        let events = StoreEvents::new();
        let peer = Peer {
            store: MemoryStore::new(16, events.clone()),
            alive,
            checks: Mutex::new(Vec::new()),
        };
        Replica::new(Arc::new(peer), events)
    }
}

impl LeaseStore for Peer {
    async fn try_acquire(
        &self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        entry: Option<&str>,
    ) -> Result<AcquireOutcome> {
        self.store.try_acquire(request, lease_id, entry).await
    }
    async fn renew(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        ttl: Option<Duration>,
        caller: &Caller,
    ) -> Result<RenewOutcome> {
        self.store.renew(name, lease_id, ttl, caller).await
    }
    async fn release(&self, name: &LeaseName, lease_id: &LeaseId, caller: &Caller) -> Result<bool> {
        self.store.release(name, lease_id, caller).await
    }
    async fn describe(&self, name: &LeaseName) -> Result<Description> {
        self.store.describe(name).await
    }
    async fn leave(&self, name: &LeaseName, entries: &[String]) -> Result<()> {
        self.store.leave(name, entries).await
    }
    async fn queued_here(&self, name: &LeaseName) -> Result<Vec<String>> {
        // The peer's entries are not this replica's.
        let queued = self.store.queued_here(name).await?;
        Ok(queued
            .into_iter()
            .filter(|entry| entry != PEER_ENTRY)
            .collect())
    }
    async fn queue_status(&self, name: &LeaseName, entries: &[String]) -> Result<QueueStatus> {
        self.store.queue_status(name, entries).await
    }
    async fn unstall(&self, name: &LeaseName, stalled: &[String], overdue: bool) -> Result<usize> {
        self.checks.lock().unwrap().push((Instant::now(), overdue));
        let taken: Vec<String> = match (self.alive, overdue) {
            (true, false) => Vec::new(),
            _ => stalled.to_vec(),
        };
        self.store.leave(name, &taken).await?;
        Ok(taken.len())
    }
    async fn revoke(
        &self,
        name: &LeaseName,
        fencing_token: Option<u64>,
        reason: &str,
    ) -> Result<Vec<Revoked>> {
        self.store.revoke(name, fencing_token, reason).await
    }
    async fn list(
        &self,
        prefix: &ListPrefix,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<LeasePage> {
        self.store.list(prefix, page_size, page_token).await
    }
    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

/// A holder, then the peer's entry first in line, then a waiter of this replica (position 2);
/// the holder releases. Returns the waiter's events and the moment of the release.
async fn peer_first_then_release(
    store: &Arc<Replica<Peer>>,
) -> (mpsc::Receiver<Result<AcquireEvent>>, Instant) {
    let holder = LeaseId::generate();
    assert!(matches!(
        store.try_acquire(&request(0), &holder, None).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    let peer = store
        .try_acquire(&request(60_000), &LeaseId::generate(), Some(PEER_ENTRY))
        .await
        .unwrap();
    assert!(
        matches!(peer, AcquireOutcome::Busy { position: 1, .. }),
        "{peer:?}"
    );
    let mut waiter = acquire(store.clone(), request(60_000), Shutdown::never());
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
    let store = Peer::replica(false);
    let (mut waiter, released_at) = peer_first_then_release(&store).await;
    let granted = granted_at(&mut waiter).await;
    assert_eq!(granted - released_at, STALL_GRACE);
    let checks = store.checks.lock().unwrap().clone();
    assert_eq!(checks, [(released_at + STALL_GRACE, false)]);
}

/// The peer lives but never takes its permit (it lost the entry's caller, or every report):
/// checked every 250 ms from one grace after the wake-up, each time repeating the wake-up, and
/// taken out as overdue 5 s after the wake-up; the waiter behind it is granted then.
#[tokio::test(start_paused = true)]
async fn a_live_replicas_stalled_entry_is_taken_out_when_overdue() {
    let store = Peer::replica(true);
    let (mut waiter, released_at) = peer_first_then_release(&store).await;
    let granted = granted_at(&mut waiter).await;
    let checks = store.checks.lock().unwrap().clone();
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
