//! [`LeaseGuard`]: one held lease, kept alive over a `Renew` stream by a background task.

use std::{fmt, time::Duration};

use tokio::{
    sync::{mpsc, oneshot, watch},
    task::JoinHandle,
    time::{Instant, sleep_until, timeout_at},
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::{ClientError, GrantedLease, GrpcClient, LeaseClient};
use crate::proto::{RenewRequest, RenewResponse, renew_response};

/// Why a [`LeaseGuard`] stopped trusting its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// A renewal answered `lost`: the lease expired, was released, or is held by someone else.
    Lost(String),
    /// No renewal succeeded in time: the lease may expire on the server before we hear back, so
    /// the holder must assume it is gone before anyone else can be granted it.
    Unreachable(String),
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Lost(reason) => write!(f, "lease lost: {reason}"),
            LostReason::Unreachable(error) => {
                write!(f, "could not renew before the lease could expire: {error}")
            }
        }
    }
}

/// A held lease. A background task renews it at a third of its TTL over one `Renew` stream;
/// [`lost`](Self::lost) fires when a renewal answers `lost`, or when no renewal succeeded early
/// enough to be sure the lease is still ours. [`release`](Self::release) ends it; dropping the
/// guard releases it in the background.
#[derive(Debug)]
pub struct LeaseGuard {
    client: LeaseClient,
    name: String,
    lease_id: String,
    fencing_token: u64,
    ttl: Duration,
    shared: bool,
    lost: watch::Receiver<Option<LostReason>>,
    stop_keepalive: Option<oneshot::Sender<()>>,
    keepalive: JoinHandle<()>,
}

impl LeaseGuard {
    /// Starts keeping `grant` alive. `requested_at` is when the Acquire request was sent: the
    /// server's expiry is at least one TTL after it.
    pub(super) fn start(client: LeaseClient, grant: GrantedLease, requested_at: Instant) -> Self {
        let (lost_sender, lost) = watch::channel(None);
        let (stop_keepalive, stopped) = oneshot::channel();
        let renewer = GrpcRenewer {
            grpc: client.grpc(),
            request: RenewRequest {
                name: grant.name.clone(),
                lease_id: grant.lease_id.clone(),
                ttl_ms: 0,
            },
            stream: None,
        };
        let keepalive = tokio::spawn(
            Keepalive {
                renewer,
                name: grant.name.clone(),
                ttl: grant.ttl,
            }
            .run(requested_at, lost_sender, stopped),
        );
        LeaseGuard {
            client,
            name: grant.name,
            lease_id: grant.lease_id,
            fencing_token: grant.fencing_token,
            ttl: grant.ttl,
            shared: grant.shared,
            lost,
            stop_keepalive: Some(stop_keepalive),
            keepalive,
        }
    }

    /// The lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token: pass it with every write to the protected resource.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The lease's secret id (for handing the lease to a child process, as `leased run` does).
    pub fn lease_id(&self) -> &str {
        &self.lease_id
    }

    /// The TTL the lease was granted with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// True for a shared (read) grant of a read-write lease.
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// The metadata a call to a fenced service carries (`leased-lease-name` and
    /// `leased-fencing-token`): the service's fencing middleware refuses the call once a newer
    /// grant of the name has called it. Add it to a request with
    /// [`fenced_request`](Self::fenced_request), or to every call of a client with
    /// [`fencing_interceptor`](Self::fencing_interceptor).
    pub fn fencing_metadata(&self) -> tonic::metadata::MetadataMap {
        self.fencing_interceptor().metadata()
    }

