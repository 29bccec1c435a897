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

use std::{
    collections::BTreeMap,
    convert::Infallible,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot},
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::{
    metrics::{KindLabels, metrics},
    throttle::{LOG_INTERVAL, Throttle},
};

/// `--max-connections` when not set (the open-file limit may lower it).
const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Connections admitted beyond the cap while the ones they evicted are still closing: evicting
/// is a message to the evicted connection's task, which closes its socket when it next runs.
const EVICTION_HEADROOM: usize = 64;

/// Longest pause of accepting while evicted connections close (see `admit_when_room`).
const CLOSING_WAIT: Duration = Duration::from_millis(100);

/// The client's HTTP/2 connection preface (RFC 9113, section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of an HTTP/2 frame header.
const FRAME_HEADER_LEN: usize = 9;
/// Frame type of SETTINGS, which must be the client's first frame.
const SETTINGS_FRAME: u8 = 0x4;
/// A larger first SETTINGS frame than HTTP/2's default maximum frame size is hyper's to refuse.
const MAX_SETTINGS_LEN: usize = 16_384;

/// First and longest pause of accepting after a resource error.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

static REFUSED_LOG: Throttle = Throttle::new(LOG_INTERVAL);
static HANDSHAKE_LOG: Throttle = Throttle::new(LOG_INTERVAL);
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

    /// A slot for one more connection, evicting the oldest handshake at the cap.
    fn admit(self: &Arc<Self>) -> Admission {
        let open = self.open.load(Ordering::Relaxed);
        let max = self.limits.max_connections;
        if open >= max + EVICTION_HEADROOM {
            return Admission::Closing;
        }
        if open >= max && !self.evict_oldest_handshake() {
            return Admission::Full;
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        metrics().connections.inc();
        Admission::Admitted(Slot(self.clone()))
    }

    /// [`Connections::admit`], waiting (briefly, up to [`CLOSING_WAIT`]) while the connections
    /// already evicted close: in a burst, evictions can run ahead of the tasks that close them,
    /// and a real client arriving then must not be refused for it. `accept` pauses meanwhile;
    /// the kernel queues new clients.
    async fn admit_when_room(self: &Arc<Self>) -> Option<Slot> {
        let started = tokio::time::Instant::now();
        loop {
            match self.admit() {
                Admission::Admitted(slot) => return Some(slot),
                Admission::Full => return None,
                Admission::Closing if started.elapsed() >= CLOSING_WAIT => return None,
                Admission::Closing => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    }

    /// Tells the oldest connection still in its handshake to close; false if there is none.
    fn evict_oldest_handshake(&self) -> bool {
        let mut handshakes = self.lock_handshakes();
        while let Some((_, evict)) = handshakes.pop_first() {
            // A closed receiver is a handshake that has just ended: try the next.
            if evict.send(()).is_ok() {
                return true;
            }
        }
        false
    }

    fn lock_handshakes(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, oneshot::Sender<()>>> {
        self.handshakes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a handshake as evictable until the returned entry is dropped.
    fn start_handshake(self: &Arc<Self>) -> (HandshakeEntry, oneshot::Receiver<()>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (evict, evicted) = oneshot::channel();
        self.lock_handshakes().insert(id, evict);
        let entry = HandshakeEntry {
            connections: self.clone(),
            id,
        };
        (entry, evicted)
    }
}

/// What [`Connections::admit`] decided for a new connection.
enum Admission {
    Admitted(Slot),
    /// Every open connection is past its handshake: close the new one.
    Full,
    /// Connections evicted to make room have not closed yet: ask again shortly.
    Closing,
}

/// One admitted connection's place under the cap, given back on drop.
struct Slot(Arc<Connections>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        metrics().connections.dec();
    }
}

/// A handshake in progress, evictable until dropped.
struct HandshakeEntry {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for HandshakeEntry {
    fn drop(&mut self) {
        self.connections.lock_handshakes().remove(&self.id);
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
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // tonic stopped accepting (shutdown): returning drops, and so closes, the listener.
            _ = ready.closed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff.reset();
                stream
            }
            Err(error) => {
                if let Some(pause) = backoff.after(&error) {
                    metrics().accept_errors.inc();
                    if let Some(suppressed) = ACCEPT_LOG.admit() {
                        tracing::warn!(%error, ?pause, suppressed, "cannot accept connections; pausing");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = ready.closed() => return,
                    }
                }
                continue;
            }
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

/// Runs one connection's handshake under the deadline and hands it to tonic if it completes.
async fn handshake(
    connections: Arc<Connections>,
    slot: Slot,
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    ready: mpsc::Sender<Connection>,
) {
    let (entry, evicted) = connections.start_handshake();
    let deadline = connections.limits.handshake_timeout;
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(deadline, complete_handshake(stream, tls)) => {
            outcome.unwrap_or(Err(HandshakeFailure::TimedOut))
        }
        Ok(()) = evicted => Err(HandshakeFailure::Evicted),
    };
    drop(entry);
    match outcome {
        Ok((transport, replay)) => {
            let connection = Connection {
                transport,
                replay,
                replayed: 0,
                _slot: slot,
            };
            // Fails only when the server stopped accepting; the connection closes then.
            let _ = ready.send(connection).await;
        }
        Err(failure) => failure.record(&connections.limits),
    }
}

async fn complete_handshake(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
) -> Result<(Transport, Vec<u8>), HandshakeFailure> {
    let mut transport = match tls {
        None => Transport::Plain(stream),
        Some(tls) => Transport::Tls(Box::new(
            tls.accept(stream).await.map_err(HandshakeFailure::Tls)?,
        )),
    };
    let received = read_preface(&mut transport).await?;
    Ok((transport, received))
}

/// Reads until the client's preface and first SETTINGS frame are in, or until the bytes show
/// that this is not an HTTP/2 client (hyper answers those itself). Returns everything read.
async fn read_preface(io: &mut (impl AsyncRead + Unpin)) -> Result<Vec<u8>, HandshakeFailure> {
    let mut received = Vec::with_capacity(512);
    while !handshake_read(&received) {
        if received.capacity() == received.len() {
            received.reserve(512);
        }
        if io
            .read_buf(&mut received)
            .await
            .map_err(HandshakeFailure::Io)?
            == 0
        {
            return Err(HandshakeFailure::Closed);
        }
    }
    Ok(received)
}

/// Whether `received` holds a whole client handshake (the preface, then a SETTINGS frame), or
/// bytes that cannot become one: then hyper must see them now and refuse them.
fn handshake_read(received: &[u8]) -> bool {
    let compared = received.len().min(PREFACE.len());
    if received[..compared] != PREFACE[..compared] {
        return true;
    }
    let Some(header) = received.get(PREFACE.len()..PREFACE.len() + FRAME_HEADER_LEN) else {
        return false;
    };
    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    if header[3] != SETTINGS_FRAME || length > MAX_SETTINGS_LEN {
        return true;
    }
    received.len() >= PREFACE.len() + FRAME_HEADER_LEN + length
}

/// Why a connection was closed before tonic saw it.
#[derive(Debug, thiserror::Error)]
enum HandshakeFailure {
    #[error("no TLS and HTTP/2 handshake within --handshake-timeout")]
    TimedOut,
    #[error("a new connection took its place at --max-connections")]
    Evicted,
    /// Port scanners and TCP health checks do this.
    #[error("the client closed it")]
    Closed,
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("{0}")]
    Io(io::Error),
}

impl HandshakeFailure {
    fn kind(&self) -> &'static str {
        match self {
            HandshakeFailure::TimedOut => "timeout",
            HandshakeFailure::Evicted => "evicted",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::Tls(_) => "tls",
            HandshakeFailure::Io(_) => "io",
        }
    }

    /// Counts it, and logs the kinds that mean a client misbehaves or the cap is too low.
    fn record(&self, limits: &ConnectionLimits) {
        metrics()
            .handshake_failures
            .get_or_create(&KindLabels { kind: self.kind() })
            .inc();
        match self {
            HandshakeFailure::TimedOut | HandshakeFailure::Evicted | HandshakeFailure::Tls(_) => {
                if let Some(suppressed) = HANDSHAKE_LOG.admit() {
                    tracing::warn!(
                        reason = self.kind(),
                        error = %self,
                        handshake_timeout = ?limits.handshake_timeout,
                        max_connections = limits.max_connections,
                        suppressed,
                        "closed a connection that did not complete its handshake"
                    );
                }
            }
            HandshakeFailure::Closed | HandshakeFailure::Io(_) => {
                tracing::debug!(reason = self.kind(), error = %self, "connection closed in its handshake");
            }
        }
    }
}

/// How long to pause accepting after an error: not at all for an error of the one connection
/// being accepted (it is gone; take the next), else 10 ms, doubling up to 1 s while errors last.
#[derive(Debug)]
struct AcceptBackoff {
    next: Duration,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        AcceptBackoff {
            next: ACCEPT_BACKOFF_MIN,
        }
    }
}

impl AcceptBackoff {
    fn after(&mut self, error: &io::Error) -> Option<Duration> {
        use io::ErrorKind::*;
        if matches!(
            error.kind(),
            ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
        ) {
            return None;
        }
        let pause = self.next;
        self.next = (self.next * 2).min(ACCEPT_BACKOFF_MAX);
        Some(pause)
    }

    fn reset(&mut self) {
        self.next = ACCEPT_BACKOFF_MIN;
    }
}

/// A client connection past its handshake, as tonic serves it: it replays the bytes read during
/// the handshake, then reads from the socket; it holds its place under the cap until dropped.
pub struct Connection {
    transport: Transport,
    replay: Vec<u8>,
    replayed: usize,
    _slot: Slot,
}

enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Transport {
    fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(stream) => stream,
            Transport::Tls(stream) => stream.get_ref().0,
        }
    }
}

