//! The tending task of a name with waiters here: keeps their queue entries alive, removes those
//! of callers that left, and hands each waiter its placement.

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::Notify,
    time::{Instant, MissedTickBehavior},
};

use crate::{
    error::Result,
    lease::{LeaseName, LeaseStore, Placement, QueueStatus, Replica},
    metrics::metrics,
};

/// How often each name with waiters here renews this replica's queue entries and re-reads their
/// placements, whatever the wake-ups say. The store drops the entries of a replica silent for
/// several of these; it also bounds how late a waiter learns of a wake-up that was lost.
pub const TEND_INTERVAL: Duration = Duration::from_millis(500);

/// A name's tending task (and its wake-up subscription) outlives its last waiter here by this
/// long, so that a name waited on again and again is not subscribed and unsubscribed each time.
const LINGER: Duration = Duration::from_secs(1);

/// Entries removed from a queue in one store call.
const LEAVE_BATCH: usize = 256;

/// Looks after this replica's waiters of one name while there are any (and [`LINGER`] after):
/// listens for the name's wake-ups, removes the entries of callers that left (and, when asked to
/// reconcile, those of this replica that no caller here owns), and every [`TEND_INTERVAL`] (and
/// at once when the queue moved) keeps the entries alive and hands each waiter its new placement.
pub(super) async fn tend_queue<S: LeaseStore>(
    store: Arc<Replica<S>>,
    name: LeaseName,
    tend: Arc<Notify>,
) {
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
