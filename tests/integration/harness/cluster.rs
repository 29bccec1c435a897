//! A real Redis Cluster on loopback: cluster-enabled `redis-server`s joined by
//! `redis-cli --cluster create`. Three masters ([`RedisCluster::start`]), whose slot can be moved
//! to another master with its keys ([`RedisCluster::move_slot`]); or three masters with one
//! replica each ([`RedisCluster::start_with_replicas`]), whose master can be killed
//! ([`RedisCluster::kill_master_of`]), replaced by its replica
//! ([`RedisCluster::wait_for_failover`]) and brought back as the new master's replica
//! ([`RedisCluster::restart_as_replica`]).

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::{
    free_port,
    redis::{RedisServer, Resp, info_field, query},
    spawn, wait_until,
};

/// `cluster-node-timeout` of a cluster with replicas: a master unreachable for this long is
/// flagged as failing, and its replica is elected about a second later, so a failover takes a few
/// seconds (Redis's default, 15 s, would make every failover test wait that long).
pub const NODE_TIMEOUT_MS: u64 = 1_000;

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

/// Cluster-enabled redis-servers (three masters, and a replica of each if started with them),
/// killed on drop with their scratch directory. Each node has its own directory under it, for its
/// `nodes.conf` and the RDB file a replica's sync writes: a node restarted there comes back as
/// the same node, and never loads another node's data.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    dir: PathBuf,
}

/// A master killed by [`RedisCluster::kill_master_of`].
#[derive(Clone, Debug)]
pub struct Killed {
    /// The killed master's port.
    pub port: u16,
    /// The port of its replica, which is to take over its slots.
    pub replica: u16,
    /// The slot ranges it served (inclusive).
    pub slots: Vec<(u16, u16)>,
    /// When it was killed.
    pub at: Instant,
}

/// A failover that [`RedisCluster::wait_for_failover`] saw complete.
#[derive(Clone, Debug)]
pub struct Failover {
    /// The killed master's port.
    pub killed: u16,
    /// The port of the replica that now serves its slots.
    pub promoted: u16,
    /// From the kill until the replica was master of every slot of the killed one and every live
    /// node reported `cluster_state:ok`.
    pub took: Duration,
}

impl RedisCluster {
    /// Three masters, no replicas (Redis's default `cluster-node-timeout`). Waits (up to 20 s)
    /// until every node reports `cluster_state:ok`.
    pub fn start() -> Self {
        Self::start_nodes(3, 0, &[])
    }

    /// Three masters with one replica each, a [`NODE_TIMEOUT_MS`] node timeout, and
    /// `repl-diskless-sync-delay 0` (a master otherwise waits 5 s for more replicas before it
    /// sends a full sync, so a node that rejoins as a replica would take that long). Waits (up to
    /// 20 s) until every node reports `cluster_state:ok`, every master has its replica connected
    /// (`connected_slaves:1`), every replica's link to its master is up, and every node's
    /// `CLUSTER NODES` shows three masters and three replicas, none failing.
    pub fn start_with_replicas() -> Self {
        let node_timeout = NODE_TIMEOUT_MS.to_string();
        let cluster = Self::start_nodes(
            6,
            1,
            &[
                "--cluster-node-timeout",
                &node_timeout,
                "--repl-diskless-sync-delay",
                "0",
            ],
        );
        wait_until(
            "every replica to sync and be known to every node",
            Duration::from_secs(20),
            || {
                cluster.nodes.iter().all(|node| {
                    let field = |name| node.info_field("replication", name);
                    let synced = match field("role").as_deref() {
                        Some("master") => field("connected_slaves").as_deref() == Some("1"),
                        _ => field("master_link_status").as_deref() == Some("up"),
                    };
                    synced
                        && cluster_nodes(node.port).is_some_and(|nodes| {
                            let replicas = nodes.iter().filter(|n| n.master_id.is_some()).count();
                            nodes.len() == 6 && replicas == 3 && nodes.iter().all(|n| !n.failing)
                        })
                })
            },
        );
        cluster
    }

