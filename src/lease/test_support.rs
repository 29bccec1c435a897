//! Test support for the core: [`UnreliableStore`], one fault-injecting store (modelled on neon's
//! `UnreliableWrapper`) that the tests of waiting and watching put in front of the embedded store
//! to play the parts a Redis outage or another replica play.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use tokio::time::Instant;

use super::{
    AcquireOutcome, Caller, Description, LeaseId, LeaseName, LeasePage, LeaseStore, ListPrefix,
    QueueEntry, QueueStatus, QueueStore, RenewOutcome, Replica, Revoked, StoreEvents,
    ValidatedAcquire,
};
use crate::{
    error::{Error, Result},
    store::MemoryStore,
};

/// An operation of the store contract, as [`UnreliableStore`] counts and fails them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Operation {
    TryAcquire,
    Renew,
    Release,
    Describe,
    Revoke,
    List,
    Ping,
    Leave,
    QueuedHere,
    QueueStatus,
    Unstall,
}

/// Where the embedded store behind an [`UnreliableStore`] reports what it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reports {
    /// To the replica's own events, as a store does.
    Heard,
    /// To events nobody reads, as if every message were lost.
    Lost,
}

/// Another replica sharing the queue, as the Redis store's `unstall` sees it through its
/// heartbeat.
#[derive(Debug)]
struct Peer {
    replica: String,
    alive: bool,
}

/// What the tests asked for, and what the store saw.
#[derive(Debug, Default)]
struct Faults {
    calls: HashMap<Operation, usize>,
    /// Every call fails while on.
    failing_all: bool,
    /// Every call of these fails.
    failing: HashSet<Operation>,
    /// The next this many calls of an operation fail.
    fail_next: HashMap<Operation, usize>,
    /// Each `unstall` call: when, and whether overdue.
    unstalls: Vec<(Instant, bool)>,
    peer: Option<Peer>,
}

/// Wraps any store and forwards every operation to it; counts the calls of each operation, can
/// fail them with [`Error::Unavailable`] (every call while a switch is on, every call of an
/// operation, or the next few), records each `unstall`, and can play another replica's part in
/// the queue ([`UnreliableStore::with_peer`]).
#[derive(Debug)]
pub(crate) struct UnreliableStore<S> {
    inner: Arc<S>,
    faults: Mutex<Faults>,
}

impl UnreliableStore<MemoryStore> {
    /// A replica over a fresh embedded store (16 waiters per name) behind this wrapper; the
    /// store's reports reach the replica, or are lost.
    pub(crate) fn memory_replica(reports: Reports) -> Arc<Replica<Self>> {
        let events = StoreEvents::new();
        let reported_to = match reports {
            Reports::Heard => events.clone(),
            Reports::Lost => StoreEvents::new(),
        };
        let store = UnreliableStore::new(MemoryStore::new(16, reported_to));
        Replica::new(Arc::new(store), events)
    }
}

impl<S> UnreliableStore<S> {
    pub(crate) fn new(inner: Arc<S>) -> Self {
        UnreliableStore {
            inner,
            faults: Mutex::new(Faults::default()),
        }
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().expect("faults lock poisoned")
    }

    /// While on, every call fails.
    pub(crate) fn fail_every_call(&self, failing: bool) {
        self.faults().failing_all = failing;
    }

    /// While on, every call of `operation` fails.
    pub(crate) fn fail(&self, operation: Operation, failing: bool) {
        let mut faults = self.faults();
        match failing {
            true => faults.failing.insert(operation),
            false => faults.failing.remove(&operation),
        };
    }

    /// The next `calls` calls of `operation` fail.
    pub(crate) fn fail_next(&self, operation: Operation, calls: usize) {
        self.faults().fail_next.insert(operation, calls);
    }

    /// How many calls of `operation` were made (failed ones too).
    pub(crate) fn calls(&self, operation: Operation) -> usize {
        self.faults().calls.get(&operation).copied().unwrap_or(0)
    }

    /// Each `unstall` call so far: when, and whether overdue.
    pub(crate) fn unstalls(&self) -> Vec<(Instant, bool)> {
        self.faults().unstalls.clone()
    }

    /// Another replica, `replica`, has entries in the queue: they are not this replica's
    /// (`queued_here` leaves them out), and `unstall` takes them out as the Redis store would:
    /// all the stalled ones once that replica is gone (not `alive`), or when overdue.
    pub(crate) fn with_peer(&self, replica: &str, alive: bool) {
        self.faults().peer = Some(Peer {
            replica: replica.to_owned(),
            alive,
        });
    }

