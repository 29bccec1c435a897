//! `redis_calls`: how many Redis calls each operation costs, as `INFO commandstats` counts them
//! (the commands scripts run included; see [`crate::commandstats`]), on a redis-server of its own
//! with two `leased` replicas (the release binary as child processes), so that nothing else
//! calls that Redis. Each row divides the calls by the operations and names the commands:
//! - `redis_calls_grant`: a try-once Acquire of a free name, N = 200 distinct names, one after
//!   another through one replica (`CONFIG RESETSTAT` before, `INFO` after);
//! - `redis_calls_release`: the Release of each of those grants, likewise;
//! - `redis_calls_handover`: a holder (on the first replica) releases and the waiter (in
//!   `Acquire`, on the second replica) is granted: the calls from the Release call until the
//!   waiter's `granted` arrived, both replicas' together, N = 100 hand-overs one after another,
//!   each on its own name, the counters read (never reset) around each;
//! - `redis_calls_handover_whole`: the same N hand-overs counted whole, from one reset to the
//!   last waiter's `granted`: the holder's grant, the waiter's queueing, the release and the
//!   waiter's grant, total / N;
//! - `redis_calls_watched_grant`, `redis_calls_watched_release`: a name watched through the first
//!   replica is granted and released through the second, N = 100 times: the calls from the
//!   Acquire (or Release) call until the watcher heard the change, per change. The cost of
//!   watching is what they add to `redis_calls_grant` and `redis_calls_release`.
//!
//! Each row's latency is the operation's: the Acquire or Release call, Release → the waiter's
//! `granted`, or the call → the watcher's event. Before any counting, each replica grants and
//! releases once and one hand-over runs, so that loading the scripts (`FUNCTION LOAD`, once per
//! replica) is not counted. The replicas' health pings (one `PING` a second each) are, as
//! everything else Redis ran meanwhile.

use std::{fmt::Write as _, time::Instant};

use leased::proto::{
    AcquireResponse, Granted, WatchEvent, WatchRequest, lease_service_client::LeaseServiceClient,
    watch_event::Cause,
};
use tonic::{Streaming, transport::Channel};

use crate::{
    BenchResult,
    commandstats::{CallMeter, Calls, per_unit, top_commands},
    harness::redis::RedisServer,
    measure::{Row, Samples, measured, thousands},
    procs,
    workload::{
        CYCLE_TTL_MS, acquire_granted, acquire_many_permits, granted, proto_client, queue_waiter,
        release,
    },
};

/// Grants, and then releases, counted.
const GRANTS: usize = 200;

/// Hand-overs counted.
const HANDOVERS: usize = 100;

/// Changes of the watched name counted, of each kind (grants and releases).
const WATCHED_CHANGES: usize = 100;

/// Commands named per row.
const TOP_COMMANDS: usize = 8;

/// `redis_calls`: every row, on a Redis and two replicas of its own.
pub async fn redis_calls(leased_args: &[String], server_log: &str) -> BenchResult<Vec<Row>> {
    let redis = procs::start_redis_as("redis-calls")?;
    let first = procs::start_leased("calls-1", Some(&redis.url()), leased_args, server_log).await?;
    let second =
        procs::start_leased("calls-2", Some(&redis.url()), leased_args, server_log).await?;
    let (one, two) = (
        procs::connect(first.address).await?,
        procs::connect(second.address).await?,
    );
    // Loading the scripts (FUNCTION LOAD, by the first replica that finds them missing) is not
    // in the counts.
    for channel in [&one, &two] {
        let mut client = proto_client(channel);
        let granted = acquire_granted(&mut client, "bench/calls/warm-up", CYCLE_TTL_MS).await?;
        release(&mut client, granted.name, granted.lease_id).await?;
    }
    warm_up_handover(&one, &two, "bench/calls/warm-up-handover").await?;

    let mut rows = grants_and_releases(&redis, &one).await?;
    rows.extend(handovers(&redis, &one, &two).await?);
    rows.extend(watched_changes(&redis, &one, &two).await?);
    Ok(rows)
}