    /// `masters + masters × replicas` nodes, joined by `redis-cli --cluster create`, each with
    /// `extra_args` after the cluster settings.
    fn start_nodes(count: usize, replicas: usize, extra_args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "leased-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        let nodes = (0..count)
            .map(|_| {
                let port = free_cluster_port();
                let node_dir = dir.join(format!("node-{port}"));
                std::fs::create_dir_all(&node_dir).unwrap();
                let node_dir = node_dir.display().to_string();
                let cluster_args = ["--cluster-enabled", "yes"];
                let files = ["--cluster-config-file", "nodes.conf", "--dir", &node_dir];
                RedisServer::start_with(port, &[&cluster_args[..], &files[..], extra_args].concat())
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
                .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
                .stdout(Stdio::null()),
        )
        .and_then(|mut create| create.wait())
        .unwrap_or_else(|error| panic!("{error}"));
        assert!(status.success(), "redis-cli --cluster create failed");
        wait_until("the cluster to be ok", Duration::from_secs(20), || {
            cluster.all_ok()
        });
        cluster
    }

    /// Whether every live node reports `cluster_state:ok`.
    fn all_ok(&self) -> bool {
        self.ports().into_iter().all(|port| {
            query(port, &["CLUSTER", "INFO"])
                .is_ok_and(|info| info.to_string().contains("cluster_state:ok"))
        })
    }

    /// The live nodes' ports, masters and replicas, for commands to one node (`CLUSTER SLOTS`,
    /// `INFO commandstats`).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|node| node.is_running())
            .map(|node| node.port)
            .collect()
    }

    /// The ports of the masters that serve slots, as the first live node sees them.
    pub fn masters(&self) -> Vec<u16> {
        let port = self.ports()[0];
        let ranges = slot_ranges(port).unwrap_or_else(|| panic!("CLUSTER SLOTS on {port} failed"));
        let mut masters: Vec<u16> = ranges.iter().map(|range| range.master).collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }

    /// The `redis-cluster://` URL naming every node (a client that cannot reach the first one
    /// starts from another).
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.nodes[0].port);
        for (index, node) in self.nodes.iter().enumerate().skip(1) {
            let separator = if index == 1 { '?' } else { '&' };
            url.push_str(&format!("{separator}node=127.0.0.1:{}", node.port));
        }
        url
    }

    /// SIGKILL to the master that serves `slot`, which must have a replica. No persistence: its
    /// data is gone; its `nodes.conf` stays, for [`RedisCluster::restart_as_replica`].
    pub fn kill_master_of(&mut self, slot: u16) -> Killed {
        let port = self.ports()[0];
        let ranges = slot_ranges(port).expect("CLUSTER SLOTS failed");
        let master = ranges
            .iter()
            .find(|range| (range.first..=range.last).contains(&slot))
            .unwrap_or_else(|| panic!("nobody serves slot {slot}"))
            .master;
        // CLUSTER NODES, not CLUSTER SLOTS, for the replica: CLUSTER SLOTS leaves out a replica
        // until its replication offset is not 0, up to a replication ping (10 s) after its sync.
        let master_id = node_id(master);
        let replica = cluster_nodes(port)
            .expect("CLUSTER NODES failed")
            .iter()
            .find(|node| node.master_id.as_deref() == Some(master_id.as_str()) && !node.failing)
            .unwrap_or_else(|| panic!("the master on port {master} has no replica"))
            .port;
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.port == master)
            .expect("the master is one of our nodes");
        node.kill();
        Killed {
            port: master,
            replica,
            slots: ranges
                .iter()
                .filter(|range| range.master == master)
                .map(|range| (range.first, range.last))
                .collect(),
            at: Instant::now(),
        }
    }

    /// Waits (up to `timeout`) until every live node names `killed.replica` as the master of
    /// every slot the killed master served, the replica says it is a master, and every live node
    /// reports `cluster_state:ok`; prints how long that took from the kill.
    pub fn wait_for_failover(&self, killed: &Killed, timeout: Duration) -> Failover {
        let promoted = killed.replica;
        wait_until("the replica to take over", timeout, || {
            info_field(promoted, "replication", "role").as_deref() == Some("master")
                && self.ports().into_iter().all(|port| {
                    killed
                        .slots
                        .iter()
                        .all(|(first, last)| owner_of_range(port, *first, *last) == Some(promoted))
                })
                && self.all_ok()
        });
        let took = killed.at.elapsed();
        println!(
            "cluster: master {} killed; replica {promoted} took over its slots {:?} and every \
             node reported cluster_state:ok after {took:?}",
            killed.port, killed.slots
        );
        Failover {
            killed: killed.port,
            promoted,
            took,
        }
    }

    /// Starts the killed node again on its port, from its own `nodes.conf` and directory, empty:
    /// the cluster tells it that its slots have a newer master, and it becomes that master's
    /// replica. Waits (up to `timeout`) until it is a replica of `failover.promoted` with
    /// `master_link_status:up` (its full sync done), the promoted master counts it among its
    /// connected replicas, every live node's `CLUSTER NODES` lists it as that master's replica, and
    /// every live
    /// node reports `cluster_state:ok`. Answers how long that took from the restart, and prints
    /// it.
    pub fn restart_as_replica(&mut self, failover: &Failover, timeout: Duration) -> Duration {
        let started = Instant::now();
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.port == failover.killed)
            .expect("one of our nodes");
        assert!(!node.is_running(), "node {} is still running", node.port);
        node.restart();
        let (port, promoted) = (failover.killed, failover.promoted);
        let promoted_id = node_id(promoted);
        wait_until("the restarted node to rejoin as a replica", timeout, || {
            let replication = |field| info_field(port, "replication", field);
            replication("role").as_deref() == Some("slave")
                && replication("master_port") == Some(promoted.to_string())
                && replication("master_link_status").as_deref() == Some("up")
                && info_field(promoted, "replication", "connected_slaves").as_deref() == Some("1")
                && self.ports().into_iter().all(|node| {
                    cluster_nodes(node).is_some_and(|nodes| {
                        nodes.iter().any(|node| {
                            node.port == port
                                && !node.failing
                                && node.master_id.as_deref() == Some(promoted_id.as_str())
                        })
                    })
                })
                && self.all_ok()
        });
        let took = started.elapsed();
        println!(
            "cluster: node {port} restarted and synced as a replica of {promoted} after {took:?}"
        );
        took
    }
}

