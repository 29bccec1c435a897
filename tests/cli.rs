//! The `leased` client subcommands, run as real processes against a real server on Redis:
//! `acquire`, `describe`, `release`, `leased run` (flock(1) for a fleet), `watch`, `check`, and
//! the operators' `list` and `revoke`.

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

/// The README's command-line examples run as written. `LEASE_ID` and `FENCING_TOKEN` stand for
/// what `acquire` printed. The operators' lines (`watch`, `list`, `revoke`) act on the lease as a
/// wedged `leased run` holds it (started here when the first of them comes; `FENCING_TOKEN` is
/// then its token), and `leased watch` runs in the background until it shows the revoke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_cli_examples_work() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
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
    let mut fencing_token = String::new();
    let mut wedged: Option<std::process::Child> = None;
    let mut watches = Vec::new();
    for line in commands {
        let subcommand = line.split_whitespace().nth(1).unwrap_or_default();
        if ["watch", "list", "revoke"].contains(&subcommand) && wedged.is_none() {
            let run = leased(&endpoint)
                .args([
                    "run",
                    "nightly-report",
                    "--ttl",
                    "10s",
                    "--holder",
                    "wedged",
                ])
                .args(["--", "sleep", "60"])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            wait_until_held(&setup, "nightly-report").await;
            let mut client = setup.server.client().await;
            fencing_token = describe(&mut client, "nightly-report")
                .await
                .fencing_token
                .to_string();
            wedged = Some(run);
        }
        let line = line
            .replace("LEASE_ID", &lease_id)
            .replace("FENCING_TOKEN", &fencing_token);
        let command_line = line.replacen("leased", env!("CARGO_BIN_EXE_leased"), 1);
        let mut command = Command::new("sh");
        command
            .args(["-c", &format!("exec {command_line}")])
            .env("LEASED_ENDPOINT", &endpoint);
        if subcommand == "watch" {
            // Runs until killed: read its lines in the background, from its first (a snapshot).
            let watch = LineReader::spawn(command);
            watch.wait_for(&line, |l| l.starts_with("snapshot ")).await;
            watches.push((line, watch));
            continue;
        }
        let output = command.output().unwrap();
        let text = stdout(&output);
        assert!(
            output.status.success(),
            "{line}: {text} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        match subcommand {
            "acquire" if line.contains("--json") => {
                let json: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(json["granted"], true);
                lease_id = json["lease_id"].as_str().unwrap().to_owned();
                fencing_token = json["fencing_token"].to_string();
            }
            "describe" if !lease_id.is_empty() => {
                assert!(text.starts_with("held "), "{text}");
                assert!(!text.contains(&lease_id), "describe printed the lease id");
            }
            "check" => assert!(text.starts_with("current "), "{line}: {text}"),
            "release" => assert!(text.starts_with("released"), "{text}"),
            "run" => assert!(text.contains("token "), "{text}"),
            "list" => assert!(text.contains("nightly-report"), "{line}: {text}"),
            "revoke" => {
                assert_eq!(
                    text.trim_end(),
                    format!("revoked nightly-report fencing_token={fencing_token}"),
                    "{line}"
                );
                let mut run = wedged.take().expect("the wedged run");
                let errors =
                    String::from_utf8_lossy(&exit_within(&mut run, 10).stderr).into_owned();
                assert!(
                    errors.contains("lease lost: revoked: "),
                    "the wedged run: {errors}"
                );
            }
            _ => {}
        }
    }
    for (line, watch) in watches {
        watch
            .wait_for(&line, |l| l.starts_with("revoked nightly-report "))
            .await;
    }
    if let Some(mut run) = wedged {
        let _ = run.kill();
        let _ = run.wait();
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
        .query(&["HSET", "leased:{cli/hostile}:owner", "h", HOSTILE])
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

/// The README's "at most N cron jobs fleet-wide": six `leased run --limit 2` of one script that
/// logs its start and end with its token. At most two commands ever run at once, two do run at
/// once, and every run has its own token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_limit_runs_at_most_n_commands_at_once() {
    let setup = setup().await;
    let log = tempdir().join("log");
    let script = format!(
        "echo \"start $LEASED_FENCING_TOKEN\" >> {0}; sleep 1; echo \"end $LEASED_FENCING_TOKEN\" >> {0}",
        log.display()
    );
    let runs: Vec<_> = (0..6)
        .map(|_| {
            leased(&setup.server.endpoint())
                .args([
                    "run", "cron-job", "--limit", "2", "--ttl", "5s", "--wait", "60s", "--", "sh",
                    "-c", &script,
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    let log = std::fs::read_to_string(&log).unwrap();
    let (mut running, mut most_at_once) = (Vec::new(), 0);
    let mut tokens = std::collections::BTreeSet::new();
    for line in log.lines() {
        if let Some(token) = line.strip_prefix("start ") {
            assert!(tokens.insert(token.to_owned()), "token reused:\n{log}");
            running.push(token);
            most_at_once = most_at_once.max(running.len());
        } else {
            let token = line.strip_prefix("end ").expect(&log);
            running.retain(|t| *t != token);
        }
    }
    assert_eq!(tokens.len(), 6, "{log}");
    assert!(running.is_empty(), "{log}");
    assert_eq!(most_at_once, 2, "at most and at least two at once:\n{log}");
}

/// Two `leased run --limit 2` hold both permits and a `leased acquire --wait` queues: `describe`
/// lists both holders by token with the limit and the waiter (text and --json); a try-once run
/// or acquire exits 75 saying the permits are taken; another limit is an error naming the limit
/// in force; when one run ends, the waiter gets its permit with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_lease_lists_every_holder_and_refuses_the_third() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let holder_run = |holder: &str| {
        leased(&endpoint)
            .args([
                "run", "sem", "--limit", "2", "--ttl", "10s", "--holder", holder,
            ])
            .args(["--", "sleep", "30"])
            .spawn()
            .unwrap()
    };
    let mut first = holder_run("run-a");
    wait_until_taken(&setup, "sem", 1, 0).await;
    let mut second = holder_run("run-b");
    wait_until_taken(&setup, "sem", 2, 0).await;
    let waiter = leased(&endpoint)
        .args([
            "acquire", "sem", "--limit", "2", "--ttl", "10s", "--wait", "30s",
        ])
        .args(["--holder", "waiter", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_taken(&setup, "sem", 2, 1).await;

    let mut text = leased(&endpoint);
    text.args(["describe", "sem"]);
    let output = output_of(text);
    assert!(output.status.success());
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "held sem limit=2 holders=2 waiters=1", "{text}");
    let token_of = |line: &str, holder: &str| -> u64 {
        let fields = line
            .strip_prefix(&format!("  holder=\"{holder}\" fencing_token="))
            .unwrap_or_else(|| panic!("{holder} expected in {line:?}"));
        fields.split(' ').next().unwrap().parse().unwrap()
    };
    let (token_a, token_b) = (token_of(lines[1], "run-a"), token_of(lines[2], "run-b"));
    assert!(token_a < token_b, "{text}");

    let mut json = leased(&endpoint);
    json.args(["describe", "sem", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&output_of(json))).unwrap();
    assert_eq!(json["held"], true);
    assert_eq!(json["limit"], 2);
    assert_eq!(json["waiters"], 1);
    let holders = json["holders"].as_array().unwrap();
    let listed: Vec<(&str, u64)> = holders
        .iter()
        .map(|h| {
            assert!(h["remaining_ms"].as_i64().unwrap() > 0, "{json}");
            (
                h["holder"].as_str().unwrap(),
                h["fencing_token"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [("run-a", token_a), ("run-b", token_b)], "{json}");
    // The single-holder fields describe the smallest token, as for today's clients.
    assert_eq!(
        (json["holder"].as_str(), json["fencing_token"].as_u64()),
        (Some("run-a"), Some(token_a))
    );
    assert!(!json.to_string().contains("lease_id"), "{json}");

    let marker = tempdir().join("ran");
    let mut third = leased(&endpoint);
    third
        .args(["run", "sem", "--limit", "2", "--ttl", "5s", "--", "touch"])
        .arg(&marker);
    let output = output_of(third);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(NOT_GRANTED), "{errors}");
    assert!(errors.contains("2 of 2 permits held"), "{errors}");
    assert!(!marker.exists(), "the command ran without a permit");

    let mut busy = leased(&endpoint);
    busy.args(["acquire", "sem", "--limit", "2", "--ttl", "5s"]);
    let output = output_of(busy);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(NOT_GRANTED), "{text}");
    assert!(text.starts_with("not_granted sem holder=\"run-"), "{text}");
    assert!(
        text.trim_end().ends_with(" permits_held=2 limit=2"),
        "{text}"
    );

    for other_limit in ["3", "1"] {
        let mut mismatched = leased(&endpoint);
        mismatched.args(["acquire", "sem", "--limit", other_limit, "--ttl", "5s"]);
        let output = output_of(mismatched);
        let errors = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{errors}");
        assert!(
            errors.starts_with(&format!(
                "leased: limit {other_limit} differs from the limit in force, 2"
            )),
            "{errors}"
        );
    }

    // SIGTERM reaches `sleep`; `leased run` then releases, and the waiter is granted.
    // SAFETY: signalling the child we spawned.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    first.wait().unwrap();
    let output = waiter.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let granted: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(granted["granted"], true);
    assert!(
        granted["fencing_token"].as_u64().unwrap() > token_b,
        "{granted}"
    );
    // SAFETY: as above.
    unsafe { libc::kill(second.id() as i32, libc::SIGTERM) };
    second.wait().unwrap();
}

/// `--lock-delay` on acquire: once the lease expires, describe shows it held through the delay
/// and nobody is granted it until the delay has passed. On run, a released lease (the command
/// exited) is granted again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_keeps_an_expired_lease_from_the_next_holder() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let asked_at = Instant::now();
    let mut first = leased(&endpoint);
    first.args(["acquire", "delayed", "--ttl", "300ms", "--lock-delay", "2s"]);
    assert!(output_of(first).status.success());
    tokio::time::sleep(Duration::from_millis(600).saturating_sub(asked_at.elapsed())).await;

    let mut during = leased(&endpoint);
    during.args(["describe", "delayed", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&output_of(during))).unwrap();
    assert_eq!(json["held"], true, "{json}");
    let remaining_ms = json["remaining_ms"].as_i64().unwrap();
    assert!((1..=2_000).contains(&remaining_ms), "{json}");
    let mut refused = leased(&endpoint);
    refused.args(["acquire", "delayed", "--ttl", "5s"]);
    assert_eq!(output_of(refused).status.code(), Some(NOT_GRANTED));

    let mut next = leased(&endpoint);
    next.args(["acquire", "delayed", "--ttl", "5s", "--wait", "10s"]);
    assert!(output_of(next).status.success());
    let waited = asked_at.elapsed();
    // The first lease expired no earlier than 300 ms after it was asked for.
    assert!(
        waited >= Duration::from_millis(2_300),
        "granted after {waited:?}"
    );
    assert!(waited < Duration::from_secs(7), "granted after {waited:?}");

    for _ in 0..2 {
        let mut run = leased(&endpoint);
        run.args([
            "run",
            "delayed-run",
            "--ttl",
            "5s",
            "--lock-delay",
            "30s",
            "--",
            "true",
        ]);
        let started = Instant::now();
        let output = output_of(run);
        assert!(output.status.success(), "{output:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a release has no delay"
        );
    }
}

/// Bad values of the new flags are refused before anything is sent: a usage error (exit 2)
/// for `--limit 0` or a malformed `--lock-delay`; the server's INVALID_ARGUMENT (exit 1) naming
/// `lock_delay_ms` for a delay above its maximum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limit_and_lock_delay_are_refused() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    for (flags, code, expected) in [
        (["--limit", "0"], 2, "--limit"),
        (["--lock-delay", "soon"], 2, "--lock-delay"),
        (["--lock-delay", "2m"], 1, "lock_delay_ms"),
    ] {
        let mut acquire = leased(&endpoint);
        acquire
            .args(["acquire", "bad-flags", "--ttl", "5s"])
            .args(flags);
        let output = output_of(acquire);
        let errors = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{flags:?}: {errors}");
        assert!(errors.contains(expected), "{flags:?}: {errors}");
    }
}

/// Holders of a counting lease stored with control and bidi characters (by something other than
/// today's server) are printed escaped by `describe`, `describe --json` and a busy `acquire`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_lease_holders_are_printed_escaped() {
    const HOSTILE: &str = "evil\u{1b}[2J\nfake line\u{202e}txt";
    const ESCAPED: &str = r#"holder="evil\u{1b}[2J\nfake line\u{202e}txt""#;
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    for (holder, ttl) in [("short", "20s"), ("long", "60s")] {
        let mut acquire = leased(&endpoint);
        acquire.args([
            "acquire",
            "cli/hostile-sem",
            "--limit",
            "2",
            "--ttl",
            ttl,
            "--holder",
            holder,
        ]);
        assert!(output_of(acquire).status.success());
    }
    // Each permit's record is "token expires_at ttl delay holder" (src/store/scripts/prelude.lua).
    let records = setup
        .redis
        .command(&["HGETALL", "leased:{cli/hostile-sem}:holders"]);
    let lines: Vec<&str> = records.lines().collect();
    let (lease_id, record) = lines
        .chunks(2)
        .find(|pair| pair[1].ends_with(" short"))
        .map(|pair| (pair[0], pair[1]))
        .unwrap_or_else(|| panic!("no permit record of \"short\":\n{records}"));
    let hostile_record = format!("{}{HOSTILE}", record.strip_suffix("short").unwrap());
    setup.redis.command(&[
        "HSET",
        "leased:{cli/hostile-sem}:holders",
        lease_id,
        &hostile_record,
    ]);

    let mut describe_text = leased(&endpoint);
    describe_text.args(["describe", "cli/hostile-sem"]);
    let text = stdout(&output_of(describe_text));
    assert_eq!(raw_control_in_lines(&text), None, "{text:?}");
    assert_eq!(text.lines().count(), 3, "{text:?}");
    let hostile_line = format!("  {ESCAPED} fencing_token=");
    assert!(
        text.lines().nth(1).unwrap().starts_with(&hostile_line),
        "{text}"
    );

    let mut busy = leased(&endpoint);
    busy.args(["acquire", "cli/hostile-sem", "--limit", "2", "--ttl", "5s"]);
    let output = output_of(busy);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(NOT_GRANTED), "{text}");
    assert!(
        raw_control_in_lines(&text).is_none() && text.lines().count() == 1,
        "{text:?}"
    );
    assert!(
        text.contains(ESCAPED),
        "the permit that frees first: {text}"
    );

    let mut describe_json = leased(&endpoint);
    describe_json.args(["describe", "cli/hostile-sem", "--json"]);
    let text = stdout(&output_of(describe_json));
    assert!(
        raw_control_in_lines(&text).is_none()
            && text.contains(r"\u001b[2J")
            && text.contains(r"\u202e"),
        "{text:?}"
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let holders: Vec<&str> = json["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["holder"].as_str().unwrap())
        .collect();
    assert_eq!(holders, [HOSTILE, "long"]);
}

/// The first character of `text` a terminal would act on, other than the newlines between lines.
fn raw_control_in_lines(text: &str) -> Option<char> {
    text.split('\n')
        .flat_map(str::chars)
        .find(|c| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}'))
}

fn tempdir() -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("leased-cli-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `leased watch` prints one line per event as it happens (text, and `--json` lines), starting
/// with a snapshot; when the server stops, it exits 1 saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_one_line_per_event_until_the_server_stops() {
    let mut setup = setup().await;
    let endpoint = setup.server.endpoint();
    let mut text = leased(&endpoint);
    text.args(["watch", "cli/watched"]).stderr(Stdio::piped());
    let text = LineReader::spawn(text);
    let mut json = leased(&endpoint);
    json.args(["watch", "cli/watched", "--json"])
        .stderr(Stdio::null());
    let json = LineReader::spawn(json);
    text.wait_for("the first snapshot", |l| l == "snapshot cli/watched free")
        .await;
    json.wait_for("the first snapshot", |l| {
        l.contains(r#""cause":"snapshot""#)
    })
    .await;

    let mut acquire = leased(&endpoint);
    acquire.args([
        "acquire",
        "cli/watched",
        "--ttl",
        "30s",
        "--holder",
        "ops",
        "--json",
    ]);
    let granted: serde_json::Value = serde_json::from_str(&stdout(&output_of(acquire))).unwrap();
    let token = granted["fencing_token"].as_u64().unwrap();
    let lease_id = granted["lease_id"].as_str().unwrap();
    let granted_line = format!(r#"granted cli/watched holder="ops" fencing_token={token}"#);
    text.wait_for(&granted_line, |l| l == granted_line).await;
    let mut release = leased(&endpoint);
    release.args(["release", "cli/watched", "--lease-id", lease_id]);
    assert!(output_of(release).status.success());
    let released_line = format!(r#"released cli/watched holder="ops" fencing_token={token}"#);
    text.wait_for(&released_line, |l| l == released_line).await;
    assert_eq!(
        text.lines(),
        ["snapshot cli/watched free", &granted_line, &released_line]
    );

    json.wait_for("the release", |l| l.contains(r#""cause":"released""#))
        .await;
    let events: Vec<serde_json::Value> = json
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let causes: Vec<&str> = events
        .iter()
        .map(|e| e["cause"].as_str().unwrap())
        .collect();
    assert_eq!(causes, ["snapshot", "granted", "released"]);
    assert_eq!(events[1]["holder"], "ops");
    assert_eq!(events[1]["fencing_token"], token);
    assert_eq!(events[1]["held"], true);
    assert!(events[1]["expires_at_ms"].as_i64().unwrap() > 0);
    assert_eq!(events[1]["holders"][0]["holder"], "ops");
    assert_eq!(events[2]["held"], false);
    assert!(!json.lines().concat().contains(lease_id));

    setup.server.shut_down();
    let mut text = text;
    let output = exit_within(&mut text.child, 15);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{errors}");
    assert!(errors.starts_with("leased: "), "{errors}");
}

/// `leased list` reads every page (here of 2) and prints a table sorted by name, holders quoted
/// and escaped; `--json` prints one object per lease. Leases outside the prefix are not listed;
/// a page size above 1000 is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_prints_every_held_lease_under_the_prefix() {
    const HOSTILE: &str = "evil\u{1b}[2J\nfake\u{202e}";
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let mut client = setup.server.client().await;
    let mut tokens = Vec::new();
    for name in [
        "cli/list/c",
        "cli/list/a",
        "cli/list/b",
        "cli/listed-not",
        "other",
    ] {
        tokens.push((
            name,
            must_acquire(&mut client, name, 60_000).await.fencing_token,
        ));
    }
    setup
        .redis
        .command(&["HSET", "leased:{cli/list/b}:owner", "h", HOSTILE]);

    let mut table = leased(&endpoint);
    table.args(["list", "cli/list/", "--page-size", "2"]);
    let output = output_of(table);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}");
    assert_eq!(raw_control_in_lines(&text), None, "{text:?}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "HOLDER",
            "FENCING_TOKEN",
            "REMAINING_MS",
            "LIMIT",
            "HOLDERS",
            "WAITERS"
        ]
    );
    let names: Vec<&str> = rows[1..].iter().map(|r| r[0]).collect();
    assert_eq!(names, ["cli/list/a", "cli/list/b", "cli/list/c"], "{text}");
    let token_of = |name: &str| tokens.iter().find(|(n, _)| *n == name).unwrap().1;
    assert_eq!(
        rows[1][1..3],
        [r#""test""#, &token_of("cli/list/a").to_string()]
    );
    assert!(
        text.contains(r#""evil\u{1b}[2J\nfake\u{202e}""#),
        "the holder escaped: {text}"
    );

    let mut json = leased(&endpoint);
    json.args(["list", "cli/list/", "--json"]);
    let output = output_of(json);
    let text = stdout(&output);
    assert_eq!(raw_control_in_lines(&text), None, "{text:?}");
    let leases: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(leases.len(), 3, "{text}");
    assert_eq!(leases[1]["name"], "cli/list/b");
    assert_eq!(leases[1]["holder"], HOSTILE);
    assert_eq!(leases[0]["fencing_token"], token_of("cli/list/a"));
    assert!(leases[0]["remaining_ms"].as_i64().unwrap() > 0);
    assert_eq!(leases[0]["limit"], 1);

    let mut everything = leased(&endpoint);
    everything.arg("list");
    assert_eq!(stdout(&output_of(everything)).lines().count(), 1 + 5);

    let mut too_big = leased(&endpoint);
    too_big.args(["list", "--page-size", "1001"]);
    let output = output_of(too_big);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let mut bad_prefix = leased(&endpoint);
    bad_prefix.args(["list", "no spaces"]);
    let output = output_of(bad_prefix);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{errors}");
    assert!(errors.contains("prefix"), "{errors}");
}

/// `leased check` exits 0 for the holder's token and 1 otherwise; `leased revoke` with a stale
/// `--fencing-token` revokes nothing (exit 0, `not_revoked`), with the holder's token it ends the lease:
/// the `leased run` holding it stops its command and exits 76 with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_revoke_end_to_end() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let mut run = leased(&endpoint)
        .args(["run", "cli/wedged", "--ttl", "3s", "--holder", "wedged"])
        .args(["--", "sleep", "60"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_held(&setup, "cli/wedged").await;
    let mut client = setup.server.client().await;
    let token = describe(&mut client, "cli/wedged").await.fencing_token;

    let check = |token: &str, json: bool| {
        let mut check = leased(&endpoint);
        check.args(["check", "cli/wedged", token]);
        if json {
            check.arg("--json");
        }
        let output = output_of(check);
        (output.status.code(), stdout(&output))
    };
    assert_eq!(
        check(&token.to_string(), false),
        (
            Some(0),
            format!("current cli/wedged fencing_token={token}\n")
        )
    );
    let (code, text) = check(&(token - 1).to_string(), false);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(
        text,
        format!(
            "not_current cli/wedged fencing_token={} current_token={token} held=true\n",
            token - 1
        )
    );
    let (code, text) = check(&token.to_string(), true);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(code, Some(0));
    assert_eq!(
        (json["current"].clone(), json["held"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(check("0", false).0, Some(2), "token 0 is a usage error");

    let revoke = |args: &[&str]| {
        let mut revoke = leased(&endpoint);
        revoke.args(["revoke", "cli/wedged"]).args(args);
        output_of(revoke)
    };
    let stale = (token - 1).to_string();
    let output = revoke(&["--reason", "stale", "--fencing-token", &stale]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        format!("not_revoked cli/wedged (the grant with fencing token {stale} does not hold it)\n")
    );
    assert!(describe(&mut client, "cli/wedged").await.held);
    assert_eq!(revoke(&[]).status.code(), Some(2), "--reason is required");
    let output = revoke(&["--reason", "a\u{1b}[2Jb"]);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{errors}");
    assert!(
        errors.contains("reason") && !errors.contains('\u{1b}'),
        "{errors}"
    );

    let output = revoke(&[
        "--reason",
        "wedged (INC-7)",
        "--fencing-token",
        &token.to_string(),
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({ "name": "cli/wedged", "revoked": true, "fencing_token": token })
    );
    let (code, text) = check(&token.to_string(), false);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.ends_with("current_token=0 held=false\n"), "{text}");

    let output = exit_within(&mut run, 10);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(LEASE_LOST), "{errors}");
    assert!(
        errors.contains("lease lost: revoked: wedged (INC-7)"),
        "{errors}"
    );
    let output = revoke(&["--reason", "again"]);
    assert_eq!(
        stdout(&output),
        "not_revoked cli/wedged (nobody holds it)\n"
    );
}
