//! Behaviour that only the Redis store has: several `leased` processes on one Redis, Redis
//! faults (killed, restarted, paused, flushed), tokens across data loss, the classic-lock takeover,
//! the drain on SIGTERM of the real binary; and, on the store itself, what the scripts publish for
//! watchers, what a revoke leaves in Redis, and how List scans the keyspace.

mod common;

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use common::*;
use fred::prelude::{Builder, ClientLike, Config, EventInterface, PubsubInterface};
use leased::{
    error::Error,
    lease::{
        AcquireOutcome, Grant, LeaseGone, LeaseId, LeaseName, LeaseStore, RenewOutcome, Revoked,
        StoreEvents, ValidatedAcquire,
        limits::{parse_list_prefix, parse_name},
    },
    proto::{ListRequest, acquire_response},
    store::{RedisOptions, RedisStore},
};
use tokio::sync::broadcast;
use tokio_stream::StreamExt;
use tonic::Code;

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

/// A waiter on one `leased` process is granted within milliseconds of a release made through a
/// second `leased` process (the real binary) on the same Redis: the wake-up crosses replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_on_one_replica_wakes_on_release_through_another() {
    let redis = RedisServer::start();
    let replica_a = Leased::start(Some(redis.url())).await;
    let replica_b = LeasedProcess::serve().redis(&redis.url()).start().await;
    let mut client_a = replica_a.client().await;
    let mut client_b = replica_b.client().await;

    let mut handoffs = Vec::new();
    for _ in 0..10 {
        let held = must_acquire(&mut client_b, "cross-replica", 30_000).await;
        let (mut stream, _) = start_waiting(&mut client_a, "cross-replica", "on-a", 20_000).await;
        assert!(release(&mut client_b, &held).await);
        let released_at = Instant::now();
        let terminal = next_result(&mut stream).await;
        handoffs.push(released_at.elapsed());
        let acquire_response::Result::Granted(granted) = terminal else {
            panic!("expected granted, got {terminal:?}");
        };
        assert!(release(&mut client_a, &granted).await);
    }
    handoffs.sort();
    println!(
        "cross-replica handoff: median {:?}, max {:?}",
        handoffs[5], handoffs[9]
    );
    assert!(handoffs[5] < Duration::from_millis(250), "{handoffs:?}");
}

/// Redis killed: calls fail with UNAVAILABLE within the timeout (never a grant), health goes
/// NOT_SERVING; Redis restarted empty: the server recovers by itself and tokens keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_then_restarted() {
    let mut redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut client = server.client().await;
    let before = must_acquire(&mut client, "survivor", 60_000).await;

    redis.kill();
    let start = Instant::now();
    let status = acquire(&mut client, "during-outage", 5_000, 0)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    let status = client
        .describe(leased::proto::DescribeRequest {
            name: "survivor".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    server.wait_health(NOT_SERVING).await;
    assert_eq!(
        server.health_of(leased::server::LIVENESS_SERVICE).await,
        Some(SERVING),
        "liveness ignores Redis, so Kubernetes does not restart pods for a Redis outage"
    );

    redis.restart();
    server.wait_serving().await;
    let after = must_acquire(&mut client, "survivor", 5_000).await;
    assert!(
        after.fencing_token > before.fencing_token,
        "token went backwards after Redis lost its data: {} then {}",
        before.fencing_token,
        after.fencing_token
    );
}

/// Redis paused with SIGSTOP: calls answer UNAVAILABLE within the timeout, a busy lease is never
/// granted to someone else, and after SIGCONT everything answers again. A grant that Redis made
/// after the caller had been told UNAVAILABLE is released by the server in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_with_sigstop() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut holder = server.client().await;
    let mut other = server.client().await;
    let held = must_acquire(&mut holder, "held-through-pause", 60_000).await;

    redis.pause();
    let start = Instant::now();
    let status = acquire(&mut other, "held-through-pause", 5_000, 0)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    let status = acquire(&mut other, "asked-during-pause", 60_000, 0)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    server.wait_health(NOT_SERVING).await;
    redis.resume();
    server.wait_serving().await;

    assert_eq!(
        acquire(&mut other, "held-through-pause", 5_000, 0)
            .await
            .unwrap(),
        None,
        "the lease held before the pause is still busy"
    );
    let renewed = renew_once(&mut holder, &held, 0).await.unwrap();
    assert!(
        matches!(
            renewed.result,
            Some(leased::proto::renew_response::Result::Renewed(_))
        ),
        "{renewed:?}"
    );
    // Redis ran the queued acquire of "asked-during-pause" when it resumed; nobody was told of
    // that grant, so the server releases it rather than leave it held for its 60 s TTL.
    let start = Instant::now();
    while describe(&mut other, "asked-during-pause").await.held {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "unconfirmed grant never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    must_acquire(&mut other, "asked-during-pause", 5_000).await;
}

/// Tokens keep increasing after FLUSHALL, whether the lease was released or still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_after_flushall() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut client = server.client().await;
    let mut previous = 0;
    for round in 0..5 {
        let granted = must_acquire(&mut client, "flushed", 60_000).await;
        assert!(granted.fencing_token > previous, "round {round}");
        previous = granted.fencing_token;
        if round % 2 == 0 {
            assert!(release(&mut client, &granted).await);
        }
        assert_eq!(redis.command(&["FLUSHALL"]), "+OK");
    }
}

