//! `leased` on a `redis-cluster://` URL: a real three-master Redis Cluster on loopback. Every
//! lease's keys share a hash tag, so each script touches one slot wherever the name hashes; the
//! release wake-up crosses nodes, on the name's shard channel (SPUBLISH), never classic PUBLISH.

mod common;

use std::time::{Duration, Instant};

use common::{
    harness::{
        cluster::RedisCluster,
        redis::{Resp, query},
    },
    *,
};
use leased::proto::{AcquireRequest, acquire_response};

/// Grants, renewals, releases and increasing tokens for names spread over every node, and a
/// waiter on one replica woken by a release through another, on a three-master cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut client_a = replica_a.client().await;
    let mut client_b = replica_b.client().await;

    // 30 names land on all three masters' slots.
    for index in 0..30 {
        let name = format!("cluster/job-{index}");
        let first = must_acquire(&mut client_a, &name, 10_000).await;
        let renewed = renew_once(&mut client_a, &first, 0).await.unwrap();
        assert!(matches!(
            renewed.result,
            Some(leased::proto::renew_response::Result::Renewed(_))
        ));
        assert!(release(&mut client_a, &first).await);
        let second = must_acquire(&mut client_b, &name, 10_000).await;
        assert!(second.fencing_token > first.fencing_token);
        assert!(release(&mut client_b, &second).await);
    }

    let held = must_acquire(&mut client_b, "cluster/handoff", 30_000).await;
    let (mut waiter, _) = start_waiting(&mut client_a, "cluster/handoff", "on-a", 20_000).await;
    assert!(release(&mut client_b, &held).await);
    let released_at = Instant::now();
    let terminal = next_result(&mut waiter).await;
    assert!(
        matches!(terminal, acquire_response::Result::Granted(_)),
        "{terminal:?}"
    );
    assert!(
        released_at.elapsed() < Duration::from_secs(1),
        "woken by the release, not by the 30 s expiry: {:?}",
        released_at.elapsed()
    );
}

/// Counting leases with a lock-delay on a cluster: for 12 names spread over the masters, three
/// permits are granted with increasing tokens, a fourth caller waits and is granted the permit a
/// release frees (woken across replicas), Describe lists every holder, and the permits' keys
/// share the name's slot (a cross-slot script would fail with CROSSSLOT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_leases_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut client_a = replica_a.client().await;
    let mut client_b = replica_b.client().await;
    let request = |name: &str, holder: &str, wait_ms: i64| AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms: 30_000,
        wait_ms,
        limit: 3,
        lock_delay_ms: 1_000,
    };

    for index in 0..12 {
        let name = format!("cluster/pool-{index}");
        let mut permits = Vec::new();
        for holder in ["p0", "p1", "p2"] {
            permits.push(must_acquire_request(&mut client_a, request(&name, holder, 0)).await);
        }
        assert!(
            permits
                .windows(2)
                .all(|pair| pair[0].fencing_token < pair[1].fencing_token)
        );
        let (mut waiter, waiting) =
            start_waiting_request(&mut client_b, request(&name, "w", 20_000)).await;
        assert_eq!((waiting.position, waiting.held, waiting.limit), (1, 3, 3));
        let described = describe(&mut client_b, &name).await;
        assert_eq!(described.limit, 3);
        assert_eq!(described.holders.len(), 3);
        assert_eq!(described.waiters, 1);

        assert!(release(&mut client_a, &permits[1]).await);
        match next_result(&mut waiter).await {
            acquire_response::Result::Granted(granted) => {
                assert!(granted.fencing_token > permits[2].fencing_token);
                assert!(release(&mut client_b, &granted).await);
            }
            other => panic!("{name}: expected granted, got {other:?}"),
        }
        assert!(release(&mut client_a, &permits[0]).await);
        assert!(release(&mut client_a, &permits[2]).await);
        assert!(!describe(&mut client_a, &name).await.held);
    }
}

