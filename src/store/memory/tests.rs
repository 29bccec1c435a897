//! The embedded store's own tests: revokes, listing pages and tokens, the lock-delay.

use super::*;
use crate::error::Error;
use crate::{
    lease::{
        AcquireOutcome, ENDED_LEASE_ID_KEPT, Grant, Limits,
        limits::{AcquireFields, parse_list_prefix},
        waiting::{AcquireEvent, acquire},
    },
    shutdown::Shutdown,
};

const NAME: &str = "jobs/nightly";

fn name() -> LeaseName {
    parse_name(NAME).unwrap()
}

fn request(name: &str, ttl_ms: i64, limit: u32, lock_delay_ms: i64) -> ValidatedAcquire {
    Limits::default()
        .validate_acquire(AcquireFields {
            name,
            holder: "holder".into(),
            ttl_ms,
            limit,
            lock_delay_ms,
            ..AcquireFields::default()
        })
        .unwrap()
}

/// Takes a permit at once; panics if none is free.
async fn take(store: &MemoryStore, request: &ValidatedAcquire) -> (LeaseId, Grant) {
    let lease_id = LeaseId::generate();
    match store.try_acquire(request, &lease_id, None).await {
        Ok(AcquireOutcome::Granted(grant)) => (lease_id, grant),
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn revoked_because(reason: &str) -> RenewOutcome {
    RenewOutcome::Lost(LeaseGone::Revoked {
        reason: reason.into(),
    })
}

/// A revoke with the holder's token ends the grant at once: the holder's renewal answers
/// why, its release finds nothing, and the name is free.
#[tokio::test(start_paused = true)]
async fn a_revoke_ends_the_grant_and_tells_its_holder_why() {
    let replica = test_replica(16);
    let store = replica.store();
    let (lease_id, grant) = take(store, &request(NAME, 10_000, 1, 5_000)).await;

    let stale = store
        .revoke(&name(), Some(grant.fencing_token - 1), "stale")
        .await
        .unwrap();
    assert!(stale.is_empty(), "a stale token revoked {stale:?}");
    assert_eq!(store.describe(&name()).await.unwrap().holders.len(), 1);

    let revoked = store
        .revoke(&name(), Some(grant.fencing_token), "wedged on disk")
        .await
        .unwrap();
    assert_eq!(
        revoked,
        vec![Revoked {
            fencing_token: grant.fencing_token,
            holder: "holder".into()
        }]
    );
    // Freed at once: no lock-delay after a revoke.
    assert!(store.describe(&name()).await.unwrap().holders.is_empty());
    assert_eq!(
        store
            .renew(&name(), &lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        revoked_because("wedged on disk")
    );
    assert!(
        !store
            .release(&name(), &lease_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let (_, next) = take(store, &request(NAME, 10_000, 1, 0)).await;
    assert!(next.fencing_token > grant.fencing_token);
    // Even with another holder now, the revoked one is told it was revoked.
    assert_eq!(
        store
            .renew(&name(), &lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        revoked_because("wedged on disk")
    );
}

/// The reason is remembered for the grant's TTL at least, then swept.
#[tokio::test(start_paused = true)]
async fn a_revoke_reason_is_kept_for_the_ttl() {
    let replica = test_replica(16);
    let store = replica.store();
    let (lease_id, _) = take(store, &request(NAME, 2_000, 1, 0)).await;
    store.revoke(&name(), None, "maintenance").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_999)).await;
    assert_eq!(
        store
            .renew(&name(), &lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        revoked_because("maintenance")
    );
    tokio::time::sleep(SWEEP_INTERVAL).await;
    assert_eq!(
        store
            .renew(&name(), &lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        RenewOutcome::Lost(LeaseGone::ExpiredOrReleased)
    );
    assert!(store.state().revoked.is_empty());
}

/// Token 0 revokes every permit of a counting lease; a permit in its lock-delay has
/// expired already and is not revoked (it stays taken until its delay ends).
#[tokio::test(start_paused = true)]
async fn a_revoke_without_token_ends_every_grant_that_holds() {
    let replica = test_replica(16);
    let store = replica.store();
    let (_, expiring) = take(store, &request(NAME, 100, 3, 1_000)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, first) = take(store, &request(NAME, 10_000, 3, 1_000)).await;
    let (_, second) = take(store, &request(NAME, 10_000, 3, 1_000)).await;
    let revoked = store.revoke(&name(), None, "drain").await.unwrap();
    let tokens: Vec<u64> = revoked.iter().map(|r| r.fencing_token).collect();
    assert_eq!(tokens, vec![first.fencing_token, second.fencing_token]);
    let left = store.describe(&name()).await.unwrap();
    let left: Vec<u64> = left.holders.iter().map(|h| h.fencing_token).collect();
    assert_eq!(left, vec![expiring.fencing_token]);
    let in_delay = store
        .revoke(&name(), Some(expiring.fencing_token), "too late")
        .await
        .unwrap();
    assert!(in_delay.is_empty());
}

/// A revoke hands the lease to the first caller in line at once, like a release.
#[tokio::test(start_paused = true)]
async fn a_revoke_wakes_the_first_in_line() {
    let replica = test_replica(16);
    let store = replica.store();
    let (_, grant) = take(store, &request(NAME, 60_000, 1, 0)).await;
    let mut waiter = acquire(
        replica.clone(),
        Limits::default()
            .validate_acquire(AcquireFields {
                name: NAME,
                holder: "waiter".into(),
                ttl_ms: 10_000,
                wait_ms: 60_000,
                ..AcquireFields::default()
            })
            .unwrap(),
        Shutdown::never(),
    );
    assert!(matches!(
        waiter.recv().await.unwrap().unwrap(),
        AcquireEvent::Waiting(_)
    ));
    let revoked_at = Instant::now();
    store.revoke(&name(), None, "stuck").await.unwrap();
    match waiter.recv().await.unwrap().unwrap() {
        AcquireEvent::Granted(delivery) => {
            assert!(delivery.deliver().fencing_token > grant.fencing_token)
        }
        other => panic!("expected Granted, got {other:?}"),
    }
    assert_eq!(Instant::now(), revoked_at);
}

/// Pages through every name under the prefix; the names of each page in order.
async fn list_all(store: &MemoryStore, prefix: &str, page_size: usize) -> Vec<Vec<String>> {
    let prefix = parse_list_prefix(prefix).unwrap();
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = store
            .list(&prefix, page_size, token.as_deref())
            .await
            .unwrap();
        pages.push(
            page.leases
                .iter()
                .map(|lease| lease.name.as_str().to_owned())
                .collect(),
        );
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => return pages,
        }
        assert!(pages.len() < 100, "the listing does not end");
    }
}

/// 2,500 held leases under a prefix, pages of 1,000: each appears exactly once, and nothing
/// outside the prefix or no longer held does.
#[tokio::test(start_paused = true)]
async fn list_pages_through_every_held_lease_once() {
    let replica = test_replica(16);
    let store = replica.store();
    for n in 0..2_500 {
        take(store, &request(&format!("svc/{n:05}"), 60_000, 1, 0)).await;
    }
    // Around the prefix in name order: "svc." < "svc/" < "svc0".
    for other in ["svc.before", "svc0after", "sv", "other/1"] {
        take(store, &request(other, 60_000, 1, 0)).await;
    }
    let (released_id, _) = take(store, &request("svc/released", 60_000, 1, 0)).await;
    assert!(
        store
            .release(
                &parse_name("svc/released").unwrap(),
                &released_id,
                &Caller::anyone(),
            )
            .await
            .unwrap()
    );
    // Expired, in its lock-delay: still taken, so listed.
    take(store, &request("svc/delayed", 100, 1, 60_000)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let pages = list_all(store, "svc/", 1_000).await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![1_000, 1_000, 501]);
    let mut names: Vec<String> = pages.into_iter().flatten().collect();
    let listed = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), listed, "a name was listed twice");
    let mut expected: Vec<String> = (0..2_500).map(|n| format!("svc/{n:05}")).collect();
    expected.push("svc/delayed".into());
    expected.sort();
    assert_eq!(names, expected);

    let everything = list_all(store, "", 1_000).await.concat();
    assert_eq!(everything.len(), 2_505);
}

/// A page looks at a number of names bounded by its page size: a prefix full of names no
/// longer held gives short (even empty) pages with a next token, never one unbounded walk; a
/// page of 1 looks at 100 names, a page of 1,000 at 10,000.
#[tokio::test(start_paused = true)]
async fn a_list_page_has_a_bounded_cost() {
    let replica = test_replica(16);
    let store = replica.store();
    let count = names_per_page(1_000) + 10;
    for n in 0..count {
        take(store, &request(&format!("old/{n:06}"), 10, 1, 0)).await;
    }
    take(store, &request("old/zz-held", 60_000, 1, 0)).await;
    tokio::time::sleep(Duration::from_millis(20)).await; // expired, not yet swept
    let prefix = parse_list_prefix("old/").unwrap();
    let first = store.list(&prefix, 1_000, None).await.unwrap();
    assert!(first.leases.is_empty());
    let token = first.next_page_token.expect("a next page");
    let second = store.list(&prefix, 1_000, Some(&token)).await.unwrap();
    let names: Vec<&str> = second.leases.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, vec!["old/zz-held"]);
    assert_eq!(second.next_page_token, None);

    assert_eq!(names_per_page(1), 100);
    let mut token = None;
    let mut pages = 0;
    let listed = loop {
        let page = store.list(&prefix, 1, token.as_deref()).await.unwrap();
        pages += 1;
        if pages == 1 {
            let next = page.next_page_token.as_deref().expect("a next page");
            assert_eq!(
                parse_page_token(next, &prefix).unwrap(),
                "old/000099",
                "the first page of 1 looked at 100 names"
            );
        }
        match page.next_page_token {
            Some(next) if page.leases.is_empty() => token = Some(next),
            _ => break page.leases,
        }
    };
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name.as_str(), "old/zz-held");
    assert_eq!(pages, count / 100 + 1, "pages of 100 names looked at");
}

