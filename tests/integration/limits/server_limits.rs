//! Limits that protect the server: HTTP/2 streams per connection, waiters per name, leases per
//! Renew stream.

use std::time::{Duration, Instant};

use crate::common::*;
use futures::StreamExt as _;
use leased::{
    lease::limits::MAX_NAME_BYTES,
    proto::{
        AcquireRequest, RenewRequest, RenewResponse, acquire_response,
        lease_service_client::LeaseServiceClient, renew_response,
    },
};
use tonic::{Code, Status, transport::Channel};

/// `--max-concurrent-streams`: past the limit on one connection, a well-behaved HTTP/2 client
/// (tonic here, like every generated client) queues the extra call until a stream ends: it is
/// neither refused nor failed. Other connections are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_max_concurrent_streams_wait_for_a_free_stream() {
    const LIMIT: usize = 8;
    let server = Leased::start_with(leased::config::ServeConfig {
        max_concurrent_streams: LIMIT as u32,
        ..test_config(None)
    })
    .await;
    let channel = Channel::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = LeaseServiceClient::new(channel);
    let held = must_acquire(&mut client, "streams/held", 60_000).await;

    let mut open = Vec::new();
    for _ in 0..LIMIT {
        let mut stream = OpenRenewStream::open(&mut client).await;
        stream.renew(&held, 0).await.unwrap();
        open.push(stream);
    }

    let mut queued_client = client.clone();
    let queued = tokio::spawn(async move { describe(&mut queued_client, "streams/held").await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!queued.is_finished(), "a call past the limit did not wait");
    let mut other = server.client().await;
    assert!(
        describe(&mut other, "streams/held").await.held,
        "another connection is served"
    );

    let freed_at = Instant::now();
    drop(open.pop());
    let answer = tokio::time::timeout(Duration::from_secs(5), queued)
        .await
        .expect("the queued call never ran after a stream ended")
        .unwrap();
    assert!(answer.held);
    println!(
        "call past {LIMIT} streams waited, then ran {:?} after a stream ended",
        freed_at.elapsed()
    );
}

