//! Traces of the RPCs, for `leased serve --otlp-endpoint` (docs/src/operations/tracing.md): one
//! span per RPC of `LeaseService` and `LeaseAdminService` (its lease name and outcome, and for
//! `Acquire` the time it waited), a child span per store call made for it, and the caller's W3C
//! `traceparent` continued. [`export`] sends them to an OTLP collector, for the share of RPCs
//! that `--otlp-sample-ratio` says (head sampling: an RPC left out makes no span at all).
//!
//! The spans are `tracing` spans under a target of their own, [`SPAN_TARGET`], rather than
//! calls to the OpenTelemetry API. A `tracing` span that no layer wants costs one cached
//! callsite check and evaluates none of its fields, so with tracing off (no OTLP layer
//! installed) the handlers pay nothing; and it follows the code across `.await` and into the
//! waiting Acquire's task with `Instrument`, so a store call finds its RPC's span as its parent
//! without a context threaded through the core. The target keeps them out of the logs: the log
//! layer filters it out whatever `RUST_LOG` says, and the OTLP layer takes nothing else. Without
//! that layer the global filter turns the target off (main.rs), which is what makes the callsite
//! check answer "never": a per-layer filter's "no" alone is asked again on every span.
//!
//! A lease id is never a field of these spans: it is the holder's secret (whoever knows it may
//! release or renew the lease). Names, holders and fencing tokens are not secrets.

pub mod export;
mod parent;
mod sampling;

use std::time::Duration;

use tonic::{Code, metadata::MetadataMap};
use tracing::{Span, field::Empty};

use crate::lease::LeaseName;

/// The target of every span here. Never formatted as a log line (see main.rs).
pub const SPAN_TARGET: &str = "leased::traces";

/// The gRPC service names, as spans name their RPCs (`lease.v1.LeaseService/Acquire`).
pub(crate) const LEASE_SERVICE: &str = "lease.v1.LeaseService";
pub(crate) const ADMIN_SERVICE: &str = "lease.v1.LeaseAdminService";

/// The span of one RPC, or [`Span::none()`] when the RPC is not traced (head sampling,
/// `--otlp-sample-ratio`, decided here before any span is made: its store calls then make none
/// either). `callers` is the request's metadata when the call is authenticated (every call when
/// access control is off): a W3C `traceparent` there decides by its sampled flag, and a traced
/// RPC's span continues the caller's trace as its child; an unknown caller cannot place the
/// server's spans in a trace of its choosing, nor choose which RPCs are traced.
///
/// Its fields are recorded as the call learns them: the request's (`lease.name`...) once it is
/// authenticated and they are valid, so that no caller can write what it likes into the traces,
/// and the outcome last. It ends when dropped, so a stream's span lasts as long as the stream.
pub(crate) fn rpc_span(
    service: &'static str,
    method: &'static str,
    callers: Option<&MetadataMap>,
) -> Span {
    let Some(sampler) = sampling::current() else {
        // No export started here: made as before, disabled where it is made unless a layer of
        // the embedding program takes the target, and only then the caller's context read.
        let span = new_rpc_span(service, method);
        if !span.is_disabled()
            && let Some(callers) = callers.and_then(parent::callers_context)
        {
            parent::continue_trace(&span, callers);
        }
        return span;
    };
    let callers = callers.and_then(parent::callers_context);
    if !sampler.sample(callers.as_ref().map(parent::is_sampled)) {
        return Span::none();
    }
    let span = new_rpc_span(service, method);
    if let Some(callers) = callers {
        parent::continue_trace(&span, callers);
    }
    span
}

fn new_rpc_span(service: &'static str, method: &'static str) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "rpc",
        otel.name = format_args!("{service}/{method}"),
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
        lease.name = Empty,
        lease.prefix = Empty,
        lease.holder = Empty,
        lease.outcome = Empty,
        lease.fencing_token = Empty,
        lease.ttl_ms = Empty,
        lease.limit = Empty,
        lease.shared = Empty,
        lease.max_wait_ms = Empty,
        lease.waited_ms = Empty,
        lease.count = Empty,
    )
}

