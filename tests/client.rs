//! The Rust client: `LeaseGuard` renewals, loss detection and release on drop, `watch`,
//! `check_token` and `LeaseAdminClient` (list, revoke, with a bearer token), against a real server
//! on a real Redis; and `examples/guard.rs`, which the README shows (the book's Rust client page
//! includes the file itself).

mod common;

use std::time::{Duration, Instant};

use common::*;
use leased::{
    client::{
        AcquireOptions, Acquired, ClientError, ConnectOptions, LeaseAdminClient, LeaseClient,
        LeaseDescription, LeaseGuard, LostReason, TokenCheck, WatchCause, WatchEvent, WatchStream,
    },
    config::ServeConfig,
};
use tokio_stream::StreamExt;

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
/// the holder stops trusting it before anyone else can be granted it. (TTL 3 s, the server
/// stopped 1.5 s after the grant, after the first renewal: the loss is due 2.85 s after that
/// renewal was sent, about 2.35 s after the stop.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_before_expiry_when_the_server_is_unreachable() {
    let redis = RedisServer::start();
    let mut unreachable = Leased::start(Some(redis.url())).await;
    let observer = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(unreachable.endpoint()).await.unwrap();
    let observer_client = LeaseClient::connect(observer.endpoint()).await.unwrap();
    let guard = must_hold(&client, "cut-off", Duration::from_secs(3)).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    unreachable.shut_down();
    let cut_at = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() did not fire");
    println!(
        "server stopped: loss reported {:?} later (TTL 3 s)",
        cut_at.elapsed()
    );
    assert!(matches!(reason, LostReason::Unreachable(_)), "{reason:?}");
    assert!(
        cut_at.elapsed() < Duration::from_millis(3_000),
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

/// `examples/guard.rs` runs against a real server, and the README shows exactly that program (the
/// book's page, docs/src/clients/rust.md, includes the file with mdBook's `{{#include}}`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_example_runs_and_matches_the_readme() {
    let example = include_str!("../examples/guard.rs");
    let readme = include_str!("../README.md");
    assert!(
        readme.contains(&format!("```rust\n{example}```")),
        "README's Rust client example differs from examples/guard.rs"
    );
    let page = include_str!("../docs/src/clients/rust.md");
    assert!(
        page.contains("```rust\n{{#include ../../../examples/guard.rs}}\n```"),
        "the book's Rust client page no longer includes examples/guard.rs"
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

/// The next event of `events` within 10 s; panics if it fails, ends or does not come.
async fn next_event(events: &mut WatchStream) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("no watch event within 10 s")
        .expect("the watch ended")
        .expect("the watch failed")
}

/// `watch`: a snapshot of the free lease, then granted, released, granted, expired (within a
/// wide margin of the TTL), granted and revoked with the operator's reason, each naming its grant,
/// the tokens of grants increasing; the revoked guard's `lost()` says `revoked: <reason>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_every_change_of_holder_in_order() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let mut events = client.watch("watched").await.unwrap();
    let snapshot = next_event(&mut events).await;
    assert_eq!(snapshot.cause, WatchCause::Snapshot);
    assert_eq!(
        (snapshot.name.as_str(), &snapshot.grant, snapshot.held),
        ("watched", &None, false)
    );
    assert_eq!((snapshot.limit, snapshot.current_holder()), (0, None));

    let with_holder = |holder: &str| AcquireOptions::new(Duration::from_secs(30)).holder(holder);
    let first = must_hold_with(&client, "watched", with_holder("first")).await;
    let granted = next_event(&mut events).await;
    assert_eq!(granted.cause, WatchCause::Granted, "{granted:?}");
    let grant = granted
        .grant
        .as_ref()
        .expect("a granted event names its grant");
    assert_eq!(
        (grant.holder.as_str(), grant.fencing_token),
        ("first", first.fencing_token())
    );
    assert!(grant.expires_at_ms.is_some(), "{granted:?}");
    assert!(granted.held && granted.limit == 1, "{granted:?}");
    let holder = granted.current_holder().expect("held");
    assert_eq!(
        (holder.holder.as_str(), holder.fencing_token),
        ("first", first.fencing_token())
    );

    let first_token = first.fencing_token();
    assert!(first.release().await.unwrap());
    let released = next_event(&mut events).await;
    assert_eq!(released.cause, WatchCause::Released, "{released:?}");
    assert_eq!(
        released.grant.as_ref().map(|g| g.fencing_token),
        Some(first_token)
    );
    assert!(!released.held && released.holders.is_empty());

    // Granted without a keepalive: it expires at its TTL.
    let asked_at = Instant::now();
    let lapsing = client
        .acquire_once(
            "watched",
            &AcquireOptions::new(Duration::from_millis(500)).holder("lapsing"),
        )
        .await
        .unwrap()
        .expect("granted");
    let granted = next_event(&mut events).await;
    assert_eq!(
        (
            granted.cause,
            granted.grant.as_ref().map(|g| g.fencing_token)
        ),
        (WatchCause::Granted, Some(lapsing.fencing_token))
    );
    assert!(lapsing.fencing_token > first_token);
    let expired = next_event(&mut events).await;
    let after = asked_at.elapsed();
    assert_eq!(expired.cause, WatchCause::Expired, "{expired:?}");
    assert_eq!(
        expired.grant.as_ref().map(|g| g.fencing_token),
        Some(lapsing.fencing_token)
    );
    assert!(!expired.held, "{expired:?}");
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_secs(5),
        "expired after {after:?}"
    );

    // A short TTL: the guard renews every second, and learns of the revoke at its next renewal.
    let last = must_hold_with(
        &client,
        "watched",
        AcquireOptions::new(Duration::from_secs(3)).holder("last"),
    )
    .await;
    let granted = next_event(&mut events).await;
    assert_eq!(
        granted.grant.as_ref().map(|g| g.fencing_token),
        Some(last.fencing_token())
    );
    assert!(last.fencing_token() > lapsing.fencing_token);
    let revoked = client
        .admin()
        .revoke("watched", "wedged (INC-1)", None)
        .await
        .unwrap();
    assert_eq!(revoked, Some(last.fencing_token()));
    let event = next_event(&mut events).await;
    assert_eq!(event.cause, WatchCause::Revoked, "{event:?}");
    assert_eq!(
        (
            event.grant.as_ref().map(|g| g.fencing_token),
            event.reason.as_str(),
            event.held
        ),
        (Some(last.fencing_token()), "wedged (INC-1)", false)
    );
    let reason = tokio::time::timeout(Duration::from_secs(10), last.lost())
        .await
        .expect("the revoked guard's lost() did not fire");
    assert_eq!(reason, LostReason::Lost("revoked: wedged (INC-1)".into()));
}

