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
        AcquireOutcome, Description, Expiry, Grant, HolderInfo, LeaseGone, LeaseId, LeaseName,
        LeaseStore, Occupancy, QueueStatus, RenewOutcome, ValidatedAcquire, Waiters,
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
    /// The permits taken of each name: one for an exclusive lease. No name without permits.
    leases: HashMap<String, Permits>,
    /// Queue entries of waiting callers by name, first in line at the front; no empty queues.
    queues: HashMap<String, VecDeque<String>>,
    /// The last fencing token issued, for all names: one counter keeps every name's tokens
    /// increasing, and flooring it at the clock keeps them increasing across a restart.
    last_token: u64,
}

/// The permits of one name taken now: held, or in their lock-delay. May hold permits that
/// freed (reads skip them; writes and the sweep drop them).
#[derive(Debug)]
struct Permits {
    /// The limit they were granted with (1: an exclusive lease).
    limit: u32,
    taken: Vec<HeldLease>,
}

#[derive(Debug)]
struct HeldLease {
    lease_id: LeaseId,
    holder: String,
    fencing_token: u64,
    ttl: Duration,
    lock_delay: Duration,
    expires_at: Instant,
    /// The same moment as `expires_at`, in Unix milliseconds, for replies.
    expires_at_unix_ms: i64,
}

impl HeldLease {
    /// Its holder holds it: the TTL has not passed.
    fn is_held(&self, now: Instant) -> bool {
        self.expires_at > now
    }

