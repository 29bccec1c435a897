//! The Rust client: `LeaseGuard` renewals, loss detection and release on drop, `watch`,
//! `check_token` and `LeaseAdminClient` (list, revoke, with a bearer token), own lease ids (the
//! same id answers the same grant, a retry keeps its place, a give-up leaves nothing held),
//! `ReentrantLease` and `ReadWriteLease`, against a real server on a real Redis; and
//! `examples/guard.rs`, which the README shows (the book's Rust client page includes the file
//! itself).

use std::time::{Duration, Instant};

use crate::common::*;
use leased::{
    client::{
        AcquireOptions, Acquired, ClientError, ConnectOptions, LeaseAdminClient, LeaseClient,
        LeaseDescription, LeaseGuard, LostReason, ReadWriteLease, ReentrantLease, TokenCheck,
        WatchCause, WatchEvent, WatchStream,
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
    let example = include_str!("../../examples/guard.rs");
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(&format!("```rust\n{example}```")),
        "README's Rust client example differs from examples/guard.rs"
    );
    let page = include_str!("../../docs/src/clients/rust.md");
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

/// An own lease id (`AcquireOptions::lease_id`) makes Acquire safe to repeat: the same id is
/// answered the same grant (lease id, token and expiry), by `acquire_once` and by a guarded
/// `acquire`, while anyone else is refused; once released, the id is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_own_lease_id_answers_the_same_grant() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let lease_id = "retried-0123456789abcdef0123456789";
    let options = AcquireOptions::new(Duration::from_secs(30))
        .holder("retrier")
        .lease_id(lease_id);
    let first = client
        .acquire_once("own-id", &options)
        .await
        .unwrap()
        .expect("granted");
    assert_eq!(first.lease_id, lease_id);
    let again = client
        .acquire_once("own-id", &options)
        .await
        .unwrap()
        .expect("the same id is answered its grant");
    assert_eq!(
        (&again.lease_id, again.fencing_token, again.expires_at_ms),
        (&first.lease_id, first.fencing_token, first.expires_at_ms)
    );
    let guard = must_hold_with(&client, "own-id", options.clone()).await;
    assert_eq!(
        (guard.lease_id(), guard.fencing_token()),
        (lease_id, first.fencing_token)
    );
    let description = client.describe_lease("own-id").await.unwrap();
    assert_eq!(description.holders.len(), 1, "{description:?}");
    let other = AcquireOptions::new(Duration::from_secs(30));
    assert!(matches!(
        client.acquire("own-id", other).await.unwrap(),
        Acquired::NotGranted(busy) if busy.fencing_token == first.fencing_token
    ));
    assert!(guard.release().await.unwrap());
    // Released, the id grants nothing for a minute: a new acquisition takes a new id.
    match client.acquire_once("own-id", &options).await {
        Err(ClientError::Status(status)) => {
            assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
            assert!(status.message().starts_with("lease_id"), "{status:?}");
        }
        other => panic!("a released id was answered {other:?}"),
    }
    let fresh = AcquireOptions::new(Duration::from_secs(30));
    let next = client
        .acquire_once("own-id", &fresh)
        .await
        .unwrap()
        .expect("granted anew");
    assert!(next.fencing_token > first.fencing_token);
    assert!(client.release("own-id", &next.lease_id).await.unwrap());
}

/// A waiting `acquire` whose connection breaks (a proxy in front of the server closes every
/// connection for 50 ms) is retried with its lease id and keeps its place in line: when the
/// holder releases, it is granted before the caller who queued behind it on another connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cut_off_is_retried_with_its_id_and_keeps_its_place() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let link = proxy::FaultProxy::start(server.address);
    let direct = LeaseClient::connect(server.endpoint()).await.unwrap();
    let through_link = LeaseClient::connect(format!("http://127.0.0.1:{}", link.port))
        .await
        .unwrap();
    let holder = must_hold(&direct, "kept-place", Duration::from_secs(30)).await;
    let waiter = |client: &LeaseClient, holder: &str| {
        let client = client.clone();
        let options = AcquireOptions::new(Duration::from_secs(30))
            .wait(Duration::from_secs(20))
            .holder(holder);
        tokio::spawn(async move { client.acquire("kept-place", options).await })
    };
    let first = waiter(&through_link, "first");
    wait_until_waiters(&direct, "kept-place", 1).await;
    let second = waiter(&direct, "second");
    wait_until_waiters(&direct, "kept-place", 2).await;

    link.set(proxy::Fault::Cut);
    tokio::time::sleep(Duration::from_millis(50)).await;
    link.set(proxy::Fault::Pass);
    // The retry reconnects: a second connection through the proxy.
    wait_until_async(Duration::from_secs(5), || async {
        link.stats()
            .connections
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 2
    })
    .await;
    wait_until_waiters(&direct, "kept-place", 2).await;
    assert!(
        !first.is_finished(),
        "the cut-off wait ended: {:?}",
        first.await
    );

    assert!(holder.release().await.unwrap());
    let Acquired::Granted(first) = first.await.unwrap().unwrap() else {
        panic!("the retried waiter was not granted");
    };
    let now = direct.describe("kept-place").await.unwrap().expect("held");
    assert_eq!(
        (now.holder.as_str(), now.fencing_token),
        ("first", first.fencing_token()),
        "the caller behind the retried one was granted first"
    );
    assert!(!second.is_finished());
    assert!(first.release().await.unwrap());
    let Acquired::Granted(second) = second.await.unwrap().unwrap() else {
        panic!("the second waiter was not granted");
    };
    assert!(second.release().await.unwrap());
}