    /// Counts a call of `operation`, and fails it if asked to.
    fn call(&self, operation: Operation) -> Result<()> {
        let mut faults = self.faults();
        *faults.calls.entry(operation).or_default() += 1;
        let next = faults
            .fail_next
            .get_mut(&operation)
            .filter(|left| **left > 0);
        let fails_next = next.map(|left| *left -= 1).is_some();
        match fails_next || faults.failing_all || faults.failing.contains(&operation) {
            true => Err(Error::Unavailable(format!("injected fault: {operation:?}"))),
            false => Ok(()),
        }
    }
}

impl<S: LeaseStore> LeaseStore for UnreliableStore<S> {
    async fn try_acquire(
        &self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        entry: Option<&QueueEntry>,
    ) -> Result<AcquireOutcome> {
        self.call(Operation::TryAcquire)?;
        self.inner.try_acquire(request, lease_id, entry).await
    }

    async fn renew(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        ttl: Option<Duration>,
        caller: &Caller,
    ) -> Result<RenewOutcome> {
        self.call(Operation::Renew)?;
        self.inner.renew(name, lease_id, ttl, caller).await
    }

    async fn release(&self, name: &LeaseName, lease_id: &LeaseId, caller: &Caller) -> Result<bool> {
        self.call(Operation::Release)?;
        self.inner.release(name, lease_id, caller).await
    }

    async fn describe(&self, name: &LeaseName) -> Result<Description> {
        self.call(Operation::Describe)?;
        self.inner.describe(name).await
    }

    async fn revoke(
        &self,
        name: &LeaseName,
        fencing_token: Option<u64>,
        reason: &str,
    ) -> Result<Vec<Revoked>> {
        self.call(Operation::Revoke)?;
        self.inner.revoke(name, fencing_token, reason).await
    }

    async fn list(
        &self,
        prefix: &ListPrefix,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<LeasePage> {
        self.call(Operation::List)?;
        self.inner.list(prefix, page_size, page_token).await
    }

    async fn ping(&self) -> Result<()> {
        self.call(Operation::Ping)?;
        self.inner.ping().await
    }
}

impl<S: QueueStore> QueueStore for UnreliableStore<S> {
    async fn leave(&self, name: &LeaseName, entries: &[QueueEntry]) -> Result<()> {
        self.call(Operation::Leave)?;
        self.inner.leave(name, entries).await
    }

    async fn queued_here(&self, name: &LeaseName) -> Result<Vec<QueueEntry>> {
        self.call(Operation::QueuedHere)?;
        let mut queued = self.inner.queued_here(name).await?;
        if let Some(peer) = &self.faults().peer {
            queued.retain(|entry| entry.replica != peer.replica);
        }
        Ok(queued)
    }

    async fn queue_status(&self, name: &LeaseName, entries: &[QueueEntry]) -> Result<QueueStatus> {
        self.call(Operation::QueueStatus)?;
        self.inner.queue_status(name, entries).await
    }

    async fn unstall(
        &self,
        name: &LeaseName,
        stalled: &[QueueEntry],
        overdue: bool,
    ) -> Result<usize> {
        self.call(Operation::Unstall)?;
        let peer_alive = {
            let mut faults = self.faults();
            faults.unstalls.push((Instant::now(), overdue));
            faults.peer.as_ref().map(|peer| peer.alive)
        };
        match peer_alive {
            None => self.inner.unstall(name, stalled, overdue).await,
            Some(true) if !overdue => Ok(0),
            Some(_) => {
                self.inner.leave(name, stalled).await?;
                Ok(stalled.len())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_are_counted_and_fail_as_asked() {
        let replica = UnreliableStore::memory_replica(Reports::Heard);
        let store = replica.store();
        let name = LeaseName("jobs/nightly".into());
        let failed = |outcome: Result<Description>| matches!(outcome, Err(Error::Unavailable(_)));

        assert!(store.describe(&name).await.is_ok());
        store.fail_next(Operation::Describe, 2);
        assert!(failed(store.describe(&name).await));
        assert!(failed(store.describe(&name).await));
        assert!(store.describe(&name).await.is_ok());

        store.fail_every_call(true);
        assert!(failed(store.describe(&name).await));
        assert!(store.ping().await.is_err());
        store.fail_every_call(false);
        assert!(store.ping().await.is_ok());

        assert_eq!(store.calls(Operation::Describe), 5);
        assert_eq!(store.calls(Operation::Ping), 2);
        assert_eq!(store.calls(Operation::Renew), 0);
    }
}
