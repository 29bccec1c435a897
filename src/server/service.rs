//! `LeaseService`: each RPC validates its input, makes one call into the lease core, and builds
//! the reply. Nothing here holds lease state.

use std::{pin::Pin, sync::Arc};

use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, Span};

use super::{
    ServedReplica, ServerOptions,
    auth::{Authenticator, Operation, Principal, StreamAccess, caller_of},
    followed_names::{FollowedNames, Following},
    held_leases::HeldLeases,
    rpc_metrics,
};
use crate::{
    lease::{
        Description, Holder, LeaseName, LeaseStore, Limits,
        limits::{parse_fencing_token, parse_lease_id, parse_name},
    },
    proto::{
        self, AcquireRequest, AcquireResponse, CheckTokenRequest, CheckTokenResponse,
        DescribeRequest, DescribeResponse, ReleaseRequest, ReleaseResponse, RenewRequest,
        RenewResponse, WatchEvent, WatchRequest, lease_service_server::LeaseService,
    },
    shutdown::Shutdown,
    telemetry::{self, LEASE_SERVICE, rpc_span},
};

/// A boxed response stream, as tonic wants it.
pub type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The `lease.v1.LeaseService` implementation over this replica.
pub struct LeaseServiceImpl {
    pub(super) replica: Arc<ServedReplica>,
    pub(super) limits: Limits,
    pub(super) max_leases_per_renew_stream: usize,
    /// The leases each Renew stream here holds, so that a Release here frees their slots.
    pub(super) held_leases: Arc<HeldLeases>,
    pub(super) auth: Option<Arc<Authenticator>>,
    /// The names that Watch streams and waiting Acquires follow here, bounded.
    pub(super) followed: Arc<FollowedNames>,
    pub(super) shutdown: Shutdown,
}

impl LeaseServiceImpl {
    /// A service over `replica`; long-lived calls end when `shutdown` fires.
    pub fn new(replica: Arc<ServedReplica>, options: &ServerOptions, shutdown: Shutdown) -> Self {
        LeaseServiceImpl {
            replica,
            limits: options.limits.clone(),
            max_leases_per_renew_stream: options.max_leases_per_renew_stream,
            held_leases: Arc::default(),
            auth: options.auth.clone(),
            followed: FollowedNames::new(options.followed_names),
            shutdown,
        }
    }

    /// `principal`'s call follows `name` (a Watch, a waiting Acquire) until the guard is dropped,
    /// or `RESOURCE_EXHAUSTED` past the bounds on followed names.
    pub(super) fn follow(
        &self,
        principal: &Option<Principal>,
        name: &LeaseName,
    ) -> crate::error::Result<Following> {
        let token = principal.as_ref().map(Principal::token_key);
        self.followed.follow(token, name)
    }

    /// The caller of a stream, checked again for each message and after each reload.
    pub(super) fn stream_access(&self, principal: Option<Principal>) -> Option<StreamAccess> {
        let auth = self.auth.clone()?;
        Some(StreamAccess::new(auth, principal?))
    }
}

/// Who is calling, when access control is on (`None`: it is off, everyone may do anything).
pub(super) fn authenticate<T>(
    auth: &Option<Arc<Authenticator>>,
    request: &Request<T>,
) -> crate::error::Result<Option<Principal>> {
    match auth {
        None => Ok(None),
        Some(auth) => Ok(Some(auth.authenticate(request.metadata())?)),
    }
}

/// The span of an RPC of `service` (none if it is not sampled), and who is calling
/// ([`authenticate`]). The caller's trace context is read (to continue its trace, and to trace
/// the call or not by its sampled flag) only when the call is authenticated.
pub(super) fn traced_call<T>(
    auth: &Option<Arc<Authenticator>>,
    service: &'static str,
    method: &'static str,
    request: &Request<T>,
) -> (Span, crate::error::Result<Option<Principal>>) {
    let principal = authenticate(auth, request);
    let callers = principal.is_ok().then(|| request.metadata());
    (rpc_span(service, method, callers), principal)
}

/// Allows `operation` on `name` for `principal` (always, when access control is off).
pub(super) fn authorize(
    principal: &Option<Principal>,
    operation: Operation,
    name: &LeaseName,
) -> crate::error::Result<()> {
    principal
        .as_ref()
        .map_or(Ok(()), |principal| principal.authorize(operation, name))
}

