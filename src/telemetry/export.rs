//! The OTLP/gRPC export of the spans, with `--otlp-endpoint`: a bounded queue that an RPC only
//! ever `try_send`s into, and one task that sends it to the collector in batches.
//!
//! The SDK's own `BatchSpanProcessor` is not used: it reports dropped spans once per process
//! lifetime, where an operator needs to know that a collector stalls for the whole time it does
//! (`leased_trace_spans_dropped_total`, and a log line per 10 s through [`crate::throttle`]).

use std::{sync::Arc, time::Duration};

use opentelemetry::{KeyValue, trace::TracerProvider};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::{
    Resource,
    error::OTelSdkResult,
    trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor},
};
use tokio::{
    sync::{Notify, mpsc},
    task::JoinHandle,
};
use tonic::transport::{ClientTlsConfig, Endpoint};
use tracing::{Subscriber, level_filters::LevelFilter};
use tracing_subscriber::{Layer, filter::Targets, registry::LookupSpan};

use super::SPAN_TARGET;
use crate::{
    error::StartupError,
    metrics::metrics,
    throttle::{LOG_INTERVAL, Throttle},
};

/// Finished spans waiting for the export; past this many, new ones are dropped (and counted)
/// rather than held: a stalled collector costs this much memory at most, never an RPC's time.
const QUEUE_SPANS: usize = 8192;
/// Spans per export request.
const BATCH_SPANS: usize = 512;
/// How long a span may wait for a batch to fill before it is sent anyway.
const BATCH_DELAY: Duration = Duration::from_secs(1);
/// One export request's deadline: a collector that does not answer by then has it dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the shutdown waits for the spans still queued to reach the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

static SPANS_DROPPED: Throttle = Throttle::new(LOG_INTERVAL);
static EXPORT_FAILED: Throttle = Throttle::new(LOG_INTERVAL);

/// The export of the RPCs' spans to one OTLP collector, from [`TraceExport::start`] until
/// [`TraceExport::flush`].
#[derive(Debug)]
pub struct TraceExport {
    provider: SdkTracerProvider,
    stop: Arc<Notify>,
    exporting: JoinHandle<()>,
}

impl TraceExport {
    /// Checks `endpoint` (`--otlp-endpoint`) and starts the export task; the connection is made
    /// at the first export, so an absent collector does not stop the server. From then on the
    /// RPCs of this process are traced at `sample_ratio` (`--otlp-sample-ratio`, 0 to 1; see
    /// head sampling in `telemetry`). Must run inside the tokio runtime.
    pub fn start(endpoint: &str, sample_ratio: f64) -> Result<Self, StartupError> {
        // The exporter's own timeout only bounds its retries: `with_channel` leaves the bound
        // on each attempt to the channel. Without one, a collector that accepts the connection
        // and never answers held the first export (and every span behind it) for minutes.
        let channel = collector_endpoint(endpoint)?
            .connect_timeout(EXPORT_TIMEOUT)
            .timeout(EXPORT_TIMEOUT)
            .connect_lazy();
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_channel(channel)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| StartupError::OtlpEndpoint {
                endpoint: endpoint.to_owned(),
                reason: error.to_string(),
            })?;
        let resource = Resource::builder()
            .with_service_name("leased")
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        // The provider gives its resource to its processors, not to an exporter behind one.
        exporter.set_resource(&resource);
        let (spans, queued) = mpsc::channel(QUEUE_SPANS);
        let stop = Arc::new(Notify::new());
        let exporting = tokio::spawn(export_batches(queued, exporter, stop.clone()));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(QueueSpans { spans })
            .with_resource(resource)
            .build();
        super::sampling::set_ratio(sample_ratio);
        Ok(TraceExport {
            provider,
            stop,
            exporting,
        })
    }

    /// The `tracing` layer that turns the spans of [`SPAN_TARGET`] (and nothing else) into
    /// OpenTelemetry spans for this export.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("leased"))
            // Only what the spans carry: no source locations, thread names, busy/idle times or
            // OpenTelemetry context switches on every poll, which would cost each RPC for
            // nothing an operator asked for.
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .with_filter(Targets::new().with_target(SPAN_TARGET, LevelFilter::INFO))
    }

    /// Sends the spans still queued (for up to 5 s), then stops: after the drain, so that the
    /// last calls' spans are not lost.
    pub async fn flush(self) {
        self.stop.notify_one();
        if tokio::time::timeout(FLUSH_TIMEOUT, self.exporting)
            .await
            .is_err()
        {
            tracing::warn!("trace export: spans still queued after {FLUSH_TIMEOUT:?} were lost");
        }
        // The processor holds nothing more; this only marks the provider shut down.
        let _ = self.provider.shutdown();
    }
}

