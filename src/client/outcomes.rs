//! The answers of [`LeaseClient`](super::LeaseClient)'s calls: [`Acquired`] (a guard, or
//! [`NotGranted`]), [`GrantedLease`], [`CurrentHolder`] and [`LeaseDescription`], [`TokenCheck`],
//! and how they are read from the wire.

use std::time::Duration;

use super::LeaseGuard;
use crate::proto::{DescribeResponse, HolderInfo};

/// The answer to [`LeaseClient::acquire`](super::LeaseClient::acquire).
// Returned once per acquire and matched at once: boxing the guard would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Acquired {
    /// The lease is ours, kept alive until released or dropped.
    Granted(LeaseGuard),
    /// Someone else holds it (for the whole wait); every permit, for a counting lease.
    NotGranted(NotGranted),
}

/// Why [`LeaseClient::acquire`](super::LeaseClient::acquire) did not grant: the lease stayed busy
/// for the whole wait.
///
/// `holder`, `fencing_token` and `remaining` describe the holder of an exclusive lease, or the
/// permit that frees soonest of a counting lease (the one a waiter would get next); `held` and
/// `limit` say how full the name is. An empty `holder` with token 0, zero `remaining` and
/// `held` 0 means nobody holds it right now, but it is being handed to a caller waiting ahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotGranted {
    /// Who holds the lease (or the permit that frees soonest), as it named itself.
    pub holder: String,
    /// That holder's fencing token.
    pub fencing_token: u64,
    /// Time until that holder's lease (permit) frees unless renewed, lock-delay included; `None`
    /// if it has no expiry.
    pub remaining: Option<Duration>,
    /// Permits taken: held, or in their lock-delay (1 for a held exclusive lease).
    pub held: u32,
    /// The limit in force: 1 for an exclusive or read-write lease, N for a counting lease; 0
    /// when no permit is taken.
    pub limit: u32,
}

impl NotGranted {
    /// The same answer built from a `Describe`: the permit that frees soonest, how many are taken.
    pub(super) fn from_description(description: &LeaseDescription) -> Self {
        let held = u32::try_from(description.holders.len()).unwrap_or(u32::MAX);
        match description.frees_first() {
            Some(soonest) => NotGranted {
                holder: soonest.holder.clone(),
                fencing_token: soonest.fencing_token,
                remaining: soonest.remaining,
                held,
                limit: description.limit,
            },
            // Free right now: as the server says it, being handed to a caller ahead.
            None => NotGranted {
                holder: String::new(),
                fencing_token: 0,
                remaining: Some(Duration::ZERO),
                held: 0,
                limit: 0,
            },
        }
    }
}

/// One holder of a lease (one permit of a counting lease), as anyone may see it: never its
/// lease id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentHolder {
    /// Who holds it, as it named itself.
    pub holder: String,
    /// The holder's fencing token.
    pub fencing_token: u64,
    /// Time until the lease (this permit) frees unless renewed, lock-delay included; `None` if it
    /// has no expiry.
    pub remaining: Option<Duration>,
    /// A shared (read) grant of a read-write lease; false for an exclusive grant and for the
    /// permits of a counting lease.
    pub shared: bool,
}

impl CurrentHolder {
    /// An exclusive holder, from the single-holder fields of a server from before `holders`.
    pub(super) fn new(holder: String, fencing_token: u64, remaining_ms: i64) -> Self {
        CurrentHolder {
            holder,
            fencing_token,
            remaining: remaining_from_ms(remaining_ms),
            shared: false,
        }
    }

    pub(super) fn from_wire(info: HolderInfo) -> Self {
        CurrentHolder {
            shared: info.shared,
            ..CurrentHolder::new(info.holder, info.fencing_token, info.remaining_ms)
        }
    }
}

/// Everything `Describe` tells anyone about a lease
/// ([`LeaseClient::describe_lease`](super::LeaseClient::describe_lease)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseDescription {
    /// The limit in force: 1 for an exclusive or read-write lease, N for a counting lease; 0
    /// when nobody holds it.
    pub limit: u32,
    /// Every permit taken (held, or in its lock-delay after an expiry), by increasing fencing
    /// token; empty when the lease is free. An exclusive lease has at most one.
    pub holders: Vec<CurrentHolder>,
    /// Callers waiting for the name, on every replica. May be non-zero while the lease is free:
    /// it is being handed to the first of them.
    pub waiters: u32,
}

impl LeaseDescription {
    /// True if any permit is taken (held, or in its lock-delay).
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// The holder whose permit frees soonest (a permit without expiry last): the one a waiter
    /// gets next, as in [`NotGranted`].
    pub fn frees_first(&self) -> Option<&CurrentHolder> {
        self.holders
            .iter()
            .min_by_key(|h| h.remaining.unwrap_or(Duration::MAX))
    }

