//! Watching a lease: this replica's `Watch` streams by name ([`Watchers`]), the changes the stores
//! report to them, and one tending task per watched name that turns those changes, and the
//! expiries it times itself, into events. ARCHITECTURE.md, "Watching".
//!
//! Each watched name has a *view*: who holds it (by fencing token) as its watchers were last
//! told. The tending task is the only writer of the view; it sends every event on the name's
//! broadcast channel, with a sequence number, and stores the view after it in the registry under
//! the same lock. A new watcher (or one that lagged) takes that stored view as its snapshot and
//! then the events numbered after it: no gap, no repeat.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use tokio::{
    sync::{
        Notify,
        broadcast::{self, error::RecvError},
    },
    time::{Instant, MissedTickBehavior, interval_at, sleep_until},
};

use super::{
    ChangeCause, Description, Expiry, Holder, LeaseChange, LeaseName, LeaseStore, Replica,
};
use crate::error::{Error, Result};

/// How often the tending task renews this replica's registration as a watcher of its name in
/// the store (which reports changes only while someone is registered).
pub const WATCH_KEEPALIVE: Duration = Duration::from_secs(1);

/// How long the first read of a name waits for the store's subscription to it.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(1);

/// A holder that the store no longer shows before its TTL passed was released or revoked, and
/// the store's message saying so is on its way: it gets this long to arrive before the holder
/// is reported expired.
const RELEASE_GRACE: Duration = Duration::from_millis(10);

/// Reads at holders' deadlines come at most this often per name: a counting lease whose many
/// permits expire at scattered moments costs at most 100 reads a second, each settling every
/// permit due by then.
const MIN_EXPIRY_READ_INTERVAL: Duration = Duration::from_millis(10);

/// After a failed read of a watched name, the next attempt comes this much later.
const READ_RETRY: Duration = Duration::from_millis(250);

/// Events buffered per name for its slowest watcher; a watcher further behind gets a fresh
/// snapshot instead of the events it missed, so a slow reader costs bounded memory.
const EVENT_CAPACITY: usize = 64;

/// Changes queued for a name's tending task. Past them (the task is stuck on a slow store), the
/// queue is dropped and the task re-reads the name instead: its watchers get a snapshot.
const MAX_PENDING_CHANGES: usize = 1024;

/// Why a [`WatchUpdate`] was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateCause {
    /// The whole current state: first, and again whenever events may have been missed.
    Snapshot,
    Granted,
    Released,
    /// The TTL passed without a renewal (sent at the expiry, not at the end of a lock-delay).
    Expired,
    Revoked,
}

/// One event for one watcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchUpdate {
    pub cause: UpdateCause,
    /// The grant the event is about (snapshot: the holder with the smallest token; None when
    /// free).
    pub subject: Option<Holder>,
    /// Limit in force after the event (0 when nobody holds it).
    pub limit: u32,
    /// Every holder after the event, by increasing token (held = !holders.is_empty()).
    pub holders: Vec<Holder>,
    /// For Revoked: the operator's reason.
    pub reason: String,
}

/// The `Watch` streams of this replica, by lease name. The stores report every change of holder
/// of a watched name here ([`Watchers::changed`]), in the store's order, and say when changes may
/// have been missed ([`Watchers::resync`], [`Watchers::resync_everywhere`]).
#[derive(Debug, Default)]
pub struct Watchers {
    by_name: Mutex<HashMap<String, NameWatch>>,
}

/// One watched name on this replica.
#[derive(Debug)]
struct NameWatch {
    /// `Watch` streams of the name here; the tending task ends when none is left.
    streams: usize,
    events: broadcast::Sender<Message>,
    /// The number of the last event sent.
    seq: u64,
    /// The view after event `seq`: a new watcher's snapshot. `None` until the name has been
    /// read, and while a read is failing (a newcomer then waits for the next read).
    shown: Option<Arc<View>>,
    /// Changes the store reported, for the tending task, in order.
    changes: VecDeque<LeaseChange>,
    /// Whether the tending task must read the name again.
    reread: Reread,
    tend: Arc<Notify>,
}

impl NameWatch {
    fn new() -> Self {
        NameWatch {
            streams: 0,
            events: broadcast::channel(EVENT_CAPACITY).0,
            seq: 0,
            shown: None,
            changes: VecDeque::new(),
            reread: Reread::No,
            tend: Arc::new(Notify::new()),
        }
    }
}

/// What a name's broadcast channel carries.
#[derive(Clone, Debug)]
enum Message {
    Event {
        seq: u64,
        event: Arc<WatchUpdate>,
    },
    /// A read of the name failed while no view was known: watchers still waiting for their first
    /// snapshot get this error.
    Failed(Arc<Error>),
}

/// How a name must be read again, in increasing strength.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Reread {
    #[default]
    No,
    /// Changes may have been missed (a subscription just started): a snapshot only if the state
    /// differs from the view.
    IfChanged,
    /// Changes were missed or may have been (a reconnect, a lost registration, a failed read, a
    /// lagging subscriber): a snapshot whatever the state.
    Always,
}

/// What the tending task of a name has to do next.
struct Work {
    changes: VecDeque<LeaseChange>,
    reread: Reread,
}

impl Watchers {
    pub fn new() -> Self {
        Watchers::default()
    }

