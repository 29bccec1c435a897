//! The tending task of a name with waiters here: removes the entries of callers that left, reads
//! and hands each waiter its placement when something changed, and sees that no entry holds up
//! a free permit: this replica's without a caller, or another replica's that does not take it.
//!
//! Nothing here runs on a timer while nothing happens: a read has a cause (a wake-up, positions
//! moved, a resubscription, a holder's expiry, a stall to check, a failure to retry).

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::Notify,
    time::{Instant, sleep_until},
};

use super::EXPIRY_SLACK;
use crate::{
    error::Result,
    lease::{LeaseName, Placement, QueueEntry, QueueStatus, QueueStore, Replica, waiters::Chores},
    metrics::metrics,
};

/// A live replica takes a wake-up within milliseconds; another replica's entry that a free
/// permit has gone to for this long without taking it is stalled, and its replica is checked.
pub(super) const STALL_GRACE: Duration = Duration::from_millis(250);

/// While entries stay stalled, they are checked again this often: a dead replica's are taken out
/// once its heartbeat lapses.
pub const STALL_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Entries of a live replica stalled this long are taken out anyway: that replica lost the entry's
/// caller or every report of it. A caller that still waits there reads that it left the queue,
/// and joins again.
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(5);

/// A failed store call of the tending task is tried again this much later.
const RETRY_DELAY: Duration = Duration::from_millis(500);

/// Rounds of reconciling come this far apart (`Waiters::reconcile`).
pub(super) const RECONCILE_DELAY: Duration = Duration::from_millis(500);

/// A name's tending task (and its wake-up subscription) outlives its last waiter here by this
/// long, so that a name waited on again and again is not subscribed and unsubscribed each time.
const LINGER: Duration = Duration::from_secs(1);

/// Entries removed from a queue in one store call.
const LEAVE_BATCH: usize = 256;

/// Other replicas' entries that hold up free permits of the name, since when.
struct Stall {
    entries: Vec<QueueEntry>,
    since: Instant,
    checked: Option<Instant>,
}

impl Stall {
    /// When the stalled entries are checked next.
    fn check_at(&self) -> Instant {
        match self.checked {
            Some(checked) => checked + STALL_CHECK_INTERVAL,
            None => self.since + STALL_GRACE,
        }
    }
}

/// What the tending task has to do, and when.
#[derive(Default)]
struct Due {
    /// Read the placements.
    read: Option<Instant>,
    /// A round of reconciling the queue with the callers here.
    reconcile: Option<Instant>,
    /// Try again the removals that failed.
    leave: Option<Instant>,
    /// Forget the name, if nobody waits on it here by then.
    forget: Option<Instant>,
}

impl Due {
    fn next(&self) -> Option<Instant> {
        [self.read, self.reconcile, self.leave, self.forget]
            .into_iter()
            .flatten()
            .min()
    }
}

/// Sets `slot` to `at` unless it is due sooner already.
fn no_later(slot: &mut Option<Instant>, at: Instant) {
    *slot = Some(slot.map_or(at, |current| current.min(at)));
}

fn is_due(slot: Option<Instant>, now: Instant) -> bool {
    slot.is_some_and(|at| at <= now)
}

/// Looks after this replica's waiters of one name while there are any (and [`LINGER`] after):
/// listens for the name's wake-ups, removes the entries of callers that left (and, when asked to
/// reconcile, those of this replica that no caller here owns), reads the placements when they
/// may have changed, and checks on other replicas' entries that hold up a free permit.
pub(super) async fn tend_queue<S: QueueStore>(
    replica: Arc<Replica<S>>,
    name: LeaseName,
    tend: Arc<Notify>,
) {
    // The subscription's confirmation reports a resync: the first read comes with it.
    replica.listen(&name);
    let mut tending = Tending {
        replica: &replica,
        name: &name,
        due: Due::default(),
        stall: None,
        idle_since: None,
    };
    loop {
        match tending.due.next() {
            Some(at) => tokio::select! {
                _ = tend.notified() => {}
                _ = sleep_until(at) => {}
            },
            None => tend.notified().await,
        }
        let now = Instant::now();
        let forget_if_idle = is_due(tending.due.forget, now);
        let Some(chores) = replica.waiters().chores(name.as_str(), forget_if_idle) else {
            break;
        };
        tending.note_idleness(&chores, now);
        tending.take_out_leavers(&chores.leaving).await;
        tending.reconcile_if_due(chores.reconcile, now).await;
        if chores.entries.is_empty() {
            // Nobody here waits: other replicas' stalls are theirs to see.
            tending.stall = None;
            tending.due.read = None;
            continue;
        }
        tending.schedule_read(&chores, now);
        if is_due(tending.due.read, now) {
            tending.due.read = None;
            tending.read_and_place(chores.entries).await;
        }
    }
    replica.unlisten(&name);
}

