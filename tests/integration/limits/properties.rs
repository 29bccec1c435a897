//! Property tests over `leased::lease::limits` and over the store boundary (both stores), and
//! the range checks of `limit` and `lock_delay_ms`.

use std::time::Duration;

use crate::common::*;
use leased::{
    lease::{
        Limits,
        limits::{
            AcquireFields, MAX_HOLDER_BYTES, MAX_LEASE_ID_BYTES, MAX_NAME_BYTES, is_hidden,
            parse_lease_id, parse_name,
        },
    },
    proto::{AcquireRequest, DescribeRequest, ReleaseRequest, acquire_response},
};
use proptest::{prelude::*, test_runner::TestRunner};
use tonic::Code;

fn name_alphabet_char() -> impl Strategy<Value = char> {
    prop::sample::select(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:/@"
            .chars()
            .collect::<Vec<_>>(),
    )
}

/// Names of the documented alphabet and length.
fn valid_name() -> impl Strategy<Value = String> {
    prop::collection::vec(name_alphabet_char(), 1..=MAX_NAME_BYTES)
        .prop_map(|chars| chars.into_iter().collect())
}

/// Any string, often close to the name rules: valid characters plus one foreign character, or
/// too long, or empty.
fn any_name() -> impl Strategy<Value = String> {
    prop_oneof![
        valid_name(),
        any::<String>(),
        (valid_name(), any::<char>(), any::<prop::sample::Index>()).prop_map(
            |(name, foreign, at)| {
                let mut chars: Vec<char> = name.chars().collect();
                chars.insert(at.index(chars.len() + 1), foreign);
                chars.into_iter().collect()
            }
        ),
        prop::collection::vec(name_alphabet_char(), MAX_NAME_BYTES..MAX_NAME_BYTES + 40)
            .prop_map(|chars| chars.into_iter().collect()),
        Just(String::new()),
    ]
}

fn is_documented_name(name: &str) -> bool {
    (1..=MAX_NAME_BYTES).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:/@".contains(c))
}

/// UTF-8 holders up to 256 bytes (multi-byte characters count by their bytes), without control
/// or bidirectional formatting characters.
fn valid_holder() -> impl Strategy<Value = String> {
    let text_char = any::<char>().prop_filter("text", |c| !is_hidden(*c));
    prop::collection::vec(text_char, 0..=MAX_HOLDER_BYTES).prop_map(|chars| {
        let mut holder = String::new();
        for c in chars {
            if holder.len() + c.len_utf8() > MAX_HOLDER_BYTES {
                break;
            }
            holder.push(c);
        }
        holder
    })
}

/// A valid holder with one control, bidirectional formatting or invisible character inserted.
fn holder_with_a_hidden_character() -> impl Strategy<Value = String> {
    let hidden = prop_oneof![
        prop_oneof![0u32..=0x1f, 0x7fu32..=0x9f].prop_map(|c| char::from_u32(c).unwrap()),
        Just('\u{1b}'),
        Just('\n'),
        Just('\0'),
        Just('\u{202e}'),
        Just('\u{2066}'),
        Just('\u{061c}'),
        Just('\u{200b}'),
        Just('\u{feff}'),
        Just('\u{e0041}'),
    ];
    (valid_holder(), hidden, any::<prop::sample::Index>()).prop_map(|(holder, hidden, at)| {
        let mut chars: Vec<char> = holder.chars().collect();
        chars.insert(at.index(chars.len() + 1), hidden);
        let mut holder: String = chars.into_iter().collect();
        while holder.len() > MAX_HOLDER_BYTES {
            let last = holder.char_indices().rev().find(|(_, c)| *c != hidden);
            holder.remove(last.expect("longer than one character").0);
        }
        holder
    })
}

