//! PostgreSQL as the resource (feature `fencing-postgres`), over tokio-postgres: [`fence`] in the
//! writer's own transaction, [`fence_error`] for the writes of the row-level form, and
//! [`PostgresMarks`], a mark store for the gRPC middleware.
//!
//! Apply [`SQL`] once per database first (`leased fencing sql | psql "$DATABASE_URL"`). Then a
//! fenced write is one more statement in its transaction:
//!
//! ```no_run
//! # async fn write(client: &mut tokio_postgres::Client, token: u64) -> Result<(), Box<dyn std::error::Error>> {
//! use leased::fencing::postgres::fence;
//!
//! let transaction = client.transaction().await?;
//! // Refused (FenceError::Stale) if a newer holder of the lease already wrote to "orders".
//! fence(&transaction, "orders", token).await?;
//! transaction
//!     .execute("UPDATE orders SET total = total + 1 WHERE id = 7", &[])
//!     .await?;
//! transaction.commit().await?;
//! # Ok(()) }
//! ```
//!
//! `leased.fence` holds the mark's row lock until the transaction ends, so the fenced
//! transactions of one resource commit one at a time, in token order. Tokens are `bigint`: every
//! token from 1 to [`MAX_TOKEN`](super::MAX_TOKEN) (2^63 - 1) fits, and leased's (floored at Unix
//! microseconds, about 1.8e15 in 2026) do for good.

use tokio_postgres::{GenericClient, error::SqlState};

use super::{FenceError, FenceMarks, check_token, mark_in_stale_message, prefixed};

/// `fencing/postgres/leased_fencing.sql`: the `leased` schema, `leased.fence` and the row-level
/// guard `leased.fencing_token_guard()`. Applying it again is harmless.
pub const SQL: &str = include_str!("../../fencing/postgres/leased_fencing.sql");

/// The SQLSTATE of a stale token: a newer holder of the lease wrote to the resource.
pub const STALE_SQLSTATE: &str = "LF001";

/// Checks `token` against `resource`'s mark and records it (`SELECT leased.fence(resource,
/// token)`), on a client (autocommit: the check alone) or, as a fenced write wants it, on the
/// transaction that then writes. Answers the mark, now `token`.
///
/// Errors: [`FenceError::Stale`] (SQLSTATE `LF001`) when a larger token was recorded;
/// [`FenceError::Invalid`] for a token outside 1 to 2^63 - 1 (refused before it is sent) or a bad
/// resource key (SQLSTATE `22023`: empty, over 1024 bytes); [`FenceError::Store`] for anything
/// else (the connection, a database without the SQL applied). In a transaction, any error aborts
/// it: roll it back.
pub async fn fence<C>(client: &C, resource: &str, token: u64) -> Result<u64, FenceError>
where
    C: GenericClient + Sync,
{
    let checked = check_token(token).map_err(|bad| FenceError::Invalid(format!("token {bad}")))?;
    // check_token keeps tokens within i64, so this conversion cannot fail.
    let token_param = i64::try_from(checked).expect("a checked token fits a bigint");
    let row = client
        .query_one("SELECT leased.fence($1, $2)", &[&resource, &token_param])
        .await
        .map_err(|error| fence_error(&error, resource, token))?;
    let mark: i64 = row
        .try_get(0)
        .map_err(|error| fence_error(&error, resource, token))?;
    Ok(mark as u64)
}

/// A tokio-postgres error of a fenced statement as a [`FenceError`]: `LF001` is
/// [`FenceError::Stale`] (the mark read from its message), `22023` (invalid_parameter_value)
/// [`FenceError::Invalid`], anything else [`FenceError::Store`]. [`fence`] uses it; map the
/// errors of the row-level form's `INSERT` and `UPDATE` (whose trigger raises the same SQLSTATEs)
/// with it too, naming the row as `resource`.
pub fn fence_error(error: &tokio_postgres::Error, resource: &str, token: u64) -> FenceError {
    let Some(database) = error.as_db_error() else {
        return FenceError::Store(describe(error));
    };
    let message = database.message();
    if database.code().code() == STALE_SQLSTATE
        && let Some(mark) = mark_in_stale_message(message)
    {
        return FenceError::Stale {
            resource: resource.to_owned(),
            token,
            mark,
        };
    }
    if *database.code() == SqlState::INVALID_PARAMETER_VALUE {
        return FenceError::Invalid(message.to_owned());
    }
    FenceError::Store(describe(error))
}

/// tokio-postgres's `Display` of a database error is only "db error": add the server's words.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(database) => format!(
            "{} {}: {}",
            database.severity(),
            database.code().code(),
            database.message()
        ),
        None => match std::error::Error::source(error) {
            Some(cause) => format!("{error}: {cause}"),
            None => error.to_string(),
        },
    }
}

/// High-water marks in PostgreSQL's `leased.fence_marks`, for the gRPC middleware: each check is
/// `SELECT leased.fence(prefix || name, token)` on its own (autocommit), so the mark outlives the
/// service and is shared by all its replicas, as durable as the database.
pub struct PostgresMarks {
    client: tokio_postgres::Client,
    prefix: String,
}

impl PostgresMarks {
    /// Marks kept through `client` (its connection task must be running), under the resource
    /// keys of the lease names themselves.
    pub fn new(client: tokio_postgres::Client) -> Self {
        PostgresMarks {
            client,
            prefix: String::new(),
        }
    }

    /// Puts `prefix` before each lease name to make its resource key (e.g. `"grpc:"`), so that the
    /// middleware's marks never share a key with the resources your own code fences.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

impl FenceMarks for PostgresMarks {
    async fn fence(&self, resource: &str, token: u64) -> Result<u64, FenceError> {
        prefixed::fence_prefixed(&self.prefix, resource, |key| async move {
            fence(&self.client, &key, token).await
        })
        .await
    }
}
