//! The [`LeaseStore`] operations of the Redis store: each runs one script on the lease's keys and
//! reads its reply.

use std::time::Duration;

use fred::prelude::{ClientLike, KeysInterface};

use super::{
    RedisStore,
    keys::{heartbeat_key, lease_id_digest},
    library::Script,
    list::PageToken,
    replication::Confirmed,
    replies::{HOLDER_FIELDS, OCCUPANCY_FIELDS},
};
use crate::{
    error::{Error, Refusal, Result},
    lease::{
        AcquireOutcome, Caller, Description, ENDED_LEASE_ID_KEPT, LeaseGone, LeaseId, LeaseName,
        LeasePage, LeaseStore, ListPrefix, QueueEntry, QueueStatus, QueueStore, RenewOutcome,
        Revoked, ValidatedAcquire,
    },
    metrics::metrics,
};

impl LeaseStore for RedisStore {
    async fn try_acquire(
        &self,
        request: &ValidatedAcquire,
        lease_id: &LeaseId,
        entry: Option<&QueueEntry>,
    ) -> Result<AcquireOutcome> {
        let name = &request.name;
        let keys = self.keys(name);
        let ttl_ms = request.ttl.as_millis() as u64;
        let mut arguments = vec![
            lease_id_digest(lease_id),
            request.holder.clone(),
            ttl_ms.to_string(),
            self.counter_keep_ms(),
            entry.map(QueueEntry::to_string).unwrap_or_default(),
            request.wait.as_millis().to_string(),
            self.max_waiters_per_name.to_string(),
            request.limit.to_string(),
            request.lock_delay.as_millis().to_string(),
        ];
        // The mode and the own lease id's keys and arguments only when there is one to tell: a
        // plain exclusive grant sends Redis no more than it did before there were any.
        let own_id = request.lease_id.is_some();
        let keys = match own_id {
            true => keys.for_acquire_with_own_id(),
            false => keys.for_queue_scripts(),
        };
        if request.shared || own_id {
            arguments.extend([
                flag(request.shared),
                request.max_shared.to_string(),
                flag(own_id),
                request.caller.tag().to_owned(),
            ]);
        }
        let client = self.pool.next();
        let connections = self.connections_before(client);
        let reply = self
            .run_on(client, Script::Acquire, name, keys, arguments)
            .await?;
        let outcome = reply.acquire_outcome(lease_id, self.max_waiters_per_name)?;
        if let AcquireOutcome::Granted(_) = outcome {
            // A grant answered again was answered before, to an earlier call: it is never undone
            // here, and its shortfall only answers UNAVAILABLE (the holder retries). Its answer
            // wrote a mark, so the WAIT covers the grant even if another connection made it.
            let made_here = !reply.answered_again();
            let confirmed = self
                .confirm_on_replicas(client, connections, name, Confirmed::Grant)
                .await;
            if let Err(error) = confirmed {
                if made_here {
                    self.release_unconfirmed(name, lease_id).await;
                }
                return Err(error);
            }
        }
        Ok(outcome)
    }

    async fn renew(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        ttl: Option<Duration>,
        caller: &Caller,
    ) -> Result<RenewOutcome> {
        let keys = self.keys(name);
        let ttl_ms = ttl.map_or(0, |ttl| ttl.as_millis() as u64);
        let client = self.pool.next();
        let connections = self.connections_before(client);
        let reply = self
            .run_on(
                client,
                Script::Renew,
                name,
                vec![
                    keys.lease,
                    keys.owner,
                    keys.permits,
                    keys.holders,
                    keys.revoked,
                ],
                vec![
                    lease_id_digest(lease_id),
                    ttl_ms.to_string(),
                    self.counter_keep_ms(),
                    caller.tag().to_owned(),
                ],
            )
            .await?;
        if reply.int(0)? == 2 {
            return Err(Error::Refused(Refusal::MadeByAnotherCaller));
        }
        if reply.int(0)? == 1 {
            let renewed = RenewOutcome::Renewed {
                fencing_token: reply.token(1)?,
                ttl_ms: reply.int(2)?,
                expires_at_ms: reply.int(3)?,
            };
            // Not confirmed: the renewal stays made, and the holder's retry confirms it.
            self.confirm_on_replicas(client, connections, name, Confirmed::Renewal)
                .await?;
            return Ok(renewed);
        }
        Ok(RenewOutcome::Lost(match reply.string(1)?.as_str() {
            "taken" => LeaseGone::HeldByAnother,
            "revoked" => LeaseGone::Revoked {
                reason: reply.string(2)?,
            },
            _ => LeaseGone::ExpiredOrReleased,
        }))
    }

