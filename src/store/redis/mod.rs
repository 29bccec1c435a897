//! The Redis store: every operation is one Lua script (a function of one Redis Functions
//! `library`, loaded when missing), all keys of a lease share one hash tag, and time comes from
//! Redis `TIME`. Waiters queue in Redis;
//! the scripts wake the first in line on the name's shard channel (`SPUBLISH`), which a replica
//! subscribes to (`SSUBSCRIBE`) only while it has waiters for that name or watches it. Nothing is
//! polled per name: a replica proves it is alive with one heartbeat key (`liveness`), and
//! re-reads a name only when something happened to it or messages may have been missed.
//!
//! Watching: the scripts that change a name's holders publish each change on the same channel
//! (`g` granted, `r` released, `v` revoked: `messages::Published`) while anyone
//! subscribes to it (`PUBSUB SHARDNUMSUB`: the subscription is the registration), which this
//! replica reports
//! ([`StoreEvents::changed`](crate::lease::StoreEvents::changed)). Whenever messages may have been
//! missed (a new subscription, a reconnect, a slot move, a lagging subscriber, data lost), the
//! store reports a resync and the watchers re-read.
//!
//! Listing ([`LeaseStore::list`](crate::lease::LeaseStore::list)) `SCAN`s every master (the one
//! server, the Sentinel master, or each Cluster primary) a bounded number of times per page, and
//! describes the lease names it finds. The keys, messages and scripts:
//! docs/src/internals/redis-layout.md (and fair-waiting.md, watching.md beside it).

mod eviction;
mod keys;
mod layout;
mod library;
mod list;
mod liveness;
mod messages;
mod operations;
mod replication;
mod replies;
mod subscriptions;

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use fred::{
    clients::SubscriberClient,
    prelude::{
        Builder, ClientLike, ClusterInterface, Config, Error as RedisError, Pool, ReconnectPolicy,
    },
    types::InfoKind,
};
use tokio::{sync::mpsc, task::JoinHandle};
use tracing::Instrument;

pub use keys::LeaseKeys;
use layout::Layout;
use library::{Library, Script};
/// Public for the tests that bound how soon a dead replica's waiters stop holding others up.
pub use liveness::HEARTBEAT_TTL;
pub use replication::ReplicaWait;
pub use replies::parse_acquire_reply;
use replies::{Reply, store_error};
use subscriptions::{Subscriptions, keep_subscriptions, report_messages, resubscribe_on_connect};

use crate::{
    error::{Result, StartupError},
    lease::{LeaseName, StoreEvents},
    metrics::metrics,
    telemetry,
};

/// Sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`) came with Redis 7.0.
const MIN_REDIS_MAJOR: u32 = 7;
/// How to reach Redis and how long to wait for it.
#[derive(Clone)]
pub struct RedisOptions {
    /// `redis://`, `rediss://`, `redis-sentinel://` or `redis-cluster://` URL.
    pub url: String,
    /// Every command fails with `UNAVAILABLE` after this long (default 2 s).
    pub command_timeout: Duration,
    /// Connections used for commands; each one pipelines many concurrent requests.
    pub pool_size: usize,
    /// Prepended to every key, e.g. `leased:`.
    pub key_prefix: String,
    /// Refuse more waiters than this in one name's queue (all replicas together).
    pub max_waiters_per_name: usize,
    /// How long a name's fencing counter outlives its last grant (`--redis-counter-keep`).
    pub counter_keep: Duration,
    /// How many replicas must have a grant or renewal before it is answered, and for how long
    /// to wait for them (`--redis-wait-replicas`, `--redis-wait-timeout`).
    pub wait_for_replicas: ReplicaWait,
}

/// Everything but the URL, which may hold passwords (the settings' `Debug` shows it redacted).
impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("url", &"(hidden)")
            .field("command_timeout", &self.command_timeout)
            .field("pool_size", &self.pool_size)
            .field("key_prefix", &self.key_prefix)
            .field("max_waiters_per_name", &self.max_waiters_per_name)
            .field("counter_keep", &self.counter_keep)
            .field("wait_for_replicas", &self.wait_for_replicas)
            .finish()
    }
}

/// A [`LeaseStore`](crate::lease::LeaseStore) on Redis, shared by any number of `leased` replicas.
pub struct RedisStore {
    pool: Pool,
    subscriber: SubscriberClient,
    library: Library,
    key_prefix: String,
    max_waiters_per_name: usize,
    counter_keep: Duration,
    command_timeout: Duration,
    wait_for_replicas: ReplicaWait,
    /// Where wake-ups, positions moved and changes of holder are reported, and which names are
    /// listened to (each name's channel is subscribed while it is).
    events: StoreEvents,
    subscriptions: Arc<Subscriptions>,
    /// The layout version Redis holds, checked on every connection.
    layout: Arc<Layout>,
    background: Vec<JoinHandle<()>>,
}

