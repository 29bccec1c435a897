//! The embedded store's state: the permits taken of each name, the queues and recent revokes,
//! and the bookkeeping on them that every operation shares.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    time::Duration,
};

use tokio::time::Instant;

use crate::{
    lease::{
        AcquireOutcome, Caller, ChangeCause, Description, ENDED_LEASE_ID_KEPT, Expiry, Grant,
        GrantMismatch, Holder, LeaseChange, LeaseId, LeaseName, MAX_ENDED_LEASE_IDS, Occupancy,
        QueueEntry, StoreEvents, ValidatedAcquire,
    },
    store::unix_micros,
};

/// How far down a queue a run of shared entries is counted, as the Redis store's
/// `SHARED_RUN_SCAN`: the callers past it are granted once those ahead of them are.
const SHARED_RUN_SCAN: usize = 64;

/// At most this many callers are woken at once (and named due by a queue status), as the Redis
/// store's `MAX_WAKE_UPS`.
pub(super) const MAX_WAKE_UPS: u32 = 8;

#[derive(Debug, Default)]
pub(super) struct State {
    /// The permits taken of each name: one for an exclusive lease. No name without permits.
    /// Ordered, so that `list` pages are ranges of names.
    pub(super) leases: BTreeMap<String, Permits>,
    /// Grants revoked recently, by name: what their holders' renewals answer.
    pub(super) revoked: HashMap<String, Vec<Revocation>>,
    /// Queue entries of waiting callers by name, first in line at the front, each with its
    /// arrival (the order it keeps); no empty queues.
    pub(super) queues: HashMap<String, VecDeque<Queued>>,
    /// The places in line of callers that chose their lease ids, by name and lease id: a retry
    /// of their wait takes the same place until the first wait would have ended.
    pub(super) places: HashMap<String, HashMap<String, Place>>,
    /// The arrival of the last entry queued, for all names.
    last_arrival: u64,
    /// Lease ids released lately, by name, until when: an Acquire with one of them as the
    /// caller's own lease id grants nothing ([`ENDED_LEASE_ID_KEPT`]).
    pub(super) ended: HashMap<String, HashMap<String, Instant>>,
    /// The last fencing token issued, for all names: one counter keeps every name's tokens
    /// increasing, and flooring it at the clock keeps them increasing across a restart.
    last_token: u64,
}

/// The permits of one name taken now: held, or in their lock-delay. May hold permits that
/// freed (reads skip them; writes and the sweep drop them).
#[derive(Debug)]
pub(super) struct Permits {
    /// The limit they were granted with (1: an exclusive lease, or the shared grants of a
    /// read-write lease).
    pub(super) limit: u32,
    /// Shared grants of a read-write lease.
    pub(super) shared: bool,
    pub(super) taken: Vec<HeldLease>,
}

/// A waiting caller's entry in a queue.
#[derive(Debug)]
pub(super) struct Queued {
    /// The order of the queue: earlier arrivals first.
    pub(super) arrival: u64,
    pub(super) entry: QueueEntry,
}

/// Where a caller that chose its lease id waited.
#[derive(Debug)]
pub(super) struct Place {
    pub(super) arrival: u64,
    /// Its entry, which a retry's entry replaces.
    pub(super) entry: QueueEntry,
    /// When its first wait would have ended: the place is kept until then.
    pub(super) until: Instant,
    /// The entry of the earlier call whose place this one took: that call is over.
    pub(super) replaced: Option<QueueEntry>,
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
    /// The caller chose its lease id: its release leaves the id ended.
    pub(super) own_id: bool,
    /// Who made a grant of the caller's own lease id (anyone, for the server's ids): only it is
    /// answered it again, renews it or releases it.
    pub(super) made_by: Caller,
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

    fn info(&self, shared: bool, now: Instant) -> Holder {
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
            shared,
        }
    }

    /// The change a watcher is told of.
    pub(super) fn change(
        &self,
        cause: ChangeCause,
        limit: u32,
        shared: bool,
        reason: &str,
    ) -> LeaseChange {
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
            shared,
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
            .map(|lease| lease.info(self.shared, now));
        Occupancy {
            holder: soonest,
            held,
            limit: self.limit,
            due: 0,
        }
    }
}

