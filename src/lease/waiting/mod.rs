//! The waiting policy of `Acquire`: try; while the lease is busy, wait in the store's queue
//! until this caller is first in line and the lease is free (a wake-up from the store), the
//! holder's expiry passes while this caller is first (a local timer), the caller gives up, or the
//! wait runs out. No polling loop: every attempt has a cause. ARCHITECTURE.md, "Fair waiting".

#[cfg(test)]
mod stall_tests;
mod tending;
#[cfg(test)]
mod tests;

use std::{ops::ControlFlow, sync::Arc, time::Duration};

use tokio::{
    sync::mpsc,
    time::{Instant, sleep_until},
};

use super::{
    AcquireOutcome, Caller, Grant, LeaseId, LeaseName, LeaseStore, Occupancy, Placement,
    QueueEntry, QueueStore, Refusal, Replica, ValidatedAcquire, waiters::Ticket,
};
use crate::{
    error::{Error, Result},
    metrics::metrics,
    shutdown::Shutdown,
};
pub use tending::STALL_CHECK_INTERVAL;
use tending::tend_queue;

/// Redis expires a key one millisecond after its PTTL reaches zero; wake a little later than the
/// holder's expiry so that the retry finds the lease free rather than busy for 0 ms more.
const EXPIRY_SLACK: Duration = Duration::from_millis(2);

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

/// Runs one `Acquire`: returns the events as a channel fed by a spawned task. Dropping the
/// receiver cancels the wait; a grant that can no longer be delivered is released at once.
pub fn acquire<S: QueueStore>(
    replica: Arc<Replica<S>>,
    request: ValidatedAcquire,
    shutdown: Shutdown,
) -> mpsc::Receiver<Result<AcquireEvent>> {
    let (events, receiver) = mpsc::channel(4);
    // In the caller's span (its RPC's trace span, if traced): the store calls made for it are
    // its children.
    let waiting = async move {
        let lease_id = lease_id_for(&request);
        let outcome = wait_for_grant(&replica, &request, &lease_id, &events, &shutdown).await;
        match outcome {
            Ok(Some(terminal)) => {
                // If the caller left, an unsent grant's delivery drops here and releases the
                // lease (unless the caller chose its lease id: then it releases the id itself).
                let _ = events.send(Ok(terminal)).await;
            }
            Ok(None) => {} // the caller left or the server stops; nothing to say
            Err(error) => {
                undo_if_unknown(&replica, &request, &lease_id, &error);
                let _ = events.send(Err(error)).await;
            }
        }
    };
    tokio::spawn(tracing::Instrument::in_current_span(waiting));
    receiver
}

/// Runs one try-once `Acquire` (`wait` zero) to its terminal event in the caller's own task: one
/// store call, no spawned task and no channel, so that a server can answer before it opens the
/// response stream. If the caller leaves while the store call is in flight (the future is
/// dropped), the grant it may have made is released.
pub async fn try_once<S: LeaseStore>(
    replica: &Arc<Replica<S>>,
    request: &ValidatedAcquire,
) -> Result<AcquireEvent> {
    let lease_id = lease_id_for(request);
    let in_flight = server_undoes(request).then(|| ReleaseIfDropped {
        replica,
        name: &request.name,
        lease_id: &lease_id,
        ttl: request.ttl,
    });
    let outcome = replica.store().try_acquire(request, &lease_id, None).await;
    if let Some(in_flight) = in_flight {
        in_flight.disarm();
    }
    match outcome {
        Ok(AcquireOutcome::Granted(grant)) => {
            Ok(AcquireEvent::Granted(delivery(replica, request, grant)))
        }
        Ok(AcquireOutcome::Busy { occupancy, .. }) => Ok(AcquireEvent::NotGranted(occupancy)),
        Ok(refused) => Err(refusal(request, refused)),
        Err(error) => {
            undo_if_unknown(replica, request, &lease_id, &error);
            Err(error)
        }
    }
}

/// The lease id of a request's grant: the caller's own, or a new one.
fn lease_id_for(request: &ValidatedAcquire) -> LeaseId {
    request.lease_id.clone().unwrap_or_else(LeaseId::generate)
}

