//! The checker: clients contend for a few names through real `leased` replicas, hold what they
//! are granted while renewing it, write to a fenced resource while they believe they hold it, and
//! record every event on one monotonic clock. Some names are exclusive leases; the counting names
//! are counting leases (every caller asks for the same `limit`, [`Counting`]), contended by their
//! own clients. [`Checker::verify`] then checks the record:
//!
//! - **At most `limit` holders (1 for an exclusive lease).** A holder's lease, by its own view,
//!   runs from the moment it received `granted` until the earliest of: its release call, its
//!   first `lost`, and its expiry, which is the *send* time of the Acquire (or of the last renewal
//!   answered before that expiry) plus the TTL. Each view is cut short by [`CLOCK_SLACK`]; no
//!   point in time may lie in more than `limit` such views of one name.
//! - **Tokens.** If a grant was received before another grant of the same name was requested,
//!   its token is smaller (whichever permit of a counting lease). Tokens of one name are unique.
//! - **Fencing** (exclusive names). The resource accepts a write only with a token at least as
//!   high as every token it accepted before; a holder's write within its own interval is never
//!   rejected; a stale holder's write after another holder wrote is always rejected. Holders of a
//!   counting name do not write: up to `limit` of them hold it at once, so a per-name fence
//!   would refuse rightful writes.
//! - **FIFO waiting.** A waiter X is in its name's queue once its first `waiting` has arrived. A
//!   caller Y of the same name whose Acquire was *sent* after that must not be granted before X:
//!   if X was granted, Y's token is larger than X's (tokens order the grants at Redis, with no
//!   clock involved); if X was answered `not_granted`, Y was not granted before X's wait could
//!   have run out (X's send time plus its `wait_ms`, a lower bound of the server's deadline). A
//!   waiter answered `not_granted` before that bound had its wait cut short. The first `waiting`
//!   must report a position (1 = next in line). Waiters whose call failed are not checked. On a
//!   counting name, several permits may free at once and then the first callers in line, Y
//!   among them, may take them in any order: a pair is checked only when Y took the last free
//!   permit, that is when `limit - 1` other holders' views span Y's whole call.
//! - **Occupancy.** `waiting` and `not_granted` report `held` at most the limit, and as the limit
//!   in force the name's own (1 for an exclusive lease) or 0; no call fails with
//!   `FAILED_PRECONDITION` (every caller of a name asks for the same limit).
//!
//! Faults that lose Redis data (a restart without persistence, a failover to a replica that
//! missed writes) suspend mutual exclusion for up to one TTL: overlaps that begin inside such a
//! window (from the data loss until the longest TTL after it) are reported apart and allowed.
//! Tokens and fencing are checked everywhere, with no exception. Every fault but the GC pause
//! (a client misbehaving, not the system) may legitimately reorder a queue (a killed replica, a
//! cut link, lost data): FIFO is checked only for calls that touch no fault window, each
//! extended by the longest TTL.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use leased::proto::{
    AcquireRequest, ReleaseRequest, RenewRequest, RenewResponse, acquire_response,
    lease_service_client::LeaseServiceClient, renew_response,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Code, Status, transport::Channel};

/// How much two holders' intervals may overlap before it counts: all timestamps come from one
/// monotonic clock, so this only absorbs Redis's millisecond expiry resolution.
pub const CLOCK_SLACK: Duration = Duration::from_millis(10);

/// What the clients do.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Clients of the exclusive names, and how many exclusive names there are.
    pub clients: usize,
    pub names: usize,
    /// The counting names and their own clients.
    pub counting: Counting,
    /// TTLs are drawn from this inclusive range.
    pub ttl_ms: (u64, u64),
    /// Holders keep a lease for up to this long (renewing every third of the TTL).
    pub max_hold_ms: u64,
    /// Waits are drawn from 0 to this; a quarter of the calls try once (`wait_ms = 0`).
    pub max_wait_ms: u64,
    /// Percentage of holders that walk away without renewing or releasing (a crash).
    pub abandon_percent: u64,
    /// Run the GC-pause holder alongside the clients.
    pub gc_pauses: bool,
    pub seed: u64,
}

/// Counting leases: `clients` more clients contend for `names` more names, each a counting lease
/// of `limit` permits (every one of its callers asks for that limit).
#[derive(Clone, Copy, Debug)]
pub struct Counting {
    pub clients: usize,
    pub names: usize,
    pub limit: u32,
}