/// Validation accepts exactly the inputs ARCHITECTURE.md, "Limits", allows, and every rejection
/// names its field.
#[test]
fn validation_accepts_exactly_the_documented_inputs() {
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 2_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&any_name(), |name| {
            let parsed = parse_name(&name);
            prop_assert_eq!(parsed.is_ok(), is_documented_name(&name), "{:?}", name);
            if let Err(error) = parsed {
                prop_assert!(error.to_string().starts_with("invalid name"), "{}", error);
            }
            Ok(())
        })
        .unwrap();

    let limits = Limits {
        max_ttl: Duration::from_secs(3_600),
        max_wait: Duration::from_secs(60),
        max_limit: 50,
    };
    let request = (
        valid_name(),
        prop_oneof![
            valid_holder(),
            any::<String>(),
            "[a-z]{250,270}",
            holder_with_a_hidden_character()
        ],
        prop_oneof![
            any::<i64>(),
            -20i64..3_600_020,
            Just(10),
            Just(3_600_000),
            Just(3_600_001)
        ],
        prop_oneof![
            any::<i64>(),
            -20i64..60_020,
            Just(0),
            Just(60_000),
            Just(60_001)
        ],
        prop_oneof![any::<u32>(), 0u32..60, Just(50), Just(51)],
        prop_oneof![
            any::<i64>(),
            -20i64..60_020,
            Just(0),
            Just(60_000),
            Just(60_001)
        ],
    );
    runner
        .run(
            &request,
            |(name, holder, ttl_ms, wait_ms, limit, lock_delay_ms)| {
                let holder_ok = holder.len() <= MAX_HOLDER_BYTES && !holder.chars().any(is_hidden);
                let ttl_ok = (10..=3_600_000).contains(&ttl_ms);
                let wait_ok = (0..=60_000).contains(&wait_ms);
                let limit_ok = limit <= 50;
                let lock_delay_ok = (0..=60_000).contains(&lock_delay_ms);
                let all_ok = holder_ok && ttl_ok && wait_ok && limit_ok && lock_delay_ok;
                let answer = limits.validate_acquire(AcquireFields {
                    name: &name,
                    holder: holder.clone(),
                    ttl_ms,
                    wait_ms,
                    limit,
                    lock_delay_ms,
                    ..AcquireFields::default()
                });
                match answer {
                    Ok(request) => {
                        prop_assert!(all_ok);
                        prop_assert_eq!(request.name.as_str(), name.as_str());
                        prop_assert_eq!(request.holder, holder);
                        prop_assert_eq!(request.ttl.as_millis() as i64, ttl_ms);
                        prop_assert_eq!(request.wait.as_millis() as i64, wait_ms);
                        // 0 and 1 both mean an exclusive lease.
                        prop_assert_eq!(request.limit, limit.max(1));
                        prop_assert_eq!(request.lock_delay.as_millis() as i64, lock_delay_ms);
                    }
                    Err(error) => {
                        // Fields are checked in order: the first bad one is named.
                        let first_bad = [
                            (holder_ok, "invalid holder"),
                            (ttl_ok, "invalid ttl_ms"),
                            (wait_ok, "invalid wait_ms"),
                            (limit_ok, "invalid limit"),
                            (lock_delay_ok, "invalid lock_delay_ms"),
                        ]
                        .into_iter()
                        .find_map(|(ok, message)| (!ok).then_some(message));
                        prop_assert!(!all_ok);
                        let first_bad = first_bad.unwrap();
                        prop_assert!(error.to_string().starts_with(first_bad), "{}", error);
                    }
                }
                let renew = limits.renew_ttl(ttl_ms);
                prop_assert_eq!(renew.is_ok(), ttl_ms == 0 || ttl_ok);
                Ok(())
            },
        )
        .unwrap();

    runner
        .run(
            &prop_oneof![any::<String>(), "[0-9a-f]{0,140}"],
            |lease_id| {
                let ok = (1..=MAX_LEASE_ID_BYTES).contains(&lease_id.len());
                match parse_lease_id(&lease_id) {
                    Ok(parsed) => prop_assert!(ok && parsed.expose() == lease_id),
                    Err(error) => {
                        prop_assert!(!ok);
                        prop_assert!(error.to_string().starts_with("invalid lease_id"));
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}

/// Arbitrary valid names and holders (any UTF-8 text, up to 256 bytes) round-trip through
/// Acquire, Describe and Release on both stores; arbitrary invalid names and holders (too long,
/// or with a control or bidirectional formatting character) are INVALID_ARGUMENT naming the
/// field, on every RPC that takes them.
#[test]
fn arbitrary_requests_round_trip_or_are_refused_naming_the_field() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = RedisServer::start();
    for store in ["memory", "redis"] {
        let (server, client) = runtime.block_on(async {
            let url = (store == "redis").then(|| redis.url());
            let server = Leased::start(url).await;
            let client = server.client().await;
            (server, client)
        });
        let mut runner = TestRunner::new(ProptestConfig {
            cases: 64,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let valid = (valid_name(), valid_holder(), 10i64..600_000);
        runner
            .run(&valid, |(name, holder, ttl_ms)| {
                let mut client = client.clone();
                runtime.block_on(async move {
                    let messages = acquire_all(&mut client, &name, &holder, ttl_ms, 0)
                        .await
                        .map_err(|status| TestCaseError::fail(format!("{store}: {status:?}")))?;
                    let Some(acquire_response::Result::Granted(granted)) = messages.last() else {
                        return Err(TestCaseError::fail(format!("{store}: {messages:?}")));
                    };
                    prop_assert_eq!(&granted.name, &name);
                    prop_assert_eq!(granted.ttl_ms, ttl_ms);
                    let described = describe(&mut client, &name).await;
                    // A 10 ms lease may be gone already; anything longer is still held.
                    if ttl_ms >= 1_000 {
                        prop_assert!(described.held, "{}: {:?}", store, described);
                        prop_assert_eq!(&described.holder, &holder);
                        prop_assert_eq!(described.fencing_token, granted.fencing_token);
                        prop_assert!(described.remaining_ms <= ttl_ms);
                        prop_assert!(release(&mut client, granted).await);
                    } else {
                        release(&mut client, granted).await;
                    }
                    prop_assert!(!describe(&mut client, &name).await.held);
                    Ok(())
                })
            })
            .unwrap();

        let invalid = prop_oneof![
            any_name()
                .prop_filter("invalid names", |name| !is_documented_name(name))
                .prop_map(|name| ("name", name, String::new())),
            "[a-z]{257,300}".prop_map(|holder| ("holder", "valid".to_owned(), holder)),
            holder_with_a_hidden_character().prop_map(|holder| (
                "holder",
                "valid".to_owned(),
                holder
            )),
        ];
        runner
            .run(&invalid, |(field, name, holder)| {
                let mut client = client.clone();
                runtime.block_on(async move {
                    let mut statuses = Vec::new();
                    let acquire = acquire_all(&mut client, &name, &holder, 1_000, 0).await;
                    statuses.push(("Acquire", acquire.err()));
                    if field == "name" {
                        let describe = client
                            .describe(DescribeRequest { name: name.clone() })
                            .await;
                        statuses.push(("Describe", describe.err()));
                        let release = client
                            .release(ReleaseRequest {
                                name: name.clone(),
                                lease_id: "0123".into(),
                            })
                            .await;
                        statuses.push(("Release", release.err()));
                        let renew = renew_once(
                            &mut client,
                            &leased::proto::Granted {
                                name: name.clone(),
                                lease_id: "0123".into(),
                                ..Default::default()
                            },
                            0,
                        )
                        .await;
                        statuses.push(("Renew", renew.err()));
                    }
                    for (rpc, status) in statuses {
                        let Some(status) = status else {
                            return Err(TestCaseError::fail(format!(
                                "{store} {rpc} accepted {name:?} / {holder:?}"
                            )));
                        };
                        prop_assert_eq!(
                            status.code(),
                            Code::InvalidArgument,
                            "{} {}: {:?}",
                            store,
                            rpc,
                            status
                        );
                        prop_assert!(
                            status.message().contains(field),
                            "{} {}: {:?}",
                            store,
                            rpc,
                            status
                        );
                    }
                    Ok(())
                })
            })
            .unwrap();
        drop(client);
        drop(server);
    }
}

/// `limit` above `--max-limit` (default 10,000) and `lock_delay_ms` outside 0 to 60,000 are
/// INVALID_ARGUMENT naming the field, waiting or not, on both stores, and take nothing; the
/// bounds themselves are accepted (limit 0, 1 and 10,000; lock-delay 0 and 60,000); a lower
/// `--max-limit` moves the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_and_lock_delay_out_of_range_are_invalid_argument() {
    let redis = RedisServer::start();
    for url in [None, Some(redis.url())] {
        let store = if url.is_some() { "redis" } else { "memory" };
        let server = Leased::start(url.clone()).await;
        let mut client = server.client().await;
        let base = AcquireRequest {
            name: "bounds".into(),
            holder: "h".into(),
            ttl_ms: 5_000,
            wait_ms: 0,
            ..Default::default()
        };
        let bad = [
            ("limit", 10_001, 0, 0),
            ("limit", u32::MAX, 0, 0),
            ("limit", 10_001, 0, 5_000),
            ("lock_delay_ms", 0, -1, 0),
            ("lock_delay_ms", 0, 60_001, 0),
            ("lock_delay_ms", 3, i64::MIN, 0),
            ("lock_delay_ms", 3, i64::MAX, 0),
            ("lock_delay_ms", 0, -1, 5_000),
        ];
        for (field, limit, lock_delay_ms, wait_ms) in bad {
            let request = AcquireRequest {
                limit,
                lock_delay_ms,
                wait_ms,
                ..base.clone()
            };
            let status = acquire_refusal(&mut client, request.clone()).await;
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{store}: {request:?}: {status:?}"
            );
            assert!(
                status.message().contains(field),
                "{store}: {request:?}: the message does not name {field}: {:?}",
                status.message()
            );
        }
        let described = describe(&mut client, "bounds").await;
        assert!(!described.held, "{store}: a refused request took the name");

        let good = [
            ("bounds/limit-0", 0, 0, 1),
            ("bounds/limit-1", 1, 0, 1),
            ("bounds/limit-max", 10_000, 0, 10_000),
            ("bounds/delay-0", 0, 0, 1),
            ("bounds/delay-max", 0, 60_000, 1),
            ("bounds/both-max", 10_000, 60_000, 10_000),
        ];
        for (name, limit, lock_delay_ms, in_force) in good {
            let request = AcquireRequest {
                name: name.into(),
                limit,
                lock_delay_ms,
                ..base.clone()
            };
            let granted = must_acquire_request(&mut client, request).await;
            let described = describe(&mut client, name).await;
            assert_eq!(described.limit, in_force, "{store} {name}: {described:?}");
            assert!(release(&mut client, &granted).await, "{store} {name}");
            assert!(
                !describe(&mut client, name).await.held,
                "{store} {name}: a release left a lock-delay"
            );
        }
        drop(client);
        drop(server);

        let server = Leased::start_with(leased::config::ServeConfig {
            max_limit: 5,
            ..test_config(url)
        })
        .await;
        let mut client = server.client().await;
        let status = acquire_refusal(
            &mut client,
            AcquireRequest {
                limit: 6,
                ..base.clone()
            },
        )
        .await;
        assert_eq!(status.code(), Code::InvalidArgument, "{store}: {status:?}");
        assert!(status.message().contains("limit"), "{store}: {status:?}");
        let granted = must_acquire_request(
            &mut client,
            AcquireRequest {
                limit: 5,
                ..base.clone()
            },
        )
        .await;
        assert!(release(&mut client, &granted).await);
    }
}
