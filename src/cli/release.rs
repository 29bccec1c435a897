//! `leased release NAME --lease-id ID`: release a lease by its lease id.

use std::process::ExitCode;

use clap::Args;

use super::{
    escape::{Escaped, json_line},
    flags::EndpointArgs,
};
use crate::client::ClientError;

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

/// Releases and says whether the lease id still held the lease.
pub(super) async fn release(args: ReleaseArgs) -> Result<ExitCode, ClientError> {
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
