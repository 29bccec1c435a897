//! On the Redis store itself: changes are published only while someone listens, a revoked
//! holder learns the reason for the grant's TTL, and List scans only lease keys under the prefix.

use std::{collections::BTreeSet, time::Duration};

use crate::common::*;
use crate::redis_store::{grant, name, pttl_ms, request, store_on};
use fred::prelude::{Builder, ClientLike, Config, EventInterface, PubsubInterface};
use leased::{
    error::Error,
    lease::{Caller, LeaseGone, LeaseStore, RenewOutcome, Revoked, limits::parse_list_prefix},
    proto::ListRequest,
    store::RedisStore,
};
use tokio::sync::broadcast;
use tonic::Code;

/// Raw messages of the shard channel `channel`, read by a client of our own.
async fn subscribe(url: &str, channel: &str) -> broadcast::Receiver<fred::types::Message> {
    let subscriber = Builder::from_config(Config::from_url(url).unwrap())
        .build_subscriber_client()
        .unwrap();
    subscriber.init().await.unwrap();
    let messages = subscriber.message_rx();
    subscriber.ssubscribe(channel).await.unwrap();
    // The client lives as long as the receiver is read: leak it for the test's duration.
    std::mem::forget(subscriber);
    messages
}

/// The next message's text; panics if none comes within 2 s.
async fn next_message(messages: &mut broadcast::Receiver<fred::types::Message>) -> String {
    let message = tokio::time::timeout(Duration::from_secs(2), messages.recv())
        .await
        .expect("no message within 2 s")
        .unwrap();
    message.value.as_string().unwrap()
}

/// Nothing is published for `duration`.
async fn expect_no_message(
    messages: &mut broadcast::Receiver<fred::types::Message>,
    context: &str,
) {
    if let Ok(message) = tokio::time::timeout(Duration::from_millis(300), messages.recv()).await {
        panic!("{context}: published {message:?}");
    }
}

/// Changes of holder are published on the name's wake channel only while someone subscribes to
/// it, with nothing in Redis to register or keep alive: nothing for a grant and release nobody
/// listens to; with a subscriber, `g` for a grant (exclusive and counting: the limit), `r` for a
/// release and `v` for a revoke (the reason length-prefixed, holders with spaces), nothing for a
/// renewal; and no key but the lease's own is written for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_published_only_while_someone_listens() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let watched = name("watched/job");
    let exclusive = request(
        "watched/job",
        "worker 7 (eu)",
        Duration::from_secs(30),
        1,
        Duration::ZERO,
    );
    assert_eq!(redis.command(&["CONFIG", "RESETSTAT"]), "+OK");
    let granted = grant(&store, &exclusive).await;
    assert!(
        store
            .release(&watched, &granted.lease_id, &Caller::anyone())
            .await
            .unwrap()
    );
    assert_eq!(
        command_calls(redis.port, "spublish"),
        0,
        "a grant and a release nobody listened to were published"
    );

    let mut messages = subscribe(&redis.url(), "leased:{watched/job}:wake").await;

    let granted = grant(&store, &exclusive).await;
    assert_eq!(
        next_message(&mut messages).await,
        format!(
            "g{} 1 30000 {} worker 7 (eu)",
            granted.fencing_token, granted.expires_at_ms
        )
    );
    let RenewOutcome::Renewed { expires_at_ms, .. } = store
        .renew(&watched, &granted.lease_id, None, &Caller::anyone())
        .await
        .unwrap()
    else {
        panic!("not renewed");
    };
    expect_no_message(&mut messages, "a renewal").await;
    assert!(
        store
            .release(&watched, &granted.lease_id, &Caller::anyone())
            .await
            .unwrap()
    );
    assert_eq!(
        next_message(&mut messages).await,
        format!("r{} {expires_at_ms} worker 7 (eu)", granted.fencing_token)
    );

    let granted = grant(&store, &exclusive).await;
    next_message(&mut messages).await;
    let reason = "disk wedged – INC 42";
    let revoked = store.revoke(&watched, None, reason).await.unwrap();
    assert_eq!(revoked.len(), 1);
    assert_eq!(
        next_message(&mut messages).await,
        format!(
            "v{} {} {} {reason}worker 7 (eu)",
            granted.fencing_token,
            granted.expires_at_ms,
            reason.len()
        )
    );

    let counting = request(
        "watched/job",
        "pool",
        Duration::from_secs(30),
        3,
        Duration::ZERO,
    );
    let permit = grant(&store, &counting).await;
    assert_eq!(
        next_message(&mut messages).await,
        format!(
            "g{} 3 30000 {} pool",
            permit.fencing_token, permit.expires_at_ms
        )
    );
    assert!(
        store
            .release(&watched, &permit.lease_id, &Caller::anyone())
            .await
            .unwrap()
    );
    assert_eq!(
        next_message(&mut messages).await,
        format!("r{} {} pool", permit.fencing_token, permit.expires_at_ms)
    );

    let keys = redis.command(&["KEYS", "leased:{watched/job}*"]);
    assert_eq!(
        keys.lines().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "leased:{watched/job}:owner",
            "leased:{watched/job}:revoked",
            // A permit's release ends its lease id for a minute.
            "leased:{watched/job}:ended"
        ]),
        "the keys left once the name is free"
    );
}

