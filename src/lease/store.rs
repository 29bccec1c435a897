//! The store contract: [`LeaseStore`], the atomic lease operations that both stores implement,
//! and [`QueueStore`], the fair queue's upkeep over typed [`QueueEntry`]s. Every store keeps the
//! rules in ARCHITECTURE.md, "Invariants"; the waiting policy lives in `waiting`.

use std::{fmt, future::Future, time::Duration};

use super::{
    AcquireOutcome, Caller, Description, LeaseId, LeaseName, LeasePage, ListPrefix, Occupancy,
    RenewOutcome, Revoked, ValidatedAcquire,
};
use crate::error::Result;

/// Where lease state lives. Each method is one atomic step in the store; none of them waits for a
/// busy lease (that policy lives in `waiting`).
///
/// Waiting callers queue in the store, first come, first served across every replica: an attempt
/// with a queue `entry` joins the name's queue if it cannot be granted, and while anyone is queued
/// the k free permits (1, for an exclusive lease that is free) go only to the first k in line. The
/// store reports into the [`StoreEvents`](super::StoreEvents) it was built with when a free permit
/// goes to an entry of this replica (`wake`), when positions or holders changed (`moved`), and
/// each change of holder (`changed`). The queue's upkeep is [`QueueStore`]'s.
pub trait LeaseStore: Send + Sync + 'static {
    /// Grants `request.name` to `lease_id` if a permit is free for it (the lease is free, for an
    /// exclusive lease) and nobody is ahead in the queue to take it, or answers who holds it.
    /// With `entry`, a caller that is not granted joins the queue (or keeps its place).
    /// Idempotent for one `lease_id`: retrying after an unknown outcome returns the same grant.
    /// Only `name`, `holder`, `ttl`, `limit`, `lock_delay` and `wait` (how long a queue entry may
    /// be needed) of the request are read.
    fn try_acquire(
        &self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        entry: Option<&QueueEntry>,
    ) -> impl Future<Output = Result<AcquireOutcome>> + Send;

    /// Moves the expiry forward if `lease_id` still holds `name`. `ttl: None` keeps the granted TTL.
    /// A grant that another `caller` made with its own lease id is refused
    /// ([`Refusal::MadeByAnotherCaller`](crate::error::Refusal::MadeByAnotherCaller)).
    fn renew(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        ttl: Option<Duration>,
        caller: &Caller,
    ) -> impl Future<Output = Result<RenewOutcome>> + Send;

    /// Ends the lease (the permit) if `lease_id` holds it, without lock-delay, and wakes the
    /// caller in line that the freed permit goes to; false if it did not hold it. A grant that
    /// another `caller` made with its own lease id is refused, as by `renew` (and nothing ends).
    fn release(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        caller: &Caller,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Who holds `name` (every permit), and how many wait for it.
    fn describe(&self, name: &LeaseName) -> impl Future<Output = Result<Description>> + Send;

    /// Ends the grants of `name` (the one with `fencing_token` only, if given: `None` ends every
    /// permit) at once, without lock-delay, like a release by their holders; wakes the callers in
    /// line that the freed permits go to. A revoked holder's next renewal answers
    /// [`LeaseGone::Revoked`](super::LeaseGone::Revoked) with `reason` (for at least the revoked
    /// grant's TTL). Empty when nothing matched.
    fn revoke(
        &self,
        name: &LeaseName,
        fencing_token: Option<u64>,
        reason: &str,
    ) -> impl Future<Output = Result<Vec<Revoked>>> + Send;

    /// One page of the leases held now whose names start with `prefix`: at most `page_size`,
    /// possibly fewer (even none) with a next page, for a bounded cost per page. `page_token` is
    /// a previous page's `next_page_token`; one this store did not make for this prefix is
    /// `INVALID_ARGUMENT` naming `page_token`. Every lease held for the whole listing appears on
    /// exactly one page.
    fn list(
        &self,
        prefix: &ListPrefix,
        page_size: usize,
        page_token: Option<&str>,
    ) -> impl Future<Output = Result<LeasePage>> + Send;

    /// Succeeds when the store can answer requests and deliver wake-ups; drives the health status.
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;
}

/// The upkeep of the fair queue that [`LeaseStore::try_acquire`] joins callers to: what the
/// waiting callers' tending task asks of the store besides attempts.
pub trait QueueStore: LeaseStore {
    /// Takes these entries (callers that gave up) out of the queue of `name`.
    fn leave(
        &self,
        name: &LeaseName,
        entries: &[QueueEntry],
    ) -> impl Future<Output = Result<()>> + Send;

    /// This replica's entries in the queue of `name`, whether or not a caller here owns them.
    fn queued_here(&self, name: &LeaseName)
    -> impl Future<Output = Result<Vec<QueueEntry>>> + Send;

