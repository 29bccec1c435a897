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
