//! The lease core: domain types, input limits, the store contract (`store`: [`LeaseStore`], the
//! atomic operations that both stores implement, and [`QueueStore`], the fair queue's upkeep),
//! the [`StoreEvents`] they report into, and this replica's waiting
//! callers (`waiting`) and watchers (`watch`), which [`Replica`] puts together. Every store
//! keeps the rules in ARCHITECTURE.md, "Invariants". The core knows nothing of gRPC or Redis.

mod events;
pub mod limits;
mod store;
#[cfg(test)]
pub(crate) mod test_support;
mod waiters;
pub(crate) mod waiting;
pub(crate) mod watch;

use std::{fmt, sync::Arc, time::Duration};

pub use crate::error::{GrantMismatch, Refusal};
pub use events::StoreEvents;
pub use limits::Limits;
pub use store::{LeaseStore, QueueEntry, QueueMode, QueueStatus, QueueStore};
pub use waiters::Placement;
pub(crate) use waiters::Waiters;
/// Public for the tests that bound how soon a dead replica's waiters stop holding others up.
pub use waiting::STALL_CHECK_INTERVAL;
pub(crate) use watch::Watchers;

/// How long a released lease id stays ended: an Acquire with it as the caller's own lease id
/// grants nothing meanwhile. Long enough for an Acquire of it still on its way when its caller
/// gave up (a retry, a waiting call's attempt, a command held up by a Redis stall) to arrive.
pub const ENDED_LEASE_ID_KEPT: Duration = Duration::from_secs(60);

/// At most this many ended lease ids are kept per name, the soonest to lapse dropped first (as
/// `MAX_ENDED_IDS` of the Redis scripts' prelude.lua).
pub const MAX_ENDED_LEASE_IDS: usize = 1000;

/// A validated lease name: 1 to 256 bytes of `A-Z a-z 0-9 . _ - : / @`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseName(String);

impl LeaseName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The holder's secret for one grant: 128 random bits from a CSPRNG, hex-encoded.
///
/// `Debug` and `Display` are redacted so that a lease id can never reach a log line by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseId(String);

impl LeaseId {
    /// A fresh, unguessable lease id, from `rand`'s thread-local CSPRNG (ChaCha12, seeded from
    /// the OS and reseeded every 64 KiB of output): the OS's generator directly would cost a
    /// system call per grant.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        LeaseId(hex(&bytes))
    }

    /// The secret itself, for the store and for the holder's reply only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// `bytes` in lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        hex.push(DIGITS[usize::from(byte >> 4)] as char);
        hex.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
    hex
}

/// The first `hex_digits` (even, at most 64) lowercase hex digits of the SHA-256 of `bytes`: what
/// Redis holds of a lease id, the fingerprint of a client certificate in the audit log.
pub(crate) fn sha256_hex(bytes: &[u8], hex_digits: usize) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    hex(&digest.as_ref()[..hex_digits / 2])
}

impl fmt::Debug for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseId(<redacted>)")
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Who makes a call, as a grant made with a caller-chosen lease id remembers it: with access
/// control on, a digest of the calling token's name; without, anyone (nothing is bound). Only the
/// caller that made such a grant is answered it again, renews it or releases it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller(Option<Arc<str>>);

impl Caller {
    /// A call without access control: it may use any grant, and binds none.
    pub fn anyone() -> Caller {
        Caller(None)
    }

    /// A call made with the token named `token_name` (the tokens file's `client`).
    pub fn token(token_name: &str) -> Caller {
        Caller(Some(sha256_hex(token_name.as_bytes(), 32).into()))
    }

    /// What the stores keep of it: the digest, or "" for anyone.
    pub(crate) fn tag(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }

    /// Whether this caller is refused a grant that `made_by` made: both known, and different.
    pub(crate) fn is_refused_by(&self, made_by: &Caller) -> bool {
        matches!((&self.0, &made_by.0), (Some(mine), Some(theirs)) if mine != theirs)
    }
}

/// An `Acquire` request whose fields passed validation ([`Limits::validate_acquire`]).
#[derive(Clone, Debug)]
pub struct ValidatedAcquire {
    pub name: LeaseName,
    pub holder: String,
    pub ttl: Duration,
    /// How long to wait for a busy lease; zero tries once.
    pub wait: Duration,
    /// How many holders may hold the name at once: 1 for an exclusive lease, N > 1 for a
    /// counting lease of N permits.
    pub limit: u32,
    /// After an expiry (not a release), the name (this permit) stays ungrantable this long.
    pub lock_delay: Duration,
    /// A shared (read) grant of a read-write lease (`limit` is then 1): shared grants coexist,
    /// an exclusive one excludes every other.
    pub shared: bool,
    /// The most shared grants a name may have at once (`--max-limit`).
    pub max_shared: u32,
    /// The caller's own lease id (`AcquireRequest.lease_id`): the grant uses it, and a retry
    /// with it is answered that grant, or keeps its place in the queue. `None`: the server
    /// makes one, and each call is a new grant.
    pub lease_id: Option<LeaseId>,
    /// Who asks ([`Caller::anyone`] until the server sets it after authentication): a grant of
    /// the caller's own lease id is bound to it.
    pub caller: Caller,
}

