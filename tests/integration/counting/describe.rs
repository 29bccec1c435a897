//! A limit other than the one in force is FAILED_PRECONDITION naming it; Describe lists every
//! permit by token, the limit and the waiters; Waiting and NotGranted say how many permits are
//! taken.

use crate::common::*;
use crate::counting::{
    SOON, assert_limit_mismatch, assert_near, expect_granted, expect_not_granted, holders_of,
    request,
};
use leased::proto::renew_response;
use prost::Message as _;

on_both_stores!(
    a_mismatched_limit_is_failed_precondition_naming_the_limit_in_force,
    describe_waiting_and_not_granted_show_every_permit,
);

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
