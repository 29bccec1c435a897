//! The leases each Renew stream on this server holds now, so that `--max-leases-per-stream`
//! counts leases held at once, and a stream's state stays as small as what it holds.
//!
//! Why it is built this way:
//! - A stream's set once took every name it was sent and never shrank: a client could grow it
//!   with renewals that answered `lost`, and a long-lived stream renewing many leases over time hit
//!   the limit for good. So only a `renewed` answer adds a name, and a name leaves as soon as the
//!   stream can no longer be holding it.
//! - A client ends a lease with the Release RPC, a different call (usually on the same
//!   connection) that the stream never sees. [`HeldLeases`], shared by the service, maps each name
//!   to the streams here that hold it, so that a successful Release takes the name out of those
//!   streams at once. It is keyed by name because Release names one lease. It is locked only
//!   when a name enters or leaves a stream's set and on a successful Release; renewing a name the
//!   stream holds already takes only that stream's own lock, which nobody else contends for.
//! - Nobody here sees a release through another replica, or a lease the client let lapse. So each
//!   entry keeps the local instant at which the TTL of its last renewal has run out, counted from
//!   when the answer arrived and so never before the store's own expiry; past it the lease can
//!   only be held again by a renewal, which would answer `lost`. Such entries are dropped when a
//!   new name finds the set full, which needs no timer per entry.
//! - Entries match the lease, not only the name: a Release of one lease id must not free the slot
//!   of a stream that renews a later holder's lease of the same name. The id is kept as a keyed
//!   hash (SipHash with this process's random key): 8 bytes, never printed, and a client without
//!   the key cannot craft a collision; an accidental one could only free a slot early.
//! - A name is stored once per stream as an `Arc<str>` that the registry shares, and maps give
//!   back their capacity when they become sparse, so memory follows the leases held now.
//! - Lock order: the registry, then a stream's set; a stream's own fast paths take only its set.

use std::{
    collections::HashMap,
    fmt,
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use tokio::time::Instant;

use crate::lease::{LeaseId, LeaseName};

/// Every stream's held leases by name, shared by the service (see the module comment).
#[derive(Default)]
pub struct HeldLeases {
    fingerprints: RandomState,
    by_name: Mutex<HashMap<Arc<str>, Vec<Holding>>>,
}

/// One stream here that holds the name with this lease.
struct Holding {
    stream: Arc<Mutex<StreamSet>>,
    lease: LeaseFingerprint,
}

/// A lease id as this module keeps it: a keyed hash of it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct LeaseFingerprint(u64);

impl fmt::Debug for LeaseFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseFingerprint(<redacted>)")
    }
}

/// A lease one stream holds, until `expires` unless renewed again.
#[derive(Clone, Copy, Debug)]
struct Held {
    lease: LeaseFingerprint,
    expires: Instant,
}

/// The leases one stream holds, by name.
#[derive(Default)]
struct StreamSet {
    held: HashMap<Arc<str>, Held>,
}

impl StreamSet {
    /// Whether the stream holds `name` with `lease`.
    fn holds(&self, name: &str, lease: LeaseFingerprint) -> bool {
        self.held.get(name).is_some_and(|held| held.lease == lease)
    }

    /// Removes `name` if it is held with `lease`; whether it was.
    fn remove(&mut self, name: &str, lease: LeaseFingerprint) -> bool {
        if !self.holds(name, lease) {
            return false;
        }
        self.held.remove(name);
        shrink_if_sparse(&mut self.held);
        true
    }