/// Records the lease name of a request, once validated.
pub(crate) fn record_name(span: &Span, name: &LeaseName) {
    span.record("lease.name", name.as_str());
}

/// The span of one renewal on a Renew stream, a child of the stream's span `stream`: a stream
/// renews any number of leases, each renewal with its own name (recorded once valid) and
/// outcome. None when the stream is not traced (never a trace of its own).
pub(crate) fn renewal_span(stream: &Span) -> Span {
    if stream.is_disabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: stream,
        "renewal",
        otel.name = "renewal",
        lease.name = Empty,
        lease.outcome = Empty,
        lease.fencing_token = Empty,
        rpc.grpc.status_code = Empty,
        otel.status_code = Empty,
    )
}

/// The span of one store call (a Redis script, a memory store operation) made for an RPC, or a
/// disabled span outside one: the waiting and watching tasks' own calls (one per wake-up, shared
/// by every caller of a name) would otherwise each be a trace of their own.
///
/// An RPC's span exists only when the OTLP layer is on, so being within one is the whole test.
/// No `tracing::enabled!` first: that call ran on every store call and, when it answered "no",
/// left tracing-subscriber's per-layer filter state marked "disabled" with no span or event to
/// clear it (tokio-rs/tracing#2519). The next log line on that thread read the mark and was
/// dropped: the health check's "store unreachable" line, after its own store call, every time.
pub(crate) fn store_span(store: &'static str, operation: &'static str, name: &LeaseName) -> Span {
    let within_rpc = Span::current()
        .metadata()
        .is_some_and(|metadata| metadata.target() == SPAN_TARGET);
    if !within_rpc {
        return Span::none();
    }
    tracing::info_span!(
        target: SPAN_TARGET,
        "store",
        otel.name = format_args!("{store} {operation}"),
        otel.kind = "client",
        otel.status_code = Empty,
        db.system.name = store,
        db.operation.name = operation,
        lease.name = %name,
        error.type = Empty,
    )
}

/// Records a store call's failure on its span (`Ok` leaves it unset, as OpenTelemetry wants).
pub(crate) fn record_store_error(span: &Span, error: &crate::error::Error) {
    span.record("otel.status_code", "error");
    span.record("error.type", error_type(error));
}

/// The kind of a store error, for `error.type` (its message stays in the logs).
fn error_type(error: &crate::error::Error) -> &'static str {
    use crate::error::Error::*;
    match error {
        InvalidArgument { .. } => "invalid_argument",
        Unavailable(_) => "unavailable",
        NotReplicated(_) => "not_replicated",
        Refused(_) => "refused",
        ShuttingDown => "shutting_down",
        Internal { .. } => "internal",
    }
}

/// Records how an RPC (or one renewal) ended: `outcome` when it succeeded (`granted`,
/// `released`, ...), else the status code's name, with `otel.status_code` `error` for the codes
/// that say the server failed (not the caller's mistakes, nor a wait that ended unanswered).
pub(crate) fn record_outcome(span: &Span, result: Result<&'static str, Code>) {
    if span.is_disabled() {
        return;
    }
    let code = result.err().unwrap_or(Code::Ok);
    span.record("rpc.grpc.status_code", code as i64);
    match result {
        Ok(outcome) => span.record("lease.outcome", outcome),
        Err(code) => span.record("lease.outcome", tracing::field::debug(code)),
    };
    if is_server_error(code) {
        span.record("otel.status_code", "error");
    }
}

/// Records how long an Acquire waited for its answer.
pub(crate) fn record_waited(span: &Span, waited: Duration) {
    span.record("lease.waited_ms", integer(waited.as_millis()));
}

/// A number as an OpenTelemetry integer attribute (an `i64`: `tracing-opentelemetry` exports an
/// unsigned one as a string), saturated.
pub(crate) fn integer(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

/// The status codes that OpenTelemetry's gRPC conventions count as a server span's error.
fn is_server_error(code: Code) -> bool {
    matches!(
        code,
        Code::Unknown
            | Code::DeadlineExceeded
            | Code::Unimplemented
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss
    )
}