impl Workload {
    pub fn max_ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.1)
    }

    /// Every name: the exclusive ones, then the counting ones.
    pub fn all_names(&self) -> usize {
        self.names + self.counting.names
    }

    /// Every client: those of the exclusive names, then those of the counting names.
    pub fn all_clients(&self) -> usize {
        self.clients + self.counting.clients
    }

    /// Whether name `name` (an index into [`Checker::names`]) is a counting lease.
    pub fn is_counting(&self, name: usize) -> bool {
        name >= self.names
    }

    /// The `limit` that callers of `name` send: 0 (exclusive) or the counting limit.
    pub fn limit_of(&self, name: usize) -> u32 {
        match self.is_counting(name) {
            true => self.counting.limit,
            false => 0,
        }
    }

    /// How many holders `name` may have at once.
    pub fn holders_allowed(&self, name: usize) -> usize {
        self.limit_of(name).max(1) as usize
    }

    /// The names client `index` contends for.
    fn names_of(&self, client: usize) -> std::ops::Range<usize> {
        match client < self.clients {
            true => 0..self.names,
            false => self.names..self.all_names(),
        }
    }
}

/// A small deterministic PRNG (SplitMix64), one per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    fn percent(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Everything a client records, timestamped on the checker's clock (time since the run began).
#[derive(Clone, Debug)]
pub enum Event {
    Granted {
        lease: usize,
        /// The client's index (`usize::MAX` for the GC-pause holder).
        client: usize,
        /// Which `leased` replica answered.
        replica: usize,
        name: usize,
        token: u64,
        ttl: Duration,
        sent: Duration,
        received: Duration,
    },
    Renewed {
        lease: usize,
        sent: Duration,
        received: Duration,
        ttl: Duration,
    },
    Lost {
        lease: usize,
        received: Duration,
    },
    ReleaseCalled {
        lease: usize,
        at: Duration,
    },
    Write {
        lease: usize,
        name: usize,
        token: u64,
        at: Duration,
        accepted: bool,
        /// Written on purpose after the lease was gone (the GC-pause holder).
        stale_on_purpose: bool,
    },
    /// The GC-pause holder's first renewal answered after its pause: it must be `lost`.
    RenewAfterPause {
        lease: usize,
        lost: bool,
    },
    Failed {
        rpc: &'static str,
        code: Code,
    },
    /// What a `waiting` or `not_granted` reported of the name's permits.
    Occupancy {
        name: usize,
        held: u32,
        limit: u32,
    },
    /// An Acquire that was answered `waiting` (it stood in the name's queue), recorded when the
    /// call ended. A granted one also has its [`Event::Granted`].
    Waited {
        client: usize,
        replica: usize,
        name: usize,
        /// When the Acquire was sent, and the `wait_ms` it asked for.
        sent: Duration,
        wait: Duration,
        /// When its first `waiting` arrived, and the position that message reported.
        queued: Duration,
        position: u32,
        /// When the call ended (its terminal message or failure), and how.
        ended: Duration,
        outcome: WaitOutcome,
    },
}

/// How a waiting Acquire ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Granted, with this fencing token.
    Granted(u64),
    NotGranted,
    /// The call failed or the client gave up on it.
    Failed,
}

/// A fault the test injected, on the checker's clock.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    pub kind: &'static str,
    pub start: Duration,
    pub end: Duration,
    /// Redis lost data (restart without persistence, failover to a lagging replica).
    pub data_loss: bool,
}

/// A resource that keeps the highest token per name and rejects lower ones; every write is
/// timestamped under its lock, so the log order is the resource's order.
struct FencedResource {
    highest: Mutex<Vec<u64>>,
}

/// The shared state of one run.
pub struct Checker {
    pub workload: Workload,
    pub names: Vec<String>,
    origin: Instant,
    events: Mutex<Vec<Event>>,
    faults: Mutex<Vec<FaultRecord>>,
    resource: FencedResource,
    next_lease: AtomicUsize,
    stop: AtomicBool,
}

impl Checker {
    pub fn new(workload: Workload, name_prefix: &str) -> Arc<Self> {
        let names = (0..workload.names)
            .map(|index| format!("{name_prefix}/resource-{index}"))
            .chain(
                (0..workload.counting.names).map(|index| format!("{name_prefix}/counting-{index}")),
            )
            .collect();
        Arc::new(Checker {
            resource: FencedResource {
                highest: Mutex::new(vec![0; workload.all_names()]),
            },
            workload,
            names,
            origin: Instant::now(),
            events: Mutex::default(),
            faults: Mutex::default(),
            next_lease: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        })
    }

