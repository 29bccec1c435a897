//! Grants that survive a failover (`--redis-wait-replicas N`). Redis replicates asynchronously: a
//! grant the master acknowledged can be lost in a failover, and the name is then granted again
//! while its first holder still holds it. With N > 0 a grant or renewal is answered only once
//! Redis `WAIT` says N replicas have it; short of that in time, the caller hears `UNAVAILABLE`
//! and a grant is released again.
//!
//! `WAIT` counts the replicas that acknowledged every write *of its own connection* so far, and
//! it is not allowed in a script: it follows the script on the same pool client (one connection
//! per server), routed to the name's master on a Cluster. A reconnect between the two would put
//! it on a connection that wrote nothing and confirm nothing, so a changed connection id counts
//! as unconfirmed. `WAIT` blocks its connection while it waits: the other calls that the pool
//! gives that connection wait behind it (docs/src/performance.md measures the price).

use std::{collections::HashMap, time::Duration};

use fred::{
    clients::Client,
    interfaces::ClientInterface,
    prelude::{ClientLike, Options, Server, ServerInterface},
    types::{ClusterHash, InfoKind},
    util::redis_keyslot,
};

use tracing::Instrument;

use super::{RedisStore, keys::LeaseKeys};
use crate::{
    error::{Error, Result},
    lease::{LeaseId, LeaseName},
    metrics::metrics,
    telemetry,
};

/// `--redis-wait-replicas` and `--redis-wait-timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaWait {
    /// Replicas that must have a grant or renewal before it is answered; 0: none (no `WAIT`).
    pub replicas: u32,
    /// How long `WAIT` may take before the call answers `UNAVAILABLE`.
    pub timeout: Duration,
}

impl ReplicaWait {
    /// No `WAIT`: answer once the master has it.
    pub const NONE: ReplicaWait = ReplicaWait {
        replicas: 0,
        timeout: Duration::from_secs(2),
    };
}

/// The connections of a pool client (`CLIENT ID` per server) before a script, to tell after the
/// `WAIT` that both ran on the same connection. `None` when nothing is waited for.
pub(super) struct Connections(Option<HashMap<Server, i64>>);

/// What is confirmed, for the error and the log.
#[derive(Clone, Copy, Debug)]
pub(super) enum Confirmed {
    Grant,
    Renewal,
}

impl RedisStore {
    /// The connections of `client` now, if grants wait for replicas.
    pub(super) fn connections_before(&self, client: &Client) -> Connections {
        Connections((self.wait_for_replicas.replicas > 0).then(|| client.connection_ids()))
    }

    /// Waits until `--redis-wait-replicas` replicas have every write `client` made so far (the
    /// script just run on `name`), or answers [`Error::NotReplicated`]. Without replicas to wait
    /// for, returns at once.
    pub(super) async fn confirm_on_replicas(
        &self,
        client: &Client,
        before: Connections,
        name: &LeaseName,
        what: Confirmed,
    ) -> Result<()> {
        let Connections(Some(before)) = before else {
            return Ok(());
        };
        // Boxed: fred's WAIT future is several KiB, and every grant's and renewal's future would
        // otherwise make room for it, and be moved with it, even when nothing waits for replicas.
        Box::pin(self.wait_for_replicas(client, before, name, what)).await
    }

