//! A fenced resource and a lease holder that writes to it (issue 47, "your own services").
//!
//! `serve` runs a key-value store whose Writer service is wrapped in leased's `FencingLayer`:
//! a Put must carry the lease's name and fencing token, and a token below the largest seen for
//! that lease is refused with FAILED_PRECONDITION. `put` acquires the lease from leased, then
//! writes with the guard's fencing metadata; `get` prints a key's value and its writes.
//!
//!     cargo run --example fenced_kv -- serve --listen 127.0.0.1:50061
//!     cargo run --example fenced_kv -- put --lease orders --key orders/1 --value shipped
//!     cargo run --example fenced_kv -- get --key orders/1
//!
//! `put --think 30s` holds the lease that long before writing: stop that process (Ctrl-Z) past
//! the TTL, `put` again from another shell, then resume it (`fg`): its write is refused, because
//! the second holder's larger token reached the store first. With `serve --unfenced` it would
//! overwrite the second holder's value.
use std::time::Duration;

use clap::{Parser, Subcommand};
use leased::{
    client::{AcquireOptions, Acquired, LeaseClient},
    fencing::FencingLayer,
};

mod kv;

use kv::proto::{GetRequest, PutRequest, reader_client::ReaderClient, writer_client::WriterClient};

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the store.
    Serve {
        #[arg(long, default_value = "127.0.0.1:50061")]
        listen: String,
        /// No fencing layer: the writes of a paused holder land after its successor's.
        #[arg(long)]
        unfenced: bool,
        /// Each Put pauses up to this long (at random) in the middle of its write.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        put_pause: Duration,
    },
    /// Acquire the lease, then put `key` = `value` with the guard's fencing metadata.
    Put {
        /// The leased server.
        #[arg(long, default_value = "http://127.0.0.1:50051")]
        leased: String,
        /// The store.
        #[arg(long, default_value = "http://127.0.0.1:50061")]
        store: String,
        #[arg(long, default_value = "fenced-kv")]
        lease: String,
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// How long to wait in line for the lease.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        wait: Duration,
        /// How long to prepare the write while holding the lease: a pause here (a GC, a
        /// stopped VM) is what fencing is for.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        think: Duration,
        #[arg(long)]
        key: String,
        #[arg(long)]
        value: String,
    },
    /// Print a key's value and the fencing token of each of its writes.
    Get {
        #[arg(long, default_value = "http://127.0.0.1:50061")]
        store: String,
        #[arg(long)]
        key: String,
    },
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match Args::parse().command {
        Command::Serve {
            listen,
            unfenced,
            put_pause,
        } => {
            let listener = tokio::net::TcpListener::bind(&listen).await?;
            let fencing = (!unfenced).then(FencingLayer::new);
            let mode = if unfenced { "unfenced" } else { "fenced" };
            println!("serving on {} ({mode})", listener.local_addr()?);
            kv::serve(listener, kv::Kv::with_put_pause(put_pause), fencing).await?;
        }
        Command::Put {
            leased,
            store,
            lease,
            ttl,
            wait,
            think,
            key,
            value,
        } => {
            // ANCHOR: put
            let client = LeaseClient::connect(leased).await?;
            let mut writer = WriterClient::connect(store).await?;
            let guard = match client
                .acquire(&lease, AcquireOptions::new(ttl).wait(wait))
                .await?
            {
                Acquired::Granted(guard) => guard,
                Acquired::NotGranted(holder) => {
                    return Err(format!("{lease} is held by {}", holder.holder).into());
                }
            };
            let token = guard.fencing_token();
            println!("holding {lease} with fencing token {token}");
            // A careful holder also stops on guard.lost(); this one writes regardless, to show
            // that the store refuses a write that a pause made stale.
            tokio::time::sleep(think).await;
            let put = guard.fenced_request(PutRequest {
                key: key.clone(),
                value: value.clone(),
            });
            match writer.put(put).await {
                Ok(_) => println!("put accepted: {key} = {value:?} with fencing token {token}"),
                Err(status) => println!("put refused: {:?}: {}", status.code(), status.message()),
            }
            // ANCHOR_END: put
            // The lease may be gone already (that is the point); nothing to do if so.
            let _ = guard.release().await;
        }
        Command::Get { store, key } => {
            let got = ReaderClient::connect(store)
                .await?
                .get(GetRequest { key: key.clone() })
                .await?
                .into_inner();
            println!("{key} = {:?}", got.value);
            for write in got.writes {
                println!(
                    "  written {:?} with fencing token {}",
                    write.value, write.fencing_token
                );
            }
        }
    }
    Ok(())
}