/// The tending task's state for one name, between rounds.
struct Tending<'a, S> {
    replica: &'a Replica<S>,
    name: &'a LeaseName,
    due: Due,
    stall: Option<Stall>,
    idle_since: Option<Instant>,
}

impl<S: QueueStore> Tending<'_, S> {
    /// Nothing to do here since when: the name is forgotten [`LINGER`] after.
    fn note_idleness(&mut self, chores: &Chores, now: Instant) {
        let idle = chores.entries.is_empty() && chores.leaving.is_empty() && !chores.reconcile;
        self.idle_since = match idle {
            true => self.idle_since.or(Some(now)),
            false => None,
        };
        self.due.forget = self.idle_since.map(|since| since + LINGER);
    }

    /// Takes the entries of callers that left out of the queue; those that fail are retried.
    async fn take_out_leavers(&mut self, leaving: &[QueueEntry]) {
        let name = self.name;
        self.due.leave = None;
        for batch in leaving.chunks(LEAVE_BATCH) {
            if let Err(error) = self.replica.store().leave(name, batch).await {
                tracing::debug!(%name, %error, "could not take waiters that left out of the queue; retrying");
                self.replica
                    .waiters()
                    .retry_leaving(name.as_str(), batch.to_vec());
                self.due.leave = Some(Instant::now() + RETRY_DELAY);
            }
        }
    }

    /// A round of reconciling, [`RECONCILE_DELAY`] after it was asked for.
    async fn reconcile_if_due(&mut self, asked: bool, now: Instant) {
        let name = self.name;
        if asked && self.due.reconcile.is_none() {
            self.due.reconcile = Some(now + RECONCILE_DELAY);
        }
        if !is_due(self.due.reconcile, now) {
            return;
        }
        self.due.reconcile = match reconcile(self.replica, name).await {
            Ok(()) => self
                .replica
                .waiters()
                .reconciled(name.as_str())
                .then(|| Instant::now() + RECONCILE_DELAY),
            Err(error) => {
                tracing::debug!(%name, %error, "could not reconcile the queue with the waiters here; retrying");
                Some(Instant::now() + RETRY_DELAY)
            }
        };
    }

    /// When to read the placements: now if they moved; when woken entries of other replicas
    /// are to be checked; a grace after a caller here found a permit free for someone ahead.
    fn schedule_read(&mut self, chores: &Chores, now: Instant) {
        if chores.moved {
            self.due.read = Some(now);
        }
        if !chores.suspects.is_empty() {
            let stalled = self.stall.get_or_insert_with(|| Stall {
                entries: Vec::new(),
                since: now,
                checked: None,
            });
            for suspect in &chores.suspects {
                if !stalled.entries.contains(suspect) {
                    stalled.entries.push(suspect.clone());
                }
            }
            no_later(&mut self.due.read, stalled.check_at());
        }
        if chores.free_ahead {
            no_later(&mut self.due.read, now + STALL_GRACE);
        }
    }

    /// Reads where this replica's `entries` stand, hands each waiter its placement, checks on
    /// other replicas' entries that hold up a free permit, and sets when to read again.
    async fn read_and_place(&mut self, entries: Vec<QueueEntry>) {
        let name = self.name;
        let status = match self.replica.store().queue_status(name, &entries).await {
            Ok(status) => status,
            Err(error) => {
                tracing::debug!(%name, %error, "could not read the queue; retrying");
                self.due.read = Some(Instant::now() + RETRY_DELAY);
                return;
            }
        };
        let now = Instant::now();
        let look_at_expiry = expiry_to_look_at(&status, now);
        let others_due: Vec<QueueEntry> = status
            .due
            .iter()
            .filter(|entry| !self.replica.waiters().is_mine(entry))
            .cloned()
            .collect();
        place(self.replica, name, entries, status);
        self.check_stalls(others_due, now).await;
        if let Some(stalled) = &self.stall {
            no_later(&mut self.due.read, stalled.check_at());
        }
        if let Some(at) = look_at_expiry {
            no_later(&mut self.due.read, at);
        }
    }

    /// Follows the entries of other replicas that free permits go to (`others_due`): a stall
    /// keeps its time while they are the ones seen before (or some of them), and starts again
    /// with a new one. A stall due for a check is reported to the store.
    async fn check_stalls(&mut self, others_due: Vec<QueueEntry>, now: Instant) {
        let name = self.name;
        self.stall = match self.stall.take() {
            _ if others_due.is_empty() => None,
            Some(previous)
                if others_due
                    .iter()
                    .all(|entry| previous.entries.contains(entry)) =>
            {
                Some(Stall {
                    entries: others_due,
                    ..previous
                })
            }
            _ => Some(Stall {
                entries: others_due,
                since: now,
                checked: None,
            }),
        };
        if let Some(stalled) = self.stall.as_mut()
            && stalled.check_at() <= now
        {
            let overdue = now.duration_since(stalled.since) >= STALL_LIMIT;
            stalled.checked = Some(now);
            let unstalled = self
                .replica
                .store()
                .unstall(name, &stalled.entries, overdue);
            if let Err(error) = unstalled.await {
                tracing::debug!(%name, %error, "could not check on stalled queue entries; retrying");
            }
        }
    }
}

