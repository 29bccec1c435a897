//! An OTLP/gRPC trace receiver, what `leased serve --otlp-endpoint` exports to: the
//! `TraceService` of the published `opentelemetry-proto` definitions, served by tonic on a
//! loopback port in this process (the OpenTelemetry Collector is not installed here). It keeps
//! every request ([`OtlpReceiver::start`], for the tests) or only counts the spans
//! ([`OtlpReceiver::start_discarding`], for the benchmarks). Stops on drop.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::{KeyValue, any_value::Value},
    resource::v1::Resource,
    trace::v1::Span,
};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_stream::wrappers::TcpListenerStream;

/// What the receiver was sent.
#[derive(Default)]
struct Received {
    /// Every request, in arrival order; empty when discarding.
    requests: Mutex<Vec<ExportTraceServiceRequest>>,
    spans: AtomicU64,
    keep: bool,
}

/// The service: a handle on what was received.
struct Receiving(Arc<Received>);

#[tonic::async_trait]
impl TraceService for Receiving {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        let spans = request
            .resource_spans
            .iter()
            .flat_map(|resource| &resource.scope_spans)
            .map(|scope| scope.spans.len() as u64)
            .sum();
        self.0.spans.fetch_add(spans, Ordering::Relaxed);
        if self.0.keep {
            self.0.requests.lock().unwrap().push(request);
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A span as received, with the resource it came with.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    pub resource: Option<Resource>,
    pub span: Span,
}

impl ReceivedSpan {
    /// The value of the span's attribute `key` as text, if it has it.
    pub fn attribute(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }

    /// The value of the resource's attribute `key` (`service.name`, ...) as text.
    pub fn resource_attribute(&self, key: &str) -> Option<String> {
        attribute(&self.resource.as_ref()?.attributes, key)
    }
}

/// The value of attribute `key` as text: strings as they are, numbers and booleans formatted.
fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes
        .iter()
        .find(|attribute| attribute.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(match value {
        Value::StringValue(text) => text.clone(),
        Value::IntValue(number) => number.to_string(),
        Value::BoolValue(flag) => flag.to_string(),
        Value::DoubleValue(number) => number.to_string(),
        other => format!("{other:?}"),
    })
}

/// The receiver, listening on a fresh loopback port until dropped.
pub struct OtlpReceiver {
    pub address: SocketAddr,
    received: Arc<Received>,
    serving: JoinHandle<()>,
}

impl OtlpReceiver {
    /// A receiver that keeps every request.
    pub async fn start() -> Self {
        Self::serve(([127, 0, 0, 1], 0).into(), true).await
    }

    /// A receiver that keeps every request, on `address`: a collector back where it was.
    pub async fn start_at(address: SocketAddr) -> Self {
        Self::serve(address, true).await
    }

    /// A receiver that accepts every request and keeps only the count of its spans.
    pub async fn start_discarding() -> Self {
        Self::serve(([127, 0, 0, 1], 0).into(), false).await
    }

    async fn serve(address: SocketAddr, keep: bool) -> Self {
        let listener = TcpListener::bind(address)
            .await
            .expect("cannot bind the OTLP receiver");
        let address = listener.local_addr().unwrap();
        let received = Arc::new(Received {
            keep,
            ..Received::default()
        });
        let service = TraceServiceServer::new(Receiving(received.clone()));
        let serving = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        OtlpReceiver {
            address,
            received,
            serving,
        }
    }

    /// The URL to give `--otlp-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// How many spans it was sent so far.
    pub fn span_count(&self) -> u64 {
        self.received.spans.load(Ordering::Relaxed)
    }

    /// Every request received so far (none when discarding).
    pub fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        self.received.requests.lock().unwrap().clone()
    }

    /// Every span received so far, each with its resource.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.requests()
            .into_iter()
            .flat_map(|request| request.resource_spans)
            .flat_map(|resource_spans| {
                let resource = resource_spans.resource;
                resource_spans
                    .scope_spans
                    .into_iter()
                    .flat_map(|scope| scope.spans)
                    .map(move |span| ReceivedSpan {
                        resource: resource.clone(),
                        span,
                    })
            })
            .collect()
    }

    /// Waits up to `timeout` until `found` picks something out of the spans received.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut found: impl FnMut(&[ReceivedSpan]) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = found(&self.spans()) {
                return Some(value);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.serving.abort();
    }
}
