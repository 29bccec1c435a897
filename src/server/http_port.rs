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
//! - **Host** ([`AllowedHosts`]): every request, whatever its method and path, must name this
//!   server as an IP address, `localhost` or a name given by the port's flag (`--console-host`,
//!   `--metrics-host`); another name answers 421, no `Host` 400. This stops DNS rebinding: a page
//!   of another site whose name its owner re-points at this address is same-origin with the port
//!   in the browser, but its requests carry that name.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, Ipv6Addr},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::{
    TryFutureExt,
    future::{self, Either},
};
use http_body_util::{Either as EitherBody, Full};
use hyper::{
    Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{self, HeaderValue},
    service::service_fn,
};
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
    /// The names, besides IP addresses and `localhost`, that requests may carry as their `Host`.
    pub hosts: AllowedHosts,
}

static ACCEPT_LOG: Throttle = Throttle::new(LOG_INTERVAL);

static MISDIRECTED_LOG: Throttle = Throttle::new(LOG_INTERVAL);

/// The `Host` values a side port answers: any IP literal, `localhost`, and the names of its flag.
///
/// - **IP literals, any of them**: DNS rebinding needs a name (the attacker's, re-pointed at this
///   address); a page whose origin is an IP address is served by whoever has that address, so it
///   is this port's own page or another origin. Kubernetes probes and Prometheus reach the pods
///   by their IP, which the server does not know in advance (it listens on 0.0.0.0).
/// - **`localhost`**: the name `kubectl port-forward` and a local browser use; an attacker cannot
///   re-point it (browsers resolve it to loopback without asking DNS).
/// - **Any port**: `kubectl port-forward 9000:8080` and a TLS proxy change the port the browser
///   sends, and a page on another port is another origin anyway: the name is what is attacked.
/// - **No `Host`** (HTTP/1.0): refused. Every browser, probe and Prometheus sends one, and a
///   request that names no host cannot show that it is meant for this server.
#[derive(Clone, Debug, Default)]
pub(crate) struct AllowedHosts {
    /// Lowercase names without a trailing dot, as `config` parses the flag.
    names: Vec<String>,
    /// The flag that adds names, for the refusal's text: "--console-host".
    flag: &'static str,
}

impl AllowedHosts {
    pub(crate) fn new(names: Vec<String>, flag: &'static str) -> Self {
        AllowedHosts { names, flag }
    }

    /// Why `request` is refused, or `None` if its `Host` (and the authority of an absolute URI,
    /// which a proxy may send besides it) names this server.
    fn refusal<B>(&self, request: &Request<B>) -> Option<(StatusCode, String)> {
        let Some(host) = request.headers().get(header::HOST) else {
            let reason = "host: missing: name this server in a Host header";
            return Some((StatusCode::BAD_REQUEST, reason.to_owned()));
        };
        let Ok(host) = host.to_str() else {
            let reason = "host: not a host name (bytes outside visible ASCII)";
            return Some((StatusCode::BAD_REQUEST, reason.to_owned()));
        };
        let authority = request
            .uri()
            .authority()
            .map(|authority| authority.as_str());
        let foreign = [Some(host), authority]
            .into_iter()
            .flatten()
            .find(|named| !self.admits(named))?;
        let reason = format!(
            "host: {foreign:?} is not a name of this server: use its IP address or localhost, \
             or start it with {} NAME",
            self.flag
        );
        Some((StatusCode::MISDIRECTED_REQUEST, reason))
    }

    /// Whether `authority` (`name`, `name:port`, `1.2.3.4:port`, `[::1]:port`) names this
    /// server.
    fn admits(&self, authority: &str) -> bool {
        let Some(host) = host_of(authority) else {
            return false;
        };
        if let Some(bracketed) = host.strip_prefix('[').and_then(|v6| v6.strip_suffix(']')) {
            return bracketed.parse::<Ipv6Addr>().is_ok();
        }
        if host.parse::<Ipv4Addr>().is_ok() {
            return true;
        }
        let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        name == "localhost" || self.names.contains(&name)
    }
}

