//! The real `leased` binary as a child process whose log goes to a file (fault tests make it log a
//! lot), and what `/proc` says about a process: resident memory and open file descriptors.

use std::{
    fs::File,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use leased::proto::lease_service_client::LeaseServiceClient;
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use super::free_port;

/// Where the child processes of `test` write their logs: `target/tmp/<test>/`.
pub fn log_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(test);
    std::fs::create_dir_all(&dir).expect("cannot create the log directory");
    dir
}

/// `leased serve` on `address` against `redis_url`, with a 1 s Redis timeout and `extra_args`.
pub fn serve_command(address: SocketAddr, redis_url: &str, extra_args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leased"));
    command
        .args(["serve", "--listen", &address.to_string()])
        .args(["--redis-url", redis_url, "--redis-timeout", "1s"])
        .args(extra_args);
    command
}

/// The real `leased` binary as a child process, killed on drop.
pub struct LeasedProcess {
    pub address: SocketAddr,
    child: Option<Child>,
}

impl LeasedProcess {
    /// Starts `leased serve` on a fresh port with its stderr in `log` and `RUST_LOG` at
    /// `log_level`, and waits until it reports SERVING.
    pub async fn spawn(redis_url: &str, extra_args: &[&str], log: &Path, log_level: &str) -> Self {
        let address: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Self::spawn_at(address, redis_url, extra_args, log, log_level).await
    }

    /// [`LeasedProcess::spawn`] on a given address (a replica restarted where its clients
    /// expect it).
    pub async fn spawn_at(
        address: SocketAddr,
        redis_url: &str,
        extra_args: &[&str],
        log: &Path,
        log_level: &str,
    ) -> Self {
        let log_file = File::create(log).expect("cannot create the leased log file");
        let child = serve_command(address, redis_url, extra_args)
            .env("RUST_LOG", log_level)
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("cannot start leased");
        let server = LeasedProcess {
            address,
            child: Some(child),
        };
        server.wait_serving().await;
        server
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    pub async fn client(&self) -> LeaseServiceClient<Channel> {
        LeaseServiceClient::connect(self.endpoint())
            .await
            .expect("cannot connect to leased")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("already stopped").id()
    }

    /// The overall `grpc.health.v1` status, or None if the server does not answer.
    pub async fn health(&self) -> Option<i32> {
        let channel = Channel::from_shared(self.endpoint())
            .ok()?
            .connect_timeout(Duration::from_secs(1))
            .connect()
            .await
            .ok()?;
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        request.set_timeout(Duration::from_secs(2));
        let reply = HealthClient::new(channel).check(request).await.ok()?;
        Some(reply.into_inner().status)
    }

    /// Waits (up to 20 s) until health reports SERVING.
    pub async fn wait_serving(&self) {
        let start = Instant::now();
        while self.health().await != Some(ServingStatus::Serving as i32) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "leased at {} never reported SERVING",
                self.address
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let result = unsafe { libc::kill(self.pid() as i32, signal) };
        assert_eq!(result, 0, "kill({signal}) failed");
    }

    /// SIGKILL, and reap the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The exit status, once the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().expect("wait failed")
    }
}

impl Drop for LeasedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Resident memory of `pid`, in KiB (`VmRSS` in `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("no such process");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("no VmRSS line")
}

/// Open file descriptors of `pid` (entries of `/proc/<pid>/fd`).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("no such process")
        .count()
}

/// Raises this process's soft `RLIMIT_NOFILE` to at least `wanted` (up to the hard limit) and
/// returns the soft limit now in force. Child processes inherit it.
pub fn raise_fd_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    limit.rlim_cur
}
