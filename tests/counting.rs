//! Counting leases (`AcquireRequest.limit` N > 1: at most N holders of a name) and lock-delay
//! (`AcquireRequest.lock_delay_ms`), run against both stores: every scenario runs once on the
//! embedded store and once on a real redis-server with two `leased` replicas (consecutive clients
//! alternate between them), through real gRPC clients over TCP.
//!
//! What the tests show:
//! - N = 3 among 10 contenders: never more than 3 holders at once (a resource that counts its
//!   concurrent holders), every grant's token larger than every token received before it;
//! - waiters take permits in arrival order as permits free, and k permits freed at once go to the
//!   first k in line;
//! - each expiry frees exactly one permit, and each release wakes exactly one waiter;
//! - a limit other than the one in force is FAILED_PRECONDITION naming it (exclusive = 1);
//!   when nothing is taken any limit is accepted;
//! - Describe lists every permit by token (never a lease id), the limit and the waiters;
//!   Waiting and NotGranted say how many permits are taken and the limit;
//! - lock-delay: after an expiry the next grant comes no earlier than expiry + delay (and within
//!   a few milliseconds after); a released lease is granted at once; during the delay Describe
//!   shows it held, Renew answers lost and Release neither succeeds nor ends the delay; a permit
//!   in its delay keeps its slot of a counting lease.
//!
//! Timing bounds are wide (the test machine has two noisy cores); the contract's 10 ms after
//! expiry + lock-delay is required of the best of several rounds (see [`LOCK_DELAY_SLACK_MS`]).
//! Measured values are printed.

mod common;

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::*;
use futures::future::join_all;
use leased::proto::{
    AcquireRequest, AcquireResponse, DescribeResponse, Granted, NotGranted, acquire_response,
    lease_service_client::LeaseServiceClient, renew_response,
};
use prost::Message as _;
use tonic::{Code, transport::Channel};

type Client = LeaseServiceClient<Channel>;
type AcquireStream = tonic::Streaming<AcquireResponse>;

/// How long something that should happen at once may take on a loaded machine.
const SOON: Duration = Duration::from_secs(5);

/// How long a caller must be seen still waiting to count as "not granted".
const A_WHILE: Duration = Duration::from_millis(500);

/// The contract's bound on how late the grant after a lock-delay normally comes: 10 ms after
/// expiry + delay. Measured here (the grant received by the client, against `expires_at`, on one
/// host clock): typically 3-8 ms on the embedded store and 5-10 ms on Redis, but a busy 2-core
/// machine adds 10-60 ms now and then. So the tests require it of the best of several rounds,
/// of the median only [`NOISY_MEDIAN_LATENESS_MS`] and of each [`NOISY_LATENESS_MS`]; every
/// measurement is printed.
const LOCK_DELAY_SLACK_MS: i64 = 10;

/// How late any one grant after a lock-delay may come on a loaded test machine.
const NOISY_LATENESS_MS: i64 = 250;

/// How late the median grant after a lock-delay may come on a loaded test machine.
const NOISY_MEDIAN_LATENESS_MS: i64 = 20;

on_both_stores!(
    ten_contenders_never_exceed_three_holders_and_tokens_increase,
    waiters_take_free_permits_in_arrival_order,
    each_expiry_frees_exactly_one_permit,
    a_mismatched_limit_is_failed_precondition_naming_the_limit_in_force,
    one_release_wakes_exactly_one_waiter,
    describe_waiting_and_not_granted_show_every_permit,
    next_grant_comes_at_expiry_plus_lock_delay,
    a_released_lease_with_lock_delay_is_granted_at_once,
    during_the_lock_delay_the_lease_stays_taken,
    a_permit_in_its_lock_delay_keeps_its_slot,
);

/// An Acquire request: `limit` 0 or 1 is exclusive, N > 1 a counting lease; no lock-delay.
fn request(name: &str, holder: &str, ttl_ms: i64, wait_ms: i64, limit: u32) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms,
        wait_ms,
        limit,
        lock_delay_ms: 0,
    }
}

/// The terminal message must be `granted`: the grant.
fn expect_granted(terminal: acquire_response::Result, who: &str) -> Granted {
    match terminal {
        acquire_response::Result::Granted(granted) => granted,
        other => panic!("{who}: expected granted, got {other:?}"),
    }
}

/// The terminal message must be `not_granted`.
fn expect_not_granted(terminal: acquire_response::Result, who: &str) -> NotGranted {
    match terminal {
        acquire_response::Result::NotGranted(not_granted) => not_granted,
        other => panic!("{who}: expected not_granted, got {other:?}"),
    }
}

/// `expires_at` of a grant, Unix ms.
fn expiry_ms(granted: &Granted) -> i64 {
    timestamp_ms(
        granted
            .expires_at
            .as_ref()
            .expect("granted without expires_at"),
    )
}

/// Asserts `actual` is within `margin` of `expected`.
fn assert_near(actual: i64, expected: i64, margin: i64, what: &str) {
    assert!(
        (actual - expected).abs() <= margin,
        "{what}: {actual}, expected {expected} ± {margin}"
    );
}

/// Reads every stream in `streams` for `duration` at once: each must only bring `waiting`.
async fn all_still_waiting(streams: &mut [AcquireStream], duration: Duration) {
    join_all(
        streams
            .iter_mut()
            .map(|stream| still_waiting_for(stream, duration)),
    )
    .await;
}

/// Sleeps until this host's clock reads `unix_ms` (at once if it has passed).
async fn sleep_until_unix_ms(unix_ms: i64) {
    let left = unix_ms - now_unix_ms();
    if left > 0 {
        tokio::time::sleep(Duration::from_millis(left as u64)).await;
    }
}

/// Asserts that `status` is FAILED_PRECONDITION naming `limit` (the limit in force).
fn assert_limit_mismatch(status: &tonic::Status, in_force: u32, what: &str) {
    assert_eq!(
        status.code(),
        Code::FailedPrecondition,
        "{what}: {status:?}"
    );
    let message = status.message();
    let numbers: Vec<&str> = message
        .split(|c: char| !c.is_ascii_digit())
        .filter(|word| !word.is_empty())
        .collect();
    assert!(
        message.contains("limit") && numbers.contains(&in_force.to_string().as_str()),
        "{what}: the message does not name the limit in force, {in_force}: {message:?}"
    );
}

