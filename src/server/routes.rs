//! Which gRPC services each port carries: the main port serves the lease API (`LeaseService`
//! and `LeaseAdminService`), health and reflection; the optional plaintext health port serves health (and its reflection) only.

use std::sync::Arc;

use tonic::service::Routes;

use super::{LeaseServiceImpl, ServerOptions, admin::LeaseAdminServiceImpl, health::Health};
use crate::{
    error::StartupError,
    lease::QueueStore,
    proto::{
        self, lease_admin_service_server::LeaseAdminServiceServer,
        lease_service_server::LeaseServiceServer,
    },
};

/// `lease.v1.LeaseService`, `lease.v1.LeaseAdminService`, `grpc.health.v1` and server reflection
/// for all three.
/// The handlers are shared with the console, which calls them too.
pub(super) fn grpc_port<S: QueueStore>(
    lease_service: Arc<LeaseServiceImpl<S>>,
    admin_service: Arc<LeaseAdminServiceImpl<S>>,
    options: &ServerOptions,
    health: &Health,
) -> Result<Routes, StartupError> {
    let admin_service = LeaseAdminServiceServer::from_arc(admin_service)
        .max_decoding_message_size(options.max_message_bytes);
    let lease_service = LeaseServiceServer::from_arc(lease_service)
        .max_decoding_message_size(options.max_message_bytes);
    let routes = Routes::new(lease_service)
        .add_service(admin_service)
        .add_service(health.service());
    with_reflection(
        routes,
        &[
            proto::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
        ],
    )
}

/// `grpc.health.v1` and its reflection, for Kubernetes probes when the gRPC port has TLS.
pub(super) fn health_port(health: &Health) -> Result<Routes, StartupError> {
    let routes = Routes::new(health.service());
    with_reflection(routes, &[tonic_health::pb::FILE_DESCRIPTOR_SET])
}

/// Adds server reflection over `descriptor_sets`, in both versions: grpcurl 1.8 speaks only
/// `v1alpha`, newer tools `v1`. The builder is not `Clone`, hence two of them.
fn with_reflection(routes: Routes, descriptor_sets: &[&[u8]]) -> Result<Routes, StartupError> {
    let builder = || {
        descriptor_sets.iter().fold(
            tonic_reflection::server::Builder::configure(),
            |builder, set| builder.register_encoded_file_descriptor_set(set),
        )
    };
    Ok(routes
        .add_service(builder().build_v1()?)
        .add_service(builder().build_v1alpha()?))
}