impl RedisStore {
    /// Starts connecting to Redis and returns at once: until Redis answers, requests fail with
    /// `UNAVAILABLE` after the command timeout and
    /// [`LeaseStore::ping`](crate::lease::LeaseStore::ping) fails. Reconnects forever.
    pub fn connect(options: &RedisOptions, events: StoreEvents) -> Result<Self, StartupError> {
        check_url_scheme(&options.url)?;
        let url_error = |e: RedisError| StartupError::RedisUrl(e.details().to_string());
        let config = Config::from_url(&options.url).map_err(url_error)?;
        let clustered = config.server.is_clustered();
        let mut builder = Builder::from_config(config);
        builder
            .with_performance_config(|performance| {
                // fred ignores per-call timeouts on EVALSHA; this default applies to every command.
                performance.default_command_timeout = options.command_timeout;
                performance.broadcast_channel_capacity = 4096;
            })
            .with_connection_config(|connection| {
                connection.connection_timeout = options.command_timeout;
                connection.internal_command_timeout = options.command_timeout;
            })
            .set_policy(ReconnectPolicy::new_constant(0, 250));
        let pool = builder
            .build_pool(options.pool_size.max(1))
            .map_err(url_error)?;
        let subscriber = builder.build_subscriber_client().map_err(url_error)?;
        // The heartbeat has a connection of its own: with --redis-wait-replicas a `WAIT` holds
        // the pool connection it runs on for up to its timeout, and a heartbeat queued behind a
        // few of them would lapse. Other replicas would then take this live one for gone and
        // purge its waiters' queue entries, which join again at the tail in no fixed order.
        let heartbeat = builder.build().map_err(url_error)?;

        let (changes, pending) = mpsc::unbounded_channel();
        let subscriptions = Arc::new(Subscriptions {
            key_prefix: options.key_prefix.clone(),
            failing: Mutex::new(HashSet::new()),
            changes,
        });
        // A name's first listener subscribes to its channel, its last one unsubscribes.
        events.follow_listening({
            let subscriptions = Arc::downgrade(&subscriptions);
            move |name| {
                if let Some(subscriptions) = subscriptions.upgrade() {
                    subscriptions.reconcile(name.clone());
                }
            }
        });
        let layout = Arc::new(Layout::new(keys::layout_key(&options.key_prefix)));
        let mut background = vec![
            tokio::spawn(layout::follow_layout(pool.clone(), layout.clone())),
            tokio::spawn(keep_subscriptions(
                subscriber.clone(),
                subscriptions.clone(),
                events.clone(),
                pending,
            )),
            tokio::spawn(resubscribe_on_connect(
                subscriber.clone(),
                subscriptions.clone(),
                events.clone(),
            )),
            tokio::spawn(report_messages(
                subscriber.clone(),
                subscriptions.clone(),
                events.clone(),
            )),
            tokio::spawn(liveness::keep_heartbeat(
                heartbeat.clone(),
                keys::heartbeat_key(&options.key_prefix, events.replica()),
                events.replica().to_owned(),
                events.clone(),
            )),
        ];
        if clustered {
            background.push(tokio::spawn(liveness::follow_slot_moves(
                pool.clone(),
                subscriber.clone(),
            )));
        }
        // The layout check must see the first connection: `follow_layout` listened for it when
        // called above. (The other tasks listen when they first run, which may be after it; a
        // first connection has no subscriptions to restore and no names to re-read.)
        drop(pool.connect_pool());
        drop(subscriber.connect());
        drop(heartbeat.connect());

        Ok(RedisStore {
            pool,
            subscriber,
            library: Library::new(),
            key_prefix: options.key_prefix.clone(),
            max_waiters_per_name: options.max_waiters_per_name,
            counter_keep: options.counter_keep,
            command_timeout: options.command_timeout,
            wait_for_replicas: options.wait_for_replicas,
            events,
            subscriptions,
            layout,
            background,
        })
    }

