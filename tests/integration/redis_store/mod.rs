//! Behaviour that only the Redis store has: several `leased` processes on one Redis, Redis
//! faults (killed, restarted, paused, flushed), tokens across data loss, the classic-lock takeover,
//! the drain on SIGTERM of the real binary; and, on the store itself, what the scripts publish for
//! watchers, what a revoke leaves in Redis, and how List scans the keyspace.
//!
//! One module per topic: `faults` (several processes on one Redis, Redis faults, tokens across
//! data loss, the drain on SIGTERM), `keys` (what the store keeps in Redis: the classic-lock
//! takeover, the owner hash, a foreign key), `layout` (the layout version: recorded, refused at
//! startup, followed across reconnects), `replicas` (`--redis-wait-replicas` on a master with a
//! stopped replica) and `store` (on the store itself: what the scripts
//! publish, what a revoke leaves, how List scans); the store helpers they share are below.

mod faults;
mod keys;
mod layout;
mod replicas;
mod store;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crate::common::*;
use leased::{
    lease::{
        AcquireOutcome, Caller, Grant, LeaseId, LeaseName, LeaseStore, StoreEvents,
        ValidatedAcquire, limits::parse_name,
    },
    store::{RedisOptions, RedisStore, ReplicaWait},
};

/// A [`RedisStore`] on `url` with `key_prefix`, once it answers (and its subscriber is connected).
async fn store_on(url: &str, key_prefix: &str) -> Arc<RedisStore> {
    let store = RedisStore::connect(
        &RedisOptions {
            url: url.to_owned(),
            command_timeout: Duration::from_secs(2),
            pool_size: 2,
            key_prefix: key_prefix.to_owned(),
            max_waiters_per_name: 1_000,
            counter_keep: Duration::from_secs(600),
            wait_for_replicas: ReplicaWait::NONE,
        },
        StoreEvents::new(),
    )
    .unwrap();
    let start = Instant::now();
    while store.ping().await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the store never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Arc::new(store)
}

/// The `PTTL` of `key`, in ms.
fn pttl_ms(redis: &RedisServer, key: &str) -> i64 {
    let reply = redis.command(&["PTTL", key]);
    reply
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("PTTL {key} answered {reply}"))
}

fn name(text: &str) -> LeaseName {
    parse_name(text).unwrap()
}

/// A try-once acquire of `name` for `holder`.
fn request(
    name: &str,
    holder: &str,
    ttl: Duration,
    limit: u32,
    lock_delay: Duration,
) -> ValidatedAcquire {
    ValidatedAcquire {
        name: self::name(name),
        holder: holder.to_owned(),
        ttl,
        wait: Duration::ZERO,
        limit,
        lock_delay,
        shared: false,
        max_shared: 10_000,
        lease_id: None,
        caller: Caller::anyone(),
    }
}

/// Acquires `request`, which must be granted.
async fn grant(store: &RedisStore, request: &ValidatedAcquire) -> Grant {
    match store
        .try_acquire(request, &LeaseId::generate(), None)
        .await
        .unwrap()
    {
        AcquireOutcome::Granted(grant) => grant,
        other => panic!("{}: expected a grant, got {other:?}", request.name),
    }
}
