//! What the store keeps in Redis: an expired classic-lock key is taken over, the owner hash keeps
//! the counter (a counting lease hands its counter to it) for the counter keep and then nothing of
//! a name is left, and no lease id is ever written; a foreign key of another type is INTERNAL.

use std::{collections::HashSet, time::Duration};

use crate::common::*;
use crate::redis_store::{grant, name, pttl_ms, request, store_on};
use leased::{
    config::ServeConfig,
    lease::{Caller, LeaseStore},
    proto::{AcquireRequest, acquire_response},
};

/// A classic SETNX lock left by a crashed client (an expiry timestamp in the past, no TTL) is
/// taken over; one whose timestamp is still in the future is busy until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_timestamp_key_without_ttl_is_taken_over() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut client = server.client().await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;

    let stale = (now_ms - 10_000).to_string();
    assert_eq!(redis.command(&["SET", "leased:{legacy}", &stale]), "+OK");
    let granted = must_acquire(&mut client, "legacy", 5_000).await;
    let pttl = pttl_ms(&redis, "leased:{legacy}");
    assert!(
        (1..=5_000).contains(&pttl),
        "the taken-over key has the new TTL: {pttl}"
    );
    assert!(release(&mut client, &granted).await);

    let future = (now_ms + 60_000).to_string();
    assert_eq!(redis.command(&["SET", "leased:{legacy}", &future]), "+OK");
    let messages = acquire_all(&mut client, "legacy", "x", 5_000, 0)
        .await
        .unwrap();
    let [acquire_response::Result::NotGranted(busy)] = messages.as_slice() else {
        panic!("{messages:?}");
    };
    assert!((50_000..=60_000).contains(&busy.remaining_ms), "{busy:?}");
    assert!(describe(&mut client, "legacy").await.held);
}

/// A held exclusive lease is two keys, the lease key and the owner hash (which also holds the
/// name's fencing counter). The hash outlives the lease by the counter keep (10 minutes here): a
/// release leaves the counter alone and
/// the next grant's token is larger; an expired grant's fields stay behind but count only while
/// the lease key holds the grant's expiry, so a classic SETNX lock written later is nobody's, and
/// the next grant does not inherit the old lock-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_hash_keeps_the_counter_and_only_a_live_grants_fields() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let ttl = Duration::from_secs(60);

    let first = grant(&store, &request("layout", "alice", ttl, 1, Duration::ZERO)).await;
    let keys = redis.command(&["KEYS", "leased:{layout}*"]);
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort();
    assert_eq!(keys, ["leased:{layout}", "leased:{layout}:owner"]);
    let owner_ttl_ms = pttl_ms(&redis, "leased:{layout}:owner");
    let keep_ms = 600_000;
    assert!(
        (keep_ms + 59_000..=keep_ms + 60_000).contains(&owner_ttl_ms),
        "the TTL and the keep: {owner_ttl_ms} ms"
    );

    assert!(
        store
            .release(&name("layout"), &first.lease_id, &Caller::anyone())
            .await
            .unwrap()
    );
    let left = redis.command(&["HGETALL", "leased:{layout}:owner"]);
    assert_eq!(left, format!("t\n{}", first.fencing_token));
    let owner_ttl_ms = pttl_ms(&redis, "leased:{layout}:owner");
    assert!(
        (keep_ms - 1_000..=keep_ms).contains(&owner_ttl_ms),
        "the keep after a release: {owner_ttl_ms} ms"
    );
    let second = grant(&store, &request("layout", "bob", ttl, 1, Duration::ZERO)).await;
    assert!(second.fencing_token > first.fencing_token);

    let delayed = request(
        "stale",
        "carol",
        Duration::from_millis(200),
        1,
        Duration::from_millis(300),
    );
    let expired = grant(&store, &delayed).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let later = (now_unix_ms() + 60_000).to_string();
    assert_eq!(redis.command(&["SET", "leased:{stale}", &later]), "+OK");
    let described = store.describe(&name("stale")).await.unwrap();
    let [classic] = described.holders.as_slice() else {
        panic!("{described:?}");
    };
    assert_eq!((classic.holder.as_str(), classic.fencing_token), ("", 0));
    assert_eq!(classic.expiry.map(|expiry| expiry.lock_delay_ms), Some(0));

    redis.command(&["DEL", "leased:{stale}"]);
    let next = grant(&store, &request("stale", "dave", ttl, 1, Duration::ZERO)).await;
    assert!(next.fencing_token > expired.fencing_token);
    let described = store.describe(&name("stale")).await.unwrap();
    let [dave] = described.holders.as_slice() else {
        panic!("{described:?}");
    };
    assert_eq!(
        (dave.holder.as_str(), dave.fencing_token),
        ("dave", next.fencing_token)
    );
    assert_eq!(dave.expiry.map(|expiry| expiry.lock_delay_ms), Some(0));
    let delay = redis.command(&["HEXISTS", "leased:{stale}:owner", "d"]);
    assert_eq!(delay, ":0");
}

