//! A fault-injecting TCP proxy for the link between `leased` and Redis.
//!
//! It runs on its own thread and runtime, so a busy test runtime never slows the link down, and
//! its mode can be switched from any thread:
//! - [`Fault::Pass`]: bytes flow both ways.
//! - [`Fault::Delay`]: every chunk is held back for the given time, in order.
//! - [`Fault::BlackHole`]: connections are accepted and bytes are read, then dropped. A connection
//!   that lost bytes is closed when the black hole ends (as TCP would give up on it): a byte stream
//!   with a hole in it must never be delivered.
//! - [`Fault::Cut`]: every open connection is closed and new ones are refused (nothing listens).
//!
//! Independently of the mode, [`FaultProxy::block_replication`] closes every connection that
//! speaks Redis's replication protocol (its client sent `REPLCONF` or `PSYNC`): a replica behind
//! the proxy stops receiving writes while every other client is served as usual, and
//! [`FaultProxy::delay_replication`] holds back what the master sends a replica: a lagging
//! replica.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::{mpsc, oneshot, watch},
    time::Instant,
};

/// What the proxy does to the traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Pass,
    Delay(Duration),
    BlackHole,
    Cut,
}

/// A running proxy from `127.0.0.1:port` to one upstream address.
pub struct FaultProxy {
    pub port: u16,
    mode: watch::Sender<Fault>,
    replication_blocked: watch::Sender<bool>,
    replication_delay: watch::Sender<Duration>,
    stats: Arc<ProxyStats>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What the proxy did, so that a test can confirm a fault was injected rather than assume it.
#[derive(Debug, Default)]
pub struct ProxyStats {
    pub connections: AtomicUsize,
    pub connections_closed_by_fault: AtomicUsize,
    pub chunks_dropped: AtomicUsize,
    /// Chunks held back by a [`Fault::Delay`] (not by a replication delay).
    pub chunks_delayed: AtomicUsize,
}

/// A snapshot of [`ProxyStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyCounts {
    pub connections: usize,
    pub connections_closed_by_fault: usize,
    pub chunks_dropped: usize,
    pub chunks_delayed: usize,
}

impl ProxyStats {
    pub fn counts(&self) -> ProxyCounts {
        ProxyCounts {
            connections: self.connections.load(Ordering::Relaxed),
            connections_closed_by_fault: self.connections_closed_by_fault.load(Ordering::Relaxed),
            chunks_dropped: self.chunks_dropped.load(Ordering::Relaxed),
            chunks_delayed: self.chunks_delayed.load(Ordering::Relaxed),
        }
    }
}

impl ProxyCounts {
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &ProxyCounts) -> ProxyCounts {
        ProxyCounts {
            connections: self.connections - earlier.connections,
            connections_closed_by_fault: self.connections_closed_by_fault
                - earlier.connections_closed_by_fault,
            chunks_dropped: self.chunks_dropped - earlier.chunks_dropped,
            chunks_delayed: self.chunks_delayed - earlier.chunks_delayed,
        }
    }
}

