//! A rolling upgrade keeps every lease: two replicas of an older `leased` (`LEASED_OLD_BIN`) on
//! one Redis are replaced, one at a time, by this build's, while holders renew through both
//! replicas and waiters queue on contended names through both. Ignored by `cargo test`: it
//! needs an older binary and takes half a minute; `scripts/upgrade-check.sh OLD_REV` builds one
//! and runs it. Without `LEASED_OLD_BIN`, the "old" replicas run this build too (a check of the
//! test itself).
//!
//! What it checks: no lease is lost (no renewal answers `lost`, no holder goes without a renewal
//! for longer than it may trust its lease, no release finds its grant gone), tokens strictly
//! increase per name across the whole run, and waiters are served first come, first served (a
//! waiter told it is queued before another sent its Acquire is granted first). Every call that
//! fails on a replica being replaced is retried on the other, with the caller's own lease id, so
//! that a retry is answered the grant or the place in line that the first attempt made.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant, SystemTime},
};

use crate::common::*;
use leased::proto::{
    AcquireRequest, ReleaseRequest, RenewRequest, acquire_response,
    lease_service_client::LeaseServiceClient, renew_response,
};
use tokio::{sync::watch, task::JoinSet};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// Names held for the whole run, each renewed through the two replicas in turn.
const HELD_NAMES: usize = 8;
/// Names that waiters queue on, and how many waiters each.
const CONTENDED_NAMES: usize = 3;
const WAITERS_PER_NAME: usize = 4;

const HOLDER_TTL: Duration = Duration::from_secs(3);
const RENEW_EVERY: Duration = Duration::from_millis(250);
/// How long a holder trusts its lease after sending the last renewal that was answered, as
/// every client does (ARCHITECTURE.md, "Invariants"): a longer gap is a lease lost.
const TRUSTED_FOR: Duration = HOLDER_TTL.saturating_sub(Duration::from_millis(150));

const WAITER_TTL: Duration = Duration::from_secs(3);
const WAIT_AT_MOST: Duration = Duration::from_secs(30);
/// How long a waiter holds its grant before releasing it.
const WAITER_HOLDS: Duration = Duration::from_millis(50);

/// A unary call's deadline: a replica that stopped answering must not stall the caller.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// With both old replicas, between the two replacements, and with both new ones.
const WARM_UP: Duration = Duration::from_secs(4);
const BETWEEN_REPLACEMENTS: Duration = Duration::from_secs(3);
const AFTER_UPGRADE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    Old,
    New,
}

/// The two replica slots the callers take turns on; a slot is switched to its new replica
/// before its old one is stopped.
struct Replicas {
    slots: RwLock<[(Channel, Version); 2]>,
}

impl Replicas {
    /// The replica of `turn`: even turns the first slot, odd the second.
    fn pick(&self, turn: usize) -> (LeaseServiceClient<Channel>, Version) {
        let (channel, version) = self.slots.read().unwrap()[turn % 2].clone();
        (LeaseServiceClient::new(channel), version)
    }

    fn replace(&self, slot: usize, channel: Channel, version: Version) {
        self.slots.write().unwrap()[slot] = (channel, version);
    }
}

/// One grant, as its caller received it.
struct GrantRecord {
    name: String,
    fencing_token: u64,
    received_at: Instant,
    through: Version,
}

/// One wait on a contended name.
struct WaitRecord {
    name: String,
    /// When the first Acquire of this wait was sent.
    sent_at: Instant,
    /// When the caller was first told it is queued (`None`: granted at once).
    queued_at: Option<Instant>,
    /// The wait was queued, then ended by a replica being replaced, and sent again.
    sent_again: bool,
    fencing_token: u64,
    waited: Duration,
}

#[derive(Default)]
struct Report {
    renewals_old: u64,
    renewals_new: u64,
    /// Calls that failed on one replica (it was being replaced) and were tried on the other.
    retried: u64,
    grants: Vec<GrantRecord>,
    waits: Vec<WaitRecord>,
    waits_not_served: Vec<String>,
    leases_lost: Vec<String>,
}