/// Waits until `name` has `waiters` callers in line.
async fn wait_until_waiters(client: &LeaseClient, name: &str, waiters: u32) {
    wait_until_async(Duration::from_secs(10), || async {
        client.describe_lease(name).await.unwrap().waiters == waiters
    })
    .await;
}

/// A `ReentrantLease` handle, in its own task: nested `lock()`s answer at once with the same
/// lease and send no Acquire (the server's Acquire count, on its metrics port, stays 1); an inner
/// level's release leaves the lease held (Describe), and only the last level releases it. When
/// the lease is lost (revoked), every level reports the loss, a nested `lock()` is
/// `ClientError::Lost`, and once every level has ended the handle acquires anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_lease_nests_without_a_call_and_the_last_level_releases_it() {
    let redis = RedisServer::start();
    let metrics_port = free_port();
    // Its own process: the metrics registry is per process, and other tests run in this one.
    let server = LeasedProcess::serve()
        .redis(&redis.url())
        .args([
            "--metrics-listen".to_owned(),
            format!("127.0.0.1:{metrics_port}"),
        ])
        .start()
        .await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let acquires = move || {
        let metrics = scrape_metrics(metrics_port);
        metric_sample(
            &metrics,
            "leased_rpc_requests_total{rpc=\"Acquire\",code=\"Ok\"}",
        )
    };
    let options = AcquireOptions::new(Duration::from_secs(3)).holder("nested");
    let lock = ReentrantLease::new(client.clone(), "reentrant", options);
    let observer = client.clone();
    // The handle is `Send`, and so are its futures and guards: it lives in a task of its own.
    let levels = tokio::spawn(async move {
        let outer = lock.lock().await.unwrap().expect("granted");
        assert_eq!(acquires(), 1.0);
        let started = Instant::now();
        let inner = lock.lock().await.unwrap().expect("nested");
        let innermost = lock.lock().await.unwrap().expect("nested");
        let nested_in = started.elapsed();
        assert_eq!(acquires(), 1.0, "a nested lock sent an Acquire");
        println!("two nested locks took {nested_in:?}, with no Acquire");
        for level in [&inner, &innermost] {
            assert_eq!(level.fencing_token(), outer.fencing_token());
            assert_eq!(level.lease_id(), outer.lease_id());
        }
        drop(innermost);
        assert!(inner.release().await.unwrap(), "an inner level: still held");
        let held = observer.describe("reentrant").await.unwrap().expect("held");
        assert_eq!(held.fencing_token, outer.fencing_token());
        let first_token = outer.fencing_token();
        assert!(outer.release().await.unwrap(), "the last level releases");
        assert_eq!(observer.describe("reentrant").await.unwrap(), None);

        // Lost: every level sees it, and nesting into the lost lease fails.
        let outer = lock.lock().await.unwrap().expect("granted again");
        let inner = lock.lock().await.unwrap().expect("nested");
        assert!(outer.fencing_token() > first_token);
        assert_eq!(acquires(), 2.0);
        let revoked = observer.admin().revoke("reentrant", "test", None).await;
        assert_eq!(revoked.unwrap(), Some(outer.fencing_token()));
        for level in [&outer, &inner] {
            let reason = tokio::time::timeout(Duration::from_secs(10), level.lost())
                .await
                .expect("a level did not see the loss");
            assert_eq!(reason, LostReason::Lost("revoked: test".into()));
            assert!(level.is_lost());
        }
        match lock.lock().await {
            Err(ClientError::Lost(reason)) => {
                assert_eq!(reason, LostReason::Lost("revoked: test".into()));
            }
            other => panic!("nesting in a lost lease: {other:?}"),
        }
        let lost_token = outer.fencing_token();
        drop((outer, inner));
        let fresh = lock.lock().await.unwrap().expect("acquired anew");
        assert!(fresh.fencing_token() > lost_token);
        assert_eq!(acquires(), 3.0);
        // Dropped, the last level releases in the background; the handle's next lock waits for
        // that release, so it never queues behind its own grant.
        drop(fresh);
        let after_drop = lock.lock().await.unwrap().expect("granted after the drop");
        assert!(after_drop.release().await.unwrap());
    });
    levels.await.unwrap();
}

