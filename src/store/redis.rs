//! The Redis store: every operation is one Lua script (run by SHA, reloaded after `NOSCRIPT`), all
//! keys of a lease share one hash tag, and time comes from Redis `TIME`. Waiters queue in Redis;
//! the scripts wake the first in line on the name's shard channel (`SPUBLISH`), which a replica
//! subscribes to (`SSUBSCRIBE`) only while it has waiters for that name or watches it.
//!
//! Watching: while some replica watches a name (`<prefix>{name}:watchers`, kept by
//! `watching.lua`), the scripts that change its holders also publish each change on the same
//! channel (`g` granted, `r` released, `v` revoked: [`Published`]), which this replica hands to
//! its [`Watchers`]; with nobody watching they publish nothing. Whenever messages may have been
//! missed (a new subscription, a reconnect, a lagging subscriber), the watchers re-read.
//!
//! Listing ([`LeaseStore::list`]) `SCAN`s every master (the one server, the Sentinel master, or
//! each Cluster primary) a bounded number of times per page, and describes the lease names it
//! finds. The keys and what they hold: ARCHITECTURE.md, "Redis key layout", "Fair waiting" and
//! "Watching".

use std::{
    collections::{BTreeMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use fred::{
    clients::SubscriberClient,
    error::ErrorKind,
    prelude::{
        Builder, ClientLike, ClusterInterface, Config, Error as RedisError, EventInterface,
        KeysInterface, Pool, PubsubInterface, ReconnectPolicy, Server, Value,
    },
    types::{InfoKind, scripts::Script},
};
use futures::{StreamExt, stream};
use tokio::{sync::mpsc, task::JoinHandle};

use super::{from_hex, invalid_page_token, to_hex};
use crate::{
    error::{Error, Result, StartupError},
    lease::{
        AcquireOutcome, ChangeCause, DescribedLease, Description, Expiry, Grant, Holder,
        LeaseChange, LeaseGone, LeaseId, LeaseName, LeasePage, LeaseStore, ListPrefix, Occupancy,
        QueueStatus, RenewOutcome, Revoked, StoreEvents, ValidatedAcquire, limits::parse_name,
        waiting::TEND_INTERVAL, watch::WATCH_KEEPALIVE,
    },
    metrics::metrics,
    throttle::{LOG_INTERVAL, Throttle},
};

/// The owner hash, which holds a name's fencing counter, outlives its leases by at least this long
/// (twice the TTL for longer ones); if it expires anyway, the clock floor in `prelude.lua` keeps
/// tokens increasing.
const MIN_FENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// A replica whose waiters' entries were not renewed for this long is taken for dead, and its
/// entries leave the queue. Four tending intervals: a live replica misses it only if Redis is
/// out of its reach for seconds.
const REPLICA_TTL: Duration = Duration::from_millis(4 * TEND_INTERVAL.as_millis() as u64);

/// A replica's registration as a watcher of a name lapses unless renewed within this long: four
/// keepalives, so a live replica loses it only if Redis is out of its reach for seconds.
const WATCH_REGISTRATION_TTL: Duration =
    Duration::from_millis(4 * WATCH_KEEPALIVE.as_millis() as u64);

/// A page of `List` makes at most this many `SCAN` calls, so its cost is bounded whatever the
/// size of the keyspace; a page that runs out of them ends short, with a next page token.
const MAX_SCANS_PER_PAGE: usize = 10;

/// The `COUNT` of each `SCAN` (about how many keys it visits): the room left on the page, within
/// these bounds. So a batch seldom finds more leases than fit; those that do not fit travel in the
/// page token (a few names at most).
const MIN_SCAN_COUNT: usize = 10;
const MAX_SCAN_COUNT: usize = 1_000;

/// A page token carries at most this many names found but not listed yet: a token that says it
/// has more was not made here (a batch finds about `COUNT` keys, a few more at most).
const MAX_PENDING_NAMES: usize = 2 * MAX_SCAN_COUNT;

/// Names a page of `List` describes at once.
const LIST_DESCRIBES_IN_FLIGHT: usize = 32;

/// The version of this store's page tokens: `r1.<hex prefix>.<slot>.<cursor>.<hex pending>`.
const PAGE_TOKEN_VERSION: &str = "r1";

/// How soon a failed subscription is tried again.
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(250);

/// Sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`) came with Redis 7.0.
const MIN_REDIS_MAJOR: u32 = 7;

/// While Redis is out of reach, every name that gains waiters fails to subscribe: one line per
/// interval, with the count of the others.
static SUBSCRIBE_FAILED: Throttle = Throttle::new(LOG_INTERVAL);

/// A Redis that flaps, or a Cluster whose slots move, reconnects the subscriber over and over.
static RESUBSCRIBING: Throttle = Throttle::new(LOG_INTERVAL);

/// A key under the key prefix that looks like a lease's but is not (something else wrote it) is
/// skipped by every listing that finds it.
static LIST_SKIPPED: Throttle = Throttle::new(LOG_INTERVAL);

/// How to reach Redis and how long to wait for it.
#[derive(Clone, Debug)]
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
}

/// The Lua scripts, one per atomic operation. Each but `queued.lua` starts with `prelude.lua`,
/// which holds their shared functions (the queue, the holders, tokens).
struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
    describe: Script,
    leave: Script,
    queued: Script,
    status: Script,
    revoke: Script,
    watching: Script,
}

macro_rules! with_prelude {
    ($file:literal) => {
        Script::from_lua(concat!(
            include_str!("scripts/prelude.lua"),
            include_str!($file)
        ))
    };
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire: with_prelude!("scripts/acquire.lua"),
            renew: with_prelude!("scripts/renew.lua"),
            release: with_prelude!("scripts/release.lua"),
            describe: with_prelude!("scripts/describe.lua"),
            leave: with_prelude!("scripts/leave.lua"),
            queued: Script::from_lua(include_str!("scripts/queued.lua")),
            status: with_prelude!("scripts/status.lua"),
            revoke: with_prelude!("scripts/revoke.lua"),
            watching: with_prelude!("scripts/watching.lua"),
        }
    }
}