type Shared = Arc<Mutex<Report>>;

/// Lease ids the callers choose (22 to 128 of `A-Z a-z 0-9 _ -`), unique per run.
struct LeaseIds {
    run: u128,
}

impl LeaseIds {
    fn new() -> Self {
        let run = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        LeaseIds { run }
    }

    fn make(&self, who: &str, sequence: usize) -> String {
        format!("upgrade-{}-{who}-{sequence:06}", self.run)
    }
}

/// Both old replicas replaced by new ones, one at a time, while 8 holders renew and 12 waiters
/// queue through both replicas: no lease lost, tokens increasing per name, FIFO kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an older leased (LEASED_OLD_BIN); run by scripts/upgrade-check.sh"]
async fn a_rolling_upgrade_keeps_every_lease() {
    let new_bin = PathBuf::from(env!("CARGO_BIN_EXE_leased"));
    let old_bin = std::env::var_os("LEASED_OLD_BIN").map_or_else(|| new_bin.clone(), PathBuf::from);
    println!(
        "rolling upgrade: old {}, new {}",
        old_bin.display(),
        new_bin.display()
    );
    let logs = log_dir("upgrade");
    let redis = RedisServer::start();
    let start = |bin: &PathBuf, log: &str| {
        LeasedProcess::serve()
            .program(bin.clone())
            .redis(&redis.url())
            .log(Log::File(logs.join(log)))
            .start()
    };
    let mut old = [
        start(&old_bin, "old-0.log").await,
        start(&old_bin, "old-1.log").await,
    ];
    let replicas = Arc::new(Replicas {
        slots: RwLock::new([
            (connect(&old[0].endpoint()).await, Version::Old),
            (connect(&old[1].endpoint()).await, Version::Old),
        ]),
    });

    let report: Shared = Arc::default();
    let ids = Arc::new(LeaseIds::new());
    let (stop, stopped) = watch::channel(false);
    let mut callers = JoinSet::new();
    for index in 0..HELD_NAMES {
        callers.spawn(hold(
            format!("upgrade/held-{index}"),
            index,
            replicas.clone(),
            report.clone(),
            ids.clone(),
            stopped.clone(),
        ));
    }
    for index in 0..CONTENDED_NAMES * WAITERS_PER_NAME {
        callers.spawn(wait_in_turn(
            format!("upgrade/contended-{}", index % CONTENDED_NAMES),
            index,
            replicas.clone(),
            report.clone(),
            ids.clone(),
            stopped.clone(),
        ));
    }

    tokio::time::sleep(WARM_UP).await;
    let mut new = Vec::new();
    for (slot, retiring) in old.iter_mut().enumerate() {
        let replacement = start(&new_bin, &format!("new-{slot}.log")).await;
        replicas.replace(slot, connect(&replacement.endpoint()).await, Version::New);
        new.push(replacement);
        retiring.signal(libc::SIGTERM);
        harness::poll_until_async(
            "the old replica to drain and exit",
            Duration::from_secs(20),
            || std::future::ready(retiring.try_wait().is_some()),
        )
        .await
        .unwrap_or_else(|error| panic!("{error}"));
        println!("replaced old replica {slot}");
        tokio::time::sleep(BETWEEN_REPLACEMENTS).await;
    }
    tokio::time::sleep(AFTER_UPGRADE).await;
    stop.send_replace(true);
    while let Some(done) = callers.join_next().await {
        done.expect("a caller panicked");
    }

    let report = report.lock().unwrap();
    let token_errors = tokens_out_of_order(&report.grants);
    let (fifo_pairs, fifo_errors) = fifo_violations(&report.waits);
    let grants_through = |version| {
        report
            .grants
            .iter()
            .filter(|grant| grant.through == version)
            .count()
    };
    let queued = report.waits.iter().filter(|wait| wait.queued_at.is_some());
    let sent_again = report.waits.iter().filter(|wait| wait.sent_again).count();
    let max_wait = report.waits.iter().map(|wait| wait.waited).max();
    println!(
        "renewals: {} through old replicas, {} through new ones; {} calls retried on the other \
         replica",
        report.renewals_old, report.renewals_new, report.retried
    );
    println!(
        "grants: {} ({} through old replicas, {} through new ones); waits served: {} ({} queued \
         first, {sent_again} sent again after a replica being replaced ended them), not served: \
         {}; max wait {:?}",
        report.grants.len(),
        grants_through(Version::Old),
        grants_through(Version::New),
        report.waits.len(),
        queued.count(),
        report.waits_not_served.len(),
        max_wait.unwrap_or_default(),
    );
    println!(
        "leases lost: {}; tokens out of order: {}; FIFO violations: {} of {fifo_pairs} ordered \
         pairs",
        report.leases_lost.len(),
        token_errors.len(),
        fifo_errors.len()
    );
    for line in report
        .leases_lost
        .iter()
        .chain(&token_errors)
        .chain(&fifo_errors)
        .chain(&report.waits_not_served)
        .take(20)
    {
        println!("  {line}");
    }
    assert!(report.leases_lost.is_empty(), "leases lost");
    assert!(token_errors.is_empty(), "tokens out of order");
    assert!(fifo_errors.is_empty(), "FIFO violated");
    assert!(report.waits_not_served.is_empty(), "waits not served");
    assert!(
        report.renewals_old > 0 && report.renewals_new > 0,
        "renewals went through both versions"
    );
    assert!(
        grants_through(Version::Old) > 0 && grants_through(Version::New) > 0,
        "waiters were granted through both versions"
    );
    assert!(fifo_pairs > 0, "no wait was queued behind another");
}

