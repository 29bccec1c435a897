//! What the integration tests share: the process [`harness`] (re-exported here), and gRPC
//! helpers that drive the server the way a generated client would.

#![allow(dead_code)] // each test binary uses a different part of the helpers

#[path = "../harness/mod.rs"]
pub mod harness;

#[allow(unused_imports)] // each test binary uses a different part
pub use harness::{
    free_port,
    leased::{Leased, LeasedProcess, Log, test_config},
    log_dir, proxy,
    redis::RedisServer,
    sentinel, wait_until,
};
use leased::proto::{
    AcquireRequest, AcquireResponse, DescribeRequest, DescribeResponse, Granted, ReleaseRequest,
    RenewRequest, RenewResponse, Waiting, acquire_response,
    lease_service_client::LeaseServiceClient,
};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

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
