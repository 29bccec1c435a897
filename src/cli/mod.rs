//! The `leased` command line: `serve`, and the client subcommands `acquire`, `release`,
//! `describe`, `run` (flock(1) for a fleet), `watch` and `check`, the operators' `list` and
//! `revoke`, and `fencing`, which prints the fencing adapters' SQL and Redis Functions.
//!
//! Text that comes from the server (holders, names, lease ids, reasons, error messages) is never
//! printed raw: a holder written by an older server or straight into Redis may hold terminal
//! escapes or bidirectional overrides. Human output escapes them (`Escaped`, holders quoted
//! with `{:?}`); `--json` output escapes them as JSON `\uXXXX` (`json_line`).

mod acquire;
mod admin;
mod args;
mod describe;
mod escape;
mod fencing;
mod flags;
mod release;
mod render;
mod run;
mod watch;

use std::process::ExitCode;

pub use acquire::AcquireArgs;
pub use args::{Cli, Command};
pub use describe::DescribeArgs;
pub use flags::{EndpointArgs, LeaseArgs};
pub use release::ReleaseArgs;

use escape::Escaped;

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

/// Runs a client subcommand and returns the process exit code.
pub async fn run_client(command: Command) -> ExitCode {
    let result = match command {
        Command::Serve(_) => unreachable!("serve is not a client command"),
        Command::Acquire(args) => acquire::acquire(args).await,
        Command::Release(args) => release::release(args).await,
        Command::Describe(args) => describe::describe(args).await,
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
