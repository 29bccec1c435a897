//! The book's command-line examples (docs/src/cli.md) run as written, and the configuration page
//! (docs/src/operations/configuration.md) lists exactly the flags of `leased serve --help`.

use super::*;

/// The book's command-line examples (docs/src/cli.md, every line that starts with `leased `) run
/// as written, and the README's `leased` lines are among them. `LEASE_ID` and `FENCING_TOKEN`
/// stand for what `acquire` printed. The operators' lines (`watch`, `list`, `revoke`) act on the
/// lease as a wedged `leased run` holds it (started here when the first of them comes;
/// `FENCING_TOKEN` is then its token), and `leased watch` runs in the background until it shows
/// the revoke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_cli_examples_work() {
    let setup = setup().await;
    let endpoint = setup.server.endpoint();
    let page = include_str!("../../../docs/src/cli.md");
    let commands: Vec<&str> = page.lines().filter(|l| l.starts_with("leased ")).collect();
    assert!(commands.len() >= 4, "{commands:?}");
    let readme = include_str!("../../../README.md");
    for line in readme.lines().filter(|l| l.starts_with("leased ")) {
        assert!(
            commands.contains(&line),
            "the README's `{line}` is not on the command-line page, so no test runs it"
        );
    }
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

/// The words of `text` that start with `prefix` and a letter (`--max-ttl`, `LEASED_LISTEN`), each
/// once, sorted.
fn options_in(text: &str, prefix: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .filter(|word| {
            word.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_alphabetic()))
        })
        .map(|word| word.trim_end_matches(['-', '_']).to_owned())
        .collect()
}

/// The configuration page cannot drift from the binary: its table names every flag and
/// environment variable that `leased serve --help` shows, and the page names no flag or variable
/// that `leased serve` does not have.
#[test]
fn configuration_page_lists_every_serve_flag() {
    let help = Command::new(env!("CARGO_BIN_EXE_leased"))
        .args(["serve", "--help"])
        .output()
        .expect("cannot run leased serve --help");
    assert!(help.status.success(), "leased serve --help failed");
    let help = String::from_utf8(help.stdout).unwrap();
    let page = include_str!("../../../docs/src/operations/configuration.md");
    let table: String = page
        .lines()
        .filter(|line| line.starts_with("| `--"))
        .collect::<Vec<_>>()
        .join("\n");

    let mut flags = options_in(&help, "--");
    flags.remove("--help");
    flags.remove("--version");
    let envs = options_in(&help, "LEASED_");
    assert!(flags.len() >= 20 && envs.len() >= 20, "{flags:?} {envs:?}");
    for (what, of_help, in_table) in [
        ("flag", &flags, options_in(&table, "--")),
        ("environment variable", &envs, options_in(&table, "LEASED_")),
    ] {
        let missing: Vec<_> = of_help.difference(&in_table).collect();
        assert!(
            missing.is_empty(),
            "the configuration page's table lacks the {what}s {missing:?} of `leased serve --help`"
        );
    }
    for (what, of_help, on_page) in [
        ("flag", &flags, options_in(page, "--")),
        ("environment variable", &envs, options_in(page, "LEASED_")),
    ] {
        let unknown: Vec<_> = on_page
            .iter()
            .filter(|option| !of_help.contains(*option) && option.as_str() != "--help")
            .collect();
        assert!(
            unknown.is_empty(),
            "the configuration page names the {what}s {unknown:?}, which `leased serve` lacks"
        );
    }
}
