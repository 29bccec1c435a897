//! Watch: the events of each change in order, EXPIRED at the TTL, one event per permit, a
//! snapshot for a watcher that does not read, a resync after a Redis restart, and the end of the
//! stream on shutdown.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use crate::common::*;
use crate::watch_admin::{Client, Events, SOON, expires_at_ms, grant, lost_reason, request};
use leased::proto::{AcquireRequest, Granted, WatchEvent, renew_response, watch_event::Cause};
use tokio_stream::StreamExt;
use tonic::{Code, transport::Endpoint};

on_both_stores!(
    watch_sees_every_change_in_order,
    expired_comes_at_the_ttl_and_renewals_are_not_events,
    counting_lease_has_one_event_per_permit,
    a_watcher_that_does_not_read_gets_a_snapshot_instead_of_what_it_missed,
);

/// Guarantee 12's target: EXPIRED reaches a watcher within 50 ms of the lease's `expires_at`.
/// The median over [`EXPIRY_ROUNDS`] is held to it: a watch that noticed expiries by reading
/// the lease every P ms would be late by about P/2 on average, so polling every 100 ms or slower
/// fails (it measured a median of 204-208 ms), while a few rounds descheduled on a loaded 2-core
/// machine cannot move the median (20 runs on both stores: medians 3-34 ms, rounds 2-500 ms).
const EXPIRY_LATENESS_TARGET_MS: i64 = 50;

/// How late any one EXPIRED event may reach the client: a cap per round, wide for a loaded
/// 2-core machine (one round of 480 took 500 ms there), against an expiry missed altogether
/// (noticed only at the next change).
const EXPIRY_LATENESS_CAP_MS: i64 = 1_000;

/// Expiries timed in [`expired_comes_at_the_ttl_and_renewals_are_not_events`] (the last with a
/// lock-delay): with 12, a watch polling every 250 ms would have to be lucky in 7 of them (each
/// with a chance of about 1 in 5) to pass the median.
const EXPIRY_ROUNDS: usize = 12;

/// How early an EXPIRED event may reach the client: the store's clock and this host's are the
/// same clock, so only rounding to milliseconds.
const EXPIRY_EARLINESS_SLACK_MS: i64 = 5;

/// The next event, which must have `cause`.
async fn expect_event(events: &mut Events, cause: Cause, context: &str) -> WatchEvent {
    let event = next_event_within(events, SOON).await;
    assert_eq!(
        event.cause(),
        cause,
        "{context}: expected {cause:?}, got {event:?}"
    );
    event
}

/// Reads the stream for `duration`, which must bring nothing.
async fn expect_silence(events: &mut Events, duration: Duration, context: &str) {
    if let Ok(next) = tokio::time::timeout(duration, events.next()).await {
        panic!("{context}: expected no event for {duration:?}, got {next:?}");
    }
}

/// The fencing tokens of an event's `holders`.
fn holder_tokens(event: &WatchEvent) -> Vec<u64> {
    event.holders.iter().map(|h| h.fencing_token).collect()
}

fn event_expires_at_ms(event: &WatchEvent) -> i64 {
    timestamp_ms(
        event
            .expires_at
            .as_ref()
            .unwrap_or_else(|| panic!("event without expires_at: {event:?}")),
    )
}

/// Asserts that `event` is about `granted` (the grant's holder, token and expiry).
fn assert_about(event: &WatchEvent, granted: &Granted, holder: &str, name: &str) {
    assert_eq!(event.name, name, "{event:?}");
    assert_eq!(event.holder, holder, "{event:?}");
    assert_eq!(event.fencing_token, granted.fencing_token, "{event:?}");
    assert_eq!(
        event_expires_at_ms(event),
        expires_at_ms(granted),
        "the event carries the grant's expiry: {event:?}"
    );
}

