//! The waiting policy of `Acquire`: try; while the lease is busy, wait in the store's queue
//! until this caller is first in line and the lease is free (a wake-up from the store), the
//! holder's expiry passes while this caller is first (a local timer), the caller gives up, or the
//! wait runs out. No polling loop: every attempt has a cause. ARCHITECTURE.md, "Fair waiting".

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::{Notify, mpsc},
    time::{Instant, MissedTickBehavior, sleep_until},
};

use super::{
    AcquireOutcome, Grant, LeaseId, LeaseName, LeaseStore, Occupancy, Placement, QueueStatus,
    Replica, ValidatedAcquire, waiters::Ticket,
};
use crate::{
    error::{Error, Result},
    metrics::metrics,
    shutdown::Shutdown,
};

/// Redis expires a key one millisecond after its PTTL reaches zero; wake a little later than the
/// holder's expiry so that the retry finds the lease free rather than busy for 0 ms more.
const EXPIRY_SLACK: Duration = Duration::from_millis(2);

/// How often each name with waiters here renews this replica's queue entries and re-reads their
/// placements, whatever the wake-ups say. The store drops the entries of a replica silent for
/// several of these; it also bounds how late a waiter learns of a wake-up that was lost.
pub const TEND_INTERVAL: Duration = Duration::from_millis(500);

/// A name's tending task (and its wake-up subscription) outlives its last waiter here by this
/// long, so that a name waited on again and again is not subscribed and unsubscribed each time.
const LINGER: Duration = Duration::from_secs(1);

/// Entries removed from a queue in one store call.
const LEAVE_BATCH: usize = 256;

/// What the caller of [`acquire`] sees, in order: zero or more `Waiting`, then one terminal event.
#[derive(Debug)]
pub enum AcquireEvent {
    /// The caller waits in the queue. Sent when waiting starts and whenever its position or the
    /// holder changes.
    Waiting(Placement),
    /// Terminal: the caller holds the lease, once it takes the grant out of the delivery.
    Granted(GrantDelivery),
    /// Terminal: not granted (at once for a try-once call, or the wait ran out): who holds it.
    /// No holder: the lease is free, but someone ahead in the queue gets it first.
    NotGranted(Occupancy),
}

/// A grant on its way to the caller. Dropped before [`GrantDelivery::deliver`] (the caller left
/// while it sat in the stream's buffer), it releases the lease, so that the next in line gets it
/// now rather than after a whole TTL.
pub struct GrantDelivery {
    grant: Grant,
    release: Option<Box<dyn FnOnce() + Send>>,
}

impl GrantDelivery {
    /// The grant, while it is still undelivered.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Hands the grant over: from here on, the caller is responsible for the lease.
    pub fn deliver(mut self) -> Grant {
        self.release = None;
        self.grant.clone()
    }
}

impl Drop for GrantDelivery {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl std::fmt::Debug for GrantDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("GrantDelivery").field(&self.grant).finish()
    }
}

/// How a wait ends.
enum Terminal {
    Granted(Grant),
    NotGranted(Occupancy),
}

/// Runs one `Acquire`: returns the events as a channel fed by a spawned task. Dropping the
/// receiver cancels the wait; a grant that can no longer be delivered is released at once.
pub fn acquire<S: LeaseStore>(
    store: Arc<Replica<S>>,
    request: ValidatedAcquire,
    shutdown: Shutdown,
) -> mpsc::Receiver<Result<AcquireEvent>> {
    let (events, receiver) = mpsc::channel(4);
    tokio::spawn(async move {
        let lease_id = LeaseId::generate();
        let outcome = wait_for_grant(&store, &request, &lease_id, &events, &shutdown).await;
        match outcome {
            Ok(Some(Terminal::Granted(grant))) => {
                let delivery = delivery(&store, &request.name, grant);
                // If the caller left, the unsent delivery drops here and releases the lease.
                let _ = events.send(Ok(AcquireEvent::Granted(delivery))).await;
            }
            Ok(Some(Terminal::NotGranted(occupancy))) => {
                let _ = events.send(Ok(AcquireEvent::NotGranted(occupancy))).await;
            }
            Ok(None) => {} // the caller left or the server stops; nothing to say
            Err(error) => {
                undo_if_unknown(&store, &request.name, &lease_id, &error);
                let _ = events.send(Err(error)).await;
            }
        }
    });
    receiver
}