/// Waiters never hang when Redis loses the queue: after FLUSHALL (the lease and the queue gone),
/// each waiter notices within its replica's next queue read, joins again, and is granted in turn
/// with a larger token; a later waiter is never granted while the lease is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_join_again_after_the_queue_is_flushed() {
    let redis = RedisServer::start();
    let replica_a = Leased::start(Some(redis.url())).await;
    let replica_b = Leased::start(Some(redis.url())).await;
    let mut holder = replica_a.client().await;
    let held = must_acquire(&mut holder, "flushed-queue", 60_000).await;
    let mut clients = [replica_a.client().await, replica_b.client().await];
    let mut streams = Vec::new();
    for (client, who) in clients.iter_mut().zip(["a", "b"]) {
        streams.push(start_waiting(client, "flushed-queue", who, 30_000).await.0);
    }

    let flushed_at = Instant::now();
    assert_eq!(redis.command(&["FLUSHALL"]), "+OK");
    // One of them gets the now free lease soon; the other keeps waiting behind it.
    let [stream_a, stream_b] = &mut streams[..] else {
        unreachable!()
    };
    let (first, granted) = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::select! {
            granted = granted_after_waiting(stream_a) => (0, granted),
            granted = granted_after_waiting(stream_b) => (1, granted),
        }
    })
    .await
    .expect("no waiter was granted within 5 s of FLUSHALL");
    println!(
        "waiter {first} granted {:?} after FLUSHALL",
        flushed_at.elapsed()
    );
    assert!(granted.fencing_token > held.fencing_token);

    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(release(&mut clients[first], &granted).await);
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        granted_after_waiting(&mut streams[1 - first]),
    )
    .await
    .expect("the second waiter hangs after FLUSHALL");
    assert!(second.fencing_token > granted.fencing_token);
}

/// Reads an Acquire stream past its `waiting` messages to the grant.
async fn granted_after_waiting(
    stream: &mut tonic::Streaming<leased::proto::AcquireResponse>,
) -> leased::proto::Granted {
    match read_to_terminal(stream, Duration::from_secs(30)).await.1 {
        acquire_response::Result::Granted(granted) => granted,
        other => panic!("expected granted, got {other:?}"),
    }
}

/// Tokens keep increasing across a Redis restart without persistence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_after_redis_restart() {
    let mut redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut client = server.client().await;
    let mut previous = 0;
    for _ in 0..3 {
        for _ in 0..3 {
            let granted = must_acquire(&mut client, "restarted", 60_000).await;
            assert!(granted.fencing_token > previous);
            previous = granted.fencing_token;
            assert!(release(&mut client, &granted).await);
        }
        redis.restart();
        server.wait_serving().await;
    }
}

