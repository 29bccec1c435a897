//! The flag groups several commands share: where the server is ([`EndpointArgs`]) and the lease
//! to ask for ([`LeaseArgs`]). Commands import them; the clap tree (`args.rs`) imports the
//! commands, so the groups live apart from it.

use std::{path::PathBuf, time::Duration};

use clap::Args;

use crate::client::{AcquireOptions, ClientError, ConnectOptions, LeaseClient, default_holder};

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