/// A row of calls per operation: `calls` over `samples.latencies.len()` operations.
fn calls_row(name: &str, what: &str, calls: &Calls, samples: &Samples) -> Row {
    let ops = samples.latencies.len();
    let per = ops.max(1) as f64;
    let per_op = calls.total() as f64 / per;
    let scripts_per_op = calls.scripts() as f64 / per;
    Row::new(
        name,
        samples,
        format!(
            "{what}: {} Redis calls and {} scripts per op: {}; N = {ops}",
            per_unit(per_op),
            per_unit(scripts_per_op),
            calls.breakdown(per, TOP_COMMANDS),
        ),
    )
    .with("operation", what)
    .with("n", ops)
    .with("redis_calls_per_op", (per_op * 1000.0).round() / 1000.0)
    .with(
        "redis_scripts_per_op",
        (scripts_per_op * 1000.0).round() / 1000.0,
    )
    .with("redis_calls_per_op_by_command", calls.to_json(per))
}

/// `redis_calls_grant` and `redis_calls_release`.
async fn grants_and_releases(redis: &RedisServer, channel: &Channel) -> BenchResult<Vec<Row>> {
    let names = (0..GRANTS)
        .map(|index| format!("bench/calls/grant/{index:03}"))
        .collect();
    let channels = [channel.clone()];
    let mut meter = CallMeter::reset(redis)?;
    let (grants, granting) = acquire_many_permits(&channels, names, CYCLE_TTL_MS, 1, 0).await?;
    let grant_calls = meter.read()?;

    let mut client = proto_client(channel);
    let mut meter = CallMeter::reset(redis)?;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(grants.len());
    for granted in grants {
        let call = Instant::now();
        release(&mut client, granted.name, granted.lease_id).await?;
        latencies.push(call.elapsed());
    }
    let release_calls = meter.read()?;
    let releasing = Samples {
        latencies,
        elapsed: started.elapsed(),
        ..Samples::default()
    };
    Ok(vec![
        calls_row(
            "redis_calls_grant",
            "grant (try-once Acquire of a free name)",
            &grant_calls,
            &granting,
        ),
        calls_row(
            "redis_calls_release",
            "release (of such a grant)",
            &release_calls,
            &releasing,
        ),
    ])
}

/// `redis_calls_handover` and `redis_calls_handover_whole`.
async fn handovers(
    redis: &RedisServer,
    holders: &Channel,
    waiters: &Channel,
) -> BenchResult<Vec<Row>> {
    let (mut holder, mut waiter) = (proto_client(holders), proto_client(waiters));
    let mut meter = CallMeter::reset(redis)?;
    let mut handover_calls = Calls::default();
    let mut latencies = Vec::with_capacity(HANDOVERS);
    let mut handed_over = Vec::with_capacity(HANDOVERS);
    let started = Instant::now();
    for index in 0..HANDOVERS {
        let name = format!("bench/calls/handover/{index:03}");
        let (held, mut waiting) = holder_and_waiter(&mut holder, &mut waiter, &name).await?;
        let before = meter.read()?;
        let released_at = Instant::now();
        release(&mut holder, held.name, held.lease_id).await?;
        let granted = granted(&mut waiting, &name).await?;
        latencies.push(released_at.elapsed());
        handover_calls.add(&meter.read()?.since(&before));
        handed_over.push(granted);
    }
    let whole_calls = meter.read()?;
    let elapsed = started.elapsed();
    for granted in handed_over {
        release(&mut waiter, granted.name, granted.lease_id).await?;
    }
    let samples = Samples {
        latencies,
        elapsed,
        ..Samples::default()
    };
    Ok(vec![
        calls_row(
            "redis_calls_handover",
            "hand-over (Release on one replica → the waiter's `granted` on another)",
            &handover_calls,
            &samples,
        ),
        calls_row(
            "redis_calls_handover_whole",
            "hand-over counted whole (holder's grant, waiter queued, Release, waiter's grant)",
            &whole_calls,
            &samples,
        ),
    ])
}

/// `name` granted through `holder`, and an Acquire of it waiting through `waiter`.
async fn holder_and_waiter(
    holder: &mut LeaseServiceClient<Channel>,
    waiter: &mut LeaseServiceClient<Channel>,
    name: &str,
) -> BenchResult<(Granted, Streaming<AcquireResponse>)> {
    let held = acquire_granted(holder, name, CYCLE_TTL_MS).await?;
    Ok((held, queue_waiter(waiter, name, CYCLE_TTL_MS).await?))
}

