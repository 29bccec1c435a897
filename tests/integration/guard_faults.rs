//! The Rust client against a fake `LeaseService` that misbehaves on purpose, over real gRPC on
//! loopback: faults a real server on Redis cannot be made to produce on demand (a renewal answered
//! late, renewals refused right after a grant, Acquire calls cut off or failing, a wait that is
//! never answered). Everything else about the client is tested against the real server in
//! `tests/integration/client.rs`.

use std::{
    collections::VecDeque,
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
        DescribeResponse, Granted, NotGranted, ReleaseRequest, ReleaseResponse, RenewRequest,
        RenewResponse, Renewed, Waiting, WatchEvent, WatchRequest, acquire_response,
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

/// How the fake answers one Acquire call.
#[derive(Clone, Copy, Debug)]
enum AcquireAnswer {
    /// Grants (after `grant_after`, sending `waiting` first).
    Grant,
    /// Fails with this code at once.
    Fail(tonic::Code),
    /// Sends `waiting`, then ends the stream without a terminal message.
    EndWithoutAnswer,
    /// Sends `waiting`, then nothing: a wait nobody answers.
    Silent,
    /// Sends `waiting`, then `not_granted`.
    NotGranted,
}

/// What the fake saw, in order: `acquire <lease_id> wait_ms=<ms>`, `acquire cancelled`,
/// `release <lease_id>`.
type Seen = Arc<Mutex<Vec<String>>>;

/// A `LeaseService` that answers each Acquire as `acquires` says (then grants), renews as
/// `renewals` says, and records every Acquire and Release, and every Acquire stream the client
/// dropped, in `seen`.
struct FakeLeaseService {
    grant_after: Duration,
    renewals: Renewals,
    acquires: Mutex<VecDeque<AcquireAnswer>>,
    next_token: AtomicU64,
    renew_streams: AtomicU64,
    released: Arc<Mutex<Vec<String>>>,
    seen: Seen,
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
        self.seen.lock().unwrap().push(format!(
            "acquire {} wait_ms={}",
            request.lease_id, request.wait_ms
        ));
        let answer = self
            .acquires
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(AcquireAnswer::Grant);
        if let AcquireAnswer::Fail(code) = answer {
            return Err(Status::new(code, "failed on purpose"));
        }
        let token = self.next_token.fetch_add(1, Ordering::SeqCst) + 1;
        // The caller's own id, as leased grants it; the fake's own for an older client.
        let lease_id = match request.lease_id.is_empty() {
            true => format!("fake-lease-{token}"),
            false => request.lease_id,
        };
        let granted = Granted {
            name: request.name,
            lease_id,
            fencing_token: token,
            ttl_ms: request.ttl_ms,
            expires_at: None,
        };
        let grant_after = match answer {
            AcquireAnswer::Grant => self.grant_after,
            _ => Duration::from_millis(1),
        };
        let seen = self.seen.clone();
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
            match answer {
                AcquireAnswer::Grant => {
                    let granted = reply(acquire_response::Result::Granted(granted));
                    let _ = sender.send(Ok(granted)).await;
                }
                AcquireAnswer::Silent => {
                    sender.closed().await;
                    seen.lock().unwrap().push("acquire cancelled".into());
                }
                AcquireAnswer::NotGranted => {
                    let busy = acquire_response::Result::NotGranted(NotGranted {
                        holder: "someone".into(),
                        fencing_token: 1,
                        ..NotGranted::default()
                    });
                    let _ = sender.send(Ok(reply(busy))).await;
                }
                AcquireAnswer::EndWithoutAnswer | AcquireAnswer::Fail(_) => {}
            }
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
        self.seen
            .lock()
            .unwrap()
            .push(format!("release {lease_id}"));
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
    let (endpoint, released, _) = serve_acquires(grant_after, renewals, []).await;
    (endpoint, released)
}

/// [`serve`] whose Acquire calls are answered as `acquires` says, in order (then granted); also
/// returns what the fake saw.
async fn serve_acquires(
    grant_after: Duration,
    renewals: Renewals,
    acquires: impl IntoIterator<Item = AcquireAnswer>,
) -> (String, Arc<Mutex<Vec<String>>>, Seen) {
    let released = Arc::new(Mutex::new(Vec::new()));
    let seen = Seen::default();
    let service = FakeLeaseService {
        grant_after,
        renewals,
        acquires: Mutex::new(acquires.into_iter().collect()),
        next_token: AtomicU64::new(0),
        renew_streams: AtomicU64::new(0),
        released: released.clone(),
        seen: seen.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LeaseServiceServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (format!("http://{address}"), released, seen)
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
    // The grant's id, which is the acquisition's own.
    let released = released.lock().unwrap().clone();
    assert_eq!(released.len(), 1, "{released:?}");
    assert!(is_own_lease_id(&released[0]), "{released:?}");
}

/// 32 lowercase hex digits: the id the client makes for each acquisition.
fn is_own_lease_id(lease_id: &str) -> bool {
    lease_id.len() == 32 && lease_id.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// The lease ids and `wait_ms` of the Acquire calls in `seen`, in order.
fn acquires_in(seen: &Seen) -> Vec<(String, i64)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter_map(|line| {
            let (lease_id, wait) = line.strip_prefix("acquire ")?.split_once(" wait_ms=")?;
            Some((lease_id.to_owned(), wait.parse().unwrap()))
        })
        .collect()
}

/// An Acquire cut off (UNAVAILABLE, then a stream that ended without an answer) is sent again
/// with the same lease id and the wait that is left, and the grant of the third call is held
/// with that id; nothing is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_acquire_is_retried_with_its_lease_id_and_the_wait_left() {
    let cut_off = [
        AcquireAnswer::Fail(tonic::Code::Unavailable),
        AcquireAnswer::EndWithoutAnswer,
    ];
    let late = Renewals::FirstAnsweredLate {
        delay: Duration::ZERO,
    };
    let (endpoint, released, seen) = serve_acquires(Duration::ZERO, late, cut_off).await;
    let client = LeaseClient::connect(endpoint).await.unwrap();
    let options = AcquireOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(10));
    let Acquired::Granted(guard) = client.acquire("retried", options).await.unwrap() else {
        panic!("the fake grants the third call");
    };
    let acquires = acquires_in(&seen);
    println!("Acquire calls (lease id, wait_ms): {acquires:?}");
    assert_eq!(acquires.len(), 3, "{acquires:?}");
    let lease_id = &acquires[0].0;
    assert!(is_own_lease_id(lease_id), "{acquires:?}");
    assert!(
        acquires.iter().all(|(id, _)| id == lease_id),
        "{acquires:?}"
    );
    assert_eq!(acquires[0].1, 10_000);
    // Each retry sends what is left of the wait: at least the pauses (100, then 200 ms) less.
    assert!(acquires[1].1 <= 9_900, "{acquires:?}");
    assert!(acquires[2].1 <= acquires[1].1 - 200, "{acquires:?}");
    assert!(acquires[2].1 > 8_000, "{acquires:?}");
    assert_eq!(guard.lease_id(), lease_id);
    assert!(released.lock().unwrap().is_empty());
}