/// Snapshot, then: alpha granted, renewed (no event), released; beta granted and left to expire;
/// gamma granted and revoked. Each event names the grant it is about, the holders after it and
/// the limit; GRANTED tokens increase; no event carries a lease id. The watcher is on replica 0,
/// everything else on replica 1 (on Redis: the events cross replicas).
async fn watch_sees_every_change_in_order(replicas: &Replicas) {
    const NAME: &str = "watch/sequence";
    let mut watcher = replicas.client(0).await;
    let mut client = replicas.client(1).await;
    let mut admin = replicas.admin(1).await;
    let mut events = open_watch(&mut watcher, NAME).await;
    let mut seen = Vec::new();

    let snapshot = expect_event(&mut events, Cause::Snapshot, "first event").await;
    assert_eq!(snapshot.name, NAME);
    assert!(!snapshot.held, "{snapshot:?}");
    assert_eq!(
        (snapshot.fencing_token, snapshot.limit),
        (0, 0),
        "{snapshot:?}"
    );
    assert!(
        snapshot.holders.is_empty() && snapshot.expires_at.is_none(),
        "{snapshot:?}"
    );
    seen.push(snapshot);

    let alpha = grant(&mut client, NAME, "alpha", 30_000).await;
    let granted = expect_event(&mut events, Cause::Granted, "alpha granted").await;
    assert_about(&granted, &alpha, "alpha", NAME);
    assert!(granted.held && granted.limit == 1, "{granted:?}");
    assert_eq!(holder_tokens(&granted), [alpha.fencing_token]);
    seen.push(granted);

    let renewed = renew_once(&mut client, &alpha, 0).await.unwrap();
    assert!(
        matches!(renewed.result, Some(renew_response::Result::Renewed(_))),
        "{renewed:?}"
    );
    expect_silence(&mut events, Duration::from_millis(300), "after a renewal").await;

    assert!(release(&mut client, &alpha).await);
    let released = expect_event(&mut events, Cause::Released, "alpha released").await;
    assert_eq!(released.holder, "alpha", "{released:?}");
    assert_eq!(released.fencing_token, alpha.fencing_token, "{released:?}");
    assert!(!released.held && released.limit == 0, "{released:?}");
    assert!(released.holders.is_empty(), "{released:?}");
    seen.push(released);

    let beta = grant(&mut client, NAME, "beta", 400).await;
    let granted = expect_event(&mut events, Cause::Granted, "beta granted").await;
    assert_about(&granted, &beta, "beta", NAME);
    assert!(beta.fencing_token > alpha.fencing_token);
    seen.push(granted);
    let expired = expect_event(&mut events, Cause::Expired, "beta left to expire").await;
    let lateness = now_unix_ms() - expires_at_ms(&beta);
    println!("EXPIRED reached the watcher {lateness} ms after the expiry");
    assert_about(&expired, &beta, "beta", NAME);
    assert!(!expired.held && expired.holders.is_empty(), "{expired:?}");
    assert!(
        (-EXPIRY_EARLINESS_SLACK_MS..=EXPIRY_LATENESS_CAP_MS).contains(&lateness),
        "EXPIRED came {lateness} ms after the expiry"
    );
    seen.push(expired);

    let gamma = grant(&mut client, NAME, "gamma", 30_000).await;
    let granted = expect_event(&mut events, Cause::Granted, "gamma granted").await;
    assert_about(&granted, &gamma, "gamma", NAME);
    assert!(gamma.fencing_token > beta.fencing_token);
    seen.push(granted);
    let revoked = revoke(
        &mut admin,
        NAME,
        "wedged in a GC pause",
        gamma.fencing_token,
    )
    .await;
    assert!(revoked.revoked, "{revoked:?}");
    let event = expect_event(&mut events, Cause::Revoked, "gamma revoked").await;
    assert_eq!(event.holder, "gamma", "{event:?}");
    assert_eq!(event.fencing_token, gamma.fencing_token, "{event:?}");
    assert_eq!(event.reason, "wedged in a GC pause", "{event:?}");
    assert!(!event.held && event.holders.is_empty(), "{event:?}");
    seen.push(event);
    expect_silence(&mut events, Duration::from_millis(300), "after the revoke").await;

    let causes: Vec<Cause> = seen.iter().map(WatchEvent::cause).collect();
    println!("events: {causes:?}");
    for granted in [&alpha, &beta, &gamma] {
        assert!(
            !seen
                .iter()
                .any(|event| format!("{event:?}").contains(&granted.lease_id)),
            "an event carries a lease id"
        );
    }
}

