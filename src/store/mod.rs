//! The two implementations of [`LeaseStore`](crate::lease::LeaseStore): Redis for production,
//! in-process memory for a first run and for tests of the contract.

pub mod memory;
pub mod redis;

pub use memory::MemoryStore;
pub use redis::{RedisOptions, RedisStore};

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch on this machine's clock. Fencing tokens never fall below it,
/// so a store that forgot its counters still issues tokens above every earlier one.
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the system clock is before 1970")
        .as_micros() as u64
}
