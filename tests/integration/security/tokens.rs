//! Bearer tokens: they authenticate and authorize every lease RPC, SIGHUP reloads them (open
//! streams included), the names one token and one server may follow are bounded, and a
//! non-loopback listen without auth is refused.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use crate::common::*;
use crate::security::{
    BASE_TOKENS, NEW_TOKEN, PAYMENTS_TOKEN, READER_TOKEN, TokenEntry, acquire_request,
    acquire_with, tokens_file, with_token, write_tokens,
};
use leased::{
    config::ServeConfig,
    proto::{
        AcquireRequest, DescribeRequest, Granted, ReleaseRequest, RenewRequest, RenewResponse,
        WatchEvent, WatchRequest, acquire_response, lease_service_client::LeaseServiceClient,
        renew_response,
    },
};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

/// Every access-control outcome on every RPC: no or unknown token is UNAUTHENTICATED; a name
/// outside the token's prefixes or an operation it lacks is PERMISSION_DENIED; allowed calls work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_authenticate_and_authorize_every_rpc() {
    let redis = RedisServer::start();
    let tokens = tokens_file();
    let config = ServeConfig::from_args([
        "--redis-url".to_owned(),
        redis.url(),
        "--auth-tokens".to_owned(),
        tokens.display().to_string(),
    ])
    .unwrap();
    let server = Leased::start_with(config).await;
    let mut client = server.client().await;

    for token in [None, Some("not-a-known-token-at-all")] {
        let code = |r: Result<(), tonic::Status>| r.unwrap_err().code();
        assert_eq!(
            code(
                client
                    .acquire(with_token(acquire_request("payments/a"), token))
                    .await
                    .map(drop)
            ),
            Code::Unauthenticated
        );
        assert_eq!(
            code(
                client
                    .describe(with_token(
                        DescribeRequest {
                            name: "payments/a".into()
                        },
                        token
                    ))
                    .await
                    .map(drop)
            ),
            Code::Unauthenticated
        );
        let release = ReleaseRequest {
            name: "payments/a".into(),
            lease_id: "x".into(),
        };
        assert_eq!(
            code(client.release(with_token(release, token)).await.map(drop)),
            Code::Unauthenticated
        );
        let renew = tokio_stream::iter(Vec::<RenewRequest>::new());
        assert_eq!(
            code(client.renew(with_token(renew, token)).await.map(drop)),
            Code::Unauthenticated
        );
    }

    // The payments token may do everything under payments/, nothing elsewhere.
    let mut stream = client
        .acquire(with_token(
            acquire_request("payments/ledger"),
            Some(PAYMENTS_TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    let granted = match stream.next().await.unwrap().unwrap().result.unwrap() {
        leased::proto::acquire_response::Result::Granted(granted) => granted,
        other => panic!("{other:?}"),
    };
    let status = client
        .acquire(with_token(
            acquire_request("billing/ledger"),
            Some(PAYMENTS_TOKEN),
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");

    let renewals = vec![
        RenewRequest {
            name: granted.name.clone(),
            lease_id: granted.lease_id.clone(),
            ttl_ms: 0,
        },
        RenewRequest {
            name: "billing/ledger".into(),
            lease_id: granted.lease_id.clone(),
            ttl_ms: 0,
        },
    ];
    let mut responses = client
        .renew(with_token(
            tokio_stream::iter(renewals),
            Some(PAYMENTS_TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    let first = responses.next().await.unwrap().unwrap();
    assert!(matches!(
        first.result,
        Some(renew_response::Result::Renewed(_))
    ));
    assert_eq!(
        responses.next().await.unwrap().unwrap_err().code(),
        Code::PermissionDenied
    );

    // The reader token may describe anything, and do nothing else.
    let described = client
        .describe(with_token(
            DescribeRequest {
                name: "payments/ledger".into(),
            },
            Some(READER_TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(described.held);
    let status = client
        .acquire(with_token(
            acquire_request("payments/other"),
            Some(READER_TOKEN),
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    let release = ReleaseRequest {
        name: granted.name.clone(),
        lease_id: granted.lease_id.clone(),
    };
    let status = client
        .release(with_token(release.clone(), Some(READER_TOKEN)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(
        client
            .release(with_token(release, Some(PAYMENTS_TOKEN)))
            .await
            .unwrap()
            .into_inner()
            .released
    );
}

/// "payments" may use and watch payments/ names, "reader" may describe and watch every name.
const WATCHING_TOKENS: [TokenEntry; 2] = [
    (
        "payments",
        PAYMENTS_TOKEN,
        &["payments/"],
        &["acquire", "renew", "release", "describe", "watch"],
    ),
    ("reader", READER_TOKEN, &[""], &["describe", "watch"]),
];

/// SIGHUP reloads the tokens file: a new token works, a removed one stops working for new calls,
/// and streams opened before the reload lose what the reload took away: a removed token's Renew
/// stream, Watch stream and waiting Acquire end with UNAUTHENTICATED, a token narrowed away from
/// a name gets PERMISSION_DENIED on its Watch of that name, and a token the reload kept keeps
/// renewing on its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reload_applies_to_open_streams() {
    const KEEPER_TOKEN: &str = "keeper-token-0123456789abcd";
    let keeper = (
        "keeper",
        KEEPER_TOKEN,
        &["payments/"][..],
        &["acquire", "renew", "describe"][..],
    );
    let redis = RedisServer::start();
    let tokens = tokens_file();
    let [payments, reader] = WATCHING_TOKENS;
    write_tokens(&tokens, &[payments, reader, keeper]);
    let metrics_port = free_port();
    let server = LeasedProcess::serve()
        .redis(&redis.url())
        .args([
            "--auth-tokens".to_owned(),
            tokens.display().to_string(),
            "--metrics-listen".to_owned(),
            format!("127.0.0.1:{metrics_port}"),
        ])
        .start()
        .await;
    let mut client = server.client().await;

    // Streams of the token the reload removes: a Renew stream holding a lease, a Watch, and an
    // Acquire waiting behind that lease.
    let granted = acquire_with(&mut client, "payments/rotating", PAYMENTS_TOKEN).await;
    let (mut renewals, mut renewed) = open_renew_stream(&mut client, PAYMENTS_TOKEN).await;
    renew_on(&mut renewals, &mut renewed, &granted)
        .await
        .unwrap();
    let mut removed_watch =
        watch_with_token(&mut client, "payments/rotating", PAYMENTS_TOKEN).await;
    let mut waiting = client
        .acquire(with_token(
            AcquireRequest {
                wait_ms: 60_000,
                ..acquire_request("payments/rotating")
            },
            Some(PAYMENTS_TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(
        waiting.next().await.unwrap().unwrap().result,
        Some(acquire_response::Result::Waiting(_))
    ));
    // A Watch of the token the reload narrows to other names.
    let mut narrowed_watch = watch_with_token(&mut client, "payments/rotating", READER_TOKEN).await;
    // A Renew stream of the token the reload keeps.
    let kept = acquire_with(&mut client, "payments/kept", KEEPER_TOKEN).await;
    let (mut kept_renewals, mut kept_renewed) = open_renew_stream(&mut client, KEEPER_TOKEN).await;
    renew_on(&mut kept_renewals, &mut kept_renewed, &kept)
        .await
        .unwrap();

    write_tokens(
        &tokens,
        &[
            (
                "rotated",
                NEW_TOKEN,
                &["payments/"],
                &["acquire", "renew", "release", "describe"],
            ),
            ("reader", READER_TOKEN, &["jobs/"], &["describe", "watch"]),
            keeper,
        ],
    );
    let pid = server.pid().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );

    // Each affected stream ends at once, without a message from its client.
    let within = Duration::from_secs(5);
    let ended = |result: Option<Result<_, tonic::Status>>| match result {
        Some(Err(status)) => status.code(),
        other => panic!("expected the stream to end with an error, got {other:?}"),
    };
    let renew_end = tokio::time::timeout(within, renewed.next()).await.unwrap();
    assert_eq!(ended(renew_end.map(|r| r.map(drop))), Code::Unauthenticated);
    let watch_end = tokio::time::timeout(within, removed_watch.next())
        .await
        .unwrap();
    assert_eq!(ended(watch_end.map(|r| r.map(drop))), Code::Unauthenticated);
    let acquire_end = tokio::time::timeout(within, waiting.next()).await.unwrap();
    assert_eq!(
        ended(acquire_end.map(|r| r.map(drop))),
        Code::Unauthenticated
    );
    let narrowed_end = tokio::time::timeout(within, narrowed_watch.next())
        .await
        .unwrap();
    assert_eq!(
        ended(narrowed_end.map(|r| r.map(drop))),
        Code::PermissionDenied
    );

    // New calls: the new token works, the removed one does not.
    let describe = |token| {
        with_token(
            DescribeRequest {
                name: "payments/rotating".into(),
            },
            Some(token),
        )
    };
    client.describe(describe(NEW_TOKEN)).await.unwrap();
    assert_eq!(
        client
            .describe(describe(PAYMENTS_TOKEN))
            .await
            .unwrap_err()
            .code(),
        Code::Unauthenticated
    );
    // The kept token's stream renews as before.
    renew_on(&mut kept_renewals, &mut kept_renewed, &kept)
        .await
        .expect("the kept token's stream still renews");
    let metrics = scrape_metrics(metrics_port);
    assert_eq!(
        metric_sample(&metrics, "leased_streams_ended_by_reload_total"),
        4.0
    );
}

/// A Renew stream opened with `token`: where to send renewals, and the answers.
async fn open_renew_stream(
    client: &mut LeaseServiceClient<Channel>,
    token: &str,
) -> (
    tokio::sync::mpsc::Sender<RenewRequest>,
    tonic::Streaming<RenewResponse>,
) {
    let (renewals, receiver) = tokio::sync::mpsc::channel(1);
    let responses = client
        .renew(with_token(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
            Some(token),
        ))
        .await
        .unwrap()
        .into_inner();
    (renewals, responses)
}

/// Renews `granted` once on an open stream: Ok if renewed.
async fn renew_on(
    renewals: &mut tokio::sync::mpsc::Sender<RenewRequest>,
    responses: &mut tonic::Streaming<RenewResponse>,
    granted: &Granted,
) -> Result<(), String> {
    renewals
        .send(renewal(granted, 0))
        .await
        .map_err(|_| "stream closed".to_owned())?;
    match responses.next().await {
        Some(Ok(RenewResponse {
            result: Some(renew_response::Result::Renewed(_)),
            ..
        })) => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// A Watch stream of `name` opened with `token`, past its first event.
async fn watch_with_token(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    token: &str,
) -> tonic::Streaming<WatchEvent> {
    let mut events = client
        .watch(with_token(WatchRequest { name: name.into() }, Some(token)))
        .await
        .unwrap()
        .into_inner();
    events.next().await.unwrap().unwrap();
    events
}

/// A token pasted where it does not belong (into `operations`) refuses the tokens file at the
/// start and on a SIGHUP reload with the line and the field, never the token; the reload keeps
/// the tokens in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_file_errors_name_the_line_and_field_never_the_value() {
    const PASTED: &str = "SuperSecretToken-9f8e7d6c5b4a3210";
    let tokens = tokens_file();
    let misplaced = format!(
        "{{ \"tokens\": [\n  {{ \"client\": \"payments\", \"token\": \"{PAYMENTS_TOKEN}\",\n    \
         \"prefixes\": [\"payments/\"], \"operations\": [\"acquire\", \"{PASTED}\"] }} ] }}"
    );
    let refused = |log: &str| {
        assert!(
            log.contains("`operations` must be a list of: acquire, renew")
                && log.contains("line 3"),
            "{log}"
        );
        assert!(!log.contains(PASTED), "{log}");
    };

    std::fs::write(&tokens, &misplaced).unwrap();
    let (status, stderr) = LeasedProcess::serve()
        .args(["--auth-tokens".to_owned(), tokens.display().to_string()])
        .run_to_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{stderr}");
    refused(&stderr);

    write_tokens(&tokens, &BASE_TOKENS);
    let log = tokens.with_extension("log");
    let server = LeasedProcess::serve()
        .args(["--auth-tokens".to_owned(), tokens.display().to_string()])
        .log(Log::File(log.clone()))
        .start()
        .await;
    std::fs::write(&tokens, &misplaced).unwrap();
    server.signal(libc::SIGHUP);
    let reload_failed =
        crate::common::harness::poll_until("the reload to fail", Duration::from_secs(10), || {
            std::fs::read_to_string(&log).is_ok_and(|log| log.contains("not reloaded"))
        });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    reload_failed.unwrap_or_else(|error| panic!("{error}: {text}"));
    refused(&text);
    let mut client = server.client().await;
    acquire_with(&mut client, "payments/after-refused-reload", PAYMENTS_TOKEN).await;
}

/// `leased serve` refuses a non-loopback address without access control, before binding it.
#[test]
fn non_loopback_listen_without_auth_is_refused() {
    let output = LeasedProcess::serve()
        .at("0.0.0.0:0".parse().unwrap())
        .command()
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--insecure-listen"), "{stderr}");
}

/// Distinct names followed by Watch streams and waiting Acquires are bounded per token
/// (`--max-followed-names-per-token`) and per server (`--max-followed-names`): a call that would
/// follow one more answers RESOURCE_EXHAUSTED, while more callers of names already followed are
/// served, and a name whose last follower left makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followed_names_are_bounded_per_token_and_per_server() {
    let redis = RedisServer::start();
    let tokens = tokens_file();
    write_tokens(&tokens, &WATCHING_TOKENS);
    let server = LeasedProcess::serve()
        .redis(&redis.url())
        .args([
            "--auth-tokens".to_owned(),
            tokens.display().to_string(),
            "--max-followed-names".to_owned(),
            "3".to_owned(),
            "--max-followed-names-per-token".to_owned(),
            "2".to_owned(),
        ])
        .start()
        .await;
    let mut client = server.client().await;
    let watch =
        |name: &str, token: &str| with_token(WatchRequest { name: name.into() }, Some(token));

    let first = watch_with_token(&mut client, "payments/1", PAYMENTS_TOKEN).await;
    let _second = watch_with_token(&mut client, "payments/2", PAYMENTS_TOKEN).await;
    let refused = client.watch(watch("payments/3", PAYMENTS_TOKEN)).await;
    let status = refused.expect_err("a third name for one token");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("per-token"), "{status:?}");
    // A waiting Acquire follows its name as a Watch does; a try-once Acquire follows nothing.
    let waiting = client
        .acquire(with_token(
            AcquireRequest {
                wait_ms: 10_000,
                ..acquire_request("payments/3")
            },
            Some(PAYMENTS_TOKEN),
        ))
        .await;
    assert_eq!(
        waiting.err().map(|status| status.code()),
        Some(Code::ResourceExhausted)
    );
    acquire_with(&mut client, "payments/3", PAYMENTS_TOKEN).await;
    let _again = watch_with_token(&mut client, "payments/1", PAYMENTS_TOKEN).await;

    // Another token: its own two names, within the server's three.
    let _third = watch_with_token(&mut client, "jobs/1", READER_TOKEN).await;
    let full = client.watch(watch("jobs/2", READER_TOKEN)).await;
    let status = full.expect_err("a fourth name on the server");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--max-followed-names"),
        "{status:?}"
    );
    let _shared = watch_with_token(&mut client, "payments/2", READER_TOKEN).await;

    // Once both Watch streams of payments/1 end, the name is free: room for the token and the
    // server.
    drop((first, _again));
    let start = Instant::now();
    loop {
        match client.watch(watch("payments/4", PAYMENTS_TOKEN)).await {
            Ok(_) => break,
            Err(status) => assert_eq!(status.code(), Code::ResourceExhausted),
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the freed name never made room"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