/// A classic SETNX lock left by a crashed client (an expiry timestamp in the past, no TTL) is
/// taken over; one whose timestamp is still in the future is busy until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_timestamp_key_without_ttl_is_taken_over() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut client = server.client().await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;

    let stale = (now_ms - 10_000).to_string();
    assert_eq!(redis.command(&["SET", "leased:{legacy}", &stale]), "+OK");
    let granted = must_acquire(&mut client, "legacy", 5_000).await;
    let pttl = pttl_ms(&redis, "leased:{legacy}");
    assert!(
        (1..=5_000).contains(&pttl),
        "the taken-over key has the new TTL: {pttl}"
    );
    assert!(release(&mut client, &granted).await);

    let future = (now_ms + 60_000).to_string();
    assert_eq!(redis.command(&["SET", "leased:{legacy}", &future]), "+OK");
    let messages = acquire_all(&mut client, "legacy", "x", 5_000, 0)
        .await
        .unwrap();
    let [acquire_response::Result::NotGranted(busy)] = messages.as_slice() else {
        panic!("{messages:?}");
    };
    assert!((50_000..=60_000).contains(&busy.remaining_ms), "{busy:?}");
    assert!(describe(&mut client, "legacy").await.held);
}

/// A held exclusive lease is two keys, the lease key and the owner hash (which also holds the
/// name's fencing counter). The hash outlives the lease: a release leaves the counter alone and
/// the next grant's token is larger; an expired grant's fields stay behind but count only while
/// the lease key holds the grant's expiry, so a classic SETNX lock written later is nobody's, and
/// the next grant does not inherit the old lock-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_hash_keeps_the_counter_and_only_a_live_grants_fields() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let ttl = Duration::from_secs(60);

    let first = grant(&store, &request("layout", "alice", ttl, 1, Duration::ZERO)).await;
    let keys = redis.command(&["KEYS", "leased:{layout}*"]);
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort();
    assert_eq!(keys, ["leased:{layout}", "leased:{layout}:owner"]);
    let owner_ttl_ms = pttl_ms(&redis, "leased:{layout}:owner");
    assert!(owner_ttl_ms > 6 * 24 * 3_600_000, "{owner_ttl_ms} ms");

    assert!(
        store
            .release(&name("layout"), &first.lease_id)
            .await
            .unwrap()
    );
    let left = redis.command(&["HGETALL", "leased:{layout}:owner"]);
    assert_eq!(left, format!("t\n{}", first.fencing_token));
    let second = grant(&store, &request("layout", "bob", ttl, 1, Duration::ZERO)).await;
    assert!(second.fencing_token > first.fencing_token);

    let delayed = request(
        "stale",
        "carol",
        Duration::from_millis(200),
        1,
        Duration::from_millis(300),
    );
    let expired = grant(&store, &delayed).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let later = (now_unix_ms() + 60_000).to_string();
    assert_eq!(redis.command(&["SET", "leased:{stale}", &later]), "+OK");
    let described = store.describe(&name("stale")).await.unwrap();
    let [classic] = described.holders.as_slice() else {
        panic!("{described:?}");
    };
    assert_eq!((classic.holder.as_str(), classic.fencing_token), ("", 0));
    assert_eq!(classic.expiry.map(|expiry| expiry.lock_delay_ms), Some(0));

    redis.command(&["DEL", "leased:{stale}"]);
    let next = grant(&store, &request("stale", "dave", ttl, 1, Duration::ZERO)).await;
    assert!(next.fencing_token > expired.fencing_token);
    let described = store.describe(&name("stale")).await.unwrap();
    let [dave] = described.holders.as_slice() else {
        panic!("{described:?}");
    };
    assert_eq!(
        (dave.holder.as_str(), dave.fencing_token),
        ("dave", next.fencing_token)
    );
    assert_eq!(dave.expiry.map(|expiry| expiry.lock_delay_ms), Some(0));
    let delay = redis.command(&["HEXISTS", "leased:{stale}:owner", "d"]);
    assert_eq!(delay, ":0");
}