/// A counting lease counts its tokens in its holders hash while it holds permits (its grants do
/// not write the owner hash, so a name's permits cost two keys), and hands the counter to the
/// owner hash when its last permit is released: tokens keep increasing from an exclusive lease to
/// a counting one and back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counting_lease_hands_its_counter_to_the_owner_hash() {
    let redis = RedisServer::start();
    let store = store_on(&redis.url(), "leased:").await;
    let ttl = Duration::from_secs(60);
    let exclusive = grant(&store, &request("pool", "solo", ttl, 1, Duration::ZERO)).await;
    assert!(
        store
            .release(&name("pool"), &exclusive.lease_id, &Caller::anyone())
            .await
            .unwrap()
    );

    let first = grant(&store, &request("pool", "a", ttl, 3, Duration::ZERO)).await;
    let second = grant(&store, &request("pool", "b", ttl, 3, Duration::ZERO)).await;
    assert!(exclusive.fencing_token < first.fencing_token);
    assert!(first.fencing_token < second.fencing_token);
    let counted = redis.command(&["HGET", "leased:{pool}:holders", "t"]);
    assert_eq!(counted, second.fencing_token.to_string());

    for permit in [&first, &second] {
        assert!(
            store
                .release(&name("pool"), &permit.lease_id, &Caller::anyone())
                .await
                .unwrap()
        );
    }
    assert_eq!(redis.command(&["EXISTS", "leased:{pool}:holders"]), ":0");
    let kept = redis.command(&["HGET", "leased:{pool}:owner", "t"]);
    assert_eq!(kept, second.fencing_token.to_string());
    let owner_ttl_ms = pttl_ms(&redis, "leased:{pool}:owner");
    assert!(
        (599_000..=600_000).contains(&owner_ttl_ms),
        "the counter keep: {owner_ttl_ms} ms"
    );

    let after = grant(&store, &request("pool", "solo", ttl, 1, Duration::ZERO)).await;
    assert!(second.fencing_token < after.fencing_token);
}

