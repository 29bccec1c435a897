//! The scenarios on both stores: waiters are granted in arrival order with their positions, nobody
//! barges in while anyone waits, a cancelled or timed-out waiter leaves the queue, and an expiry
//! hands the lease to the first waiter.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use crate::common::*;
use crate::fair_waiting::{
    A_WHILE, SOON, assert_free_or_held_by, expect_granted, expect_not_granted, holder_of,
};

on_both_stores!(
    six_waiters_on_two_replicas_are_granted_in_arrival_order_with_positions,
    no_barging_while_anyone_waits,
    cancelled_waiter_leaves_the_queue,
    timed_out_waiter_leaves_the_queue,
    expiry_hands_over_to_the_first_waiter,
);

/// A holder holds the name while 6 waiters start waiting 120 ms apart, alternating between the
/// two replicas: each one's first `waiting` says its place, 1 to 6. Then the holder releases and
/// each waiter, once granted, holds 50 ms and releases. The grants come in arrival order with
/// increasing tokens, and each waiter's position only ever drops, to 1 before its grant.
async fn six_waiters_on_two_replicas_are_granted_in_arrival_order_with_positions(
    replicas: &Replicas,
) {
    const NAME: &str = "fifo/six";
    const WAITERS: usize = 6;
    let mut holder_client = replicas.client(0).await;
    let held = must_acquire(&mut holder_client, NAME, 30_000).await;

    let mut waiters = Vec::new();
    for index in 0..WAITERS {
        if index > 0 {
            tokio::time::sleep(Duration::from_millis(120)).await;
        }
        let mut client = replicas.client(index).await;
        let (stream, first) =
            start_waiting(&mut client, NAME, &format!("waiter-{index}"), 30_000).await;
        assert_eq!(
            first.position,
            index as u32 + 1,
            "waiter {index}'s first waiting: {first:?}"
        );
        assert_eq!(first.holder, "test", "waiter {index}: {first:?}");
        assert_eq!(first.fencing_token, held.fencing_token, "waiter {index}");
        waiters.push((client, stream, first));
    }

    // Each waiter in its own task: read to the grant, note it, hold 50 ms, release.
    let grants: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let tasks: Vec<_> = waiters
        .into_iter()
        .enumerate()
        .map(|(index, (mut client, mut stream, first))| {
            let grants = grants.clone();
            tokio::spawn(async move {
                let (waitings, terminal) =
                    read_to_terminal(&mut stream, Duration::from_secs(30)).await;
                let granted = expect_granted(terminal, &format!("waiter {index}"));
                grants.lock().unwrap().push((index, granted.fencing_token));
                tokio::time::sleep(Duration::from_millis(50)).await;
                assert!(
                    release(&mut client, &granted).await,
                    "waiter {index} lost the lease it was granted"
                );
                let mut positions = vec![first.position];
                positions.extend(waitings.iter().map(|waiting| waiting.position));
                positions
            })
        })
        .collect();
    assert!(release(&mut holder_client, &held).await);

    for (index, task) in tasks.into_iter().enumerate() {
        let positions = task.await.expect("a waiter's task panicked");
        println!("waiter {index} saw positions {positions:?}");
        assert!(
            positions.windows(2).all(|pair| pair[1] <= pair[0]),
            "waiter {index}: a position rose: {positions:?}"
        );
        assert_eq!(
            positions.last(),
            Some(&1),
            "waiter {index}: the last waiting before the grant says next in line: {positions:?}"
        );
    }
    let grants = grants.lock().unwrap();
    let order: Vec<usize> = grants.iter().map(|grant| grant.0).collect();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "grants in arrival order"
    );
    assert!(grants[0].1 > held.fencing_token, "{grants:?}");
    assert!(
        grants.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "tokens increase in grant order: {grants:?}"
    );
}

