//! Read-write leases (`--shared`) and own lease ids (`--lease-id`) from the command line, and the
//! mode of each holder in `describe`, `list` and `watch`.

use super::*;

/// Two `leased acquire --shared` hold a name together (an exclusive acquire exits 75), and
/// every view says so: `acquire` prints ` shared` (`"shared": true` in --json), `describe` marks
/// each holder `shared` under `limit=1 holders=2`, and `watch` marks each grant `shared`, with
/// `"shared": true` on every holder in --json. (`list`: below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holders_hold_together_and_every_view_shows_their_mode() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let mut text = leased(&endpoint);
    text.args(["watch", "cli/rw"]).stderr(Stdio::null());
    let text = LineReader::spawn(text);
    let mut json = leased(&endpoint);
    json.args(["watch", "cli/rw", "--json"])
        .stderr(Stdio::null());
    let json = LineReader::spawn(json);
    text.wait_for("the first snapshot", |l| l == "snapshot cli/rw free")
        .await;
    json.wait_for("the first snapshot", |l| {
        l.contains(r#""cause":"snapshot""#)
    })
    .await;

    let shared = |holder: &str| {
        let mut acquire = leased(&endpoint);
        acquire.args([
            "acquire", "cli/rw", "--shared", "--ttl", "30s", "--holder", holder,
        ]);
        acquire
    };
    let mut first = shared("r1");
    first.arg("--json");
    let first: serde_json::Value = serde_json::from_str(&stdout(&output_of(first))).unwrap();
    assert_eq!(
        (&first["granted"], &first["shared"]),
        (&true.into(), &true.into())
    );
    let first_token = first["fencing_token"].as_u64().unwrap();
    let output = output_of(shared("r2"));
    let second = stdout(&output);
    assert!(output.status.success(), "{second}");
    assert!(second.starts_with("granted cli/rw "), "{second}");
    assert!(second.trim_end().ends_with(" shared"), "{second}");
    let second_token: u64 = second
        .split_whitespace()
        .find_map(|field| field.strip_prefix("fencing_token="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(second_token > first_token);

    let mut exclusive = leased(&endpoint);
    exclusive.args(["acquire", "cli/rw", "--ttl", "30s"]);
    let output = output_of(exclusive);
    assert_eq!(output.status.code(), Some(NOT_GRANTED), "{output:?}");

    let mut describe = leased(&endpoint);
    describe.args(["describe", "cli/rw"]);
    let text_description = stdout(&output_of(describe));
    let lines: Vec<&str> = text_description.lines().collect();
    assert_eq!(lines.len(), 3, "{text_description}");
    assert_eq!(lines[0], "held cli/rw limit=1 holders=2");
    for (line, (holder, token)) in lines[1..]
        .iter()
        .zip([("r1", first_token), ("r2", second_token)])
    {
        let fields = format!(r#"  holder="{holder}" fencing_token={token} remaining_ms="#);
        assert!(line.starts_with(&fields), "{line}");
        assert!(line.ends_with(" shared"), "{line}");
    }
    let mut describe = leased(&endpoint);
    describe.args(["describe", "cli/rw", "--json"]);
    let description: serde_json::Value =
        serde_json::from_str(&stdout(&output_of(describe))).unwrap();
    assert_eq!(description["shared"], true, "{description}");
    let modes: Vec<(&str, bool)> = description["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["holder"].as_str().unwrap(),
                h["shared"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(modes, [("r1", true), ("r2", true)], "{description}");

    let granted = |holder: &str, token: u64| {
        format!(r#"granted cli/rw holder="{holder}" fencing_token={token} shared"#)
    };
    let first_line = granted("r1", first_token);
    let second_line = granted("r2", second_token) + " limit=1 holders=2";
    text.wait_for(&second_line, |l| l == second_line).await;
    assert_eq!(
        text.lines(),
        ["snapshot cli/rw free", &first_line, &second_line]
    );
    json.wait_for("the second grant", |l| {
        l.contains(&format!("{second_token}"))
    })
    .await;
    let last: serde_json::Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
    assert_eq!(last["cause"], "granted");
    let modes: Vec<bool> = last["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["shared"].as_bool().unwrap())
        .collect();
    assert_eq!(modes, [true, true], "{last}");
}

/// `leased acquire --lease-id ID` run twice answers the same grant (same lease id and token),
/// while the lease is held; a malformed id is refused by the server naming `lease_id` (exit 1);
/// `leased release --lease-id ID` ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_lease_id_makes_acquire_safe_to_repeat() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let lease_id = "cli-0123456789abcdef0123456789abcdef";
    let acquire = || {
        let mut acquire = leased(&endpoint);
        acquire.args([
            "acquire",
            "cli/own",
            "--ttl",
            "30s",
            "--lease-id",
            lease_id,
            "--json",
        ]);
        let output = output_of(acquire);
        assert!(output.status.success(), "{output:?}");
        serde_json::from_str::<serde_json::Value>(&stdout(&output)).unwrap()
    };
    let first = acquire();
    let again = acquire();
    assert_eq!(first["lease_id"], lease_id);
    assert_eq!(
        (
            &again["lease_id"],
            &again["fencing_token"],
            &again["expires_at_ms"]
        ),
        (
            &first["lease_id"],
            &first["fencing_token"],
            &first["expires_at_ms"]
        )
    );

    let mut malformed = leased(&endpoint);
    malformed.args([
        "acquire",
        "cli/own-2",
        "--ttl",
        "30s",
        "--lease-id",
        "short",
    ]);
    let output = output_of(malformed);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{errors}");
    assert!(errors.contains("lease_id"), "{errors}");

    let mut release = leased(&endpoint);
    release.args(["release", "cli/own", "--lease-id", lease_id]);
    assert_eq!(stdout(&output_of(release)).trim_end(), "released cli/own");
}

/// `leased run --shared` runs its command while another shared holder holds the name, with its
/// own token; a plain (exclusive) `leased run` does not run, exit 75.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_shared_runs_beside_a_reader_and_an_exclusive_run_does_not() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let mut reader = leased(&endpoint);
    reader.args([
        "acquire",
        "cli/run-rw",
        "--shared",
        "--ttl",
        "30s",
        "--json",
    ]);
    let reader: serde_json::Value = serde_json::from_str(&stdout(&output_of(reader))).unwrap();
    let reader_token = reader["fencing_token"].as_u64().unwrap();

    let mut run = leased(&endpoint);
    run.args(["run", "cli/run-rw", "--shared", "--ttl", "10s"])
        .args(["--", "sh", "-c", "echo \"token $LEASED_FENCING_TOKEN\""]);
    let output = output_of(run);
    let text = stdout(&output);
    assert!(output.status.success(), "{text} {output:?}");
    let token: u64 = text
        .trim_end()
        .strip_prefix("token ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(token > reader_token, "{text}");

    let marker = tempdir().join("ran");
    let mut exclusive = leased(&endpoint);
    exclusive
        .args(["run", "cli/run-rw", "--ttl", "10s", "--", "touch"])
        .arg(&marker);
    let output = output_of(exclusive);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(NOT_GRANTED), "{errors}");
    assert!(errors.contains("cli/run-rw is held by"), "{errors}");
    assert!(
        !marker.exists(),
        "the exclusive command ran beside a reader"
    );
}

/// `leased list` shows how each lease is held in its MODE column (`shared`, `exclusive`,
/// `counting`), and `--json` says `"shared"` for the lease and each holder; on the embedded store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_the_mode_of_each_lease() {
    let server = Leased::start(None).await;
    list_shows_modes(&server.endpoint());
}

/// [`list_shows_the_mode_of_each_lease`] on Redis, where shared grants are listed through their
/// permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_the_mode_of_each_lease_on_redis() {
    let setup = setup().await;
    list_shows_modes(&setup.server.endpoint());
}

fn list_shows_modes(endpoint: &str) {
    for (name, flags) in [
        ("cli/modes/counting", &["--limit", "3"][..]),
        ("cli/modes/exclusive", &[]),
        ("cli/modes/shared", &["--shared"]),
        ("cli/modes/shared", &["--shared"]),
    ] {
        let mut acquire = leased(endpoint);
        acquire.args(["acquire", name, "--ttl", "30s"]).args(flags);
        assert!(output_of(acquire).status.success(), "{name} {flags:?}");
    }
    let mut list = leased(endpoint);
    list.args(["list", "cli/modes/"]);
    let table = stdout(&output_of(list));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][7], "MODE", "{table}");
    let modes: Vec<(&str, &str, &str)> = rows[1..].iter().map(|r| (r[0], r[5], r[7])).collect();
    assert_eq!(
        modes,
        [
            ("cli/modes/counting", "1", "counting"),
            ("cli/modes/exclusive", "1", "exclusive"),
            ("cli/modes/shared", "2", "shared"),
        ],
        "{table}"
    );
    let mut list = leased(endpoint);
    list.args(["list", "cli/modes/", "--json"]);
    let text = stdout(&output_of(list));
    let listed: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shared: Vec<(bool, Vec<bool>)> = listed
        .iter()
        .map(|lease| {
            let holders = lease["holders"].as_array().unwrap();
            let modes = holders
                .iter()
                .map(|h| h["shared"].as_bool().unwrap())
                .collect();
            (lease["shared"].as_bool().unwrap(), modes)
        })
        .collect();
    assert_eq!(
        shared,
        [
            (false, vec![false]),
            (false, vec![false]),
            (true, vec![true, true])
        ],
        "{text}"
    );
}