/// A counting lease counts its tokens in its holders hash while it holds permits (its grants do
/// not write the owner hash, so a name's permits cost two keys), and hands the counter to the
/// owner hash when its last permit is released: tokens keep increasing from an exclusive lease to
/// a counting one and back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counting_lease_hands_its_counter_to_the_owner_hash() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let ttl = Duration::from_secs(60);
    let exclusive = grant(&store, &request("pool", "solo", ttl, 1, Duration::ZERO)).await;
    assert!(
        store
            .release(&name("pool"), &exclusive.lease_id)
            .await
            .unwrap()
    );

    let first = grant(&store, &request("pool", "a", ttl, 3, Duration::ZERO)).await;
    let second = grant(&store, &request("pool", "b", ttl, 3, Duration::ZERO)).await;
    assert!(exclusive.fencing_token < first.fencing_token);
    assert!(first.fencing_token < second.fencing_token);
    let counted = redis.command(&["HGET", "leased:{pool}:holders", "t"]);
    assert_eq!(counted, second.fencing_token.to_string());

    for permit in [&first, &second] {
        assert!(
            store
                .release(&name("pool"), &permit.lease_id)
                .await
                .unwrap()
        );
    }
    assert_eq!(redis.command(&["EXISTS", "leased:{pool}:holders"]), ":0");
    let kept = redis.command(&["HGET", "leased:{pool}:owner", "t"]);
    assert_eq!(kept, second.fencing_token.to_string());
    let owner_ttl_ms = pttl_ms(&redis, "leased:{pool}:owner");
    assert!(owner_ttl_ms > 6 * 24 * 3_600_000, "{owner_ttl_ms} ms");

    let after = grant(&store, &request("pool", "solo", ttl, 1, Duration::ZERO)).await;
    assert!(second.fencing_token < after.fencing_token);
}

/// SIGTERM to the real binary: health turns NOT_SERVING, waiters and Renew streams end with
/// UNAVAILABLE, and the process exits 0 within the drain grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_open_streams_and_exits_zero() {
    let redis = RedisServer::start();
    let mut server = LeasedProcess::serve()
        .redis(&redis.url())
        .args(["--drain-grace", "5s"])
        .start()
        .await;
    let mut client = server.client().await;
    let held = must_acquire(&mut client, "draining", 60_000).await;

    let (mut waiter, _) = start_waiting(&mut client, "draining", "waiter", 60_000).await;
    let mut renew_stream = OpenRenewStream::open(&mut client).await;
    assert!(renew_stream.renew(&held, 0).await.is_ok());

    let pid = server.pid();
    let signalled_at = Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );

    let status = waiter.next().await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let status = renew_stream.responses.next().await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");

    let exit = loop {
        if let Some(exit) = server.try_wait() {
            break exit;
        }
        assert!(
            signalled_at.elapsed() < Duration::from_secs(8),
            "did not exit within the grace"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "exit status {exit:?}");
    drop(renew_stream);
}

/// A lease key that something other than leased wrote with another type makes the script fail:
/// INTERNAL (retrying will not help), not UNAVAILABLE, and the server keeps serving other names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_key_of_another_type_is_internal_not_unavailable() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut client = server.client().await;
    assert_eq!(
        redis.command(&["HSET", "leased:{foreign}", "field", "value"]),
        ":1"
    );

    let acquired = acquire(&mut client, "foreign", 5_000, 0).await.unwrap_err();
    assert_eq!(acquired.code(), tonic::Code::Internal, "{acquired:?}");
    let described = client
        .describe(leased::proto::DescribeRequest {
            name: "foreign".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(described.code(), tonic::Code::Internal, "{described:?}");
    must_acquire(&mut client, "domestic", 5_000).await;
}

/// A [`RedisStore`] on `url` with `key_prefix`, once it answers (and its subscriber is connected).
async fn store_on(url: &str, key_prefix: &str) -> Arc<RedisStore> {
    let store = RedisStore::connect(
        &RedisOptions {
            url: url.to_owned(),
            command_timeout: Duration::from_secs(2),
            pool_size: 2,
            key_prefix: key_prefix.to_owned(),
            max_waiters_per_name: 1_000,
        },
        StoreEvents::new(),
    )
    .unwrap();
    let start = Instant::now();
    while store.ping().await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the store never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Arc::new(store)
}

/// The `PTTL` of `key`, in ms.
fn pttl_ms(redis: &RedisServer, key: &str) -> i64 {
    let reply = redis.command(&["PTTL", key]);
    reply
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("PTTL {key} answered {reply}"))
}

