//! This replica's side of the wait queues: which of this replica's callers wait on which name,
//! and the signals that reach them. The queue itself (its order, every replica's entries) lives in
//! the store; see ARCHITECTURE.md, "Fair waiting".
//!
//! Each waiting caller holds a [`Ticket`]: its entry in the store's queue ([`QueueEntry`]),
//! a wake-up ("you are first in line and the lease is free: try now") and its latest
//! [`Placement`]. Each name with waiters here has one tending task (in
//! [`waiting`](super::waiting)) that reads the placements after every change, removes the
//! entries of callers that left, and watches for other replicas' entries that hold up a free
//! permit (a wake-up they did not take).
//!
//! No entry of this replica stays in a queue without a caller here: an attempt whose outcome is
//! unknown (Redis did not answer in time, yet may still run it and queue the entry) and a
//! reconnect mark the name for reconciling, and a wake-up for an entry that no caller here holds
//! takes that entry out. An entry's caller is registered before any attempt of it reaches the
//! store and entry ids are never reused, so an entry of this replica that is in the store but not
//! registered here has lost its caller for good.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio::sync::{Notify, watch};

use super::{LeaseName, Occupancy, QueueEntry, QueueMode, hex};
use crate::metrics::metrics;

/// Where one waiting caller stands, as last read from the store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// 1 = next in line; 0 = not in the queue (it was purged or Redis lost it): join again.
    pub position: u32,
    /// Who holds the lease (its permits).
    pub occupancy: Occupancy,
}

/// How many times a name's entries are reconciled with its callers after an attempt without an
/// answer, half a second apart. The first read that succeeds shows that Redis answers again;
/// the second comes after whatever Redis still had to run from before (the late attempt may sit
/// behind other commands on another connection).
const RECONCILE_ROUNDS: u8 = 2;

/// The callers of this replica waiting in the store's queues, by lease name.
#[derive(Debug)]
pub struct Waiters {
    /// This replica's id in its queue entries: random, so that replicas never collide.
    replica: String,
    next_entry: AtomicU64,
    by_name: Mutex<HashMap<String, NameWaiters>>,
}

/// This replica's waiters of one name.
#[derive(Debug, Default)]
struct NameWaiters {
    by_entry: HashMap<QueueEntry, Signals>,
    /// Entries of callers that left without a grant: the tending task removes them from the store.
    leaving: Vec<QueueEntry>,
    /// The placements changed in the store: the tending task reads them again.
    moved: bool,
    /// The store may hold entries of this replica that no caller here owns: the tending task
    /// reads this replica's entries in the queue and removes those, this many times more.
    reconcile_rounds: u8,
    /// Other replicas' entries that were woken: if they do not take their permit within a
    /// grace, they are stalled (their replica gone, or their wake-up lost).
    suspects: Vec<QueueEntry>,
    /// A caller here found a free permit that goes to someone ahead of it: the tending task
    /// looks again after the grace.
    free_ahead: bool,
    tend: Arc<Notify>,
}

#[derive(Debug)]
struct Signals {
    wake: Arc<Notify>,
    placement: watch::Sender<Placement>,
}

/// What the tending task of a name has to do next.
pub(super) struct Chores {
    pub entries: Vec<QueueEntry>,
    pub leaving: Vec<QueueEntry>,
    pub moved: bool,
    pub reconcile: bool,
    pub suspects: Vec<QueueEntry>,
    pub free_ahead: bool,
}

/// Woken entries of other replicas remembered per name until the tending task looks: a few are
/// enough (the store wakes at most a few at once), and a flood cannot grow the list.
const MAX_SUSPECTS: usize = 16;

impl Waiters {
    pub fn new() -> Self {
        let mut bytes = [0u8; super::store::REPLICA_ID_DIGITS / 2];
        getrandom::fill(&mut bytes).expect("the OS random number generator is unavailable");
        Waiters {
            replica: hex(&bytes),
            next_entry: AtomicU64::new(1),
            by_name: Mutex::new(HashMap::new()),
        }
    }