/// `--max-waiters-per-name`: one waiter too many is RESOURCE_EXHAUSTED; a try-once Acquire and
/// other names are unaffected; a slot frees when a waiter leaves; both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_past_the_limit_are_resource_exhausted() {
    const LIMIT: usize = 4;
    let redis = RedisServer::start();
    for url in [None, Some(redis.url())] {
        let store = if url.is_some() { "redis" } else { "memory" };
        let server = Leased::start_with(leased::config::ServeConfig {
            max_waiters_per_name: LIMIT,
            ..test_config(url)
        })
        .await;
        let mut client = server.client().await;
        let held = must_acquire(&mut client, "waiters/held", 60_000).await;
        let start_waiter = |mut client: LeaseServiceClient<Channel>, name: &'static str| async move {
            let mut stream = client
                .acquire(AcquireRequest {
                    name: name.into(),
                    holder: "waiter".into(),
                    ttl_ms: 5_000,
                    wait_ms: 60_000,
                    ..Default::default()
                })
                .await?
                .into_inner();
            let first = stream.next().await.expect("stream ended at once")?;
            Ok::<_, Status>((first, stream))
        };
        let mut waiters = Vec::new();
        for _ in 0..LIMIT {
            let (first, stream) = start_waiter(client.clone(), "waiters/held").await.unwrap();
            assert!(matches!(
                first.result,
                Some(acquire_response::Result::Waiting(_))
            ));
            waiters.push(stream);
        }
        let status = start_waiter(client.clone(), "waiters/held")
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{store}: {status:?}"
        );
        assert!(status.message().contains("waiting"), "{store}: {status:?}");

        assert_eq!(
            acquire(&mut client, "waiters/held", 5_000, 0)
                .await
                .unwrap(),
            None,
            "{store}: a try-once Acquire needs no waiter slot"
        );
        must_acquire(&mut client, "waiters/other-name", 5_000).await;

        // A waiter leaves: its slot frees (the server notices the cancelled stream).
        drop(waiters.pop());
        let start = Instant::now();
        let replacement = loop {
            match start_waiter(client.clone(), "waiters/held").await {
                Ok((_, stream)) => break stream,
                Err(status) => {
                    assert_eq!(status.code(), Code::ResourceExhausted);
                    assert!(
                        start.elapsed() < Duration::from_secs(5),
                        "{store}: slot never freed"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        waiters.push(replacement);

        // The holder releases: exactly one waiter is granted.
        assert!(release(&mut client, &held).await);
        let mut granted = 0;
        for stream in &mut waiters {
            let next = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
            if let Ok(Some(Ok(message))) = next
                && matches!(message.result, Some(acquire_response::Result::Granted(_)))
            {
                granted += 1;
            }
        }
        assert_eq!(granted, 1, "{store}: one release, one grant");
    }
}

/// What a renewal answered: "renewed" or "lost".
fn renew_result_kind(answer: &RenewResponse) -> &'static str {
    match answer.result {
        Some(renew_response::Result::Renewed(_)) => "renewed",
        Some(renew_response::Result::Lost(_)) => "lost",
        None => "no result",
    }
}

/// `--max-leases-per-stream` counts leases held at once: a Renew stream renews up to the limit,
/// each as often as it likes; renewing one more while all are held ends the stream with
/// RESOURCE_EXHAUSTED and renews nothing (the refused renewal's TTL is not applied); a new stream
/// can renew it. Both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_stream_past_its_lease_limit_is_resource_exhausted() {
    const LIMIT: usize = 3;
    let redis = RedisServer::start();
    for url in [None, Some(redis.url())] {
        let store = if url.is_some() { "redis" } else { "memory" };
        let server = Leased::start_with(leased::config::ServeConfig {
            max_leases_per_stream: LIMIT,
            ..test_config(url)
        })
        .await;
        let mut client = server.client().await;
        let mut leases = Vec::new();
        for index in 0..=LIMIT {
            let name = format!("per-stream/{store}/{index}");
            leases.push(must_acquire(&mut client, &name, 60_000).await);
        }
        let mut requests: Vec<RenewRequest> =
            leases[..LIMIT].iter().map(|g| renewal(g, 0)).collect();
        requests.push(renewal(&leases[0], 0));
        requests.push(renewal(&leases[LIMIT], 120_000));
        requests.push(renewal(&leases[1], 0));
        let mut responses = client
            .renew(tokio_stream::iter(requests))
            .await
            .unwrap()
            .into_inner();
        for _ in 0..=LIMIT {
            let answer = responses.next().await.unwrap().unwrap();
            assert_eq!(renew_result_kind(&answer), "renewed", "{store}");
        }
        let status = responses.next().await.unwrap().unwrap_err();
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{store}: {status:?}"
        );
        assert!(status.message().contains("at once"), "{store}: {status:?}");
        assert!(
            responses.next().await.is_none(),
            "{store}: the stream ends after the refusal"
        );
        let refused = describe(&mut client, &leases[LIMIT].name).await;
        assert!(
            refused.held && refused.remaining_ms <= 60_000,
            "{store}: the refused renewal was not applied: {refused:?}"
        );

        let answer = renew_once(&mut client, &leases[LIMIT], 0).await.unwrap();
        assert_eq!(renew_result_kind(&answer), "renewed", "{store}");
    }
}

