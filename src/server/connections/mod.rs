//! Client connections from `accept` until tonic serves them: the cap on open connections, the
//! handshake deadline, TLS, and an accept loop that backs off when the process runs out of file
//! descriptors.
//!
//! Why this stands in front of tonic: tonic serves every connection its incoming stream yields
//! until the client leaves, and HTTP/2 keepalive only starts once the client has sent its
//! preface. A client that opens TCP connections and sends nothing would hold a file descriptor
//! and a hyper connection each, forever; enough of them exhaust the fd limit, after which
//! tonic's accept loop retries at once and spins a core. Here:
//!
//! - **Handshake deadline** (`--handshake-timeout`): the TLS handshake (on a TLS port), the
//!   HTTP/2 preface and the client's first SETTINGS frame must all arrive within it, or the
//!   connection is closed. Until then a connection is a small task of this module, not a hyper
//!   connection; the bytes read meanwhile are replayed to hyper.
//! - **Cap** (`--max-connections`, the gRPC and health ports together): past it, a new
//!   connection takes the place of the oldest one still in its handshake, so that silent
//!   connections cannot lock real clients out (a real client finishes its handshake within a
//!   round trip). If every open connection is past its handshake, the new one is closed at once.
//! - **Accept errors**: errors of the one connection being accepted are skipped; any other
//!   (EMFILE, ENFILE, ENOBUFS, ENOMEM) pauses accepting, 10 ms doubling up to 1 s, instead of a
//!   busy loop. Waiting clients stay in the kernel's accept queue meanwhile.
//!
//! Refusals, evictions, timeouts and accept errors are counted in metrics and logged at most once
//! per [`LOG_INTERVAL`] each.

mod accept_backoff;
mod cap;
mod certificate_subject;
mod connection;
mod handshake;
mod transport;

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize},
    },
    time::Duration,
};

use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
};
use tokio_rustls::TlsAcceptor;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};

pub(super) use self::accept_backoff::AcceptBackoff;
pub use self::connection::{Connection, ConnectionInfo};
use self::handshake::handshake;
use crate::{
    metrics::metrics,
    throttle::{LOG_INTERVAL, Throttle},
};

/// `--max-connections` when not set (the open-file limit may lower it).
const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

static REFUSED_LOG: Throttle = Throttle::new(LOG_INTERVAL);
static ACCEPT_LOG: Throttle = Throttle::new(LOG_INTERVAL);

/// Settings of [`Connections`].
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// Open client connections, counting those still in their handshake.
    pub max_connections: usize,
    /// How long a new connection may take to finish TLS (if any), the HTTP/2 preface and the
    /// first SETTINGS frame.
    pub handshake_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

/// The open client connections of one server, on every port it serves gRPC on.
pub struct Connections {
    limits: ConnectionLimits,
    /// Admitted and not yet closed, handshakes included.
    open: AtomicUsize,
    /// Connections in their handshake, oldest first: a message evicts one.
    handshakes: Mutex<BTreeMap<u64, oneshot::Sender<()>>>,
    next_id: AtomicU64,
}

impl Connections {
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Connections {
            limits,
            open: AtomicUsize::new(0),
            handshakes: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
        })
    }

    /// Accepts `listener`'s connections, with TLS if `tls` is set, and yields each one once its
    /// handshake is complete. Dropping the stream (tonic does when it stops accepting) closes the
    /// listening socket.
    pub fn incoming(
        self: &Arc<Self>,
        listener: TcpListener,
        tls: Option<TlsAcceptor>,
    ) -> impl Stream<Item = Result<Connection, Infallible>> + use<> {
        let (ready, receiver) = mpsc::channel(64);
        tokio::spawn(accept_loop(self.clone(), listener, tls, ready));
        ReceiverStream::new(receiver).map(Ok)
    }
}

async fn accept_loop(
    connections: Arc<Connections>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    ready: mpsc::Sender<Connection>,
) {
    let mut backoff = AcceptBackoff::default();
    loop {
        // tonic stopped accepting (shutdown): returning drops, and so closes, the listener.
        let Some(stream) = backoff
            .accept(&listener, &ACCEPT_LOG, "grpc", || ready.closed())
            .await
        else {
            return;
        };
        let Some(slot) = connections.admit_when_room().await else {
            metrics().connections_refused.inc();
            if let Some(suppressed) = REFUSED_LOG.admit() {
                tracing::warn!(
                    max_connections = connections.limits.max_connections,
                    suppressed,
                    "connection limit reached and no connection in its handshake to evict: \
                     closing new connections"
                );
            }
            continue;
        };
        // Nagle would hold back small HTTP/2 frames for a delayed ACK (40 ms per call on Linux).
        let _ = stream.set_nodelay(true);
        tokio::spawn(handshake(
            connections.clone(),
            slot,
            stream,
            tls.clone(),
            ready.clone(),
        ));
    }
}
