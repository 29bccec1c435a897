//! The embedded store: all leases and wait queues in one in-process map. The default when no
//! Redis URL is given; the same contract as Redis, for one `leased` process.

mod state;

use std::{
    ops::Bound,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use tokio::time::Instant;

use state::{HeldLease, MAX_WAKE_UPS, Place, Revocation, State, WakeUps, unix_millis_after};

use super::{from_hex, invalid_page_token, to_hex};
#[cfg(test)]
use crate::lease::Replica;
use crate::{
    error::{Error, Refusal, Result},
    lease::{
        AcquireOutcome, Caller, ChangeCause, DescribedLease, Description, LeaseGone, LeaseId,
        LeaseName, LeasePage, LeaseStore, ListPrefix, Occupancy, QueueEntry, QueueStatus,
        QueueStore, RenewOutcome, Revoked, StoreEvents, ValidatedAcquire, limits::parse_name,
    },
    telemetry,
};

/// How often expired leases (and the reasons of old revokes) are swept from the maps (reads
/// also ignore them at once).
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Names a page of `list` looks at, held or not, per lease it may list (for a page size of at
/// least [`MIN_COUNTED_PAGE_SIZE`]): the work of one call, done under the store's lock, is
/// bounded by its page size even when most names under the prefix are no longer held, as the
/// Redis store's is by ten `SCAN` batches of about the page size. A page of 1,000 looks at
/// 10,000 names at most, a page of 1 at 100.
const NAMES_PER_PAGE_SLOT: usize = 10;

/// The page size [`names_per_page`] counts a smaller page as (the Redis store's smallest batch).
const MIN_COUNTED_PAGE_SIZE: usize = 10;

/// Names a page of `page_size` looks at, at most.
fn names_per_page(page_size: usize) -> usize {
    page_size.max(MIN_COUNTED_PAGE_SIZE) * NAMES_PER_PAGE_SLOT
}

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

    /// A caller that was not granted: with an `entry`, it joins the queue (or keeps its place:
    /// its entry's, or for a caller that chose its lease id, its earlier wait's, until that wait
    /// would have ended). Also answers whether the callers behind it moved.
    fn queue_up(
        &self,
        state: &mut State,
        request: &ValidatedAcquire,
        entry: Option<&QueueEntry>,
        occupancy: Occupancy,
        now: Instant,
    ) -> (AcquireOutcome, bool) {
        let name = &request.name;
        let Some(entry) = entry else {
            let outcome = AcquireOutcome::Busy {
                occupancy,
                position: 0,
            };
            return (outcome, false);
        };
        if let Some(rank) = state.rank(name, entry) {
            let outcome = AcquireOutcome::Busy {
                occupancy,
                position: rank as u32 + 1,
            };
            return (outcome, false);
        }
        let own_id = request.lease_id.as_ref().map(|id| id.expose().to_owned());
        let place = own_id.as_ref().and_then(|id| {
            let place = state.places.get(name.as_str())?.get(id)?;
            (place.until > now).then_some(place)
        });
        if place.is_some_and(|place| place.replaced.as_ref() == Some(entry)) {
            // A retry took this call's place: this call is over, and must not take the place
            // back (the two would take it from each other for ever).
            return (AcquireOutcome::Superseded, false);
        }
        let earlier = place.map(|place| (place.arrival, place.entry.clone(), place.until));
        // The earlier call's entry, if still there: this one replaces it.
        let replaced = match &earlier {
            Some((_, earlier_entry, _)) if earlier_entry != entry => state
                .remove_entries(name, std::slice::from_ref(earlier_entry))
                .then(|| earlier_entry.clone()),
            _ => None,
        };
        if state.in_line(name) >= self.max_waiters_per_name {
            let outcome = AcquireOutcome::QueueFull {
                limit: self.max_waiters_per_name,
            };
            return (outcome, false);
        }
        let (arrival, until) = match earlier {
            Some((arrival, _, until)) => (arrival, until),
            None => (state.next_arrival(), now + request.wait),
        };
        state.insert_entry(name, arrival, entry);
        let took_a_place = replaced.is_some();
        if let Some(id) = own_id {
            let places = state.places.entry(name.as_str().to_owned()).or_default();
            let place = Place {
                arrival,
                entry: entry.clone(),
                until,
                replaced,
            };
            places.insert(id, place);
            // As the Redis store: past the queue's bound, the records of waits that are over or
            // whose entry left are dropped, so that callers who join and leave cannot grow it.
            if places.len() > self.max_waiters_per_name {
                let queue = state.queues.get(name.as_str());
                let queued = |entry: &QueueEntry| {
                    queue.is_some_and(|queue| queue.iter().any(|queued| queued.entry == *entry))
                };
                let places = state.places.entry(name.as_str().to_owned()).or_default();
                places.retain(|_, place| place.until > now && queued(&place.entry));
            }
        }
        let position = state.rank(name, entry).map_or(0, |rank| rank as u32 + 1);
        // Back at an earlier place: those behind moved, and the call it took it from learns so.
        let moved = took_a_place || (position as usize) < state.in_line(name);
        let outcome = AcquireOutcome::Busy {
            occupancy,
            position,
        };
        (outcome, moved)
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
        state.places.retain(|_, places| {
            places.retain(|_, place| place.until > now);
            !places.is_empty()
        });
        state.ended.retain(|_, ended| {
            ended.retain(|_, until| *until > now);
            !ended.is_empty()
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
        entry: Option<&QueueEntry>,
    ) -> Result<AcquireOutcome> {
        let _span = telemetry::store_span("memory", "acquire", &request.name).entered();
        let name = &request.name;
        let now = Instant::now();
        let mut wake_ups = WakeUps::default();
        let outcome = {
            let mut state = self.state();
            if let Some(again) = state.answer_again(request, lease_id, now) {
                return Ok(again);
            }
            if request.lease_id.is_some() && state.lease_id_ended(name, lease_id, now) {
                return Ok(AcquireOutcome::LeaseIdEnded);
            }
            let occupancy = state.occupancy(name, now);
            if occupancy.held > 0 && occupancy.limit != request.limit {
                return Ok(AcquireOutcome::LimitMismatch {
                    limit: occupancy.limit,
                });
            }
            let rank = entry.and_then(|entry| state.rank(name, entry));
            let in_line = state.in_line(name);
            let granting = if request.limit > 1 {
                // A counting lease: the free permits go to the first callers in line; a caller
                // not in line comes after all of them.
                let free = match occupancy.held {
                    0 => request.limit,
                    held => occupancy.limit.saturating_sub(held),
                };
                rank.unwrap_or(in_line) < free as usize
            } else {
                // A read-write lease: the first in line, or the run of shared callers at the
                // head of the line; a caller not in line only when nobody waits.
                let compatible = occupancy.held == 0 || (request.shared && occupancy.shared());
                match rank {
                    _ if !compatible => false,
                    Some(rank) => rank < occupancy.due as usize,
                    None => in_line == 0,
                }
            };
            if granting {
                if request.shared && occupancy.held >= request.max_shared {
                    return Ok(AcquireOutcome::TooManyShared {
                        limit: request.max_shared,
                    });
                }
                let (grant, change) = state.grant(request, lease_id, now);
                // Under the state lock: watchers get the changes of a name in their order.
                self.events.changed(name.as_str(), change);
                if let Some(entry) = entry.filter(|_| rank.is_some()) {
                    state.remove_entries(name, std::slice::from_ref(entry));
                    if let Some(id) = &request.lease_id {
                        state.forget_place(name, id);
                    }
                    wake_ups.moved = state.queues.contains_key(name.as_str());
                    // The shared callers behind this one in a run may take theirs too.
                    let due = state.occupancy(name, now).due;
                    wake_ups.wake = state.first_in_line(name, due.min(MAX_WAKE_UPS));
                }
                AcquireOutcome::Granted(grant)
            } else {
                // Callers ahead take what is free: tell them again.
                let due = occupancy.due.min(MAX_WAKE_UPS);
                wake_ups.wake = state.first_in_line(name, due);
                let (outcome, moved) = self.queue_up(&mut state, request, entry, occupancy, now);
                wake_ups.moved |= moved;
                outcome
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
        caller: &Caller,
    ) -> Result<RenewOutcome> {
        let _span = telemetry::store_span("memory", "renew", name).entered();
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
            // or a shared grant is never someone else's.
            let another = state.leases.get(name.as_str()).is_some_and(|permits| {
                permits.limit == 1
                    && !permits.shared
                    && permits.taken.iter().any(|lease| lease.is_held(now))
            });
            return Ok(RenewOutcome::Lost(match another {
                true => LeaseGone::HeldByAnother,
                false => LeaseGone::ExpiredOrReleased,
            }));
        };
        if caller.is_refused_by(&lease.made_by) {
            return Err(Error::Refused(Refusal::MadeByAnotherCaller));
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

    async fn release(&self, name: &LeaseName, lease_id: &LeaseId, caller: &Caller) -> Result<bool> {
        let _span = telemetry::store_span("memory", "release", name).entered();
        let now = Instant::now();
        let wake_ups = {
            let mut state = self.state();
            let held = state.leases.get_mut(name.as_str()).and_then(|permits| {
                let index = permits
                    .taken
                    .iter()
                    .position(|lease| lease.lease_id == *lease_id && lease.is_held(now))?;
                Some((permits, index))
            });
            let Some((permits, index)) = held else {
                // Not held: perhaps not yet, by a caller that gave up while its grant was on its
                // way. As the Redis store: a permit's id ends always, an exclusive grant's when
                // its caller chose it.
                state.end_lease_id(name, lease_id, now);
                return Ok(false);
            };
            if caller.is_refused_by(&permits.taken[index].made_by) {
                return Err(Error::Refused(Refusal::MadeByAnotherCaller));
            }
            let released = permits.taken.swap_remove(index);
            if released.own_id || permits.limit > 1 || permits.shared {
                state.end_lease_id(name, lease_id, now);
            }
            let Some(permits) = state.leases.get_mut(name.as_str()) else {
                unreachable!("the name's permits were just read under the same lock");
            };
            let (limit, shared) = (permits.limit, permits.shared);
            let change = released.change(ChangeCause::Released, limit, shared, "");
            self.events.changed(name.as_str(), change);
            let held = permits.taken(now).count() as u32;
            if held == 0 {
                state.leases.remove(name.as_str());
            }
            WakeUps {
                wake: state.woken_after_ending(name, limit, held, shared, 1),
                moved: false,
            }
        };
        wake_ups.send(&self.events, name);
        Ok(true)
    }

    async fn describe(&self, name: &LeaseName) -> Result<Description> {
        let _span = telemetry::store_span("memory", "describe", name).entered();
        Ok(self.state().describe(name.as_str(), Instant::now()))
    }

    async fn revoke(
        &self,
        name: &LeaseName,
        fencing_token: Option<u64>,
        reason: &str,
    ) -> Result<Vec<Revoked>> {
        let _span = telemetry::store_span("memory", "revoke", name).entered();
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
            let (limit, shared) = (permits.limit, permits.shared);
            for lease in &ended {
                self.events.changed(
                    name.as_str(),
                    lease.change(ChangeCause::Revoked, limit, shared, reason),
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
            let wake = state.woken_after_ending(name, limit, held, shared, count);
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
        let most = names_per_page(page_size);
        for (looked_at, name) in names.by_ref().enumerate() {
            last_name = Some(name);
            let description = state.describe(name, now);
            // Names come from validated requests; one that does not parse cannot be listed.
            if let (false, Ok(name)) = (description.holders.is_empty(), parse_name(name)) {
                leases.push(DescribedLease { name, description });
            }
            if leases.len() >= page_size || looked_at + 1 >= most {
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

    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

/// One process, one replica: nothing can stall on another replica, so `unstall` is the default.
impl QueueStore for MemoryStore {
    async fn leave(&self, name: &LeaseName, entries: &[QueueEntry]) -> Result<()> {
        let _span = telemetry::store_span("memory", "leave", name).entered();
        let now = Instant::now();
        let wake_ups = {
            let mut state = self.state();
            if !state.remove_entries(name, entries) {
                return Ok(());
            }
            let due = state.occupancy(name, now).due;
            let wake = state.first_in_line(name, due.min(MAX_WAKE_UPS));
            WakeUps {
                moved: state.queues.contains_key(name.as_str()),
                wake,
            }
        };
        wake_ups.send(&self.events, name);
        Ok(())
    }

    /// One process, one replica: every entry of the queue is this replica's.
    async fn queued_here(&self, name: &LeaseName) -> Result<Vec<QueueEntry>> {
        let _span = telemetry::store_span("memory", "queued", name).entered();
        let state = self.state();
        let queue = state.queues.get(name.as_str()).into_iter().flatten();
        Ok(queue.map(|queued| queued.entry.clone()).collect())
    }

    async fn queue_status(&self, name: &LeaseName, entries: &[QueueEntry]) -> Result<QueueStatus> {
        let _span = telemetry::store_span("memory", "status", name).entered();
        let now = Instant::now();
        let state = self.state();
        let positions = entries
            .iter()
            .map(|entry| state.rank(name, entry).map_or(0, |rank| rank as u32 + 1))
            .collect();
        let occupancy = state.occupancy(name, now);
        let due = state.first_in_line(name, occupancy.due.min(MAX_WAKE_UPS));
        Ok(QueueStatus {
            occupancy,
            positions,
            due,
        })
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
mod tests;
