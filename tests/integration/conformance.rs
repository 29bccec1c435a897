//! The lease contract, run against both stores: every scenario below runs once on the embedded
//! store and once on a real redis-server, through a real gRPC client over TCP.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::common::*;
use leased::proto::{
    AcquireRequest, DescribeRequest, ReleaseRequest, RenewRequest, acquire_response, renew_response,
};
use tokio_stream::StreamExt;
use tonic::Code;

/// A server on one store, plus the redis-server behind it when there is one.
struct Backend {
    leased: Leased,
    _redis: Option<RedisServer>,
}

impl Backend {
    async fn memory() -> Self {
        Backend {
            leased: Leased::start(None).await,
            _redis: None,
        }
    }

    async fn redis() -> Self {
        let redis = RedisServer::start();
        Backend {
            leased: Leased::start(Some(redis.url())).await,
            _redis: Some(redis),
        }
    }
}

/// Generates one test per scenario and store: `memory::NAME` and `redis::NAME`, each in a
/// [`steady_turn`](crate::common::steady_turn).
macro_rules! on_both_stores {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    let _turn = crate::common::steady_turn().await;
                    super::$scenario(&super::Backend::memory().await.leased).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    let _turn = crate::common::steady_turn().await;
                    super::$scenario(&super::Backend::redis().await.leased).await;
                }
            )*
        }
    };
}

on_both_stores!(
    grant_describe_release,
    busy_lease_answers_not_granted_at_once,
    tokens_strictly_increase_over_1000_grants,
    concurrent_clients_never_overlap_and_tokens_follow_grant_order,
    expired_lease_is_taken_over_and_the_old_holder_has_lost_it,
    renewals_keep_a_short_lease_alive,
    one_renew_stream_serves_several_leases_in_order,
    renew_after_release_answers_lost,
    waiter_is_granted_right_after_release,
    waiter_is_granted_at_the_holders_expiry,
    wait_timeout_ends_in_not_granted,
    cancelled_waiter_never_holds_the_lease,
    every_bad_input_is_invalid_argument_naming_the_field,
);

