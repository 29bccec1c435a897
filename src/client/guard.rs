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
        let keepalive = tokio::spawn(
            Keepalive {
                grpc: client.grpc(),
                request: RenewRequest {
                    name: grant.name.clone(),
                    lease_id: grant.lease_id.clone(),
                    ttl_ms: 0,
                },
                ttl: grant.ttl,
                stream: None,
            }
            .run(requested_at, lost_sender, stopped),
        );
        LeaseGuard {
            client,
            name: grant.name,
            lease_id: grant.lease_id,
            fencing_token: grant.fencing_token,
            ttl: grant.ttl,
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

    /// True once the lease must no longer be trusted.
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    /// Resolves when the lease must no longer be trusted; never, while it is held.
    pub async fn lost(&self) -> LostReason {
        let mut lost = self.lost.clone();
        match lost.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().expect("waited for Some"),
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

/// The renewing task of one guard.
struct Keepalive {
    grpc: GrpcClient,
    request: RenewRequest,
    ttl: Duration,
    /// The open Renew stream, reopened after an error.
    stream: Option<(mpsc::Sender<RenewRequest>, Streaming<RenewResponse>)>,
}

impl Keepalive {
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
            tokio::select! {
                _ = &mut stopped => return,
                _ = sleep_until(trusted_until) => {
                    let _ = lost.send(Some(LostReason::Unreachable(last_error)));
                    return;
                }
                _ = sleep_until(next_renewal) => {}
            }
            let sent_at = Instant::now();
            let answer = tokio::select! {
                _ = &mut stopped => return,
                answer = timeout_at(trusted_until, self.renew_once()) => answer,
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
                    tracing::debug!(name = %self.request.name, %last_error, "renewal failed; retrying");
                    self.stream = None;
                    next_renewal = Instant::now() + retry_delay;
                }
                // The loop's own timer reports the loss.
                Err(_elapsed) => last_error = "renewal timed out".into(),
            }
        }
    }

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
