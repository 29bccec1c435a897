//! What the integration tests share: the process [`harness`] (re-exported here), and gRPC
//! helpers that drive the server the way a generated client would.

pub(crate) use crate::harness;

pub use harness::{
    build_example, free_port,
    leased::{Leased, LeasedProcess, Log, test_config},
    log_dir, proxy,
    redis::RedisServer,
    sentinel, wait_until,
};
use std::time::Duration;

use leased::proto::{
    AcquireRequest, AcquireResponse, CheckTokenRequest, CheckTokenResponse, DescribeRequest,
    DescribeResponse, Granted, ListRequest, ListResponse, NotGranted, ReleaseRequest, RenewRequest,
    RenewResponse, RevokeRequest, RevokeResponse, Waiting, WatchEvent, WatchRequest,
    acquire_response, lease_admin_service_client::LeaseAdminServiceClient,
    lease_service_client::LeaseServiceClient,
};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// Turns between the tests that want both cores to themselves and the tests whose timing bounds
/// (tens of milliseconds) assume no such test beside them. Each heavy test was once in a binary of
/// its own, beside only its own module's tests; in this one process a heavy test runs with none of
/// the scenarios of [`on_both_stores!`] beside it, and with no other heavy test. A tokio lock: a
/// test that fails does not poison the next.
static TURNS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A turn for a test that wants both cores: the reliability checker's runs, the browser test, the
/// 25,000-connection flood, the load tests of Renew streams and of watchers. Hold the guard for
/// the whole test.
pub async fn heavy_turn() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    TURNS.write().await
}

/// A turn for a test with tight timing bounds, shared with every other such test and never with
/// a heavy one ([`heavy_turn`]). [`on_both_stores!`] takes it for each scenario.
pub async fn steady_turn() -> tokio::sync::RwLockReadGuard<'static, ()> {
    TURNS.read().await
}

/// Every message of one `Acquire` call (the stream ends after the terminal message).
pub async fn acquire_all(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    holder: &str,
    ttl_ms: i64,
    wait_ms: i64,
) -> Result<Vec<acquire_response::Result>, tonic::Status> {
    let request = AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms,
        wait_ms,
        ..Default::default()
    };
    acquire_request_all(client, request).await
}

/// Starts an `Acquire` that waits up to `wait_ms` (TTL 30 s) for a busy lease and returns once
/// the server reports that it waits: the stream, whose next message is the terminal one, and the
/// `waiting` message. Panics if the first message is anything else.
pub async fn start_waiting(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    holder: &str,
    wait_ms: i64,
) -> (tonic::Streaming<AcquireResponse>, Waiting) {
    let request = AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms: 30_000,
        wait_ms,
        ..Default::default()
    };
    start_waiting_request(client, request).await
}

/// [`start_waiting`] that answers the status instead of panicking: a refusal such as
/// RESOURCE_EXHAUSTED may come as the call's status or as the stream's first item. Panics if the
/// first message is not `waiting`.
pub async fn try_start_waiting(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    holder: &str,
    wait_ms: i64,
) -> Result<(tonic::Streaming<AcquireResponse>, Waiting), tonic::Status> {
    let mut stream = client
        .acquire(AcquireRequest {
            name: name.into(),
            holder: holder.into(),
            ttl_ms: 30_000,
            wait_ms,
            ..Default::default()
        })
        .await?
        .into_inner();
    let first = stream.next().await.expect("Acquire stream ended at once")?;
    match first.result.expect("AcquireResponse without a result") {
        acquire_response::Result::Waiting(waiting) => Ok((stream, waiting)),
        other => panic!("expected waiting first, got {other:?}"),
    }
}

/// A try-once Acquire (`wait_ms` 0, TTL 30 s): its one terminal message.
pub async fn try_once(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    holder: &str,
) -> acquire_response::Result {
    let messages = acquire_all(client, name, holder, 30_000, 0)
        .await
        .expect("Acquire failed");
    match <[_; 1]>::try_from(messages) {
        Ok([terminal]) => terminal,
        Err(messages) => panic!("a try-once Acquire answers one message, got {messages:?}"),
    }
}

