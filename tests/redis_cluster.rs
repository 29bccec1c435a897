//! `leased` on a `redis-cluster://` URL: a real three-master Redis Cluster on loopback. Every
//! lease's keys share a hash tag, so each script touches one slot wherever the name hashes; the
//! release wake-up crosses nodes.

mod common;

use std::time::{Duration, Instant};

use common::{harness::cluster::RedisCluster, *};
use leased::proto::acquire_response;

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
