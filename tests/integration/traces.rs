//! The traces of `leased serve --otlp-endpoint` (issue 30), received by a real OTLP/gRPC trace
//! receiver (`harness::otlp`) from the real binary on a real redis-server:
//! - a traced Acquire's span continues the caller's `traceparent` (same trace id, the caller's
//!   span as parent), carries the lease name, holder, outcome, fencing token and the time it
//!   waited, and has the store's script calls as child spans; a waiting Acquire's wait is
//!   measured; the resource names the service and its version;
//! - no lease id appears anywhere in what is exported, though the Release requests carry them;
//!   the log (at debug) does not print the spans;
//! - the spans still queued at SIGTERM reach the receiver before the process exits;
//! - without `--otlp-endpoint`, nothing is exported;
//! - a collector that accepts the connection and never answers fails an export within its
//!   bound (logged), and the export resumes once a receiver answers there again;
//! - a call's span carries its request's fields only once the call is authenticated and they
//!   are valid, and continues the caller's trace only for an authenticated call;
//! - an `--otlp-endpoint` (or `LEASED_OTLP_ENDPOINT`) that is not an http(s) URL refuses the
//!   start, naming the flag;
//! - at `--otlp-sample-ratio 0`, calls without a sampled caller's `traceparent` export no span,
//!   and those of a sampled caller are traced whole (issue 48).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use crate::common::{
    LeasedProcess, Log, RedisServer,
    harness::otlp::{OtlpReceiver, ReceivedSpan},
};
use leased::proto::{
    AcquireRequest, DescribeRequest, Granted, ReleaseRequest, RenewRequest, acquire_response,
    lease_service_client::LeaseServiceClient, renew_response,
};
use tokio::{io::AsyncReadExt, net::TcpListener, task::JoinSet};
use tonic::{Code, transport::Channel};

/// The caller's trace, as its `traceparent` names it.
const CALLER_TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
/// The caller's spans: one per call, so that each RPC's span is found by its parent.
const FIRST_ACQUIRE_PARENT: &str = "00f067aa0ba902b7";
const WAITING_ACQUIRE_PARENT: &str = "00f067aa0ba902b8";
const RELEASE_PARENT: &str = "00f067aa0ba902b9";

/// How long the export may take to reach the receiver (it batches for up to 1 s).
const EXPORT_WAIT: Duration = Duration::from_secs(15);

/// `message` with the W3C trace context of the caller's span `parent_span_id`.
fn traced<T>(message: T, parent_span_id: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let traceparent = format!("00-{CALLER_TRACE_ID}-{parent_span_id}-01");
    let metadata = request.metadata_mut();
    metadata.insert("traceparent", traceparent.parse().unwrap());
    metadata.insert("tracestate", "caller=traces-test".parse().unwrap());
    request
}

/// A traced Acquire, to its terminal message; panics unless granted.
async fn acquire_traced(
    client: &mut LeaseServiceClient<Channel>,
    holder: &str,
    wait_ms: i64,
    parent_span_id: &str,
) -> Granted {
    let request = AcquireRequest {
        name: "traced-lease".into(),
        holder: holder.into(),
        ttl_ms: 30_000,
        wait_ms,
        ..Default::default()
    };
    let mut stream = client
        .acquire(traced(request, parent_span_id))
        .await
        .expect("Acquire failed")
        .into_inner();
    loop {
        let message = stream.message().await.expect("Acquire failed");
        match message.and_then(|message| message.result) {
            Some(acquire_response::Result::Waiting(_)) => continue,
            Some(acquire_response::Result::Granted(granted)) => return granted,
            other => panic!("{holder} was not granted: {other:?}"),
        }
    }
}

async fn release_traced(client: &mut LeaseServiceClient<Channel>, lease_id: &str, parent: &str) {
    let request = ReleaseRequest {
        name: "traced-lease".into(),
        lease_id: lease_id.into(),
    };
    let released = client.release(traced(request, parent)).await.unwrap();
    assert!(released.into_inner().released);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The RPC span whose parent is the caller's span `parent_span_id`.
fn child_of_caller<'a>(
    spans: &'a [ReceivedSpan],
    parent_span_id: &str,
) -> Option<&'a ReceivedSpan> {
    spans
        .iter()
        .find(|received| hex(&received.span.parent_span_id) == parent_span_id)
}

