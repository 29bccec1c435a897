//! The one mapping of the core's [`Error`] to a gRPC status: what a client sees of each failure
//! (the code and message of each [`Refusal`] too), and which failures are logged (the detail stays
//! in the log, the client gets a generic message). The console answers through it as well.

use tonic::{Code, Status};

use crate::{
    error::Error,
    lease::{GrantMismatch, Refusal},
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
            Error::Refused(refusal) => refused(refusal),
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

/// The status of a refused request: its code, and a message that says why and, where the caller
/// can, what to do instead. Clients and tests match on these texts: change none lightly.
fn refused(refusal: Refusal) -> Status {
    match refusal {
        Refusal::QueueFull { limit } => Status::resource_exhausted(format!(
            "too many callers are waiting for this lease (limit {limit})"
        )),
        Refusal::LimitMismatch { asked, in_force } => Status::failed_precondition(format!(
            "limit {asked} differs from the limit in force, {in_force}: every holder of a name \
             must ask for the same limit"
        )),
        Refusal::TooManyShared { limit } => Status::resource_exhausted(format!(
            "shared: {limit} shared grants hold this lease already, the most a name may have \
             (--max-limit)"
        )),
        Refusal::LeaseIdEnded => Status::failed_precondition(
            "lease_id: this lease id was released lately; a new acquisition takes a new id",
        ),
        Refusal::Superseded => Status::failed_precondition(
            "lease_id: a newer Acquire with this lease id took this call's place in line",
        ),
        Refusal::OwnGrantDiffers {
            mismatch: GrantMismatch::Shared { held },
            asked_limit: _,
        } => Status::failed_precondition(format!(
            "shared: this lease id holds {} grant of this name, and a retry must ask for the \
             mode it holds (shared={held}); a new acquisition takes a new id",
            if held { "a shared" } else { "an exclusive" }
        )),
        Refusal::OwnGrantDiffers {
            mismatch: GrantMismatch::Limit { held },
            asked_limit,
        } => Status::failed_precondition(format!(
            "limit: this lease id holds a grant of this name with limit {held}, not \
             {asked_limit}: a retry must ask for the limit it holds"
        )),
        Refusal::MadeByAnotherCaller => Status::permission_denied(
            "lease_id: this lease id holds a grant that another token made; only that token \
             may use it",
        ),
        Refusal::MissingToken => Status::unauthenticated("missing authorization: Bearer token"),
        Refusal::MalformedAuthorization => {
            Status::unauthenticated("authorization must be \"Bearer TOKEN\"")
        }
        Refusal::UnknownToken => Status::unauthenticated("unknown token"),
        Refusal::TokenRevoked => Status::unauthenticated("the token was revoked by a reload"),
        Refusal::OperationNotAllowed { client, operation } => {
            Status::permission_denied(format!("token {client:?} may not {operation}"))
        }
        Refusal::NameNotAllowed { client, name } => Status::permission_denied(format!(
            "token {client:?} may not use the lease name {name:?}"
        )),
        Refusal::ListPrefixNotAllowed {
            client,
            prefix,
            prefixes,
        } => Status::permission_denied(format!(
            "token {client:?} may not list the names under {prefix:?}: list under one of its \
             prefixes ({})",
            prefixes.join(", ")
        )),
        Refusal::TooManyFollowedNames { followed } => Status::resource_exhausted(format!(
            "this server follows {followed} lease names for Watch and waiting Acquire calls, its \
             limit (--max-followed-names); try again later or another server"
        )),
        Refusal::TooManyFollowedNamesForToken { followed } => Status::resource_exhausted(format!(
            "this token's calls follow {followed} lease names with Watch and waiting Acquire on \
             this server, its limit (--max-followed-names-per-token)"
        )),
        Refusal::RenewStreamFull { limit } => Status::resource_exhausted(format!(
            "one Renew stream may hold at most {limit} leases at once"
        )),
        Refusal::NoSuchApi { path } => Status::not_found(format!("no such API: {path}")),
        Refusal::PageSizeNotANumber { given } => {
            Status::invalid_argument(format!("page_size: not a number: {given:?}"))
        }
        Refusal::NotJsonContentType => {
            Status::invalid_argument("content-type: must be application/json")
        }
        Refusal::CrossSite { site } => Status::permission_denied(format!(
            "sec-fetch-site: {site}: the console accepts changes from its own page only"
        )),
        Refusal::ForeignOrigin { origin, host } => {
            Status::permission_denied(format!("origin: {origin} is not this console ({host})"))
        }
        Refusal::BodyTooLarge { limit } => {
            Status::invalid_argument(format!("body: larger than {limit} bytes, or cut short"))
        }
        Refusal::BodyTooSlow => Status::deadline_exceeded("body: not received in time"),
        Refusal::BodyNotJson { reason } => {
            Status::invalid_argument(format!("body: not JSON: {reason}"))
        }
        Refusal::NotAString { field } => {
            Status::invalid_argument(format!("{field}: must be a string"))
        }
        Refusal::FencingTokenNotANumber { given } => {
            Status::invalid_argument(format!("fencing_token: not a number: {given:?}"))
        }
    }
}
