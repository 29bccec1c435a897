//! The operator's console (`--console-listen`): one page, embedded in the binary, that shows the
//! leases under a prefix, one lease live, and revokes with a reason. Plain HTTP/1.1 under the side
//! ports' guards ([`super::http_port`]), with keep-alive for the browser. Those guards answer only
//! a `Host` that is an IP address, `localhost` or a `--console-host` name: without that, a page
//! of any site whose name is re-pointed at 127.0.0.1 (DNS rebinding) would be same-origin with the
//! console, and with access control off could list and revoke.
//!
//! The console holds no lease logic and no privileges of its own: each API call becomes a call of
//! the gRPC services' handlers in this process (List, Describe, Watch, Revoke), with the page's
//! bearer token as the call's `authorization` metadata. So validation, access control, the audit
//! log of Revoke, metrics and the bounds on followed names are exactly the gRPC port's.
//!
//! - `GET /`, `/console.js`, `/console.css`: the page (`assets/`), under a strict
//!   Content-Security-Policy: no inline script or style, nothing from another origin.
//! - `GET /api/session`, `/api/leases`, `/api/lease`, `/api/watch` (server-sent events),
//!   `POST /api/revoke`: JSON ([`api`]).

mod api;
mod json;

pub(super) use api::ViaConsole;

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::{
    HeaderMap, Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{self, HeaderValue},
};
use tokio::net::TcpListener;

use super::{
    admin::LeaseAdminServiceImpl,
    auth::Authenticator,
    http_port::{self, AllowedHosts, HttpPort},
    service::LeaseServiceImpl,
};
use crate::{
    lease::QueueStore,
    metrics::metrics,
    shutdown::Shutdown,
    throttle::{LOG_INTERVAL, Throttle},
};

/// Open console connections, at most: a tab uses one or two (its requests and a watch), so this
/// is dozens of operators. At the cap the oldest closes; its tab reconnects.
pub const MAX_CONNECTIONS: usize = 128;

/// The longest a console connection stays open, a watch included: the tab reconnects and reads
/// the lease afresh, so a connection that stalled halfway is gone within this.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(10 * 60);

/// The page, its script and its style: a few hundred lines, served from the binary so that a
/// cluster without internet shows it.
const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// Scripts, styles and requests from this origin only; no inline script or style, no plugins, no
/// framing, no forms: a holder name that smuggles markup into the page can run nothing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

static EVICTED_LOG: Throttle = Throttle::new(LOG_INTERVAL);

/// A response body: a whole one, or a stream of server-sent events.
type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What the console's handlers call: the gRPC services' handlers, shared with the gRPC port.
pub(super) struct Console<S> {
    pub leases: Arc<LeaseServiceImpl<S>>,
    pub admin: Arc<LeaseAdminServiceImpl<S>>,
    pub auth: Option<Arc<Authenticator>>,
    /// How long a request (its headers, and a revoke's body) may take to arrive.
    pub request_timeout: Duration,
    /// Names the console answers to besides IP addresses and `localhost` (`--console-host`).
    pub hosts: Vec<String>,
}

/// Serves the console on `listener` until `shutdown` fires.
pub(super) async fn serve<S: QueueStore>(
    listener: TcpListener,
    mut console: Console<S>,
    shutdown: Shutdown,
) {
    let hosts = AllowedHosts::new(std::mem::take(&mut console.hosts), "--console-host");
    let port = HttpPort {
        name: "console",
        max_connections: MAX_CONNECTIONS,
        max_connection_age: MAX_CONNECTION_AGE,
        keep_alive: true,
        request_timeout: console.request_timeout,
        evictions: &metrics().console_evictions,
        eviction_log: &EVICTED_LOG,
        hosts,
    };
    let console = Arc::new(console);
    let respond = move |request, peer| {
        let console = console.clone();
        async move { Ok::<_, Infallible>(secured(route(&console, request, peer).await)) }
    };
    http_port::serve(listener, port, respond, shutdown).await;
}

/// The page's files, the API, or 404.
async fn route<S: QueueStore>(
    console: &Console<S>,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/") => asset(INDEX_HTML, "text/html; charset=utf-8"),
        (&Method::GET, "/console.js") => asset(CONSOLE_JS, "text/javascript; charset=utf-8"),
        (&Method::GET, "/console.css") => asset(CONSOLE_CSS, "text/css; charset=utf-8"),
        (_, "/" | "/console.js" | "/console.css") => method_not_allowed("GET"),
        (_, path) if path.starts_with("/api/") => api::respond(console, request, peer).await,
        _ => plain(StatusCode::NOT_FOUND, "not found"),
    }
}

/// Every response the console makes: `body` with its status, content type and caching.
fn response(
    status: StatusCode,
    body: Body,
    content_type: &'static str,
    cache_control: Option<&'static str>,
) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(cache_control) = cache_control {
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(cache_control),
        );
    }
    response
}

fn whole(bytes: Bytes) -> Body {
    Full::new(bytes).boxed_unsync()
}

fn asset(text: &'static str, content_type: &'static str) -> Response<Body> {
    // The files change only with the binary; revalidating each load costs little.
    let body = whole(Bytes::from_static(text.as_bytes()));
    response(StatusCode::OK, body, content_type, Some("no-cache"))
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let body = whole(Bytes::from_static(text.as_bytes()));
    response(status, body, "text/plain; charset=utf-8", None)
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// The headers every response carries: the page's policy, and no sniffing, framing or referrer.
fn secured(mut response: Response<Body>) -> Response<Body> {
    let headers: &mut HeaderMap = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page loads its script and style from files, never inline, so the policy can forbid
    /// inline script; and it references nothing outside this origin.
    #[test]
    fn the_page_has_no_inline_script_or_style_and_no_external_assets() {
        let page = INDEX_HTML.to_lowercase();
        assert!(page.contains(r#"<script src="/console.js""#));
        assert_eq!(
            page.matches("<script").count(),
            1,
            "one script, from a file"
        );
        assert!(!page.contains("<style"), "no inline style element");
        assert!(!page.contains(" style="), "no inline style attribute");
        let handler = page.split_whitespace().find(|word| {
            word.strip_prefix("on")
                .and_then(|rest| rest.split_once('='))
                .is_some_and(|(event, _)| event.chars().all(|c| c.is_ascii_lowercase()))
        });
        assert_eq!(handler, None, "no inline event handler");
        // Nothing from another origin; the one URL is the SVG namespace, which is never fetched.
        for text in [INDEX_HTML, CONSOLE_JS, CONSOLE_CSS] {
            let fetched = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!fetched.contains("http://") && !fetched.contains("https://"));
            assert!(!fetched.contains("//cdn") && !fetched.contains("@import"));
        }
        // The script builds the page from text nodes: holder names are never parsed as markup.
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!CONSOLE_JS.contains(sink), "console.js uses {sink}");
        }
        assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self'"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }
}