/// `ReadWriteLease`: two readers hold the name together (both `shared`, Describe lists both as
/// shared); a writer waits for both, and a reader that comes after the waiting writer is not let
/// in before it; the writer is granted, exclusive, once the second reader releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lease_lets_readers_in_together_and_a_writer_waits_for_both() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let lock = |holder: &str| {
        let options = AcquireOptions::new(Duration::from_secs(30)).holder(holder);
        ReadWriteLease::new(client.clone(), "rw", options)
    };
    let granted = |acquired: Acquired| match acquired {
        Acquired::Granted(guard) => guard,
        Acquired::NotGranted(busy) => panic!("not granted: {busy:?}"),
    };
    let first = granted(lock("r1").read().await.unwrap());
    let second = granted(lock("r2").read().await.unwrap());
    assert!(first.shared() && second.shared());
    assert!(second.fencing_token() > first.fencing_token());
    let description = client.describe_lease("rw").await.unwrap();
    let holders: Vec<(&str, bool)> = description
        .holders
        .iter()
        .map(|h| (h.holder.as_str(), h.shared))
        .collect();
    assert_eq!(holders, [("r1", true), ("r2", true)], "{description:?}");
    assert_eq!(description.limit, 1);

    let writer = tokio::spawn({
        let options = AcquireOptions::new(Duration::from_secs(30))
            .wait(Duration::from_secs(20))
            .holder("w");
        let lock = ReadWriteLease::new(client.clone(), "rw", options);
        async move { lock.write().await }
    });
    wait_until_waiters(&client, "rw", 1).await;
    assert!(matches!(
        lock("late").read().await.unwrap(),
        Acquired::NotGranted(_)
    ));
    assert!(first.release().await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    let second_token = second.fencing_token();
    assert!(second.release().await.unwrap());
    let writer = granted(writer.await.unwrap().unwrap());
    assert!(!writer.shared());
    assert!(writer.fencing_token() > second_token);
    let description = client.describe_lease("rw").await.unwrap();
    let holders: Vec<(&str, bool)> = description
        .holders
        .iter()
        .map(|h| (h.holder.as_str(), h.shared))
        .collect();
    assert_eq!(holders, [("w", false)]);
    assert!(writer.release().await.unwrap());
}

