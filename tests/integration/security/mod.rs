//! TLS, mTLS and bearer-token access control, with certificates generated at test time (rcgen)
//! and a real server on a real Redis.
//!
//! One module per topic: `tls` (TLS and mTLS), `tokens` (bearer tokens for the lease RPCs) and
//! `operations` (the admin RPCs' operations and the audit log of Revoke); the certificates and
//! the tokens files they share are below.

mod operations;
mod own_ids;
mod tls;
mod tokens;

use std::path::PathBuf;

use crate::common::*;
use leased::proto::{AcquireRequest, lease_service_client::LeaseServiceClient};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
};
use tonic::{
    Request,
    transport::{Certificate, Channel, ClientTlsConfig, Identity},
};

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, as PEM files;
/// the CA signs more client certificates on request.
struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
    /// The client certificate's DER encoding (its fingerprint is in the audit log).
    client_cert_der: Vec<u8>,
}

/// A client certificate signed by the test CA.
struct ClientCertificate {
    der: Vec<u8>,
    cert_pem: String,
    key_pem: String,
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
        let mut client_params = CertificateParams::new(vec![CLIENT_SAN.into()]).unwrap();
        // The subject (the audit log names a caller by the SAN, else by the subject).
        client_params.distinguished_name = DistinguishedName::new();
        client_params
            .distinguished_name
            .push(DnType::CommonName, CLIENT_SUBJECT_CN);
        let client_cert = client_params.signed_by(&client_key, &ca).unwrap();

        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("server.pem"), server_cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), server_key.serialize_pem()).unwrap();
        Pki {
            dir,
            ca_pem: ca.pem(),
            ca,
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
            client_cert_der: client_cert.der().to_vec(),
        }
    }

    /// Another client certificate: `common_name` in its subject, `dns_names` as its SANs.
    fn client_certificate(&self, common_name: &str, dns_names: &[&str]) -> ClientCertificate {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(
            dns_names
                .iter()
                .map(|name| name.to_string())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let certificate = params.signed_by(&key, &self.ca).unwrap();
        ClientCertificate {
            der: certificate.der().to_vec(),
            cert_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
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
        let channel = self.channel(server.address, with_certificate).await?;
        Ok(LeaseServiceClient::new(channel))
    }

    /// A TLS connection to `address` that trusts the CA, with the client certificate if asked.
    async fn channel(
        &self,
        address: std::net::SocketAddr,
        with_certificate: bool,
    ) -> Result<Channel, tonic::transport::Error> {
        let identity = with_certificate
            .then(|| Identity::from_pem(&self.client_cert_pem, &self.client_key_pem));
        self.channel_as(address, identity).await
    }

    /// An mTLS connection to `address` that presents `certificate`.
    async fn channel_presenting(
        &self,
        address: std::net::SocketAddr,
        certificate: &ClientCertificate,
    ) -> Channel {
        let identity = Identity::from_pem(&certificate.cert_pem, &certificate.key_pem);
        self.channel_as(address, Some(identity))
            .await
            .expect("mTLS handshake with the client certificate")
    }

    /// A TLS connection to `address` that trusts the CA, presenting `identity` if any.
    async fn channel_as(
        &self,
        address: std::net::SocketAddr,
        identity: Option<Identity>,
    ) -> Result<Channel, tonic::transport::Error> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .domain_name("localhost");
        if let Some(identity) = identity {
            tls = tls.identity(identity);
        }
        Channel::from_shared(format!("https://{address}"))
            .unwrap()
            .tls_config(tls)?
            .connect()
            .await
    }
}

/// The common name of the client certificate's subject.
const CLIENT_SUBJECT_CN: &str = "ops-alice";

/// The client certificate's one SAN, which the audit log names a caller by when it has no token.
const CLIENT_SAN: &str = "client.example";

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

/// A token's client name, token, prefixes and operations.
type TokenEntry = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

/// The tokens of [`tokens_file`]: "payments" may use payments/ names, "reader" may describe all.
const BASE_TOKENS: [TokenEntry; 2] = [
    (
        "payments",
        PAYMENTS_TOKEN,
        &["payments/"],
        &["acquire", "renew", "release", "describe"],
    ),
    ("reader", READER_TOKEN, &[""], &["describe"]),
];

fn tokens_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "leased-tokens-{}-{}.json",
        std::process::id(),
        free_port()
    ));
    write_tokens(&path, &BASE_TOKENS);
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

/// Acquire of `name` with `token`, which must be granted.
async fn acquire_with(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    token: &str,
) -> leased::proto::Granted {
    use tokio_stream::StreamExt;
    let mut stream = client
        .acquire(with_token(acquire_request(name), Some(token)))
        .await
        .unwrap()
        .into_inner();
    match stream.next().await.unwrap().unwrap().result.unwrap() {
        leased::proto::acquire_response::Result::Granted(granted) => granted,
        other => panic!("{other:?}"),
    }
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
