//! Why a request is refused, in the domain's words: [`Refusal`] travels as `Error::Refused` from
//! wherever the refusal is decided (the core, a store, access control, a server bound, the
//! console) to `server::status`, the one place that picks its status code and writes its message.

/// A reason a request is refused, with the data its message needs. It carries no message: what
/// a client reads is written in `server::status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    // Acquire, by the store's answer.
    /// The name's queue holds `limit` waiters already (`--max-waiters-per-name`).
    QueueFull { limit: usize },
    /// The caller asked for limit `asked`, but the name's holders were granted with `in_force`.
    LimitMismatch { asked: u32, in_force: u32 },
    /// `limit` shared grants (`--max-limit`) hold the name already.
    TooManyShared { limit: u32 },
    /// The caller's own lease id was released lately; a new acquisition takes a new id.
    LeaseIdEnded,
    /// A newer Acquire with the same own lease id took this call's place in line.
    Superseded,
    /// The caller's own lease id holds a grant of the name of another mode or limit than the
    /// retry asks for (`asked_limit`).
    OwnGrantDiffers {
        mismatch: GrantMismatch,
        asked_limit: u32,
    },
    /// The caller's own lease id holds a grant that another caller (token) made.
    MadeByAnotherCaller,

    // Access control.
    /// No `authorization` header.
    MissingToken,
    /// An `authorization` header that is not `Bearer TOKEN`.
    MalformedAuthorization,
    /// A bearer token that is not in the tokens file.
    UnknownToken,
    /// The token of an open stream is gone from the tokens file since a reload.
    TokenRevoked,
    /// The token (named `client`) may not do `operation` at all.
    OperationNotAllowed {
        client: String,
        operation: &'static str,
    },
    /// The token (named `client`) may not use `name`: no prefix of its covers it.
    NameNotAllowed { client: String, name: String },
    /// The token (named `client`) may not list under `prefix`: it is not under one of its
    /// `prefixes`.
    ListPrefixNotAllowed {
        client: String,
        prefix: String,
        prefixes: Vec<String>,
    },

    // Server bounds.
    /// This server follows `followed` names for Watch and waiting Acquire calls, its bound
    /// (`--max-followed-names`).
    TooManyFollowedNames { followed: usize },
    /// The token's calls follow `followed` names on this server, its bound
    /// (`--max-followed-names-per-token`).
    TooManyFollowedNamesForToken { followed: usize },
    /// A Renew stream holds `limit` leases already, the most one stream may hold.
    RenewStreamFull { limit: usize },

    // The console's own checks of a request, before it calls a handler.
    /// No such console API.
    NoSuchApi { path: String },
    /// `page_size` is not a number.
    PageSizeNotANumber { given: String },
    /// A state-changing request without a JSON content type.
    NotJsonContentType,
    /// A state-changing request from another site (`Sec-Fetch-Site`).
    CrossSite { site: String },
    /// A state-changing request from another origin than this console's `host`.
    ForeignOrigin { origin: String, host: String },
    /// The body is larger than `limit` bytes, or was cut short.
    BodyTooLarge { limit: usize },
    /// The body did not arrive within the request deadline.
    BodyTooSlow,
    /// The body is not JSON (`reason`: the parser's).
    BodyNotJson { reason: String },
    /// A body field that must be a string is something else.
    NotAString { field: &'static str },
    /// `fencing_token` is a string but not a number.
    FencingTokenNotANumber { given: String },
}

/// How a retry of a caller's own lease id differs from the grant the id holds (compared by
/// `GrantMismatch::between`, in the core).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantMismatch {
    /// The grant is shared (`true`) or exclusive, and the request asks for the other.
    Shared { held: bool },
    /// The grant is a permit of this limit (1: exclusive or shared), the request asks another.
    Limit { held: u32 },
}
