//! The metrics port (`--metrics-listen`): `GET /metrics` in the Prometheus text format over plain
//! HTTP/1.1. It carries no lease data and needs no token. Its guards ([`super::http_port`]) are
//! smaller than the gRPC port's, since one Prometheus needs one connection per scrape: at most
//! [`MAX_CONNECTIONS`], one request per connection (no keep-alive, so no connection idles between
//! scrapes), [`MAX_CONNECTION_AGE`] at most. It answers only a `Host` that is an IP address (the
//! pod's, as probes and Prometheus send), `localhost` or a `--metrics-host` name.

use std::{convert::Infallible, net::SocketAddr, time::Duration};

use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Bytes, header};
use tokio::net::TcpListener;

use super::http_port::{self, AllowedHosts, HttpPort};
use crate::{
    metrics::metrics,
    shutdown::Shutdown,
    throttle::{LOG_INTERVAL, Throttle},
};

/// Open connections of the metrics port, at most.
pub const MAX_CONNECTIONS: usize = 32;

/// The longest a connection stays open: a scrape of a few hundred kilobytes takes milliseconds.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(10);

static EVICTED_LOG: Throttle = Throttle::new(LOG_INTERVAL);

/// Serves the metrics port on `listener` until `shutdown` fires, to requests naming `hosts` (or
/// an IP address, or `localhost`).
pub(super) async fn serve(
    listener: TcpListener,
    request_timeout: Duration,
    hosts: Vec<String>,
    shutdown: Shutdown,
) {
    let port = HttpPort {
        name: "metrics",
        max_connections: MAX_CONNECTIONS,
        max_connection_age: MAX_CONNECTION_AGE,
        keep_alive: false,
        request_timeout,
        evictions: &metrics().metrics_port_evictions,
        eviction_log: &EVICTED_LOG,
        hosts: AllowedHosts::new(hosts, "--metrics-host"),
    };
    http_port::serve(listener, port, respond, shutdown).await;
}

/// `GET /metrics`; 405 for another method on it, 404 elsewhere.
async fn respond(
    request: Request<hyper::body::Incoming>,
    _peer: SocketAddr,
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
