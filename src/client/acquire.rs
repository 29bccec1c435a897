//! Acquiring: [`LeaseClient::acquire`] (a guarded lease) and [`LeaseClient::acquire_once`] (a
//! bare grant). Each acquisition sends its own lease id ([`new_lease_id`]): the server answers an
//! Acquire with an id that holds the name that same grant, and never releases a grant of such an
//! id by itself. That makes it safe to:
//!
//! - **Retry a call that was cut off** (UNAVAILABLE, or a stream that ended without its answer: a
//!   connection reset, a replica that stopped): sent again with the same id, a bounded number of
//!   times ([`with_retries`]), it is answered the grant an earlier try got, or keeps its place in
//!   line.
//! - **Give up** (the caller drops the future: a timeout, a `select!`, a cancelled task; or the
//!   acquisition ends in an error): the call is cancelled, then Release(name, id) ends a grant
//!   that raced the give-up, and stops one still on its way (a released id grants nothing for a
//!   minute). The call runs in its own task, so that this happens although the caller has
//!   left.
//!
//! A grant read off the stream is an [`UnguardedGrant`] until a guard (or the caller of
//! `acquire_once`) takes it, which releases it when dropped: a caller that left before reading
//! it, a grant whose confirming renewal after a long wait failed.

use std::{future::Future, pin::pin, time::Duration};

use tokio::{sync::oneshot, time::Instant};
use tokio_stream::StreamExt;

use super::{
    AcquireOptions, Acquired, ClientError, GrantedLease, LeaseClient, LeaseGuard, NotGranted,
    remaining_from_ms, unix_ms,
};
use crate::proto::{AcquireRequest, RenewRequest, RenewResponse, acquire_response, renew_response};

/// How many times an Acquire that was cut off is sent again with the same lease id.
const ACQUIRE_RETRIES: u32 = 3;

/// The pause before the first retry; each next one is twice as long (100, 200, 400 ms): long
/// enough for a replica behind a load balancer to be replaced by another, short beside a wait.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How long past the wait it was sent with an Acquire call may go unanswered before the client
/// gives up on it (cancels, then releases). The server answers `not_granted` when the wait ends
/// and UNAVAILABLE when Redis does not answer in its `--redis-timeout`; this is only a backstop
/// against a connection that went silent, which HTTP/2 keepalive would take 40 s to notice.
const ANSWER_SLACK: Duration = Duration::from_secs(10);

/// How long the Release after a give-up may take. A caller that gives up is leaving; if the
/// release fails, a grant that raced the give-up stays held until its TTL.
const GIVE_UP_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The answer of one acquisition: a grant (released if dropped untaken), or who holds the lease.
type AcquireOutcome = Result<Result<UnguardedGrant, NotGranted>, ClientError>;