/// When to read again at the expiry of the permit that frees soonest, if no waiter here is first
/// in line (the first in line's own timer retries at that moment; the others look a grace later
/// whether it did, since a first in line whose replica is gone never will).
fn expiry_to_look_at(status: &QueueStatus, now: Instant) -> Option<Instant> {
    let occupancy = &status.occupancy;
    // A grant is due to someone in line: the stall check follows it up.
    if occupancy.due > 0 || status.positions.contains(&1) {
        return None;
    }
    let expiry = occupancy.holder.as_ref()?.expiry?;
    let remaining = Duration::from_millis(expiry.remaining_ms.max(0) as u64);
    Some(now + remaining + EXPIRY_SLACK + STALL_GRACE)
}

/// Takes out of the queue of `name` the entries of this replica that no caller here owns: those
/// of attempts that ran in the store after their callers had gone (their outcome unknown).
async fn reconcile<S: QueueStore>(replica: &Replica<S>, name: &LeaseName) -> Result<()> {
    let queued = replica.store().queued_here(name).await?;
    let callerless = replica.waiters().without_caller(name.as_str(), queued);
    if callerless.is_empty() {
        return Ok(());
    }
    tracing::info!(%name, entries = callerless.len(), "removing queue entries whose callers are gone");
    metrics()
        .callerless_entries_removed
        .inc_by(callerless.len() as u64);
    for batch in callerless.chunks(LEAVE_BATCH) {
        replica.store().leave(name, batch).await?;
    }
    Ok(())
}

/// Hands each waiter its placement, and wakes the first in line if the lease is free (with a
/// counting lease, each caller close enough to the front that a free permit is its own). Waking
/// a caller whose placement did not change matters: it may have missed its wake-up.
fn place<S: QueueStore>(
    replica: &Replica<S>,
    name: &LeaseName,
    entries: Vec<QueueEntry>,
    status: QueueStatus,
) {
    let QueueStatus {
        occupancy,
        positions,
        ..
    } = status;
    let free = occupancy.due;
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
    replica.waiters().place(name.as_str(), placements);
    for entry in to_wake {
        replica.waiters().wake(name.as_str(), &entry);
    }
}
