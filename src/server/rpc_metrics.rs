//! The gRPC side of the RPC metrics: a status code's label, and the recorder of a streaming RPC
//! (which also ends its trace span with the outcome).

use std::time::Instant;

use tonic::Code;
use tracing::Span;

use crate::{
    metrics::{KindLabels, metrics},
    telemetry,
};

/// Records one finished unary RPC with its final status code.
pub(super) fn record_rpc(rpc: &'static str, code: Code, elapsed: std::time::Duration) {
    metrics().record_rpc(rpc, code_name(code), elapsed);
}

/// The label of a status code: its name as tonic's `Debug` spells it, without formatting a
/// `String` for every RPC.
fn code_name(code: Code) -> &'static str {
    use Code::*;
    match code {
        Ok => "Ok",
        Cancelled => "Cancelled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Counts one open stream of `rpc` until dropped, then records the RPC with its final code
/// (`Cancelled` unless [`finish`](Self::finish) said otherwise: the client went away), and its
/// outcome in its trace span.
pub struct StreamRecorder {
    rpc: &'static str,
    started: Instant,
    code: Code,
    span: Span,
    outcome: &'static str,
}

impl StreamRecorder {
    /// Starts counting a stream of `rpc`, whose trace span is `span`.
    pub fn start(rpc: &'static str, span: &Span) -> Self {
        metrics()
            .open_streams
            .get_or_create(&KindLabels { kind: rpc })
            .inc();
        StreamRecorder {
            rpc,
            started: Instant::now(),
            code: Code::Cancelled,
            span: span.clone(),
            outcome: "completed",
        }
    }

    /// Sets the code the stream ended with.
    pub fn finish(&mut self, code: Code) {
        self.code = code;
    }

    /// The stream ended well, with this outcome (`granted`, ...) for its span.
    pub fn finish_with(&mut self, outcome: &'static str) {
        self.code = Code::Ok;
        self.outcome = outcome;
    }
}

impl Drop for StreamRecorder {
    fn drop(&mut self) {
        let metrics = metrics();
        metrics
            .open_streams
            .get_or_create(&KindLabels { kind: self.rpc })
            .dec();
        metrics.record_rpc(self.rpc, code_name(self.code), self.started.elapsed());
        let outcome = match self.code {
            Code::Ok => Ok(self.outcome),
            code => Err(code),
        };
        telemetry::record_outcome(&self.span, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The labels keep the names that dashboards already query: tonic's `Debug` spelling.
    #[test]
    fn code_labels_are_tonics_names() {
        for value in 0..=16 {
            let code = Code::from_i32(value);
            assert_eq!(code_name(code), format!("{code:?}"));
        }
    }
}
