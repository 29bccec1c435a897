//! `redis-server` on 127.0.0.1 without persistence, and the one RESP client that every caller
//! (tests, Sentinel and Cluster setup, the benchmarks) talks to Redis with.

use std::{
    fmt,
    io::{self, BufRead, BufReader, Write},
    net::TcpStream,
    process::{Command, Stdio},
    time::Duration,
};

use super::{Owned, free_port, poll_until, proc, spawn, wait_until};

/// How long a reply may take: a ceiling for a broken server, not a test margin.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A RESP2 reply. An error reply (`-ERR …`) is an `Err` of [`query`] instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    Simple(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// A simple or bulk string's text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Resp::Simple(s) | Resp::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// An integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Resp::Int(n) => Some(*n),
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

/// Simple strings and integers with their RESP type mark (`+OK`, `:1`), as tests compare them; a
/// bulk string as its text; an array as its items, one a line.
impl fmt::Display for Resp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resp::Simple(s) => write!(f, "+{s}"),
            Resp::Int(n) => write!(f, ":{n}"),
            Resp::Bulk(Some(s)) => f.write_str(s),
            Resp::Bulk(None) | Resp::Array(None) => f.write_str("(nil)"),
            Resp::Array(Some(items)) => {
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{item}")?;
                }
                Ok(())
            }
        }
    }
}

/// Sends one command to `127.0.0.1:port` and reads the whole reply.
pub fn query(port: u16, args: &[&str]) -> io::Result<Resp> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Resp> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end_matches("\r\n");
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad RESP reply {line:?}"),
        )
    };
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    let number = || rest.parse::<i64>().map_err(|_| bad());
    Ok(match kind {
        "+" => Resp::Simple(rest.to_owned()),
        "-" => return Err(io::Error::other(format!("redis answered -{rest}"))),
        ":" => Resp::Int(number()?),
        "$" => match usize::try_from(number()?) {
            Err(_) => Resp::Bulk(None),
            Ok(len) => {
                let mut data = vec![0u8; len + 2];
                reader.read_exact(&mut data)?;
                data.truncate(len);
                Resp::Bulk(Some(String::from_utf8_lossy(&data).into_owned()))
            }
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => Resp::Array(None),
            Ok(len) => Resp::Array(Some(
                (0..len)
                    .map(|_| read_reply(reader))
                    .collect::<io::Result<_>>()?,
            )),
        },
        _ => return Err(bad()),
    })
}

/// One `field:value` line of `INFO section` of the server on `port`.
pub fn info_field(port: u16, section: &str, field: &str) -> Option<String> {
    let info = query(port, &["INFO", section]).ok()?;
    info.as_str()?.lines().find_map(|line| {
        line.strip_prefix(field)?
            .strip_prefix(':')
            .map(|value| value.trim().to_owned())
    })
}

/// A real `redis-server` without persistence on 127.0.0.1, which tests can kill, restart or
/// pause.
pub struct RedisServer {
    pub port: u16,
    /// Tells this value's working directory from another's on the same port.
    instance: u64,
    /// Flags after the defaults, kept for [`RedisServer::restart`].
    extra_args: Vec<String>,
    process: Owned,
}

impl RedisServer {
    /// On a fresh port; panics if it does not answer PING within 10 s.
    pub fn start() -> Self {
        Self::start_with(free_port(), &[])
    }

    /// [`RedisServer::start`] that answers an error instead.
    pub fn try_start() -> io::Result<Self> {
        Self::try_start_with(free_port(), &[])
    }

    /// On `port`, with `extra_args` after the defaults (a replica's `--replicaof`, a cluster
    /// node's settings).
    pub fn start_with(port: u16, extra_args: &[&str]) -> Self {
        Self::try_start_with(port, extra_args).unwrap_or_else(|error| panic!("{error}"))
    }

    /// A replica of `master` on a fresh port, returned once its first sync is done
    /// (`master_link_status:up`): `WAIT` counts it only then.
    pub fn start_replica_of(master: &RedisServer) -> Self {
        let replica = Self::start_with(
            free_port(),
            &["--replicaof", "127.0.0.1", &master.port.to_string()],
        );
        wait_until("the replica to sync", Duration::from_secs(20), || {
            replica
                .info_field("replication", "master_link_status")
                .as_deref()
                == Some("up")
        });
        replica
    }

    /// [`RedisServer::start_with`] that answers an error instead.
    pub fn try_start_with(port: u16, extra_args: &[&str]) -> io::Result<Self> {
        let mut server = RedisServer {
            port,
            extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
            process: Owned(None),
            instance: {
                static INSTANCES: std::sync::atomic::AtomicU64 =
                    std::sync::atomic::AtomicU64::new(0);
                INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
        };
        server.spawn()?;
        Ok(server)
    }

    /// The working directory (`--dir`) of this value's server: one per value, so that a server
    /// started on the port of one still being replaced (`node.server = RedisServer::start_with(
    /// same port)` drops the old value after the new one started) never loses its directory to
    /// the old one's drop.
    fn dir(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "leased-redis-{}-{}-{}",
            std::process::id(),
            self.port,
            self.instance
        ))
    }

    fn spawn(&mut self) -> io::Result<()> {
        // A directory of its own: a replica's sync writes the master's data to `dump.rdb` in it,
        // which a server started later in the same directory (the tests' working directory, by
        // default) would load at startup. Emptied at each start, so a restart starts empty.
        let dir = self.dir();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let child = spawn(
            Command::new("redis-server")
                .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .arg("--dir")
                .arg(&dir)
                .args(&self.extra_args)
                .stdout(Stdio::null()),
        )?;
        self.process = Owned(Some(child));
        let port = self.port;
        let mut exited = None;
        poll_until(
            "redis-server to answer PING",
            Duration::from_secs(10),
            || {
                // A server that could not start (its port taken) exits: say so at once.
                exited = self
                    .process
                    .0
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                exited.is_some()
                    || query(port, &["PING"])
                        .is_ok_and(|reply| reply == Resp::Simple("PONG".into()))
            },
        )?;
        match exited {
            Some(status) => Err(io::Error::other(format!(
                "redis-server on port {port} exited at start ({status}); its port may be taken"
            ))),
            None => Ok(()),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id, for CPU metering; panics once killed.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("redis-server not running")
    }

    pub fn is_running(&self) -> bool {
        self.process.pid().is_some()
    }

    /// Sends one command and reads the whole reply.
    pub fn query(&self, args: &[&str]) -> io::Result<Resp> {
        query(self.port, args)
    }

    /// Sends one command; the reply as text (`+OK`, `:1`, a bulk string's contents). Panics on
    /// an error reply.
    pub fn command(&self, args: &[&str]) -> String {
        self.query(args)
            .unwrap_or_else(|error| panic!("redis {args:?} failed: {error}"))
            .to_string()
    }

    /// One `field:value` line of `INFO section`.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        info_field(self.port, section, field)
    }

    /// SIGKILL: all data is lost (no persistence).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// A fresh, empty redis-server on the same port, with the same flags.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn().unwrap_or_else(|error| panic!("{error}"));
    }

    /// SIGSTOP: the TCP connections stay up but nothing answers.
    pub fn pause(&self) {
        proc::signal(self.pid(), libc::SIGSTOP).expect("SIGSTOP failed");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        proc::signal(self.pid(), libc::SIGCONT).expect("SIGCONT failed");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused server is resumed first, so that it dies at once and leaves no stopped process.
        if let Some(pid) = self.process.pid() {
            let _ = proc::signal(pid, libc::SIGCONT);
        }
        let _ = std::fs::remove_dir_all(self.dir());
    }
}