    /// Time since the run began.
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Appends an event to the record.
    pub fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }

    /// Appends a fault with explicit times to the record.
    pub fn record_fault(&self, fault: FaultRecord) {
        self.faults.lock().unwrap().push(fault);
    }

    /// Records a fault that lasted from `start` to now.
    pub fn fault(&self, kind: &'static str, start: Duration, data_loss: bool) {
        let end = self.now();
        println!(
            "[{:>6.2}s] fault {kind} ({:.2}s){}",
            start.as_secs_f64(),
            (end - start).as_secs_f64(),
            if data_loss { ", Redis lost data" } else { "" }
        );
        self.faults.lock().unwrap().push(FaultRecord {
            kind,
            start,
            end,
            data_loss,
        });
    }

    /// Asks every client to finish its current lease and stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Writes `token` to `name` if `in_view(now)` holds at the moment of the write.
    fn write(
        &self,
        lease: usize,
        name: usize,
        token: u64,
        stale_on_purpose: bool,
        in_view: impl Fn(Duration) -> bool,
    ) -> Option<bool> {
        let mut highest = self.resource.highest.lock().unwrap();
        let at = self.now();
        if !in_view(at) {
            return None;
        }
        let accepted = token >= highest[name];
        if accepted {
            highest[name] = token;
        }
        // Recorded under the resource's lock: the event order is the resource's order.
        self.record(Event::Write {
            lease,
            name,
            token,
            at,
            accepted,
            stale_on_purpose,
        });
        Some(accepted)
    }

    fn highest_written(&self, name: usize) -> u64 {
        self.resource.highest.lock().unwrap()[name]
    }

    /// Whether an Acquire of `name` sent at or after `since` has been granted.
    fn granted_since(&self, name: usize, since: Duration) -> bool {
        let events = self.events.lock().unwrap();
        // Recent events are at the end: look back a few seconds past `since`, no further.
        for event in events.iter().rev() {
            if let Event::Granted {
                name: granted,
                sent,
                received,
                ..
            } = *event
            {
                if granted == name && sent >= since {
                    return true;
                }
                if received + Duration::from_secs(5) < since {
                    return false;
                }
            }
        }
        false
    }

    /// Events of the whole run, in recording order.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    pub fn faults(&self) -> Vec<FaultRecord> {
        self.faults.lock().unwrap().clone()
    }
}

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
            .map(|endpoint| {
                let channel = Channel::from_shared(endpoint.clone())
                    .unwrap()
                    .connect_timeout(Duration::from_secs(1))
                    .connect_lazy();
                LeaseServiceClient::new(channel)
            })
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

/// A grant as the holder sees it.
#[derive(Clone)]
struct Held {
    lease: usize,
    name: usize,
    lease_id: String,
    token: u64,
    ttl: Duration,
    /// The holder's view of its expiry (checker clock).
    expiry: Duration,
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
        let Some(held) = acquire(&checker, &mut client, &holder, name, ttl, wait).await else {
            continue;
        };
        let hold_for = Duration::from_millis(rng.range(1, checker.workload.max_hold_ms));
        let abandon = rng.percent(checker.workload.abandon_percent);
        hold(&checker, &mut client, held, hold_for, abandon).await;
    }
}