#[tonic::async_trait]
impl LeaseService for LeaseServiceImpl {
    type AcquireStream = ResponseStream<AcquireResponse>;
    type RenewStream = ResponseStream<RenewResponse>;
    type WatchStream = ResponseStream<WatchEvent>;

    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<Response<Self::AcquireStream>, Status> {
        let (span, principal) = traced_call(&self.auth, LEASE_SERVICE, "Acquire", &request);
        // Rejected before a stream existed (no token, bad input): recorded here; a stream records
        // itself when it ends.
        rejections_recorded("Acquire", &span, async {
            self.acquire_stream(principal?, request.into_inner(), &span)
                .await
        })
        .await
    }

    async fn renew(
        &self,
        request: Request<Streaming<RenewRequest>>,
    ) -> Result<Response<Self::RenewStream>, Status> {
        let (span, principal) = traced_call(&self.auth, LEASE_SERVICE, "Renew", &request);
        rejections_recorded("Renew", &span, async {
            Ok(self.renew_stream(principal?, request.into_inner(), &span))
        })
        .await
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let (span, principal) = traced_call(&self.auth, LEASE_SERVICE, "Release", &request);
        let outcome = |reply: &ReleaseResponse| match reply.released {
            true => "released",
            false => "not_released",
        };
        recorded("Release", &span, outcome, async {
            self.release_one(principal?, request.into_inner(), &span)
                .await
        })
        .await
    }

    async fn describe(
        &self,
        request: Request<DescribeRequest>,
    ) -> Result<Response<DescribeResponse>, Status> {
        let (span, principal) = traced_call(&self.auth, LEASE_SERVICE, "Describe", &request);
        let outcome = |reply: &DescribeResponse| match reply.held {
            true => "held",
            false => "free",
        };
        recorded("Describe", &span, outcome, async {
            self.describe_one(principal?, request.into_inner(), &span)
                .await
        })
        .await
    }

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (span, principal) = traced_call(&self.auth, LEASE_SERVICE, "Watch", &request);
        rejections_recorded("Watch", &span, async {
            self.watch_stream(principal?, request.into_inner(), &span)
        })
        .await
    }

    async fn check_token(
        &self,
        request: Request<CheckTokenRequest>,
    ) -> Result<Response<CheckTokenResponse>, Status> {
        let (span, principal) = traced_call(&self.auth, LEASE_SERVICE, "CheckToken", &request);
        let outcome = |reply: &CheckTokenResponse| match reply.current {
            true => "current",
            false => "not_current",
        };
        recorded("CheckToken", &span, outcome, async {
            self.check_one(principal?, request.into_inner(), &span)
                .await
        })
        .await
    }
}

/// Runs a unary handler within its trace `span` and records its outcome and duration,
/// rejections (no token, no permission, bad input) included; `outcome` names a reply's outcome
/// in the span.
pub(super) async fn recorded<T>(
    rpc: &'static str,
    span: &Span,
    outcome: impl FnOnce(&T) -> &'static str,
    handler: impl Future<Output = crate::error::Result<T>>,
) -> Result<Response<T>, Status> {
    let started = std::time::Instant::now();
    let result = handler.instrument(span.clone()).await.map_err(Status::from);
    let code = result
        .as_ref()
        .map_or_else(Status::code, |_| tonic::Code::Ok);
    rpc_metrics::record_rpc(rpc, code, started.elapsed());
    telemetry::record_outcome(span, result.as_ref().map(outcome).map_err(Status::code));
    result.map(Response::new)
}

/// Opens a streaming RPC within its trace `span`; a rejection before the stream exists is
/// recorded here (the stream records itself when it ends).
async fn rejections_recorded<T>(
    rpc: &'static str,
    span: &Span,
    open: impl Future<Output = crate::error::Result<Response<T>>>,
) -> Result<Response<T>, Status> {
    let started = std::time::Instant::now();
    open.instrument(span.clone()).await.map_err(|error| {
        let status = Status::from(error);
        rpc_metrics::record_rpc(rpc, status.code(), started.elapsed());
        telemetry::record_outcome(span, Err(status.code()));
        status
    })
}

impl LeaseServiceImpl {
    async fn release_one(
        &self,
        principal: Option<Principal>,
        request: ReleaseRequest,
        span: &Span,
    ) -> crate::error::Result<ReleaseResponse> {
        let name = parse_name(&request.name)?;
        telemetry::record_name(span, &name);
        authorize(&principal, Operation::Release, &name)?;
        let lease_id = parse_lease_id(&request.lease_id)?;
        let released = self
            .replica
            .store()
            .release(&name, &lease_id, &caller_of(&principal))
            .await?;
        if released {
            self.held_leases.released(&name, &lease_id);
        }
        tracing::debug!(rpc = "Release", %name, released);
        Ok(ReleaseResponse { released })
    }

