//! Counting leases (`--limit`) and `--lock-delay` from the command line.

use super::*;

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
