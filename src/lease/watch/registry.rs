//! The registry of this replica's watched names: their watchers, the changes the stores report
//! for them, and each name's broadcast channel and last shown view.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
};

use tokio::{
    sync::{Notify, broadcast},
    time::Instant,
};

use super::{Phase, Watch, WatchUpdate, view::View};
use crate::{
    error::Error,
    lease::{LeaseChange, LeaseName},
};

/// Events buffered per name for its slowest watcher; a watcher further behind gets a fresh
/// snapshot instead of the events it missed, so a slow reader costs bounded memory.
const EVENT_CAPACITY: usize = 64;

/// Changes queued for a name's tending task. Past them (the task is stuck on a slow store), the
/// queue is dropped and the task re-reads the name instead: its watchers get a snapshot.
const MAX_PENDING_CHANGES: usize = 1024;

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
pub(super) enum Message {
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
pub(super) enum Reread {
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
pub(super) struct Work {
    pub(super) changes: VecDeque<LeaseChange>,
    pub(super) reread: Reread,
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
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.by_name().values().map(|watch| watch.streams).sum()
    }

    /// Registers a watcher of `name`. The second value is the name's tending signal when this
    /// is its first watcher here: the caller must start its tending task.
    pub(super) fn join(self: &Arc<Self>, name: &LeaseName) -> (Watch, Option<Arc<Notify>>) {
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

    pub(super) fn leave(&self, name: &str) {
        if let Some(watch) = self.by_name().get_mut(name) {
            watch.streams -= 1;
            if watch.streams == 0 {
                watch.tend.notify_one();
            }
        }
    }

    /// The view as watchers were last told, as a snapshot, and the number of the last event in
    /// it; `None` while the name's state is not known.
    pub(super) fn snapshot(&self, name: &str) -> Option<(u64, WatchUpdate)> {
        let (seq, view) = {
            let by_name = self.by_name();
            let watch = by_name.get(name)?;
            (watch.seq, watch.shown.clone()?)
        };
        Some((seq, view.snapshot(Instant::now())))
    }

    /// Takes the tending task's work for `name`; `None` when nobody watches it any more: the
    /// task stops watching (and the name is known no more until it is read again).
    pub(super) fn work(&self, name: &str) -> Option<Work> {
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
    pub(super) fn publish(&self, name: &str, event: Option<WatchUpdate>, view: &View) {
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
    pub(super) fn failed(&self, name: &str, error: Error) {
        if let Some(watch) = self.by_name().get_mut(name) {
            watch.shown = None;
            let _ = watch.events.send(Message::Failed(Arc::new(error)));
        }
    }

    /// Forgets `name` if nobody watches it; false if someone started watching meanwhile, in
    /// which case its tending task carries on.
    pub(super) fn retire(&self, name: &str) -> bool {
        let mut by_name = self.by_name();
        if by_name.get(name).is_some_and(|watch| watch.streams > 0) {
            return false;
        }
        by_name.remove(name);
        true
    }

    /// Whether `name` has an entry here (a tending task).
    #[cfg(test)]
    pub(super) fn is_tended(&self, name: &str) -> bool {
        self.by_name().contains_key(name)
    }
}