/// The store-call spans directly under `rpc`.
fn store_calls<'a>(spans: &'a [ReceivedSpan], rpc: &ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|received| received.span.parent_span_id == rpc.span.span_id)
        .filter(|received| received.attribute("db.system.name").is_some())
        .collect()
}

/// A traced Acquire on Redis is exported as a child of the caller's span, with the lease name,
/// holder, outcome, fencing token and wait time, and the Redis script calls as its children; a
/// waiting Acquire records how long it waited; no lease id is exported anywhere.
#[tokio::test]
async fn acquire_spans_continue_the_callers_trace_with_store_calls_under_them() {
    let redis = RedisServer::start();
    let receiver = OtlpReceiver::start().await;
    let mut server = LeasedProcess::serve()
        .redis(&redis.url())
        .args(["--otlp-endpoint", &receiver.endpoint()])
        .log(Log::Captured)
        .log_level("debug")
        .start()
        .await;
    let mut first = server.client().await;
    let mut second = server.client().await;

    let held = acquire_traced(&mut first, "first-holder", 0, FIRST_ACQUIRE_PARENT).await;
    let waiting = tokio::spawn(async move {
        acquire_traced(&mut second, "second-holder", 10_000, WAITING_ACQUIRE_PARENT).await
    });
    // Long enough for the second caller to be waiting in the queue.
    tokio::time::sleep(Duration::from_millis(400)).await;
    release_traced(&mut first, &held.lease_id, RELEASE_PARENT).await;
    let handed_over = waiting.await.unwrap();
    release_traced(&mut first, &handed_over.lease_id, RELEASE_PARENT).await;

    let spans = receiver
        .wait_for(EXPORT_WAIT, |spans| {
            let all_there = [FIRST_ACQUIRE_PARENT, WAITING_ACQUIRE_PARENT, RELEASE_PARENT]
                .iter()
                .all(|parent| child_of_caller(spans, parent).is_some());
            all_there.then(|| spans.to_vec())
        })
        .await
        .unwrap_or_else(|| panic!("the RPC spans were not exported: {:#?}", receiver.spans()));

    let acquire = child_of_caller(&spans, FIRST_ACQUIRE_PARENT).unwrap();
    assert_eq!(acquire.span.name, "lease.v1.LeaseService/Acquire");
    assert_eq!(hex(&acquire.span.trace_id), CALLER_TRACE_ID);
    assert_eq!(acquire.span.trace_state, "caller=traces-test");
    assert_eq!(
        acquire.span.kind,
        opentelemetry_proto::tonic::trace::v1::span::SpanKind::Server as i32
    );
    let attribute = |span: &ReceivedSpan, key: &str| {
        span.attribute(key)
            .unwrap_or_else(|| panic!("{} has no {key}: {span:#?}", span.span.name))
    };
    assert_eq!(attribute(acquire, "lease.name"), "traced-lease");
    assert_eq!(attribute(acquire, "lease.holder"), "first-holder");
    assert_eq!(attribute(acquire, "lease.outcome"), "granted");
    assert_eq!(attribute(acquire, "rpc.grpc.status_code"), "0");
    assert_eq!(
        attribute(acquire, "lease.fencing_token"),
        held.fencing_token.to_string()
    );
    let waited_ms: u64 = attribute(acquire, "lease.waited_ms").parse().unwrap();
    assert!(
        waited_ms < 5_000,
        "a try-once Acquire waited {waited_ms} ms"
    );
    assert_eq!(
        acquire.resource_attribute("service.name").as_deref(),
        Some("leased")
    );
    assert_eq!(
        acquire.resource_attribute("service.version").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );

    let calls = store_calls(&spans, acquire);
    assert!(
        calls.iter().any(|call| call.span.name == "redis acquire"
            && attribute(call, "db.system.name") == "redis"
            && attribute(call, "lease.name") == "traced-lease"
            && hex(&call.span.trace_id) == CALLER_TRACE_ID),
        "no Redis acquire script call under the Acquire span: {calls:#?}"
    );

    let waited = child_of_caller(&spans, WAITING_ACQUIRE_PARENT).unwrap();
    assert_eq!(attribute(waited, "lease.outcome"), "granted");
    assert_eq!(attribute(waited, "lease.holder"), "second-holder");
    assert_eq!(attribute(waited, "lease.max_wait_ms"), "10000");
    let waited_ms: u64 = attribute(waited, "lease.waited_ms").parse().unwrap();
    assert!(
        (300..10_000).contains(&waited_ms),
        "the waiting Acquire waited {waited_ms} ms, about 400 expected"
    );
    assert!(
        !store_calls(&spans, waited).is_empty(),
        "no store call under the waiting Acquire's span"
    );

    let release = child_of_caller(&spans, RELEASE_PARENT).unwrap();
    assert_eq!(release.span.name, "lease.v1.LeaseService/Release");
    assert_eq!(attribute(release, "lease.outcome"), "released");

    // Every string exported, names, attributes and events included, as the Debug of the
    // requests prints them.
    let exported = format!("{:?}", receiver.requests());
    for lease_id in [&held.lease_id, &handed_over.lease_id] {
        assert!(!lease_id.is_empty());
        assert!(
            !exported.contains(lease_id.as_str()),
            "a lease id was exported: {exported}"
        );
    }
    // The spans are for the export only: the log, at debug, neither prints them nor names them
    // as the context of its lines.
    let log = server.stop_and_read_log();
    assert!(log.contains("granted"), "{log}");
    for span_text in ["otel.name", "lease.v1.LeaseService", "rpc{", "store{"] {
        assert!(!log.contains(span_text), "{span_text} in the log: {log}");
    }
}

