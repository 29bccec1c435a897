//! Bearer tokens: they authenticate and authorize every lease RPC, SIGHUP reloads them without
//! dropping streams, and a non-loopback listen without auth is refused.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use crate::common::*;
use crate::{
    NEW_TOKEN, PAYMENTS_TOKEN, READER_TOKEN, acquire_request, tokens_file, with_token, write_tokens,
};
use leased::{
    config::ServeConfig,
    proto::{DescribeRequest, ReleaseRequest, RenewRequest, renew_response},
};
use tokio_stream::StreamExt;
use tonic::Code;

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

/// SIGHUP reloads the tokens file: a new token works, a removed one stops working for new calls,
/// and a Renew stream opened with the removed token keeps being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_tokens_without_dropping_streams() {
    let redis = RedisServer::start();
    let tokens = tokens_file();
    let server = LeasedProcess::serve()
        .redis(&redis.url())
        .args(["--auth-tokens", &tokens.display().to_string()])
        .start()
        .await;
    let mut client = server.client().await;
    let mut stream = client
        .acquire(with_token(
            acquire_request("payments/rotating"),
            Some(PAYMENTS_TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    let granted = match stream.next().await.unwrap().unwrap().result.unwrap() {
        leased::proto::acquire_response::Result::Granted(granted) => granted,
        other => panic!("{other:?}"),
    };
    let (renewals, receiver) = tokio::sync::mpsc::channel(1);
    let mut responses = client
        .renew(with_token(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
            Some(PAYMENTS_TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    let renewal = renewal(&granted, 0);
    renewals.send(renewal.clone()).await.unwrap();
    assert!(responses.next().await.unwrap().is_ok());

    write_tokens(
        &tokens,
        &[(
            "rotated",
            NEW_TOKEN,
            &["payments/"],
            &["acquire", "renew", "release", "describe"],
        )],
    );
    let pid = server.pid().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let start = Instant::now();
    loop {
        let describe = with_token(
            DescribeRequest {
                name: "payments/rotating".into(),
            },
            Some(NEW_TOKEN),
        );
        if client.describe(describe).await.is_ok() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the new token never worked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let describe = with_token(
        DescribeRequest {
            name: "payments/rotating".into(),
        },
        Some(PAYMENTS_TOKEN),
    );
    assert_eq!(
        client.describe(describe).await.unwrap_err().code(),
        Code::Unauthenticated
    );

    renewals.send(renewal).await.unwrap();
    let response = responses
        .next()
        .await
        .unwrap()
        .expect("the open stream survives the reload");
    assert!(matches!(
        response.result,
        Some(renew_response::Result::Renewed(_))
    ));
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
