//! `--redis-wait-replicas`: a grant or renewal is answered only once Redis `WAIT` says that many
//! replicas have it. Here on a master with one replica (no Sentinel): a stopped replica turns
//! grants and renewals into `UNAVAILABLE` within `--redis-wait-timeout`, leaves nothing held,
//! and everything works again once it resumes. (The failover itself: reliability/failover.rs.)

use std::time::{Duration, Instant};

use leased::proto::{AcquireRequest, acquire_response};
use tonic::Code;

use crate::common::*;

/// How long a grant or renewal waits for the replica here.
const WAIT_TIMEOUT: Duration = Duration::from_millis(500);

/// A master, and a replica of it that has finished its first sync (`WAIT` counts it only then).
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    (master, replica)
}

/// `leased serve` on `master`, answering grants and renewals once `replicas` replicas have them.
/// Its metrics on `metrics_port`.
async fn serve_waiting_for(
    master: &RedisServer,
    replicas: u32,
    metrics_port: u16,
    log: Log,
) -> LeasedProcess {
    LeasedProcess::serve()
        .redis(&master.url())
        .args([
            "--redis-wait-replicas".to_owned(),
            replicas.to_string(),
            "--redis-wait-timeout".to_owned(),
            format!("{}ms", WAIT_TIMEOUT.as_millis()),
            "--metrics-listen".to_owned(),
            format!("127.0.0.1:{metrics_port}"),
        ])
        .log(log)
        .start()
        .await
}

fn own_id_request(name: &str, lease_id: &str) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: "test".into(),
        ttl_ms: 60_000,
        lease_id: lease_id.into(),
        ..AcquireRequest::default()
    }
}

/// With the replica stopped (SIGSTOP) a grant answers UNAVAILABLE after the WAIT timeout, naming
/// the cause, and is released at once: the master holds nothing, and neither does the replica
/// once it resumes and catches up. A renewal answers UNAVAILABLE too and its retry after the
/// resume renews. A caller's own lease id refused so is not ended: its retry is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_makes_grants_unavailable_and_leaves_nothing_held() {
    let (master, replica) = master_and_replica();
    let metrics_port = free_port();
    let server = serve_waiting_for(
        &master,
        1,
        metrics_port,
        Log::File(log_dir("redis-wait-replicas").join("stopped-replica.log")),
    )
    .await;
    let mut client = server.client().await;
    let held = must_acquire(&mut client, "durable/held", 60_000).await;
    must_renew(&mut client, &held).await;

    replica.pause();
    let started = Instant::now();
    let status = acquire(&mut client, "durable/refused", 60_000, 0)
        .await
        .unwrap_err();
    let took = started.elapsed();
    println!("a grant the stopped replica could not confirm answered after {took:?}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("--redis-wait-replicas")
            && status.message().contains("0 confirmed"),
        "the status names the cause: {status:?}"
    );
    assert!(
        took >= WAIT_TIMEOUT && took < WAIT_TIMEOUT + Duration::from_secs(1),
        "answered after {took:?}, against a WAIT timeout of {WAIT_TIMEOUT:?}"
    );
    assert!(
        !describe(&mut client, "durable/refused").await.held,
        "a grant no replica confirmed was left held"
    );
    // A caller that waits gets the same answer (its grant is undone, not left to expire).
    let status = acquire(&mut client, "durable/refused-waiting", 60_000, 5_000)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(!describe(&mut client, "durable/refused-waiting").await.held);
    let status = renew_once(&mut client, &held, 0).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let own_id = "durable-own-lease-id-0000000001";
    let status = acquire_refusal(&mut client, own_id_request("durable/own-id", own_id)).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(!describe(&mut client, "durable/own-id").await.held);

    replica.resume();
    // Once the replica has caught up with the master, it holds nothing of the refused grants.
    let offset = |server: &RedisServer, field: &str| -> i64 {
        server
            .info_field("replication", field)
            .and_then(|offset| offset.parse().ok())
            .unwrap_or(-1)
    };
    wait_until("the replica to catch up", Duration::from_secs(10), || {
        offset(&replica, "slave_repl_offset") >= offset(&master, "master_repl_offset")
    });
    for name in [
        "durable/refused",
        "durable/refused-waiting",
        "durable/own-id",
    ] {
        let key = format!("leased:{{{name}}}");
        assert_eq!(
            replica.command(&["EXISTS", &key]),
            ":0",
            "{key} is held on the replica after it resumed"
        );
    }
    must_renew(&mut client, &held).await;
    match acquire_request_terminal(&mut client, own_id_request("durable/own-id", own_id)).await {
        acquire_response::Result::Granted(granted) => assert_eq!(granted.lease_id, own_id),
        other => panic!("the own id's retry was not granted: {other:?}"),
    }
    must_acquire(&mut client, "durable/refused", 5_000).await;

    let metrics = scrape_metrics(metrics_port);
    let shortfalls = metric_sample(&metrics, "leased_redis_wait_shortfalls_total");
    assert!(shortfalls >= 4.0, "{shortfalls} WAIT shortfalls counted");
    assert_eq!(
        metric_sample(&metrics, "leased_unconfirmed_grants_expiring_total"),
        0.0
    );
}

