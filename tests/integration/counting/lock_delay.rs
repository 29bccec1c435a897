//! Lock-delay: the next grant after an expiry comes at expiry + delay, a released lease is granted
//! at once, during the delay the lease stays taken, and a permit in its delay keeps its slot.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::counting::{
    SOON, assert_limit_mismatch, assert_near, expect_granted, expect_not_granted, expiry_ms,
    holders_of, request,
};
use leased::proto::{AcquireRequest, renew_response};

on_both_stores!(
    next_grant_comes_at_expiry_plus_lock_delay,
    a_released_lease_with_lock_delay_is_granted_at_once,
    during_the_lock_delay_the_lease_stays_taken,
    a_permit_in_its_lock_delay_keeps_its_slot,
);

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

/// Sleeps until this host's clock reads `unix_ms` (at once if it has passed).
async fn sleep_until_unix_ms(unix_ms: i64) {
    let left = unix_ms - now_unix_ms();
    if left > 0 {
        tokio::time::sleep(Duration::from_millis(left as u64)).await;
    }
}

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
