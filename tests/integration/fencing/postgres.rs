//! PostgreSQL as the resource: `leased.fence` in the writer's transaction and the row-level
//! `fencing_token` trigger, through `leased::fencing::postgres`.

use leased::fencing::{FenceError, MAX_TOKEN, postgres};

use super::*;

/// The tables `examples/fenced_write.rs` writes, each with its one row, and the history of the
/// accepted tokens: `ledger_history` by the concurrent writers, `accounts_history` by a trigger
/// that runs after the guard let an UPDATE through.
const SCHEMA: &str = "
CREATE TABLE ledger (id int PRIMARY KEY, owner text NOT NULL);
INSERT INTO ledger VALUES (1, 'nobody');
CREATE TABLE ledger_history (id bigserial PRIMARY KEY, token bigint NOT NULL);
CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, fencing_token bigint NOT NULL);
INSERT INTO accounts VALUES (1, 'nobody', 1);
CREATE TRIGGER accounts_fencing BEFORE INSERT OR UPDATE ON accounts
  FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
CREATE TABLE accounts_history (id bigserial PRIMARY KEY, token bigint NOT NULL);
CREATE FUNCTION record_accounts_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO accounts_history (token) VALUES (NEW.fencing_token);
  RETURN NEW;
END;
$$;
CREATE TRIGGER accounts_recorded AFTER UPDATE ON accounts
  FOR EACH ROW EXECUTE FUNCTION record_accounts_token();
";

/// A scratch PostgreSQL with the adapter's SQL (`leased fencing sql`) and the tables applied.
fn database() -> PostgresServer {
    let database = PostgresServer::start();
    database
        .psql(postgres::SQL)
        .expect("the fencing SQL applies");
    database.psql(SCHEMA).expect("the tables");
    database
}

async fn connect(database: &PostgresServer) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&database.config(), tokio_postgres::NoTls)
        .await
        .expect("cannot connect to PostgreSQL");
    tokio::spawn(connection);
    client
}

fn owner(database: &PostgresServer, table: &str) -> String {
    database
        .psql(&format!("SELECT owner FROM {table} WHERE id = 1"))
        .expect("read the owner")
}

fn reset(database: &PostgresServer) {
    database
        .psql(
            "UPDATE ledger SET owner = 'nobody'; DELETE FROM leased.fence_marks;
             ALTER TABLE accounts DISABLE TRIGGER USER;
             UPDATE accounts SET owner = 'nobody', fencing_token = 1;
             ALTER TABLE accounts ENABLE TRIGGER USER;
             TRUNCATE ledger_history, accounts_history;",
        )
        .expect("reset");
}

/// Kleppmann's scenario on both forms, fenced and not: the paused holder's late write is refused
/// and the row keeps holder 2's data; without fencing it overwrites holder 2's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_write_is_refused_by_postgres_and_overwrites_without_fencing() {
    let leases = Leases::start().await;
    let database = database();
    let config = database.config();
    for (resource, table) in [
        (Resource::PostgresFence, "ledger"),
        (Resource::PostgresRow, "accounts"),
    ] {
        let what = format!("PostgreSQL, {resource:?}");
        let fenced = kleppmann(&leases, &config, resource, true);
        assert_refused(&what, &fenced, &owner(&database, table));
        reset(&database);
        let unfenced = kleppmann(&leases, &config, resource, false);
        assert_overwritten(&what, &unfenced, &owner(&database, table));
        reset(&database);
    }
}

/// Writers with random pauses, on each form: the tokens the database accepted, in the order it
/// applied them, only increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_with_pauses_never_get_a_stale_write_into_postgres() {
    let leases = Leases::start().await;
    let database = database();
    let config = database.config();

    let fence_form = concurrent_writers(&leases, {
        let config = config.clone();
        move |token| {
            let config = config.clone();
            async move {
                let (mut client, connection) =
                    tokio_postgres::connect(&config, tokio_postgres::NoTls)
                        .await
                        .expect("connect");
                tokio::spawn(connection);
                let transaction = client.transaction().await.expect("begin");
                match postgres::fence(&transaction, "ledger", token).await {
                    Ok(mark) => assert_eq!(mark, token),
                    Err(FenceError::Stale { mark, .. }) => {
                        assert!(mark > token);
                        return false;
                    }
                    Err(other) => panic!("{other}"),
                }
                let token = token as i64;
                transaction
                    .execute("INSERT INTO ledger_history (token) VALUES ($1)", &[&token])
                    .await
                    .expect("history");
                transaction.commit().await.expect("commit");
                true
            }
        }
    })
    .await;
    let history = |table: &str| -> Vec<u64> {
        database
            .psql(&format!("SELECT token FROM {table} ORDER BY id"))
            .expect("history")
            .lines()
            .map(|line| line.parse().expect("a token"))
            .collect()
    };
    assert_history(
        "PostgreSQL, leased.fence",
        &history("ledger_history"),
        &fence_form,
    );

    let row_form = concurrent_writers(&leases, move |token| {
        let config = config.clone();
        async move {
            let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(connection);
            let row_token = token as i64;
            let update = client
                .execute(
                    "UPDATE accounts SET owner = 'writer', fencing_token = $1 WHERE id = 1",
                    &[&row_token],
                )
                .await;
            match update.map_err(|error| postgres::fence_error(&error, "accounts", token)) {
                Ok(rows) => rows == 1,
                Err(FenceError::Stale { mark, .. }) => {
                    assert!(mark > token);
                    false
                }
                Err(other) => panic!("{other}"),
            }
        }
    })
    .await;
    assert_history(
        "PostgreSQL, the fencing_token trigger",
        &history("accounts_history"),
        &row_form,
    );
}