    /// This replica's id in queue entries and in the replicas' deadlines.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    fn by_name(&self) -> MutexGuard<'_, HashMap<String, NameWaiters>> {
        self.by_name.lock().expect("waiters lock poisoned")
    }

    /// Registers a caller about to wait on `name`. The second value is the name's tending signal
    /// when this is the first waiter of the name here: the caller must start its tending task.
    /// A caller that waits for a shared grant gets a [`QueueMode::Shared`] entry: the stores
    /// read the mode of each caller in line from it.
    pub(super) fn join(
        self: &Arc<Self>,
        name: &LeaseName,
        shared: bool,
    ) -> (Ticket, Option<Arc<Notify>>) {
        let entry = QueueEntry {
            replica: self.replica.clone(),
            sequence: self.next_entry.fetch_add(1, Ordering::Relaxed),
            mode: match shared {
                true => QueueMode::Shared,
                false => QueueMode::Exclusive,
            },
        };
        let wake = Arc::new(Notify::new());
        let (placement, placement_rx) = watch::channel(Placement::default());
        let mut by_name = self.by_name();
        let mut new_name = None;
        let waiters = by_name.entry(name.as_str().to_owned()).or_insert_with(|| {
            let waiters = NameWaiters::default();
            new_name = Some(waiters.tend.clone());
            waiters
        });
        waiters.by_entry.insert(
            entry.clone(),
            Signals {
                wake: wake.clone(),
                placement,
            },
        );
        metrics().waiters.inc();
        let ticket = Ticket {
            waiters: self.clone(),
            name: name.clone(),
            entry,
            wake,
            placement: placement_rx,
            granted: false,
        };
        (ticket, new_name)
    }

    /// Wakes the caller holding `entry`, if it waits here: it is first in line and the lease is
    /// free. An entry of this replica that no caller here holds (its attempt ran in the store
    /// after the caller had gone) would hold up the queue: it is taken out. Another replica's
    /// entry is remembered: the tending task checks that it took its permit.
    pub fn wake(&self, name: &str, entry: &QueueEntry) {
        let mut by_name = self.by_name();
        let Some(waiters) = by_name.get_mut(name) else {
            return;
        };
        match waiters.by_entry.get(entry) {
            Some(signals) => signals.wake.notify_one(),
            None if self.is_mine(entry) => {
                if !waiters.leaving.iter().any(|leaving| leaving == entry) {
                    tracing::debug!(name, %entry, "woken entry has no caller here; removing it");
                    waiters.leaving.push(entry.clone());
                }
                waiters.tend.notify_one();
            }
            None => {
                if waiters.suspects.len() < MAX_SUSPECTS
                    && !waiters.suspects.iter().any(|suspect| suspect == entry)
                {
                    waiters.suspects.push(entry.clone());
                }
                waiters.tend.notify_one();
            }
        }
    }

    /// A caller here found a free permit of `name` that goes to someone ahead of it.
    fn free_ahead(&self, name: &str) {
        if let Some(waiters) = self.by_name().get_mut(name) {
            waiters.free_ahead = true;
            waiters.tend.notify_one();
        }
    }

    /// Whether `entry` is one of this replica's queue entries.
    pub(super) fn is_mine(&self, entry: &QueueEntry) -> bool {
        entry.replica == self.replica
    }

    /// An attempt of a caller waiting on `name` ended without an answer: the store may still run
    /// it and queue an entry that nobody here will take. The tending task reconciles the name's
    /// entries in the store with the callers here.
    pub fn reconcile(&self, name: &str) {
        if let Some(waiters) = self.by_name().get_mut(name) {
            waiters.reconcile_rounds = RECONCILE_ROUNDS;
            waiters.tend.notify_one();
        }
    }

    /// After a reconnect: attempts in flight may have been run late or not at all; every name
    /// reconciles its entries.
    pub fn reconcile_everywhere(&self) {
        for waiters in self.by_name().values_mut() {
            waiters.reconcile_rounds = RECONCILE_ROUNDS;
            waiters.tend.notify_one();
        }
    }

    /// Of `queued`, this replica's entries in the store's queue of `name`
    /// ([`QueueStore::queued_here`](super::QueueStore::queued_here)), those that no caller here
    /// holds: they must go.
    pub(super) fn without_caller(&self, name: &str, queued: Vec<QueueEntry>) -> Vec<QueueEntry> {
        let by_name = self.by_name();
        let live = by_name.get(name).map(|waiters| &waiters.by_entry);
        queued
            .into_iter()
            .filter(|entry| live.is_none_or(|live| !live.contains_key(entry)))
            .collect()
    }

    /// One round of reconciling `name` succeeded; whether another one is due.
    pub(super) fn reconciled(&self, name: &str) -> bool {
        match self.by_name().get_mut(name) {
            Some(waiters) => {
                waiters.reconcile_rounds = waiters.reconcile_rounds.saturating_sub(1);
                waiters.reconcile_rounds > 0
            }
            None => false,
        }
    }

    /// The queue of `name` changed (someone was granted or left): read the placements again.
    pub fn moved(&self, name: &str) {
        if let Some(waiters) = self.by_name().get_mut(name) {
            waiters.moved = true;
            waiters.tend.notify_one();
        }
    }

    /// After wake-ups may have been missed (a reconnect, a lagging subscriber): every name reads
    /// its placements again.
    pub fn moved_everywhere(&self) {
        for waiters in self.by_name().values_mut() {
            waiters.moved = true;
            waiters.tend.notify_one();
        }
    }

    /// How many callers wait here, on every name.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.by_name().values().map(|w| w.by_entry.len()).sum()
    }

    /// Takes the tending task's work for `name`. With `forget_if_idle`, `None` when nobody waits
    /// on it here any more and nothing is left to do: the name is forgotten and the task ends.
    pub(super) fn chores(&self, name: &str, forget_if_idle: bool) -> Option<Chores> {
        let mut by_name = self.by_name();
        let waiters = by_name.get_mut(name)?;
        let idle = waiters.by_entry.is_empty()
            && waiters.leaving.is_empty()
            && waiters.reconcile_rounds == 0;
        if forget_if_idle && idle {
            by_name.remove(name);
            return None;
        }
        Some(Chores {
            entries: waiters.by_entry.keys().cloned().collect(),
            leaving: std::mem::take(&mut waiters.leaving),
            moved: std::mem::take(&mut waiters.moved),
            reconcile: waiters.reconcile_rounds > 0,
            suspects: std::mem::take(&mut waiters.suspects),
            free_ahead: std::mem::take(&mut waiters.free_ahead),
        })
    }

    /// Entries whose removal failed go back on the list, to be retried at the next tending.
    pub(super) fn retry_leaving(&self, name: &str, entries: Vec<QueueEntry>) {
        if let Some(waiters) = self.by_name().get_mut(name) {
            waiters.leaving.extend(entries);
        }
    }

    /// Delivers the placements read from the store to each waiter of `name`.
    pub(super) fn place(&self, name: &str, placements: Vec<(QueueEntry, Placement)>) {
        let by_name = self.by_name();
        let Some(waiters) = by_name.get(name) else {
            return;
        };
        for (entry, placement) in placements {
            if let Some(signals) = waiters.by_entry.get(&entry) {
                signals.placement.send_if_modified(|current| {
                    // "Not in the queue" always reaches the waiter, even when it equals the value
                    // stored before any read (the default): the waiter must join again.
                    let changed = *current != placement || placement.position == 0;
                    *current = placement;
                    changed
                });
            }
        }
    }

    fn leave(&self, name: &str, entry: &QueueEntry, granted: bool) {
        metrics().waiters.dec();
        let mut by_name = self.by_name();
        if let Some(waiters) = by_name.get_mut(name) {
            waiters.by_entry.remove(entry);
            if !granted {
                waiters.leaving.push(entry.clone());
            }
            // The tending task removes the entry from the store, or forgets the name.
            waiters.tend.notify_one();
        }
    }
}

