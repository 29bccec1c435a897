//! `leased` itself: in this process ([`Leased`], on either store), or as a child process of the
//! real binary ([`LeasedProcess`], started through [`Serve`]). Both are ready once
//! `grpc.health.v1` reports SERVING, which [`wait_health`] alone waits for.

use std::{
    ffi::OsString,
    fs::File,
    io,
    net::SocketAddr,
    path::PathBuf,
    process::{Command, ExitStatus, Stdio},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use leased::{
    config::ServeConfig,
    proto::lease_service_client::LeaseServiceClient,
    shutdown::{Shutdown, ShutdownTrigger},
};
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use super::{Owned, free_port, proc, spawn};

/// How long a server may take to report SERVING.
const SERVING_TIMEOUT: Duration = Duration::from_secs(20);

/// The `grpc.health.v1` status of `service` (`""`: the whole server) at `address`, in plaintext,
/// or None if nothing answers (within 1 s to connect and 2 s to reply: a server behind a faulty
/// link must not hang the caller).
pub async fn health_status(address: SocketAddr, service: &str) -> Option<i32> {
    let channel = Channel::from_shared(format!("http://{address}"))
        .ok()?
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .ok()?;
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    request.set_timeout(Duration::from_secs(2));
    let reply = HealthClient::new(channel).check(request).await.ok()?;
    Some(reply.into_inner().status)
}

/// Waits (up to 20 s) until the server whose health answers at `address` reports `status`.
pub async fn wait_health(address: SocketAddr, status: i32) -> io::Result<()> {
    let start = Instant::now();
    loop {
        let seen = health_status(address, "").await;
        if seen == Some(status) {
            return Ok(());
        }
        if start.elapsed() > SERVING_TIMEOUT {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "leased at {address} never reported health status {status} (last: {seen:?})"
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn client_of(address: SocketAddr) -> LeaseServiceClient<Channel> {
    LeaseServiceClient::connect(format!("http://{address}"))
        .await
        .expect("cannot connect to leased")
}

/// Settings for tests: the binary's defaults, with a short Redis timeout so that fault tests
/// run fast.
pub fn test_config(redis_url: Option<String>) -> ServeConfig {
    let mut args = vec![
        "--redis-timeout".to_owned(),
        "1s".to_owned(),
        "--drain-grace".to_owned(),
        "5s".to_owned(),
    ];
    if let Some(url) = redis_url {
        args.extend(["--redis-url".to_owned(), url]);
    }
    ServeConfig::from_args(args).expect("test flags parse")
}

/// `leased` served from this process, shut down on drop.
pub struct Leased {
    pub address: SocketAddr,
    /// Where `grpc.health.v1` answers in plaintext: the gRPC port, or `--health-listen`.
    health_address: SocketAddr,
    trigger: Option<ShutdownTrigger>,
}

impl Leased {
    /// On Redis if `redis_url` is set, else on the embedded store.
    pub async fn start(redis_url: Option<String>) -> Self {
        Self::start_with(test_config(redis_url)).await
    }

    pub async fn start_with(config: ServeConfig) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let health_address = config.health_listen.unwrap_or(address);
        let (trigger, shutdown): (ShutdownTrigger, Shutdown) = leased::shutdown::channel();
        tokio::spawn(async move {
            if let Err(error) = leased::serve(config, listener, shutdown).await {
                panic!("leased failed: {error}");
            }
        });
        let server = Leased {
            address,
            health_address,
            trigger: Some(trigger),
        };
        server.wait_serving().await;
        server
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    pub async fn client(&self) -> LeaseServiceClient<Channel> {
        client_of(self.address).await
    }

    /// The overall `grpc.health.v1` status, or None if the server does not answer.
    pub async fn health(&self) -> Option<i32> {
        self.health_of("").await
    }

    /// The `grpc.health.v1` status of one service name, or None if the server does not answer.
    pub async fn health_of(&self, service: &str) -> Option<i32> {
        health_status(self.health_address, service).await
    }

    /// Waits (up to 20 s) until health reports SERVING.
    pub async fn wait_serving(&self) {
        self.wait_health(ServingStatus::Serving as i32).await;
    }

    /// Waits (up to 20 s) until health reports `status`.
    pub async fn wait_health(&self, status: i32) {
        wait_health(self.health_address, status)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
    }

    /// Starts the drain.
    pub fn shut_down(&mut self) {
        if let Some(trigger) = self.trigger.take() {
            trigger.fire();
        }
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Where a child `leased` writes its log (stderr).
pub enum Log {
    /// This process's stdout and stderr.
    Inherit,
    /// Stderr into a file, stdout discarded: fault tests and benchmarks make it log a lot.
    File(PathBuf),
    /// Stderr kept in memory, for [`LeasedProcess::stop_and_read_log`]. A thread drains the
    /// pipe as the child writes: a full pipe would block a chatty child.
    Captured,
}

/// How to start `leased serve` as a child process: [`LeasedProcess::serve`], options, then
/// [`Serve::start`] (tests), [`Serve::try_start`] (benchmarks), or [`Serve::run_to_exit`] for a
/// run that is expected to fail.
pub struct Serve {
    program: PathBuf,
    address: Option<SocketAddr>,
    redis_url: Option<String>,
    redis_timeout: String,
    args: Vec<OsString>,
    log: Log,
    log_level: String,
    /// More environment variables of the child (`LEASED_*` settings).
    envs: Vec<(String, String)>,
    fd_limit: Option<u64>,
    /// `--health-listen`: where health answers in plaintext (the gRPC port may speak TLS).
    health_address: Option<SocketAddr>,
}

impl Serve {
    /// On Redis at `url`, with a 1 s Redis timeout (unless [`Serve::redis_timeout`]); without
    /// it, on the embedded store.
    pub fn redis(mut self, url: &str) -> Self {
        self.redis_url = Some(url.to_owned());
        self
    }

    /// `--redis-timeout` when on Redis.
    pub fn redis_timeout(mut self, timeout: &str) -> Self {
        self.redis_timeout = timeout.to_owned();
        self
    }

    /// More flags of `leased serve`.
    pub fn args<I: IntoIterator<Item: Into<OsString>>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Listen on `address` instead of a fresh port (a replica restarted where its clients expect
    /// it, or an address `leased` must refuse).
    pub fn at(mut self, address: SocketAddr) -> Self {
        self.address = Some(address);
        self
    }

    /// Where the log goes (default: [`Log::Inherit`]).
    pub fn log(mut self, log: Log) -> Self {
        self.log = log;
        self
    }

    /// `RUST_LOG` of the child (default `warn`).
    pub fn log_level(mut self, level: &str) -> Self {
        self.log_level = level.to_owned();
        self
    }

    /// Environment variables of the child, as a ConfigMap would set them (flags win over them).
    pub fn envs(mut self, envs: impl IntoIterator<Item = (String, String)>) -> Self {
        self.envs.extend(envs);
        self
    }

    /// Starts the child with this open-file limit, soft and hard (it cannot raise it).
    pub fn fd_limit(mut self, limit: u64) -> Self {
        self.fd_limit = Some(limit);
        self
    }

    /// Serves `grpc.health.v1` in plaintext on a fresh port too (`--health-listen`), and waits
    /// for SERVING there: for a server whose gRPC port speaks TLS.
    pub fn plaintext_health(mut self) -> Self {
        let address: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        self.args
            .extend(["--health-listen".into(), address.to_string().into()]);
        self.health_address = Some(address);
        self
    }

    /// Another `leased` binary than the one cargo built (to compare two builds).
    pub fn program(mut self, program: PathBuf) -> Self {
        self.program = program;
        self
    }

    /// The command line, with the log not yet redirected; listens on `address`.
    fn command_at(&self, address: SocketAddr) -> Command {
        let mut command = Command::new(&self.program);
        command
            .args(["serve", "--listen", &address.to_string()])
            .envs(self.envs.iter().map(|(key, value)| (key, value)))
            .env("RUST_LOG", &self.log_level);
        if let Some(url) = &self.redis_url {
            command.args(["--redis-url", url, "--redis-timeout", &self.redis_timeout]);
        }
        command.args(&self.args);
        if let Some(limit) = self.fd_limit {
            let limit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: between fork and exec the closure only calls setrlimit, which is
            // async-signal-safe, and builds an io::Error from errno.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                    match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                        0 => Ok(()),
                        _ => Err(io::Error::last_os_error()),
                    }
                });
            }
        }
        command
    }

    /// The command line alone, for a test that runs it to see it fail.
    pub fn command(&self) -> Command {
        self.command_at(self.address.unwrap_or(([127, 0, 0, 1], 0).into()))
    }

    /// Runs the command until it exits (killing it after `timeout`: a server that should have
    /// refused to start must not hang the test): its status and stderr.
    pub fn run_to_exit(&self, timeout: Duration) -> (ExitStatus, String) {
        let mut child = self
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run leased");
        let exited = super::poll_until("leased to exit", timeout, || {
            child.try_wait().unwrap().is_some()
        });
        if exited.is_err() {
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    }

    /// Starts the process and waits (up to 20 s) until it reports SERVING.
    pub async fn try_start(self) -> io::Result<LeasedProcess> {
        let address = self
            .address
            .unwrap_or_else(|| ([127, 0, 0, 1], free_port()).into());
        let mut command = self.command_at(address);
        match &self.log {
            Log::Inherit => {}
            Log::File(path) => {
                command.stdout(Stdio::null()).stderr(File::create(path)?);
            }
            Log::Captured => {
                command.stderr(Stdio::piped());
            }
        }
        let mut child = spawn(&mut command)?;
        let log_reader = child.stderr.take().map(|mut stderr| {
            std::thread::spawn(move || {
                let mut log = Vec::new();
                let _ = io::Read::read_to_end(&mut stderr, &mut log);
                log
            })
        });
        let server = LeasedProcess {
            address,
            process: Owned(Some(child)),
            log_reader,
        };
        let health_address = self.health_address.unwrap_or(address);
        wait_health(health_address, ServingStatus::Serving as i32).await?;
        Ok(server)
    }

    /// [`Serve::try_start`] that panics.
    pub async fn start(self) -> LeasedProcess {
        self.try_start()
            .await
            .unwrap_or_else(|error| panic!("{error}"))
    }
}

/// The real `leased` binary as a child process, killed on drop.
pub struct LeasedProcess {
    pub address: SocketAddr,
    process: Owned,
    /// Collects the log of [`Log::Captured`].
    log_reader: Option<JoinHandle<Vec<u8>>>,
}

impl LeasedProcess {
    /// The builder: the binary cargo built, a fresh port, the embedded store, the log inherited,
    /// `RUST_LOG=warn`.
    pub fn serve() -> Serve {
        Serve {
            program: PathBuf::from(env!("CARGO_BIN_EXE_leased")),
            address: None,
            redis_url: None,
            redis_timeout: "1s".to_owned(),
            args: Vec::new(),
            log: Log::Inherit,
            log_level: "warn".to_owned(),
            envs: Vec::new(),
            fd_limit: None,
            health_address: None,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    pub async fn client(&self) -> LeaseServiceClient<Channel> {
        client_of(self.address).await
    }

    /// The process id; panics once killed.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("leased already stopped")
    }

    /// The overall `grpc.health.v1` status, or None if the server does not answer.
    pub async fn health(&self) -> Option<i32> {
        health_status(self.address, "").await
    }

    /// Waits (up to 20 s) until health reports SERVING.
    pub async fn wait_serving(&self) {
        wait_health(self.address, ServingStatus::Serving as i32)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`).
    pub fn signal(&self, signal: i32) {
        proc::signal(self.pid(), signal).unwrap_or_else(|error| panic!("kill({signal}): {error}"));
    }

    /// SIGKILL, and reap the process.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// The exit status, once the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.process.0.as_mut()?.try_wait().expect("wait failed")
    }

    /// SIGKILL, then everything the process wrote to stderr ([`Log::Captured`]).
    pub fn stop_and_read_log(&mut self) -> String {
        self.kill();
        let reader = self.log_reader.take().expect("the log is not captured");
        let log = reader.join().expect("the log reader panicked");
        String::from_utf8_lossy(&log).into_owned()
    }
}