/// A [`LeaseStore`] on Redis, shared by any number of `leased` replicas.
pub struct RedisStore {
    pool: Pool,
    subscriber: SubscriberClient,
    scripts: Scripts,
    key_prefix: String,
    max_waiters_per_name: usize,
    /// Where wake-ups, positions moved and changes of holder are reported, and which names are
    /// listened to (each name's channel is subscribed while it is).
    events: StoreEvents,
    subscriptions: Arc<Subscriptions>,
    background: Vec<JoinHandle<()>>,
}

/// The keys of one lease, all under the hash tag `{name}` so that every script touches one slot.
/// Built for every request (public for the micro-benchmarks in `benches/hot_paths.rs`).
pub struct LeaseKeys {
    lease: String,
    /// The name's fencing counter and its exclusive grant (prelude.lua).
    owner: String,
    queue: String,
    replicas: String,
    /// The shard channel of the name's wake-ups: in the same slot, declared as a key.
    wake: String,
    /// A counting lease's permits, by the moment each frees.
    permits: String,
    /// A counting lease's permit records and limit.
    holders: String,
    /// The replicas watching the name: its changes are published only while it exists.
    watchers: String,
    /// Why recently revoked grants were revoked, for their holders' renewals.
    revoked: String,
}

impl LeaseKeys {
    /// The keys of `name` under `key_prefix`.
    pub fn new(key_prefix: &str, name: &LeaseName) -> Self {
        let mut lease = String::with_capacity(key_prefix.len() + name.as_str().len() + 2);
        lease.push_str(key_prefix);
        lease.push('{');
        lease.push_str(name.as_str());
        lease.push('}');
        // Concatenated rather than format!ed: this runs for every request.
        let key = |suffix: &str| [lease.as_str(), suffix].concat();
        LeaseKeys {
            owner: key(":owner"),
            queue: key(":queue"),
            replicas: key(":replicas"),
            wake: key(":wake"),
            permits: key(":permits"),
            holders: key(":holders"),
            watchers: key(":watchers"),
            revoked: key(":revoked"),
            lease,
        }
    }

    /// The KEYS of leave.lua and status.lua, and the first ones of release.lua and revoke.lua, in
    /// the order their headers list.
    fn for_queue_scripts(self) -> Vec<String> {
        vec![
            self.lease,
            self.owner,
            self.queue,
            self.replicas,
            self.wake,
            self.permits,
            self.holders,
        ]
    }

    /// The KEYS of release.lua.
    fn for_release(mut self) -> Vec<String> {
        let watchers = std::mem::take(&mut self.watchers);
        let mut keys = self.for_queue_scripts();
        keys.push(watchers);
        keys
    }

    /// The KEYS of revoke.lua.
    fn for_revoke(mut self) -> Vec<String> {
        let (watchers, revoked) = (
            std::mem::take(&mut self.watchers),
            std::mem::take(&mut self.revoked),
        );
        let mut keys = self.for_queue_scripts();
        keys.extend([watchers, revoked]);
        keys
    }
}