/// EXPIRED arrives soon after `expires_at`: the median of [`EXPIRY_ROUNDS`] rounds within the
/// 50 ms target, each round within the wide cap (printed); for a lease with a lock-delay at the
/// TTL, long before the delay ends, with `held` false. A lease renewed before each expiry never
/// expires, and its renewals bring no event.
async fn expired_comes_at_the_ttl_and_renewals_are_not_events(replicas: &Replicas) {
    const NAME: &str = "watch/expiry";
    let mut watcher = replicas.client(0).await;
    let mut client = replicas.client(1).await;
    let mut events = open_watch(&mut watcher, NAME).await;
    expect_event(&mut events, Cause::Snapshot, "first event").await;

    let mut latenesses = Vec::new();
    for round in 0..EXPIRY_ROUNDS {
        let lock_delay_ms = if round == EXPIRY_ROUNDS - 1 { 3_000 } else { 0 };
        let granted = must_acquire_request(
            &mut client,
            AcquireRequest {
                lock_delay_ms,
                ..request(NAME, "expiring", 300, 0)
            },
        )
        .await;
        let event = expect_event(&mut events, Cause::Granted, "granted").await;
        assert_eq!(event.fencing_token, granted.fencing_token, "{event:?}");
        let expired = expect_event(&mut events, Cause::Expired, "left to expire").await;
        let lateness = now_unix_ms() - expires_at_ms(&granted);
        assert_eq!(expired.fencing_token, granted.fencing_token, "{expired:?}");
        assert!(!expired.held, "held is false once expired: {expired:?}");
        latenesses.push(lateness);
        if lock_delay_ms > 0 {
            // The lock-delay still runs: Describe shows it taken, the watcher has no more news.
            assert!(describe(&mut client, NAME).await.held);
            expect_silence(&mut events, Duration::from_millis(500), "during the delay").await;
        }
    }
    let mut sorted = latenesses.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    println!(
        "EXPIRED after the expiry, ms (last round with a 3 s lock-delay): {latenesses:?}; \
         median {median} ms (target {EXPIRY_LATENESS_TARGET_MS} ms)"
    );
    for lateness in &latenesses {
        assert!(
            (-EXPIRY_EARLINESS_SLACK_MS..=EXPIRY_LATENESS_CAP_MS).contains(lateness),
            "EXPIRED came {lateness} ms after the expiry: {latenesses:?}"
        );
    }
    assert!(
        median <= EXPIRY_LATENESS_TARGET_MS,
        "EXPIRED came a median {median} ms after the expiry, past the {EXPIRY_LATENESS_TARGET_MS} \
         ms target: {latenesses:?}"
    );

    // Renewed every 150 ms with a 400 ms TTL for 1.5 s: no expiry, no event.
    const RENEWED: &str = "watch/renewed";
    let mut events = open_watch(&mut watcher, RENEWED).await;
    expect_event(&mut events, Cause::Snapshot, "first event").await;
    let granted = grant(&mut client, RENEWED, "renewing", 400).await;
    expect_event(&mut events, Cause::Granted, "granted").await;
    let mut renewals = OpenRenewStream::open(&mut client).await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1_500) {
        let response = renewals.renew(&granted, 0).await.expect("Renew failed");
        assert!(
            matches!(response.result, Some(renew_response::Result::Renewed(_))),
            "{response:?}"
        );
        if let Ok(next) = tokio::time::timeout(Duration::from_millis(150), events.next()).await {
            panic!("an event while the lease was renewed: {next:?}");
        }
    }
    assert!(release(&mut client, &granted).await);
    expect_event(&mut events, Cause::Released, "released after renewals").await;
}

