//! `Renew`: a bidi stream answering each renewal in order; several leases may share one stream,
//! up to `--max-leases-per-stream` held at once (`held_leases` keeps count).

use std::time::Duration;

use tokio::{sync::mpsc, time::Instant};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Response, Status, Streaming};
use tracing::{Instrument, Span};

use super::{
    ServedReplica,
    auth::{Operation, Principal, StreamAccess, authorize_stream, reloaded, stream_caller},
    held_leases::StreamLeases,
    rpc_metrics::StreamRecorder,
    service::{LeaseServiceImpl, ResponseStream},
};
use crate::{
    error::{Error, Refusal, Result},
    lease::{
        LeaseStore, Limits, RenewOutcome,
        limits::{parse_lease_id, parse_name},
    },
    metrics::{KindLabels, metrics},
    proto::{self, Lost, RenewRequest, RenewResponse, Renewed, renew_response},
    telemetry,
};

impl LeaseServiceImpl {
    pub(super) fn renew_stream(
        &self,
        principal: Option<Principal>,
        mut inbound: Streaming<RenewRequest>,
        span: &Span,
    ) -> Response<ResponseStream<RenewResponse>> {
        let (responses, receiver) = mpsc::channel(16);
        let replica = self.replica.clone();
        let limits = self.limits.clone();
        let held = self.held_leases.stream(self.max_leases_per_renew_stream);
        let shutdown = self.shutdown.clone();
        let mut access = self.stream_access(principal);
        let stream_span = span.clone();
        let renewing = async move {
            let mut recorder = StreamRecorder::start("Renew", &stream_span);
            loop {
                let request = tokio::select! {
                    message = inbound.message() => message,
                    _ = responses.closed() => return,
                    _ = shutdown.fired() => {
                        let status = Status::from(Error::ShuttingDown);
                        recorder.finish(status.code());
                        let _ = responses.send(Err(status)).await;
                        return;
                    }
                    _ = reloaded(&mut access) => {
                        let Err(error) = may_still_renew(&access, &held) else {
                            continue;
                        };
                        metrics().streams_ended_by_reload.inc();
                        let status = Status::from(error);
                        recorder.finish(status.code());
                        let _ = responses.send(Err(status)).await;
                        return;
                    }
                };
                let request = match request {
                    Ok(Some(request)) => request,
                    // The client half-closed: a clean end.
                    Ok(None) => return recorder.finish(tonic::Code::Ok),
                    // A message we could not decode (malformed, over --max-message-bytes) ends the
                    // stream with its status, not a silent OK; if the client went away, nobody
                    // reads it.
                    Err(status) => {
                        let code = status.code();
                        if responses.send(Err(status)).await.is_ok() {
                            recorder.finish(code);
                        }
                        return;
                    }
                };
                // Each renewal has a span of its own (a stream renews any number of leases),
                // under the stream's: none when the stream is not traced.
                let renewal = telemetry::renewal_span(&stream_span);
                // Boxed: the store's future then takes memory only while a renewal is in
                // flight, not for as long as the stream stays open.
                let renewing = renew_one(&replica, &limits, &access, request, &held, &renewal);
                let answer = Box::pin(renewing)
                    .instrument(renewal.clone())
                    .await
                    .map_err(Status::from);
                record_renewal(&renewal, &answer);
                if let Err(status) = &answer {
                    recorder.finish(status.code());
                }
                let failed = answer.is_err();
                if responses.send(answer).await.is_err() || failed {
                    return;
                }
            }
        };
        tokio::spawn(renewing.instrument(span.clone()));
        Response::new(Box::pin(ReceiverStream::new(receiver)))
    }
}

/// How one renewal ended, in its span: `renewed` (with the fencing token), `lost`, or the code.
fn record_renewal(span: &Span, answer: &Result<RenewResponse, Status>) {
    let outcome = match answer.as_ref().map(|response| &response.result) {
        Ok(Some(renew_response::Result::Renewed(renewed))) => {
            span.record(
                "lease.fencing_token",
                telemetry::integer(renewed.fencing_token),
            );
            Ok("renewed")
        }
        Ok(Some(renew_response::Result::Lost(_))) => Ok("lost"),
        Ok(None) => Ok("renewed"),
        Err(status) => Err(status.code()),
    };
    telemetry::record_outcome(span, outcome);
}

/// After a reload: whether the stream's token may still renew every lease the stream holds.
/// If not, the stream ends at once rather than at its next renewal, which may be a TTL away.
fn may_still_renew(access: &Option<StreamAccess>, held: &StreamLeases) -> Result<()> {
    if let Some(access) = access {
        access.authorize_operation(Operation::Renew)?;
    }
    held.names()
        .iter()
        .try_for_each(|name| authorize_stream(access, Operation::Renew, name))
}

async fn renew_one(
    replica: &ServedReplica,
    limits: &Limits,
    access: &Option<StreamAccess>,
    request: RenewRequest,
    held: &StreamLeases,
    span: &Span,
) -> Result<RenewResponse> {
    let name = parse_name(&request.name)?;
    telemetry::record_name(span, &name);
    let lease_id = parse_lease_id(&request.lease_id)?;
    let ttl = limits.renew_ttl(request.ttl_ms)?;
    // The tokens in force now, not those the stream opened with.
    authorize_stream(access, Operation::Renew, &name)?;
    // Refused before the store is asked, so that a refused renewal extends nothing.
    if !held.has_room_for(&name) {
        return Err(Error::Refused(Refusal::RenewStreamFull {
            limit: held.limit(),
        }));
    }
    let caller = stream_caller(access);
    let result = match replica
        .store()
        .renew(&name, &lease_id, ttl, &caller)
        .await?
    {
        RenewOutcome::Renewed {
            fencing_token,
            ttl_ms,
            expires_at_ms,
        } => {
            // Counted from the answer, so never before the store's own expiry.
            let expires = Instant::now() + Duration::from_millis(ttl_ms.max(0).unsigned_abs());
            held.renewed(&name, &lease_id, expires);
            metrics().renewals.inc();
            tracing::debug!(rpc = "Renew", %name, fencing_token, ttl_ms, "renewed");
            renew_response::Result::Renewed(Renewed {
                fencing_token,
                ttl_ms,
                expires_at: Some(proto::timestamp_from_unix_ms(expires_at_ms)),
            })
        }
        RenewOutcome::Lost(gone) => {
            held.lost(&name, &lease_id);
            metrics()
                .losses
                .get_or_create(&KindLabels { kind: gone.kind() })
                .inc();
            tracing::debug!(rpc = "Renew", %name, reason = gone.kind(), "lost");
            renew_response::Result::Lost(Lost {
                reason: gone.reason(),
            })
        }
    };
    Ok(RenewResponse {
        name: request.name,
        result: Some(result),
    })
}
