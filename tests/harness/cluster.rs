//! A real three-master Redis Cluster on loopback: cluster-enabled `redis-server`s joined by
//! `redis-cli --cluster create`; a slot can be moved to another master with its keys
//! ([`RedisCluster::move_slot`]).

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use super::{
    free_port,
    redis::{RedisServer, Resp, query},
    spawn, wait_until,
};

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

/// The node id of the cluster node on `port` (`CLUSTER MYID`).
pub fn node_id(port: u16) -> String {
    match query(port, &["CLUSTER", "MYID"]) {
        Ok(reply) => reply
            .as_str()
            .expect("CLUSTER MYID answers a string")
            .to_owned(),
        Err(error) => panic!("CLUSTER MYID on port {port} failed: {error}"),
    }
}

/// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of the node on `port`).
pub fn key_slot(port: u16, key: &str) -> u16 {
    query(port, &["CLUSTER", "KEYSLOT", key])
        .ok()
        .and_then(|reply| reply.as_int())
        .and_then(|slot| u16::try_from(slot).ok())
        .unwrap_or_else(|| panic!("CLUSTER KEYSLOT {key} failed"))
}

/// The port of the master that serves `slot`, as the node on `port` sees it (`CLUSTER SLOTS`);
/// None if no range of its answer holds the slot.
pub fn slot_owner(port: u16, slot: u16) -> Option<u16> {
    let Ok(Resp::Array(Some(ranges))) = query(port, &["CLUSTER", "SLOTS"]) else {
        panic!("CLUSTER SLOTS on port {port} failed");
    };
    // Each range: [first slot, last slot, [ip, port, id] of the master, replicas...].
    ranges.iter().find_map(|range| {
        let Resp::Array(Some(fields)) = range else {
            panic!("bad CLUSTER SLOTS range {range:?}");
        };
        let (first, last) = (fields[0].as_int()?, fields[1].as_int()?);
        let Resp::Array(Some(master)) = &fields[2] else {
            panic!("bad CLUSTER SLOTS master {range:?}");
        };
        (first..=last)
            .contains(&i64::from(slot))
            .then(|| master[1].as_int().expect("a port") as u16)
    })
}

/// The keys of `slot` held by the node on `port` (`CLUSTER GETKEYSINSLOT`, at most `count`).
pub fn keys_in_slot(port: u16, slot: u16, count: usize) -> Vec<String> {
    match query(
        port,
        &[
            "CLUSTER",
            "GETKEYSINSLOT",
            &slot.to_string(),
            &count.to_string(),
        ],
    ) {
        Ok(Resp::Array(Some(keys))) => keys
            .iter()
            .map(|key| key.as_str().expect("a key name").to_owned())
            .collect(),
        other => panic!("CLUSTER GETKEYSINSLOT {slot} on port {port}: {other:?}"),
    }
}

impl RedisCluster {
    /// Moves `slot` and its keys to the master on port `to`, as `redis-cli --cluster reshard`
    /// does: `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING` on the source, `MIGRATE` of
    /// every key of the slot (at most 10 batches of 1,000), then `SETSLOT NODE` on the target,
    /// the source and the other masters. Waits (up to 10 s) until every node's `CLUSTER SLOTS`
    /// names the target. Answers the keys moved. Panics if `to` already serves the slot.
    pub fn move_slot(&self, slot: u16, to: u16) -> Vec<String> {
        let from = slot_owner(to, slot).unwrap_or_else(|| panic!("nobody serves slot {slot}"));
        assert_ne!(
            from, to,
            "the master on port {to} already serves slot {slot}"
        );
        let ok = |port: u16, args: &[&str]| match query(port, args) {
            Ok(Resp::Simple(reply)) if reply == "OK" => {}
            other => panic!("{args:?} on port {port}: {other:?}"),
        };
        let slot_arg = slot.to_string();
        let (from_id, to_id) = (node_id(from), node_id(to));
        ok(
            to,
            &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id],
        );
        ok(
            from,
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id],
        );
        let mut moved = Vec::new();
        for _ in 0..10 {
            let keys = keys_in_slot(from, slot, 1_000);
            if keys.is_empty() {
                break;
            }
            let (port, timeout_ms) = (to.to_string(), "5000");
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", timeout_ms, "KEYS"];
            migrate.extend(keys.iter().map(String::as_str));
            match query(from, &migrate) {
                // NOKEY: the keys expired meanwhile.
                Ok(Resp::Simple(reply)) if reply == "OK" || reply == "NOKEY" => {}
                other => panic!("MIGRATE of slot {slot} from port {from} to {to}: {other:?}"),
            }
            moved.extend(keys);
        }
        let left = keys_in_slot(from, slot, 1_000);
        assert!(
            left.is_empty(),
            "slot {slot} kept keys on port {from}: {left:?}"
        );
        let others = self
            .ports()
            .into_iter()
            .filter(|port| ![from, to].contains(port));
        for port in [to, from].into_iter().chain(others) {
            ok(port, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]);
        }
        wait_until(
            "every node to see the slot's new owner",
            Duration::from_secs(10),
            || {
                self.ports()
                    .into_iter()
                    .all(|port| slot_owner(port, slot) == Some(to))
            },
        );
        moved
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // The nodes write to the directory until they die.
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
