//! The Redis store: every operation is one Lua script (run by SHA, reloaded after `NOSCRIPT`), all
//! keys of a lease share one hash tag, and time comes from Redis `TIME`. Waiters queue in Redis;
//! the scripts wake the first in line on the name's shard channel (`SPUBLISH`), which a replica
//! subscribes to (`SSUBSCRIBE`) only while it has waiters for that name. The keys and what they
//! hold: ARCHITECTURE.md, "Redis key layout" and "Fair waiting".

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use fred::{
    clients::SubscriberClient,
    error::ErrorKind,
    prelude::{
        Builder, ClientLike, Config, Error as RedisError, EventInterface, Pool, PubsubInterface,
        ReconnectPolicy, Value,
    },
    types::{InfoKind, scripts::Script},
};
use tokio::{sync::mpsc, task::JoinHandle};

use crate::{
    error::{Error, Result, StartupError},
    lease::{
        AcquireOutcome, Description, Expiry, Grant, HolderInfo, LeaseGone, LeaseId, LeaseName,
        LeaseStore, Occupancy, QueueStatus, RenewOutcome, ValidatedAcquire, Waiters,
        waiting::TEND_INTERVAL,
    },
    metrics::metrics,
    throttle::{LOG_INTERVAL, Throttle},
};

/// The fence counter outlives leases by at least this long, so that tokens usually come from the
/// counter; if it expires anyway, the clock floor in `acquire.lua` keeps tokens increasing.
const MIN_FENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// A replica whose waiters' entries were not renewed for this long is taken for dead, and its
/// entries leave the queue. Four tending intervals: a live replica misses it only if Redis is
/// out of its reach for seconds.
const REPLICA_TTL: Duration = Duration::from_millis(4 * TEND_INTERVAL.as_millis() as u64);

/// How soon a failed subscription is tried again.
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(250);

/// Sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`) came with Redis 7.0.
const MIN_REDIS_MAJOR: u32 = 7;

/// While Redis is out of reach, every name that gains waiters fails to subscribe: one line per
/// interval, with the count of the others.
static SUBSCRIBE_FAILED: Throttle = Throttle::new(LOG_INTERVAL);

/// A Redis that flaps, or a Cluster whose slots move, reconnects the subscriber over and over.
static RESUBSCRIBING: Throttle = Throttle::new(LOG_INTERVAL);

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

/// The Lua scripts, one per atomic operation. Each starts with `queue.lua`, which holds their
/// shared functions (the queue, the holders, tokens).
struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
    describe: Script,
    leave: Script,
    status: Script,
}

macro_rules! queue_script {
    ($file:literal) => {
        Script::from_lua(concat!(
            include_str!("scripts/queue.lua"),
            include_str!($file)
        ))
    };
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire: queue_script!("scripts/acquire.lua"),
            renew: queue_script!("scripts/renew.lua"),
            release: queue_script!("scripts/release.lua"),
            describe: queue_script!("scripts/describe.lua"),
            leave: queue_script!("scripts/leave.lua"),
            status: queue_script!("scripts/status.lua"),
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
    waiters: Arc<Waiters>,
    subscriptions: Arc<Subscriptions>,
    background: Vec<JoinHandle<()>>,
}

/// The keys of one lease, all under the hash tag `{name}` so that every script touches one slot.
struct LeaseKeys {
    lease: String,
    owner: String,
    fence: String,
    queue: String,
    replicas: String,
    /// The shard channel of the name's wake-ups: in the same slot, declared as a key.
    wake: String,
    /// A counting lease's permits, by the moment each frees.
    permits: String,
    /// A counting lease's permit records and limit.
    holders: String,
}

impl LeaseKeys {
    /// The KEYS of release.lua, leave.lua and status.lua, in the order their headers list.
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
}

