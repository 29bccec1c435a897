//! The lease core: domain types, input limits, the [`LeaseStore`] trait that both stores implement,
//! and the waiting policy of `Acquire` ([`waiting`]). Every store keeps the rules in
//! ARCHITECTURE.md, "Invariants".

pub mod limits;
pub mod waiting;

use std::{fmt, future::Future, time::Duration};

use crate::error::Result;
pub use limits::Limits;
pub use waiting::ReleaseWatchers;

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

/// The holder's secret for one grant: 128 random bits from the OS CSPRNG, hex-encoded.
///
/// `Debug` and `Display` are redacted so that a lease id can never reach a log line by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseId(String);

impl LeaseId {
    /// A fresh, unguessable lease id.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("the OS random number generator is unavailable");
        LeaseId(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The secret itself, for the store and for the holder's reply only.
    pub fn expose(&self) -> &str {
        &self.0
    }
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

/// An `Acquire` request whose fields passed validation ([`Limits::validate_acquire`]).
#[derive(Clone, Debug)]
pub struct ValidatedAcquire {
    pub name: LeaseName,
    pub holder: String,
    pub ttl: Duration,
    /// How long to wait for a busy lease; zero tries once.
    pub wait: Duration,
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

/// Who holds a lease now, as anyone may see it (never the lease id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderInfo {
    pub holder: String,
    /// 0 if unknown (a key written by something other than leased).
    pub fencing_token: u64,
    /// When the lease ends unless renewed; `None` for a key without expiry (written by
    /// something other than leased), which only a release ends.
    pub expiry: Option<Expiry>,
}

/// When a held lease ends unless renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// Milliseconds from the store's "now"; never negative.
    pub remaining_ms: i64,
    /// Unix milliseconds on the store's clock.
    pub at_unix_ms: i64,
}

impl HolderInfo {
    /// `remaining_ms` as the proto carries it: -1 when the lease has no expiry.
    pub fn remaining_ms_or_minus_one(&self) -> i64 {
        self.expiry.map_or(-1, |expiry| expiry.remaining_ms)
    }
}

/// The answer of one acquire attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    Granted(Grant),
    Busy(HolderInfo),
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseGone {
    /// Nobody holds it: the TTL passed or it was released.
    ExpiredOrReleased,
    /// Someone else holds it now.
    HeldByAnother,
}

impl LeaseGone {
    /// The text sent to clients in `Lost.reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseGone::ExpiredOrReleased => "expired or released",
            LeaseGone::HeldByAnother => "held by another holder",
        }
    }
}

/// Where lease state lives. Each method is one atomic step in the store; none of them waits for a
/// busy lease (that policy lives in [`waiting`]).
pub trait LeaseStore: Send + Sync + 'static {
    /// Grants `name` to `lease_id` if it is free, or answers who holds it. Idempotent for one
    /// `lease_id`: retrying after an unknown outcome returns the same grant.
    fn try_acquire(
        &self,
        name: &LeaseName,
        holder: &str,
        ttl: Duration,
        lease_id: &LeaseId,
    ) -> impl Future<Output = Result<AcquireOutcome>> + Send;

    /// Moves the expiry forward if `lease_id` still holds `name`. `ttl: None` keeps the granted TTL.
    fn renew(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        ttl: Option<Duration>,
    ) -> impl Future<Output = Result<RenewOutcome>> + Send;

    /// Ends the lease if `lease_id` holds it and wakes its waiters; false if it did not hold it.
    fn release(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Who holds `name`, if anyone.
    fn describe(&self, name: &LeaseName)
    -> impl Future<Output = Result<Option<HolderInfo>>> + Send;

    /// Succeeds when the store can answer requests; drives the health status.
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;

    /// Wake-ups for callers waiting on a lease, fed by this store's releases (from any replica).
    fn release_watchers(&self) -> &ReleaseWatchers;
}