    fn by_name(&self) -> MutexGuard<'_, HashMap<String, NameWatch>> {
        self.by_name.lock().expect("watchers lock poisoned")
    }

    /// A grant, release or revoke of `name`, as the store saw it. Called in the store's order for
    /// each name; a name nobody watches here is ignored. Never blocks: the change is queued for
    /// the name's tending task.
    pub fn changed(&self, name: &str, change: LeaseChange) {
        let mut by_name = self.by_name();
        let Some(watch) = by_name.get_mut(name) else {
            return;
        };
        if watch.streams == 0 {
            return; // the last watcher left: the tending task is ending
        }
        match watch.reread {
            // A full read is coming, and it will see this change.
            Reread::Always => {}
            _ if watch.changes.len() >= MAX_PENDING_CHANGES => {
                watch.changes.clear();
                watch.reread = Reread::Always;
            }
            _ => watch.changes.push_back(change),
        }
        watch.tend.notify_one();
    }

    /// Changes of `name` may have been missed before now (its subscription just started): its
    /// watchers read the state again, and get a snapshot if it differs from what they were told.
    pub fn resync(&self, name: &str) {
        if let Some(watch) = self.by_name().get_mut(name) {
            watch.reread = watch.reread.max(Reread::IfChanged);
            watch.tend.notify_one();
        }
    }

    /// Changes may have been missed on every name (a reconnect, a lagging subscriber): every
    /// watched name reads its state again and its watchers get a snapshot.
    pub fn resync_everywhere(&self) {
        for watch in self.by_name().values_mut() {
            watch.reread = Reread::Always;
            watch.tend.notify_one();
        }
    }

    /// How many `Watch` streams are open here, on every name.
    pub fn count(&self) -> usize {
        self.by_name().values().map(|watch| watch.streams).sum()
    }

    /// Registers a watcher of `name`. The second value is the name's tending signal when this
    /// is its first watcher here: the caller must start its tending task.
    fn join(self: &Arc<Self>, name: &LeaseName) -> (Watch, Option<Arc<Notify>>) {
        let mut by_name = self.by_name();
        let mut first_here = None;
        let watch = by_name.entry(name.as_str().to_owned()).or_insert_with(|| {
            let watch = NameWatch::new();
            first_here = Some(watch.tend.clone());
            watch
        });
        watch.streams += 1;
        // Subscribed under the lock that every send takes: the events after `shown` are exactly
        // those this receiver gets.
        let events = watch.events.subscribe();
        let shown = watch.shown.clone().map(|view| (watch.seq, view));
        drop(by_name);
        let (seen, ready) = match shown {
            Some((seq, view)) => (seq, Some(view.snapshot(Instant::now()))),
            None => (0, None),
        };
        let watch = Watch {
            watchers: self.clone(),
            name: name.as_str().to_owned(),
            events,
            seen,
            phase: Phase::First,
            ready,
        };
        (watch, first_here)
    }

    fn leave(&self, name: &str) {
        if let Some(watch) = self.by_name().get_mut(name) {
            watch.streams -= 1;
            if watch.streams == 0 {
                watch.tend.notify_one();
            }
        }
    }

    /// The view as watchers were last told, as a snapshot, and the number of the last event in
    /// it; `None` while the name's state is not known.
    fn snapshot(&self, name: &str) -> Option<(u64, WatchUpdate)> {
        let (seq, view) = {
            let by_name = self.by_name();
            let watch = by_name.get(name)?;
            (watch.seq, watch.shown.clone()?)
        };
        Some((seq, view.snapshot(Instant::now())))
    }

    /// Takes the tending task's work for `name`; `None` when nobody watches it any more: the
    /// task stops watching (and the name is known no more until it is read again).
    fn work(&self, name: &str) -> Option<Work> {
        let mut by_name = self.by_name();
        let watch = by_name.get_mut(name)?;
        if watch.streams == 0 {
            watch.shown = None;
            watch.changes.clear();
            watch.reread = Reread::No;
            return None;
        }
        Some(Work {
            changes: std::mem::take(&mut watch.changes),
            reread: std::mem::take(&mut watch.reread),
        })
    }

    /// Sends `event` (if any) to the watchers of `name`; `view` is the state after it.
    fn publish(&self, name: &str, event: Option<WatchUpdate>, view: &View) {
        let shown = Arc::new(view.clone());
        let mut by_name = self.by_name();
        let Some(watch) = by_name.get_mut(name) else {
            return;
        };
        watch.shown = Some(shown);
        if let Some(event) = event {
            watch.seq += 1;
            let seq = watch.seq;
            // Nobody receiving is not an error: the last watcher may have just left.
            let _ = watch.events.send(Message::Event {
                seq,
                event: Arc::new(event),
            });
        }
    }

    /// A read of `name` failed: the state is unknown until the next read succeeds.
    fn failed(&self, name: &str, error: Error) {
        if let Some(watch) = self.by_name().get_mut(name) {
            watch.shown = None;
            let _ = watch.events.send(Message::Failed(Arc::new(error)));
        }
    }

    /// Forgets `name` if nobody watches it; false if someone started watching meanwhile, in
    /// which case its tending task carries on.
    fn retire(&self, name: &str) -> bool {
        let mut by_name = self.by_name();
        if by_name.get(name).is_some_and(|watch| watch.streams > 0) {
            return false;
        }
        by_name.remove(name);
        true
    }

    /// Whether `name` has an entry here (a tending task).
    #[cfg(test)]
    fn is_tended(&self, name: &str) -> bool {
        self.by_name().contains_key(name)
    }
}

/// Where a watcher is in its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing sent yet: the first event must be a snapshot, and a failed first read ends it.
    First,
    /// It missed events and no view was known: it skips events until the next snapshot.
    Resyncing,
    Live,
}