/// More replicas asked for than are connected: the server says so at startup, and every grant
/// answers UNAVAILABLE (none is left held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_replicas_than_connected_is_warned_at_startup() {
    let (master, _replica) = master_and_replica();
    let mut server = serve_waiting_for(&master, 2, free_port(), Log::Captured).await;
    let mut client = server.client().await;
    let status = acquire(&mut client, "durable/two-replicas", 60_000, 0)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("1 confirmed"), "{status:?}");
    assert!(!describe(&mut client, "durable/two-replicas").await.held);
    let log = server.stop_and_read_log();
    assert!(
        log.contains("fewer Redis replicas are connected than --redis-wait-replicas"),
        "{log}"
    );
}

/// `WAIT` blocks the pool connection it runs on, so while the replica is stopped every grant and
/// renewal holds its connection for the whole `--redis-wait-timeout`, and commands queue behind
/// one another. The replica's heartbeat must not queue with them: had it lapsed, the other
/// replicas would take this live replica for gone and purge every queue entry of its waiters,
/// which then join again at the tail in no fixed order. The heartbeat key is watched on the
/// master while 40 renewals keep the 4 pool connections waiting for 4 s (with the heartbeat in
/// the pool, it lapsed 2.5 s into them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_kept_waiting_for_redis_replicas_keeps_its_heartbeat() {
    const RENEWERS: usize = 40;
    const BUSY_FOR: Duration = Duration::from_secs(4);
    let (master, replica) = master_and_replica();
    let server = serve_waiting_for(
        &master,
        1,
        free_port(),
        Log::File(log_dir("redis-wait-replicas").join("heartbeat.log")),
    )
    .await;
    let mut client = server.client().await;
    let mut held = Vec::new();
    for index in 0..RENEWERS {
        held.push(must_acquire(&mut client, &format!("durable/busy-{index}"), 60_000).await);
    }
    let heartbeat = master.command(&["KEYS", "leased:replica:*"]);
    assert!(
        heartbeat.starts_with("leased:replica:") && !heartbeat.contains('\n'),
        "one heartbeat key: {heartbeat:?}"
    );

    replica.pause();
    let started = Instant::now();
    let renewers: Vec<_> = held
        .into_iter()
        .map(|granted| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let mut refused = 0;
                while started.elapsed() < BUSY_FOR {
                    if renew_once(&mut client, &granted, 0).await.is_err() {
                        refused += 1;
                    }
                }
                refused
            })
        })
        .collect();
    let mut lowest_ttl_ms = i64::MAX;
    while started.elapsed() < BUSY_FOR {
        let ttl: i64 = master
            .command(&["PTTL", &heartbeat])
            .trim_start_matches(':')
            .parse()
            .expect("PTTL answers a number");
        assert!(
            ttl > 0,
            "the heartbeat lapsed {:?} into the stall while renewals waited for the stopped \
             replica",
            started.elapsed()
        );
        lowest_ttl_ms = lowest_ttl_ms.min(ttl);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut refused = 0;
    for renewer in renewers {
        refused += renewer.await.expect("a renewer panicked");
    }
    replica.resume();
    println!(
        "{refused} renewals refused in {BUSY_FOR:?}; the heartbeat's TTL never fell below \
         {lowest_ttl_ms} ms (of 2000)"
    );
    assert!(
        refused >= RENEWERS,
        "only {refused} renewals waited for the stopped replica: the pool was not kept busy"
    );
}

/// A retry of a caller's own lease id whose grant is held, made while the replica is stopped,
/// never undoes that grant: through either of two `leased` replicas it answers UNAVAILABLE (the
/// retry's WAIT falls short) and the grant stays held by its holder, with its token; nobody else
/// is granted the name meanwhile or after the resume, and the holder's renewal renews. (It was
/// released by the retry's shortfall, and the next caller was granted it beside its holder.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_own_id_during_a_replica_stall_keeps_its_grant() {
    let (master, replica) = master_and_replica();
    let log = |file: &str| Log::File(log_dir("redis-wait-replicas").join(file));
    let servers = [
        serve_waiting_for(&master, 1, free_port(), log("own-id-retry-0.log")).await,
        serve_waiting_for(&master, 1, free_port(), log("own-id-retry-1.log")).await,
    ];
    let mut clients = [servers[0].client().await, servers[1].client().await];
    let name = "durable/own-id-retried";
    let own_id = "0f3a9c1be7d24586a0c1f9e8d7b6a5c4";
    let held = match acquire_request_terminal(&mut clients[0], own_id_request(name, own_id)).await {
        acquire_response::Result::Granted(granted) => granted,
        other => panic!("the first Acquire was not granted: {other:?}"),
    };

    replica.pause();
    for client in &mut clients {
        let status = acquire_refusal(client, own_id_request(name, own_id)).await;
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        let described = describe(client, name).await;
        assert!(described.held, "the retry's shortfall released the grant");
        assert_eq!(described.holders[0].fencing_token, held.fencing_token);
        // Another caller trying once is not granted the name its holder holds.
        let other = acquire(client, name, 60_000, 0).await;
        assert!(
            !matches!(other, Ok(Some(_))),
            "another caller was granted {name} beside its holder: {other:?}"
        );
    }
    replica.resume();

    for client in &mut clients {
        let other = acquire(client, name, 60_000, 0).await;
        assert!(
            !matches!(other, Ok(Some(_))),
            "another caller was granted {name} after the resume: {other:?}"
        );
    }
    // The replica catches up within a few retries of the renewal.
    let deadline = Instant::now() + Duration::from_secs(10);
    while renew_once(&mut clients[1], &held, 0).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the holder's renewal was never confirmed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    must_renew(&mut clients[0], &held).await;
    let described = describe(&mut clients[1], name).await;
    assert_eq!(described.holders.len(), 1);
    assert_eq!(described.holders[0].fencing_token, held.fencing_token);
}