/// A revoke ends only a grant that still holds; the revoked holder's renewals answer the reason
/// (even once someone else holds the name) and its release is refused, until the reason is
/// forgotten with the grant's TTL (the `:revoked` hash expires); describe reports each holder's
/// lock-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_holder_learns_the_reason_for_the_grants_ttl() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let job = name("revoked/job");
    let ttl = Duration::from_millis(1_500);
    let first = grant(
        &store,
        &request("revoked/job", "worker 7", ttl, 1, Duration::from_secs(5)),
    )
    .await;
    let described = store.describe(&job).await.unwrap();
    let expiry = described.holders[0].expiry.unwrap();
    assert_eq!(expiry.lock_delay_ms, 5_000);
    assert!((1..=1_500).contains(&expiry.held_ms()), "{expiry:?}");

    let stale = store
        .revoke(&job, Some(first.fencing_token + 1), "wrong grant")
        .await
        .unwrap();
    assert!(stale.is_empty(), "{stale:?}");
    let revoked = store
        .revoke(&job, Some(first.fencing_token), "disk wedged")
        .await
        .unwrap();
    assert_eq!(
        revoked,
        [Revoked {
            fencing_token: first.fencing_token,
            holder: "worker 7".into()
        }]
    );
    let pttl = pttl_ms(&redis, "leased:{revoked/job}:revoked");
    assert!(
        (1..=1_500).contains(&pttl),
        "the reason is kept for the grant's TTL: {pttl}"
    );
    let revoked_because = RenewOutcome::Lost(LeaseGone::Revoked {
        reason: "disk wedged".into(),
    });
    assert_eq!(
        store
            .renew(&job, &first.lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        revoked_because
    );
    assert!(
        !store
            .release(&job, &first.lease_id, &Caller::anyone())
            .await
            .unwrap()
    );

    // Free at once (no lock-delay after a revoke); the next holder's grant does not hide why.
    let second = grant(
        &store,
        &request(
            "revoked/job",
            "worker 8",
            Duration::from_secs(30),
            1,
            Duration::ZERO,
        ),
    )
    .await;
    assert!(second.fencing_token > first.fencing_token);
    assert_eq!(
        store
            .renew(&job, &first.lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        revoked_because
    );

    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    assert_eq!(
        redis.command(&["EXISTS", "leased:{revoked/job}:revoked"]),
        ":0"
    );
    assert_eq!(
        store
            .renew(&job, &first.lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        RenewOutcome::Lost(LeaseGone::HeldByAnother)
    );

    // A counting lease: one permit revoked by its token, the other keeps renewing; each permit's
    // lock-delay is described.
    let pool = name("revoked/pool");
    let permits = [
        grant(
            &store,
            &request(
                "revoked/pool",
                "a",
                Duration::from_secs(30),
                3,
                Duration::from_secs(2),
            ),
        )
        .await,
        grant(
            &store,
            &request(
                "revoked/pool",
                "b",
                Duration::from_secs(30),
                3,
                Duration::from_secs(2),
            ),
        )
        .await,
    ];
    let described = store.describe(&pool).await.unwrap();
    assert_eq!(described.limit, 3);
    assert!(
        described
            .holders
            .iter()
            .all(|holder| holder.expiry.unwrap().lock_delay_ms == 2_000)
    );
    let revoked = store
        .revoke(&pool, Some(permits[1].fencing_token), "b is stuck")
        .await
        .unwrap();
    assert_eq!(
        revoked,
        [Revoked {
            fencing_token: permits[1].fencing_token,
            holder: "b".into()
        }]
    );
    assert!(matches!(
        store
            .renew(&pool, &permits[0].lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(
        store
            .renew(&pool, &permits[1].lease_id, None, &Caller::anyone())
            .await
            .unwrap(),
        RenewOutcome::Lost(LeaseGone::Revoked {
            reason: "b is stuck".into()
        })
    );
}

/// Every page of a store-level listing of `prefix`: the names on each page.
async fn list_names(store: &RedisStore, prefix: &str, page_size: usize) -> Vec<Vec<String>> {
    let prefix = parse_list_prefix(prefix).unwrap();
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = store
            .list(&prefix, page_size, token.as_deref())
            .await
            .unwrap();
        assert!(page.leases.len() <= page_size);
        pages.push(
            page.leases
                .iter()
                .map(|lease| lease.name.to_string())
                .collect(),
        );
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => return pages,
        }
        assert!(pages.len() < 1_000, "the listing does not end");
    }
}

/// Asserts that `pages` hold each of `expected` exactly once, and nothing else.
fn assert_each_once(pages: &[Vec<String>], expected: &BTreeSet<String>, context: &str) {
    let listed: Vec<&String> = pages.iter().flatten().collect();
    let unique: BTreeSet<String> = listed.iter().map(|name| name.to_string()).collect();
    assert_eq!(
        listed.len(),
        unique.len(),
        "{context}: a lease on two pages"
    );
    assert_eq!(&unique, expected, "{context}");
}

/// List finds the held leases under the prefix, each once whatever the page size (a SCAN batch
/// finds more than a page of 1 or 2 holds: the rest come next): exclusive and counting leases and a
/// classic SETNX lock still running; not the keys that are not leases (another key of a lease
/// alone, a name outside the alphabet, a key of another type under a lease's name, a released
/// lease's owner hash, which keeps its fencing counter), nor names outside the prefix. A key
/// prefix with glob characters matches only itself. A page token of another prefix, or not made by this store, is INVALID_ARGUMENT
/// `page_token`, over gRPC too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_scans_only_lease_keys_under_the_prefix() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let ttl = Duration::from_secs(60);
    let mut expected = BTreeSet::new();
    for index in 0..25 {
        let name = format!("jobs/exclusive-{index:02}");
        grant(&store, &request(&name, "h", ttl, 1, Duration::ZERO)).await;
        expected.insert(name);
    }
    for index in 0..5 {
        let name = format!("jobs/pool-{index}");
        for _ in 0..2 {
            grant(&store, &request(&name, "p", ttl, 3, Duration::ZERO)).await;
        }
        expected.insert(name);
    }
    let released = grant(
        &store,
        &request("jobs/released", "h", ttl, 1, Duration::ZERO),
    )
    .await;
    assert!(
        store
            .release(
                &name("jobs/released"),
                &released.lease_id,
                &Caller::anyone()
            )
            .await
            .unwrap()
    );
    grant(&store, &request("jobsx", "h", ttl, 1, Duration::ZERO)).await;
    let later = (now_unix_ms() + 60_000).to_string();
    redis.command(&["SET", "leased:{jobs/classic}", &later]);
    expected.insert("jobs/classic".to_owned());
    for (key, kind) in [
        ("leased:{jobs/owner-only}:owner", "hash"),
        ("leased:{jobs/bad name}", "string"),
        ("leased:{jobs/foreign}", "hash"),
        ("leased:{jobs/suffixed}x", "string"),
        ("leased:{jobs/unclosed", "string"),
        ("other:{jobs/other}", "string"),
    ] {
        match kind {
            "hash" => redis.command(&["HSET", key, "field", "value"]),
            _ => redis.command(&["SET", key, &later]),
        };
    }

    for page_size in [1, 2, 7, 1_000] {
        let pages = list_names(&store, "jobs/", page_size).await;
        assert_each_once(&pages, &expected, &format!("page_size {page_size}"));
    }
    let pools: BTreeSet<String> = expected
        .iter()
        .filter(|name| name.starts_with("jobs/pool"))
        .cloned()
        .collect();
    assert_each_once(
        &list_names(&store, "jobs/pool", 2).await,
        &pools,
        "jobs/pool",
    );
    let everything = list_names(&store, "", 1_000).await;
    assert!(everything.iter().flatten().any(|name| name == "jobsx"));

    // `le*ased[1]:` is not a pattern that also matches `le-ased1:`.
    let globbed = store_on(&redis.url(), "le*ased[1]:").await;
    let lookalike = store_on(&redis.url(), "le-ased1:").await;
    grant(
        &globbed,
        &request("jobs/globbed", "h", ttl, 1, Duration::ZERO),
    )
    .await;
    grant(
        &lookalike,
        &request("jobs/lookalike", "h", ttl, 1, Duration::ZERO),
    )
    .await;
    assert_eq!(
        list_names(&globbed, "jobs/", 100).await.concat(),
        ["jobs/globbed"]
    );
    assert_eq!(
        list_names(&lookalike, "jobs/", 100).await.concat(),
        ["jobs/lookalike"]
    );

    let jobs = parse_list_prefix("jobs/").unwrap();
    let first = store.list(&jobs, 3, None).await.unwrap();
    let token = first.next_page_token.expect("a second page");
    for garbage in [
        "garbage".to_owned(),
        format!("{token}x"),
        token.replacen("r1.", "m1.", 1),
    ] {
        match store.list(&jobs, 3, Some(&garbage)).await {
            Err(Error::InvalidArgument {
                field: "page_token",
                ..
            }) => {}
            other => panic!("{garbage:?}: {other:?}"),
        }
    }
    let other_prefix = parse_list_prefix("jobs/pool").unwrap();
    assert!(matches!(
        store.list(&other_prefix, 3, Some(&token)).await,
        Err(Error::InvalidArgument {
            field: "page_token",
            ..
        })
    ));

    let server = Leased::start(Some(redis.url())).await;
    let mut admin = admin_client(&server.endpoint()).await;
    for (prefix, page_token) in [("jobs/", "garbage"), ("jobs/pool", token.as_str())] {
        let status = admin
            .list(ListRequest {
                prefix: prefix.into(),
                page_size: 3,
                page_token: page_token.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("page_token"), "{status:?}");
    }
    let listed = admin
        .list(ListRequest {
            prefix: "jobs/".into(),
            page_size: 3,
            page_token: token,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.leases.len(), 3);
}

/// The functions of the library on `redis` (`FUNCTION LIST`), by name, with their flags.
fn loaded_functions(redis: &RedisServer) -> Vec<(String, Vec<String>)> {
    use crate::common::harness::redis::Resp;
    let items = |resp: &Resp| match resp {
        Resp::Array(Some(items)) => items.clone(),
        other => panic!("expected an array, got {other}"),
    };
    let mut functions = Vec::new();
    for library in items(&redis.query(&["FUNCTION", "LIST"]).unwrap()) {
        let library = items(&library);
        let field = |name: &str| {
            let at = library.iter().position(|item| item.as_str() == Some(name));
            library[at.unwrap_or_else(|| panic!("no {name} in FUNCTION LIST")) + 1].clone()
        };
        for function in items(&field("functions")) {
            let function = items(&function);
            let field = |name: &str| {
                let at = function.iter().position(|item| item.as_str() == Some(name));
                function[at.unwrap() + 1].clone()
            };
            let flags = items(&field("flags"))
                .iter()
                .map(|flag| flag.as_str().unwrap().to_owned())
                .collect();
            functions.push((field("name").as_str().unwrap().to_owned(), flags));
        }
    }
    functions.sort();
    functions
}

/// The scripts run as Redis Functions (`FCALL`, never `EVALSHA`): one library named after its
/// code's hash, loaded once for a burst of first calls that all found it missing, and loaded
/// again when Redis lost it (`FUNCTION FLUSH`, as after a restart without persistence). Only a
/// grant may be refused over `maxmemory`; the reads are `no-writes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_one_functions_library_loaded_again_when_lost() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    assert_eq!(redis.command(&["CONFIG", "RESETSTAT"]), "+OK");
    let grants = (0..20).map(|n| {
        let store = store.clone();
        async move {
            let job = format!("loaded/job-{n}");
            let request = request(&job, "worker", Duration::from_secs(30), 1, Duration::ZERO);
            grant(&store, &request).await
        }
    });
    futures::future::join_all(grants).await;
    assert_eq!(
        command_calls(redis.port, "function|load"),
        1,
        "20 first calls loaded the library once"
    );
    assert_eq!(command_calls(redis.port, "evalsha"), 0);
    assert!(command_calls(redis.port, "fcall") >= 20);

    let functions = loaded_functions(&redis);
    assert_eq!(functions.len(), 10, "{functions:?}");
    let version = functions[0].0.split('_').nth(1).unwrap().to_owned();
    assert_eq!(version.len(), 12, "{functions:?}");
    let flags = |script: &str| {
        let function = format!("leased_{version}_{script}");
        let found = functions.iter().find(|(name, _)| *name == function);
        found.unwrap_or_else(|| panic!("no {function}")).1.clone()
    };
    assert_eq!(flags("acquire"), Vec::<String>::new());
    for script in ["renew", "release", "leave", "revoke", "purge"] {
        assert_eq!(flags(script), ["allow-oom"], "{script}");
    }
    for script in ["describe", "queued", "status", "replicas"] {
        assert_eq!(flags(script), ["no-writes"], "{script}");
    }

    assert_eq!(redis.command(&["FUNCTION", "FLUSH"]), "+OK");
    let again = request(
        "loaded/again",
        "worker",
        Duration::from_secs(30),
        1,
        Duration::ZERO,
    );
    let granted = grant(&store, &again).await;
    assert!(granted.fencing_token > 0);
    assert_eq!(command_calls(redis.port, "function|load"), 2);
    assert_eq!(loaded_functions(&redis).len(), 10);
}