/// A counting lease of 3: one GRANTED per permit (holders growing), a permit revoked by its token
/// (the others stay), one released, one expired, and the rest revoked at once: one REVOKED event
/// per permit, the last with nobody left.
async fn counting_lease_has_one_event_per_permit(replicas: &Replicas) {
    const NAME: &str = "watch/counting";
    let mut watcher = replicas.client(0).await;
    let mut client = replicas.client(1).await;
    let mut admin = replicas.admin(0).await;
    let mut events = open_watch(&mut watcher, NAME).await;
    expect_event(&mut events, Cause::Snapshot, "first event").await;

    let mut permits = Vec::new();
    for index in 1..=3 {
        let holder = format!("p{index}");
        let granted = must_acquire_request(&mut client, request(NAME, &holder, 30_000, 3)).await;
        let event = expect_event(&mut events, Cause::Granted, &holder).await;
        assert_about(&event, &granted, &holder, NAME);
        assert_eq!(event.limit, 3, "{event:?}");
        assert_eq!(event.holders.len(), index, "{event:?}");
        permits.push(granted);
    }
    let tokens: Vec<u64> = permits.iter().map(|p| p.fencing_token).collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "{tokens:?}"
    );

    let revoked = revoke(&mut admin, NAME, "permit two is stuck", tokens[1]).await;
    assert!(
        revoked.revoked && revoked.fencing_token == tokens[1],
        "{revoked:?}"
    );
    let event = expect_event(&mut events, Cause::Revoked, "p2 revoked").await;
    assert_eq!(
        (event.holder.as_str(), event.fencing_token),
        ("p2", tokens[1])
    );
    assert_eq!(event.reason, "permit two is stuck");
    assert!(event.held && event.limit == 3, "{event:?}");
    assert_eq!(holder_tokens(&event), [tokens[0], tokens[2]]);
    let reason = lost_reason(&mut client, &permits[1]).await;
    assert!(
        reason.starts_with("revoked") && reason.contains("permit two is stuck"),
        "{reason}"
    );

    assert!(release(&mut client, &permits[0]).await);
    let event = expect_event(&mut events, Cause::Released, "p1 released").await;
    assert_eq!(event.fencing_token, tokens[0], "{event:?}");
    assert_eq!(holder_tokens(&event), [tokens[2]]);

    let short = must_acquire_request(&mut client, request(NAME, "p4", 300, 3)).await;
    let event = expect_event(&mut events, Cause::Granted, "p4").await;
    assert_eq!(holder_tokens(&event), [tokens[2], short.fencing_token]);
    let event = expect_event(&mut events, Cause::Expired, "p4 left to expire").await;
    assert_eq!(event.fencing_token, short.fencing_token, "{event:?}");
    assert_eq!(holder_tokens(&event), [tokens[2]]);
    assert!(event.held, "{event:?}");

    let p5 = must_acquire_request(&mut client, request(NAME, "p5", 30_000, 3)).await;
    expect_event(&mut events, Cause::Granted, "p5").await;
    let revoked = revoke(&mut admin, NAME, "draining", 0).await;
    assert!(revoked.revoked, "{revoked:?}");
    assert_eq!(
        revoked.fencing_token, p5.fencing_token,
        "the largest revoked"
    );
    let first = expect_event(&mut events, Cause::Revoked, "all revoked").await;
    let second = expect_event(&mut events, Cause::Revoked, "all revoked").await;
    let revoked_tokens: HashSet<u64> = [first.fencing_token, second.fencing_token].into();
    assert_eq!(revoked_tokens, HashSet::from([tokens[2], p5.fencing_token]));
    assert!(first.held && first.holders.len() == 1, "{first:?}");
    assert!(!second.held && second.limit == 0, "{second:?}");
    assert!(second.holders.is_empty() && second.reason == "draining");
    for permit in [&permits[2], &p5] {
        assert!(lost_reason(&mut client, permit).await.contains("draining"));
    }
}

/// A watcher that stops reading (a small HTTP/2 window, so the server cannot push far ahead)
/// while the name is granted and released 300 times: once it reads again it gets what was
/// buffered for it in order, then a SNAPSHOT of the present (nobody holds it) instead of the
/// events it missed, then the next change. A watcher that reads all along gets all 600 events
/// and no snapshot.
async fn a_watcher_that_does_not_read_gets_a_snapshot_instead_of_what_it_missed(
    replicas: &Replicas,
) {
    const NAME: &str = "watch/lagging";
    const CYCLES: usize = 300;
    let slow_channel = Endpoint::from_shared(replicas.endpoint(0))
        .unwrap()
        .initial_stream_window_size(Some(1024))
        .initial_connection_window_size(Some(1024))
        .connect()
        .await
        .expect("cannot connect");
    let mut slow = open_watch(&mut Client::new(slow_channel), NAME).await;
    expect_event(&mut slow, Cause::Snapshot, "slow watcher's first event").await;
    let mut reader = replicas.client(0).await;
    let mut steady = open_watch(&mut reader, NAME).await;
    expect_event(&mut steady, Cause::Snapshot, "steady watcher's first event").await;
    let steady_reader = tokio::spawn(async move {
        let mut causes = Vec::new();
        while causes.len() < 2 * CYCLES {
            causes.push(next_event_within(&mut steady, SOON).await.cause());
        }
        (steady, causes)
    });

    let mut client = replicas.client(1).await;
    let mut last = None;
    for _ in 0..CYCLES {
        let granted = grant(&mut client, NAME, "cycler", 30_000).await;
        assert!(release(&mut client, &granted).await);
        last = Some(granted.fencing_token);
    }
    let (mut steady, causes) = steady_reader.await.expect("the steady watcher panicked");
    assert!(
        causes
            .iter()
            .enumerate()
            .all(|(index, cause)| *cause == [Cause::Granted, Cause::Released][index % 2]),
        "the steady watcher got every event in order"
    );

    let mut buffered = Vec::new();
    let snapshot = loop {
        let event = next_event_within(&mut slow, SOON).await;
        if event.cause() == Cause::Snapshot {
            break event;
        }
        buffered.push(event);
    };
    println!(
        "the slow watcher got {} events, then a snapshot (of {} events in all)",
        buffered.len(),
        2 * CYCLES
    );
    assert!(
        buffered.len() < 2 * CYCLES,
        "the server buffered every event for a watcher that did not read"
    );
    let tokens: Vec<u64> = buffered
        .iter()
        .filter(|event| event.cause() == Cause::Granted)
        .map(|event| event.fencing_token)
        .collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "{tokens:?}"
    );
    assert!(!snapshot.held, "nobody holds it now: {snapshot:?}");

    let next = grant(&mut client, NAME, "after", 30_000).await;
    assert!(Some(next.fencing_token) > last);
    for events in [&mut slow, &mut steady] {
        let event = expect_event(events, Cause::Granted, "after the catch-up").await;
        assert_eq!(event.fencing_token, next.fencing_token, "{event:?}");
    }
}