    /// Removes and answers the entries whose last renewal has expired by `now`.
    fn take_expired(&mut self, now: Instant) -> Vec<Arc<str>> {
        let expired: Vec<Arc<str>> = self
            .held
            .iter()
            .filter(|(_, held)| held.expires <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in &expired {
            self.held.remove(name);
        }
        shrink_if_sparse(&mut self.held);
        expired
    }
}

/// Gives memory back once a map holds far fewer entries than it has room for, leaving room to
/// grow again without rehashing at once.
fn shrink_if_sparse<V>(map: &mut HashMap<Arc<str>, V>) {
    const SMALL: usize = 16;
    if map.capacity() > SMALL && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (each change is one
/// insert or remove).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HeldLeases {
    /// The set of one new Renew stream, holding at most `limit` leases at once.
    pub fn stream(self: &Arc<Self>, limit: usize) -> StreamLeases {
        StreamLeases {
            registry: self.clone(),
            set: Arc::default(),
            limit,
        }
    }

    /// `lease_id` released `name` (the store said so): no stream here holds that lease any more.
    pub fn released(&self, name: &LeaseName, lease_id: &LeaseId) {
        let lease = self.fingerprint(lease_id);
        let mut by_name = lock(&self.by_name);
        let Some(holdings) = by_name.get_mut(name.as_str()) else {
            return;
        };
        holdings.retain(|holding| {
            if holding.lease != lease {
                return true;
            }
            lock(&holding.stream).remove(name.as_str(), lease);
            false
        });
        if holdings.is_empty() {
            by_name.remove(name.as_str());
            shrink_if_sparse(&mut by_name);
        }
    }

    fn fingerprint(&self, lease_id: &LeaseId) -> LeaseFingerprint {
        LeaseFingerprint(self.fingerprints.hash_one(lease_id.expose()))
    }

    /// Removes `stream`'s holding of `name` (the caller also removes it from the stream's set).
    fn forget(
        by_name: &mut HashMap<Arc<str>, Vec<Holding>>,
        name: &str,
        stream: &Arc<Mutex<StreamSet>>,
    ) {
        let Some(holdings) = by_name.get_mut(name) else {
            return;
        };
        holdings.retain(|holding| !Arc::ptr_eq(&holding.stream, stream));
        if holdings.is_empty() {
            by_name.remove(name);
            shrink_if_sparse(by_name);
        }
    }

    /// How many names some stream here holds.
    #[cfg(test)]
    fn names_held(&self) -> usize {
        lock(&self.by_name).len()
    }
}

/// The leases one Renew stream holds; dropping it (the stream ended) forgets them.
pub struct StreamLeases {
    registry: Arc<HeldLeases>,
    set: Arc<Mutex<StreamSet>>,
    limit: usize,
}

impl StreamLeases {
    /// How many leases the stream may hold at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether the stream may renew `name` now: it holds it already, or it holds fewer than the
    /// limit once the leases whose last renewal expired are dropped.
    pub fn has_room_for(&self, name: &LeaseName) -> bool {
        {
            let set = lock(&self.set);
            if set.held.contains_key(name.as_str()) || set.held.len() < self.limit {
                return true;
            }
        }
        let mut by_name = lock(&self.registry.by_name);
        let mut set = lock(&self.set);
        for expired in set.take_expired(Instant::now()) {
            HeldLeases::forget(&mut by_name, &expired, &self.set);
        }
        set.held.contains_key(name.as_str()) || set.held.len() < self.limit
    }

    /// A renewal of `name` with `lease_id` answered `renewed`, valid until `expires`.
    pub fn renewed(&self, name: &LeaseName, lease_id: &LeaseId, expires: Instant) {
        let lease = self.registry.fingerprint(lease_id);
        if let Some(held) = lock(&self.set).held.get_mut(name.as_str())
            && held.lease == lease
        {
            held.expires = expires;
            return;
        }
        let mut by_name = lock(&self.registry.by_name);
        let mut set = lock(&self.set);
        // Another lease of this name may be in the set (an earlier holder's, now gone): the new
        // one takes its place and its slot.
        HeldLeases::forget(&mut by_name, name.as_str(), &self.set);
        let key = match by_name.get_key_value(name.as_str()) {
            Some((key, _)) => key.clone(),
            None => Arc::from(name.as_str()),
        };
        set.held.insert(key.clone(), Held { lease, expires });
        by_name.entry(key).or_default().push(Holding {
            stream: self.set.clone(),
            lease,
        });
    }

    /// A renewal of `name` with `lease_id` answered `lost`: the stream no longer holds that lease.
    pub fn lost(&self, name: &LeaseName, lease_id: &LeaseId) {
        let lease = self.registry.fingerprint(lease_id);
        // A name the stream does not hold with this lease (most `lost` answers) touches nothing
        // shared.
        if !lock(&self.set).holds(name.as_str(), lease) {
            return;
        }
        let mut by_name = lock(&self.registry.by_name);
        if lock(&self.set).remove(name.as_str(), lease) {
            HeldLeases::forget(&mut by_name, name.as_str(), &self.set);
        }
    }

    /// The names the stream holds leases of (some may have expired unnoticed).
    pub fn names(&self) -> Vec<LeaseName> {
        let set = lock(&self.set);
        // Each was a valid name when its renewal was accepted.
        set.held
            .keys()
            .filter_map(|name| crate::lease::limits::parse_name(name).ok())
            .collect()
    }

    /// How many leases the stream holds now (some may have expired unnoticed).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.set).held.len()
    }
}

impl Drop for StreamLeases {
    fn drop(&mut self) {
        let mut by_name = lock(&self.registry.by_name);
        let mut set = lock(&self.set);
        for name in set.held.keys() {
            HeldLeases::forget(&mut by_name, name, &self.set);
        }
        set.held = HashMap::new();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lease::limits::{parse_lease_id, parse_name};

    const TTL: Duration = Duration::from_secs(10);

    fn name(text: &str) -> LeaseName {
        parse_name(text).unwrap()
    }

    fn lease(text: &str) -> LeaseId {
        parse_lease_id(text).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn only_renewed_adds_and_renewing_a_held_lease_takes_no_new_slot() {
        let registry = Arc::new(HeldLeases::default());
        let stream = registry.stream(2);
        stream.lost(&name("a"), &lease("1"));
        assert_eq!(stream.len(), 0, "lost never adds");
        stream.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        stream.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        assert_eq!(stream.len(), 1);
        assert_eq!(registry.names_held(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_removes_only_the_lease_it_names() {
        let registry = Arc::new(HeldLeases::default());
        let stream = registry.stream(2);
        stream.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        stream.lost(&name("a"), &lease("2"));
        assert_eq!(stream.len(), 1, "a lost renewal of another lease id");
        stream.lost(&name("a"), &lease("1"));
        assert_eq!(stream.len(), 0);
        assert_eq!(registry.names_held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_set_admits_held_names_and_makes_room_once_entries_expire() {
        let registry = Arc::new(HeldLeases::default());
        let stream = registry.stream(2);
        stream.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        stream.renewed(&name("b"), &lease("2"), Instant::now() + 3 * TTL);
        assert!(stream.has_room_for(&name("a")), "a held name");
        assert!(!stream.has_room_for(&name("c")), "full");

        tokio::time::advance(TTL).await;
        assert!(stream.has_room_for(&name("c")), "a's last renewal expired");
        assert_eq!(stream.len(), 1, "pruned when full");
        assert_eq!(registry.names_held(), 1);
        stream.renewed(&name("c"), &lease("3"), Instant::now() + TTL);
        assert!(!stream.has_room_for(&name("d")), "b and c are held");
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_just_before_expiry_keeps_the_slot() {
        let registry = Arc::new(HeldLeases::default());
        let stream = registry.stream(1);
        stream.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        tokio::time::advance(TTL - Duration::from_millis(1)).await;
        stream.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(!stream.has_room_for(&name("b")), "a was renewed in time");
    }

    #[tokio::test(start_paused = true)]
    async fn release_removes_the_lease_from_every_stream_holding_it_and_no_other() {
        let registry = Arc::new(HeldLeases::default());
        let (first, second, other) = (registry.stream(4), registry.stream(4), registry.stream(4));
        let expires = Instant::now() + TTL;
        first.renewed(&name("a"), &lease("1"), expires);
        first.renewed(&name("b"), &lease("2"), expires);
        second.renewed(&name("a"), &lease("1"), expires);
        other.renewed(&name("a"), &lease("9"), expires);

        registry.released(&name("a"), &lease("1"));
        assert_eq!(first.len(), 1, "b is still held");
        assert_eq!(second.len(), 0);
        assert_eq!(other.len(), 1, "another lease id of the same name");

        registry.released(&name("a"), &lease("1"));
        registry.released(&name("zzz"), &lease("1"));
        assert_eq!(registry.names_held(), 2, "a (other) and b (first)");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_lease_of_a_held_name_replaces_the_old_one() {
        let registry = Arc::new(HeldLeases::default());
        let stream = registry.stream(1);
        stream.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        assert!(stream.has_room_for(&name("a")));
        stream.renewed(&name("a"), &lease("2"), Instant::now() + TTL);
        assert_eq!(stream.len(), 1);
        registry.released(&name("a"), &lease("1"));
        assert_eq!(stream.len(), 1, "the old lease's release frees nothing");
        registry.released(&name("a"), &lease("2"));
        assert_eq!(stream.len(), 0);
        assert_eq!(registry.names_held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_ends_forgets_its_leases() {
        let registry = Arc::new(HeldLeases::default());
        let stream = registry.stream(4);
        let staying = registry.stream(4);
        stream.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        stream.renewed(&name("b"), &lease("2"), Instant::now() + TTL);
        staying.renewed(&name("a"), &lease("1"), Instant::now() + TTL);
        drop(stream);
        assert_eq!(registry.names_held(), 1);
        registry.released(&name("a"), &lease("1"));
        assert_eq!(staying.len(), 0);
        assert_eq!(registry.names_held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_set_that_held_many_gives_its_memory_back() {
        let registry = Arc::new(HeldLeases::default());
        let stream = registry.stream(1024);
        let expires = Instant::now() + TTL;
        for index in 0..1024 {
            stream.renewed(&name(&format!("n/{index}")), &lease("1"), expires);
        }
        for index in 0..1023 {
            stream.lost(&name(&format!("n/{index}")), &lease("1"));
        }
        assert!(lock(&stream.set).held.capacity() <= 32);
        assert!(lock(&registry.by_name).capacity() <= 32);
    }
}
