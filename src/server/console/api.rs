//! The console's JSON API. Each endpoint is one call of a gRPC handler in this process, with the
//! page's `Authorization: Bearer …` header as the call's metadata and the browser's address as
//! its peer (for the audit log), so it answers exactly what the gRPC port would; a gRPC status
//! becomes an HTTP status and `{"code": …, "message": …}`.
//!
//! - `GET /api/session`: whether access control is on, and what the token may do.
//! - `GET /api/leases?prefix=&page_size=&page_token=`: List.
//! - `GET /api/lease?name=`: Describe, and whether the token may revoke the lease.
//! - `GET /api/watch?name=`: Watch as server-sent events, one JSON event per message, and a
//!   comment every [`HEARTBEAT`] so that proxies and the page know the stream is alive.
//! - `POST /api/revoke` with `{"name", "reason", "fencing_token"}`: Revoke. Only with a JSON
//!   content type and from this origin: another site's page cannot post one in a browser.

use std::{collections::HashMap, convert::Infallible, net::SocketAddr, time::Duration};

use futures::{StreamExt, stream};
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::{
    HeaderMap, Method, Request, Response, StatusCode,
    body::{Bytes, Frame, Incoming},
    header::{self, HeaderValue},
};
use serde_json::{Value, json};
use tonic::{Code, Status, metadata::MetadataValue, transport::server::TcpConnectInfo};

use super::{Body, Console, json as to_json, response, whole};
use crate::{
    error::Error,
    lease::{Refusal, limits::parse_name},
    proto::{
        DescribeRequest, ListRequest, RevokeRequest, WatchRequest,
        lease_admin_service_server::LeaseAdminService, lease_service_server::LeaseService,
    },
    server::{
        admin::ViaConsole,
        auth::Operation,
        connections::ConnectionInfo,
        service::{authenticate, authorize},
    },
};

/// How often a watch stream carries a comment when no event comes.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// A revoke's body, at most: a name and a reason of a few hundred bytes each.
const MAX_BODY_BYTES: usize = 4 * 1024;

pub(super) async fn respond(
    console: &Console,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let query = query(&request);
    let arg = |key: &str| query.get(key).cloned().unwrap_or_default();
    let headers = request.headers().clone();
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let answer = match (&method, path.as_str()) {
        (&Method::GET, "/api/session") => session(console, &grpc_request((), &headers, peer)),
        (&Method::GET, "/api/leases") => {
            let page_size = match arg("page_size") {
                size if size.is_empty() => Ok(0),
                size => size.parse::<u32>().map_err(|_| {
                    refused(Refusal::PageSizeNotANumber {
                        given: size.clone(),
                    })
                }),
            };
            match page_size {
                Ok(page_size) => console
                    .admin
                    .list(grpc_request(
                        ListRequest {
                            prefix: arg("prefix"),
                            page_size,
                            page_token: arg("page_token"),
                        },
                        &headers,
                        peer,
                    ))
                    .await
                    .map(|response| to_json::list(&response.into_inner())),
                Err(status) => Err(status),
            }
        }
        (&Method::GET, "/api/lease") => {
            let name = arg("name");
            let may_revoke = may_revoke(console, &grpc_request((), &headers, peer), &name);
            console
                .leases
                .describe(grpc_request(
                    DescribeRequest { name: name.clone() },
                    &headers,
                    peer,
                ))
                .await
                .map(|response| to_json::lease(&name, &response.into_inner(), may_revoke))
        }
        (&Method::GET, "/api/watch") => {
            return match console
                .leases
                .watch(grpc_request(
                    WatchRequest { name: arg("name") },
                    &headers,
                    peer,
                ))
                .await
            {
                Ok(events) => event_stream(events.into_inner()),
                Err(status) => error(&status),
            };
        }
        (&Method::POST, "/api/revoke") => match revoke_request(request, console).await {
            Ok(message) => console
                .admin
                .revoke(grpc_request(message, &headers, peer))
                .await
                .map(|response| to_json::revoked(&response.into_inner())),
            Err(status) => Err(status),
        },
        (_, "/api/session" | "/api/leases" | "/api/lease" | "/api/watch") => {
            return status_response(
                StatusCode::METHOD_NOT_ALLOWED,
                json_error("method", "use GET"),
            );
        }
        (_, "/api/revoke") => {
            return status_response(
                StatusCode::METHOD_NOT_ALLOWED,
                json_error("method", "use POST"),
            );
        }
        _ => Err(refused(Refusal::NoSuchApi { path: path.clone() })),
    };
    match answer {
        Ok(body) => status_response(StatusCode::OK, body),
        Err(status) => error(&status),
    }
}

