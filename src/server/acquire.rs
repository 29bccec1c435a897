//! `Acquire`: a server stream of `waiting` messages and one terminal `granted` or `not_granted`.

use std::time::Instant;

use futures::future::Either;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Response, Status};
use tracing::Span;

use super::{
    auth::{Operation, Principal, StreamAccess, authorize_stream, caller_of, reloaded},
    followed_names::Following,
    rpc_metrics::StreamRecorder,
    service::{LeaseServiceImpl, ResponseStream, authorize},
};
use crate::{
    error::Result,
    lease::{
        LeaseName, Occupancy, Placement, QueueStore, ValidatedAcquire, limits::AcquireFields,
        waiting::AcquireEvent,
    },
    metrics::metrics,
    proto::{
        self, AcquireRequest, AcquireResponse, Granted, NotGranted, Waiting, acquire_response,
    },
    telemetry,
};

impl<S: QueueStore> LeaseServiceImpl<S> {
    /// Validates and opens an `Acquire` whose trace `span` lasts as long as its stream, and ends
    /// with its outcome and the time it waited.
    pub(super) async fn acquire_stream(
        &self,
        principal: Option<Principal>,
        request: AcquireRequest,
        span: &Span,
    ) -> crate::error::Result<Response<ResponseStream<AcquireResponse>>> {
        let started = Instant::now();
        let mut request = self.limits.validate_acquire(AcquireFields {
            name: &request.name,
            holder: request.holder,
            ttl_ms: request.ttl_ms,
            wait_ms: request.wait_ms,
            limit: request.limit,
            lock_delay_ms: request.lock_delay_ms,
            shared: request.shared,
            lease_id: &request.lease_id,
        })?;
        record_request(span, &request);
        authorize(&principal, Operation::Acquire, &request.name)?;
        request.caller = caller_of(&principal);
        let name = request.name.clone();
        // Lives as long as the response stream: records the RPC when the stream ends or is dropped.
        let mut recorder = StreamRecorder::start("Acquire", span);
        let events = match request.wait.is_zero() {
            // Try once: answer before the stream opens, so that the response headers, the answer
            // and the trailers leave in one write, with no task or channel in between.
            true => {
                let answer = crate::lease::waiting::try_once(&self.store, &request).await;
                Either::Left(tokio_stream::once(answer))
            }
            false => {
                let following = self.follow(&principal, &name)?;
                Either::Right(until_access_lost(
                    ReceiverStream::new(crate::lease::waiting::acquire(
                        self.store.clone(),
                        request,
                        self.shutdown.clone(),
                    )),
                    self.stream_access(principal),
                    name.clone(),
                    following,
                ))
            }
        };
        let span = span.clone();
        let responses = events.map(move |event| match event {
            Ok(event) => {
                if let Some(outcome) = terminal_outcome(&event) {
                    recorder.finish_with(outcome);
                    telemetry::record_waited(&span, started.elapsed());
                }
                let response = to_response(&name, event);
                if let Some(acquire_response::Result::Granted(granted)) = &response.result {
                    span.record(
                        "lease.fencing_token",
                        telemetry::integer(granted.fencing_token),
                    );
                }
                Ok(response)
            }
            Err(error) => {
                let status = Status::from(error);
                recorder.finish(status.code());
                telemetry::record_waited(&span, started.elapsed());
                Err(status)
            }
        });
        Ok(Response::new(Box::pin(responses)))
    }
}

/// The request's fields in its trace span, once valid (never its `lease_id`: the caller's
/// secret).
fn record_request(span: &Span, request: &ValidatedAcquire) {
    telemetry::record_name(span, &request.name);
    span.record("lease.holder", request.holder.as_str());
    span.record("lease.ttl_ms", telemetry::integer(request.ttl.as_millis()));
    span.record("lease.limit", i64::from(request.limit));
    span.record("lease.shared", request.shared);
    span.record(
        "lease.max_wait_ms",
        telemetry::integer(request.wait.as_millis()),
    );
}

