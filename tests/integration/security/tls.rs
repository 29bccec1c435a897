//! TLS and mTLS with certificates generated at test time (rcgen): a TLS server serves clients that
//! trust its CA and refuses plaintext, mTLS requires a client certificate, and the CLI speaks mTLS
//! with a bearer token.

use std::process::Command;

use crate::common::*;
use crate::security::{PAYMENTS_TOKEN, Pki, tokens_file};
use leased::{
    config::ServeConfig,
    proto::{DescribeRequest, lease_service_client::LeaseServiceClient},
};
use tonic::{Code, transport::Channel};

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