fn name(text: &str) -> LeaseName {
    parse_name(text).unwrap()
}

/// A try-once acquire of `name` for `holder`.
fn request(
    name: &str,
    holder: &str,
    ttl: Duration,
    limit: u32,
    lock_delay: Duration,
) -> ValidatedAcquire {
    ValidatedAcquire {
        name: self::name(name),
        holder: holder.to_owned(),
        ttl,
        wait: Duration::ZERO,
        limit,
        lock_delay,
    }
}

/// Acquires `request`, which must be granted.
async fn grant(store: &RedisStore, request: &ValidatedAcquire) -> Grant {
    match store
        .try_acquire(request, &LeaseId::generate(), None)
        .await
        .unwrap()
    {
        AcquireOutcome::Granted(grant) => grant,
        other => panic!("{}: expected a grant, got {other:?}", request.name),
    }
}

/// Raw messages of the shard channel `channel`, read by a client of our own.
async fn subscribe(url: &str, channel: &str) -> broadcast::Receiver<fred::types::Message> {
    let subscriber = Builder::from_config(Config::from_url(url).unwrap())
        .build_subscriber_client()
        .unwrap();
    subscriber.init().await.unwrap();
    let messages = subscriber.message_rx();
    subscriber.ssubscribe(channel).await.unwrap();
    // The client lives as long as the receiver is read: leak it for the test's duration.
    std::mem::forget(subscriber);
    messages
}

/// The next message's text; panics if none comes within 2 s.
async fn next_message(messages: &mut broadcast::Receiver<fred::types::Message>) -> String {
    let message = tokio::time::timeout(Duration::from_secs(2), messages.recv())
        .await
        .expect("no message within 2 s")
        .unwrap();
    message.value.as_string().unwrap()
}

/// Nothing is published for `duration`.
async fn expect_no_message(
    messages: &mut broadcast::Receiver<fred::types::Message>,
    context: &str,
) {
    if let Ok(message) = tokio::time::timeout(Duration::from_millis(300), messages.recv()).await {
        panic!("{context}: published {message:?}");
    }
}

