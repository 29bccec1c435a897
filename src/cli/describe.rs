//! `leased describe NAME`: who holds a lease, the limit and the waiters.

use std::process::ExitCode;

use clap::Args;

use super::{
    escape::json_line,
    flags::EndpointArgs,
    render::{description_json, description_text},
};
use crate::client::ClientError;

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

/// Prints one `Describe` of the lease.
pub(super) async fn describe(args: DescribeArgs) -> Result<ExitCode, ClientError> {
    let client = args.endpoint.connect().await?;
    let description = client.describe_lease(&args.name).await?;
    if args.json {
        println!("{}", json_line(&description_json(&args.name, &description)));
    } else {
        println!("{}", description_text(&args.name, &description));
    }
    Ok(ExitCode::SUCCESS)
}