/// A long-lived Renew stream renews many more distinct leases over time than
/// `--max-leases-per-stream`, as long as it holds at most the limit at once. Each round fills the
/// stream and then frees its slots in each way a lease stops being held: released through the
/// Release RPC on this server (on the stream's connection or on another: the slot frees at once),
/// expired and then renewed (answers `lost`), expired and never renewed again (its slot is taken
/// back when the stream is full). After all that, one lease more than the limit held at once is
/// still refused. Both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_stream_renews_more_leases_over_time_than_it_holds_at_once() {
    const LIMIT: usize = 3;
    const ROUNDS: usize = 4;
    /// The TTL set by the renewal of the leases left to lapse, and how long the test waits for
    /// them to lapse (wide: 2 noisy cores).
    const LAPSE_TTL_MS: i64 = 300;
    const LAPSE_WAIT: Duration = Duration::from_millis(1_200);
    let redis = RedisServer::start();
    for url in [None, Some(redis.url())] {
        let store = if url.is_some() { "redis" } else { "memory" };
        let server = Leased::start_with(leased::config::ServeConfig {
            max_leases_per_stream: LIMIT,
            ..test_config(url)
        })
        .await;
        let mut client = server.client().await;
        let mut other_connection = server.client().await;
        let mut stream = OpenRenewStream::open(&mut client).await;
        let mut acquired = 0;
        let mut fresh = async |client: &mut LeaseServiceClient<Channel>| {
            acquired += 1;
            must_acquire(client, &format!("over-time/{store}/{acquired}"), 60_000).await
        };
        let kept = fresh(&mut client).await;
        let mut renewed = vec![kept.name.clone()];
        let renew =
            async |stream: &mut OpenRenewStream, lease: &leased::proto::Granted, ttl_ms: i64| {
                let answer = stream.renew(lease, ttl_ms).await;
                let answer = answer.unwrap_or_else(|status| panic!("{store}: {status:?}"));
                renew_result_kind(&answer)
            };
        assert_eq!(renew(&mut stream, &kept, 0).await, "renewed");

        for round in 0..ROUNDS {
            let released = fresh(&mut client).await;
            let lapsing = fresh(&mut client).await;
            assert_eq!(renew(&mut stream, &released, 0).await, "renewed");
            assert_eq!(renew(&mut stream, &lapsing, LAPSE_TTL_MS).await, "renewed");
            renewed.extend([released.name.clone(), lapsing.name.clone()]);

            // Full: a release through the Release RPC frees a slot at once.
            let releasing_client = match round % 2 {
                0 => &mut client,
                _ => &mut other_connection,
            };
            assert!(release(releasing_client, &released).await, "{store}");
            let next = fresh(&mut client).await;
            assert_eq!(
                renew(&mut stream, &next, 0).await,
                "renewed",
                "{store} round {round}: the released lease's slot"
            );

            // Full again: the lapsing lease's TTL passes.
            tokio::time::sleep(LAPSE_WAIT).await;
            if round % 2 == 0 {
                assert_eq!(renew(&mut stream, &lapsing, 0).await, "lost", "{store}");
            }
            let last = fresh(&mut client).await;
            assert_eq!(
                renew(&mut stream, &last, 0).await,
                "renewed",
                "{store} round {round}: the lapsed lease's slot"
            );
            renewed.extend([next.name.clone(), last.name.clone()]);

            for lease in [&next, &last] {
                assert!(release(&mut client, lease).await, "{store}");
            }
            assert_eq!(renew(&mut stream, &kept, 0).await, "renewed");
        }
        assert!(
            renewed.len() > 4 * LIMIT,
            "{store}: {} distinct leases renewed on one stream",
            renewed.len()
        );

        // Still bounded: with the limit held at once, one more is refused.
        for _ in 1..LIMIT {
            let lease = fresh(&mut client).await;
            assert_eq!(renew(&mut stream, &lease, 0).await, "renewed");
        }
        let one_too_many = fresh(&mut client).await;
        let status = stream.renew(&one_too_many, 0).await.unwrap_err();
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{store}: {status:?}"
        );
    }
}

/// Renewals that answer `lost` never take a slot: a stream sends 200 renewals of distinct
/// 256-byte names with random lease ids (none held), and one of a held lease with the wrong
/// lease id, then still renews the limit of leases held at once; one more is refused. Both
/// stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_renewals_never_take_a_slot() {
    const LIMIT: usize = 3;
    const NEVER_HELD: usize = 200;
    let redis = RedisServer::start();
    for url in [None, Some(redis.url())] {
        let store = if url.is_some() { "redis" } else { "memory" };
        let server = Leased::start_with(leased::config::ServeConfig {
            max_leases_per_stream: LIMIT,
            ..test_config(url)
        })
        .await;
        let mut client = server.client().await;
        let mut stream = OpenRenewStream::open(&mut client).await;
        for index in 0..NEVER_HELD {
            let mut name = format!("never-held/{store}/{index:04}/");
            name.extend(std::iter::repeat_n('x', MAX_NAME_BYTES - name.len()));
            let never_held = leased::proto::Granted {
                name,
                lease_id: leased::lease::LeaseId::generate().expose().to_owned(),
                ..Default::default()
            };
            let answer = stream.renew(&never_held, 0).await.unwrap();
            assert_eq!(renew_result_kind(&answer), "lost", "{store}");
        }
        let mut leases = Vec::new();
        for index in 0..=LIMIT {
            let name = format!("lost-never-counts/{store}/{index}");
            leases.push(must_acquire(&mut client, &name, 60_000).await);
        }
        let wrong_id = leased::proto::Granted {
            lease_id: leased::lease::LeaseId::generate().expose().to_owned(),
            ..leases[0].clone()
        };
        let answer = stream.renew(&wrong_id, 0).await.unwrap();
        assert_eq!(
            renew_result_kind(&answer),
            "lost",
            "{store}: another lease id"
        );

        for lease in &leases[..LIMIT] {
            let answer = stream.renew(lease, 0).await.unwrap();
            assert_eq!(renew_result_kind(&answer), "renewed", "{store}");
        }
        let status = stream.renew(&leases[LIMIT], 0).await.unwrap_err();
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{store}: {status:?}"
        );
    }
}

