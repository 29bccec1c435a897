//! `leased` on a `redis-cluster://` URL: a real three-master Redis Cluster on loopback. Every
//! lease's keys share a hash tag, so each script touches one slot wherever the name hashes; the
//! release wake-up crosses nodes.

mod common;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use leased::proto::acquire_response;

/// Three cluster-enabled redis-servers joined by `redis-cli --cluster create`, killed on drop.
struct RedisCluster {
    ports: Vec<u16>,
    nodes: Vec<Child>,
    dir: std::path::PathBuf,
}

impl RedisCluster {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "leased-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let nodes = ports
            .iter()
            .map(|port| {
                Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args([
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &format!("nodes-{port}.conf"),
                    ])
                    .args([
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--dir",
                        &dir.display().to_string(),
                    ])
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("redis-server is not installed")
            })
            .collect();
        let cluster = RedisCluster { ports, nodes, dir };
        for port in &cluster.ports {
            let redis = RedisServerAt(*port);
            wait_until("a cluster node to answer", Duration::from_secs(10), || {
                redis.ping()
            });
        }
        let addresses: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli is not installed");
        assert!(status.success(), "redis-cli --cluster create failed");
        wait_until("the cluster to be ok", Duration::from_secs(20), || {
            cluster.ports.iter().all(|port| {
                Command::new("redis-cli")
                    .args(["-p", &port.to_string(), "cluster", "info"])
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
            })
        });
        cluster
    }

    fn url(&self) -> String {
        format!(
            "redis-cluster://127.0.0.1:{}?node=127.0.0.1:{}&node=127.0.0.1:{}",
            self.ports[0], self.ports[1], self.ports[2]
        )
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.kill();
            let _ = node.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct RedisServerAt(u16);

impl RedisServerAt {
    fn ping(&self) -> bool {
        Command::new("redis-cli")
            .args(["-p", &self.0.to_string(), "ping"])
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"PONG"))
    }
}

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
