//! The waiting policy of `Acquire`: try, and while the lease is busy, sleep until the holder
//! releases it (a push from the store), its expiry passes (a local timer), the caller gives up, or
//! the wait runs out. No polling loop: every wake-up has a cause.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    sync::{mpsc, watch},
    time::{Instant, sleep_until},
};

use super::{AcquireOutcome, Grant, HolderInfo, LeaseId, LeaseName, LeaseStore, ValidatedAcquire};
use crate::{
    error::{Error, Result},
    metrics::metrics,
    shutdown::Shutdown,
};

/// Redis expires a key one millisecond after its PTTL reaches zero; wake a little later than the
/// holder's expiry so that the retry finds the lease free rather than busy for 0 ms more.
const EXPIRY_SLACK: Duration = Duration::from_millis(2);

/// What the caller of [`acquire`] sees, in order: zero or more `Waiting`, then one terminal event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireEvent {
    /// The lease is busy; the server waits. Sent when waiting starts and when the holder changes.
    Waiting(HolderInfo),
    /// Terminal: the caller holds the lease.
    Granted(Grant),
    /// Terminal: the lease stayed busy for the whole wait.
    NotGranted(HolderInfo),
}

/// Per-name wake-ups for waiting callers, fed by the store whenever a lease is released.
///
/// Each name with waiters has a generation counter in a `watch` channel; a release bumps it. A
/// waiter subscribes *before* it tries the store, so a release between its try and its sleep is
/// never missed.
#[derive(Debug)]
pub struct ReleaseWatchers {
    by_name: Mutex<HashMap<String, watch::Sender<u64>>>,
    max_waiters_per_name: usize,
}

impl ReleaseWatchers {
    /// A registry that refuses more than `max_waiters_per_name` concurrent waiters on one name.
    pub fn new(max_waiters_per_name: usize) -> Self {
        ReleaseWatchers {
            by_name: Mutex::new(HashMap::new()),
            max_waiters_per_name,
        }
    }

    /// Subscribes to releases of `name` until the returned guard drops.
    pub fn watch(&self, name: &LeaseName) -> Result<ReleaseWatch<'_>> {
        let mut by_name = self.by_name.lock().expect("release watchers lock poisoned");
        let sender = by_name
            .entry(name.as_str().to_owned())
            .or_insert_with(|| watch::channel(0).0);
        if sender.receiver_count() >= self.max_waiters_per_name {
            return Err(Error::ResourceExhausted(format!(
                "too many callers are waiting for this lease (limit {})",
                self.max_waiters_per_name
            )));
        }
        metrics().waiters.inc();
        Ok(ReleaseWatch {
            watchers: self,
            name: name.as_str().to_owned(),
            receiver: sender.subscribe(),
        })
    }

    /// Wakes every waiter of `name`.
    pub fn notify(&self, name: &str) {
        let by_name = self.by_name.lock().expect("release watchers lock poisoned");
        if let Some(sender) = by_name.get(name) {
            sender.send_modify(|generation| *generation += 1);
        }
    }

    /// Wakes every waiter of every name: after the store may have missed release events (a
    /// pub/sub reconnect), each waiter re-checks its lease.
    pub fn notify_all(&self) {
        let by_name = self.by_name.lock().expect("release watchers lock poisoned");
        for sender in by_name.values() {
            sender.send_modify(|generation| *generation += 1);
        }
    }
}

/// One waiter's subscription to the releases of one name.
pub struct ReleaseWatch<'a> {
    watchers: &'a ReleaseWatchers,
    name: String,
    receiver: watch::Receiver<u64>,
}

impl ReleaseWatch<'_> {
    /// Resolves at the next release of the name after the subscription (or the last wait).
    pub async fn released(&mut self) {
        // The sender lives in the registry for as long as this receiver does, so this cannot fail.
        let _ = self.receiver.changed().await;
    }
}