/// `watch` of a name that is not one ends with INVALID_ARGUMENT, as the call's error or the
/// stream's only item; a watch of a stopped server ends with an error after its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_says_why_it_ended() {
    let redis = RedisServer::start();
    let mut server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let refused = match client.watch("no spaces allowed").await {
        Err(error) => error,
        Ok(mut events) => {
            let error = events.next().await.expect("an item").unwrap_err();
            assert!(
                events.next().await.is_none(),
                "the stream ends after its error"
            );
            error
        }
    };
    let ClientError::Status(status) = &refused else {
        panic!("expected a status, got {refused:?}");
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("name"), "{status:?}");

    let mut events = client.watch("stopping").await.unwrap();
    assert_eq!(next_event(&mut events).await.cause, WatchCause::Snapshot);
    server.shut_down();
    let ended = tokio::time::timeout(Duration::from_secs(15), events.next())
        .await
        .expect("the watch outlived the server's drain")
        .expect("the last item says why the watch ended");
    assert!(ended.is_err(), "{ended:?}");
    assert!(events.next().await.is_none());
}

/// `check_token` is current for the holder's token only, and no longer after the release; token
/// 0 is refused naming `fencing_token`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_token_is_current_only_while_its_grant_holds() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let guard = must_hold(&client, "checked", Duration::from_secs(30)).await;
    let token = guard.fencing_token();
    assert_eq!(
        client.check_token("checked", token).await.unwrap(),
        TokenCheck {
            current: true,
            current_token: token,
            held: true
        }
    );
    assert_eq!(
        client.check_token("checked", token - 1).await.unwrap(),
        TokenCheck {
            current: false,
            current_token: token,
            held: true
        }
    );
    assert!(guard.release().await.unwrap());
    assert_eq!(
        client.check_token("checked", token).await.unwrap(),
        TokenCheck {
            current: false,
            current_token: 0,
            held: false
        }
    );
    match client.check_token("checked", 0).await {
        Err(ClientError::Status(status)) => {
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().contains("fencing_token"), "{status:?}");
        }
        other => panic!("token 0: expected INVALID_ARGUMENT, got {other:?}"),
    }
}

