//! The clap tree of the `leased` command line: [`Cli`] and its [`Command`]s. Each command's own
//! flags live next to it (`acquire.rs`, `run.rs`, ...); the groups several share, in `flags.rs`.

use clap::{Parser, Subcommand};

use super::{
    acquire::AcquireArgs, admin, describe::DescribeArgs, fencing, release::ReleaseArgs, run, watch,
};
use crate::config::ServeConfig;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks of the definitions (unique names, consistent flags), which it otherwise
    /// makes only when a subcommand is parsed in a debug build.
    #[test]
    fn the_command_line_is_well_formed() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
