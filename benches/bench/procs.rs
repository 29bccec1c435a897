//! The processes a benchmark run starts, all on 127.0.0.1 and ephemeral ports, each killed on
//! drop: `redis-server`, the release `leased` binary (on Redis or on its embedded store), and
//! `etcd`. Also what `/proc` and Redis `INFO` say about them.

use std::{
    fs::File,
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use tonic::transport::{Channel, Endpoint};

use crate::{
    BenchResult,
    measure::{meter_cpu, unmeter_cpu},
};

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("no free port on 127.0.0.1")
        .port()
}

/// Where a run writes its report, logs and scratch files: `target/bench/`.
pub fn bench_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("bench");
    std::fs::create_dir_all(&dir).expect("cannot create target/bench");
    dir
}

/// Whether `program` can be started (is on `PATH`).
pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// A child process that is killed and reaped on drop.
struct Owned(Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `ready` every 20 ms for up to `timeout`.
async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut ready: F) -> BenchResult<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !ready().await {
        if started.elapsed() > timeout {
            return Err(format!("timed out after {timeout:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A `redis-server` without persistence.
pub struct RedisServer {
    pub port: u16,
    _process: Owned,
}

impl RedisServer {
    pub async fn start() -> BenchResult<Self> {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start redis-server (run scripts/bench.sh): {e}"))?;
        meter_cpu("redis", child.id());
        let server = RedisServer {
            port,
            _process: Owned(child),
        };
        wait_until("redis-server", Duration::from_secs(10), || async {
            server.command(&["PING"]).is_ok_and(|reply| reply == "PONG")
        })
        .await?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs one command; answers a simple, integer or bulk reply as text.
    pub fn command(&self, args: &[&str]) -> BenchResult<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes())?;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        match line.split_at_checked(1) {
            Some(("+" | ":", value)) => Ok(value.to_owned()),
            Some(("$", length)) => {
                let length: usize = length.parse()?;
                let mut body = vec![0; length + 2];
                reader.read_exact(&mut body)?;
                body.truncate(length);
                Ok(String::from_utf8(body)?)
            }
            _ => Err(format!("redis {args:?} answered {line:?}").into()),
        }
    }

    /// One numeric field of `INFO` (e.g. `used_memory`).
    pub fn info_field(&self, section: &str, field: &str) -> BenchResult<i64> {
        let info = self.command(&["INFO", section])?;
        info.lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .ok_or_else(|| format!("INFO {section} has no {field}"))?
            .trim()
            .parse()
            .map_err(Into::into)
    }
}

/// The `leased` binary the bench starts instead of the one cargo built (`--leased-bin`).
pub static LEASED_BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The release `leased` binary as a child process, logging to `target/bench/leased-<label>.log`.
pub struct LeasedServer {
    pub address: SocketAddr,
    /// Names its CPU time in the results: `leased` on Redis, `leased-<label>` otherwise.
    cpu_label: String,
    process: Owned,
}

impl LeasedServer {
    /// Starts `leased serve` (on Redis when `redis_url` is set) and waits until health is SERVING.
    pub async fn start(
        label: &str,
        redis_url: Option<&str>,
        extra_args: &[String],
        log_level: &str,
    ) -> BenchResult<Self> {
        let address: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let log = File::create(bench_dir().join(format!("leased-{label}.log")))?;
        let program = LEASED_BIN
            .get()
            .cloned()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_leased")));
        let mut command = Command::new(program);
        command
            .args(["serve", "--listen", &address.to_string()])
            .args(extra_args)
            .env("RUST_LOG", log_level)
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(url) = redis_url {
            command.args(["--redis-url", url]);
        }
        let cpu_label = match redis_url {
            Some(_) => "leased".to_owned(),
            None => format!("leased-{label}"),
        };
        let server = LeasedServer {
            address,
            process: Owned(command.spawn()?),
            cpu_label,
        };
        meter_cpu(&server.cpu_label, server.process.0.id());
        eprintln!(
            "bench: leased ({label}) is pid {} on {address}",
            server.process.0.id()
        );
        wait_until("leased to report SERVING", Duration::from_secs(20), || {
            server.serving()
        })
        .await?;
        Ok(server)
    }

    async fn serving(&self) -> bool {
        use tonic_health::pb::{
            HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
        };
        let Ok(channel) = self.connect().await else {
            return false;
        };
        let reply = HealthClient::new(channel)
            .check(HealthCheckRequest::default())
            .await;
        reply.is_ok_and(|reply| reply.into_inner().status == ServingStatus::Serving as i32)
    }

    /// A new HTTP/2 connection to the server.
    pub async fn connect(&self) -> BenchResult<Channel> {
        connect(self.address).await
    }

    /// `connections` separate HTTP/2 connections.
    pub async fn connections(&self, connections: usize) -> BenchResult<Vec<Channel>> {
        let mut channels = Vec::with_capacity(connections);
        for _ in 0..connections.max(1) {
            channels.push(self.connect().await?);
        }
        Ok(channels)
    }

    /// Resident memory of the server process, in bytes (`VmRSS` in `/proc/<pid>/status`).
    pub fn rss_bytes(&self) -> BenchResult<u64> {
        rss_bytes(self.process.0.id())
    }
}

impl Drop for LeasedServer {
    fn drop(&mut self) {
        unmeter_cpu(&self.cpu_label);
    }
}

/// A plaintext HTTP/2 connection to `address`, with Nagle off as a latency-minded client would.
pub async fn connect(address: SocketAddr) -> BenchResult<Channel> {
    Ok(Endpoint::from_shared(format!("http://{address}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?)
}

/// `VmRSS` of `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> BenchResult<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .ok_or("no VmRSS line")?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib * 1024)
}

/// A one-member etcd (Debian's `etcd-server`, 3.4) with a scratch data directory, default
/// settings otherwise (so every write is fsynced, as in production).
pub struct EtcdServer {
    pub client_address: SocketAddr,
    data_dir: PathBuf,
    process: Owned,
}

impl EtcdServer {
    pub async fn start() -> BenchResult<Self> {
        if !installed("etcd") {
            return Err("etcd is not installed: run scripts/bench.sh (Debian etcd-server)".into());
        }
        let dir = bench_dir();
        let data_dir = dir.join(format!("etcd-data-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let client_address: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let client_url = format!("http://{client_address}");
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let child = Command::new("etcd")
            .args(["--name", "bench", "--data-dir"])
            .arg(&data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("bench={peer_url}")])
            .stdout(Stdio::null())
            .stderr(File::create(dir.join("etcd.log"))?)
            .spawn()
            .map_err(|e| format!("cannot start etcd: {e}"))?;
        meter_cpu("etcd", child.id());
        let server = EtcdServer {
            client_address,
            data_dir,
            process: Owned(child),
        };
        wait_until("etcd to grant a lease", Duration::from_secs(20), || async {
            match connect(server.client_address).await {
                Ok(channel) => crate::etcd::Etcd::new(channel).lease_grant(5).await.is_ok(),
                Err(_) => false,
            }
        })
        .await?;
        Ok(server)
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        unmeter_cpu("etcd");
        // Stop it before removing its data directory (`Owned` would only do so after this body).
        let _ = self.process.0.kill();
        let _ = self.process.0.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}