/// The next message of an Acquire stream within `timeout`; panics if none comes in time, or the
/// stream ends or fails.
pub async fn next_result_within(
    stream: &mut tonic::Streaming<AcquireResponse>,
    timeout: Duration,
) -> acquire_response::Result {
    tokio::time::timeout(timeout, next_result(stream))
        .await
        .unwrap_or_else(|_| panic!("no Acquire message within {timeout:?}"))
}

/// Reads `waiting` messages until one says `position` (1 = next in line) and returns it. Panics
/// on a terminal message, or if none says `position` within `timeout`.
pub async fn wait_for_position(
    stream: &mut tonic::Streaming<AcquireResponse>,
    position: u32,
    timeout: Duration,
) -> Waiting {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let Ok(message) = tokio::time::timeout_at(deadline, next_result(stream)).await else {
            panic!("no waiting with position {position} within {timeout:?}; saw {seen:?}");
        };
        match message {
            acquire_response::Result::Waiting(waiting) if waiting.position == position => {
                return waiting;
            }
            acquire_response::Result::Waiting(waiting) => seen.push(waiting),
            terminal => {
                panic!("expected waiting with position {position}, got {terminal:?} after {seen:?}")
            }
        }
    }
}

/// Reads an Acquire stream up to its terminal message (within `timeout`): the `waiting` messages
/// before it, and the terminal message. Panics on timeout.
pub async fn read_to_terminal(
    stream: &mut tonic::Streaming<AcquireResponse>,
    timeout: Duration,
) -> (Vec<Waiting>, acquire_response::Result) {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut waitings = Vec::new();
    loop {
        let Ok(message) = tokio::time::timeout_at(deadline, next_result(stream)).await else {
            panic!("no terminal Acquire message within {timeout:?}; saw {waitings:?}");
        };
        match message {
            acquire_response::Result::Waiting(waiting) => waitings.push(waiting),
            terminal => return (waitings, terminal),
        }
    }
}

/// Reads an Acquire stream for `duration`, which must bring only `waiting` messages (the caller
/// still waits): those messages. Panics on a terminal message or the end of the stream.
pub async fn still_waiting_for(
    stream: &mut tonic::Streaming<AcquireResponse>,
    duration: Duration,
) -> Vec<Waiting> {
    let deadline = tokio::time::Instant::now() + duration;
    let mut waitings = Vec::new();
    while let Ok(message) = tokio::time::timeout_at(deadline, next_result(stream)).await {
        match message {
            acquire_response::Result::Waiting(waiting) => waitings.push(waiting),
            terminal => panic!("expected to still wait, got {terminal:?} after {waitings:?}"),
        }
    }
    waitings
}

/// The `calls=` count of `command` in `INFO commandstats` of the Redis server on `port` (0 when
/// the command has no line: it was not called since the last `CONFIG RESETSTAT`).
pub fn command_calls(port: u16, command: &str) -> u64 {
    let info = harness::redis::query(port, &["INFO", "commandstats"])
        .unwrap_or_else(|error| panic!("INFO commandstats on port {port} failed: {error}"));
    let prefix = format!("cmdstat_{command}:");
    let Some(stats) = info
        .as_str()
        .expect("INFO answers a bulk string")
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
    else {
        return 0;
    };
    stats
        .split(',')
        .find_map(|field| field.strip_prefix("calls="))
        .and_then(|calls| calls.trim().parse().ok())
        .unwrap_or_else(|| panic!("no calls= in {prefix}{stats}"))
}

/// The next message of an Acquire stream, which must be there and be a success.
pub async fn next_result(
    stream: &mut tonic::Streaming<AcquireResponse>,
) -> acquire_response::Result {
    stream
        .next()
        .await
        .expect("Acquire stream ended early")
        .expect("Acquire stream failed")
        .result
        .expect("AcquireResponse without a result")
}

