//! The checker's clients: each contends for its names through the replicas, holds what it is
//! granted while renewing it on a Renew stream, writes to the fenced resource (an exclusive
//! holder), and records every event; and the GC-pause holder, a client that stops renewing while
//! it holds.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use super::{CLOCK_SLACK, Checker, Event, OwnIdCuts, Rng, WaitOutcome};
use leased::proto::{
    AcquireRequest, ReleaseRequest, RenewRequest, RenewResponse, acquire_response,
    lease_service_client::LeaseServiceClient, renew_response,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Code, Status, transport::Channel};

/// A client with one connection per `leased` replica; it moves to the next replica whenever a
/// call fails.
struct Client {
    index: usize,
    replicas: Vec<LeaseServiceClient<Channel>>,
    current: usize,
}

impl Client {
    /// Client `index`, starting on replica `first` (modulo their number).
    fn new(index: usize, endpoints: &[String], first: usize) -> Self {
        let replicas = endpoints
            .iter()
            .map(|endpoint| lazy_client(endpoint))
            .collect();
        Client {
            index,
            replicas,
            current: first % endpoints.len(),
        }
    }

    fn grpc(&mut self) -> &mut LeaseServiceClient<Channel> {
        &mut self.replicas[self.current]
    }

    fn next_replica(&mut self) {
        self.current = (self.current + 1) % self.replicas.len();
    }
}

/// A client of the `leased` replica at `endpoint`, connecting on its first call (within 1 s).
pub fn lazy_client(endpoint: &str) -> LeaseServiceClient<Channel> {
    let channel = Channel::from_shared(endpoint.to_owned())
        .unwrap()
        .connect_timeout(Duration::from_secs(1))
        .connect_lazy();
    LeaseServiceClient::new(channel)
}

/// A grant as the holder sees it.
#[derive(Clone)]
struct Held {
    lease: usize,
    name: usize,
    /// A shared grant of a read-write name.
    shared: bool,
    lease_id: String,
    token: u64,
    ttl: Duration,
    /// The holder's view of its expiry (checker clock).
    expiry: Duration,
    /// The lease id is the client's own ([`OwnIdCuts`]).
    own_id: bool,
}

/// One Renew stream.
struct Renewals {
    requests: mpsc::Sender<RenewRequest>,
    responses: tonic::Streaming<RenewResponse>,
}

async fn open_renewals(client: &mut Client) -> Result<Renewals, Status> {
    let (requests, receiver) = mpsc::channel(4);
    let call = client.grpc().renew(ReceiverStream::new(receiver));
    let responses = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .map_err(|_| Status::deadline_exceeded("opening the Renew stream"))??
        .into_inner();
    Ok(Renewals {
        requests,
        responses,
    })
}

/// Runs one client until the checker stops.
pub async fn run_client(checker: Arc<Checker>, index: usize, endpoints: Vec<String>) {
    let mut rng = Rng(checker.workload.seed ^ (index as u64 + 1).wrapping_mul(0xA24B_AED4));
    let mut client = Client::new(index, &endpoints, index);
    let holder = format!("client-{index}");
    let names = checker.workload.names_of(index);
    while !checker.stopped() {
        let name = rng.range(names.start as u64, names.end as u64 - 1) as usize;
        let (low, high) = checker.workload.ttl_ms;
        let ttl = Duration::from_millis(rng.range(low, high));
        let wait = match rng.percent(25) {
            true => Duration::ZERO,
            false => Duration::from_millis(rng.range(0, checker.workload.max_wait_ms)),
        };
        // Drawn only for a read-write name: the other clients' schedules stay as they were.
        let shared = checker.workload.is_read_write(name)
            && rng.percent(checker.workload.read_write.shared_percent);
        let call = Call {
            name,
            ttl,
            wait,
            shared,
        };
        let held = match checker.workload.own_id_cuts {
            Some(cuts) if name < checker.workload.names => {
                acquire_own_id(&checker, &mut client, &holder, call, (&mut rng, cuts)).await
            }
            _ => acquire(&checker, &mut client, &holder, call).await,
        };
        let Some(held) = held else {
            continue;
        };
        let hold_for = Duration::from_millis(rng.range(1, checker.workload.max_hold_ms));
        let abandon = rng.percent(checker.workload.abandon_percent);
        hold(&checker, &mut client, held, hold_for, abandon).await;
    }
}

