//! `leased watch NAME`: who holds a lease, one line per event; `leased check NAME TOKEN`: does
//! this fencing token hold it now.

use std::{
    io::{self, Write},
    process::ExitCode,
};

use clap::Args;
use tokio_stream::StreamExt;

use super::{
    escape::{Escaped, json_line},
    exit_code,
    flags::EndpointArgs,
    render::holder_json,
};
use crate::client::{ClientError, TokenCheck, WatchEvent};

/// `leased watch`.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The lease's name.
    pub name: String,
    /// Print one JSON object per event instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

/// `leased check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The lease's name.
    pub name: String,
    /// The fencing token to check (the one acquire printed, or LEASED_FENCING_TOKEN under run).
    #[arg(value_name = "TOKEN", value_parser = clap::value_parser!(u64).range(1..))]
    pub fencing_token: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

pub(super) async fn watch(args: WatchArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    let mut events = client.watch(&args.name).await?;
    while let Some(event) = events.next().await {
        let event = event?;
        let line = match args.json {
            true => json_line(&watch_event_json(&event)),
            false => watch_event_text(&event),
        };
        // Flushed line by line, so that a pipe (`leased watch NAME | while read ...`) sees each
        // event when it happens.
        let mut stdout = io::stdout().lock();
        if let Err(error) = writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
            if error.kind() == io::ErrorKind::BrokenPipe {
                // Whoever read the events has had enough (`| head -1`): not a failure.
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!("leased: cannot write the event: {error}");
            return Ok(ExitCode::from(exit_code::ERROR));
        }
    }
    // A watch stream always says why it ended, as its last item (above).
    Err(ClientError::Protocol("the Watch stream ended".into()))
}

pub(super) async fn check(args: CheckArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    let check = client.check_token(&args.name, args.fencing_token).await?;
    if args.json {
        let json = serde_json::json!({
            "name": args.name,
            "fencing_token": args.fencing_token,
            "current": check.current,
            "current_token": check.current_token,
            "held": check.held,
        });
        println!("{}", json_line(&json));
    } else {
        println!("{}", check_text(&args.name, args.fencing_token, &check));
    }
    Ok(match check.current {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(exit_code::NOT_CURRENT),
    })
}

/// `current NAME fencing_token=N`, or `not_current NAME fencing_token=N current_token=M
/// held=BOOL` (M: the token that holds it now, 0 when nobody does).
fn check_text(name: &str, fencing_token: u64, check: &TokenCheck) -> String {
    let name = Escaped(name);
    match check.current {
        true => format!("current {name} fencing_token={fencing_token}"),
        false => format!(
            "not_current {name} fencing_token={fencing_token} current_token={} held={}",
            check.current_token, check.held
        ),
    }
}

/// One event as text: `CAUSE NAME holder=".." fencing_token=N` (the grant the event is about; a
/// snapshot of a free lease is `snapshot NAME free`) and ` shared` if that grant is a shared one
/// that holds after the event (the server does not say the mode of a grant that ended), then
/// ` limit=L holders=K` after an event of a counting lease or with several shared holders, and
/// ` reason=".."` for a revoke. Holders and reasons are quoted with `{:?}`, which escapes control
/// and bidirectional characters.
fn watch_event_text(event: &WatchEvent) -> String {
    let mut text = format!("{} {}", event.cause, Escaped(&event.name));
    match &event.grant {
        Some(grant) => text.push_str(&format!(
            " holder={:?} fencing_token={}",
            grant.holder, grant.fencing_token
        )),
        None => text.push_str(" free"),
    }
    if event.grant_holder().is_some_and(|holder| holder.shared) {
        text.push_str(" shared");
    }
    if event.limit > 1 || event.holders.len() > 1 {
        text.push_str(&format!(
            " limit={} holders={}",
            event.limit,
            event.holders.len()
        ));
    }
    if !event.reason.is_empty() {
        text.push_str(&format!(" reason={:?}", event.reason));
    }
    text
}