/// A page token is the store's own, for one prefix: garbage, or a token of another listing,
/// is INVALID_ARGUMENT naming `page_token`.
#[tokio::test(start_paused = true)]
async fn a_foreign_page_token_is_refused() {
    let replica = test_replica(16);
    let store = replica.store();
    for n in 0..3 {
        take(store, &request(&format!("a/{n}"), 60_000, 1, 0)).await;
    }
    let a = parse_list_prefix("a/").unwrap();
    let page = store.list(&a, 1, None).await.unwrap();
    let token = page.next_page_token.expect("a next page");
    let b = parse_list_prefix("b/").unwrap();
    let everything = parse_list_prefix("").unwrap();
    let made_for_b = token.replace("612f", "622f");
    for (prefix, token) in [
        (&b, token.as_str()),
        (&everything, token.as_str()),
        (&a, "garbage"),
        (&a, "m1."),
        (&a, "m1.612f.zz"),
        (&a, "m1.612f.612"),
        (&a, "m1.612f.+1"),
        (&a, made_for_b.as_str()),
    ] {
        match store.list(prefix, 10, Some(token)).await {
            Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "page_token"),
            other => {
                panic!("{token:?} for {prefix:?}: expected INVALID_ARGUMENT, got {other:?}")
            }
        }
    }
    let rest = store.list(&a, 10, Some(&token)).await.unwrap();
    assert_eq!(rest.leases.len(), 2);
}

