//! The `leased` binary: parses flags, starts logging, and hands over to the library.

use clap::{Parser, Subcommand};
use leased::config::{LogFormat, ServeConfig};
use tracing_subscriber::EnvFilter;

/// leased: a gRPC lease service with fencing tokens.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve lease.v1.LeaseService over gRPC (on Redis with --redis-url, else in-process).
    Serve(ServeConfig),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(config) => {
            init_logging(config.log_format);
            match serve(config).await {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(%error, "leased failed");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(config: ServeConfig) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let (trigger, shutdown) = leased::shutdown::channel();
    tokio::spawn(async move {
        wait_for_termination().await;
        tracing::info!("termination signal received");
        trigger.fire();
        // Keep the trigger alive: dropping it is also a shutdown, which is fine here.
        std::future::pending::<()>().await;
    });
    leased::serve(config, listener, shutdown).await
}

/// SIGTERM (Kubernetes, systemd) or Ctrl-C.
async fn wait_for_termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigterm = signal(SignalKind::terminate()).expect("cannot install a SIGTERM handler");
    tokio::select! {
        _ = sigterm.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