async fn connect(endpoint: &str) -> Channel {
    Channel::from_shared(endpoint.to_owned())
        .unwrap()
        .connect()
        .await
        .expect("cannot connect to leased")
}

/// Holds `name` until `stopped`, renewing every [`RENEW_EVERY`] through the replicas in turn
/// (a renewal that fails is tried again on the other at the next turn); a lease lost is recorded
/// and taken again. Releases it at the end.
async fn hold(
    name: String,
    index: usize,
    replicas: Arc<Replicas>,
    report: Shared,
    ids: Arc<LeaseIds>,
    stopped: watch::Receiver<bool>,
) {
    let who = format!("h{index}");
    let mut turn = index;
    let mut sequence = 0;
    // A holder that takes its name again waits out the grant it lost.
    let take = async |sequence: usize, turn: &mut usize| {
        let lease_id = ids.make(&who, sequence);
        acquire(
            &name,
            &who,
            &lease_id,
            HOLDER_TTL,
            2 * HOLDER_TTL,
            turn,
            &replicas,
            &report,
        )
        .await
    };
    let mut held = take(sequence, &mut turn).await;
    let mut trusted_since = held.sent_at;
    while !*stopped.borrow() {
        tokio::time::sleep(RENEW_EVERY).await;
        turn += 1;
        let (mut client, version) = replicas.pick(turn);
        let sent_at = Instant::now();
        let request = RenewRequest {
            name: name.clone(),
            lease_id: held.lease_id.clone(),
            ttl_ms: 0,
        };
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            client
                .renew(tokio_stream::iter([request]))
                .await?
                .into_inner()
                .next()
                .await
                .unwrap_or_else(|| Err(tonic::Status::unavailable("no answer")))
        })
        .await;
        let lost = match answer.map(|answer| answer.map(|answer| answer.result)) {
            Ok(Ok(Some(renew_response::Result::Renewed(renewed)))) => {
                assert_eq!(
                    renewed.fencing_token, held.fencing_token,
                    "{name}: a renewal changed the token"
                );
                let mut report = report.lock().unwrap();
                match version {
                    Version::Old => report.renewals_old += 1,
                    Version::New => report.renewals_new += 1,
                }
                let since_trusted = sent_at - trusted_since;
                trusted_since = sent_at;
                (since_trusted > TRUSTED_FOR).then(|| {
                    format!("{name}: renewed {since_trusted:?} after the last answered renewal")
                })
            }
            Ok(Ok(other)) => Some(format!(
                "{name}: a renewal through {version:?} answered {other:?}"
            )),
            Ok(Err(_)) | Err(_) => {
                report.lock().unwrap().retried += 1;
                (Instant::now() - trusted_since > TRUSTED_FOR)
                    .then(|| format!("{name}: no renewal answered for {TRUSTED_FOR:?}"))
            }
        };
        if let Some(lost) = lost {
            report.lock().unwrap().leases_lost.push(lost);
            // The server may still hold the old grant (a renewal answered too late): end it.
            release(&name, &held.lease_id, &mut turn, &replicas, &report).await;
            sequence += 1;
            held = take(sequence, &mut turn).await;
            trusted_since = held.sent_at;
        }
    }
    if !release(&name, &held.lease_id, &mut turn, &replicas, &report).await {
        report
            .lock()
            .unwrap()
            .leases_lost
            .push(format!("{name}: the final release found the grant gone"));
    }
}