/// `LeaseAdminClient`: `list_all` pages through every lease held under a prefix (and nothing
/// else) exactly once, with its holders; `list_page` stops at the page size with a token;
/// `revoke` with a stale token revokes nothing, with the holder's token it ends that lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_lists_every_lease_once_and_revokes_only_the_grant_named() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let options = AcquireOptions::new(Duration::from_secs(60)).holder("lister");
    let mut tokens = std::collections::BTreeMap::new();
    for name in (0..25)
        .map(|i| format!("team/job-{i:02}"))
        .chain(["other/job".into(), "teams".into()])
    {
        let grant = client
            .acquire_once(&name, &options)
            .await
            .unwrap()
            .expect("granted");
        tokens.insert(name, grant.fencing_token);
    }
    // A short TTL: the guards renew every second, and learn of the revoke at the next renewal.
    let permits = AcquireOptions::new(Duration::from_secs(3)).limit(3);
    let pool = [
        must_hold_with(&client, "team/pool", permits.clone().holder("p1")).await,
        must_hold_with(&client, "team/pool", permits.holder("p2")).await,
    ];

    let admin = LeaseAdminClient::connect(server.endpoint()).await.unwrap();
    let listed = admin.list_all("team/", 10).await.unwrap();
    let mut names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
    names.sort();
    let mut expected: Vec<&str> = tokens
        .keys()
        .map(String::as_str)
        .filter(|n| n.starts_with("team/"))
        .chain(["team/pool"])
        .collect();
    expected.sort();
    assert_eq!(names, expected, "each lease under team/ exactly once");
    for lease in &listed {
        if lease.name == "team/pool" {
            let holders: Vec<(&str, u64)> = lease
                .holders
                .iter()
                .map(|h| (h.holder.as_str(), h.fencing_token))
                .collect();
            assert_eq!(
                holders,
                [
                    ("p1", pool[0].fencing_token()),
                    ("p2", pool[1].fencing_token())
                ]
            );
            assert_eq!(lease.limit, 3);
        } else {
            let [holder] = lease.holders.as_slice() else {
                panic!("{lease:?}");
            };
            assert_eq!(
                (holder.holder.as_str(), holder.fencing_token, lease.limit),
                ("lister", tokens[&lease.name], 1)
            );
            assert!(holder.remaining.unwrap() > Duration::ZERO);
        }
    }
    let page = client.admin().list_page("team/", 10, None).await.unwrap();
    assert!(page.leases.len() <= 10, "{page:?}");
    assert!(page.next_page_token.is_some(), "26 leases in pages of 10");
    assert_eq!(admin.list_all("nothing/", 0).await.unwrap(), []);

    // A stale token revokes nothing; the holder's token ends its lease, and only that.
    let token = tokens["team/job-00"];
    assert_eq!(
        admin
            .revoke("team/job-00", "stale", Some(token - 1))
            .await
            .unwrap(),
        None
    );
    assert!(client.describe("team/job-00").await.unwrap().is_some());
    assert_eq!(
        admin
            .revoke("team/job-00", "maintenance", Some(token))
            .await
            .unwrap(),
        Some(token)
    );
    assert_eq!(client.describe("team/job-00").await.unwrap(), None);
    assert_eq!(
        admin.revoke("team/job-00", "again", None).await.unwrap(),
        None
    );
    // Every permit of a counting lease, with the largest token.
    assert_eq!(
        admin.revoke("team/pool", "drain", None).await.unwrap(),
        Some(pool[1].fencing_token())
    );
    for guard in &pool {
        let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("a revoked permit's guard did not report lost");
        assert_eq!(reason, LostReason::Lost("revoked: drain".into()));
    }
    assert_eq!(admin.list_all("team/", 0).await.unwrap().len(), 24);
}

