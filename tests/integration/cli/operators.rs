//! The operators' subcommands: `watch`, `list`, `check` and `revoke`.

use super::*;

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
            "WAITERS",
            "MODE"
        ]
    );
    assert!(rows[1..].iter().all(|row| row[7] == "exclusive"), "{text}");
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
