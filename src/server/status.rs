//! The one mapping of the core's [`Error`] to a gRPC status: what a client sees of each failure,
//! and which failures are logged (the detail stays in the log, the client gets a generic message).

use tonic::{Code, Status};

use crate::{
    error::Error,
    throttle::{LOG_INTERVAL, Throttle},
};

/// A Redis outage fails every request, and a broken key fails every request on its name: each
/// kind is logged once per interval, with the count of the failures in between.
static STORE_UNAVAILABLE: Throttle = Throttle::new(LOG_INTERVAL);
static NOT_REPLICATED: Throttle = Throttle::new(LOG_INTERVAL);
static INTERNAL_ERROR: Throttle = Throttle::new(LOG_INTERVAL);

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::InvalidArgument { .. } => Status::new(Code::InvalidArgument, error.to_string()),
            Error::Unavailable(detail) => {
                if let Some(suppressed) = STORE_UNAVAILABLE.admit() {
                    tracing::warn!(suppressed, %detail, "store unavailable");
                }
                Status::unavailable("lease store unavailable, retry later")
            }
            Error::NotReplicated(message) => {
                if let Some(suppressed) = NOT_REPLICATED.admit() {
                    tracing::warn!(suppressed, %message, "a write was not confirmed by enough Redis replicas");
                }
                Status::unavailable(message)
            }
            Error::Unauthenticated(message) => Status::unauthenticated(message),
            Error::PermissionDenied(message) => Status::permission_denied(message),
            Error::ResourceExhausted(message) => Status::resource_exhausted(message),
            Error::FailedPrecondition(message) => Status::failed_precondition(message),
            Error::ShuttingDown => Status::unavailable("server is shutting down"),
            Error::Internal { name, detail } => {
                if let Some(suppressed) = INTERNAL_ERROR.admit() {
                    tracing::error!(suppressed, %name, %detail, "internal error");
                }
                Status::internal("internal error")
            }
        }
    }
}
