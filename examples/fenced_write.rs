//! Acquire a lease and write under its fencing token, so that the resource refuses the write if a
//! newer holder has written since: PostgreSQL (`leased.fence` in the transaction, or the
//! `fencing_token` column's trigger) or Redis (the `leased_fencing` library).
//!
//! ```text
//! cargo run --example fenced_write -- --endpoint http://127.0.0.1:50051 --lease ledger \
//!     --ttl 30s --value report-7 --postgres "host=127.0.0.1 user=postgres" [--row-form]
//! cargo run --example fenced_write -- ... --redis redis://127.0.0.1:6379
//! ```
//!
//! It writes `--value` as the owner of the first row of `ledger (id int PRIMARY KEY, owner text)`
//! with `leased.fence('ledger', token)` in the same transaction, or with `--row-form` of `accounts
//! (id int PRIMARY KEY, owner text, fencing_token bigint NOT NULL)` guarded by
//! `leased.fencing_token_guard()`; on Redis, the key `{ledger}:owner` under the mark
//! `fence:{ledger}`. `--wait 10s` waits for a busy lease. `--no-fencing` writes the same without the token (to see what fencing
//! prevents), and `--pause-before-write` waits for a line on stdin between the grant and the
//! write (the tests stop the process there, as a GC pause would). It prints `granted token=N`,
//! then `written token=N`, or `refused: <why>` and exits with 3.
use std::{process::ExitCode, time::Duration};

use leased::{
    client::{AcquireOptions, LeaseClient},
    fencing::{FenceError, postgres, redis},
};

/// The exit code of a write the resource refused.
const REFUSED: u8 = 3;

#[derive(Default)]
struct Args {
    endpoint: String,
    lease: String,
    ttl: Duration,
    wait: Duration,
    value: String,
    postgres: Option<String>,
    redis: Option<String>,
    row_form: bool,
    no_fencing: bool,
    pause_before_write: bool,
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let client = LeaseClient::connect(args.endpoint.clone()).await?;
    let grant = client
        .acquire_once(&args.lease, &AcquireOptions::new(args.ttl).wait(args.wait))
        .await?
        .map_err(|busy| format!("{} is held by {:?}", args.lease, busy.holder))?;
    let token = grant.fencing_token;
    println!("granted token={token}");

    // Connected before the pause: a paused writer has usually started its write.
    let written = if let Some(config) = &args.postgres {
        let (mut database, connection) =
            tokio_postgres::connect(config, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        pause_if_asked(&args)?;
        write_postgres(&mut database, &args, token).await
    } else if let Some(url) = &args.redis {
        let redis_client = fred::clients::Client::new(
            fred::types::config::Config::from_url(url)?,
            None,
            None,
            None,
        );
        fred::interfaces::ClientLike::init(&redis_client).await?;
        pause_if_asked(&args)?;
        write_redis(&redis_client, &args, token).await
    } else {
        return Err("give --postgres CONFIG or --redis URL".into());
    };
    // Done (or refused, when the lease was lost): free the lease for the next holder at once.
    let _ = client.release(&args.lease, &grant.lease_id).await;
    match written {
        Ok(()) => {
            println!("written token={token}");
            Ok(ExitCode::SUCCESS)
        }
        Err(refused @ (FenceError::Stale { .. } | FenceError::Invalid(_))) => {
            println!("refused: {refused}");
            Ok(ExitCode::from(REFUSED))
        }
        Err(store) => Err(store.into()),
    }
}

/// One transaction: the fence (or the row's token) and the write commit or fail together.
async fn write_postgres(
    database: &mut tokio_postgres::Client,
    args: &Args,
    token: u64,
) -> Result<(), FenceError> {
    let store_error = |error: tokio_postgres::Error| postgres::fence_error(&error, "ledger", token);
    let transaction = database.transaction().await.map_err(store_error)?;
    if args.row_form {
        let row_token = i64::try_from(token).map_err(|_| FenceError::Invalid("token".into()))?;
        let update = if args.no_fencing {
            transaction
                .execute(
                    "UPDATE accounts SET owner = $1 WHERE id = 1",
                    &[&args.value],
                )
                .await
        } else {
            transaction
                .execute(
                    "UPDATE accounts SET owner = $1, fencing_token = $2 WHERE id = 1",
                    &[&args.value, &row_token],
                )
                .await
        };
        update.map_err(|error| postgres::fence_error(&error, "accounts row 1", token))?;
    } else {
        if !args.no_fencing {
            postgres::fence(&transaction, "ledger", token).await?;
        }
        transaction
            .execute("UPDATE ledger SET owner = $1 WHERE id = 1", &[&args.value])
            .await
            .map_err(store_error)?;
    }
    transaction.commit().await.map_err(store_error)
}

async fn write_redis(
    redis_client: &fred::clients::Client,
    args: &Args,
    token: u64,
) -> Result<(), FenceError> {
    if args.no_fencing {
        use fred::interfaces::KeysInterface;
        return redis_client
            .set::<(), _, _>("{ledger}:owner", args.value.as_str(), None, None, false)
            .await
            .map_err(|error| FenceError::Store(error.to_string()));
    }
    redis::set(
        redis_client,
        "fence:{ledger}",
        "{ledger}:owner",
        token,
        args.value.as_str(),
        &[],
    )
    .await
    .map(drop)
}

fn pause_if_asked(args: &Args) -> std::io::Result<()> {
    if args.pause_before_write {
        println!("paused before the write");
        std::io::stdin().read_line(&mut String::new())?;
    }
    Ok(())
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        endpoint: "http://127.0.0.1:50051".into(),
        lease: "ledger".into(),
        ttl: Duration::from_secs(30),
        value: "fenced_write".into(),
        ..Args::default()
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--endpoint" => args.endpoint = value()?,
            "--lease" => args.lease = value()?,
            "--ttl" => args.ttl = duration(&flag, &value()?)?,
            "--wait" => args.wait = duration(&flag, &value()?)?,
            "--value" => args.value = value()?,
            "--postgres" => args.postgres = Some(value()?),
            "--redis" => args.redis = Some(value()?),
            "--row-form" => args.row_form = true,
            "--no-fencing" => args.no_fencing = true,
            "--pause-before-write" => args.pause_before_write = true,
            _ => return Err(format!("unknown flag {flag:?}")),
        }
    }
    Ok(args)
}

/// `500ms` or `30s`.
fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    let millis = match text.strip_suffix("ms") {
        Some(millis) => millis.parse::<u64>().ok(),
        None => text
            .strip_suffix('s')
            .and_then(|seconds| seconds.parse::<u64>().ok())
            .map(|seconds| seconds * 1000),
    };
    millis
        .map(Duration::from_millis)
        .ok_or(format!("{flag} takes e.g. 500ms or 30s, not {text:?}"))
}