/// A lease granted to the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub lease_id: LeaseId,
    pub fencing_token: u64,
    pub ttl_ms: i64,
    /// Unix milliseconds, on the store's clock.
    pub expires_at_ms: i64,
}

/// Who holds a lease (one permit of a counting lease) now, as anyone may see it (never the
/// lease id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub holder: String,
    /// 0 if unknown (a key written by something other than leased).
    pub fencing_token: u64,
    /// When the lease ends unless renewed; `None` for a key without expiry (written by
    /// something other than leased), which only a release ends.
    pub expiry: Option<Expiry>,
    /// A shared grant of a read-write lease.
    pub shared: bool,
}

/// When a held lease ends unless renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// Milliseconds from the store's "now" until the name (permit) can be granted again: the
    /// rest of the TTL plus the lock-delay. Never negative.
    pub remaining_ms: i64,
    /// When the lease expires, Unix milliseconds on the store's clock. In the lock-delay after
    /// an expiry it is past while `remaining_ms` is not yet 0.
    pub at_unix_ms: i64,
    /// The grant's lock-delay (0 for none): `remaining_ms` counts it.
    pub lock_delay_ms: i64,
}

impl Expiry {
    /// Milliseconds from the store's "now" until the TTL expires (the lock-delay not counted);
    /// zero or less once it has: the holder no longer holds it, even while the delay runs.
    pub fn held_ms(&self) -> i64 {
        self.remaining_ms - self.lock_delay_ms
    }
}

/// How many permits of a name are taken, and which frees soonest: what a caller that was not
/// granted is told. An exclusive lease is a limit of 1; the shared grants of a read-write lease
/// are `held` grants of limit 1.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// The permit that frees soonest (the holder, for an exclusive lease); `None` when no permit
    /// is taken.
    pub holder: Option<Holder>,
    /// Permits taken: held, or in their lock-delay.
    pub held: u32,
    /// The limit in force; 0 when no permit is taken.
    pub limit: u32,
    /// How many of the first callers in line a grant may go to now, as the store wakes them:
    /// the free permits of a counting lease; for a name that is free or held shared, the run of
    /// shared callers at the head of the queue, or the first in line alone if it waits to be
    /// exclusive while nothing is taken (with nothing taken, the first in line also sets the
    /// limit with its grant, which wakes the next ones). 0 when nobody waits, or only as the
    /// store read it with the queue.
    pub due: u32,
}

impl Occupancy {
    /// Nobody holds the name.
    pub fn free() -> Self {
        Occupancy::default()
    }

    /// Whether the grants taken are shared ones.
    pub fn shared(&self) -> bool {
        self.holder.as_ref().is_some_and(|holder| holder.shared)
    }
}

/// What `Describe` shows of a name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Description {
    /// The limit in force; 0 when nobody holds the name.
    pub limit: u32,
    /// Every permit taken (held, or in its lock-delay), by increasing fencing token.
    pub holders: Vec<Holder>,
    /// Callers waiting in the name's queue, on every replica.
    pub waiters: u32,
}

impl Holder {
    /// `remaining_ms` as the proto carries it: -1 when the lease has no expiry.
    pub fn remaining_ms_or_minus_one(&self) -> i64 {
        self.expiry.map_or(-1, |expiry| expiry.remaining_ms)
    }
}

/// The answer of one acquire attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    Granted(Grant),
    /// Not granted now: every permit is taken, or the free ones go to callers ahead in the queue
    /// (`occupancy.holder` is `None` when none is taken). `position` is the caller's place in the
    /// queue (1 = next), 0 if it did not queue (a try-once attempt).
    Busy {
        occupancy: Occupancy,
        position: u32,
    },
    /// The queue of this name is full (`--max-waiters-per-name`, across all replicas).
    QueueFull {
        limit: usize,
    },
    /// The name's current holders were granted with another limit: this one, in force.
    LimitMismatch {
        limit: u32,
    },
    /// A shared caller would be granted, but this many shared grants (`--max-limit`) hold the
    /// name already.
    TooManyShared {
        limit: u32,
    },
    /// The caller's own lease id was released lately ([`ENDED_LEASE_ID_KEPT`]): its caller gave
    /// up, or the id is being reused.
    LeaseIdEnded,
    /// A retry with the same own lease id took this waiting call's place in line: the call is
    /// over (its caller went on with the retry).
    Superseded,
    /// The caller's own lease id holds a grant of the name already, of another mode or limit
    /// than this request asks for: a retry must ask for what it holds.
    OwnGrantDiffers(GrantMismatch),
    /// The caller's own lease id holds a grant of the name that another caller made.
    OwnGrantOfAnotherCaller,
}

