//! The keys of one lease ([`LeaseKeys`]) and the KEYS each script takes, in the order of its
//! header; what Redis holds of a lease id ([`lease_id_digest`]).

use crate::lease::{LeaseId, LeaseName, sha256_hex};

/// What Redis holds of a lease id, and the scripts compare: the first 128 bits of its SHA-256, in
/// hex. Redis never sees a lease id, so neither its keys nor its AOF, replicas, `MONITOR`,
/// slowlog or backups hold one that could renew or release a lease; a lease id is 128 bits from
/// the OS's random source, so its digest gives nothing away.
pub(super) fn lease_id_digest(lease_id: &LeaseId) -> String {
    sha256_hex(lease_id.expose().as_bytes(), 32)
}

/// The keys of one lease, all under the hash tag `{name}` so that every script touches one slot.
/// Built for every request (public for the micro-benchmarks in `benches/hot_paths.rs`).
pub struct LeaseKeys {
    pub(super) lease: String,
    /// The name's fencing counter and its exclusive grant (prelude.lua).
    pub(super) owner: String,
    pub(super) queue: String,
    /// The shard channel of the name's wake-ups: in the same slot, declared as a key.
    pub(super) wake: String,
    /// A counting lease's permits, by the moment each frees.
    pub(super) permits: String,
    /// A counting lease's permit records and limit.
    pub(super) holders: String,
    /// Why recently revoked grants were revoked, for their holders' renewals.
    pub(super) revoked: String,
}

impl LeaseKeys {
    /// The keys of `name` under `key_prefix`.
    pub fn new(key_prefix: &str, name: &LeaseName) -> Self {
        let mut lease = String::with_capacity(key_prefix.len() + name.as_str().len() + 2);
        lease.push_str(key_prefix);
        lease.push('{');
        lease.push_str(name.as_str());
        lease.push('}');
        // Concatenated rather than format!ed: this runs for every request.
        let key = |suffix: &str| [lease.as_str(), suffix].concat();
        LeaseKeys {
            owner: key(":owner"),
            queue: key(":queue"),
            wake: key(":wake"),
            permits: key(":permits"),
            holders: key(":holders"),
            revoked: key(":revoked"),
            lease,
        }
    }

    /// The places in line of callers that chose their lease ids, for a retry of their wait.
    /// Made only when needed: most requests do not touch it.
    fn places(&self) -> String {
        [self.lease.as_str(), ":places"].concat()
    }

    /// Lease ids released lately, which a late Acquire of theirs must not grant.
    fn ended(&self) -> String {
        [self.lease.as_str(), ":ended"].concat()
    }

    /// The KEYS of acquire.lua for a caller that chose its lease id: the queue scripts', the
    /// places of callers' own lease ids, and the lease ids ended lately. (A caller without one
    /// sends the queue scripts' alone: nothing else reads the last two.)
    pub(super) fn for_acquire_with_own_id(self) -> Vec<String> {
        let (places, ended) = (self.places(), self.ended());
        let mut keys = self.for_queue_scripts();
        keys.extend([places, ended]);
        keys
    }

    /// The KEYS of release.lua: the queue scripts' and the lease ids ended lately.
    pub(super) fn for_release(self) -> Vec<String> {
        let ended = self.ended();
        let mut keys = self.for_queue_scripts();
        keys.push(ended);
        keys
    }

    /// The KEYS of leave.lua and purge.lua, and the first ones of acquire.lua, release.lua and
    /// revoke.lua, in the order their headers list.
    pub(super) fn for_queue_scripts(self) -> Vec<String> {
        vec![
            self.lease,
            self.owner,
            self.queue,
            self.wake,
            self.permits,
            self.holders,
        ]
    }

    /// The KEYS of status.lua: the queue scripts' without the channel (it publishes nothing).
    pub(super) fn for_status(self) -> Vec<String> {
        vec![
            self.lease,
            self.owner,
            self.queue,
            self.permits,
            self.holders,
        ]
    }

    /// The KEYS of revoke.lua.
    pub(super) fn for_revoke(mut self) -> Vec<String> {
        let revoked = std::mem::take(&mut self.revoked);
        let mut keys = self.for_queue_scripts();
        keys.push(revoked);
        keys
    }
}

/// The heartbeat key of a replica: it exists while the replica is alive (it renews it well
/// within its expiry). Outside every lease's hash tag, so `List` never sees it.
pub(super) fn heartbeat_key(key_prefix: &str, replica: &str) -> String {
    format!("{key_prefix}replica:{replica}")
}

/// The key holding the layout version of everything under `key_prefix` (`layout.rs`). Outside
/// every lease's hash tag, so `List` never sees it.
pub(super) fn layout_key(key_prefix: &str) -> String {
    format!("{key_prefix}layout")
}