/// A release through another replica (Redis) is not seen by the stream's replica. A renewal of
/// that lease answers `lost`, which frees its slot at once; a lease the stream does not renew
/// again keeps its slot until the TTL of its last renewal has passed, then frees it. With the
/// embedded store there is no other replica: every release goes through this server and frees the
/// slot at once (`renew_stream_renews_more_leases_over_time_than_it_holds_at_once`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_through_another_replica_frees_the_slot_once_seen_or_expired() {
    const LIMIT: usize = 2;
    /// TTLs set by renewals: long enough that the refusal below comes well before it (2 noisy
    /// cores), and short enough to wait out.
    const STILL_HELD_TTL_MS: i64 = 5_000;
    const EXPIRING_TTL_MS: i64 = 1_000;
    const EXPIRY_WAIT: Duration = Duration::from_millis(2_500);
    let redis = RedisServer::start();
    let here = Leased::start_with(leased::config::ServeConfig {
        max_leases_per_stream: LIMIT,
        ..test_config(Some(redis.url()))
    })
    .await;
    let elsewhere = Leased::start(Some(redis.url())).await;
    let mut client = here.client().await;
    let mut elsewhere_client = elsewhere.client().await;
    let mut acquired = 0;
    let mut fresh = async |client: &mut LeaseServiceClient<Channel>| {
        acquired += 1;
        must_acquire(client, &format!("elsewhere/{acquired}"), 60_000).await
    };
    let renew =
        async |stream: &mut OpenRenewStream, lease: &leased::proto::Granted, ttl_ms: i64| {
            renew_result_kind(&stream.renew(lease, ttl_ms).await.unwrap())
        };
    let kept = fresh(&mut client).await;

    // Renewed after the release elsewhere: `lost`, and the slot frees at once.
    let mut stream = OpenRenewStream::open(&mut client).await;
    let released = fresh(&mut client).await;
    assert_eq!(renew(&mut stream, &kept, 0).await, "renewed");
    assert_eq!(renew(&mut stream, &released, 0).await, "renewed");
    assert!(release(&mut elsewhere_client, &released).await);
    assert_eq!(renew(&mut stream, &released, 0).await, "lost");
    let next = fresh(&mut client).await;
    assert_eq!(renew(&mut stream, &next, 0).await, "renewed");
    drop(stream);

    // Not renewed again: this replica cannot know before the last renewal's TTL passes.
    let mut stream = OpenRenewStream::open(&mut client).await;
    let released = fresh(&mut client).await;
    assert_eq!(renew(&mut stream, &kept, 0).await, "renewed");
    assert_eq!(
        renew(&mut stream, &released, STILL_HELD_TTL_MS).await,
        "renewed"
    );
    assert!(release(&mut elsewhere_client, &released).await);
    let status = stream
        .renew(&fresh(&mut client).await, 0)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");

    // ... and once it has passed, the slot is free.
    let mut stream = OpenRenewStream::open(&mut client).await;
    let released = fresh(&mut client).await;
    assert_eq!(renew(&mut stream, &kept, 0).await, "renewed");
    assert_eq!(
        renew(&mut stream, &released, EXPIRING_TTL_MS).await,
        "renewed"
    );
    assert!(release(&mut elsewhere_client, &released).await);
    tokio::time::sleep(EXPIRY_WAIT).await;
    let next = fresh(&mut client).await;
    assert_eq!(renew(&mut stream, &next, 0).await, "renewed");
}