    /// Its permit is taken: held, or in the lock-delay after its expiry.
    fn is_taken(&self, now: Instant) -> bool {
        self.expires_at + self.lock_delay > now
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
        let frees_at = self.expires_at + self.lock_delay;
        let remaining_ms = frees_at.saturating_duration_since(now).as_millis() as i64;
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

impl Permits {
    fn taken(&self, now: Instant) -> impl Iterator<Item = &HeldLease> {
        self.taken.iter().filter(move |lease| lease.is_taken(now))
    }

    fn occupancy(&self, now: Instant) -> Occupancy {
        let held = self.taken(now).count() as u32;
        if held == 0 {
            return Occupancy::free();
        }
        let soonest = self
            .taken(now)
            .min_by_key(|lease| lease.expires_at + lease.lock_delay)
            .map(|lease| lease.info(now));
        Occupancy {
            holder: soonest,
            held,
            limit: self.limit,
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
        occupancy: Occupancy,
    ) -> AcquireOutcome {
        let Some(entry) = entry else {
            return AcquireOutcome::Busy {
                occupancy,
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
            occupancy,
            position: position as u32,
        }
    }
}

/// What a change to a queue asks of the waiters, sent after the state lock is let go.
#[derive(Default)]
struct WakeUps {
    /// Entries that a free permit now goes to.
    wake: Vec<String>,
    moved: bool,
}

impl WakeUps {
    fn send(self, waiters: &Waiters, name: &LeaseName) {
        for entry in &self.wake {
            waiters.wake(name.as_str(), entry);
        }
        if self.moved {
            waiters.moved(name.as_str());
        }
    }
}

impl State {
    /// Grants a free permit of `name` with a new token.
    fn grant(&mut self, request: &ValidatedAcquire, lease_id: &LeaseId, now: Instant) -> Grant {
        let fencing_token = (self.last_token + 1).max(unix_micros());
        self.last_token = fencing_token;
        let lease = HeldLease {
            lease_id: lease_id.clone(),
            holder: request.holder.clone(),
            fencing_token,
            ttl: request.ttl,
            lock_delay: request.lock_delay,
            expires_at: now + request.ttl,
            expires_at_unix_ms: unix_millis_after(request.ttl.as_millis() as i64),
        };
        let grant = lease.grant();
        let permits = self
            .leases
            .entry(request.name.as_str().to_owned())
            .or_insert_with(|| Permits {
                limit: request.limit,
                taken: Vec::new(),
            });
        permits.taken.retain(|lease| lease.is_taken(now));
        permits.limit = request.limit;
        permits.taken.push(lease);
        grant
    }

    fn occupancy(&self, name: &LeaseName, now: Instant) -> Occupancy {
        self.leases
            .get(name.as_str())
            .map_or_else(Occupancy::free, |permits| permits.occupancy(now))
    }

    /// The lease `lease_id` holds on `name`, if its TTL has not passed.
    fn held_by(&self, name: &LeaseName, lease_id: &LeaseId, now: Instant) -> Option<&HeldLease> {
        self.leases
            .get(name.as_str())?
            .taken
            .iter()
            .find(|lease| lease.lease_id == *lease_id && lease.is_held(now))
    }

    /// The first `count` entries in line: those the free permits go to.
    fn first_in_line(&self, name: &LeaseName, count: u32) -> Vec<String> {
        self.queues
            .get(name.as_str())
            .map_or_else(Vec::new, |queue| {
                queue.iter().take(count as usize).cloned().collect()
            })
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
        store.state().leases.retain(|_, permits| {
            permits.taken.retain(|lease| lease.is_taken(now));
            !permits.taken.is_empty()
        });
    }
}

impl LeaseStore for MemoryStore {
    async fn try_acquire(
        &self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        entry: Option<&str>,
    ) -> Result<AcquireOutcome> {
        let name = &request.name;
        let now = Instant::now();
        let mut wake_ups = WakeUps::default();
        let outcome = {
            let mut state = self.state();
            if let Some(current) = state.held_by(name, lease_id, now) {
                // A retry of a grant that already happened: answer it again.
                return Ok(AcquireOutcome::Granted(current.grant()));
            }
            let occupancy = state.occupancy(name, now);
            if occupancy.held > 0 && occupancy.limit != request.limit {
                return Ok(AcquireOutcome::LimitMismatch {
                    limit: occupancy.limit,
                });
            }
            let free = occupancy.free_permits(request.limit) as usize;
            // The free permits go to the first `free` callers in line; a caller not in line
            // comes after all of them.
            let queue = state.queues.get(name.as_str());
            let ahead = entry.and_then(|entry| {
                queue.and_then(|queue| queue.iter().position(|queued| queued == entry))
            });
            let in_line = queue.map_or(0, VecDeque::len);
            if ahead.unwrap_or(in_line) < free {
                let grant = state.grant(request, lease_id, now);
                if let Some(entry) = entry.filter(|_| ahead.is_some()) {
                    state.remove_entries(name, &[entry.to_owned()]);
                    wake_ups.moved = state.queues.contains_key(name.as_str());
                }
                AcquireOutcome::Granted(grant)
            } else {
                if free > 0 {
                    // Free permits that callers ahead get: tell them again.
                    wake_ups.wake = state.first_in_line(name, free as u32);
                }
                self.queue_up(&mut state, name, entry, occupancy)
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
        let Some(permits) = state.leases.get_mut(name.as_str()) else {
            return Ok(RenewOutcome::Lost(LeaseGone::ExpiredOrReleased));
        };
        let exclusive = permits.limit == 1;
        let Some(lease) = permits
            .taken
            .iter_mut()
            .find(|lease| lease.lease_id == *lease_id && lease.is_held(now))
        else {
            // Only an exclusive lease can be "held by another": a permit of a counting lease
            // is never someone else's.
            let another = exclusive && permits.taken.iter().any(|lease| lease.is_held(now));
            return Ok(RenewOutcome::Lost(match another {
                true => LeaseGone::HeldByAnother,
                false => LeaseGone::ExpiredOrReleased,
            }));
        };
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
        let wake_ups = {
            let mut state = self.state();
            let Some(permits) = state.leases.get_mut(name.as_str()) else {
                return Ok(false);
            };
            let before = permits.taken.len();
            permits
                .taken
                .retain(|lease| !(lease.lease_id == *lease_id && lease.is_held(now)));
            if permits.taken.len() == before {
                return Ok(false);
            }
            let held = permits.taken(now).count() as u32;
            // The permits free now go to the first `free` callers in line; the one freed here
            // goes to the last of them, the others were woken when theirs freed.
            let free = permits.limit.saturating_sub(held);
            if held == 0 {
                state.leases.remove(name.as_str());
            }
            WakeUps {
                wake: state
                    .first_in_line(name, free)
                    .into_iter()
                    .skip((free as usize).saturating_sub(1))
                    .collect(),
                moved: false,
            }
        };
        wake_ups.send(&self.waiters, name);
        Ok(true)
    }

    async fn describe(&self, name: &LeaseName) -> Result<Description> {
        let now = Instant::now();
        let state = self.state();
        let waiters = state.queues.get(name.as_str()).map_or(0, VecDeque::len) as u32;
        let Some(permits) = state.leases.get(name.as_str()) else {
            return Ok(Description {
                waiters,
                ..Description::default()
            });
        };
        let mut taken: Vec<&HeldLease> = permits.taken(now).collect();
        taken.sort_by_key(|lease| lease.fencing_token);
        Ok(Description {
            limit: if taken.is_empty() { 0 } else { permits.limit },
            holders: taken.into_iter().map(|lease| lease.info(now)).collect(),
            waiters,
        })
    }

    async fn leave(&self, name: &LeaseName, entries: &[String]) -> Result<()> {
        let now = Instant::now();
        let wake_ups = {
            let mut state = self.state();
            if !state.remove_entries(name, entries) {
                return Ok(());
            }
            let free = state.occupancy(name, now).free_for_queue();
            let wake = state.first_in_line(name, free);
            WakeUps {
                moved: state.queues.contains_key(name.as_str()),
                wake,
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
            occupancy: state.occupancy(name, now),
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
