//! Input limits (ARCHITECTURE.md, "Limits") and the validation that enforces them. Every
//! rejection is `INVALID_ARGUMENT` naming the proto field.

use std::time::Duration;

use super::{LeaseId, LeaseName, ValidatedAcquire};
use crate::error::{Error, Result};

/// Longest accepted lease name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest accepted holder description, in bytes.
pub const MAX_HOLDER_BYTES: usize = 256;
/// Longest accepted lease id, in bytes.
pub const MAX_LEASE_ID_BYTES: usize = 128;
/// Shortest accepted TTL: shorter leases would expire before a round trip completes.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// The configurable limits of one server.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Longest TTL a client may ask for (default 24 h).
    pub max_ttl: Duration,
    /// Longest `wait_ms` a client may ask for (default 10 min).
    pub max_wait: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ttl: Duration::from_secs(24 * 3600),
            max_wait: Duration::from_secs(10 * 60),
        }
    }
}

impl Limits {
    /// Validates the fields of an `Acquire` request.
    pub fn validate_acquire(
        &self,
        name: &str,
        holder: String,
        ttl_ms: i64,
        wait_ms: i64,
    ) -> Result<ValidatedAcquire> {
        let name = parse_name(name)?;
        if holder.len() > MAX_HOLDER_BYTES {
            return Err(Error::invalid(
                "holder",
                format!("must be at most {MAX_HOLDER_BYTES} bytes"),
            ));
        }
        let ttl = self.ttl("ttl_ms", ttl_ms)?;
        let wait = self.wait(wait_ms)?;
        Ok(ValidatedAcquire {
            name,
            holder,
            ttl,
            wait,
        })
    }

    /// Validates a TTL in milliseconds: from [`MIN_TTL`] to `max_ttl`.
    pub fn ttl(&self, field: &'static str, ttl_ms: i64) -> Result<Duration> {
        let min_ms = MIN_TTL.as_millis() as i64;
        let max_ms = self.max_ttl.as_millis() as i64;
        if !(min_ms..=max_ms).contains(&ttl_ms) {
            return Err(Error::invalid(
                field,
                format!("must be between {min_ms} and {max_ms} milliseconds, got {ttl_ms}"),
            ));
        }
        Ok(Duration::from_millis(ttl_ms as u64))
    }

    /// Validates a renewal TTL: 0 means "keep the granted TTL" (`None`).
    pub fn renew_ttl(&self, ttl_ms: i64) -> Result<Option<Duration>> {
        match ttl_ms {
            0 => Ok(None),
            _ => self.ttl("ttl_ms", ttl_ms).map(Some),
        }
    }

    /// Validates `wait_ms`: from 0 to `max_wait`.
    pub fn wait(&self, wait_ms: i64) -> Result<Duration> {
        let max_ms = self.max_wait.as_millis() as i64;
        if !(0..=max_ms).contains(&wait_ms) {
            return Err(Error::invalid(
                "wait_ms",
                format!("must be between 0 and {max_ms} milliseconds, got {wait_ms}"),
            ));
        }
        Ok(Duration::from_millis(wait_ms as u64))
    }
}

/// Validates a lease name: 1 to 256 bytes of `A-Z a-z 0-9 . _ - : / @`.
pub fn parse_name(name: &str) -> Result<LeaseName> {
    if name.is_empty() {
        return Err(Error::invalid("name", "is required"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(
            "name",
            format!("must be at most {MAX_NAME_BYTES} bytes"),
        ));
    }
    if let Some(bad) = name.chars().find(|c| !is_name_char(*c)) {
        return Err(Error::invalid(
            "name",
            format!("may contain only A-Z a-z 0-9 . _ - : / @, found {bad:?}"),
        ));
    }
    Ok(LeaseName(name.to_owned()))
}

/// Validates a lease id sent by a client: non-empty, at most 128 bytes.
pub fn parse_lease_id(lease_id: &str) -> Result<LeaseId> {
    if lease_id.is_empty() {
        return Err(Error::invalid("lease_id", "is required"));
    }
    if lease_id.len() > MAX_LEASE_ID_BYTES {
        return Err(Error::invalid(
            "lease_id",
            format!("must be at most {MAX_LEASE_ID_BYTES} bytes"),
        ));
    }
    Ok(LeaseId(lease_id.to_owned()))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/' | '@')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_the_documented_alphabet_only() {
        assert!(parse_name("jobs/nightly-backup@eu:v1.2_x").is_ok());
        assert!(parse_name(&"a".repeat(256)).is_ok());
        for bad in ["", "has space", "curly{}", "ünï", &"a".repeat(257)] {
            let err = parse_name(bad).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid name"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn ttl_and_wait_bounds_are_inclusive() {
        let limits = Limits::default();
        assert!(limits.ttl("ttl_ms", 10).is_ok());
        assert!(limits.ttl("ttl_ms", 86_400_000).is_ok());
        assert!(limits.ttl("ttl_ms", 9).is_err());
        assert!(limits.ttl("ttl_ms", 86_400_001).is_err());
        assert!(limits.wait(0).is_ok());
        assert!(limits.wait(600_000).is_ok());
        assert!(limits.wait(-1).is_err());
        assert!(limits.wait(600_001).is_err());
        assert_eq!(limits.renew_ttl(0).unwrap(), None);
    }

    #[test]
    fn lease_ids_are_bounded_and_never_printed() {
        assert!(parse_lease_id("").is_err());
        assert!(parse_lease_id(&"x".repeat(129)).is_err());
        let id = LeaseId::generate();
        assert_eq!(id.expose().len(), 32);
        assert_ne!(id, LeaseId::generate());
        assert!(!format!("{id:?}").contains(id.expose()));
        assert_eq!(id.to_string(), "<redacted>");
    }
}