/// Runs one try-once `Acquire` (`wait` zero) to its terminal event in the caller's own task: one
/// store call, no spawned task and no channel, so that a server can answer before it opens the
/// response stream. If the caller leaves while the store call is in flight (the future is
/// dropped), the grant it may have made is released.
pub async fn try_once<S: LeaseStore>(
    store: &Arc<Replica<S>>,
    request: &ValidatedAcquire,
) -> Result<AcquireEvent> {
    let lease_id = LeaseId::generate();
    let in_flight = ReleaseIfDropped {
        store,
        name: &request.name,
        lease_id: &lease_id,
    };
    let outcome = store.try_acquire(request, &lease_id, None).await;
    in_flight.disarm();
    match outcome {
        Ok(AcquireOutcome::Granted(grant)) => {
            Ok(AcquireEvent::Granted(delivery(store, &request.name, grant)))
        }
        Ok(AcquireOutcome::Busy { occupancy, .. }) => Ok(AcquireEvent::NotGranted(occupancy)),
        Ok(refused) => Err(refusal(request, refused)),
        Err(error) => {
            undo_if_unknown(store, &request.name, &lease_id, &error);
            Err(error)
        }
    }
}

/// Releases, in the background, the grant that a store call dropped mid-flight may have made.
struct ReleaseIfDropped<'a, S: LeaseStore> {
    store: &'a Arc<Replica<S>>,
    name: &'a LeaseName,
    lease_id: &'a LeaseId,
}

impl<S: LeaseStore> ReleaseIfDropped<'_, S> {
    /// The store call completed: its outcome is handled by the caller.
    fn disarm(self) {
        std::mem::forget(self); // holds only references: nothing leaks
    }
}

impl<S: LeaseStore> Drop for ReleaseIfDropped<'_, S> {
    fn drop(&mut self) {
        tracing::debug!(name = %self.name, "caller left during its acquire attempt; releasing");
        release_in_background(self.store, self.name, self.lease_id);
    }
}

/// A grant ready for its caller, released if it never reaches them.
fn delivery<S: LeaseStore>(
    store: &Arc<Replica<S>>,
    name: &LeaseName,
    grant: Grant,
) -> GrantDelivery {
    let (store, name) = (store.clone(), name.clone());
    let lease_id = grant.lease_id.clone();
    GrantDelivery {
        grant,
        release: Some(Box::new(move || {
            tracing::debug!(%name, "caller left before the grant reached it; releasing");
            release_in_background(&store, &name, &lease_id);
        })),
    }
}

/// After a failed store call: the store may have committed a grant we never heard of (the
/// answer was lost). Undoes it in the background with the same lease id (release is conditional
/// and idempotent).
fn undo_if_unknown<S: LeaseStore>(
    store: &Arc<Replica<S>>,
    name: &LeaseName,
    lease_id: &LeaseId,
    error: &Error,
) {
    if matches!(error, Error::Unavailable(_)) {
        release_in_background(store, name, lease_id);
    }
}

/// Releases `lease_id`'s grant of `name` in a task of its own, quietly (see [`release_quietly`]).
fn release_in_background<S: LeaseStore>(
    store: &Arc<Replica<S>>,
    name: &LeaseName,
    lease_id: &LeaseId,
) {
    let (store, name, lease_id) = (store.clone(), name.clone(), lease_id.clone());
    tokio::spawn(async move { release_quietly(&*store, &name, &lease_id).await });
}

/// The error for an attempt the store refused outright: the queue is full, or the limit differs
/// from the one in force.
fn refusal(request: &ValidatedAcquire, outcome: AcquireOutcome) -> Error {
    match outcome {
        AcquireOutcome::QueueFull { limit } => Error::ResourceExhausted(format!(
            "too many callers are waiting for this lease (limit {limit})"
        )),
        AcquireOutcome::LimitMismatch { limit } => Error::FailedPrecondition(format!(
            "limit {} differs from the limit in force, {limit}: every holder of a name must ask \
             for the same limit",
            request.limit
        )),
        other => Error::Internal {
            name: request.name.to_string(),
            detail: format!("{other:?} is not a refusal"),
        },
    }
}

/// What a `Waiting` message told the caller. A change of any of it is sent again.
#[derive(Debug, PartialEq, Eq)]
struct Shown {
    position: u32,
    /// Permits held.
    held: u32,
    /// The holder string and token of the permit that frees soonest.
    holder: Option<(String, u64)>,
}

