//! The two implementations of [`LeaseStore`](crate::lease::LeaseStore): Redis for production,
//! in-process memory for a first run and for tests of the contract.

pub mod memory;
pub mod redis;

pub use memory::MemoryStore;
pub use redis::{RedisOptions, RedisStore, ReplicaWait};

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::Error;

/// Microseconds since the Unix epoch on this machine's clock. Fencing tokens never fall below it,
/// so a store that forgot its counters still issues tokens above every earlier one.
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the system clock is before 1970")
        .as_micros() as u64
}

/// A List page token that this store did not make for this prefix: `INVALID_ARGUMENT`.
pub(crate) fn invalid_page_token() -> Error {
    Error::invalid(
        "page_token",
        "is not a page token of this listing: pass the previous page's next_page_token, \
         with the same prefix",
    )
}

/// Text as hex, for the parts of a page token (names and prefixes never hold the separators).
pub(crate) fn to_hex(text: &str) -> String {
    crate::lease::hex(text.as_bytes())
}

/// The text that [`to_hex`] made, or `None`.
pub(crate) fn from_hex(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(&hex[index..index + 2], 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}
