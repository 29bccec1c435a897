//! etcd's lock service (`v3lockpb.Lock`) and the lease calls it needs, driven over gRPC by a
//! hand-written client: only the fields used here, with etcd's field numbers (unknown fields, such
//! as the response headers, are skipped when decoding). No code generation, no extra crate.
//!
//! Each contender grants itself one etcd lease, as `concurrency.NewSession` does, and locks under
//! it; etcd names the lock key `<name>/<lease id in hex>` and makes each waiter watch the key
//! before it.

use std::time::{Duration, Instant};

use tonic::{codegen::http::uri::PathAndQuery, transport::Channel};
use tonic_prost::ProstCodec;

use crate::{
    BenchResult,
    handoff::{Contender, Queue},
    measure::Worker,
};

#[derive(Clone, PartialEq, prost::Message)]
struct LeaseGrantRequest {
    /// Seconds.
    #[prost(int64, tag = "1")]
    ttl: i64,
    /// 0: etcd picks the id.
    #[prost(int64, tag = "2")]
    id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    id: i64,
    #[prost(string, tag = "4")]
    error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LockRequest {
    #[prost(bytes = "vec", tag = "1")]
    name: Vec<u8>,
    #[prost(int64, tag = "2")]
    lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LockResponse {
    /// Exists as long as the lock is held.
    #[prost(bytes = "vec", tag = "2")]
    key: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct UnlockRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct UnlockResponse {}

#[derive(Clone, PartialEq, prost::Message)]
struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    range_end: Vec<u8>,
    #[prost(bool, tag = "9")]
    count_only: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RangeResponse {
    #[prost(int64, tag = "4")]
    count: i64,
}

/// A client of one etcd member. Cheap to clone; clones share the HTTP/2 connection.
#[derive(Clone)]
pub struct Etcd {
    grpc: tonic::client::Grpc<Channel>,
}

impl Etcd {
    pub fn new(channel: Channel) -> Self {
        Etcd {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    async fn call<Request, Response>(
        &mut self,
        path: &'static str,
        request: Request,
    ) -> BenchResult<Response>
    where
        Request: prost::Message + Send + Sync + 'static,
        Response: prost::Message + Default + Send + Sync + 'static,
    {
        self.grpc
            .ready()
            .await
            .map_err(|e| format!("etcd connection not ready: {e}"))?;
        let response = self
            .grpc
            .unary(
                tonic::Request::new(request),
                PathAndQuery::from_static(path),
                ProstCodec::<Request, Response>::default(),
            )
            .await?;
        Ok(response.into_inner())
    }

    /// Grants an etcd lease of `ttl_s` seconds; answers its id.
    pub async fn lease_grant(&mut self, ttl_s: i64) -> BenchResult<i64> {
        let request = LeaseGrantRequest { ttl: ttl_s, id: 0 };
        let response: LeaseGrantResponse =
            self.call("/etcdserverpb.Lease/LeaseGrant", request).await?;
        match response.error.is_empty() {
            true => Ok(response.id),
            false => Err(format!("LeaseGrant: {}", response.error).into()),
        }
    }

    /// Waits until the lock `name` is ours; answers the key that stands for holding it.
    pub async fn lock(&mut self, name: &str, lease: i64) -> BenchResult<Vec<u8>> {
        let request = LockRequest {
            name: name.as_bytes().to_vec(),
            lease,
        };
        let response: LockResponse = self.call("/v3lockpb.Lock/Lock", request).await?;
        Ok(response.key)
    }

    pub async fn unlock(&mut self, key: Vec<u8>) -> BenchResult<()> {
        let _: UnlockResponse = self
            .call("/v3lockpb.Lock/Unlock", UnlockRequest { key })
            .await?;
        Ok(())
    }

    /// How many keys start with `prefix`.
    pub async fn count_prefix(&mut self, prefix: &str) -> BenchResult<i64> {
        let mut range_end = prefix.as_bytes().to_vec();
        *range_end.last_mut().ok_or("empty prefix")? += 1;
        let request = RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end,
            count_only: true,
        };
        let response: RangeResponse = self.call("/etcdserverpb.KV/Range", request).await?;
        Ok(response.count)
    }
}

/// A waiting Lock call watches the key before its own from that key's (past) revision; etcd
/// delivers events to such a watcher only after its sync loop, every 100 ms, has caught it up.
/// Releasing sooner would measure that catch-up, which a holder doing real work never sees.
const WATCH_SYNC: Duration = Duration::from_millis(150);

/// TTL of each contender's etcd lease: longer than any run.
const SESSION_TTL_S: i64 = 300;

/// Lock then Unlock under one session lease, one lock name per worker.
pub struct EtcdCycle {
    etcd: Etcd,
    name: String,
    lease: i64,
}

impl EtcdCycle {
    pub async fn new(channel: Channel, name: String) -> BenchResult<Self> {
        let mut etcd = Etcd::new(channel);
        let lease = etcd.lease_grant(SESSION_TTL_S).await?;
        Ok(EtcdCycle { etcd, name, lease })
    }
}

impl Worker for EtcdCycle {
    async fn op(&mut self) -> BenchResult<()> {
        let key = self.etcd.lock(&self.name, self.lease).await?;
        self.etcd.unlock(key).await
    }
}

/// An etcd session taking turns on one lock name.
pub struct EtcdContender(EtcdCycle);

impl EtcdContender {
    pub async fn new(channel: Channel, name: String) -> BenchResult<Self> {
        Ok(EtcdContender(EtcdCycle::new(channel, name).await?))
    }
}

impl Contender for EtcdContender {
    type Held = Vec<u8>;

    /// etcd says nothing while a Lock call waits: [`Self::until_queued`] counts the lock keys.
    async fn lock(&mut self, _queue: &Queue) -> BenchResult<Vec<u8>> {
        let EtcdCycle { etcd, name, lease } = &mut self.0;
        etcd.lock(name, *lease).await
    }

    async fn unlock(&mut self, key: Vec<u8>) -> BenchResult<()> {
        self.0.etcd.unlock(key).await
    }

    /// Every waiting Lock call has put its key under `<name>/`: the holder's plus one per waiter.
    /// Then holds on for [`WATCH_SYNC`], as a holder doing real work would.
    async fn until_queued(&mut self, _queue: &Queue, others: usize) -> BenchResult<()> {
        let prefix = format!("{}/", self.0.name);
        let started = Instant::now();
        while self.0.etcd.count_prefix(&prefix).await? < others as i64 + 1 {
            if started.elapsed() > Duration::from_secs(10) {
                return Err("the etcd waiters never lined up".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(WATCH_SYNC).await;
        Ok(())
    }
}
