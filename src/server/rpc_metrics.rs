//! The gRPC side of the RPC metrics: a status code's label, and the recorder of a streaming RPC.

use std::time::Instant;

use tonic::Code;

use crate::metrics::{KindLabels, metrics};

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
/// (`Cancelled` unless [`finish`](Self::finish) said otherwise: the client went away).
pub struct StreamRecorder {
    rpc: &'static str,
    started: Instant,
    code: Code,
}

impl StreamRecorder {
    /// Starts counting a stream of `rpc`.
    pub fn start(rpc: &'static str) -> Self {
        metrics()
            .open_streams
            .get_or_create(&KindLabels { kind: rpc })
            .inc();
        StreamRecorder {
            rpc,
            started: Instant::now(),
            code: Code::Cancelled,
        }
    }

    /// Sets the code the stream ended with.
    pub fn finish(&mut self, code: Code) {
        self.code = code;
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
