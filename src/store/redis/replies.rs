//! Reading the scripts' replies ([`Reply`], [`parse_acquire_reply`]), and mapping Redis errors to
//! `UNAVAILABLE` or `INTERNAL`.

use fred::{
    error::ErrorKind,
    prelude::{Error as RedisError, Value},
};

use crate::{
    error::{Error, Result},
    lease::{
        AcquireOutcome, Expiry, Grant, GrantMismatch, Holder, LeaseId, LeaseName, Occupancy,
        QueueEntry,
    },
};

/// Connection trouble is `UNAVAILABLE` (retrying later may succeed). Anything Redis refused on
/// its merits (a Lua error, `WRONGTYPE` on a key something else wrote) will fail again the same
/// way: `INTERNAL`, logged with the lease name.
pub(super) fn store_error(operation: &'static str, name: &LeaseName, error: RedisError) -> Error {
    match is_transient(&error) {
        true => Error::Unavailable(format!("{operation}: {error}")),
        false => Error::Internal {
            name: name.as_str().to_owned(),
            detail: format!("{operation}.lua failed: {error}"),
        },
    }
}

/// Whether retrying later may succeed: connection trouble, or a Redis that cannot serve yet.
pub(super) fn is_transient(error: &RedisError) -> bool {
    // Redis answers these while it cannot serve yet (loading, failing over) or a script runs long.
    const TRANSIENT_REPLIES: [&str; 7] = [
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "READONLY",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "NOREPLICAS",
    ];
    match error.kind() {
        ErrorKind::IO
        | ErrorKind::Timeout
        | ErrorKind::Canceled
        | ErrorKind::Backpressure
        | ErrorKind::Cluster
        | ErrorKind::Routing
        | ErrorKind::Sentinel
        | ErrorKind::Auth
        | ErrorKind::Tls => true,
        ErrorKind::Unknown => {
            TRANSIENT_REPLIES
                .iter()
                .any(|reply| error.details().starts_with(reply))
                || error.details() == UNROUTABLE
        }
        _ => false,
    }
}

/// fred's error, of kind `Unknown`, for a command to a node it has no connection to: on Cluster,
/// a master that died while fred's slot map still names it (until it reads the map again after
/// a failover), to which `SCAN` for `List` or a script for a key of its slots is sent.
const UNROUTABLE: &str = "Failed to route command.";

/// The fields of `occupancy()` in prelude.lua, as the scripts reply them.
pub(super) const OCCUPANCY_FIELDS: usize = 9;

/// The fields of one holder in the scripts' replies: `holder, token, remaining_ms,
/// expires_at_ms, lock_delay_ms`.
pub(super) const HOLDER_FIELDS: usize = 5;

/// One script's reply, read field by field; a reply that breaks the script's documented shape is
/// an internal error naming the script and the lease.
pub(super) struct Reply<'a> {
    pub(super) operation: &'static str,
    pub(super) name: &'a LeaseName,
    pub(super) value: Value,
}

/// Reads a reply of acquire.lua (its header lists the shapes) for the attempt of `lease_id` on
/// `name`; public for the micro-benchmarks in `benches/hot_paths.rs`.
pub fn parse_acquire_reply(
    name: &LeaseName,
    lease_id: &LeaseId,
    max_waiters_per_name: usize,
    value: Value,
) -> Result<AcquireOutcome> {
    let reply = Reply {
        operation: "acquire",
        name,
        value,
    };
    reply.acquire_outcome(lease_id, max_waiters_per_name)
}

