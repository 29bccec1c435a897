//! The Rust client against a fake `LeaseService` that misbehaves on purpose, over real gRPC on
//! loopback: faults a real server on Redis cannot be made to produce on demand (a renewal answered
//! late, renewals refused right after a grant). Everything else about the client is tested
//! against the real server in `tests/client.rs`.

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use leased::{
    client::{AcquireOptions, Acquired, ClientError, LeaseClient, LostReason},
    proto::{
        AcquireRequest, AcquireResponse, CheckTokenRequest, CheckTokenResponse, DescribeRequest,
        DescribeResponse, Granted, ReleaseRequest, ReleaseResponse, RenewRequest, RenewResponse,
        Renewed, Waiting, WatchEvent, WatchRequest, acquire_response,
        lease_service_server::{LeaseService, LeaseServiceServer},
        renew_response,
    },
};
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status, Streaming};

type Replies<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// How the fake answers renewals.
#[derive(Clone, Copy)]
enum Renewals {
    /// Every Renew call fails with UNAVAILABLE.
    Refused,
    /// In order, one reply per request; the first stream's first reply comes `delay` late.
    FirstAnsweredLate { delay: Duration },
}

/// A `LeaseService` that grants every Acquire (after `grant_after`, sending `waiting` first),
/// renews as `renewals` says and records every Release.
struct FakeLeaseService {
    grant_after: Duration,
    renewals: Renewals,
    next_token: AtomicU64,
    renew_streams: AtomicU64,
    released: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl LeaseService for FakeLeaseService {
    type AcquireStream = Replies<AcquireResponse>;
    type RenewStream = Replies<RenewResponse>;
    type WatchStream = Replies<WatchEvent>;

    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<Response<Self::AcquireStream>, Status> {
        let request = request.into_inner();
        let token = self.next_token.fetch_add(1, Ordering::SeqCst) + 1;
        let granted = Granted {
            name: request.name,
            lease_id: format!("fake-lease-{token}"),
            fencing_token: token,
            ttl_ms: request.ttl_ms,
            expires_at: None,
        };
        let grant_after = self.grant_after;
        let (sender, receiver) = mpsc::channel(2);
        tokio::spawn(async move {
            if !grant_after.is_zero() {
                let waiting = acquire_response::Result::Waiting(Waiting {
                    position: 1,
                    ..Waiting::default()
                });
                let _ = sender.send(Ok(reply(waiting))).await;
                tokio::time::sleep(grant_after).await;
            }
            let _ = sender
                .send(Ok(reply(acquire_response::Result::Granted(granted))))
                .await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn renew(
        &self,
        request: Request<Streaming<RenewRequest>>,
    ) -> Result<Response<Self::RenewStream>, Status> {
        let delay = match self.renewals {
            Renewals::Refused => return Err(Status::unavailable("renewals refused on purpose")),
            Renewals::FirstAnsweredLate { delay } => delay,
        };
        let first_stream = self.renew_streams.fetch_add(1, Ordering::SeqCst) == 0;
        let mut requests = request.into_inner();
        let (sender, receiver) = mpsc::channel(8);
        tokio::spawn(async move {
            let mut first = first_stream;
            // One request at a time: replies leave in the order the requests came, as leased's do.
            while let Some(Ok(request)) = requests.next().await {
                if std::mem::take(&mut first) {
                    tokio::time::sleep(delay).await;
                }
                let renewed = renew_response::Result::Renewed(Renewed {
                    ttl_ms: 1_000,
                    ..Renewed::default()
                });
                let answer = RenewResponse {
                    name: request.name,
                    result: Some(renewed),
                };
                if sender.send(Ok(answer)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let lease_id = request.into_inner().lease_id;
        self.released.lock().unwrap().push(lease_id);
        Ok(Response::new(ReleaseResponse { released: true }))
    }

    async fn describe(
        &self,
        _: Request<DescribeRequest>,
    ) -> Result<Response<DescribeResponse>, Status> {
        Err(Status::unimplemented("not faked"))
    }

    async fn watch(&self, _: Request<WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("not faked"))
    }

    async fn check_token(
        &self,
        _: Request<CheckTokenRequest>,
    ) -> Result<Response<CheckTokenResponse>, Status> {
        Err(Status::unimplemented("not faked"))
    }
}

fn reply(result: acquire_response::Result) -> AcquireResponse {
    AcquireResponse {
        result: Some(result),
    }
}

/// Serves `service` on a loopback port; returns the endpoint and the Release log.
async fn serve(grant_after: Duration, renewals: Renewals) -> (String, Arc<Mutex<Vec<String>>>) {
    let released = Arc::new(Mutex::new(Vec::new()));
    let service = FakeLeaseService {
        grant_after,
        renewals,
        next_token: AtomicU64::new(0),
        renew_streams: AtomicU64::new(0),
        released: released.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LeaseServiceServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (format!("http://{address}"), released)
}

/// A grant that came after a long wait is confirmed by one renewal before it is trusted; when
/// that renewal fails, `acquire` answers the error and the lease is released, not left held by
/// nobody until its TTL. (The old client returned the error and forgot the lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_confirming_renewal_fails_is_released() {
    let (endpoint, released) = serve(Duration::from_millis(600), Renewals::Refused).await;
    let client = LeaseClient::connect(endpoint).await.unwrap();
    let options = AcquireOptions::new(Duration::from_millis(900)).wait(Duration::from_secs(10));
    let error = client.acquire("confirm", options).await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Status(s) if s.code() == tonic::Code::Unavailable),
        "{error:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while released.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*released.lock().unwrap(), ["fake-lease-1"]);
}

/// A renewal answered after the guard's trust ended (TTL 1 s: trust until 950 ms after the
/// Acquire was sent; the first renewal, sent at about 333 ms, is answered at about 1,233 ms) ends
/// in a loss at the end of the trust, although the late answer says renewed and every later
/// renewal would be answered at once: never in a longer trust.
///
/// Over a real connection the old client failed this only when the late reply landed in the
/// narrow moment between its timeout and its next renewal; the paused-clock test in
/// `src/client/guard.rs` reproduces that moment every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_answered_after_the_trust_ended_ends_in_a_loss() {
    let late = Renewals::FirstAnsweredLate {
        delay: Duration::from_millis(900),
    };
    let (endpoint, _) = serve(Duration::ZERO, late).await;
    let client = LeaseClient::connect(endpoint).await.unwrap();
    let requested_at = Instant::now();
    let options = AcquireOptions::new(Duration::from_secs(1));
    let Acquired::Granted(guard) = client.acquire("late", options).await.unwrap() else {
        panic!("the fake grants every Acquire");
    };
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("still trusted 5 s after a 1 s lease's last answered renewal");
    let lost_after = requested_at.elapsed();
    println!("a late renewal: loss reported {lost_after:?} after the Acquire was sent (TTL 1 s)");
    assert_eq!(reason, LostReason::Unreachable("renewal timed out".into()));
    assert!(lost_after >= Duration::from_millis(950), "{lost_after:?}");
    // Wide: a loaded 2-core machine may run the timer late, but not by a renewal period.
    assert!(lost_after < Duration::from_millis(1_300), "{lost_after:?}");
}
