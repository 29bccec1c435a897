//! TLS, mTLS and bearer-token access control, with certificates generated at test time (rcgen)
//! and a real server on a real Redis.

mod common;

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use leased::{
    config::ServeConfig,
    proto::{
        AcquireRequest, DescribeRequest, ReleaseRequest, RenewRequest,
        lease_service_client::LeaseServiceClient, renew_response,
    },
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio_stream::StreamExt;
use tonic::{
    Code, Request,
    transport::{Certificate, Channel, ClientTlsConfig, Identity},
};

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, as PEM files.
struct Pki {
    dir: PathBuf,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl Pki {
    fn generate() -> Self {
        let dir =
            std::env::temp_dir().join(format!("leased-pki-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();

        let server_key = KeyPair::generate().unwrap();
        let server_cert = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap()
            .signed_by(&server_key, &ca)
            .unwrap();
        let client_key = KeyPair::generate().unwrap();
        let client_cert = CertificateParams::new(vec!["client.example".into()])
            .unwrap()
            .signed_by(&client_key, &ca)
            .unwrap();

        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("server.pem"), server_cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), server_key.serialize_pem()).unwrap();
        Pki {
            dir,
            ca_pem: ca.pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    fn server_args(&self, mtls: bool) -> Vec<String> {
        let mut args = vec![
            "--tls-cert".to_owned(),
            self.path("server.pem"),
            "--tls-key".to_owned(),
            self.path("server.key"),
        ];
        if mtls {
            args.extend(["--tls-client-ca".to_owned(), self.path("ca.pem")]);
        }
        args
    }

    async fn client(
        &self,
        server: &Leased,
        with_certificate: bool,
    ) -> Result<LeaseServiceClient<Channel>, tonic::transport::Error> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .domain_name("localhost");
        if with_certificate {
            tls = tls.identity(Identity::from_pem(
                &self.client_cert_pem,
                &self.client_key_pem,
            ));
        }
        let channel = Channel::from_shared(format!("https://{}", server.address))
            .unwrap()
            .tls_config(tls)?
            .connect()
            .await?;
        Ok(LeaseServiceClient::new(channel))
    }
}

async fn start_tls_server(pki: &Pki, redis: &RedisServer, mtls: bool) -> Leased {
    let health = free_port();
    let mut args = vec![
        "--redis-url".to_owned(),
        redis.url(),
        "--health-listen".to_owned(),
        format!("127.0.0.1:{health}"),
    ];
    args.extend(pki.server_args(mtls));
    Leased::start_with(ServeConfig::from_args(args).unwrap()).await
}

async fn describe_status(client: &mut LeaseServiceClient<Channel>) -> Result<(), tonic::Status> {
    client
        .describe(DescribeRequest { name: "tls".into() })
        .await
        .map(drop)
}

/// With TLS, a client that trusts the CA is served; plaintext is not; the plaintext health port
/// (for Kubernetes probes) answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_trusting_clients_and_refuses_plaintext() {
    let pki = Pki::generate();
    let redis = RedisServer::start();
    let server = start_tls_server(&pki, &redis, false).await;

    let mut client = pki.client(&server, false).await.expect("TLS handshake");
    describe_status(&mut client).await.expect("served over TLS");
    must_acquire(&mut client, "over-tls", 5_000).await;

    let plaintext = Channel::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plaintext {
        let status = describe_status(&mut LeaseServiceClient::new(channel))
            .await
            .unwrap_err();
        assert_ne!(status.code(), Code::Ok);
    }
}

/// With mTLS, a client certificate signed by the client CA is required.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_requires_a_client_certificate() {
    let pki = Pki::generate();
    let redis = RedisServer::start();
    let server = start_tls_server(&pki, &redis, true).await;

    let mut with_cert = pki.client(&server, true).await.expect("mTLS handshake");
    describe_status(&mut with_cert)
        .await
        .expect("served with a client certificate");

    let refused = match pki.client(&server, false).await {
        Err(_) => true,
        Ok(mut client) => describe_status(&mut client).await.is_err(),
    };
    assert!(
        refused,
        "a client without a certificate was served under mTLS"
    );
}

const PAYMENTS_TOKEN: &str = "payments-token-0123456789";
const READER_TOKEN: &str = "reader-token-0123456789abc";
const NEW_TOKEN: &str = "rotated-token-0123456789ab";

fn write_tokens(path: &PathBuf, entries: &[(&str, &str, &[&str], &[&str])]) {
    let tokens: Vec<serde_json::Value> = entries
        .iter()
        .map(|(client, token, prefixes, operations)| {
            serde_json::json!({ "client": client, "token": token, "prefixes": prefixes, "operations": operations })
        })
        .collect();
    std::fs::write(path, serde_json::json!({ "tokens": tokens }).to_string()).unwrap();
}

fn tokens_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "leased-tokens-{}-{}.json",
        std::process::id(),
        free_port()
    ));
    write_tokens(
        &path,
        &[
            (
                "payments",
                PAYMENTS_TOKEN,
                &["payments/"],
                &["acquire", "renew", "release", "describe"],
            ),
            ("reader", READER_TOKEN, &[""], &["describe"]),
        ],
    );
    path
}

fn with_token<T>(message: T, token: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

fn acquire_request(name: &str) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: "h".into(),
        ttl_ms: 10_000,
        wait_ms: 0,
        ..Default::default()
    }
}

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

/// The `leased` CLI reaches a server with mTLS and access control through its TLS and token flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_speaks_mtls_with_a_bearer_token() {
    let pki = Pki::generate();
    std::fs::write(pki.dir.join("client.pem"), &pki.client_cert_pem).unwrap();
    std::fs::write(pki.dir.join("client.key"), &pki.client_key_pem).unwrap();
    let redis = RedisServer::start();
    let mut args = vec![
        "--redis-url".to_owned(),
        redis.url(),
        "--health-listen".to_owned(),
        format!("127.0.0.1:{}", free_port()),
        "--auth-tokens".to_owned(),
        tokens_file().display().to_string(),
    ];
    args.extend(pki.server_args(true));
    let server = Leased::start_with(ServeConfig::from_args(args).unwrap()).await;

    let cli = |token: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_leased"))
            .args(["acquire", "payments/cli", "--ttl", "5s", "--json"])
            .args([
                "--endpoint",
                &format!("https://localhost:{}", server.address.port()),
            ])
            .args(["--ca-cert", &pki.path("ca.pem")])
            .args([
                "--client-cert",
                &pki.path("client.pem"),
                "--client-key",
                &pki.path("client.key"),
            ])
            .env("LEASED_TOKEN", token)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = cli(PAYMENTS_TOKEN);
    assert_eq!(code, Some(0), "{stdout} {stderr}");
    assert!(stdout.contains("\"granted\":true"), "{stdout}");
    let (code, _, stderr) = cli("wrong-token-0123456789");
    assert_eq!(code, Some(1));
    assert!(stderr.contains("unknown token"), "{stderr}");
}
