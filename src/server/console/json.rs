//! The gRPC replies as the console's JSON. Fencing tokens travel as strings: a JavaScript number
//! loses digits past 2^53, and a token must compare exactly. Times are milliseconds since the Unix
//! epoch.

use prost_types::Timestamp;
use serde_json::{Value, json};

use crate::proto::{
    DescribeResponse, HolderInfo, LeaseInfo, ListResponse, RevokeResponse, WatchEvent,
    watch_event::Cause,
};

fn millis(timestamp: Option<&Timestamp>) -> Option<i64> {
    timestamp.map(|time| time.seconds * 1000 + i64::from(time.nanos) / 1_000_000)
}

fn holder(holder: &HolderInfo) -> Value {
    json!({
        "holder": holder.holder,
        "fencing_token": holder.fencing_token.to_string(),
        "remaining_ms": holder.remaining_ms,
        "expires_at_ms": millis(holder.expires_at.as_ref()),
        "shared": holder.shared,
    })
}

fn holders(holders: &[HolderInfo]) -> Vec<Value> {
    holders.iter().map(holder).collect()
}

/// A lease's mode as the page names it: `exclusive`, `shared` (read) or `counting` (a limit).
fn mode(limit: u32, holders: &[HolderInfo]) -> &'static str {
    if limit > 1 {
        "counting"
    } else if holders.iter().any(|holder| holder.shared) {
        "shared"
    } else {
        "exclusive"
    }
}

fn lease_info(lease: &LeaseInfo) -> Value {
    json!({
        "name": lease.name,
        "mode": mode(lease.limit, &lease.holders),
        "limit": lease.limit,
        "waiters": lease.waiters,
        "holders": holders(&lease.holders),
    })
}

/// A page of List.
pub fn list(page: &ListResponse) -> Value {
    json!({
        "leases": page.leases.iter().map(lease_info).collect::<Vec<_>>(),
        "next_page_token": page.next_page_token,
    })
}

/// Describe of `name`, and whether the caller may revoke it.
pub fn lease(name: &str, lease: &DescribeResponse, may_revoke: bool) -> Value {
    json!({
        "name": name,
        "held": lease.held,
        "mode": mode(lease.limit, &lease.holders),
        "limit": lease.limit,
        "waiters": lease.waiters,
        "holders": holders(&lease.holders),
        "may_revoke": may_revoke,
    })
}

/// One Watch event; `cause` is the enum's name without its prefix (`granted`, `expired`…).
pub fn watch_event(event: &WatchEvent) -> Value {
    let cause = Cause::try_from(event.cause).unwrap_or(Cause::Unspecified);
    let cause = cause
        .as_str_name()
        .trim_start_matches("CAUSE_")
        .to_lowercase();
    json!({
        "name": event.name,
        "cause": cause,
        "held": event.held,
        "holder": event.holder,
        "fencing_token": event.fencing_token.to_string(),
        "limit": event.limit,
        "mode": mode(event.limit, &event.holders),
        "holders": holders(&event.holders),
        "reason": event.reason,
    })
}

/// Revoke's answer.
pub fn revoked(revoked: &RevokeResponse) -> Value {
    json!({
        "revoked": revoked.revoked,
        "fencing_token": revoked.fencing_token.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_strings_and_times_are_milliseconds() {
        let token = (1u64 << 53) + 1;
        let holder = HolderInfo {
            holder: "<img src=x>".to_owned(),
            fencing_token: token,
            remaining_ms: 1500,
            expires_at: Some(Timestamp {
                seconds: 1_700_000_000,
                nanos: 250_000_000,
            }),
            shared: false,
        };
        let event = WatchEvent {
            name: "jobs/a".to_owned(),
            cause: Cause::Granted as i32,
            held: true,
            holders: vec![holder],
            ..WatchEvent::default()
        };
        let json = watch_event(&event);
        assert_eq!(json["cause"], "granted");
        assert_eq!(json["mode"], "exclusive");
        assert_eq!(json["holders"][0]["fencing_token"], token.to_string());
        assert_eq!(json["holders"][0]["expires_at_ms"], 1_700_000_000_250i64);
        // Escaping is the page's job (text nodes); the JSON carries the holder as it is.
        assert_eq!(json["holders"][0]["holder"], "<img src=x>");
    }
}