impl RedisStore {
    /// Starts connecting to Redis and returns at once: until Redis answers, requests fail with
    /// `UNAVAILABLE` after the command timeout and [`LeaseStore::ping`] fails. Reconnects forever.
    pub fn connect(options: &RedisOptions) -> Result<Self, StartupError> {
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

        let waiters = Arc::new(Waiters::new());
        let (changes, pending) = mpsc::unbounded_channel();
        let subscriptions = Arc::new(Subscriptions {
            key_prefix: options.key_prefix.clone(),
            wanted: Mutex::new(HashMap::new()),
            failing: Mutex::new(HashSet::new()),
            changes,
        });
        let background = vec![
            tokio::spawn(keep_subscriptions(
                subscriber.clone(),
                subscriptions.clone(),
                waiters.clone(),
                pending,
            )),
            tokio::spawn(resubscribe_on_connect(
                subscriber.clone(),
                subscriptions.clone(),
                waiters.clone(),
            )),
            tokio::spawn(wake_waiters(
                subscriber.clone(),
                subscriptions.clone(),
                waiters.clone(),
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
            waiters,
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
        let lease = format!("{}{{{}}}", self.key_prefix, name);
        LeaseKeys {
            owner: format!("{lease}:owner"),
            fence: format!("{lease}:fence"),
            queue: format!("{lease}:queue"),
            replicas: format!("{lease}:replicas"),
            wake: format!("{lease}:wake"),
            permits: format!("{lease}:permits"),
            holders: format!("{lease}:holders"),
            lease,
        }
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
        let reply = script
            .evalsha_with_reload(self.pool.next(), keys, args)
            .await;
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

/// The shard channels this replica wants: one per name with waiters here, counted by
/// [`LeaseStore::listen`] and [`LeaseStore::unlisten`]. One task ([`keep_subscriptions`]) makes
/// Redis match, one channel at a time, in the order of the changes.
struct Subscriptions {
    key_prefix: String,
    wanted: Mutex<HashMap<String, usize>>,
    /// Channels whose subscription failed and is being retried: wake-ups for them are lost, and
    /// the store is unhealthy until they succeed.
    failing: Mutex<HashSet<String>>,
    changes: mpsc::UnboundedSender<SubscriptionChange>,
}

/// What [`keep_subscriptions`] is asked to do.
enum SubscriptionChange {
    /// Bring this channel in line with what is wanted.
    Channel(String),
    /// The subscriber reconnected: the server forgot every subscription.
    Reconnected,
}

impl Subscriptions {
    fn wanted(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.wanted.lock().expect("subscriptions lock poisoned")
    }

    fn failing(&self) -> MutexGuard<'_, HashSet<String>> {
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

    /// Asks [`keep_subscriptions`] to bring `channel` in line with what is wanted.
    fn reconcile(&self, channel: String) {
        // Fails only when the store is being dropped.
        let _ = self.changes.send(SubscriptionChange::Channel(channel));
    }
}

/// Subscribes to the channels of names with waiters here, and unsubscribes when the last waiter
/// leaves. A failed subscription is retried until it succeeds or is no longer wanted; after each
/// success the name's waiters re-read the queue, since a wake-up published before it was missed.
async fn keep_subscriptions(
    subscriber: SubscriberClient,
    subscriptions: Arc<Subscriptions>,
    waiters: Arc<Waiters>,
    mut changes: mpsc::UnboundedReceiver<SubscriptionChange>,
) {
    let mut subscribed = HashSet::new();
    while let Some(change) = changes.recv().await {
        let channel = match change {
            SubscriptionChange::Channel(channel) => channel,
            SubscriptionChange::Reconnected => {
                subscribed.clear();
                continue;
            }
        };
        let wanted = subscriptions.wanted().contains_key(&channel);
        if wanted && !subscribed.contains(&channel) {
            match subscriber.ssubscribe(channel.as_str()).await {
                Ok(()) => {
                    subscriptions.failing().remove(&channel);
                    if let Some(name) = subscriptions.name_of(&channel) {
                        waiters.moved(name);
                    }
                    subscribed.insert(channel);
                }
                Err(error) => {
                    if subscriptions.failing().insert(channel.clone())
                        && let Some(suppressed) = SUBSCRIBE_FAILED.admit()
                    {
                        tracing::warn!(suppressed, %channel, %error, "cannot subscribe to wake-ups; retrying");
                    }
                    retry_later(&subscriptions, channel);
                }
            }
        } else if !wanted && subscribed.contains(&channel) {
            subscriptions.failing().remove(&channel);
            match subscriber.sunsubscribe(channel.as_str()).await {
                Ok(()) => {
                    subscribed.remove(&channel);
                }
                Err(error) => {
                    tracing::debug!(%channel, %error, "cannot unsubscribe; retrying");
                    retry_later(&subscriptions, channel);
                }
            }
        } else if !wanted {
            subscriptions.failing().remove(&channel);
        }
    }
}

fn retry_later(subscriptions: &Arc<Subscriptions>, channel: String) {
    let subscriptions = Arc::downgrade(subscriptions);
    tokio::spawn(async move {
        tokio::time::sleep(RESUBSCRIBE_DELAY).await;
        if let Some(subscriptions) = subscriptions.upgrade() {
            subscriptions.reconcile(channel);
        }
    });
}

/// After every (re)connection of the subscriber and every Redis Cluster topology change (a slot
/// that moves ends the subscriptions of its channels on the server): subscribe again to every
/// wanted channel, and have every waiter re-read the queue, since wake-ups published meanwhile
/// were missed.
async fn resubscribe_on_connect(
    subscriber: SubscriberClient,
    subscriptions: Arc<Subscriptions>,
    waiters: Arc<Waiters>,
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
        let wanted: Vec<String> = subscriptions.wanted().keys().cloned().collect();
        for channel in wanted {
            subscriptions.reconcile(channel);
        }
        waiters.moved_everywhere();
    }
}

/// Hands each wake-up to this replica's waiters: `w<entry>` wakes that entry, `m` has the name's
/// waiters re-read their placements.
async fn wake_waiters(
    subscriber: SubscriberClient,
    subscriptions: Arc<Subscriptions>,
    waiters: Arc<Waiters>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut messages = subscriber.message_rx();
    loop {
        match messages.recv().await {
            Ok(message) => {
                let Some(name) = subscriptions.name_of(&message.channel) else {
                    continue;
                };
                match message.value.as_str().as_deref() {
                    Some("m") => waiters.moved(name),
                    Some(wake) => {
                        if let Some(entry) = wake.strip_prefix('w') {
                            waiters.wake(name, entry);
                        }
                    }
                    None => {}
                }
            }
            // We fell behind and lost some wake-ups: every name re-reads its queue.
            Err(RecvError::Lagged(_)) => waiters.moved_everywhere(),
            Err(RecvError::Closed) => return,
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
        let fence_ttl_ms = MIN_FENCE_TTL.max(request.ttl * 2).as_millis() as u64;
        let reply = self
            .run(
                "acquire",
                name,
                &self.scripts.acquire,
                vec![
                    keys.lease,
                    keys.owner,
                    keys.fence,
                    keys.queue,
                    keys.replicas,
                    keys.wake,
                    keys.permits,
                    keys.holders,
                ],
                vec![
                    lease_id.expose().to_owned(),
                    request.holder.clone(),
                    ttl_ms.to_string(),
                    fence_ttl_ms.to_string(),
                    entry.unwrap_or_default().to_owned(),
                    self.waiters.replica().to_owned(),
                    REPLICA_TTL.as_millis().to_string(),
                    self.max_waiters_per_name.to_string(),
                    request.limit.to_string(),
                    request.lock_delay.as_millis().to_string(),
                ],
            )
            .await?;
        match reply.int(0)? {
            1 => Ok(AcquireOutcome::Granted(Grant {
                lease_id: lease_id.clone(),
                fencing_token: reply.token(1)?,
                ttl_ms: reply.int(2)?,
                expires_at_ms: reply.int(3)?,
            })),
            2 => Ok(AcquireOutcome::QueueFull {
                limit: self.max_waiters_per_name,
            }),
            3 => Ok(AcquireOutcome::LimitMismatch {
                limit: reply.count(1)?,
            }),
            _ => Ok(AcquireOutcome::Busy {
                position: reply.count(1)?,
                occupancy: reply.occupancy(2)?,
            }),
        }
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
                vec![keys.lease, keys.owner, keys.permits, keys.holders],
                vec![lease_id.expose().to_owned(), ttl_ms.to_string()],
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
                keys.for_queue_scripts(),
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
            self.waiters.wake(name.as_str(), &first);
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
            .step_by(4)
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

    async fn queue_status(&self, name: &LeaseName, entries: &[String]) -> Result<QueueStatus> {
        let keys = self.keys(name);
        let mut args = Vec::with_capacity(entries.len() + 2);
        args.push(self.waiters.replica().to_owned());
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

    fn listen(&self, name: &LeaseName) {
        let channel = self.subscriptions.channel(name);
        let first = {
            let mut wanted = self.subscriptions.wanted();
            let count = wanted.entry(channel.clone()).or_insert(0);
            *count += 1;
            *count == 1
        };
        if first {
            self.subscriptions.reconcile(channel);
        }
    }

    fn unlisten(&self, name: &LeaseName) {
        let channel = self.subscriptions.channel(name);
        let last = {
            let mut wanted = self.subscriptions.wanted();
            match wanted.get_mut(&channel) {
                Some(count) if *count > 1 => {
                    *count -= 1;
                    false
                }
                Some(_) => {
                    wanted.remove(&channel);
                    true
                }
                None => false,
            }
        };
        if last {
            self.subscriptions.reconcile(channel);
        }
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

    fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }
}

/// Connection trouble is `UNAVAILABLE` (retrying later may succeed). Anything Redis refused on
/// its merits (a Lua error, `WRONGTYPE` on a key something else wrote) will fail again the same
/// way: `INTERNAL`, logged with the lease name.
fn store_error(operation: &'static str, name: &LeaseName, error: RedisError) -> Error {
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
    let transient = match error.kind() {
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
    };
    match transient {
        true => Error::Unavailable(format!("{operation}: {error}")),
        false => Error::Internal {
            name: name.as_str().to_owned(),
            detail: format!("{operation}.lua failed: {error}"),
        },
    }
}

/// The fields of `occupancy()` in queue.lua, as the scripts reply them.
const OCCUPANCY_FIELDS: usize = 7;

/// One script's reply, read field by field; a reply that breaks the script's documented shape is
/// an internal error naming the script and the lease.
struct Reply<'a> {
    operation: &'static str,
    name: &'a LeaseName,
    value: Value,
}

impl Reply<'_> {
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

    /// Reads `holder, token, remaining_ms, expires_at_ms` starting at `index`; the scripts send
    /// -1, -1 for a key without expiry.
    fn holder(&self, index: usize) -> Result<HolderInfo> {
        let remaining_ms = self.int(index + 2)?;
        let at_unix_ms = self.int(index + 3)?;
        Ok(HolderInfo {
            holder: self.string(index)?,
            fencing_token: self.token(index + 1)?,
            expiry: (remaining_ms >= 0 && at_unix_ms >= 0).then_some(Expiry {
                remaining_ms,
                at_unix_ms,
            }),
        })
    }

    /// Reads the [`OCCUPANCY_FIELDS`] of `occupancy()` in queue.lua starting at `index`:
    /// `taken, limit, held, holder, token, remaining_ms, expires_at_ms` (`held` 0: no permit is
    /// taken, and the holder fields are zeros).
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
            wanted: Mutex::default(),
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
