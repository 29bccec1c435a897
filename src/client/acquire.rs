//! Acquiring: [`LeaseClient::acquire`] (a guarded lease) and [`LeaseClient::acquire_once`] (a
//! bare grant), and the two ways a grant could otherwise end up held by nobody:
//!
//! - **A caller that gives up a wait** (drops the future: a timeout, a `select!`, a cancelled
//!   task). The server may have granted the lease just before it heard of the give-up, with the
//!   `granted` message already on its way. So the call runs in its own task, which keeps reading
//!   the Acquire stream for [`GIVE_UP_GRACE`] after the caller left and releases a grant that
//!   arrives, before it cancels the call.
//! - **A grant nobody took**: one the caller left before reading, one whose confirming renewal
//!   after a long wait failed, one whose caller left during that renewal. From the moment it is
//!   read off the stream until a guard (or the caller of `acquire_once`) takes it, a grant is an
//!   [`UnguardedGrant`], which releases it when dropped.

use std::{pin::pin, time::Duration};

use tokio::sync::oneshot;
use tokio_stream::StreamExt;

use super::{
    AcquireOptions, Acquired, ClientError, GrantedLease, LeaseClient, LeaseGuard, NotGranted,
    duration_ms, remaining_from_ms, unix_ms,
};
use crate::proto::{AcquireRequest, RenewRequest, RenewResponse, acquire_response, renew_response};

/// How long a caller's Acquire stream is still read after the caller gave up the wait. A
/// `granted` that the server sent before the give-up reached it arrives within a round trip; this
/// leaves room for a loaded machine. Meanwhile the caller keeps its place in the line, so a lease
/// freed in that second goes to it and is released at once, to the next in line.
pub const GIVE_UP_GRACE: Duration = Duration::from_secs(1);

/// The answer of one Acquire call: a grant (released if dropped untaken), or who holds the lease.
type AcquireOutcome = Result<Result<UnguardedGrant, NotGranted>, ClientError>;

impl LeaseClient {
    /// Acquires `name` and keeps it alive with a [`LeaseGuard`], or reports who holds it.
    ///
    /// Dropping the future gives the wait up at once; a grant that was already on its way is
    /// released in the background (see [`GIVE_UP_GRACE`]).
    pub async fn acquire(
        &self,
        name: &str,
        options: AcquireOptions,
    ) -> Result<Acquired, ClientError> {
        // The lease expires on the server no earlier than TTL after this moment.
        let mut requested_at = tokio::time::Instant::now();
        // Released if this future ends or is dropped before the guard takes it.
        let grant = match self.acquire_unguarded(name, &options).await? {
            Ok(grant) => grant,
            Err(holder) => return Ok(Acquired::NotGranted(holder)),
        };
        // After a long wait, "TTL after the request" may already be past although the grant is
        // fresh: the server granted it at some unknown moment during the wait. Renew once before
        // trusting it, and count from that renewal instead.
        if requested_at.elapsed() > grant.lease().ttl / 3 {
            requested_at = tokio::time::Instant::now();
            if !self.confirm(grant.lease()).await? {
                // Lost between the grant and now: report whoever holds the name instead.
                let description = self.describe_lease(name).await?;
                return Ok(Acquired::NotGranted(NotGranted::from_description(
                    &description,
                )));
            }
        }
        Ok(Acquired::Granted(LeaseGuard::start(
            self.clone(),
            grant.into_guarded(),
            requested_at,
        )))
    }

    /// Acquires `name` without a keepalive: the lease lasts one TTL unless renewed by its id.
    ///
    /// Dropping the future gives the wait up at once; a grant that was already on its way is
    /// released in the background (see [`GIVE_UP_GRACE`]).
    pub async fn acquire_once(
        &self,
        name: &str,
        options: &AcquireOptions,
    ) -> Result<Result<GrantedLease, NotGranted>, ClientError> {
        let outcome = self.acquire_unguarded(name, options).await?;
        Ok(outcome.map(UnguardedGrant::into_guarded))
    }

    /// One Acquire call, run in its own task (see [`run_acquire_call`]).
    async fn acquire_unguarded(&self, name: &str, options: &AcquireOptions) -> AcquireOutcome {
        let request = AcquireRequest {
            name: name.to_owned(),
            holder: options.holder.clone(),
            ttl_ms: duration_ms(options.ttl),
            wait_ms: duration_ms(options.wait),
            limit: options.limit,
            lock_delay_ms: duration_ms(options.lock_delay),
            ..AcquireRequest::default()
        };
        let (answer, answered) = oneshot::channel();
        tokio::spawn(run_acquire_call(self.clone(), request, answer));
        answered
            .await
            .unwrap_or_else(|_| Err(ClientError::Protocol("the Acquire task panicked".into())))
    }

    /// Renews a fresh grant once: true if renewed, false if the server says it is lost. An
    /// answer that has not come by the time the lease could expire is `DEADLINE_EXCEEDED`.
    async fn confirm(&self, grant: &GrantedLease) -> Result<bool, ClientError> {
        let trust = grant.ttl - grant.ttl / 20;
        tokio::time::timeout(trust, self.renew_once(grant))
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Status(tonic::Status::deadline_exceeded(
                    "the renewal confirming the grant was not answered before the lease could expire",
                )))
            })
    }

    async fn renew_once(&self, grant: &GrantedLease) -> Result<bool, ClientError> {
        let renewal = RenewRequest {
            name: grant.name.clone(),
            lease_id: grant.lease_id.clone(),
            ttl_ms: 0,
        };
        let mut answers = self
            .grpc
            .clone()
            .renew(tokio_stream::iter([renewal]))
            .await?
            .into_inner();
        match answers.message().await? {
            Some(RenewResponse {
                result: Some(renew_response::Result::Renewed(_)),
                ..
            }) => Ok(true),
            Some(RenewResponse {
                result: Some(renew_response::Result::Lost(_)),
                ..
            }) => Ok(false),
            Some(_) => Err(ClientError::Protocol("empty RenewResponse".into())),
            None => Err(ClientError::Protocol(
                "Renew stream ended without an answer".into(),
            )),
        }
    }
}

