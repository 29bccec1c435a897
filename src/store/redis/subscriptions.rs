//! The shard channels this replica subscribes to ([`Subscriptions`]), kept in line with the names
//! the core listens to, and the dispatch of their messages to the core.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use fred::{
    clients::SubscriberClient,
    prelude::{EventInterface, PubsubInterface},
};
use tokio::sync::mpsc;

use super::messages::Published;
use crate::{
    lease::{LeaseName, QueueEntry, StoreEvents},
    throttle::{LOG_INTERVAL, Throttle},
};

/// How soon a failed subscription is tried again.
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(250);
/// While Redis is out of reach, every name that gains waiters fails to subscribe: one line per
/// interval, with the count of the others.
static SUBSCRIBE_FAILED: Throttle = Throttle::new(LOG_INTERVAL);

/// A Redis that flaps, or a Cluster whose slots move, reconnects the subscriber over and over.
static RESUBSCRIBING: Throttle = Throttle::new(LOG_INTERVAL);

/// The shard channels this replica subscribes to: one per name that the core listens to
/// ([`StoreEvents::is_listened`]). One task ([`keep_subscriptions`]) makes Redis match, one
/// channel at a time, in the order of the changes.
pub(super) struct Subscriptions {
    pub(super) key_prefix: String,
    /// Names whose subscription failed and is being retried: wake-ups for them are lost, and
    /// the store is unhealthy until they succeed.
    pub(super) failing: Mutex<HashSet<LeaseName>>,
    pub(super) changes: mpsc::UnboundedSender<SubscriptionChange>,
}

/// What [`keep_subscriptions`] is asked to do.
pub(super) enum SubscriptionChange {
    /// Bring this name's channel in line with whether the name is listened to.
    Name(LeaseName),
    /// The subscriber reconnected: the server forgot every subscription.
    Reconnected,
}

impl Subscriptions {
    pub(super) fn failing(&self) -> MutexGuard<'_, HashSet<LeaseName>> {
        self.failing.lock().expect("subscriptions lock poisoned")
    }

    fn channel(&self, name: &LeaseName) -> String {
        format!("{}{{{}}}:wake", self.key_prefix, name)
    }

    /// The lease name of a wake-up channel.
    fn name_of<'a>(&self, channel: &'a str) -> Option<&'a str> {
        channel
            .strip_prefix(self.key_prefix.as_str())?
            .strip_prefix('{')?
            .strip_suffix("}:wake")
    }

    /// Asks [`keep_subscriptions`] to bring the channel of `name` in line with its listening.
    pub(super) fn reconcile(&self, name: LeaseName) {
        // Fails only when the store is being dropped.
        let _ = self.changes.send(SubscriptionChange::Name(name));
    }
}

/// Subscribes to the channels of names listened to here, and unsubscribes when the last listener
/// leaves. A failed subscription is retried until it succeeds or is no longer wanted; each
/// success is reported ([`StoreEvents::delivering`]): the name's waiters re-read the queue and its
/// watchers the holders, since a message published before it was missed.
pub(super) async fn keep_subscriptions(
    subscriber: SubscriberClient,
    subscriptions: Arc<Subscriptions>,
    events: StoreEvents,
    mut changes: mpsc::UnboundedReceiver<SubscriptionChange>,
) {
    // The channels subscribed now, as far as this task knows.
    let mut subscribed: HashSet<LeaseName> = HashSet::new();
    while let Some(change) = changes.recv().await {
        let name = match change {
            SubscriptionChange::Name(name) => name,
            SubscriptionChange::Reconnected => {
                subscribed.clear();
                events.no_deliveries();
                continue;
            }
        };
        let wanted = events.is_listened(&name);
        let is_subscribed = subscribed.contains(&name);
        let channel = subscriptions.channel(&name);
        if wanted && !is_subscribed {
            match subscriber.ssubscribe(channel.as_str()).await {
                Ok(()) => {
                    subscriptions.failing().remove(&name);
                    events.delivering(&name);
                    subscribed.insert(name);
                }
                Err(error) => {
                    if subscriptions.failing().insert(name.clone())
                        && let Some(suppressed) = SUBSCRIBE_FAILED.admit()
                    {
                        tracing::warn!(suppressed, %channel, %error, "cannot subscribe to wake-ups; retrying");
                    }
                    retry_later(&subscriptions, name);
                }
            }
        } else if !wanted && is_subscribed {
            subscriptions.failing().remove(&name);
            match subscriber.sunsubscribe(channel.as_str()).await {
                Ok(()) => {
                    events.not_delivering(&name);
                    subscribed.remove(&name);
                }
                Err(error) => {
                    tracing::debug!(%channel, %error, "cannot unsubscribe; retrying");
                    retry_later(&subscriptions, name);
                }
            }
        } else if !wanted {
            subscriptions.failing().remove(&name);
        }
    }
}

