//! The messages the scripts publish on a name's shard channel ([`Published`]: wake-ups, moves
//! and changes of holder), and how they read.

use crate::lease::{ChangeCause, LeaseChange};

/// One message on a name's shard channel, as the scripts publish it (prelude.lua).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Published<'a> {
    /// `w<entry>`: a free permit goes to this queue entry.
    Wake(&'a str),
    /// `m`: positions in the queue or the holders changed.
    Moved,
    /// `g`, `r` or `v`: a change of holder, published only while some replica watches the name.
    Changed(LeaseChange),
}

impl<'a> Published<'a> {
    /// Reads one message; `None` for one this version does not know.
    ///
    /// - `g<token> <limit> <ttl_ms> <expires_at_ms> <holder>`: granted
    /// - `s<token> <ttl_ms> <expires_at_ms> <holder>`: granted shared (a read-write lease)
    /// - `r<token> <expires_at_ms> <holder>`: released
    /// - `v<token> <expires_at_ms> <reason bytes> <reason><holder>`: revoked
    pub(super) fn parse(message: &'a str) -> Option<Self> {
        let kind = message.chars().next()?;
        let fields = &message[kind.len_utf8()..];
        let change = |cause, fencing_token: &str, limit, ttl_ms, expires_at_ms: &str| {
            Some(LeaseChange {
                cause,
                holder: String::new(),
                fencing_token: fencing_token.parse().ok()?,
                limit,
                ttl_ms,
                expires_at_ms: expires_at_ms.parse().ok()?,
                reason: String::new(),
                shared: false,
            })
        };
        match kind {
            'w' => Some(Published::Wake(fields)),
            'm' if fields.is_empty() => Some(Published::Moved),
            'g' => {
                let mut parts = fields.splitn(5, ' ');
                let (token, limit, ttl_ms, expires_at_ms, holder) = (
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                );
                let change = change(
                    ChangeCause::Granted,
                    token,
                    limit.parse().ok()?,
                    ttl_ms.parse().ok()?,
                    expires_at_ms,
                )?;
                Some(Published::Changed(LeaseChange {
                    holder: holder.to_owned(),
                    ..change
                }))
            }
            's' => {
                let mut parts = fields.splitn(4, ' ');
                let (token, ttl_ms, expires_at_ms, holder) =
                    (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                let change = change(
                    ChangeCause::Granted,
                    token,
                    1,
                    ttl_ms.parse().ok()?,
                    expires_at_ms,
                )?;
                Some(Published::Changed(LeaseChange {
                    holder: holder.to_owned(),
                    shared: true,
                    ..change
                }))
            }
            'r' => {
                let mut parts = fields.splitn(3, ' ');
                let (token, expires_at_ms, holder) = (parts.next()?, parts.next()?, parts.next()?);
                let change = change(ChangeCause::Released, token, 0, 0, expires_at_ms)?;
                Some(Published::Changed(LeaseChange {
                    holder: holder.to_owned(),
                    ..change
                }))
            }
            'v' => {
                let mut parts = fields.splitn(4, ' ');
                let (token, expires_at_ms, reason_bytes, rest) =
                    (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                let reason_bytes: usize = reason_bytes.parse().ok()?;
                let (reason, holder) = (rest.get(..reason_bytes)?, rest.get(reason_bytes..)?);
                let change = change(ChangeCause::Revoked, token, 0, 0, expires_at_ms)?;
                Some(Published::Changed(LeaseChange {
                    holder: holder.to_owned(),
                    reason: reason.to_owned(),
                    ..change
                }))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(cause: ChangeCause, holder: &str, fencing_token: u64) -> LeaseChange {
        LeaseChange {
            cause,
            holder: holder.into(),
            fencing_token,
            limit: 0,
            ttl_ms: 0,
            expires_at_ms: 1_700_000_030_000,
            reason: String::new(),
            shared: false,
        }
    }

    /// Each message the scripts publish reads back as what they meant: holders and reasons with
    /// spaces, a reason with multi-byte characters (its length is in bytes), 16-digit tokens.
    #[test]
    fn published_messages_are_read_back() {
        assert_eq!(Published::parse("m"), Some(Published::Moved));
        assert_eq!(
            Published::parse("wreplica-1:42"),
            Some(Published::Wake("replica-1:42"))
        );
        assert_eq!(
            Published::parse("g1700000000123456 3 30000 1700000030000 worker 7 (eu)"),
            Some(Published::Changed(LeaseChange {
                limit: 3,
                ttl_ms: 30_000,
                ..change(ChangeCause::Granted, "worker 7 (eu)", 1_700_000_000_123_456)
            }))
        );
        assert_eq!(
            Published::parse("s1700000000123456 30000 1700000030000 reader 3"),
            Some(Published::Changed(LeaseChange {
                limit: 1,
                ttl_ms: 30_000,
                shared: true,
                ..change(ChangeCause::Granted, "reader 3", 1_700_000_000_123_456)
            }))
        );
        assert_eq!(
            Published::parse("r12 1700000030000 worker 7"),
            Some(Published::Changed(change(
                ChangeCause::Released,
                "worker 7",
                12
            )))
        );
        let reason = "wedged on disk – INC 42";
        assert_eq!(
            Published::parse(&format!(
                "v12 1700000030000 {} {reason}worker 7",
                reason.len()
            )),
            Some(Published::Changed(LeaseChange {
                reason: reason.into(),
                ..change(ChangeCause::Revoked, "worker 7", 12)
            }))
        );
        for unknown in [
            "",
            "mx",
            "x12",
            "g12 3 30000",
            "gx 3 30000 1 h",
            "r12",
            "s12 30000",
            "v12 1 99 short",
            "v12 1 1 éholder",
        ] {
            assert_eq!(Published::parse(unknown), None, "{unknown:?}");
        }
    }
}