/// Acquire's terminal result: `Some(granted)` or `None` for not_granted. Panics on a malformed stream.
pub async fn acquire(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    ttl_ms: i64,
    wait_ms: i64,
) -> Result<Option<Granted>, tonic::Status> {
    let messages = acquire_all(client, name, "test", ttl_ms, wait_ms).await?;
    let (last, before) = messages
        .split_last()
        .expect("Acquire stream ended without a terminal message");
    assert!(
        before
            .iter()
            .all(|m| matches!(m, acquire_response::Result::Waiting(_))),
        "only waiting may precede the terminal message: {messages:?}"
    );
    match last {
        acquire_response::Result::Granted(granted) => Ok(Some(granted.clone())),
        acquire_response::Result::NotGranted(_) => Ok(None),
        acquire_response::Result::Waiting(_) => panic!("stream ended on waiting: {messages:?}"),
    }
}

/// Acquire that must be granted.
pub async fn must_acquire(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    ttl_ms: i64,
) -> Granted {
    acquire(client, name, ttl_ms, 0)
        .await
        .expect("Acquire failed")
        .expect("lease unexpectedly busy")
}

pub async fn release(client: &mut LeaseServiceClient<Channel>, granted: &Granted) -> bool {
    client
        .release(ReleaseRequest {
            name: granted.name.clone(),
            lease_id: granted.lease_id.clone(),
        })
        .await
        .expect("Release failed")
        .into_inner()
        .released
}

pub async fn describe(client: &mut LeaseServiceClient<Channel>, name: &str) -> DescribeResponse {
    client
        .describe(DescribeRequest { name: name.into() })
        .await
        .expect("Describe failed")
        .into_inner()
}

/// The request that renews `granted` (`ttl_ms` 0 keeps its TTL).
pub fn renewal(granted: &Granted, ttl_ms: i64) -> RenewRequest {
    RenewRequest {
        name: granted.name.clone(),
        lease_id: granted.lease_id.clone(),
        ttl_ms,
    }
}

/// One renewal over a fresh Renew stream.
pub async fn renew_once(
    client: &mut LeaseServiceClient<Channel>,
    granted: &Granted,
    ttl_ms: i64,
) -> Result<RenewResponse, tonic::Status> {
    let mut responses = client
        .renew(tokio_stream::iter([renewal(granted, ttl_ms)]))
        .await?
        .into_inner();
    responses
        .next()
        .await
        .expect("Renew stream ended without an answer")
}

/// One renewal over a fresh Renew stream that must renew: panics on an error or on `lost`.
pub async fn must_renew(client: &mut LeaseServiceClient<Channel>, granted: &Granted) {
    let renewed = renew_once(client, granted, 0)
        .await
        .unwrap_or_else(|status| panic!("Renew {} failed: {status:?}", granted.name));
    assert!(
        matches!(
            renewed.result,
            Some(leased::proto::renew_response::Result::Renewed(_))
        ),
        "{renewed:?}"
    );
}

/// A Renew stream kept open (not half-closed), driven one request at a time.
pub struct OpenRenewStream {
    requests: tokio::sync::mpsc::Sender<RenewRequest>,
    /// The answers; read it directly for the status that ends the stream.
    pub responses: tonic::Streaming<RenewResponse>,
}

impl OpenRenewStream {
    pub async fn open(client: &mut LeaseServiceClient<Channel>) -> Self {
        let (requests, receiver) = tokio::sync::mpsc::channel(1);
        let responses = client
            .renew(tokio_stream::wrappers::ReceiverStream::new(receiver))
            .await
            .expect("Renew failed")
            .into_inner();
        OpenRenewStream {
            requests,
            responses,
        }
    }

    /// Renews `granted` and waits for the answer, or the status that ended the stream.
    pub async fn renew(
        &mut self,
        granted: &Granted,
        ttl_ms: i64,
    ) -> Result<RenewResponse, tonic::Status> {
        self.requests
            .send(renewal(granted, ttl_ms))
            .await
            .expect("the Renew stream's request side closed");
        self.responses
            .next()
            .await
            .expect("Renew stream ended without an answer")
    }
}

