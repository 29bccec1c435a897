//! The `leased` command line: `serve`, and the client subcommands `acquire`, `release`,
//! `describe`, `run` (flock(1) for a fleet), `watch` and `check`, the operators' `list` and
//! `revoke`, and `fencing`, which prints the fencing adapters' SQL and Redis Functions.
//!
//! Text that comes from the server (holders, names, lease ids, reasons, error messages) is never
//! printed raw: a holder written by an older server or straight into Redis may hold terminal
//! escapes or bidirectional overrides. Human output escapes them (`Escaped`, holders quoted
//! with `{:?}`); `--json` output escapes them as JSON `\uXXXX` (`json_line`).

mod admin;
mod fencing;
mod run;
mod watch;

use std::{fmt, path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::{
    client::{
        AcquireOptions, ClientError, ConnectOptions, CurrentHolder, GrantedLease, LeaseClient,
        LeaseDescription, NotGranted, default_holder,
    },
    config::ServeConfig,
    lease::limits::is_control_or_bidi,
};

/// Exit codes of the client subcommands, besides 0 (success) and CMD's own code under `run`.
pub mod exit_code {
    /// A client error: server unreachable, bad input, server error.
    pub const ERROR: u8 = 1;
    /// The lease is held by someone else (for the whole `--wait`). EX_TEMPFAIL: try again later.
    pub const NOT_GRANTED: u8 = 75;
    /// `leased run` lost the lease while CMD ran, and stopped CMD.
    pub const LEASE_LOST: u8 = 76;
    /// `leased check`: the token does not hold the lease now. The same code as [`ERROR`], as the
    /// convention of `test(1)` and `grep -q` has it: 0 yes, 1 no.
    pub const NOT_CURRENT: u8 = 1;
}

/// leased: a gRPC lease service with fencing tokens.
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What `leased` can do.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve lease.v1.LeaseService over gRPC (on Redis with --redis-url, else in-process).
    // Boxed: the server's settings are several times the size of any client command's.
    Serve(Box<ServeConfig>),
    /// Acquire a lease once and print its lease id and fencing token (no keepalive: it lasts one
    /// TTL unless renewed). Exit 75 if it is held by someone else. With --lease-id, running it
    /// again with the same id answers the same grant.
    Acquire(AcquireArgs),
    /// Release a lease by its lease id.
    Release(ReleaseArgs),
    /// Show who holds a lease: every holder of a counting or shared lease (each shared one marked
    /// `shared`), the limit, and the waiters.
    Describe(DescribeArgs),
    /// Run CMD while holding a lease: acquire, run, keep the lease alive, release when CMD exits.
    /// With --limit N, one of N permits: at most N such commands run at once, fleet-wide. With
    /// --shared, a read lock: shared runs go together, and exclude an exclusive one.
    /// Exits with CMD's exit code; 75 if the lease was not granted; 76 if it was lost while CMD
    /// ran (CMD gets SIGTERM, then SIGKILL after --kill-after). Signals sent to leased run reach CMD.
    Run(run::RunArgs),
    /// Follow who holds a lease: one line per event (snapshot, granted, released, expired,
    /// revoked), until the server ends the watch (exit 1, with the reason).
    Watch(watch::WatchArgs),
    /// Check whether a fencing token holds its lease now: exit 0 if it does, 1 if not.
    Check(watch::CheckArgs),
    /// List the leases held (every page), whose names start with PREFIX: a table, or one JSON
    /// object per lease with --json.
    List(admin::ListArgs),
    /// Revoke a lease, whoever holds it (only the grant with --fencing-token, if given): it ends
    /// at once, and its holder's next renewal answers lost with the reason. Needs a token with
    /// the `revoke` operation where access control is on.
    Revoke(admin::RevokeArgs),
    /// Print a fencing adapter for your resource: `leased fencing sql | psql "$DATABASE_URL"`
    /// (PostgreSQL), `leased fencing redis-functions | redis-cli -x FUNCTION LOAD REPLACE`
    /// (Redis).
    #[command(subcommand_value_name = "FILE", subcommand_help_heading = "Files")]
    Fencing(fencing::FencingArgs),
}

