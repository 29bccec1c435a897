//! [`ClientError`]: what can go wrong in the client.

use super::LostReason;

/// What can go wrong in the client. Contention is not an error: see
/// [`Acquired::NotGranted`](super::Acquired::NotGranted).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is malformed or the server cannot be reached.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint as given to [`LeaseClient::connect`](super::LeaseClient::connect).
        endpoint: String,
        /// The transport's error: a malformed URI, a refused connection, a TLS failure.
        source: tonic::transport::Error,
    },
    /// The server answered with an error status (bad input, Redis unavailable, ...).
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// Acquire asked for a [`limit`](super::AcquireOptions::limit) other than the one the name's
    /// current holders were granted with (the server's `FAILED_PRECONDITION`). Every holder of a
    /// name must ask for the same limit; `message` is the server's, naming the limit in force.
    /// Nothing was granted.
    #[error("{message}")]
    LimitMismatch {
        /// The limit this caller asked for.
        requested: u32,
        /// The server's explanation, e.g. "limit 5 differs from the limit in force, 3: ...".
        message: String,
    },
    /// A TLS file cannot be read, or a setting is malformed.
    #[error("{0}")]
    Config(String),
    /// The server broke the contract (e.g. an Acquire stream without a terminal message).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// [`ReentrantLease::lock`](super::ReentrantLease::lock) while the lease its levels hold is
    /// lost: every level must end (be dropped) before the handle acquires the name again.
    #[error("{0}")]
    Lost(LostReason),
}
