//! The book's page "Fencing your resource" (docs/src/fencing.md) runs as written: its `sh` blocks
//! (`leased fencing sql | psql`, `leased run` with psql, redis-cli and the library) against a real
//! leased, PostgreSQL and Redis, and its `sql` blocks through psql.
//!
//! In a `sh` block, a comment line `# => TEXT` is text its output must contain, and the block must
//! exit 0. In a `sql` block, a comment line `-- ERROR:  TEXT` is an error psql must report for the
//! statement before it: the block's errors are exactly those, in order.

use std::path::Path;

use super::*;

/// The page's code blocks: (language, body), in order.
fn code_blocks(page: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(language)) => open = Some((language.trim().to_owned(), String::new())),
            (Some(_), Some("")) => blocks.extend(open.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// Each block's expected lines: the text after `marker` on the lines that start with it.
fn expected(body: &str, marker: &str) -> Vec<String> {
    body.lines()
        .filter_map(|line| line.strip_prefix(marker))
        .map(|text| text.trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fencing_page_runs_as_written() {
    let leases = Leases::start().await;
    let database = PostgresServer::start();
    let resource = RedisServer::start();
    let work = tempdir("fencing-page");
    let leased_dir = Path::new(env!("CARGO_BIN_EXE_leased")).parent().unwrap();
    let path = format!(
        "{}:{}",
        leased_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let blocks = code_blocks(include_str!("../../../docs/src/fencing.md"));
    let run = |program: &str| {
        let mut command = Command::new(program);
        command
            .current_dir(&work)
            .env("PATH", &path)
            .env("DATABASE_URL", database.url())
            .env("REDIS_URL", resource.url())
            .env("LEASED_ENDPOINT", leases.server.endpoint())
            .stdin(Stdio::piped());
        command
    };
    let (mut shell_blocks, mut sql_blocks) = (0, 0);
    for (language, body) in &blocks {
        match language.as_str() {
            "sh" => {
                shell_blocks += 1;
                let output = run("sh").args(["-e", "-c", body]).output().unwrap();
                let stdout = String::from_utf8_lossy(&output.stdout);
                let stderr = String::from_utf8_lossy(&output.stderr);
                assert!(
                    output.status.success(),
                    "{body}\nfailed ({}): {stdout}{stderr}",
                    output.status
                );
                for text in expected(body, "# =>") {
                    assert!(
                        stdout.contains(&text),
                        "{body}\nprinted {stdout}, not {text:?}"
                    );
                }
            }
            "sql" => {
                sql_blocks += 1;
                let mut psql = run("psql")
                    .args([&database.url(), "-X", "-q"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                psql.stdin
                    .take()
                    .unwrap()
                    .write_all(body.as_bytes())
                    .unwrap();
                let output = psql.wait_with_output().unwrap();
                let stderr = String::from_utf8_lossy(&output.stderr);
                // psql prefixes each error with where it was: "psql:<stdin>:3: ERROR:  ...".
                let errors: Vec<String> = stderr
                    .lines()
                    .filter_map(|line| line.split_once("ERROR:"))
                    .map(|(_, error)| format!("ERROR:  {}", error.trim()))
                    .collect();
                let wanted: Vec<String> = expected(body, "-- ERROR:")
                    .into_iter()
                    .map(|error| format!("ERROR:  {error}"))
                    .collect();
                assert_eq!(errors, wanted, "{body}\n{stderr}");
            }
            _ => {}
        }
    }
    println!(
        "docs/src/fencing.md: {shell_blocks} sh blocks and {sql_blocks} sql blocks ran as written"
    );
    assert!(shell_blocks >= 4 && sql_blocks >= 3, "{blocks:?}");
}

/// A fresh directory under `target/tmp/`.
fn tempdir(name: &str) -> PathBuf {
    let dir = log_dir(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
