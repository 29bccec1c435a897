//! Several `leased` processes on one Redis, and Redis faults (killed, restarted, paused,
//! flushed): waiters wake across replicas, tokens increase across data loss, and the real binary
//! drains its streams on SIGTERM.

use std::time::{Duration, Instant};

use crate::common::*;
use leased::proto::acquire_response;
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
    must_renew(&mut holder, &held).await;
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