/// One event as JSON, the fields of the proto's `WatchEvent` (with `expires_at_ms`, Unix
/// milliseconds, null when unset; `holder` "" and `fencing_token` 0 in a snapshot of a free
/// lease); each of `holders` says whether it is `shared`.
fn watch_event_json(event: &WatchEvent) -> serde_json::Value {
    let grant = event.grant.as_ref();
    serde_json::json!({
        "name": event.name,
        "cause": event.cause.to_string(),
        "held": event.held,
        "holder": grant.map_or("", |g| g.holder.as_str()),
        "fencing_token": grant.map_or(0, |g| g.fencing_token),
        "expires_at_ms": grant.and_then(|g| g.expires_at_ms),
        "limit": event.limit,
        "holders": event.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "reason": event.reason,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::client::{CurrentHolder, WatchCause, WatchedGrant};

    fn event(cause: WatchCause, grant: Option<(&str, u64)>, holders: &[(&str, u64)]) -> WatchEvent {
        WatchEvent {
            name: "n".into(),
            cause,
            grant: grant.map(|(holder, fencing_token)| WatchedGrant {
                holder: holder.into(),
                fencing_token,
                expires_at_ms: Some(1_700_000_000_000),
            }),
            held: !holders.is_empty(),
            limit: match holders.len() {
                0 => 0,
                _ => 1,
            },
            holders: holders
                .iter()
                .map(|(holder, fencing_token)| CurrentHolder {
                    holder: (*holder).into(),
                    fencing_token: *fencing_token,
                    remaining: Some(Duration::from_millis(900)),
                    shared: false,
                })
                .collect(),
            reason: String::new(),
        }
    }

    #[test]
    fn watch_text_names_the_cause_and_the_grant() {
        let snapshot = event(WatchCause::Snapshot, Some(("a", 7)), &[("a", 7)]);
        assert_eq!(
            watch_event_text(&snapshot),
            r#"snapshot n holder="a" fencing_token=7"#
        );
        let free = event(WatchCause::Snapshot, None, &[]);
        assert_eq!(watch_event_text(&free), "snapshot n free");
        let released = event(WatchCause::Released, Some(("a", 7)), &[]);
        assert_eq!(
            watch_event_text(&released),
            r#"released n holder="a" fencing_token=7"#
        );
        let mut revoked = event(WatchCause::Revoked, Some(("a", 7)), &[]);
        revoked.reason = "wedged\u{1b}[2J".into();
        assert_eq!(
            watch_event_text(&revoked),
            r#"revoked n holder="a" fencing_token=7 reason="wedged\u{1b}[2J""#
        );
        let mut permit = event(WatchCause::Granted, Some(("b", 9)), &[("a", 7), ("b", 9)]);
        permit.limit = 3;
        assert_eq!(
            watch_event_text(&permit),
            r#"granted n holder="b" fencing_token=9 limit=3 holders=2"#
        );
        let mut readers = event(
            WatchCause::Granted,
            Some(("r2", 9)),
            &[("r1", 7), ("r2", 9)],
        );
        for reader in &mut readers.holders {
            reader.shared = true;
        }
        assert_eq!(
            watch_event_text(&readers),
            r#"granted n holder="r2" fencing_token=9 shared limit=1 holders=2"#
        );
        readers.cause = WatchCause::Released;
        readers.holders.pop();
        assert_eq!(
            watch_event_text(&readers),
            r#"released n holder="r2" fencing_token=9"#
        );
        let hostile = event(
            WatchCause::Granted,
            Some(("e\u{1b}]0;x\u{7}\n\u{202e}", 9)),
            &[],
        );
        assert!(
            !watch_event_text(&hostile)
                .chars()
                .any(crate::lease::limits::is_control_or_bidi)
        );
    }

    #[test]
    fn watch_json_has_the_proto_fields() {
        let granted = event(WatchCause::Granted, Some(("a", 7)), &[("a", 7)]);
        assert_eq!(
            watch_event_json(&granted),
            serde_json::json!({
                "name": "n", "cause": "granted", "held": true, "holder": "a",
                "fencing_token": 7, "expires_at_ms": 1_700_000_000_000_i64, "limit": 1,
                "holders": [
                    { "holder": "a", "fencing_token": 7, "remaining_ms": 900, "shared": false },
                ],
                "reason": "",
            })
        );
        let free = event(WatchCause::Snapshot, None, &[]);
        let json = watch_event_json(&free);
        assert_eq!(
            (
                &json["holder"],
                &json["fencing_token"],
                &json["expires_at_ms"]
            ),
            (&"".into(), &0.into(), &serde_json::Value::Null)
        );
    }

    #[test]
    fn check_text_says_whether_the_token_is_current() {
        let current = TokenCheck {
            current: true,
            current_token: 7,
            held: true,
        };
        assert_eq!(check_text("n", 7, &current), "current n fencing_token=7");
        let taken_over = TokenCheck {
            current: false,
            current_token: 9,
            held: true,
        };
        assert_eq!(
            check_text("n", 7, &taken_over),
            "not_current n fencing_token=7 current_token=9 held=true"
        );
        let free = TokenCheck {
            current: false,
            current_token: 0,
            held: false,
        };
        assert_eq!(
            check_text("n", 7, &free),
            "not_current n fencing_token=7 current_token=0 held=false"
        );
    }
}