/// The outcome of a terminal event, as the span says it; `None` while the caller waits.
fn terminal_outcome(event: &AcquireEvent) -> Option<&'static str> {
    match event {
        AcquireEvent::Granted(_) => Some("granted"),
        AcquireEvent::NotGranted(_) => Some("not_granted"),
        AcquireEvent::Waiting(_) => None,
    }
}

/// A waiting caller's `events`, ended with its refusal once a tokens reload takes `acquire` on
/// `name` from its token: the stream, and with it the wait, is then dropped, which gives up the
/// caller's place (and releases a grant made meanwhile that it was not sent). The name stays
/// `following` until then.
fn until_access_lost(
    events: impl tokio_stream::Stream<Item = Result<AcquireEvent>> + Send + 'static,
    access: Option<StreamAccess>,
    name: LeaseName,
    following: Following,
) -> impl tokio_stream::Stream<Item = Result<AcquireEvent>> + Send + 'static {
    let waiting = WaitingCall {
        events: Box::pin(events),
        access,
        name,
        _following: following,
    };
    futures::stream::unfold(Some(waiting), |waiting| async move {
        let mut waiting = waiting?;
        loop {
            tokio::select! {
                event = waiting.events.next() => return Some((event?, Some(waiting))),
                _ = reloaded(&mut waiting.access) => {
                    let allowed = authorize_stream(&waiting.access, Operation::Acquire, &waiting.name);
                    if let Err(error) = allowed {
                        metrics().streams_ended_by_reload.inc();
                        return Some((Err(error), None));
                    }
                }
            }
        }
    })
}

/// The state of [`until_access_lost`].
struct WaitingCall<E> {
    events: std::pin::Pin<Box<E>>,
    access: Option<StreamAccess>,
    name: LeaseName,
    _following: Following,
}

fn to_response(name: &LeaseName, event: AcquireEvent) -> AcquireResponse {
    let result = match event {
        AcquireEvent::Granted(delivery) => {
            // Taken out of the stream's buffer: tonic sends it now. A caller that leaves from
            // here on must release it itself (the proto says so).
            let grant = delivery.deliver();
            metrics().grants.inc();
            tracing::debug!(rpc = "Acquire", %name, fencing_token = grant.fencing_token, ttl_ms = grant.ttl_ms, "granted");
            acquire_response::Result::Granted(Granted {
                name: name.to_string(),
                lease_id: grant.lease_id.expose().to_owned(),
                fencing_token: grant.fencing_token,
                ttl_ms: grant.ttl_ms,
                expires_at: Some(proto::timestamp_from_unix_ms(grant.expires_at_ms)),
            })
        }
        AcquireEvent::Waiting(Placement {
            position,
            occupancy,
        }) => {
            tracing::debug!(rpc = "Acquire", %name, position, held = occupancy.held, "waiting");
            let (held, limit) = (occupancy.held, occupancy.limit);
            let (holder, fencing_token, remaining_ms) = holder_fields(occupancy);
            acquire_response::Result::Waiting(Waiting {
                holder,
                fencing_token,
                remaining_ms,
                position,
                held,
                limit,
            })
        }
        AcquireEvent::NotGranted(occupancy) => {
            metrics().not_granted.inc();
            let (held, limit) = (occupancy.held, occupancy.limit);
            let (holder, fencing_token, remaining_ms) = holder_fields(occupancy);
            tracing::debug!(rpc = "Acquire", %name, holder_token = fencing_token, held, "not granted");
            acquire_response::Result::NotGranted(NotGranted {
                holder,
                fencing_token,
                remaining_ms,
                held,
                limit,
            })
        }
    };
    AcquireResponse {
        result: Some(result),
    }
}

/// The holder (the permit that frees soonest) as `Waiting` and `NotGranted` carry it: "", 0, 0
/// while the lease is free but being handed to a caller ahead in the queue; `remaining_ms` -1 for
/// a lease without expiry.
fn holder_fields(occupancy: Occupancy) -> (String, u64, i64) {
    match occupancy.holder {
        Some(holder) => {
            let remaining_ms = holder.remaining_ms_or_minus_one();
            (holder.holder, holder.fencing_token, remaining_ms)
        }
        None => (String::new(), 0, 0),
    }
}
