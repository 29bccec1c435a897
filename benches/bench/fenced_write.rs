//! `fenced_write_postgres` and `fenced_write_redis`: what fencing costs a write to the resource
//! (docs/src/fencing.md), the fenced write against the same write without the token, in turns
//! (the plain write's rounds around the fenced one's, as the other paired rows), in one run.
//!
//! - PostgreSQL (a scratch server, `scripts/postgres-scratch.sh`: fsync off, so the figures are
//!   the statements' cost, not a disk's): each of [`CALLERS`] callers updates its own row in a
//!   transaction, `BEGIN; UPDATE; COMMIT`, against `BEGIN; SELECT leased.fence(<its resource>,
//!   token); UPDATE; COMMIT` through `leased::fencing::postgres::fence`.
//! - Redis (a redis-server of its own, not leased's): `SET key value` against `FCALL leased_set 2
//!   <mark> key token value` through `leased::fencing::redis::set`, each caller its own key and
//!   mark.
//!
//! Each holder writes many times under one token (a token equal to the mark passes), as a holder
//! does while it holds its lease. The ratio (fenced ops/s over plain ops/s) is printed per turn.

use fred::{
    clients::Client as RedisClient,
    interfaces::{ClientLike, KeysInterface},
    types::config::Config as RedisConfig,
};
use leased::fencing::{postgres as fenced_postgres, redis as fenced_redis};

use crate::{
    BenchResult, Run,
    harness::postgres::PostgresServer,
    measure::{Around, Row, Worker, closed_loop_kept, in_turns},
    procs,
    scenarios::paired_row,
};

/// Writers at once, each on its own row or key and its own mark.
const CALLERS: usize = 4;

/// The writers' token: leased's tokens are about this large (Unix microseconds).
const TOKEN: u64 = 1_800_000_000_000_000;

/// One PostgreSQL writer: its own connection and row.
struct PostgresWriter {
    client: tokio_postgres::Client,
    row: i32,
    resource: String,
    fenced: bool,
}

impl Worker for PostgresWriter {
    async fn op(&mut self) -> BenchResult<()> {
        let transaction = self.client.transaction().await?;
        if self.fenced {
            fenced_postgres::fence(&transaction, &self.resource, TOKEN).await?;
        }
        transaction
            .execute(
                "UPDATE bench_ledger SET total = total + 1 WHERE id = $1",
                &[&self.row],
            )
            .await?;
        transaction.commit().await?;
        Ok(())
    }
}

/// One Redis writer: its own key and mark, on a shared client (fred pipelines).
struct RedisWriter {
    client: RedisClient,
    key: String,
    mark: String,
    fenced: bool,
}

impl Worker for RedisWriter {
    async fn op(&mut self) -> BenchResult<()> {
        if self.fenced {
            fenced_redis::set(&self.client, &self.mark, &self.key, TOKEN, "value", &[]).await?;
        } else {
            self.client
                .set::<(), _, _>(self.key.as_str(), "value", None, None, false)
                .await?;
        }
        Ok(())
    }
}

pub async fn fenced_write_postgres(run: &Run) -> BenchResult<Vec<Row>> {
    let database = PostgresServer::try_start()?;
    database.psql(fenced_postgres::SQL)?;
    database.psql(&format!(
        "CREATE TABLE bench_ledger (id int PRIMARY KEY, total bigint NOT NULL);
         INSERT INTO bench_ledger SELECT g, 0 FROM generate_series(0, {CALLERS}) g;"
    ))?;
    let mut sides = Vec::new();
    for fenced in [false, true] {
        let mut writers = Vec::new();
        for row in 0..CALLERS as i32 {
            let (client, connection) =
                tokio_postgres::connect(&database.config(), tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            writers.push(PostgresWriter {
                client,
                row,
                resource: format!("bench-ledger-{row}"),
                fenced,
            });
        }
        sides.push(tokio::sync::Mutex::new(writers));
    }
    let note = format!(
        "{CALLERS} callers, each its own row in a transaction (BEGIN; UPDATE; COMMIT), with \
         SELECT leased.fence(its resource, token) before the UPDATE; scratch PostgreSQL, fsync off"
    );
    paired(run, "postgres", note, &sides[0], &sides[1]).await
}

pub async fn fenced_write_redis(run: &Run) -> BenchResult<Vec<Row>> {
    let redis = procs::start_redis_as("resource_redis")?;
    let client = RedisClient::new(RedisConfig::from_url(&redis.url())?, None, None, None);
    client.init().await?;
    fenced_redis::load_library(&client).await?;
    let sides: Vec<_> = [false, true]
        .into_iter()
        .map(|fenced| {
            let writers = (0..CALLERS)
                .map(|caller| RedisWriter {
                    client: client.clone(),
                    key: format!("{{bench{caller}}}:value"),
                    mark: format!("fence:{{bench{caller}}}"),
                    fenced,
                })
                .collect();
            tokio::sync::Mutex::new(writers)
        })
        .collect();
    let note = format!(
        "{CALLERS} callers on one fred client, each its own key: FCALL leased_set 2 <mark> <key> \
         <token> <value> instead of SET <key> <value>; a redis-server of its own"
    );
    paired(run, "redis", note, &sides[0], &sides[1]).await
}

/// The plain writers' rounds around the fenced writers' ones; the row of the fenced side, with
/// each turn's ratio (fenced / plain), which is also printed.
async fn paired<W: Worker>(
    run: &Run,
    store: &str,
    note: String,
    plain: &tokio::sync::Mutex<Vec<W>>,
    fenced: &tokio::sync::Mutex<Vec<W>>,
) -> BenchResult<Vec<Row>> {
    let turns = in_turns(
        run.rounds_in_turns(),
        |round| closed_loop_kept(plain, run.round_budget(round)),
        |round| closed_loop_kept(fenced, run.round_budget(round)),
    )
    .await?;
    let plain_name = format!("{store}_write@{CALLERS}");
    let fenced_name = format!("{store}_fenced_write@{CALLERS}");
    let ratio = turns.ratio(&fenced_name, &plain_name, Around::Denominator);
    for (turn, by_turn) in ratio.by_turn.iter().enumerate() {
        eprintln!(
            "bench: fenced_write_{store} turn {}: plain {:.0} ops/s, fenced {:.0} ops/s, \
             fenced / plain = {by_turn:.3}",
            turn + 1,
            ratio.denominator_ops_per_s_by_round[turn..=turn + 1]
                .iter()
                .sum::<f64>()
                / 2.0,
            ratio.numerator_ops_per_s_by_round[turn],
        );
    }
    Ok(vec![paired_row(
        fenced_name,
        note,
        &plain_name,
        turns,
        &ratio,
    )])
}