/// On SIGTERM the spans still queued are sent before the process exits (after the drain), not
/// lost with it.
#[tokio::test]
async fn spans_still_queued_at_sigterm_are_sent_before_the_exit() {
    let receiver = OtlpReceiver::start().await;
    let mut server = LeasedProcess::serve()
        .args(["--otlp-endpoint", &receiver.endpoint()])
        .start()
        .await;
    let mut client = server.client().await;
    acquire_traced(&mut client, "drained-holder", 0, FIRST_ACQUIRE_PARENT).await;
    drop(client);
    let signalled = Instant::now();
    server.signal(libc::SIGTERM);
    // Polled on the runtime, which the receiver needs meanwhile.
    crate::common::harness::poll_until_async("leased to exit", EXPORT_WAIT, || {
        std::future::ready(server.try_wait().is_some())
    })
    .await
    .unwrap();
    println!("exited {:?} after SIGTERM", signalled.elapsed());
    assert!(
        child_of_caller(&receiver.spans(), FIRST_ACQUIRE_PARENT).is_some(),
        "the Acquire's span was lost at the exit: {:#?}",
        receiver.spans()
    );
}

/// Without `--otlp-endpoint` nothing is exported, even to a receiver that listens and for a
/// caller who sends a `traceparent`.
#[tokio::test]
async fn without_an_otlp_endpoint_nothing_is_exported() {
    let receiver = OtlpReceiver::start().await;
    let server = LeasedProcess::serve().start().await;
    let mut client = server.client().await;
    let granted = acquire_traced(&mut client, "untraced", 0, FIRST_ACQUIRE_PARENT).await;
    release_traced(&mut client, &granted.lease_id, RELEASE_PARENT).await;
    // Twice the export's batch delay.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.span_count(), 0);
}

/// An endpoint that is not an http(s) URL with a host refuses the start, naming the flag,
/// whether it comes from the flag or from `LEASED_OTLP_ENDPOINT`.
#[test]
fn a_bad_otlp_endpoint_refuses_the_start_naming_the_flag() {
    let from_flag = LeasedProcess::serve().args(["--otlp-endpoint", "collector:4317"]);
    let from_env = LeasedProcess::serve().envs([(
        "LEASED_OTLP_ENDPOINT".to_owned(),
        "ftp://collector:4317".to_owned(),
    )]);
    for serve in [from_flag, from_env] {
        let (status, stderr) = serve.run_to_exit(Duration::from_secs(10));
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("--otlp-endpoint"), "{stderr}");
    }
}

/// A collector that accepts connections and reads them, never answering, until stopped or
/// dropped (which closes them).
struct SilentCollector {
    address: SocketAddr,
    accepting: Option<tokio::task::JoinHandle<()>>,
}

