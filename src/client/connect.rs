//! The connection every client of this module is built on: [`connect`] opens it (TLS for
//! `https://`, [`ConnectOptions`]) and adds the bearer token to every call ([`BearerToken`]).
//! It is the one way in: [`LeaseClient::connect_with`](super::LeaseClient::connect_with) calls
//! it, and a [`LeaseAdminClient`](super::LeaseAdminClient) is always opened on a
//! `LeaseClient`'s connection ([`LeaseClient::admin`](super::LeaseClient::admin)).

use std::{path::PathBuf, time::Duration};

#[cfg(feature = "client-tls")]
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic::{
    metadata::{Ascii, MetadataValue},
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Channel, Endpoint},
};

use super::ClientError;
use crate::proto::lease_service_client::LeaseServiceClient;

/// The connection to a server, with the bearer token (if any) added to every call: what every
/// generated client of this module is built on.
pub(crate) type Connection = InterceptedService<Channel, BearerToken>;

/// The generated client, with the bearer token (if any) added to every call.
pub(crate) type GrpcClient = LeaseServiceClient<Connection>;

/// How to reach a server that uses TLS, mTLS or access control. `Default` is plaintext, no token.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// PEM CA bundle to trust for an `https://` endpoint (default: the system's roots). TLS needs
    /// the `client-tls` feature (on with `server`, the default).
    pub ca_cert: Option<PathBuf>,
    /// PEM client certificate and key, for servers that require mTLS.
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// Bearer token, for servers started with `--auth-tokens`.
    pub token: Option<String>,
}

/// Adds `authorization: Bearer TOKEN` to every request when a token is set.
#[derive(Clone, Debug)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// Opens the HTTP/2 connection to `endpoint` (TLS for `https://`) that every call shares, with
/// the bearer token of `options` on every request.
pub(super) async fn connect(
    endpoint: String,
    options: &ConnectOptions,
) -> Result<Connection, ClientError> {
    let connect_error = |source| ClientError::Connect {
        endpoint: endpoint.clone(),
        source,
    };
    let builder = Endpoint::from_shared(endpoint.clone())
        .map_err(connect_error)?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    let builder = match endpoint.starts_with("https://") {
        true => with_tls(builder, options, &endpoint)?,
        false => builder,
    };
    let channel = builder.connect().await.map_err(connect_error)?;
    let token = match &options.token {
        None => None,
        Some(token) => Some(
            format!("Bearer {token}")
                .parse()
                .map_err(|_| ClientError::Config("the token is not valid ASCII".into()))?,
        ),
    };
    Ok(InterceptedService::new(channel, BearerToken(token)))
}

/// `builder` (for `endpoint`) with the TLS settings of `options`.
#[cfg(feature = "client-tls")]
fn with_tls(
    builder: Endpoint,
    options: &ConnectOptions,
    endpoint: &str,
) -> Result<Endpoint, ClientError> {
    builder
        .tls_config(options.tls_config()?)
        .map_err(|source| ClientError::Connect {
            endpoint: endpoint.to_owned(),
            source,
        })
}

/// Without the `client-tls` feature, an `https://` endpoint is a configuration error.
#[cfg(not(feature = "client-tls"))]
fn with_tls(
    builder: Endpoint,
    options: &ConnectOptions,
    endpoint: &str,
) -> Result<Endpoint, ClientError> {
    let _ = (builder, options);
    Err(ClientError::Config(format!(
        "{endpoint} needs TLS: build leased with the client-tls feature"
    )))
}

#[cfg(feature = "client-tls")]
impl ConnectOptions {
    fn tls_config(&self) -> Result<ClientTlsConfig, ClientError> {
        let read = |path: &PathBuf| {
            std::fs::read(path)
                .map_err(|e| ClientError::Config(format!("cannot read {}: {e}", path.display())))
        };
        let mut tls = ClientTlsConfig::new().with_native_roots();
        if let Some(ca_cert) = &self.ca_cert {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca_cert)?));
        }
        if let Some((cert, key)) = &self.client_identity {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        Ok(tls)
    }
}