impl GrantMismatch {
    /// Compares a retry's `request` with the grant its lease id holds (`held_limit`, and whether
    /// it is shared); `None` when they match.
    pub fn between(request: &ValidatedAcquire, held_limit: u32, held_shared: bool) -> Option<Self> {
        if request.shared != held_shared {
            Some(GrantMismatch::Shared { held: held_shared })
        } else if request.limit != held_limit {
            Some(GrantMismatch::Limit { held: held_limit })
        } else {
            None
        }
    }
}

/// The answer of one renewal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenewOutcome {
    Renewed {
        fencing_token: u64,
        ttl_ms: i64,
        expires_at_ms: i64,
    },
    Lost(LeaseGone),
}

/// Why a renewal found the lease no longer the caller's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseGone {
    /// Nobody holds it: the TTL passed (the lock-delay may still run) or it was released.
    ExpiredOrReleased,
    /// Someone else holds it now.
    HeldByAnother,
    /// An operator revoked it (`LeaseAdminService.Revoke`) with this reason.
    Revoked { reason: String },
}

impl LeaseGone {
    /// The kind of loss, for metrics labels and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            LeaseGone::ExpiredOrReleased => "expired or released",
            LeaseGone::HeldByAnother => "held by another holder",
            LeaseGone::Revoked { .. } => "revoked",
        }
    }

    /// The text sent to clients in `Lost.reason`: the kind, and an operator's reason.
    pub fn reason(&self) -> String {
        match self {
            LeaseGone::Revoked { reason } => format!("revoked: {reason}"),
            other => other.kind().to_owned(),
        }
    }
}

/// A grant that [`LeaseStore::revoke`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revoked {
    pub fencing_token: u64,
    /// The revoked grant's `holder` string, for the audit log.
    pub holder: String,
}

/// A change of holder that a store saw, as it reports it ([`StoreEvents::changed`]), in the
/// store's order.
/// Expiries are not reported by the stores (nothing runs when a TTL passes): the watch tending
/// task times them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseChange {
    pub cause: ChangeCause,
    /// The `holder` string of the grant this change is about.
    pub holder: String,
    pub fencing_token: u64,
    /// The limit of the grant (1: an exclusive lease).
    pub limit: u32,
    /// For a grant: its TTL, from which the watchers time its expiry; 0 otherwise.
    pub ttl_ms: i64,
    /// When the grant expires (expired), Unix ms on the store's clock.
    pub expires_at_ms: i64,
    /// For a revoke: the operator's reason; empty otherwise.
    pub reason: String,
    /// A shared grant of a read-write lease (its `limit` is 1).
    pub shared: bool,
}

/// What happened, in a [`LeaseChange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeCause {
    Granted,
    Released,
    Revoked,
}

/// A validated `ListRequest.prefix`: 0 to 256 bytes of the name alphabet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPrefix(pub(crate) String);

impl ListPrefix {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One held lease on a page of [`LeaseStore::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedLease {
    pub name: LeaseName,
    /// As `describe` answers; `holders` is never empty.
    pub description: Description,
}

/// One page of [`LeaseStore::list`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeasePage {
    pub leases: Vec<DescribedLease>,
    /// Where the next page starts (opaque, made by the store); `None` when the listing is done.
    pub next_page_token: Option<String>,
}

/// This replica of the service: its store, and the core's state beside it (the waiting callers
/// and watchers that the store's reports reach). The core's functions take a `Replica`, and reach
/// the store through [`Replica::store`].
#[derive(Debug)]
pub struct Replica<S> {
    store: Arc<S>,
    events: StoreEvents,
}

impl<S: LeaseStore> Replica<S> {
    /// `store`, built with `events` (the store reports into them).
    pub fn new(store: Arc<S>, events: StoreEvents) -> Arc<Self> {
        Arc::new(Replica { store, events })
    }

    /// The store, for the atomic operations.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// This replica's waiting callers.
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        self.events.waiters()
    }

    /// This replica's watchers.
    pub(crate) fn watchers(&self) -> &Arc<Watchers> {
        self.events.watchers()
    }

    /// Someone here starts waiting on or watching `name`: the store delivers its reports until
    /// every `listen` is matched by an [`unlisten`](Self::unlisten).
    pub(crate) fn listen(&self, name: &LeaseName) {
        self.events.listen(name);
    }

    /// Resolves once the store delivers the reports of `name`, so that every change after it is
    /// reported. May never resolve while the store is unreachable: bound it with a timeout.
    pub(crate) async fn listening(&self, name: &LeaseName) {
        self.events.listening(name).await;
    }

    /// One listener of `name` leaves.
    pub(crate) fn unlisten(&self, name: &LeaseName) {
        self.events.unlisten(name);
    }
}
