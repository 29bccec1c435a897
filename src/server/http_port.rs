//! The guards of the plain HTTP/1.1 side ports (`--metrics-listen`, `--console-listen`). They
//! carry no gRPC, but they are sockets of the same process as the gRPC port: connections that
//! nobody bounds would use up the file descriptors that the gRPC port accepts with (4,100
//! half-sent requests did, once). So each port has guards of its own, as the gRPC port has:
//!
//! - **Cap** ([`HttpPort::max_connections`]): at the cap, a new connection closes the oldest
//!   one. A flood can at worst close a scrape or a console tab (which reconnects), never reach
//!   the gRPC port's descriptors (the caps are inside `fd_limit::RESERVED_FDS`).
//! - **Request deadline** (`--handshake-timeout`): a request's headers must arrive in full within
//!   it, as the gRPC port's handshake must.
//! - **Connection age** ([`HttpPort::max_connection_age`]): no connection outlives it, whatever
//!   it is doing; a client that reads its response slowly is closed anyway.
//! - **Request size** (8 KiB of headers, 431 past it).
//! - **Accept errors** pause accepting, as on the gRPC port.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::oneshot,
};

use super::connections::AcceptBackoff;
use crate::{
    shutdown::Shutdown,
    throttle::{LOG_INTERVAL, Throttle},
};

/// Connections evicted at the cap but not yet closed (each closes when its task next runs) may
/// exceed it by this many; past that, accepting waits for them.
const EVICTION_HEADROOM: usize = 8;

/// Request headers above this are refused (431): hyper's smallest read buffer. A scrape's or a
/// console request's headers are a few hundred bytes.
const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;

/// One side port's name and guards.
pub(super) struct HttpPort {
    /// For logs: "metrics", "console".
    pub name: &'static str,
    /// Open connections, at most.
    pub max_connections: usize,
    /// The longest a connection stays open.
    pub max_connection_age: Duration,
    /// Several requests per connection: a browser's; a scrape needs one.
    pub keep_alive: bool,
    /// How long a request's headers may take to arrive.
    pub request_timeout: Duration,
    /// Counts the connections closed at the cap.
    pub evictions: &'static Counter,
    /// Logs the evictions at most once per interval.
    pub eviction_log: &'static Throttle,
}

static ACCEPT_LOG: Throttle = Throttle::new(LOG_INTERVAL);

/// Serves `listener` with `respond` under `port`'s guards until `shutdown` fires.
pub(super) async fn serve<F, Fut, B>(
    listener: TcpListener,
    port: HttpPort,
    respond: F,
    shutdown: Shutdown,
) where
    F: Fn(Request<Incoming>, std::net::SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, max_connections = port.max_connections, "{} listening", port.name);
    }
    let port = Arc::new(port);
    let open = Arc::new(OpenConnections::default());
    let mut backoff = AcceptBackoff::default();
    loop {
        // Evicted connections still closing: wait for them (new ones queue in the kernel).
        while open.count.load(Ordering::Relaxed) >= port.max_connections + EVICTION_HEADROOM {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(1)) => {}
                _ = shutdown.fired() => return,
            }
        }
        let Some(stream) = backoff
            .accept(&listener, &ACCEPT_LOG, port.name, || shutdown.fired())
            .await
        else {
            return;
        };
        let (entry, evicted) = open.admit(&port);
        let respond = respond.clone();
        tokio::spawn(serve_connection(
            stream,
            port.clone(),
            respond,
            entry,
            evicted,
        ));
    }
}

/// A side port's open connections, oldest first.
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
    fn admit(self: &Arc<Self>, port: &HttpPort) -> (OpenEntry, oneshot::Receiver<()>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let (close, closed) = oneshot::channel();
        let mut evictable = self.lock();
        while evictable.len() >= port.max_connections {
            let Some((_, evict)) = evictable.pop_first() else {
                break;
            };
            if evict.send(()).is_ok() {
                port.evictions.inc();
                if let Some(suppressed) = port.eviction_log.admit() {
                    tracing::warn!(
                        port = port.name,
                        max_connections = port.max_connections,
                        suppressed,
                        "port at its connection cap: closing the oldest connection"
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

/// Serves `stream` until it ends, for at most the port's connection age and until evicted.
async fn serve_connection<F, Fut, B>(
    stream: TcpStream,
    port: Arc<HttpPort>,
    respond: F,
    _entry: OpenEntry,
    evicted: oneshot::Receiver<()>,
) where
    F: Fn(Request<Incoming>, std::net::SocketAddr) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = stream.set_nodelay(true);
    let Ok(peer) = stream.peer_addr() else {
        return;
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(port.request_timeout)
        .keep_alive(port.keep_alive)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES);
    let service = service_fn(move |request| respond(request, peer));
    let connection = http.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = connection => {}
        _ = evicted => {}
        _ = tokio::time::sleep(port.max_connection_age) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TEST_LOG: Throttle = Throttle::new(LOG_INTERVAL);

    fn port(max_connections: usize) -> HttpPort {
        static EVICTIONS: std::sync::LazyLock<Counter> = std::sync::LazyLock::new(Counter::default);
        HttpPort {
            name: "test",
            max_connections,
            max_connection_age: Duration::from_secs(10),
            keep_alive: false,
            request_timeout: Duration::from_secs(5),
            evictions: &EVICTIONS,
            eviction_log: &TEST_LOG,
        }
    }

    /// At the cap, each new connection tells the oldest open one to close.
    #[test]
    fn at_the_cap_the_oldest_connection_is_closed() {
        const CAP: usize = 32;
        let port = port(CAP);
        let open = Arc::new(OpenConnections::default());
        let mut admitted: Vec<_> = (0..CAP).map(|_| open.admit(&port)).collect();
        assert!(
            admitted
                .iter_mut()
                .all(|(_, evicted)| evicted.try_recv().is_err())
        );
        let newest = open.admit(&port);
        assert!(
            admitted[0].1.try_recv().is_ok(),
            "the oldest is told to close"
        );
        assert!(admitted[1].1.try_recv().is_err());
        assert_eq!(open.count.load(Ordering::Relaxed), CAP + 1);
        assert_eq!(port.evictions.get(), 1);
        drop(admitted.remove(0));
        assert_eq!(open.count.load(Ordering::Relaxed), CAP);
        drop((admitted, newest));
        assert_eq!(open.count.load(Ordering::Relaxed), 0);
        assert!(open.lock().is_empty());
    }
}