/// For each master, a lease name whose slot it serves: `(the master's port, name)`. Slots come
/// from `CLUSTER KEYSLOT` of the name's lease key and `CLUSTER SLOTS`.
fn one_name_per_master(ports: &[u16]) -> Vec<(u16, String)> {
    let Ok(Resp::Array(Some(ranges))) = query(ports[0], &["CLUSTER", "SLOTS"]) else {
        panic!("CLUSTER SLOTS failed");
    };
    // Each range: [first slot, last slot, [ip, port, id] of the master, replicas...].
    let owners: Vec<(i64, i64, u16)> = ranges
        .iter()
        .map(|range| {
            let Resp::Array(Some(fields)) = range else {
                panic!("bad CLUSTER SLOTS range {range:?}");
            };
            let Resp::Array(Some(master)) = &fields[2] else {
                panic!("bad CLUSTER SLOTS master {range:?}");
            };
            let port = master[1].as_int().expect("a port") as u16;
            (
                fields[0].as_int().unwrap(),
                fields[1].as_int().unwrap(),
                port,
            )
        })
        .collect();
    let mut names: Vec<(u16, String)> = Vec::new();
    for index in 0..1_000 {
        if names.len() == ports.len() {
            break;
        }
        let name = format!("cluster/fair-{index}");
        let slot = query(
            ports[0],
            &["CLUSTER", "KEYSLOT", &format!("leased:{{{name}}}")],
        )
        .ok()
        .and_then(|reply| reply.as_int())
        .expect("CLUSTER KEYSLOT answers a slot");
        let (_, _, owner) = *owners
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .unwrap_or_else(|| panic!("no master serves slot {slot}"));
        if !names.iter().any(|(port, _)| *port == owner) {
            names.push((owner, name));
        }
    }
    assert_eq!(
        names.len(),
        ports.len(),
        "a name for every master: {names:?}"
    );
    names
}

/// Fair waiting on a three-master cluster with two replicas, for a name on each master: grants
/// and releases that nobody waits for publish nothing on any node; a waiter on replica A is granted
/// promptly on a release through replica B, woken through SPUBLISH on the name's master, and no
/// node ever sees a classic PUBLISH. No queue key is left afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_shard_pubsub_on_every_master() {
    let cluster = RedisCluster::start();
    let ports = cluster.ports();
    let names = one_name_per_master(&ports);
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut client_a = replica_a.client().await;
    let mut client_b = replica_b.client().await;
    for port in &ports {
        assert_eq!(
            query(*port, &["CONFIG", "RESETSTAT"]).unwrap(),
            Resp::Simple("OK".into())
        );
    }

    for (_, name) in &names {
        for _ in 0..5 {
            let granted = must_acquire(&mut client_a, name, 10_000).await;
            assert!(release(&mut client_b, &granted).await);
        }
    }
    for port in &ports {
        let (publish, spublish) = (
            command_calls(*port, "publish"),
            command_calls(*port, "spublish"),
        );
        assert_eq!(
            (publish, spublish),
            (0, 0),
            "node {port}: releases nobody waited for published (publish, spublish)"
        );
    }

    for (port, name) in &names {
        for round in 0..3 {
            let held = must_acquire(&mut client_b, name, 30_000).await;
            let (mut waiter, first) = start_waiting(&mut client_a, name, "on-a", 20_000).await;
            assert_eq!(first.position, 1, "{name}: {first:?}");
            assert!(release(&mut client_b, &held).await);
            let released_at = Instant::now();
            let terminal = next_result_within(&mut waiter, Duration::from_secs(5)).await;
            let handoff = released_at.elapsed();
            let acquire_response::Result::Granted(granted) = terminal else {
                panic!("{name} (master {port}), round {round}: expected granted, got {terminal:?}");
            };
            assert!(
                handoff < Duration::from_secs(1),
                "{name} (master {port}), round {round}: woken {handoff:?} after the release"
            );
            assert!(granted.fencing_token > held.fencing_token);
            assert!(release(&mut client_a, &granted).await);
        }
    }
    for (port, name) in &names {
        let (publish, spublish) = (
            command_calls(*port, "publish"),
            command_calls(*port, "spublish"),
        );
        println!("master {port} ({name}): publish {publish}, spublish {spublish}");
        assert_eq!(publish, 0, "master {port}: classic PUBLISH was used");
        assert!(
            spublish > 0,
            "master {port}: the waiters of {name} were not woken through SPUBLISH"
        );
    }

    let start = Instant::now();
    loop {
        let left: Vec<String> = ports
            .iter()
            .flat_map(|port| ["*:queue", "*:replicas"].map(|pattern| (*port, pattern)))
            .filter_map(|(port, pattern)| {
                let keys = query(port, &["KEYS", pattern]).unwrap().to_string();
                (!keys.is_empty()).then(|| format!("{port}: {keys}"))
            })
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "queue keys left after every waiter is gone: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
