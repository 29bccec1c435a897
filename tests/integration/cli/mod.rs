//! The `leased` client subcommands, run as real processes against a real server on Redis:
//! `acquire`, `describe`, `release`, `leased run` (flock(1) for a fleet), `watch`, `check`, and
//! the operators' `list` and `revoke`; shared (read) grants and own lease ids.

mod counting;
mod docs;
mod escaping;
mod operators;
mod run;
mod shared;

use std::{
    os::unix::process::CommandExt,
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use crate::common::*;

const NOT_GRANTED: i32 = 75;
const LEASE_LOST: i32 = 76;

fn leased(endpoint: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leased"));
    command.env("LEASED_ENDPOINT", endpoint);
    command
}

fn output_of(mut command: Command) -> Output {
    command.output().expect("cannot run leased")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A running redis-server and leased for one test.
struct Setup {
    redis: RedisServer,
    server: Leased,
}

async fn setup() -> Setup {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    Setup { redis, server }
}

async fn wait_until_held(setup: &Setup, name: &str) {
    let mut client = setup.server.client().await;
    let start = Instant::now();
    while !describe(&mut client, name).await.held {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{name} never held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits up to `seconds` for `child` to exit, and returns its status and what it wrote to its
/// piped stdout and stderr (empty when not piped).
fn exit_within(child: &mut std::process::Child, seconds: u64) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(seconds),
            "still running after {seconds} s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let read = |pipe: Option<&mut dyn std::io::Read>| {
        let mut bytes = Vec::new();
        if let Some(pipe) = pipe {
            pipe.read_to_end(&mut bytes).unwrap();
        }
        bytes
    };
    Output {
        status: child.wait().unwrap(),
        stdout: read(child.stdout.as_mut().map(|p| p as &mut dyn std::io::Read)),
        stderr: read(child.stderr.as_mut().map(|p| p as &mut dyn std::io::Read)),
    }
}

/// A process that runs until killed (`leased watch`), its stdout read line by line in the
/// background. Killed on drop.
struct LineReader {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl LineReader {
    fn spawn(mut command: Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        std::thread::spawn({
            let lines = lines.clone();
            move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                {
                    lines.lock().unwrap().push(line);
                }
            }
        });
        LineReader { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (up to 10 s) until a line satisfies `wanted`; panics naming `what` otherwise.
    async fn wait_for(&self, what: &str, wanted: impl Fn(&str) -> bool) {
        let found = harness::poll_until_async(what, Duration::from_secs(10), || {
            std::future::ready(self.lines().iter().any(|l| wanted(l)))
        })
        .await;
        if let Err(error) = found {
            panic!("{error}; printed {:#?}", self.lines());
        }
    }
}

impl Drop for LineReader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `name` has `holders` holders and `waiters` waiters.
async fn wait_until_taken(setup: &Setup, name: &str, holders: usize, waiters: u32) {
    let client = setup.server.client().await;
    let what = format!("{name} to have {holders} holders and {waiters} waiters");
    harness::poll_until_async(&what, Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            let description = describe(&mut client, name).await;
            description.holders.len() == holders && description.waiters == waiters
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error}"));
}

fn tempdir() -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("leased-cli-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The first character of `text` a terminal would act on, other than the newlines between lines.
fn raw_control_in_lines(text: &str) -> Option<char> {
    text.split('\n')
        .flat_map(str::chars)
        .find(|c| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}'))
}
