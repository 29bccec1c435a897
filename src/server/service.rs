//! `LeaseService`: each RPC validates its input, makes one call into the lease core, and builds
//! the reply. Nothing here holds lease state.

use std::{pin::Pin, sync::Arc};

use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::{
    lease::{
        LeaseStore, Limits,
        limits::{parse_lease_id, parse_name},
    },
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
    pub(super) shutdown: Shutdown,
}

impl<S: LeaseStore> LeaseServiceImpl<S> {
    /// A service over `store`; long-lived calls end when `shutdown` fires.
    pub fn new(
        store: Arc<S>,
        limits: Limits,
        max_leases_per_renew_stream: usize,
        shutdown: Shutdown,
    ) -> Self {
        LeaseServiceImpl {
            store,
            limits,
            max_leases_per_renew_stream,
            shutdown,
        }
    }
}

#[tonic::async_trait]
impl<S: LeaseStore> LeaseService for LeaseServiceImpl<S> {
    type AcquireStream = ResponseStream<AcquireResponse>;
    type RenewStream = ResponseStream<RenewResponse>;

    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<Response<Self::AcquireStream>, Status> {
        self.acquire_stream(request.into_inner())
    }

    async fn renew(
        &self,
        request: Request<Streaming<RenewRequest>>,
    ) -> Result<Response<Self::RenewStream>, Status> {
        Ok(self.renew_stream(request.into_inner()))
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let request = request.into_inner();
        let name = parse_name(&request.name)?;
        let lease_id = parse_lease_id(&request.lease_id)?;
        let released = self.store.release(&name, &lease_id).await?;
        tracing::info!(rpc = "Release", %name, released);
        Ok(Response::new(ReleaseResponse { released }))
    }

    async fn describe(
        &self,
        request: Request<DescribeRequest>,
    ) -> Result<Response<DescribeResponse>, Status> {
        let name = parse_name(&request.into_inner().name)?;
        let holder = self.store.describe(&name).await?;
        tracing::debug!(rpc = "Describe", %name, held = holder.is_some());
        Ok(Response::new(match holder {
            None => DescribeResponse::default(),
            Some(holder) => DescribeResponse {
                held: true,
                holder: holder.holder,
                fencing_token: holder.fencing_token,
                remaining_ms: holder.remaining_ms,
                expires_at: holder.expires_at_ms.map(proto::timestamp_from_unix_ms),
            },
        }))
    }
}