/// A caller that gives up a wait (drops the `acquire` future) at the very moment the holder
/// releases never keeps the lease: the client cancels the call, then releases its own lease id,
/// which ends a `granted` that the server sent before the give-up reached it (the server never
/// releases a grant of a caller's own id by itself), and stops a grant still on its way (a
/// released id grants nothing for a minute). 100 tries, 20 at a time on their own names; a Watch
/// per name tells how each race went, and a Describe of every name afterwards finds no orphan (a
/// grant held by nobody until its TTL, 30 s). At least [`GIVE_UP_RACES_HIT`] tries must have hit
/// the race (the Watch saw the waiter granted after it gave up, then that grant released), or
/// "no orphan" would show nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_a_wait_never_keeps_the_lease() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let holders = LeaseClient::connect(server.endpoint()).await.unwrap();
    let waiters = LeaseClient::connect(server.endpoint()).await.unwrap();
    let mut outcomes: Vec<GiveUpRace> = Vec::new();
    for batch in 0..5 {
        let tries = (0..20).map(|i| {
            let (holders, waiters) = (holders.clone(), waiters.clone());
            give_up_racing_a_release(holders, waiters, batch * 20 + i)
        });
        outcomes.extend(futures::future::join_all(tries).await);
    }
    // A give-up's Release runs in the background: a grant it ends may show for a moment; one it
    // missed would stay for 30 s.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut orphans = Vec::new();
    for i in 0..100 {
        let name = format!("give-up-{i}");
        let description = loop {
            let description = holders.describe_lease(&name).await.unwrap();
            if !description.is_held() || Instant::now() >= deadline {
                break description;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if description.is_held() {
            orphans.push((name, description));
        }
    }
    let count = |wanted: GiveUpRace| outcomes.iter().filter(|o| **o == wanted).count();
    let races_hit = count(GiveUpRace::GrantedAfterGivingUp);
    println!(
        "give-up race, 100 tries: granted after giving up and released by the client \
         {races_hit}, granted after giving up and not seen released {}, gave up before any grant \
         {}, granted before giving up {}; orphans {}",
        count(GiveUpRace::GrantedAfterGivingUpNotReleased),
        count(GiveUpRace::GaveUpFirst),
        count(GiveUpRace::GrantedFirst),
        orphans.len(),
    );
    assert!(
        orphans.is_empty(),
        "held after their waiter gave up: {orphans:?}"
    );
    assert!(
        races_hit >= GIVE_UP_RACES_HIT,
        "only {races_hit} of 100 tries hit the race (granted after giving up, then released): \
         the test no longer shows that a give-up's Release ends a grant that crossed it"
    );
}

/// How many of the 100 give-ups must be granted after giving up and released by the client: 19
/// to 55 were, in 33 runs on a 2-core machine at load averages of 2 to 11 (the fewest at the
/// highest), so 5 cannot fail by chance; a test whose give-ups no longer race the release finds 0.
const GIVE_UP_RACES_HIT: usize = 5;

/// How one try of the give-up race went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GiveUpRace {
    /// The waiter gave up, then was granted the lease and released it by its id: the race hit.
    GrantedAfterGivingUp,
    /// The waiter gave up, then was granted the lease, and the Watch saw no release of that grant.
    GrantedAfterGivingUpNotReleased,
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
    wait_until_waiters(&holders, &name, 1).await;
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
    if granted_first {
        return GiveUpRace::GrantedFirst;
    }
    // Granted to the holder and released; then perhaps granted to the waiter and released (by
    // the client's give-up: nobody else knows the waiter's lease id).
    let (mut waiter_grant, mut waiter_grant_released) = (None, false);
    while let Ok(Some(Ok(event))) =
        tokio::time::timeout(Duration::from_millis(300), events.next()).await
    {
        let Some(grant) = event.grant.as_ref() else {
            continue;
        };
        match event.cause {
            WatchCause::Granted if grant.holder == "gave-up" => {
                waiter_grant = Some(grant.fencing_token);
            }
            WatchCause::Released if waiter_grant == Some(grant.fencing_token) => {
                waiter_grant_released = true;
            }
            _ => {}
        }
    }
    match (waiter_grant, waiter_grant_released) {
        (Some(_), true) => GiveUpRace::GrantedAfterGivingUp,
        (Some(_), false) => GiveUpRace::GrantedAfterGivingUpNotReleased,
        (None, _) => GiveUpRace::GaveUpFirst,
    }
}

/// The server's side of the give-up in lease.proto (Acquire): a caller with its own lease id
/// that gives up cancels the call and then sends Release(name, id), once, and nothing may be left
/// held whichever way the race went. The same race as above over the raw protocol. A waiter that
/// the server woke just as the cancellation came can make its store call after that Release ran:
/// the released id refuses it (before the id was ended on release, 1 to 6 of 100 were left held
/// here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_after_a_cancelled_wait_leaves_nothing_held() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut tries = Vec::new();
    for i in 0..100_u32 {
        let (mut holders, mut waiters) = (server.client().await, server.client().await);
        tries.push(async move {
            let name = format!("one-release-{i}");
            let granted = must_acquire(&mut holders, &name, 30_000).await;
            let lease_id = format!("give-up-{i:04}-0123456789abcdef0123");
            let request = leased::proto::AcquireRequest {
                name: name.clone(),
                holder: "gave-up".into(),
                ttl_ms: 30_000,
                wait_ms: 30_000,
                lease_id: lease_id.clone(),
                ..Default::default()
            };
            let (stream, _) = start_waiting_request(&mut waiters, request).await;
            let give_up_after = Duration::from_micros(u64::from(i % 10) * 300);
            let (released, _) = tokio::join!(release(&mut holders, &granted), async {
                tokio::time::sleep(give_up_after).await;
                drop(stream);
                let release = leased::proto::ReleaseRequest {
                    name: name.clone(),
                    lease_id,
                };
                waiters.release(release).await.unwrap();
            });
            assert!(released);
            name
        });
    }
    let names = futures::future::join_all(tries).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut client = server.client().await;
    let mut orphans = Vec::new();
    for name in names {
        if describe(&mut client, &name).await.held {
            orphans.push(name);
        }
    }
    println!(
        "100 give-ups with one Release each: {} left held",
        orphans.len()
    );
    assert!(
        orphans.is_empty(),
        "held after their waiter gave up: {orphans:?}"
    );
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