/// `describe` shows a grant's lock-delay, which `remaining_ms` counts and `held_ms` does not.
#[tokio::test(start_paused = true)]
async fn describe_shows_the_lock_delay() {
    let replica = test_replica(16);
    let store = replica.store();
    take(store, &request(NAME, 10_000, 1, 250)).await;
    tokio::time::advance(Duration::from_micros(500)).await;
    let info = store.describe(&name()).await.unwrap().holders.remove(0);
    let expiry = info.expiry.unwrap();
    // Rounded up: still held for part of a millisecond is still held.
    assert_eq!((expiry.remaining_ms, expiry.lock_delay_ms), (10_250, 250));
    assert_eq!(expiry.held_ms(), 10_000);
    tokio::time::advance(Duration::from_millis(9_999) + Duration::from_micros(500)).await;
    let expiry = store.describe(&name()).await.unwrap().holders[0]
        .expiry
        .unwrap();
    assert_eq!(expiry.held_ms(), 0);
}

/// A shared or exclusive request of `NAME` for the caller's own lease id (`None`: the server's).
fn mode_request(shared: bool, lease_id: Option<&str>, wait_ms: i64) -> ValidatedAcquire {
    Limits::default()
        .validate_acquire(AcquireFields {
            name: NAME,
            holder: "holder".into(),
            ttl_ms: 10_000,
            wait_ms,
            shared,
            lease_id: lease_id.unwrap_or_default(),
            ..AcquireFields::default()
        })
        .unwrap()
}