/// How many of the first callers in `queue` a grant may go to when `taken` grants of `limit` are
/// taken (shared ones if `shared`): as `due_in_line` of the Redis store's prelude.lua.
pub(super) fn due_in_line(
    queue: Option<&VecDeque<Queued>>,
    taken: u32,
    limit: u32,
    shared: bool,
) -> u32 {
    if taken > 0 && !shared {
        return limit.saturating_sub(taken);
    }
    let Some(head) = queue.and_then(VecDeque::front) else {
        return 0;
    };
    if !head.entry.is_shared() {
        return u32::from(taken == 0);
    }
    let queue = queue.into_iter().flatten();
    let run = queue.take(SHARED_RUN_SCAN);
    run.take_while(|queued| queued.entry.is_shared()).count() as u32
}

/// The wall-clock Unix milliseconds `remaining_ms` from now.
pub(super) fn unix_millis_after(remaining_ms: i64) -> i64 {
    (unix_micros() / 1000) as i64 + remaining_ms
}

/// What a change to a queue asks of the waiters, sent after the state lock is let go.
#[derive(Default)]
pub(super) struct WakeUps {
    /// Entries that a free permit now goes to.
    pub(super) wake: Vec<QueueEntry>,
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
            own_id: request.lease_id.is_some(),
            made_by: match request.lease_id {
                Some(_) => request.caller.clone(),
                None => Caller::anyone(),
            },
        };
        let grant = lease.grant();
        let change = lease.change(ChangeCause::Granted, request.limit, request.shared, "");
        let permits = self
            .leases
            .entry(request.name.as_str().to_owned())
            .or_insert_with(|| Permits {
                limit: request.limit,
                shared: request.shared,
                taken: Vec::new(),
            });
        permits.taken.retain(|lease| lease.is_taken(now));
        permits.limit = request.limit;
        permits.shared = request.shared;
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
            holders: taken
                .into_iter()
                .map(|lease| lease.info(permits.shared, now))
                .collect(),
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

    /// Who takes `name`, and how many of the first callers in line a grant may go to now.
    pub(super) fn occupancy(&self, name: &LeaseName, now: Instant) -> Occupancy {
        let mut occupancy = self
            .leases
            .get(name.as_str())
            .map_or_else(Occupancy::free, |permits| permits.occupancy(now));
        let shared = occupancy.shared();
        occupancy.due = due_in_line(
            self.queues.get(name.as_str()),
            occupancy.held,
            occupancy.limit,
            shared,
        );
        occupancy
    }

    /// Where `entry` stands in the queue of `name`: 0 = first in line.
    pub(super) fn rank(&self, name: &LeaseName, entry: &QueueEntry) -> Option<usize> {
        let queue = self.queues.get(name.as_str())?;
        queue.iter().position(|queued| queued.entry == *entry)
    }

    /// Callers waiting in the queue of `name`.
    pub(super) fn in_line(&self, name: &LeaseName) -> usize {
        self.queues.get(name.as_str()).map_or(0, VecDeque::len)
    }

    /// Puts `entry` in the queue of `name`, by its `arrival`.
    pub(super) fn insert_entry(&mut self, name: &LeaseName, arrival: u64, entry: &QueueEntry) {
        let queue = self.queues.entry(name.as_str().to_owned()).or_default();
        let index = queue.partition_point(|queued| queued.arrival < arrival);
        queue.insert(
            index,
            Queued {
                arrival,
                entry: entry.clone(),
            },
        );
    }

    /// The arrival of a new entry: after every entry queued before.
    pub(super) fn next_arrival(&mut self) -> u64 {
        self.last_arrival += 1;
        self.last_arrival
    }

    /// The answer to a retry of `request` whose lease id holds a grant of its name already (the
    /// first reply was lost): the grant as it was made, if the retry asks for its mode and limit
    /// and comes from the caller that made it; `None` when the id holds nothing.
    pub(super) fn answer_again(
        &self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        now: Instant,
    ) -> Option<AcquireOutcome> {
        let permits = self.leases.get(request.name.as_str())?;
        let lease = permits
            .taken
            .iter()
            .find(|lease| lease.lease_id == *lease_id && lease.is_held(now))?;
        Some(if request.caller.is_refused_by(&lease.made_by) {
            AcquireOutcome::OwnGrantOfAnotherCaller
        } else if let Some(mismatch) =
            GrantMismatch::between(request, permits.limit, permits.shared)
        {
            AcquireOutcome::OwnGrantDiffers(mismatch)
        } else {
            AcquireOutcome::Granted(lease.grant())
        })
    }

    /// The first `count` entries in line: those the free permits go to.
    pub(super) fn first_in_line(&self, name: &LeaseName, count: u32) -> Vec<QueueEntry> {
        self.queues
            .get(name.as_str())
            .map_or_else(Vec::new, |queue| {
                let first = queue.iter().take(count as usize);
                first.map(|queued| queued.entry.clone()).collect()
            })
    }

    /// The callers in line to wake once `ended` grants of `name` ended and `held` grants of
    /// `limit` (shared ones if `shared`) are still taken, as a release does. A counting lease's
    /// free permits go to the first callers in line, those freed here to the last of them (the
    /// others were woken when theirs freed); a read-write lease's to the first in line, or the
    /// run of shared callers at the head.
    pub(super) fn woken_after_ending(
        &self,
        name: &LeaseName,
        limit: u32,
        held: u32,
        shared: bool,
        ended: usize,
    ) -> Vec<QueueEntry> {
        let queue = self.queues.get(name.as_str());
        if limit > 1 {
            let free = limit.saturating_sub(held);
            let first = self.first_in_line(name, free).into_iter();
            return first.skip((free as usize).saturating_sub(ended)).collect();
        }
        let due = due_in_line(queue, held, limit, shared);
        self.first_in_line(name, due.min(MAX_WAKE_UPS))
    }

    /// Marks `lease_id` released lately on `name`, as the Redis store's `end_lease_id`.
    pub(super) fn end_lease_id(&mut self, name: &LeaseName, lease_id: &LeaseId, now: Instant) {
        let ended = self.ended.entry(name.as_str().to_owned()).or_default();
        ended.retain(|_, until| *until > now);
        ended.insert(lease_id.expose().to_owned(), now + ENDED_LEASE_ID_KEPT);
        while ended.len() > MAX_ENDED_LEASE_IDS {
            let soonest = ended.iter().min_by_key(|(_, until)| **until);
            let Some(soonest) = soonest.map(|(id, _)| id.clone()) else {
                break;
            };
            ended.remove(&soonest);
        }
    }

    /// Whether `lease_id` was released lately on `name`.
    pub(super) fn lease_id_ended(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        now: Instant,
    ) -> bool {
        let ended = self.ended.get(name.as_str());
        let until = ended.and_then(|ended| ended.get(lease_id.expose()));
        until.is_some_and(|until| *until > now)
    }

    /// Forgets the place in line of `lease_id`'s wait for `name`: it was granted.
    pub(super) fn forget_place(&mut self, name: &LeaseName, lease_id: &LeaseId) {
        if let Some(places) = self.places.get_mut(name.as_str()) {
            places.remove(lease_id.expose());
            if places.is_empty() {
                self.places.remove(name.as_str());
            }
        }
    }

    /// Takes `entries` out of the queue of `name`; the queue goes when it is empty.
    pub(super) fn remove_entries(&mut self, name: &LeaseName, entries: &[QueueEntry]) -> bool {
        let Some(queue) = self.queues.get_mut(name.as_str()) else {
            return false;
        };
        let before = queue.len();
        queue.retain(|queued| !entries.contains(&queued.entry));
        let removed = queue.len() != before;
        if queue.is_empty() {
            self.queues.remove(name.as_str());
        }
        removed
    }
}