/// At most 3 retries: a server that keeps answering UNAVAILABLE gets 4 calls with one id, the
/// caller gets UNAVAILABLE, and the id is released (the server may have granted it meanwhile).
/// INTERNAL, the server's answer, is not retried, and releases its id too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_bounded_and_a_failed_acquisition_releases_its_id() {
    let unavailable = [AcquireAnswer::Fail(tonic::Code::Unavailable); 5];
    let (endpoint, released, seen) =
        serve_acquires(Duration::ZERO, Renewals::Refused, unavailable).await;
    let client = LeaseClient::connect(endpoint).await.unwrap();
    let started = Instant::now();
    let options = AcquireOptions::new(Duration::from_secs(30));
    let error = client.acquire("down", options).await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Status(s) if s.code() == tonic::Code::Unavailable),
        "{error:?}"
    );
    let acquires = acquires_in(&seen);
    assert_eq!(acquires.len(), 4, "{acquires:?}");
    assert!(
        acquires
            .iter()
            .all(|(id, wait_ms)| id == &acquires[0].0 && *wait_ms == 0)
    );
    // 100 + 200 + 400 ms of pauses.
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(*released.lock().unwrap(), [acquires[0].0.clone()]);

    let internal = [AcquireAnswer::Fail(tonic::Code::Internal)];
    let (endpoint, released, seen) =
        serve_acquires(Duration::ZERO, Renewals::Refused, internal).await;
    let client = LeaseClient::connect(endpoint).await.unwrap();
    let options = AcquireOptions::new(Duration::from_secs(30));
    let error = client.acquire("broken", options).await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Status(s) if s.code() == tonic::Code::Internal),
        "{error:?}"
    );
    let acquires = acquires_in(&seen);
    assert_eq!(acquires.len(), 1, "{acquires:?}");
    assert_eq!(*released.lock().unwrap(), [acquires[0].0.clone()]);
}