/// The query string's parameters, percent-decoded; the last of a repeated one wins.
fn query(request: &Request<Incoming>) -> HashMap<String, String> {
    let query = request.uri().query().unwrap_or_default();
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

/// A call of a gRPC handler on behalf of the page: its bearer token as metadata, the browser's
/// address as the peer, and a mark that it came through the console.
fn grpc_request<T>(message: T, headers: &HeaderMap, peer: SocketAddr) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(authorization) = headers.get(header::AUTHORIZATION)
        && let Ok(value) = MetadataValue::try_from(authorization.as_bytes())
    {
        request.metadata_mut().insert("authorization", value);
    }
    request.extensions_mut().insert(ConnectionInfo {
        tcp: TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(peer),
        },
        peer_certificate: None,
    });
    request.extensions_mut().insert(ViaConsole);
    request
}

/// Who the token is and what it may do; with access control off, everything.
fn session(console: &Console, call: &tonic::Request<()>) -> Result<Value, Status> {
    let principal = authenticate(&console.auth, call)?;
    Ok(match principal {
        None => json!({
            "access_control": false,
            "client": null,
            "operations": Operation::ALL.map(Operation::as_str),
            "prefixes": [""],
        }),
        Some(principal) => json!({
            "access_control": true,
            "client": principal.client,
            "operations": principal.operations().iter().map(|operation| operation.as_str()).collect::<Vec<_>>(),
            "prefixes": principal.prefixes(),
        }),
    })
}

/// Whether the page may offer to revoke `name`: the same check Revoke makes.
fn may_revoke(console: &Console, call: &tonic::Request<()>, name: &str) -> bool {
    let Ok(principal) = authenticate(&console.auth, call) else {
        return false;
    };
    parse_name(name).is_ok_and(|name| authorize(&principal, Operation::Revoke, &name).is_ok())
}

/// A revoke's JSON body, read within the request deadline and [`MAX_BODY_BYTES`], from a page of
/// this origin only.
async fn revoke_request(
    request: Request<Incoming>,
    console: &Console,
) -> Result<RevokeRequest, Status> {
    same_origin_json(request.headers())?;
    let body = Limited::new(request.into_body(), MAX_BODY_BYTES);
    let bytes = match tokio::time::timeout(console.request_timeout, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) => {
            return Err(refused(Refusal::BodyTooLarge {
                limit: MAX_BODY_BYTES,
            }));
        }
        Err(_) => return Err(refused(Refusal::BodyTooSlow)),
    };
    let body: Value = serde_json::from_slice(&bytes).map_err(|error| {
        refused(Refusal::BodyNotJson {
            reason: error.to_string(),
        })
    })?;
    let text = |field: &'static str| match &body[field] {
        Value::String(text) => Ok(text.clone()),
        Value::Null => Ok(String::new()),
        _ => Err(refused(Refusal::NotAString { field })),
    };
    // Tokens travel as strings: a JavaScript number loses digits past 2^53.
    let fencing_token = match &body["fencing_token"] {
        Value::Null => 0,
        Value::String(token) if token.is_empty() => 0,
        Value::String(token) => token.parse().map_err(|_| {
            refused(Refusal::FencingTokenNotANumber {
                given: token.clone(),
            })
        })?,
        _ => {
            return Err(refused(Refusal::NotAString {
                field: "fencing_token",
            }));
        }
    };
    Ok(RevokeRequest {
        name: text("name")?,
        reason: text("reason")?,
        fencing_token,
    })
}

