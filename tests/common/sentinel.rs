//! Redis Sentinel on loopback: one master, one replica and three sentinels from Debian's
//! `redis-server` / `redis-sentinel`, on ephemeral ports, with fast failover settings
//! (`down-after-milliseconds` 1000, `failover-timeout` 5000).
//!
//! The first master is known to everyone (sentinels, replica, `leased`) by the address of a
//! [`FaultProxy`] in front of it, so that a test can block replication alone: the replica then
//! misses every write the master still accepts, as an asynchronous replica that lags does when its
//! master dies. (A replica pointed at a proxy the sentinels do not know would be "fixed" by them
//! to follow the master's real address.)

use std::{
    io::{BufRead, BufReader, Write},
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::{free_port, proxy::FaultProxy, wait_until};

/// The monitored service name.
pub const SERVICE: &str = "mymaster";

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Resp::Simple(s) | Resp::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// An array of alternating field names and values (`SENTINEL master`), as a lookup.
    pub fn field(&self, name: &str) -> Option<String> {
        let Resp::Array(Some(items)) = self else {
            return None;
        };
        items
            .chunks(2)
            .find(|pair| pair[0].as_str() == Some(name))
            .and_then(|pair| pair.get(1)?.as_str().map(str::to_owned))
    }
}

/// Sends one command to `127.0.0.1:port` and reads the whole reply.
pub fn query(port: u16, args: &[&str]) -> std::io::Result<Resp> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Resp> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end_matches("\r\n");
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad RESP reply");
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    Ok(match kind {
        "+" => Resp::Simple(rest.to_owned()),
        "-" => Resp::Error(rest.to_owned()),
        ":" => Resp::Int(rest.parse().map_err(|_| bad())?),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            if len < 0 {
                Resp::Bulk(None)
            } else {
                let mut data = vec![0u8; len as usize + 2];
                std::io::Read::read_exact(reader, &mut data)?;
                data.truncate(len as usize);
                Resp::Bulk(Some(String::from_utf8_lossy(&data).into_owned()))
            }
        }
        "*" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            if len < 0 {
                Resp::Array(None)
            } else {
                let items = (0..len)
                    .map(|_| read_reply(reader))
                    .collect::<std::io::Result<_>>()?;
                Resp::Array(Some(items))
            }
        }
        _ => return Err(bad()),
    })
}

/// One `redis-server` or `redis-sentinel` process.
struct Node {
    port: u16,
    /// The port everyone else uses for it (the proxy's, for the first master).
    known_as: u16,
    process: Option<Child>,
}

impl Node {
    fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Two Redis nodes (at first a master, behind a proxy, and its replica) and three sentinels.
pub struct SentinelSet {
    nodes: Vec<Node>,
    sentinels: Vec<Node>,
    /// In front of the first master.
    pub master_proxy: FaultProxy,
    dir: PathBuf,
}

fn redis_server(port: u16, extra: &[&str]) -> Node {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server is not installed (apt-get install redis-server)");
    wait_until(
        "redis-server to answer PING",
        Duration::from_secs(10),
        || query(port, &["PING"]).is_ok_and(|reply| reply == Resp::Simple("PONG".into())),
    );
    Node {
        port,
        known_as: port,
        process: Some(child),
    }
}

impl SentinelSet {
    /// Starts everything and waits until the three sentinels know the replica and each other, so
    /// that a failover can be agreed on.
    pub fn start() -> Self {
        let mut master = redis_server(free_port(), &[]);
        let master_proxy = FaultProxy::start(([127, 0, 0, 1], master.port).into());
        master.known_as = master_proxy.port;
        let master_address = master.known_as.to_string();
        let replica = redis_server(free_port(), &["--replicaof", "127.0.0.1", &master_address]);
        wait_until("the replica to sync", Duration::from_secs(15), || {
            info_field(replica.port, "replication", "master_link_status").as_deref() == Some("up")
        });

        let dir = std::env::temp_dir().join(format!(
            "leased-sentinel-{}-{}",
            std::process::id(),
            master.port
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
                         sentinel parallel-syncs {SERVICE} 1\n",
                        dir = dir.display(),
                        master = monitored,
                    ),
                )
                .unwrap();
                let child = Command::new("redis-sentinel")
                    .arg(&config)
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("redis-sentinel is not installed (apt-get install redis-sentinel)");
                Node {
                    port,
                    known_as: port,
                    process: Some(child),
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
        node.kill();
        port
    }

    /// Starts the killed node known as `port` again, empty, as a replica of the current master.
    pub fn restart_as_replica(&mut self, port: u16) {
        self.master_proxy.block_replication(false);
        let master = self.other_port(port).to_string();
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.known_as == port)
            .expect("one of our nodes");
        assert!(node.process.is_none(), "node {port} is still running");
        let known_as = node.known_as;
        // Announce the address everyone knows it by, or the master would list it under its real
        // port and the sentinels would track it twice.
        let announce = known_as.to_string();
        *node = redis_server(
            node.port,
            &[
                "--replicaof",
                "127.0.0.1",
                &master,
                "--replica-announce-port",
                &announce,
            ],
        );
        node.known_as = known_as;
        wait_until(
            "the restarted node to sync",
            Duration::from_secs(15),
            || info_field(port, "replication", "master_link_status").as_deref() == Some("up"),
        );
        self.wait_for_quorum();
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
            sentinel.kill();
        }
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One `field:value` line of `INFO section`.
pub fn info_field(port: u16, section: &str, field: &str) -> Option<String> {
    let info = query(port, &["INFO", section]).ok()?;
    info.as_str()?.lines().find_map(|line| {
        line.strip_prefix(field)?
            .strip_prefix(':')
            .map(|value| value.trim().to_owned())
    })
}