    /// Refuses a Redis older than 7.0 (no sharded pub/sub), if Redis answers within `timeout`.
    /// A Redis that does not answer yet is not an error here: the server starts unhealthy.
    pub async fn check_version(&self, timeout: Duration) -> Result<(), StartupError> {
        let client = self.pool.next();
        let info = tokio::time::timeout(timeout, async {
            client.wait_for_connect().await?;
            client.info::<String>(Some(InfoKind::Server)).await
        })
        .await;
        let info = match info {
            Ok(Ok(info)) => info,
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot read the Redis version yet");
                return Ok(());
            }
            Err(_) => {
                tracing::warn!("Redis did not answer at startup; it must be 7.0 or newer");
                return Ok(());
            }
        };
        check_redis_version(&info)
    }

    /// Refuses a Redis whose layout version (`<prefix>layout`) this binary cannot read, if Redis
    /// answers within `timeout`; records layout 1 in a Redis without it. A Redis that does not
    /// answer yet is not an error here: the layout is checked once it connects.
    pub async fn check_layout(&self, timeout: Duration) -> Result<(), StartupError> {
        self.layout.check_at_startup(timeout).await
    }

    /// `(server, INFO section)` of the one master ("redis"), or of every Cluster primary, once
    /// connected: the startup checks read each master's settings this way.
    async fn info_of_every_master(
        &self,
        section: InfoKind,
    ) -> Result<Vec<(String, String)>, RedisError> {
        let client = self.pool.next();
        client.wait_for_connect().await?;
        let primaries = client
            .cached_cluster_state()
            .map(|state| state.unique_primary_nodes())
            .filter(|_| client.is_clustered());
        let Some(primaries) = primaries else {
            let info: String = client.info(Some(section)).await?;
            return Ok(vec![("redis".to_owned(), info)]);
        };
        let mut infos = Vec::new();
        for server in primaries {
            let info: String = client
                .with_cluster_node(server.clone())
                .info(Some(section.clone()))
                .await?;
            infos.push((server.to_string(), info));
        }
        Ok(infos)
    }

    fn keys(&self, name: &LeaseName) -> LeaseKeys {
        LeaseKeys::new(&self.key_prefix, name)
    }

    /// Runs one script on `name`'s keys; the script names the operation in metrics and errors.
    async fn run<'a>(
        &self,
        script: Script,
        name: &'a LeaseName,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Reply<'a>> {
        self.run_on(self.pool.next(), script, name, keys, args)
            .await
    }

    /// [`run`](Self::run) on one given pool client: a `WAIT` after it on the same client covers
    /// its writes ([`replication`]).
    async fn run_on<'a>(
        &self,
        client: &fred::clients::Client,
        script: Script,
        name: &'a LeaseName,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Reply<'a>> {
        let operation = script.name();
        // A layout this binary cannot read would be misread: refuse rather than guess.
        if let Some(refusal) = self.layout.refusal() {
            return Err(refusal);
        }
        let started = std::time::Instant::now();
        let span = telemetry::store_span("redis", operation, name);
        // Boxed: fred's future is several KiB, and every async fn above this one would otherwise
        // hold and move a copy of it (memcpy was 5% of the server's CPU per grant).
        let reply = Box::pin(self.library.call(client, script, keys, args))
            .instrument(span.clone())
            .await;
        metrics().record_store(operation, started.elapsed(), reply.is_err());
        match reply {
            Ok(value) => Ok(Reply {
                operation,
                name,
                value,
            }),
            Err(error) => {
                let error = store_error(operation, name, error);
                telemetry::record_store_error(&span, &error);
                Err(error)
            }
        }
    }
}

/// Refuses a Redis older than 7.0, from its `INFO server` reply.
fn check_redis_version(info: &str) -> Result<(), StartupError> {
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(str::trim)
        .unwrap_or("of unknown version");
    let major: Option<u32> = version.split('.').next().and_then(|m| m.parse().ok());
    match major {
        Some(major) if major >= MIN_REDIS_MAJOR => Ok(()),
        _ => Err(StartupError::RedisVersion(version.to_owned())),
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        for task in &self.background {
            task.abort();
        }
    }
}

/// fred reads any other scheme as a plain `redis://` URL, so a typo (`redis-clustr://`, `http://`)
/// would connect in the wrong mode: refuse it. Only the scheme is echoed; the URL may hold a password.
fn check_url_scheme(url: &str) -> Result<(), StartupError> {
    const SCHEMES: [&str; 6] = [
        "redis",
        "rediss",
        "redis-cluster",
        "rediss-cluster",
        "redis-sentinel",
        "rediss-sentinel",
    ];
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    if SCHEMES.contains(&scheme) {
        return Ok(());
    }
    Err(StartupError::RedisUrl(format!(
        "the scheme must be one of {}, not {scheme:?}",
        SCHEMES.map(|scheme| format!("{scheme}://")).join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis 7 and newer (Valkey reports a 7.x `redis_version` too) are accepted; 6.x and an
    /// unreadable reply are refused with a message that names the version and the fix.
    #[test]
    fn redis_older_than_7_is_refused_at_startup() {
        let info = |version: &str| {
            format!("# Server\r\nredis_version:{version}\r\nredis_mode:standalone\r\n")
        };
        assert!(check_redis_version(&info("7.0.15")).is_ok());
        assert!(check_redis_version(&info("8.2.1")).is_ok());
        let refused = check_redis_version(&info("6.2.14"))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("Redis 6.2.14 is too old"), "{refused}");
        assert!(refused.contains("7.0 or newer"), "{refused}");
        assert!(check_redis_version("# Server\r\n").is_err());
    }

    /// Only the six Redis schemes are accepted.
    #[test]
    fn unknown_url_schemes_are_refused() {
        assert!(check_url_scheme("redis-cluster://127.0.0.1:7000").is_ok());
        let refused = check_url_scheme("redis-clustr://127.0.0.1:7000")
            .unwrap_err()
            .to_string();
        assert!(refused.contains("\"redis-clustr\""), "{refused}");
    }
}