impl Drop for ReleaseWatch<'_> {
    fn drop(&mut self) {
        metrics().waiters.dec();
        let mut by_name = self
            .watchers
            .by_name
            .lock()
            .expect("release watchers lock poisoned");
        // Our own receiver is still counted: remove the entry when we are its last waiter.
        if by_name
            .get(&self.name)
            .is_some_and(|sender| sender.receiver_count() <= 1)
        {
            by_name.remove(&self.name);
        }
    }
}

/// Runs one `Acquire`: returns the events as a channel fed by a spawned task. Dropping the
/// receiver cancels the wait; a grant that can no longer be delivered is released at once.
pub fn acquire<S: LeaseStore>(
    store: Arc<S>,
    request: ValidatedAcquire,
    shutdown: Shutdown,
) -> mpsc::Receiver<Result<AcquireEvent>> {
    let (events, receiver) = mpsc::channel(4);
    tokio::spawn(async move {
        let lease_id = LeaseId::generate();
        let outcome = wait_for_grant(&*store, &request, &lease_id, &events, &shutdown).await;
        match outcome {
            Ok(Some(AcquireEvent::Granted(grant))) => {
                if events.send(Ok(AcquireEvent::Granted(grant))).await.is_err() {
                    tracing::info!(name = %request.name, "caller left before the grant arrived; releasing");
                    release_quietly(&*store, &request.name, &lease_id).await;
                }
            }
            Ok(Some(event)) => {
                let _ = events.send(Ok(event)).await;
            }
            Ok(None) => {} // the caller left or the server stops; nothing to say
            Err(error) => {
                if matches!(error, Error::Unavailable(_)) {
                    // The store may have committed a grant we never heard of: undo it, in the
                    // background, with the same lease id (release is conditional and idempotent).
                    let store = store.clone();
                    let name = request.name.clone();
                    tokio::spawn(async move { release_quietly(&*store, &name, &lease_id).await });
                }
                let _ = events.send(Err(error)).await;
            }
        }
    });
    receiver
}

/// Tries until granted or the wait runs out. `Ok(None)`: the caller left.
async fn wait_for_grant<S: LeaseStore>(
    store: &S,
    request: &ValidatedAcquire,
    lease_id: &LeaseId,
    events: &mpsc::Sender<Result<AcquireEvent>>,
    shutdown: &Shutdown,
) -> Result<Option<AcquireEvent>> {
    let deadline = Instant::now() + request.wait;
    // Subscribe before the first try, so that a release right after it still wakes us.
    let mut release_watch = match request.wait.is_zero() {
        true => None,
        false => Some(store.release_watchers().watch(&request.name)?),
    };
    let mut last_reported: Option<(String, u64)> = None;
    loop {
        let outcome = store
            .try_acquire(&request.name, &request.holder, request.ttl, lease_id)
            .await?;
        let holder = match outcome {
            AcquireOutcome::Granted(grant) => return Ok(Some(AcquireEvent::Granted(grant))),
            AcquireOutcome::Busy(holder) => holder,
        };
        let now = Instant::now();
        if now >= deadline {
            return Ok(Some(AcquireEvent::NotGranted(holder)));
        }
        let holder_key = (holder.holder.clone(), holder.fencing_token);
        if last_reported.as_ref() != Some(&holder_key) {
            last_reported = Some(holder_key);
            if events
                .send(Ok(AcquireEvent::Waiting(holder.clone())))
                .await
                .is_err()
            {
                return Ok(None);
            }
        }
        let wake_at = match holder.expiry {
            Some(expiry) => {
                let remaining = Duration::from_millis(expiry.remaining_ms.max(0) as u64);
                deadline.min(now + remaining + EXPIRY_SLACK)
            }
            None => deadline, // no expiry: only a release or the deadline can end the wait
        };
        let release_watch = release_watch
            .as_mut()
            .expect("waiting implies a release watch");
        tokio::select! {
            _ = release_watch.released() => {}
            _ = sleep_until(wake_at) => {
                if wake_at < deadline {
                    metrics().expiries_seen.inc();
                }
            }
            _ = events.closed() => return Ok(None),
            _ = shutdown.fired() => return Err(Error::ShuttingDown),
        }
    }
}