/// Changes of holder are published on the name's wake channel only while a replica is registered
/// as its watcher: nothing for grants, renewals and releases nobody watches (nor after the last
/// watcher left); with one registered, `g` for a grant (exclusive and counting: the limit), `r`
/// for a release and `v` for a revoke (the reason length-prefixed, holders with spaces), nothing
/// for a renewal. The registration expires by itself (4 s), and a replica past its deadline is
/// dropped by the next one's keepalive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_published_only_while_a_replica_watches() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let mut messages = subscribe(&redis.url(), "leased:{watched/job}:wake").await;
    let watched = name("watched/job");
    let exclusive = request(
        "watched/job",
        "worker 7 (eu)",
        Duration::from_secs(30),
        1,
        Duration::ZERO,
    );

    let granted = grant(&store, &exclusive).await;
    store
        .renew(&watched, &granted.lease_id, None)
        .await
        .unwrap();
    assert!(store.release(&watched, &granted.lease_id).await.unwrap());
    expect_no_message(&mut messages, "nobody watches").await;

    assert!(
        !store.keep_watching(&watched, true).await.unwrap(),
        "a first registration was not in place before"
    );
    assert!(store.keep_watching(&watched, true).await.unwrap());
    let pttl = pttl_ms(&redis, "leased:{watched/job}:watchers");
    assert!(
        (3_000..=4_000).contains(&pttl),
        "the registration lapses by itself: {pttl}"
    );
    // A replica whose deadline passed is dropped by the next keepalive of any other.
    redis.command(&[
        "HSET",
        "leased:{watched/job}:watchers",
        "gone-replica",
        "1000",
    ]);
    store.keep_watching(&watched, true).await.unwrap();
    assert_eq!(
        redis.command(&["HEXISTS", "leased:{watched/job}:watchers", "gone-replica"]),
        ":0"
    );

    let granted = grant(&store, &exclusive).await;
    assert_eq!(
        next_message(&mut messages).await,
        format!(
            "g{} 1 30000 {} worker 7 (eu)",
            granted.fencing_token, granted.expires_at_ms
        )
    );
    let RenewOutcome::Renewed { expires_at_ms, .. } = store
        .renew(&watched, &granted.lease_id, None)
        .await
        .unwrap()
    else {
        panic!("not renewed");
    };
    expect_no_message(&mut messages, "a renewal").await;
    assert!(store.release(&watched, &granted.lease_id).await.unwrap());
    assert_eq!(
        next_message(&mut messages).await,
        format!("r{} {expires_at_ms} worker 7 (eu)", granted.fencing_token)
    );

    let granted = grant(&store, &exclusive).await;
    next_message(&mut messages).await;
    let reason = "disk wedged – INC 42";
    let revoked = store.revoke(&watched, None, reason).await.unwrap();
    assert_eq!(revoked.len(), 1);
    assert_eq!(
        next_message(&mut messages).await,
        format!(
            "v{} {} {} {reason}worker 7 (eu)",
            granted.fencing_token,
            granted.expires_at_ms,
            reason.len()
        )
    );

    let counting = request(
        "watched/job",
        "pool",
        Duration::from_secs(30),
        3,
        Duration::ZERO,
    );
    let permit = grant(&store, &counting).await;
    assert_eq!(
        next_message(&mut messages).await,
        format!(
            "g{} 3 30000 {} pool",
            permit.fencing_token, permit.expires_at_ms
        )
    );
    assert!(store.release(&watched, &permit.lease_id).await.unwrap());
    assert_eq!(
        next_message(&mut messages).await,
        format!("r{} {} pool", permit.fencing_token, permit.expires_at_ms)
    );

    assert!(store.keep_watching(&watched, false).await.unwrap());
    assert_eq!(
        redis.command(&["EXISTS", "leased:{watched/job}:watchers"]),
        ":0"
    );
    let granted = grant(&store, &exclusive).await;
    assert!(store.release(&watched, &granted.lease_id).await.unwrap());
    expect_no_message(&mut messages, "after the last watcher left").await;
}