    /// `message` as a request that carries this grant's fencing metadata:
    /// `client.put(guard.fenced_request(PutRequest { .. })).await`.
    pub fn fenced_request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        self.fencing_interceptor().attach(request.metadata_mut());
        request
    }

    /// A tonic interceptor that adds this grant's fencing metadata to every call of a client:
    /// `FooClient::with_interceptor(channel, guard.fencing_interceptor())`.
    pub fn fencing_interceptor(&self) -> crate::fencing::FencingInterceptor {
        crate::fencing::FencingInterceptor::new(&self.name, self.fencing_token)
    }

    /// True once the lease must no longer be trusted.
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    /// Why the lease must no longer be trusted; `None` while it is held.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.lost.borrow().clone()
    }

    /// Resolves when the lease must no longer be trusted; never, while it is held.
    pub async fn lost(&self) -> LostReason {
        let mut lost = self.lost.clone();
        // The watch's read guard is not `Send`: cloned out of it before any other `.await`, so
        // that a spawned task can await the loss.
        let reason = lost
            .wait_for(Option::is_some)
            .await
            .map(|reason| reason.clone());
        match reason {
            Ok(reason) => reason.expect("waited for Some"),
            // The keepalive stopped without losing the lease (released): nothing will fire.
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops the keepalive and releases the lease; false if it was no longer ours.
    pub async fn release(mut self) -> Result<bool, ClientError> {
        self.stop();
        let released = self.client.release(&self.name, &self.lease_id).await;
        // Released (or tried): nothing left for Drop to do.
        self.lease_id.clear();
        released
    }

    fn stop(&mut self) {
        if let Some(stop) = self.stop_keepalive.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.stop();
        self.keepalive.abort();
        if self.lease_id.is_empty() || self.is_lost() {
            return;
        }
        // Release in the background so that the next holder need not wait for the TTL.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let (name, lease_id) = (self.name.clone(), std::mem::take(&mut self.lease_id));
            runtime.spawn(async move {
                if let Err(error) = client.release(&name, &lease_id).await {
                    tracing::warn!(%name, %error, "could not release a dropped lease; it expires at its TTL");
                }
            });
        }
    }
}

/// One renewal of the lease: the only thing the keepalive needs from the network. Production
/// renews over gRPC ([`GrpcRenewer`]); the unit tests script the answers, so that the timing of
/// [`Keepalive::run`] can be checked on tokio's paused clock without real I/O.
trait Renewer {
    /// Asks the server to renew the lease once and returns its answer.
    async fn renew(&mut self) -> Result<renew_response::Result, ClientError>;
}

/// The renewing task of one guard: when to renew, and when to stop trusting the lease.
struct Keepalive<R> {
    renewer: R,
    /// The lease's name, for log lines.
    name: String,
    ttl: Duration,
}

impl<R: Renewer> Keepalive<R> {
    /// Renews at a third of the TTL until `stopped` fires, or reports on `lost` why the lease can
    /// no longer be trusted. `requested_at` is when the Acquire request was sent.
    async fn run(
        mut self,
        requested_at: Instant,
        lost: watch::Sender<Option<LostReason>>,
        mut stopped: oneshot::Receiver<()>,
    ) {
        // Trust ends a little before the earliest moment the server could expire the lease,
        // leaving room for clocks that run at slightly different rates.
        let safety_margin = self.ttl / 20;
        let renew_period = self.ttl / 3;
        let retry_delay = (self.ttl / 20).max(Duration::from_millis(20));
        let mut trusted_until = requested_at + self.ttl - safety_margin;
        let mut next_renewal = requested_at + renew_period;
        let mut last_error = String::from("no renewal answered");
        loop {
            // Biased, in this order: once trust has ended, no renewal may start (a renewal sent
            // now could only be answered after the moment we promised to stop trusting).
            tokio::select! {
                biased;
                _ = &mut stopped => return,
                _ = sleep_until(trusted_until) => {
                    let _ = lost.send(Some(LostReason::Unreachable(last_error)));
                    return;
                }
                _ = sleep_until(next_renewal) => {}
            }
            let sent_at = Instant::now();
            let answer = tokio::select! {
                biased;
                _ = &mut stopped => return,
                answer = timeout_at(trusted_until, self.renewer.renew()) => answer,
            };
            match answer {
                Ok(Ok(renew_response::Result::Renewed(renewed))) => {
                    let ttl = Duration::from_millis(renewed.ttl_ms.max(0) as u64);
                    trusted_until = sent_at + ttl - ttl / 20;
                    next_renewal = sent_at + renew_period;
                }
                Ok(Ok(renew_response::Result::Lost(gone))) => {
                    let _ = lost.send(Some(LostReason::Lost(gone.reason)));
                    return;
                }
                Ok(Err(error)) => {
                    last_error = error.to_string();
                    tracing::debug!(name = %self.name, %last_error, "renewal failed; retrying");
                    next_renewal = Instant::now() + retry_delay;
                }
                // Trust ended while the renewal was in flight: the lease is lost now, whatever the
                // answer will say. Returning also drops the renewer and its stream, so that a late
                // reply can never be read as the answer to a later request.
                Err(_elapsed) => {
                    let reason = "renewal timed out".to_owned();
                    let _ = lost.send(Some(LostReason::Unreachable(reason)));
                    return;
                }
            }
        }
    }
}