/// A permit's place in Describe: its holder and token.
fn holders_of(described: &DescribeResponse) -> Vec<(&str, u64)> {
    described
        .holders
        .iter()
        .map(|holder| (holder.holder.as_str(), holder.fencing_token))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Counting leases

/// 10 contenders loop 8 times each: Acquire (limit 3, waiting), count themselves in a resource
/// that counts concurrent holders, hold 2 to 12 ms, count themselves out, release. The resource
/// never sees more than 3 holders, and does see 3 (the permits are used). Every grant's token is
/// larger than every token any contender had received before it asked.
async fn ten_contenders_never_exceed_three_holders_and_tokens_increase(backend: &Replicas) {
    const NAME: &str = "sem/ten";
    const LIMIT: usize = 3;
    const CONTENDERS: usize = 10;
    const ROUNDS: usize = 8;

    #[derive(Default)]
    struct Resource {
        holders: usize,
        most: usize,
        /// The largest token received so far.
        newest: u64,
        tokens: Vec<u64>,
        violations: Vec<String>,
    }
    let resource: Arc<Mutex<Resource>> = Arc::default();

    let started = Instant::now();
    let mut tasks = Vec::new();
    for index in 0..CONTENDERS {
        let mut client = backend.client(index).await;
        let resource = resource.clone();
        tasks.push(tokio::spawn(async move {
            let holder = format!("contender-{index}");
            for round in 0..ROUNDS {
                let newest_before = resource.lock().unwrap().newest;
                let granted = must_acquire_request(
                    &mut client,
                    request(NAME, &holder, 10_000, 30_000, LIMIT as u32),
                )
                .await;
                {
                    let mut resource = resource.lock().unwrap();
                    resource.holders += 1;
                    resource.most = resource.most.max(resource.holders);
                    if resource.holders > LIMIT {
                        let violation =
                            format!("{holder} round {round}: {} holders", resource.holders);
                        resource.violations.push(violation);
                    }
                    if granted.fencing_token <= newest_before {
                        let violation = format!(
                            "{holder} round {round}: token {} after {newest_before} was received",
                            granted.fencing_token
                        );
                        resource.violations.push(violation);
                    }
                    resource.newest = resource.newest.max(granted.fencing_token);
                    resource.tokens.push(granted.fencing_token);
                }
                let hold = 2 + (index * 7 + round * 3) % 11;
                tokio::time::sleep(Duration::from_millis(hold as u64)).await;
                resource.lock().unwrap().holders -= 1;
                assert!(
                    release(&mut client, &granted).await,
                    "{holder} round {round} lost its permit"
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("a contender panicked");
    }

    let described = describe(&mut backend.client(0).await, NAME).await;
    assert!(!described.held, "a permit is left: {described:?}");
    let resource = resource.lock().unwrap();
    println!(
        "{} grants to {CONTENDERS} contenders in {:?}; most holders at once: {}",
        resource.tokens.len(),
        started.elapsed(),
        resource.most
    );
    assert!(resource.violations.is_empty(), "{:#?}", resource.violations);
    assert_eq!(resource.tokens.len(), CONTENDERS * ROUNDS);
    let mut distinct = resource.tokens.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        resource.tokens.len(),
        "a token was repeated"
    );
    assert_eq!(
        resource.most, LIMIT,
        "the 3 permits were never all held at once"
    );
}

/// 10 contenders: 3 hold the permits, 7 start waiting one by one (each seen waiting, with its
/// place, 3 held of limit 3, before the next starts). Permits freed one at a time go to the
/// waiters in arrival order; two freed at once go to exactly the first two in line (the rest
/// keep waiting); every grant's token is larger than every earlier one.
async fn waiters_take_free_permits_in_arrival_order(backend: &Replicas) {
    const NAME: &str = "sem/fifo";
    const WAITERS: usize = 7;
    let request = |holder: &str, wait_ms| request(NAME, holder, 30_000, wait_ms, 3);

    // The permits taken, oldest first: holder, its client, its grant.
    let mut held: VecDeque<(String, Client, Granted)> = VecDeque::new();
    for index in 0..3 {
        let holder = format!("h{index}");
        let mut client = backend.client(index).await;
        // h0 frees soonest, then h1, then h2.
        let request = AcquireRequest {
            ttl_ms: 30_000 + 1_000 * index as i64,
            ..request(&holder, 0)
        };
        let granted = must_acquire_request(&mut client, request).await;
        held.push_back((holder, client, granted));
    }
    let mut newest = held.iter().map(|(_, _, g)| g.fencing_token).max().unwrap();

    let mut clients = Vec::new();
    let mut streams = Vec::new();
    for index in 0..WAITERS {
        let mut client = backend.client(index + 1).await;
        let (stream, first) =
            start_waiting_request(&mut client, request(&format!("w{index}"), 30_000)).await;
        assert_eq!(first.position, index as u32 + 1, "w{index}: {first:?}");
        assert_eq!((first.held, first.limit), (3, 3), "w{index}: {first:?}");
        assert_eq!(
            first.holder, "h0",
            "the permit that frees soonest: {first:?}"
        );
        clients.push(Some(client));
        streams.push(stream);
    }
    let mut describer = backend.client(0).await;
    let described = describe(&mut describer, NAME).await;
    assert_eq!(described.waiters, WAITERS as u32, "{described:?}");

    let mut grant_order = Vec::new();
    for step in 0..6 {
        // Steps 0-2 and 4-5 free one permit; step 3 frees two at once (for w3 and w4).
        let freed = if step == 3 { 2 } else { 1 };
        let first_index = if step <= 3 { step } else { step + 1 };
        let mut releases = Vec::new();
        for _ in 0..freed {
            let (holder, mut client, granted) = held.pop_front().expect("a permit is held");
            releases.push(async move {
                assert!(
                    release(&mut client, &granted).await,
                    "{holder} lost its permit"
                );
            });
        }
        join_all(releases).await;

        let mut grants = Vec::new();
        for (index, stream) in streams.iter_mut().enumerate().skip(first_index).take(freed) {
            let terminal = read_to_terminal(stream, SOON).await.1;
            let granted = expect_granted(terminal, &format!("w{index}"));
            assert!(
                granted.fencing_token > newest,
                "w{index}: token {} after {newest}",
                granted.fencing_token
            );
            grants.push((index, granted));
        }
        newest = grants.iter().map(|(_, g)| g.fencing_token).max().unwrap();
        // Two permits freed at once go to the first two in line, in either order.
        grants.sort_by_key(|(_, g)| g.fencing_token);
        for (index, granted) in grants {
            grant_order.push(index);
            let client = clients[index].take().unwrap();
            held.push_back((format!("w{index}"), client, granted));
        }
        let waiting = first_index + freed..WAITERS;
        all_still_waiting(&mut streams[waiting.clone()], A_WHILE).await;

        let described = describe(&mut describer, NAME).await;
        let mut expected: Vec<(&str, u64)> = held
            .iter()
            .map(|(holder, _, g)| (holder.as_str(), g.fencing_token))
            .collect();
        expected.sort_by_key(|(_, token)| *token);
        assert_eq!(holders_of(&described), expected, "after step {step}");
        assert_eq!(described.waiters, waiting.len() as u32, "after step {step}");
    }
    let mut expected_order: Vec<usize> = (0..WAITERS).collect();
    if grant_order[3] == 4 {
        // w3 and w4 were granted at the same step; either may have the smaller token.
        expected_order.swap(3, 4);
    }
    assert_eq!(grant_order, expected_order, "grants in arrival order");
    while let Some((holder, mut client, granted)) = held.pop_front() {
        assert!(release(&mut client, &granted).await, "{holder}");
    }
}

/// 3 holders with TTLs 1.2 s, 2.0 s and 2.8 s never renew; 4 waiters queue behind them. At each
/// expiry exactly one waiter is granted (the next in line, not before that expiry), and the
/// others keep waiting until the next expiry; the 4th waiter is still waiting at the end, when
/// the permits are held by the first three waiters.
async fn each_expiry_frees_exactly_one_permit(backend: &Replicas) {
    const NAME: &str = "sem/expiry";
    const WAITERS: usize = 4;
    let mut holders = Vec::new();
    for index in 0..3 {
        let mut client = backend.client(index).await;
        let ttl_ms = 1_200 + 800 * index as i64;
        let granted = must_acquire_request(
            &mut client,
            request(NAME, &format!("h{index}"), ttl_ms, 0, 3),
        )
        .await;
        holders.push(granted);
    }
    let expiries: Vec<i64> = holders.iter().map(expiry_ms).collect();

    let mut streams = Vec::new();
    let mut clients = Vec::new();
    for index in 0..WAITERS {
        let mut client = backend.client(index).await;
        let (stream, first) = start_waiting_request(
            &mut client,
            request(NAME, &format!("w{index}"), 30_000, 30_000, 3),
        )
        .await;
        assert_eq!(first.position, index as u32 + 1, "w{index}: {first:?}");
        assert_eq!((first.held, first.limit), (3, 3), "w{index}: {first:?}");
        assert_eq!(first.holder, "h0", "w{index}: {first:?}");
        assert_eq!(first.fencing_token, holders[0].fencing_token);
        streams.push(stream);
        clients.push(client);
    }
    assert!(
        now_unix_ms() < expiries[0] - 200,
        "the setup took too long: the first expiry is near"
    );

    let mut describer = backend.client(1).await;
    let newest = holders.iter().map(|g| g.fencing_token).max().unwrap();
    let mut grants: Vec<Granted> = Vec::new();
    for (index, expiry) in expiries.iter().enumerate() {
        let terminal = read_to_terminal(&mut streams[index], SOON).await.1;
        let late_ms = now_unix_ms() - expiry;
        let granted = expect_granted(terminal, &format!("w{index}"));
        println!("w{index} granted {late_ms} ms after h{index}'s expiry");
        assert!(
            late_ms >= -20,
            "w{index} granted {late_ms} ms after h{index}'s expiry"
        );
        assert!(
            late_ms < 1_000,
            "w{index} granted {late_ms} ms after the expiry"
        );
        assert!(granted.fencing_token > newest);
        if let Some(previous) = grants.last() {
            assert!(granted.fencing_token > previous.fencing_token);
        }
        grants.push(granted);

        let described = describe(&mut describer, NAME).await;
        let mut expected: Vec<(String, u64)> = holders[index + 1..]
            .iter()
            .enumerate()
            .map(|(offset, g)| (format!("h{}", index + 1 + offset), g.fencing_token))
            .chain(
                grants
                    .iter()
                    .enumerate()
                    .map(|(w, g)| (format!("w{w}"), g.fencing_token)),
            )
            .collect();
        expected.sort_by_key(|(_, token)| *token);
        let expected: Vec<(&str, u64)> = expected.iter().map(|(h, t)| (h.as_str(), *t)).collect();
        assert_eq!(holders_of(&described), expected, "after h{index}'s expiry");
        assert_eq!(described.waiters, (WAITERS - index - 1) as u32);

        // The others keep waiting until shortly before the next expiry (or a while, after the
        // last one).
        let until_next = match expiries.get(index + 1) {
            Some(next) => Duration::from_millis((next - now_unix_ms() - 150).max(0) as u64),
            None => A_WHILE,
        };
        all_still_waiting(&mut streams[index + 1..], until_next).await;
    }
    for (client, granted) in clients.iter_mut().zip(&grants) {
        assert!(release(client, granted).await);
    }
    let granted = expect_granted(read_to_terminal(&mut streams[3], SOON).await.1, "w3");
    assert!(release(&mut clients[3], &granted).await);
}

/// A counting lease's limit is in force while any permit is taken: limit 3 held, limit 2, 0 and
/// 1 (waiting or not) are FAILED_PRECONDITION naming 3; an exclusive lease held, limit 3 is
/// refused naming 1, while limits 0 and 1 both mean exclusive (not_granted, held 1 of 1). Once
/// nothing is taken, any limit is accepted.
async fn a_mismatched_limit_is_failed_precondition_naming_the_limit_in_force(backend: &Replicas) {
    let mut client = backend.client(0).await;
    let mut other = backend.client(1).await;

    let counted =
        must_acquire_request(&mut client, request("limit/three", "a", 30_000, 0, 3)).await;
    for (limit, wait_ms) in [(2, 0), (0, 0), (1, 0), (4, 0), (2, 5_000), (0, 5_000)] {
        let status = acquire_refusal(
            &mut other,
            request("limit/three", "b", 30_000, wait_ms, limit),
        )
        .await;
        assert_limit_mismatch(
            &status,
            3,
            &format!("limit {limit} (wait {wait_ms}) while 3 held"),
        );
    }
    // The same limit is served: a second permit.
    let second = must_acquire_request(&mut other, request("limit/three", "b", 30_000, 0, 3)).await;
    assert!(second.fencing_token > counted.fencing_token);

    let exclusive =
        must_acquire_request(&mut client, request("limit/one", "a", 30_000, 0, 0)).await;
    for (limit, wait_ms) in [(3, 0), (2, 0), (3, 5_000)] {
        let status = acquire_refusal(
            &mut other,
            request("limit/one", "b", 30_000, wait_ms, limit),
        )
        .await;
        assert_limit_mismatch(
            &status,
            1,
            &format!("limit {limit} (wait {wait_ms}) while exclusive"),
        );
    }
    for limit in [0, 1] {
        let terminal =
            acquire_request_terminal(&mut other, request("limit/one", "b", 30_000, 0, limit)).await;
        let not_granted = expect_not_granted(terminal, &format!("limit {limit} while exclusive"));
        assert_eq!(
            (not_granted.held, not_granted.limit),
            (1, 1),
            "{not_granted:?}"
        );
        assert_eq!(not_granted.fencing_token, exclusive.fencing_token);
    }
    let described = describe(&mut other, "limit/one").await;
    assert_eq!(described.limit, 1, "{described:?}");

    // Nothing taken: any limit.
    assert!(release(&mut client, &counted).await);
    assert!(release(&mut other, &second).await);
    assert!(release(&mut client, &exclusive).await);
    let exclusive_now =
        must_acquire_request(&mut client, request("limit/three", "c", 30_000, 0, 0)).await;
    let counted_now =
        must_acquire_request(&mut client, request("limit/one", "c", 30_000, 0, 7)).await;
    assert_eq!(describe(&mut other, "limit/three").await.limit, 1);
    assert_eq!(describe(&mut other, "limit/one").await.limit, 7);
    let status = acquire_refusal(&mut other, request("limit/one", "d", 30_000, 0, 3)).await;
    assert_limit_mismatch(&status, 7, "limit 3 while 7 held");
    assert!(release(&mut client, &exclusive_now).await);
    assert!(release(&mut client, &counted_now).await);
    for limit in [2, 10_000] {
        let granted =
            must_acquire_request(&mut other, request("limit/three", "e", 30_000, 0, limit)).await;
        assert!(release(&mut other, &granted).await);
    }
}

/// Limit 3, all held, 4 waiters. Each release of one permit (a holder's, then a granted
/// waiter's, then a holder's) grants exactly the first waiter in line: the others are still
/// waiting a second later, Describe shows 3 holders and the rest waiting, and a try-once
/// Acquire, right after the release and later, answers not_granted.
async fn one_release_wakes_exactly_one_waiter(backend: &Replicas) {
    const NAME: &str = "sem/one-wake";
    const WAITERS: usize = 4;
    // The permits taken, oldest first.
    let mut held: VecDeque<(Client, Granted)> = VecDeque::new();
    for index in 0..3 {
        let mut client = backend.client(index).await;
        let granted = must_acquire_request(
            &mut client,
            request(NAME, &format!("h{index}"), 30_000, 0, 3),
        )
        .await;
        held.push_back((client, granted));
    }
    let mut streams = Vec::new();
    let mut clients = Vec::new();
    for index in 0..WAITERS {
        let mut client = backend.client(index + 1).await;
        let (stream, first) = start_waiting_request(
            &mut client,
            request(NAME, &format!("w{index}"), 30_000, 30_000, 3),
        )
        .await;
        assert_eq!(first.position, index as u32 + 1, "{first:?}");
        streams.push(stream);
        clients.push(Some(client));
    }
    let mut describer = backend.client(0).await;
    let mut newest = held.iter().map(|(_, g)| g.fencing_token).max().unwrap();
    for index in 0..3 {
        // Round 1 frees the permit w0 was just granted; the others free a holder's.
        let permit = if index == 1 {
            held.pop_back()
        } else {
            held.pop_front()
        };
        let (mut client, granted) = permit.unwrap();
        assert!(release(&mut client, &granted).await);
        let released_at = Instant::now();
        // While the freed permit goes to the first in line, a try-once caller never takes it: it
        // sees 3 permits taken, or 2 (the freed one on its way to the waiter).
        let not_granted = expect_not_granted(
            acquire_request_terminal(&mut describer, request(NAME, "barger", 30_000, 0, 3)).await,
            "try-once right after a release",
        );
        assert!(
            matches!((not_granted.held, not_granted.limit), (2 | 3, 3)),
            "{not_granted:?}"
        );
        let granted = expect_granted(
            read_to_terminal(&mut streams[index], SOON).await.1,
            &format!("w{index}"),
        );
        println!(
            "w{index} granted {:?} after one release",
            released_at.elapsed()
        );
        assert!(granted.fencing_token > newest);
        newest = granted.fencing_token;
        held.push_back((clients[index].take().unwrap(), granted));
        all_still_waiting(&mut streams[index + 1..], Duration::from_secs(1)).await;
        let described = describe(&mut describer, NAME).await;
        assert_eq!(described.holders.len(), 3, "after w{index}: {described:?}");
        assert_eq!(
            described.waiters,
            (WAITERS - index - 1) as u32,
            "after w{index}: {described:?}"
        );
        let not_granted = expect_not_granted(
            acquire_request_terminal(&mut describer, request(NAME, "barger", 30_000, 0, 3)).await,
            "try-once",
        );
        assert_eq!(
            (not_granted.held, not_granted.limit),
            (3, 3),
            "{not_granted:?}"
        );
    }
    let (mut client, granted) = held.pop_front().unwrap();
    assert!(release(&mut client, &granted).await);
    let last = expect_granted(read_to_terminal(&mut streams[3], SOON).await.1, "w3");
    held.push_back((clients[3].take().unwrap(), last));
    for (mut client, granted) in held {
        assert!(release(&mut client, &granted).await);
    }
}

/// Describe of a counting lease lists every permit by increasing token, with its holder, token,
/// remaining_ms and expires_at (and never a lease id anywhere in the reply), the limit and the
/// number of waiters (on every replica); fields 2 to 5 describe the permit with the smallest
/// token. Waiting and NotGranted describe the permit that frees soonest and say 4 held of 4.
/// Each permit has its own lease id and renews on its own. An exclusive lease is described as
/// limit 1 with one holder; a free name as limit 0.
async fn describe_waiting_and_not_granted_show_every_permit(backend: &Replicas) {
    const NAME: &str = "sem/describe";
    let mut client = backend.client(0).await;
    let described = describe(&mut client, NAME).await;
    assert!(!described.held, "{described:?}");
    assert_eq!(
        (described.limit, described.holders.len(), described.waiters),
        (0, 0, 0),
        "{described:?}"
    );

    // a, b, c: TTLs 30 s, 20 s, 10 s: c frees soonest, a has the smallest token.
    let mut grants = Vec::new();
    for (holder, ttl_ms) in [("a", 30_000), ("b", 20_000), ("c", 10_000)] {
        let granted = must_acquire_request(&mut client, request(NAME, holder, ttl_ms, 0, 4)).await;
        grants.push((holder, ttl_ms, granted));
    }
    let described = describe(&mut backend.client(1).await, NAME).await;
    assert!(described.held);
    assert_eq!(described.limit, 4, "{described:?}");
    assert_eq!(described.waiters, 0, "{described:?}");
    assert_eq!(described.holders.len(), 3, "{described:?}");
    for ((holder, ttl_ms, granted), info) in grants.iter().zip(&described.holders) {
        assert_eq!(info.holder, *holder, "{described:?}");
        assert_eq!(info.fencing_token, granted.fencing_token, "{described:?}");
        assert_eq!(
            info.expires_at, granted.expires_at,
            "{holder}: {described:?}"
        );
        assert!(
            (ttl_ms - 2_000..=*ttl_ms).contains(&info.remaining_ms),
            "{holder}: {described:?}"
        );
    }
    assert_eq!(described.holder, "a");
    assert_eq!(described.fencing_token, grants[0].2.fencing_token);
    assert_eq!(described.expires_at, grants[0].2.expires_at);
    assert!(
        (28_000..=30_000).contains(&described.remaining_ms),
        "{described:?}"
    );

    let d = must_acquire_request(&mut client, request(NAME, "d", 40_000, 0, 4)).await;
    let mut lease_ids: Vec<&str> = grants
        .iter()
        .map(|g| g.2.lease_id.as_str())
        .chain([d.lease_id.as_str()])
        .collect();
    lease_ids.sort_unstable();
    lease_ids.dedup();
    assert_eq!(lease_ids.len(), 4, "each permit has its own lease id");
    let not_granted = expect_not_granted(
        acquire_request_terminal(&mut client, request(NAME, "e", 30_000, 0, 4)).await,
        "try-once with 4 of 4 held",
    );
    assert_eq!(
        (not_granted.held, not_granted.limit),
        (4, 4),
        "{not_granted:?}"
    );
    assert_eq!(
        not_granted.holder, "c",
        "the permit that frees soonest: {not_granted:?}"
    );
    assert_eq!(not_granted.fencing_token, grants[2].2.fencing_token);
    assert!(
        (8_000..=10_000).contains(&not_granted.remaining_ms),
        "{not_granted:?}"
    );

    let mut waiters = Vec::new();
    for index in 0..2 {
        let mut waiter_client = backend.client(index + 1).await;
        let (stream, first) = start_waiting_request(
            &mut waiter_client,
            request(NAME, &format!("w{index}"), 30_000, 30_000, 4),
        )
        .await;
        assert_eq!(first.position, index as u32 + 1, "{first:?}");
        assert_eq!((first.held, first.limit), (4, 4), "{first:?}");
        assert_eq!(first.holder, "c", "{first:?}");
        assert_eq!(first.fencing_token, grants[2].2.fencing_token);
        assert!((8_000..=10_000).contains(&first.remaining_ms), "{first:?}");
        waiters.push((waiter_client, stream));
    }
    let described = describe(&mut client, NAME).await;
    assert_eq!(
        described.waiters, 2,
        "waiters on both replicas: {described:?}"
    );
    assert_eq!(
        holders_of(&described),
        [
            ("a", grants[0].2.fencing_token),
            ("b", grants[1].2.fencing_token),
            ("c", grants[2].2.fencing_token),
            ("d", d.fencing_token),
        ]
    );

    // a (the smallest token) releases: w0 takes its permit, b is described in fields 2 to 5.
    assert!(release(&mut client, &grants[0].2).await);
    let w0 = expect_granted(read_to_terminal(&mut waiters[0].1, SOON).await.1, "w0");
    let described = describe(&mut client, NAME).await;
    assert_eq!(
        holders_of(&described),
        [
            ("b", grants[1].2.fencing_token),
            ("c", grants[2].2.fencing_token),
            ("d", d.fencing_token),
            ("w0", w0.fencing_token),
        ]
    );
    assert_eq!(described.waiters, 1, "{described:?}");
    assert_eq!(described.holder, "b");
    assert_eq!(described.fencing_token, grants[1].2.fencing_token);
    assert_eq!(described.expires_at, grants[1].2.expires_at);
    let bytes = described.encode_to_vec();
    for lease_id in grants
        .iter()
        .map(|g| &g.2.lease_id)
        .chain([&d.lease_id, &w0.lease_id])
    {
        assert!(
            !bytes
                .windows(lease_id.len())
                .any(|window| window == lease_id.as_bytes()),
            "Describe carries a lease id"
        );
    }
    // Each permit renews on its own: b's new TTL changes b only.
    let answer = renew_once(&mut client, &grants[1].2, 50_000).await.unwrap();
    let Some(renew_response::Result::Renewed(renewed)) = answer.result else {
        panic!("b's renewal: {answer:?}");
    };
    assert_eq!(renewed.fencing_token, grants[1].2.fencing_token);
    let described = describe(&mut client, NAME).await;
    let remaining: Vec<i64> = described.holders.iter().map(|h| h.remaining_ms).collect();
    assert!(
        (48_000..=50_000).contains(&remaining[0]),
        "b: {described:?}"
    );
    assert!((8_000..=10_000).contains(&remaining[1]), "c: {described:?}");
    assert!(
        (38_000..=40_000).contains(&remaining[2]),
        "d: {described:?}"
    );
    assert!(
        (28_000..=30_000).contains(&remaining[3]),
        "w0: {described:?}"
    );
    assert_eq!(described.holders[0].expires_at, renewed.expires_at);
    assert_eq!(described.remaining_ms, remaining[0]);

    drop(waiters.pop());
    assert!(release(&mut waiters[0].0, &w0).await);
    for granted in [&grants[1].2, &grants[2].2, &d] {
        assert!(release(&mut client, granted).await);
    }

    // An exclusive lease: limit 1, its one holder listed; Waiting says 1 held of 1.
    let exclusive = must_acquire_request(
        &mut client,
        request("sem/describe-exclusive", "x", 30_000, 0, 0),
    )
    .await;
    let mut waiter_client = backend.client(1).await;
    let (_waiter, first) = start_waiting_request(
        &mut waiter_client,
        request("sem/describe-exclusive", "y", 30_000, 30_000, 1),
    )
    .await;
    assert_eq!((first.held, first.limit), (1, 1), "{first:?}");
    assert_eq!(first.holder, "x");
    let described = describe(&mut client, "sem/describe-exclusive").await;
    assert_eq!(described.limit, 1, "{described:?}");
    assert_eq!(described.waiters, 1, "{described:?}");
    assert_eq!(described.holders.len(), 1, "{described:?}");
    let only = &described.holders[0];
    assert_eq!(
        (only.holder.as_str(), only.fencing_token, only.expires_at),
        (
            described.holder.as_str(),
            exclusive.fencing_token,
            exclusive.expires_at
        )
    );
    assert_near(
        only.remaining_ms,
        described.remaining_ms,
        50,
        "remaining_ms",
    );
}

// ---------------------------------------------------------------------------------------------
// Lock-delay

/// An exclusive request with a lock-delay.
fn delayed(name: &str, holder: &str, ttl_ms: i64, lock_delay_ms: i64) -> AcquireRequest {
    AcquireRequest {
        lock_delay_ms,
        ..request(name, holder, ttl_ms, 0, 0)
    }
}

/// A holder with TTL 200 ms and lock-delay 300 ms stops renewing (after renewing twice, in half
/// of the rounds, with a waiter already queued); a waiter is granted no earlier than the expiry
/// (its last `expires_at`) + 300 ms, and no later than 10 ms after that in the best of 8 rounds
/// (see [`LOCK_DELAY_SLACK_MS`] for the bounds of the others). Waiting's `remaining_ms` counts
/// the delay. The lateness of each round is printed.
async fn next_grant_comes_at_expiry_plus_lock_delay(backend: &Replicas) {
    const TTL_MS: i64 = 200;
    const DELAY_MS: i64 = 300;
    const ROUNDS: usize = 8;
    let mut lateness = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("delay/timing-{round}");
        let mut holder_client = backend.client(round).await;
        let mut waiter_client = backend.client(round + 1).await;
        let held = must_acquire_request(
            &mut holder_client,
            delayed(&name, "sleepy", TTL_MS, DELAY_MS),
        )
        .await;
        let mut expires = expiry_ms(&held);
        let renews = round % 2 == 1;
        let waiter = request(&name, "next", 5_000, 10_000, 0);
        let (mut stream, first) = start_waiting_request(&mut waiter_client, waiter).await;
        let queued_at = now_unix_ms();
        assert_eq!((first.held, first.limit), (1, 1), "{first:?}");
        assert!(
            first.remaining_ms >= DELAY_MS,
            "Waiting's remaining_ms does not count the delay: {first:?}"
        );
        assert_near(
            first.remaining_ms,
            expires + DELAY_MS - queued_at,
            50,
            "Waiting.remaining_ms",
        );
        if renews {
            let mut renewals = OpenRenewStream::open(&mut holder_client).await;
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(70)).await;
                let answer = renewals.renew(&held, 0).await.unwrap();
                let Some(renew_response::Result::Renewed(renewed)) = answer.result else {
                    panic!("round {round}: renewal failed: {answer:?}");
                };
                expires = timestamp_ms(renewed.expires_at.as_ref().expect("expires_at"));
            }
        }
        let (_, terminal) = read_to_terminal(&mut stream, SOON).await;
        let late = now_unix_ms() - (expires + DELAY_MS);
        let granted = expect_granted(terminal, &format!("round {round}"));
        assert!(granted.fencing_token > held.fencing_token);
        println!(
            "round {round} ({}): granted {late} ms after expiry + lock-delay",
            if renews {
                "renewed twice"
            } else {
                "no renewal"
            }
        );
        lateness.push(late);
        assert!(release(&mut waiter_client, &granted).await, "round {round}");
    }
    println!("lateness after expiry + lock-delay, ms: {lateness:?}");
    assert!(
        lateness.iter().all(|late| *late >= 0),
        "granted before expiry + lock-delay: {lateness:?}"
    );
    let mut sorted = lateness.clone();
    sorted.sort_unstable();
    assert!(
        sorted[0] <= LOCK_DELAY_SLACK_MS,
        "never granted within {LOCK_DELAY_SLACK_MS} ms of expiry + lock-delay: {lateness:?}"
    );
    assert!(
        sorted[ROUNDS / 2] <= NOISY_MEDIAN_LATENESS_MS,
        "median grant more than {NOISY_MEDIAN_LATENESS_MS} ms after expiry + lock-delay: \
         {lateness:?}"
    );
    assert!(
        sorted[ROUNDS - 1] <= NOISY_LATENESS_MS,
        "a grant more than {NOISY_LATENESS_MS} ms after expiry + lock-delay: {lateness:?}"
    );
}

/// A lease with the longest lock-delay (60 s) that is released is granted to its waiter at once
/// (try-once callers meanwhile see it free for a moment, 0 held of limit 0, or held by the
/// waiter), and with nobody waiting, to the next try-once caller; the same for one permit of a
/// counting lease.
async fn a_released_lease_with_lock_delay_is_granted_at_once(backend: &Replicas) {
    const NAME: &str = "delay/released";
    let mut client = backend.client(0).await;
    let mut waiter_client = backend.client(1).await;
    let held = must_acquire_request(&mut client, delayed(NAME, "careful", 30_000, 60_000)).await;
    let (mut stream, _) =
        start_waiting_request(&mut waiter_client, request(NAME, "next", 30_000, 30_000, 0)).await;
    assert!(release(&mut client, &held).await);
    let released_at = Instant::now();
    let granted = expect_granted(read_to_terminal(&mut stream, SOON).await.1, "waiter");
    let waited = released_at.elapsed();
    println!("waiter granted {waited:?} after the release of a lease with a 60 s lock-delay");
    assert!(waited < Duration::from_secs(1), "{waited:?}");
    assert!(granted.fencing_token > held.fencing_token);
    assert!(release(&mut waiter_client, &granted).await);

    let held = must_acquire_request(&mut client, delayed(NAME, "careful", 30_000, 60_000)).await;
    assert!(release(&mut client, &held).await);
    let again = must_acquire_request(&mut client, request(NAME, "next", 30_000, 0, 0)).await;
    assert!(release(&mut client, &again).await);

    // Right after such a release, try-once callers see the lease on its way to the waiter
    // (nobody holds it: holder "", token 0, 0 held, limit 0) or held by the waiter (1 of 1).
    let held = must_acquire_request(&mut client, delayed(NAME, "careful", 30_000, 60_000)).await;
    let (mut stream, _) =
        start_waiting_request(&mut waiter_client, request(NAME, "next", 30_000, 30_000, 0)).await;
    assert!(release(&mut client, &held).await);
    for attempt in 0..10 {
        let not_granted = expect_not_granted(
            acquire_request_terminal(&mut client, request(NAME, "barger", 30_000, 0, 0)).await,
            &format!("try-once {attempt} right after the release"),
        );
        let on_its_way = (
            not_granted.holder.as_str(),
            not_granted.fencing_token,
            not_granted.remaining_ms,
            not_granted.held,
            not_granted.limit,
        ) == ("", 0, 0, 0, 0);
        let taken = not_granted.holder == "next"
            && not_granted.fencing_token > held.fencing_token
            && (not_granted.held, not_granted.limit) == (1, 1);
        assert!(on_its_way || taken, "attempt {attempt}: {not_granted:?}");
    }
    let granted = expect_granted(read_to_terminal(&mut stream, SOON).await.1, "waiter");
    assert!(release(&mut waiter_client, &granted).await);

    // A counting lease: one permit with a lock-delay released frees its slot at once.
    let counted = |holder: &str| AcquireRequest {
        lock_delay_ms: 60_000,
        ..request("delay/released-permit", holder, 30_000, 0, 2)
    };
    let first = must_acquire_request(&mut client, counted("p1")).await;
    let second = must_acquire_request(&mut client, counted("p2")).await;
    expect_not_granted(
        acquire_request_terminal(&mut client, counted("p3")).await,
        "2 of 2 held",
    );
    assert!(release(&mut client, &first).await);
    let third = must_acquire_request(&mut client, counted("p3")).await;
    let described = describe(&mut client, "delay/released-permit").await;
    assert_eq!(
        holders_of(&described),
        [("p2", second.fencing_token), ("p3", third.fencing_token)]
    );
    assert!(release(&mut client, &second).await);
    assert!(release(&mut client, &third).await);
}

/// A holder (TTL 200 ms, lock-delay 1.5 s) stops renewing. During the delay: Describe shows the
/// lease held by it, `expires_at` in the past and `remaining_ms` counting the rest of the delay;
/// a try-once Acquire answers not_granted (1 held of 1, same remaining); a limit of 3 is
/// FAILED_PRECONDITION naming 1; its Renew answers lost "expired or released"; its Release
/// answers false and does not end the delay: a waiter is granted no earlier than expiry + delay.
/// With nobody waiting, the name is free once the delay has passed.
async fn during_the_lock_delay_the_lease_stays_taken(backend: &Replicas) {
    const NAME: &str = "delay/during";
    const DELAY_MS: i64 = 1_500;
    let mut client = backend.client(0).await;
    let mut other = backend.client(1).await;
    let held = must_acquire_request(&mut client, delayed(NAME, "paused", 200, DELAY_MS)).await;
    let expires = expiry_ms(&held);
    let free_at = expires + DELAY_MS;
    sleep_until_unix_ms(expires + 150).await;

    let described = describe(&mut other, NAME).await;
    let now = now_unix_ms();
    assert!(
        described.held,
        "not held during the lock-delay: {described:?}"
    );
    assert_eq!(described.holder, "paused");
    assert_eq!(described.fencing_token, held.fencing_token);
    assert_eq!(described.limit, 1, "{described:?}");
    assert_eq!(
        described.expires_at, held.expires_at,
        "expires_at stays the true expiry"
    );
    assert!(
        timestamp_ms(described.expires_at.as_ref().unwrap()) < now,
        "{described:?}"
    );
    assert_near(
        described.remaining_ms,
        free_at - now,
        50,
        "Describe.remaining_ms",
    );
    assert_eq!(holders_of(&described), [("paused", held.fencing_token)]);
    assert_near(
        described.holders[0].remaining_ms,
        free_at - now,
        50,
        "HolderInfo.remaining_ms",
    );

    let not_granted = expect_not_granted(
        acquire_request_terminal(&mut other, request(NAME, "eager", 30_000, 0, 0)).await,
        "try-once during the lock-delay",
    );
    let now = now_unix_ms();
    assert_eq!(
        (not_granted.held, not_granted.limit),
        (1, 1),
        "{not_granted:?}"
    );
    assert_eq!(not_granted.holder, "paused");
    assert_eq!(not_granted.fencing_token, held.fencing_token);
    assert_near(
        not_granted.remaining_ms,
        free_at - now,
        50,
        "NotGranted.remaining_ms",
    );
    let status = acquire_refusal(&mut other, request(NAME, "eager", 30_000, 0, 3)).await;
    assert_limit_mismatch(&status, 1, "limit 3 during an exclusive lease's lock-delay");

    let answer = renew_once(&mut client, &held, 0).await.unwrap();
    match answer.result {
        Some(renew_response::Result::Lost(lost)) => assert_eq!(lost.reason, "expired or released"),
        other => panic!("renewed during the lock-delay: {other:?}"),
    }
    assert!(
        !release(&mut client, &held).await,
        "a release during the lock-delay answered released"
    );
    let described = describe(&mut other, NAME).await;
    assert!(
        described.held,
        "the release ended the lock-delay: {described:?}"
    );
    assert_near(
        described.remaining_ms,
        free_at - now_unix_ms(),
        50,
        "Describe.remaining_ms after the release",
    );

    let (mut stream, first) =
        start_waiting_request(&mut other, request(NAME, "next", 30_000, 10_000, 0)).await;
    assert_eq!((first.held, first.limit), (1, 1), "{first:?}");
    let granted = expect_granted(read_to_terminal(&mut stream, SOON).await.1, "waiter");
    let late = now_unix_ms() - free_at;
    println!("waiter granted {late} ms after expiry + lock-delay (after a late release)");
    assert!(late >= 0, "granted {} ms before expiry + lock-delay", -late);
    assert!(
        late <= NOISY_LATENESS_MS,
        "granted {late} ms after expiry + lock-delay"
    );
    assert!(granted.fencing_token > held.fencing_token);
    let described = describe(&mut client, NAME).await;
    assert_eq!(holders_of(&described), [("next", granted.fencing_token)]);
    assert!(release(&mut other, &granted).await);

    // With nobody waiting, the delay ends by itself: the name is free, any limit is accepted.
    let held = must_acquire_request(&mut client, delayed("delay/ends", "gone", 100, 300)).await;
    sleep_until_unix_ms(expiry_ms(&held) + 300 + 100).await;
    let described = describe(&mut other, "delay/ends").await;
    assert!(!described.held, "the delay did not end: {described:?}");
    assert_eq!(
        (described.limit, described.holders.len()),
        (0, 0),
        "{described:?}"
    );
    let granted =
        must_acquire_request(&mut other, request("delay/ends", "after", 30_000, 0, 3)).await;
    assert!(granted.fencing_token > held.fencing_token);
    assert!(release(&mut other, &granted).await);
}

/// Limit 2: permit A (TTL 200 ms, lock-delay 1.5 s) stops renewing, permit B is held for 30 s.
/// During A's delay both slots stay taken: Describe lists A (expired, in its delay) and B; a
/// try-once Acquire answers not_granted, 2 held of 2, describing A (it frees soonest); A's late
/// release answers false. B's slot, released, is granted at once (to C); a waiter is granted A's
/// slot no earlier than A's expiry + delay.
async fn a_permit_in_its_lock_delay_keeps_its_slot(backend: &Replicas) {
    const NAME: &str = "delay/permit";
    const DELAY_MS: i64 = 1_500;
    let mut client = backend.client(0).await;
    let mut other = backend.client(1).await;
    let a = must_acquire_request(
        &mut client,
        AcquireRequest {
            lock_delay_ms: DELAY_MS,
            ..request(NAME, "a", 200, 0, 2)
        },
    )
    .await;
    let b = must_acquire_request(&mut client, request(NAME, "b", 30_000, 0, 2)).await;
    let free_at = expiry_ms(&a) + DELAY_MS;
    sleep_until_unix_ms(expiry_ms(&a) + 150).await;

    let described = describe(&mut other, NAME).await;
    let now = now_unix_ms();
    assert_eq!(described.limit, 2, "{described:?}");
    assert_eq!(
        holders_of(&described),
        [("a", a.fencing_token), ("b", b.fencing_token)]
    );
    let in_delay = &described.holders[0];
    assert_eq!(in_delay.expires_at, a.expires_at);
    assert!(timestamp_ms(in_delay.expires_at.as_ref().unwrap()) < now);
    assert_near(in_delay.remaining_ms, free_at - now, 50, "A's remaining_ms");
    assert_eq!(described.holder, "a", "fields 2 to 5: the smallest token");

    let not_granted = expect_not_granted(
        acquire_request_terminal(&mut other, request(NAME, "c", 30_000, 0, 2)).await,
        "try-once while A is in its lock-delay",
    );
    let now = now_unix_ms();
    assert_eq!(
        (not_granted.held, not_granted.limit),
        (2, 2),
        "{not_granted:?}"
    );
    assert_eq!(not_granted.holder, "a", "A frees soonest: {not_granted:?}");
    assert_near(
        not_granted.remaining_ms,
        free_at - now,
        50,
        "NotGranted.remaining_ms",
    );
    assert!(
        !release(&mut client, &a).await,
        "A's late release answered released"
    );
    assert_eq!(describe(&mut other, NAME).await.holders.len(), 2);

    // The delay is A's slot's only: B's slot, released, is granted at once.
    assert!(release(&mut client, &b).await);
    let c = must_acquire_request(&mut other, request(NAME, "c", 30_000, 0, 2)).await;
    assert!(now_unix_ms() < free_at - 100, "the setup took too long");
    let (mut stream, first) =
        start_waiting_request(&mut other, request(NAME, "d", 30_000, 10_000, 2)).await;
    assert_eq!((first.held, first.limit), (2, 2), "{first:?}");
    assert_eq!(first.holder, "a", "A frees soonest: {first:?}");
    let granted = expect_granted(read_to_terminal(&mut stream, SOON).await.1, "waiter");
    let late = now_unix_ms() - free_at;
    println!("waiter granted A's slot {late} ms after A's expiry + lock-delay");
    assert!(late >= 0, "granted {} ms before expiry + lock-delay", -late);
    assert!(
        late <= NOISY_LATENESS_MS,
        "granted {late} ms after expiry + lock-delay"
    );
    assert!(granted.fencing_token > c.fencing_token);
    let described = describe(&mut client, NAME).await;
    assert_eq!(
        holders_of(&described),
        [("c", c.fencing_token), ("d", granted.fencing_token)]
    );
    assert!(release(&mut other, &c).await);
    assert!(release(&mut other, &granted).await);
}