    /// [`confirm_on_replicas`](Self::confirm_on_replicas) once there are replicas to wait for:
    /// `before` is the client's connections when it ran the script.
    async fn wait_for_replicas(
        &self,
        client: &Client,
        before: HashMap<Server, i64>,
        name: &LeaseName,
        what: Confirmed,
    ) -> Result<()> {
        let ReplicaWait { replicas, timeout } = self.wait_for_replicas;
        let slot = redis_keyslot(LeaseKeys::new(&self.key_prefix, name).lease.as_bytes());
        let options = Options {
            cluster_hash: Some(ClusterHash::Custom(slot)),
            // WAIT answers by its own timeout; this only bounds a connection that went silent.
            timeout: Some(timeout + self.command_timeout),
            // Never re-sent: on another connection it would confirm nothing.
            max_attempts: Some(1),
            fail_fast: true,
            ..Options::default()
        };
        let started = std::time::Instant::now();
        let acknowledged = client
            .with_options(&options)
            .wait::<i64>(i64::from(replicas), timeout.as_millis() as i64)
            .instrument(telemetry::store_span("redis", "wait", name))
            .await;
        metrics()
            .redis_wait_duration
            .observe(started.elapsed().as_secs_f64());
        let what = match what {
            Confirmed::Grant => "grant",
            Confirmed::Renewal => "renewal",
        };
        let shortfall = match acknowledged {
            Ok(_) if client.connection_ids() != before => {
                "Redis reconnected between the write and WAIT".to_owned()
            }
            Ok(count) if count >= i64::from(replicas) => return Ok(()),
            Ok(count) => format!("{count} confirmed within {timeout:?}"),
            Err(error) => format!("WAIT failed: {error}"),
        };
        metrics().redis_wait_shortfalls.inc();
        Err(Error::NotReplicated(format!(
            "the {what} of {name} was not confirmed by {replicas} Redis replica(s) \
             (--redis-wait-replicas): {shortfall}; retry"
        )))
    }

    /// Releases a grant that this call made and its replicas did not confirm, so that it is never
    /// left held unanswered, unless another call (a retry of the caller's own lease id) was
    /// answered it meanwhile: that grant stays held. The caller's own lease id is not ended by it
    /// (its retry may be granted). A release that fails leaves the grant to expire at its TTL
    /// (counted in `leased_unconfirmed_grants_expiring_total`).
    pub(super) async fn release_unconfirmed(&self, name: &LeaseName, lease_id: &LeaseId) {
        match self.release_unconfirmed_grant(name, lease_id).await {
            Ok(_) => {}
            Err(error) => {
                metrics().unconfirmed_grants_expiring.inc();
                tracing::warn!(
                    %name,
                    %error,
                    "could not release a grant its replicas did not confirm: it expires at its TTL"
                );
            }
        }
    }

    /// Warns when `--redis-wait-replicas` is more than the replicas connected to a master now:
    /// every grant and renewal on it would answer `UNAVAILABLE` until more connect. A master that
    /// does not answer within `timeout` is not checked.
    pub async fn check_replicas(&self, timeout: Duration) {
        let wanted = self.wait_for_replicas.replicas;
        if wanted == 0 {
            return;
        }
        let connected = match tokio::time::timeout(timeout, self.connected_replicas()).await {
            Ok(Ok(connected)) => connected,
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot read how many replicas Redis has");
                return;
            }
            Err(_) => {
                tracing::warn!("Redis did not tell how many replicas it has at startup");
                return;
            }
        };
        for (server, count) in connected {
            if count < wanted {
                tracing::warn!(
                    %server,
                    connected_replicas = count,
                    redis_wait_replicas = wanted,
                    "fewer Redis replicas are connected than --redis-wait-replicas: grants and \
                     renewals on this master answer UNAVAILABLE until more connect"
                );
            }
        }
    }

    /// `(server, connected replicas)` of the one master, or of every Cluster primary, from
    /// `INFO replication`.
    async fn connected_replicas(&self) -> Result<Vec<(String, u32)>, fred::error::Error> {
        let infos = self.info_of_every_master(InfoKind::Replication).await?;
        Ok(infos
            .into_iter()
            .map(|(server, info)| (server, connected_replicas_of(&info)))
            .collect())
    }
}

/// The `connected_slaves` field of `INFO replication` (0 if absent).
fn connected_replicas_of(info: &str) -> u32 {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connected_replicas_are_read_from_info_replication() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=127.0.0.1\r\n";
        assert_eq!(connected_replicas_of(info), 2);
        assert_eq!(connected_replicas_of("# Replication\r\nrole:master\r\n"), 0);
    }
}
