//! Load on leased itself: the store's scripts straight through fred (the ceiling), acquire and
//! release cycles (of exclusive leases, of permits of counting leases, and of shared or
//! exclusive grants of read-write leases) and renewals through the gRPC server, and many leases
//! held at once.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use leased::{
    lease::{
        AcquireOutcome, Caller, LeaseId, LeaseName, LeaseStore, RenewOutcome, StoreEvents,
        ValidatedAcquire, limits::parse_name,
    },
    proto::{
        AcquireRequest, AcquireResponse, Granted, ReleaseRequest, RenewRequest, RenewResponse,
        acquire_response, lease_service_client::LeaseServiceClient, renew_response,
    },
    store::{RedisOptions, RedisStore, ReplicaWait},
};
use tokio::sync::mpsc;
use tonic::{Streaming, transport::Channel};

use crate::{
    BenchResult,
    measure::{Budget, Samples, Worker, closed_loop},
};

/// TTL of the leases that cycles take: long enough that none expires during a run.
pub const CYCLE_TTL_MS: i64 = 30_000;

/// The store that `leased serve` builds, with the same defaults, in this process.
pub async fn direct_store(redis_url: &str, pool_size: usize) -> BenchResult<Arc<RedisStore>> {
    let store = RedisStore::connect(
        &RedisOptions {
            url: redis_url.to_owned(),
            command_timeout: Duration::from_secs(2),
            pool_size,
            key_prefix: "leased:".to_owned(),
            max_waiters_per_name: 1024,
            counter_keep: Duration::from_secs(600),
            wait_for_replicas: ReplicaWait::NONE,
        },
        StoreEvents::new(),
    )?;
    let started = Instant::now();
    while store.ping().await.is_err() {
        if started.elapsed() > Duration::from_secs(10) {
            return Err("the direct RedisStore never connected".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Arc::new(store))
}

/// A try-once exclusive acquire of `name` by the holder "bench", as the store receives it.
fn direct_request(name: &LeaseName) -> ValidatedAcquire {
    ValidatedAcquire {
        name: name.clone(),
        holder: "bench".to_owned(),
        ttl: Duration::from_millis(CYCLE_TTL_MS as u64),
        wait: Duration::ZERO,
        limit: 1,
        lock_delay: Duration::ZERO,
        shared: false,
        max_shared: 10_000,
        lease_id: None,
        caller: Caller::anyone(),
    }
}

/// Fails unless the store granted the lease.
fn must_be_granted(name: &LeaseName, outcome: AcquireOutcome) -> BenchResult<()> {
    match outcome {
        AcquireOutcome::Granted(_) => Ok(()),
        other => Err(format!("{name} was not granted: {other:?}").into()),
    }
}

/// Acquire then release on the store itself (the same Lua scripts, no gRPC).
pub struct DirectCycle {
    pub store: Arc<RedisStore>,
    pub name: LeaseName,
}

impl Worker for DirectCycle {
    async fn op(&mut self) -> BenchResult<()> {
        let lease_id = LeaseId::generate();
        let request = direct_request(&self.name);
        let outcome = self.store.try_acquire(&request, &lease_id, None).await?;
        must_be_granted(&self.name, outcome)?;
        if !self
            .store
            .release(&self.name, &lease_id, &Caller::anyone())
            .await?
        {
            return Err(format!("{} was not released", self.name).into());
        }
        Ok(())
    }
}

/// Renewals of one held lease on the store itself.
pub struct DirectRenew {
    pub store: Arc<RedisStore>,
    pub name: LeaseName,
    pub lease_id: LeaseId,
}

impl DirectRenew {
    pub async fn holding(store: Arc<RedisStore>, name: &str) -> BenchResult<Self> {
        let name = parse_name(name)?;
        let lease_id = LeaseId::generate();
        let outcome = store
            .try_acquire(&direct_request(&name), &lease_id, None)
            .await?;
        must_be_granted(&name, outcome)?;
        Ok(DirectRenew {
            store,
            name,
            lease_id,
        })
    }
}

impl Worker for DirectRenew {
    async fn op(&mut self) -> BenchResult<()> {
        match self
            .store
            .renew(&self.name, &self.lease_id, None, &Caller::anyone())
            .await?
        {
            RenewOutcome::Renewed { .. } => Ok(()),
            RenewOutcome::Lost(reason) => {
                Err(format!("{} lost: {}", self.name, reason.reason()).into())
            }
        }
    }
}

/// Acquire (`wait_ms` 0) and read the stream to its terminal message, as the project's Rust
/// client does; fails unless granted.
pub async fn acquire_granted(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    ttl_ms: i64,
) -> BenchResult<Granted> {
    acquire_permit(client, name, ttl_ms, 0).await
}

/// [`acquire_granted`] asking for a permit of a counting lease of `limit` (0: exclusive).
pub async fn acquire_permit(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    ttl_ms: i64,
    limit: u32,
) -> BenchResult<Granted> {
    let request = try_once(name, ttl_ms, limit);
    let mut stream = client.acquire(request).await?.into_inner();
    granted(&mut stream, name).await
}

/// Reads an Acquire of `name` on to its terminal message; fails unless it is `granted`.
pub async fn granted(stream: &mut Streaming<AcquireResponse>, name: &str) -> BenchResult<Granted> {
    while let Some(message) = stream.message().await? {
        match message.result {
            Some(acquire_response::Result::Granted(granted)) => return Ok(granted),
            Some(acquire_response::Result::NotGranted(_)) => {
                return Err(format!("{name} is busy").into());
            }
            _ => {}
        }
    }
    Err(format!("Acquire of {name} ended without a terminal message").into())
}

/// An Acquire of `name` (held by someone else) that waits up to `wait_ms`, once it has answered
/// `waiting`: the caller is in the queue.
pub async fn queue_waiter(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    wait_ms: i64,
) -> BenchResult<Streaming<AcquireResponse>> {
    let request = AcquireRequest {
        name: name.to_owned(),
        holder: "bench".to_owned(),
        ttl_ms: CYCLE_TTL_MS,
        wait_ms,
        ..Default::default()
    };
    let mut stream = client.acquire(request).await?.into_inner();
    match stream.message().await?.and_then(|message| message.result) {
        Some(acquire_response::Result::Waiting(_)) => Ok(stream),
        other => Err(format!("a waiter on {name} was answered {other:?}, not waiting").into()),
    }
}

/// Release that must succeed.
pub async fn release(
    client: &mut LeaseServiceClient<Channel>,
    name: String,
    lease_id: String,
) -> BenchResult<()> {
    let released = client
        .release(ReleaseRequest { name, lease_id })
        .await?
        .into_inner()
        .released;
    match released {
        true => Ok(()),
        false => Err("Release answered released=false".into()),
    }
}

/// A generated `lease.v1` client on `channel` (clones share its HTTP/2 connection).
pub fn proto_client(channel: &Channel) -> LeaseServiceClient<Channel> {
    LeaseServiceClient::new(channel.clone())
}

/// Acquire then Release through the gRPC server, one lease name per worker.
pub struct GrpcCycle {
    pub client: LeaseServiceClient<Channel>,
    pub name: String,
    /// Cycles done, the warm-up's included.
    pub cycles: u64,
}

impl Worker for GrpcCycle {
    async fn op(&mut self) -> BenchResult<()> {
        let granted = acquire_granted(&mut self.client, &self.name, CYCLE_TTL_MS).await?;
        release(&mut self.client, granted.name, granted.lease_id).await?;
        self.cycles += 1;
        Ok(())
    }
}

/// Try-once Acquires of one mode and how many were granted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tries {
    pub attempts: u64,
    pub grants: u64,
}

impl Tries {
    /// Granted attempts in %.
    pub fn granted_percent(&self) -> f64 {
        match self.attempts {
            0 => 0.0,
            attempts => self.grants as f64 * 100.0 / attempts as f64,
        }
    }
}

/// The cycles of read-write workers by mode.
#[derive(Clone, Copy, Debug, Default)]
pub struct RwTally {
    pub shared: Tries,
    pub exclusive: Tries,
}

impl RwTally {
    fn count(&mut self, shared: bool, granted: bool) {
        let tries = match shared {
            true => &mut self.shared,
            false => &mut self.exclusive,
        };
        tries.attempts += 1;
        tries.grants += granted as u64;
    }

    pub fn add(&mut self, other: &RwTally) {
        for (mine, theirs) in [
            (&mut self.shared, &other.shared),
            (&mut self.exclusive, &other.exclusive),
        ] {
            mine.attempts += theirs.attempts;
            mine.grants += theirs.grants;
        }
    }

    pub fn attempts(&self) -> u64 {
        self.shared.attempts + self.exclusive.attempts
    }

    pub fn grants(&self) -> u64 {
        self.shared.grants + self.exclusive.grants
    }
}

/// A try-once Acquire of one of `names` (read-write leases), at random, shared with probability
/// `shared_percent` % and exclusive otherwise, then its Release when it was granted. A name that
/// is busy for the mode (held exclusive; for an exclusive call, held at all) answers
/// `not_granted`, and the cycle ends there, as a try-once caller's would.
pub struct RwCycle {
    pub client: LeaseServiceClient<Channel>,
    pub names: Arc<[String]>,
    pub shared_percent: u64,
    /// SplitMix64 state: each worker draws its own sequence of names and modes.
    rng: u64,
    /// The mode of the last cycle, and whether it was granted.
    last: (bool, bool),
    /// Every cycle, the warm-up's included, and the measured ones.
    pub all: RwTally,
    pub measured: RwTally,
}

impl RwCycle {
    pub fn new(
        client: LeaseServiceClient<Channel>,
        names: Arc<[String]>,
        shared_percent: u64,
        seed: u64,
    ) -> Self {
        RwCycle {
            client,
            names,
            shared_percent,
            rng: seed,
            last: (false, false),
            all: RwTally::default(),
            measured: RwTally::default(),
        }
    }

    fn draw(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Worker for RwCycle {
    async fn op(&mut self) -> BenchResult<()> {
        let draw = self.draw();
        let name = &self.names[(draw % self.names.len() as u64) as usize];
        let shared = (draw >> 32) % 100 < self.shared_percent;
        let request = AcquireRequest {
            shared,
            ..try_once(name, CYCLE_TTL_MS, 0)
        };
        let mut stream = self.client.acquire(request).await?.into_inner();
        let mut granted = None;
        loop {
            let Some(message) = stream.message().await? else {
                return Err(format!("Acquire of {name} ended without a terminal message").into());
            };
            match message.result {
                Some(acquire_response::Result::Granted(grant)) => {
                    granted = Some(grant);
                    break;
                }
                Some(acquire_response::Result::NotGranted(_)) => break,
                _ => {}
            }
        }
        let was_granted = granted.is_some();
        if let Some(grant) = granted {
            release(&mut self.client, grant.name, grant.lease_id).await?;
        }
        self.last = (shared, was_granted);
        self.all.count(shared, was_granted);
        Ok(())
    }

    fn measured(&mut self) {
        let (shared, granted) = self.last;
        self.measured.count(shared, granted);
    }
}

/// `concurrency` read-write cycle workers spread round-robin over `channels`, each drawing from
/// every one of `names`.
pub fn rw_cycle_workers(
    channels: &[Channel],
    concurrency: usize,
    names: &[String],
    shared_percent: u64,
) -> Vec<RwCycle> {
    let names: Arc<[String]> = names.into();
    (0..concurrency)
        .map(|worker| {
            RwCycle::new(
                LeaseServiceClient::new(channels[worker % channels.len()].clone()),
                names.clone(),
                shared_percent,
                (worker as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407),
            )
        })
        .collect()
}

/// Acquire (a permit of a counting lease) then Release through the gRPC server: `limit` workers
/// share each name, so that every try-once Acquire finds a free permit.
pub struct SemaphoreCycle {
    pub client: LeaseServiceClient<Channel>,
    pub name: String,
    pub limit: u32,
}

impl Worker for SemaphoreCycle {
    async fn op(&mut self) -> BenchResult<()> {
        let granted =
            acquire_permit(&mut self.client, &self.name, CYCLE_TTL_MS, self.limit).await?;
        release(&mut self.client, granted.name, granted.lease_id).await
    }
}

/// `concurrency` semaphore cycle workers spread round-robin over `channels`, `limit` of them on
/// each name (`concurrency / limit` names).
pub fn semaphore_cycle_workers(
    channels: &[Channel],
    concurrency: usize,
    limit: u32,
    prefix: &str,
) -> Vec<SemaphoreCycle> {
    (0..concurrency)
        .map(|worker| SemaphoreCycle {
            client: LeaseServiceClient::new(channels[worker % channels.len()].clone()),
            name: format!("{prefix}/{}", worker / limit as usize),
            limit,
        })
        .collect()
}

/// `concurrency` cycle workers spread round-robin over `channels` (one HTTP/2 connection each).
pub fn grpc_cycle_workers(
    channels: &[Channel],
    concurrency: usize,
    prefix: &str,
) -> Vec<GrpcCycle> {
    (0..concurrency)
        .map(|worker| GrpcCycle {
            client: LeaseServiceClient::new(channels[worker % channels.len()].clone()),
            name: format!("{prefix}/{worker}"),
            cycles: 0,
        })
        .collect()
}

/// A try-once Acquire (`wait_ms` 0) of `name` by the holder "bench", with `limit` (0: an
/// exclusive lease).
fn try_once(name: &str, ttl_ms: i64, limit: u32) -> AcquireRequest {
    AcquireRequest {
        name: name.to_owned(),
        holder: "bench".to_owned(),
        ttl_ms,
        wait_ms: 0,
        limit,
        ..Default::default()
    }
}

/// [`acquire_granted`] that also reads the stream to its end. For bulk acquires: tens of
/// thousands of streams dropped after their `granted` would each be reset, and h2 ends a
/// connection with too many of those (GOAWAY `too_many_internal_resets`).
async fn acquire_granted_to_the_end(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    ttl_ms: i64,
    limit: u32,
) -> BenchResult<Granted> {
    let request = try_once(name, ttl_ms, limit);
    let mut stream = client.acquire(request).await?.into_inner();
    let mut terminal = None;
    while let Some(message) = stream.message().await? {
        terminal = message.result;
    }
    match terminal {
        Some(acquire_response::Result::Granted(granted)) => Ok(granted),
        other => Err(format!("{name} was answered {other:?}").into()),
    }
}

/// Acquires `names` (all must be free) with `concurrency` callers spread over `channels`, each
/// Acquire stream read to its end.
pub async fn acquire_many(
    channels: &[Channel],
    names: Vec<String>,
    ttl_ms: i64,
    concurrency: usize,
) -> BenchResult<Vec<Granted>> {
    let (granted, _) = acquire_many_permits(channels, names, ttl_ms, concurrency, 0).await?;
    Ok(granted)
}

/// [`acquire_many`] of permits of counting leases of `limit` (0: exclusive leases), a name
/// appearing once per permit to take; also answers the latency of each Acquire.
pub async fn acquire_many_permits(
    channels: &[Channel],
    names: Vec<String>,
    ttl_ms: i64,
    concurrency: usize,
    limit: u32,
) -> BenchResult<(Vec<Granted>, Samples)> {
    let started = Instant::now();
    let names = Arc::new(names);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..concurrency {
        let mut client = LeaseServiceClient::new(channels[worker % channels.len()].clone());
        let (names, next) = (names.clone(), next.clone());
        tasks.spawn(async move {
            let (mut granted, mut latencies) = (Vec::new(), Vec::new());
            loop {
                let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(name) = names.get(index) else {
                    return BenchResult::Ok((granted, latencies));
                };
                let op_started = Instant::now();
                granted.push(acquire_granted_to_the_end(&mut client, name, ttl_ms, limit).await?);
                latencies.push(op_started.elapsed());
            }
        });
    }
    let mut all = Vec::with_capacity(names.len());
    let mut samples = Samples::default();
    while let Some(joined) = tasks.join_next().await {
        let (granted, latencies) = joined??;
        all.extend(granted);
        samples.latencies.extend(latencies);
    }
    samples.elapsed = started.elapsed();
    Ok((all, samples))
}

/// One open `Renew` stream: sends a renewal, waits for its answer, and so on (one in flight).
pub struct RenewStream {
    requests: mpsc::Sender<RenewRequest>,
    responses: Streaming<RenewResponse>,
    leases: Vec<Granted>,
    next: usize,
}

impl RenewStream {
    /// Opens a stream that will renew `leases` in turn.
    pub async fn open(channel: Channel, leases: Vec<Granted>) -> BenchResult<Self> {
        let (requests, outbound) = mpsc::channel(4);
        let responses = LeaseServiceClient::new(channel)
            .renew(tokio_stream::wrappers::ReceiverStream::new(outbound))
            .await?
            .into_inner();
        Ok(RenewStream {
            requests,
            responses,
            leases,
            next: 0,
        })
    }

    /// How many leases this stream renews.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// Renews the next lease of this stream and checks the answer.
    pub async fn renew_next(&mut self) -> BenchResult<()> {
        let lease = &self.leases[self.next % self.leases.len()];
        self.next += 1;
        let (name, lease_id) = (lease.name.clone(), lease.lease_id.clone());
        let response = self.renew(name, lease_id).await?;
        match response.result {
            Some(renew_response::Result::Renewed(_)) => Ok(()),
            other => Err(format!("renewal of {} answered {other:?}", response.name).into()),
        }
    }

    /// Sends one renewal (any name and lease id, held or not) and answers its response.
    pub async fn renew(&mut self, name: String, lease_id: String) -> BenchResult<RenewResponse> {
        self.requests
            .send(RenewRequest {
                name,
                lease_id,
                ttl_ms: 0,
            })
            .await
            .map_err(|_| "the Renew stream closed")?;
        Ok(self
            .responses
            .message()
            .await?
            .ok_or("the Renew stream ended")?)
    }
}

impl Worker for RenewStream {
    async fn op(&mut self) -> BenchResult<()> {
        self.renew_next().await
    }
}

/// Opens one Renew stream per group of leases, spread round-robin over `channels`.
pub async fn open_renew_streams(
    channels: &[Channel],
    groups: Vec<Vec<Granted>>,
) -> BenchResult<Vec<RenewStream>> {
    let mut streams = Vec::with_capacity(groups.len());
    for (index, leases) in groups.into_iter().enumerate() {
        streams.push(RenewStream::open(channels[index % channels.len()].clone(), leases).await?);
    }
    Ok(streams)
}

/// Splits `leases` into `streams` groups of (nearly) equal size.
pub fn split_among(leases: Vec<Granted>, streams: usize) -> Vec<Vec<Granted>> {
    let mut groups: Vec<Vec<Granted>> = (0..streams).map(|_| Vec::new()).collect();
    for (index, lease) in leases.into_iter().enumerate() {
        groups[index % streams].push(lease);
    }
    groups.retain(|group| !group.is_empty());
    groups
}

/// Runs the semaphore cycle workers for `budget` and returns what they measured.
pub async fn measure_semaphore_cycles(
    channels: &[Channel],
    concurrency: usize,
    limit: u32,
    prefix: &str,
    budget: Budget,
) -> BenchResult<Samples> {
    let workers = semaphore_cycle_workers(channels, concurrency, limit, prefix);
    let (samples, _) = closed_loop(workers, budget).await?;
    Ok(samples)
}

/// Runs the cycle workers for `budget` and returns what they measured.
pub async fn measure_grpc_cycles(
    channels: &[Channel],
    concurrency: usize,
    prefix: &str,
    budget: Budget,
) -> BenchResult<Samples> {
    let (samples, _) =
        closed_loop(grpc_cycle_workers(channels, concurrency, prefix), budget).await?;
    Ok(samples)
}
