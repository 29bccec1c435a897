//! HTTP/2-level answers: input that never reaches leased's handlers (hyper, h2 and tonic answer
//! it): metadata past the header list limit, rapid reset, requests that are not lease calls. The
//! README's table of answers lists each with the status a client sees.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::limits::raw_protobuf::{RawCodec, bytes_field};
use leased::proto::{DescribeRequest, DescribeResponse, lease_service_client::LeaseServiceClient};
use tonic::{Code, Status, codegen::http::uri::PathAndQuery, transport::Channel};

/// The server's HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE: hyper's default (leased does not set it).
/// HTTP/2 counts a header list as name + value + 32 bytes per entry, pseudo-headers included.
const HEADER_LIST_LIMIT: usize = 16 * 1024;
/// h2 closes the connection, instead of refusing one stream, past this multiple of the limit.
const HEADER_LIST_ABUSE_MULTIPLIER: usize = 4;

/// A Describe with one `x-padding` metadata entry of `padding` bytes, on `client`'s connection.
async fn describe_with_padding(
    client: &mut LeaseServiceClient<Channel>,
    padding: usize,
) -> Result<DescribeResponse, Status> {
    let mut request = tonic::Request::new(DescribeRequest {
        name: "http2/metadata".into(),
    });
    let value = "p".repeat(padding).parse().unwrap();
    request.metadata_mut().insert("x-padding", value);
    client
        .describe(request)
        .await
        .map(tonic::Response::into_inner)
}

/// A raw HTTP/2 connection (the `h2` crate, as tonic uses it) and the task driving it, whose
/// result says how the connection ended.
async fn h2_connect(
    address: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<prost::bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    (send, tokio::spawn(connection))
}

/// A request head for `path` with these headers.
fn h2_request(
    address: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> tonic::codegen::http::Request<()> {
    let mut request = tonic::codegen::http::Request::builder()
        .method(method)
        .uri(format!("http://{address}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(()).unwrap()
}

/// Sends one request with `body` on a new raw HTTP/2 connection; the response's HTTP status and
/// its `grpc-status` (from the headers of a trailers-only answer, or from the trailers).
async fn h2_call(
    address: std::net::SocketAddr,
    request: tonic::codegen::http::Request<()>,
    body: &'static [u8],
) -> (u16, Option<String>) {
    let (send, _connection) = h2_connect(address).await;
    let mut send = send.ready().await.unwrap();
    let (response, mut stream) = send.send_request(request, body.is_empty()).unwrap();
    if !body.is_empty() {
        stream
            .send_data(prost::bytes::Bytes::from_static(body), true)
            .unwrap();
    }
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("no answer within 5 s")
        .unwrap();
    let status = response.status().as_u16();
    let (head, mut body) = response.into_parts();
    let grpc_status = |headers: &tonic::codegen::http::HeaderMap| {
        headers
            .get("grpc-status")
            .map(|value| value.to_str().unwrap().to_owned())
    };
    if let Some(code) = grpc_status(&head.headers) {
        return (status, Some(code));
    }
    while let Some(chunk) = body.data().await {
        chunk.unwrap();
    }
    let trailers = body.trailers().await.unwrap();
    (status, trailers.as_ref().and_then(grpc_status))
}

/// The server's first SETTINGS frame, as (identifier, value) pairs, read after sending the
/// client preface and an empty SETTINGS frame over raw TCP.
async fn server_settings(address: std::net::SocketAddr) -> Vec<(u16, u32)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut header = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), tcp.read_exact(&mut header))
        .await
        .expect("no SETTINGS within 5 s")
        .unwrap();
    assert_eq!(
        header[3], 4,
        "the server's first frame is SETTINGS: {header:?}"
    );
    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; length];
    tcp.read_exact(&mut payload).await.unwrap();
    payload
        .chunks(6)
        .map(|setting| {
            let (identifier, value) = setting.split_at(2);
            (
                u16::from_be_bytes(identifier.try_into().unwrap()),
                u32::from_be_bytes(value.try_into().unwrap()),
            )
        })
        .collect()
}

/// Sends the head of a Describe with an `x-padding` header of `padding` bytes on a new raw
/// HTTP/2 connection: the connection's handle, the answer to come, and the connection's task.
async fn h2_padded_describe(
    address: std::net::SocketAddr,
    padding: usize,
) -> (
    h2::client::SendRequest<prost::bytes::Bytes>,
    h2::client::ResponseFuture,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let (send, connection) = h2_connect(address).await;
    let mut send = send.ready().await.unwrap();
    let padding = "p".repeat(padding);
    let request = h2_request(
        address,
        "POST",
        "/lease.v1.LeaseService/Describe",
        &[
            ("content-type", "application/grpc"),
            ("x-padding", &padding),
        ],
    );
    let (response, _) = send.send_request(request, true).unwrap();
    (send, response, connection)
}