/// With Redis restarted (empty) under a watcher of a held lease, the watcher gets a snapshot of
/// the truth (nobody holds it) instead of silence, then follows the next grant, whose token is
/// still larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resyncs_after_a_redis_restart() {
    const NAME: &str = "resync/leader";
    let mut redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut client = server.client().await;
    let mut events = open_watch(&mut client, NAME).await;
    expect_event(&mut events, Cause::Snapshot, "first event").await;
    let before = grant(&mut client, NAME, "before", 30_000).await;
    expect_event(&mut events, Cause::Granted, "granted before the restart").await;

    let restarted = Instant::now();
    redis.restart();
    let snapshot = loop {
        let event = next_event_within(&mut events, Duration::from_secs(15)).await;
        println!("after the restart, {:?}: {event:?}", restarted.elapsed());
        assert_ne!(
            event.cause(),
            Cause::Granted,
            "nothing was granted: {event:?}"
        );
        if event.cause() == Cause::Snapshot {
            break event;
        }
    };
    println!("snapshot {:?} after the Redis restart", restarted.elapsed());
    assert!(!snapshot.held, "the data is gone: {snapshot:?}");

    server.wait_serving().await;
    let after = loop {
        match acquire(&mut client, NAME, 30_000, 0).await {
            Ok(Some(granted)) => break granted,
            result => {
                assert!(restarted.elapsed() < Duration::from_secs(20), "{result:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(after.fencing_token > before.fencing_token);
    // The grant may come as GRANTED, or (if the watch had not registered again yet) in a snapshot.
    let event = next_event_within(&mut events, SOON).await;
    println!("after the grant: {event:?}");
    assert!(
        matches!(event.cause(), Cause::Granted | Cause::Snapshot),
        "{event:?}"
    );
    assert!(event.held, "{event:?}");
    assert_eq!(
        event.holders.last().map(|h| h.fencing_token),
        Some(after.fencing_token),
        "{event:?}"
    );
}

/// The Watch stream ends with UNAVAILABLE when the server shuts down; the admin service reports
/// SERVING in health.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_ends_with_unavailable_on_shutdown() {
    let mut server = Leased::start(None).await;
    for service in ["lease.v1.LeaseService", "lease.v1.LeaseAdminService"] {
        assert_eq!(
            server.health_of(service).await,
            Some(tonic_health::pb::health_check_response::ServingStatus::Serving as i32),
            "{service}"
        );
    }
    let mut client = server.client().await;
    let mut events = open_watch(&mut client, "shutdown/watched").await;
    expect_event(&mut events, Cause::Snapshot, "first event").await;
    server.shut_down();
    let end = tokio::time::timeout(SOON, events.next())
        .await
        .expect("the Watch stream did not end");
    match end {
        Some(Err(status)) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        other => panic!("expected UNAVAILABLE, got {other:?}"),
    }
}
