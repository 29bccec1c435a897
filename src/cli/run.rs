//! `leased run NAME --ttl 15s -- CMD ARGS...`: hold a lease exactly as long as CMD runs. With
//! `--limit N`, one of N permits: at most N such commands run at once, fleet-wide.

use std::{process::ExitCode, time::Duration};

use clap::Args;
use tokio::{
    process::{Child, Command},
    signal::unix::{Signal, SignalKind, signal},
};

use super::{
    escape::Escaped,
    exit_code,
    flags::{EndpointArgs, LeaseArgs},
};
use crate::client::{Acquired, LostReason};

/// `leased run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// After the lease is lost, how long CMD has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub kill_after: Duration,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// The command to run, after `--`.
    #[arg(required = true, last = true)]
    pub command: Vec<String>,
}

/// Signals passed on to CMD.
const FORWARDED_SIGNALS: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

pub(super) async fn run(args: RunArgs) -> ExitCode {
    let client = match args.endpoint.connect().await {
        Ok(client) => client,
        Err(error) => return fail(&error.to_string()),
    };
    let name = &args.lease.name;
    let guard = match client.acquire(name, args.lease.options()).await {
        Ok(Acquired::Granted(guard)) => guard,
        Ok(Acquired::NotGranted(busy)) => {
            // The holder is quoted with `{:?}`, which escapes control and bidi characters.
            if busy.limit > 1 {
                eprintln!(
                    "leased run: {} is busy: {} of {} permits held, the first to free held by \
                     {:?} (fencing token {}); not running the command",
                    Escaped(name),
                    busy.held,
                    busy.limit,
                    busy.holder,
                    busy.fencing_token
                );
            } else {
                eprintln!(
                    "leased run: {} is held by {:?} (fencing token {}); not running the command",
                    Escaped(name),
                    busy.holder,
                    busy.fencing_token
                );
            }
            return ExitCode::from(exit_code::NOT_GRANTED);
        }
        Err(error) => return fail(&error.to_string()),
    };

    let mut child = match Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("LEASED_NAME", guard.name())
        .env("LEASED_FENCING_TOKEN", guard.fencing_token().to_string())
        .env("LEASED_LEASE_ID", guard.lease_id())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            let _ = guard.release().await;
            return fail(&format!("cannot run {:?}: {error}", args.command[0]));
        }
    };
    let mut signals: Vec<(libc::c_int, Signal)> = FORWARDED_SIGNALS
        .iter()
        .map(|&number| {
            let stream =
                signal(SignalKind::from_raw(number)).expect("cannot install signal handler");
            (number, stream)
        })
        .collect();

    loop {
        let forwarded =
            futures::future::select_all(signals.iter_mut().map(|(number, stream)| {
                Box::pin(async move { stream.recv().await.map(|_| *number) })
            }));
        tokio::select! {
            status = child.wait() => {
                let code = match status {
                    Ok(status) => exit_code_of(status),
                    Err(error) => return fail(&format!("waiting for the command: {error}")),
                };
                if let Err(error) = guard.release().await {
                    let error = error.to_string();
                    eprintln!(
                        "leased run: could not release {} (it expires at its TTL): {}",
                        Escaped(name),
                        Escaped(&error)
                    );
                }
                return ExitCode::from(code);
            }
            reason = guard.lost() => {
                stop_child(&mut child, &reason, args.kill_after).await;
                return ExitCode::from(exit_code::LEASE_LOST);
            }
            (Some(number), _, _) = forwarded => send_signal(&child, number),
        }
    }
}

/// SIGTERM, then SIGKILL if CMD is still running after `kill_after`.
async fn stop_child(child: &mut Child, reason: &LostReason, kill_after: Duration) {
    // The reason carries the server's `Lost.reason` or error message.
    eprintln!(
        "leased run: {}; stopping the command",
        Escaped(&reason.to_string())
    );
    send_signal(child, libc::SIGTERM);
    if tokio::time::timeout(kill_after, child.wait())
        .await
        .is_err()
    {
        eprintln!("leased run: the command ignored SIGTERM for {kill_after:?}; killing it");
        let _ = child.kill().await;
    }
}

fn send_signal(child: &Child, number: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) with a pid we spawned and a valid signal number has no memory effects.
        unsafe { libc::kill(pid as libc::pid_t, number) };
    }
}

/// CMD's exit code, or 128 + the signal that killed it, as shells report it.
fn exit_code_of(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => exit_code::ERROR,
    }
}

/// `message` may carry the server's error message: printed escaped.
fn fail(message: &str) -> ExitCode {
    eprintln!("leased run: {}", Escaped(message));
    ExitCode::from(exit_code::ERROR)
}
