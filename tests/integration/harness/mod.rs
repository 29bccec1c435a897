//! The harness: every process the integration tests and the benchmarks start, all on 127.0.0.1,
//! each killed (and its scratch files removed) on drop. The integration tests' binary declares it
//! (`tests/integration/main.rs`, re-exported by `common`), the benchmarks through
//! `benches/bench/main.rs`.
//!
//! - [`redis`]: `redis-server` ([`redis::RedisServer`]) and the one RESP client ([`redis::query`]).
//! - [`sentinel`]: Redis Sentinel (a master, a replica, three sentinels).
//! - [`cluster`]: a Redis Cluster of three masters, with or without a replica each (a master
//!   killed, failed over and back as a replica).
//! - [`etcd`]: a one-member etcd.
//! - [`postgres`]: a scratch PostgreSQL (`scripts/postgres-scratch.sh`) and `psql`.
//! - [`leased`]: `leased` in this process ([`leased::Leased`]) or as a child process of the real
//!   binary ([`leased::LeasedProcess`]), and the one wait for SERVING over `grpc.health.v1`.
//! - [`proxy`]: a fault-injecting TCP proxy for the link to Redis.
//! - [`otlp`]: an OTLP/gRPC trace receiver in this process, for `--otlp-endpoint`.
//! - [`flood`]: connections that never become clients (silent, preface only).
//! - [`proc`]: what `/proc` says about a process, signals, and this process's descriptor limit.
//!
//! Errors: `try_*` functions answer `io::Result` (the benchmarks report them); the plain forms
//! (`start`, `command`, [`wait_until`]) panic with the same message, as tests want.

#![allow(dead_code)] // the integration tests and the bench use different parts of the harness

pub mod cluster;
pub mod etcd;
pub mod flood;
pub mod leased;
pub mod otlp;
pub mod postgres;
pub mod proc;
pub mod proxy;
pub mod redis;
pub mod sentinel;

use std::{
    io,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

/// A port that was free a moment ago on 127.0.0.1, for a server that binds it later.
///
/// Drawn at random below the kernel's ephemeral range (32768 and up by default): a port that
/// `bind(0)` handed out and we released is often handed out again by the next `bind(0)`, so a
/// server binding it later would collide with whatever bound port 0 in between.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    for attempt in 0u64..1_000 {
        let random = RandomState::new().hash_one((std::process::id(), attempt));
        let port = 20_000 + (random % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000");
}

/// Polls `ready` every 20 ms until it holds; a `TimedOut` error naming `what` once `timeout` has
/// passed.
pub fn poll_until(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> io::Result<()> {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > timeout {
            return Err(timed_out(what, timeout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// [`poll_until`] that panics on timeout.
pub fn wait_until(what: &str, timeout: Duration, ready: impl FnMut() -> bool) {
    poll_until(what, timeout, ready).unwrap_or_else(|error| panic!("{error}"));
}

/// [`poll_until`] for a check that is itself async; sleeps on the runtime between polls.
pub async fn poll_until_async<F: Future<Output = bool>>(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> F,
) -> io::Result<()> {
    let start = Instant::now();
    while !ready().await {
        if start.elapsed() > timeout {
            return Err(timed_out(what, timeout));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn timed_out(what: &str, timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("timed out after {timeout:?} waiting for {what}"),
    )
}

/// Where the child processes of `test` write their logs: `target/tmp/<test>/`.
pub fn log_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(test);
    std::fs::create_dir_all(&dir).expect("cannot create the log directory");
    dir
}

/// Spawns `command`; a failure names the program, since the usual cause is that it is not
/// installed.
fn spawn(command: &mut Command) -> io::Result<Child> {
    command.spawn().map_err(|error| {
        let program = command.get_program().to_string_lossy().into_owned();
        io::Error::new(
            error.kind(),
            format!("cannot start {program} (is it installed?): {error}"),
        )
    })
}

/// A child process that is killed and reaped on drop, or earlier with [`Owned::kill`].
struct Owned(Option<Child>);

impl Owned {
    fn pid(&self) -> Option<u32> {
        self.0.as_ref().map(Child::id)
    }

    /// SIGKILL, and reap the process.
    fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Builds the example with the cargo that builds this test, into the same target directory and
/// profile, and returns its path. A plain `cargo test` has built it already (this is then a quick
/// no-op); `cargo test --test integration` alone has not, or may have left an old build.
pub fn build_example(name: &str) -> PathBuf {
    // This test runs from <target>/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let target_dir = profile_dir.parent().expect("target directory");
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target_dir)
        .args(["build", "--quiet", "--locked", "--example", name]);
    // Cargo gives this test the variables it sets for a crate (OUT_DIR, CARGO_MANIFEST_DIR,
    // CARGO_PKG_*, ...). Passed on, they make build scripts that watch them (ring's) look changed,
    // and the nested build would rebuild half the tree on every run.
    for (variable, _) in std::env::vars_os() {
        let name = variable.to_string_lossy();
        let set_for_crates = [
            "OUT_DIR",
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
        ];
        if set_for_crates.iter().any(|prefix| name.starts_with(prefix)) {
            cargo.env_remove(&variable);
        }
    }
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cargo.arg("--release");
        }
        Some(other) => {
            cargo.args(["--profile", other]);
        }
        None => panic!("unexpected test path {}", exe.display()),
    }
    let status = cargo.status().expect("cannot run cargo");
    assert!(status.success(), "cargo build --example {name}: {status}");
    profile_dir.join("examples").join(name)
}
