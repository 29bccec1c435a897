//! The view of a watched name and the pure decisions on it: which events a reported change, a
//! read or a passing deadline makes, with no store I/O. The decisions go to a [`Publish`], so
//! that the unit tests below drive them synchronously.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use tokio::time::Instant;

use super::{UpdateCause, WatchUpdate};
use crate::lease::{ChangeCause, Description, Expiry, Holder, LeaseChange};

/// A holder that the store no longer shows before its TTL passed was released or revoked, and
/// the store's message saying so is on its way: it gets this long to arrive before the holder
/// is reported expired.
pub(super) const RELEASE_GRACE: Duration = Duration::from_millis(10);

/// Who holds a watched name, by fencing token, as its watchers were told.
#[derive(Clone, Debug, Default)]
pub(super) struct View {
    /// The limit of the holders; meaningless while there are none.
    limit: u32,
    /// The holders are shared grants of a read-write lease (any number, of limit 1).
    shared: bool,
    holders: BTreeMap<u64, Holding>,
    /// The largest token seen in a change or a read: a grant reported with a token not above it
    /// is old news.
    pub(super) max_token: u64,
}

/// One grant in a view.
#[derive(Clone, Debug)]
struct Holding {
    holder: String,
    /// `None`: no expiry (a key written by something other than leased).
    expiry: Option<LocalExpiry>,
    /// When a read first did not show it, before its TTL passed.
    gone_since: Option<Instant>,
    shared: bool,
}

/// When a grant expires, on this replica's clock.
#[derive(Clone, Copy, Debug)]
struct LocalExpiry {
    /// When the TTL passes unless it was renewed (renewals are not reported: the read at this
    /// deadline tells).
    deadline: Instant,
    at_unix_ms: i64,
    lock_delay_ms: i64,
}

/// The holder holds it: its TTL has not passed (it is not in its lock-delay).
fn holds(info: &Holder) -> bool {
    info.expiry.is_none_or(|expiry| expiry.held_ms() > 0)
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

impl Holding {
    fn read(info: &Holder, now: Instant) -> Self {
        Holding {
            holder: info.holder.clone(),
            expiry: info.expiry.map(|expiry| LocalExpiry {
                deadline: now + millis(expiry.held_ms()),
                at_unix_ms: expiry.at_unix_ms,
                lock_delay_ms: expiry.lock_delay_ms,
            }),
            gone_since: None,
            shared: info.shared,
        }
    }

    /// As an event shows it, with the time left as of `now`.
    fn info(&self, fencing_token: u64, now: Instant) -> Holder {
        Holder {
            holder: self.holder.clone(),
            fencing_token,
            expiry: self.expiry.map(|expiry| {
                let frees_at = expiry.deadline + millis(expiry.lock_delay_ms);
                Expiry {
                    remaining_ms: frees_at.saturating_duration_since(now).as_millis() as i64,
                    at_unix_ms: expiry.at_unix_ms,
                    lock_delay_ms: expiry.lock_delay_ms,
                }
            }),
            shared: self.shared,
        }
    }

    /// When the tending task must look at it again.
    fn due(&self) -> Option<Instant> {
        match self.gone_since {
            Some(since) => Some(since + RELEASE_GRACE),
            None => self.expiry.map(|expiry| expiry.deadline),
        }
    }
}

impl View {
    /// The holders a read shows (those in their lock-delay no longer hold it).
    fn read(description: &Description, now: Instant, max_token: u64) -> Self {
        let read_max = description.holders.iter().map(|h| h.fencing_token).max();
        View {
            limit: description.limit,
            shared: description
                .holders
                .first()
                .is_some_and(|holder| holder.shared),
            holders: description
                .holders
                .iter()
                .filter(|info| holds(info))
                .map(|info| (info.fencing_token, Holding::read(info, now)))
                .collect(),
            max_token: max_token.max(read_max.unwrap_or(0)),
        }
    }

    fn event(
        &self,
        cause: UpdateCause,
        subject: Option<Holder>,
        reason: String,
        now: Instant,
    ) -> WatchUpdate {
        let holders: Vec<Holder> = self
            .holders
            .iter()
            .map(|(token, holding)| holding.info(*token, now))
            .collect();
        WatchUpdate {
            cause,
            subject,
            limit: if holders.is_empty() { 0 } else { self.limit },
            holders,
            reason,
        }
    }

    pub(super) fn snapshot(&self, now: Instant) -> WatchUpdate {
        let first = self.holders.iter().next();
        let subject = first.map(|(token, holding)| holding.info(*token, now));
        self.event(UpdateCause::Snapshot, subject, String::new(), now)
    }

    /// The same grants (tokens, holders and mode) under the same limit.
    fn same_holders(&self, other: &View) -> bool {
        let holders = |view: &View| {
            view.holders
                .iter()
                .map(|(token, holding)| (*token, holding.holder.clone(), holding.shared))
                .collect::<Vec<_>>()
        };
        let limit = |view: &View| match view.holders.is_empty() {
            true => 0,
            false => view.limit,
        };
        limit(self) == limit(other) && holders(self) == holders(other)
    }

    /// When the earliest holder's expiry (or grace) is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.holders.values().filter_map(Holding::due).min()
    }
}