/// Whether the server may release a grant of `request` that its caller may not have received.
/// Not with the caller's own lease id: the caller may be retrying with it (perhaps through
/// another replica) and have been answered this very grant, and a release behind its back would
/// end it; such a caller gives up by releasing its id itself.
fn server_undoes(request: &ValidatedAcquire) -> bool {
    request.lease_id.is_none()
}

/// Releases, in the background, the grant that a store call dropped mid-flight may have made.
struct ReleaseIfDropped<'a, S: LeaseStore> {
    replica: &'a Arc<Replica<S>>,
    name: &'a LeaseName,
    lease_id: &'a LeaseId,
    ttl: Duration,
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
        release_in_background(
            self.replica,
            self.name,
            self.lease_id,
            self.ttl,
            Undo::Maybe,
        );
    }
}

/// A grant ready for its caller, released if it never reaches them (unless the caller chose its
/// lease id: [`server_undoes`]).
fn delivery<S: LeaseStore>(
    replica: &Arc<Replica<S>>,
    request: &ValidatedAcquire,
    grant: Grant,
) -> GrantDelivery {
    if !server_undoes(request) {
        return GrantDelivery {
            grant,
            release: None,
        };
    }
    let (replica, name) = (replica.clone(), request.name.clone());
    let lease_id = grant.lease_id.clone();
    let ttl = Duration::from_millis(grant.ttl_ms.max(0) as u64);
    GrantDelivery {
        grant,
        release: Some(Box::new(move || {
            tracing::debug!(%name, "caller left before the grant reached it; releasing");
            release_in_background(&replica, &name, &lease_id, ttl, Undo::Made);
        })),
    }
}

/// After a failed store call: the store may have committed a grant we never heard of (the
/// answer was lost). Undoes it in the background with the same lease id (release is conditional
/// and idempotent).
fn undo_if_unknown<S: LeaseStore>(
    replica: &Arc<Replica<S>>,
    request: &ValidatedAcquire,
    lease_id: &LeaseId,
    error: &Error,
) {
    if matches!(error, Error::Unavailable(_)) && server_undoes(request) {
        release_in_background(replica, &request.name, lease_id, request.ttl, Undo::Maybe);
    }
}

/// What is known of a grant to undo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Undo {
    /// The store made it, and said so.
    Made,
    /// A store call that failed or was dropped in flight may have made it, now or later.
    Maybe,
}

/// The first retry of an undo (see [`release_quietly`]); each later one waits twice as long.
const FIRST_UNDO_RETRY: Duration = Duration::from_millis(250);

/// How much longer than the grant's TTL an undo is tried: long enough for a stall of Redis that
/// kept the grant's command waiting.
const UNDO_MARGIN: Duration = Duration::from_secs(60);

/// Releases `lease_id`'s grant of `name`, of TTL `ttl`, in a task of its own, quietly (see
/// [`release_quietly`]).
fn release_in_background<S: LeaseStore>(
    replica: &Arc<Replica<S>>,
    name: &LeaseName,
    lease_id: &LeaseId,
    ttl: Duration,
    undo: Undo,
) {
    let (replica, name, lease_id) = (replica.clone(), name.clone(), lease_id.clone());
    tokio::spawn(async move { release_quietly(&replica, &name, &lease_id, ttl, undo).await });
}