/// The admin client sends its bearer token like `LeaseClient`: a token with `list` lists under
/// its prefix, without `revoke` it is PERMISSION_DENIED, and no token is UNAUTHENTICATED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_client_sends_its_bearer_token() {
    const LISTER: &str = "lister-token-0123456789";
    let redis = RedisServer::start();
    let tokens = std::env::temp_dir().join(format!(
        "leased-client-tokens-{}-{}.json",
        std::process::id(),
        free_port()
    ));
    let file = serde_json::json!({ "tokens": [
        { "client": "lister", "token": LISTER, "prefixes": ["ops/"],
          "operations": ["acquire", "list", "watch", "check"] },
    ] });
    std::fs::write(&tokens, file.to_string()).unwrap();
    let config = ServeConfig::from_args([
        "--redis-url".to_owned(),
        redis.url(),
        "--auth-tokens".to_owned(),
        tokens.display().to_string(),
    ])
    .unwrap();
    let server = Leased::start_with(config).await;
    let with_token = ConnectOptions {
        token: Some(LISTER.into()),
        ..ConnectOptions::default()
    };
    let client = LeaseClient::connect_with(server.endpoint(), &with_token)
        .await
        .unwrap();
    let grant = client
        .acquire_once("ops/a", &AcquireOptions::new(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("granted");
    let admin = LeaseAdminClient::connect_with(server.endpoint(), &with_token)
        .await
        .unwrap();
    let listed = admin.list_all("ops/", 0).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(client.admin().list_all("ops/", 0).await.is_ok());
    assert!(
        client
            .check_token("ops/a", grant.fencing_token)
            .await
            .unwrap()
            .current
    );
    let mut events = client.watch("ops/a").await.unwrap();
    assert_eq!(next_event(&mut events).await.cause, WatchCause::Snapshot);

    let code = |result: Result<Option<u64>, ClientError>| match result {
        Err(ClientError::Status(status)) => status.code(),
        other => panic!("expected an error status, got {other:?}"),
    };
    assert_eq!(
        code(admin.revoke("ops/a", "not allowed", None).await),
        tonic::Code::PermissionDenied
    );
    let anonymous = LeaseAdminClient::connect(server.endpoint()).await.unwrap();
    assert_eq!(
        code(anonymous.revoke("ops/a", "who?", None).await),
        tonic::Code::Unauthenticated
    );
    let _ = std::fs::remove_file(&tokens);
}

/// A caller that gives up a wait (drops the `acquire` future) at the very moment the holder
/// releases never keeps the lease: a `granted` the server sent before the give-up reached it is
/// released by the client within its grace, instead of being held by nobody until its TTL
/// (30 s). 100 tries, 20 at a time on their own names; a Watch per name tells how the race went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_a_wait_never_keeps_the_lease() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let holders = LeaseClient::connect(server.endpoint()).await.unwrap();
    let waiters = LeaseClient::connect(server.endpoint()).await.unwrap();
    let mut outcomes = Vec::new();
    for batch in 0..5 {
        let tries = (0..20).map(|i| {
            let (holders, waiters) = (holders.clone(), waiters.clone());
            give_up_racing_a_release(holders, waiters, batch * 20 + i)
        });
        outcomes.extend(futures::future::join_all(tries).await);
    }
    let count = |wanted: GiveUpRace| outcomes.iter().filter(|o| **o == wanted).count();
    println!(
        "give-up race, 100 tries: granted after giving up and released by the client {}, \
         gave up before any grant {}, granted before giving up {}",
        count(GiveUpRace::GrantedAfterGivingUp),
        count(GiveUpRace::GaveUpFirst),
        count(GiveUpRace::GrantedFirst),
    );
}

/// How one try of the give-up race went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GiveUpRace {
    /// The waiter gave up, then was granted the lease (during the grace) and released it.
    GrantedAfterGivingUp,
    /// The waiter gave up and was never granted.
    GaveUpFirst,
    /// The grant reached the waiter before it gave up: it held the lease (and released it).
    GrantedFirst,
}

/// One try of the race above.
async fn give_up_racing_a_release(
    holders: LeaseClient,
    waiters: LeaseClient,
    i: u32,
) -> GiveUpRace {
    let name = format!("give-up-{i}");
    let mut events = holders.watch(&name).await.unwrap();
    assert_eq!(next_event(&mut events).await.cause, WatchCause::Snapshot);
    let holder = must_hold(&holders, &name, Duration::from_secs(30)).await;
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let options = AcquireOptions::new(Duration::from_secs(30))
                .wait(Duration::from_secs(30))
                .holder("gave-up");
            waiters.acquire(&name, options).await
        }
    });
    wait_until_async(Duration::from_secs(10), || async {
        holders.describe_lease(&name).await.unwrap().waiters == 1
    })
    .await;
    // The give-up lands anywhere from before the release to after the grant left the server.
    let give_up_after = Duration::from_micros(u64::from(i % 10) * 300);
    let (released, _) = tokio::join!(holder.release(), async {
        tokio::time::sleep(give_up_after).await;
        waiter.abort();
    });
    assert!(released.unwrap());
    let granted_first = match waiter.await {
        Err(gave_up) if gave_up.is_cancelled() => false,
        // The grant won the race: the waiter held the lease when it would have given up.
        Ok(Ok(Acquired::Granted(guard))) => {
            assert!(guard.release().await.unwrap());
            true
        }
        other => panic!("try {i}: unexpected end of the wait: {other:?}"),
    };
    tokio::time::sleep(leased::client::GIVE_UP_GRACE + Duration::from_secs(1)).await;
    let description = holders.describe_lease(&name).await.unwrap();
    assert!(
        !description.is_held(),
        "try {i}: {name} is still held after the waiter gave up: {description:?}"
    );
    if granted_first {
        return GiveUpRace::GrantedFirst;
    }
    // Granted to the holder and released; then perhaps granted to the waiter and released.
    let mut waiter_granted = false;
    while let Ok(Some(Ok(event))) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        let holder = event.grant.as_ref().map(|grant| grant.holder.as_str());
        if event.cause == WatchCause::Granted && holder == Some("gave-up") {
            waiter_granted = true;
        }
    }
    if waiter_granted {
        GiveUpRace::GrantedAfterGivingUp
    } else {
        GiveUpRace::GaveUpFirst
    }
}

/// Polls `condition` every 5 ms until it holds; panics after `timeout`.
async fn wait_until_async<F: std::future::Future<Output = bool>>(
    timeout: Duration,
    mut condition: impl FnMut() -> F,
) {
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "condition not met within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