/// Where a [`Tender`] sends what it decides: each event, if any, with the view after it (the
/// tending task: to the name's watchers).
pub(super) trait Publish {
    fn publish(&mut self, event: Option<WatchUpdate>, view: &View);
}

/// One name's view and where its events go: applies what the tending task learns, sending an
/// event for each change of holder it makes.
pub(super) struct Tender<P> {
    pub(super) out: P,
    pub(super) view: View,
}

impl<P: Publish> Tender<P> {
    fn emit(&mut self, cause: UpdateCause, subject: Option<Holder>, reason: String, now: Instant) {
        let event = self.view.event(cause, subject, reason, now);
        self.out.publish(Some(event), &self.view);
    }

    /// Applies one change reported by the store, in order; stale ones are ignored.
    pub(super) fn apply(&mut self, change: LeaseChange, now: Instant) {
        let token = change.fencing_token;
        match change.cause {
            ChangeCause::Granted => {
                if token <= self.view.max_token {
                    return; // already known: from a read, or reported twice
                }
                let holding = Holding {
                    holder: change.holder,
                    expiry: Some(LocalExpiry {
                        deadline: now + millis(change.ttl_ms),
                        at_unix_ms: change.expires_at_ms,
                        lock_delay_ms: 0,
                    }),
                    gone_since: None,
                    shared: change.shared,
                };
                self.grant(token, holding, change.limit, now);
            }
            ChangeCause::Released | ChangeCause::Revoked => {
                let cause = match change.cause {
                    ChangeCause::Revoked => UpdateCause::Revoked,
                    _ => UpdateCause::Released,
                };
                if let Some(expiry) = self
                    .view
                    .holders
                    .get_mut(&token)
                    .and_then(|holding| holding.expiry.as_mut())
                    .filter(|_| change.expires_at_ms > 0)
                {
                    expiry.at_unix_ms = change.expires_at_ms;
                }
                self.end(token, cause, change.reason, now);
            }
        }
    }

    /// A new grant. The holders it leaves no room for (all of them, for an exclusive lease,
    /// another limit or another mode; none beside a shared grant) are gone without a word from
    /// the store: their TTL passed.
    fn grant(&mut self, token: u64, holding: Holding, limit: u32, now: Instant) {
        self.view.max_token = self.view.max_token.max(token);
        let shared = holding.shared;
        if limit != self.view.limit || shared != self.view.shared {
            let ended: Vec<u64> = self.view.holders.keys().copied().collect();
            for ended in ended {
                self.end(ended, UpdateCause::Expired, String::new(), now);
            }
        }
        while !shared && self.view.holders.len() >= limit.max(1) as usize {
            let soonest = self
                .view
                .holders
                .iter()
                .min_by_key(|(_, holding)| holding.expiry.map(|expiry| expiry.deadline))
                .map(|(token, _)| *token);
            // No expiry sorts first: a key without one that a grant replaced is gone too.
            let Some(ended) = soonest else { break };
            self.end(ended, UpdateCause::Expired, String::new(), now);
        }
        self.view.limit = limit;
        self.view.shared = shared;
        let subject = holding.info(token, now);
        self.view.holders.insert(token, holding);
        self.emit(UpdateCause::Granted, Some(subject), String::new(), now);
    }