/// `--otlp-endpoint` as a gRPC endpoint: an `http://` or `https://` URL with a host.
fn collector_endpoint(endpoint: &str) -> Result<Endpoint, StartupError> {
    let invalid = |reason: String| StartupError::OtlpEndpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let parsed = Endpoint::from_shared(endpoint.to_owned())
        .map_err(|error| invalid(format!("not a URL ({error})")))?;
    let uri = parsed.uri();
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("it names no host".to_owned()));
    }
    match uri.scheme_str() {
        Some("http") => Ok(parsed),
        Some("https") => parsed
            .tls_config(ClientTlsConfig::new().with_native_roots())
            .map_err(|error| invalid(format!("TLS: {error}"))),
        _ => Err(invalid("the scheme must be http:// or https://".to_owned())),
    }
}

/// The span processor: hands each finished span to the export task without ever waiting.
#[derive(Debug)]
struct QueueSpans {
    spans: mpsc::Sender<SpanData>,
}

impl SpanProcessor for QueueSpans {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.spans.try_send(span) {
            metrics().trace_spans_dropped.inc();
            if let Some(suppressed) = SPANS_DROPPED.admit() {
                tracing::warn!(
                    suppressed,
                    queue = QUEUE_SPANS,
                    "trace export queue full (the OTLP collector is slow or unreachable): \
                     spans dropped, counted in leased_trace_spans_dropped_total"
                );
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The export task: a batch once `BATCH_SPANS` are queued or the oldest has waited
/// `BATCH_DELAY`, one request at a time. On `stop`, sends what is queued and returns.
async fn export_batches(
    mut queued: mpsc::Receiver<SpanData>,
    exporter: opentelemetry_otlp::SpanExporter,
    stop: Arc<Notify>,
) {
    let mut batch = Vec::with_capacity(BATCH_SPANS);
    let mut stopping = false;
    while !stopping {
        // The first span of a batch, then the rest within the delay.
        tokio::select! {
            received = queued.recv_many(&mut batch, BATCH_SPANS) => stopping = received == 0,
            _ = stop.notified() => stopping = true,
        }
        let deadline = tokio::time::sleep(BATCH_DELAY);
        tokio::pin!(deadline);
        while !stopping && batch.len() < BATCH_SPANS {
            let room = BATCH_SPANS - batch.len();
            tokio::select! {
                received = queued.recv_many(&mut batch, room) => {
                    stopping = received == 0;
                }
                _ = &mut deadline => break,
                _ = stop.notified() => stopping = true,
            }
        }
        if stopping {
            // What is queued now is all there will be: nothing waits for a batch to fill.
            queued.close();
            while let Some(span) = queued.recv().await {
                batch.push(span);
                if batch.len() == BATCH_SPANS {
                    export(&exporter, &mut batch).await;
                }
            }
        }
        export(&exporter, &mut batch).await;
    }
    let _ = exporter.shutdown();
}

/// Sends `batch` (emptied), for at most `EXPORT_TIMEOUT`; a failure is logged at most once per
/// 10 s, and the batch is lost.
async fn export(exporter: &opentelemetry_otlp::SpanExporter, batch: &mut Vec<SpanData>) {
    if batch.is_empty() {
        return;
    }
    let spans = batch.len();
    let sending = std::mem::replace(batch, Vec::with_capacity(BATCH_SPANS));
    // The channel bounds each attempt, but the exporter retries a failed one while its budget
    // lasts, and a retry started late in it runs its full attempt: this is the per-export bound
    // that the tracing page promises.
    let error = match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(sending)).await {
        Ok(Ok(())) => return,
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer within {EXPORT_TIMEOUT:?}"),
    };
    if let Some(suppressed) = EXPORT_FAILED.admit() {
        tracing::warn!(%error, spans, suppressed, "trace export to the OTLP collector failed");
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use opentelemetry::{
        InstrumentationScope,
        trace::{SpanContext, SpanId, SpanKind, Status},
    };
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;

    fn finished_span() -> SpanData {
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Server,
            name: "lease.v1.LeaseService/Acquire".into(),
            start_time: SystemTime::UNIX_EPOCH,
            end_time: SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::default(),
        }
    }

    /// A full queue (the export task stalled on its collector) never makes a span wait: the
    /// span is dropped at once and counted.
    #[test]
    fn a_full_queue_drops_and_counts_spans_without_waiting() {
        let (spans, mut queued) = mpsc::channel(2);
        let processor = QueueSpans { spans };
        let dropped_before = metrics().trace_spans_dropped.get();
        for _ in 0..5 {
            processor.on_end(finished_span());
        }
        assert_eq!(metrics().trace_spans_dropped.get() - dropped_before, 3);
        assert!(queued.try_recv().is_ok() && queued.try_recv().is_ok());
        assert!(queued.try_recv().is_err());
    }

    /// Only http:// and https:// URLs with a host are accepted, and the error names the flag.
    #[test]
    fn the_endpoint_must_be_an_http_or_https_url_with_a_host() {
        assert!(collector_endpoint("http://127.0.0.1:4317").is_ok());
        assert!(collector_endpoint("https://collector.example:4317").is_ok());
        for bad in [
            "",
            "collector:4317",
            "ftp://collector:4317",
            "http://",
            "not a url",
        ] {
            let error = collector_endpoint(bad).unwrap_err().to_string();
            assert!(error.contains("--otlp-endpoint"), "{bad:?}: {error}");
        }
    }
}
