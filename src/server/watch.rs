//! `Watch`: a server stream of a lease's changes of holder, a snapshot first. The events come
//! from the name's watch in the core ([`crate::lease::watch`]); this only turns them into proto
//! messages and ends the stream on shutdown, or once a tokens reload takes the name from its
//! caller.

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Response, Status};
use tracing::Span;

use super::{
    auth::{Operation, Principal, authorize_stream, reloaded},
    rpc_metrics::StreamRecorder,
    service::{LeaseServiceImpl, ResponseStream, authorize, holder_info},
};
use crate::{
    error::{Error, Result},
    lease::{
        LeaseName, QueueStore,
        limits::parse_name,
        watch::{UpdateCause, Watch},
    },
    metrics::metrics,
    proto::{self, WatchRequest, watch_event::Cause},
    telemetry,
};

/// Events waiting for a slow reader of one stream; past them the watch itself buffers (bounded)
/// and then sends the reader a fresh snapshot.
const STREAM_BUFFER: usize = 8;

impl<S: QueueStore> LeaseServiceImpl<S> {
    pub(super) fn watch_stream(
        &self,
        principal: Option<Principal>,
        request: WatchRequest,
        span: &Span,
    ) -> Result<Response<ResponseStream<proto::WatchEvent>>> {
        let name = parse_name(&request.name)?;
        telemetry::record_name(span, &name);
        authorize(&principal, Operation::Watch, &name)?;
        let following = self.follow(&principal, &name)?;
        let mut access = self.stream_access(principal);
        let mut watch = Watch::start(&self.store, name.clone());
        let shutdown = self.shutdown.clone();
        let (events, receiver) = mpsc::channel(STREAM_BUFFER);
        let span = span.clone();
        tokio::spawn(async move {
            // The name stays followed for as long as this task runs.
            let _following = following;
            let mut recorder = StreamRecorder::start("Watch", &span);
            tracing::debug!(rpc = "Watch", %name, "watching");
            loop {
                let event = tokio::select! {
                    event = watch.next() => event,
                    _ = events.closed() => return,
                    _ = shutdown.fired() => Err(Error::ShuttingDown),
                    // A reload that took the name or `watch` from the token ends the stream.
                    _ = reloaded(&mut access) => match authorize_stream(&access, Operation::Watch, &name) {
                        Ok(()) => continue,
                        Err(error) => {
                            metrics().streams_ended_by_reload.inc();
                            Err(error)
                        }
                    },
                };
                let message = match event {
                    Ok(event) => Ok(to_proto(&name, event)),
                    Err(error) => Err(Status::from(error)),
                };
                let code = message
                    .as_ref()
                    .map_or_else(Status::code, |_| tonic::Code::Ok);
                let last = message.is_err();
                if events.send(message).await.is_err() {
                    // The caller left.
                    return;
                }
                if last {
                    return recorder.finish(code);
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}

fn to_proto(name: &LeaseName, event: crate::lease::watch::WatchUpdate) -> proto::WatchEvent {
    let cause = match event.cause {
        UpdateCause::Snapshot => Cause::Snapshot,
        UpdateCause::Granted => Cause::Granted,
        UpdateCause::Released => Cause::Released,
        UpdateCause::Expired => Cause::Expired,
        UpdateCause::Revoked => Cause::Revoked,
    };
    let subject = event.subject.map(holder_info).unwrap_or_default();
    proto::WatchEvent {
        name: name.to_string(),
        cause: cause.into(),
        held: !event.holders.is_empty(),
        holder: subject.holder,
        fencing_token: subject.fencing_token,
        expires_at: subject.expires_at,
        limit: event.limit,
        holders: event.holders.into_iter().map(holder_info).collect(),
        reason: event.reason,
    }
}
