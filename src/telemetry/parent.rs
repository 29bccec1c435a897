//! The caller's W3C Trace Context (`traceparent`, `tracestate`) read from a request's gRPC
//! metadata, so that an RPC's span continues the caller's trace as its child.

use opentelemetry::{
    propagation::{Extractor, TextMapPropagator},
    trace::TraceContextExt,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{KeyRef, MetadataMap};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Makes `span` a child of the caller's span named by `metadata`'s `traceparent`, if it names a
/// valid one (else `span` starts a trace of its own). Call it before `span` is first entered.
pub(super) fn continue_callers_trace(span: &Span, metadata: &MetadataMap) {
    let callers = TraceContextPropagator::new().extract(&Metadata(metadata));
    if callers.span().span_context().is_valid() {
        // Fails only if the span is disabled or already started, and then there is nothing to do.
        let _ = span.set_parent(callers);
    }
}

/// gRPC metadata as the propagator reads it: ASCII values only (binary `-bin` keys carry no
/// trace context).
struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.to_str().ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|key| match key {
                KeyRef::Ascii(key) => Some(key.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid `traceparent` gives the caller's trace and span ids (and `tracestate`); a
    /// malformed one gives nothing to continue.
    #[test]
    fn traceparent_and_tracestate_are_read_from_the_metadata() {
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        metadata.insert("tracestate", "vendor=value".parse().unwrap());
        let callers = TraceContextPropagator::new().extract(&Metadata(&metadata));
        let caller = callers.span().span_context().clone();
        assert_eq!(
            caller.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(caller.span_id().to_string(), "b7ad6b7169203331");
        assert!(caller.is_sampled() && caller.is_remote());
        assert_eq!(caller.trace_state().get("vendor"), Some("value"));

        metadata.insert("traceparent", "00-not-a-trace-01".parse().unwrap());
        let callers = TraceContextPropagator::new().extract(&Metadata(&metadata));
        assert!(!callers.span().span_context().is_valid());
    }
}