    async fn release(&self, name: &LeaseName, lease_id: &LeaseId, caller: &Caller) -> Result<bool> {
        self.run_release(name, lease_id, ReleaseBy::Holder(caller))
            .await
    }

    async fn describe(&self, name: &LeaseName) -> Result<Description> {
        let keys = self.keys(name);
        let reply = self
            .run(
                Script::Describe,
                name,
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
        let shared = reply.int(2)? == 1;
        let mut holders = (3..reply.len()?)
            .step_by(HOLDER_FIELDS)
            .map(|index| reply.holder(index, shared))
            .collect::<Result<Vec<_>>>()?;
        holders.sort_by_key(|holder| holder.fencing_token);
        Ok(Description {
            limit: reply.count(0)?,
            holders,
            waiters: reply.count(1)?,
        })
    }

    async fn ping(&self) -> Result<()> {
        if let Some(refusal) = self.layout.refusal() {
            return Err(refusal);
        }
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
                Script::Revoke,
                name,
                keys.for_revoke(),
                vec![
                    fencing_token.unwrap_or(0).to_string(),
                    reason.to_owned(),
                    self.counter_keep_ms(),
                ],
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
}

impl QueueStore for RedisStore {
    async fn leave(&self, name: &LeaseName, entries: &[QueueEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let keys = self.keys(name);
        self.run(
            Script::Leave,
            name,
            keys.for_queue_scripts(),
            entries.iter().map(QueueEntry::to_string).collect(),
        )
        .await?
        .integer()?;
        Ok(())
    }

    async fn queued_here(&self, name: &LeaseName) -> Result<Vec<QueueEntry>> {
        let keys = self.keys(name);
        let reply = self
            .run(
                Script::Queued,
                name,
                vec![keys.queue],
                vec![self.events.replica().to_owned()],
            )
            .await?;
        (0..reply.len()?).map(|index| reply.entry(index)).collect()
    }

    async fn queue_status(&self, name: &LeaseName, entries: &[QueueEntry]) -> Result<QueueStatus> {
        let keys = self.keys(name);
        let entries_text = entries.iter().map(QueueEntry::to_string).collect();
        let reply = self
            .run(Script::Status, name, keys.for_status(), entries_text)
            .await?;
        let positions = (0..entries.len())
            .map(|index| reply.count(OCCUPANCY_FIELDS + index))
            .collect::<Result<_>>()?;
        let due_at = OCCUPANCY_FIELDS + entries.len();
        let due = (due_at + 1..reply.len()?)
            .map(|index| reply.entry(index))
            .collect::<Result<_>>()?;
        let mut occupancy = reply.occupancy(0)?;
        occupancy.due = reply.count(due_at)?;
        Ok(QueueStatus {
            occupancy,
            positions,
            due,
        })
    }

    async fn unstall(
        &self,
        name: &LeaseName,
        stalled: &[QueueEntry],
        overdue: bool,
    ) -> Result<usize> {
        let keys = self.keys(name);
        let suspects: Vec<String> = match stalled.is_empty() {
            true => {
                let reply = self
                    .run(Script::Replicas, name, vec![keys.queue.clone()], vec![])
                    .await?;
                (0..reply.len()?)
                    .map(|index| reply.string(index))
                    .collect::<Result<_>>()?
            }
            false => {
                let mut replicas: Vec<String> = stalled
                    .iter()
                    .map(|entry| format!("{}:", entry.replica))
                    .collect();
                replicas.sort();
                replicas.dedup();
                replicas
            }
        };
        let me = format!("{}:", self.events.replica());
        let mut purge = Vec::new();
        for replica in suspects.into_iter().filter(|replica| *replica != me) {
            if !self.is_alive(name, &replica[..replica.len() - 1]).await? {
                purge.push(replica);
            }
        }
        if overdue {
            purge.extend(
                stalled
                    .iter()
                    .filter(|entry| entry.replica != self.events.replica())
                    .map(QueueEntry::to_string),
            );
        }
        if purge.is_empty() && stalled.is_empty() {
            return Ok(0);
        }
        let gone = purge.iter().filter(|item| item.ends_with(':')).count();
        let removed = self
            .run(Script::Purge, name, keys.for_queue_scripts(), purge)
            .await?
            .integer()? as usize;
        if removed > 0 {
            tracing::info!(%name, removed, replicas_gone = gone, overdue, "took stalled entries of other replicas out of the queue");
            metrics().stalled_entries_removed.inc_by(removed as u64);
        }
        Ok(removed)
    }
}

/// Who releases a grant, as release.lua takes it.
enum ReleaseBy<'a> {
    /// Its holder (`Release`), as this caller: the lease id stays ended for
    /// [`ENDED_LEASE_ID_KEPT`].
    Holder(&'a Caller),
    /// The call that made it, for want of replicas: the id is not ended (a retry may be
    /// granted), and a grant that another call was answered stays held.
    UnconfirmedGrant,
}

/// A yes/no argument of a script: '1' or '0'.
fn flag(yes: bool) -> String {
    String::from(if yes { "1" } else { "0" })
}

impl RedisStore {
    /// Releases a grant that its replicas did not confirm, made by this very call, unless
    /// another call was answered it meanwhile; leaves its lease id free to be granted again
    /// ([`replication`](super::replication)). Answers whether it released.
    pub(super) async fn release_unconfirmed_grant(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
    ) -> Result<bool> {
        self.run_release(name, lease_id, ReleaseBy::UnconfirmedGrant)
            .await
    }

    /// Runs release.lua for `lease_id`'s grant of `name`. Answers whether it released.
    async fn run_release(
        &self,
        name: &LeaseName,
        lease_id: &LeaseId,
        by: ReleaseBy<'_>,
    ) -> Result<bool> {
        let keys = self.keys(name);
        let (ended_kept, caller, unconfirmed) = match by {
            ReleaseBy::Holder(caller) => (ENDED_LEASE_ID_KEPT, caller.tag(), false),
            ReleaseBy::UnconfirmedGrant => (Duration::ZERO, "", true),
        };
        let mut arguments = vec![
            lease_id_digest(lease_id),
            self.counter_keep_ms(),
            ended_kept.as_millis().to_string(),
        ];
        // The principal and the flag only when there is one to tell: a plain release (no access
        // control) sends Redis no more than it did before there were any.
        if !caller.is_empty() || unconfirmed {
            arguments.extend([caller.to_owned(), flag(unconfirmed)]);
        }
        let reply = self
            .run(Script::Release, name, keys.for_release(), arguments)
            .await?;
        match reply.int(0)? {
            1 => {}
            2 => return Err(Error::Refused(Refusal::MadeByAnotherCaller)),
            // 0: not held; 3: an unconfirmed grant that another call was answered, left held.
            _ => return Ok(false),
        }
        // The wake-ups are on their way through pub/sub too; if a caller they go to waits on
        // this replica, the reply reaches it sooner.
        for index in 1..reply.len()? {
            self.events.wake(name.as_str(), &reply.entry(index)?);
        }
        Ok(true)
    }

    /// How long a name's counter outlives its last grant, as the scripts take it.
    fn counter_keep_ms(&self) -> String {
        self.counter_keep.as_millis().to_string()
    }

    /// Whether `replica`'s heartbeat key exists (asked about a stalled entry of `name`).
    async fn is_alive(&self, name: &LeaseName, replica: &str) -> Result<bool> {
        let key = heartbeat_key(&self.key_prefix, replica);
        let started = std::time::Instant::now();
        // Boxed: fred's future is several KiB, and every waiting caller's future (through
        // `unstall`) would otherwise make room for it.
        let exists = Box::pin(self.pool.next().exists::<i64, _>(key)).await;
        metrics().record_store("heartbeat_check", started.elapsed(), exists.is_err());
        match exists {
            Ok(count) => Ok(count > 0),
            // Whatever the cause, the replica's liveness is unknown: try again later.
            Err(error) => {
                tracing::debug!(%name, %error, replica, "could not check a replica's heartbeat");
                Err(Error::Unavailable(format!("heartbeat check: {error}")))
            }
        }
    }
}
