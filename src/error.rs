//! The one error type of the crate, and its mapping to gRPC status codes.

use tonic::{Code, Status};

/// Everything that can go wrong while serving a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field is out of range. `field` is the proto field name.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },

    /// The store did not answer in time or is unreachable. The detail is logged, not returned:
    /// clients see a generic message.
    #[error("store unavailable: {0}")]
    Unavailable(String),

    /// No valid bearer token (access control is on).
    #[error("{0}")]
    Unauthenticated(String),

    /// The token may not do this operation on this lease name.
    #[error("{0}")]
    PermissionDenied(String),

    /// A server limit was reached.
    #[error("{0}")]
    ResourceExhausted(String),

    /// The server is draining after SIGTERM.
    #[error("server is shutting down")]
    ShuttingDown,

    /// A bug or an answer from the store that breaks its contract.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An `INVALID_ARGUMENT` for `field`.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }
}

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::InvalidArgument { .. } => Status::new(Code::InvalidArgument, error.to_string()),
            Error::Unavailable(detail) => {
                tracing::warn!(%detail, "store unavailable");
                Status::unavailable("lease store unavailable, retry later")
            }
            Error::Unauthenticated(message) => Status::unauthenticated(message),
            Error::PermissionDenied(message) => Status::permission_denied(message),
            Error::ResourceExhausted(message) => Status::resource_exhausted(message),
            Error::ShuttingDown => Status::unavailable("server is shutting down"),
            Error::Internal(detail) => {
                tracing::error!(%detail, "internal error");
                Status::internal("internal error")
            }
        }
    }
}