/// With a waiter queued, try-once Acquires on either replica answer not_granted naming the
/// holder. Right after the holder releases, 20 try-once Acquires never get the lease: they see
/// it free for a moment (holder "", token 0) or held by the first waiter. A waiter arriving after
/// the release queues behind the earlier ones and is granted last.
async fn no_barging_while_anyone_waits(replicas: &Replicas) {
    const NAME: &str = "fifo/no-barging";
    let mut holder_client = replicas.client(0).await;
    let mut w1_client = replicas.client(1).await;
    let mut w2_client = replicas.client(0).await;
    let mut late_client = replicas.client(1).await;
    let mut bargers = [replicas.client(0).await, replicas.client(1).await];

    let held = must_acquire(&mut holder_client, NAME, 30_000).await;
    let (mut w1, first) = start_waiting(&mut w1_client, NAME, "w1", 30_000).await;
    assert_eq!(first.position, 1, "{first:?}");
    for (replica, barger) in bargers.iter_mut().enumerate() {
        let not_granted = expect_not_granted(
            try_once(barger, NAME, "barger").await,
            &format!("try-once on replica {replica} while w1 waits"),
        );
        assert_eq!(not_granted.holder, "test");
        assert_eq!(not_granted.fencing_token, held.fencing_token);
    }
    let (mut w2, first) = start_waiting(&mut w2_client, NAME, "w2", 30_000).await;
    assert_eq!(first.position, 2, "{first:?}");

    // The release hands the lease to w1; nobody may take it in between.
    assert!(release(&mut holder_client, &held).await);
    for attempt in 0..20 {
        let not_granted = expect_not_granted(
            try_once(&mut bargers[attempt % 2], NAME, "barger").await,
            &format!("try-once {attempt} right after the release (barging past w1)"),
        );
        assert_free_or_held_by(&not_granted, "w1");
    }
    // w1 may have been granted by now (then w2 is first): the newcomer is 2nd or 3rd, never 1st.
    let (mut late, first) = start_waiting(&mut late_client, NAME, "late", 30_000).await;
    assert!(
        (2..=3).contains(&first.position),
        "a newcomer queues behind w2: {first:?}"
    );

    let g1 = expect_granted(read_to_terminal(&mut w1, SOON).await.1, "w1");
    assert!(g1.fencing_token > held.fencing_token);
    let not_granted = expect_not_granted(
        try_once(&mut bargers[0], NAME, "barger").await,
        "try-once while w1 holds",
    );
    assert_eq!(not_granted.holder, "w1");
    if first.position != 2 {
        wait_for_position(&mut late, 2, SOON).await;
    }
    still_waiting_for(&mut w2, A_WHILE).await;
    still_waiting_for(&mut late, A_WHILE).await;

    assert!(release(&mut w1_client, &g1).await);
    let g2 = expect_granted(read_to_terminal(&mut w2, SOON).await.1, "w2");
    assert!(g2.fencing_token > g1.fencing_token);
    still_waiting_for(&mut late, A_WHILE).await;
    assert!(release(&mut w2_client, &g2).await);
    let g3 = expect_granted(read_to_terminal(&mut late, SOON).await.1, "late");
    assert!(g3.fencing_token > g2.fencing_token);
    assert_eq!(holder_of(&mut bargers[0], NAME).await, "late");
}

/// Three waiters (on alternating replicas); the 2nd cancels its call. The 3rd hears that it moved
/// up to position 2; on release the 1st is granted, then the 3rd; the cancelled one never holds
/// the lease.
async fn cancelled_waiter_leaves_the_queue(replicas: &Replicas) {
    const NAME: &str = "fifo/cancelled";
    let mut holder_client = replicas.client(0).await;
    let held = must_acquire(&mut holder_client, NAME, 30_000).await;
    let mut w1_client = replicas.client(1).await;
    let mut w2_client = replicas.client(0).await;
    let mut w3_client = replicas.client(1).await;
    let (mut w1, first) = start_waiting(&mut w1_client, NAME, "w1", 30_000).await;
    assert_eq!(first.position, 1, "{first:?}");
    let (w2, first) = start_waiting(&mut w2_client, NAME, "w2", 30_000).await;
    assert_eq!(first.position, 2, "{first:?}");
    let (mut w3, first) = start_waiting(&mut w3_client, NAME, "w3", 30_000).await;
    assert_eq!(first.position, 3, "{first:?}");

    let cancelled_at = Instant::now();
    drop(w2);
    wait_for_position(&mut w3, 2, SOON).await;
    println!(
        "w3 heard it moved up {:?} after w2 cancelled",
        cancelled_at.elapsed()
    );
    still_waiting_for(&mut w1, A_WHILE).await;

    assert!(release(&mut holder_client, &held).await);
    let g1 = expect_granted(read_to_terminal(&mut w1, SOON).await.1, "w1");
    assert_eq!(holder_of(&mut holder_client, NAME).await, "w1");
    wait_for_position(&mut w3, 1, SOON).await;
    still_waiting_for(&mut w3, A_WHILE).await;

    assert!(release(&mut w1_client, &g1).await);
    let g3 = expect_granted(read_to_terminal(&mut w3, SOON).await.1, "w3");
    assert!(g3.fencing_token > g1.fencing_token);
    assert_eq!(holder_of(&mut holder_client, NAME).await, "w3");
    assert!(release(&mut w3_client, &g3).await);
    tokio::time::sleep(A_WHILE).await;
    assert_eq!(
        holder_of(&mut holder_client, NAME).await,
        "",
        "the cancelled w2 was granted"
    );
}

