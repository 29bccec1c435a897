//! The metrics port (`--metrics-listen`): `GET /metrics` in the Prometheus text format over plain
//! HTTP/1.1. It carries no lease data and needs no token, but it is a socket of the same process
//! as the gRPC port: connections that nobody bounds would use up the file descriptors that the
//! gRPC port accepts with (4,100 half-sent requests did, once). So it has guards of its own,
//! smaller than the gRPC port's, since one Prometheus needs one connection per scrape:
//!
//! - **Cap** ([`MAX_CONNECTIONS`]): at the cap, a new connection closes the oldest one. A scrape
//!   takes milliseconds, so the oldest is one that stalls; a flood can at worst fail a scrape,
//!   never reach the gRPC port's descriptors (the cap is inside `fd_limit::RESERVED_FDS`).
//! - **Request deadline** (`--handshake-timeout`): the request's headers must arrive in full
//!   within it, as the gRPC port's handshake must.
//! - **One request per connection, [`MAX_CONNECTION_AGE`] at most**: no keep-alive, so no
//!   connection idles between scrapes, and one that reads its response slowly is closed anyway.
//! - **Accept errors** pause accepting, as on the gRPC port.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Bytes, header, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::oneshot,
};

use super::connections::AcceptBackoff;
use crate::{
    metrics::metrics,
    shutdown::Shutdown,
    throttle::{LOG_INTERVAL, Throttle},
};

/// Open connections of the metrics port, at most.
pub const MAX_CONNECTIONS: usize = 32;

/// Connections evicted at the cap but not yet closed (each closes when its task next runs) may
/// exceed it by this many; past that, accepting waits for them.
const EVICTION_HEADROOM: usize = 8;

/// The longest a connection stays open: a scrape of a few hundred kilobytes takes milliseconds.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(10);

/// Request headers above this are refused (431); a scrape's are a few hundred bytes. hyper's
/// smallest read buffer.
const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;

static ACCEPT_LOG: Throttle = Throttle::new(LOG_INTERVAL);
static EVICTED_LOG: Throttle = Throttle::new(LOG_INTERVAL);

/// Serves the metrics port on `listener` until `shutdown` fires.
pub(super) async fn serve(listener: TcpListener, request_timeout: Duration, shutdown: Shutdown) {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, max_connections = MAX_CONNECTIONS, "metrics listening");
    }
    let open = Arc::new(OpenConnections::default());
    let mut backoff = AcceptBackoff::default();
    loop {
        // Evicted connections still closing: wait for them (new ones queue in the kernel).
        while open.count.load(Ordering::Relaxed) >= MAX_CONNECTIONS + EVICTION_HEADROOM {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(1)) => {}
                _ = shutdown.fired() => return,
            }
        }
        let Some(stream) = backoff
            .accept(&listener, &ACCEPT_LOG, "metrics", || shutdown.fired())
            .await
        else {
            return;
        };
        let (entry, evicted) = open.admit();
        tokio::spawn(serve_connection(stream, request_timeout, entry, evicted));
    }
}

/// The metrics port's open connections, oldest first.
#[derive(Default)]
struct OpenConnections {
    /// Connections not yet told to close, by arrival: a message closes one.
    evictable: Mutex<BTreeMap<u64, oneshot::Sender<()>>>,
    next_id: AtomicUsize,
    /// Connections whose task has not ended, evicted ones included.
    count: AtomicUsize,
}

impl OpenConnections {
    /// Registers a new connection, closing the oldest one at the cap.
    fn admit(self: &Arc<Self>) -> (OpenEntry, oneshot::Receiver<()>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let (close, closed) = oneshot::channel();
        let mut evictable = self.lock();
        while evictable.len() >= MAX_CONNECTIONS {
            let Some((_, evict)) = evictable.pop_first() else {
                break;
            };
            if evict.send(()).is_ok() {
                metrics().metrics_port_evictions.inc();
                if let Some(suppressed) = EVICTED_LOG.admit() {
                    tracing::warn!(
                        max_connections = MAX_CONNECTIONS,
                        suppressed,
                        "metrics port at its connection cap: closing the oldest connection"
                    );
                }
            }
        }
        evictable.insert(id, close);
        self.count.fetch_add(1, Ordering::Relaxed);
        let entry = OpenEntry {
            open: self.clone(),
            id,
        };
        (entry, closed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, oneshot::Sender<()>>> {
        self.evictable
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One open connection's place, given back when its task ends.
struct OpenEntry {
    open: Arc<OpenConnections>,
    id: u64,
}

impl Drop for OpenEntry {
    fn drop(&mut self) {
        self.open.lock().remove(&self.id);
        self.open.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one request on `stream`, for at most [`MAX_CONNECTION_AGE`] and until evicted.
async fn serve_connection(
    stream: TcpStream,
    request_timeout: Duration,
    _entry: OpenEntry,
    evicted: oneshot::Receiver<()>,
) {
    let _ = stream.set_nodelay(true);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(request_timeout)
        .keep_alive(false)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES);
    let connection = http.serve_connection(TokioIo::new(stream), service_fn(respond));
    tokio::select! {
        _ = connection => {}
        _ = evicted => {}
        _ = tokio::time::sleep(MAX_CONNECTION_AGE) => {}
    }
}

/// `GET /metrics`; 405 for another method on it, 404 elsewhere.
async fn respond(
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let response = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => Response::builder()
            .header(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
            .body(Full::new(Bytes::from(metrics().encode()))),
        (_, "/metrics") => Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(header::ALLOW, "GET")
            .body(Full::default()),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::default()),
    };
    Ok(response.expect("a response of valid parts"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At the cap, each new connection tells the oldest open one to close.
    #[test]
    fn at_the_cap_the_oldest_connection_is_closed() {
        let open = Arc::new(OpenConnections::default());
        let mut admitted: Vec<_> = (0..MAX_CONNECTIONS).map(|_| open.admit()).collect();
        assert!(
            admitted
                .iter_mut()
                .all(|(_, evicted)| evicted.try_recv().is_err())
        );
        let newest = open.admit();
        assert!(
            admitted[0].1.try_recv().is_ok(),
            "the oldest is told to close"
        );
        assert!(admitted[1].1.try_recv().is_err());
        assert_eq!(open.count.load(Ordering::Relaxed), MAX_CONNECTIONS + 1);
        drop(admitted.remove(0));
        assert_eq!(open.count.load(Ordering::Relaxed), MAX_CONNECTIONS);
        drop((admitted, newest));
        assert_eq!(open.count.load(Ordering::Relaxed), 0);
        assert!(open.lock().is_empty());
    }
}