/// Until `stopped`: waits for `name` (a fresh lease id each time), holds it for
/// [`WAITER_HOLDS`], releases it; every wait recorded.
async fn wait_in_turn(
    name: String,
    index: usize,
    replicas: Arc<Replicas>,
    report: Shared,
    ids: Arc<LeaseIds>,
    stopped: watch::Receiver<bool>,
) {
    let who = format!("w{index}");
    let mut turn = index;
    let mut sequence = 0;
    while !*stopped.borrow() {
        sequence += 1;
        let lease_id = ids.make(&who, sequence);
        let granted = acquire(
            &name,
            &who,
            &lease_id,
            WAITER_TTL,
            WAIT_AT_MOST,
            &mut turn,
            &replicas,
            &report,
        )
        .await;
        report.lock().unwrap().waits.push(WaitRecord {
            name: name.clone(),
            sent_at: granted.sent_at,
            queued_at: granted.queued_at,
            sent_again: granted.sent_again,
            fencing_token: granted.fencing_token,
            waited: granted.received_at - granted.sent_at,
        });
        tokio::time::sleep(WAITER_HOLDS).await;
        turn += 1;
        if !release(&name, &granted.lease_id, &mut turn, &replicas, &report).await {
            report
                .lock()
                .unwrap()
                .leases_lost
                .push(format!("{name}: {who}'s release found its grant gone"));
        }
        // The next wait starts a little later for some waiters, so that the queue's order is
        // not the same each round.
        tokio::time::sleep(Duration::from_millis(10 * (sequence % 3) as u64)).await;
    }
}

/// A grant as its caller received it.
struct Held {
    lease_id: String,
    fencing_token: u64,
    sent_at: Instant,
    queued_at: Option<Instant>,
    /// Sent again after it was queued.
    sent_again: bool,
    received_at: Instant,
}