/// A revoke ends only a grant that still holds; the revoked holder's renewals answer the reason
/// (even once someone else holds the name) and its release is refused, until the reason is
/// forgotten with the grant's TTL (the `:revoked` hash expires); describe reports each holder's
/// lock-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_holder_learns_the_reason_for_the_grants_ttl() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let job = name("revoked/job");
    let ttl = Duration::from_millis(1_500);
    let first = grant(
        &store,
        &request("revoked/job", "worker 7", ttl, 1, Duration::from_secs(5)),
    )
    .await;
    let described = store.describe(&job).await.unwrap();
    let expiry = described.holders[0].expiry.unwrap();
    assert_eq!(expiry.lock_delay_ms, 5_000);
    assert!((1..=1_500).contains(&expiry.held_ms()), "{expiry:?}");

    let stale = store
        .revoke(&job, Some(first.fencing_token + 1), "wrong grant")
        .await
        .unwrap();
    assert!(stale.is_empty(), "{stale:?}");
    let revoked = store
        .revoke(&job, Some(first.fencing_token), "disk wedged")
        .await
        .unwrap();
    assert_eq!(
        revoked,
        [Revoked {
            fencing_token: first.fencing_token,
            holder: "worker 7".into()
        }]
    );
    let pttl = pttl_ms(&redis, "leased:{revoked/job}:revoked");
    assert!(
        (1..=1_500).contains(&pttl),
        "the reason is kept for the grant's TTL: {pttl}"
    );
    let revoked_because = RenewOutcome::Lost(LeaseGone::Revoked {
        reason: "disk wedged".into(),
    });
    assert_eq!(
        store.renew(&job, &first.lease_id, None).await.unwrap(),
        revoked_because
    );
    assert!(!store.release(&job, &first.lease_id).await.unwrap());

    // Free at once (no lock-delay after a revoke); the next holder's grant does not hide why.
    let second = grant(
        &store,
        &request(
            "revoked/job",
            "worker 8",
            Duration::from_secs(30),
            1,
            Duration::ZERO,
        ),
    )
    .await;
    assert!(second.fencing_token > first.fencing_token);
    assert_eq!(
        store.renew(&job, &first.lease_id, None).await.unwrap(),
        revoked_because
    );

    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    assert_eq!(
        redis.command(&["EXISTS", "leased:{revoked/job}:revoked"]),
        ":0"
    );
    assert_eq!(
        store.renew(&job, &first.lease_id, None).await.unwrap(),
        RenewOutcome::Lost(LeaseGone::HeldByAnother)
    );

    // A counting lease: one permit revoked by its token, the other keeps renewing; each permit's
    // lock-delay is described.
    let pool = name("revoked/pool");
    let permits = [
        grant(
            &store,
            &request(
                "revoked/pool",
                "a",
                Duration::from_secs(30),
                3,
                Duration::from_secs(2),
            ),
        )
        .await,
        grant(
            &store,
            &request(
                "revoked/pool",
                "b",
                Duration::from_secs(30),
                3,
                Duration::from_secs(2),
            ),
        )
        .await,
    ];
    let described = store.describe(&pool).await.unwrap();
    assert_eq!(described.limit, 3);
    assert!(
        described
            .holders
            .iter()
            .all(|holder| holder.expiry.unwrap().lock_delay_ms == 2_000)
    );
    let revoked = store
        .revoke(&pool, Some(permits[1].fencing_token), "b is stuck")
        .await
        .unwrap();
    assert_eq!(
        revoked,
        [Revoked {
            fencing_token: permits[1].fencing_token,
            holder: "b".into()
        }]
    );
    assert!(matches!(
        store
            .renew(&pool, &permits[0].lease_id, None)
            .await
            .unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(
        store
            .renew(&pool, &permits[1].lease_id, None)
            .await
            .unwrap(),
        RenewOutcome::Lost(LeaseGone::Revoked {
            reason: "b is stuck".into()
        })
    );
}

/// Every page of a store-level listing of `prefix`: the names on each page.
async fn list_names(store: &RedisStore, prefix: &str, page_size: usize) -> Vec<Vec<String>> {
    let prefix = parse_list_prefix(prefix).unwrap();
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = store
            .list(&prefix, page_size, token.as_deref())
            .await
            .unwrap();
        assert!(page.leases.len() <= page_size);
        pages.push(
            page.leases
                .iter()
                .map(|lease| lease.name.to_string())
                .collect(),
        );
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => return pages,
        }
        assert!(pages.len() < 1_000, "the listing does not end");
    }
}

/// Asserts that `pages` hold each of `expected` exactly once, and nothing else.
fn assert_each_once(pages: &[Vec<String>], expected: &BTreeSet<String>, context: &str) {
    let listed: Vec<&String> = pages.iter().flatten().collect();
    let unique: BTreeSet<String> = listed.iter().map(|name| name.to_string()).collect();
    assert_eq!(
        listed.len(),
        unique.len(),
        "{context}: a lease on two pages"
    );
    assert_eq!(&unique, expected, "{context}");
}

