//! Fencing: a lease's token checked where the data lives. A token protects nothing until the
//! resource refuses a smaller one than the largest it has seen; this module holds what every
//! adapter shares: the token's range and text form, the gRPC metadata convention, and the
//! [`FenceMarks`] contract of a high-water-mark store.
//!
//! The adapters (the book's "Fencing your resource" page):
//! - PostgreSQL: `fencing/postgres/leased_fencing.sql`, applied once, and `leased.fence(resource,
//!   token)` called in the writer's transaction;
//! - Redis as the resource: the `leased_fencing` Functions library in
//!   `fencing/redis/leased_fencing.lua`;
//! - your own gRPC services: a middleware that keeps a mark per lease name and refuses calls whose
//!   `leased-fencing-token` is below it: [`FencingLayer`], a tower layer for tonic servers, with
//!   its marks in process ([`InProcessMarks`], the default) or in any [`FenceMarks`] store. The
//!   caller's side: [`LeaseGuard::fencing_metadata`](crate::client::LeaseGuard::fencing_metadata),
//!   [`LeaseGuard::fenced_request`](crate::client::LeaseGuard::fenced_request) and
//!   [`FencingInterceptor`] attach the metadata.

mod attach;
mod in_process;
mod layer;

pub use attach::FencingInterceptor;
pub use in_process::InProcessMarks;
pub use layer::{FencedService, FencingLayer};

use std::fmt;

#[cfg(feature = "fencing-postgres")]
pub mod postgres;
#[cfg(any(feature = "fencing-postgres", feature = "fencing-redis"))]
mod prefixed;
#[cfg(feature = "fencing-redis")]
pub mod redis;

/// The gRPC metadata (HTTP header) names of the fencing convention: a call to a fenced service
/// carries the lease's name and its fencing token in decimal. The proto's header comment is the
/// contract.
pub mod metadata {
    /// The lease's name, as granted.
    pub const LEASE_NAME: &str = "leased-lease-name";
    /// The grant's fencing token, in decimal (1 to [`super::MAX_TOKEN`]).
    pub const FENCING_TOKEN: &str = "leased-fencing-token";
}

/// The largest fencing token an adapter accepts: the largest signed 64-bit integer (PostgreSQL's
/// `bigint`, Redis's integers). leased's tokens are floored at the grant's Unix time in
/// microseconds (about 1.8e15 in 2026), below 2^53 until the year 2255.
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// A token outside 1 to [`MAX_TOKEN`], or text that is not one in canonical decimal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadToken {
    /// What was given, escaped and cut to 40 characters (it may be anything a caller sent).
    pub given: String,
}

impl fmt::Display for BadToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "must be a fencing token from 1 to {MAX_TOKEN}, not {}",
            self.given
        )
    }
}

impl std::error::Error for BadToken {}

/// Checks that `token` is a fencing token an adapter can store (1 to [`MAX_TOKEN`]).
pub fn check_token(token: u64) -> Result<u64, BadToken> {
    if token == 0 || token > MAX_TOKEN {
        return Err(BadToken {
            given: token.to_string(),
        });
    }
    Ok(token)
}

/// Parses a token in canonical decimal, as the metadata convention carries it: digits only, no
/// sign, no leading zero, 1 to [`MAX_TOKEN`].
pub fn parse_token(text: &str) -> Result<u64, BadToken> {
    let bad = || BadToken {
        given: quoted_prefix(text),
    };
    let canonical = !text.is_empty()
        && !text.starts_with('0')
        && text.len() <= 19
        && text.bytes().all(|byte| byte.is_ascii_digit());
    if !canonical {
        return Err(bad());
    }
    text.parse::<u64>()
        .ok()
        .and_then(|token| check_token(token).ok())
        .ok_or_else(bad)
}