/// A lease key that something other than leased wrote with another type makes the script fail:
/// INTERNAL (retrying will not help), not UNAVAILABLE, and the server keeps serving other names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_key_of_another_type_is_internal_not_unavailable() {
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let mut client = server.client().await;
    assert_eq!(
        redis.command(&["HSET", "leased:{foreign}", "field", "value"]),
        ":1"
    );

    let acquired = acquire(&mut client, "foreign", 5_000, 0).await.unwrap_err();
    assert_eq!(acquired.code(), tonic::Code::Internal, "{acquired:?}");
    let described = client
        .describe(leased::proto::DescribeRequest {
            name: "foreign".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(described.code(), tonic::Code::Internal, "{described:?}");
    must_acquire(&mut client, "domestic", 5_000).await;
}

/// Every string Redis holds under the keys matching `pattern`: string values, hash fields and
/// values, sorted-set members.
fn everything_under(redis: &RedisServer, pattern: &str) -> Vec<String> {
    const DUMP: &str = "local out = {} \
        for _, key in ipairs(redis.call('KEYS', ARGV[1])) do \
          table.insert(out, key) \
          local kind = redis.call('TYPE', key).ok \
          if kind == 'string' then table.insert(out, redis.call('GET', key)) \
          elseif kind == 'hash' then \
            for _, v in ipairs(redis.call('HGETALL', key)) do table.insert(out, v) end \
          elseif kind == 'zset' then \
            for _, v in ipairs(redis.call('ZRANGE', key, 0, -1)) do table.insert(out, v) end \
          end \
        end \
        return out";
    redis
        .command(&["EVAL", DUMP, "0", pattern])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Names acquired once leave nothing in Redis once their grants end and the counter keep passes
/// (`--redis-counter-keep 2s` here; 10 minutes by default), so distinct names cannot grow Redis
/// without bound; and no lease id is ever written to Redis, during the grant or after: 10,000
/// names (every tenth a counting lease) acquired with a 300 ms TTL through the gRPC server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_acquired_once_leave_nothing_and_no_lease_id_is_ever_in_redis() {
    const NAMES: usize = 10_000;
    const CALLERS: usize = 32;
    const TTL_MS: i64 = 300;
    let keep = Duration::from_secs(2);
    let redis = RedisServer::start();
    let config = ServeConfig::from_args([
        "--redis-url".to_owned(),
        redis.url(),
        "--redis-counter-keep".to_owned(),
        "2s".to_owned(),
    ])
    .unwrap();
    let server = Leased::start_with(config).await;
    let started = std::time::Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let mut client = server.client().await;
        callers.spawn(async move {
            let mut lease_ids = Vec::new();
            for index in (caller..NAMES).step_by(CALLERS) {
                let request = AcquireRequest {
                    name: format!("once/{index}"),
                    holder: "once".into(),
                    ttl_ms: TTL_MS,
                    limit: if index % 10 == 0 { 2 } else { 0 },
                    ..Default::default()
                };
                let granted = must_acquire_request(&mut client, request).await;
                lease_ids.push(granted.lease_id);
            }
            lease_ids
        });
    }
    let mut lease_ids = HashSet::new();
    while let Some(ids) = callers.join_next().await {
        lease_ids.extend(ids.unwrap());
    }
    let granting = started.elapsed();
    assert_eq!(lease_ids.len(), NAMES);

    // While some grants still hold and just after the others ended: digests only.
    let held = everything_under(&redis, "leased:{once/*");
    assert!(held.len() > NAMES, "{} strings", held.len());
    let leaked = held.iter().filter(|text| lease_ids.contains(*text)).count();
    assert_eq!(leaked, 0, "lease ids found in Redis");

    // Everything goes: the grants end at their TTL, the counters after the keep, and Redis's
    // expiry cycle reclaims expired keys within a few seconds more.
    let bound = Duration::from_millis(TTL_MS as u64) + keep + Duration::from_secs(20);
    let mut left = usize::MAX;
    while started.elapsed() < granting + bound {
        left = everything_under(&redis, "leased:{once/*").len();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "{NAMES} names granted in {granting:?}; their keys gone {:?} after the last grant",
        started.elapsed() - granting
    );
    assert_eq!(left, 0, "strings still in Redis after {bound:?}");
}

/// Once a name's counter has lapsed (the keep passed), its next token is still larger than any
/// before: the floor of Redis time in microseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_the_counter_lapsed() {
    let redis = RedisServer::start();
    let config = ServeConfig::from_args([
        "--redis-url".to_owned(),
        redis.url(),
        "--redis-counter-keep".to_owned(),
        "200ms".to_owned(),
    ])
    .unwrap();
    let server = Leased::start_with(config).await;
    let mut client = server.client().await;
    let first = must_acquire(&mut client, "lapse", 5_000).await;
    assert!(release(&mut client, &first).await);
    let start = std::time::Instant::now();
    while redis.command(&["EXISTS", "leased:{lapse}:owner"]) != ":0" {
        assert!(start.elapsed() < Duration::from_secs(10), "never lapsed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = must_acquire(&mut client, "lapse", 5_000).await;
    assert!(second.fencing_token > first.fencing_token);
}