/// Tries until granted or the wait runs out. `Ok(None)`: the caller left.
async fn wait_for_grant<S: LeaseStore>(
    store: &Arc<Replica<S>>,
    request: &ValidatedAcquire,
    lease_id: &LeaseId,
    events: &mpsc::Sender<Result<AcquireEvent>>,
    shutdown: &Shutdown,
) -> Result<Option<Terminal>> {
    let deadline = Instant::now() + request.wait;
    // A caller that may wait takes a ticket before its first attempt, so that the attempt queues
    // it if the lease is busy, and every wake-up after it reaches this caller.
    let mut ticket = match request.wait.is_zero() {
        true => None,
        false => Some(join(store, &request.name)),
    };
    let mut reported: Option<Shown> = None;
    loop {
        let entry = ticket.as_ref().map(Ticket::entry);
        let outcome = match store.try_acquire(request, lease_id, entry).await {
            Ok(outcome) => outcome,
            Err(error) => {
                // The store may still run this attempt after the caller has its error (a stall
                // past the timeout) and queue an entry that nobody here will take.
                if entry.is_some() && matches!(error, Error::Unavailable(_)) {
                    store.waiters().reconcile(request.name.as_str());
                }
                return Err(error);
            }
        };
        let mut placement = match outcome {
            AcquireOutcome::Granted(grant) => {
                if let Some(ticket) = ticket.take() {
                    ticket.granted();
                }
                return Ok(Some(Terminal::Granted(grant)));
            }
            AcquireOutcome::Busy {
                occupancy,
                position,
            } => Placement {
                position,
                occupancy,
            },
            refused => return Err(refusal(request, refused)),
        };
        let Some(ticket) = ticket.as_mut() else {
            return Ok(Some(Terminal::NotGranted(placement.occupancy)));
        };
        let wake = ticket.wake_signal();
        // Wait in line until there is a reason to try again.
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(Some(Terminal::NotGranted(placement.occupancy)));
            }
            let occupancy = &placement.occupancy;
            let shown = Shown {
                position: placement.position,
                held: occupancy.held,
                holder: occupancy
                    .holder
                    .as_ref()
                    .map(|h| (h.holder.clone(), h.fencing_token)),
            };
            if reported.as_ref() != Some(&shown) {
                reported = Some(shown);
                let waiting = AcquireEvent::Waiting(placement.clone());
                if events.send(Ok(waiting)).await.is_err() {
                    return Ok(None);
                }
            }
            // Only the first in line acts on the expiry of the permit that frees soonest; the
            // others move up when it is granted.
            let no_permit_free = placement.occupancy.free_permits(request.limit) == 0;
            let wake_at = match (&placement.occupancy.holder, placement.position) {
                (Some(holder), 1) if no_permit_free => match holder.expiry {
                    Some(expiry) => {
                        let remaining = Duration::from_millis(expiry.remaining_ms.max(0) as u64);
                        deadline.min(now + remaining + EXPIRY_SLACK)
                    }
                    None => deadline, // no expiry: only a release or the deadline can end the wait
                },
                _ => deadline,
            };
            tokio::select! {
                _ = wake.notified() => break,
                moved = ticket.moved() => {
                    placement = moved;
                    // Dropped from the queue (purged, or Redis lost it): join again. Close enough
                    // to the front that a free permit is this caller's: take it.
                    let free = placement.occupancy.free_permits(request.limit);
                    if placement.position == 0 || placement.position <= free {
                        break;
                    }
                }
                _ = sleep_until(wake_at) => {
                    if wake_at < deadline {
                        metrics().expiries_seen.inc();
                    }
                    break;
                }
                _ = events.closed() => return Ok(None),
                _ = shutdown.fired() => return Err(Error::ShuttingDown),
            }
        }
    }
}

/// Registers a waiter of `name` on this replica; the first one starts the name's tending task.
fn join<S: LeaseStore>(store: &Arc<Replica<S>>, name: &LeaseName) -> Ticket {
    let (ticket, first_here) = store.waiters().join(name);
    if let Some(tend) = first_here {
        tokio::spawn(tend_queue(store.clone(), name.clone(), tend));
    }
    ticket
}

