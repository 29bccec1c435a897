//! Test harness: real processes on loopback, cleaned up on drop.
//! - [`RedisServer`]: a `redis-server` on an ephemeral port, which tests can kill, restart or pause.
//! - [`Leased`]: a `leased` server, in this process (on either store) or as a child process.
//! - gRPC helpers that drive the server the way a generated client would.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::{
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use leased::{
    config::ServeConfig,
    proto::{
        AcquireRequest, AcquireResponse, DescribeRequest, DescribeResponse, Granted,
        ReleaseRequest, RenewRequest, RenewResponse, Waiting, acquire_response,
        lease_service_client::LeaseServiceClient,
    },
    shutdown::{Shutdown, ShutdownTrigger},
};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// A port that was free a moment ago on 127.0.0.1, for a server that binds it later.
///
/// Drawn at random below the kernel's ephemeral range (32768 and up by default): a port that
/// `bind(0)` handed out and we released is often handed out again by the next `bind(0)`, so a
/// server binding it later would collide with whatever bound port 0 in between.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    for attempt in 0u64..1_000 {
        let random = RandomState::new().hash_one((std::process::id(), attempt));
        let port = 20_000 + (random % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000");
}

/// Polls `ready` every 20 ms until it holds or `timeout` passes; panics with `what` on timeout.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A real `redis-server` without persistence on 127.0.0.1 and an ephemeral port.
pub struct RedisServer {
    pub port: u16,
    process: Option<Child>,
}

impl RedisServer {
    pub fn start() -> Self {
        let mut server = RedisServer {
            port: free_port(),
            process: None,
        };
        server.spawn();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is not installed (apt-get install redis-server)");
        self.process = Some(child);
        wait_until(
            "redis-server to answer PING",
            Duration::from_secs(10),
            || {
                self.try_command(&["PING"])
                    .is_ok_and(|reply| reply == "+PONG")
            },
        );
    }

    /// Sends one command and returns the first line of the reply (e.g. `+OK`, `:1`, `$5`).
    pub fn command(&self, args: &[&str]) -> String {
        self.try_command(args).expect("redis command failed")
    }

    fn try_command(&self, args: &[&str]) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes())?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        Ok(line.trim_end().to_owned())
    }

    /// SIGKILL: all data is lost (no persistence).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A fresh, empty redis-server on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGSTOP: the TCP connections stay up but nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self
            .process
            .as_ref()
            .expect("redis-server not running")
            .id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("kill failed");
        assert!(status.success());
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.resume_if_paused();
        self.kill();
    }
}

impl RedisServer {
    fn resume_if_paused(&self) {
        if let Some(child) = &self.process {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
    }
}

/// Settings for tests: the binary's defaults, with a short Redis timeout so that fault tests
/// run fast.
pub fn test_config(redis_url: Option<String>) -> ServeConfig {
    let mut args = vec![
        "--redis-timeout".to_owned(),
        "1s".to_owned(),
        "--drain-grace".to_owned(),
        "5s".to_owned(),
    ];
    if let Some(url) = redis_url {
        args.extend(["--redis-url".to_owned(), url]);
    }
    ServeConfig::from_args(args).expect("test flags parse")
}

/// A running `leased`: in this process, or a child process of the real binary.
pub struct Leased {
    pub address: SocketAddr,
    /// Where `grpc.health.v1` answers in plaintext: the gRPC port, or `--health-listen`.
    health_address: SocketAddr,
    trigger: Option<ShutdownTrigger>,
    process: Option<Child>,
}

impl Leased {
    /// In this process, on Redis if `redis_url` is set, else on the embedded store.
    pub async fn start(redis_url: Option<String>) -> Self {
        Self::start_with(test_config(redis_url)).await
    }

    pub async fn start_with(config: ServeConfig) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let health_address = config.health_listen.unwrap_or(address);
        let (trigger, shutdown): (ShutdownTrigger, Shutdown) = leased::shutdown::channel();
        tokio::spawn(async move {
            if let Err(error) = leased::serve(config, listener, shutdown).await {
                panic!("leased failed: {error}");
            }
        });
        let server = Leased {
            address,
            health_address,
            trigger: Some(trigger),
            process: None,
        };
        server.wait_serving().await;
        server
    }

    /// The real `leased` binary as a child process, with extra flags.
    pub async fn spawn_process(redis_url: &str, extra_args: &[&str]) -> Self {
        let port = free_port();
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = process::serve_command(address, redis_url, extra_args)
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("cannot start leased");
        let server = Leased {
            address,
            health_address: address,
            trigger: None,
            process: Some(child),
        };
        server.wait_serving().await;
        server
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    pub async fn client(&self) -> LeaseServiceClient<Channel> {
        LeaseServiceClient::connect(self.endpoint())
            .await
            .expect("cannot connect to leased")
    }

    /// The overall `grpc.health.v1` status, or None if the server does not answer.
    pub async fn health(&self) -> Option<i32> {
        self.health_of("").await
    }

    /// The `grpc.health.v1` status of one service name, or None if the server does not answer.
    pub async fn health_of(&self, service: &str) -> Option<i32> {
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let channel = Channel::from_shared(format!("http://{}", self.health_address))
            .ok()?
            .connect()
            .await
            .ok()?;
        let reply = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .ok()?;
        Some(reply.into_inner().status)
    }

    /// Waits (up to 20 s) until health reports SERVING.
    pub async fn wait_serving(&self) {
        self.wait_health(tonic_health::pb::health_check_response::ServingStatus::Serving as i32)
            .await;
    }

    pub async fn wait_health(&self, status: i32) {
        let start = Instant::now();
        loop {
            let seen = self.health().await;
            if seen == Some(status) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "leased at {} never reported health status {status} (last: {seen:?})",
                self.health_address
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The child process, for tests that signal it.
    pub fn process(&mut self) -> &mut Child {
        self.process.as_mut().expect("not a child process")
    }

    /// Starts the drain of an in-process server.
    pub fn shut_down(&mut self) {
        if let Some(trigger) = self.trigger.take() {
            trigger.fire();
        }
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        self.shut_down();
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every message of one `Acquire` call (the stream ends after the terminal message).
pub async fn acquire_all(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    holder: &str,
    ttl_ms: i64,
    wait_ms: i64,
) -> Result<Vec<acquire_response::Result>, tonic::Status> {
    let mut stream = client
        .acquire(AcquireRequest {
            name: name.into(),
            holder: holder.into(),
            ttl_ms,
            wait_ms,
        })
        .await?
        .into_inner();
    let mut messages = Vec::new();
    while let Some(message) = stream.next().await {
        let AcquireResponse { result } = message?;
        messages.push(result.expect("AcquireResponse without a result"));
    }
    Ok(messages)
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
    let mut stream = client
        .acquire(AcquireRequest {
            name: name.into(),
            holder: holder.into(),
            ttl_ms: 30_000,
            wait_ms,
        })
        .await
        .expect("Acquire failed")
        .into_inner();
    match next_result(&mut stream).await {
        acquire_response::Result::Waiting(waiting) => (stream, waiting),
        other => panic!("expected waiting first, got {other:?}"),
    }
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

pub mod process;
pub mod proxy;
pub mod sentinel;