/// Where the server is, and how to talk to it.
#[derive(Args, Debug, Clone)]
pub struct EndpointArgs {
    /// The leased server (https:// for TLS).
    #[arg(
        long,
        env = "LEASED_ENDPOINT",
        default_value = "http://127.0.0.1:50051"
    )]
    pub endpoint: String,
    /// PEM CA bundle to trust for an https:// endpoint (default: the system's roots).
    #[arg(long, env = "LEASED_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// PEM client certificate, for servers that require mTLS (with --client-key).
    #[arg(long, env = "LEASED_CLIENT_CERT", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// PEM client key, for servers that require mTLS (with --client-cert).
    #[arg(long, env = "LEASED_CLIENT_KEY", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Bearer token, for servers started with --auth-tokens.
    #[arg(long, env = "LEASED_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl EndpointArgs {
    /// Connects as these flags say.
    pub async fn connect(&self) -> Result<LeaseClient, ClientError> {
        let options = ConnectOptions {
            ca_cert: self.ca_cert.clone(),
            client_identity: self.client_cert.clone().zip(self.client_key.clone()),
            token: self.token.clone(),
        };
        LeaseClient::connect_with(self.endpoint.clone(), &options).await
    }
}

/// The lease to ask for: shared by `acquire` and `run`.
#[derive(Args, Debug)]
pub struct LeaseArgs {
    /// The lease's name.
    pub name: String,
    /// How long the lease lasts without a renewal (e.g. 30s); `run` renews it every third.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// How long to wait if it is busy (e.g. 10s); 0 tries once.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub wait: Duration,
    /// Who is asking, shown by describe (default: hostname/pid).
    #[arg(long)]
    pub holder: Option<String>,
    /// How many may hold NAME at once: 1 is an exclusive lease, N > 1 a counting lease (at most N
    /// holders, each with its own lease id and fencing token). Every holder of a name must use
    /// the same N.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// If the lease expires (its holder died or stopped renewing; not on release), keep it from
    /// everyone for this long after the expiry (e.g. 5s; at most 1m), so that a holder that is
    /// only paused has time to notice before the next one starts.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub lock_delay: Duration,
    /// A shared (read) grant: shared holders of NAME hold it together, an exclusive one (the
    /// default) alone, and both wait in one queue, in order. Not with --limit above 1.
    #[arg(long)]
    pub shared: bool,
}

impl LeaseArgs {
    /// The acquire options these flags describe.
    pub fn options(&self) -> AcquireOptions {
        AcquireOptions::new(self.ttl)
            .wait(self.wait)
            .holder(self.holder.clone().unwrap_or_else(default_holder))
            .limit(self.limit)
            .lock_delay(self.lock_delay)
            .shared(self.shared)
    }
}

/// `leased acquire`.
#[derive(Args, Debug)]
pub struct AcquireArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// Acquire with this lease id (22 to 128 characters of A-Z a-z 0-9 _ -; e.g. `openssl rand
    /// -hex 16`) instead of a new random one. The same command with the same id answers the same
    /// grant (token and expiry), so it is safe to repeat. Keep it secret: it renews and releases
    /// the lease.
    #[arg(long, value_name = "ID")]
    pub lease_id: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

/// `leased release`.
#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The lease's name.
    pub name: String,
    /// The lease id printed by acquire.
    #[arg(long)]
    pub lease_id: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