/// One Acquire call, in its own task so that it outlives a caller who gives up: answers the
/// caller on `answer`; if the caller left first, keeps reading for [`GIVE_UP_GRACE`] and releases
/// what it was granted.
async fn run_acquire_call(
    client: LeaseClient,
    request: AcquireRequest,
    mut answer: oneshot::Sender<AcquireOutcome>,
) {
    let mut call = pin!(read_acquire(&client, request));
    let outcome = tokio::select! {
        outcome = &mut call => outcome,
        _ = answer.closed() => {
            // Dropping the call now would cancel it and lose a `granted` already on its way. A
            // grant read within the grace is dropped here, which releases it.
            if let Ok(Ok(Ok(grant))) = tokio::time::timeout(GIVE_UP_GRACE, call).await {
                tracing::debug!(
                    name = %grant.lease().name, fencing_token = grant.lease().fencing_token,
                    "releasing a grant that arrived after its caller gave up the wait"
                );
            }
            // Leaving here drops the stream: the call is cancelled and the server stops waiting.
            return;
        }
    };
    // A caller that leaves from here on drops the grant unread, in the channel or in its own
    // future: either way the grant's drop releases it.
    let _ = answer.send(outcome);
}

/// Reads one Acquire call to its terminal message.
async fn read_acquire(client: &LeaseClient, request: AcquireRequest) -> AcquireOutcome {
    let requested_limit = request.limit;
    // The limit check may answer before the stream starts or as its first message.
    let refused = |status| acquire_error(status, requested_limit);
    let mut stream = client
        .grpc
        .clone()
        .acquire(request)
        .await
        .map_err(refused)?
        .into_inner();
    while let Some(message) = stream.next().await {
        match message.map_err(refused)?.result {
            Some(acquire_response::Result::Waiting(_)) => continue,
            Some(acquire_response::Result::Granted(granted)) => {
                let grant = GrantedLease {
                    name: granted.name,
                    lease_id: granted.lease_id,
                    fencing_token: granted.fencing_token,
                    ttl: Duration::from_millis(granted.ttl_ms.max(0) as u64),
                    expires_at_ms: granted.expires_at.as_ref().map_or(0, unix_ms),
                };
                return Ok(Ok(UnguardedGrant::new(client.clone(), grant)));
            }
            Some(acquire_response::Result::NotGranted(busy)) => {
                return Ok(Err(NotGranted {
                    holder: busy.holder,
                    fencing_token: busy.fencing_token,
                    remaining: remaining_from_ms(busy.remaining_ms),
                    held: busy.held,
                    limit: busy.limit,
                }));
            }
            None => return Err(ClientError::Protocol("empty AcquireResponse".into())),
        }
    }
    Err(ClientError::Protocol(
        "Acquire stream ended without granted or not_granted".into(),
    ))
}

/// A grant that nobody keeps alive yet. Dropped before [`into_guarded`](Self::into_guarded)
/// (an error, or a caller that left), it releases the lease in the background, so that the
/// next holder need not wait for the TTL.
struct UnguardedGrant {
    client: LeaseClient,
    grant: Option<GrantedLease>,
}

impl UnguardedGrant {
    fn new(client: LeaseClient, grant: GrantedLease) -> Self {
        UnguardedGrant {
            client,
            grant: Some(grant),
        }
    }

    fn lease(&self) -> &GrantedLease {
        self.grant.as_ref().expect("taken only by into_guarded")
    }

    /// Hands the grant over to its guard, or to the caller of `acquire_once`: nothing to release
    /// any more.
    fn into_guarded(mut self) -> GrantedLease {
        self.grant.take().expect("taken only once")
    }
}

impl Drop for UnguardedGrant {
    fn drop(&mut self) {
        let Some(grant) = self.grant.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            runtime.spawn(async move {
                let (name, lease_id) = (grant.name, grant.lease_id);
                if let Err(error) = client.release(&name, &lease_id).await {
                    tracing::warn!(%name, %error, "could not release a grant nobody took; it expires at its TTL");
                }
            });
        }
    }
}

/// An Acquire's error status as the caller should see it: a limit that differs from the one in
/// force (`FAILED_PRECONDITION`, which only Acquire answers) gets its own variant.
fn acquire_error(status: tonic::Status, requested_limit: u32) -> ClientError {
    match status.code() {
        tonic::Code::FailedPrecondition => ClientError::LimitMismatch {
            requested: requested_limit,
            message: status.message().to_owned(),
        },
        _ => ClientError::Status(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_precondition_is_a_limit_mismatch_and_other_codes_stay_statuses() {
        let message = "limit 5 differs from the limit in force, 3: every holder of a name must \
                       ask for the same limit";
        let error = acquire_error(tonic::Status::failed_precondition(message), 5);
        let ClientError::LimitMismatch {
            requested,
            message: explained,
        } = &error
        else {
            panic!("expected LimitMismatch, got {error:?}");
        };
        assert_eq!((*requested, explained.as_str()), (5, message));
        assert_eq!(error.to_string(), message);
        let error = acquire_error(tonic::Status::invalid_argument("invalid limit"), 20_000);
        assert!(
            matches!(error, ClientError::Status(s) if s.code() == tonic::Code::InvalidArgument)
        );
    }
}
