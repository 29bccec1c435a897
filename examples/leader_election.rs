//! Leader election on a lease. Every copy of this program is a candidate: it campaigns with a
//! blocking Acquire, leads while its guard holds the lease, and steps down (then campaigns again)
//! the moment the lease is lost. Every candidate follows the election with Watch and prints who
//! leads; a leader that dies is replaced one TTL later, with a larger fencing token.
//!
//! Run three, each in its own shell, then stop the leader (Ctrl-C hands over at once; kill -9
//! after the TTL):
//!     cargo run --example leader_election -- http://127.0.0.1:50051 --id candidate-1
use std::time::Duration;

use clap::Parser;
use leased::client::{AcquireOptions, Acquired, LeaseClient, WatchEvent};
use tokio::sync::watch;
use tokio_stream::StreamExt;

/// How long one campaign waits in line before asking again (the server's --max-wait is 10 min).
const CAMPAIGN_WAIT: Duration = Duration::from_secs(60);
/// Pause before retrying a campaign or a watch that failed (server unreachable, say).
const RETRY_DELAY: Duration = Duration::from_secs(1);

#[derive(Parser)]
struct Args {
    /// The leased server.
    #[arg(default_value = "http://127.0.0.1:50051")]
    endpoint: String,
    /// The election: the lease every candidate campaigns for.
    #[arg(long, default_value = "leader/demo")]
    election: String,
    /// This candidate's name, which the others print as the leader's.
    #[arg(long, default_value_t = leased::client::default_holder())]
    id: String,
    /// The lease's TTL: how long a dead leader keeps the others waiting.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    ttl: Duration,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let client = LeaseClient::connect(args.endpoint.clone()).await?;
    let stop = stop_on_signal();
    // Every candidate follows the election, the leader too: one view of who leads, for all.
    tokio::spawn(follow(client.clone(), args.election.clone()));
    campaign(&client, &args, stop).await;
    Ok(())
}

/// Campaigns until `stop`: wait in line for the lease, lead while it holds, and campaign again
/// after losing it.
async fn campaign(client: &LeaseClient, args: &Args, mut stop: watch::Receiver<bool>) {
    loop {
        let options = AcquireOptions::new(args.ttl)
            .wait(CAMPAIGN_WAIT)
            .holder(&args.id);
        let acquired = tokio::select! {
            acquired = client.acquire(&args.election, options) => acquired,
            // Leaving the line: the server releases a grant that crosses the cancellation.
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        let guard = match acquired {
            Ok(Acquired::Granted(guard)) => guard,
            // Someone else led for the whole wait: stand in line again.
            Ok(Acquired::NotGranted(_)) => continue,
            Err(error) => {
                eprintln!("campaign failed: {error}; retrying");
                tokio::time::sleep(RETRY_DELAY).await;
                continue;
            }
        };
        println!(
            "leading as {} with fencing token {}",
            args.id,
            guard.fencing_token()
        );
        let lost = tokio::select! {
            reason = guard.lost() => Some(reason),
            () = lead(guard.fencing_token()) => None,
            _ = stop.wait_for(|stopped| *stopped) => None,
        };
        match lost {
            // Stop leading before anyone else can be granted the lease, then campaign again.
            Some(reason) => println!("stepped down: {reason}"),
            None => {
                // Releasing hands over at once instead of after the TTL.
                let _ = guard.release().await;
                println!("stepped down: stopping");
                return;
            }
        }
    }
}

/// The leader's work, until the lease is lost. Every write it makes carries the fencing token,
/// so that a resource can refuse a leader that was replaced without noticing (a long pause).
async fn lead(fencing_token: u64) {
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        ticks.tick().await;
        do_the_leaders_work(fencing_token).await;
    }
}

async fn do_the_leaders_work(_fencing_token: u64) {
    // e.g. run the scheduler once, passing the token with every write
}

/// Prints who leads, from the election's Watch: a snapshot first, then each change. A watch
/// that ends (the server restarts, say) is opened again; its snapshot restates the leader.
async fn follow(client: LeaseClient, election: String) {
    loop {
        match client.watch(&election).await {
            Ok(mut events) => {
                while let Some(event) = events.next().await {
                    match event {
                        Ok(event) => print_leader(&event),
                        Err(error) => eprintln!("watch ended: {error}; watching again"),
                    }
                }
            }
            Err(error) => eprintln!("cannot watch {election}: {error}; retrying"),
        }
        tokio::time::sleep(RETRY_DELAY).await;
    }
}

/// `[granted] leader "candidate-2", fencing token 17`, or `[expired] no leader`. The holder is
/// quoted with `{:?}`, which escapes characters a terminal would act on.
fn print_leader(event: &WatchEvent) {
    match event.current_holder() {
        Some(leader) => println!(
            "[{}] leader {:?}, fencing token {}",
            event.cause, leader.holder, leader.fencing_token
        ),
        None => println!("[{}] no leader", event.cause),
    }
}

/// Set once SIGTERM or Ctrl-C arrives.
fn stop_on_signal() -> watch::Receiver<bool> {
    use tokio::signal::unix::{SignalKind, signal};
    let (stopped, stop) = watch::channel(false);
    tokio::spawn(async move {
        let terminated = async {
            match signal(SignalKind::terminate()) {
                Ok(mut sigterm) => sigterm.recv().await,
                // No SIGTERM handler: only Ctrl-C stops us.
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = terminated => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        let _ = stopped.send(true);
    });
    stop
}
