//! The tending task of a watched name: listens, reads, applies the store's changes to the view,
//! and times expiries, while anyone watches here. Nothing is registered or kept alive in the
//! store: it reports every change of a name listened to.

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::Notify,
    time::{Instant, sleep_until},
};

use super::{
    WatchUpdate,
    registry::{Reread, Watchers},
    view::{Publish, Tender, View},
};
use crate::lease::{LeaseName, LeaseStore, Replica};

/// How long the first read of a name waits for the store's subscription to it.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads at holders' deadlines come at most this often per name: a counting lease whose many
/// permits expire at scattered moments costs at most 100 reads a second, each settling every
/// permit due by then.
const MIN_EXPIRY_READ_INTERVAL: Duration = Duration::from_millis(10);

/// After a failed read of a watched name, the next attempt comes this much later.
pub(super) const READ_RETRY: Duration = Duration::from_millis(250);

/// Looks after one watched name while anyone watches it here; then stops listening, unless
/// someone started watching again meanwhile.
pub(super) async fn tend_watch<S: LeaseStore>(
    replica: Arc<Replica<S>>,
    name: LeaseName,
    tend: Arc<Notify>,
) {
    loop {
        watch_while_watched(&replica, &name, &tend).await;
        replica.unlisten(&name);
        if replica.watchers().retire(name.as_str()) {
            return;
        }
    }
}

/// The tending of one name: listens, reads it (a snapshot), then applies the store's changes,
/// times the holders' expiries and re-reads when changes may have been missed, until nobody
/// watches the name here.
async fn watch_while_watched<S: LeaseStore>(replica: &Replica<S>, name: &LeaseName, tend: &Notify) {
    let watchers = replica.watchers();
    replica.listen(name);
    // Subscribed before the first read, so that every change after it is reported as itself (a
    // change before the subscription would only show up in a later read, as a snapshot). A
    // store that cannot subscribe now gets its read anyway: the resync after the subscription
    // succeeds catches up.
    let _ = tokio::time::timeout(LISTEN_TIMEOUT, replica.listening(name)).await;
    let mut tender = Tender {
        out: ToWatchers {
            watchers,
            name: name.as_str(),
        },
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
            let max_before = tender.view.max_token;
            match replica.store().describe(name).await {
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
            _ = sleep_until(wake_at.unwrap_or(now)), if wake_at.is_some() => {
                expiry_due = reread == Reread::No;
            }
        }
    }
}

/// The tending task's [`Publish`]: the name's watchers get each event, and the view for those
/// who join later.
struct ToWatchers<'a> {
    watchers: &'a Watchers,
    name: &'a str,
}

impl Publish for ToWatchers<'_> {
    fn publish(&mut self, event: Option<WatchUpdate>, view: &View) {
        self.watchers.publish(self.name, event, view);
    }
}