impl SilentCollector {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepting = tokio::spawn(async move {
            // Dropped with this task, closing every connection.
            let mut connections = JoinSet::new();
            while let Ok((mut connection, _)) = listener.accept().await {
                connections.spawn(async move {
                    let mut sink = [0; 4096];
                    while connection.read(&mut sink).await.is_ok_and(|read| read > 0) {}
                });
            }
        });
        SilentCollector {
            address,
            accepting: Some(accepting),
        }
    }

    /// Closes the listener and every connection, before returning: the address is free again.
    async fn stop(mut self) {
        if let Some(accepting) = self.accepting.take() {
            accepting.abort();
            let _ = accepting.await;
        }
    }
}

impl Drop for SilentCollector {
    fn drop(&mut self) {
        if let Some(accepting) = &self.accepting {
            accepting.abort();
        }
    }
}

/// What the log says when an export fails.
const EXPORT_FAILED: &str = "trace export to the OTLP collector failed";

/// A collector that accepts the connection and never answers does not hold the export: the
/// export fails, logged, within its 10 s bound, and spans reach the collector again once a
/// receiver answers on that address.
#[tokio::test]
async fn a_collector_that_never_answers_fails_the_export_within_its_bound() {
    let silent = SilentCollector::start().await;
    let address = silent.address;
    let log = std::env::temp_dir().join(format!("leased-silent-collector-{}.log", address.port()));
    let server = LeasedProcess::serve()
        .args(["--otlp-endpoint", &format!("http://{address}")])
        .log(Log::File(log.clone()))
        .start()
        .await;
    let mut client = server.client().await;
    let held = acquire_traced(&mut client, "unanswered", 0, FIRST_ACQUIRE_PARENT).await;
    let sent = Instant::now();
    // The promise is 10 s after the batch leaves (at most 1 s after the span ends); the cap
    // leaves room for a loaded machine, not for the minutes an unbounded export took.
    let logged =
        crate::common::harness::poll_until_async("export failed", Duration::from_secs(30), || {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            std::future::ready(log.contains(EXPORT_FAILED))
        })
        .await;
    let failed_after = sent.elapsed();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    logged.unwrap_or_else(|_| panic!("no '{EXPORT_FAILED}' within 30 s: {text}"));
    println!("export failed {failed_after:?} after the span: {text}");
    assert!(
        failed_after >= Duration::from_secs(5),
        "{failed_after:?}: {text}"
    );

    silent.stop().await;
    let receiver = OtlpReceiver::start_at(address).await;
    release_traced(&mut client, &held.lease_id, RELEASE_PARENT).await;
    let resumed = receiver
        .wait_for(EXPORT_WAIT, |spans| {
            child_of_caller(spans, RELEASE_PARENT).cloned()
        })
        .await;
    assert!(
        resumed.is_some(),
        "no span after the collector came back: {:#?}",
        receiver.spans()
    );
}

/// The token of the one client of [`a_call_traces_its_input_and_its_callers_trace_only_once_authenticated_and_valid`].
const TRACER_TOKEN: &str = "tracer-token-0123456789abcdef";
/// The caller's spans of its three Describes.
const UNAUTHENTICATED_PARENT: &str = "00f067aa0ba902c1";
const INVALID_NAME_PARENT: &str = "00f067aa0ba902c2";
const VALID_PARENT: &str = "00f067aa0ba902c3";

