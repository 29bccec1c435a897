//! The admin RPCs' operations: Watch, CheckToken, List and Revoke each need theirs; each Revoke
//! writes one audit warning naming the caller (its token, or the mTLS subject without one).

use std::{path::PathBuf, time::Duration};

use crate::common::*;
use crate::security::{
    BASE_TOKENS, CLIENT_SAN, PAYMENTS_TOKEN, Pki, READER_TOKEN, acquire_request, acquire_with,
    tokens_file, with_token, write_tokens,
};
use leased::{
    config::ServeConfig,
    proto::{
        AcquireRequest, CheckTokenRequest, DescribeRequest, ListRequest, ReleaseRequest,
        RenewRequest, RevokeRequest, WatchRequest,
        lease_admin_service_client::LeaseAdminServiceClient,
        lease_service_client::LeaseServiceClient, renew_response, watch_event::Cause,
    },
};
use tokio_stream::StreamExt;
use tonic::{Code, transport::Channel};

const OPERATOR_TOKEN: &str = "operator-token-0123456789ab";
const OBSERVER_TOKEN: &str = "observer-token-0123456789ab";

/// The tokens of [`tokens_file`], and two for the new operations: "operator" may list, revoke,
/// watch, check and describe under payments/; "observer" may watch, check and list everything,
/// but not revoke.
fn admin_tokens_file() -> PathBuf {
    let path = tokens_file();
    let mut tokens = BASE_TOKENS.to_vec();
    tokens.extend_from_slice(&[
        (
            "operator",
            OPERATOR_TOKEN,
            &["payments/"],
            &["list", "revoke", "watch", "check", "describe"],
        ),
        (
            "observer",
            OBSERVER_TOKEN,
            &[""],
            &["watch", "check", "list"],
        ),
    ]);
    write_tokens(&path, &tokens);
    path
}

type AdminClient = LeaseAdminServiceClient<Channel>;

async fn watch_with(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    token: Option<&str>,
) -> Result<leased::proto::WatchEvent, tonic::Status> {
    let mut events = client
        .watch(with_token(WatchRequest { name: name.into() }, token))
        .await?
        .into_inner();
    match tokio::time::timeout(Duration::from_secs(5), events.next()).await {
        Ok(Some(event)) => event,
        other => panic!("Watch {name}: no first event: {other:?}"),
    }
}

async fn check_with(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    fencing_token: u64,
    token: Option<&str>,
) -> Result<leased::proto::CheckTokenResponse, tonic::Status> {
    let request = CheckTokenRequest {
        name: name.into(),
        fencing_token,
    };
    Ok(client
        .check_token(with_token(request, token))
        .await?
        .into_inner())
}

async fn list_with(
    admin: &mut AdminClient,
    prefix: &str,
    token: Option<&str>,
) -> Result<leased::proto::ListResponse, tonic::Status> {
    let request = ListRequest {
        prefix: prefix.into(),
        page_size: 100,
        page_token: String::new(),
    };
    Ok(admin.list(with_token(request, token)).await?.into_inner())
}

async fn revoke_with(
    admin: &mut AdminClient,
    name: &str,
    fencing_token: u64,
    token: Option<&str>,
) -> Result<leased::proto::RevokeResponse, tonic::Status> {
    let request = RevokeRequest {
        name: name.into(),
        reason: "security test".into(),
        fencing_token,
    };
    Ok(admin.revoke(with_token(request, token)).await?.into_inner())
}

/// Over `channel`, acquires `name` and revokes it, without a token.
async fn hold_and_revoke(channel: Channel, name: &str) {
    let mut client = LeaseServiceClient::new(channel.clone());
    let mut admin = AdminClient::new(channel);
    let held = must_acquire(&mut client, name, 30_000).await;
    let revoked = revoke_with(&mut admin, name, held.fencing_token, None)
        .await
        .unwrap();
    assert!(revoked.revoked);
}

fn code_of<T: std::fmt::Debug>(result: Result<T, tonic::Status>) -> Code {
    match result {
        Ok(answer) => panic!("expected a refusal, got {answer:?}"),
        Err(status) => status.code(),
    }
}

