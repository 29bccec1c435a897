//! The fenced_kv example's key-value store, a tonic server whose Writer service is fenced by
//! [`FencingLayer`]. Shared by the example (`main.rs`), its tests
//! (`tests/integration/fencing_middleware.rs`) and the `fencing_cost` bench, which include this
//! file.

#![allow(dead_code)] // each includer uses a different part

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex},
    time::Duration,
};

use leased::fencing::{FencingLayer, metadata::FENCING_TOKEN};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status, transport::Server};
use tower_layer::Layer;

/// The generated code of `fenced_kv.proto` (build.rs compiles it).
pub mod proto {
    tonic::include_proto!("fenced_kv.v1");
}

use proto::{
    GetRequest, GetResponse, PutRequest, PutResponse, Write,
    reader_server::{Reader, ReaderServer},
    writer_server::{Writer, WriterServer},
};

/// The store: each key's value and the writes it took. Clones share it.
#[derive(Clone, Default)]
pub struct Kv {
    keys: Arc<Mutex<HashMap<String, GetResponse>>>,
    /// Each Put pauses up to this long between reading its request and writing (at random): a
    /// slow disk or a GC pause in the middle of a write.
    put_pause: Duration,
}

impl Kv {
    pub fn with_put_pause(put_pause: Duration) -> Self {
        Kv {
            put_pause,
            ..Kv::default()
        }
    }

    /// `key`'s value and writes.
    pub fn get(&self, key: &str) -> GetResponse {
        let keys = self.keys.lock().expect("no panic holds the lock");
        keys.get(key).cloned().unwrap_or_default()
    }
}

#[tonic::async_trait]
impl Writer for Kv {
    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        // The fencing layer checked the token before this runs; recorded to show the order in
        // which writes landed (0 if the call carried none).
        let fencing_token = request
            .metadata()
            .get(FENCING_TOKEN)
            .and_then(|token| token.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        let PutRequest { key, value } = request.into_inner();
        if !self.put_pause.is_zero() {
            tokio::time::sleep(random_up_to(self.put_pause)).await;
        }
        let mut keys = self.keys.lock().expect("no panic holds the lock");
        let entry = keys.entry(key).or_default();
        entry.value = value.clone();
        entry.writes.push(Write {
            value,
            fencing_token,
        });
        Ok(Response::new(PutResponse {}))
    }
}

#[tonic::async_trait]
impl Reader for Kv {
    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        Ok(Response::new(Kv::get(self, &request.into_inner().key)))
    }
}

// ANCHOR: serve
/// Serves `kv` on `listener` until the process ends: Reader plain, and Writer behind `fencing`
/// (`None`: unfenced, to show what fencing prevents).
pub async fn serve(
    listener: TcpListener,
    kv: Kv,
    fencing: Option<FencingLayer>,
) -> Result<(), tonic::transport::Error> {
    let server = Server::builder().add_service(ReaderServer::new(kv.clone()));
    let writer = WriterServer::new(kv);
    let server = match fencing {
        // Only this service is fenced: the layer wraps it, not the whole server.
        Some(fencing) => server.add_service(fencing.layer(writer)),
        None => server.add_service(writer),
    };
    server
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await
}
// ANCHOR_END: serve

/// A duration from 0 to `max`, at random (std's hasher keys are random per process).
pub fn random_up_to(max: Duration) -> Duration {
    let random = RandomState::new().hash_one(0u8);
    max.mul_f64((random % 1_000_001) as f64 / 1_000_000.0)
}