/// Metadata (HTTP/2 headers) past the server's header list limit, sent by a tonic client (which,
/// unlike grpc-go, does not check the limit the server advertises before sending):
/// - under 16 KiB in all: served;
/// - from 16 KiB to 64 KiB: HTTP 431 on that stream, which tonic reports as UNKNOWN ("grpc-status
///   header missing, mapped from HTTP status code 431"); the connection stays up;
/// - past 64 KiB: GOAWAY ENHANCE_YOUR_CALM ("header_list_way_too_large"), tonic reports
///   RESOURCE_EXHAUSTED, or for a block the client is still sending (hundreds of KiB) the
///   connection's end as UNKNOWN "transport error"; the client connects again for its next call.
/// The server keeps serving every other connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_past_the_header_list_limit_is_refused_by_http2() {
    let server = Leased::start(None).await;
    const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 6;
    let advertised = server_settings(server.address).await;
    assert!(
        advertised.contains(&(SETTINGS_MAX_HEADER_LIST_SIZE, HEADER_LIST_LIMIT as u32)),
        "the server advertises a {HEADER_LIST_LIMIT}-byte header list: {advertised:?}"
    );
    let mut bystander = server.client().await;
    let mut client = server.client().await;

    describe_with_padding(&mut client, 15 * 1024).await.unwrap();

    // 1,000 entries of a few bytes count 32 bytes of overhead each: past the limit as well.
    let mut many_entries = tonic::Request::new(DescribeRequest {
        name: "http2/metadata".into(),
    });
    for index in 0..1_000 {
        let key = format!("x-entry-{index}");
        let key = tonic::metadata::MetadataKey::from_bytes(key.as_bytes()).unwrap();
        many_entries
            .metadata_mut()
            .insert(key, "v".parse().unwrap());
    }
    let padded = [
        describe_with_padding(&mut client, HEADER_LIST_LIMIT).await,
        describe_with_padding(&mut client, 60 * 1024).await,
        client
            .describe(many_entries)
            .await
            .map(tonic::Response::into_inner),
    ];
    for answer in padded {
        let status = answer.unwrap_err();
        assert_eq!(status.code(), Code::Unknown, "{status:?}");
        assert!(status.message().contains("431"), "{status:?}");
        // Only that stream was refused: the same connection serves the next call.
        describe(&mut client, "http2/metadata").await;
    }
    // On the wire: an HTTP 431 answer on that stream.
    let (_send, response, _connection) =
        h2_padded_describe(server.address, HEADER_LIST_LIMIT).await;
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("no answer within 5 s")
        .unwrap();
    assert_eq!(response.status().as_u16(), 431);

    let way_too_large = HEADER_LIST_ABUSE_MULTIPLIER * HEADER_LIST_LIMIT + 16 * 1024;
    let status = describe_with_padding(&mut client, way_too_large)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    // On the wire: GOAWAY, and the connection ends.
    let (_send, _response, connection) = h2_padded_describe(server.address, way_too_large).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .expect("the connection was not closed within 5 s")
        .unwrap()
        .unwrap_err();
    assert!(ended.is_go_away() && ended.is_remote(), "{ended:?}");
    assert_eq!(
        ended.reason(),
        Some(h2::Reason::ENHANCE_YOUR_CALM),
        "{ended}"
    );
    assert!(
        ended.to_string().contains("header_list_way_too_large"),
        "{ended}"
    );

    // 1 MiB (on a connection of its own): the server closes the connection while the client
    // still writes the header block; whether tonic reports the GOAWAY (RESOURCE_EXHAUSTED) or
    // the closed socket (UNKNOWN "transport error") depends on that race.
    let mut huge = server.client().await;
    let status = describe_with_padding(&mut huge, 1 << 20).await.unwrap_err();
    assert!(
        matches!(
            status.code(),
            Code::ResourceExhausted | Code::Unknown | Code::Unavailable
        ),
        "{status:?}"
    );

    // Clients whose connection was closed connect again (a call on the closing connection may
    // still end CANCELLED), and nobody else noticed.
    for client in [&mut client, &mut huge] {
        let started = Instant::now();
        while describe_with_padding(client, 0).await.is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the client never reconnected"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    describe(&mut bystander, "http2/metadata").await;
}

