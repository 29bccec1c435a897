//! The `leased` client subcommands, run as real processes against a real server on Redis:
//! `acquire`, `describe`, `release`, and `leased run` (flock(1) for a fleet).

mod common;

use std::{
    os::unix::process::CommandExt,
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use common::*;

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

/// The README's command-line examples run as written (with the lease id acquire printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_cli_examples_work() {
    let setup = setup().await;
    let readme = include_str!("../README.md");
    let section = readme
        .split("\n## ")
        .find(|section| section.starts_with("Command line"))
        .expect("README has a Command line section");
    let commands: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("leased "))
        .collect();
    assert!(commands.len() >= 4, "{commands:?}");
    let mut lease_id = String::new();
    for line in commands {
        let line = line.replace("LEASE_ID", &lease_id);
        let command_line = line.replacen("leased", env!("CARGO_BIN_EXE_leased"), 1);
        let output = Command::new("sh")
            .args(["-c", &command_line])
            .env("LEASED_ENDPOINT", setup.server.endpoint())
            .output()
            .unwrap();
        let text = stdout(&output);
        assert!(
            output.status.success(),
            "{line}: {text} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        if line.contains(" acquire ") && line.contains("--json") {
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(json["granted"], true);
            lease_id = json["lease_id"].as_str().unwrap().to_owned();
        }
        if line.contains(" describe ") && !lease_id.is_empty() {
            assert!(text.starts_with("held "), "{text}");
            assert!(!text.contains(&lease_id), "describe printed the lease id");
        }
        if line.contains(" release ") {
            assert!(text.starts_with("released"), "{text}");
        }
        if line.contains(" run ") {
            assert!(text.contains("token "), "{text}");
        }
    }
}

/// A holder the server would refuse today (written by an older server, or into Redis by
/// something else) with a terminal escape, newlines, NUL, a C1 CSI and a right-to-left override:
/// `describe`, a busy `acquire` and a busy `run` print it escaped, and `--json` escapes it too
/// while parsing back to the stored bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_from_the_server_are_printed_escaped() {
    const HOSTILE: &str = "evil\u{1b}[2J\u{1b}]0;owned\u{7}\nfake line\r\0\u{9b}31m\u{202e}txt";
    const ESCAPED: &str =
        r#"holder="evil\u{1b}[2J\u{1b}]0;owned\u{7}\nfake line\r\0\u{9b}31m\u{202e}txt""#;
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let mut client = setup.server.client().await;
    must_acquire(&mut client, "cli/hostile", 60_000).await;
    let added = setup
        .redis
        .query(&["HSET", "leased:{cli/hostile}:owner", "holder", HOSTILE])
        .unwrap();
    assert_eq!(added.as_int(), Some(0), "the holder field was overwritten");
    assert_eq!(describe(&mut client, "cli/hostile").await.holder, HOSTILE);

    let first_raw_control = |text: &[u8]| {
        let text = String::from_utf8_lossy(text);
        let body = text.strip_suffix('\n').unwrap_or(&text);
        body.chars()
            .find(|c| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}'))
    };
    let mut describe_text = leased(&endpoint);
    describe_text.args(["describe", "cli/hostile"]);
    let mut acquire_text = leased(&endpoint);
    acquire_text.args(["acquire", "cli/hostile", "--ttl", "5s"]);
    for (what, command, code) in [
        ("describe", describe_text, 0),
        ("acquire", acquire_text, NOT_GRANTED),
    ] {
        let output = output_of(command);
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(code), "{what}: {text:?}");
        assert_eq!(first_raw_control(&output.stdout), None, "{what}: {text:?}");
        assert!(text.contains(ESCAPED), "{what}: {text}");
        assert_eq!(text.lines().count(), 1, "{what}: {text:?}");
    }

    let mut run = leased(&endpoint);
    run.args(["run", "cli/hostile", "--ttl", "5s", "--", "true"]);
    let output = output_of(run);
    assert_eq!(output.status.code(), Some(NOT_GRANTED));
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(first_raw_control(&output.stderr), None, "run: {errors:?}");
    assert!(
        errors.contains(ESCAPED.strip_prefix("holder=").unwrap()),
        "run: {errors}"
    );

    let mut describe_json = leased(&endpoint);
    describe_json.args(["describe", "cli/hostile", "--json"]);
    let output = output_of(describe_json);
    let text = stdout(&output);
    assert_eq!(
        first_raw_control(&output.stdout),
        None,
        "describe --json: {text:?}"
    );
    assert!(
        text.contains(r"\u001b[2J") && text.contains(r"\u202e"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["holder"], HOSTILE);

    // Today's server refuses such a holder; the CLI prints the refusal escaped as well.
    let mut refused = leased(&endpoint);
    refused.args([
        "acquire",
        "cli/refused",
        "--ttl",
        "5s",
        "--holder",
        "a\u{1b}[2Jb",
    ]);
    let output = output_of(refused);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{errors}");
    assert_eq!(first_raw_control(&output.stderr), None, "{errors:?}");
    assert!(
        errors.contains(
            r"invalid holder: must not contain control characters, found '\u{1b}' at byte 1"
        ),
        "{errors}"
    );
}

/// `acquire` of a busy lease and `run` of a busy lease exit 75 without running the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_lease_exits_75_and_does_not_run_the_command() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let mut acquire = leased(&endpoint);
    acquire.args(["acquire", "busy", "--ttl", "30s", "--json"]);
    assert!(output_of(acquire).status.success());

    let mut again = leased(&endpoint);
    again.args(["acquire", "busy", "--ttl", "30s", "--json"]);
    let output = output_of(again);
    assert_eq!(output.status.code(), Some(NOT_GRANTED));
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["granted"], false);
    assert!(json["fencing_token"].as_u64().unwrap() > 0);

    let marker = tempdir().join("ran");
    let mut run = leased(&endpoint);
    run.args(["run", "busy", "--ttl", "5s", "--", "touch"])
        .arg(&marker);
    assert_eq!(output_of(run).status.code(), Some(NOT_GRANTED));
    assert!(!marker.exists(), "the command ran without the lease");
}

