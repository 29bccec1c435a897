//! The caller's own lease id: a retried Acquire is answered the same grant, a retried wait keeps
//! its place in line, and a bad id is refused without being echoed.

use leased::proto::AcquireRequest;
use tokio_stream::StreamExt;
use tonic::Code;

use super::*;

/// An Acquire of `name` with the caller's own lease id.
fn with_id(name: &str, holder: &str, lease_id: &str, wait_ms: i64) -> AcquireRequest {
    AcquireRequest {
        lease_id: lease_id.into(),
        ..request(name, holder, false, wait_ms)
    }
}

pub async fn a_retry_with_the_same_id_is_answered_the_same_grant(replicas: &Replicas) {
    for shared in [false, true] {
        let name = format!("own/retry-{shared}");
        let id = own_id();
        let mut first = replicas.client(0).await;
        let mut second = replicas.client(1).await;
        let grant = must_acquire_request(
            &mut first,
            AcquireRequest {
                shared,
                ..with_id(&name, "holder", &id, 0)
            },
        )
        .await;
        assert_eq!(grant.lease_id, id);
        // The retry, through the other replica when there are two, waiting or not.
        for wait_ms in [0, 5_000] {
            let again = must_acquire_request(
                &mut second,
                AcquireRequest {
                    shared,
                    ..with_id(&name, "holder", &id, wait_ms)
                },
            )
            .await;
            assert_eq!(again, grant, "shared {shared}, wait {wait_ms}");
        }
        assert_eq!(describe(&mut first, &name).await.holders.len(), 1);
        assert!(release_id(&mut second, &name, &id).await);
        assert!(!describe(&mut first, &name).await.held);
    }
}

/// A retry is answered the grant its id holds only when it asks for what it holds: an exclusive
/// retry of a shared grant (another reader holding beside it), a shared retry of an exclusive
/// grant and a retry of a permit with another limit are FAILED_PRECONDITION naming `shared` or
/// `limit`, and nothing changes; a retry with another TTL is answered the grant as it was made.
pub async fn a_retry_that_asks_for_another_mode_or_limit_is_refused(replicas: &Replicas) {
    let mut first = replicas.client(0).await;
    let mut second = replicas.client(1).await;

    // The reproduction: reader-1 holds with its own id, reader-2 beside it, and a
    // "writer" retries reader-1's id asking for an exclusive grant.
    let name = "own/mode-rw";
    let id = own_id();
    let reader = must_acquire_request(
        &mut first,
        AcquireRequest {
            shared: true,
            ..with_id(name, "reader-1", &id, 0)
        },
    )
    .await;
    take(&mut second, name, "reader-2", true).await;
    let status = acquire_refusal(&mut second, with_id(name, "writer", &id, 0)).await;
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().starts_with("shared:"), "{status:?}");
    let holders = describe(&mut first, name).await.holders;
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert!(holders.iter().all(|holder| holder.shared), "{holders:?}");
    // Asking for what it holds, with another TTL: the grant as it was made.
    let again = must_acquire_request(
        &mut second,
        AcquireRequest {
            shared: true,
            ttl_ms: 5_000,
            ..with_id(name, "reader-1", &id, 0)
        },
    )
    .await;
    assert_eq!(again, reader);

    // An exclusive grant retried as shared.
    let name = "own/mode-exclusive";
    let id = own_id();
    must_acquire_request(&mut first, with_id(name, "writer", &id, 0)).await;
    let shared_retry = AcquireRequest {
        shared: true,
        ..with_id(name, "writer", &id, 5_000)
    };
    let status = acquire_refusal(&mut second, shared_retry).await;
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().starts_with("shared:"), "{status:?}");
    let holders = describe(&mut first, name).await.holders;
    assert_eq!(holders.len(), 1);
    assert!(!holders[0].shared);

    // A permit of a limit-3 lease retried with limit 1 and with limit 2.
    let name = "own/mode-limit";
    let id = own_id();
    let permit = AcquireRequest {
        limit: 3,
        ..with_id(name, "worker", &id, 0)
    };
    must_acquire_request(&mut first, permit.clone()).await;
    for limit in [1, 2] {
        let retry = AcquireRequest {
            limit,
            ..permit.clone()
        };
        let status = acquire_refusal(&mut second, retry).await;
        assert_eq!(status.code(), Code::FailedPrecondition, "limit {limit}");
        assert!(status.message().starts_with("limit:"), "{status:?}");
    }
    assert_eq!(describe(&mut first, name).await.holders.len(), 1);
    must_acquire_request(&mut second, permit).await;
}