impl FaultProxy {
    /// Starts forwarding a fresh loopback port to `upstream`, in [`Fault::Pass`] mode.
    pub fn start(upstream: SocketAddr) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("proxy cannot bind");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (mode, mode_rx) = watch::channel(Fault::Pass);
        let (replication_blocked, blocked_rx) = watch::channel(false);
        let (replication_delay, delay_rx) = watch::channel(Duration::ZERO);
        let (stop, stop_rx) = oneshot::channel();
        let stats = Arc::new(ProxyStats::default());
        let thread_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{port}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener).unwrap();
                    tokio::select! {
                        _ = accept_loop(listener, port, upstream, mode_rx, blocked_rx, delay_rx, thread_stats) => {}
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime cancels every connection task and closes their sockets.
            })
            .unwrap();
        FaultProxy {
            port,
            mode,
            replication_blocked,
            replication_delay,
            stats,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// A `redis://` URL that reaches the upstream through this proxy.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Switches the fault mode; takes effect at once for new and open connections.
    pub fn set(&self, fault: Fault) {
        self.mode.send_replace(fault);
    }

    pub fn fault(&self) -> Fault {
        *self.mode.borrow()
    }

    /// While `true`, connections that speak the replication protocol are closed.
    pub fn block_replication(&self, blocked: bool) {
        self.replication_blocked.send_replace(blocked);
    }

    /// Holds back what the master sends on replication links by `delay` (zero: none), from the
    /// next chunk on: the replica lags that far behind the master.
    pub fn delay_replication(&self, delay: Duration) {
        self.replication_delay.send_replace(delay);
    }

    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(
    first_listener: TcpListener,
    port: u16,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Fault>,
    blocked: watch::Receiver<bool>,
    replication_delay: watch::Receiver<Duration>,
    stats: Arc<ProxyStats>,
) {
    let mut listener = Some(first_listener);
    loop {
        if *mode.borrow_and_update() == Fault::Cut {
            // Refuse: nothing listens on the port while the link is cut.
            listener = None;
            if mode.changed().await.is_err() {
                return;
            }
            continue;
        }
        let active = match listener.take() {
            Some(active) => active,
            None => match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(active) => active,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        loop {
            tokio::select! {
                accepted = active.accept() => {
                    if let Ok((socket, _)) = accepted {
                        let _ = socket.set_nodelay(true);
                        stats.connections.fetch_add(1, Ordering::Relaxed);
                        tokio::spawn(connection(
                            socket,
                            upstream,
                            mode.clone(),
                            blocked.clone(),
                            replication_delay.clone(),
                            stats.clone(),
                        ));
                    }
                }
                changed = mode.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *mode.borrow() == Fault::Cut {
                        break;
                    }
                }
            }
        }
    }
}

/// One proxied connection, until either side closes or a fault ends it.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Fault>,
    mut blocked: watch::Receiver<bool>,
    replication_delay: watch::Receiver<Duration>,
    stats: Arc<ProxyStats>,
) {
    let broken = Arc::new(AtomicBool::new(false));
    if *mode.borrow_and_update() == Fault::BlackHole {
        // Born in a black hole: swallow everything until it ends, then close.
        broken.store(true, Ordering::SeqCst);
        let (mut reader, _writer) = client.into_split();
        let swallow = async {
            let mut buffer = vec![0u8; 16 * 1024];
            while let Ok(n) = reader.read(&mut buffer).await {
                if n == 0 {
                    return;
                }
                stats.chunks_dropped.fetch_add(1, Ordering::Relaxed);
            }
        };
        tokio::select! {
            _ = swallow => {}
            _ = until_fault_ends(&mut mode, &broken) => {
                stats.connections_closed_by_fault.fetch_add(1, Ordering::Relaxed);
            }
        }
        return;
    }
    let server =
        match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(upstream)).await {
            Ok(Ok(server)) => server,
            _ => return, // upstream down: the client sees its connection close
        };
    let _ = server.set_nodelay(true);
    let (client_reader, client_writer) = client.into_split();
    let (server_reader, server_writer) = server.into_split();
    let replication = Arc::new(AtomicBool::new(false));
    let upstream_pump = pump(
        client_reader,
        server_writer,
        mode.clone(),
        broken.clone(),
        Some((replication.clone(), blocked.clone())),
        None,
        stats.clone(),
    );
    let downstream_pump = pump(
        server_reader,
        client_writer,
        mode.clone(),
        broken.clone(),
        None,
        Some((replication.clone(), replication_delay)),
        stats.clone(),
    );
    tokio::select! {
        _ = upstream_pump => {}
        _ = downstream_pump => {}
        _ = until_fault_ends(&mut mode, &broken) => {
            stats.connections_closed_by_fault.fetch_add(1, Ordering::Relaxed);
        }
        _ = until_replication_blocked(&mut blocked, &replication) => {
            stats.connections_closed_by_fault.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Resolves when replication is blocked and this connection is a replication link.
async fn until_replication_blocked(blocked: &mut watch::Receiver<bool>, replication: &AtomicBool) {
    loop {
        if *blocked.borrow_and_update() && replication.load(Ordering::SeqCst) {
            return;
        }
        if blocked.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Whether a chunk a client sent is part of Redis's replication handshake or stream.
fn speaks_replication(chunk: &[u8]) -> bool {
    [b"REPLCONF".as_slice(), b"PSYNC".as_slice()]
        .iter()
        .any(|marker| chunk.windows(marker.len()).any(|window| window == *marker))
}

/// Resolves when this connection must be closed: the link is cut, or a black hole that ate some
/// of its bytes has ended.
async fn until_fault_ends(mode: &mut watch::Receiver<Fault>, broken: &AtomicBool) {
    loop {
        match *mode.borrow_and_update() {
            Fault::Cut => return,
            Fault::Pass | Fault::Delay(_) if broken.load(Ordering::SeqCst) => return,
            _ => {}
        }
        if mode.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Copies one direction, applying the fault of the moment each chunk was read. Delayed chunks
/// keep their order: a chunk never overtakes an earlier, longer-delayed one.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mode: watch::Receiver<Fault>,
    broken: Arc<AtomicBool>,
    replication: Option<(Arc<AtomicBool>, watch::Receiver<bool>)>,
    replication_delay: Option<(Arc<AtomicBool>, watch::Receiver<Duration>)>,
    stats: Arc<ProxyStats>,
) {
    let (chunks, mut pending) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if let Some((is_replication, blocked)) = &replication {
                if speaks_replication(&buffer[..n]) {
                    is_replication.store(true, Ordering::SeqCst);
                }
                if is_replication.load(Ordering::SeqCst) && *blocked.borrow() {
                    return; // never forwarded: the connection closes
                }
            }
            let fault = *mode.borrow();
            if broken.load(Ordering::SeqCst) {
                stats.chunks_dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let lag = match &replication_delay {
                Some((is_replication, delay)) if is_replication.load(Ordering::SeqCst) => {
                    *delay.borrow()
                }
                _ => Duration::ZERO,
            };
            let release_at = match fault {
                Fault::Pass => Instant::now() + lag,
                Fault::Delay(delay) => {
                    stats.chunks_delayed.fetch_add(1, Ordering::Relaxed);
                    Instant::now() + delay + lag
                }
                Fault::BlackHole => {
                    broken.store(true, Ordering::SeqCst);
                    stats.chunks_dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Fault::Cut => return,
            };
            if chunks.send((release_at, buffer[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((release_at, chunk)) = pending.recv().await {
            tokio::time::sleep_until(release_at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}
