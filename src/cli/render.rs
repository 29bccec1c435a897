//! The text and JSON the client subcommands print for grants, busy leases, descriptions and
//! holders. Text that came from the server is escaped (`Escaped`, or quoted with `{:?}`); JSON
//! goes out through `json_line`, which escapes it for terminals.

use std::time::Duration;

use super::escape::Escaped;
use crate::client::{CurrentHolder, GrantedLease, LeaseDescription, NotGranted};

/// `acquire` of a free lease, as text: `granted NAME fencing_token=N lease_id=ID ttl=T`, and
/// ` shared` for a shared grant.
pub(super) fn granted_text(grant: &GrantedLease) -> String {
    let mut text = format!(
        "granted {} fencing_token={} lease_id={} ttl={}",
        Escaped(&grant.name),
        grant.fencing_token,
        Escaped(&grant.lease_id),
        humantime::format_duration(grant.ttl)
    );
    if grant.shared {
        text.push_str(" shared");
    }
    text
}

// Holders are server-provided: human output quotes them with `{:?}`, which escapes quotes,
// backslashes and every character `is_control_or_bidi` covers (`\u{1b}`, `\n`, `\0`,
// `\u{202e}`); JSON output goes through `json_line`.

/// `describe` as text. A lease with one holder is one line, `held NAME holder=".."
/// fencing_token=N remaining_ms=M` (then ` shared` for a shared grant), or `free NAME`; a
/// counting lease (limit > 1) or several shared holders make a line with the limit and the count
/// of holders, then one indented line per holder, by increasing token. ` waiters=N` ends the
/// first line when someone waits.
pub(super) fn description_text(name: &str, description: &LeaseDescription) -> String {
    let name = Escaped(name);
    let waiters = match description.waiters {
        0 => String::new(),
        n => format!(" waiters={n}"),
    };
    match description.holders.as_slice() {
        [] => format!("free {name}{waiters}"),
        [only] if description.limit <= 1 => {
            format!("held {name} {}{waiters}", holder_fields(only))
        }
        holders => {
            let mut text = format!(
                "held {name} limit={} holders={}{waiters}",
                description.limit,
                holders.len()
            );
            for holder in holders {
                text.push_str("\n  ");
                text.push_str(&holder_fields(holder));
            }
            text
        }
    }
}

/// `describe --json`: one object. The top-level `holder`, `fencing_token`, `remaining_ms` and
/// `shared` (present while held) describe the holder with the smallest token, as before counting
/// leases; `holders` lists every one.
pub(super) fn description_json(name: &str, description: &LeaseDescription) -> serde_json::Value {
    let mut json = serde_json::json!({
        "name": name,
        "held": description.is_held(),
        "limit": description.limit,
        "holders": description.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "waiters": description.waiters,
    });
    if let Some(first) = description.holders.first() {
        json["granted"] = false.into();
        json["holder"] = first.holder.clone().into();
        json["fencing_token"] = first.fencing_token.into();
        json["remaining_ms"] = remaining_ms(first.remaining).into();
        json["shared"] = first.shared.into();
    }
    json
}

/// `acquire` of a busy lease, as text: `not_granted NAME holder=".." fencing_token=N
/// remaining_ms=M` (the permit that frees soonest, for a counting lease), then, for a counting
/// lease, ` permits_held=H limit=N`.
pub(super) fn not_granted_text(name: &str, busy: &NotGranted) -> String {
    let soonest = format_holder(&busy.holder, busy.fencing_token, busy.remaining);
    let mut text = format!("not_granted {} {soonest}", Escaped(name));
    if busy.limit > 1 {
        text.push_str(&format!(" permits_held={} limit={}", busy.held, busy.limit));
    }
    text
}

/// `acquire --json` of a busy lease. `held` stays the boolean it always was; the count of
/// permits taken is `permits_held`.
pub(super) fn not_granted_json(name: &str, busy: &NotGranted) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "held": true,
        "granted": false,
        "holder": busy.holder,
        "fencing_token": busy.fencing_token,
        "remaining_ms": remaining_ms(busy.remaining),
        "permits_held": busy.held,
        "limit": busy.limit,
    })
}

/// `holder=".." fencing_token=N remaining_ms=M`, the holder quoted and escaped; ` shared` after
/// it for a shared grant.
fn holder_fields(holder: &CurrentHolder) -> String {
    let mut fields = format_holder(&holder.holder, holder.fencing_token, holder.remaining);
    if holder.shared {
        fields.push_str(" shared");
    }
    fields
}

/// `holder=".." fencing_token=N remaining_ms=M`, the holder quoted and escaped.
fn format_holder(holder: &str, fencing_token: u64, remaining: Option<Duration>) -> String {
    format!(
        "holder={holder:?} fencing_token={fencing_token} remaining_ms={}",
        remaining_ms(remaining)
    )
}

pub(super) fn holder_json(holder: &CurrentHolder) -> serde_json::Value {
    serde_json::json!({
        "holder": holder.holder,
        "fencing_token": holder.fencing_token,
        "remaining_ms": remaining_ms(holder.remaining),
        "shared": holder.shared,
    })
}

