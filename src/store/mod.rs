//! The two implementations of [`LeaseStore`] and [`QueueStore`]: Redis for production,
//! in-process memory for a first run and for tests of the contract; and [`Store`], the one of them
//! this process serves.

pub mod memory;
pub mod redis;

pub use memory::MemoryStore;
pub use redis::{RedisOptions, RedisStore, ReplicaWait};

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::{
    error::{Error, Result},
    lease::{
        AcquireOutcome, Caller, Description, LeaseId, LeaseName, LeasePage, LeaseStore, ListPrefix,
        QueueEntry, QueueStatus, QueueStore, RenewOutcome, Revoked, ValidatedAcquire,
    },
};

/// The store this process serves, chosen once at startup: the server is compiled once, over this
/// enum, rather than once per store (as neon's `GenericRemoteStorage` picks its backend).
// Made once and kept behind the replica's `Arc`: boxing the Redis store would only add a pointer
// to follow on every call.
#[allow(clippy::large_enum_variant)]
pub enum Store {
    /// The embedded store, shared with its background sweep of expired leases.
    Memory(Arc<MemoryStore>),
    Redis(RedisStore),
}

impl LeaseStore for Store {
    async fn try_acquire(
        &self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        entry: Option<&QueueEntry>,
    ) -> Result<AcquireOutcome> {
        match self {
            Store::Memory(store) => store.try_acquire(request, lease_id, entry).await,
            Store::Redis(store) => store.try_acquire(request, lease_id, entry).await,
        }
    }

    async fn renew(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        ttl: Option<Duration>,
        caller: &Caller,
    ) -> Result<RenewOutcome> {
        match self {
            Store::Memory(store) => store.renew(name, lease_id, ttl, caller).await,
            Store::Redis(store) => store.renew(name, lease_id, ttl, caller).await,
        }
    }

    async fn release(&self, name: &LeaseName, lease_id: &LeaseId, caller: &Caller) -> Result<bool> {
        match self {
            Store::Memory(store) => store.release(name, lease_id, caller).await,
            Store::Redis(store) => store.release(name, lease_id, caller).await,
        }
    }

    async fn describe(&self, name: &LeaseName) -> Result<Description> {
        match self {
            Store::Memory(store) => store.describe(name).await,
            Store::Redis(store) => store.describe(name).await,
        }
    }

    async fn revoke(
        &self,
        name: &LeaseName,
        fencing_token: Option<u64>,
        reason: &str,
    ) -> Result<Vec<Revoked>> {
        match self {
            Store::Memory(store) => store.revoke(name, fencing_token, reason).await,
            Store::Redis(store) => store.revoke(name, fencing_token, reason).await,
        }
    }

    async fn list(
        &self,
        prefix: &ListPrefix,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<LeasePage> {
        match self {
            Store::Memory(store) => store.list(prefix, page_size, page_token).await,
            Store::Redis(store) => store.list(prefix, page_size, page_token).await,
        }
    }

    async fn ping(&self) -> Result<()> {
        match self {
            Store::Memory(store) => store.ping().await,
            Store::Redis(store) => store.ping().await,
        }
    }
}

impl QueueStore for Store {
    async fn leave(&self, name: &LeaseName, entries: &[QueueEntry]) -> Result<()> {
        match self {
            Store::Memory(store) => store.leave(name, entries).await,
            Store::Redis(store) => store.leave(name, entries).await,
        }
    }

    async fn queued_here(&self, name: &LeaseName) -> Result<Vec<QueueEntry>> {
        match self {
            Store::Memory(store) => store.queued_here(name).await,
            Store::Redis(store) => store.queued_here(name).await,
        }
    }

    async fn queue_status(&self, name: &LeaseName, entries: &[QueueEntry]) -> Result<QueueStatus> {
        match self {
            Store::Memory(store) => store.queue_status(name, entries).await,
            Store::Redis(store) => store.queue_status(name, entries).await,
        }
    }

    async fn unstall(
        &self,
        name: &LeaseName,
        stalled: &[QueueEntry],
        overdue: bool,
    ) -> Result<usize> {
        match self {
            Store::Memory(store) => store.unstall(name, stalled, overdue).await,
            Store::Redis(store) => store.unstall(name, stalled, overdue).await,
        }
    }
}

/// Microseconds since the Unix epoch on this machine's clock. Fencing tokens never fall below it,
/// so a store that forgot its counters still issues tokens above every earlier one.
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the system clock is before 1970")
        .as_micros() as u64
}

/// A List page token that this store did not make for this prefix: `INVALID_ARGUMENT`.
pub(crate) fn invalid_page_token() -> Error {
    Error::invalid(
        "page_token",
        "is not a page token of this listing: pass the previous page's next_page_token, \
         with the same prefix",
    )
}

/// Text as hex, for the parts of a page token (names and prefixes never hold the separators).
pub(crate) fn to_hex(text: &str) -> String {
    crate::lease::hex(text.as_bytes())
}

/// The text that [`to_hex`] made, or `None`.
pub(crate) fn from_hex(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(&hex[index..index + 2], 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}