/// `leased describe`.
#[derive(Args, Debug)]
pub struct DescribeArgs {
    /// The lease's name.
    pub name: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

/// Runs a client subcommand and returns the process exit code.
pub async fn run_client(command: Command) -> ExitCode {
    let result = match command {
        Command::Serve(_) => unreachable!("serve is not a client command"),
        Command::Acquire(args) => acquire(args).await,
        Command::Release(args) => release(args).await,
        Command::Describe(args) => describe(args).await,
        Command::Run(args) => return run::run(args).await,
        Command::Watch(args) => watch::watch(args).await,
        Command::Check(args) => watch::check(args).await,
        Command::List(args) => admin::list(args).await,
        Command::Revoke(args) => admin::revoke(args).await,
        Command::Fencing(args) => return fencing::print(args),
    };
    result.unwrap_or_else(|error| {
        eprintln!("leased: {}", Escaped(&error.to_string()));
        ExitCode::from(exit_code::ERROR)
    })
}

async fn acquire(args: AcquireArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    let mut options = args.lease.options();
    options.lease_id = args.lease_id.clone();
    match client.acquire_once(&args.lease.name, &options).await? {
        Ok(grant) => {
            if args.json {
                let json = serde_json::json!({
                    "granted": true,
                    "name": grant.name,
                    "lease_id": grant.lease_id,
                    "fencing_token": grant.fencing_token,
                    "ttl_ms": grant.ttl.as_millis() as u64,
                    "expires_at_ms": grant.expires_at_ms,
                    "shared": grant.shared,
                });
                println!("{}", json_line(&json));
            } else {
                println!("{}", granted_text(&grant));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(busy) => {
            if args.json {
                println!("{}", json_line(&not_granted_json(&args.lease.name, &busy)));
            } else {
                println!("{}", not_granted_text(&args.lease.name, &busy));
            }
            Ok(ExitCode::from(exit_code::NOT_GRANTED))
        }
    }
}

async fn release(args: ReleaseArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    let released = client.release(&args.name, &args.lease_id).await?;
    let name = Escaped(&args.name);
    if args.json {
        let json = serde_json::json!({ "name": args.name, "released": released });
        println!("{}", json_line(&json));
    } else if released {
        println!("released {name}");
    } else {
        println!("not held {name} (already released, expired or taken over)");
    }
    Ok(ExitCode::SUCCESS)
}

async fn describe(args: DescribeArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    let description = client.describe_lease(&args.name).await?;
    if args.json {
        println!("{}", json_line(&description_json(&args.name, &description)));
    } else {
        println!("{}", description_text(&args.name, &description));
    }
    Ok(ExitCode::SUCCESS)
}

/// `acquire` of a free lease, as text: `granted NAME fencing_token=N lease_id=ID ttl=T`, and
/// ` shared` for a shared grant.
fn granted_text(grant: &GrantedLease) -> String {
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
// backslashes and every character [`is_control_or_bidi`] covers (`\u{1b}`, `\n`, `\0`,
// `\u{202e}`); JSON output goes through [`json_line`].

/// `describe` as text. A lease with one holder is one line, `held NAME holder=".."
/// fencing_token=N remaining_ms=M` (then ` shared` for a shared grant), or `free NAME`; a
/// counting lease (limit > 1) or several shared holders make a line with the limit and the count
/// of holders, then one indented line per holder, by increasing token. ` waiters=N` ends the
/// first line when someone waits.
fn description_text(name: &str, description: &LeaseDescription) -> String {
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
fn description_json(name: &str, description: &LeaseDescription) -> serde_json::Value {
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
fn not_granted_text(name: &str, busy: &NotGranted) -> String {
    let soonest = format_holder(&busy.holder, busy.fencing_token, busy.remaining);
    let mut text = format!("not_granted {} {soonest}", Escaped(name));
    if busy.limit > 1 {
        text.push_str(&format!(" permits_held={} limit={}", busy.held, busy.limit));
    }
    text
}

/// `acquire --json` of a busy lease. `held` stays the boolean it always was; the count of
/// permits taken is `permits_held`.
fn not_granted_json(name: &str, busy: &NotGranted) -> serde_json::Value {
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

fn holder_json(holder: &CurrentHolder) -> serde_json::Value {
    serde_json::json!({
        "holder": holder.holder,
        "fencing_token": holder.fencing_token,
        "remaining_ms": remaining_ms(holder.remaining),
        "shared": holder.shared,
    })
}

/// The wire's convention: -1 for a lease without expiry.
fn remaining_ms(remaining: Option<Duration>) -> i64 {
    remaining.map_or(-1, |r| i64::try_from(r.as_millis()).unwrap_or(i64::MAX))
}

/// Server-provided (or user-provided) text in human output: every character a terminal would act
/// on instead of showing ([`is_control_or_bidi`]) is written as its Rust escape (`\u{1b}`,
/// `\n`, `\u{202e}`); all other text as it is.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for_each_run(self.0, |plain, hidden| {
            f.write_str(plain)?;
            hidden.map_or(Ok(()), |c| write!(f, "{}", c.escape_debug()))
        })
    }
}

/// Calls `write` with each run of `text` up to an [`is_control_or_bidi`] character and that
/// character, in order; the last run comes with `None`.
fn for_each_run<E>(
    text: &str,
    mut write: impl FnMut(&str, Option<char>) -> Result<(), E>,
) -> Result<(), E> {
    let mut rest = text;
    while let Some((at, hidden)) = rest.char_indices().find(|(_, c)| is_control_or_bidi(*c)) {
        write(&rest[..at], Some(hidden))?;
        rest = &rest[at + hidden.len_utf8()..];
    }
    write(rest, None)
}

/// `value` as one line of JSON. serde_json escapes only C0 controls, `"` and `\\`; DEL, the C1
/// controls (U+009B is CSI to some terminals) and the bidirectional formatting characters are
/// escaped here as `\uXXXX` as well, so that `--json` output printed to a terminal is safe too.
/// A JSON parser reads the same strings back.
fn json_line(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, TerminalSafeJson);
    serde::Serialize::serialize(value, &mut serializer).expect("a JSON value always serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// serde_json's compact format, with [`is_control_or_bidi`] characters escaped in strings.
struct TerminalSafeJson;

impl serde_json::ser::Formatter for TerminalSafeJson {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        // Every such character is in the Basic Multilingual Plane: one \uXXXX escape each.
        for_each_run(fragment, |plain, hidden| {
            writer.write_all(plain.as_bytes())?;
            hidden.map_or(Ok(()), |c| write!(writer, "\\u{:04x}", c as u32))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character the server refuses in a holder (none is above U+2069).
    fn hidden_characters() -> impl Iterator<Item = char> {
        ('\0'..='\u{2069}').filter(|c| is_control_or_bidi(*c))
    }

    /// clap's own checks of the definitions (unique names, consistent flags), which it otherwise
    /// makes only when a subcommand is parsed in a debug build.
    #[test]
    fn the_command_line_is_well_formed() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn escaped_text_has_no_control_or_bidi_characters() {
        assert_eq!(
            Escaped("a\u{1b}[2Jb\nc\0d\u{9b}e\u{202e}f").to_string(),
            "a\\u{1b}[2Jb\\nc\\0d\\u{9b}e\\u{202e}f"
        );
        assert_eq!(
            Escaped("host-a/pid-42 ünï 🦀").to_string(),
            "host-a/pid-42 ünï 🦀"
        );
        let all: String = hidden_characters().collect();
        assert_eq!(
            all.chars().count(),
            65 + 12,
            "Cc is 65 characters, the bidi set 12"
        );
        assert!(!Escaped(&all).to_string().chars().any(is_control_or_bidi));
    }

    /// `format_holder` relies on `{:?}` escaping these; this fails if the standard library's
    /// `Debug` for `str` ever stops doing so.
    #[test]
    fn debug_quoting_escapes_every_control_and_bidi_character() {
        for c in hidden_characters() {
            let quoted = format!("{:?}", format!("x{c}y"));
            assert!(!quoted.chars().any(is_control_or_bidi), "{:?}", c);
        }
    }

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

    #[test]
    fn json_lines_escape_control_and_bidi_characters_and_parse_back() {
        let holder: String = hidden_characters().chain("ünï \"\\ 🦀".chars()).collect();
        let line = json_line(&serde_json::json!({ "holder": holder }));
        assert!(!line.chars().any(is_control_or_bidi), "{line}");
        assert!(line.contains(r"\u001b") && line.contains(r"\u009b") && line.contains(r"\u202e"));
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["holder"], holder.as_str());
        assert_eq!(
            json_line(&serde_json::json!({ "name": "a", "held": false })),
            r#"{"held":false,"name":"a"}"#
        );
    }
}