/// Watch, CheckToken, List and Revoke under access control: without a valid token each is
/// UNAUTHENTICATED; each needs its own operation (a token with acquire/renew/release/describe
/// gets PERMISSION_DENIED on all four, and only a token naming `revoke` may revoke, whatever its
/// prefixes); List's prefix must lie within one of the token's prefixes. Every refusal, on every
/// RPC, is counted in `leased_rpc_requests_total` with its code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_check_list_and_revoke_need_their_operations() {
    let redis = RedisServer::start();
    let metrics_port = free_port();
    let config = ServeConfig::from_args([
        "--redis-url".to_owned(),
        redis.url(),
        "--auth-tokens".to_owned(),
        admin_tokens_file().display().to_string(),
        "--metrics-listen".to_owned(),
        format!("127.0.0.1:{metrics_port}"),
    ])
    .unwrap();
    let server = Leased::start_with(config).await;
    let before = scrape_metrics(metrics_port);
    let mut client = server.client().await;
    let mut admin = admin_client(&server.endpoint()).await;
    const LEDGER: &str = "payments/ledger";
    let held = acquire_with(&mut client, LEDGER, PAYMENTS_TOKEN).await;

    for token in [None, Some("not-a-known-token-at-all")] {
        let unauthenticated = Code::Unauthenticated;
        assert_eq!(
            code_of(watch_with(&mut client, LEDGER, token).await),
            unauthenticated
        );
        assert_eq!(
            code_of(check_with(&mut client, LEDGER, held.fencing_token, token).await),
            unauthenticated
        );
        assert_eq!(
            code_of(list_with(&mut admin, "", token).await),
            unauthenticated
        );
        assert_eq!(
            code_of(revoke_with(&mut admin, LEDGER, 0, token).await),
            unauthenticated
        );
        let release = ReleaseRequest {
            name: LEDGER.into(),
            lease_id: "x".into(),
        };
        assert_eq!(
            code_of(client.release(with_token(release, token)).await),
            unauthenticated
        );
    }

    // Tokens without the operations: denied, on a name within their prefixes.
    for token in [PAYMENTS_TOKEN, READER_TOKEN] {
        let denied = Code::PermissionDenied;
        assert_eq!(
            code_of(watch_with(&mut client, LEDGER, Some(token)).await),
            denied,
            "{token}"
        );
        assert_eq!(
            code_of(check_with(&mut client, LEDGER, held.fencing_token, Some(token)).await),
            denied,
            "{token}"
        );
        assert_eq!(
            code_of(list_with(&mut admin, "payments/", Some(token)).await),
            denied,
            "{token}"
        );
        assert_eq!(
            code_of(revoke_with(&mut admin, LEDGER, 0, Some(token)).await),
            denied,
            "{token}"
        );
    }

    // The observer watches, checks and lists everything, and may not revoke anything.
    let event = watch_with(&mut client, LEDGER, Some(OBSERVER_TOKEN))
        .await
        .expect("the observer may watch");
    assert_eq!(event.cause(), Cause::Snapshot);
    assert_eq!(event.fencing_token, held.fencing_token, "{event:?}");
    let check = check_with(
        &mut client,
        LEDGER,
        held.fencing_token,
        Some(OBSERVER_TOKEN),
    )
    .await
    .expect("the observer may check");
    assert!(check.current, "{check:?}");
    let listed = list_with(&mut admin, "", Some(OBSERVER_TOKEN))
        .await
        .expect("the observer may list everything");
    assert!(
        listed.leases.iter().any(|lease| lease.name == LEDGER),
        "{listed:?}"
    );
    assert_eq!(
        code_of(revoke_with(&mut admin, LEDGER, 0, Some(OBSERVER_TOKEN)).await),
        Code::PermissionDenied,
        "revoke only for tokens that name it"
    );

    // The operator: only under payments/, and List only for prefixes within payments/.
    for prefix in ["", "pay", "payment", "billing/"] {
        assert_eq!(
            code_of(list_with(&mut admin, prefix, Some(OPERATOR_TOKEN)).await),
            Code::PermissionDenied,
            "prefix {prefix:?}"
        );
    }
    for prefix in ["payments/", "payments/led", "payments/eu/"] {
        list_with(&mut admin, prefix, Some(OPERATOR_TOKEN))
            .await
            .unwrap_or_else(|status| panic!("prefix {prefix:?}: {status:?}"));
    }
    assert_eq!(
        code_of(revoke_with(&mut admin, "billing/ledger", 0, Some(OPERATOR_TOKEN)).await),
        Code::PermissionDenied
    );
    assert_eq!(
        code_of(watch_with(&mut client, "billing/ledger", Some(OPERATOR_TOKEN)).await),
        Code::PermissionDenied
    );
    let stale = revoke_with(
        &mut admin,
        LEDGER,
        held.fencing_token - 1,
        Some(OPERATOR_TOKEN),
    )
    .await
    .expect("the operator may revoke under payments/");
    assert!(!stale.revoked, "{stale:?}");
    let revoked = revoke_with(&mut admin, LEDGER, held.fencing_token, Some(OPERATOR_TOKEN))
        .await
        .expect("the operator may revoke under payments/");
    assert!(revoked.revoked && revoked.fencing_token == held.fencing_token);

    let renewal = RenewRequest {
        name: held.name.clone(),
        lease_id: held.lease_id.clone(),
        ttl_ms: 0,
    };
    let mut responses = client
        .renew(with_token(
            tokio_stream::iter([renewal]),
            Some(PAYMENTS_TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    match responses.next().await.unwrap().unwrap().result {
        Some(renew_response::Result::Lost(lost)) => {
            assert!(lost.reason.starts_with("revoked"), "{lost:?}");
            assert!(lost.reason.contains("security test"), "{lost:?}");
        }
        other => panic!("expected lost, got {other:?}"),
    }

    // Unauthenticated calls of the older RPCs are counted too.
    assert_eq!(
        code_of(client.acquire(acquire_request(LEDGER)).await),
        Code::Unauthenticated
    );
    assert_eq!(
        code_of(
            client
                .renew(tokio_stream::iter(Vec::<RenewRequest>::new()))
                .await
        ),
        Code::Unauthenticated
    );
    assert_eq!(
        code_of(
            client
                .describe(DescribeRequest {
                    name: LEDGER.into()
                })
                .await
        ),
        Code::Unauthenticated
    );

    tokio::time::sleep(Duration::from_millis(200)).await; // let the streams record their end
    let after = scrape_metrics(metrics_port);
    let delta = |rpc: &str, code: &str| {
        let series = format!("leased_rpc_requests_total{{rpc=\"{rpc}\",code=\"{code}\"}}");
        metric_sample(&after, &series) - metric_sample(&before, &series)
    };
    let expected = [
        ("Watch", "Unauthenticated", 2.0),
        ("CheckToken", "Unauthenticated", 2.0),
        ("List", "Unauthenticated", 2.0),
        ("Revoke", "Unauthenticated", 2.0),
        ("Release", "Unauthenticated", 2.0),
        ("Acquire", "Unauthenticated", 1.0),
        ("Renew", "Unauthenticated", 1.0),
        ("Describe", "Unauthenticated", 1.0),
        ("Watch", "PermissionDenied", 3.0),
        ("CheckToken", "PermissionDenied", 2.0),
        ("List", "PermissionDenied", 6.0),
        ("Revoke", "PermissionDenied", 4.0),
        ("Revoke", "Ok", 2.0),
        ("List", "Ok", 4.0),
        ("CheckToken", "Ok", 1.0),
    ];
    for (rpc, code, at_least) in expected {
        assert!(
            delta(rpc, code) >= at_least,
            "leased_rpc_requests_total{{rpc=\"{rpc}\",code=\"{code}\"}} rose by {}, expected at \
             least {at_least}:\n{after}",
            delta(rpc, code)
        );
    }
}

/// The audit lines (target `leased::audit`, WARN) of a JSON log, parsed.
fn audit_warnings(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["target"] == "leased::audit" && line["level"] == "WARN")
        .collect()
}

/// Each successful Revoke writes exactly one WARN line to the audit log (target
/// `leased::audit`, also in JSON logs) naming the caller (the token's client name), the lease,
/// the revoked token(s), the holder and the reason; a revoke that matched nothing and a denied
/// one write none. No line carries a lease id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_revoke_writes_one_audit_warning_naming_the_caller() {
    let redis = RedisServer::start();
    let mut server = LeasedProcess::serve()
        .redis(&redis.url())
        .args([
            "--auth-tokens",
            &admin_tokens_file().display().to_string(),
            "--log-format",
            "json",
        ])
        .log(Log::Captured)
        .log_level("info")
        .start()
        .await;
    let mut client = server.client().await;
    let mut admin = admin_client(&server.endpoint()).await;

    let mut stream = client
        .acquire(with_token(
            AcquireRequest {
                holder: "ledger-writer-7".into(),
                ..acquire_request("payments/audited")
            },
            Some(PAYMENTS_TOKEN),
        ))
        .await
        .unwrap()
        .into_inner();
    let held = match stream.next().await.unwrap().unwrap().result.unwrap() {
        leased::proto::acquire_response::Result::Granted(granted) => granted,
        other => panic!("{other:?}"),
    };
    let stale = revoke_with(&mut admin, "payments/audited", 1, Some(OPERATOR_TOKEN))
        .await
        .unwrap();
    assert!(!stale.revoked);
    assert_eq!(
        code_of(revoke_with(&mut admin, "payments/audited", 0, Some(OBSERVER_TOKEN)).await),
        Code::PermissionDenied
    );
    let request = RevokeRequest {
        name: "payments/audited".into(),
        reason: "stuck since 03:12 (INC-7)".into(),
        fencing_token: held.fencing_token,
    };
    assert!(
        admin
            .revoke(with_token(request, Some(OPERATOR_TOKEN)))
            .await
            .unwrap()
            .into_inner()
            .revoked
    );

    // Two permits of a counting lease revoked in one call: one line naming both tokens.
    let mut permits = Vec::new();
    for _ in 0..2 {
        let mut stream = client
            .acquire(with_token(
                AcquireRequest {
                    limit: 2,
                    ..acquire_request("payments/pool")
                },
                Some(PAYMENTS_TOKEN),
            ))
            .await
            .unwrap()
            .into_inner();
        match stream.next().await.unwrap().unwrap().result.unwrap() {
            leased::proto::acquire_response::Result::Granted(granted) => permits.push(granted),
            other => panic!("{other:?}"),
        }
    }
    let pool = revoke_with(&mut admin, "payments/pool", 0, Some(OPERATOR_TOKEN))
        .await
        .unwrap();
    assert!(pool.revoked);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = server.stop_and_read_log();

    let lease_ids: Vec<&str> = std::iter::once(&held)
        .chain(&permits)
        .map(|granted| granted.lease_id.as_str())
        .collect();
    for line in log.lines() {
        assert!(
            !lease_ids.iter().any(|id| line.contains(id)),
            "a log line carries a lease id: {line}"
        );
    }
    let warnings = audit_warnings(&log);
    println!("audit warnings: {warnings:#?}");
    assert_eq!(warnings.len(), 2, "one per successful revoke:\n{log}");
    let fields = &warnings[0]["fields"];
    assert!(
        fields["caller"]
            .as_str()
            .unwrap_or_default()
            .contains("operator"),
        "the caller is the token's client name: {fields}"
    );
    assert_eq!(fields["name"], "payments/audited", "{fields}");
    assert_eq!(
        fields["fencing_token"].to_string().trim_matches('"'),
        held.fencing_token.to_string(),
        "{fields}"
    );
    assert_eq!(fields["reason"], "stuck since 03:12 (INC-7)", "{fields}");
    assert!(
        fields["holder"].to_string().contains("ledger-writer-7"),
        "{fields}"
    );
    assert!(
        fields["peer"]
            .as_str()
            .is_some_and(|peer| peer.contains("127.0.0.1"))
    );

    let fields = &warnings[1]["fields"];
    assert_eq!(fields["name"], "payments/pool", "{fields}");
    let tokens = fields["fencing_token"].to_string();
    for permit in &permits {
        assert!(
            tokens.contains(&permit.fencing_token.to_string()),
            "both permits named: {fields}"
        );
    }
}

