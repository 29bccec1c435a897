//! The operators' subcommands: `leased list [PREFIX]` and `leased revoke NAME --reason TEXT
//! [--fencing-token N]`.

use std::process::ExitCode;

use clap::Args;

use super::{
    escape::{Escaped, json_line},
    flags::EndpointArgs,
    render::{holder_json, remaining_ms},
};
use crate::client::{ClientError, ListedLease};

/// `leased list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// List the leases whose names start with this (default: every lease).
    #[arg(default_value = "")]
    pub prefix: String,
    /// Print one JSON object per lease (one per line) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Leases per page asked of the server, 1 to 1000 (default: the server's, 100). Every page
    /// is read either way.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub page_size: Option<u32>,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

/// `leased revoke`.
#[derive(Args, Debug)]
pub struct RevokeArgs {
    /// The lease's name.
    pub name: String,
    /// Why (1 to 256 bytes of text): written to the server's audit log, and given to the revoked
    /// holder, whose next renewal answers lost with "revoked: REASON".
    #[arg(long)]
    pub reason: String,
    /// Revoke only the grant with this fencing token, and only if it still holds the lease, so
    /// that a holder that took over meanwhile is never revoked by mistake. Without it, whoever
    /// holds the lease is revoked (every permit of a counting lease). (`--token` is the bearer
    /// token, as for every subcommand.)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub fencing_token: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

pub(super) async fn list(args: ListArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?.admin();
    let mut leases = client
        .list_all(&args.prefix, args.page_size.unwrap_or(0))
        .await?;
    // The server lists in no particular order; people and diffs read sorted names best.
    leases.sort_by(|a, b| a.name.cmp(&b.name));
    if args.json {
        for lease in &leases {
            println!("{}", json_line(&listed_json(lease)));
        }
    } else {
        print!("{}", list_table(&leases));
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn revoke(args: RevokeArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?.admin();
    let revoked = client
        .revoke(&args.name, &args.reason, args.fencing_token)
        .await?;
    if args.json {
        let json = serde_json::json!({
            "name": args.name,
            "revoked": revoked.is_some(),
            "fencing_token": revoked.unwrap_or(0),
        });
        println!("{}", json_line(&json));
    } else {
        println!("{}", revoke_text(&args.name, args.fencing_token, revoked));
    }
    // Like `release`: a lease that is no longer held by what was meant is where the operator
    // wanted it, not an error.
    Ok(ExitCode::SUCCESS)
}

/// `revoked NAME fencing_token=N`, or `not_revoked NAME (...)` saying why nothing matched.
fn revoke_text(name: &str, asked_token: Option<u64>, revoked: Option<u64>) -> String {
    let name = Escaped(name);
    match (revoked, asked_token) {
        (Some(token), _) => format!("revoked {name} fencing_token={token}"),
        (None, Some(token)) => {
            format!("not_revoked {name} (the grant with fencing token {token} does not hold it)")
        }
        (None, None) => format!("not_revoked {name} (nobody holds it)"),
    }
}

/// The table of `leased list`: a header, then one line per lease with the holder of the smallest
/// token (quoted and escaped), its token and remaining time, the limit, how many hold it, how
/// many wait, and its mode ([`mode`]). Columns are padded to their widest cell.
fn list_table(leases: &[ListedLease]) -> String {
    const HEADER: [&str; 8] = [
        "NAME",
        "HOLDER",
        "FENCING_TOKEN",
        "REMAINING_MS",
        "LIMIT",
        "HOLDERS",
        "WAITERS",
        "MODE",
    ];
    let rows: Vec<[String; 8]> = leases
        .iter()
        .map(|lease| {
            let first = lease.holders.first();
            [
                Escaped(&lease.name).to_string(),
                format!("{:?}", first.map_or("", |h| h.holder.as_str())),
                first.map_or(0, |h| h.fencing_token).to_string(),
                remaining_ms(first.and_then(|h| h.remaining)).to_string(),
                lease.limit.to_string(),
                lease.holders.len().to_string(),
                lease.waiters.to_string(),
                mode(lease).to_owned(),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut table = String::new();
    let header = HEADER.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        table.push_str(cells.join("  ").trim_end());
        table.push('\n');
    }
    table
}

/// How a lease is held, for the table: `shared` by shared (read) grants, `counting` as permits
/// of a counting lease, else `exclusive`. The holders of a name are all of one mode: a shared
/// grant keeps exclusive callers out, and an exclusive one everyone.
fn mode(lease: &ListedLease) -> &'static str {
    match lease.holders.first() {
        Some(first) if first.shared => "shared",
        _ if lease.limit > 1 => "counting",
        _ => "exclusive",
    }
}

/// One lease of `leased list --json`: the fields of `describe --json` that a held lease has
/// (`holder`, `fencing_token`, `remaining_ms`, `shared` of the smallest token; `limit`,
/// `holders`, `waiters`), and its `name`.
fn listed_json(lease: &ListedLease) -> serde_json::Value {
    let first = lease.holders.first();
    serde_json::json!({
        "name": lease.name,
        "holder": first.map_or("", |h| h.holder.as_str()),
        "fencing_token": first.map_or(0, |h| h.fencing_token),
        "remaining_ms": remaining_ms(first.and_then(|h| h.remaining)),
        "shared": first.is_some_and(|h| h.shared),
        "limit": lease.limit,
        "holders": lease.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "waiters": lease.waiters,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{client::CurrentHolder, lease::limits::is_control_or_bidi};

    fn listed(name: &str, limit: u32, holders: &[(&str, u64, Option<u64>)]) -> ListedLease {
        ListedLease {
            name: name.into(),
            limit,
            holders: holders
                .iter()
                .map(|(holder, fencing_token, remaining_ms)| CurrentHolder {
                    holder: (*holder).into(),
                    fencing_token: *fencing_token,
                    remaining: remaining_ms.map(Duration::from_millis),
                    shared: false,
                })
                .collect(),
            waiters: 0,
        }
    }

    #[test]
    fn the_table_aligns_columns_and_escapes_holders() {
        let mut pool = listed("pool", 3, &[("a", 7, Some(900)), ("b", 8, None)]);
        pool.waiters = 2;
        let mut readers = listed("rw", 1, &[("r1", 20, Some(800)), ("r2", 21, Some(950))]);
        for reader in &mut readers.holders {
            reader.shared = true;
        }
        let leases = [
            listed("job", 1, &[("evil\u{1b}[2J\u{202e}", 12, Some(29_000))]),
            pool,
            readers,
        ];
        let table = list_table(&leases);
        assert_eq!(
            table,
            "NAME  HOLDER                   FENCING_TOKEN  REMAINING_MS  LIMIT  HOLDERS  WAITERS  MODE\n\
             job   \"evil\\u{1b}[2J\\u{202e}\"  12             29000         1      1        0        exclusive\n\
             pool  \"a\"                      7              900           3      2        2        counting\n\
             rw    \"r1\"                     20             800           1      2        0        shared\n"
        );
        assert!(!table.chars().any(|c| c != '\n' && is_control_or_bidi(c)));
        assert_eq!(
            list_table(&[]),
            "NAME  HOLDER  FENCING_TOKEN  REMAINING_MS  LIMIT  HOLDERS  WAITERS  MODE\n"
        );
    }

    #[test]
    fn list_json_has_the_describe_fields_of_a_held_lease() {
        let lease = listed("pool", 2, &[("a", 7, Some(900)), ("b", 8, None)]);
        assert_eq!(
            listed_json(&lease),
            serde_json::json!({
                "name": "pool", "holder": "a", "fencing_token": 7, "remaining_ms": 900,
                "shared": false, "limit": 2, "waiters": 0,
                "holders": [
                    { "holder": "a", "fencing_token": 7, "remaining_ms": 900, "shared": false },
                    { "holder": "b", "fencing_token": 8, "remaining_ms": -1, "shared": false },
                ],
            })
        );
    }

    #[test]
    fn revoke_text_says_what_was_revoked_or_why_nothing_was() {
        assert_eq!(revoke_text("n", None, Some(9)), "revoked n fencing_token=9");
        assert_eq!(
            revoke_text("n", Some(9), Some(9)),
            "revoked n fencing_token=9"
        );
        assert_eq!(
            revoke_text("n", Some(7), None),
            "not_revoked n (the grant with fencing token 7 does not hold it)"
        );
        assert_eq!(
            revoke_text("n", None, None),
            "not_revoked n (nobody holds it)"
        );
    }
}