/// The wire's convention: -1 for a lease without expiry.
pub(super) fn remaining_ms(remaining: Option<Duration>) -> i64 {
    remaining.map_or(-1, |r| i64::try_from(r.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(holder: &str, fencing_token: u64, remaining_ms: Option<u64>) -> CurrentHolder {
        CurrentHolder {
            holder: holder.into(),
            fencing_token,
            remaining: remaining_ms.map(Duration::from_millis),
            shared: false,
        }
    }

    fn shared(holder_name: &str, fencing_token: u64, remaining_ms: Option<u64>) -> CurrentHolder {
        CurrentHolder {
            shared: true,
            ..holder(holder_name, fencing_token, remaining_ms)
        }
    }

    fn description(limit: u32, holders: Vec<CurrentHolder>, waiters: u32) -> LeaseDescription {
        LeaseDescription {
            limit,
            holders,
            waiters,
        }
    }

    /// An exclusive lease stays the one line it always was (scripts parse it); a counting lease
    /// gets a summary line and one line per holder; waiters show only when someone waits.
    #[test]
    fn describe_text_is_one_line_for_an_exclusive_lease_and_lists_every_permit() {
        assert_eq!(description_text("n", &description(0, vec![], 0)), "free n");
        assert_eq!(
            description_text("n", &description(0, vec![], 2)),
            "free n waiters=2"
        );
        let only = holder("host-a/1", 7, Some(2_900));
        assert_eq!(
            description_text("n", &description(1, vec![only.clone()], 0)),
            r#"held n holder="host-a/1" fencing_token=7 remaining_ms=2900"#
        );
        assert_eq!(
            description_text("n", &description(1, vec![only.clone()], 3)),
            r#"held n holder="host-a/1" fencing_token=7 remaining_ms=2900 waiters=3"#
        );
        let permits = vec![only, holder("evil\u{1b}[2J\u{202e}", 9, None)];
        assert_eq!(
            description_text("n", &description(3, permits, 1)),
            "held n limit=3 holders=2 waiters=1\n  \
             holder=\"host-a/1\" fencing_token=7 remaining_ms=2900\n  \
             holder=\"evil\\u{1b}[2J\\u{202e}\" fencing_token=9 remaining_ms=-1"
        );
    }

    /// A shared holder is marked `shared`: one on the single line, several on their own lines
    /// under a read-write lease's limit of 1.
    #[test]
    fn describe_text_marks_shared_holders() {
        let reader = shared("r1", 7, Some(2_900));
        assert_eq!(
            description_text("n", &description(1, vec![reader.clone()], 1)),
            r#"held n holder="r1" fencing_token=7 remaining_ms=2900 shared waiters=1"#
        );
        let readers = vec![reader, shared("r2", 8, Some(3_000))];
        assert_eq!(
            description_text("n", &description(1, readers, 0)),
            "held n limit=1 holders=2\n  \
             holder=\"r1\" fencing_token=7 remaining_ms=2900 shared\n  \
             holder=\"r2\" fencing_token=8 remaining_ms=3000 shared"
        );
        let json = description_json("n", &description(1, vec![shared("r1", 7, None)], 0));
        assert_eq!(json["shared"], true);
        assert_eq!(json["holders"][0]["shared"], true);
    }

    /// `--json` keeps the keys it had (the single-holder fields describe the smallest token) and
    /// adds `limit`, `holders` and `waiters`, the same keys for both kinds of lease.
    #[test]
    fn describe_json_keeps_the_single_holder_fields_and_adds_every_holder() {
        let permits = vec![holder("a", 7, Some(2_900)), holder("b", 9, None)];
        assert_eq!(
            description_json("n", &description(2, permits, 1)),
            serde_json::json!({
                "name": "n", "held": true, "granted": false,
                "holder": "a", "fencing_token": 7, "remaining_ms": 2900, "shared": false,
                "limit": 2, "waiters": 1,
                "holders": [
                    { "holder": "a", "fencing_token": 7, "remaining_ms": 2900, "shared": false },
                    { "holder": "b", "fencing_token": 9, "remaining_ms": -1, "shared": false },
                ],
            })
        );
        assert_eq!(
            description_json("n", &description(0, vec![], 0)),
            serde_json::json!({
                "name": "n", "held": false, "limit": 0, "holders": [], "waiters": 0,
            })
        );
    }

    /// A busy exclusive lease prints as before; a busy counting lease adds how full it is.
    #[test]
    fn not_granted_adds_the_permits_of_a_counting_lease() {
        let busy = |held, limit| NotGranted {
            holder: "a".into(),
            fencing_token: 7,
            remaining: Some(Duration::from_millis(2_900)),
            held,
            limit,
        };
        assert_eq!(
            not_granted_text("n", &busy(1, 1)),
            r#"not_granted n holder="a" fencing_token=7 remaining_ms=2900"#
        );
        assert_eq!(
            not_granted_text("n", &busy(3, 3)),
            r#"not_granted n holder="a" fencing_token=7 remaining_ms=2900 permits_held=3 limit=3"#
        );
        let json = not_granted_json("n", &busy(3, 3));
        assert_eq!(
            (json["held"].clone(), json["granted"].clone()),
            (true.into(), false.into())
        );
        assert_eq!(
            (json["permits_held"].as_u64(), json["limit"].as_u64()),
            (Some(3), Some(3))
        );
    }

    #[test]
    fn granted_text_marks_a_shared_grant() {
        let mut grant = GrantedLease {
            name: "n".into(),
            lease_id: "0123456789abcdef0123456789abcdef".into(),
            fencing_token: 7,
            ttl: Duration::from_secs(30),
            expires_at_ms: 0,
            shared: false,
        };
        assert_eq!(
            granted_text(&grant),
            "granted n fencing_token=7 lease_id=0123456789abcdef0123456789abcdef ttl=30s"
        );
        grant.shared = true;
        assert!(granted_text(&grant).ends_with(" ttl=30s shared"));
    }
}
