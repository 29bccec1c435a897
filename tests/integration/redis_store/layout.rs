//! The layout version (`<prefix>layout`): recorded in a fresh Redis, a layout this binary cannot
//! read refuses the start, and one found after a reconnect takes the replica out of service until
//! the layout is readable again.

use std::time::Duration;

use crate::common::*;
use leased::proto::DescribeRequest;
use tonic::Code;

const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

/// The startup layout check waits for Redis's answer as long as the Redis timeout, then serves
/// and checks once Redis answers (a Redis down at startup is not fatal). These tests assert what
/// the startup check did, so they give a loaded machine longer than the harness's 1 s; Redis here
/// is healthy, so the longer wait costs nothing when all is well.
const STARTUP_REDIS_TIMEOUT: &str = "10s";

/// A Redis holding a layout newer or older than this binary reads makes `leased serve` exit 1 at
/// startup with a message naming the layout and what to do; another `--key-prefix` on the same
/// Redis starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_this_binary_cannot_read_refuses_the_start() {
    let redis = RedisServer::start();
    assert_eq!(redis.command(&["SET", "leased:layout", "99"]), "+OK");
    let (status, stderr) = LeasedProcess::serve()
        .redis(&redis.url())
        .redis_timeout(STARTUP_REDIS_TIMEOUT)
        .run_to_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{stderr}");
    for expected in [
        "Redis holds its leases in layout 99 (key leased:layout)",
        "knows layouts up to 1 only",
        "Run the leased version that wrote layout 99",
        "another --key-prefix",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
    }

    assert_eq!(redis.command(&["SET", "leased:layout", "0"]), "+OK");
    let (status, stderr) = LeasedProcess::serve()
        .redis(&redis.url())
        .redis_timeout(STARTUP_REDIS_TIMEOUT)
        .run_to_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("layout 0") && stderr.contains("intermediate release"),
        "{stderr}"
    );

    LeasedProcess::serve()
        .redis(&redis.url())
        .redis_timeout(STARTUP_REDIS_TIMEOUT)
        .args(["--key-prefix", "other:"])
        .start()
        .await;
    assert_eq!(redis.command(&["GET", "other:layout"]), "1");
}

/// A Redis without the layout key gets `leased:layout` = 1 before the server reports SERVING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_redis_records_layout_1() {
    let redis = RedisServer::start();
    assert_eq!(redis.command(&["EXISTS", "leased:layout"]), ":0");
    let _server = LeasedProcess::serve()
        .redis(&redis.url())
        .redis_timeout(STARTUP_REDIS_TIMEOUT)
        .start()
        .await;
    assert_eq!(redis.command(&["GET", "leased:layout"]), "1");
}

/// A running replica that reconnects to a Redis now holding layout 99 turns health NOT_SERVING,
/// answers calls UNAVAILABLE and logs why; set back to 1 and reconnected, it serves again, and
/// the lease held before is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_layout_found_on_reconnect_stops_serving_until_it_is_readable() {
    let redis = RedisServer::start();
    let mut server = LeasedProcess::serve()
        .redis(&redis.url())
        .log(Log::Captured)
        .start()
        .await;
    let mut client = server.client().await;
    let held = must_acquire(&mut client, "kept-across-layouts", 60_000).await;

    assert_eq!(redis.command(&["SET", "leased:layout", "99"]), "+OK");
    kill_normal_clients(&redis);
    harness::leased::wait_health(server.address, NOT_SERVING)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let refused = client
        .describe(DescribeRequest {
            name: "kept-across-layouts".into(),
        })
        .await
        .expect_err("a replica that cannot read the layout answered");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    assert_eq!(redis.command(&["SET", "leased:layout", "1"]), "+OK");
    kill_normal_clients(&redis);
    server.wait_serving().await;
    must_renew(&mut client, &held).await;

    let log = server.stop_and_read_log();
    assert!(
        log.contains("Redis holds its leases in layout 99") && log.contains("NOT_SERVING"),
        "{log}"
    );
}

/// Closes every normal client connection of `redis` (the pool's; not the test's own), which
/// fred reconnects at once.
fn kill_normal_clients(redis: &RedisServer) {
    let killed = redis.command(&["CLIENT", "KILL", "TYPE", "normal"]);
    assert_ne!(killed, ":0", "no client connection to kill");
}