/// A resource protected by fencing tokens: it keeps the highest token per name and rejects
/// writes with a lower one, as a database or object store guarded by leased would.
#[derive(Default)]
pub struct FencedResource {
    highest: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl FencedResource {
    /// Accepts the write if `token` is at least the highest seen for `name`.
    pub fn write(&self, name: &str, token: u64) -> bool {
        let mut highest = self.highest.lock().unwrap();
        let entry = highest.entry(name.to_owned()).or_insert(0);
        if token < *entry {
            return false;
        }
        *entry = token;
        true
    }
}

/// The terminal message must be `granted`: the grant.
pub fn expect_granted(terminal: acquire_response::Result, who: &str) -> Granted {
    match terminal {
        acquire_response::Result::Granted(granted) => granted,
        other => panic!("{who}: expected granted, got {other:?}"),
    }
}

/// The terminal message must be `not_granted`: its holder fields.
pub fn expect_not_granted(terminal: acquire_response::Result, who: &str) -> NotGranted {
    match terminal {
        acquire_response::Result::NotGranted(not_granted) => not_granted,
        other => panic!("{who}: expected not_granted, got {other:?}"),
    }
}

/// Every message of one `Acquire` call for `request` (any field set: `limit`, `lock_delay_ms`).
pub async fn acquire_request_all(
    client: &mut LeaseServiceClient<Channel>,
    request: AcquireRequest,
) -> Result<Vec<acquire_response::Result>, tonic::Status> {
    let mut stream = client.acquire(request).await?.into_inner();
    let mut messages = Vec::new();
    while let Some(message) = stream.next().await {
        let AcquireResponse { result } = message?;
        messages.push(result.expect("AcquireResponse without a result"));
    }
    Ok(messages)
}

/// The terminal message of an Acquire for `request`; panics if the call fails, the stream ends
/// without one, or anything but `waiting` precedes it.
pub async fn acquire_request_terminal(
    client: &mut LeaseServiceClient<Channel>,
    request: AcquireRequest,
) -> acquire_response::Result {
    let described = format!("{request:?}");
    let mut messages = acquire_request_all(client, request)
        .await
        .unwrap_or_else(|status| panic!("Acquire {described} failed: {status:?}"));
    let terminal = messages
        .pop()
        .unwrap_or_else(|| panic!("Acquire {described}: the stream ended without a message"));
    assert!(
        messages
            .iter()
            .all(|m| matches!(m, acquire_response::Result::Waiting(_))),
        "Acquire {described}: only waiting may precede the terminal message: {messages:?}"
    );
    assert!(
        !matches!(terminal, acquire_response::Result::Waiting(_)),
        "Acquire {described}: the stream ended on waiting"
    );
    terminal
}

/// An Acquire for `request` that must be granted.
pub async fn must_acquire_request(
    client: &mut LeaseServiceClient<Channel>,
    request: AcquireRequest,
) -> Granted {
    let described = format!("{request:?}");
    match acquire_request_terminal(client, request).await {
        acquire_response::Result::Granted(granted) => granted,
        other => panic!("Acquire {described}: expected granted, got {other:?}"),
    }
}

/// [`start_waiting`] for any request: starts the Acquire and returns once the server reports
/// that it waits. Panics if the first message is anything else.
pub async fn start_waiting_request(
    client: &mut LeaseServiceClient<Channel>,
    request: AcquireRequest,
) -> (tonic::Streaming<AcquireResponse>, Waiting) {
    let described = format!("{request:?}");
    let mut stream = client
        .acquire(request)
        .await
        .unwrap_or_else(|status| panic!("Acquire {described} failed: {status:?}"))
        .into_inner();
    match next_result(&mut stream).await {
        acquire_response::Result::Waiting(waiting) => (stream, waiting),
        other => panic!("Acquire {described}: expected waiting first, got {other:?}"),
    }
}

/// The status an Acquire for `request` is refused with, whether it comes as the call's status
/// or as the stream's first item. Panics if the request is served instead.
pub async fn acquire_refusal(
    client: &mut LeaseServiceClient<Channel>,
    request: AcquireRequest,
) -> tonic::Status {
    let described = format!("{request:?}");
    match client.acquire(request).await {
        Err(status) => status,
        Ok(response) => match response.into_inner().next().await {
            Some(Err(status)) => status,
            other => panic!("Acquire {described} was served: {other:?}"),
        },
    }
}

/// Unix milliseconds of a protobuf timestamp.
pub fn timestamp_ms(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp.seconds * 1_000 + i64::from(timestamp.nanos) / 1_000_000
}

/// Unix milliseconds now, on this host's clock (the store's clock, when the store runs here).
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis() as i64
}