/// Acquires `name` with the caller's own `lease_id`, waiting up to `wait`: tries the replicas in
/// turn until one answers the grant (a retry of the same id is answered the grant or the place
/// in line the earlier attempt made). A wait that ends without a grant is recorded, and tried
/// again.
#[allow(clippy::too_many_arguments)]
async fn acquire(
    name: &str,
    holder: &str,
    lease_id: &str,
    ttl: Duration,
    wait: Duration,
    turn: &mut usize,
    replicas: &Replicas,
    report: &Shared,
) -> Held {
    let sent_at = Instant::now();
    let mut queued_at = None;
    let mut sent_again = false;
    loop {
        sent_again |= queued_at.is_some();
        let (mut client, version) = replicas.pick(*turn);
        *turn += 1;
        let request = AcquireRequest {
            name: name.to_owned(),
            holder: holder.to_owned(),
            ttl_ms: ttl.as_millis() as i64,
            wait_ms: wait.as_millis() as i64,
            lease_id: lease_id.to_owned(),
            ..Default::default()
        };
        let attempt = tokio::time::timeout(wait + CALL_TIMEOUT, async {
            let mut stream = client.acquire(request).await?.into_inner();
            while let Some(message) = stream.next().await {
                match message?.result {
                    Some(acquire_response::Result::Waiting(_)) => {
                        queued_at.get_or_insert_with(Instant::now);
                    }
                    Some(acquire_response::Result::Granted(granted)) => return Ok(Some(granted)),
                    _ => return Ok(None),
                }
            }
            Err(tonic::Status::unavailable(
                "the stream ended without an answer",
            ))
        })
        .await;
        match attempt {
            Ok(Ok(Some(granted))) => {
                let received_at = Instant::now();
                report.lock().unwrap().grants.push(GrantRecord {
                    name: name.to_owned(),
                    fencing_token: granted.fencing_token,
                    received_at,
                    through: version,
                });
                return Held {
                    // The one asked for, unless the replica is of a release before own lease
                    // ids (it ignores the field and makes one).
                    lease_id: granted.lease_id,
                    fencing_token: granted.fencing_token,
                    sent_at,
                    queued_at,
                    sent_again,
                    received_at,
                };
            }
            Ok(Ok(None)) => report
                .lock()
                .unwrap()
                .waits_not_served
                .push(format!("{name}: {holder} was not granted within {wait:?}")),
            Ok(Err(_)) | Err(_) => report.lock().unwrap().retried += 1,
        }
    }
}

/// Releases `lease_id`, trying the replicas in turn until one answers: whether it ended the
/// grant (false: the grant was gone already).
async fn release(
    name: &str,
    lease_id: &str,
    turn: &mut usize,
    replicas: &Replicas,
    report: &Shared,
) -> bool {
    loop {
        let (mut client, _) = replicas.pick(*turn);
        *turn += 1;
        let mut request = tonic::Request::new(ReleaseRequest {
            name: name.to_owned(),
            lease_id: lease_id.to_owned(),
        });
        request.set_timeout(CALL_TIMEOUT);
        match client.release(request).await {
            Ok(answer) => return answer.into_inner().released,
            Err(_) => report.lock().unwrap().retried += 1,
        }
    }
}

/// Grants of one name whose tokens do not strictly increase in the order their callers
/// received them. Grants of a name never overlap (each is released before the next is made),
/// so that order is the order Redis made them in.
fn tokens_out_of_order(grants: &[GrantRecord]) -> Vec<String> {
    let mut by_name: HashMap<&str, Vec<&GrantRecord>> = HashMap::new();
    for grant in grants {
        by_name.entry(&grant.name).or_default().push(grant);
    }
    let mut errors = Vec::new();
    for (name, mut grants) in by_name {
        grants.sort_by_key(|grant| grant.received_at);
        for pair in grants.windows(2) {
            if pair[1].fencing_token <= pair[0].fencing_token {
                errors.push(format!(
                    "{name}: token {} granted after {}",
                    pair[1].fencing_token, pair[0].fencing_token
                ));
            }
        }
    }
    errors
}

/// The ordered pairs of waits on one name (the first told it is queued before the second sent
/// its Acquire), and those in which the second was granted first (a smaller token).
fn fifo_violations(waits: &[WaitRecord]) -> (usize, Vec<String>) {
    let mut pairs = 0;
    let mut errors = Vec::new();
    for first in waits {
        let Some(queued_at) = first.queued_at else {
            continue;
        };
        for second in waits {
            if second.name != first.name || second.sent_at <= queued_at {
                continue;
            }
            pairs += 1;
            if second.fencing_token < first.fencing_token {
                let first_sent_again = match first.sent_again {
                    true => " (its wait was ended by a replica being replaced and sent again)",
                    false => "",
                };
                errors.push(format!(
                    "{}: token {} was queued first{first_sent_again}, but token {} was granted \
                     before it",
                    first.name, first.fencing_token, second.fencing_token
                ));
            }
        }
    }
    (pairs, errors)
}