/// One Acquire; `Some` when granted, recorded with its send and receive times.
async fn acquire(
    checker: &Checker,
    client: &mut Client,
    holder: &str,
    name: usize,
    ttl: Duration,
    wait: Duration,
) -> Option<Held> {
    let sent = checker.now();
    let mut request = tonic::Request::new(AcquireRequest {
        name: checker.names[name].clone(),
        holder: holder.to_owned(),
        ttl_ms: ttl.as_millis() as i64,
        wait_ms: wait.as_millis() as i64,
        limit: checker.workload.limit_of(name),
        ..Default::default()
    });
    request.set_timeout(wait + Duration::from_secs(5));
    let occupancy = |held, limit| Event::Occupancy { name, held, limit };
    // The first `waiting`: when it arrived, and the position it reported.
    let mut queued: Option<(Duration, u32)> = None;
    let call = async {
        let mut stream = client.grpc().acquire(request).await?.into_inner();
        while let Some(message) = stream.next().await {
            match message?.result {
                Some(acquire_response::Result::Granted(granted)) => {
                    return Ok(Some((granted, checker.now())));
                }
                Some(acquire_response::Result::NotGranted(busy)) => {
                    checker.record(occupancy(busy.held, busy.limit));
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
    let outcome = tokio::time::timeout(wait + Duration::from_secs(6), call)
        .await
        .unwrap_or_else(|_| Err(Status::deadline_exceeded("client-side timeout")));
    if let Some((queued, position)) = queued {
        checker.record(Event::Waited {
            client: client.index,
            replica: client.current,
            name,
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
            checker.record(Event::Granted {
                lease,
                client: client.index,
                replica: client.current,
                name,
                token: granted.fencing_token,
                ttl,
                sent,
                received,
            });
            Some(Held {
                lease,
                name,
                lease_id: granted.lease_id,
                token: granted.fencing_token,
                ttl,
                expiry: sent + ttl,
            })
        }
        Ok(None) => None,
        Err(status) => {
            checker.record(Event::Failed {
                rpc: "Acquire",
                code: status.code(),
            });
            client.next_replica();
            // UNAVAILABLE is allowed under faults: back off a little and retry.
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
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
    // Holders of a counting name share it: they do not write to the per-name fenced resource.
    let writes = !checker.workload.is_counting(held.name);
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
    let mut request = tonic::Request::new(ReleaseRequest {
        name: checker.names[held.name].clone(),
        lease_id: held.lease_id.clone(),
    });
    request.set_timeout(Duration::from_secs(3));
    if let Err(status) = client.grpc().release(request).await {
        checker.record(Event::Failed {
            rpc: "Release",
            code: status.code(),
        });
        client.next_replica();
    }
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
    let failed = |checker: &Checker, code: Code| {
        checker.record(Event::Failed { rpc: "Renew", code });
        RenewResult::Failed
    };
    if renewals.is_none() {
        match open_renewals(client).await {
            Ok(opened) => *renewals = Some(opened),
            Err(status) => return failed(checker, status.code()),
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
        return failed(checker, Code::Unavailable);
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
                    sent,
                    received,
                    ttl,
                });
                RenewResult::Renewed { sent, received }
            }
            Some(renew_response::Result::Lost(_)) => {
                checker.record(Event::Lost {
                    lease: held.lease,
                    received,
                });
                RenewResult::Lost
            }
            None => failed(checker, Code::Internal),
        },
        Ok(Some(Err(status))) => failed(checker, status.code()),
        Ok(None) => failed(checker, Code::Unavailable),
        Err(_) => failed(checker, Code::DeadlineExceeded),
    }
}

/// GC pauses that completed, by kind of name.
#[derive(Clone, Copy, Debug, Default)]
pub struct GcPauses {
    /// On exclusive names: the paused holder's stale write was checked too.
    pub exclusive: usize,
    /// On counting names: its permit expired and the name was granted again before it renewed.
    pub counting: usize,
}

/// The GC-pause holder, taking every name in turn: takes a lease (a permit, on a counting name)
/// and stops renewing it (a stop-the-world pause) past its TTL. On an exclusive name, once
/// another client has taken the lease and written, it writes with its old token (the resource
/// must reject it); on a counting name, once its TTL has passed and another caller has been
/// granted the name since. Then it renews: the answer must be `lost`.
pub async fn run_gc_pauses(checker: Arc<Checker>, endpoints: Vec<String>) -> GcPauses {
    let mut client = Client::new(usize::MAX, &endpoints, 0);
    let mut completed = GcPauses::default();
    let mut round = 0;
    while !checker.stopped() {
        round += 1;
        let name = round % checker.workload.all_names();
        let counting = checker.workload.is_counting(name);
        let ttl = Duration::from_millis(checker.workload.ttl_ms.0);
        let Some(held) = acquire(
            &checker,
            &mut client,
            "gc-pause",
            name,
            ttl,
            Duration::from_secs(3),
        )
        .await
        else {
            continue;
        };
        let paused_at = checker.now();
        let give_up = paused_at + Duration::from_secs(10);
        if counting {
            // The pause: no renewal. Its permit was granted before `paused_at`, so on the
            // server it has expired by `expired`; wait until someone was granted the name after
            // that (a permit, maybe this one, went to another holder).
            let expired = paused_at + ttl + CLOCK_SLACK;
            until(&checker, expired).await;
            while !checker.granted_since(name, expired) && checker.now() < give_up {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if !checker.granted_since(name, expired) {
                continue; // nobody was granted it (a fault was in the way); try again
            }
        } else {
            let expiry = held.expiry;
            checker.write(held.lease, name, held.token, false, |at| at < expiry);
            // The pause: no renewal. Wait until someone else holds the lease and has written.
            while checker.highest_written(name) <= held.token && checker.now() < give_up {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if checker.highest_written(name) <= held.token {
                continue; // nobody took it (a fault was in the way); try again
            }
            // Waking up: the old token is refused...
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
            match counting {
                true => completed.counting += 1,
                false => completed.exclusive += 1,
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

/// One holder's lease as it saw it.
#[derive(Clone, Debug)]
struct Interval {
    lease: usize,
    token: u64,
    start: Duration,
    end: Duration,
}

/// What [`Checker::verify`] found.
#[derive(Debug, Default)]
pub struct Report {
    pub grants: usize,
    pub renewals: usize,
    pub releases: usize,
    pub writes_accepted: usize,
    pub writes_rejected: usize,
    pub failures: BTreeMap<String, usize>,
    pub faults: BTreeMap<&'static str, usize>,
    pub overlaps_in_data_loss_windows: usize,
    pub stale_writes_rejected: usize,
    /// Grants of counting names, and the most holders' views of one counting name that
    /// overlapped at once outside data-loss windows (the limit, if the run reached it).
    pub counting_grants: usize,
    pub max_holders_counting: usize,
    /// `waiting` and `not_granted` messages checked, and the most permits held one reported on a
    /// counting name.
    pub occupancy_reports: usize,
    pub max_reported_held: u32,
    /// Acquire calls that were answered `waiting`, and the highest position one first reported.
    pub waiters: usize,
    pub max_position: u32,
    /// Waiters left out of the FIFO check: their call failed, or touched a fault window.
    pub waiters_unchecked: usize,
    /// Pairs (waiter, later caller granted while it could still wait) checked for FIFO, and
    /// how many of them were on counting names.
    pub fifo_pairs_checked: usize,
    pub counting_fifo_pairs_checked: usize,
    /// Pairs in which a caller that asked after a waiter was queued was granted before it (each
    /// also a violation).
    pub overtakes: usize,
    /// Waiters answered `not_granted` before their wait could have run out (also violations).
    pub waits_cut_short: usize,
    pub violations: Vec<String>,
}

impl Report {
    pub fn print(&self, title: &str) {
        println!("== checker: {title} ==");
        println!(
            "grants checked: {}; renewals: {}; releases: {}; writes accepted: {}, rejected: {}",
            self.grants, self.renewals, self.releases, self.writes_accepted, self.writes_rejected
        );
        println!("faults injected: {:?}", self.faults);
        println!("failed calls (allowed under faults): {:?}", self.failures);
        println!(
            "stale writes rejected: {}; overlaps inside data-loss windows (allowed): {}",
            self.stale_writes_rejected, self.overlaps_in_data_loss_windows
        );
        println!(
            "counting names: {} grants; most holders at once (outside data-loss windows): {}; \
             most permits held reported by waiting/not_granted: {} ({} reports checked)",
            self.counting_grants,
            self.max_holders_counting,
            self.max_reported_held,
            self.occupancy_reports
        );
        println!(
            "FIFO: {} waiters (highest first position {}), {} unchecked (failed or in a fault \
             window); {} pairs checked ({} on counting names); overtakes: {}; waits cut short: {}",
            self.waiters,
            self.max_position,
            self.waiters_unchecked,
            self.fifo_pairs_checked,
            self.counting_fifo_pairs_checked,
            self.overtakes,
            self.waits_cut_short
        );
        println!("violations: {}", self.violations.len());
        for violation in self.violations.iter().take(20) {
            println!("  VIOLATION {violation}");
        }
    }
}

impl Checker {
    /// Checks the whole record; see the module documentation for what is checked.
    pub fn verify(&self) -> Report {
        let events = self.events();
        let faults = self.faults();
        let mut report = Report::default();
        for fault in &faults {
            *report.faults.entry(fault.kind).or_default() += 1;
        }
        let slack = CLOCK_SLACK;
        let loss_windows: Vec<(Duration, Duration)> = faults
            .iter()
            .filter(|fault| fault.data_loss)
            .map(|fault| (fault.start, fault.end + self.workload.max_ttl() + slack))
            .collect();
        let in_loss_window = |at: Duration| {
            loss_windows
                .iter()
                .any(|(from, to)| *from <= at && at <= *to)
        };

        // Each lease's interval, by the holder's own view.
        struct Lease {
            name: usize,
            token: u64,
            ttl: Duration,
            sent: Duration,
            received: Duration,
            renewals: Vec<(Duration, Duration, Duration)>,
            lost: Option<Duration>,
            release: Option<Duration>,
        }
        let mut leases: HashMap<usize, Lease> = HashMap::new();
        for event in &events {
            match event {
                Event::Granted {
                    lease,
                    name,
                    token,
                    ttl,
                    sent,
                    received,
                    ..
                } => {
                    leases.insert(
                        *lease,
                        Lease {
                            name: *name,
                            token: *token,
                            ttl: *ttl,
                            sent: *sent,
                            received: *received,
                            renewals: Vec::new(),
                            lost: None,
                            release: None,
                        },
                    );
                }
                Event::Renewed {
                    lease,
                    sent,
                    received,
                    ttl,
                } => {
                    report.renewals += 1;
                    if let Some(lease) = leases.get_mut(lease) {
                        lease.renewals.push((*sent, *received, *ttl));
                    }
                }
                Event::Lost { lease, received } => {
                    if let Some(lease) = leases.get_mut(lease) {
                        lease.lost.get_or_insert(*received);
                    }
                }
                Event::ReleaseCalled { lease, at } => {
                    report.releases += 1;
                    if let Some(lease) = leases.get_mut(lease) {
                        lease.release.get_or_insert(*at);
                    }
                }
                Event::Failed { rpc, code } => {
                    *report
                        .failures
                        .entry(format!("{rpc} {code:?}"))
                        .or_default() += 1;
                    if matches!(
                        code,
                        Code::Internal | Code::InvalidArgument | Code::FailedPrecondition
                    ) {
                        report
                            .violations
                            .push(format!("{rpc} answered {code:?}: never expected"));
                    }
                }
                Event::RenewAfterPause { lease, lost } => {
                    if !lost {
                        report.violations.push(format!(
                            "lease {lease}: renewed after its TTL passed and another holder was \
                             granted the name"
                        ));
                    }
                }
                Event::Occupancy { name, held, limit } => {
                    report.occupancy_reports += 1;
                    let allowed = self.workload.holders_allowed(*name) as u32;
                    if self.workload.is_counting(*name) {
                        report.max_reported_held = report.max_reported_held.max(*held);
                    }
                    if *held > allowed || (*limit != 0 && *limit != allowed) {
                        report.violations.push(format!(
                            "{}: `waiting`/`not_granted` reported {held} permits held of limit \
                             {limit}; every caller asks for limit {}",
                            self.names[*name],
                            self.workload.limit_of(*name)
                        ));
                    }
                }
                Event::Write { .. } | Event::Waited { .. } => {}
            }
        }
        report.grants = leases.len();
        report.counting_grants = leases
            .values()
            .filter(|lease| self.workload.is_counting(lease.name))
            .count();
        let mut intervals: HashMap<usize, Vec<Interval>> = HashMap::new();
        let mut interval_of: HashMap<usize, (Duration, Duration)> = HashMap::new();
        for (id, lease) in &leases {
            let mut expiry = lease.sent + lease.ttl;
            let mut renewals = lease.renewals.clone();
            renewals.sort();
            for (sent, received, ttl) in renewals {
                if received >= expiry {
                    break; // answered after the holder's view had ended
                }
                expiry = expiry.max(sent + ttl);
            }
            let mut end = expiry;
            if let Some(lost) = lease.lost {
                end = end.min(lost);
            }
            if let Some(release) = lease.release {
                end = end.min(release);
            }
            interval_of.insert(*id, (lease.received, end));
            intervals.entry(lease.name).or_default().push(Interval {
                lease: *id,
                token: lease.token,
                start: lease.received,
                end,
            });
        }

        // At most `limit` holders (1 for an exclusive lease): each view is cut short by `slack`,
        // and when a view begins, the earlier ones still running share that instant with it.
        for (name, list) in &mut intervals {
            let allowed = self.workload.holders_allowed(*name);
            list.sort_by_key(|interval| interval.start);
            let mut active: Vec<&Interval> = Vec::new();
            for interval in list.iter() {
                if interval.end <= interval.start + slack {
                    continue; // shorter than the slack: it overlaps nothing
                }
                active.retain(|earlier| earlier.end > interval.start + slack);
                if self.workload.is_counting(*name) && !in_loss_window(interval.start) {
                    report.max_holders_counting = report.max_holders_counting.max(active.len() + 1);
                }
                if active.len() >= allowed {
                    if in_loss_window(interval.start) {
                        report.overlaps_in_data_loss_windows += 1;
                    } else {
                        let view = |interval: &Interval| {
                            format!(
                                "{} (token {}, {:?}..{:?})",
                                interval.lease, interval.token, interval.start, interval.end
                            )
                        };
                        let earlier: Vec<String> =
                            active.iter().map(|earlier| view(earlier)).collect();
                        report.violations.push(format!(
                            "{}: the views of {} holders overlap, limit {allowed}: lease {} began \
                             while leases {} held it",
                            self.names[*name],
                            active.len() + 1,
                            view(interval),
                            earlier.join(", ")
                        ));
                    }
                }
                active.push(interval);
            }
        }

        // Tokens: unique per name, and increasing in grant order.
        let mut by_name: HashMap<usize, Vec<&Lease>> = HashMap::new();
        for lease in leases.values() {
            by_name.entry(lease.name).or_default().push(lease);
        }
        for (name, mut grants) in by_name {
            let mut seen = HashSet::new();
            for grant in &grants {
                if !seen.insert(grant.token) {
                    report.violations.push(format!(
                        "{}: token {} granted twice",
                        self.names[name], grant.token
                    ));
                }
            }
            grants.sort_by_key(|grant| grant.received);
            let mut prefix_max = Vec::with_capacity(grants.len());
            let mut max = 0;
            for grant in &grants {
                max = max.max(grant.token);
                prefix_max.push(max);
            }
            for later in &grants {
                // Grants received before `later` was requested happened before it.
                let before = grants.partition_point(|earlier| earlier.received < later.sent);
                if before > 0 && prefix_max[before - 1] >= later.token {
                    report.violations.push(format!(
                        "{}: token {} granted after token {} had been received (backwards)",
                        self.names[name],
                        later.token,
                        prefix_max[before - 1]
                    ));
                }
            }
        }

        self.verify_fifo(&events, &faults, &intervals, &mut report);

        // Fencing, in the resource's own order.
        let mut highest = vec![0u64; self.workload.names];
        for event in &events {
            let Event::Write {
                lease,
                name,
                token,
                at,
                accepted,
                stale_on_purpose,
            } = event
            else {
                continue;
            };
            if *accepted {
                report.writes_accepted += 1;
            } else {
                report.writes_rejected += 1;
            }
            let stale = *token < highest[*name];
            if stale && *accepted {
                report.violations.push(format!(
                    "{}: write with stale token {token} accepted after {}",
                    self.names[*name], highest[*name]
                ));
            }
            if *accepted {
                highest[*name] = highest[*name].max(*token);
            }
            if *stale_on_purpose {
                if *accepted {
                    report.violations.push(format!(
                        "{}: the GC-paused holder's stale token {token} was accepted",
                        self.names[*name]
                    ));
                } else {
                    report.stale_writes_rejected += 1;
                }
            } else if !accepted && !in_loss_window(*at) {
                let (start, end) = interval_of[lease];
                report.violations.push(format!(
                    "{}: lease {lease} (token {token}) was refused a write at {at:?} inside its own \
                     interval {start:?}..{end:?}: a newer token was already written",
                    self.names[*name]
                ));
            }
        }
        report
    }

    /// FIFO waiting; see the module documentation.
    fn verify_fifo(
        &self,
        events: &[Event],
        faults: &[FaultRecord],
        views: &HashMap<usize, Vec<Interval>>,
        report: &mut Report,
    ) {
        let settle = self.workload.max_ttl() + CLOCK_SLACK;
        let windows: Vec<(Duration, Duration)> = faults
            .iter()
            .filter(|fault| !QUEUE_SAFE_FAULTS.contains(&fault.kind))
            .map(|fault| (fault.start, fault.end + settle))
            .collect();
        let touches_fault = |from: Duration, to: Duration| {
            windows
                .iter()
                .any(|(start, end)| from <= *end && *start <= to)
        };

        /// A grant as FIFO sees it.
        struct Grant {
            lease: usize,
            client: usize,
            replica: usize,
            token: u64,
            sent: Duration,
            received: Duration,
        }
        let mut grants: HashMap<usize, Vec<Grant>> = HashMap::new();
        for event in events {
            if let Event::Granted {
                lease,
                client,
                replica,
                name,
                token,
                sent,
                received,
                ..
            } = event
            {
                grants.entry(*name).or_default().push(Grant {
                    lease: *lease,
                    client: *client,
                    replica: *replica,
                    token: *token,
                    sent: *sent,
                    received: *received,
                });
            }
        }
        for list in grants.values_mut() {
            list.sort_by_key(|grant| grant.sent);
        }
        let who = |client: usize| match client {
            usize::MAX => "the GC-pause holder".to_owned(),
            client => format!("client {client}"),
        };

        for event in events {
            let Event::Waited {
                client,
                replica,
                name,
                sent,
                wait,
                queued,
                position,
                ended,
                outcome,
            } = *event
            else {
                continue;
            };
            report.waiters += 1;
            report.max_position = report.max_position.max(position);
            if outcome == WaitOutcome::Failed || touches_fault(sent, ended) {
                report.waiters_unchecked += 1;
                continue;
            }
            let name_text = &self.names[name];
            let waiter = format!(
                "{} (replica {replica}; Acquire sent at {sent:?}, wait {wait:?}; first waiting at \
                 {queued:?}, position {position})",
                who(client)
            );
            if position == 0 {
                report.violations.push(format!(
                    "{name_text}: {waiter} reported position 0 (1 = next in line)"
                ));
            }
            // The server's deadline is at least this: it started counting after the send.
            let deadline = sent + wait;
            let (until, outcome_text) = match outcome {
                WaitOutcome::Granted(token) => {
                    (ended, format!("granted token {token} at {ended:?}"))
                }
                _ => (deadline, format!("answered not_granted at {ended:?}")),
            };
            if outcome == WaitOutcome::NotGranted && ended + CLOCK_SLACK < deadline {
                report.waits_cut_short += 1;
                report.violations.push(format!(
                    "{name_text}: {waiter} was answered not_granted at {ended:?}, before its wait \
                     could have run out ({deadline:?})"
                ));
            }
            let list = grants.get(&name).map_or(&[][..], Vec::as_slice);
            let others_needed = self.workload.holders_allowed(name) - 1;
            let name_views = views.get(&name).map_or(&[][..], Vec::as_slice);
            // Callers that asked after the waiter was queued, and early enough to be granted
            // while it still waited.
            let first = list.partition_point(|grant| grant.sent <= queued);
            for later in list[first..].iter().take_while(|grant| grant.sent < until) {
                if touches_fault(later.sent, later.received) {
                    continue;
                }
                // On a counting name, `later` may go first if another permit was free for the
                // waiter too: only when the other permits were held all through its call did it
                // take the one the waiter was in line for.
                if others_needed > 0 {
                    let held_throughout = name_views
                        .iter()
                        .take_while(|view| view.start <= later.sent)
                        .filter(|view| {
                            view.lease != later.lease && view.end >= later.received + CLOCK_SLACK
                        })
                        .count();
                    if held_throughout < others_needed {
                        continue;
                    }
                    report.counting_fifo_pairs_checked += 1;
                }
                report.fifo_pairs_checked += 1;
                let before = match outcome {
                    WaitOutcome::Granted(token) => later.token < token,
                    _ => later.received < deadline,
                };
                if before {
                    report.overtakes += 1;
                    report.violations.push(format!(
                        "{name_text}: overtake: {waiter}, {outcome_text}, was overtaken by {} \
                         (replica {}), whose Acquire was sent later at {:?} and granted token {} \
                         at {:?}",
                        who(later.client),
                        later.replica,
                        later.sent,
                        later.token,
                        later.received
                    ));
                }
            }
        }
    }
}

/// Faults that must not reorder a queue: the GC-pause holder is a client that stops renewing,
/// and the lease's expiry hands it on to the next in line like any release.
const QUEUE_SAFE_FAULTS: &[&str] = &["gc_pause"];