/// Three waiters; the 2nd waits only 600 ms. It ends in not_granted (not before its wait_ms) and
/// leaves the queue: the 3rd moves up to position 2, and on release the 1st then the 3rd are
/// granted.
async fn timed_out_waiter_leaves_the_queue(replicas: &Replicas) {
    const NAME: &str = "fifo/timed-out";
    let mut holder_client = replicas.client(0).await;
    let held = must_acquire(&mut holder_client, NAME, 30_000).await;
    let mut w1_client = replicas.client(1).await;
    let mut w2_client = replicas.client(0).await;
    let mut w3_client = replicas.client(1).await;
    let (mut w1, _) = start_waiting(&mut w1_client, NAME, "w1", 30_000).await;
    let w2_started = Instant::now();
    let (mut w2, first) = start_waiting(&mut w2_client, NAME, "w2", 600).await;
    assert_eq!(first.position, 2, "{first:?}");
    let (mut w3, first) = start_waiting(&mut w3_client, NAME, "w3", 30_000).await;
    assert_eq!(first.position, 3, "{first:?}");

    let not_granted = expect_not_granted(read_to_terminal(&mut w2, SOON).await.1, "w2");
    let waited = w2_started.elapsed();
    assert!(
        waited >= Duration::from_millis(550),
        "w2 gave up early: {waited:?}"
    );
    assert_eq!(not_granted.holder, "test");
    wait_for_position(&mut w3, 2, SOON).await;
    println!(
        "w3 moved up {:?} after w2's wait began",
        w2_started.elapsed()
    );

    assert!(release(&mut holder_client, &held).await);
    let g1 = expect_granted(read_to_terminal(&mut w1, SOON).await.1, "w1");
    still_waiting_for(&mut w3, A_WHILE).await;
    assert!(release(&mut w1_client, &g1).await);
    let g3 = expect_granted(read_to_terminal(&mut w3, SOON).await.1, "w3");
    assert!(g3.fencing_token > g1.fencing_token);
    assert!(release(&mut w3_client, &g3).await);
}

/// Unix milliseconds of a protobuf timestamp.
fn unix_ms(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp.seconds * 1_000 + i64::from(timestamp.nanos) / 1_000_000
}

/// A holder takes a 500 ms lease and never renews; two waiters queue (on different replicas).
/// The first is granted right after the expiry (measured against `expires_at`, on the same host
/// clock; bound 500 ms, typically ~10 ms), the second hears it is next and keeps waiting.
async fn expiry_hands_over_to_the_first_waiter(replicas: &Replicas) {
    const NAME: &str = "fifo/expiry";
    let mut holder_client = replicas.client(0).await;
    let held = must_acquire(&mut holder_client, NAME, 500).await;
    let expires_ms = unix_ms(
        held.expires_at
            .as_ref()
            .expect("granted without expires_at"),
    );
    let mut w1_client = replicas.client(1).await;
    let mut w2_client = replicas.client(0).await;
    let (mut w1, first) = start_waiting(&mut w1_client, NAME, "w1", 10_000).await;
    assert_eq!(first.position, 1, "{first:?}");
    let (mut w2, first) = start_waiting(&mut w2_client, NAME, "w2", 10_000).await;
    assert_eq!(first.position, 2, "{first:?}");

    let g1 = expect_granted(read_to_terminal(&mut w1, SOON).await.1, "w1");
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let delay_ms = now_ms - expires_ms;
    println!("w1 granted {delay_ms} ms after the holder's expiry");
    assert!(g1.fencing_token > held.fencing_token);
    assert!(
        delay_ms >= -20,
        "granted {}ms before the holder's expiry",
        -delay_ms
    );
    assert!(delay_ms < 500, "granted {delay_ms} ms after the expiry");

    wait_for_position(&mut w2, 1, SOON).await;
    still_waiting_for(&mut w2, A_WHILE).await;
    assert_eq!(holder_of(&mut holder_client, NAME).await, "w1");
}
