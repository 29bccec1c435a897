//! The Rust client: `LeaseGuard` renewals, loss detection and release on drop, against a real
//! server on a real Redis; and `examples/guard.rs`, which the README shows.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leased::client::{
    AcquireOptions, Acquired, ClientError, LeaseClient, LeaseDescription, LeaseGuard, LostReason,
};

async fn must_hold(client: &LeaseClient, name: &str, ttl: Duration) -> LeaseGuard {
    must_hold_with(client, name, AcquireOptions::new(ttl)).await
}

async fn must_hold_with(client: &LeaseClient, name: &str, options: AcquireOptions) -> LeaseGuard {
    match client.acquire(name, options).await.unwrap() {
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

/// `AcquireOptions::limit(2)`: two guards hold the name at once with increasing tokens; a third
/// try is `NotGranted` with held 2 and limit 2; `describe_lease` lists both holders by token, the
/// limit and a waiter; another limit is `ClientError::LimitMismatch`; releasing one permit lets
/// the waiter in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_lets_n_holders_in_and_describe_lease_lists_them() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let permit = |holder: &str| {
        AcquireOptions::new(Duration::from_secs(30))
            .limit(2)
            .holder(holder)
    };
    let first = must_hold_with(&client, "pool", permit("a")).await;
    let second = must_hold_with(&client, "pool", permit("b")).await;
    assert!(second.fencing_token() > first.fencing_token());

    let Acquired::NotGranted(busy) = client.acquire("pool", permit("c")).await.unwrap() else {
        panic!("a third permit was granted with limit 2");
    };
    assert_eq!((busy.held, busy.limit), (2, 2), "{busy:?}");
    assert!(
        [first.fencing_token(), second.fencing_token()].contains(&busy.fencing_token),
        "{busy:?}"
    );
    assert!(busy.remaining.unwrap() > Duration::ZERO, "{busy:?}");

    let waiter = tokio::spawn({
        let client = client.clone();
        let options = permit("c").wait(Duration::from_secs(20));
        async move { client.acquire("pool", options).await.unwrap() }
    });
    let start = Instant::now();
    let description = loop {
        let description = client.describe_lease("pool").await.unwrap();
        if description.waiters == 1 {
            break description;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{description:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(description.is_held());
    assert_eq!(description.limit, 2);
    let listed: Vec<(&str, u64)> = description
        .holders
        .iter()
        .map(|h| (h.holder.as_str(), h.fencing_token))
        .collect();
    assert_eq!(
        listed,
        [("a", first.fencing_token()), ("b", second.fencing_token())]
    );
    assert!(
        description
            .holders
            .iter()
            .all(|h| h.remaining.unwrap() > Duration::ZERO)
    );
    // `describe` keeps answering with one holder: the smallest token.
    let smallest = client.describe("pool").await.unwrap().unwrap();
    assert_eq!(smallest.fencing_token, first.fencing_token());

    for (other_limit, options) in [
        (3, AcquireOptions::new(Duration::from_secs(5)).limit(3)),
        (0, AcquireOptions::new(Duration::from_secs(5))),
    ] {
        match client.acquire("pool", options).await {
            Err(ClientError::LimitMismatch { requested, message }) => {
                assert_eq!(requested, other_limit);
                assert!(message.contains("the limit in force, 2"), "{message}");
            }
            other => panic!("limit {other_limit}: expected LimitMismatch, got {other:?}"),
        }
    }

    assert!(first.release().await.unwrap());
    let Acquired::Granted(third) = waiter.await.unwrap() else {
        panic!("the waiter was not granted the freed permit");
    };
    assert!(third.fencing_token() > second.fencing_token());
    assert!(second.release().await.unwrap());
    assert!(third.release().await.unwrap());
    assert_eq!(
        client.describe_lease("pool").await.unwrap(),
        LeaseDescription {
            limit: 0,
            holders: Vec::new(),
            waiters: 0
        }
    );
}

/// `AcquireOptions::lock_delay`: a lease that expires (acquired without a keepalive and never
/// renewed) stays held through the delay, as `describe_lease` shows, and the next holder is
/// granted it only after the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_holds_an_expired_lease_back() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let asked_at = Instant::now();
    let options = AcquireOptions::new(Duration::from_millis(300))
        .lock_delay(Duration::from_millis(1_500))
        .holder("paused");
    let grant = client
        .acquire_once("delayed", &options)
        .await
        .unwrap()
        .expect("granted");
    tokio::time::sleep(Duration::from_millis(600).saturating_sub(asked_at.elapsed())).await;

    let description = client.describe_lease("delayed").await.unwrap();
    assert_eq!(description.limit, 1, "{description:?}");
    let [holder] = description.holders.as_slice() else {
        panic!("expected the expired holder in its lock-delay: {description:?}");
    };
    assert_eq!(
        (holder.holder.as_str(), holder.fencing_token),
        ("paused", grant.fencing_token)
    );
    let remaining = holder.remaining.unwrap();
    assert!(
        remaining > Duration::ZERO && remaining <= Duration::from_millis(1_500),
        "{remaining:?}"
    );

    let next = must_hold_with(
        &client,
        "delayed",
        AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(10)),
    )
    .await;
    // The first lease expired no earlier than 300 ms after it was asked for.
    let waited = asked_at.elapsed();
    assert!(
        waited >= Duration::from_millis(1_800),
        "granted after {waited:?}"
    );
    assert!(next.fencing_token() > grant.fencing_token);
    assert!(next.release().await.unwrap());
}