impl Default for Waiters {
    fn default() -> Self {
        Self::new()
    }
}

/// One caller's place in a name's queue, on this replica. Dropping it without
/// [`Ticket::granted`] removes the entry from the store's queue (in the background).
#[derive(Debug)]
pub struct Ticket {
    waiters: Arc<Waiters>,
    name: LeaseName,
    entry: QueueEntry,
    wake: Arc<Notify>,
    placement: watch::Receiver<Placement>,
    granted: bool,
}

impl Ticket {
    /// The entry in the store's queue.
    pub fn entry(&self) -> &QueueEntry {
        &self.entry
    }

    /// Notified when this caller is first in line and the lease is free.
    pub fn wake_signal(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Resolves with the new placement when the store reports a change.
    pub async fn moved(&mut self) -> Placement {
        // The sender lives in the registry as long as this ticket does.
        let _ = self.placement.changed().await;
        self.placement.borrow_and_update().clone()
    }

    /// This caller's attempt found a free permit that goes to someone ahead of it: if that
    /// caller does not take it soon, it is stalled, and the tending task sees to it.
    pub fn free_ahead(&self) {
        self.waiters.free_ahead(self.name.as_str());
    }

    /// The grant took this entry out of the queue: nothing to remove.
    pub fn granted(mut self) {
        self.granted = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.waiters
            .leave(self.name.as_str(), &self.entry, self.granted);
    }
}
