//! Redis Sentinel on loopback: one master, one replica and three sentinels from Debian's
//! `redis-server` / `redis-sentinel`, on ephemeral ports, with fast failover settings
//! (`down-after-milliseconds` 1000, `failover-timeout` 5000).
//!
//! Settings that fast have a cost: on a busy machine the sentinels may find a master they have
//! just promoted down (its first `PING` unanswered within the second) and fail over again, to the
//! node restarted as a replica a moment before, while the promoted one keeps taking writes for
//! seconds until the sentinels turn it into a replica. A test's fault lasts until
//! [`SentinelSet::wait_until_settled`] says the nodes are as the sentinels say, for a while.
//!
//! The first master is known to everyone (sentinels, replica, `leased`) by the address of a
//! [`FaultProxy`] in front of it, so that a test can block replication alone: the replica then
//! misses every write the master still accepts, as an asynchronous replica that lags does when its
//! master dies. (A replica pointed at a proxy the sentinels do not know would be "fixed" by them
//! to follow the master's real address.)

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::{
    Owned, free_port,
    proxy::FaultProxy,
    redis::{RedisServer, Resp, info_field, query},
    spawn, wait_until,
};

/// Every node: a full sync to a replica starts at once, not after Redis's default 5 s.
const NO_SYNC_DELAY: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

/// The monitored service name.
pub const SERVICE: &str = "mymaster";

/// How long the nodes must stay as the sentinels say before they count as settled: twice the
/// sentinels' `down-after-milliseconds`, past which a master they were about to find down would
/// have been.
const SETTLED_FOR: Duration = Duration::from_secs(2);

/// How the nodes stood once settled.
pub struct Settled {
    /// The master's address (port).
    pub master: u16,
    /// Failovers the sentinels made since they started.
    pub switches: usize,
}

/// One Redis node, and the port everyone else uses for it (the proxy's, for the first master).
struct Node {
    server: RedisServer,
    known_as: u16,
}

/// Two Redis nodes (at first a master, behind a proxy, and its replica) and three sentinels.
pub struct SentinelSet {
    nodes: Vec<Node>,
    sentinels: Vec<Sentinel>,
    /// In front of the first master.
    pub master_proxy: FaultProxy,
    dir: PathBuf,
}

/// One `redis-sentinel` process.
struct Sentinel {
    port: u16,
    process: Owned,
}

impl SentinelSet {
    /// Starts everything and waits until the three sentinels know the replica and each other, so
    /// that a failover can be agreed on.
    pub fn start() -> Self {
        // A master starts a replica's full sync at once (Redis waits 5 s for more replicas by
        // default): a node restarted as a replica is in sync within a second.
        let master = RedisServer::start_with(free_port(), &NO_SYNC_DELAY);
        let master_proxy = FaultProxy::start(([127, 0, 0, 1], master.port).into());
        let master = Node {
            server: master,
            known_as: master_proxy.port,
        };
        let master_address = master.known_as.to_string();
        let replica = RedisServer::start_with(
            free_port(),
            &[
                &NO_SYNC_DELAY[..],
                &["--replicaof", "127.0.0.1", &master_address],
            ]
            .concat(),
        );
        wait_until("the replica to sync", Duration::from_secs(15), || {
            replica
                .info_field("replication", "master_link_status")
                .as_deref()
                == Some("up")
        });
        let replica = Node {
            known_as: replica.port,
            server: replica,
        };

        let dir = std::env::temp_dir().join(format!(
            "leased-sentinel-{}-{}",
            std::process::id(),
            master.server.port
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let monitored = master.known_as;
        let sentinels = (0..3)
            .map(|index| {
                let port = free_port();
                let config = dir.join(format!("sentinel-{index}.conf"));
                // Sentinel rewrites its config file, so each needs its own writable one.
                std::fs::write(
                    &config,
                    format!(
                        "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                         sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n\
                         sentinel down-after-milliseconds {SERVICE} 1000\n\
                         sentinel failover-timeout {SERVICE} 5000\n\
                         sentinel parallel-syncs {SERVICE} 1\n\
                         logfile {dir}/sentinel-{index}.log\n",
                        dir = dir.display(),
                        master = monitored,
                    ),
                )
                .unwrap();
                let child = spawn(
                    Command::new("redis-sentinel")
                        .arg(&config)
                        .stdout(Stdio::null()),
                )
                .unwrap_or_else(|error| panic!("{error}"));
                Sentinel {
                    port,
                    process: Owned(Some(child)),
                }
            })
            .collect::<Vec<_>>();
        let set = SentinelSet {
            nodes: vec![master, replica],
            sentinels,
            master_proxy,
            dir,
        };
        set.wait_for_quorum();
        set
    }

    /// Waits until every sentinel knows one replica and the two other sentinels.
    fn wait_for_quorum(&self) {
        for sentinel in &self.sentinels {
            wait_until(
                "the sentinels to find the replica and each other",
                Duration::from_secs(30),
                || {
                    query(sentinel.port, &["SENTINEL", "master", SERVICE]).is_ok_and(|master| {
                        master.field("num-slaves").as_deref() == Some("1")
                            && master.field("num-other-sentinels").as_deref() == Some("2")
                            && master.field("flags").as_deref() == Some("master")
                    })
                },
            );
        }
    }

    /// The URL `leased` connects with: every sentinel, the service name, database 0.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName={SERVICE}",
            self.sentinels[0].port
        );
        for sentinel in &self.sentinels[1..] {
            url.push_str(&format!("&node=127.0.0.1:{}", sentinel.port));
        }
        url
    }

