//! The Redis store: every operation is one Lua script (run by SHA, reloaded after `NOSCRIPT`), all
//! keys of a lease share one hash tag, time comes from Redis `TIME`, and releases are published
//! so that waiters on every `leased` replica wake at once. The keys and what they hold:
//! ARCHITECTURE.md, "Redis key layout".

use std::{sync::Arc, time::Duration};

use fred::{
    clients::SubscriberClient,
    error::ErrorKind,
    prelude::{
        Builder, ClientLike, Config, Error as RedisError, EventInterface, Pool, PubsubInterface,
        ReconnectPolicy, Value,
    },
    types::scripts::Script,
};
use tokio::task::JoinHandle;

use crate::{
    error::{Error, Result, StartupError},
    lease::{
        AcquireOutcome, Expiry, Grant, HolderInfo, LeaseGone, LeaseId, LeaseName, LeaseStore,
        ReleaseWatchers, RenewOutcome,
    },
    metrics::metrics,
};

/// The fence counter outlives leases by at least this long, so that tokens usually come from the
/// counter; if it expires anyway, the clock floor in `acquire.lua` keeps tokens increasing.
const MIN_FENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

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
    /// Refuse more concurrent waiters than this on one name.
    pub max_waiters_per_name: usize,
}

/// The four Lua scripts, one per atomic operation.
struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
    describe: Script,
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire: Script::from_lua(include_str!("scripts/acquire.lua")),
            renew: Script::from_lua(include_str!("scripts/renew.lua")),
            release: Script::from_lua(include_str!("scripts/release.lua")),
            describe: Script::from_lua(include_str!("scripts/describe.lua")),
        }
    }
}

/// A [`LeaseStore`] on Redis, shared by any number of `leased` replicas.
pub struct RedisStore {
    pool: Pool,
    subscriber: SubscriberClient,
    scripts: Scripts,
    key_prefix: String,
    release_channel: String,
    watchers: Arc<ReleaseWatchers>,
    background: Vec<JoinHandle<()>>,
}

/// The keys of one lease, all under the hash tag `{name}` so that every script touches one slot.
struct LeaseKeys {
    lease: String,
    owner: String,
    fence: String,
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

        let release_channel = format!("{}released", options.key_prefix);
        let watchers = Arc::new(ReleaseWatchers::new(options.max_waiters_per_name));
        let background = vec![
            tokio::spawn(resubscribe_on_connect(
                subscriber.clone(),
                release_channel.clone(),
                watchers.clone(),
            )),
            tokio::spawn(wake_waiters_on_release(
                subscriber.clone(),
                watchers.clone(),
            )),
        ];
        // Both subscriptions above exist before the first connection, so none of its events is missed.
        drop(pool.connect_pool());
        drop(subscriber.connect());

        Ok(RedisStore {
            pool,
            subscriber,
            scripts: Scripts::new(),
            key_prefix: options.key_prefix.clone(),
            release_channel,
            watchers,
            background,
        })
    }

    fn keys(&self, name: &LeaseName) -> LeaseKeys {
        let lease = format!("{}{{{}}}", self.key_prefix, name);
        LeaseKeys {
            owner: format!("{lease}:owner"),
            fence: format!("{lease}:fence"),
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

/// (Re)subscribes to the release channel on every connection of the subscriber, and wakes every
/// waiter: releases published while the subscriber was away were missed.
async fn resubscribe_on_connect(
    subscriber: SubscriberClient,
    channel: String,
    watchers: Arc<ReleaseWatchers>,
) {
    let mut reconnects = subscriber.reconnect_rx();
    while reconnects.recv().await.is_ok() {
        match subscriber.subscribe(channel.as_str()).await {
            Ok(()) => tracing::info!(%channel, "subscribed to lease releases"),
            Err(error) => tracing::warn!(%channel, %error, "could not subscribe to lease releases"),
        }
        watchers.notify_all();
    }
}

/// Wakes the local waiters of each lease named in a release message.
async fn wake_waiters_on_release(subscriber: SubscriberClient, watchers: Arc<ReleaseWatchers>) {
    use tokio::sync::broadcast::error::RecvError;
    let mut messages = subscriber.message_rx();
    loop {
        match messages.recv().await {
            Ok(message) => {
                if let Some(name) = message.value.as_str() {
                    watchers.notify(&name);
                }
            }
            // We fell behind and lost some names: wake everyone to re-check.
            Err(RecvError::Lagged(_)) => watchers.notify_all(),
            Err(RecvError::Closed) => return,
        }
    }
}

impl LeaseStore for RedisStore {
    async fn try_acquire(
        &self,
        name: &LeaseName,
        holder: &str,
        ttl: Duration,
        lease_id: &LeaseId,
    ) -> Result<AcquireOutcome> {
        let keys = self.keys(name);
        let ttl_ms = ttl.as_millis() as u64;
        let fence_ttl_ms = MIN_FENCE_TTL.max(ttl * 2).as_millis() as u64;
        let reply = self
            .run(
                "acquire",
                name,
                &self.scripts.acquire,
                vec![keys.lease, keys.owner, keys.fence],
                vec![
                    lease_id.expose().to_owned(),
                    holder.to_owned(),
                    ttl_ms.to_string(),
                    fence_ttl_ms.to_string(),
                ],
            )
            .await?;
        if reply.int(0)? == 1 {
            Ok(AcquireOutcome::Granted(Grant {
                lease_id: lease_id.clone(),
                fencing_token: reply.token(1)?,
                ttl_ms: reply.int(2)?,
                expires_at_ms: reply.int(3)?,
            }))
        } else {
            Ok(AcquireOutcome::Busy(reply.holder_info(1)?))
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
                vec![keys.lease, keys.owner],
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
                vec![keys.lease, keys.owner],
                vec![
                    lease_id.expose().to_owned(),
                    self.release_channel.clone(),
                    name.as_str().to_owned(),
                ],
            )
            .await?;
        Ok(reply.integer()? == 1)
    }

    async fn describe(&self, name: &LeaseName) -> Result<Option<HolderInfo>> {
        let keys = self.keys(name);
        let reply = self
            .run(
                "describe",
                name,
                &self.scripts.describe,
                vec![keys.lease, keys.owner],
                vec![],
            )
            .await?;
        match reply.int(0)? {
            1 => Ok(Some(reply.holder_info(1)?)),
            _ => Ok(None),
        }
    }

    async fn ping(&self) -> Result<()> {
        self.pool
            .next()
            .ping::<()>(None)
            .await
            .map_err(|e| Error::Unavailable(e.to_string()))?;
        // Waiters depend on the release subscription: not healthy without it.
        if !self.subscriber.is_connected() {
            return Err(Error::Unavailable(
                "release subscriber not connected".into(),
            ));
        }
        Ok(())
    }

    fn release_watchers(&self) -> &ReleaseWatchers {
        &self.watchers
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

    /// Reads `holder, token, remaining_ms, expires_at_ms` starting at `index`; the scripts send
    /// -1, -1 for a key without expiry.
    fn holder_info(&self, index: usize) -> Result<HolderInfo> {
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
}
