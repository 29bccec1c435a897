//! What operators see: Prometheus metrics that move with the traffic, and structured JSON logs
//! that name the RPC and the lease but never contain a lease id.

mod common;

use std::{
    io::{Read, Write},
    time::Duration,
};

use common::*;
use leased::config::ServeConfig;

/// `GET /metrics` over plain HTTP/1.1.
fn scrape(port: u16) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of the sample whose line starts with `series` (0 if absent).
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
        .map_or(0.0, |line| {
            line.rsplit(' ').next().unwrap().parse().unwrap()
        })
}

/// Grants, not-granted, renewals, losses, releases, per-RPC counts and latency, open streams and
/// Redis latency all move with real traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_happened() {
    let redis = RedisServer::start();
    let metrics_port = free_port();
    let config = ServeConfig::from_args([
        "--redis-url".to_owned(),
        redis.url(),
        "--metrics-listen".to_owned(),
        format!("127.0.0.1:{metrics_port}"),
    ])
    .unwrap();
    let server = Leased::start_with(config).await;
    let before = scrape(metrics_port);
    let mut client = server.client().await;

    let granted = must_acquire(&mut client, "metered", 5_000).await;
    assert_eq!(
        acquire(&mut client, "metered", 5_000, 0).await.unwrap(),
        None
    );
    renew_once(&mut client, &granted, 0).await.unwrap();
    assert!(release(&mut client, &granted).await);
    renew_once(&mut client, &granted, 0).await.unwrap(); // lost: released
    describe(&mut client, "metered").await;
    tokio::time::sleep(Duration::from_millis(100)).await; // let the Renew streams end

    let after = scrape(metrics_port);
    let delta = |series: &str| sample(&after, series) - sample(&before, series);
    assert!(delta("leased_grants_total") >= 1.0, "{after}");
    assert!(delta("leased_not_granted_total") >= 1.0);
    assert!(delta("leased_renewals_total") >= 1.0);
    assert!(
        delta("leased_losses_total{kind=\"expired or released\"}") >= 1.0,
        "{after}"
    );
    assert!(
        delta("leased_rpc_requests_total{rpc=\"Acquire\",code=\"Ok\"}") >= 2.0,
        "{after}"
    );
    assert!(delta("leased_rpc_requests_total{rpc=\"Release\",code=\"Ok\"}") >= 1.0);
    assert!(delta("leased_rpc_requests_total{rpc=\"Describe\",code=\"Ok\"}") >= 1.0);
    assert!(
        delta("leased_rpc_requests_total{rpc=\"Renew\",code=\"Ok\"}") >= 2.0,
        "{after}"
    );
    assert!(delta("leased_rpc_duration_seconds_count{rpc=\"Release\",code=\"Ok\"}") >= 1.0);
    assert!(
        delta("leased_store_duration_seconds_count{kind=\"acquire\"}") >= 2.0,
        "{after}"
    );
    assert!(after.contains("leased_open_streams{kind=\"Renew\"}"));
    assert!(after.contains("# TYPE leased_waiters gauge"));
}

/// With `--log-format json`, every request's log line is a JSON object naming the RPC and the
/// lease; no line contains a lease id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_name_rpc_and_lease_but_never_the_lease_id() {
    let redis = RedisServer::start();
    // SERVING, which start() waits for, means Redis is connected.
    let mut server = LeasedProcess::serve()
        .redis(&redis.url())
        .args(["--log-format", "json"])
        .log(Log::Captured)
        .log_level("debug")
        .start()
        .await;
    let mut client = server.client().await;
    let granted = must_acquire(&mut client, "logged", 5_000).await;
    renew_once(&mut client, &granted, 0).await.unwrap();
    describe(&mut client, "logged").await;
    assert!(release(&mut client, &granted).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = server.stop_and_read_log();

    let mut rpcs_logged = std::collections::HashSet::new();
    for line in log.lines() {
        assert!(
            !line.contains(&granted.lease_id),
            "a log line contains the lease id: {line}"
        );
        let json: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if let Some(rpc) = json["fields"]["rpc"].as_str() {
            assert_eq!(json["fields"]["name"], "logged", "{line}");
            rpcs_logged.insert(rpc.to_owned());
        }
    }
    for rpc in ["Acquire", "Renew", "Describe", "Release"] {
        assert!(
            rpcs_logged.contains(rpc),
            "no log line for {rpc}: {rpcs_logged:?}"
        );
    }
}

/// A text log written to a pipe or a file carries no terminal colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_to_a_pipe_have_no_colour_codes() {
    let redis = RedisServer::start();
    let mut server = LeasedProcess::serve()
        .redis(&redis.url())
        .log(Log::Captured)
        .log_level("debug")
        .start()
        .await;
    let mut client = server.client().await;
    let granted = must_acquire(&mut client, "plain", 5_000).await;
    assert!(release(&mut client, &granted).await);
    let log = server.stop_and_read_log();
    assert!(log.contains("granted"), "{log}");
    assert!(!log.contains('\x1b'), "an escape code in the log: {log:?}");
}

/// A server that cannot start says why, in words an operator can act on, and exits 1.
#[test]
fn startup_errors_name_what_to_fix() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cases = [
        (
            LeasedProcess::serve().redis("nonsense://127.0.0.1:1"),
            "invalid --redis-url",
        ),
        (
            LeasedProcess::serve().at(taken.local_addr().unwrap()),
            "cannot listen on",
        ),
        (
            LeasedProcess::serve().args(["--auth-tokens", "/nonexistent/tokens.json"]),
            "cannot load --auth-tokens",
        ),
    ];
    for (serve, expected) in cases {
        let (status, stderr) = run_to_exit(serve.command(), Duration::from_secs(20));
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
    }
}

/// Runs `command` until it exits (killing it after `timeout`: a server that should have refused
/// to start must not hang the test) and returns its status and stderr.
fn run_to_exit(
    mut command: std::process::Command,
    timeout: Duration,
) -> (std::process::ExitStatus, String) {
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot run leased");
    let exited = harness::poll_until("leased to exit", timeout, || {
        child.try_wait().unwrap().is_some()
    });
    if exited.is_err() {
        child.kill().unwrap();
    }
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}
