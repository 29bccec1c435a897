//! `LeaseAdminService`, for operators: `List` the leases held, `Revoke` one whose holder is
//! wedged. Each RPC validates, authorizes, makes one call into the store and builds the reply;
//! every revoke is written to the audit log (target `leased::audit`).

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tracing::Span;

use super::{
    ServedReplica, ServerOptions,
    auth::{Authenticator, Operation, Principal},
    connections::ConnectionInfo,
    service::{authorize, holder_info, recorded, traced_call},
};
use crate::{
    error::Result,
    lease::{
        DescribedLease, LeaseStore,
        limits::{parse_list_prefix, parse_name, parse_page_size, parse_reason},
    },
    proto::{
        LeaseInfo, ListRequest, ListResponse, RevokeRequest, RevokeResponse,
        lease_admin_service_server::LeaseAdminService,
    },
    telemetry::{self, ADMIN_SERVICE},
};

/// Marks a call that came through the console, for the audit log. Kept beside its one reader
/// (the audit log, below): the console already imports this service, so it takes it from here.
#[derive(Clone, Copy, Debug)]
pub struct ViaConsole;

/// The `lease.v1.LeaseAdminService` implementation over this replica.
pub struct LeaseAdminServiceImpl {
    replica: Arc<ServedReplica>,
    auth: Option<Arc<Authenticator>>,
}

impl LeaseAdminServiceImpl {
    pub fn new(replica: Arc<ServedReplica>, options: &ServerOptions) -> Self {
        LeaseAdminServiceImpl {
            replica,
            auth: options.auth.clone(),
        }
    }
}

#[tonic::async_trait]
impl LeaseAdminService for LeaseAdminServiceImpl {
    async fn list(&self, request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let (span, principal) = traced_call(&self.auth, ADMIN_SERVICE, "List", &request);
        let outcome = {
            let span = span.clone();
            move |reply: &ListResponse| {
                span.record("lease.count", telemetry::integer(reply.leases.len()));
                "listed"
            }
        };
        recorded("List", &span, outcome, async {
            self.list_page(principal?, request.into_inner(), &span)
                .await
        })
        .await
    }

    async fn revoke(
        &self,
        request: Request<RevokeRequest>,
    ) -> Result<Response<RevokeResponse>, Status> {
        let (span, principal) = traced_call(&self.auth, ADMIN_SERVICE, "Revoke", &request);
        let outcome = |reply: &RevokeResponse| match reply.revoked {
            true => "revoked",
            false => "not_revoked",
        };
        recorded("Revoke", &span, outcome, async {
            let principal = principal?;
            let caller = Caller::of(&principal, &request);
            self.revoke_one(principal, caller, request.into_inner(), &span)
                .await
        })
        .await
    }
}

impl LeaseAdminServiceImpl {
    async fn list_page(
        &self,
        principal: Option<Principal>,
        request: ListRequest,
        span: &Span,
    ) -> Result<ListResponse> {
        let prefix = parse_list_prefix(&request.prefix)?;
        span.record("lease.prefix", prefix.as_str());
        let page_size = parse_page_size(request.page_size)?;
        if let Some(principal) = &principal {
            principal.authorize_list(&prefix)?;
        }
        let page_token = Some(request.page_token.as_str()).filter(|token| !token.is_empty());
        let page = self
            .replica
            .store()
            .list(&prefix, page_size, page_token)
            .await?;
        tracing::debug!(
            rpc = "List",
            prefix = prefix.as_str(),
            leases = page.leases.len(),
            more = page.next_page_token.is_some()
        );
        Ok(ListResponse {
            leases: page.leases.into_iter().map(lease_info).collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
        })
    }

    async fn revoke_one(
        &self,
        principal: Option<Principal>,
        caller: Caller,
        request: RevokeRequest,
        span: &Span,
    ) -> Result<RevokeResponse> {
        let name = parse_name(&request.name)?;
        telemetry::record_name(span, &name);
        span.record(
            "lease.fencing_token",
            telemetry::integer(request.fencing_token),
        );
        authorize(&principal, Operation::Revoke, &name)?;
        let reason = parse_reason(&request.reason)?;
        let only = Some(request.fencing_token).filter(|token| *token != 0);
        let revoked = self.replica.store().revoke(&name, only, reason).await?;
        let Some(largest) = revoked.iter().map(|grant| grant.fencing_token).max() else {
            tracing::info!(
                target: "leased::audit",
                caller = caller.name.as_str(),
                cert_sha256 = caller.cert_sha256.as_deref(),
                peer = %caller.peer,
                %name,
                fencing_token = request.fencing_token,
                reason,
                "revoke matched no grant; nothing revoked"
            );
            return Ok(RevokeResponse {
                revoked: false,
                fencing_token: 0,
            });
        };
        let tokens: Vec<String> = revoked
            .iter()
            .map(|grant| grant.fencing_token.to_string())
            .collect();
        let holders: Vec<&str> = revoked.iter().map(|grant| grant.holder.as_str()).collect();
        // One line per revoke: who broke whose lease, and why. Holders and reasons cannot carry
        // control characters (validated), and the log formatter escapes them anyway.
        tracing::warn!(
            target: "leased::audit",
            caller = caller.name.as_str(),
            cert_sha256 = caller.cert_sha256.as_deref(),
            peer = %caller.peer,
            %name,
            fencing_token = %tokens.join(","),
            holder = ?holders,
            reason,
            "lease revoked"
        );
        Ok(RevokeResponse {
            revoked: true,
            fencing_token: largest,
        })
    }
}

/// Who made a call, for the audit log: the token's client name, else the mTLS client
/// certificate's name (its first DNS, URI or email SAN, else its subject; escaped, see
/// `connections::PeerCertificate`), else "anonymous"; the certificate's SHA-256 fingerprint; and
/// the peer address.
struct Caller {
    name: String,
    cert_sha256: Option<String>,
    peer: String,
}

impl Caller {
    fn of<T>(principal: &Option<Principal>, request: &Request<T>) -> Self {
        let connection = request.extensions().get::<ConnectionInfo>();
        let certificate = connection.and_then(|info| info.peer_certificate.as_deref());
        let name = match (principal, certificate) {
            (Some(principal), Some(certificate)) => {
                format!("token {:?} ({})", principal.client, certificate.name)
            }
            (Some(principal), None) => format!("token {:?}", principal.client),
            (None, Some(certificate)) => certificate.name.clone(),
            (None, None) => "anonymous".to_owned(),
        };
        let peer = connection
            .and_then(|info| info.tcp.remote_addr())
            .map_or_else(|| "unknown".to_owned(), |address| address.to_string());
        let name = if request.extensions().get::<ViaConsole>().is_some() {
            format!("{name} via the console")
        } else {
            name
        };
        Caller {
            name,
            cert_sha256: certificate.map(|certificate| certificate.sha256.clone()),
            peer,
        }
    }
}

fn lease_info(lease: DescribedLease) -> LeaseInfo {
    let description = lease.description;
    let holders: Vec<_> = description.holders.into_iter().map(holder_info).collect();
    // Fields 2 to 5 are the holder with the smallest token, as in Describe.
    let first = holders.first().cloned().unwrap_or_default();
    LeaseInfo {
        name: lease.name.to_string(),
        holder: first.holder,
        fencing_token: first.fencing_token,
        remaining_ms: first.remaining_ms,
        expires_at: first.expires_at,
        waiters: description.waiters,
        limit: description.limit,
        holders,
    }
}