    /// `token` ended (if it is in the view).
    fn end(&mut self, token: u64, cause: UpdateCause, reason: String, now: Instant) {
        if let Some(holding) = self.view.holders.remove(&token) {
            let subject = holding.info(token, now);
            self.emit(cause, Some(subject), reason, now);
        }
    }

    /// A full read: the view is what the store shows, and watchers get it as a snapshot.
    pub(super) fn replace(&mut self, description: &Description, now: Instant) {
        self.view = View::read(description, now, self.view.max_token);
        let snapshot = self.view.snapshot(now);
        self.out.publish(Some(snapshot), &self.view);
    }

    /// A read after changes may have been missed: a snapshot only if they were.
    pub(super) fn resync(&mut self, description: &Description, now: Instant) {
        let read = View::read(description, now, self.view.max_token);
        match read.same_holders(&self.view) {
            true => {
                self.view = read; // fresher expiries
                self.out.publish(None, &self.view);
            }
            false => self.replace(description, now),
        }
    }

    /// A read at a holder's deadline. Holders the view had before the read (token up to
    /// `max_before`) are renewed, expired, or gone before their deadline (released or revoked:
    /// expired if the store's message does not come within [`RELEASE_GRACE`]); grants the store
    /// shows that no message reported yet are granted (the message, when it comes, is old news).
    pub(super) fn check_expiries(
        &mut self,
        description: &Description,
        max_before: u64,
        now: Instant,
    ) {
        let read: HashMap<u64, &Holder> = description
            .holders
            .iter()
            .map(|info| (info.fencing_token, info))
            .collect();
        let known: Vec<u64> = self
            .view
            .holders
            .range(..=max_before)
            .map(|(token, _)| *token)
            .collect();
        for token in known {
            let Some(holding) = self.view.holders.get_mut(&token) else {
                continue;
            };
            match read.get(&token) {
                Some(info) if holds(info) => *holding = Holding::read(info, now),
                // The store says its TTL passed (it may be in its lock-delay).
                Some(_) => self.end(token, UpdateCause::Expired, String::new(), now),
                None => {
                    let deadline_passed =
                        holding.expiry.is_some_and(|expiry| expiry.deadline <= now);
                    let gone_since = *holding.gone_since.get_or_insert(now);
                    if deadline_passed || now >= gone_since + RELEASE_GRACE {
                        self.end(token, UpdateCause::Expired, String::new(), now);
                    }
                }
            }
        }
        let unreported: Vec<&Holder> = description
            .holders
            .iter()
            .filter(|info| info.fencing_token > self.view.max_token && holds(info))
            .collect();
        for info in unreported {
            let holding = Holding::read(info, now);
            self.grant(info.fencing_token, holding, description.limit, now);
        }
        let read_max = read.keys().copied().max().unwrap_or(0);
        self.view.max_token = self.view.max_token.max(read_max);
        self.out.publish(None, &self.view);
    }
}

/// The state machine alone, on a clock that the tests move by hand: no store, no task, no
/// runtime.
#[cfg(test)]
mod tests {
    use super::*;

    /// Records what the tender publishes.
    #[derive(Default)]
    struct Recorded(Vec<WatchUpdate>);

    impl Publish for Recorded {
        fn publish(&mut self, event: Option<WatchUpdate>, _view: &View) {
            self.0.extend(event);
        }
    }

    fn tender() -> Tender<Recorded> {
        Tender {
            out: Recorded::default(),
            view: View::default(),
        }
    }