/// A waiter whose call broke off retries with its own id: it is back at its place (on the
/// other replica, when there are two), ahead of the caller who queued after it, and it is the
/// one granted at the release.
pub async fn a_retried_wait_keeps_its_place_in_line(replicas: &Replicas) {
    let name = "own/place";
    let mut holder = replicas.client(0).await;
    let held = take(&mut holder, name, "holder", false).await;
    let id = own_id();
    let mut first = replicas.client(1).await;
    let (first_stream, position) =
        start_waiting_request(&mut first, with_id(name, "first", &id, 60_000)).await;
    assert_eq!(position.position, 1);
    let mut second = replicas.client(2).await;
    let (mut second_stream, position) = wait_in_line(&mut second, name, "second", false).await;
    assert_eq!(position, 2);

    // The first caller's call ends (as when its connection breaks); its replica takes its
    // entry out, and the second caller moves up.
    drop(first_stream);
    wait_for_position(&mut second_stream, 1, SOON).await;

    let mut retry = replicas.client(3).await;
    let (mut retry_stream, position) =
        start_waiting_request(&mut retry, with_id(name, "first", &id, 60_000)).await;
    assert_eq!(position.position, 1, "the retry lost its place");
    wait_for_position(&mut second_stream, 2, SOON).await;

    assert!(release(&mut holder, &held).await);
    let granted = granted_within(&mut retry_stream, "the retry").await;
    assert_eq!(granted.lease_id, id);
    still_waiting_for(&mut second_stream, A_WHILE).await;
    assert!(release_id(&mut retry, name, &id).await);
    granted_within(&mut second_stream, "second").await;
}

pub async fn a_bad_own_lease_id_is_invalid_argument_naming_lease_id(replicas: &Replicas) {
    let mut client = replicas.client(0).await;
    let secret = "s3cret".repeat(5);
    for bad in [
        "short".to_owned(),
        "x".repeat(129),
        format!("{secret}!"),
        format!("{secret} space"),
        format!("{secret}é"),
    ] {
        let status = acquire_refusal(&mut client, with_id("own/bad", "holder", &bad, 0)).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{bad:?}");
        assert!(status.message().contains("lease_id"), "{status:?}");
        assert!(!status.message().contains(&secret), "echoed: {status:?}");
    }
    // An id of few distinct characters is refused as guessable, without being echoed.
    for guessable in [
        "a".repeat(22),
        "S".repeat(11) + &"x".repeat(11),
        "ab12".repeat(8),
    ] {
        let status =
            acquire_refusal(&mut client, with_id("own/bad", "holder", &guessable, 0)).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{guessable:?}");
        assert!(status.message().contains("lease_id"), "{status:?}");
        assert!(status.message().contains("distinct"), "{status:?}");
        assert!(!status.message().contains(&guessable), "echoed: {status:?}");
    }
    // 22 characters of the alphabet, 6 of them distinct, is the least accepted.
    let shortest = "A-z_90".repeat(4)[..22].to_owned();
    let grant = must_acquire_request(&mut client, with_id("own/bad", "holder", &shortest, 0)).await;
    assert_eq!(grant.lease_id, shortest);
}

/// A retry that comes while the first call still waits takes its place, and the first call ends
/// (FAILED_PRECONDITION) instead of taking the place back.
pub async fn a_retry_ends_the_call_it_took_the_place_of(replicas: &Replicas) {
    let name = "own/superseded";
    let mut holder = replicas.client(0).await;
    let held = take(&mut holder, name, "holder", false).await;
    let id = own_id();
    let mut first = replicas.client(1).await;
    let (mut first_stream, waiting) =
        start_waiting_request(&mut first, with_id(name, "first", &id, 60_000)).await;
    assert_eq!(waiting.position, 1);
    let mut retry = replicas.client(2).await;
    let (mut retry_stream, waiting) =
        start_waiting_request(&mut retry, with_id(name, "first", &id, 60_000)).await;
    assert_eq!(waiting.position, 1);

    let ended = tokio::time::timeout(SOON, async {
        loop {
            match first_stream.next().await {
                Some(Ok(_)) => continue,
                Some(Err(status)) => return status,
                None => panic!("the first call ended without a status"),
            }
        }
    })
    .await
    .expect("the first call did not end");
    assert_eq!(ended.code(), Code::FailedPrecondition, "{ended:?}");
    assert!(ended.message().contains("lease_id"), "{ended:?}");
    assert_eq!(describe(&mut holder, name).await.waiters, 1);

    assert!(release(&mut holder, &held).await);
    let granted = granted_within(&mut retry_stream, "the retry").await;
    assert_eq!(granted.lease_id, id);
}
