//! The `leased` command line: `serve`, and the client subcommands `acquire`, `release`,
//! `describe` and `run` (flock(1) for a fleet).

mod run;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::{
    client::{
        AcquireOptions, ClientError, ConnectOptions, CurrentHolder, LeaseClient, default_holder,
    },
    config::ServeConfig,
};

/// Exit codes of the client subcommands, besides 0 (success) and CMD's own code under `run`.
pub mod exit_code {
    /// A client error: server unreachable, bad input, server error.
    pub const ERROR: u8 = 1;
    /// The lease is held by someone else (for the whole `--wait`). EX_TEMPFAIL: try again later.
    pub const NOT_GRANTED: u8 = 75;
    /// `leased run` lost the lease while CMD ran, and stopped CMD.
    pub const LEASE_LOST: u8 = 76;
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
    Serve(ServeConfig),
    /// Acquire a lease once and print its lease id and fencing token (no keepalive: it lasts one
    /// TTL unless renewed). Exit 75 if it is held by someone else.
    Acquire(AcquireArgs),
    /// Release a lease by its lease id.
    Release(ReleaseArgs),
    /// Show who holds a lease.
    Describe(DescribeArgs),
    /// Run CMD while holding a lease: acquire, run, keep the lease alive, release when CMD exits.
    /// Exits with CMD's exit code; 75 if the lease was not granted; 76 if it was lost while CMD
    /// ran (CMD gets SIGTERM, then SIGKILL after --kill-after). Signals sent to leased run reach CMD.
    Run(run::RunArgs),
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
}

impl LeaseArgs {
    /// The acquire options these flags describe.
    pub fn options(&self) -> AcquireOptions {
        AcquireOptions::new(self.ttl)
            .wait(self.wait)
            .holder(self.holder.clone().unwrap_or_else(default_holder))
    }
}

/// `leased acquire`.
#[derive(Args, Debug)]
pub struct AcquireArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,
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
    };
    result.unwrap_or_else(|error| {
        eprintln!("leased: {error}");
        ExitCode::from(exit_code::ERROR)
    })
}

async fn acquire(args: AcquireArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    match client
        .acquire_once(&args.lease.name, &args.lease.options())
        .await?
    {
        Ok(grant) => {
            if args.json {
                let json = serde_json::json!({
                    "granted": true,
                    "name": grant.name,
                    "lease_id": grant.lease_id,
                    "fencing_token": grant.fencing_token,
                    "ttl_ms": grant.ttl.as_millis() as u64,
                    "expires_at_ms": grant.expires_at_ms,
                });
                println!("{json}");
            } else {
                println!(
                    "granted {} fencing_token={} lease_id={} ttl={}",
                    grant.name,
                    grant.fencing_token,
                    grant.lease_id,
                    humantime::format_duration(grant.ttl)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(holder) => {
            print_holder(&args.lease.name, "not_granted", Some(&holder), args.json);
            Ok(ExitCode::from(exit_code::NOT_GRANTED))
        }
    }
}

async fn release(args: ReleaseArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    let released = client.release(&args.name, &args.lease_id).await?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "name": args.name, "released": released })
        );
    } else if released {
        println!("released {}", args.name);
    } else {
        println!(
            "not held {} (already released, expired or taken over)",
            args.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn describe(args: DescribeArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    let holder = client.describe(&args.name).await?;
    print_holder(&args.name, "held", holder.as_ref(), args.json);
    Ok(ExitCode::SUCCESS)
}

/// Prints who holds `name` (`state` names the situation: held, not_granted), or that it is free.
fn print_holder(name: &str, state: &str, holder: Option<&CurrentHolder>, json: bool) {
    let remaining_ms = |h: &CurrentHolder| h.remaining.map_or(-1, |r| r.as_millis() as i64);
    match (holder, json) {
        (Some(h), true) => println!(
            "{}",
            serde_json::json!({
                "name": name,
                "held": true,
                "granted": false,
                "holder": h.holder,
                "fencing_token": h.fencing_token,
                "remaining_ms": remaining_ms(h),
            })
        ),
        (Some(h), false) => println!(
            "{state} {name} holder={:?} fencing_token={} remaining_ms={}",
            h.holder,
            h.fencing_token,
            remaining_ms(h)
        ),
        (None, true) => println!("{}", serde_json::json!({ "name": name, "held": false })),
        (None, false) => println!("free {name}"),
    }
}