/// Releases a lease whose grant could not be delivered; failures only shorten nothing, since the
/// lease expires by itself at its TTL.
async fn release_quietly<S: LeaseStore>(store: &S, name: &LeaseName, lease_id: &LeaseId) {
    for attempt in 0..3u32 {
        match store.release(name, lease_id).await {
            Ok(_) => return,
            Err(error) => {
                tracing::debug!(%name, attempt, %error, "could not release an undelivered grant");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{lease::Limits, shutdown, store::MemoryStore};

    const NAME: &str = "jobs/nightly";

    /// Grants `NAME` to "holder" for `ttl_ms`; returns its lease id and fencing token.
    async fn hold(store: &MemoryStore, ttl_ms: u64) -> (LeaseId, u64) {
        let lease_id = LeaseId::generate();
        let ttl = Duration::from_millis(ttl_ms);
        match store
            .try_acquire(&LeaseName(NAME.into()), "holder", ttl, &lease_id)
            .await
        {
            Ok(AcquireOutcome::Granted(grant)) => (lease_id, grant.fencing_token),
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    /// An Acquire of `NAME` by "waiter", validated as the server does.
    fn request(ttl_ms: i64, wait_ms: i64) -> ValidatedAcquire {
        let limits = Limits::default();
        limits
            .validate_acquire(NAME, "waiter".into(), ttl_ms, wait_ms)
            .unwrap()
    }

    /// How many callers are registered as waiting on `NAME`.
    fn waiters(store: &MemoryStore) -> usize {
        let by_name = store.release_watchers().by_name.lock().unwrap();
        by_name
            .get(NAME)
            .map_or(0, |sender| sender.receiver_count())
    }

    /// A waiter is told `Waiting` first, then granted the moment the holder releases: not at the
    /// holder's expiry.
    #[tokio::test(start_paused = true)]
    async fn a_release_wakes_the_waiter_at_once() {
        let store = MemoryStore::new(16);
        let (holder_id, holder_token) = hold(&store, 10_000).await;
        let mut events = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
        match events.recv().await.unwrap().unwrap() {
            AcquireEvent::Waiting(info) => assert_eq!(info.fencing_token, holder_token),
            other => panic!("expected Waiting, got {other:?}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            events.try_recv().is_err(),
            "granted while the lease was held"
        );
        let released_at = Instant::now();
        assert!(
            store
                .release(&LeaseName(NAME.into()), &holder_id)
                .await
                .unwrap()
        );
        match events.recv().await.unwrap().unwrap() {
            AcquireEvent::Granted(grant) => assert!(grant.fencing_token > holder_token),
            other => panic!("expected Granted, got {other:?}"),
        }
        assert_eq!(Instant::now(), released_at);
        assert_eq!(waiters(&store), 0);
    }

    /// With nobody releasing, the waiter wakes just after the holder's expiry (by `EXPIRY_SLACK`)
    /// and is granted then: no polling before, no long delay after.
    #[tokio::test(start_paused = true)]
    async fn the_holders_expiry_wakes_the_waiter() {
        let store = MemoryStore::new(16);
        let expiry = Instant::now() + Duration::from_secs(1);
        hold(&store, 1_000).await;
        let mut events = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
        assert!(matches!(
            events.recv().await.unwrap().unwrap(),
            AcquireEvent::Waiting(_)
        ));
        assert!(matches!(
            events.recv().await.unwrap().unwrap(),
            AcquireEvent::Granted(_)
        ));
        let granted_at = Instant::now();
        assert!(granted_at > expiry, "granted before the expiry");
        assert!(granted_at <= expiry + EXPIRY_SLACK + Duration::from_millis(1));
    }

    /// A lease that stays busy ends the wait at its deadline exactly, with the holder's info.
    #[tokio::test(start_paused = true)]
    async fn the_deadline_ends_the_wait_with_not_granted() {
        let store = MemoryStore::new(16);
        let (_, holder_token) = hold(&store, 60_000).await;
        let start = Instant::now();
        let mut events = acquire(store.clone(), request(10_000, 5_000), Shutdown::never());
        assert!(matches!(
            events.recv().await.unwrap().unwrap(),
            AcquireEvent::Waiting(_)
        ));
        match events.recv().await.unwrap().unwrap() {
            AcquireEvent::NotGranted(info) => {
                assert_eq!(info.holder, "holder");
                assert_eq!(info.fencing_token, holder_token);
            }
            other => panic!("expected NotGranted, got {other:?}"),
        }
        assert_eq!(Instant::now() - start, Duration::from_secs(5));
        assert_eq!(waiters(&store), 0);
    }

    /// `wait` zero tries once: an immediate answer, no `Waiting`, no registered waiter.
    #[tokio::test(start_paused = true)]
    async fn a_zero_wait_tries_once() {
        let store = MemoryStore::new(16);
        let start = Instant::now();
        let mut events = acquire(store.clone(), request(10_000, 0), Shutdown::never());
        assert!(matches!(
            events.recv().await.unwrap().unwrap(),
            AcquireEvent::Granted(_)
        ));
        let mut events = acquire(store.clone(), request(10_000, 0), Shutdown::never());
        assert!(matches!(
            events.recv().await.unwrap().unwrap(),
            AcquireEvent::NotGranted(_)
        ));
        assert_eq!(Instant::now(), start);
        assert_eq!(waiters(&store), 0);
    }

    /// A caller that leaves mid-wait (drops the receiver) is no longer counted as a waiter.
    #[tokio::test(start_paused = true)]
    async fn dropping_the_receiver_cancels_the_wait() {
        let store = MemoryStore::new(16);
        hold(&store, 60_000).await;
        let mut events = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
        assert!(matches!(
            events.recv().await.unwrap().unwrap(),
            AcquireEvent::Waiting(_)
        ));
        assert_eq!(waiters(&store), 1);
        drop(events);
        // Let the waiting task see the closed channel; 1 ms of virtual time, no real sleep.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(waiters(&store), 0);
    }

    /// A grant that can no longer be delivered (the caller already left) is released at once, so
    /// the lease does not stay held by nobody until its TTL.
    #[tokio::test(start_paused = true)]
    async fn an_undelivered_grant_is_released() {
        let store = MemoryStore::new(16);
        let mut release_watch = store
            .release_watchers()
            .watch(&LeaseName(NAME.into()))
            .unwrap();
        // The receiver is gone before the task runs: it is granted the free lease, cannot say so.
        drop(acquire(
            store.clone(),
            request(60_000, 60_000),
            Shutdown::never(),
        ));
        // The release wakes this watch, which proves a grant was made and then undone.
        tokio::time::timeout(Duration::from_millis(1), release_watch.released())
            .await
            .expect("the undelivered grant was not released");
        assert_eq!(store.describe(&LeaseName(NAME.into())).await.unwrap(), None);
    }

    /// Shutdown ends a waiter with `ShuttingDown` at once and removes it.
    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait() {
        let store = MemoryStore::new(16);
        hold(&store, 60_000).await;
        let (trigger, shutdown) = shutdown::channel();
        let mut events = acquire(store.clone(), request(10_000, 60_000), shutdown);
        assert!(matches!(
            events.recv().await.unwrap().unwrap(),
            AcquireEvent::Waiting(_)
        ));
        let start = Instant::now();
        trigger.fire();
        assert!(matches!(
            events.recv().await.unwrap(),
            Err(Error::ShuttingDown)
        ));
        assert_eq!(Instant::now(), start);
        assert_eq!(waiters(&store), 0);
    }
}