/// The host of `authority` without its port; `None` unless it is `host[:digits]` or
/// `[v6][:digits]` (user info, an unbracketed IPv6 address, spaces: no browser sends those).
fn host_of(authority: &str) -> Option<&str> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')? + 1;
        let (host, rest) = authority.split_at(end);
        let port = if rest.is_empty() {
            rest
        } else {
            rest.strip_prefix(':')?
        };
        (host, port)
    } else {
        authority.split_once(':').unwrap_or((authority, ""))
    };
    let name_like = !host.is_empty()
        && host
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_'));
    let valid =
        port.bytes().all(|byte| byte.is_ascii_digit()) && (host.starts_with('[') || name_like);
    valid.then_some(host)
}

/// The answer to a request refused for its `Host`: one line of plain text.
fn misdirected(port: &HttpPort, status: StatusCode, reason: String) -> Response<Full<Bytes>> {
    if let Some(suppressed) = MISDIRECTED_LOG.admit() {
        tracing::warn!(port = port.name, %status, reason, suppressed, "request refused for its Host");
    }
    let mut response = Response::new(Full::new(Bytes::from(reason + "\n")));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Serves `listener` with `respond` under `port`'s guards until `shutdown` fires.
pub(super) async fn serve<F, Fut, B>(
    listener: TcpListener,
    port: HttpPort,
    respond: F,
    shutdown: Shutdown,
) where
    F: Fn(Request<Incoming>, std::net::SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
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
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
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
    let guards = port.clone();
    let service =
        service_fn(
            move |request: Request<Incoming>| match guards.hosts.refusal(&request) {
                None => Either::Left(
                    respond(request, peer).map_ok(|response| response.map(EitherBody::Left)),
                ),
                Some((status, reason)) => {
                    let refused = misdirected(&guards, status, reason).map(EitherBody::Right);
                    Either::Right(future::ok(refused))
                }
            },
        );
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
            hosts: AllowedHosts::default(),
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

    /// IP literals (any port), `localhost` and the configured names pass; another name, a
    /// malformed Host and none at all are refused.
    #[test]
    fn a_host_passes_only_as_an_ip_literal_localhost_or_a_configured_name() {
        let hosts = AllowedHosts::new(vec!["leases.example".to_owned()], "--console-host");
        let refusal = |host: Option<&str>, uri: &str| {
            let mut request = Request::builder().uri(uri);
            if let Some(host) = host {
                request = request.header(header::HOST, host);
            }
            hosts
                .refusal(&request.body(()).unwrap())
                .map(|(status, _)| status)
        };
        for allowed in [
            "127.0.0.1:28081",
            "127.0.0.1",
            "10.1.2.3:9090",
            "[::1]:8080",
            "[::1]",
            "[fd00::7]:9090",
            "localhost:8080",
            "LocalHost",
            "localhost.:9000",
            "leases.example",
            "Leases.Example:443",
        ] {
            assert_eq!(refusal(Some(allowed), "/"), None, "{allowed}");
        }
        for foreign in [
            "attacker.example:28081",
            "attacker.example",
            "127.0.0.1.nip.io",
            "localhost.attacker.example",
            "leases.example.attacker.example",
            "attacker.example@127.0.0.1",
            "::1",
            "[::1",
            "127.0.0.1:80a",
            "",
        ] {
            assert_eq!(
                refusal(Some(foreign), "/"),
                Some(StatusCode::MISDIRECTED_REQUEST),
                "{foreign}"
            );
        }
        assert_eq!(refusal(None, "/"), Some(StatusCode::BAD_REQUEST));
        // A proxy's absolute URI names the host too: both must be this server.
        assert_eq!(
            refusal(Some("127.0.0.1"), "http://attacker.example/api/leases"),
            Some(StatusCode::MISDIRECTED_REQUEST)
        );
        assert_eq!(refusal(Some("127.0.0.1"), "http://localhost:8080/"), None);
    }
}