/// Rapid reset (CVE-2023-44487): a client that opens streams and resets them at once, faster
/// than the server takes them up, gets GOAWAY ENHANCE_YOUR_CALM ("too_many_resets") from h2
/// within a few hundred streams; other connections are served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_gets_goaway_enhance_your_calm() {
    const BURST: usize = 100;
    const MAX_BURSTS: usize = 100;
    let server = Leased::start(None).await;
    let mut bystander = server.client().await;
    let (mut send, connection) = h2_connect(server.address).await;
    let started = Instant::now();
    let mut reset = 0;
    // How the connection ended, as the client saw it: the GOAWAY may surface when asking for the
    // next stream, or as the connection task's result (which, if the client was still writing
    // when the server closed, is a broken pipe instead).
    let mut errors = Vec::new();
    'bursts: for _ in 0..MAX_BURSTS {
        for _ in 0..BURST {
            send = match tokio::time::timeout(Duration::from_secs(2), send.clone().ready()).await {
                Ok(Ok(ready)) => ready,
                Ok(Err(error)) => {
                    errors.push(error);
                    break 'bursts;
                }
                Err(_) => break 'bursts,
            };
            let request = h2_request(
                server.address,
                "POST",
                "/lease.v1.LeaseService/Describe",
                &[("content-type", "application/grpc")],
            );
            match send.send_request(request, false) {
                Ok((_response, mut stream)) => stream.send_reset(h2::Reason::CANCEL),
                Err(error) => {
                    errors.push(error);
                    break 'bursts;
                }
            }
            reset += 1;
        }
        // Let the client read what the server answered before it writes more.
        tokio::time::sleep(Duration::from_millis(20)).await;
        if connection.is_finished() {
            break;
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .unwrap_or_else(|_| panic!("still open after {reset} resets"))
        .unwrap();
    errors.extend(ended.err());
    println!(
        "connection ended after {reset} streams opened and reset in {:?}: {errors:?}",
        started.elapsed()
    );
    // The server's answer is GOAWAY ENHANCE_YOUR_CALM, then it closes. When the client was still
    // writing a burst at that moment, the server's close leaves unread data behind and the kernel
    // resets the connection, which may drop the GOAWAY before h2 reads it: then the client sees
    // only the broken pipe (1 run in ~4 here). Either way the server ended a connection that sent
    // nothing but valid frames, which only the reset protection does.
    let go_away = errors.iter().any(|error| {
        error.is_go_away()
            && error.is_remote()
            && error.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM)
            && error.to_string().contains("too_many_resets")
    });
    let closed_under_a_write = errors.iter().any(|error| {
        error.get_io().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            )
        })
    });
    assert!(go_away || closed_under_a_write, "{errors:?}");
    describe(&mut bystander, "http2/reset").await;
    describe(&mut server.client().await, "http2/reset").await;
}

/// What is not a gRPC call to a known method:
/// - HTTP/1.1 to the gRPC port: no HTTP/1.1 answer; the server writes its HTTP/2 SETTINGS (or
///   nothing) and closes the connection (curl says "Received HTTP/0.9 when not allowed");
/// - HTTP/2 with a body that is not gRPC framing (JSON, whatever the content-type): HTTP 200 with
///   grpc-status 13, INTERNAL (tonic does not check the content-type; it fails to decode);
/// - HTTP/2 GET of `/`, an unknown method or an unknown service: grpc-status 12, UNIMPLEMENTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_are_not_lease_calls_get_no_service() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = Leased::start(None).await;

    for request in [
        "POST /lease.v1.LeaseService/Describe HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: application/grpc\r\nContent-Length: 0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    ] {
        let mut tcp = tokio::net::TcpStream::connect(server.address)
            .await
            .unwrap();
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut reply = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut reply))
            .await
            .expect("the connection is still open after 5 s");
        // Closed, possibly with a reset (the request's unread bytes): either way, no HTTP/1.x.
        if let Err(error) = read {
            assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
        }
        assert!(
            !reply.starts_with(b"HTTP/"),
            "{:?}",
            String::from_utf8_lossy(&reply)
        );
        assert!(
            reply.is_empty() || reply.get(3) == Some(&4),
            "only an HTTP/2 SETTINGS frame: {reply:?}"
        );
    }

    let describe_path = "/lease.v1.LeaseService/Describe";
    let json = br#"{"name": "http2/json"}"#;
    for content_type in ["application/json", "application/grpc"] {
        let request = h2_request(
            server.address,
            "POST",
            describe_path,
            &[("content-type", content_type)],
        );
        let answer = h2_call(server.address, request, json).await;
        assert_eq!(answer, (200, Some("13".into())), "JSON as {content_type}");
    }
    let get = h2_request(server.address, "GET", "/", &[]);
    assert_eq!(
        h2_call(server.address, get, b"").await,
        (200, Some("12".into()))
    );

    let channel = Channel::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    for path in [
        "/lease.v1.LeaseService/NoSuchMethod",
        "/lease.v2.LeaseService/Describe",
    ] {
        grpc.ready().await.unwrap();
        let status = grpc
            .unary(
                tonic::Request::new(bytes_field(1, b"http2/unknown")),
                PathAndQuery::from_static(path),
                RawCodec,
            )
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unimplemented, "{path}: {status:?}");
    }
    describe(&mut server.client().await, "http2/alive").await;
}