/// A retried Acquire that is not granted releases its lease id: the call that was cut off may
/// still wait on a server that has not noticed, and be granted later. One not granted at the
/// first call releases nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_acquire_that_is_not_granted_releases_its_id() {
    let answers = [
        AcquireAnswer::Fail(tonic::Code::Unavailable),
        AcquireAnswer::NotGranted,
        AcquireAnswer::NotGranted,
    ];
    let (endpoint, released, seen) =
        serve_acquires(Duration::ZERO, Renewals::Refused, answers).await;
    let client = LeaseClient::connect(endpoint).await.unwrap();
    let options = AcquireOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(5));
    let answer = client.acquire("busy", options.clone()).await.unwrap();
    assert!(matches!(answer, Acquired::NotGranted(_)), "{answer:?}");
    let acquires = acquires_in(&seen);
    assert_eq!(acquires.len(), 2, "{acquires:?}");
    assert_eq!(*released.lock().unwrap(), [acquires[0].0.clone()]);

    let answer = client.acquire("busy", options).await.unwrap();
    assert!(matches!(answer, Acquired::NotGranted(_)), "{answer:?}");
    assert_eq!(
        released.lock().unwrap().len(),
        1,
        "a first call's not_granted released"
    );
}

/// A caller that gives up a wait (drops the future) cancels the call and releases its lease id,
/// without waiting for an answer: the server sees the Acquire stream dropped and a Release of the
/// id that the call was sent with. (The client cancels first; the two reach the fake's handlers
/// on different tasks, so the order they are recorded in is printed, not asserted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_cancels_the_call_and_releases_its_id() {
    let (endpoint, _, seen) =
        serve_acquires(Duration::ZERO, Renewals::Refused, [AcquireAnswer::Silent]).await;
    let client = LeaseClient::connect(endpoint).await.unwrap();
    let options = AcquireOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(60));
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        client.acquire("given-up", options),
    )
    .await;
    assert!(gave_up.is_err(), "the fake never answers: {gave_up:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.lock().unwrap().len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let acquires = acquires_in(&seen);
    let seen = seen.lock().unwrap().clone();
    println!("the fake saw: {seen:?}");
    assert_eq!(acquires.len(), 1, "{seen:?}");
    let lease_id = &acquires[0].0;
    assert_eq!(seen[0], format!("acquire {lease_id} wait_ms=60000"));
    let mut rest = seen[1..].to_vec();
    rest.sort();
    assert_eq!(
        rest,
        [
            "acquire cancelled".to_owned(),
            format!("release {lease_id}")
        ]
    );
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
