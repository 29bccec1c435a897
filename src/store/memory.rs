//! The embedded store: all leases and wait queues in one in-process map. The default when no
//! Redis URL is given; the same contract as Redis, for one `leased` process.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use tokio::time::Instant;

use super::unix_micros;
use crate::{
    error::Result,
    lease::{
        AcquireOutcome, Expiry, Grant, HolderInfo, LeaseGone, LeaseId, LeaseName, LeaseStore,
        QueueStatus, RenewOutcome, Waiters,
    },
};

/// How often expired leases are swept from the map (reads also ignore them at once).
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// An in-process lease store.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    waiters: Arc<Waiters>,
    max_waiters_per_name: usize,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<String, HeldLease>,
    /// Queue entries of waiting callers by name, first in line at the front; no empty queues.
    queues: HashMap<String, VecDeque<String>>,
    /// The last fencing token issued, for all names: one counter keeps every name's tokens
    /// increasing, and flooring it at the clock keeps them increasing across a restart.
    last_token: u64,
}

#[derive(Debug)]
struct HeldLease {
    lease_id: LeaseId,
    holder: String,
    fencing_token: u64,
    ttl: Duration,
    expires_at: Instant,
    /// The same moment as `expires_at`, in Unix milliseconds, for replies.
    expires_at_unix_ms: i64,
}

impl HeldLease {
    fn is_live(&self, now: Instant) -> bool {
        self.expires_at > now
    }

    fn grant(&self) -> Grant {
        Grant {
            lease_id: self.lease_id.clone(),
            fencing_token: self.fencing_token,
            ttl_ms: self.ttl.as_millis() as i64,
            expires_at_ms: self.expires_at_unix_ms,
        }
    }

    fn info(&self, now: Instant) -> HolderInfo {
        let remaining_ms = self.expires_at.saturating_duration_since(now).as_millis() as i64;
        HolderInfo {
            holder: self.holder.clone(),
            fencing_token: self.fencing_token,
            expiry: Some(Expiry {
                remaining_ms,
                at_unix_ms: self.expires_at_unix_ms,
            }),
        }
    }
}

/// The wall-clock Unix milliseconds `remaining_ms` from now.
fn unix_millis_after(remaining_ms: i64) -> i64 {
    (unix_micros() / 1000) as i64 + remaining_ms
}

impl MemoryStore {
    /// An empty store with a background sweep of expired leases (which stops with the store).
    pub fn new(max_waiters_per_name: usize) -> Arc<Self> {
        let store = Arc::new(MemoryStore {
            state: Mutex::new(State::default()),
            waiters: Arc::new(Waiters::new()),
            max_waiters_per_name,
        });
        tokio::spawn(sweep_expired(Arc::downgrade(&store)));
        store
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("memory store lock poisoned")
    }

    /// A caller that was not granted: with an `entry`, it joins the queue (or keeps its place).
    fn queue_up(
        &self,
        state: &mut State,
        name: &LeaseName,
        entry: Option<&str>,
        holder: Option<HolderInfo>,
    ) -> AcquireOutcome {
        let Some(entry) = entry else {
            return AcquireOutcome::Busy {
                holder,
                position: 0,
            };
        };
        let queue = state.queues.entry(name.as_str().to_owned()).or_default();
        let position = match queue.iter().position(|queued| queued == entry) {
            Some(index) => index + 1,
            None if queue.len() >= self.max_waiters_per_name => {
                if queue.is_empty() {
                    state.queues.remove(name.as_str());
                }
                return AcquireOutcome::QueueFull {
                    limit: self.max_waiters_per_name,
                };
            }
            None => {
                queue.push_back(entry.to_owned());
                queue.len()
            }
        };
        AcquireOutcome::Busy {
            holder,
            position: position as u32,
        }
    }
}

/// What a change to a queue asks of the waiters, sent after the state lock is let go.
#[derive(Default)]
struct WakeUps {
    first: Option<String>,
    moved: bool,
}

impl WakeUps {
    fn send(self, waiters: &Waiters, name: &LeaseName) {
        if let Some(entry) = self.first {
            waiters.wake(name.as_str(), &entry);
        }
        if self.moved {
            waiters.moved(name.as_str());
        }
    }
}

impl State {
    /// Grants the free lease `name` with a new token.
    fn grant(
        &mut self,
        name: &LeaseName,
        holder: &str,
        ttl: Duration,
        lease_id: &LeaseId,
        now: Instant,
    ) -> Grant {
        let fencing_token = (self.last_token + 1).max(unix_micros());
        self.last_token = fencing_token;
        let lease = HeldLease {
            lease_id: lease_id.clone(),
            holder: holder.to_owned(),
            fencing_token,
            ttl,
            expires_at: now + ttl,
            expires_at_unix_ms: unix_millis_after(ttl.as_millis() as i64),
        };
        let grant = lease.grant();
        self.leases.insert(name.as_str().to_owned(), lease);
        grant
    }

    fn live_lease(&self, name: &LeaseName, now: Instant) -> Option<&HeldLease> {
        self.leases.get(name.as_str()).filter(|l| l.is_live(now))
    }

    fn first_in_line(&self, name: &LeaseName) -> Option<&String> {
        self.queues
            .get(name.as_str())
            .and_then(|queue| queue.front())
    }