    /// The master's port as the first sentinel reports it.
    pub fn reported_master_port(&self) -> Option<u16> {
        let reply = query(
            self.sentinels[0].port,
            &["SENTINEL", "get-master-addr-by-name", SERVICE],
        )
        .ok()?;
        let Resp::Array(Some(address)) = reply else {
            return None;
        };
        address.get(1)?.as_str()?.parse().ok()
    }

    /// The address (port) of the node that is not `port`.
    pub fn other_port(&self, port: u16) -> u16 {
        self.nodes
            .iter()
            .map(|node| node.known_as)
            .find(|other| *other != port)
            .expect("two nodes")
    }

    /// Blocks replication from the first master: the replica misses every write from now on.
    pub fn cut_replication(&self) {
        self.master_proxy.block_replication(true);
    }

    /// SIGKILL to the current master; returns its address (port).
    pub fn kill_master(&mut self) -> u16 {
        let port = self.reported_master_port().expect("no master reported");
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.known_as == port)
            .expect("the master is one of our nodes");
        node.server.kill();
        port
    }

    /// Starts the killed node known as `port` again, empty, as a replica of the current master,
    /// and waits until the nodes have settled (see [`wait_until_settled`](Self::wait_until_settled)).
    pub fn restart_as_replica(&mut self, port: u16) -> Settled {
        self.master_proxy.block_replication(false);
        let master = self.other_port(port).to_string();
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.known_as == port)
            .expect("one of our nodes");
        assert!(!node.server.is_running(), "node {port} is still running");
        // Announce the address everyone knows it by, or the master would list it under its real
        // port and the sentinels would track it twice.
        let announce = node.known_as.to_string();
        node.server = RedisServer::start_with(
            node.server.port,
            &[
                NO_SYNC_DELAY[0],
                NO_SYNC_DELAY[1],
                "--replicaof",
                "127.0.0.1",
                &master,
                "--replica-announce-port",
                &announce,
            ],
        );
        wait_until(
            "the restarted node to sync",
            Duration::from_secs(30),
            || info_field(port, "replication", "master_link_status").as_deref() == Some("up"),
        );
        self.wait_for_quorum();
        self.wait_until_settled(Duration::from_secs(60))
    }

    /// Waits until every sentinel names the same master without finding it down, that node says
    /// it is the master, the other one replicates from it with its link up, and all of it has
    /// held for [`SETTLED_FOR`]: until then a failover may still be under way, or follow.
    pub fn wait_until_settled(&self, timeout: Duration) -> Settled {
        let start = Instant::now();
        let mut since: Option<Instant> = None;
        loop {
            let settled_master = self.agreed_master().filter(|master| {
                let other = self.other_port(*master);
                let role = |port: u16| info_field(port, "replication", "role");
                role(*master).as_deref() == Some("master")
                    && role(other).as_deref() == Some("slave")
                    && info_field(other, "replication", "master_link_status").as_deref()
                        == Some("up")
                    && info_field(other, "replication", "master_port") == Some(master.to_string())
            });
            match (settled_master, since) {
                (Some(master), Some(since)) if since.elapsed() >= SETTLED_FOR => {
                    return Settled {
                        master,
                        switches: self.master_switches(),
                    };
                }
                (Some(_), Some(_)) => {}
                (Some(_), None) => since = Some(Instant::now()),
                (None, _) => since = None,
            }
            assert!(
                start.elapsed() < timeout,
                "the Sentinel nodes did not settle within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The master's address (port), if every sentinel names the same one and none finds it down.
    fn agreed_master(&self) -> Option<u16> {
        let mut agreed = None;
        for sentinel in &self.sentinels {
            let master = query(sentinel.port, &["SENTINEL", "master", SERVICE]).ok()?;
            if master.field("flags").as_deref() != Some("master") {
                return None;
            }
            let port: u16 = master.field("port")?.parse().ok()?;
            if agreed.is_some_and(|agreed| agreed != port) {
                return None;
            }
            agreed = Some(port);
        }
        agreed
    }

    /// How many times the sentinels switched the master so far (each failover once), from their
    /// logs.
    pub fn master_switches(&self) -> usize {
        (0..self.sentinels.len())
            .map(|index| {
                std::fs::read_to_string(self.dir.join(format!("sentinel-{index}.log")))
                    .unwrap_or_default()
                    .matches("+switch-master")
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Waits until the sentinels report the node known as `port` as the master and it has taken
    /// the role; returns how long that took.
    pub fn wait_for_master(&self, port: u16, timeout: Duration) -> Duration {
        let start = Instant::now();
        wait_until("the sentinels to promote the replica", timeout, || {
            self.reported_master_port() == Some(port)
                && info_field(port, "replication", "role").as_deref() == Some("master")
        });
        start.elapsed()
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for sentinel in &mut self.sentinels {
            sentinel.process.kill();
        }
        for node in &mut self.nodes {
            node.server.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