/// Five concurrent `leased run` of one script that appends start/end lines with its token to a
/// file: the runs never overlap and their tokens increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_never_overlap_and_tokens_increase() {
    let setup = setup().await;
    let log = tempdir().join("log");
    let script = format!(
        "echo \"start $LEASED_FENCING_TOKEN\" >> {0}; sleep 0.2; echo \"end $LEASED_FENCING_TOKEN\" >> {0}",
        log.display()
    );
    let runs: Vec<_> = (0..5)
        .map(|_| {
            leased(&setup.server.endpoint())
                .args([
                    "run",
                    "fleet-job",
                    "--ttl",
                    "5s",
                    "--wait",
                    "60s",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    let log = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 10, "{log}");
    let mut previous_token = 0u64;
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect(&log);
        let end = pair[1].strip_prefix("end ").expect(&log);
        assert_eq!(start, end, "runs overlapped:\n{log}");
        let token: u64 = start.parse().unwrap();
        assert!(token > previous_token, "tokens must increase:\n{log}");
        previous_token = token;
    }
}

/// A `leased run` killed with SIGKILL (with its command: the machine died) passes the lease to a
/// waiting `leased run` once the TTL passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_passes_the_lease_after_its_ttl() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let mut holder = leased(&endpoint)
        .args(["run", "handover", "--ttl", "1s", "--", "sleep", "30"])
        .process_group(0)
        .spawn()
        .unwrap();
    wait_until_held(&setup, "handover").await;
    let waiter = leased(&endpoint)
        .args([
            "run",
            "handover",
            "--ttl",
            "5s",
            "--wait",
            "20s",
            "--",
            "echo",
            "second ran",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // SAFETY: signalling the process group we created.
    unsafe { libc::kill(-(holder.id() as i32), libc::SIGKILL) };
    let killed_at = Instant::now();
    holder.wait().unwrap();
    let output = waiter.wait_with_output().unwrap();
    let waited = killed_at.elapsed();
    assert!(output.status.success(), "{output:?}");
    assert!(stdout(&output).contains("second ran"));
    assert!(waited < Duration::from_secs(5), "handover took {waited:?}");
}

/// A lost lease stops the command: SIGTERM reaches it, and `leased run` exits 76.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_terminates_the_command() {
    let setup = setup().await;
    let marker = tempdir().join("terminated");
    let script = format!(
        "trap 'echo terminated > {}; exit 0' TERM; sleep 60 & wait",
        marker.display()
    );
    let mut run = leased(&setup.server.endpoint())
        .args([
            "run",
            "victim",
            "--ttl",
            "1s",
            "--kill-after",
            "3s",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    wait_until_held(&setup, "victim").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup
        .redis
        .command(&["DEL", "leased:{victim}", "leased:{victim}:owner"]);
    let mut client = setup.server.client().await;
    must_acquire(&mut client, "victim", 30_000).await;

    let start = Instant::now();
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "leased run kept running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(LEASE_LOST));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().trim(),
        "terminated"
    );
}

/// SIGTERM sent to `leased run` reaches the command; leased run exits with the command's code
/// and releases the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_the_command() {
    let setup = setup().await;
    let marker = tempdir().join("signalled");
    let script = format!(
        "trap 'echo got-term > {}; exit 7' TERM; sleep 60 & wait",
        marker.display()
    );
    let mut run = leased(&setup.server.endpoint())
        .args([
            "run",
            "signalled",
            "--ttl",
            "10s",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    wait_until_held(&setup, "signalled").await;
    tokio::time::sleep(Duration::from_millis(300)).await; // let sh install its trap
    // SAFETY: signalling the child we spawned.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(7));
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "got-term");
    let mut client = setup.server.client().await;
    assert!(
        !describe(&mut client, "signalled").await.held,
        "released after the command exited"
    );
}

/// How quickly a waiting `leased run` starts its command after the running one's command exits:
/// 10 rounds, median printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_run_starts_right_after_the_running_one_exits() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let dir = tempdir();
    let mut gaps = Vec::new();
    for round in 0..10 {
        let (ended, started) = (
            dir.join(format!("ended-{round}")),
            dir.join(format!("started-{round}")),
        );
        let first = leased(&endpoint)
            .args(["run", "relay", "--ttl", "10s", "--", "sh", "-c"])
            .arg(format!("sleep 0.5; date +%s%N > {}", ended.display()))
            .spawn()
            .unwrap();
        wait_until_held(&setup, "relay").await;
        let second = leased(&endpoint)
            .args([
                "run", "relay", "--ttl", "10s", "--wait", "20s", "--", "sh", "-c",
            ])
            .arg(format!("date +%s%N > {}", started.display()))
            .spawn()
            .unwrap();
        for mut run in [first, second] {
            assert!(run.wait().unwrap().success());
        }
        let nanos = |path: &Path| -> i128 {
            std::fs::read_to_string(path)
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        gaps.push(Duration::from_nanos(
            (nanos(&started) - nanos(&ended)) as u64,
        ));
    }
    gaps.sort();
    println!(
        "waiting leased run started after the running one exited: median {:?}, max {:?}",
        gaps[5], gaps[9]
    );
    assert!(gaps[5] < Duration::from_secs(1), "{gaps:?}");
}

fn tempdir() -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("leased-cli-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
