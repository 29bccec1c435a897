//! Watching a lease: this replica's `Watch` streams by name ([`Watchers`]), the changes the stores
//! report to them, and one tending task per watched name that turns those changes, and the
//! expiries it times itself, into events. ARCHITECTURE.md, "Watching".
//!
//! Each watched name has a *view*: who holds it (by fencing token) as its watchers were last
//! told. The tending task is the only writer of the view; it sends every event on the name's
//! broadcast channel, with a sequence number, and stores the view after it in the registry under
//! the same lock. A new watcher (or one that lagged) takes that stored view as its snapshot and
//! then the events numbered after it: no gap, no repeat.

mod registry;
mod tending;
#[cfg(test)]
mod tests;
mod view;

use std::sync::Arc;

use tokio::sync::broadcast::{self, error::RecvError};

use super::{Holder, LeaseName, LeaseStore, Replica};
use crate::error::{Error, Result};
use registry::Message;
pub use registry::Watchers;
use tending::tend_watch;

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
    pub fn start<S: LeaseStore>(replica: &Arc<Replica<S>>, name: LeaseName) -> Watch {
        let (watch, first_here) = replica.watchers().join(&name);
        if let Some(tend) = first_here {
            tokio::spawn(tend_watch(replica.clone(), name, tend));
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
        Error::NotReplicated(detail) => Error::NotReplicated(detail.clone()),
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