/// One hand-over of `name` from a holder on `holders` to a waiter on `waiters`, and the release
/// of the waiter's grant: not counted, it warms up the replicas' scripts.
async fn warm_up_handover(holders: &Channel, waiters: &Channel, name: &str) -> BenchResult<()> {
    let (mut holder, mut waiter) = (proto_client(holders), proto_client(waiters));
    let (held, mut waiting) = holder_and_waiter(&mut holder, &mut waiter, name).await?;
    release(&mut holder, held.name, held.lease_id).await?;
    let granted = granted(&mut waiting, name).await?;
    release(&mut waiter, granted.name, granted.lease_id).await
}

/// `redis_calls_watched_grant` and `redis_calls_watched_release`.
async fn watched_changes(
    redis: &RedisServer,
    watching: &Channel,
    changing: &Channel,
) -> BenchResult<Vec<Row>> {
    const NAME: &str = "bench/calls/watched";
    let mut events = proto_client(watching)
        .watch(WatchRequest {
            name: NAME.to_owned(),
        })
        .await?
        .into_inner();
    let first = events.message().await?.ok_or("the Watch ended at once")?;
    if first.cause() != Cause::Snapshot {
        return Err(format!("the Watch's first event was {:?}", first.cause()).into());
    }
    let mut client = proto_client(changing);
    let mut meter = CallMeter::reset(redis)?;
    let (mut grant_calls, mut release_calls) = (Calls::default(), Calls::default());
    let (mut grant_latencies, mut release_latencies) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for _ in 0..WATCHED_CHANGES {
        let before = meter.read()?;
        let call = Instant::now();
        let granted = acquire_granted(&mut client, NAME, CYCLE_TTL_MS).await?;
        hear(&mut events, Cause::Granted, granted.fencing_token).await?;
        grant_latencies.push(call.elapsed());
        let heard_grant = meter.read()?;
        grant_calls.add(&heard_grant.since(&before));

        let call = Instant::now();
        let token = granted.fencing_token;
        release(&mut client, granted.name, granted.lease_id).await?;
        hear(&mut events, Cause::Released, token).await?;
        release_latencies.push(call.elapsed());
        release_calls.add(&meter.read()?.since(&heard_grant));
    }
    let elapsed = started.elapsed();
    let samples = |latencies| Samples {
        latencies,
        elapsed,
        ..Samples::default()
    };
    Ok(vec![
        calls_row(
            "redis_calls_watched_grant",
            "watched grant (Acquire on one replica → the GRANTED event of a Watch on another)",
            &grant_calls,
            &samples(grant_latencies),
        ),
        calls_row(
            "redis_calls_watched_release",
            "watched release (Release on one replica → the RELEASED event of a Watch on another)",
            &release_calls,
            &samples(release_latencies),
        ),
    ])
}

/// Reads the Watch's next event, which must be `cause` of the grant `token` (or a snapshot, which
/// tells a watcher that lagged the news too).
async fn hear(events: &mut Streaming<WatchEvent>, cause: Cause, token: u64) -> BenchResult<()> {
    let event = events.message().await?.ok_or("the Watch ended")?;
    match event.cause() {
        Cause::Snapshot => Ok(()),
        heard if heard == cause && event.fencing_token == token => Ok(()),
        heard => Err(format!(
            "expected {cause:?} of token {token}, the watcher heard {heard:?} of token {}",
            event.fencing_token
        )
        .into()),
    }
}

/// The table of the `redis_calls` rows, if the run has any.
pub fn table(rows: &[Row]) -> Option<String> {
    let rows = measured(rows, "redis_calls_");
    if rows.is_empty() {
        return None;
    }
    let mut out = String::from(
        "| operation | N | Redis calls per op | scripts per op | commands per op |\n\
         |---|--:|--:|--:|---|\n",
    );
    for row in rows {
        let number = |key: &str| row.extra.get(key).and_then(|value| value.as_f64());
        let by_command = row
            .extra
            .get("redis_calls_per_op_by_command")
            .cloned()
            .unwrap_or_default();
        writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            row.name,
            thousands(number("n").unwrap_or(0.0)),
            per_unit(number("redis_calls_per_op").unwrap_or(f64::NAN)),
            per_unit(number("redis_scripts_per_op").unwrap_or(f64::NAN)),
            top_commands(&by_command, TOP_COMMANDS),
        )
        .expect("a String");
    }
    Some(out)
}