/// The servers of one scenario: two `leased` replicas on one redis-server, or one server on the
/// embedded store.
pub struct Replicas {
    servers: Vec<Leased>,
    _redis: Option<RedisServer>,
}

impl Replicas {
    pub async fn memory() -> Self {
        Replicas {
            servers: vec![Leased::start(None).await],
            _redis: None,
        }
    }

    pub async fn redis() -> Self {
        let redis = RedisServer::start();
        Replicas {
            servers: vec![
                Leased::start(Some(redis.url())).await,
                Leased::start(Some(redis.url())).await,
            ],
            _redis: Some(redis),
        }
    }

    /// A new client of replica `index` (modulo the number of replicas): consecutive indexes
    /// alternate between the replicas on Redis.
    pub async fn client(&self, index: usize) -> LeaseServiceClient<Channel> {
        self.servers[index % self.servers.len()].client().await
    }
}

/// Generates one test per scenario and store: `memory::NAME` and `redis::NAME`; each scenario is
/// an `async fn(&Replicas)` in the test file, which must have [`Replicas`] in scope. Each takes a
/// [`steady_turn`].
macro_rules! on_both_stores {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    let _turn = crate::common::steady_turn().await;
                    super::$scenario(&super::Replicas::memory().await).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    let _turn = crate::common::steady_turn().await;
                    super::$scenario(&super::Replicas::redis().await).await;
                }
            )*
        }
    };
}
pub(crate) use on_both_stores;

impl Replicas {
    /// A new `LeaseAdminService` client of replica `index` (modulo the number of replicas).
    pub async fn admin(&self, index: usize) -> AdminClient {
        admin_client(&self.servers[index % self.servers.len()].endpoint()).await
    }

    /// The gRPC endpoint (`http://host:port`) of replica `index` (modulo the number of replicas),
    /// for a client with settings of its own.
    pub fn endpoint(&self, index: usize) -> String {
        self.servers[index % self.servers.len()].endpoint()
    }

    /// Whether the scenario runs on Redis (two replicas) rather than the embedded store.
    pub fn on_redis(&self) -> bool {
        self._redis.is_some()
    }
}

/// The generated `LeaseAdminService` client.
pub type AdminClient = LeaseAdminServiceClient<Channel>;

/// A `LeaseAdminService` client of the server at `endpoint` (`http://host:port`).
pub async fn admin_client(endpoint: &str) -> AdminClient {
    LeaseAdminServiceClient::connect(endpoint.to_owned())
        .await
        .expect("cannot connect to leased")
}

/// Opens `Watch` on `name`: the event stream (its first event is the snapshot).
pub async fn open_watch(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
) -> tonic::Streaming<WatchEvent> {
    client
        .watch(WatchRequest { name: name.into() })
        .await
        .unwrap_or_else(|status| panic!("Watch {name} failed: {status:?}"))
        .into_inner()
}

/// The next event of a Watch stream within `timeout`; panics if none comes in time, or the
/// stream ends or fails.
pub async fn next_event_within(
    stream: &mut tonic::Streaming<WatchEvent>,
    timeout: Duration,
) -> WatchEvent {
    match tokio::time::timeout(timeout, stream.next()).await {
        Err(_) => panic!("no Watch event within {timeout:?}"),
        Ok(None) => panic!("the Watch stream ended"),
        Ok(Some(Err(status))) => panic!("the Watch stream failed: {status:?}"),
        Ok(Some(Ok(event))) => event,
    }
}