/// The error for an attempt the store refused outright: the queue is full, or the limit differs
/// from the one in force.
fn refusal(request: &ValidatedAcquire, outcome: AcquireOutcome) -> Error {
    let refusal = match outcome {
        AcquireOutcome::QueueFull { limit } => Refusal::QueueFull { limit },
        AcquireOutcome::LimitMismatch { limit } => Refusal::LimitMismatch {
            asked: request.limit,
            in_force: limit,
        },
        AcquireOutcome::LeaseIdEnded => Refusal::LeaseIdEnded,
        AcquireOutcome::Superseded => Refusal::Superseded,
        AcquireOutcome::TooManyShared { limit } => Refusal::TooManyShared { limit },
        AcquireOutcome::OwnGrantDiffers(mismatch) => Refusal::OwnGrantDiffers {
            mismatch,
            asked_limit: request.limit,
        },
        AcquireOutcome::OwnGrantOfAnotherCaller => Refusal::MadeByAnotherCaller,
        other => {
            return Error::Internal {
                name: request.name.to_string(),
                detail: format!("{other:?} is not a refusal"),
            };
        }
    };
    Error::Refused(refusal)
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

impl Shown {
    fn of(placement: &Placement) -> Self {
        let occupancy = &placement.occupancy;
        Shown {
            position: placement.position,
            held: occupancy.held,
            holder: occupancy
                .holder
                .as_ref()
                .map(|h| (h.holder.clone(), h.fencing_token)),
        }
    }
}

/// Tries until granted or the wait runs out: the terminal event. `Ok(None)`: the caller left.
async fn wait_for_grant<S: QueueStore>(
    replica: &Arc<Replica<S>>,
    request: &ValidatedAcquire,
    lease_id: &LeaseId,
    events: &mpsc::Sender<Result<AcquireEvent>>,
    shutdown: &Shutdown,
) -> Result<Option<AcquireEvent>> {
    let deadline = Instant::now() + request.wait;
    // A caller that may wait takes a ticket before its first attempt, so that the attempt queues
    // it if the lease is busy, and every wake-up after it reaches this caller.
    let mut ticket = match request.wait.is_zero() {
        true => None,
        false => Some(join(replica, &request.name, request.shared)),
    };
    let mut reported: Option<Shown> = None;
    // A full queue is checked once for entries of replicas that are gone.
    let mut purged = false;
    loop {
        let entry = ticket.as_ref().map(Ticket::entry);
        let placement = match attempt(replica, request, lease_id, entry).await? {
            AcquireOutcome::Granted(grant) => {
                if let Some(ticket) = ticket.take() {
                    ticket.granted();
                }
                let delivery = delivery(replica, request, grant);
                return Ok(Some(AcquireEvent::Granted(delivery)));
            }
            AcquireOutcome::Busy {
                occupancy,
                position,
            } => Placement {
                position,
                occupancy,
            },
            // Entries of replicas that are gone may fill it: checked once, before refusing.
            full @ AcquireOutcome::QueueFull { .. } if entry.is_some() && !purged => {
                purged = true;
                if replica.store().unstall(&request.name, &[], false).await? > 0 {
                    continue;
                }
                return Err(refusal(request, full));
            }
            refused => return Err(refusal(request, refused)),
        };
        let Some(ticket) = ticket.as_mut() else {
            return Ok(Some(AcquireEvent::NotGranted(placement.occupancy)));
        };
        let waited = wait_in_line(ticket, placement, deadline, &mut reported, events, shutdown);
        if let ControlFlow::Break(terminal) = waited.await? {
            return Ok(terminal);
        }
    }
}

/// One attempt, queued with `entry` if the caller may wait.
async fn attempt<S: LeaseStore>(
    replica: &Replica<S>,
    request: &ValidatedAcquire,
    lease_id: &LeaseId,
    entry: Option<&QueueEntry>,
) -> Result<AcquireOutcome> {
    let outcome = replica.store().try_acquire(request, lease_id, entry).await;
    // The store may still run this attempt after the caller has its error (a stall past the
    // timeout) and queue an entry that nobody here will take.
    if entry.is_some() && matches!(outcome, Err(Error::Unavailable(_))) {
        replica.waiters().reconcile(request.name.as_str());
    }
    outcome
}

/// Waits in line, telling the caller where it stands, until there is a reason to try again
/// (`Continue`) or the wait is over (`Break`, with the terminal event; `None`: the caller left).
async fn wait_in_line(
    ticket: &mut Ticket,
    mut placement: Placement,
    deadline: Instant,
    reported: &mut Option<Shown>,
    events: &mpsc::Sender<Result<AcquireEvent>>,
    shutdown: &Shutdown,
) -> Result<ControlFlow<Option<AcquireEvent>>> {
    if (1..placement.position).contains(&placement.occupancy.due) {
        ticket.free_ahead();
    }
    let wake = ticket.wake_signal();
    loop {
        let now = Instant::now();
        if now >= deadline {
            let not_granted = AcquireEvent::NotGranted(placement.occupancy);
            return Ok(ControlFlow::Break(Some(not_granted)));
        }
        let shown = Shown::of(&placement);
        if reported.as_ref() != Some(&shown) {
            *reported = Some(shown);
            let waiting = AcquireEvent::Waiting(placement.clone());
            if events.send(Ok(waiting)).await.is_err() {
                return Ok(ControlFlow::Break(None));
            }
        }
        let wake_at = retry_at(&placement, now, deadline);
        tokio::select! {
            _ = wake.notified() => return Ok(ControlFlow::Continue(())),
            moved = ticket.moved() => {
                placement = moved;
                // Dropped from the queue (purged, or Redis lost it): join again. Close enough
                // to the front that a grant is this caller's: take it.
                if placement.position == 0 || placement.position <= placement.occupancy.due {
                    return Ok(ControlFlow::Continue(()));
                }
            }
            _ = sleep_until(wake_at) => {
                if wake_at < deadline {
                    metrics().expiries_seen.inc();
                }
                return Ok(ControlFlow::Continue(()));
            }
            _ = events.closed() => return Ok(ControlFlow::Break(None)),
            _ = shutdown.fired() => return Err(Error::ShuttingDown),
        }
    }
}

/// When a caller waiting in line tries again unless something happens first: only the first in
/// line acts on the expiry of the permit that frees soonest; the others move up when it is
/// granted.
fn retry_at(placement: &Placement, now: Instant, deadline: Instant) -> Instant {
    let no_permit_free = placement.occupancy.due == 0;
    match (&placement.occupancy.holder, placement.position) {
        (Some(holder), 1) if no_permit_free => match holder.expiry {
            Some(expiry) => {
                let remaining = Duration::from_millis(expiry.remaining_ms.max(0) as u64);
                deadline.min(now + remaining + EXPIRY_SLACK)
            }
            None => deadline, // no expiry: only a release or the deadline can end the wait
        },
        _ => deadline,
    }
}

/// Registers a waiter of `name` on this replica; the first one starts the name's tending task.
fn join<S: QueueStore>(replica: &Arc<Replica<S>>, name: &LeaseName, shared: bool) -> Ticket {
    let (ticket, first_here) = replica.waiters().join(name, shared);
    if let Some(tend) = first_here {
        tokio::spawn(tend_queue(replica.clone(), name.clone(), tend));
    }
    ticket
}

/// Releases a grant that its caller never received, in the background, tried again at doubling
/// intervals (from [`FIRST_UNDO_RETRY`]) for the grant's TTL and [`UNDO_MARGIN`] more.
///
/// A [`Made`](Undo::Made) grant is known to exist, so the first release that the store answers
/// is the last. A [`Maybe`](Undo::Maybe) grant is a store call that failed or was dropped in
/// flight, which Redis may still run later: after a stall, the commands waiting in the pool's
/// connections run in no fixed order, so a release sent after the acquire can run before it and
/// find nothing. So an answer "not held" is not trusted: the release goes on until one ends the
/// grant. A grant hidden by a stall then lives about as long again as the stall, at most; one
/// that Redis runs after the last try expires at its TTL, as does any grant whose release fails.
async fn release_quietly<S: LeaseStore>(
    replica: &Replica<S>,
    name: &LeaseName,
    lease_id: &LeaseId,
    ttl: Duration,
    undo: Undo,
) {
    let give_up_at = Instant::now() + ttl + UNDO_MARGIN;
    let mut interval = FIRST_UNDO_RETRY;
    for attempt in 0u32.. {
        // The server's own undo of its caller's grant: not bound by who the caller is.
        match replica
            .store()
            .release(name, lease_id, &Caller::anyone())
            .await
        {
            Ok(true) => return,
            Ok(false) if undo == Undo::Made => return,
            Ok(false) => {}
            Err(error) => {
                tracing::debug!(%name, attempt, %error, "could not release an undelivered grant");
            }
        }
        if Instant::now() + interval > give_up_at {
            return;
        }
        tokio::time::sleep(interval).await;
        interval *= 2;
    }
}