    fn change(cause: ChangeCause, holder: &str, token: u64, limit: u32) -> LeaseChange {
        LeaseChange {
            shared: false,
            cause,
            holder: holder.into(),
            fencing_token: token,
            limit,
            ttl_ms: 10_000,
            expires_at_ms: 1_000_000,
            reason: String::new(),
        }
    }

    fn held(holder: &str, token: u64, remaining_ms: i64) -> Holder {
        Holder {
            shared: false,
            holder: holder.into(),
            fencing_token: token,
            expiry: Some(Expiry {
                remaining_ms,
                at_unix_ms: 1_000_000,
                lock_delay_ms: 0,
            }),
        }
    }

    /// (cause, subject's token, tokens held after) of each event.
    fn seen(tender: &Tender<Recorded>) -> Vec<(UpdateCause, u64, Vec<u64>)> {
        let token = |holder: &Holder| holder.fencing_token;
        tender
            .out
            .0
            .iter()
            .map(|event| {
                let subject = event.subject.as_ref().map_or(0, token);
                (
                    event.cause,
                    subject,
                    event.holders.iter().map(token).collect(),
                )
            })
            .collect()
    }

    /// A grant and its release are two events, in order; a grant reported again, or one with a
    /// token not above those already seen, is old news.
    #[test]
    fn grants_and_releases_are_events_and_old_news_is_not() {
        let now = Instant::now();
        let mut tender = tender();
        tender.apply(change(ChangeCause::Granted, "a", 5, 1), now);
        tender.apply(change(ChangeCause::Granted, "a", 5, 1), now);
        tender.apply(change(ChangeCause::Granted, "old", 4, 1), now);
        tender.apply(change(ChangeCause::Released, "a", 5, 1), now);
        assert_eq!(
            seen(&tender),
            [
                (UpdateCause::Granted, 5, vec![5]),
                (UpdateCause::Released, 5, vec![]),
            ]
        );
    }

    /// An exclusive grant while the view still shows a holder means that holder's TTL passed
    /// unreported: it is expired first, then the new one granted.
    #[test]
    fn a_grant_over_a_holder_expires_it_first() {
        let now = Instant::now();
        let mut tender = tender();
        tender.apply(change(ChangeCause::Granted, "a", 5, 1), now);
        tender.apply(change(ChangeCause::Granted, "b", 6, 1), now);
        assert_eq!(
            seen(&tender),
            [
                (UpdateCause::Granted, 5, vec![5]),
                (UpdateCause::Expired, 5, vec![]),
                (UpdateCause::Granted, 6, vec![6]),
            ]
        );
    }

    /// A holder that a read no longer shows before its deadline was released, and the store's
    /// message is on its way: it is reported expired only once the grace has passed without it.
    #[test]
    fn a_holder_gone_from_a_read_is_expired_after_the_grace() {
        let start = Instant::now();
        let mut tender = tender();
        tender.apply(change(ChangeCause::Granted, "a", 5, 1), start);
        let empty = Description::default();
        tender.check_expiries(&empty, 5, start);
        assert_eq!(seen(&tender).len(), 1, "within the grace: no event yet");
        tender.check_expiries(&empty, 5, start + RELEASE_GRACE);
        assert_eq!(seen(&tender)[1], (UpdateCause::Expired, 5, vec![]));
    }

    /// A read after changes may have been missed sends a snapshot only when the holders differ.
    #[test]
    fn a_resync_sends_a_snapshot_only_when_the_holders_differ() {
        let now = Instant::now();
        let mut tender = tender();
        tender.apply(change(ChangeCause::Granted, "a", 5, 1), now);
        let same = Description {
            limit: 1,
            holders: vec![held("a", 5, 9_000)],
            waiters: 0,
        };
        tender.resync(&same, now);
        assert_eq!(seen(&tender).len(), 1, "the same holders: no snapshot");
        let other = Description {
            limit: 1,
            holders: vec![held("b", 7, 9_000)],
            waiters: 0,
        };
        tender.resync(&other, now);
        assert_eq!(seen(&tender)[1], (UpdateCause::Snapshot, 7, vec![7]));
        assert_eq!(tender.view.max_token, 7);
    }
}