fn retry_later(subscriptions: &Arc<Subscriptions>, name: LeaseName) {
    let subscriptions = Arc::downgrade(subscriptions);
    tokio::spawn(async move {
        tokio::time::sleep(RESUBSCRIBE_DELAY).await;
        if let Some(subscriptions) = subscriptions.upgrade() {
            subscriptions.reconcile(name);
        }
    });
}

/// After every (re)connection of the subscriber and every Redis Cluster topology change (a slot
/// that moves ends the subscriptions of its channels on the server): subscribe again to every
/// listened name's channel, and report the reconnect ([`StoreEvents::reconnected`]: every waiter
/// re-reads the queue and every watched name its holders, since messages published meanwhile were
/// missed).
pub(super) async fn resubscribe_on_connect(
    subscriber: SubscriberClient,
    subscriptions: Arc<Subscriptions>,
    events: StoreEvents,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut reconnects = subscriber.reconnect_rx();
    let mut cluster_changes = subscriber.cluster_change_rx();
    loop {
        let event = tokio::select! {
            event = reconnects.recv() => event.map(|server| format!("connected to {server}")),
            event = cluster_changes.recv() => event.map(|_| "cluster topology changed".to_owned()),
        };
        match event {
            Ok(event) => {
                if let Some(suppressed) = RESUBSCRIBING.admit() {
                    tracing::info!(suppressed, "{event}: subscribing to wake-ups again");
                }
            }
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
        // Fails only when the store is being dropped.
        let _ = subscriptions.changes.send(SubscriptionChange::Reconnected);
        for name in events.listened_names() {
            subscriptions.reconcile(name);
        }
        events.reconnected();
    }
}

/// Reports each message of a name's channel: wake-ups (`w<entry>` wakes that entry, `m` has the
/// name's waiters re-read their placements) and changes of holder.
pub(super) async fn report_messages(
    subscriber: SubscriberClient,
    subscriptions: Arc<Subscriptions>,
    events: StoreEvents,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut messages = subscriber.message_rx();
    loop {
        match messages.recv().await {
            Ok(message) => {
                let Some(name) = subscriptions.name_of(&message.channel) else {
                    continue;
                };
                let Some(text) = message.value.as_str() else {
                    continue;
                };
                match Published::parse(&text) {
                    Some(Published::Moved) => events.moved(name),
                    Some(Published::Wake(entry)) => match QueueEntry::parse(entry) {
                        Some(entry) => events.wake(name, &entry),
                        None => tracing::debug!(name, entry, "wake-up of no queue entry"),
                    },
                    Some(Published::Changed(change)) => events.changed(name, change),
                    None => {
                        tracing::debug!(name, message = %text, "unknown message on a lease channel")
                    }
                }
            }
            // We fell behind and lost some messages: every name re-reads its queue, and every
            // watched name its holders.
            Err(RecvError::Lagged(_)) => events.resync_all(),
            Err(RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wake-up channel of a name maps back to the name, and nothing else does.
    #[test]
    fn wake_channels_name_their_lease() {
        let (changes, _) = mpsc::unbounded_channel();
        let subscriptions = Subscriptions {
            key_prefix: "leased:".into(),
            failing: Mutex::default(),
            changes,
        };
        let name = crate::lease::limits::parse_name("jobs/nightly").unwrap();
        let channel = subscriptions.channel(&name);
        assert_eq!(channel, "leased:{jobs/nightly}:wake");
        assert_eq!(subscriptions.name_of(&channel), Some("jobs/nightly"));
        assert_eq!(subscriptions.name_of("other:{jobs/nightly}:wake"), None);
        assert_eq!(subscriptions.name_of("leased:{jobs/nightly}"), None);
    }
}