    /// Reads where this replica's `entries` of `name` stand, and which entries the free permits
    /// go to. Read-only: nothing in the store needs renewing while a caller waits.
    fn queue_status(
        &self,
        name: &LeaseName,
        entries: &[QueueEntry],
    ) -> impl Future<Output = Result<QueueStatus>> + Send;

    /// `stalled` are other replicas' entries that a free permit of `name` went to and that did
    /// not take it within a grace (their wake-up lost, or their replica gone). Takes out of the
    /// queue every entry of those replicas that are gone (their liveness lapsed), and with
    /// `overdue` (stalled far longer than any live replica takes) the `stalled` entries
    /// themselves; otherwise repeats the free permits' wake-ups. With `stalled` empty, checks
    /// every replica with entries in the queue (a caller found it full). Answers how many entries
    /// were taken out.
    ///
    /// By default nothing: a store of one process is one replica, every entry is this replica's,
    /// and the core takes out those without a caller. Nothing there can stall on another replica.
    fn unstall(
        &self,
        name: &LeaseName,
        stalled: &[QueueEntry],
        overdue: bool,
    ) -> impl Future<Output = Result<usize>> + Send {
        let _ = (name, stalled, overdue);
        async { Ok(0) }
    }
}

/// Where this replica's waiters of one name stand: who holds the lease and, for each entry asked
/// about, its position (0 = not in the queue); and the entries first in line that the free
/// permits go to (any replica's), so that a replica can tell when one of them stalls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStatus {
    pub occupancy: Occupancy,
    pub positions: Vec<u32>,
    pub due: Vec<QueueEntry>,
}

/// One waiting caller's entry in a name's queue: the replica it waits on, its number there
/// (never reused), and the grant it waits for. The stores keep it as text ([`fmt::Display`],
/// [`QueueEntry::parse`]): `<replica>:<n>` for an exclusive grant, `<replica>:<n>s` for a shared
/// one, `<replica>` being 8 lowercase hex digits. Redis holds that text: it never changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueEntry {
    /// The replica's id ([`StoreEvents::replica`](super::StoreEvents::replica)).
    pub replica: String,
    pub sequence: u64,
    pub mode: QueueMode,
}

/// The grant a queue entry waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueMode {
    Exclusive,
    /// A shared grant of a read-write lease.
    Shared,
}

/// How many hex digits a replica id has.
pub(crate) const REPLICA_ID_DIGITS: usize = 8;

impl QueueEntry {
    /// Whether the entry waits for a shared grant.
    pub fn is_shared(&self) -> bool {
        self.mode == QueueMode::Shared
    }

    /// The entry that `text` ([`fmt::Display`]'s form) is; `None` if it is none.
    pub fn parse(text: &str) -> Option<Self> {
        let (replica, rest) = text.split_once(':')?;
        let (digits, mode) = match rest.strip_suffix('s') {
            Some(digits) => (digits, QueueMode::Shared),
            None => (rest, QueueMode::Exclusive),
        };
        let is_replica_id = replica.len() == REPLICA_ID_DIGITS
            && replica
                .bytes()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
        // Only the digits `Display` writes: no sign, no leading zero.
        let canonical = !digits.is_empty()
            && digits.bytes().all(|byte| byte.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !is_replica_id || !canonical {
            return None;
        }
        Some(QueueEntry {
            replica: replica.to_owned(),
            sequence: digits.parse().ok()?,
            mode,
        })
    }
}

impl fmt::Display for QueueEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.mode {
            QueueMode::Exclusive => "",
            QueueMode::Shared => "s",
        };
        write!(f, "{}:{}{mode}", self.replica, self.sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_written() {
        for text in [
            "0a1b2c3d:1",
            "0a1b2c3d:42s",
            "ffffffff:0",
            "00000000:18446744073709551615s",
        ] {
            let entry = QueueEntry::parse(text).unwrap();
            assert_eq!(entry.to_string(), text);
        }
        let shared = QueueEntry::parse("0a1b2c3d:7s").unwrap();
        assert_eq!(
            shared,
            QueueEntry {
                replica: "0a1b2c3d".into(),
                sequence: 7,
                mode: QueueMode::Shared
            }
        );
    }

    #[test]
    fn anything_else_is_no_entry() {
        for text in [
            "",
            "0a1b2c3d",
            "0a1b2c3d:",
            "0a1b2c3d:s",
            "0A1B2C3D:1",
            "0a1b2c3:1",
            "0a1b2c3d0:1",
            "0a1b2c3d:+1",
            "0a1b2c3d:01",
            "0a1b2c3d:1x",
            "0a1b2c3d:1ss",
            "0a1b2c3d:1:2",
            "0a1b2c3d:18446744073709551616",
        ] {
            assert_eq!(QueueEntry::parse(text), None, "{text:?}");
        }
    }
}
