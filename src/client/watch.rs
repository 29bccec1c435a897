//! [`LeaseClient::watch`](super::LeaseClient::watch): who holds a lease, as a stream of
//! [`WatchEvent`]s.

use std::{
    fmt,
    pin::Pin,
    task::{Context, Poll},
};

use tokio_stream::Stream;
use tonic::Streaming;

use super::{ClientError, CurrentHolder, unix_ms};
use crate::proto::{self, watch_event::Cause};

/// What a [`WatchEvent`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchCause {
    /// The whole current state: the first event of every watch, and again whenever the server may
    /// have missed events (a Redis reconnect or failover, a watcher too slow to read). Replace
    /// what you knew with it; do not apply it as a change.
    Snapshot,
    /// A new grant: [`WatchEvent::grant`] is the new holder's.
    Granted,
    /// The holder released the lease.
    Released,
    /// The holder's TTL passed without a renewal (its lock-delay, if any, starts now).
    Expired,
    /// An operator revoked the lease ([`LeaseAdminClient::revoke`](super::LeaseAdminClient::revoke));
    /// [`WatchEvent::reason`] is theirs.
    Revoked,
    /// A cause this client does not know (the wire's number), from a newer server;
    /// [`WatchEvent::holders`] is still the state after the event.
    Other(i32),
}

impl WatchCause {
    fn from_wire(cause: i32) -> Self {
        match Cause::try_from(cause) {
            Ok(Cause::Snapshot) => WatchCause::Snapshot,
            Ok(Cause::Granted) => WatchCause::Granted,
            Ok(Cause::Released) => WatchCause::Released,
            Ok(Cause::Expired) => WatchCause::Expired,
            Ok(Cause::Revoked) => WatchCause::Revoked,
            Ok(Cause::Unspecified) | Err(_) => WatchCause::Other(cause),
        }
    }
}

/// Lower case, one word: `snapshot`, `granted`, `released`, `expired`, `revoked`, or `cause-N`.
impl fmt::Display for WatchCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchCause::Snapshot => f.write_str("snapshot"),
            WatchCause::Granted => f.write_str("granted"),
            WatchCause::Released => f.write_str("released"),
            WatchCause::Expired => f.write_str("expired"),
            WatchCause::Revoked => f.write_str("revoked"),
            WatchCause::Other(number) => write!(f, "cause-{number}"),
        }
    }
}

/// The grant a [`WatchEvent`] is about, as anyone may see it: never its lease id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchedGrant {
    /// The holder's `holder` string (may be empty).
    pub holder: String,
    /// The grant's fencing token.
    pub fencing_token: u64,
    /// When the grant expires unless renewed, in Unix milliseconds on the store's clock, as last
    /// known to the server (renewals move it without an event); `None` if it has no expiry.
    pub expires_at_ms: Option<i64>,
}

/// What happened to a watched lease ([`LeaseClient::watch`](super::LeaseClient::watch)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// The watched lease.
    pub name: String,
    /// What happened (the first event is a [`WatchCause::Snapshot`]).
    pub cause: WatchCause,
    /// The grant the event is about: the new holder's ([`Granted`](WatchCause::Granted)), the one
    /// that ended ([`Released`](WatchCause::Released), [`Expired`](WatchCause::Expired),
    /// [`Revoked`](WatchCause::Revoked)), or the holder with the smallest token
    /// ([`Snapshot`](WatchCause::Snapshot)); `None` in a snapshot of a free lease.
    pub grant: Option<WatchedGrant>,
    /// Someone holds the lease after the event.
    pub held: bool,
    /// The limit in force after the event: 1 for an exclusive or read-write lease, N for a
    /// counting lease; 0 when nobody holds it.
    pub limit: u32,
    /// Every holder after the event, by increasing fencing token (`remaining` as last known to
    /// the server). An exclusive lease has at most one.
    pub holders: Vec<CurrentHolder>,
    /// For [`Revoked`](WatchCause::Revoked): the operator's reason; empty otherwise.
    pub reason: String,
}

impl WatchEvent {
    /// The holder with the smallest token after the event: an exclusive lease's holder (in
    /// leader election, the leader), `None` when nobody holds it.
    pub fn current_holder(&self) -> Option<&CurrentHolder> {
        self.holders.first()
    }

    /// The grant this event is about as one of the holders after it, with its mode and
    /// remaining time: for a [`Granted`](WatchCause::Granted) or
    /// [`Snapshot`](WatchCause::Snapshot) event while that grant holds; `None` for one that
    /// ended (the server does not say which mode an ended grant had).
    pub fn grant_holder(&self) -> Option<&CurrentHolder> {
        let grant = self.grant.as_ref()?;
        self.holders
            .iter()
            .find(|holder| holder.fencing_token == grant.fencing_token)
    }

    fn from_wire(event: proto::WatchEvent) -> Self {
        // Token 0 is never granted: it marks a snapshot of a free lease.
        let grant = (event.fencing_token != 0).then(|| WatchedGrant {
            holder: event.holder,
            fencing_token: event.fencing_token,
            expires_at_ms: event.expires_at.as_ref().map(unix_ms),
        });
        WatchEvent {
            name: event.name,
            cause: WatchCause::from_wire(event.cause),
            grant,
            held: event.held,
            limit: event.limit,
            holders: event
                .holders
                .into_iter()
                .map(CurrentHolder::from_wire)
                .collect(),
            reason: event.reason,
        }
    }
}

