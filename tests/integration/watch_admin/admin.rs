//! CheckToken, List and Revoke, and INVALID_ARGUMENT naming the field for bad input to each of
//! the four RPCs.

use std::{
    collections::{BTreeMap, HashSet},
    time::{Duration, Instant},
};

use crate::common::*;
use crate::watch_admin::{SOON, expires_at_ms, grant, lost_reason, request};
use futures::future::join_all;
use leased::proto::{
    AcquireRequest, CheckTokenRequest, Granted, ListRequest, RevokeRequest, WatchRequest,
    renew_response,
};
use tonic::Code;

on_both_stores!(
    check_token_is_current_only_while_the_grant_holds,
    list_pages_through_2500_leases_each_exactly_once,
    list_shows_holders_limit_and_waiters,
    revoke_with_a_stale_token_is_refused_and_with_the_right_one_ends_the_lease,
    revoke_frees_at_once_and_leaves_expired_grants_alone,
    revoke_ends_one_permit_or_all,
    bad_input_is_invalid_argument_naming_the_field,
);

/// CheckToken: current for the holder's token (and only it); after release, expiry, revoke: not
/// current, nobody holds it, current token 0. In a lock-delay the grant has expired. A counting
/// lease: each permit's token is current; once released, the largest token held is the current.
async fn check_token_is_current_only_while_the_grant_holds(replicas: &Replicas) {
    const NAME: &str = "check/token";
    let mut client = replicas.client(0).await;
    let mut checker = replicas.client(1).await;
    let mut admin = replicas.admin(1).await;

    let first = grant(&mut client, NAME, "first", 30_000).await;
    let token = first.fencing_token;
    let check = check_token(&mut checker, NAME, token).await;
    assert!(check.current && check.held, "{check:?}");
    assert_eq!(check.current_token, token);
    let check = check_token(&mut checker, NAME, token + 1).await;
    assert!(!check.current && check.held, "{check:?}");
    assert_eq!(check.current_token, token);
    let check = check_token(&mut checker, NAME, token - 1).await;
    assert!(!check.current, "{check:?}");

    assert!(release(&mut client, &first).await);
    let check = check_token(&mut checker, NAME, token).await;
    assert!(
        !check.current && !check.held && check.current_token == 0,
        "released: {check:?}"
    );

    let short = grant(&mut client, NAME, "short", 300).await;
    assert!(
        check_token(&mut checker, NAME, short.fencing_token)
            .await
            .current
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let check = check_token(&mut checker, NAME, short.fencing_token).await;
    assert!(
        !check.current && !check.held && check.current_token == 0,
        "expired: {check:?}"
    );

    let revoked = grant(&mut client, NAME, "revoked", 30_000).await;
    assert!(
        revoke(&mut admin, NAME, "test", revoked.fencing_token)
            .await
            .revoked
    );
    let check = check_token(&mut checker, NAME, revoked.fencing_token).await;
    assert!(
        !check.current && !check.held && check.current_token == 0,
        "revoked: {check:?}"
    );

    const DELAYED: &str = "check/lock-delay";
    let delayed = must_acquire_request(
        &mut client,
        AcquireRequest {
            lock_delay_ms: 5_000,
            ..request(DELAYED, "delayed", 300, 0)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(describe(&mut client, DELAYED).await.held, "the delay runs");
    let check = check_token(&mut checker, DELAYED, delayed.fencing_token).await;
    assert!(
        !check.current && !check.held,
        "in the lock-delay: {check:?}"
    );
    assert_eq!(check.current_token, 0, "{check:?}");

    const COUNTING: &str = "check/counting";
    let one = must_acquire_request(&mut client, request(COUNTING, "one", 30_000, 2)).await;
    let two = must_acquire_request(&mut client, request(COUNTING, "two", 30_000, 2)).await;
    for permit in [&one, &two] {
        let check = check_token(&mut checker, COUNTING, permit.fencing_token).await;
        assert!(check.current && check.held, "{check:?}");
        assert_eq!(check.current_token, permit.fencing_token);
    }
    assert!(release(&mut client, &two).await);
    let check = check_token(&mut checker, COUNTING, two.fencing_token).await;
    assert!(!check.current && check.held, "{check:?}");
    assert_eq!(check.current_token, one.fencing_token, "the largest held");
}

/// Acquires `names` (TTL 60 s) with 8 clients at once: the grants by name.
async fn acquire_all_of(replicas: &Replicas, names: Vec<String>) -> BTreeMap<String, Granted> {
    const CLIENTS: usize = 8;
    let mut shares: Vec<Vec<String>> = vec![Vec::new(); CLIENTS];
    for (index, name) in names.into_iter().enumerate() {
        shares[index % CLIENTS].push(name);
    }
    let mut tasks = Vec::new();
    for (index, share) in shares.into_iter().enumerate() {
        let mut client = replicas.client(index).await;
        tasks.push(tokio::spawn(async move {
            let mut grants = Vec::new();
            for name in share {
                let holder = format!("holder-of-{name}");
                grants.push(grant(&mut client, &name, &holder, 60_000).await);
            }
            grants
        }));
    }
    let mut grants = BTreeMap::new();
    for task in join_all(tasks).await {
        for granted in task.expect("an acquiring task panicked") {
            grants.insert(granted.name.clone(), granted);
        }
    }
    grants
}

/// 2,500 held leases under `list/many/`, next to leases whose names start alike but are not
/// under it and a released one under it: pages of at most 1000 find each of the 2,500 exactly
/// once and nothing else. With the default page size (0: 100), a narrower prefix finds its 100.
/// A page token of one prefix is INVALID_ARGUMENT `page_token` for another.
async fn list_pages_through_2500_leases_each_exactly_once(replicas: &Replicas) {
    const PREFIX: &str = "list/many/";
    const LEASES: usize = 2_500;
    let names: Vec<String> = (0..LEASES).map(|i| format!("{PREFIX}{i:04}")).collect();
    let started = Instant::now();
    let grants = acquire_all_of(replicas, names.clone()).await;
    println!("acquired {LEASES} leases in {:?}", started.elapsed());
    let mut client = replicas.client(0).await;
    for outside in [
        "list/many",
        "list/manyx",
        "list/man/0001",
        "other/list/many/1",
    ] {
        grant(&mut client, outside, "outside", 60_000).await;
    }
    let released = grant(&mut client, "list/many/released", "gone", 60_000).await;
    assert!(release(&mut client, &released).await);

    let mut admin = replicas.admin(1).await;
    let started = Instant::now();
    let pages = list_pages(&mut admin, PREFIX, 1000, 1_000).await;
    let sizes: Vec<usize> = pages.iter().map(|page| page.leases.len()).collect();
    println!(
        "listed {PREFIX} in {} pages of {sizes:?} in {:?}",
        pages.len(),
        started.elapsed()
    );
    assert!(sizes.iter().all(|size| *size <= 1000), "{sizes:?}");
    let mut times_listed: BTreeMap<&str, usize> = BTreeMap::new();
    for lease in pages.iter().flat_map(|page| &page.leases) {
        *times_listed.entry(lease.name.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = times_listed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "listed more than once: {twice:?}");
    let foreign: Vec<_> = times_listed
        .keys()
        .filter(|name| !grants.contains_key(**name))
        .collect();
    assert!(
        foreign.is_empty(),
        "listed but not held under the prefix: {foreign:?}"
    );
    let missing: Vec<_> = names
        .iter()
        .filter(|name| !times_listed.contains_key(name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} held leases not listed, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    for lease in pages.iter().flat_map(|page| &page.leases) {
        let granted = &grants[&lease.name];
        assert_eq!(
            lease.holder,
            format!("holder-of-{}", lease.name),
            "{lease:?}"
        );
        assert_eq!(lease.fencing_token, granted.fencing_token, "{lease:?}");
        assert!(
            lease.remaining_ms > 0 && lease.remaining_ms <= 60_000,
            "{lease:?}"
        );
        assert_eq!(
            lease.expires_at.as_ref().map(timestamp_ms),
            Some(expires_at_ms(granted)),
            "{lease:?}"
        );
        assert_eq!((lease.limit, lease.waiters), (1, 0), "{lease:?}");
        assert_eq!(lease.holders.len(), 1, "{lease:?}");
    }

    let pages = list_pages(&mut admin, "list/many/00", 0, 1_000).await;
    let listed: Vec<&str> = pages
        .iter()
        .flat_map(|page| page.leases.iter().map(|lease| lease.name.as_str()))
        .collect();
    assert!(
        pages.iter().all(|page| page.leases.len() <= 100),
        "page_size 0 means 100"
    );
    assert_eq!(listed.len(), 100, "list/many/0000 to 0099");
    assert_eq!(
        listed.iter().collect::<HashSet<_>>().len(),
        100,
        "each once"
    );

    let first = admin
        .list(ListRequest {
            prefix: PREFIX.into(),
            page_size: 10,
            page_token: String::new(),
        })
        .await
        .expect("List failed")
        .into_inner();
    assert!(!first.next_page_token.is_empty(), "more than 10 to list");
    let status = admin
        .list(ListRequest {
            prefix: "list/other/".into(),
            page_size: 10,
            page_token: first.next_page_token.clone(),
        })
        .await
        .expect_err("a page token of another prefix was accepted");
    assert_invalid(&status, "page_token");

    // Small pages find each lease exactly once too, and (on Redis) every page token carries at
    // most MAX_PENDING_NAMES names found but not listed yet.
    for (prefix, page_size, expected) in [("list/many/00", 1, 100), (PREFIX, 7, LEASES)] {
        let pages = list_pages(&mut admin, prefix, page_size, 5 * expected).await;
        assert!(
            pages
                .iter()
                .all(|page| page.leases.len() <= page_size as usize)
        );
        let mut listed: Vec<&str> = pages
            .iter()
            .flat_map(|page| page.leases.iter().map(|lease| lease.name.as_str()))
            .collect();
        listed.sort_unstable();
        let count = listed.len();
        listed.dedup();
        assert_eq!(
            listed.len(),
            count,
            "a lease listed twice with pages of {page_size}"
        );
        assert_eq!(count, expected, "pages of {page_size} under {prefix}");
        let carried: Vec<usize> = pages
            .iter()
            .filter_map(|page| pending_names(&page.next_page_token))
            .collect();
        println!(
            "{prefix} in {} pages of {page_size}: tokens carried up to {:?} names",
            pages.len(),
            carried.iter().max()
        );
        assert!(
            carried.iter().all(|names| *names <= MAX_PENDING_NAMES),
            "a page token carried more than {MAX_PENDING_NAMES} names: {carried:?}"
        );
        assert_eq!(replicas.on_redis(), !carried.is_empty());
    }

    // A hand-made Redis page token: with more names than a token may carry it is refused before
    // any of them is read; with as many as a token may carry (all held), it lists them.
    let hand_made = |names: usize| {
        let pending: Vec<String> = (0..names).map(|i| format!("l{PREFIX}{i:04}")).collect();
        format!("r1.{}...{}", hex(PREFIX), hex(&pending.join(" ")))
    };
    let status = admin
        .list(ListRequest {
            prefix: PREFIX.into(),
            page_size: 1,
            page_token: hand_made(MAX_PENDING_NAMES + 1),
        })
        .await
        .expect_err("a page token with too many names was accepted");
    assert_invalid(&status, "page_token");
    let most = admin
        .list(ListRequest {
            prefix: PREFIX.into(),
            page_size: 100,
            page_token: hand_made(MAX_PENDING_NAMES),
        })
        .await;
    if replicas.on_redis() {
        let page = most
            .expect("a page token with as many names as allowed")
            .into_inner();
        assert_eq!(page.leases.len(), MAX_PENDING_NAMES);
        assert!(page.next_page_token.is_empty());
    } else {
        assert_invalid(&most.expect_err("not this store's token"), "page_token");
    }
}

/// The most names found but not listed yet that a page token of the Redis store carries
/// (`MAX_PENDING_NAMES` in src/store/redis/list.rs).
const MAX_PENDING_NAMES: usize = 32;

/// Text as lowercase hex, as page tokens spell their parts.
fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// How many names a Redis page token (`r1.<prefix>.<slot>.<cursor>.<hex names>`) carries; `None`
/// for another store's token or none.
fn pending_names(token: &str) -> Option<usize> {
    let fields: Vec<&str> = token.split('.').collect();
    let ["r1", _, _, _, names] = fields.as_slice() else {
        return None;
    };
    let bytes: Vec<u8> = (0..names.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(&names[index..index + 2], 16).unwrap())
        .collect();
    Some(
        String::from_utf8(bytes)
            .unwrap()
            .split(' ')
            .filter(|name| !name.is_empty())
            .count(),
    )
}

/// A counting lease is listed once with every permit and its limit, fields 2 to 5 being the
/// smallest token's; a lease with a waiter says so; a lease in its lock-delay is still listed.
async fn list_shows_holders_limit_and_waiters(replicas: &Replicas) {
    let mut client = replicas.client(0).await;
    let mut waiter_client = replicas.client(1).await;
    let one = must_acquire_request(&mut client, request("show/counting", "one", 30_000, 3)).await;
    let two = must_acquire_request(&mut client, request("show/counting", "two", 30_000, 3)).await;
    grant(&mut client, "show/waited", "busy", 30_000).await;
    let (_waiting, _) = start_waiting(&mut waiter_client, "show/waited", "patient", 30_000).await;
    must_acquire_request(
        &mut client,
        AcquireRequest {
            lock_delay_ms: 10_000,
            ..request("show/delayed", "late", 200, 0)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    let mut admin = replicas.admin(1).await;
    let pages = list_pages(&mut admin, "show/", 0, 100).await;
    let leases: BTreeMap<&str, _> = pages
        .iter()
        .flat_map(|page| &page.leases)
        .map(|lease| (lease.name.as_str(), lease))
        .collect();
    assert_eq!(
        leases.keys().copied().collect::<Vec<_>>(),
        ["show/counting", "show/delayed", "show/waited"]
    );
    let counting = leases["show/counting"];
    assert_eq!(counting.limit, 3, "{counting:?}");
    assert_eq!(
        counting
            .holders
            .iter()
            .map(|h| (h.holder.as_str(), h.fencing_token))
            .collect::<Vec<_>>(),
        [("one", one.fencing_token), ("two", two.fencing_token)]
    );
    assert_eq!(
        (counting.holder.as_str(), counting.fencing_token),
        ("one", one.fencing_token)
    );
    let waited = leases["show/waited"];
    assert_eq!(
        (waited.holder.as_str(), waited.waiters),
        ("busy", 1),
        "{waited:?}"
    );
    let delayed = leases["show/delayed"];
    assert!(delayed.remaining_ms > 0, "the delay runs: {delayed:?}");
}

/// A holder holds the name, two waiters wait in line. Revoke with the token of an earlier grant:
/// refused, nothing changes. With the holder's token: revoked; its Renew answers lost "revoked:
/// <reason>" and its Release false; the first waiter is granted with a larger token while the
/// second moves up; revoking whoever holds it (token 0) hands it to the second. Revoking a free
/// lease revokes nothing.
async fn revoke_with_a_stale_token_is_refused_and_with_the_right_one_ends_the_lease(
    replicas: &Replicas,
) {
    const NAME: &str = "revoke/fifo";
    let mut client = replicas.client(0).await;
    let mut admin = replicas.admin(1).await;
    let stale = grant(&mut client, NAME, "stale", 30_000).await;
    assert!(release(&mut client, &stale).await);
    let holder = grant(&mut client, NAME, "holder", 30_000).await;
    let mut w1_client = replicas.client(1).await;
    let mut w2_client = replicas.client(0).await;
    let (mut w1, first) = start_waiting(&mut w1_client, NAME, "w1", 30_000).await;
    assert_eq!(first.position, 1);
    let (mut w2, first) = start_waiting(&mut w2_client, NAME, "w2", 30_000).await;
    assert_eq!(first.position, 2);

    let refused = revoke(&mut admin, NAME, "stale token", stale.fencing_token).await;
    assert!(!refused.revoked, "{refused:?}");
    assert_eq!(refused.fencing_token, 0, "{refused:?}");
    let described = describe(&mut client, NAME).await;
    assert_eq!(described.fencing_token, holder.fencing_token, "still held");
    still_waiting_for(&mut w1, Duration::from_millis(300)).await;

    let reason = "holder wedged on host-a (ticket OPS-42)";
    let revoked = revoke(&mut admin, NAME, reason, holder.fencing_token).await;
    assert!(revoked.revoked, "{revoked:?}");
    assert_eq!(revoked.fencing_token, holder.fencing_token);
    let lost = lost_reason(&mut client, &holder).await;
    assert!(lost.starts_with("revoked"), "{lost}");
    assert!(lost.contains(reason), "{lost}");
    assert!(
        !release(&mut client, &holder).await,
        "a revoked holder's release ends nothing"
    );

    let (_, terminal) = read_to_terminal(&mut w1, SOON).await;
    let w1_granted = match terminal {
        leased::proto::acquire_response::Result::Granted(granted) => granted,
        other => panic!("w1: expected granted, got {other:?}"),
    };
    assert!(w1_granted.fencing_token > holder.fencing_token);
    wait_for_position(&mut w2, 1, SOON).await;

    let revoked = revoke(&mut admin, NAME, "whoever holds it", 0).await;
    assert!(revoked.revoked, "{revoked:?}");
    assert_eq!(revoked.fencing_token, w1_granted.fencing_token);
    let (_, terminal) = read_to_terminal(&mut w2, SOON).await;
    let w2_granted = match terminal {
        leased::proto::acquire_response::Result::Granted(granted) => granted,
        other => panic!("w2: expected granted, got {other:?}"),
    };
    assert!(w2_granted.fencing_token > w1_granted.fencing_token);
    assert!(
        lost_reason(&mut w1_client, &w1_granted)
            .await
            .contains("whoever holds it")
    );
    assert!(release(&mut w2_client, &w2_granted).await);

    let nothing = revoke(&mut admin, NAME, "nobody holds it", 0).await;
    assert!(
        !nothing.revoked && nothing.fencing_token == 0,
        "{nothing:?}"
    );
}

/// A revoked lease with a lock-delay is free at once (no delay after a revoke). A grant whose TTL
/// passed and whose lock-delay runs has expired: Revoke, by its token or whoever holds it, ends
/// nothing and the delay goes on.
async fn revoke_frees_at_once_and_leaves_expired_grants_alone(replicas: &Replicas) {
    let mut client = replicas.client(0).await;
    let mut other = replicas.client(1).await;
    let mut admin = replicas.admin(1).await;

    const DELAYED: &str = "revoke/no-delay";
    let held = must_acquire_request(
        &mut client,
        AcquireRequest {
            lock_delay_ms: 60_000,
            ..request(DELAYED, "delayed", 30_000, 0)
        },
    )
    .await;
    assert!(
        revoke(&mut admin, DELAYED, "free it", held.fencing_token)
            .await
            .revoked
    );
    let next = grant(&mut other, DELAYED, "next", 30_000).await;
    assert!(next.fencing_token > held.fencing_token);

    const EXPIRED: &str = "revoke/expired";
    let expired = must_acquire_request(
        &mut client,
        AcquireRequest {
            lock_delay_ms: 5_000,
            ..request(EXPIRED, "expired", 200, 0)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for token in [expired.fencing_token, 0] {
        let answer = revoke(&mut admin, EXPIRED, "too late", token).await;
        assert!(!answer.revoked, "token {token}: {answer:?}");
    }
    let described = describe(&mut client, EXPIRED).await;
    assert!(described.held, "the lock-delay still runs: {described:?}");
    assert_eq!(
        acquire(&mut other, EXPIRED, 1_000, 0).await.unwrap(),
        None,
        "the delay was not ended by the refused revoke"
    );
}

/// A counting lease of 3 with 3 permits: revoking one by its token frees one permit (a newcomer
/// gets it), the others renew; revoking with token 0 ends every permit and answers the largest
/// token; each revoked holder's renewal is lost with the reason.
async fn revoke_ends_one_permit_or_all(replicas: &Replicas) {
    const NAME: &str = "revoke/counting";
    let mut client = replicas.client(0).await;
    let mut admin = replicas.admin(1).await;
    let mut permits = Vec::new();
    for index in 0..3 {
        let holder = format!("permit-{index}");
        permits.push(must_acquire_request(&mut client, request(NAME, &holder, 30_000, 3)).await);
    }
    let revoked = revoke(&mut admin, NAME, "one", permits[0].fencing_token).await;
    assert!(revoked.revoked && revoked.fencing_token == permits[0].fencing_token);
    assert!(lost_reason(&mut client, &permits[0]).await.contains("one"));
    for permit in &permits[1..] {
        let renewed = renew_once(&mut client, permit, 0).await.unwrap();
        assert!(
            matches!(renewed.result, Some(renew_response::Result::Renewed(_))),
            "{renewed:?}"
        );
    }
    let newcomer = must_acquire_request(&mut client, request(NAME, "newcomer", 30_000, 3)).await;
    assert!(newcomer.fencing_token > permits[2].fencing_token);

    let revoked = revoke(&mut admin, NAME, "all of them", 0).await;
    assert!(revoked.revoked, "{revoked:?}");
    assert_eq!(revoked.fencing_token, newcomer.fencing_token, "the largest");
    for permit in [&permits[1], &permits[2], &newcomer] {
        let reason = lost_reason(&mut client, permit).await;
        assert!(
            reason.starts_with("revoked") && reason.contains("all of them"),
            "{reason}"
        );
    }
    let described = describe(&mut client, NAME).await;
    assert!(
        !described.held && described.holders.is_empty(),
        "{described:?}"
    );
}

fn assert_invalid(status: &tonic::Status, field: &str) {
    assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
    assert!(
        status.message().starts_with(&format!("invalid {field}")),
        "the message names {field}: {status:?}"
    );
}

/// Every RPC refuses bad input with INVALID_ARGUMENT naming the field: an empty or malformed
/// name (all four), CheckToken's token 0, List's prefix (characters outside the name alphabet,
/// 257 bytes), page_size 1001 and a page token it never made, Revoke's missing, over-long or
/// control-character reason.
async fn bad_input_is_invalid_argument_naming_the_field(replicas: &Replicas) {
    let mut client = replicas.client(0).await;
    let mut admin = replicas.admin(1).await;
    for name in ["", "bad name", "x*", &"n".repeat(257)] {
        let status = watch_refusal(
            &mut client,
            tonic::Request::new(WatchRequest { name: name.into() }),
        )
        .await;
        assert_invalid(&status, "name");
        let status = client
            .check_token(CheckTokenRequest {
                name: name.into(),
                fencing_token: 1,
            })
            .await
            .unwrap_err();
        assert_invalid(&status, "name");
        let status = admin
            .revoke(RevokeRequest {
                name: name.into(),
                reason: "why".into(),
                fencing_token: 0,
            })
            .await
            .unwrap_err();
        assert_invalid(&status, "name");
    }
    let status = client
        .check_token(CheckTokenRequest {
            name: "bad/input".into(),
            fencing_token: 0,
        })
        .await
        .unwrap_err();
    assert_invalid(&status, "fencing_token");

    let list = |prefix: &str, page_size: u32, page_token: &str| ListRequest {
        prefix: prefix.into(),
        page_size,
        page_token: page_token.into(),
    };
    let long_prefix = "p".repeat(257);
    for prefix in [
        "bad prefix",
        "jobs/*",
        "jobs/?",
        "jobs/[a]",
        "é",
        "a\nb",
        &long_prefix,
    ] {
        let status = admin.list(list(prefix, 10, "")).await.unwrap_err();
        assert_invalid(&status, "prefix");
    }
    assert!(admin.list(list(&"p".repeat(256), 10, "")).await.is_ok());
    let status = admin.list(list("jobs/", 1001, "")).await.unwrap_err();
    assert_invalid(&status, "page_size");
    assert!(admin.list(list("jobs/", 1000, "")).await.is_ok());
    for garbage in ["garbage", "m1.zz", "r1.", "\u{1b}[2J", &"A".repeat(5_000)] {
        let status = admin.list(list("jobs/", 10, garbage)).await.unwrap_err();
        assert_invalid(&status, "page_token");
    }

    let revoke = |reason: &str| RevokeRequest {
        name: "bad/input".into(),
        reason: reason.into(),
        fencing_token: 0,
    };
    for reason in [
        "",
        "\u{1b}[31mred",
        "line\nbreak",
        "a\u{202e}b",
        &"r".repeat(257),
    ] {
        let status = admin.revoke(revoke(reason)).await.unwrap_err();
        assert_invalid(&status, "reason");
    }
    let fine = admin.revoke(revoke(&"r".repeat(256))).await.unwrap();
    assert!(!fine.into_inner().revoked, "nobody holds bad/input");
}