/// A grant carries a secret lease id, a token and an expiry; Describe shows the holder (never the
/// id); Release is idempotent.
async fn grant_describe_release(server: &Leased) {
    let mut client = server.client().await;
    let messages = acquire_all(&mut client, "orders/writer", "host-a", 5_000, 0)
        .await
        .unwrap();
    let [acquire_response::Result::Granted(granted)] = messages.as_slice() else {
        panic!("expected exactly one granted message, got {messages:?}");
    };
    assert_eq!(granted.name, "orders/writer");
    assert_eq!(granted.lease_id.len(), 32, "128 bits, hex");
    assert!(granted.lease_id.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(granted.fencing_token > 0);
    assert_eq!(granted.ttl_ms, 5_000);
    assert!(granted.expires_at.is_some());

    let described = describe(&mut client, "orders/writer").await;
    assert!(described.held);
    assert_eq!(described.holder, "host-a");
    assert_eq!(described.fencing_token, granted.fencing_token);
    assert!(
        (4_000..=5_000).contains(&described.remaining_ms),
        "{described:?}"
    );
    assert_eq!(described.expires_at, granted.expires_at);

    assert!(
        release(&mut client, granted).await,
        "first release ends the lease"
    );
    assert!(
        !release(&mut client, granted).await,
        "second release is a no-op"
    );
    let described = describe(&mut client, "orders/writer").await;
    assert!(!described.held);
    assert_eq!(described.fencing_token, 0);
}

/// With wait_ms = 0, a busy lease ends the stream with not_granted describing the holder.
async fn busy_lease_answers_not_granted_at_once(server: &Leased) {
    let mut client = server.client().await;
    let first = must_acquire(&mut client, "busy", 10_000).await;
    let messages = acquire_all(&mut client, "busy", "other", 10_000, 0)
        .await
        .unwrap();
    let [acquire_response::Result::NotGranted(not_granted)] = messages.as_slice() else {
        panic!("expected exactly one not_granted, got {messages:?}");
    };
    assert_eq!(not_granted.holder, "test");
    assert_eq!(not_granted.fencing_token, first.fencing_token);
    assert!((0..=10_000).contains(&not_granted.remaining_ms));
}

/// 1,000 grants of one name carry strictly increasing tokens.
async fn tokens_strictly_increase_over_1000_grants(server: &Leased) {
    let mut client = server.client().await;
    let mut previous = 0;
    for _ in 0..1_000 {
        let granted = must_acquire(&mut client, "counter", 5_000).await;
        assert!(
            granted.fencing_token > previous,
            "token {} after {previous}",
            granted.fencing_token
        );
        previous = granted.fencing_token;
        assert!(release(&mut client, &granted).await);
    }
}

/// 16 clients contend for 3 names and write to a fenced resource while they hold a lease: no two
/// holders of a name overlap, every holder's write is accepted, and each name's tokens increase in
/// the order of its grants, so a resource keeping the highest token refuses every earlier holder.
async fn concurrent_clients_never_overlap_and_tokens_follow_grant_order(server: &Leased) {
    const CLIENTS: usize = 16;
    const GRANTS_PER_CLIENT: usize = 12;
    let names = ["shard-a", "shard-b", "shard-c"];
    let resource = Arc::new(FencedResource::default());
    let holders: Arc<Mutex<HashMap<&str, usize>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let rejected_holder_writes = Arc::new(AtomicUsize::new(0));
    let granted_tokens: Arc<Mutex<Vec<(&str, u64)>>> = Arc::default();

    let mut tasks = Vec::new();
    for client_index in 0..CLIENTS {
        let mut client = server.client().await;
        let (resource, holders, overlaps, rejected, tokens) = (
            resource.clone(),
            holders.clone(),
            overlaps.clone(),
            rejected_holder_writes.clone(),
            granted_tokens.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for round in 0..GRANTS_PER_CLIENT {
                let name = names[(client_index + round) % names.len()];
                let granted = acquire(&mut client, name, 10_000, 30_000)
                    .await
                    .unwrap()
                    .expect("a 30 s wait ends in a grant");
                {
                    let mut holders = holders.lock().unwrap();
                    let count = holders.entry(name).or_default();
                    *count += 1;
                    if *count > 1 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                if !resource.write(name, granted.fencing_token) {
                    rejected.fetch_add(1, Ordering::SeqCst);
                }
                tokens.lock().unwrap().push((name, granted.fencing_token));
                tokio::time::sleep(Duration::from_millis(2)).await;
                *holders.lock().unwrap().get_mut(name).unwrap() -= 1;
                assert!(release(&mut client, &granted).await);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }

    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders overlapped");
    assert_eq!(rejected_holder_writes.load(Ordering::SeqCst), 0);
    // A name's holders record their tokens one after the other (each before it releases), so
    // the record is the grant order: every token must be above all earlier ones. That is what
    // makes a resource keeping the highest token refuse every earlier holder (writing old
    // tokens to this test's own resource would only test the resource).
    let tokens = granted_tokens.lock().unwrap();
    assert_eq!(tokens.len(), CLIENTS * GRANTS_PER_CLIENT);
    for name in names {
        let of_name: Vec<u64> = tokens.iter().filter(|t| t.0 == name).map(|t| t.1).collect();
        assert!(!of_name.is_empty(), "{name} was never granted");
        for pair in of_name.windows(2) {
            assert!(
                pair[0] < pair[1],
                "{name}: token {} granted after {}: grant order is not token order",
                pair[1],
                pair[0]
            );
        }
    }
}

/// After the TTL passes without renewal, another client takes the lease with a larger token; the
/// old holder's renew answers lost and its release false.
async fn expired_lease_is_taken_over_and_the_old_holder_has_lost_it(server: &Leased) {
    let mut client = server.client().await;
    let old = must_acquire(&mut client, "expiring", 200).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let new = must_acquire(&mut client, "expiring", 10_000).await;
    assert!(new.fencing_token > old.fencing_token);

    let renewed = renew_once(&mut client, &old, 0).await.unwrap();
    match renewed.result {
        Some(renew_response::Result::Lost(lost)) => {
            assert_eq!(lost.reason, "held by another holder")
        }
        other => panic!("old holder renewed: {other:?}"),
    }
    assert!(!release(&mut client, &old).await);
    let described = describe(&mut client, "expiring").await;
    assert_eq!(
        described.fencing_token, new.fencing_token,
        "the new holder kept it"
    );
}

/// Renewing every 100 ms keeps a 300 ms lease alive for 1.5 s; ttl_ms 0 keeps the granted TTL.
async fn renewals_keep_a_short_lease_alive(server: &Leased) {
    let mut client = server.client().await;
    let granted = must_acquire(&mut client, "kept-alive", 300).await;
    let mut stream = OpenRenewStream::open(&mut client).await;
    let mut other = server.client().await;
    for round in 0..15 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let response = stream.renew(&granted, 0).await.unwrap();
        let Some(renew_response::Result::Renewed(renewed)) = response.result else {
            panic!("round {round}: lease lost: {response:?}");
        };
        assert_eq!(renewed.fencing_token, granted.fencing_token);
        assert_eq!(renewed.ttl_ms, 300, "ttl_ms 0 keeps the granted TTL");
        assert_eq!(
            acquire(&mut other, "kept-alive", 300, 0).await.unwrap(),
            None
        );
    }
    let response = stream.renew(&granted, 5_000).await.unwrap();
    let Some(renew_response::Result::Renewed(renewed)) = response.result else {
        panic!("lease lost: {response:?}");
    };
    assert_eq!(renewed.ttl_ms, 5_000, "a new TTL replaces the granted one");
    assert!(describe(&mut other, "kept-alive").await.remaining_ms > 4_000);
}

/// Several leases share one Renew stream; each request gets one answer, in order, naming its lease.
async fn one_renew_stream_serves_several_leases_in_order(server: &Leased) {
    let mut client = server.client().await;
    let a = must_acquire(&mut client, "multi-a", 5_000).await;
    let b = must_acquire(&mut client, "multi-b", 5_000).await;
    let requests: Vec<RenewRequest> = [&a, &b, &a, &b, &a]
        .iter()
        .map(|g| RenewRequest {
            name: g.name.clone(),
            lease_id: g.lease_id.clone(),
            ttl_ms: 0,
        })
        .collect();
    let responses: Vec<_> = client
        .renew(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner()
        .collect::<Result<_, _>>()
        .await
        .unwrap();
    let names: Vec<&str> = responses.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["multi-a", "multi-b", "multi-a", "multi-b", "multi-a"]
    );
    assert!(
        responses
            .iter()
            .all(|r| matches!(r.result, Some(renew_response::Result::Renewed(_))))
    );
}

/// A renewal after release answers lost ("expired or released"), never re-acquires.
async fn renew_after_release_answers_lost(server: &Leased) {
    let mut client = server.client().await;
    let granted = must_acquire(&mut client, "released", 5_000).await;
    assert!(release(&mut client, &granted).await);
    let response = renew_once(&mut client, &granted, 0).await.unwrap();
    match response.result {
        Some(renew_response::Result::Lost(lost)) => assert_eq!(lost.reason, "expired or released"),
        other => panic!("renewed a released lease: {other:?}"),
    }
    assert!(!describe(&mut client, "released").await.held);
}

/// A blocked waiter first hears `waiting` (the holder and its token), then gets the lease within
/// milliseconds of the release: 20 rounds, median printed.
async fn waiter_is_granted_right_after_release(server: &Leased) {
    let mut holder_client = server.client().await;
    let mut handoffs = Vec::new();
    for _ in 0..20 {
        let held = must_acquire(&mut holder_client, "handoff", 30_000).await;
        let mut waiter_client = server.client().await;
        let (mut stream, waiting) =
            start_waiting(&mut waiter_client, "handoff", "waiter", 20_000).await;
        assert_eq!(waiting.fencing_token, held.fencing_token);
        assert_eq!(waiting.holder, "test");

        assert!(release(&mut holder_client, &held).await);
        let released_at = Instant::now();
        let terminal = next_result(&mut stream).await;
        let handoff = released_at.elapsed();
        let acquire_response::Result::Granted(granted) = terminal else {
            panic!("expected granted, got {terminal:?}");
        };
        assert!(granted.fencing_token > held.fencing_token);
        assert!(stream.next().await.is_none(), "granted is terminal");
        handoffs.push(handoff);
        assert!(release(&mut waiter_client, &granted).await);
    }
    handoffs.sort();
    println!(
        "handoff after release: median {:?}, max {:?} over 20",
        handoffs[10], handoffs[19]
    );
    // Push wake-ups take about a millisecond; the bound only guards against polling or a lost wake-up.
    assert!(handoffs[10] < Duration::from_millis(250), "{handoffs:?}");
}

/// A waiter is woken by a timer at the holder's expiry when the holder neither renews nor releases.
async fn waiter_is_granted_at_the_holders_expiry(server: &Leased) {
    let mut client = server.client().await;
    let held = must_acquire(&mut client, "abandoned", 400).await;
    let start = Instant::now();
    let granted = acquire(&mut client, "abandoned", 5_000, 10_000)
        .await
        .unwrap()
        .expect("granted after the holder's expiry");
    let waited = start.elapsed();
    assert!(granted.fencing_token > held.fencing_token);
    assert!(
        waited >= Duration::from_millis(250),
        "granted before expiry: {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "woken late: {waited:?}");
}

/// A wait that runs out streams waiting, then not_granted, and not before wait_ms.
async fn wait_timeout_ends_in_not_granted(server: &Leased) {
    let mut client = server.client().await;
    let held = must_acquire(&mut client, "long-held", 30_000).await;
    let start = Instant::now();
    let messages = acquire_all(&mut client, "long-held", "impatient", 5_000, 300)
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "gave up early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "gave up late: {waited:?}");
    match messages.as_slice() {
        [
            acquire_response::Result::Waiting(_),
            acquire_response::Result::NotGranted(not_granted),
        ] => assert_eq!(not_granted.fencing_token, held.fencing_token),
        other => panic!("expected waiting then not_granted, got {other:?}"),
    }
}

/// A waiter whose call is cancelled does not take the lease when it is released later.
async fn cancelled_waiter_never_holds_the_lease(server: &Leased) {
    let mut client = server.client().await;
    for _ in 0..5 {
        let held = must_acquire(&mut client, "cancelled", 30_000).await;
        let mut waiter = server.client().await;
        let (stream, _) = start_waiting(&mut waiter, "cancelled", "gives-up", 20_000).await;
        drop(stream);
        drop(waiter);
        tokio::time::sleep(Duration::from_millis(100)).await;

        assert!(release(&mut client, &held).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let described = describe(&mut client, "cancelled").await;
        assert!(
            !described.held,
            "a cancelled waiter holds the lease: {described:?}"
        );
    }
}

/// Every input limit of ARCHITECTURE.md, "Limits", on every RPC that takes the field:
/// INVALID_ARGUMENT with the field's name, and the server keeps serving.
async fn every_bad_input_is_invalid_argument_naming_the_field(server: &Leased) {
    let mut client = server.client().await;
    let ok_acquire = AcquireRequest {
        name: "valid".into(),
        holder: "h".into(),
        ttl_ms: 1_000,
        wait_ms: 0,
        ..Default::default()
    };
    let long_name = "n".repeat(257);
    let bad_acquires = [
        (
            "name",
            AcquireRequest {
                name: String::new(),
                ..ok_acquire.clone()
            },
        ),
        (
            "name",
            AcquireRequest {
                name: long_name.clone(),
                ..ok_acquire.clone()
            },
        ),
        (
            "name",
            AcquireRequest {
                name: "has space".into(),
                ..ok_acquire.clone()
            },
        ),
        (
            "name",
            AcquireRequest {
                name: "tag{x}".into(),
                ..ok_acquire.clone()
            },
        ),
        (
            "holder",
            AcquireRequest {
                holder: "h".repeat(257),
                ..ok_acquire.clone()
            },
        ),
        (
            "ttl_ms",
            AcquireRequest {
                ttl_ms: 0,
                ..ok_acquire.clone()
            },
        ),
        (
            "ttl_ms",
            AcquireRequest {
                ttl_ms: 9,
                ..ok_acquire.clone()
            },
        ),
        (
            "ttl_ms",
            AcquireRequest {
                ttl_ms: -5,
                ..ok_acquire.clone()
            },
        ),
        (
            "ttl_ms",
            AcquireRequest {
                ttl_ms: 86_400_001,
                ..ok_acquire.clone()
            },
        ),
        (
            "wait_ms",
            AcquireRequest {
                wait_ms: -1,
                ..ok_acquire.clone()
            },
        ),
        (
            "wait_ms",
            AcquireRequest {
                wait_ms: 600_001,
                ..ok_acquire.clone()
            },
        ),
    ];
    // Holders that read as another (or as nothing): zero-width and format characters, a line
    // separator, a byte order mark, a tag character, a Hangul filler.
    let invisible_holders = [
        "ops\u{200B}-host",
        "a\u{2028}b",
        "\u{FEFF}host",
        "host\u{E0041}",
        "host\u{00AD}a",
        "\u{3164}",
    ]
    .map(|holder| {
        let request = AcquireRequest {
            holder: holder.into(),
            ..ok_acquire.clone()
        };
        ("holder", request)
    });
    for (field, request) in bad_acquires.into_iter().chain(invisible_holders) {
        let status = match client.acquire(request.clone()).await {
            Err(status) => status,
            Ok(response) => response.into_inner().next().await.unwrap().unwrap_err(),
        };
        assert_invalid(&status, field, &format!("Acquire {request:?}"));
    }

    let ok_renew = RenewRequest {
        name: "valid".into(),
        lease_id: "0123".into(),
        ttl_ms: 0,
    };
    let bad_renews = [
        (
            "name",
            RenewRequest {
                name: String::new(),
                ..ok_renew.clone()
            },
        ),
        (
            "name",
            RenewRequest {
                name: long_name.clone(),
                ..ok_renew.clone()
            },
        ),
        (
            "lease_id",
            RenewRequest {
                lease_id: String::new(),
                ..ok_renew.clone()
            },
        ),
        (
            "lease_id",
            RenewRequest {
                lease_id: "x".repeat(129),
                ..ok_renew.clone()
            },
        ),
        (
            "ttl_ms",
            RenewRequest {
                ttl_ms: 9,
                ..ok_renew.clone()
            },
        ),
        (
            "ttl_ms",
            RenewRequest {
                ttl_ms: -1,
                ..ok_renew.clone()
            },
        ),
        (
            "ttl_ms",
            RenewRequest {
                ttl_ms: 86_400_001,
                ..ok_renew.clone()
            },
        ),
    ];
    for (field, request) in bad_renews {
        let mut responses = client
            .renew(tokio_stream::iter([request.clone()]))
            .await
            .unwrap()
            .into_inner();
        let status = responses.next().await.unwrap().unwrap_err();
        assert_invalid(&status, field, &format!("Renew {request:?}"));
    }

    let bad_releases = [
        (
            "name",
            ReleaseRequest {
                name: "bad name".into(),
                lease_id: "0123".into(),
            },
        ),
        (
            "lease_id",
            ReleaseRequest {
                name: "valid".into(),
                lease_id: String::new(),
            },
        ),
        (
            "lease_id",
            ReleaseRequest {
                name: "valid".into(),
                lease_id: "x".repeat(129),
            },
        ),
    ];
    for (field, request) in bad_releases {
        let status = client.release(request.clone()).await.unwrap_err();
        assert_invalid(&status, field, &format!("Release {request:?}"));
    }
    for name in [String::new(), long_name, "bad name".into()] {
        let status = client.describe(DescribeRequest { name }).await.unwrap_err();
        assert_invalid(&status, "name", "Describe");
    }

    // Boundaries are accepted, and the server still serves.
    let edge = AcquireRequest {
        name: "n".repeat(256),
        holder: "h".repeat(256),
        ttl_ms: 10,
        wait_ms: 0,
        ..Default::default()
    };
    let messages = acquire_all(&mut client, &edge.name, &edge.holder, edge.ttl_ms, 0)
        .await
        .unwrap();
    assert!(matches!(messages[0], acquire_response::Result::Granted(_)));
    must_acquire(&mut client, "still-serving", 1_000).await;
}

fn assert_invalid(status: &tonic::Status, field: &str, request: &str) {
    assert_eq!(
        status.code(),
        Code::InvalidArgument,
        "{request}: {status:?}"
    );
    assert!(
        status.message().contains(field),
        "{request}: message {:?} does not name {field}",
        status.message()
    );
}