/// One range of `CLUSTER SLOTS`: its slots (inclusive) and its master's port.
#[derive(Clone, Debug)]
pub struct SlotRange {
    pub first: u16,
    pub last: u16,
    pub master: u16,
}

/// `CLUSTER SLOTS` of the node on `port`; None if it does not answer.
pub fn slot_ranges(port: u16) -> Option<Vec<SlotRange>> {
    let Ok(Resp::Array(Some(ranges))) = query(port, &["CLUSTER", "SLOTS"]) else {
        return None;
    };
    // Each range: [first slot, last slot, [ip, port, id] of the master, replicas...].
    let slot_of = |field: &Resp| field.as_int().expect("a slot") as u16;
    Some(
        ranges
            .iter()
            .map(|range| {
                let Resp::Array(Some(fields)) = range else {
                    panic!("bad CLUSTER SLOTS range {range:?}");
                };
                let Resp::Array(Some(master)) = &fields[2] else {
                    panic!("bad CLUSTER SLOTS master {range:?}");
                };
                SlotRange {
                    first: slot_of(&fields[0]),
                    last: slot_of(&fields[1]),
                    master: master[1].as_int().expect("a port") as u16,
                }
            })
            .collect(),
    )
}

/// One line of `CLUSTER NODES`, as far as the harness reads it.
#[derive(Clone, Debug)]
pub struct ClusterNode {
    pub port: u16,
    /// The node id of its master, if it is a replica.
    pub master_id: Option<String>,
    /// Flagged `fail` or `fail?` (or still in its handshake, or without an address).
    pub failing: bool,
}

/// `CLUSTER NODES` of the node on `port`; None if it does not answer.
pub fn cluster_nodes(port: u16) -> Option<Vec<ClusterNode>> {
    let reply = query(port, &["CLUSTER", "NODES"]).ok()?;
    // Each line: id ip:port@cport flags master ping-sent pong-recv epoch link-state slots...
    reply
        .as_str()?
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let address = fields.get(1)?;
            let port = address.split(['@', ',']).next()?.rsplit(':').next()?;
            let flags = fields.get(2)?;
            let master = fields.get(3)?;
            Some(ClusterNode {
                port: port.parse().ok()?,
                master_id: (*master != "-").then(|| master.to_string()),
                failing: flags
                    .split(',')
                    .any(|flag| ["fail", "fail?", "handshake", "noaddr"].contains(&flag)),
            })
        })
        .collect()
}

/// The master of every slot from `first` to `last`, as the node on `port` sees it: None if it
/// does not answer, or not one master serves them all.
fn owner_of_range(port: u16, first: u16, last: u16) -> Option<u16> {
    let ranges = slot_ranges(port)?;
    let mut slot = first;
    let mut owner = None;
    // The node may list the slots in several ranges: walk them from `first` on.
    while slot <= last {
        let range = ranges
            .iter()
            .find(|range| (range.first..=range.last).contains(&slot))?;
        if owner.is_some_and(|owner| owner != range.master) {
            return None;
        }
        owner = Some(range.master);
        match range.last.checked_add(1) {
            Some(next) => slot = next,
            None => break,
        }
    }
    owner
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
    let ranges = slot_ranges(port).unwrap_or_else(|| panic!("CLUSTER SLOTS on port {port} failed"));
    ranges
        .iter()
        .find(|range| (range.first..=range.last).contains(&slot))
        .map(|range| range.master)
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
        // SETSLOT is refused by replicas: the other masters only.
        let others = self
            .masters()
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