impl LeaseClient {
    /// Acquires `name` and keeps it alive with a [`LeaseGuard`], or reports who holds it.
    ///
    /// An Acquire that ends UNAVAILABLE, or whose stream ends without an answer, is sent again
    /// with the same lease id up to 3 times (after 100, 200 and 400 ms), with the wait that is
    /// left: the server answers it the grant an earlier try got, or keeps its place in line.
    /// Dropping the future gives the wait up at once: in the background, the call is cancelled
    /// and its lease id released, which ends a grant that was already on its way. An acquisition that ends in an error releases
    /// its id the same way before the error is returned.
    pub async fn acquire(
        &self,
        name: &str,
        options: AcquireOptions,
    ) -> Result<Acquired, ClientError> {
        // The lease expires on the server no earlier than TTL after this moment: a retry is
        // answered the grant of an earlier try, whose expiry counts from that try at the latest.
        let mut requested_at = Instant::now();
        // Released if this future ends or is dropped before the guard takes it.
        let grant = match self.acquire_unguarded(name, &options).await? {
            Ok(grant) => grant,
            Err(holder) => return Ok(Acquired::NotGranted(holder)),
        };
        // After a long wait, "TTL after the request" may already be past although the grant is
        // fresh: the server granted it at some unknown moment during the wait. Renew once before
        // trusting it, and count from that renewal instead.
        if requested_at.elapsed() > grant.lease().ttl / 3 {
            requested_at = Instant::now();
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
    /// Retried, and given up, as [`acquire`](Self::acquire).
    pub async fn acquire_once(
        &self,
        name: &str,
        options: &AcquireOptions,
    ) -> Result<Result<GrantedLease, NotGranted>, ClientError> {
        let outcome = self.acquire_unguarded(name, options).await?;
        Ok(outcome.map(UnguardedGrant::into_guarded))
    }

    /// One acquisition, run in its own task (see [`run_acquisition`]).
    async fn acquire_unguarded(&self, name: &str, options: &AcquireOptions) -> AcquireOutcome {
        let request = AcquireRequest {
            name: name.to_owned(),
            holder: options.holder.clone(),
            ttl_ms: duration_ms(options.ttl),
            wait_ms: duration_ms(options.wait),
            limit: options.limit,
            lock_delay_ms: duration_ms(options.lock_delay),
            shared: options.shared,
            lease_id: options.lease_id.clone().unwrap_or_else(new_lease_id),
        };
        let (answer, answered) = oneshot::channel();
        tokio::spawn(run_acquisition(self.clone(), request, options.wait, answer));
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

/// A new acquisition's own lease id: 128 bits from the OS's CSPRNG as 32 lowercase hex digits,
/// as the server makes its own. It is the holder's secret (whoever knows it can renew and
/// release the lease); a retry reuses it, nothing else does.
pub(super) fn new_lease_id() -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random number generator is unavailable");
    bytes
        .iter()
        .flat_map(|byte| [byte >> 4, byte & 0xf])
        .map(|digit| DIGITS[usize::from(digit)] as char)
        .collect()
}

/// One acquisition, in its own task so that it outlives a caller who gives up: answers the
/// caller on `answer`. If the caller left first, the acquisition failed, or a retried one was not
/// granted, it cancels the call and releases the lease id, which ends a grant that raced it.
async fn run_acquisition(
    client: LeaseClient,
    request: AcquireRequest,
    wait: Duration,
    mut answer: oneshot::Sender<AcquireOutcome>,
) {
    let (name, lease_id) = (request.name.clone(), request.lease_id.clone());
    let mut calls = 0;
    let outcome = {
        let attempts = pin!(with_retries(wait, |wait_left| {
            calls += 1;
            let request = AcquireRequest {
                wait_ms: duration_ms(wait_left),
                ..request.clone()
            };
            read_acquire(&client, request)
        }));
        tokio::select! {
            outcome = attempts => Some(outcome),
            _ = answer.closed() => None,
        }
        // Leaving this block drops the call in flight, if any: it is cancelled, and the server
        // stops waiting for this caller.
    };
    let Some(outcome) = outcome else {
        give_up(&client, &name, &lease_id, "the caller gave up").await;
        return;
    };
    match &outcome {
        Err(error) if may_have_granted(error) => {
            give_up(&client, &name, &lease_id, "the Acquire failed").await;
        }
        // An earlier call that was cut off may still be waiting on a server that has not yet
        // noticed, and be granted after this one's wait ended.
        Ok(Err(_not_granted)) if calls > 1 => {
            give_up(
                &client,
                &name,
                &lease_id,
                "a retried Acquire was not granted",
            )
            .await;
        }
        _ => {}
    }
    // A caller that leaves from here on drops the grant unread, in the channel or in its own
    // future: either way the grant's drop releases it.
    let _ = answer.send(outcome);
}

/// Runs `attempt` (given the wait that is left) until it is answered, sending it again after a
/// pause when it was cut off ([`is_cut_off`]), at most [`ACQUIRE_RETRIES`] times. A retry after
/// the wait is spent tries once: it still picks up a grant that an earlier try got. An attempt
/// not answered within the wait it was sent with and [`ANSWER_SLACK`] ends the acquisition with
/// `DEADLINE_EXCEEDED`.
async fn with_retries<T, F, Attempt>(wait: Duration, mut attempt: F) -> Result<T, ClientError>
where
    F: FnMut(Duration) -> Attempt,
    Attempt: Future<Output = Result<T, ClientError>>,
{
    let wait_ends = Instant::now() + wait;
    let mut wait_left = wait;
    let mut pause = FIRST_RETRY_PAUSE;
    let mut retries = 0;
    loop {
        let error = match tokio::time::timeout(wait_left + ANSWER_SLACK, attempt(wait_left)).await {
            Ok(Err(error)) if is_cut_off(&error) && retries < ACQUIRE_RETRIES => error,
            Ok(answered) => return answered,
            Err(_elapsed) => {
                return Err(ClientError::Status(tonic::Status::deadline_exceeded(
                    "the Acquire was not answered in its wait and 10 s more",
                )));
            }
        };
        retries += 1;
        tracing::debug!(%error, retries, "Acquire cut off; retrying with the same lease id");
        tokio::time::sleep(pause).await;
        pause *= 2;
        wait_left = wait_ends.saturating_duration_since(Instant::now());
    }
}

/// An Acquire that may have been cut off rather than refused: the server, or the way to it, went
/// away. That is UNAVAILABLE (the server's, or tonic's for a connection it could not make), a
/// status tonic made of a connection that broke mid-call (UNKNOWN "error reading a body from
/// connection": such a status carries the transport's error as its source, which a status the
/// server sent never does), or a stream that ended without its answer. Any other error is the
/// server's answer, and would be again.
fn is_cut_off(error: &ClientError) -> bool {
    match error {
        ClientError::Status(status) => {
            status.code() == tonic::Code::Unavailable || std::error::Error::source(status).is_some()
        }
        ClientError::Protocol(_) => true,
        _ => false,
    }
}

/// Whether an acquisition that ended in `error` may have left a grant of its id: every error but
/// the refusals the server makes before anything is granted (a malformed request, a limit other
/// than the one in force).
fn may_have_granted(error: &ClientError) -> bool {
    match error {
        ClientError::LimitMismatch { .. } => false,
        ClientError::Status(status) => !matches!(
            status.code(),
            tonic::Code::InvalidArgument | tonic::Code::OutOfRange
        ),
        _ => true,
    }
}

/// Releases the lease id of an acquisition that will not hand a grant over, whose call is
/// already cancelled: a grant that raced the give-up ends now (the server never releases a grant
/// of the caller's own id by itself), and one still on its way from a waiter that had not yet
/// seen the cancellation is refused (a released id grants nothing for a minute). Best effort.
async fn give_up(client: &LeaseClient, name: &str, lease_id: &str, why: &'static str) {
    release_given_up(client, name, lease_id, why).await;
}

/// One Release of a given-up lease id: true if it ended a grant.
async fn release_given_up(client: &LeaseClient, name: &str, lease_id: &str, why: &str) -> bool {
    match tokio::time::timeout(GIVE_UP_RELEASE_TIMEOUT, client.release(name, lease_id)).await {
        Ok(Ok(released)) => {
            tracing::debug!(%name, released, "{why}: released its lease id");
            released
        }
        Ok(Err(error)) => {
            tracing::warn!(%name, %error, "{why}, and releasing its lease id failed: a grant that raced it expires at its TTL");
            false
        }
        Err(_elapsed) => {
            tracing::warn!(%name, "{why}, and releasing its lease id timed out: a grant that raced it expires at its TTL");
            false
        }
    }
}

/// Reads one Acquire call to its terminal message.
async fn read_acquire(client: &LeaseClient, request: AcquireRequest) -> AcquireOutcome {
    let requested_limit = request.limit;
    let shared = request.shared;
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
                    shared,
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
/// force (`FAILED_PRECONDITION`, which only Acquire answers) gets its own variant. The other
/// `FAILED_PRECONDITION`s are about the lease id (released lately, or its wait replaced by a
/// retry) and name the field first: they stay statuses.
fn acquire_error(status: tonic::Status, requested_limit: u32) -> ClientError {
    match status.code() {
        tonic::Code::FailedPrecondition if !status.message().starts_with("lease_id") => {
            ClientError::LimitMismatch {
                requested: requested_limit,
                message: status.message().to_owned(),
            }
        }
        _ => ClientError::Status(status),
    }
}

/// A duration as the wire's milliseconds (saturating).
fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::{
        collections::VecDeque,
        sync::{Arc, Mutex},
    };

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

    #[test]
    fn lease_ids_are_32_hex_digits_and_new_each_time() {
        let ids: Vec<String> = (0..100).map(|_| new_lease_id()).collect();
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
                "{id}"
            );
        }
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }

    #[test]
    fn only_cut_off_calls_are_retried_and_refusals_leave_nothing_to_release() {
        let status = |code| ClientError::Status(tonic::Status::new(code, "x"));
        assert!(is_cut_off(&status(tonic::Code::Unavailable)));
        assert!(is_cut_off(&ClientError::Protocol("no answer".into())));
        // What tonic makes of a connection that broke under a call.
        let broken = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let broken = tonic::Status::from_error(Box::new(broken));
        assert_eq!(broken.code(), tonic::Code::Unknown);
        assert!(is_cut_off(&ClientError::Status(broken)));
        for code in [
            tonic::Code::Internal,
            tonic::Code::InvalidArgument,
            tonic::Code::ResourceExhausted,
            tonic::Code::PermissionDenied,
            tonic::Code::DeadlineExceeded,
        ] {
            assert!(!is_cut_off(&status(code)), "{code:?}");
        }
        let mismatch = ClientError::LimitMismatch {
            requested: 2,
            message: String::new(),
        };
        assert!(!may_have_granted(&mismatch));
        assert!(!may_have_granted(&status(tonic::Code::InvalidArgument)));
        assert!(may_have_granted(&status(tonic::Code::Unavailable)));
        assert!(may_have_granted(&status(tonic::Code::PermissionDenied)));
        assert!(may_have_granted(&ClientError::Protocol("no answer".into())));
    }

    /// How a scripted attempt ends.
    enum Try {
        /// Answered after `after`.
        Answered { after: Duration },
        /// Fails with `code` after `after`.
        Fails { code: tonic::Code, after: Duration },
        /// Ends without an answer after `after` (a stream that ended early).
        NoAnswer { after: Duration },
        /// Never ends.
        Hangs,
    }

    /// The attempts [`with_retries`] made: when each started, with which wait.
    type Made = Arc<Mutex<Vec<(Duration, Duration)>>>;

    /// Runs [`with_retries`] with a wait of `wait` over `script` (then hangs); returns its
    /// result, when it ended and the attempts made, as offsets from the start.
    async fn run_script(
        wait: Duration,
        script: impl IntoIterator<Item = Try>,
    ) -> (
        Result<u32, ClientError>,
        Duration,
        Vec<(Duration, Duration)>,
    ) {
        let start = Instant::now();
        let script = Arc::new(Mutex::new(script.into_iter().collect::<VecDeque<Try>>()));
        let made: Made = Arc::default();
        let mut answers = 0;
        let result = with_retries(wait, |wait_left| {
            made.lock().unwrap().push((start.elapsed(), wait_left));
            let next = script.lock().unwrap().pop_front().unwrap_or(Try::Hangs);
            answers += 1;
            let number = answers;
            async move {
                match next {
                    Try::Answered { after } => {
                        tokio::time::sleep(after).await;
                        Ok(number)
                    }
                    Try::Fails { code, after } => {
                        tokio::time::sleep(after).await;
                        Err(ClientError::Status(tonic::Status::new(code, "scripted")))
                    }
                    Try::NoAnswer { after } => {
                        tokio::time::sleep(after).await;
                        Err(ClientError::Protocol("ended without an answer".into()))
                    }
                    Try::Hangs => std::future::pending().await,
                }
            }
        })
        .await;
        let made = made.lock().unwrap().clone();
        (result, start.elapsed(), made)
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    /// A call cut off is retried after 100, then 200 ms, each time with the wait that is left;
    /// the answer of the third try is the acquisition's.
    #[tokio::test(start_paused = true)]
    async fn cut_off_calls_are_retried_with_the_wait_left() {
        let unavailable = |after| Try::Fails {
            code: tonic::Code::Unavailable,
            after,
        };
        let script = [
            unavailable(ms(1_000)),
            Try::NoAnswer { after: ms(500) },
            Try::Answered { after: ms(50) },
        ];
        let (result, ended, made) = run_script(ms(10_000), script).await;
        assert_eq!(result.unwrap(), 3);
        assert_eq!(
            made,
            [
                (ms(0), ms(10_000)),
                // 1 s in the first try, 100 ms of pause.
                (ms(1_100), ms(8_900)),
                // 500 ms in the second, 200 ms of pause.
                (ms(1_800), ms(8_200)),
            ]
        );
        assert_eq!(ended, ms(1_850));
    }

    /// At most 3 retries (100, 200, 400 ms apart), then the last error is the answer; a retry
    /// after the wait is spent tries once (wait 0).
    #[tokio::test(start_paused = true)]
    async fn retries_are_bounded_and_a_retry_past_the_wait_tries_once() {
        let unavailable = || Try::Fails {
            code: tonic::Code::Unavailable,
            after: ms(100),
        };
        let script = [unavailable(), unavailable(), unavailable(), unavailable()];
        let (result, ended, made) = run_script(ms(250), script).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ClientError::Status(s) if s.code() == tonic::Code::Unavailable),
            "{error:?}"
        );
        assert_eq!(
            made,
            [
                (ms(0), ms(250)),
                (ms(200), ms(50)),
                (ms(500), ms(0)),
                (ms(1_000), ms(0)),
            ]
        );
        assert_eq!(ended, ms(1_100));
    }

    /// Errors that are the server's answer (INTERNAL here) are not retried.
    #[tokio::test(start_paused = true)]
    async fn other_errors_are_not_retried() {
        let script = [Try::Fails {
            code: tonic::Code::Internal,
            after: ms(20),
        }];
        let (result, ended, made) = run_script(ms(5_000), script).await;
        assert!(matches!(
            result.unwrap_err(),
            ClientError::Status(s) if s.code() == tonic::Code::Internal
        ));
        assert_eq!((made.len(), ended), (1, ms(20)));
    }

    /// A call that nobody answers is given up 10 s after its wait, with DEADLINE_EXCEEDED, and
    /// not retried.
    #[tokio::test(start_paused = true)]
    async fn an_unanswered_call_ends_after_its_wait_and_the_slack() {
        let (result, ended, made) = run_script(ms(3_000), [Try::Hangs]).await;
        assert!(matches!(
            result.unwrap_err(),
            ClientError::Status(s) if s.code() == tonic::Code::DeadlineExceeded
        ));
        assert_eq!((made.len(), ended), (1, ms(3_000) + ANSWER_SLACK));
    }
}