/// `text` in double quotes with Rust's escapes, cut to its first 40 characters.
fn quoted_prefix(text: &str) -> String {
    const SHOWN: usize = 40;
    let shown: String = text.chars().take(SHOWN).collect();
    let cut = if text.chars().count() > SHOWN {
        "…"
    } else {
        ""
    };
    format!("{shown:?}{cut}")
}

/// Why a fenced check refused or could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceError {
    /// A larger token was seen for this resource: the caller lost its lease to a newer holder.
    Stale {
        /// The resource key (the lease name, for the middleware).
        resource: String,
        /// The refused token.
        token: u64,
        /// The largest token seen for the resource.
        mark: u64,
    },
    /// Bad input: the message names the argument (`token`, `resource`, or a metadata entry).
    Invalid(String),
    /// The mark store did not answer or failed (a PostgreSQL or Redis error): nothing is known.
    Store(String),
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::Stale {
                resource,
                token,
                mark,
            } => write!(
                f,
                "stale fencing token {token} for {resource:?}: the highest seen is {mark}"
            ),
            FenceError::Invalid(message) => f.write_str(message),
            FenceError::Store(message) => write!(f, "the fencing mark store failed: {message}"),
        }
    }
}

impl std::error::Error for FenceError {}

/// A store of high-water marks: the largest fencing token accepted per resource key.
///
/// `fence` refuses `token` with [`FenceError::Stale`] when a larger one was recorded for
/// `resource`; otherwise it records it (a token equal to the mark passes: one holder writes many
/// times) and returns the mark, now `token`. Implementations: in process (the middleware's
/// default, only as durable as the process), PostgreSQL (`leased.fence`) and Redis (`FCALL
/// leased_fence`).
pub trait FenceMarks: Send + Sync + 'static {
    /// Checks `token` against `resource`'s mark and records it when it is not smaller.
    fn fence(
        &self,
        resource: &str,
        token: u64,
    ) -> impl Future<Output = Result<u64, FenceError>> + Send;
}

/// The mark at the end of an adapter's stale-token message: PostgreSQL's `LF001` and Redis's
/// `STALETOKEN` both end with "the highest seen is N", N the mark.
pub fn mark_in_stale_message(message: &str) -> Option<u64> {
    let (_, mark) = message.trim_end().rsplit_once("the highest seen is ")?;
    mark.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_only_in_canonical_decimal_within_range() {
        assert_eq!(parse_token("1"), Ok(1));
        assert_eq!(parse_token("1800000000000000"), Ok(1_800_000_000_000_000));
        assert_eq!(parse_token("9223372036854775807"), Ok(MAX_TOKEN));
        for bad in [
            "",
            "0",
            "-5",
            "+5",
            "05",
            " 5",
            "5 ",
            "5a",
            "0x10",
            "9223372036854775808",
            "18446744073709551615",
            "99999999999999999999",
        ] {
            assert!(parse_token(bad).is_err(), "{bad:?} parsed");
        }
        let long = "x".repeat(100);
        let shown = parse_token(&long).unwrap_err().given;
        assert!(shown.len() < 50, "{shown}");
        assert_eq!(
            parse_token("\u{1b}[2J").unwrap_err().given,
            "\"\\u{1b}[2J\""
        );
    }

    #[test]
    fn numeric_tokens_are_checked_against_the_range() {
        assert!(check_token(0).is_err());
        assert!(check_token(MAX_TOKEN + 1).is_err());
        assert_eq!(check_token(MAX_TOKEN), Ok(MAX_TOKEN));
    }

    #[test]
    fn the_mark_is_read_from_both_adapters_stale_messages() {
        let postgres = "stale fencing token 6 for resource 'orders': the highest seen is 7";
        let redis = "STALETOKEN stale fencing token 6 for fence:{o}: the highest seen is 7";
        assert_eq!(mark_in_stale_message(postgres), Some(7));
        assert_eq!(mark_in_stale_message(redis), Some(7));
        assert_eq!(mark_in_stale_message("something else"), None);
    }
}
