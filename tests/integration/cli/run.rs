//! `leased run`: flock(1) for a fleet. Contention, handover after a SIGKILL, a lost lease, signals,
//! and `--limit` (the book's "at most N cron jobs fleet-wide" recipe).

use super::*;

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

/// The book's recipe "at most N cron jobs fleet-wide" (docs/src/recipes/cron-fleet.md): six `leased run --limit 2` of one script that
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
