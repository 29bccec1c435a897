//! Hold a lease while doing work, and stop the moment it is lost.
//! Run: cargo run --example guard -- http://127.0.0.1:50051
use std::time::Duration;

use leased::client::{AcquireOptions, Acquired, LeaseClient};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or("http://127.0.0.1:50051".into());
    let client = LeaseClient::connect(endpoint).await?;
    let options = AcquireOptions::new(Duration::from_secs(15)).wait(Duration::from_secs(60));
    match client.acquire("nightly-report", options).await? {
        Acquired::Granted(guard) => {
            println!(
                "holding {} with fencing token {}",
                guard.name(),
                guard.fencing_token()
            );
            tokio::select! {
                // Pass the token along with every write; the resource rejects smaller ones.
                _ = do_the_work(guard.fencing_token()) => println!("work done"),
                reason = guard.lost() => println!("stopped: {reason}"),
            }
            guard.release().await?;
        }
        Acquired::NotGranted(holder) => {
            println!(
                "busy: {} holds it with token {}",
                holder.holder, holder.fencing_token
            );
        }
    }
    Ok(())
}

async fn do_the_work(_fencing_token: u64) {
    tokio::time::sleep(Duration::from_millis(200)).await;
}