    async fn check_one(
        &self,
        principal: Option<Principal>,
        request: CheckTokenRequest,
        span: &Span,
    ) -> crate::error::Result<CheckTokenResponse> {
        let name = parse_name(&request.name)?;
        telemetry::record_name(span, &name);
        authorize(&principal, Operation::Check, &name)?;
        let token = parse_fencing_token(request.fencing_token)?;
        span.record("lease.fencing_token", telemetry::integer(token));
        let description = self.replica.store().describe(&name).await?;
        let check = check_token(&description, token);
        tracing::debug!(rpc = "CheckToken", %name, fencing_token = token, current = check.current);
        Ok(check)
    }

    async fn describe_one(
        &self,
        principal: Option<Principal>,
        request: DescribeRequest,
        span: &Span,
    ) -> crate::error::Result<DescribeResponse> {
        let name = parse_name(&request.name)?;
        telemetry::record_name(span, &name);
        authorize(&principal, Operation::Describe, &name)?;
        let description = self.replica.store().describe(&name).await?;
        tracing::debug!(rpc = "Describe", %name, held = description.holders.len());
        let holders: Vec<proto::HolderInfo> =
            description.holders.into_iter().map(holder_info).collect();
        // The single-holder fields, which clients from before counting leases read: the holder
        // with the smallest token.
        let first = holders.first().cloned().unwrap_or_default();
        Ok(DescribeResponse {
            held: !holders.is_empty(),
            holder: first.holder,
            fencing_token: first.fencing_token,
            remaining_ms: first.remaining_ms,
            expires_at: first.expires_at,
            limit: description.limit,
            holders,
            waiters: description.waiters,
        })
    }
}

/// A holder as the proto shows it (never its lease id).
pub(super) fn holder_info(holder: Holder) -> proto::HolderInfo {
    proto::HolderInfo {
        remaining_ms: holder.remaining_ms_or_minus_one(),
        expires_at: holder
            .expiry
            .map(|expiry| proto::timestamp_from_unix_ms(expiry.at_unix_ms)),
        holder: holder.holder,
        fencing_token: holder.fencing_token,
        shared: holder.shared,
    }
}

/// CheckToken's answer from a description: a grant in its lock-delay has expired, so it is
/// neither current nor held.
fn check_token(description: &Description, token: u64) -> CheckTokenResponse {
    let holding = |holder: &&Holder| holder.expiry.is_none_or(|expiry| expiry.held_ms() > 0);
    let current = description
        .holders
        .iter()
        .filter(holding)
        .any(|holder| holder.fencing_token == token);
    let largest = description
        .holders
        .iter()
        .filter(holding)
        .map(|holder| holder.fencing_token)
        .max();
    CheckTokenResponse {
        current,
        current_token: if current { token } else { largest.unwrap_or(0) },
        held: largest.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Expiry;

    fn holder(token: u64, remaining_ms: i64, lock_delay_ms: i64) -> Holder {
        Holder {
            shared: false,
            holder: format!("h{token}"),
            fencing_token: token,
            expiry: Some(Expiry {
                remaining_ms,
                at_unix_ms: 0,
                lock_delay_ms,
            }),
        }
    }

    /// Current only for a held grant's own token; a grant in its lock-delay has expired.
    #[test]
    fn check_token_follows_the_holders_that_still_hold() {
        let described = |holders| Description {
            limit: 3,
            holders,
            waiters: 0,
        };
        let held = described(vec![holder(7, 500, 0), holder(9, 800, 0)]);
        let answer = check_token(&held, 7);
        assert!(answer.current && answer.held);
        assert_eq!(answer.current_token, 7);
        let answer = check_token(&held, 8);
        assert!(!answer.current && answer.held);
        assert_eq!(answer.current_token, 9);

        let in_delay = described(vec![holder(7, 300, 1000)]);
        let answer = check_token(&in_delay, 7);
        assert!(!answer.current && !answer.held);
        assert_eq!(answer.current_token, 0);

        let free = check_token(&Description::default(), 7);
        assert!(!free.current && !free.held);
        assert_eq!(free.current_token, 0);
    }
}