    /// Takes `entries` out of the queue of `name`; the queue goes when it is empty.
    fn remove_entries(&mut self, name: &LeaseName, entries: &[String]) -> bool {
        let Some(queue) = self.queues.get_mut(name.as_str()) else {
            return false;
        };
        let before = queue.len();
        queue.retain(|entry| !entries.contains(entry));
        let removed = queue.len() != before;
        if queue.is_empty() {
            self.queues.remove(name.as_str());
        }
        removed
    }
}

async fn sweep_expired(store: Weak<MemoryStore>) {
    let mut interval = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        interval.tick().await;
        let Some(store) = store.upgrade() else { return };
        let now = Instant::now();
        store.state().leases.retain(|_, lease| lease.is_live(now));
    }
}

impl LeaseStore for MemoryStore {
    async fn try_acquire(
        &self,
        name: &LeaseName,
        holder: &str,
        ttl: Duration,
        lease_id: &LeaseId,
        entry: Option<&str>,
    ) -> Result<AcquireOutcome> {
        let now = Instant::now();
        let mut wake_ups = WakeUps::default();
        let outcome = {
            let mut state = self.state();
            let current = match state.live_lease(name, now) {
                Some(current) if current.lease_id == *lease_id => {
                    // A retry of a grant that already happened: answer it again.
                    return Ok(AcquireOutcome::Granted(current.grant()));
                }
                Some(current) => Some(current.info(now)),
                None => None,
            };
            let first = state.first_in_line(name).cloned();
            match (current, first) {
                (None, None) => {
                    AcquireOutcome::Granted(state.grant(name, holder, ttl, lease_id, now))
                }
                (None, Some(first)) if Some(first.as_str()) == entry => {
                    let grant = state.grant(name, holder, ttl, lease_id, now);
                    state.remove_entries(name, &[first]);
                    wake_ups.moved = state.queues.contains_key(name.as_str());
                    AcquireOutcome::Granted(grant)
                }
                (current, first) => {
                    if current.is_none() {
                        // Free, but someone else is first in line: it gets the lease (tell it again).
                        wake_ups.first = first;
                    }
                    self.queue_up(&mut state, name, entry, current)
                }
            }
        };
        wake_ups.send(&self.waiters, name);
        Ok(outcome)
    }

    async fn renew(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        ttl: Option<Duration>,
    ) -> Result<RenewOutcome> {
        let now = Instant::now();
        let mut state = self.state();
        let Some(lease) = state
            .leases
            .get_mut(name.as_str())
            .filter(|l| l.is_live(now))
        else {
            return Ok(RenewOutcome::Lost(LeaseGone::ExpiredOrReleased));
        };
        if lease.lease_id != *lease_id {
            return Ok(RenewOutcome::Lost(LeaseGone::HeldByAnother));
        }
        if let Some(ttl) = ttl {
            lease.ttl = ttl;
        }
        let ttl_ms = lease.ttl.as_millis() as i64;
        lease.expires_at = now + lease.ttl;
        lease.expires_at_unix_ms = unix_millis_after(ttl_ms);
        Ok(RenewOutcome::Renewed {
            fencing_token: lease.fencing_token,
            ttl_ms,
            expires_at_ms: lease.expires_at_unix_ms,
        })
    }

    async fn release(&self, name: &LeaseName, lease_id: &LeaseId) -> Result<bool> {
        let now = Instant::now();
        let (released, first) = {
            let mut state = self.state();
            let holds = state
                .live_lease(name, now)
                .is_some_and(|l| l.lease_id == *lease_id);
            if holds {
                state.leases.remove(name.as_str());
            }
            (holds, state.first_in_line(name).cloned())
        };
        if released {
            WakeUps {
                first,
                moved: false,
            }
            .send(&self.waiters, name);
        }
        Ok(released)
    }

    async fn describe(&self, name: &LeaseName) -> Result<Option<HolderInfo>> {
        let now = Instant::now();
        let state = self.state();
        Ok(state
            .leases
            .get(name.as_str())
            .filter(|l| l.is_live(now))
            .map(|l| l.info(now)))
    }

    async fn leave(&self, name: &LeaseName, entries: &[String]) -> Result<()> {
        let now = Instant::now();
        let wake_ups = {
            let mut state = self.state();
            if !state.remove_entries(name, entries) {
                return Ok(());
            }
            let free = state.live_lease(name, now).is_none();
            let first = state.first_in_line(name).cloned();
            WakeUps {
                moved: first.is_some(),
                first: first.filter(|_| free),
            }
        };
        wake_ups.send(&self.waiters, name);
        Ok(())
    }

    async fn queue_status(&self, name: &LeaseName, entries: &[String]) -> Result<QueueStatus> {
        let now = Instant::now();
        let state = self.state();
        let queue = state.queues.get(name.as_str());
        let positions = entries
            .iter()
            .map(|entry| {
                queue
                    .and_then(|queue| queue.iter().position(|queued| queued == entry))
                    .map_or(0, |index| index as u32 + 1)
            })
            .collect();
        Ok(QueueStatus {
            holder: state.live_lease(name, now).map(|l| l.info(now)),
            positions,
        })
    }

    /// Wake-ups are calls into [`Waiters`] from this process: nothing to listen to.
    fn listen(&self, _name: &LeaseName) {}

    fn unlisten(&self, _name: &LeaseName) {}

    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }
}
