//! The embedded store: all leases in one in-process map. The default when no Redis URL is given;
//! the same contract as Redis, for one `leased` process.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use tokio::time::Instant;

use super::unix_micros;
use crate::{
    error::Result,
    lease::{
        AcquireOutcome, Expiry, Grant, HolderInfo, LeaseGone, LeaseId, LeaseName, LeaseStore,
        ReleaseWatchers, RenewOutcome,
    },
};

/// How often expired leases are swept from the map (reads also ignore them at once).
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// An in-process lease store.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    watchers: ReleaseWatchers,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<String, HeldLease>,
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
            watchers: ReleaseWatchers::new(max_waiters_per_name),
        });
        tokio::spawn(sweep_expired(Arc::downgrade(&store)));
        store
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("memory store lock poisoned")
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
    ) -> Result<AcquireOutcome> {
        let now = Instant::now();
        let mut state = self.state();
        if let Some(current) = state.leases.get(name.as_str()).filter(|l| l.is_live(now)) {
            if current.lease_id == *lease_id {
                // A retry of a grant that already happened: answer it again.
                return Ok(AcquireOutcome::Granted(Grant {
                    lease_id: lease_id.clone(),
                    fencing_token: current.fencing_token,
                    ttl_ms: current.ttl.as_millis() as i64,
                    expires_at_ms: current.expires_at_unix_ms,
                }));
            }
            return Ok(AcquireOutcome::Busy(current.info(now)));
        }
        let fencing_token = (state.last_token + 1).max(unix_micros());
        state.last_token = fencing_token;
        let ttl_ms = ttl.as_millis() as i64;
        let expires_at_unix_ms = unix_millis_after(ttl_ms);
        state.leases.insert(
            name.as_str().to_owned(),
            HeldLease {
                lease_id: lease_id.clone(),
                holder: holder.to_owned(),
                fencing_token,
                ttl,
                expires_at: now + ttl,
                expires_at_unix_ms,
            },
        );
        Ok(AcquireOutcome::Granted(Grant {
            lease_id: lease_id.clone(),
            fencing_token,
            ttl_ms,
            expires_at_ms: expires_at_unix_ms,
        }))
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
        let released = {
            let mut state = self.state();
            let holds = state
                .leases
                .get(name.as_str())
                .is_some_and(|l| l.is_live(now) && l.lease_id == *lease_id);
            if holds {
                state.leases.remove(name.as_str());
            }
            holds
        };
        if released {
            self.watchers.notify(name.as_str());
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

    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    fn release_watchers(&self) -> &ReleaseWatchers {
        &self.watchers
    }
}
