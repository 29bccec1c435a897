//! The embedded store: all leases and wait queues in one in-process map. The default when no
//! Redis URL is given; the same contract as Redis, for one `leased` process.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    ops::Bound,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use tokio::time::Instant;

use super::{from_hex, invalid_page_token, to_hex, unix_micros};
#[cfg(test)]
use crate::lease::Replica;
use crate::{
    error::Result,
    lease::{
        AcquireOutcome, ChangeCause, DescribedLease, Description, Expiry, Grant, Holder,
        LeaseChange, LeaseGone, LeaseId, LeaseName, LeasePage, LeaseStore, ListPrefix, Occupancy,
        QueueStatus, RenewOutcome, Revoked, StoreEvents, ValidatedAcquire, limits::parse_name,
    },
};

/// How often expired leases (and the reasons of old revokes) are swept from the maps (reads
/// also ignore them at once).
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Names a page of `list` looks at, at most, held or not: the cost of a page stays bounded even
/// when most names under the prefix are no longer held.
const MAX_NAMES_PER_PAGE: usize = 10_000;

/// The version of this store's page tokens: `m1.<hex of the prefix>.<hex of the last name>`.
const PAGE_TOKEN_VERSION: &str = "m1.";

/// An in-process lease store.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// Where wake-ups and changes go, called in process.
    events: StoreEvents,
    max_waiters_per_name: usize,
}

