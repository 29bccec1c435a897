//! `LeaseService`: each RPC validates its input, makes one call into the lease core, and builds
//! the reply. Nothing here holds lease state.

use std::{pin::Pin, sync::Arc};

use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::{
    ServerOptions,
    auth::{Authenticator, Operation, Principal},
    held_leases::HeldLeases,
};
use crate::{
    lease::{
        LeaseName, LeaseStore, Limits,
        limits::{parse_lease_id, parse_name},
    },
    metrics::metrics,
    proto::{
        self, AcquireRequest, AcquireResponse, DescribeRequest, DescribeResponse, ReleaseRequest,
        ReleaseResponse, RenewRequest, RenewResponse, lease_service_server::LeaseService,
    },
    shutdown::Shutdown,
};

/// A boxed response stream, as tonic wants it.
pub type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The `lease.v1.LeaseService` implementation over any [`LeaseStore`].
pub struct LeaseServiceImpl<S> {
    pub(super) store: Arc<S>,
    pub(super) limits: Limits,
    pub(super) max_leases_per_renew_stream: usize,
    /// The leases each Renew stream here holds, so that a Release here frees their slots.
    pub(super) held_leases: Arc<HeldLeases>,
    pub(super) auth: Option<Arc<Authenticator>>,
    pub(super) shutdown: Shutdown,
}

impl<S: LeaseStore> LeaseServiceImpl<S> {
    /// A service over `store`; long-lived calls end when `shutdown` fires.
    pub fn new(store: Arc<S>, options: &ServerOptions, shutdown: Shutdown) -> Self {
        LeaseServiceImpl {
            store,
            limits: options.limits.clone(),
            max_leases_per_renew_stream: options.max_leases_per_renew_stream,
            held_leases: Arc::default(),
            auth: options.auth.clone(),
            shutdown,
        }
    }

    /// Who is calling, when access control is on (`None`: it is off, everyone may do anything).
    pub(super) fn authenticate<T>(
        &self,
        request: &Request<T>,
    ) -> Result<Option<Principal>, Status> {
        match &self.auth {
            None => Ok(None),
            Some(auth) => Ok(Some(auth.authenticate(request.metadata())?)),
        }
    }
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
impl<S: LeaseStore> LeaseService for LeaseServiceImpl<S> {
    type AcquireStream = ResponseStream<AcquireResponse>;
    type RenewStream = ResponseStream<RenewResponse>;

    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<Response<Self::AcquireStream>, Status> {
        let started = std::time::Instant::now();
        let principal = self.authenticate(&request)?;
        self.acquire_stream(principal, request.into_inner())
            .inspect_err(|status| {
                // Rejected before a stream existed (bad input): record it here.
                metrics().record_rpc("Acquire", status.code(), started.elapsed())
            })
    }

    async fn renew(
        &self,
        request: Request<Streaming<RenewRequest>>,
    ) -> Result<Response<Self::RenewStream>, Status> {
        let principal = self.authenticate(&request)?;
        Ok(self.renew_stream(principal, request.into_inner()))
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let principal = self.authenticate(&request)?;
        recorded("Release", self.release_one(principal, request.into_inner())).await
    }

    async fn describe(
        &self,
        request: Request<DescribeRequest>,
    ) -> Result<Response<DescribeResponse>, Status> {
        let principal = self.authenticate(&request)?;
        recorded(
            "Describe",
            self.describe_one(principal, request.into_inner()),
        )
        .await
    }
}

/// Runs a unary handler and records its outcome and duration.
async fn recorded<T>(
    rpc: &'static str,
    handler: impl Future<Output = crate::error::Result<T>>,
) -> Result<Response<T>, Status> {
    let started = std::time::Instant::now();
    let result = handler.await.map(Response::new).map_err(Status::from);
    let code = result
        .as_ref()
        .map_or_else(Status::code, |_| tonic::Code::Ok);
    metrics().record_rpc(rpc, code, started.elapsed());
    result
}

impl<S: LeaseStore> LeaseServiceImpl<S> {
    async fn release_one(
        &self,
        principal: Option<Principal>,
        request: ReleaseRequest,
    ) -> crate::error::Result<ReleaseResponse> {
        let name = parse_name(&request.name)?;
        authorize(&principal, Operation::Release, &name)?;
        let lease_id = parse_lease_id(&request.lease_id)?;
        let released = self.store.release(&name, &lease_id).await?;
        if released {
            self.held_leases.released(&name, &lease_id);
        }
        tracing::debug!(rpc = "Release", %name, released);
        Ok(ReleaseResponse { released })
    }

    async fn describe_one(
        &self,
        principal: Option<Principal>,
        request: DescribeRequest,
    ) -> crate::error::Result<DescribeResponse> {
        let name = parse_name(&request.name)?;
        authorize(&principal, Operation::Describe, &name)?;
        let description = self.store.describe(&name).await?;
        tracing::debug!(rpc = "Describe", %name, held = description.holders.len());
        let holders: Vec<proto::HolderInfo> = description
            .holders
            .into_iter()
            .map(|holder| proto::HolderInfo {
                remaining_ms: holder.remaining_ms_or_minus_one(),
                expires_at: holder
                    .expiry
                    .map(|expiry| proto::timestamp_from_unix_ms(expiry.at_unix_ms)),
                holder: holder.holder,
                fencing_token: holder.fencing_token,
            })
            .collect();
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