impl RedisStore {
    /// Starts connecting to Redis and returns at once: until Redis answers, requests fail with
    /// `UNAVAILABLE` after the command timeout and [`LeaseStore::ping`] fails. Reconnects forever.
    pub fn connect(options: &RedisOptions, events: StoreEvents) -> Result<Self, StartupError> {
        check_url_scheme(&options.url)?;
        let url_error = |e: RedisError| StartupError::RedisUrl(e.details().to_string());
        let config = Config::from_url(&options.url).map_err(url_error)?;
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
        let background = vec![
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
        ];
        // The tasks above exist before the first connection, so none of its events is missed.
        drop(pool.connect_pool());
        drop(subscriber.connect());

        Ok(RedisStore {
            pool,
            subscriber,
            scripts: Scripts::new(),
            key_prefix: options.key_prefix.clone(),
            max_waiters_per_name: options.max_waiters_per_name,
            events,
            subscriptions,
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

    fn keys(&self, name: &LeaseName) -> LeaseKeys {
        LeaseKeys::new(&self.key_prefix, name)
    }

    /// Runs one script on `name`'s keys; `operation` names it in metrics and errors.
    async fn run<'a>(
        &self,
        operation: &'static str,
        name: &'a LeaseName,
        script: &Script,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Reply<'a>> {
        let started = std::time::Instant::now();
        // Boxed: fred's future is several KiB, and every async fn above this one would otherwise
        // hold and move a copy of it (memcpy was 5% of the server's CPU per grant).
        let reply = Box::pin(script.evalsha_with_reload(self.pool.next(), keys, args)).await;
        metrics().record_store(operation, started.elapsed(), reply.is_err());
        match reply {
            Ok(value) => Ok(Reply {
                operation,
                name,
                value,
            }),
            Err(error) => Err(store_error(operation, name, error)),
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

/// The shard channels this replica subscribes to: one per name that the core listens to
/// ([`StoreEvents::is_listened`]). One task ([`keep_subscriptions`]) makes Redis match, one
/// channel at a time, in the order of the changes.
struct Subscriptions {
    key_prefix: String,
    /// Names whose subscription failed and is being retried: wake-ups for them are lost, and
    /// the store is unhealthy until they succeed.
    failing: Mutex<HashSet<LeaseName>>,
    changes: mpsc::UnboundedSender<SubscriptionChange>,
}

/// What [`keep_subscriptions`] is asked to do.
enum SubscriptionChange {
    /// Bring this name's channel in line with whether the name is listened to.
    Name(LeaseName),
    /// The subscriber reconnected: the server forgot every subscription.
    Reconnected,
}

impl Subscriptions {
    fn failing(&self) -> MutexGuard<'_, HashSet<LeaseName>> {
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
    fn reconcile(&self, name: LeaseName) {
        // Fails only when the store is being dropped.
        let _ = self.changes.send(SubscriptionChange::Name(name));
    }
}

/// Subscribes to the channels of names listened to here, and unsubscribes when the last listener
/// leaves. A failed subscription is retried until it succeeds or is no longer wanted; each
/// success is reported ([`StoreEvents::delivering`]): the name's waiters re-read the queue and its
/// watchers the holders, since a message published before it was missed.
async fn keep_subscriptions(
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
async fn resubscribe_on_connect(
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
async fn report_messages(
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
                    Some(Published::Wake(entry)) => events.wake(name, entry),
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

/// One message on a name's shard channel, as the scripts publish it (prelude.lua).
#[derive(Debug, PartialEq, Eq)]
enum Published<'a> {
    /// `w<entry>`: a free permit goes to this queue entry.
    Wake(&'a str),
    /// `m`: positions in the queue or the holders changed.
    Moved,
    /// `g`, `r` or `v`: a change of holder, published only while some replica watches the name.
    Changed(LeaseChange),
}

impl<'a> Published<'a> {
    /// Reads one message; `None` for one this version does not know.
    ///
    /// - `g<token> <limit> <ttl_ms> <expires_at_ms> <holder>`: granted
    /// - `r<token> <expires_at_ms> <holder>`: released
    /// - `v<token> <expires_at_ms> <reason bytes> <reason><holder>`: revoked
    fn parse(message: &'a str) -> Option<Self> {
        let kind = message.chars().next()?;
        let fields = &message[kind.len_utf8()..];
        let change = |cause, fencing_token: &str, limit, ttl_ms, expires_at_ms: &str| {
            Some(LeaseChange {
                cause,
                holder: String::new(),
                fencing_token: fencing_token.parse().ok()?,
                limit,
                ttl_ms,
                expires_at_ms: expires_at_ms.parse().ok()?,
                reason: String::new(),
            })
        };
        match kind {
            'w' => Some(Published::Wake(fields)),
            'm' if fields.is_empty() => Some(Published::Moved),
            'g' => {
                let mut parts = fields.splitn(5, ' ');
                let (token, limit, ttl_ms, expires_at_ms, holder) = (
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                );
                let change = change(
                    ChangeCause::Granted,
                    token,
                    limit.parse().ok()?,
                    ttl_ms.parse().ok()?,
                    expires_at_ms,
                )?;
                Some(Published::Changed(LeaseChange {
                    holder: holder.to_owned(),
                    ..change
                }))
            }
            'r' => {
                let mut parts = fields.splitn(3, ' ');
                let (token, expires_at_ms, holder) = (parts.next()?, parts.next()?, parts.next()?);
                let change = change(ChangeCause::Released, token, 0, 0, expires_at_ms)?;
                Some(Published::Changed(LeaseChange {
                    holder: holder.to_owned(),
                    ..change
                }))
            }
            'v' => {
                let mut parts = fields.splitn(4, ' ');
                let (token, expires_at_ms, reason_bytes, rest) =
                    (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                let reason_bytes: usize = reason_bytes.parse().ok()?;
                let (reason, holder) = (rest.get(..reason_bytes)?, rest.get(reason_bytes..)?);
                let change = change(ChangeCause::Revoked, token, 0, 0, expires_at_ms)?;
                Some(Published::Changed(LeaseChange {
                    holder: holder.to_owned(),
                    reason: reason.to_owned(),
                    ..change
                }))
            }
            _ => None,
        }
    }
}

impl LeaseStore for RedisStore {
    async fn try_acquire(
        &self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        entry: Option<&str>,
    ) -> Result<AcquireOutcome> {
        let name = &request.name;
        let keys = self.keys(name);
        let ttl_ms = request.ttl.as_millis() as u64;
        let fence_ttl_ms = MIN_FENCE_TTL
            .max(request.ttl * 2)
            .max(request.ttl + request.lock_delay)
            .as_millis() as u64;
        let reply = self
            .run(
                "acquire",
                name,
                &self.scripts.acquire,
                vec![
                    keys.lease,
                    keys.owner,
                    keys.queue,
                    keys.replicas,
                    keys.wake,
                    keys.permits,
                    keys.holders,
                    keys.watchers,
                ],
                vec![
                    lease_id.expose().to_owned(),
                    request.holder.clone(),
                    ttl_ms.to_string(),
                    fence_ttl_ms.to_string(),
                    entry.unwrap_or_default().to_owned(),
                    self.events.replica().to_owned(),
                    REPLICA_TTL.as_millis().to_string(),
                    self.max_waiters_per_name.to_string(),
                    request.limit.to_string(),
                    request.lock_delay.as_millis().to_string(),
                ],
            )
            .await?;
        reply.acquire_outcome(lease_id, self.max_waiters_per_name)
    }

    async fn renew(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        ttl: Option<Duration>,
    ) -> Result<RenewOutcome> {
        let keys = self.keys(name);
        let ttl_ms = ttl.map_or(0, |ttl| ttl.as_millis() as u64);
        let reply = self
            .run(
                "renew",
                name,
                &self.scripts.renew,
                vec![
                    keys.lease,
                    keys.owner,
                    keys.permits,
                    keys.holders,
                    keys.revoked,
                ],
                vec![
                    lease_id.expose().to_owned(),
                    ttl_ms.to_string(),
                    MIN_FENCE_TTL.as_millis().to_string(),
                ],
            )
            .await?;
        if reply.int(0)? == 1 {
            return Ok(RenewOutcome::Renewed {
                fencing_token: reply.token(1)?,
                ttl_ms: reply.int(2)?,
                expires_at_ms: reply.int(3)?,
            });
        }
        Ok(RenewOutcome::Lost(match reply.string(1)?.as_str() {
            "taken" => LeaseGone::HeldByAnother,
            "revoked" => LeaseGone::Revoked {
                reason: reply.string(2)?,
            },
            _ => LeaseGone::ExpiredOrReleased,
        }))
    }

    async fn release(&self, name: &LeaseName, lease_id: &LeaseId) -> Result<bool> {
        let keys = self.keys(name);
        let reply = self
            .run(
                "release",
                name,
                &self.scripts.release,
                keys.for_release(),
                vec![lease_id.expose().to_owned()],
            )
            .await?;
        if reply.int(0)? == 0 {
            return Ok(false);
        }
        // The wake-up is on its way through pub/sub too; if the caller it goes to waits on this
        // replica, the reply reaches it sooner.
        let first = reply.string(1)?;
        if !first.is_empty() {
            self.events.wake(name.as_str(), &first);
        }
        Ok(true)
    }

    async fn describe(&self, name: &LeaseName) -> Result<Description> {
        let keys = self.keys(name);
        let reply = self
            .run(
                "describe",
                name,
                &self.scripts.describe,
                vec![
                    keys.lease,
                    keys.owner,
                    keys.permits,
                    keys.holders,
                    keys.queue,
                ],
                vec![],
            )
            .await?;
        let mut holders = (2..reply.len()?)
            .step_by(HOLDER_FIELDS)
            .map(|index| reply.holder(index))
            .collect::<Result<Vec<_>>>()?;
        holders.sort_by_key(|holder| holder.fencing_token);
        Ok(Description {
            limit: reply.count(0)?,
            holders,
            waiters: reply.count(1)?,
        })
    }

    async fn leave(&self, name: &LeaseName, entries: &[String]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let keys = self.keys(name);
        self.run(
            "leave",
            name,
            &self.scripts.leave,
            keys.for_queue_scripts(),
            entries.to_vec(),
        )
        .await?
        .integer()?;
        Ok(())
    }

    async fn queued_here(&self, name: &LeaseName) -> Result<Vec<String>> {
        let keys = self.keys(name);
        let reply = self
            .run(
                "queued",
                name,
                &self.scripts.queued,
                vec![keys.queue],
                vec![self.events.replica().to_owned()],
            )
            .await?;
        (0..reply.len()?).map(|index| reply.string(index)).collect()
    }

    async fn queue_status(&self, name: &LeaseName, entries: &[String]) -> Result<QueueStatus> {
        let keys = self.keys(name);
        let mut args = Vec::with_capacity(entries.len() + 2);
        args.push(self.events.replica().to_owned());
        args.push(REPLICA_TTL.as_millis().to_string());
        args.extend_from_slice(entries);
        let reply = self
            .run(
                "status",
                name,
                &self.scripts.status,
                keys.for_queue_scripts(),
                args,
            )
            .await?;
        let positions = (0..entries.len())
            .map(|index| reply.count(OCCUPANCY_FIELDS + index))
            .collect::<Result<_>>()?;
        Ok(QueueStatus {
            occupancy: reply.occupancy(0)?,
            positions,
        })
    }

    async fn ping(&self) -> Result<()> {
        self.pool
            .next()
            .ping::<()>(None)
            .await
            .map_err(|e| Error::Unavailable(e.to_string()))?;
        // Waiters depend on wake-ups: not healthy while they cannot be delivered.
        if !self.subscriber.is_connected() {
            return Err(Error::Unavailable(
                "wake-up subscriber not connected".into(),
            ));
        }
        let failing = self.subscriptions.failing().len();
        if failing > 0 {
            return Err(Error::Unavailable(format!(
                "cannot subscribe to the wake-ups of {failing} lease name(s)"
            )));
        }
        Ok(())
    }

    async fn revoke(
        &self,
        name: &LeaseName,
        fencing_token: Option<u64>,
        reason: &str,
    ) -> Result<Vec<Revoked>> {
        let keys = self.keys(name);
        let reply = self
            .run(
                "revoke",
                name,
                &self.scripts.revoke,
                keys.for_revoke(),
                vec![fencing_token.unwrap_or(0).to_string(), reason.to_owned()],
            )
            .await?;
        let mut revoked = (0..reply.len()?)
            .step_by(2)
            .map(|index| {
                Ok(Revoked {
                    fencing_token: reply.token(index)?,
                    holder: reply.string(index + 1)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        revoked.sort_by_key(|grant| grant.fencing_token);
        Ok(revoked)
    }

    async fn list(
        &self,
        prefix: &ListPrefix,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<LeasePage> {
        let resume = page_token
            .map(|token| PageToken::parse(token, prefix))
            .transpose()?;
        self.list_page(prefix, page_size.max(1), resume).await
    }

    async fn keep_watching(&self, name: &LeaseName, watching: bool) -> Result<bool> {
        let keys = self.keys(name);
        let reply = self
            .run(
                "watching",
                name,
                &self.scripts.watching,
                vec![keys.watchers],
                vec![
                    self.events.replica().to_owned(),
                    if watching { "1" } else { "0" }.to_owned(),
                    WATCH_REGISTRATION_TTL.as_millis().to_string(),
                ],
            )
            .await?;
        Ok(reply.integer()? == 1)
    }
}

/// `List`: `SCAN` every master in turn, a bounded number of times per page, and describe the
/// lease names found. Each `SCAN` batch is read once: its names that do not fit on the page are
/// carried in the page token and come first on the next page, so a page never scans a batch
/// again. A page token holds the master (a slot it serves), the cursor of its next batch, and
/// those names.
///
/// `SCAN` returns every key present for the whole scan, and the same key twice only if Redis
/// shrinks its table meanwhile (after most keys were deleted): so every lease held for the whole
/// listing is on exactly one page, but for such a shrink, which may repeat one.
impl RedisStore {
    async fn list_page(
        &self,
        prefix: &ListPrefix,
        page_size: usize,
        resume: Option<PageToken>,
    ) -> Result<LeasePage> {
        let masters = self.masters()?;
        let pattern = scan_pattern(&self.key_prefix, prefix);
        let (mut next, mut pending) = match resume {
            None => (Some((0, 0)), Vec::new()),
            Some(token) => {
                let next = match token.next {
                    None => None,
                    Some((slot, cursor)) => {
                        let index = masters
                            .iter()
                            .position(|master| master.serves(slot))
                            .ok_or_else(|| {
                                Error::Unavailable(format!(
                                    "list: no Redis master serves slot {slot}"
                                ))
                            })?;
                        Some((index, cursor))
                    }
                };
                (next, token.pending)
            }
        };
        let mut leases = Vec::new();
        let mut scans = 0;
        loop {
            let taken = self.take_held(&pending, page_size, &mut leases).await?;
            pending.drain(..taken);
            let Some((index, cursor)) = next else {
                break; // every master is done
            };
            if leases.len() == page_size || scans == MAX_SCANS_PER_PAGE {
                break;
            }
            let count = (page_size - leases.len()).clamp(MIN_SCAN_COUNT, MAX_SCAN_COUNT);
            let (after, keys) = self
                .scan(&masters[index], cursor, &pattern, count, prefix)
                .await?;
            scans += 1;
            pending = lease_names(&self.key_prefix, prefix, &keys);
            next = match after {
                0 => (index + 1 < masters.len()).then_some((index + 1, 0)),
                after => Some((index, after)),
            };
        }
        let token = PageToken {
            next: next.map(|(index, cursor)| (masters[index].first_slot, cursor)),
            pending,
        };
        Ok(LeasePage {
            leases,
            next_page_token: (token.next.is_some() || !token.pending.is_empty())
                .then(|| token.encode(prefix)),
        })
    }

    /// The masters that hold the keys, in the order a listing visits them: the one server
    /// (standalone, or the Sentinel master), or every Cluster primary by the lowest slot it
    /// serves, from fred's cached view of the slots.
    fn masters(&self) -> Result<Vec<Master>> {
        let client = self.pool.next();
        if !client.is_clustered() {
            return Ok(vec![Master {
                first_slot: 0,
                slots: vec![(0, MAX_SLOT)],
                server: None,
            }]);
        }
        let not_known =
            || Error::Unavailable("list: the Redis Cluster's slots are not known yet".into());
        let routing = client.cached_cluster_state().ok_or_else(not_known)?;
        let mut by_primary: BTreeMap<&Server, Vec<(u16, u16)>> = BTreeMap::new();
        for range in routing.slots() {
            by_primary
                .entry(&range.primary)
                .or_default()
                .push((range.start, range.end));
        }
        let mut masters: Vec<Master> = by_primary
            .into_iter()
            .filter_map(|(server, slots)| {
                Some(Master {
                    first_slot: slots.iter().map(|(start, _)| *start).min()?,
                    slots,
                    server: Some(server.clone()),
                })
            })
            .collect();
        if masters.is_empty() {
            return Err(not_known());
        }
        masters.sort_by_key(|master| master.first_slot);
        Ok(masters)
    }

    /// One `SCAN` batch on `master`: the next cursor (0: the master is done) and the keys.
    async fn scan(
        &self,
        master: &Master,
        cursor: u64,
        pattern: &str,
        count: usize,
        prefix: &ListPrefix,
    ) -> Result<(u64, Vec<String>)> {
        let client = self.pool.next();
        let (cursor, count) = (cursor.to_string(), Some(count as u32));
        let started = std::time::Instant::now();
        let reply: Result<Value, RedisError> = match &master.server {
            Some(server) => {
                client
                    .with_cluster_node(server.clone())
                    .scan_page(cursor, pattern.to_owned(), count, None)
                    .await
            }
            None => {
                client
                    .scan_page(cursor, pattern.to_owned(), count, None)
                    .await
            }
        };
        metrics().record_store("scan", started.elapsed(), reply.is_err());
        let listing = || format!("(the listing of {:?})", prefix.as_str());
        let value = reply.map_err(|error| match is_transient(&error) {
            true => Error::Unavailable(format!("scan: {error}")),
            false => Error::Internal {
                name: listing(),
                detail: format!("SCAN failed: {error}"),
            },
        })?;
        let broken = |value: &Value| Error::Internal {
            name: listing(),
            detail: format!("SCAN replied {value:?}"),
        };
        let Value::Array(fields) = &value else {
            return Err(broken(&value));
        };
        let (Some(next), Some(Value::Array(keys))) = (fields.first(), fields.get(1)) else {
            return Err(broken(&value));
        };
        let next = next
            .as_string()
            .and_then(|next| next.parse().ok())
            .ok_or_else(|| broken(&value))?;
        // A key that is not UTF-8 is not leased's.
        Ok((next, keys.iter().filter_map(Value::as_string).collect()))
    }

    /// Describes `names` in order, a few at a time, and appends those held to `leases` until it
    /// has `page_size`. Answers how many of `names` it went through: all of them, unless the
    /// page filled first.
    async fn take_held(
        &self,
        names: &[(LeaseName, KeyKinds)],
        page_size: usize,
        leases: &mut Vec<DescribedLease>,
    ) -> Result<usize> {
        if leases.len() >= page_size {
            return Ok(0);
        }
        // Made before the stream (they start only when it polls them): a closure inside it would
        // keep the page's future from being `Send`.
        let reads: Vec<_> = names.iter().map(|(name, _)| self.describe(name)).collect();
        let mut described = stream::iter(reads)
            .buffered(LIST_DESCRIBES_IN_FLIGHT)
            .enumerate();
        while let Some((position, description)) = described.next().await {
            let (name, kinds) = &names[position];
            let description = match description {
                Ok(description) => description,
                // A key something else wrote under a lease's name (another type): not a lease.
                Err(Error::Internal { detail, .. }) => {
                    if let Some(suppressed) = LIST_SKIPPED.admit() {
                        tracing::warn!(suppressed, %name, %detail, "list: skipped a key that is not a lease");
                    }
                    continue;
                }
                Err(error) => return Err(error),
            };
            if kinds.lists(&description) {
                leases.push(DescribedLease {
                    name: name.clone(),
                    description,
                });
                if leases.len() == page_size {
                    return Ok(position + 1);
                }
            }
        }
        Ok(names.len())
    }
}

/// The highest Redis Cluster hash slot.
const MAX_SLOT: u16 = 16_383;

/// A master whose keys a listing scans, known by the lowest hash slot it serves (0 outside a
/// Cluster): a failover hands its slots, and so the listing's place, to the promoted replica,
/// whose node id differs.
struct Master {
    first_slot: u16,
    /// The slot ranges it serves, first and last included.
    slots: Vec<(u16, u16)>,
    /// The Cluster node to send `SCAN` to; `None` outside a Cluster.
    server: Option<Server>,
}

impl Master {
    fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|(start, end)| (*start..=*end).contains(&slot))
    }
}

/// Which keys of a lease name a `SCAN` batch held. A lease is listed through one key only, so
/// that it is on one page even if both keys exist and land in different batches: an exclusive
/// lease through its lease key, a counting lease through its permits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct KeyKinds {
    lease: bool,
    permits: bool,
}

impl KeyKinds {
    /// As a page token spells them.
    fn code(&self) -> char {
        match (self.lease, self.permits) {
            (true, true) => 'b',
            (true, false) => 'l',
            _ => 'p',
        }
    }

    fn from_code(code: char) -> Option<Self> {
        let (lease, permits) = match code {
            'b' => (true, true),
            'l' => (true, false),
            'p' => (false, true),
            _ => return None,
        };
        Some(KeyKinds { lease, permits })
    }

    fn lists(&self, description: &Description) -> bool {
        !description.holders.is_empty()
            && match description.limit {
                1 => self.lease,
                _ => self.permits,
            }
    }
}

/// The `MATCH` pattern of a listing of `prefix`: every key whose hash tag starts with it and
/// whose last character is not `e` or `r`. A lease key ends with `}` and a counting lease's
/// permits with `s`; this leaves out the keys of each name that never mark a lease as held and
/// are the most numerous (`:queue`, and `:owner`, which outlives its lease by days),
/// so that Redis does not send them. Spelled without `}`, which fred would take for a hash tag.
fn scan_pattern(key_prefix: &str, prefix: &ListPrefix) -> String {
    format!(
        "{}{{{}*[^er]",
        escape_glob(key_prefix),
        escape_glob(prefix.as_str())
    )
}

/// `text` matched literally in a `SCAN` pattern.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The lease names of a batch's keys that start with `prefix`, sorted and each once, with the
/// keys of theirs that were found. Keys that are not a lease key or a permits set, or whose hash
/// tag is not a lease name, are left out.
fn lease_names(
    key_prefix: &str,
    prefix: &ListPrefix,
    keys: &[String],
) -> Vec<(LeaseName, KeyKinds)> {
    let mut names: BTreeMap<&str, KeyKinds> = BTreeMap::new();
    for key in keys {
        let Some((name, suffix)) = key
            .strip_prefix(key_prefix)
            .and_then(|key| key.strip_prefix('{'))
            .and_then(|key| key.split_once('}'))
        else {
            continue;
        };
        if !name.starts_with(prefix.as_str()) {
            continue;
        }
        let kinds = match suffix {
            "" => KeyKinds {
                lease: true,
                permits: false,
            },
            ":permits" => KeyKinds {
                lease: false,
                permits: true,
            },
            _ => continue,
        };
        let found = names.entry(name).or_default();
        found.lease |= kinds.lease;
        found.permits |= kinds.permits;
    }
    names
        .into_iter()
        .filter_map(|(name, kinds)| Some((parse_name(name).ok()?, kinds)))
        .collect()
}

/// Where the next page of a listing starts; opaque to clients: `r1.<hex prefix>.<slot>.<cursor>.
/// <hex pending names>`, bound to the listing's prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PageToken {
    /// A slot that the master to scan next serves (its lowest, when the token was made), and the
    /// cursor of its next batch; `None` when every master is done.
    next: Option<(u16, u64)>,
    /// Names found by a batch already scanned that did not fit on the page, in order, with the
    /// keys of theirs found: they come first on the next page.
    pending: Vec<(LeaseName, KeyKinds)>,
}

impl PageToken {
    fn encode(&self, prefix: &ListPrefix) -> String {
        let (slot, cursor) = match self.next {
            Some((slot, cursor)) => (slot.to_string(), cursor.to_string()),
            None => (String::new(), String::new()),
        };
        // Names hold no space: ` ` separates them.
        let pending: Vec<String> = self
            .pending
            .iter()
            .map(|(name, kinds)| format!("{}{name}", kinds.code()))
            .collect();
        format!(
            "{PAGE_TOKEN_VERSION}.{}.{slot}.{cursor}.{}",
            to_hex(prefix.as_str()),
            to_hex(&pending.join(" "))
        )
    }

    /// A token this store made for a listing of `prefix`, else `INVALID_ARGUMENT` `page_token`.
    fn parse(token: &str, prefix: &ListPrefix) -> Result<Self> {
        let invalid = invalid_page_token;
        let fields: Vec<&str> = token.split('.').collect();
        let [version, token_prefix, slot, cursor, pending] = fields.as_slice() else {
            return Err(invalid());
        };
        if *version != PAGE_TOKEN_VERSION
            || from_hex(token_prefix).as_deref() != Some(prefix.as_str())
        {
            return Err(invalid());
        }
        let next = match (*slot, *cursor) {
            ("", "") => None,
            (slot, cursor) => {
                let slot = slot
                    .parse()
                    .ok()
                    .filter(|slot| *slot <= MAX_SLOT)
                    .ok_or_else(invalid)?;
                Some((slot, cursor.parse().map_err(|_| invalid())?))
            }
        };
        let pending = from_hex(pending).ok_or_else(invalid)?;
        let pending = pending
            .split(' ')
            .filter(|name| !name.is_empty())
            .map(|coded| {
                let code = coded.chars().next()?;
                let name = parse_name(&coded[code.len_utf8()..]).ok()?;
                let kinds = KeyKinds::from_code(code)?;
                name.as_str()
                    .starts_with(prefix.as_str())
                    .then_some((name, kinds))
            })
            .collect::<Option<Vec<_>>>()
            .filter(|pending| pending.len() <= MAX_PENDING_NAMES)
            .ok_or_else(invalid)?;
        if next.is_none() && pending.is_empty() {
            return Err(invalid()); // the last page has no token
        }
        Ok(PageToken { next, pending })
    }
}

/// Connection trouble is `UNAVAILABLE` (retrying later may succeed). Anything Redis refused on
/// its merits (a Lua error, `WRONGTYPE` on a key something else wrote) will fail again the same
/// way: `INTERNAL`, logged with the lease name.
fn store_error(operation: &'static str, name: &LeaseName, error: RedisError) -> Error {
    match is_transient(&error) {
        true => Error::Unavailable(format!("{operation}: {error}")),
        false => Error::Internal {
            name: name.as_str().to_owned(),
            detail: format!("{operation}.lua failed: {error}"),
        },
    }
}

/// Whether retrying later may succeed: connection trouble, or a Redis that cannot serve yet.
fn is_transient(error: &RedisError) -> bool {
    // Redis answers these while it cannot serve yet (loading, failing over) or a script runs long.
    const TRANSIENT_REPLIES: [&str; 7] = [
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "READONLY",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "NOREPLICAS",
    ];
    match error.kind() {
        ErrorKind::IO
        | ErrorKind::Timeout
        | ErrorKind::Canceled
        | ErrorKind::Backpressure
        | ErrorKind::Cluster
        | ErrorKind::Routing
        | ErrorKind::Sentinel
        | ErrorKind::Auth
        | ErrorKind::Tls => true,
        ErrorKind::Unknown => TRANSIENT_REPLIES
            .iter()
            .any(|reply| error.details().starts_with(reply)),
        _ => false,
    }
}

/// The fields of `occupancy()` in prelude.lua, as the scripts reply them.
const OCCUPANCY_FIELDS: usize = 8;

/// The fields of one holder in the scripts' replies: `holder, token, remaining_ms,
/// expires_at_ms, lock_delay_ms`.
const HOLDER_FIELDS: usize = 5;

/// One script's reply, read field by field; a reply that breaks the script's documented shape is
/// an internal error naming the script and the lease.
struct Reply<'a> {
    operation: &'static str,
    name: &'a LeaseName,
    value: Value,
}

/// Reads a reply of acquire.lua (its header lists the shapes) for the attempt of `lease_id` on
/// `name`; public for the micro-benchmarks in `benches/hot_paths.rs`.
pub fn parse_acquire_reply(
    name: &LeaseName,
    lease_id: &LeaseId,
    max_waiters_per_name: usize,
    value: Value,
) -> Result<AcquireOutcome> {
    let reply = Reply {
        operation: "acquire",
        name,
        value,
    };
    reply.acquire_outcome(lease_id, max_waiters_per_name)
}

impl Reply<'_> {
    /// acquire.lua's answer for the attempt of `lease_id`.
    fn acquire_outcome(
        &self,
        lease_id: &LeaseId,
        max_waiters_per_name: usize,
    ) -> Result<AcquireOutcome> {
        match self.int(0)? {
            1 => Ok(AcquireOutcome::Granted(Grant {
                lease_id: lease_id.clone(),
                fencing_token: self.token(1)?,
                ttl_ms: self.int(2)?,
                expires_at_ms: self.int(3)?,
            })),
            2 => Ok(AcquireOutcome::QueueFull {
                limit: max_waiters_per_name,
            }),
            3 => Ok(AcquireOutcome::LimitMismatch {
                limit: self.count(1)?,
            }),
            _ => Ok(AcquireOutcome::Busy {
                position: self.count(1)?,
                occupancy: self.occupancy(2)?,
            }),
        }
    }

    fn broken(&self, what: String) -> Error {
        Error::Internal {
            name: self.name.to_string(),
            detail: format!("{}.lua replied {what}", self.operation),
        }
    }

    /// A reply that is a single integer.
    fn integer(&self) -> Result<i64> {
        self.value
            .as_i64()
            .ok_or_else(|| self.broken(format!("{:?}", self.value)))
    }

    fn field(&self, index: usize) -> Result<&Value> {
        match &self.value {
            Value::Array(fields) => fields
                .get(index)
                .ok_or_else(|| self.broken(format!("no field {index}"))),
            other => Err(self.broken(format!("{other:?}, not an array"))),
        }
    }

    fn int(&self, index: usize) -> Result<i64> {
        let field = self.field(index)?;
        field
            .as_i64()
            .ok_or_else(|| self.broken(format!("field {index} = {field:?}")))
    }

    fn token(&self, index: usize) -> Result<u64> {
        let token = self.int(index)?;
        u64::try_from(token).map_err(|_| self.broken(format!("token {token}")))
    }

    fn string(&self, index: usize) -> Result<String> {
        let field = self.field(index)?;
        field
            .as_string()
            .ok_or_else(|| self.broken(format!("field {index} = {field:?}")))
    }

    /// How many fields the reply has.
    fn len(&self) -> Result<usize> {
        match &self.value {
            Value::Array(fields) => Ok(fields.len()),
            other => Err(self.broken(format!("{other:?}, not an array"))),
        }
    }

    /// A count, limit or queue position (0: not queued).
    fn count(&self, index: usize) -> Result<u32> {
        let count = self.int(index)?;
        u32::try_from(count).map_err(|_| self.broken(format!("field {index} = {count}")))
    }

    /// Reads the [`HOLDER_FIELDS`] `holder, token, remaining_ms, expires_at_ms, lock_delay_ms`
    /// starting at `index`; the scripts send -1, -1 for a key without expiry.
    fn holder(&self, index: usize) -> Result<Holder> {
        let remaining_ms = self.int(index + 2)?;
        let at_unix_ms = self.int(index + 3)?;
        let lock_delay_ms = self.int(index + 4)?;
        Ok(Holder {
            holder: self.string(index)?,
            fencing_token: self.token(index + 1)?,
            expiry: (remaining_ms >= 0 && at_unix_ms >= 0).then_some(Expiry {
                remaining_ms,
                at_unix_ms,
                lock_delay_ms,
            }),
        })
    }

    /// Reads the [`OCCUPANCY_FIELDS`] of `occupancy()` in prelude.lua starting at `index`:
    /// `taken, limit, held, holder, token, remaining_ms, expires_at_ms, lock_delay_ms` (`held` 0:
    /// no permit is taken, and the holder fields are zeros).
    fn occupancy(&self, index: usize) -> Result<Occupancy> {
        let holder = match self.int(index + 2)? {
            0 => None,
            _ => Some(self.holder(index + 3)?),
        };
        Ok(Occupancy {
            holder,
            held: self.count(index)?,
            limit: self.count(index + 1)?,
        })
    }
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

    fn change(cause: ChangeCause, holder: &str, fencing_token: u64) -> LeaseChange {
        LeaseChange {
            cause,
            holder: holder.into(),
            fencing_token,
            limit: 0,
            ttl_ms: 0,
            expires_at_ms: 1_700_000_030_000,
            reason: String::new(),
        }
    }

    /// Each message the scripts publish reads back as what they meant: holders and reasons with
    /// spaces, a reason with multi-byte characters (its length is in bytes), 16-digit tokens.
    #[test]
    fn published_messages_are_read_back() {
        assert_eq!(Published::parse("m"), Some(Published::Moved));
        assert_eq!(
            Published::parse("wreplica-1:42"),
            Some(Published::Wake("replica-1:42"))
        );
        assert_eq!(
            Published::parse("g1700000000123456 3 30000 1700000030000 worker 7 (eu)"),
            Some(Published::Changed(LeaseChange {
                limit: 3,
                ttl_ms: 30_000,
                ..change(ChangeCause::Granted, "worker 7 (eu)", 1_700_000_000_123_456)
            }))
        );
        assert_eq!(
            Published::parse("r12 1700000030000 worker 7"),
            Some(Published::Changed(change(
                ChangeCause::Released,
                "worker 7",
                12
            )))
        );
        let reason = "wedged on disk – INC 42";
        assert_eq!(
            Published::parse(&format!(
                "v12 1700000030000 {} {reason}worker 7",
                reason.len()
            )),
            Some(Published::Changed(LeaseChange {
                reason: reason.into(),
                ..change(ChangeCause::Revoked, "worker 7", 12)
            }))
        );
        for unknown in [
            "",
            "mx",
            "x12",
            "g12 3 30000",
            "gx 3 30000 1 h",
            "r12",
            "v12 1 99 short",
            "v12 1 1 éholder",
        ] {
            assert_eq!(Published::parse(unknown), None, "{unknown:?}");
        }
    }

    fn prefix(text: &str) -> ListPrefix {
        crate::lease::limits::parse_list_prefix(text).unwrap()
    }

    fn invalid_field(error: Error) -> &'static str {
        match error {
            Error::InvalidArgument { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    /// Page tokens round-trip for their own prefix only; anything else, or a token of another
    /// prefix, is INVALID_ARGUMENT naming `page_token`.
    #[test]
    fn page_tokens_are_bound_to_their_prefix() {
        let jobs = prefix("jobs/");
        let lease_key = KeyKinds {
            lease: true,
            permits: false,
        };
        let permits_key = KeyKinds {
            lease: false,
            permits: true,
        };
        for token in [
            PageToken {
                next: Some((5_461, 1_234_567)),
                pending: vec![
                    (parse_name("jobs/a").unwrap(), lease_key),
                    (parse_name("jobs/b").unwrap(), permits_key),
                ],
            },
            PageToken {
                next: Some((0, 0)),
                pending: Vec::new(),
            },
            PageToken {
                next: None,
                pending: vec![(parse_name("jobs/c").unwrap(), permits_key)],
            },
        ] {
            let encoded = token.encode(&jobs);
            assert!(encoded.starts_with("r1."), "{encoded}");
            assert_eq!(PageToken::parse(&encoded, &jobs).unwrap(), token);
            let other = PageToken::parse(&encoded, &prefix("jobs/eu")).unwrap_err();
            assert_eq!(invalid_field(other), "page_token");
        }
        let made = |fields: [&str; 5]| fields.join(".");
        let hex_jobs = to_hex("jobs/");
        let too_many = vec!["ljobs/x"; MAX_PENDING_NAMES + 1].join(" ");
        for garbage in [
            "garbage".to_owned(),
            "r1".to_owned(),
            made(["r2", &hex_jobs, "0", "0", ""]),
            made(["r1", "zz", "0", "0", ""]),
            made(["r1", &hex_jobs, "16384", "0", ""]),
            made(["r1", &hex_jobs, "0", "-1", ""]),
            made(["r1", &hex_jobs, "0", "", ""]),
            made(["r1", &hex_jobs, "", "", ""]),
            made(["r1", &hex_jobs, "0", "0", "abc"]),
            made(["r1", &hex_jobs, "0", "0", &to_hex("jobs/a")]),
            made(["r1", &hex_jobs, "0", "0", &to_hex("xjobs/a")]),
            made(["r1", &hex_jobs, "0", "0", &to_hex("lother/name")]),
            made(["r1", &hex_jobs, "0", "0", &to_hex("ljobs/a\tb")]),
            made(["r1", &hex_jobs, "0", "0", &to_hex(&too_many)]),
            format!("{}.extra", made(["r1", &hex_jobs, "0", "0", ""])),
            "m1.6a6f62732f.6a6f62732f61".to_owned(),
        ] {
            let error = PageToken::parse(&garbage, &jobs).unwrap_err();
            assert_eq!(invalid_field(error), "page_token", "{garbage:?}");
        }
    }

    /// Glob characters of the key prefix match literally, and the pattern has no `}` (which
    /// fred would read as a hash tag).
    #[test]
    fn scan_patterns_escape_the_key_prefix() {
        assert_eq!(
            scan_pattern("leased:", &prefix("jobs/")),
            "leased:{jobs/*[^er]"
        );
        assert_eq!(
            scan_pattern(r"a*b?[c]\:", &prefix("")),
            r"a\*b\?\[c\]\\:{*[^er]"
        );
    }

    /// A batch's keys give each lease name once, sorted, with the kinds of its keys found; keys
    /// of other kinds, other prefixes or no lease name are left out.
    #[test]
    fn batches_yield_each_lease_name_once() {
        let keys: Vec<String> = [
            "leased:{jobs/b}",
            "leased:{jobs/a}:permits",
            "leased:{jobs/a}:holders",
            "leased:{jobs/c}",
            "leased:{jobs/c}:permits",
            "leased:{jobs/d}:replicas",
            "leased:{jobs/bad name}",
            "leased:{jobs/e",
            "leased:{jobs/f}extra",
            "leased:{other}",
            "other:{jobs/g}",
        ]
        .map(str::to_owned)
        .into();
        let names = || {
            lease_names("leased:", &prefix("jobs/"), &keys)
                .into_iter()
                .map(|(name, kinds)| (name.to_string(), kinds.lease, kinds.permits))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(),
            [
                ("jobs/a".to_owned(), false, true),
                ("jobs/b".to_owned(), true, false),
                ("jobs/c".to_owned(), true, true),
            ]
        );
    }

    /// A lease is listed through the key of its kind only, and only while someone holds it.
    #[test]
    fn leases_are_listed_through_the_key_of_their_kind() {
        let holder = Holder {
            holder: "h".into(),
            fencing_token: 1,
            expiry: None,
        };
        let held = |limit| Description {
            limit,
            holders: vec![holder.clone()],
            waiters: 0,
        };
        let lease_key = KeyKinds {
            lease: true,
            permits: false,
        };
        let permits_key = KeyKinds {
            lease: false,
            permits: true,
        };
        assert!(lease_key.lists(&held(1)));
        assert!(!lease_key.lists(&held(3)));
        assert!(permits_key.lists(&held(3)));
        assert!(!permits_key.lists(&held(1)));
        assert!(!lease_key.lists(&Description::default()));
    }
}
