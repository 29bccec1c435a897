//! Counting leases: never more than N holders with increasing tokens, waiters served in arrival
//! order, each expiry frees exactly one permit and each release wakes exactly one waiter.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::common::*;
use crate::counting::{
    A_WHILE, Client, SOON, all_still_waiting, expect_granted, expect_not_granted, expiry_ms,
    holders_of, request,
};
use futures::future::join_all;
use leased::proto::{AcquireRequest, Granted};

on_both_stores!(
    ten_contenders_never_exceed_three_holders_and_tokens_increase,
    waiters_take_free_permits_in_arrival_order,
    each_expiry_frees_exactly_one_permit,
    one_release_wakes_exactly_one_waiter,
);

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