/// The first 16 hex digits of a certificate's SHA-256, as the audit log shows them.
fn fingerprint(der: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    digest.as_ref()[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// leased on `redis` requiring a client certificate of `pki`, with `args` more and its log
/// captured for the test to read.
async fn serve_mtls_logged(pki: &Pki, redis: &RedisServer, args: &[&str]) -> LeasedProcess {
    LeasedProcess::serve()
        .redis(&redis.url())
        .args(pki.server_args(true))
        .args(args)
        .plaintext_health()
        .log(Log::Captured)
        .start()
        .await
}

/// A certificate whose common name tries to pass for ops-alice and to start a forged log line.
const HOSTILE_CN: &str = "mallory, CN=ops-alice\nFAKE audit line";

/// Without a token, an mTLS caller is named in the audit line by its certificate's first SAN,
/// else by its subject (RFC 4514, escaped: a comma cannot pose as another attribute, a newline
/// is `\0A`), with the certificate's SHA-256 fingerprint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_names_the_mtls_certificate_when_there_is_no_token() {
    let pki = Pki::generate();
    let hostile = pki.client_certificate(HOSTILE_CN, &[]);
    let redis = RedisServer::start();
    let mut server = serve_mtls_logged(&pki, &redis, &["--log-format", "json"]).await;
    let channel = pki
        .channel(server.address, true)
        .await
        .expect("mTLS handshake");
    hold_and_revoke(channel, "mtls/audited").await;

    let channel = pki.channel_presenting(server.address, &hostile).await;
    hold_and_revoke(channel, "mtls/hostile").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = server.stop_and_read_log();
    let warnings = audit_warnings(&log);
    println!("audit warnings: {warnings:#?}");
    assert_eq!(warnings.len(), 2, "{log}");

    let fields = &warnings[0]["fields"];
    assert_eq!(fields["name"], "mtls/audited", "{fields}");
    assert_eq!(
        fields["caller"],
        format!("san:dns:{CLIENT_SAN}"),
        "the caller is the certificate's SAN: {fields}"
    );
    assert_eq!(
        fields["cert_sha256"],
        fingerprint(&pki.client_cert_der),
        "{fields}"
    );

    let fields = &warnings[1]["fields"];
    assert_eq!(fields["name"], "mtls/hostile", "{fields}");
    assert_eq!(
        fields["caller"], "CN=mallory\\, CN=ops-alice\\0AFAKE audit line",
        "without a SAN, the caller is the escaped subject: {fields}"
    );
    assert_eq!(fields["cert_sha256"], fingerprint(&hostile.der), "{fields}");
    assert!(
        !log.lines().any(|line| line.starts_with("FAKE")),
        "a forged line:\n{log}"
    );
}

/// In the text log too, a newline in a certificate's subject stays on the audit line, escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newline_in_an_mtls_subject_cannot_forge_a_text_log_line() {
    let pki = Pki::generate();
    let hostile = pki.client_certificate(HOSTILE_CN, &[]);
    let redis = RedisServer::start();
    let mut server = serve_mtls_logged(&pki, &redis, &[]).await;
    let channel = pki.channel_presenting(server.address, &hostile).await;
    hold_and_revoke(channel, "mtls/hostile").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = server.stop_and_read_log();
    let mentions: Vec<&str> = log.lines().filter(|line| line.contains("FAKE")).collect();
    assert_eq!(mentions.len(), 1, "the subject on one line:\n{log}");
    let line = mentions[0];
    assert!(
        line.contains("leased::audit") && line.contains("lease revoked"),
        "{line}"
    );
    // The text format quotes the caller as a Rust string, which doubles each backslash.
    assert!(
        line.contains(r#"caller="CN=mallory\\, CN=ops-alice\\0AFAKE audit line""#),
        "{line}"
    );
    assert!(
        line.contains(&format!("cert_sha256=\"{}\"", fingerprint(&hostile.der))),
        "{line}"
    );
}