/// Before a call is authenticated and its input validated, its span records nothing of the
/// request: an unauthenticated Describe with a 3 KB name of escape sequences and newlines and a
/// chosen `traceparent` is exported without the name and in a trace of its own; an authenticated
/// one with that name continues the caller's trace without the name; a valid authenticated one
/// has both.
#[tokio::test]
async fn a_call_traces_its_input_and_its_callers_trace_only_once_authenticated_and_valid() {
    let tokens = std::env::temp_dir().join(format!(
        "leased-traces-tokens-{}-{}.json",
        std::process::id(),
        crate::common::free_port()
    ));
    let file = serde_json::json!({ "tokens": [{
        "client": "tracer", "token": TRACER_TOKEN, "prefixes": [""], "operations": ["describe"]
    }] });
    std::fs::write(&tokens, file.to_string()).unwrap();
    let receiver = OtlpReceiver::start().await;
    let server = LeasedProcess::serve()
        .args([
            "--otlp-endpoint".to_owned(),
            receiver.endpoint(),
            "--auth-tokens".to_owned(),
            tokens.display().to_string(),
        ])
        .start()
        .await;
    let _ = std::fs::remove_file(&tokens);
    let mut client = server.client().await;
    let hostile = format!("{}hostile-marker", "\u{1b}[2J\n".repeat(700));
    assert!(hostile.len() > 3_000);
    let describe = |name: &str, parent: &str, token: Option<&str>| {
        let mut request = traced(DescribeRequest { name: name.into() }, parent);
        if let Some(token) = token {
            let bearer = format!("Bearer {token}").parse().unwrap();
            request.metadata_mut().insert("authorization", bearer);
        }
        request
    };
    let unauthenticated = client.describe(describe(&hostile, UNAUTHENTICATED_PARENT, None));
    assert_eq!(
        unauthenticated.await.unwrap_err().code(),
        Code::Unauthenticated
    );
    let invalid = describe(&hostile, INVALID_NAME_PARENT, Some(TRACER_TOKEN));
    assert_eq!(
        client.describe(invalid).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let valid = describe("traced/valid", VALID_PARENT, Some(TRACER_TOKEN));
    client.describe(valid).await.unwrap();

    let status_of = |span: &ReceivedSpan| span.attribute("rpc.grpc.status_code");
    let spans = receiver
        .wait_for(EXPORT_WAIT, |spans| {
            let unauthenticated = spans
                .iter()
                .any(|span| status_of(span).as_deref() == Some("16"));
            let both = [INVALID_NAME_PARENT, VALID_PARENT]
                .iter()
                .all(|parent| child_of_caller(spans, parent).is_some());
            (unauthenticated && both).then(|| spans.to_vec())
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "the Describe spans were not exported: {:#?}",
                receiver.spans()
            )
        });

    let unauthenticated = spans
        .iter()
        .find(|span| status_of(span).as_deref() == Some("16"))
        .unwrap();
    assert_eq!(unauthenticated.span.name, "lease.v1.LeaseService/Describe");
    assert_eq!(
        unauthenticated.attribute("lease.name"),
        None,
        "{unauthenticated:#?}"
    );
    assert!(
        unauthenticated.span.parent_span_id.is_empty(),
        "{unauthenticated:#?}"
    );
    assert_ne!(hex(&unauthenticated.span.trace_id), CALLER_TRACE_ID);
    assert!(child_of_caller(&spans, UNAUTHENTICATED_PARENT).is_none());

    let invalid = child_of_caller(&spans, INVALID_NAME_PARENT).unwrap();
    assert_eq!(
        invalid.attribute("rpc.grpc.status_code").as_deref(),
        Some("3")
    );
    assert_eq!(invalid.attribute("lease.name"), None, "{invalid:#?}");

    let valid = child_of_caller(&spans, VALID_PARENT).unwrap();
    assert_eq!(hex(&valid.span.trace_id), CALLER_TRACE_ID);
    assert_eq!(
        valid.attribute("lease.name").as_deref(),
        Some("traced/valid")
    );
    assert_eq!(valid.attribute("lease.outcome").as_deref(), Some("free"));

    // Nothing of the hostile name anywhere in what was exported.
    let exported = format!("{:?}", receiver.requests());
    for part in ["hostile-marker", "[2J"] {
        assert!(!exported.contains(part), "{part} was exported");
    }
}

/// The caller's trace in which leased's spans are sampled in (flag `01`), and one in which
/// they are sampled out (flag `00`).
const SAMPLED_TRACEPARENT: &str = "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902c1-01";
const UNSAMPLED_TRACEPARENT: &str = "00-6bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902c2-00";
/// Calls made at ratio 0 without a sampled caller.
const SAMPLED_OUT_CALLS: usize = 20;

/// `message`, with `traceparent` if any.
fn with_traceparent<T>(message: T, traceparent: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(traceparent) = traceparent {
        let metadata = request.metadata_mut();
        metadata.insert("traceparent", traceparent.parse().unwrap());
    }
    request
}