/// Looks after this replica's waiters of one name while there are any (and [`LINGER`] after):
/// listens for the name's wake-ups, removes the entries of callers that left (and, when asked to
/// reconcile, those of this replica that no caller here owns), and every [`TEND_INTERVAL`] (and
/// at once when the queue moved) keeps the entries alive and hands each waiter its new placement.
async fn tend_queue<S: LeaseStore>(store: Arc<Replica<S>>, name: LeaseName, tend: Arc<Notify>) {
    store.listen(&name);
    let mut ticks = tokio::time::interval(TEND_INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is immediate: the first waiter's attempt just queued it
    let mut idle_since: Option<Instant> = None;
    loop {
        let tick = tokio::select! {
            _ = tend.notified() => false,
            _ = ticks.tick() => true,
        };
        let forget_if_idle = idle_since.is_some_and(|since| since.elapsed() >= LINGER);
        let Some(chores) = store.waiters().chores(name.as_str(), forget_if_idle) else {
            break;
        };
        let idle = chores.entries.is_empty() && chores.leaving.is_empty() && !chores.reconcile;
        idle_since = match idle {
            true => idle_since.or(Some(Instant::now())),
            false => None,
        };
        for batch in chores.leaving.chunks(LEAVE_BATCH) {
            if let Err(error) = store.leave(&name, batch).await {
                tracing::debug!(%name, %error, "could not take waiters that left out of the queue; retrying");
                store.waiters().retry_leaving(name.as_str(), batch.to_vec());
            }
        }
        if tick && chores.reconcile {
            match reconcile(&*store, &name).await {
                Ok(()) => store.waiters().reconciled(name.as_str()),
                Err(error) => {
                    tracing::debug!(%name, %error, "could not reconcile the queue with the waiters here; retrying");
                }
            }
        }
        if (tick || chores.moved) && !chores.entries.is_empty() {
            match store.queue_status(&name, &chores.entries).await {
                Ok(status) => place(&*store, &name, chores.entries, status),
                Err(error) => tracing::debug!(%name, %error, "could not read the queue"),
            }
        }
    }
    store.unlisten(&name);
}

/// Takes out of the queue of `name` the entries of this replica that no caller here owns: those
/// of attempts that ran in the store after their callers had gone (their outcome unknown).
async fn reconcile<S: LeaseStore>(store: &Replica<S>, name: &LeaseName) -> Result<()> {
    let queued = store.queued_here(name).await?;
    let callerless = store.waiters().without_caller(name.as_str(), queued);
    if callerless.is_empty() {
        return Ok(());
    }
    tracing::info!(%name, entries = callerless.len(), "removing queue entries whose callers are gone");
    metrics()
        .callerless_entries_removed
        .inc_by(callerless.len() as u64);
    for batch in callerless.chunks(LEAVE_BATCH) {
        store.leave(name, batch).await?;
    }
    Ok(())
}

/// Hands each waiter its placement, and wakes the first in line if the lease is free (with a
/// counting lease, each caller close enough to the front that a free permit is its own). Waking
/// a caller whose placement did not change matters: it may have missed its wake-up.
fn place<S: LeaseStore>(
    store: &Replica<S>,
    name: &LeaseName,
    entries: Vec<String>,
    status: QueueStatus,
) {
    let QueueStatus {
        occupancy,
        positions,
    } = status;
    let free = occupancy.free_for_queue();
    let mut to_wake = Vec::new();
    let placements = entries
        .into_iter()
        .zip(positions)
        .inspect(|(entry, position)| {
            if (1..=free).contains(position) {
                to_wake.push(entry.clone());
            }
        })
        .map(|(entry, position)| {
            let occupancy = occupancy.clone();
            (
                entry,
                Placement {
                    position,
                    occupancy,
                },
            )
        })
        .collect();
    store.waiters().place(name.as_str(), placements);
    for entry in to_wake {
        store.waiters().wake(name.as_str(), &entry);
    }
}

/// Releases a lease whose grant could not be delivered; failures only shorten nothing, since the
/// lease expires by itself at its TTL.
async fn release_quietly<S: LeaseStore>(store: &Replica<S>, name: &LeaseName, lease_id: &LeaseId) {
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
    use crate::{
        lease::{Limits, limits::AcquireFields},
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
    /// holder) when busy, FAILED_PRECONDITION for another limit; a grant whose delivery is
    /// dropped is released, so the name is free again at once.
    #[tokio::test(start_paused = true)]
    async fn try_once_answers_at_once_and_releases_an_undelivered_grant() {
        let store = test_replica(16);
        let (_, token) = hold(&store, 10_000).await;
        match try_once(&store, &request(10_000, 0)).await.unwrap() {
            AcquireEvent::NotGranted(occupancy) => {
                assert_eq!(occupancy.holder.map(|h| h.fencing_token), Some(token));
            }
            other => panic!("expected NotGranted, got {other:?}"),
        }
        let mut counting = request(10_000, 0);
        counting.limit = 3;
        let refused = try_once(&store, &counting).await.unwrap_err();
        assert!(
            matches!(refused, Error::FailedPrecondition(_)),
            "{refused:?}"
        );

        let free = test_replica(16);
        let AcquireEvent::Granted(delivery) = try_once(&free, &request(10_000, 0)).await.unwrap()
        else {
            panic!("expected a grant");
        };
        drop(delivery);
        tokio::task::yield_now().await; // the background release
        let described = free.describe(&name()).await.unwrap();
        assert!(described.holders.is_empty(), "{described:?}");
    }

    /// A waiter is told `Waiting` (first in line) first, then granted the moment the holder
    /// releases: not at the holder's expiry.
    #[tokio::test(start_paused = true)]
    async fn a_release_wakes_the_waiter_at_once() {
        let store = test_replica(16);
        let (holder_id, holder_token) = hold(&store, 10_000).await;
        let mut events = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
        assert_eq!(next_waiting(&mut events).await, (1, holder_token));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            events.try_recv().is_err(),
            "granted while the lease was held"
        );
        let released_at = Instant::now();
        assert!(store.release(&name(), &holder_id).await.unwrap());
        match events.recv().await.unwrap().unwrap() {
            AcquireEvent::Granted(grant) => assert!(grant.deliver().fencing_token > holder_token),
            other => panic!("expected Granted, got {other:?}"),
        }
        assert_eq!(Instant::now(), released_at);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(store.waiters().count(), 0);
    }

    /// Waiters are granted in the order they queued, each told its position, and each moves up
    /// as the ones ahead are served.
    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_first_come_first_served() {
        let store = test_replica(16);
        let (mut holder_id, _) = hold(&store, 60_000).await;
        let mut waiters = Vec::new();
        for expected in 1..=3 {
            let mut events = acquire(store.clone(), request(60_000, 60_000), Shutdown::never());
            assert_eq!(next_waiting(&mut events).await.0, expected);
            waiters.push(events);
        }
        for served in 0..3 {
            assert!(store.release(&name(), &holder_id).await.unwrap());
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
        let store = test_replica(16);
        let (holder_id, _) = hold(&store, 60_000).await;
        let mut waiter = acquire(store.clone(), request(60_000, 60_000), Shutdown::never());
        next_waiting(&mut waiter).await;
        // Released and retried in the same instant, before the waiter's task runs.
        assert!(store.release(&name(), &holder_id).await.unwrap());
        let outcome = store
            .try_acquire(&request(1_000, 0), &LeaseId::generate(), None)
            .await
            .unwrap();
        assert_eq!(
            outcome,
            AcquireOutcome::Busy {
                occupancy: Occupancy::free(),
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
        let store = test_replica(16);
        let expiry = Instant::now() + Duration::from_secs(1);
        hold(&store, 1_000).await;
        let mut events = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
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
        let store = test_replica(16);
        let (_, holder_token) = hold(&store, 60_000).await;
        let start = Instant::now();
        let mut events = acquire(store.clone(), request(10_000, 5_000), Shutdown::never());
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
        assert_eq!(store.waiters().count(), 0);
        assert_eq!(queued(&store).await, 0);
    }

    /// `wait` zero tries once: an immediate answer, no `Waiting`, no registered waiter.
    #[tokio::test(start_paused = true)]
    async fn a_zero_wait_tries_once() {
        let store = test_replica(16);
        let start = Instant::now();
        let mut events = acquire(store.clone(), request(10_000, 0), Shutdown::never());
        next_grant(&mut events).await;
        let mut events = acquire(store.clone(), request(10_000, 0), Shutdown::never());
        assert!(matches!(
            events.recv().await.unwrap().unwrap(),
            AcquireEvent::NotGranted(Occupancy {
                holder: Some(_),
                ..
            })
        ));
        assert_eq!(Instant::now(), start);
        assert_eq!(store.waiters().count(), 0);
        assert_eq!(queued(&store).await, 0);
    }

    /// How many entries the store's queue of `NAME` holds.
    async fn queued(store: &MemoryStore) -> usize {
        store.queued_here(&name()).await.unwrap().len()
    }

    /// A caller that leaves mid-wait (drops the receiver) leaves the queue, and the one behind it
    /// moves up.
    #[tokio::test(start_paused = true)]
    async fn dropping_the_receiver_leaves_the_queue() {
        let store = test_replica(16);
        hold(&store, 60_000).await;
        let mut first = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
        assert_eq!(next_waiting(&mut first).await.0, 1);
        let mut second = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
        assert_eq!(next_waiting(&mut second).await.0, 2);
        assert_eq!(store.waiters().count(), 2);
        drop(first);
        assert_eq!(next_waiting(&mut second).await.0, 1);
        assert_eq!(store.waiters().count(), 1);
        assert_eq!(queued(&store).await, 1);
    }

    /// A grant that can no longer be delivered (the caller already left) is released at once, so
    /// the lease does not stay held by nobody until its TTL.
    #[tokio::test(start_paused = true)]
    async fn an_undelivered_grant_is_released() {
        let store = test_replica(16);
        // The receiver is gone before the task runs: it is granted the free lease, cannot say so.
        drop(acquire(
            store.clone(),
            request(60_000, 60_000),
            Shutdown::never(),
        ));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(store.describe(&name()).await.unwrap().holders.is_empty());
    }

    /// A grant that reached the stream's buffer but was never taken out (the caller's cancel
    /// arrived first) is released when the stream is dropped, and the next in line gets it.
    #[tokio::test(start_paused = true)]
    async fn a_grant_left_in_the_stream_buffer_is_released_to_the_next() {
        let store = test_replica(16);
        let (holder_id, _) = hold(&store, 60_000).await;
        let mut first = acquire(store.clone(), request(60_000, 60_000), Shutdown::never());
        next_waiting(&mut first).await;
        let mut second = acquire(store.clone(), request(60_000, 60_000), Shutdown::never());
        next_waiting(&mut second).await;
        assert!(store.release(&name(), &holder_id).await.unwrap());
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
    async fn queue_callerless_entry(store: &Replica<MemoryStore>) -> String {
        let entry = format!("{}:999999", store.waiters().replica());
        let outcome = store
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
        let store = test_replica(16);
        let (holder_id, _) = hold(&store, 60_000).await;
        let mut keeper = acquire(store.clone(), request(60_000, 60_000), Shutdown::never());
        assert_eq!(next_waiting(&mut keeper).await.0, 1);
        let ghost = queue_callerless_entry(&store).await;
        let mut waiter = acquire(store.clone(), request(60_000, 60_000), Shutdown::never());
        assert_eq!(next_waiting(&mut waiter).await.0, 3);
        // The keeper leaves: the ghost is now first in line, then the waiter.
        drop(keeper);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(queued(&store).await, 2);

        let released_at = Instant::now();
        assert!(store.release(&name(), &holder_id).await.unwrap());
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
    /// here (twice, a tending interval apart): a callerless entry goes, a live one stays.
    #[tokio::test(start_paused = true)]
    async fn reconciling_removes_only_entries_without_a_caller() {
        let store = test_replica(16);
        hold(&store, 60_000).await;
        let mut waiter = acquire(store.clone(), request(60_000, 60_000), Shutdown::never());
        assert_eq!(next_waiting(&mut waiter).await.0, 1);
        let ghost = queue_callerless_entry(&store).await;
        // Not woken and not reconciled: it stays. (Halfway between two tendings from here on.)
        tokio::time::sleep(TEND_INTERVAL * 3 + TEND_INTERVAL / 2).await;
        assert_eq!(queued(&store).await, 2);

        store.waiters().reconcile(NAME);
        tokio::time::sleep(TEND_INTERVAL).await;
        let queued = store.queued_here(&name()).await.unwrap();
        assert_eq!(queued.len(), 1, "{queued:?}");
        assert!(!queued.contains(&ghost));
        // The second round, a tending interval later, takes out an entry that came after the
        // first (a late attempt behind other commands); the waiter still waits, first.
        let ghost = queue_callerless_entry(&store).await;
        tokio::time::sleep(TEND_INTERVAL).await;
        assert!(!store.queued_here(&name()).await.unwrap().contains(&ghost));
        assert!(matches!(
            waiter.try_recv(),
            Err(mpsc::error::TryRecvError::Empty)
        ));
        assert_eq!(store.waiters().count(), 1);
    }

    /// The queue is bounded: past `max_waiters_per_name`, a waiter is refused with
    /// `ResourceExhausted`; a try-once caller still gets its answer.
    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_more_waiters() {
        let store = test_replica(2);
        hold(&store, 60_000).await;
        let mut kept = Vec::new();
        for _ in 0..2 {
            let mut events = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
            next_waiting(&mut events).await;
            kept.push(events);
        }
        let mut refused = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
        assert!(matches!(
            refused.recv().await.unwrap(),
            Err(Error::ResourceExhausted(_))
        ));
        let mut once = acquire(store.clone(), request(10_000, 0), Shutdown::never());
        assert!(matches!(
            once.recv().await.unwrap().unwrap(),
            AcquireEvent::NotGranted(Occupancy {
                holder: Some(_),
                ..
            })
        ));
    }

    /// An Acquire of `NAME` with a limit and a lock-delay.
    fn counting_request(
        ttl_ms: i64,
        wait_ms: i64,
        limit: u32,
        lock_delay_ms: i64,
    ) -> ValidatedAcquire {
        Limits::default()
            .validate_acquire(AcquireFields {
                name: NAME,
                holder: "waiter".into(),
                ttl_ms,
                wait_ms,
                limit,
                lock_delay_ms,
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
        let store = test_replica(16);
        let start = Instant::now();
        take(&store, &counting_request(1_000, 0, 2, 0)).await;
        take(&store, &counting_request(3_000, 0, 2, 0)).await;
        let mut first = acquire(
            store.clone(),
            counting_request(60_000, 60_000, 2, 0),
            Shutdown::never(),
        );
        assert_eq!(next_waiting(&mut first).await.0, 1);
        let mut second = acquire(
            store.clone(),
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
        assert!(
            second_at <= Duration::from_millis(3_000) + EXPIRY_SLACK + Duration::from_millis(1)
        );
        assert!(second_grant.fencing_token > first_grant.fencing_token);
    }

    /// A lease with a lock-delay that expires stays taken until the delay has passed: the waiter
    /// is granted at expiry + delay, and is told so (`remaining_ms` counts the delay).
    #[tokio::test(start_paused = true)]
    async fn an_expiry_is_followed_by_the_lock_delay() {
        let store = test_replica(16);
        let start = Instant::now();
        take(&store, &counting_request(1_000, 0, 1, 500)).await;
        let mut events = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
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
        assert!(
            granted_at <= Duration::from_millis(1_500) + EXPIRY_SLACK + Duration::from_millis(1)
        );
    }

    /// A release ends a lease with a lock-delay at once: no delay for the next in line.
    #[tokio::test(start_paused = true)]
    async fn a_release_skips_the_lock_delay() {
        let store = test_replica(16);
        let (holder_id, _) = take(&store, &counting_request(10_000, 0, 1, 5_000)).await;
        let mut events = acquire(store.clone(), request(10_000, 60_000), Shutdown::never());
        next_waiting(&mut events).await;
        let released_at = Instant::now();
        assert!(store.release(&name(), &holder_id).await.unwrap());
        next_grant(&mut events).await;
        assert_eq!(Instant::now(), released_at);
    }

    /// Another limit than the holders' is refused, naming the limit in force.
    #[tokio::test(start_paused = true)]
    async fn a_limit_other_than_the_holders_is_refused() {
        let store = test_replica(16);
        take(&store, &counting_request(10_000, 0, 3, 0)).await;
        let mut events = acquire(
            store.clone(),
            counting_request(10_000, 0, 2, 0),
            Shutdown::never(),
        );
        match events.recv().await.unwrap() {
            Err(Error::FailedPrecondition(message)) => {
                assert!(message.contains("limit in force, 3"), "{message}")
            }
            other => panic!("expected FailedPrecondition, got {other:?}"),
        }
    }

    /// Shutdown ends a waiter with `ShuttingDown` at once and removes it.
    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait() {
        let store = test_replica(16);
        hold(&store, 60_000).await;
        let (trigger, shutdown) = shutdown::channel();
        let mut events = acquire(store.clone(), request(10_000, 60_000), shutdown);
        next_waiting(&mut events).await;
        let start = Instant::now();
        trigger.fire();
        assert!(matches!(
            events.recv().await.unwrap(),
            Err(Error::ShuttingDown)
        ));
        assert_eq!(Instant::now(), start);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(store.waiters().count(), 0);
    }
}
