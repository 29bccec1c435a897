//! This replica's liveness in Redis: one heartbeat key, renewed twice a second whatever the
//! number of names it waits on (on a connection of its own, so that no command queued in the
//! pool, a `WAIT` for replicas above all, can hold it up past the key's TTL), which another
//! replica reads before it takes a stalled queue entry of this replica for dead (`unstall`). The key vanishes with Redis's data, so its renewal
//! is also how this replica learns that Redis lost data (a `FLUSHALL`, a restart without
//! persistence) or that it was out of Redis's reach for longer than other replicas wait for it:
//! every waiter and watcher then reads its name again. And on Redis Cluster, how it notices that
//! slots moved (their shard channels' subscriptions end on the old owner without a word to fred).

use std::time::Duration;

use fred::{
    clients::{Client, Pool, SubscriberClient},
    prelude::{ClusterInterface, EventInterface, KeysInterface},
    types::Expiration,
};
use tokio::time::MissedTickBehavior;

use crate::{
    lease::StoreEvents,
    throttle::{LOG_INTERVAL, Throttle},
};

/// How often the heartbeat key is renewed.
pub(super) const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);

/// The heartbeat key expires this long after its last renewal: four renewals, so a live replica
/// loses it only when Redis is out of its reach for seconds. Another replica's waiter held up by
/// a dead replica's entry is granted within this (plus a check interval) of the death.
pub const HEARTBEAT_TTL: Duration = Duration::from_millis(2_000);

/// How often a replica on Redis Cluster compares the slot map with the last one it saw, beside
/// the comparisons after every redirection its commands meet.
const TOPOLOGY_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// A Redis that keeps losing data would log this at every renewal.
static HEARTBEAT_LOST: Throttle = Throttle::new(LOG_INTERVAL);

/// Renews `key` every [`HEARTBEAT_INTERVAL`]. A renewal that finds the key gone after one that
/// found it (or set it) means Redis lost its data or this replica was away long enough for
/// others to purge its queue entries: reported as a reconnect, so that every waiter re-reads its
/// place (joining again if its entry is gone) and every watcher gets a snapshot.
pub(super) async fn keep_heartbeat(
    client: Client,
    key: String,
    replica: String,
    events: StoreEvents,
) {
    let mut ticks = tokio::time::interval(HEARTBEAT_INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let ttl_ms = HEARTBEAT_TTL.as_millis() as i64;
    let mut beating = false;
    loop {
        ticks.tick().await;
        let previous = client
            .set::<Option<String>, _, _>(
                key.as_str(),
                replica.as_str(),
                Some(Expiration::PX(ttl_ms)),
                None,
                true,
            )
            .await;
        match previous {
            Ok(Some(_)) => beating = true,
            Ok(None) if beating => {
                if let Some(suppressed) = HEARTBEAT_LOST.admit() {
                    tracing::warn!(
                        suppressed,
                        "this replica's heartbeat was gone from Redis (Redis lost data, or was out \
                         of reach for over {HEARTBEAT_TTL:?}): every waiter and watcher reads \
                         its lease again"
                    );
                }
                events.reconnected();
            }
            Ok(None) => beating = true,
            Err(error) => tracing::debug!(%error, "could not renew this replica's heartbeat"),
        }
    }
}

/// On Redis Cluster: when a slot moves, its owner ends the subscriptions of its shard channels
/// (a `SUNSUBSCRIBE` push that fred does not surface), so a name's wake-ups and changes would go
/// unheard. Compares the slot map after every redirection a command meets and every
/// [`TOPOLOGY_CHECK_INTERVAL`]; on a change, has the subscriber re-read it, which reports a
/// topology change ([`resubscribe_on_connect`](super::subscriptions::resubscribe_on_connect)
/// subscribes again and every name re-reads).
pub(super) async fn follow_slot_moves(pool: Pool, subscriber: SubscriberClient) {
    // Each client of the pool syncs its own slot map after a redirection and says so: the
    // index of the client that did.
    let (synced, mut syncs) = tokio::sync::mpsc::unbounded_channel();
    for (index, client) in pool.clients().iter().enumerate() {
        let mut changes = client.cluster_change_rx();
        let synced = synced.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            while !matches!(changes.recv().await, Err(RecvError::Closed)) {
                if synced.send(index).is_err() {
                    return;
                }
            }
        });
    }
    drop(synced);
    let slot_map = |index: usize| {
        pool.clients()[index].cached_cluster_state().map(|state| {
            state
                .slots()
                .iter()
                .map(|range| (range.start, range.end, range.primary.to_string()))
                .collect::<Vec<_>>()
        })
    };
    let mut last = slot_map(0);
    let mut ticks = tokio::time::interval(TOPOLOGY_CHECK_INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let index = tokio::select! {
            synced = syncs.recv() => match synced {
                Some(index) => index,
                None => return,
            },
            _ = ticks.tick() => {
                if let Err(error) = pool.clients()[0].sync_cluster().await {
                    tracing::debug!(%error, "could not read the cluster's slots");
                }
                0
            }
        };
        let now = slot_map(index);
        if now.is_some() && now != last {
            last = now;
            if let Err(error) = subscriber.sync_cluster().await {
                tracing::debug!(%error, "the subscriber could not read the cluster's slots");
            }
        }
    }
}
