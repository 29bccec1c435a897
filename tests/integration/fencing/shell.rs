//! `leased fencing sql` and `leased fencing redis-functions` apply as the book says, and the shell
//! form `leased run NAME -- sh -c 'psql ... -v token="$LEASED_FENCING_TOKEN"'` writes under the
//! lease's token, and is refused once a newer token wrote.

use super::*;

/// The book's `leased run` form: `nightly.sql` fences `ledger` with psql's `:'token'`.
const NIGHTLY_SQL: &str = "BEGIN;
SELECT leased.fence('ledger', :'token');
UPDATE ledger SET owner = 'nightly job ' || :'token' WHERE id = 1;
COMMIT;
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_run_with_psql_writes_under_its_token_and_a_stale_run_is_refused() {
    let leases = Leases::start().await;
    let database = PostgresServer::start();
    let resource = RedisServer::start();
    let work = log_dir("fencing-shell");
    std::fs::write(work.join("nightly.sql"), NIGHTLY_SQL).unwrap();
    let leased = env!("CARGO_BIN_EXE_leased");
    let sh = |script: &str| {
        Command::new("sh")
            .args(["-e", "-c", script])
            .current_dir(&work)
            .env("LEASED", leased)
            .env("DATABASE_URL", database.url())
            .env("REDIS_URL", resource.url())
            .env("LEASED_ENDPOINT", leases.server.endpoint())
            .output()
            .unwrap()
    };

    let applied = sh(
        "\"$LEASED\" fencing sql | psql -q -v ON_ERROR_STOP=1 \"$DATABASE_URL\"
        \"$LEASED\" fencing redis-functions | redis-cli -u \"$REDIS_URL\" -x FUNCTION LOAD REPLACE",
    );
    assert!(applied.status.success(), "{applied:?}");
    assert_eq!(
        String::from_utf8_lossy(&applied.stdout).trim(),
        "leased_fencing"
    );
    database
        .psql(
            "CREATE TABLE ledger (id int PRIMARY KEY, owner text NOT NULL);
               INSERT INTO ledger VALUES (1, 'nobody');",
        )
        .unwrap();

    let nightly = "\"$LEASED\" run ledger --ttl 30s -- \
        sh -c 'psql -q \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -v token=\"$LEASED_FENCING_TOKEN\" -f nightly.sql'";
    let first = sh(nightly);
    assert!(first.status.success(), "{first:?}");
    // psql prints leased.fence's answer, the mark (now the token), as a one-cell table.
    let printed = String::from_utf8_lossy(&first.stdout).into_owned();
    let token: u64 = printed
        .lines()
        .find_map(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("no mark in psql's output: {printed}"));
    assert_eq!(
        database
            .psql("SELECT owner FROM ledger WHERE id = 1")
            .unwrap(),
        format!("nightly job {token}")
    );

    // A newer holder wrote (its token is larger than any leased grants for a while yet); the
    // next run's token is below the mark, so its transaction is refused and rolled back.
    let newer = token + 1_000_000_000_000;
    database
        .psql(&format!(
            "BEGIN; SELECT leased.fence('ledger', {newer});
             UPDATE ledger SET owner = 'newer holder' WHERE id = 1; COMMIT;"
        ))
        .unwrap();
    let stale = sh(nightly);
    let stderr = String::from_utf8_lossy(&stale.stderr);
    println!(
        "leased run with psql: token {token} written; the next run, below the mark {newer}, \
         exited {} with: {}",
        stale.status,
        stderr
            .lines()
            .find(|line| line.contains("ERROR"))
            .unwrap_or_default()
    );
    assert_eq!(
        stale.status.code(),
        Some(3),
        "psql's ON_ERROR_STOP exit: {stderr}"
    );
    assert!(
        stderr.contains("stale fencing token") && stderr.contains(&format!("is {newer}")),
        "{stderr}"
    );
    assert_eq!(
        database
            .psql("SELECT owner FROM ledger WHERE id = 1")
            .unwrap(),
        "newer holder"
    );
}