/// What a handler may know about the connection a call came on (a request extension).
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    pub tcp: TcpConnectInfo,
    /// The subject of the client certificate, on an mTLS connection (e.g. "CN=ops-alice").
    pub peer_subject: Option<Arc<str>>,
}

impl Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        let peer_subject = match &self.transport {
            Transport::Plain(_) => None,
            Transport::Tls(stream) => stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|certificate| certificate_subject(certificate.as_ref())),
        };
        ConnectionInfo {
            tcp: self.transport.tcp().connect_info(),
            peer_subject,
        }
    }
}

/// The subject of a DER certificate (already verified by rustls against the client CA).
fn certificate_subject(der: &[u8]) -> Option<Arc<str>> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(certificate.subject().to_string().into())
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.replayed < this.replay.len() {
            let count = (this.replay.len() - this.replayed).min(buf.remaining());
            buf.put_slice(&this.replay[this.replayed..this.replayed + count]);
            this.replayed += count;
            if this.replayed == this.replay.len() {
                // Replayed in full: free the buffer for the connection's whole life.
                this.replay = Vec::new();
                this.replayed = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.transport).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().transport).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().transport).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.transport.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().transport).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().transport).poll_shutdown(cx)
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Transport::Tls(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Transport::Tls(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Transport::Tls(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Transport::Plain(stream) => stream.is_write_vectored(),
            Transport::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Transport::Tls(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Transport::Tls(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings_frame(payload_len: usize) -> Vec<u8> {
        let len = (payload_len as u32).to_be_bytes();
        let mut frame = vec![len[1], len[2], len[3], SETTINGS_FRAME, 0, 0, 0, 0, 0];
        frame.resize(FRAME_HEADER_LEN + payload_len, 0);
        frame
    }

    /// The handshake is complete only with the preface and a whole SETTINGS frame; a partial
    /// preface or frame needs more bytes.
    #[test]
    fn a_handshake_is_the_preface_and_a_whole_settings_frame() {
        let mut handshake = PREFACE.to_vec();
        handshake.extend(settings_frame(12));
        for end in 0..handshake.len() {
            assert!(!handshake_read(&handshake[..end]), "{end} bytes");
        }
        assert!(handshake_read(&handshake));
        // The client's next frames may arrive in the same read.
        handshake.extend([0, 0, 4, 8, 0, 0, 0, 0, 0]);
        assert!(handshake_read(&handshake));
        // An empty SETTINGS frame is a whole handshake too.
        let mut empty = PREFACE.to_vec();
        empty.extend(settings_frame(0));
        assert!(handshake_read(&empty));
    }

    /// Bytes that cannot become an HTTP/2 handshake go to hyper at once, which refuses them:
    /// an HTTP/1.1 request, TLS to a plaintext port, a first frame other than SETTINGS, a
    /// SETTINGS frame over the default frame size.
    #[test]
    fn bytes_that_are_not_a_handshake_go_to_hyper_at_once() {
        assert!(handshake_read(b"GET / HTTP/1.1\r\n"));
        assert!(handshake_read(&[0x16, 0x03, 0x01]));
        assert!(handshake_read(b"PRI * HTTP/1.1"));
        let mut headers_first = PREFACE.to_vec();
        headers_first.extend([0, 0, 4, 0x1, 0, 0, 0, 0, 1]);
        assert!(handshake_read(&headers_first));
        let mut oversize = PREFACE.to_vec();
        oversize.extend(&settings_frame(MAX_SETTINGS_LEN + 1)[..FRAME_HEADER_LEN]);
        assert!(handshake_read(&oversize));
    }

    /// Errors of the connection being accepted are skipped at once; resource errors pause
    /// accepting, doubling up to a second, until an accept succeeds.
    #[test]
    fn accept_pauses_only_on_resource_errors_and_backs_off() {
        let mut backoff = AcceptBackoff::default();
        let aborted = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert_eq!(backoff.after(&aborted), None);
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let pauses: Vec<_> = (0..9).map(|_| backoff.after(&emfile).unwrap()).collect();
        assert_eq!(pauses[0], Duration::from_millis(10));
        assert_eq!(pauses[1], Duration::from_millis(20));
        assert_eq!(pauses[6], Duration::from_millis(640));
        assert_eq!(pauses[7], Duration::from_secs(1));
        assert_eq!(pauses[8], Duration::from_secs(1));
        backoff.reset();
        let enfile = io::Error::from_raw_os_error(libc::ENFILE);
        assert_eq!(backoff.after(&enfile), Some(Duration::from_millis(10)));
    }

    /// At the cap, a new connection evicts the oldest handshake; with none left, it is refused.
    #[tokio::test]
    async fn at_the_cap_the_oldest_handshake_makes_room() {
        let connections = Connections::new(ConnectionLimits {
            max_connections: 2,
            ..ConnectionLimits::default()
        });
        let admitted = |admission| match admission {
            Admission::Admitted(slot) => Some(slot),
            Admission::Full | Admission::Closing => None,
        };
        let first = admitted(connections.admit()).unwrap();
        let (first_entry, mut first_evicted) = connections.start_handshake();
        let second = admitted(connections.admit()).unwrap();
        let (second_entry, mut second_evicted) = connections.start_handshake();

        let third = admitted(connections.admit()).expect("evicts the oldest handshake");
        assert!(
            first_evicted.try_recv().is_ok(),
            "the oldest is told to close"
        );
        assert!(second_evicted.try_recv().is_err());
        drop((first_entry, first));

        // The second completes its handshake: nothing is evictable, so the cap holds.
        drop(second_entry);
        assert!(matches!(connections.admit(), Admission::Full));
        drop(second);
        assert!(
            admitted(connections.admit()).is_some(),
            "a closed connection frees its slot"
        );
        drop(third);
    }
}