#[derive(Debug, Default)]
struct State {
    /// The permits taken of each name: one for an exclusive lease. No name without permits.
    /// Ordered, so that `list` pages are ranges of names.
    leases: BTreeMap<String, Permits>,
    /// Grants revoked recently, by name: what their holders' renewals answer.
    revoked: HashMap<String, Vec<Revocation>>,
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

/// A revoked grant, remembered so that its holder learns why it lost the lease.
#[derive(Debug)]
struct Revocation {
    lease_id: LeaseId,
    reason: String,
    /// Forgotten after this (the grant's TTL after the revoke: its holder renews well before).
    until: Instant,
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
    fn change(&self, cause: ChangeCause, limit: u32, reason: &str) -> LeaseChange {
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
    /// An empty store that reports into `events`, with a background sweep of expired leases
    /// (which stops with the store).
    pub fn new(max_waiters_per_name: usize, events: StoreEvents) -> Arc<Self> {
        let store = Arc::new(MemoryStore {
            state: Mutex::new(State::default()),
            events,
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
    fn send(self, events: &StoreEvents, name: &LeaseName) {
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
    fn grant(
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
    fn describe(&self, name: &str, now: Instant) -> Description {
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
    fn revoked_reason(&self, name: &str, lease_id: &LeaseId, now: Instant) -> Option<String> {
        self.revoked
            .get(name)?
            .iter()
            .find(|revocation| revocation.lease_id == *lease_id && revocation.until > now)
            .map(|revocation| revocation.reason.clone())
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
        let mut state = store.state();
        state.leases.retain(|_, permits| {
            permits.taken.retain(|lease| lease.is_taken(now));
            !permits.taken.is_empty()
        });
        state.revoked.retain(|_, revocations| {
            revocations.retain(|revocation| revocation.until > now);
            !revocations.is_empty()
        });
    }
}

/// A page token: where the next page of a listing of `prefix` starts (after `last_name`).
fn next_page_token(prefix: &ListPrefix, last_name: &str) -> String {
    format!(
        "{PAGE_TOKEN_VERSION}{}.{}",
        to_hex(prefix.as_str()),
        to_hex(last_name)
    )
}

/// The last name of the previous page, from a token this store made for this prefix.
fn parse_page_token(token: &str, prefix: &ListPrefix) -> Result<String> {
    let invalid = invalid_page_token;
    let fields = token.strip_prefix(PAGE_TOKEN_VERSION).ok_or_else(invalid)?;
    let (token_prefix, last_name) = fields.split_once('.').ok_or_else(invalid)?;
    let token_prefix = from_hex(token_prefix).ok_or_else(invalid)?;
    let last_name = from_hex(last_name).ok_or_else(invalid)?;
    if token_prefix != prefix.as_str() || !last_name.starts_with(prefix.as_str()) {
        return Err(invalid());
    }
    Ok(last_name)
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
                let (grant, change) = state.grant(request, lease_id, now);
                // Under the state lock: watchers get the changes of a name in their order.
                self.events.changed(name.as_str(), change);
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
        wake_ups.send(&self.events, name);
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
        let held = state.leases.get_mut(name.as_str()).and_then(|permits| {
            permits
                .taken
                .iter_mut()
                .find(|lease| lease.lease_id == *lease_id && lease.is_held(now))
        });
        let Some(lease) = held else {
            if let Some(reason) = state.revoked_reason(name.as_str(), lease_id, now) {
                return Ok(RenewOutcome::Lost(LeaseGone::Revoked { reason }));
            }
            // Only an exclusive lease can be "held by another": a permit of a counting lease
            // is never someone else's.
            let another = state.leases.get(name.as_str()).is_some_and(|permits| {
                permits.limit == 1 && permits.taken.iter().any(|lease| lease.is_held(now))
            });
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
            let Some(index) = permits
                .taken
                .iter()
                .position(|lease| lease.lease_id == *lease_id && lease.is_held(now))
            else {
                return Ok(false);
            };
            let released = permits.taken.swap_remove(index);
            let change = released.change(ChangeCause::Released, permits.limit, "");
            self.events.changed(name.as_str(), change);
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
        wake_ups.send(&self.events, name);
        Ok(true)
    }

    async fn describe(&self, name: &LeaseName) -> Result<Description> {
        Ok(self.state().describe(name.as_str(), Instant::now()))
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
        wake_ups.send(&self.events, name);
        Ok(())
    }

    /// One process, one replica: every entry of the queue is this replica's.
    async fn queued_here(&self, name: &LeaseName) -> Result<Vec<String>> {
        let state = self.state();
        let queue = state.queues.get(name.as_str());
        Ok(queue.map_or_else(Vec::new, |queue| queue.iter().cloned().collect()))
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

    async fn revoke(
        &self,
        name: &LeaseName,
        fencing_token: Option<u64>,
        reason: &str,
    ) -> Result<Vec<Revoked>> {
        let now = Instant::now();
        let (revoked, wake_ups) = {
            let mut state = self.state();
            let Some(permits) = state.leases.get_mut(name.as_str()) else {
                return Ok(Vec::new());
            };
            // Only grants that still hold: one in its lock-delay has expired already.
            let (mut ended, kept): (Vec<HeldLease>, Vec<HeldLease>) =
                std::mem::take(&mut permits.taken)
                    .into_iter()
                    .partition(|lease| {
                        lease.is_held(now)
                            && fencing_token.is_none_or(|token| token == lease.fencing_token)
                    });
            permits.taken = kept;
            if ended.is_empty() {
                return Ok(Vec::new());
            }
            ended.sort_by_key(|lease| lease.fencing_token);
            let limit = permits.limit;
            for lease in &ended {
                self.events.changed(
                    name.as_str(),
                    lease.change(ChangeCause::Revoked, limit, reason),
                );
            }
            let held = permits.taken(now).count() as u32;
            if held == 0 {
                state.leases.remove(name.as_str());
            }
            let revoked = ended
                .iter()
                .map(|lease| Revoked {
                    fencing_token: lease.fencing_token,
                    holder: lease.holder.clone(),
                })
                .collect();
            let revocations = state.revoked.entry(name.as_str().to_owned()).or_default();
            let count = ended.len();
            revocations.extend(ended.into_iter().map(|lease| Revocation {
                until: now + lease.ttl,
                lease_id: lease.lease_id,
                reason: reason.to_owned(),
            }));
            // As a release: the permits free now go to the first `free` callers in line; those
            // freed here go to the last of them, the others were woken when theirs freed.
            let free = limit.saturating_sub(held);
            let wake = state
                .first_in_line(name, free)
                .into_iter()
                .skip((free as usize).saturating_sub(count))
                .collect();
            (revoked, WakeUps { wake, moved: false })
        };
        wake_ups.send(&self.events, name);
        Ok(revoked)
    }

    async fn list(
        &self,
        prefix: &ListPrefix,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<LeasePage> {
        let after = page_token
            .map(|token| parse_page_token(token, prefix))
            .transpose()?;
        let start = match &after {
            Some(last_name) => Bound::Excluded(last_name.as_str()),
            None => Bound::Included(prefix.as_str()),
        };
        let now = Instant::now();
        let state = self.state();
        // The names under a prefix are one range of the ordered map.
        let mut names = state
            .leases
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(name, _)| name)
            .take_while(|name| name.starts_with(prefix.as_str()));
        let mut leases = Vec::new();
        let mut last_name = None;
        for (looked_at, name) in names.by_ref().enumerate() {
            last_name = Some(name);
            let description = state.describe(name, now);
            // Names come from validated requests; one that does not parse cannot be listed.
            if let (false, Ok(name)) = (description.holders.is_empty(), parse_name(name)) {
                leases.push(DescribedLease { name, description });
            }
            if leases.len() >= page_size || looked_at + 1 >= MAX_NAMES_PER_PAGE {
                break;
            }
        }
        let more = names.next().is_some();
        Ok(LeasePage {
            leases,
            next_page_token: last_name
                .filter(|_| more)
                .map(|last_name| next_page_token(prefix, last_name)),
        })
    }

    /// Every change is reported to [`StoreEvents`] in process, with nothing to register or lose.
    async fn keep_watching(&self, _name: &LeaseName, _watching: bool) -> Result<bool> {
        Ok(true)
    }

    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

/// A [`Replica`] on a new embedded store, for the core's unit tests.
#[cfg(test)]
pub(crate) fn test_replica(max_waiters_per_name: usize) -> Arc<Replica<MemoryStore>> {
    let events = StoreEvents::new();
    Replica::new(
        MemoryStore::new(max_waiters_per_name, events.clone()),
        events,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::{
        lease::{
            AcquireOutcome, Limits,
            limits::{AcquireFields, parse_list_prefix},
            waiting::{AcquireEvent, acquire},
        },
        shutdown::Shutdown,
    };

    const NAME: &str = "jobs/nightly";

    fn name() -> LeaseName {
        parse_name(NAME).unwrap()
    }

    fn request(name: &str, ttl_ms: i64, limit: u32, lock_delay_ms: i64) -> ValidatedAcquire {
        Limits::default()
            .validate_acquire(AcquireFields {
                name,
                holder: "holder".into(),
                ttl_ms,
                limit,
                lock_delay_ms,
                ..AcquireFields::default()
            })
            .unwrap()
    }

    /// Takes a permit at once; panics if none is free.
    async fn take(store: &MemoryStore, request: &ValidatedAcquire) -> (LeaseId, Grant) {
        let lease_id = LeaseId::generate();
        match store.try_acquire(request, &lease_id, None).await {
            Ok(AcquireOutcome::Granted(grant)) => (lease_id, grant),
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    fn revoked_because(reason: &str) -> RenewOutcome {
        RenewOutcome::Lost(LeaseGone::Revoked {
            reason: reason.into(),
        })
    }

    /// A revoke with the holder's token ends the grant at once: the holder's renewal answers
    /// why, its release finds nothing, and the name is free.
    #[tokio::test(start_paused = true)]
    async fn a_revoke_ends_the_grant_and_tells_its_holder_why() {
        let store = test_replica(16);
        let (lease_id, grant) = take(&store, &request(NAME, 10_000, 1, 5_000)).await;

        let stale = store
            .revoke(&name(), Some(grant.fencing_token - 1), "stale")
            .await
            .unwrap();
        assert!(stale.is_empty(), "a stale token revoked {stale:?}");
        assert_eq!(store.describe(&name()).await.unwrap().holders.len(), 1);

        let revoked = store
            .revoke(&name(), Some(grant.fencing_token), "wedged on disk")
            .await
            .unwrap();
        assert_eq!(
            revoked,
            vec![Revoked {
                fencing_token: grant.fencing_token,
                holder: "holder".into()
            }]
        );
        // Freed at once: no lock-delay after a revoke.
        assert!(store.describe(&name()).await.unwrap().holders.is_empty());
        assert_eq!(
            store.renew(&name(), &lease_id, None).await.unwrap(),
            revoked_because("wedged on disk")
        );
        assert!(!store.release(&name(), &lease_id).await.unwrap());
        let (_, next) = take(&store, &request(NAME, 10_000, 1, 0)).await;
        assert!(next.fencing_token > grant.fencing_token);
        // Even with another holder now, the revoked one is told it was revoked.
        assert_eq!(
            store.renew(&name(), &lease_id, None).await.unwrap(),
            revoked_because("wedged on disk")
        );
    }

    /// The reason is remembered for the grant's TTL at least, then swept.
    #[tokio::test(start_paused = true)]
    async fn a_revoke_reason_is_kept_for_the_ttl() {
        let store = test_replica(16);
        let (lease_id, _) = take(&store, &request(NAME, 2_000, 1, 0)).await;
        store.revoke(&name(), None, "maintenance").await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_999)).await;
        assert_eq!(
            store.renew(&name(), &lease_id, None).await.unwrap(),
            revoked_because("maintenance")
        );
        tokio::time::sleep(SWEEP_INTERVAL).await;
        assert_eq!(
            store.renew(&name(), &lease_id, None).await.unwrap(),
            RenewOutcome::Lost(LeaseGone::ExpiredOrReleased)
        );
        assert!(store.state().revoked.is_empty());
    }

    /// Token 0 revokes every permit of a counting lease; a permit in its lock-delay has
    /// expired already and is not revoked (it stays taken until its delay ends).
    #[tokio::test(start_paused = true)]
    async fn a_revoke_without_token_ends_every_grant_that_holds() {
        let store = test_replica(16);
        let (_, expiring) = take(&store, &request(NAME, 100, 3, 1_000)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (_, first) = take(&store, &request(NAME, 10_000, 3, 1_000)).await;
        let (_, second) = take(&store, &request(NAME, 10_000, 3, 1_000)).await;
        let revoked = store.revoke(&name(), None, "drain").await.unwrap();
        let tokens: Vec<u64> = revoked.iter().map(|r| r.fencing_token).collect();
        assert_eq!(tokens, vec![first.fencing_token, second.fencing_token]);
        let left = store.describe(&name()).await.unwrap();
        let left: Vec<u64> = left.holders.iter().map(|h| h.fencing_token).collect();
        assert_eq!(left, vec![expiring.fencing_token]);
        let in_delay = store
            .revoke(&name(), Some(expiring.fencing_token), "too late")
            .await
            .unwrap();
        assert!(in_delay.is_empty());
    }

    /// A revoke hands the lease to the first caller in line at once, like a release.
    #[tokio::test(start_paused = true)]
    async fn a_revoke_wakes_the_first_in_line() {
        let store = test_replica(16);
        let (_, grant) = take(&store, &request(NAME, 60_000, 1, 0)).await;
        let mut waiter = acquire(
            store.clone(),
            Limits::default()
                .validate_acquire(AcquireFields {
                    name: NAME,
                    holder: "waiter".into(),
                    ttl_ms: 10_000,
                    wait_ms: 60_000,
                    ..AcquireFields::default()
                })
                .unwrap(),
            Shutdown::never(),
        );
        assert!(matches!(
            waiter.recv().await.unwrap().unwrap(),
            AcquireEvent::Waiting(_)
        ));
        let revoked_at = Instant::now();
        store.revoke(&name(), None, "stuck").await.unwrap();
        match waiter.recv().await.unwrap().unwrap() {
            AcquireEvent::Granted(delivery) => {
                assert!(delivery.deliver().fencing_token > grant.fencing_token)
            }
            other => panic!("expected Granted, got {other:?}"),
        }
        assert_eq!(Instant::now(), revoked_at);
    }

    /// Pages through every name under the prefix; the names of each page in order.
    async fn list_all(store: &MemoryStore, prefix: &str, page_size: usize) -> Vec<Vec<String>> {
        let prefix = parse_list_prefix(prefix).unwrap();
        let mut pages = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = store
                .list(&prefix, page_size, token.as_deref())
                .await
                .unwrap();
            pages.push(
                page.leases
                    .iter()
                    .map(|lease| lease.name.as_str().to_owned())
                    .collect(),
            );
            match page.next_page_token {
                Some(next) => token = Some(next),
                None => return pages,
            }
            assert!(pages.len() < 100, "the listing does not end");
        }
    }

    /// 2,500 held leases under a prefix, pages of 1,000: each appears exactly once, and nothing
    /// outside the prefix or no longer held does.
    #[tokio::test(start_paused = true)]
    async fn list_pages_through_every_held_lease_once() {
        let store = test_replica(16);
        for n in 0..2_500 {
            take(&store, &request(&format!("svc/{n:05}"), 60_000, 1, 0)).await;
        }
        // Around the prefix in name order: "svc." < "svc/" < "svc0".
        for other in ["svc.before", "svc0after", "sv", "other/1"] {
            take(&store, &request(other, 60_000, 1, 0)).await;
        }
        let (released_id, _) = take(&store, &request("svc/released", 60_000, 1, 0)).await;
        assert!(
            store
                .release(&parse_name("svc/released").unwrap(), &released_id)
                .await
                .unwrap()
        );
        // Expired, in its lock-delay: still taken, so listed.
        take(&store, &request("svc/delayed", 100, 1, 60_000)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;

        let pages = list_all(&store, "svc/", 1_000).await;
        let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![1_000, 1_000, 501]);
        let mut names: Vec<String> = pages.into_iter().flatten().collect();
        let listed = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), listed, "a name was listed twice");
        let mut expected: Vec<String> = (0..2_500).map(|n| format!("svc/{n:05}")).collect();
        expected.push("svc/delayed".into());
        expected.sort();
        assert_eq!(names, expected);

        let everything = list_all(&store, "", 1_000).await.concat();
        assert_eq!(everything.len(), 2_505);
    }

    /// A page looks at a bounded number of names: a prefix full of names no longer held gives
    /// short (even empty) pages with a next token, never one unbounded walk.
    #[tokio::test(start_paused = true)]
    async fn a_list_page_has_a_bounded_cost() {
        let store = test_replica(16);
        let count = MAX_NAMES_PER_PAGE + 10;
        for n in 0..count {
            take(&store, &request(&format!("old/{n:06}"), 10, 1, 0)).await;
        }
        take(&store, &request("old/zz-held", 60_000, 1, 0)).await;
        tokio::time::sleep(Duration::from_millis(20)).await; // expired, not yet swept
        let prefix = parse_list_prefix("old/").unwrap();
        let first = store.list(&prefix, 1_000, None).await.unwrap();
        assert!(first.leases.is_empty());
        let token = first.next_page_token.expect("a next page");
        let second = store.list(&prefix, 1_000, Some(&token)).await.unwrap();
        let names: Vec<&str> = second.leases.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, vec!["old/zz-held"]);
        assert_eq!(second.next_page_token, None);
    }

    /// A page token is the store's own, for one prefix: garbage, or a token of another listing,
    /// is INVALID_ARGUMENT naming `page_token`.
    #[tokio::test(start_paused = true)]
    async fn a_foreign_page_token_is_refused() {
        let store = test_replica(16);
        for n in 0..3 {
            take(&store, &request(&format!("a/{n}"), 60_000, 1, 0)).await;
        }
        let a = parse_list_prefix("a/").unwrap();
        let page = store.list(&a, 1, None).await.unwrap();
        let token = page.next_page_token.expect("a next page");
        let b = parse_list_prefix("b/").unwrap();
        let everything = parse_list_prefix("").unwrap();
        let made_for_b = token.replace("612f", "622f");
        for (prefix, token) in [
            (&b, token.as_str()),
            (&everything, token.as_str()),
            (&a, "garbage"),
            (&a, "m1."),
            (&a, "m1.612f.zz"),
            (&a, "m1.612f.612"),
            (&a, "m1.612f.+1"),
            (&a, made_for_b.as_str()),
        ] {
            match store.list(prefix, 10, Some(token)).await {
                Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "page_token"),
                other => {
                    panic!("{token:?} for {prefix:?}: expected INVALID_ARGUMENT, got {other:?}")
                }
            }
        }
        let rest = store.list(&a, 10, Some(&token)).await.unwrap();
        assert_eq!(rest.leases.len(), 2);
    }

    /// `describe` shows a grant's lock-delay, which `remaining_ms` counts and `held_ms` does not.
    #[tokio::test(start_paused = true)]
    async fn describe_shows_the_lock_delay() {
        let store = test_replica(16);
        take(&store, &request(NAME, 10_000, 1, 250)).await;
        tokio::time::advance(Duration::from_micros(500)).await;
        let info = store.describe(&name()).await.unwrap().holders.remove(0);
        let expiry = info.expiry.unwrap();
        // Rounded up: still held for part of a millisecond is still held.
        assert_eq!((expiry.remaining_ms, expiry.lock_delay_ms), (10_250, 250));
        assert_eq!(expiry.held_ms(), 10_000);
        tokio::time::advance(Duration::from_millis(9_999) + Duration::from_micros(500)).await;
        let expiry = store.describe(&name()).await.unwrap().holders[0]
            .expiry
            .unwrap();
        assert_eq!(expiry.held_ms(), 0);
    }
}
