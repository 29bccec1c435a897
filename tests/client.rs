//! The Rust client: `LeaseGuard` renewals, loss detection and release on drop, against a real
//! server on a real Redis; and `examples/guard.rs`, which the README shows.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leased::client::{AcquireOptions, Acquired, LeaseClient, LeaseGuard, LostReason};

async fn must_hold(client: &LeaseClient, name: &str, ttl: Duration) -> LeaseGuard {
    match client
        .acquire(name, AcquireOptions::new(ttl))
        .await
        .unwrap()
    {
        Acquired::Granted(guard) => guard,
        Acquired::NotGranted(holder) => panic!("{name} is busy: {holder:?}"),
    }
}

/// Renewals at a third of the TTL keep a 900 ms lease alive for six TTLs. (A shorter TTL leaves
/// too little room for one slow renewal on a loaded 2-core machine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_keeps_a_short_lease_alive_for_many_ttls() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let guard = must_hold(&client, "kept", Duration::from_millis(900)).await;
    tokio::time::sleep(Duration::from_millis(5_400)).await;
    assert!(!guard.is_lost());
    let holder = client.describe("kept").await.unwrap().expect("still held");
    assert_eq!(holder.fencing_token, guard.fencing_token());
    let other = client
        .acquire("kept", AcquireOptions::new(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(matches!(other, Acquired::NotGranted(h) if h.fencing_token == guard.fencing_token()));
    assert!(guard.release().await.unwrap());
    assert_eq!(client.describe("kept").await.unwrap(), None);
}

/// When the lease passes to someone else (here: its keys were deleted from Redis and another
/// client acquired it), the next renewal answers lost and `lost()` fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_lease_is_taken_over() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let guard = must_hold(&client, "taken", Duration::from_millis(900)).await;
    redis.command(&["DEL", "leased:{taken}", "leased:{taken}:owner"]);
    let thief = must_hold(&client, "taken", Duration::from_secs(30)).await;
    assert!(thief.fencing_token() > guard.fencing_token());

    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost() did not fire");
    assert_eq!(reason, LostReason::Lost("held by another holder".into()));
    assert!(guard.is_lost());
}

/// When the server cannot be reached, `lost()` fires while the lease is still held in Redis:
/// the holder stops trusting it before anyone else can be granted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_before_expiry_when_the_server_is_unreachable() {
    let redis = RedisServer::start();
    let mut unreachable = Leased::start(Some(redis.url())).await;
    let observer = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(unreachable.endpoint()).await.unwrap();
    let observer_client = LeaseClient::connect(observer.endpoint()).await.unwrap();
    let guard = must_hold(&client, "cut-off", Duration::from_millis(1_500)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    unreachable.shut_down();
    let cut_at = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() did not fire");
    assert!(matches!(reason, LostReason::Unreachable(_)), "{reason:?}");
    assert!(
        cut_at.elapsed() < Duration::from_millis(1_600),
        "{:?}",
        cut_at.elapsed()
    );
    let holder = observer_client
        .describe("cut-off")
        .await
        .unwrap()
        .expect("the lease must still be held when the holder gives up on it");
    assert_eq!(holder.fencing_token, guard.fencing_token());
    assert!(holder.remaining.unwrap() > Duration::ZERO);
}

/// Dropping a guard releases the lease in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_guard_releases_the_lease() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let guard = must_hold(&client, "dropped", Duration::from_secs(60)).await;
    drop(guard);
    let start = Instant::now();
    while client.describe("dropped").await.unwrap().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "drop did not release"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `examples/guard.rs` runs against a real server, and the README shows exactly that program.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_example_runs_and_matches_the_readme() {
    let example = include_str!("../examples/guard.rs");
    let readme = include_str!("../README.md");
    assert!(
        readme.contains(&format!("```rust\n{example}```")),
        "README's Rust client example differs from examples/guard.rs"
    );

    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    // A plain `cargo test` builds the examples into target/<profile>/examples.
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/guard");
    let output = tokio::process::Command::new(&binary)
        .arg(server.endpoint())
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): run `cargo build --examples` or a plain `cargo test`",
                binary.display()
            )
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("holding nightly-report with fencing token"),
        "{stdout}"
    );
    assert!(stdout.contains("work done"), "{stdout}");
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    assert_eq!(
        client.describe("nightly-report").await.unwrap(),
        None,
        "released"
    );
}

/// A guard granted after a wait longer than its TTL is trusted from a fresh renewal, not from the
/// request: it does not report lost the moment it is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_granted_after_a_long_wait_is_not_lost_at_once() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let first = must_hold(&client, "long-wait", Duration::from_secs(30)).await;
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            let options =
                AcquireOptions::new(Duration::from_millis(500)).wait(Duration::from_secs(10));
            client.acquire("long-wait", options).await.unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(first.release().await.unwrap());
    let Acquired::Granted(guard) = waiter.await.unwrap() else {
        panic!("the waiter was not granted");
    };
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(
        !guard.is_lost(),
        "lost right after a grant that followed a long wait"
    );
    let holder = client.describe("long-wait").await.unwrap().expect("held");
    assert_eq!(holder.fencing_token, guard.fencing_token());
}