impl Reply<'_> {
    /// acquire.lua's answer for the attempt of `lease_id`.
    pub(super) fn acquire_outcome(
        &self,
        lease_id: &LeaseId,
        max_waiters_per_name: usize,
    ) -> Result<AcquireOutcome> {
        match self.int(0)? {
            1 => Ok(AcquireOutcome::Granted(Grant {
                lease_id: lease_id.clone(),
                fencing_token: self.token(1)?,
                ttl_ms: self.int(2)?,
                expires_at_ms: self.int(3)?,
            })),
            2 => Ok(AcquireOutcome::QueueFull {
                limit: max_waiters_per_name,
            }),
            3 => Ok(AcquireOutcome::LimitMismatch {
                limit: self.count(1)?,
            }),
            4 => Ok(AcquireOutcome::TooManyShared {
                limit: self.count(1)?,
            }),
            5 => Ok(AcquireOutcome::LeaseIdEnded),
            6 => Ok(AcquireOutcome::Superseded),
            7 => {
                let held = self.count(2)?;
                Ok(AcquireOutcome::OwnGrantDiffers(
                    match self.string(1)?.as_str() {
                        "shared" => GrantMismatch::Shared { held: held == 1 },
                        _ => GrantMismatch::Limit { held },
                    },
                ))
            }
            8 => Ok(AcquireOutcome::OwnGrantOfAnotherCaller),
            _ => {
                let mut occupancy = self.occupancy(2)?;
                occupancy.due = self.count(2 + OCCUPANCY_FIELDS)?;
                Ok(AcquireOutcome::Busy {
                    position: self.count(1)?,
                    occupancy,
                })
            }
        }
    }

    /// Whether acquire.lua's grant answered a grant that the lease id held already (a retry),
    /// rather than one this call made.
    pub(super) fn answered_again(&self) -> bool {
        self.int(4).is_ok_and(|again| again == 1)
    }

    fn broken(&self, what: String) -> Error {
        Error::Internal {
            name: self.name.to_string(),
            detail: format!("{}.lua replied {what}", self.operation),
        }
    }

    /// A reply that is a single integer.
    pub(super) fn integer(&self) -> Result<i64> {
        self.value
            .as_i64()
            .ok_or_else(|| self.broken(format!("{:?}", self.value)))
    }

    fn field(&self, index: usize) -> Result<&Value> {
        match &self.value {
            Value::Array(fields) => fields
                .get(index)
                .ok_or_else(|| self.broken(format!("no field {index}"))),
            other => Err(self.broken(format!("{other:?}, not an array"))),
        }
    }

    pub(super) fn int(&self, index: usize) -> Result<i64> {
        let field = self.field(index)?;
        field
            .as_i64()
            .ok_or_else(|| self.broken(format!("field {index} = {field:?}")))
    }

    pub(super) fn token(&self, index: usize) -> Result<u64> {
        let token = self.int(index)?;
        u64::try_from(token).map_err(|_| self.broken(format!("token {token}")))
    }

    pub(super) fn string(&self, index: usize) -> Result<String> {
        let field = self.field(index)?;
        field
            .as_string()
            .ok_or_else(|| self.broken(format!("field {index} = {field:?}")))
    }

    /// A queue entry, as the scripts keep it ([`QueueEntry::parse`]).
    pub(super) fn entry(&self, index: usize) -> Result<QueueEntry> {
        let text = self.string(index)?;
        QueueEntry::parse(&text)
            .ok_or_else(|| self.broken(format!("field {index} = {text:?}, not a queue entry")))
    }

    /// How many fields the reply has.
    pub(super) fn len(&self) -> Result<usize> {
        match &self.value {
            Value::Array(fields) => Ok(fields.len()),
            other => Err(self.broken(format!("{other:?}, not an array"))),
        }
    }

    /// A count, limit or queue position (0: not queued).
    pub(super) fn count(&self, index: usize) -> Result<u32> {
        let count = self.int(index)?;
        u32::try_from(count).map_err(|_| self.broken(format!("field {index} = {count}")))
    }

    /// Reads the [`HOLDER_FIELDS`] `holder, token, remaining_ms, expires_at_ms, lock_delay_ms`
    /// starting at `index`; the scripts send -1, -1 for a key without expiry.
    pub(super) fn holder(&self, index: usize, shared: bool) -> Result<Holder> {
        let remaining_ms = self.int(index + 2)?;
        let at_unix_ms = self.int(index + 3)?;
        let lock_delay_ms = self.int(index + 4)?;
        Ok(Holder {
            holder: self.string(index)?,
            fencing_token: self.token(index + 1)?,
            expiry: (remaining_ms >= 0 && at_unix_ms >= 0).then_some(Expiry {
                remaining_ms,
                at_unix_ms,
                lock_delay_ms,
            }),
            shared,
        })
    }

    /// Reads the [`OCCUPANCY_FIELDS`] of `occupancy()` in prelude.lua starting at `index`:
    /// `taken, limit, held, holder, token, remaining_ms, expires_at_ms, lock_delay_ms, shared`
    /// (`held` 0: no permit is taken, and the holder fields are zeros). `due` is left 0: the
    /// replies that know it carry it after these fields.
    pub(super) fn occupancy(&self, index: usize) -> Result<Occupancy> {
        let shared = self.int(index + 8)? == 1;
        let holder = match self.int(index + 2)? {
            0 => None,
            _ => Some(self.holder(index + 3, shared)?),
        };
        Ok(Occupancy {
            holder,
            held: self.count(index)?,
            limit: self.count(index + 1)?,
            due: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_fred_cannot_route_is_transient() {
        assert!(is_transient(&RedisError::new(
            ErrorKind::Unknown,
            UNROUTABLE
        )));
        assert!(is_transient(&RedisError::new(
            ErrorKind::Unknown,
            "CLUSTERDOWN The cluster is down"
        )));
        assert!(!is_transient(&RedisError::new(
            ErrorKind::Unknown,
            "ERR user_script:1: bad"
        )));
    }
}
