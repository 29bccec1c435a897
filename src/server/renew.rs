//! `Renew`: a bidi stream answering each renewal in order; several leases may share one stream.

use std::collections::HashSet;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Response, Status, Streaming};

use super::{
    auth::{Operation, Principal},
    service::{LeaseServiceImpl, ResponseStream, authorize},
};
use crate::{
    error::{Error, Result},
    lease::{
        LeaseStore, Limits, RenewOutcome,
        limits::{parse_lease_id, parse_name},
    },
    metrics::{KindLabels, StreamRecorder, metrics},
    proto::{self, Lost, RenewRequest, RenewResponse, Renewed, renew_response},
};

impl<S: LeaseStore> LeaseServiceImpl<S> {
    pub(super) fn renew_stream(
        &self,
        principal: Option<Principal>,
        mut inbound: Streaming<RenewRequest>,
    ) -> Response<ResponseStream<RenewResponse>> {
        let (responses, receiver) = mpsc::channel(16);
        let store = self.store.clone();
        let limits = self.limits.clone();
        let max_leases = self.max_leases_per_renew_stream;
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let mut recorder = StreamRecorder::start("Renew");
            let mut leases_seen = HashSet::new();
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
                let answer = renew_one(
                    &*store,
                    &limits,
                    &principal,
                    request,
                    &mut leases_seen,
                    max_leases,
                )
                .await
                .map_err(Status::from);
                if let Err(status) = &answer {
                    recorder.finish(status.code());
                }
                let failed = answer.is_err();
                if responses.send(answer).await.is_err() || failed {
                    return;
                }
            }
        });
        Response::new(Box::pin(ReceiverStream::new(receiver)))
    }
}

async fn renew_one<S: LeaseStore>(
    store: &S,
    limits: &Limits,
    principal: &Option<Principal>,
    request: RenewRequest,
    leases_seen: &mut HashSet<String>,
    max_leases: usize,
) -> Result<RenewResponse> {
    let name = parse_name(&request.name)?;
    let lease_id = parse_lease_id(&request.lease_id)?;
    let ttl = limits.renew_ttl(request.ttl_ms)?;
    authorize(principal, Operation::Renew, &name)?;
    if !leases_seen.contains(name.as_str()) {
        if leases_seen.len() >= max_leases {
            return Err(Error::ResourceExhausted(format!(
                "one Renew stream may renew at most {max_leases} leases"
            )));
        }
        leases_seen.insert(name.as_str().to_owned());
    }
    let result = match store.renew(&name, &lease_id, ttl).await? {
        RenewOutcome::Renewed {
            fencing_token,
            ttl_ms,
            expires_at_ms,
        } => {
            metrics().renewals.inc();
            tracing::debug!(rpc = "Renew", %name, fencing_token, ttl_ms, "renewed");
            renew_response::Result::Renewed(Renewed {
                fencing_token,
                ttl_ms,
                expires_at: Some(proto::timestamp_from_unix_ms(expires_at_ms)),
            })
        }
        RenewOutcome::Lost(reason) => {
            metrics()
                .losses
                .get_or_create(&KindLabels {
                    kind: reason.as_str(),
                })
                .inc();
            tracing::info!(rpc = "Renew", %name, reason = reason.as_str(), "lost");
            renew_response::Result::Lost(Lost {
                reason: reason.as_str().to_owned(),
            })
        }
    };
    Ok(RenewResponse {
        name: request.name,
        result: Some(result),
    })
}