/// The run of shared entries at the head of the queue is due together once the writer ahead of
/// them releases; the writer behind them is not, and holds back the reader behind it.
#[tokio::test(start_paused = true)]
async fn the_run_of_shared_callers_at_the_head_is_due_together() {
    let replica = test_replica(16);
    let store = replica.store();
    let (writer_id, _) = take(store, &mode_request(false, None, 0)).await;
    let entries = [
        "aaaaaaaa:1s",
        "aaaaaaaa:2s",
        "aaaaaaaa:3s",
        "aaaaaaaa:4",
        "aaaaaaaa:5s",
    ];
    for (index, entry) in entries.map(queue_entry).iter().enumerate() {
        let outcome = store
            .try_acquire(
                &mode_request(entry.is_shared(), None, 60_000),
                &LeaseId::generate(),
                Some(entry),
            )
            .await
            .unwrap();
        assert!(
            matches!(outcome, AcquireOutcome::Busy { position, .. } if position as usize == index + 1),
            "{entry}: {outcome:?}"
        );
    }
    let status = store.queue_status(&name(), &[]).await.unwrap();
    assert_eq!((status.occupancy.due, status.due.len()), (0, 0));

    assert!(
        store
            .release(&name(), &writer_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let status = store.queue_status(&name(), &[]).await.unwrap();
    assert_eq!(status.occupancy.due, 3);
    assert_eq!(
        status.due,
        ["aaaaaaaa:1s", "aaaaaaaa:2s", "aaaaaaaa:3s"].map(queue_entry)
    );
    // The reader behind the waiting writer is not granted, though only readers will hold it.
    for entry in ["aaaaaaaa:1s", "aaaaaaaa:2s", "aaaaaaaa:3s"] {
        let outcome = store
            .try_acquire(
                &mode_request(true, None, 60_000),
                &LeaseId::generate(),
                Some(&queue_entry(entry)),
            )
            .await
            .unwrap();
        assert!(matches!(outcome, AcquireOutcome::Granted(_)), "{outcome:?}");
    }
    let outcome = store
        .try_acquire(
            &mode_request(true, None, 60_000),
            &LeaseId::generate(),
            Some(&queue_entry("aaaaaaaa:5s")),
        )
        .await
        .unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Busy { position: 2, ref occupancy } if occupancy.due == 0 && occupancy.held == 3),
        "{outcome:?}"
    );
}