    pub(super) fn from_reply(reply: DescribeResponse) -> Self {
        let mut holders: Vec<CurrentHolder> = reply
            .holders
            .into_iter()
            .map(CurrentHolder::from_wire)
            .collect();
        let mut limit = reply.limit;
        // A server from before counting leases sends only the single-holder fields.
        if reply.held && holders.is_empty() {
            holders.push(CurrentHolder::new(
                reply.holder,
                reply.fencing_token,
                reply.remaining_ms,
            ));
            limit = limit.max(1);
        }
        LeaseDescription {
            limit,
            holders,
            waiters: reply.waiters,
        }
    }
}

/// A lease as the server granted it, without a keepalive (what `leased acquire` prints).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantedLease {
    /// The lease's name.
    pub name: String,
    /// The holder's secret: renew and release with it, never log or show it.
    pub lease_id: String,
    /// The grant's fencing token: pass it to the resource the lease protects.
    pub fencing_token: u64,
    /// The TTL the server granted.
    pub ttl: Duration,
    /// Unix milliseconds on the server's store clock.
    pub expires_at_ms: i64,
    /// A shared (read) grant of a read-write lease.
    pub shared: bool,
}

/// The answer to [`LeaseClient::check_token`](super::LeaseClient::check_token), true when it was
/// sent: it can be stale by the time it arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenCheck {
    /// The lease is held with exactly this token (for a counting lease: one of its permits is).
    /// False once that grant was released, expired (its lock-delay counts as expired) or revoked.
    pub current: bool,
    /// The token checked, when `current`; otherwise the largest token held now, 0 when nobody
    /// holds the lease.
    pub current_token: u64,
    /// Anyone holds the lease now.
    pub held: bool,
}

/// The wire's `remaining_ms`: -1 (negative) means no expiry.
pub(super) fn remaining_from_ms(remaining_ms: i64) -> Option<Duration> {
    u64::try_from(remaining_ms).ok().map(Duration::from_millis)
}

/// A wire timestamp as Unix milliseconds.
pub(super) fn unix_ms(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp.seconds * 1000 + i64::from(timestamp.nanos) / 1_000_000
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// An exclusive holder as the wire sends it.
    pub(in crate::client) fn holder_info(
        holder: &str,
        fencing_token: u64,
        remaining_ms: i64,
    ) -> HolderInfo {
        HolderInfo {
            shared: false,
            holder: holder.into(),
            fencing_token,
            remaining_ms,
            expires_at: None,
        }
    }

    /// The mode of each holder comes through; two shared holders of a read-write lease have
    /// limit 1.
    #[test]
    fn description_keeps_each_holders_mode() {
        let shared = |holder, fencing_token| HolderInfo {
            shared: true,
            ..holder_info(holder, fencing_token, 900)
        };
        let reply = DescribeResponse {
            held: true,
            limit: 1,
            holders: vec![shared("r1", 7), shared("r2", 8)],
            ..Default::default()
        };
        let description = LeaseDescription::from_reply(reply);
        assert!(description.holders.iter().all(|h| h.shared));
        assert_eq!(description.limit, 1);
        let exclusive = LeaseDescription::from_reply(DescribeResponse {
            held: true,
            limit: 1,
            holders: vec![holder_info("w", 9, 900)],
            ..Default::default()
        });
        assert!(!exclusive.holders[0].shared);
    }

    #[test]
    fn description_lists_every_holder_and_frees_first_is_the_soonest() {
        let reply = DescribeResponse {
            held: true,
            holder: "a".into(),
            fencing_token: 7,
            remaining_ms: 5_000,
            limit: 3,
            holders: vec![
                holder_info("a", 7, 5_000),
                holder_info("b", 8, -1),
                holder_info("c", 9, 1_000),
            ],
            waiters: 2,
            ..Default::default()
        };
        let description = LeaseDescription::from_reply(reply);
        assert!(description.is_held());
        assert_eq!((description.limit, description.waiters), (3, 2));
        let tokens: Vec<u64> = description
            .holders
            .iter()
            .map(|h| h.fencing_token)
            .collect();
        assert_eq!(tokens, [7, 8, 9]);
        assert_eq!(description.holders[1].remaining, None);
        assert_eq!(description.frees_first().unwrap().holder, "c");
    }

    /// A server from before counting leases sends only the single-holder fields: still one
    /// holder of an exclusive lease.
    #[test]
    fn description_from_an_older_server_has_its_one_holder() {
        let reply = DescribeResponse {
            held: true,
            holder: "a".into(),
            fencing_token: 7,
            remaining_ms: 5_000,
            ..Default::default()
        };
        let description = LeaseDescription::from_reply(reply);
        assert_eq!(description.limit, 1);
        assert_eq!(
            description.holders,
            [CurrentHolder::new("a".into(), 7, 5_000)]
        );
        let free = LeaseDescription::from_reply(DescribeResponse::default());
        assert!(!free.is_held());
        assert_eq!((free.limit, free.frees_first()), (0, None));
    }
}
