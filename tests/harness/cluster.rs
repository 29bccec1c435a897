//! A real three-master Redis Cluster on loopback: cluster-enabled `redis-server`s joined by
//! `redis-cli --cluster create`.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use super::{free_port, redis::RedisServer, spawn, wait_until};

/// A port that was free a moment ago, whose cluster bus port (+10000) was free too. Both stay
/// below the kernel's ephemeral range (32768 and up), as [`free_port`] explains.
fn free_cluster_port() -> u16 {
    const BUS_OFFSET: u16 = 10_000;
    for _ in 0..1_000 {
        let port = free_port();
        let bus = port.checked_add(BUS_OFFSET).filter(|bus| *bus < 32_768);
        if bus.is_some_and(|bus| std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok()) {
            return port;
        }
    }
    panic!("no free port whose cluster bus port is free too");
}

/// Three cluster-enabled redis-servers, no replicas, killed on drop with their scratch directory.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts the nodes, joins them and waits (up to 20 s) until every node reports
    /// `cluster_state:ok`.
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "leased-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let dir_arg = dir.display().to_string();
        let nodes = (0..3)
            .map(|_| {
                let port = free_cluster_port();
                let config_file = format!("nodes-{port}.conf");
                let cluster_args = ["--cluster-enabled", "yes"];
                let files = ["--cluster-config-file", &config_file, "--dir", &dir_arg];
                RedisServer::start_with(port, &[&cluster_args[..], &files[..]].concat())
            })
            .collect();
        let cluster = RedisCluster { nodes, dir };
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let status = spawn(
            Command::new("redis-cli")
                .args(["--cluster", "create"])
                .args(&addresses)
                .args(["--cluster-replicas", "0", "--cluster-yes"])
                .stdout(Stdio::null()),
        )
        .and_then(|mut create| create.wait())
        .unwrap_or_else(|error| panic!("{error}"));
        assert!(status.success(), "redis-cli --cluster create failed");
        wait_until("the cluster to be ok", Duration::from_secs(20), || {
            cluster.nodes.iter().all(|node| {
                node.query(&["CLUSTER", "INFO"])
                    .is_ok_and(|info| info.to_string().contains("cluster_state:ok"))
            })
        });
        cluster
    }

    /// The nodes' ports, for commands to one node (`CLUSTER SLOTS`, `INFO commandstats`).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|node| node.port).collect()
    }

    /// The `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.nodes[0].port);
        for (index, node) in self.nodes.iter().enumerate().skip(1) {
            let separator = if index == 1 { '?' } else { '&' };
            url.push_str(&format!("{separator}node=127.0.0.1:{}", node.port));
        }
        url
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // The nodes write to the directory until they die.
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