/// What one Acquire asks for.
#[derive(Clone, Copy)]
struct Call {
    name: usize,
    ttl: Duration,
    wait: Duration,
    /// A shared grant (only on a read-write name).
    shared: bool,
}

/// One Acquire with a lease id of the server's; `Some` when granted. A failed call moves the
/// client to the next replica.
async fn acquire(checker: &Checker, client: &mut Client, holder: &str, call: Call) -> Option<Held> {
    match attempt(checker, client, holder, call, None).await {
        Attempt::Granted(held) => Some(held),
        Attempt::NotGranted | Attempt::Cut | Attempt::Superseded => None,
        Attempt::Failed(_) => {
            client.next_replica();
            // UNAVAILABLE is allowed under faults: back off a little and retry.
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// How long a chain of own-id attempts may go on before the client gives up on it.
const OWN_ID_PATIENCE: Duration = Duration::from_secs(20);

/// An Acquire with the caller's own lease id, retried until answered `granted` or refused
/// outright ([`OwnIdCuts`]): every attempt may be cut, and every retry goes to a replica drawn
/// at random. `UNAVAILABLE` leaves the grant possibly held (a grant that the replicas did not
/// confirm in time stays held once another call was answered it): the client retries. A client
/// that gives up after a cut or failed attempt releases the id, since an attempt it stopped
/// waiting for may still have made a grant.
async fn acquire_own_id(
    checker: &Checker,
    client: &mut Client,
    holder: &str,
    call: Call,
    (rng, cuts): (&mut Rng, OwnIdCuts),
) -> Option<Held> {
    let lease_id = leased::lease::LeaseId::generate().expose().to_owned();
    let first_sent = checker.now();
    let (mut uncertain, mut retried) = (false, false);
    loop {
        let cut_after = rng
            .percent(cuts.percent)
            .then(|| Duration::from_millis(rng.range(cuts.after_ms.0, cuts.after_ms.1)));
        let own = OwnId {
            lease_id: &lease_id,
            first_sent: retried.then_some(first_sent),
            cut_after,
        };
        retried = true;
        match attempt(checker, client, holder, call, Some(own)).await {
            Attempt::Granted(held) => return Some(held),
            // The id held nothing when the attempt ran: a clear refusal.
            Attempt::NotGranted => break,
            Attempt::Failed(code) if code != Code::Unavailable => {
                uncertain = true;
                break;
            }
            Attempt::Failed(_) | Attempt::Cut | Attempt::Superseded => uncertain = true,
        }
        if checker.now() > first_sent + OWN_ID_PATIENCE {
            break;
        }
        client.current = rng.range(0, client.replicas.len() as u64 - 1) as usize;
        tokio::time::sleep(Duration::from_millis(rng.range(10, 100))).await;
    }
    if uncertain {
        // Ends whatever an attempt the client stopped waiting for may have made.
        for _ in 0..10 {
            if send_release(checker, client, call.name, &lease_id).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    None
}

/// An attempt made with the caller's own lease id.
#[derive(Clone, Copy)]
struct OwnId<'a> {
    lease_id: &'a str,
    /// When the first attempt with this id was sent; `None` for the first attempt itself.
    first_sent: Option<Duration>,
    /// The client cuts the call this long after sending it.
    cut_after: Option<Duration>,
}

/// How one Acquire attempt ended (each recorded).
enum Attempt {
    Granted(Held),
    NotGranted,
    Failed(Code),
    /// The client cut the call at its own deadline: recorded as given up.
    Cut,
    /// Refused as [`Event::Superseded`]: the id is not ended, and the client retries.
    Superseded,
}

/// What the server answers a waiting call whose place in line a retry with its own lease id
/// took.
const SUPERSEDED: &str = "a newer Acquire with this lease id took this call's place in line";

/// One Acquire attempt, recorded with its send and receive times.
async fn attempt(
    checker: &Checker,
    client: &mut Client,
    holder: &str,
    call: Call,
    own: Option<OwnId<'_>>,
) -> Attempt {
    let Call {
        name,
        ttl,
        wait,
        shared,
    } = call;
    let sent = checker.now();
    let mut request = tonic::Request::new(AcquireRequest {
        name: checker.names[name].clone(),
        holder: holder.to_owned(),
        ttl_ms: ttl.as_millis() as i64,
        wait_ms: wait.as_millis() as i64,
        limit: checker.workload.limit_of(name),
        shared,
        lease_id: own.map_or_else(String::new, |own| own.lease_id.to_owned()),
        ..Default::default()
    });
    request.set_timeout(wait + Duration::from_secs(5));
    let occupancy = |held, limit| Event::Occupancy { name, held, limit };
    // The first `waiting`: when it arrived, and the position it reported.
    let mut queued: Option<(Duration, u32)> = None;
    let replica = client.current;
    let call = async {
        let mut stream = client.grpc().acquire(request).await?.into_inner();
        while let Some(message) = stream.next().await {
            match message?.result {
                Some(acquire_response::Result::Granted(granted)) => {
                    return Ok(Some((granted, checker.now())));
                }
                Some(acquire_response::Result::NotGranted(busy)) => {
                    checker.record(occupancy(busy.held, busy.limit));
                    if queued.is_none() {
                        checker.record(Event::NotGranted {
                            replica,
                            sent,
                            received: checker.now(),
                        });
                    }
                    return Ok(None);
                }
                Some(acquire_response::Result::Waiting(waiting)) => {
                    queued.get_or_insert((checker.now(), waiting.position));
                    checker.record(occupancy(waiting.held, waiting.limit));
                }
                None => {}
            }
        }
        Err(Status::unknown(
            "Acquire stream ended without a terminal message",
        ))
    };
    let patience = wait + Duration::from_secs(6);
    let cut_after = own
        .and_then(|own| own.cut_after)
        .filter(|cut| *cut < patience);
    // A cut is the client's own deadline: the call is dropped, whatever the server did with it.
    let cut = cut_after.is_some();
    let outcome = tokio::time::timeout(cut_after.unwrap_or(patience), call)
        .await
        .unwrap_or_else(|_| Err(Status::deadline_exceeded("client-side timeout")));
    if let Some((queued, position)) = queued {
        checker.record(Event::Waited {
            client: client.index,
            replica: client.current,
            name,
            shared,
            sent,
            wait,
            queued,
            position,
            ended: match &outcome {
                Ok(Some((_, received))) => *received,
                _ => checker.now(),
            },
            outcome: match &outcome {
                Ok(Some((granted, _))) => WaitOutcome::Granted(granted.fencing_token),
                Ok(None) => WaitOutcome::NotGranted,
                Err(_) => WaitOutcome::Failed,
            },
        });
    }
    match outcome {
        Ok(Some((granted, received))) => {
            let lease = checker.next_lease.fetch_add(1, Ordering::SeqCst);
            let first_sent = own.and_then(|own| own.first_sent).unwrap_or(sent);
            checker.record(Event::Granted {
                lease,
                client: client.index,
                replica: client.current,
                name,
                token: granted.fencing_token,
                ttl,
                sent,
                received,
                first_sent,
                shared,
                waited: queued.is_some(),
            });
            // The grant may have been made as early as the first attempt: so may its TTL have
            // begun.
            Attempt::Granted(Held {
                lease,
                name,
                shared,
                lease_id: granted.lease_id,
                token: granted.fencing_token,
                ttl,
                expiry: first_sent + ttl,
                own_id: own.is_some(),
            })
        }
        Ok(None) => Attempt::NotGranted,
        Err(status) => {
            // Only the timeout can end a cut call with an error it did not answer.
            let gave_up = cut && status.message() == "client-side timeout";
            if own.is_some()
                && status.code() == Code::FailedPrecondition
                && status.message().contains(SUPERSEDED)
            {
                checker.record(Event::Superseded {
                    replica: client.current,
                    sent,
                    ended: checker.now(),
                });
                return Attempt::Superseded;
            }
            checker.record(Event::Failed {
                rpc: "Acquire",
                code: failure_code(&status),
                replica: client.current,
                sent,
                ended: checker.now(),
                gave_up,
                after_waiting: queued.is_some(),
            });
            match gave_up {
                true => Attempt::Cut,
                false => Attempt::Failed(failure_code(&status)),
            }
        }
    }
}

/// The code a failed call is judged by. A call the connection closed under before any answer is
/// cancelled by the client's own HTTP/2 layer (hyper's "operation was canceled"), which tonic
/// reports as CANCELLED, the code the server's deadline also produces. It is a lost connection
/// (UNAVAILABLE in gRPC's terms), allowed when a replica is killed, and not the missed deadline a
/// server's CANCELLED means. Told apart as the client's `is_cut_off` does: a status tonic made of
/// a transport error carries that error as its source, one the server sent never does. (Seen in
/// CI: a Release sent 5 ms after its replica was killed failed so 1 ms later.)
fn failure_code(status: &Status) -> Code {
    match status.code() {
        Code::Cancelled if std::error::Error::source(status).is_some() => Code::Unavailable,
        code => code,
    }
}

/// Holds a lease for `hold_for`: writes, renews every third of the TTL, writes after each
/// renewal, then releases. An abandoning holder writes once and walks away.
async fn hold(
    checker: &Checker,
    client: &mut Client,
    mut held: Held,
    hold_for: Duration,
    abandon: bool,
) {
    let hold_until = checker.now() + hold_for;
    // Holders of a counting name, and shared holders of a read-write name, share it: they do not
    // write to the per-name fenced resource.
    let writes = !checker.workload.is_counting(held.name) && !held.shared;
    let write = |held: &Held| {
        let expiry = held.expiry;
        writes.then(|| checker.write(held.lease, held.name, held.token, false, |at| at < expiry))
    };
    write(&held);
    if abandon {
        return;
    }
    let mut renewals: Option<Renewals> = None;
    let mut lost = false;
    loop {
        let now = checker.now();
        if now >= hold_until || now >= held.expiry || checker.stopped() {
            break;
        }
        let next_renewal = held.expiry - held.ttl + held.ttl / 3;
        let wake = next_renewal.min(hold_until).max(now);
        tokio::time::sleep(wake - now).await;
        let now = checker.now();
        if now >= hold_until || now >= held.expiry {
            break;
        }
        if now < next_renewal {
            continue;
        }
        match renew(checker, client, &mut renewals, &held).await {
            RenewResult::Renewed { sent, received } => {
                if received < held.expiry {
                    held.expiry = sent + held.ttl;
                }
            }
            RenewResult::Lost => {
                lost = true;
                break;
            }
            RenewResult::Failed => {
                renewals = None;
                client.next_replica();
                if held.own_id && acquire_again(checker, client, &held).await {
                    // Its grant is gone; the one it was answered ends too.
                    send_release(checker, client, held.name, &held.lease_id).await;
                    lost = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        write(&held);
    }
    if lost {
        return;
    }
    checker.record(Event::ReleaseCalled {
        lease: held.lease,
        at: checker.now(),
    });
    send_release(checker, client, held.name, &held.lease_id).await;
}

/// One Release of `lease_id`'s grant of `name`; whether it was answered. A failure is recorded
/// and moves the client to the next replica.
async fn send_release(checker: &Checker, client: &mut Client, name: usize, lease_id: &str) -> bool {
    let mut request = tonic::Request::new(ReleaseRequest {
        name: checker.names[name].clone(),
        lease_id: lease_id.to_owned(),
    });
    request.set_timeout(Duration::from_secs(3));
    let sent = checker.now();
    let Err(status) = client.grpc().release(request).await else {
        return true;
    };
    checker.record(Event::Failed {
        rpc: "Release",
        code: failure_code(&status),
        replica: client.current,
        sent,
        ended: checker.now(),
        gave_up: false,
        after_waiting: false,
    });
    client.next_replica();
    false
}

/// A holder of its own lease id whose renewal failed asks for its grant again with an Acquire of
/// that id (which answers the grant it holds, unchanged: its view does not move). During a
/// replica stop the answer is `UNAVAILABLE`, and that must not undo the grant (issue 51: it did,
/// and another caller was granted the name while this holder still held it). Recorded as an
/// `Acquire again` call. Answers whether it was granted another grant (its own had ended): then
/// the holder has learnt that it lost the name, and the loss is recorded.
async fn acquire_again(checker: &Checker, client: &mut Client, held: &Held) -> bool {
    let mut request = tonic::Request::new(AcquireRequest {
        name: checker.names[held.name].clone(),
        holder: format!("client-{}", client.index),
        ttl_ms: held.ttl.as_millis() as i64,
        lease_id: held.lease_id.clone(),
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(3));
    let replica = client.current;
    let sent = checker.now();
    let answer = async {
        let mut stream = client.grpc().acquire(request).await?.into_inner();
        stream.next().await.transpose()
    };
    match answer.await {
        Ok(Some(answer)) => {
            let received = checker.now();
            checker.record(Event::Answered {
                rpc: "Acquire again",
                replica,
                sent,
                received,
            });
            if let Some(acquire_response::Result::Granted(granted)) = answer.result
                && granted.fencing_token != held.token
            {
                checker.record(Event::Lost {
                    lease: held.lease,
                    received,
                    by_another: false,
                });
                return true;
            }
        }
        Ok(None) => {}
        Err(status) => checker.record(Event::Failed {
            rpc: "Acquire again",
            code: failure_code(&status),
            replica,
            sent,
            ended: checker.now(),
            gave_up: false,
            after_waiting: false,
        }),
    }
    false
}

enum RenewResult {
    Renewed { sent: Duration, received: Duration },
    Lost,
    Failed,
}

/// One renewal over the holder's Renew stream (opened on demand), answered before the holder's
/// expiry or abandoned.
async fn renew(
    checker: &Checker,
    client: &mut Client,
    renewals: &mut Option<Renewals>,
    held: &Held,
) -> RenewResult {
    let replica = client.current;
    let failed = |checker: &Checker, code: Code, sent: Duration, gave_up: bool| {
        checker.record(Event::Failed {
            rpc: "Renew",
            code,
            replica,
            sent,
            ended: checker.now(),
            gave_up,
            after_waiting: false,
        });
        RenewResult::Failed
    };
    if renewals.is_none() {
        let opening = checker.now();
        match open_renewals(client).await {
            Ok(opened) => *renewals = Some(opened),
            Err(status) => {
                // `open_renewals` stops waiting after 2 s on its own.
                let gave_up = status.code() == Code::DeadlineExceeded;
                return failed(checker, failure_code(&status), opening, gave_up);
            }
        }
    }
    let stream = renewals.as_mut().unwrap();
    let sent = checker.now();
    let request = RenewRequest {
        name: checker.names[held.name].clone(),
        lease_id: held.lease_id.clone(),
        ttl_ms: 0,
    };
    if stream.requests.send(request).await.is_err() {
        return failed(checker, Code::Unavailable, sent, false);
    }
    // Past the holder's expiry the answer no longer matters: give up and drop the stream.
    let patience = held.expiry.saturating_sub(sent) + Duration::from_millis(1);
    let answer = tokio::time::timeout(patience, stream.responses.next()).await;
    let received = checker.now();
    match answer {
        Ok(Some(Ok(response))) => match response.result {
            Some(renew_response::Result::Renewed(renewed)) => {
                let ttl = Duration::from_millis(renewed.ttl_ms as u64);
                assert_eq!(renewed.fencing_token, held.token, "renew changed the token");
                checker.record(Event::Renewed {
                    lease: held.lease,
                    replica,
                    sent,
                    received,
                    ttl,
                });
                RenewResult::Renewed { sent, received }
            }
            Some(renew_response::Result::Lost(lost)) => {
                checker.record(Event::Lost {
                    lease: held.lease,
                    received,
                    by_another: lost.reason == "held by another holder",
                });
                RenewResult::Lost
            }
            None => failed(checker, Code::Internal, sent, false),
        },
        Ok(Some(Err(status))) => failed(checker, failure_code(&status), sent, false),
        Ok(None) => failed(checker, Code::Unavailable, sent, false),
        // The holder's view ended first: the client stopped waiting, the server did not answer.
        Err(_) => failed(checker, Code::DeadlineExceeded, sent, true),
    }
}

/// GC pauses that completed, by kind of name.
#[derive(Clone, Copy, Debug, Default)]
pub struct GcPauses {
    /// On exclusive names: the paused holder's stale write was checked too.
    pub exclusive: usize,
    /// On counting names: its permit expired and the name was granted again before it renewed.
    pub counting: usize,
    /// On read-write names, held exclusive: checked as on an exclusive name.
    pub read_write: usize,
}

/// The GC-pause holder, taking the names in turn: takes a lease (a permit, on a counting name;
/// an exclusive grant, on a read-write name) and stops renewing it (a stop-the-world pause) past
/// its TTL, until another caller has been granted the name since it expired. The token of that
/// grant is recorded ([`Event::TakenOverAfterPause`]): it must be above the paused one. On an
/// exclusive or read-write name it then writes with its old token once the resource has seen the
/// newer one (the resource refuses it only if the server's tokens did increase: the resource is
/// the test's, the order of the tokens is the server's). Then it renews: the answer must be
/// `lost`.
pub async fn run_gc_pauses(checker: Arc<Checker>, endpoints: Vec<String>) -> GcPauses {
    let mut client = Client::new(usize::MAX, &endpoints, 0);
    let mut completed = GcPauses::default();
    let mut round = 0;
    let workload = &checker.workload;
    let counting_names = workload.names..workload.names + workload.counting.names;
    let kinds = [
        (0..workload.names, workload.clients),
        (counting_names.clone(), workload.counting.clients),
        (
            counting_names.end..workload.all_names(),
            workload.read_write.clients,
        ),
    ];
    while !checker.stopped() {
        round += 1;
        // The kind of name (exclusive, counting, read-write) with the fewest completed pauses goes
        // next, so that a kind whose pauses a fault or a run of shared holders kept from
        // completing is tried again first; only kinds with clients, who take the name over.
        let done = [
            completed.exclusive,
            completed.counting,
            completed.read_write,
        ];
        let name = match (0..kinds.len())
            .filter(|kind| !kinds[*kind].0.is_empty() && kinds[*kind].1 > 0)
            .min_by_key(|kind| done[*kind])
        {
            Some(kind) => kinds[kind].0.start + round % kinds[kind].0.len(),
            None => round % workload.all_names(),
        };
        let counting = checker.workload.is_counting(name);
        let ttl = Duration::from_millis(checker.workload.ttl_ms.0);
        let call = Call {
            name,
            ttl,
            wait: Duration::from_secs(3),
            shared: false,
        };
        let Some(held) = acquire(&checker, &mut client, "gc-pause", call).await else {
            continue;
        };
        let paused_at = checker.now();
        let give_up = paused_at + Duration::from_secs(10);
        // Once the run stops, nobody new takes the name: waiting out `give_up` would only make
        // the run end up to 10 s later.
        let waiting = |at: Duration| at < give_up && !checker.stopped();
        if !counting {
            let expiry = held.expiry;
            checker.write(held.lease, name, held.token, false, |at| at < expiry);
        }
        // The pause: no renewal. The lease was granted before `paused_at`, so on the server it
        // has expired by `expired`; wait until someone was granted the name after that.
        let expired = paused_at + ttl + CLOCK_SLACK;
        until(&checker, expired).await;
        let mut next = checker.first_grant_since(name, expired);
        while next.is_none() && waiting(checker.now()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            next = checker.first_grant_since(name, expired);
        }
        let Some(next_token) = next else {
            continue; // nobody was granted it (a fault was in the way); try again
        };
        checker.record(Event::TakenOverAfterPause {
            lease: held.lease,
            name,
            paused_token: held.token,
            next_token,
        });
        if !counting {
            // The next holder writes at once if it holds the name exclusively; a shared one does
            // not write, and then a later exclusive holder will.
            while checker.highest_written(name) < next_token && waiting(checker.now()) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if checker.highest_written(name) < next_token {
                continue; // nobody wrote since (a fault was in the way); try again
            }
            // Waking up: the old token must be refused...
            checker.write(held.lease, name, held.token, true, |_| true);
        }
        // ...and the next renewal says the lease is gone.
        let mut answered = None;
        for _ in 0..10 {
            let mut renewals = None;
            let probe = Held {
                expiry: checker.now() + Duration::from_secs(3),
                ..held.clone()
            };
            match renew(&checker, &mut client, &mut renewals, &probe).await {
                RenewResult::Renewed { .. } => answered = Some(false),
                RenewResult::Lost => answered = Some(true),
                RenewResult::Failed => {
                    client.next_replica();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    continue;
                }
            }
            break;
        }
        if let Some(lost) = answered {
            checker.record(Event::RenewAfterPause {
                lease: held.lease,
                lost,
            });
            checker.fault("gc_pause", paused_at, false);
            if counting {
                completed.counting += 1;
            } else if checker.workload.is_read_write(name) {
                completed.read_write += 1;
            } else {
                completed.exclusive += 1;
            }
        }
    }
    completed
}

/// Sleeps until `at` on the checker's clock.
pub async fn until(checker: &Checker, at: Duration) {
    if let Some(wait) = at.checked_sub(checker.now()) {
        tokio::time::sleep(wait).await;
    }
}