/// An Acquire of `name` that is granted at once, a Renew stream renewing it once, and a
/// Release, each with `traceparent` if any.
async fn acquire_renew_release(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    traceparent: Option<&str>,
) {
    let request = AcquireRequest {
        name: name.into(),
        holder: "sampling-holder".into(),
        ttl_ms: 30_000,
        ..Default::default()
    };
    let mut stream = client
        .acquire(with_traceparent(request, traceparent))
        .await
        .unwrap()
        .into_inner();
    let granted = match stream.message().await.unwrap().and_then(|m| m.result) {
        Some(acquire_response::Result::Granted(granted)) => granted,
        other => panic!("{name} was not granted: {other:?}"),
    };
    let renewal = RenewRequest {
        name: name.into(),
        lease_id: granted.lease_id.clone(),
        ttl_ms: 30_000,
    };
    let renewals = tokio_stream::iter([renewal]);
    let mut renewed = client
        .renew(with_traceparent(renewals, traceparent))
        .await
        .unwrap()
        .into_inner();
    while let Some(answer) = renewed.message().await.unwrap() {
        assert!(
            matches!(answer.result, Some(renew_response::Result::Renewed(_))),
            "{answer:?}"
        );
    }
    let release = ReleaseRequest {
        name: name.into(),
        lease_id: granted.lease_id,
    };
    let released = client.release(with_traceparent(release, traceparent));
    assert!(released.await.unwrap().into_inner().released);
}

/// The spans named `name` of the trace `trace_id` (hex).
fn spans_named<'a>(spans: &'a [ReceivedSpan], trace_id: &str, name: &str) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|received| hex(&received.span.trace_id) == trace_id && received.span.name == name)
        .collect()
}

/// Head sampling (issue 48): at `--otlp-sample-ratio 0`, calls without a caller's trace
/// context, or with one whose sampled flag is clear, export no span at all (RPC, renewal or
/// store call); the calls of a caller whose `traceparent` is sampled are traced whole, the
/// renewals of its Renew stream under the stream's span.
#[tokio::test]
async fn at_sample_ratio_0_only_the_calls_of_a_sampled_caller_are_traced() {
    let receiver = OtlpReceiver::start().await;
    let server = LeasedProcess::serve()
        .args([
            "--otlp-endpoint",
            &receiver.endpoint(),
            "--otlp-sample-ratio",
            "0",
        ])
        .start()
        .await;
    let mut client = server.client().await;
    for call in 0..SAMPLED_OUT_CALLS {
        let traceparent = (call % 2 == 1).then_some(UNSAMPLED_TRACEPARENT);
        acquire_renew_release(&mut client, &format!("sampled-out-{call}"), traceparent).await;
    }
    // Twice the export's batch delay.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.span_count(), 0, "{:#?}", receiver.spans());

    acquire_renew_release(&mut client, "sampled-in", Some(SAMPLED_TRACEPARENT)).await;
    let trace_id = &SAMPLED_TRACEPARENT[3..35];
    let rpc_names = [
        "lease.v1.LeaseService/Acquire",
        "lease.v1.LeaseService/Renew",
        "lease.v1.LeaseService/Release",
    ];
    let spans = receiver
        .wait_for(EXPORT_WAIT, |spans| {
            let complete = rpc_names
                .iter()
                .chain(&["renewal"])
                .all(|name| spans_named(spans, trace_id, name).len() == 1);
            complete.then(|| spans.to_vec())
        })
        .await
        .unwrap_or_else(|| panic!("the sampled calls were not traced: {:#?}", receiver.spans()));
    for name in rpc_names {
        let rpc = spans_named(&spans, trace_id, name)[0];
        assert_eq!(hex(&rpc.span.parent_span_id), &SAMPLED_TRACEPARENT[36..52]);
    }
    let acquire = spans_named(&spans, trace_id, rpc_names[0])[0];
    assert!(!store_calls(&spans, acquire).is_empty(), "{spans:#?}");
    let renew = spans_named(&spans, trace_id, rpc_names[1])[0];
    let renewal = spans_named(&spans, trace_id, "renewal")[0];
    assert_eq!(renewal.span.parent_span_id, renew.span.span_id);
    assert_eq!(
        renewal.attribute("lease.name").as_deref(),
        Some("sampled-in")
    );
    assert_eq!(
        renewal.attribute("lease.outcome").as_deref(),
        Some("renewed")
    );
    assert!(!store_calls(&spans, renewal).is_empty(), "{spans:#?}");
    // Nothing else, then or since.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spans = receiver.spans();
    let others: Vec<_> = spans
        .iter()
        .filter(|received| hex(&received.span.trace_id) != trace_id)
        .collect();
    assert!(others.is_empty(), "spans of sampled-out calls: {others:#?}");
}