/// The events of one watch ([`LeaseClient::watch`](super::LeaseClient::watch)): a
/// [`Stream`] of `Result<WatchEvent, ClientError>`, read with `StreamExt::next`. It never ends
/// without saying why: the last item before the end is the `Err` that ended it.
#[derive(Debug)]
pub struct WatchStream {
    /// `None` once the stream has ended.
    events: Option<Streaming<proto::WatchEvent>>,
}

impl WatchStream {
    pub(super) fn new(events: Streaming<proto::WatchEvent>) -> Self {
        WatchStream {
            events: Some(events),
        }
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchEvent, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(events) = self.events.as_mut() else {
            return Poll::Ready(None);
        };
        let item = match Pin::new(events).poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Ok(event))) => {
                return Poll::Ready(Some(Ok(WatchEvent::from_wire(event))));
            }
            Poll::Ready(Some(Err(status))) => ClientError::Status(status),
            // The server never ends a watch with OK: a follower must not take the silence for
            // "nothing changes".
            Poll::Ready(None) => ClientError::Protocol("the server ended the Watch stream".into()),
        };
        self.events = None;
        Poll::Ready(Some(Err(item)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{client::outcomes::tests::holder_info, proto::HolderInfo};

    #[test]
    fn a_granted_event_carries_its_grant_and_every_holder() {
        let event = WatchEvent::from_wire(proto::WatchEvent {
            name: "pool".into(),
            cause: Cause::Granted as i32,
            held: true,
            holder: "b".into(),
            fencing_token: 9,
            expires_at: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 250_000_000,
            }),
            limit: 3,
            holders: vec![holder_info("a", 7, 1_000), holder_info("b", 9, -1)],
            reason: String::new(),
        });
        assert_eq!(event.cause, WatchCause::Granted);
        assert_eq!(
            event.grant,
            Some(WatchedGrant {
                holder: "b".into(),
                fencing_token: 9,
                expires_at_ms: Some(1_700_000_000_250),
            })
        );
        assert!(event.held);
        assert_eq!(event.limit, 3);
        assert_eq!(
            event.current_holder(),
            Some(&CurrentHolder::new("a".into(), 7, 1_000))
        );
        assert_eq!(event.holders[1].remaining, None);
        assert_eq!(event.grant_holder().map(|h| h.holder.as_str()), Some("b"));
    }

    /// A shared grant's mode is in its holder; a grant that ended is no longer among them.
    #[test]
    fn the_grant_holder_has_the_grants_mode_while_it_holds() {
        let shared = |holder: &str, fencing_token| HolderInfo {
            shared: true,
            ..holder_info(holder, fencing_token, 900)
        };
        let granted = WatchEvent::from_wire(proto::WatchEvent {
            cause: Cause::Granted as i32,
            held: true,
            holder: "r2".into(),
            fencing_token: 8,
            limit: 1,
            holders: vec![shared("r1", 7), shared("r2", 8)],
            ..Default::default()
        });
        let holder = granted.grant_holder().unwrap();
        assert_eq!((holder.fencing_token, holder.shared), (8, true));
        let released = WatchEvent::from_wire(proto::WatchEvent {
            cause: Cause::Released as i32,
            held: true,
            holder: "r2".into(),
            fencing_token: 8,
            limit: 1,
            holders: vec![shared("r1", 7)],
            ..Default::default()
        });
        assert_eq!(released.grant_holder(), None);
    }

    #[test]
    fn a_snapshot_of_a_free_lease_has_no_grant() {
        let event = WatchEvent::from_wire(proto::WatchEvent {
            name: "free".into(),
            cause: Cause::Snapshot as i32,
            ..Default::default()
        });
        assert_eq!(event.cause, WatchCause::Snapshot);
        assert_eq!(event.current_holder(), None);
        assert_eq!((event.grant, event.held, event.limit), (None, false, 0));
    }

    #[test]
    fn causes_map_and_unknown_ones_are_kept() {
        let revoked = WatchEvent::from_wire(proto::WatchEvent {
            cause: Cause::Revoked as i32,
            fencing_token: 4,
            reason: "wedged".into(),
            ..Default::default()
        });
        assert_eq!(
            (revoked.cause, revoked.reason.as_str()),
            (WatchCause::Revoked, "wedged")
        );
        assert_eq!(WatchCause::from_wire(3), WatchCause::Released);
        assert_eq!(WatchCause::from_wire(4), WatchCause::Expired);
        assert_eq!(WatchCause::from_wire(0), WatchCause::Other(0));
        assert_eq!(WatchCause::from_wire(42), WatchCause::Other(42));
        let names: Vec<String> = [
            WatchCause::Snapshot,
            WatchCause::Granted,
            WatchCause::Released,
            WatchCause::Expired,
            WatchCause::Revoked,
            WatchCause::Other(42),
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            names,
            [
                "snapshot", "granted", "released", "expired", "revoked", "cause-42"
            ]
        );
    }
}