/// Reads Watch events until one is `wanted`, within `timeout`: the events before it, each of which
/// `may_come_first` must accept, and the wanted one. Panics on any other event, on the end of the
/// stream, or on timeout.
pub async fn watch_for(
    events: &mut tonic::Streaming<WatchEvent>,
    timeout: Duration,
    what: &str,
    wanted: impl Fn(&WatchEvent) -> bool,
    may_come_first: impl Fn(&WatchEvent) -> bool,
) -> (Vec<WatchEvent>, WatchEvent) {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut before = Vec::new();
    loop {
        let event = match tokio::time::timeout_at(deadline, events.next()).await {
            Err(_) => panic!("no {what} within {timeout:?}; saw {before:?}"),
            Ok(None) => panic!("the Watch stream ended before {what}; saw {before:?}"),
            Ok(Some(Err(status))) => panic!("the Watch stream failed before {what}: {status:?}"),
            Ok(Some(Ok(event))) => event,
        };
        if wanted(&event) {
            return (before, event);
        }
        assert!(
            may_come_first(&event),
            "expected {what}, got {event:?} after {before:?}"
        );
        before.push(event);
    }
}

/// The status a Watch of `request` is refused with, whether it comes as the call's status or as
/// the stream's first item. Panics if the Watch is served instead.
pub async fn watch_refusal(
    client: &mut LeaseServiceClient<Channel>,
    request: tonic::Request<WatchRequest>,
) -> tonic::Status {
    match client.watch(request).await {
        Err(status) => status,
        Ok(response) => match response.into_inner().next().await {
            Some(Err(status)) => status,
            other => panic!("the Watch was served: {other:?}"),
        },
    }
}

/// CheckToken that must answer.
pub async fn check_token(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    fencing_token: u64,
) -> CheckTokenResponse {
    client
        .check_token(CheckTokenRequest {
            name: name.into(),
            fencing_token,
        })
        .await
        .unwrap_or_else(|status| panic!("CheckToken {name} {fencing_token} failed: {status:?}"))
        .into_inner()
}

/// Revoke that must answer (`fencing_token` 0: whoever holds it).
pub async fn revoke(
    admin: &mut AdminClient,
    name: &str,
    reason: &str,
    fencing_token: u64,
) -> RevokeResponse {
    admin
        .revoke(RevokeRequest {
            name: name.into(),
            reason: reason.into(),
            fencing_token,
        })
        .await
        .unwrap_or_else(|status| panic!("Revoke {name} {fencing_token} failed: {status:?}"))
        .into_inner()
}

/// Every page of a listing of `prefix` with `page_size`, following `next_page_token` until it is
/// empty (at most `max_pages`, against a token that never ends).
pub async fn list_pages(
    admin: &mut AdminClient,
    prefix: &str,
    page_size: u32,
    max_pages: usize,
) -> Vec<ListResponse> {
    let mut pages = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = admin
            .list(ListRequest {
                prefix: prefix.into(),
                page_size,
                page_token: page_token.clone(),
            })
            .await
            .unwrap_or_else(|status| {
                panic!(
                    "List {prefix:?} page {} failed: {status:?}",
                    pages.len() + 1
                )
            })
            .into_inner();
        page_token = page.next_page_token.clone();
        pages.push(page);
        if page_token.is_empty() {
            return pages;
        }
        assert!(
            pages.len() < max_pages,
            "List {prefix:?} did not end within {max_pages} pages"
        );
    }
}

/// `GET /metrics` of the metrics endpoint on `port`, over plain HTTP/1.1: the body and headers.
pub fn scrape_metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of the Prometheus sample `series` (name and labels, as printed) in `metrics`; 0 if
/// absent.
pub fn metric_sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
        .map_or(0.0, |line| {
            line.rsplit(' ')
                .next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("not a sample: {line}"))
        })
}
