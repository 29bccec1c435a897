//! The clap tree of the `leased` command line: [`Cli`], its [`Command`]s, and the flag groups
//! several commands share ([`EndpointArgs`], [`LeaseArgs`]). Each command's own flags live next
//! to it (`acquire.rs`, `run.rs`, ...).

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};

use super::{
    acquire::AcquireArgs, admin, describe::DescribeArgs, fencing, release::ReleaseArgs, run, watch,
};
use crate::{
    client::{AcquireOptions, ClientError, ConnectOptions, LeaseClient, default_holder},
    config::ServeConfig,
};

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
