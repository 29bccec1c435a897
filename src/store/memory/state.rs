//! The embedded store's state: the permits taken of each name, the queues and recent revokes,
//! and the bookkeeping on them that every operation shares.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    time::Duration,
};

use tokio::time::Instant;

use crate::{
    lease::{
        ChangeCause, Description, Expiry, Grant, Holder, LeaseChange, LeaseId, LeaseName,
        Occupancy, StoreEvents, ValidatedAcquire,
    },
    store::unix_micros,
};

#[derive(Debug, Default)]
pub(super) struct State {
    /// The permits taken of each name: one for an exclusive lease. No name without permits.
    /// Ordered, so that `list` pages are ranges of names.
    pub(super) leases: BTreeMap<String, Permits>,
    /// Grants revoked recently, by name: what their holders' renewals answer.
    pub(super) revoked: HashMap<String, Vec<Revocation>>,
    /// Queue entries of waiting callers by name, first in line at the front; no empty queues.
    pub(super) queues: HashMap<String, VecDeque<String>>,
    /// The last fencing token issued, for all names: one counter keeps every name's tokens
    /// increasing, and flooring it at the clock keeps them increasing across a restart.
    last_token: u64,
}

/// The permits of one name taken now: held, or in their lock-delay. May hold permits that
/// freed (reads skip them; writes and the sweep drop them).
#[derive(Debug)]
pub(super) struct Permits {
    /// The limit they were granted with (1: an exclusive lease).
    pub(super) limit: u32,
    pub(super) taken: Vec<HeldLease>,
}

/// A revoked grant, remembered so that its holder learns why it lost the lease.
#[derive(Debug)]
pub(super) struct Revocation {
    pub(super) lease_id: LeaseId,
    pub(super) reason: String,
    /// Forgotten after this (the grant's TTL after the revoke: its holder renews well before).
    pub(super) until: Instant,
}

#[derive(Debug)]
pub(super) struct HeldLease {
    pub(super) lease_id: LeaseId,
    pub(super) holder: String,
    pub(super) fencing_token: u64,
    pub(super) ttl: Duration,
    lock_delay: Duration,
    pub(super) expires_at: Instant,
    /// The same moment as `expires_at`, in Unix milliseconds, for replies.
    pub(super) expires_at_unix_ms: i64,
}

impl HeldLease {
    /// Its holder holds it: the TTL has not passed.
    pub(super) fn is_held(&self, now: Instant) -> bool {
        self.expires_at > now
    }

    /// Its permit is taken: held, or in the lock-delay after its expiry.
    pub(super) fn is_taken(&self, now: Instant) -> bool {
        self.expires_at + self.lock_delay > now
    }

    pub(super) fn grant(&self) -> Grant {
        Grant {
            lease_id: self.lease_id.clone(),
            fencing_token: self.fencing_token,
            ttl_ms: self.ttl.as_millis() as i64,
            expires_at_ms: self.expires_at_unix_ms,
        }
    }

    fn info(&self, now: Instant) -> Holder {
        let frees_at = self.expires_at + self.lock_delay;
        // Rounded up: `held_ms() > 0` exactly while `is_held`, so that a watcher timing the
        // expiry never calls a lease expired that can still be renewed.
        let remaining = frees_at.saturating_duration_since(now).as_nanos();
        Holder {
            holder: self.holder.clone(),
            fencing_token: self.fencing_token,
            expiry: Some(Expiry {
                remaining_ms: remaining.div_ceil(1_000_000) as i64,
                at_unix_ms: self.expires_at_unix_ms,
                lock_delay_ms: self.lock_delay.as_millis() as i64,
            }),
        }
    }

    /// The change a watcher is told of.
    pub(super) fn change(&self, cause: ChangeCause, limit: u32, reason: &str) -> LeaseChange {
        LeaseChange {
            cause,
            holder: self.holder.clone(),
            fencing_token: self.fencing_token,
            limit,
            ttl_ms: match cause {
                ChangeCause::Granted => self.ttl.as_millis() as i64,
                _ => 0,
            },
            expires_at_ms: self.expires_at_unix_ms,
            reason: reason.to_owned(),
        }
    }
}

impl Permits {
    pub(super) fn taken(&self, now: Instant) -> impl Iterator<Item = &HeldLease> {
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
pub(super) fn unix_millis_after(remaining_ms: i64) -> i64 {
    (unix_micros() / 1000) as i64 + remaining_ms
}

/// What a change to a queue asks of the waiters, sent after the state lock is let go.
#[derive(Default)]
pub(super) struct WakeUps {
    /// Entries that a free permit now goes to.
    pub(super) wake: Vec<String>,
    pub(super) moved: bool,
}

impl WakeUps {
    pub(super) fn send(self, events: &StoreEvents, name: &LeaseName) {
        for entry in &self.wake {
            events.wake(name.as_str(), entry);
        }
        if self.moved {
            events.moved(name.as_str());
        }
    }
}

impl State {
    /// Grants a free permit of `name` with a new token; also answers the change for watchers.
    pub(super) fn grant(
        &mut self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        now: Instant,
    ) -> (Grant, LeaseChange) {
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
        let change = lease.change(ChangeCause::Granted, request.limit, "");
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
        (grant, change)
    }

    /// What `describe` answers for `name`.
    pub(super) fn describe(&self, name: &str, now: Instant) -> Description {
        let waiters = self.queues.get(name).map_or(0, VecDeque::len) as u32;
        let Some(permits) = self.leases.get(name) else {
            return Description {
                waiters,
                ..Description::default()
            };
        };
        let mut taken: Vec<&HeldLease> = permits.taken(now).collect();
        taken.sort_by_key(|lease| lease.fencing_token);
        Description {
            limit: if taken.is_empty() { 0 } else { permits.limit },
            holders: taken.into_iter().map(|lease| lease.info(now)).collect(),
            waiters,
        }
    }

    /// The reason `lease_id`'s grant of `name` was revoked, if it was, recently.
    pub(super) fn revoked_reason(
        &self,
        name: &str,
        lease_id: &LeaseId,
        now: Instant,
    ) -> Option<String> {
        self.revoked
            .get(name)?
            .iter()
            .find(|revocation| revocation.lease_id == *lease_id && revocation.until > now)
            .map(|revocation| revocation.reason.clone())
    }

    pub(super) fn occupancy(&self, name: &LeaseName, now: Instant) -> Occupancy {
        self.leases
            .get(name.as_str())
            .map_or_else(Occupancy::free, |permits| permits.occupancy(now))
    }

    /// The lease `lease_id` holds on `name`, if its TTL has not passed.
    pub(super) fn held_by(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        now: Instant,
    ) -> Option<&HeldLease> {
        self.leases
            .get(name.as_str())?
            .taken
            .iter()
            .find(|lease| lease.lease_id == *lease_id && lease.is_held(now))
    }

    /// The first `count` entries in line: those the free permits go to.
    pub(super) fn first_in_line(&self, name: &LeaseName, count: u32) -> Vec<String> {
        self.queues
            .get(name.as_str())
            .map_or_else(Vec::new, |queue| {
                queue.iter().take(count as usize).cloned().collect()
            })
    }

    /// Takes `entries` out of the queue of `name`; the queue goes when it is empty.
    pub(super) fn remove_entries(&mut self, name: &LeaseName, entries: &[String]) -> bool {
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
