//! A caller's own lease id is bound to the token that made its grant: another token that may use
//! the same names is refused (PERMISSION_DENIED) when it retries the Acquire, renews or releases
//! it, on both stores, and the grant stays its maker's.

use leased::{
    config::ServeConfig,
    proto::{AcquireRequest, Granted, ReleaseRequest, RenewResponse, renew_response},
};
use tokio_stream::StreamExt;
use tonic::Code;

use crate::common::*;
use crate::security::{
    BASE_TOKENS, PAYMENTS_TOKEN, TokenEntry, tokens_file, with_token, write_tokens,
};

/// A second token under the same prefix and operations as "payments".
const OTHER_TOKEN: &str = "payments-other-token-987654";

/// A lease id chosen by the caller, in the test's own words (random enough to be accepted).
const OWN_ID: &str = "aB3dE5gH7jK9mN1pQ2rS4tUv";

/// `leased serve` with the two tokens: on Redis (two replicas on one redis-server) or embedded.
async fn servers(redis: Option<&RedisServer>) -> Vec<Leased> {
    let tokens = tokens_file();
    let other: TokenEntry = (
        "payments-other",
        OTHER_TOKEN,
        &["payments/"],
        &["acquire", "renew", "release", "describe"],
    );
    write_tokens(&tokens, &[BASE_TOKENS[0], BASE_TOKENS[1], other]);
    let mut args = vec!["--auth-tokens".to_owned(), tokens.display().to_string()];
    if let Some(redis) = redis {
        args.extend(["--redis-url".to_owned(), redis.url()]);
    }
    let config = || ServeConfig::from_args(args.clone()).unwrap();
    match redis {
        Some(_) => vec![
            Leased::start_with(config()).await,
            Leased::start_with(config()).await,
        ],
        None => vec![Leased::start_with(config()).await],
    }
}

fn own_id_request(name: &str, shared: bool, ttl_ms: i64) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: "h".into(),
        ttl_ms,
        shared,
        lease_id: OWN_ID.into(),
        ..Default::default()
    }
}

/// The first answer of an Acquire made with `token`: the grant, or the status.
async fn acquire_as(
    server: &Leased,
    request: AcquireRequest,
    token: &str,
) -> Result<Granted, tonic::Status> {
    let mut stream = server
        .client()
        .await
        .acquire(with_token(request, Some(token)))
        .await?
        .into_inner();
    match stream.next().await.expect("no answer")?.result {
        Some(leased::proto::acquire_response::Result::Granted(granted)) => Ok(granted),
        other => panic!("not granted: {other:?}"),
    }
}

async fn renew_as(
    server: &Leased,
    granted: &Granted,
    ttl_ms: i64,
    token: &str,
) -> Result<RenewResponse, tonic::Status> {
    let renewals = tokio_stream::iter([renewal(granted, ttl_ms)]);
    let mut answers = server
        .client()
        .await
        .renew(with_token(renewals, Some(token)))
        .await?
        .into_inner();
    answers.next().await.expect("no answer")
}

async fn release_as(
    server: &Leased,
    granted: &Granted,
    token: &str,
) -> Result<bool, tonic::Status> {
    let request = ReleaseRequest {
        name: granted.name.clone(),
        lease_id: granted.lease_id.clone(),
    };
    let response = server
        .client()
        .await
        .release(with_token(request, Some(token)))
        .await?;
    Ok(response.into_inner().released)
}

/// The reproduction, for an exclusive grant and a shared one: "payments" holds with its
/// own id; "payments-other" sends the same id (shared, a 5 s TTL), renews it to 60 s and releases
/// it: each is PERMISSION_DENIED naming `lease_id`, through either replica. The maker's renewal
/// still renews, its retry is answered the grant, and its release ends it.
async fn another_token_cannot_use_a_grant_of_an_own_id(redis: Option<&RedisServer>) {
    let servers = servers(redis).await;
    let other_server = &servers[servers.len() - 1];
    for shared in [false, true] {
        let name = format!("payments/own-bound-{shared}");
        let granted = acquire_as(
            &servers[0],
            own_id_request(&name, shared, 30_000),
            PAYMENTS_TOKEN,
        )
        .await
        .unwrap();
        let denied = |result: Result<(), tonic::Status>, what: &str| {
            let status = result.expect_err(what);
            assert_eq!(status.code(), Code::PermissionDenied, "{what}: {status:?}");
            assert!(status.message().contains("lease_id"), "{what}: {status:?}");
        };
        for server in &servers {
            let takeover = own_id_request(&name, true, 5_000);
            denied(
                acquire_as(server, takeover, OTHER_TOKEN).await.map(drop),
                "Acquire",
            );
            denied(
                renew_as(server, &granted, 60_000, OTHER_TOKEN)
                    .await
                    .map(drop),
                "Renew",
            );
            denied(
                release_as(server, &granted, OTHER_TOKEN).await.map(drop),
                "Release",
            );
        }
        let renewed = renew_as(other_server, &granted, 0, PAYMENTS_TOKEN)
            .await
            .unwrap();
        match renewed.result {
            Some(renew_response::Result::Renewed(renewed)) => {
                assert_eq!(renewed.fencing_token, granted.fencing_token);
                assert_eq!(renewed.ttl_ms, 30_000, "the other token's TTL was applied");
            }
            other => panic!("the maker's renewal: {other:?}"),
        }
        let again = acquire_as(
            other_server,
            own_id_request(&name, shared, 30_000),
            PAYMENTS_TOKEN,
        )
        .await
        .unwrap();
        assert_eq!(again.fencing_token, granted.fencing_token);
        assert!(
            release_as(other_server, &granted, PAYMENTS_TOKEN)
                .await
                .unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_token_cannot_use_a_grant_of_an_own_id_on_redis() {
    let redis = RedisServer::start();
    another_token_cannot_use_a_grant_of_an_own_id(Some(&redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_token_cannot_use_a_grant_of_an_own_id_embedded() {
    another_token_cannot_use_a_grant_of_an_own_id(None).await;
}