/// A state-changing request must say it is JSON (so a cross-site form cannot send it without a
/// CORS preflight, which this server never grants) and, if the browser names its origin, come
/// from this one.
fn same_origin_json(headers: &HeaderMap) -> Result<(), Status> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("application/json"));
    if !is_json {
        return Err(refused(Refusal::NotJsonContentType));
    }
    let header = |name| {
        headers
            .get(name)
            .and_then(|value: &HeaderValue| value.to_str().ok())
    };
    if let Some(site) = header(header::HeaderName::from_static("sec-fetch-site"))
        && !matches!(site, "same-origin" | "none")
    {
        return Err(refused(Refusal::CrossSite {
            site: site.to_owned(),
        }));
    }
    if let Some(origin) = header(header::ORIGIN) {
        let host = header(header::HOST).unwrap_or_default();
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or_default();
        if origin_host.is_empty() || origin_host != host {
            return Err(refused(Refusal::ForeignOrigin {
                origin: origin.to_owned(),
                host: host.to_owned(),
            }));
        }
    }
    Ok(())
}

/// The Watch stream as server-sent events: `data: {event}` per message, `event: error` with the
/// status if the stream ends with one, and a comment every [`HEARTBEAT`] meanwhile.
fn event_stream(
    events: impl futures::Stream<Item = Result<crate::proto::WatchEvent, Status>> + Send + 'static,
) -> Response<Body> {
    let events = events.boxed();
    let frames = stream::unfold(Some(events), |events| async move {
        let mut events = events?;
        let frame = tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => format!("data: {}\n\n", to_json::watch_event(&event)),
                Some(Err(status)) => {
                    let frame = format!("event: error\ndata: {}\n\n", status_json(&status));
                    return Some((frame, None));
                }
                None => return None,
            },
            _ = tokio::time::sleep(HEARTBEAT) => ": alive\n\n".to_owned(),
        };
        Some((frame, Some(events)))
    })
    .map(|frame| Ok::<_, Infallible>(Frame::data(Bytes::from(frame))));
    let body = StreamBody::new(frames).boxed_unsync();
    response(StatusCode::OK, body, "text/event-stream", Some("no-store"))
}

/// The console's own refusal of a request, as a status: its code and message are chosen where
/// every other refusal's are (`server::status`).
fn refused(refusal: Refusal) -> Status {
    Status::from(Error::Refused(refusal))
}

fn status_response(status: StatusCode, body: Value) -> Response<Body> {
    let body = whole(Bytes::from(body.to_string()));
    response(status, body, "application/json", Some("no-store"))
}

fn json_error(code: &str, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

/// `{"code": "PERMISSION_DENIED", "message": …}`: the gRPC code's name, as grpcurl shows it.
fn status_json(status: &Status) -> Value {
    let code = format!("{:?}", status.code());
    json!({ "code": screaming_snake(&code), "message": status.message() })
}

/// `PermissionDenied` → `PERMISSION_DENIED`.
fn screaming_snake(camel: &str) -> String {
    let mut snake = String::with_capacity(camel.len() + 4);
    for (index, letter) in camel.chars().enumerate() {
        if letter.is_uppercase() && index > 0 {
            snake.push('_');
        }
        snake.push(letter.to_ascii_uppercase());
    }
    snake
}

/// A gRPC status as the HTTP status a browser expects for it.
fn error(status: &Status) -> Response<Body> {
    let http = match status.code() {
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut response = status_response(http, status_json(status));
    if http == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_codes_are_named_as_grpcurl_names_them() {
        assert_eq!(screaming_snake("PermissionDenied"), "PERMISSION_DENIED");
        assert_eq!(screaming_snake("Ok"), "OK");
        assert_eq!(
            status_json(&Status::from(Error::invalid("name", "empty")))["code"],
            "INVALID_ARGUMENT"
        );
    }

    /// A cross-site form posts `text/plain` or `application/x-www-form-urlencoded`, and a
    /// browser names the other origin: both are refused.
    #[test]
    fn revokes_come_as_json_from_this_origin_only() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_static(value));
            }
            map
        };
        let json = ("content-type", "application/json");
        let host = ("host", "127.0.0.1:8080");
        assert!(same_origin_json(&headers(&[json, host])).is_ok());
        assert!(
            same_origin_json(&headers(&[json, host, ("origin", "http://127.0.0.1:8080")])).is_ok()
        );
        let refused = [
            headers(&[("content-type", "text/plain"), host]),
            headers(&[host]),
            headers(&[json, host, ("origin", "http://evil.example")]),
            headers(&[json, host, ("origin", "null")]),
            headers(&[json, host, ("sec-fetch-site", "cross-site")]),
        ];
        for headers in refused {
            assert!(same_origin_json(&headers).is_err(), "{headers:?}");
        }
    }
}
