//! `leased acquire NAME --ttl T`: acquire a lease once and print its lease id and fencing token.

use std::process::ExitCode;

use clap::Args;

use super::{
    escape::json_line,
    exit_code,
    flags::{EndpointArgs, LeaseArgs},
    render::{granted_text, not_granted_json, not_granted_text},
};
use crate::client::ClientError;

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

/// Acquires once (no keepalive) and prints the grant, or who holds the lease.
pub(super) async fn acquire(args: AcquireArgs) -> Result<ExitCode, ClientError> {
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