/// A wait retried with the caller's own lease id (a new entry) takes its earlier place, ahead of
/// the caller who queued after it; once granted and released, the id grants nothing again.
#[tokio::test(start_paused = true)]
async fn an_own_lease_id_keeps_its_place_and_ends_with_its_release() {
    let replica = test_replica(16);
    let store = replica.store();
    let (holder_id, _) = take(store, &mode_request(false, None, 0)).await;
    let own = "own-lease-id-for-a-test-0001";
    let id = crate::lease::limits::parse_own_lease_id(own).unwrap();
    let waiting = mode_request(false, Some(own), 60_000);
    let outcome = store
        .try_acquire(&waiting, &id, Some(&queue_entry("aaaaaaaa:1")))
        .await
        .unwrap();
    assert!(matches!(outcome, AcquireOutcome::Busy { position: 1, .. }));
    let other = mode_request(false, None, 60_000);
    store
        .try_acquire(
            &other,
            &LeaseId::generate(),
            Some(&queue_entry("aaaaaaaa:2")),
        )
        .await
        .unwrap();
    // The first call left; its retry comes later with a new entry.
    store
        .leave(&name(), &[queue_entry("aaaaaaaa:1")])
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(5)).await;
    let outcome = store
        .try_acquire(&waiting, &id, Some(&queue_entry("aaaaaaaa:3")))
        .await
        .unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Busy { position: 1, .. }),
        "{outcome:?}"
    );

    assert!(
        store
            .release(&name(), &holder_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let outcome = store
        .try_acquire(&waiting, &id, Some(&queue_entry("aaaaaaaa:3")))
        .await
        .unwrap();
    let AcquireOutcome::Granted(grant) = outcome else {
        panic!("expected the retry granted, got {outcome:?}");
    };
    // Idempotent: asked again, the same grant.
    let again = store.try_acquire(&waiting, &id, None).await.unwrap();
    assert_eq!(again, AcquireOutcome::Granted(grant));
    assert!(
        store
            .release(&name(), &id, &Caller::anyone())
            .await
            .unwrap()
    );
    let late = store.try_acquire(&waiting, &id, None).await.unwrap();
    assert_eq!(late, AcquireOutcome::LeaseIdEnded);
    // A minute later the id may be used again: a new wait, behind the caller still waiting.
    tokio::time::advance(ENDED_LEASE_ID_KEPT).await;
    let outcome = store
        .try_acquire(&waiting, &id, Some(&queue_entry("aaaaaaaa:4")))
        .await
        .unwrap();
    assert!(
        matches!(outcome, AcquireOutcome::Busy { position: 2, .. }),
        "{outcome:?}"
    );
}

/// Two calls waiting with one own lease id (a retry that came while the first call was still
/// waiting): the retry takes the place, and the first call, coming back to it, is told it is
/// over instead of taking it back.
#[tokio::test(start_paused = true)]
async fn a_retry_takes_the_place_of_the_call_it_retries_for_good() {
    let replica = test_replica(16);
    let store = replica.store();
    take(store, &mode_request(false, None, 0)).await;
    let own = "own-lease-id-for-a-test-0002";
    let id = crate::lease::limits::parse_own_lease_id(own).unwrap();
    let waiting = mode_request(false, Some(own), 60_000);
    let first = store
        .try_acquire(&waiting, &id, Some(&queue_entry("0000000a:1")))
        .await
        .unwrap();
    assert!(matches!(first, AcquireOutcome::Busy { position: 1, .. }));
    let retry = store
        .try_acquire(&waiting, &id, Some(&queue_entry("0000000b:1")))
        .await
        .unwrap();
    assert!(
        matches!(retry, AcquireOutcome::Busy { position: 1, .. }),
        "{retry:?}"
    );
    assert_eq!(
        store.queued_here(&name()).await.unwrap(),
        [queue_entry("0000000b:1")]
    );
    let back = store
        .try_acquire(&waiting, &id, Some(&queue_entry("0000000a:1")))
        .await
        .unwrap();
    assert_eq!(back, AcquireOutcome::Superseded);
    assert_eq!(
        store.queued_here(&name()).await.unwrap(),
        [queue_entry("0000000b:1")]
    );
}

/// The entry whose text is `text`.
fn queue_entry(text: &str) -> QueueEntry {
    QueueEntry::parse(text).unwrap()
}