/// One watcher's subscription to a name; dropping it leaves (the name's tending task ends with
/// the last).
#[derive(Debug)]
pub struct Watch {
    watchers: Arc<Watchers>,
    name: String,
    events: broadcast::Receiver<Message>,
    /// The number of the last event this watcher has been shown (or that its snapshot contains).
    seen: u64,
    phase: Phase,
    /// A snapshot to send before anything else.
    ready: Option<WatchUpdate>,
}

impl Watch {
    /// Starts watching (spawning the name's tending task if this is its first watcher here).
    pub fn start<S: LeaseStore>(store: &Arc<Replica<S>>, name: LeaseName) -> Watch {
        let (watch, first_here) = store.watchers().join(&name);
        if let Some(tend) = first_here {
            tokio::spawn(tend_watch(store.clone(), name, tend));
        }
        watch
    }

    /// The next event; the first is always a Snapshot. Err only if the first snapshot cannot be
    /// read (the store's error, e.g. Unavailable); later store trouble is retried inside and ends
    /// in a fresh Snapshot. Cancel-safe.
    pub async fn next(&mut self) -> Result<WatchUpdate> {
        loop {
            if let Some(snapshot) = self.ready.take() {
                self.phase = Phase::Live;
                return Ok(snapshot);
            }
            match self.events.recv().await {
                Ok(Message::Event { seq, event }) => {
                    if self.phase != Phase::Live {
                        if event.cause != UpdateCause::Snapshot {
                            continue;
                        }
                        self.phase = Phase::Live;
                    } else if seq <= self.seen {
                        continue; // already in the snapshot this watcher was given
                    }
                    self.seen = seq;
                    return Ok(Arc::unwrap_or_clone(event));
                }
                Ok(Message::Failed(error)) => {
                    if self.phase == Phase::First {
                        return Err(copy_error(&self.name, &error));
                    }
                }
                Err(RecvError::Lagged(_)) => match self.watchers.snapshot(&self.name) {
                    Some((seq, snapshot)) => {
                        self.seen = seq;
                        self.ready = Some(snapshot);
                    }
                    None if self.phase == Phase::Live => self.phase = Phase::Resyncing,
                    None => {}
                },
                Err(RecvError::Closed) => {
                    // The sender lives in the registry as long as any watch of the name does.
                    return Err(Error::Internal {
                        name: self.name.clone(),
                        detail: "watch channel closed".into(),
                    });
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watchers.leave(&self.name);
    }
}

/// The store's error, for each watcher it ends (an [`Error`] is not `Clone`).
fn copy_error(name: &str, error: &Error) -> Error {
    match error {
        Error::Unavailable(detail) => Error::Unavailable(detail.clone()),
        Error::ShuttingDown => Error::ShuttingDown,
        Error::Internal { name, detail } => Error::Internal {
            name: name.clone(),
            detail: detail.clone(),
        },
        other => Error::Internal {
            name: name.to_owned(),
            detail: other.to_string(),
        },
    }
}

/// Who holds a watched name, by fencing token, as its watchers were told.
#[derive(Clone, Debug, Default)]
struct View {
    /// The limit of the holders; meaningless while there are none.
    limit: u32,
    holders: BTreeMap<u64, Holding>,
    /// The largest token seen in a change or a read: a grant reported with a token not above it
    /// is old news.
    max_token: u64,
}

/// One grant in a view.
#[derive(Clone, Debug)]
struct Holding {
    holder: String,
    /// `None`: no expiry (a key written by something other than leased).
    expiry: Option<LocalExpiry>,
    /// When a read first did not show it, before its TTL passed.
    gone_since: Option<Instant>,
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

    fn snapshot(&self, now: Instant) -> WatchUpdate {
        let first = self.holders.iter().next();
        let subject = first.map(|(token, holding)| holding.info(*token, now));
        self.event(UpdateCause::Snapshot, subject, String::new(), now)
    }

    /// The same grants (tokens and holders) under the same limit.
    fn same_holders(&self, other: &View) -> bool {
        let holders = |view: &View| {
            view.holders
                .iter()
                .map(|(token, holding)| (*token, holding.holder.clone()))
                .collect::<Vec<_>>()
        };
        let limit = |view: &View| match view.holders.is_empty() {
            true => 0,
            false => view.limit,
        };
        limit(self) == limit(other) && holders(self) == holders(other)
    }

    /// When the earliest holder's expiry (or grace) is due.
    fn next_due(&self) -> Option<Instant> {
        self.holders.values().filter_map(Holding::due).min()
    }
}

/// The tending task's handle on one name's view, sending an event for each change it makes.
struct Tender<'a> {
    watchers: &'a Watchers,
    name: &'a str,
    view: View,
}

impl Tender<'_> {
    fn emit(&self, cause: UpdateCause, subject: Option<Holder>, reason: String, now: Instant) {
        let event = self.view.event(cause, subject, reason, now);
        self.watchers.publish(self.name, Some(event), &self.view);
    }

    /// Applies one change reported by the store, in order; stale ones are ignored.
    fn apply(&mut self, change: LeaseChange, now: Instant) {
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

    /// A new grant. The holders it leaves no room for (all of them, for an exclusive lease or
    /// another limit) are gone without a word from the store: their TTL passed.
    fn grant(&mut self, token: u64, holding: Holding, limit: u32, now: Instant) {
        self.view.max_token = self.view.max_token.max(token);
        if limit != self.view.limit {
            let ended: Vec<u64> = self.view.holders.keys().copied().collect();
            for ended in ended {
                self.end(ended, UpdateCause::Expired, String::new(), now);
            }
        }
        while self.view.holders.len() >= limit.max(1) as usize {
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
    fn replace(&mut self, description: &Description, now: Instant) {
        self.view = View::read(description, now, self.view.max_token);
        let snapshot = self.view.snapshot(now);
        self.watchers.publish(self.name, Some(snapshot), &self.view);
    }

    /// A read after changes may have been missed: a snapshot only if they were.
    fn resync(&mut self, description: &Description, now: Instant) {
        let read = View::read(description, now, self.view.max_token);
        match read.same_holders(&self.view) {
            true => {
                self.view = read; // fresher expiries
                self.watchers.publish(self.name, None, &self.view);
            }
            false => self.replace(description, now),
        }
    }

    /// A read at a holder's deadline. Holders the view had before the read (token up to
    /// `max_before`) are renewed, expired, or gone before their deadline (released or revoked:
    /// expired if the store's message does not come within [`RELEASE_GRACE`]); grants the store
    /// shows that no message reported yet are granted (the message, when it comes, is old news).
    fn check_expiries(&mut self, description: &Description, max_before: u64, now: Instant) {
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
        self.watchers.publish(self.name, None, &self.view);
    }
}

/// Looks after one watched name while anyone watches it here; then unregisters, unless someone
/// started watching again meanwhile.
async fn tend_watch<S: LeaseStore>(store: Arc<Replica<S>>, name: LeaseName, tend: Arc<Notify>) {
    loop {
        watch_while_watched(&*store, &name, &tend).await;
        // Best effort: a registration left behind lapses by itself within a few seconds.
        if let Err(error) = store.keep_watching(&name, false).await {
            tracing::debug!(%name, %error, "could not unregister a watch");
        }
        store.unlisten(&name);
        if store.watchers().retire(name.as_str()) {
            return;
        }
    }
}

/// Keeps this replica registered as a watcher of `name`; false if the store had lost the
/// registration (changes may have gone unreported).
async fn registration_kept<S: LeaseStore>(store: &Replica<S>, name: &LeaseName) -> bool {
    match store.keep_watching(name, true).await {
        Ok(kept) => kept,
        Err(error) => {
            // Retried at the next keepalive; a registration that lapsed meanwhile answers false.
            tracing::debug!(%name, %error, "could not renew a watch registration");
            true
        }
    }
}

/// The tending of one name: registers and listens, reads it (a snapshot), then applies the
/// store's changes, times the holders' expiries, re-reads when changes may have been missed,
/// and keeps the registration alive, until nobody watches the name here.
async fn watch_while_watched<S: LeaseStore>(store: &Replica<S>, name: &LeaseName, tend: &Notify) {
    let watchers = store.watchers();
    store.listen(name);
    // Registered and subscribed before the first read, so that every change after it is
    // reported as itself (a change before the subscription would only show up in a later read,
    // as a snapshot). A store that cannot subscribe now gets its read anyway: the resync after
    // the subscription succeeds catches up.
    registration_kept(store, name).await;
    let _ = tokio::time::timeout(LISTEN_TIMEOUT, store.listening(name)).await;
    let mut keepalive = interval_at(Instant::now() + WATCH_KEEPALIVE, WATCH_KEEPALIVE);
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut tender = Tender {
        watchers,
        name: name.as_str(),
        view: View::default(),
    };
    let mut reread = Reread::Always;
    let mut retry_at: Option<Instant> = None;
    let mut expiry_due = false;
    let mut last_expiry_read: Option<Instant> = None;
    loop {
        let Some(work) = watchers.work(name.as_str()) else {
            return;
        };
        reread = reread.max(work.reread);
        let now = Instant::now();
        // Before a full read, the changes so far are part of what it will read.
        if reread < Reread::Always {
            for change in work.changes {
                tender.apply(change, now);
            }
        }
        let read_due = reread > Reread::No && retry_at.is_none_or(|at| at <= now);
        if read_due || (expiry_due && reread == Reread::No) {
            if !read_due {
                last_expiry_read = Some(now);
            }
            expiry_due = false;
            if reread == Reread::Always {
                // Changes were missed, perhaps because the store lost this replica's registration
                // (a Redis restart): register again before the read, so that the changes after
                // it are reported as themselves rather than at the next keepalive's re-read.
                registration_kept(store, name).await;
            }
            let max_before = tender.view.max_token;
            match store.describe(name).await {
                Ok(description) => {
                    retry_at = None;
                    match std::mem::take(&mut reread) {
                        Reread::Always => tender.replace(&description, Instant::now()),
                        Reread::IfChanged => tender.resync(&description, Instant::now()),
                        Reread::No => {
                            // Changes that arrived during the read go first: a release reported
                            // now is a release, not an expiry.
                            let Some(work) = watchers.work(name.as_str()) else {
                                return;
                            };
                            reread = work.reread;
                            if reread < Reread::Always {
                                let now = Instant::now();
                                for change in work.changes {
                                    tender.apply(change, now);
                                }
                                tender.check_expiries(&description, max_before, now);
                            }
                        }
                    }
                }
                Err(error) => {
                    tracing::debug!(%name, %error, "could not read a watched lease; retrying");
                    watchers.failed(name.as_str(), error);
                    // Changes may be missed meanwhile: a snapshot once a read succeeds.
                    reread = Reread::Always;
                    retry_at = Some(Instant::now() + READ_RETRY);
                }
            }
            continue;
        }
        let wake_at = match reread {
            Reread::No => tender.view.next_due().map(|due| match last_expiry_read {
                Some(last) => due.max(last + MIN_EXPIRY_READ_INTERVAL),
                None => due,
            }),
            _ => retry_at,
        };
        tokio::select! {
            _ = tend.notified() => {}
            _ = keepalive.tick() => {
                if !registration_kept(store, name).await {
                    reread = Reread::Always;
                }
            }
            _ = sleep_until(wake_at.unwrap_or(now)), if wake_at.is_some() => {
                expiry_due = reread == Reread::No;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::{
        lease::{
            AcquireOutcome, Grant, LeaseId, LeasePage, Limits, ListPrefix, QueueStatus,
            RenewOutcome, Revoked, StoreEvents, ValidatedAcquire, limits::AcquireFields,
        },
        store::{MemoryStore, memory::test_replica},
    };

    const NAME: &str = "jobs/leader";

    fn name() -> LeaseName {
        LeaseName(NAME.into())
    }

    /// An Acquire of `NAME` by `holder`, validated as the server does.
    fn request(holder: &str, ttl_ms: i64, limit: u32, lock_delay_ms: i64) -> ValidatedAcquire {
        Limits::default()
            .validate_acquire(AcquireFields {
                name: NAME,
                holder: holder.into(),
                ttl_ms,
                limit,
                lock_delay_ms,
                ..AcquireFields::default()
            })
            .unwrap()
    }

    /// Takes a permit of `NAME` at once; panics if none is free.
    async fn take<S: LeaseStore>(
        store: &Replica<S>,
        request: &ValidatedAcquire,
    ) -> (LeaseId, Grant) {
        let lease_id = LeaseId::generate();
        match store.try_acquire(request, &lease_id, None).await {
            Ok(AcquireOutcome::Granted(grant)) => (lease_id, grant),
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    /// The next event, which must come within a minute (of the paused clock).
    async fn next(watch: &mut Watch) -> WatchUpdate {
        tokio::time::timeout(Duration::from_secs(60), watch.next())
            .await
            .expect("no event within a minute")
            .expect("the watch failed")
    }

    /// The next event, which must have this cause and be about this token.
    async fn expect(watch: &mut Watch, cause: UpdateCause, token: u64) -> WatchUpdate {
        let event = next(watch).await;
        assert_eq!(event.cause, cause, "{event:?}");
        assert_eq!(event.subject.as_ref().map(|s| s.fencing_token), Some(token));
        event
    }

    /// No event for `duration`.
    async fn assert_quiet(watch: &mut Watch, duration: Duration) {
        if let Ok(event) = tokio::time::timeout(duration, watch.next()).await {
            panic!("expected no event, got {event:?}");
        }
    }

    fn tokens(event: &WatchUpdate) -> Vec<u64> {
        event.holders.iter().map(|h| h.fencing_token).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_event_is_a_snapshot() {
        let store = test_replica(16);
        let mut watch = Watch::start(&store, name());
        let free = next(&mut watch).await;
        assert_eq!(free.cause, UpdateCause::Snapshot);
        assert_eq!((free.subject, free.limit, free.holders.len()), (None, 0, 0));

        let (_, grant) = take(&*store, &request("alpha", 10_000, 1, 0)).await;
        // Once the tending task has applied the grant, a newcomer's snapshot shows it.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut late = Watch::start(&store, name());
        let held = next(&mut late).await;
        assert_eq!(held.cause, UpdateCause::Snapshot);
        let subject = held.subject.clone().expect("a holder");
        assert_eq!(
            (subject.holder.as_str(), subject.fencing_token),
            ("alpha", grant.fencing_token)
        );
        assert_eq!(subject.expiry.unwrap().remaining_ms, 9_999);
        assert_eq!((held.limit, tokens(&held)), (1, vec![grant.fencing_token]));
        // The first watcher saw the grant as it happened.
        expect(&mut watch, UpdateCause::Granted, grant.fencing_token).await;
    }

    #[tokio::test(start_paused = true)]
    async fn grants_releases_and_revokes_arrive_in_order() {
        let store = test_replica(16);
        let mut watch = Watch::start(&store, name());
        next(&mut watch).await;

        let (alpha_id, alpha) = take(&*store, &request("alpha", 10_000, 1, 0)).await;
        let granted = expect(&mut watch, UpdateCause::Granted, alpha.fencing_token).await;
        assert_eq!(
            (granted.limit, tokens(&granted)),
            (1, vec![alpha.fencing_token])
        );
        assert!(store.release(&name(), &alpha_id).await.unwrap());
        let released = expect(&mut watch, UpdateCause::Released, alpha.fencing_token).await;
        assert_eq!((released.limit, released.holders.len()), (0, 0));

        let (_, beta) = take(&*store, &request("beta", 10_000, 1, 0)).await;
        assert!(beta.fencing_token > alpha.fencing_token);
        let granted = expect(&mut watch, UpdateCause::Granted, beta.fencing_token).await;
        assert_eq!(granted.subject.unwrap().holder, "beta");
        let revoked = store.revoke(&name(), None, "wedged").await.unwrap();
        assert_eq!(revoked.len(), 1);
        let event = expect(&mut watch, UpdateCause::Revoked, beta.fencing_token).await;
        assert_eq!((event.reason.as_str(), event.holders.len()), ("wedged", 0));
        assert_quiet(&mut watch, Duration::from_secs(30)).await;
    }

    /// EXPIRED comes when the TTL passes, not at the end of the lock-delay; from then on the
    /// lease is not held, although nobody can take it until the delay is over.
    #[tokio::test(start_paused = true)]
    async fn an_expiry_is_reported_at_the_ttl_not_after_the_lock_delay() {
        let store = test_replica(16);
        let start = Instant::now();
        let (_, alpha) = take(&*store, &request("alpha", 1_000, 1, 500)).await;
        let mut watch = Watch::start(&store, name());
        expect(&mut watch, UpdateCause::Snapshot, alpha.fencing_token).await;
        let expired = expect(&mut watch, UpdateCause::Expired, alpha.fencing_token).await;
        let at = Instant::now() - start;
        assert!(
            at >= Duration::from_millis(1_000) && at < Duration::from_millis(1_050),
            "expired reported at {at:?}"
        );
        assert!(expired.holders.is_empty());
        assert_eq!(expired.limit, 0);

        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, beta) = take(&*store, &request("beta", 1_000, 1, 0)).await;
        expect(&mut watch, UpdateCause::Granted, beta.fencing_token).await;
    }

    /// An exclusive lease that expires and is taken at once by a waiter: EXPIRED, then GRANTED.
    #[tokio::test(start_paused = true)]
    async fn an_expiry_comes_before_the_next_grant() {
        let store = test_replica(16);
        let (_, alpha) = take(&*store, &request("alpha", 1_000, 1, 0)).await;
        let mut watch = Watch::start(&store, name());
        next(&mut watch).await;
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        // Taken the instant it expires, before the watch's timer has run.
        let (_, beta) = take(&*store, &request("beta", 1_000, 1, 0)).await;
        expect(&mut watch, UpdateCause::Expired, alpha.fencing_token).await;
        let granted = expect(&mut watch, UpdateCause::Granted, beta.fencing_token).await;
        assert_eq!(tokens(&granted), vec![beta.fencing_token]);
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_are_not_events() {
        let store = test_replica(16);
        let (alpha_id, alpha) = take(&*store, &request("alpha", 1_000, 1, 0)).await;
        let mut watch = Watch::start(&store, name());
        next(&mut watch).await;
        for _ in 0..10 {
            assert_quiet(&mut watch, Duration::from_millis(400)).await;
            let renewed = store.renew(&name(), &alpha_id, None).await.unwrap();
            assert!(matches!(renewed, RenewOutcome::Renewed { .. }));
        }
        assert!(store.release(&name(), &alpha_id).await.unwrap());
        expect(&mut watch, UpdateCause::Released, alpha.fencing_token).await;
    }

    /// A grant reported again, or late (its token not above what the watch knows), is no event.
    #[tokio::test(start_paused = true)]
    async fn a_stale_grant_is_ignored() {
        let store = test_replica(16);
        let mut watch = Watch::start(&store, name());
        next(&mut watch).await;
        let (alpha_id, alpha) = take(&*store, &request("alpha", 10_000, 1, 0)).await;
        expect(&mut watch, UpdateCause::Granted, alpha.fencing_token).await;
        for token in [alpha.fencing_token, alpha.fencing_token - 1] {
            let stale = LeaseChange {
                cause: ChangeCause::Granted,
                holder: "ghost".into(),
                fencing_token: token,
                limit: 1,
                ttl_ms: 10_000,
                expires_at_ms: alpha.expires_at_ms,
                reason: String::new(),
            };
            store.watchers().changed(NAME, stale);
        }
        // A release of a grant the watch does not know is no event either.
        let unknown = LeaseChange {
            cause: ChangeCause::Released,
            holder: "ghost".into(),
            fencing_token: alpha.fencing_token - 2,
            limit: 1,
            ttl_ms: 0,
            expires_at_ms: 0,
            reason: String::new(),
        };
        store.watchers().changed(NAME, unknown);
        assert_quiet(&mut watch, Duration::from_secs(1)).await;
        assert!(store.release(&name(), &alpha_id).await.unwrap());
        let released = expect(&mut watch, UpdateCause::Released, alpha.fencing_token).await;
        assert_eq!(released.subject.unwrap().holder, "alpha");
    }

    /// A counting lease: one event per permit, each listing every holder after it.
    #[tokio::test(start_paused = true)]
    async fn a_counting_lease_has_one_event_per_permit() {
        let store = test_replica(16);
        let mut watch = Watch::start(&store, name());
        next(&mut watch).await;
        let mut grants = Vec::new();
        for (index, holder) in ["a", "b", "c"].into_iter().enumerate() {
            let (lease_id, grant) = take(&*store, &request(holder, 10_000, 3, 0)).await;
            let event = expect(&mut watch, UpdateCause::Granted, grant.fencing_token).await;
            assert_eq!((event.limit, event.holders.len()), (3, index + 1));
            grants.push((lease_id, grant));
        }
        assert!(store.release(&name(), &grants[1].0).await.unwrap());
        let released = expect(&mut watch, UpdateCause::Released, grants[1].1.fencing_token).await;
        assert_eq!(
            tokens(&released),
            vec![grants[0].1.fencing_token, grants[2].1.fencing_token]
        );
        let revoked = store
            .revoke(&name(), Some(grants[2].1.fencing_token), "drain")
            .await
            .unwrap();
        assert_eq!(revoked.len(), 1);
        let event = expect(&mut watch, UpdateCause::Revoked, grants[2].1.fencing_token).await;
        assert_eq!(
            (event.limit, tokens(&event)),
            (3, vec![grants[0].1.fencing_token])
        );
    }

    /// A watcher that does not read while more events than the buffer holds go by gets one
    /// snapshot of the state now instead, then the events after it.
    #[tokio::test(start_paused = true)]
    async fn a_lagging_watcher_gets_a_snapshot() {
        let store = test_replica(16);
        let mut slow = Watch::start(&store, name());
        let mut fast = Watch::start(&store, name());
        next(&mut slow).await;
        next(&mut fast).await;
        let mut last = None;
        for round in 0..100 {
            let (lease_id, grant) = take(&*store, &request("busy", 10_000, 1, 0)).await;
            expect(&mut fast, UpdateCause::Granted, grant.fencing_token).await;
            if round < 99 {
                assert!(store.release(&name(), &lease_id).await.unwrap());
                expect(&mut fast, UpdateCause::Released, grant.fencing_token).await;
            }
            last = Some((lease_id, grant));
        }
        let (last_id, last) = last.unwrap();
        let snapshot = expect(&mut slow, UpdateCause::Snapshot, last.fencing_token).await;
        assert_eq!(tokens(&snapshot), vec![last.fencing_token]);
        assert!(store.release(&name(), &last_id).await.unwrap());
        expect(&mut slow, UpdateCause::Released, last.fencing_token).await;
        expect(&mut fast, UpdateCause::Released, last.fencing_token).await;
    }

    /// The tending task and the name's entry go when the last watcher leaves; watching again
    /// starts afresh.
    #[tokio::test(start_paused = true)]
    async fn the_tending_ends_with_the_last_watcher() {
        let store = test_replica(16);
        let mut first = Watch::start(&store, name());
        let mut second = Watch::start(&store, name());
        next(&mut first).await;
        next(&mut second).await;
        assert_eq!(store.watchers().count(), 2);
        drop(first);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(store.watchers().is_tended(NAME));
        drop(second);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(store.watchers().count(), 0);
        assert!(!store.watchers().is_tended(NAME));

        let (_, alpha) = take(&*store, &request("alpha", 10_000, 1, 0)).await;
        let mut again = Watch::start(&store, name());
        expect(&mut again, UpdateCause::Snapshot, alpha.fencing_token).await;
        drop(again);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!store.watchers().is_tended(NAME));
    }

    /// `resync` sends a snapshot only when the state differs from the view;
    /// `resync_everywhere` always does.
    #[tokio::test(start_paused = true)]
    async fn a_resync_sends_a_snapshot_when_needed() {
        let store = test_replica(16);
        let (_, alpha) = take(&*store, &request("alpha", 60_000, 1, 0)).await;
        let mut watch = Watch::start(&store, name());
        next(&mut watch).await;
        store.watchers().resync(NAME);
        assert_quiet(&mut watch, Duration::from_secs(1)).await;
        store.watchers().resync_everywhere();
        expect(&mut watch, UpdateCause::Snapshot, alpha.fencing_token).await;
    }

    /// A [`MemoryStore`] whose reads can fail, and which can keep its changes from the watchers
    /// (as if every message were lost: it reports into a sink nobody reads), for the paths a
    /// Redis outage takes.
    struct Unreliable {
        store: Arc<MemoryStore>,
        failing: AtomicBool,
    }

    impl Unreliable {
        fn new(deaf: bool) -> Arc<Replica<Self>> {
            let events = StoreEvents::new();
            let reported_to = match deaf {
                true => StoreEvents::new(),
                false => events.clone(),
            };
            let unreliable = Unreliable {
                store: MemoryStore::new(16, reported_to),
                failing: AtomicBool::new(false),
            };
            Replica::new(Arc::new(unreliable), events)
        }

        fn fail(&self, failing: bool) {
            self.failing.store(failing, Ordering::SeqCst);
        }
    }

    impl LeaseStore for Unreliable {
        async fn try_acquire(
            &self,
            request: &ValidatedAcquire,
            lease_id: &LeaseId,
            entry: Option<&str>,
        ) -> Result<AcquireOutcome> {
            self.store.try_acquire(request, lease_id, entry).await
        }

        async fn renew(
            &self,
            name: &LeaseName,
            lease_id: &LeaseId,
            ttl: Option<Duration>,
        ) -> Result<RenewOutcome> {
            self.store.renew(name, lease_id, ttl).await
        }

        async fn release(&self, name: &LeaseName, lease_id: &LeaseId) -> Result<bool> {
            self.store.release(name, lease_id).await
        }

        async fn describe(&self, name: &LeaseName) -> Result<Description> {
            match self.failing.load(Ordering::SeqCst) {
                true => Err(Error::Unavailable("test outage".into())),
                false => self.store.describe(name).await,
            }
        }

        async fn leave(&self, name: &LeaseName, entries: &[String]) -> Result<()> {
            self.store.leave(name, entries).await
        }

        async fn queued_here(&self, name: &LeaseName) -> Result<Vec<String>> {
            self.store.queued_here(name).await
        }

        async fn queue_status(&self, name: &LeaseName, entries: &[String]) -> Result<QueueStatus> {
            self.store.queue_status(name, entries).await
        }

        async fn revoke(
            &self,
            name: &LeaseName,
            fencing_token: Option<u64>,
            reason: &str,
        ) -> Result<Vec<Revoked>> {
            self.store.revoke(name, fencing_token, reason).await
        }

        async fn list(
            &self,
            prefix: &ListPrefix,
            page_size: usize,
            page_token: Option<&str>,
        ) -> Result<LeasePage> {
            self.store.list(prefix, page_size, page_token).await
        }

        async fn keep_watching(&self, name: &LeaseName, watching: bool) -> Result<bool> {
            self.store.keep_watching(name, watching).await
        }

        async fn ping(&self) -> Result<()> {
            self.store.ping().await
        }
    }

    /// The first read failing ends the watch with the store's error; a later watch, once the
    /// store answers, gets its snapshot.
    #[tokio::test(start_paused = true)]
    async fn a_first_read_that_fails_is_an_error() {
        let store = Unreliable::new(false);
        store.fail(true);
        let mut watch = Watch::start(&store, name());
        let outcome = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
        assert!(
            matches!(outcome, Ok(Err(Error::Unavailable(_)))),
            "{outcome:?}"
        );
        store.fail(false);
        let mut again = Watch::start(&store, name());
        let snapshot = next(&mut again).await;
        assert_eq!(snapshot.cause, UpdateCause::Snapshot);
    }

    /// Reads failing while watching are retried; what changed meanwhile arrives as a snapshot.
    #[tokio::test(start_paused = true)]
    async fn a_store_outage_ends_in_a_snapshot() {
        let store = Unreliable::new(false);
        let mut watch = Watch::start(&store, name());
        next(&mut watch).await;
        store.fail(true);
        store.watchers().resync_everywhere(); // a reconnect
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (_, alpha) = take(&*store, &request("alpha", 60_000, 1, 0)).await;
        assert_quiet(&mut watch, Duration::from_secs(1)).await;
        let outage_over = Instant::now();
        store.fail(false);
        expect(&mut watch, UpdateCause::Snapshot, alpha.fencing_token).await;
        assert!(Instant::now() - outage_over <= READ_RETRY);
    }

    /// With every message lost, the reads at the holders' deadlines still tell: a holder gone
    /// before its deadline is reported expired after the grace, a grant nobody reported is
    /// reported when a read shows it.
    #[tokio::test(start_paused = true)]
    async fn reads_at_the_deadlines_catch_what_messages_missed() {
        let store = Unreliable::new(true);
        let start = Instant::now();
        let (alpha_id, alpha) = take(&*store, &request("alpha", 1_000, 2, 0)).await;
        let (_, beta) = take(&*store, &request("beta", 500, 2, 0)).await;
        let mut watch = Watch::start(&store, name());
        let snapshot = next(&mut watch).await;
        assert_eq!(
            tokens(&snapshot),
            vec![alpha.fencing_token, beta.fencing_token]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(store.release(&name(), &alpha_id).await.unwrap());
        let (_, gamma) = take(&*store, &request("gamma", 5_000, 2, 0)).await;

        expect(&mut watch, UpdateCause::Expired, beta.fencing_token).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(500));
        expect(&mut watch, UpdateCause::Granted, gamma.fencing_token).await;
        expect(&mut watch, UpdateCause::Expired, alpha.fencing_token).await;
        assert_eq!(
            Instant::now() - start,
            Duration::from_millis(500) + RELEASE_GRACE
        );
    }

    /// A holder gone before its deadline whose release is reported within the grace is
    /// released, not expired.
    #[tokio::test(start_paused = true)]
    async fn a_late_release_report_within_the_grace_is_a_release() {
        let store = Unreliable::new(true);
        let (alpha_id, alpha) = take(&*store, &request("alpha", 1_000, 2, 0)).await;
        let (_, beta) = take(&*store, &request("beta", 500, 2, 0)).await;
        let mut watch = Watch::start(&store, name());
        next(&mut watch).await;
        assert!(store.release(&name(), &alpha_id).await.unwrap());
        expect(&mut watch, UpdateCause::Expired, beta.fencing_token).await;
        tokio::time::sleep(RELEASE_GRACE / 2).await;
        let report = LeaseChange {
            cause: ChangeCause::Released,
            holder: "alpha".into(),
            fencing_token: alpha.fencing_token,
            limit: 2,
            ttl_ms: 0,
            expires_at_ms: alpha.expires_at_ms,
            reason: String::new(),
        };
        store.watchers().changed(NAME, report);
        let released = expect(&mut watch, UpdateCause::Released, alpha.fencing_token).await;
        assert!(released.holders.is_empty());
        assert_quiet(&mut watch, Duration::from_secs(5)).await;
    }

    /// Many watchers reading as events come each see every event, once, in order.
    #[tokio::test(start_paused = true)]
    async fn every_watcher_sees_every_event() {
        const WATCHERS: usize = 50;
        const CYCLES: usize = 100;
        let store = test_replica(16);
        let mut readers = Vec::new();
        for _ in 0..WATCHERS {
            let mut watch = Watch::start(&store, name());
            readers.push(tokio::spawn(async move {
                let mut causes = Vec::new();
                let mut last_granted = 0;
                while causes.len() < 1 + 2 * CYCLES {
                    let event = next(&mut watch).await;
                    if event.cause == UpdateCause::Granted {
                        let token = event.subject.as_ref().unwrap().fencing_token;
                        assert!(token > last_granted);
                        last_granted = token;
                    }
                    causes.push(event.cause);
                }
                causes
            }));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        for _ in 0..CYCLES {
            let (lease_id, _) = take(&*store, &request("cycling", 10_000, 1, 0)).await;
            assert!(store.release(&name(), &lease_id).await.unwrap());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut expected = vec![UpdateCause::Snapshot];
        for _ in 0..CYCLES {
            expected.extend([UpdateCause::Granted, UpdateCause::Released]);
        }
        for reader in readers {
            assert_eq!(reader.await.unwrap(), expected);
        }
    }
}