/// Bad input is a clear error naming the argument, never a silent accept; 2^63 - 1 is accepted
/// and stays the mark, 2^63 is refused; the mark store keeps its keys under the prefix; a
/// database without the SQL is a store error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_and_keys_are_refused_by_postgres_and_the_largest_bigint_is_accepted() {
    let database = PostgresServer::start();
    let client = connect(&database).await;
    match postgres::fence(&client, "orders", 5).await {
        Err(FenceError::Store(message)) => {
            assert!(
                message.contains("schema \"leased\" does not exist"),
                "{message}"
            )
        }
        other => panic!("without the SQL: {other:?}"),
    }
    database
        .psql(postgres::SQL)
        .expect("the fencing SQL applies");
    database.psql(postgres::SQL).expect("and applies again");
    database.psql(SCHEMA).expect("the tables");

    let invalid = |result: Result<u64, FenceError>, naming: &str| match result {
        Err(FenceError::Invalid(message)) => {
            assert!(message.starts_with(naming), "{message}");
            println!("PostgreSQL refused: {message}");
        }
        other => panic!("expected an error naming {naming}: {other:?}"),
    };
    invalid(postgres::fence(&client, "orders", 0).await, "token");
    invalid(
        postgres::fence(&client, "orders", MAX_TOKEN + 1).await,
        "token",
    );
    invalid(postgres::fence(&client, "", 5).await, "resource");
    invalid(
        postgres::fence(&client, &"r".repeat(1025), 5).await,
        "resource",
    );
    // The SQL itself, as psql and every other client's driver reach it.
    for (sql, sqlstate) in [
        ("SELECT leased.fence('orders', 0)", "22023"),
        ("SELECT leased.fence('orders', -5)", "22023"),
        ("SELECT leased.fence('orders', NULL)", "22023"),
        ("SELECT leased.fence(NULL, 5)", "22023"),
        ("SELECT leased.fence('orders', '12a')", "22P02"),
        (
            "SELECT leased.fence('orders', '9223372036854775808')",
            "22003",
        ),
        (
            "UPDATE accounts SET fencing_token = 0 WHERE id = 1",
            "22023",
        ),
        (
            "UPDATE accounts SET fencing_token = NULL WHERE id = 1",
            "22023",
        ),
    ] {
        let error = database
            .psql(&format!("\\set VERBOSITY verbose\n{sql}"))
            .expect_err(sql);
        assert!(error.to_string().contains(sqlstate), "{sql}: {error}");
    }
    assert_eq!(
        database
            .psql("SELECT count(*) FROM leased.fence_marks")
            .unwrap(),
        "0",
        "a refused call recorded a mark"
    );

    // The boundary: the largest bigint is accepted and stays the mark.
    assert_eq!(
        postgres::fence(&client, "boundary", MAX_TOKEN).await,
        Ok(MAX_TOKEN)
    );
    assert_eq!(
        postgres::fence(&client, "boundary", MAX_TOKEN).await,
        Ok(MAX_TOKEN)
    );
    assert_eq!(
        postgres::fence(&client, "boundary", MAX_TOKEN - 1).await,
        Err(FenceError::Stale {
            resource: "boundary".into(),
            token: MAX_TOKEN - 1,
            mark: MAX_TOKEN,
        })
    );
    let max = MAX_TOKEN as i64;
    let update = "UPDATE accounts SET fencing_token = $1 WHERE id = 1";
    assert_eq!(client.execute(update, &[&max]).await.ok(), Some(1));
    let smaller = max - 1;
    let refused = client.execute(update, &[&smaller]).await.unwrap_err();
    assert_eq!(
        postgres::fence_error(&refused, "accounts row 1", MAX_TOKEN - 1),
        FenceError::Stale {
            resource: "accounts row 1".into(),
            token: MAX_TOKEN - 1,
            mark: MAX_TOKEN,
        }
    );

    // The middleware's mark store: autocommit, under its prefix, named as the caller named it.
    let marks = postgres::PostgresMarks::new(connect(&database).await).with_prefix("grpc:");
    assert_mark_store_refuses_a_smaller_token(&marks).await;
    assert_eq!(
        database
            .psql("SELECT token FROM leased.fence_marks WHERE resource = 'grpc:orders'")
            .unwrap(),
        "7"
    );
}