/// List finds the held leases under the prefix, each once whatever the page size (a SCAN batch
/// finds more than a page of 1 or 2 holds: the rest come next): exclusive and counting leases and a
/// classic SETNX lock still running; not the keys that are not leases (another key of a lease
/// alone, a name outside the alphabet, a key of another type under a lease's name, a released
/// lease's owner hash, which keeps its fencing counter), nor names outside the prefix. A key
/// prefix with glob characters matches only itself. A page token of another prefix, or not made by this store, is INVALID_ARGUMENT
/// `page_token`, over gRPC too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_scans_only_lease_keys_under_the_prefix() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let ttl = Duration::from_secs(60);
    let mut expected = BTreeSet::new();
    for index in 0..25 {
        let name = format!("jobs/exclusive-{index:02}");
        grant(&store, &request(&name, "h", ttl, 1, Duration::ZERO)).await;
        expected.insert(name);
    }
    for index in 0..5 {
        let name = format!("jobs/pool-{index}");
        for _ in 0..2 {
            grant(&store, &request(&name, "p", ttl, 3, Duration::ZERO)).await;
        }
        expected.insert(name);
    }
    let released = grant(
        &store,
        &request("jobs/released", "h", ttl, 1, Duration::ZERO),
    )
    .await;
    assert!(
        store
            .release(&name("jobs/released"), &released.lease_id)
            .await
            .unwrap()
    );
    grant(&store, &request("jobsx", "h", ttl, 1, Duration::ZERO)).await;
    let later = (now_unix_ms() + 60_000).to_string();
    redis.command(&["SET", "leased:{jobs/classic}", &later]);
    expected.insert("jobs/classic".to_owned());
    for (key, kind) in [
        ("leased:{jobs/owner-only}:owner", "hash"),
        ("leased:{jobs/bad name}", "string"),
        ("leased:{jobs/foreign}", "hash"),
        ("leased:{jobs/suffixed}x", "string"),
        ("leased:{jobs/unclosed", "string"),
        ("other:{jobs/other}", "string"),
    ] {
        match kind {
            "hash" => redis.command(&["HSET", key, "field", "value"]),
            _ => redis.command(&["SET", key, &later]),
        };
    }

    for page_size in [1, 2, 7, 1_000] {
        let pages = list_names(&store, "jobs/", page_size).await;
        assert_each_once(&pages, &expected, &format!("page_size {page_size}"));
    }
    let pools: BTreeSet<String> = expected
        .iter()
        .filter(|name| name.starts_with("jobs/pool"))
        .cloned()
        .collect();
    assert_each_once(
        &list_names(&store, "jobs/pool", 2).await,
        &pools,
        "jobs/pool",
    );
    let everything = list_names(&store, "", 1_000).await;
    assert!(everything.iter().flatten().any(|name| name == "jobsx"));

    // `le*ased[1]:` is not a pattern that also matches `le-ased1:`.
    let globbed = store_on(&redis.url(), "le*ased[1]:").await;
    let lookalike = store_on(&redis.url(), "le-ased1:").await;
    grant(
        &globbed,
        &request("jobs/globbed", "h", ttl, 1, Duration::ZERO),
    )
    .await;
    grant(
        &lookalike,
        &request("jobs/lookalike", "h", ttl, 1, Duration::ZERO),
    )
    .await;
    assert_eq!(
        list_names(&globbed, "jobs/", 100).await.concat(),
        ["jobs/globbed"]
    );
    assert_eq!(
        list_names(&lookalike, "jobs/", 100).await.concat(),
        ["jobs/lookalike"]
    );

    let jobs = parse_list_prefix("jobs/").unwrap();
    let first = store.list(&jobs, 3, None).await.unwrap();
    let token = first.next_page_token.expect("a second page");
    for garbage in [
        "garbage".to_owned(),
        format!("{token}x"),
        token.replacen("r1.", "m1.", 1),
    ] {
        match store.list(&jobs, 3, Some(&garbage)).await {
            Err(Error::InvalidArgument {
                field: "page_token",
                ..
            }) => {}
            other => panic!("{garbage:?}: {other:?}"),
        }
    }
    let other_prefix = parse_list_prefix("jobs/pool").unwrap();
    assert!(matches!(
        store.list(&other_prefix, 3, Some(&token)).await,
        Err(Error::InvalidArgument {
            field: "page_token",
            ..
        })
    ));

    let server = Leased::start(Some(redis.url())).await;
    let mut admin = admin_client(&server.endpoint()).await;
    for (prefix, page_token) in [("jobs/", "garbage"), ("jobs/pool", token.as_str())] {
        let status = admin
            .list(ListRequest {
                prefix: prefix.into(),
                page_size: 3,
                page_token: page_token.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("page_token"), "{status:?}");
    }
    let listed = admin
        .list(ListRequest {
            prefix: "jobs/".into(),
            page_size: 3,
            page_token: token,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.leases.len(), 3);
}