/// Renewals over one gRPC `Renew` stream, opened on first use and reopened after an error.
struct GrpcRenewer {
    grpc: GrpcClient,
    request: RenewRequest,
    /// The open Renew stream; `None` until the first renewal and after an error.
    stream: Option<(mpsc::Sender<RenewRequest>, Streaming<RenewResponse>)>,
}

impl Renewer for GrpcRenewer {
    async fn renew(&mut self) -> Result<renew_response::Result, ClientError> {
        let answer = self.renew_once().await;
        if answer.is_err() {
            // A stream that failed once cannot be trusted to carry the next request.
            self.stream = None;
        }
        answer
    }
}

impl GrpcRenewer {
    /// One renewal over the stream, opening it first if needed.
    async fn renew_once(&mut self) -> Result<renew_response::Result, ClientError> {
        if self.stream.is_none() {
            let (sender, receiver) = mpsc::channel(1);
            let responses = self
                .grpc
                .renew(ReceiverStream::new(receiver))
                .await?
                .into_inner();
            self.stream = Some((sender, responses));
        }
        let (sender, responses) = self.stream.as_mut().expect("opened above");
        sender
            .send(self.request.clone())
            .await
            .map_err(|_| ClientError::Protocol("Renew stream closed".into()))?;
        match responses.message().await? {
            Some(RenewResponse {
                result: Some(result),
                ..
            }) => Ok(result),
            Some(_) => Err(ClientError::Protocol("empty RenewResponse".into())),
            None => Err(ClientError::Protocol("Renew stream ended".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::VecDeque,
        sync::{Arc, Mutex},
    };

    use super::*;
    use crate::proto::{Lost, Renewed};

    /// The TTL of every test lease: renewals every 1 s, a 150 ms safety margin and retry delay.
    const TTL: Duration = Duration::from_secs(3);

    /// What the scripted server does with one renewal.
    enum Answer {
        /// Renews for `TTL`, answering after `delay`.
        Renewed { delay: Duration },
        /// Answers that the lease is gone.
        Lost,
        /// Fails, as a broken stream or an error status would.
        Error,
        /// Never answers: the network went silent.
        Hang,
    }

    /// A [`Renewer`] that answers from a script (then hangs) and records when each call was made.
    struct ScriptedRenewer {
        script: VecDeque<Answer>,
        calls: Arc<Mutex<Vec<Instant>>>,
    }

    impl Renewer for ScriptedRenewer {
        async fn renew(&mut self) -> Result<renew_response::Result, ClientError> {
            self.calls.lock().unwrap().push(Instant::now());
            match self.script.pop_front().unwrap_or(Answer::Hang) {
                Answer::Renewed { delay } => {
                    tokio::time::sleep(delay).await;
                    Ok(renew_response::Result::Renewed(Renewed {
                        ttl_ms: TTL.as_millis() as i64,
                        ..Renewed::default()
                    }))
                }
                Answer::Lost => Ok(renew_response::Result::Lost(Lost {
                    reason: "expired or released".into(),
                })),
                Answer::Error => Err(ClientError::Protocol("scripted failure".into())),
                Answer::Hang => std::future::pending().await,
            }
        }
    }

    /// A [`Renewer`] shaped like one Renew stream: replies come back in the order the requests
    /// were sent, each `delay` after its request (then at once). A reply reaches the stream's
    /// buffer at its time and is read one scheduling step later; a renewal given up in between
    /// (its future dropped on a timeout) leaves the reply buffered, and the next renewal reads it
    /// first and at once, as over a real stream that was not discarded.
    struct InOrderStream {
        delays: VecDeque<Duration>,
        /// The replies sent but not yet read, oldest first: when each arrives, and whether it has.
        in_flight: VecDeque<(Instant, bool)>,
    }

    impl Renewer for InOrderStream {
        async fn renew(&mut self) -> Result<renew_response::Result, ClientError> {
            let delay = self.delays.pop_front().unwrap_or(Duration::ZERO);
            self.in_flight.push_back((Instant::now() + delay, false));
            let (arrives, buffered) = self.in_flight[0];
            if !buffered {
                sleep_until(arrives).await;
                self.in_flight[0].1 = true;
                tokio::task::yield_now().await;
            }
            self.in_flight.pop_front();
            Ok(renew_response::Result::Renewed(Renewed {
                ttl_ms: TTL.as_millis() as i64,
                ..Renewed::default()
            }))
        }
    }

    /// A keepalive running in the background, and what the tests observe of it.
    struct Running {
        calls: Arc<Mutex<Vec<Instant>>>,
        lost: watch::Receiver<Option<LostReason>>,
        stop: oneshot::Sender<()>,
        task: JoinHandle<()>,
    }

    impl Running {
        /// Starts a keepalive for a lease of `TTL` whose Acquire was sent at `requested_at`.
        fn start(requested_at: Instant, script: impl IntoIterator<Item = Answer>) -> Self {
            let calls = Arc::new(Mutex::new(Vec::new()));
            let renewer = ScriptedRenewer {
                script: script.into_iter().collect(),
                calls: calls.clone(),
            };
            let keepalive = Keepalive {
                renewer,
                name: "test".into(),
                ttl: TTL,
            };
            let (lost_sender, lost) = watch::channel(None);
            let (stop, stopped) = oneshot::channel();
            let task = tokio::spawn(keepalive.run(requested_at, lost_sender, stopped));
            Running {
                calls,
                lost,
                stop,
                task,
            }
        }

        /// The instants of the renewals so far, as offsets from `start`.
        fn calls_since(&self, start: Instant) -> Vec<Duration> {
            let calls = self.calls.lock().unwrap();
            calls.iter().map(|call| *call - start).collect()
        }

        /// Waits (in virtual time) for the loss; returns it and when it fired.
        async fn lost(&mut self) -> (Instant, LostReason) {
            let reason = self.lost.wait_for(Option::is_some).await.unwrap().clone();
            (Instant::now(), reason.unwrap())
        }
    }

    /// Shorthand for the many millisecond instants below.
    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    /// Renewals that succeed are sent every third of the TTL, counted from each renewal's send.
    #[tokio::test(start_paused = true)]
    async fn renews_every_third_of_the_ttl() {
        let start = Instant::now();
        let renewed = || Answer::Renewed { delay: ms(50) };
        let running = Running::start(start, [renewed(), renewed(), renewed()]);
        sleep_until(start + ms(3500)).await;
        // The 50 ms answer delay does not shift the schedule: the period counts from the send.
        assert_eq!(running.calls_since(start), [ms(1000), ms(2000), ms(3000)]);
        assert!(running.lost.borrow().is_none());
    }

    /// A renewal answered `lost` reports `Lost` at that moment, without waiting for the TTL.
    #[tokio::test(start_paused = true)]
    async fn a_lost_answer_is_reported_at_once() {
        let start = Instant::now();
        let mut running = Running::start(start, [Answer::Lost]);
        let (lost_at, reason) = running.lost().await;
        assert_eq!(lost_at - start, ms(1000));
        assert_eq!(reason, LostReason::Lost("expired or released".into()));
    }

    /// With no answer at all, trust ends at `requested_at + ttl - ttl/20`: the first window counts
    /// from when the Acquire was sent, not from when the keepalive started.
    #[tokio::test(start_paused = true)]
    async fn silence_ends_trust_at_the_first_windows_end() {
        let start = Instant::now();
        // The Acquire round trip took 500 ms: the server's TTL started before we heard of it.
        let requested_at = start - ms(500);
        let mut running = Running::start(requested_at, [Answer::Hang]);
        let (lost_at, reason) = running.lost().await;
        assert_eq!(lost_at - requested_at, TTL - TTL / 20);
        assert_eq!(reason, LostReason::Unreachable("renewal timed out".into()));
        assert_eq!(running.calls_since(requested_at)[0], ms(1000));
    }

    /// After an error the keepalive retries every ttl/20; a late success extends trust from when
    /// that renewal was sent, not from when its answer arrived.
    #[tokio::test(start_paused = true)]
    async fn errors_are_retried_and_trust_counts_from_the_send() {
        let start = Instant::now();
        let script = [
            Answer::Error,
            Answer::Error,
            Answer::Renewed { delay: ms(100) }, // sent at 1.3 s, answered at 1.4 s
            Answer::Hang,
        ];
        let mut running = Running::start(start, script);
        let (lost_at, reason) = running.lost().await;
        // 1.3 s + 3 s - 150 ms; counting from the answer would give 4.25 s.
        assert_eq!(lost_at - start, ms(4150));
        assert_eq!(reason, LostReason::Unreachable("renewal timed out".into()));
        // The renewal sent at 2.3 s is still in flight when trust ends: nothing is sent after it.
        let calls = running.calls_since(start);
        assert_eq!(calls, [ms(1000), ms(1150), ms(1300), ms(2300)]);
    }

    /// A `renewed` that arrives after trust ended is never credited: the loss is reported at
    /// `trusted_until`, although the late reply says renewed and later renewals would be answered
    /// at once. (The old loop sometimes renewed again after the timeout, read the late reply as the
    /// new request's answer and trusted the lease a TTL past its expiry on the server: about one
    /// try in two, so 64 tries catch it all but surely.)
    #[tokio::test(start_paused = true)]
    async fn a_renewal_answered_after_the_trust_ended_still_ends_in_a_loss() {
        let start = Instant::now();
        let mut stops = Vec::new();
        let mut losses = Vec::new();
        for _ in 0..64 {
            // The first renewal (sent at 1 s) is answered just as trust ends, at 2.85 s.
            let renewer = InOrderStream {
                delays: [ms(1850)].into(),
                in_flight: VecDeque::new(),
            };
            let keepalive = Keepalive {
                renewer,
                name: "late".into(),
                ttl: TTL,
            };
            let (lost_sender, lost) = watch::channel(None);
            let (stop, stopped) = oneshot::channel();
            tokio::spawn(keepalive.run(start, lost_sender, stopped));
            stops.push(stop);
            losses.push(lost);
        }
        for mut lost in losses {
            // Bounded: the old loop went on renewing (and trusting) for ever.
            let reason = timeout_at(start + 3 * TTL, lost.wait_for(Option::is_some))
                .await
                .expect("still trusted after three TTLs")
                .unwrap()
                .clone();
            assert_eq!(Instant::now() - start, TTL - TTL / 20, "reported late");
            assert_eq!(
                reason,
                Some(LostReason::Unreachable("renewal timed out".into()))
            );
        }
        drop(stops);
    }

    /// Stopping (the release path) ends the keepalive mid-renewal, and no loss ever fires.
    #[tokio::test(start_paused = true)]
    async fn stopping_ends_the_keepalive_without_a_loss() {
        let start = Instant::now();
        let running = Running::start(start, [Answer::Hang]);
        sleep_until(start + ms(1500)).await; // the first renewal is in flight
        running.stop.send(()).unwrap();
        running.task.await.unwrap();
        assert_eq!(Instant::now() - start, ms(1500));
        // The task is gone with its sender: the guard's `lost()` can never resolve.
        assert!(running.lost.borrow().is_none());
        assert!(running.lost.has_changed().is_err());
    }
}
