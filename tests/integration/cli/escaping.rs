//! Holders and other server-provided text are printed escaped, never raw, in every format.

use super::*;

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
