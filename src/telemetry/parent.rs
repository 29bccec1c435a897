//! The caller's W3C Trace Context (`traceparent`, `tracestate`) read from a request's gRPC
//! metadata, so that an RPC's span continues the caller's trace as its child.

use opentelemetry::{
    Context,
    propagation::{Extractor, TextMapPropagator},
    trace::TraceContextExt,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{KeyRef, MetadataMap};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The caller's span named by `metadata`'s `traceparent`, if it names a valid one: its
/// sampled flag says whether to trace the RPC, and [`continue_trace`] makes the RPC's span its
/// child. Looks no further when there is no `traceparent` (most calls).
pub(super) fn callers_context(metadata: &MetadataMap) -> Option<Context> {
    metadata.get("traceparent")?;
    let callers = TraceContextPropagator::new().extract(&Metadata(metadata));
    callers.span().span_context().is_valid().then_some(callers)
}

/// Whether the caller's span sampled its trace (the `traceparent`'s flag `01`).
pub(super) fn is_sampled(callers: &Context) -> bool {
    callers.span().span_context().is_sampled()
}

/// Makes `span` a child of the caller's span. Call it before `span` is first entered.
pub(super) fn continue_trace(span: &Span, callers: Context) {
    // Fails only if the span is disabled or already started, and then there is nothing to do.
    let _ = span.set_parent(callers);
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

    /// A valid `traceparent` gives the caller's trace and span ids (and `tracestate`) and its
    /// sampled flag; a malformed one, or none, gives nothing to continue.
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

        let callers = callers_context(&metadata).unwrap();
        assert!(is_sampled(&callers));

        metadata.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
                .parse()
                .unwrap(),
        );
        assert!(!is_sampled(&callers_context(&metadata).unwrap()));

        metadata.insert("traceparent", "00-not-a-trace-01".parse().unwrap());
        let callers = TraceContextPropagator::new().extract(&Metadata(&metadata));
        assert!(!callers.span().span_context().is_valid());
        assert!(callers_context(&metadata).is_none());
        assert!(callers_context(&MetadataMap::new()).is_none());
    }
}
