//! `grpc.health.v1`: the overall status (`""`), `lease.v1.LeaseService` and
//! `lease.v1.LeaseAdminService` follow whether the store answers and whether the server drains; `leased.liveness` only says the process runs.

use std::{sync::Arc, time::Duration};

use tokio::task::JoinHandle;
use tonic_health::{
    ServingStatus,
    pb::health_server::HealthServer,
    server::{HealthReporter, HealthService},
};

use super::ServedReplica;
use crate::{
    lease::LeaseStore,
    proto::{lease_admin_service_server, lease_service_server},
    shutdown::Shutdown,
};

/// The health service name that reports only that the process is alive (not Redis, not draining).
pub const LIVENESS_SERVICE: &str = "leased.liveness";

/// How often the health status re-checks that the store answers.
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The health statuses of one server, kept current by a background task until [`Health::stop`].
pub(super) struct Health {
    reporter: HealthReporter,
    follower: JoinHandle<()>,
}

impl Health {
    /// Starts NOT_SERVING (until the store first answers) with liveness SERVING, and follows the
    /// store's pings and the shutdown from then on.
    pub(super) async fn start(replica: Arc<ServedReplica>, shutdown: Shutdown) -> Self {
        let reporter = HealthReporter::new();
        set_serving(&reporter, false).await;
        // Liveness: SERVING while the process runs, whatever Redis does, so that a Redis outage
        // takes pods out of rotation (readiness, "") without restarting them.
        reporter
            .set_service_status(LIVENESS_SERVICE, ServingStatus::Serving)
            .await;
        let follower = tokio::spawn(follow_store(replica, reporter.clone(), shutdown));
        Health { reporter, follower }
    }

    /// A `grpc.health.v1.Health` service answering from these statuses (one per port).
    pub(super) fn service(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService::from_health_reporter(self.reporter.clone()))
    }

    /// Stops following the store; the statuses stay as they were last set.
    pub(super) fn stop(self) {
        self.follower.abort();
    }
}

/// SERVING while the store answers pings and the server is not draining; NOT_SERVING otherwise.
async fn follow_store(replica: Arc<ServedReplica>, reporter: HealthReporter, shutdown: Shutdown) {
    let mut serving = false;
    let mut interval = tokio::time::interval(HEALTH_CHECK_INTERVAL);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = shutdown.fired() => {
                set_serving(&reporter, false).await;
                return;
            }
        }
        let reachable = match replica.store().ping().await {
            Ok(()) => true,
            Err(error) => {
                if serving {
                    tracing::warn!(%error, "store unreachable; health is NOT_SERVING");
                }
                false
            }
        };
        if reachable != serving {
            serving = reachable;
            if serving {
                tracing::info!("store reachable; health is SERVING");
            }
            set_serving(&reporter, serving).await;
        }
    }
}

/// Sets the overall status (`""`) and both lease services' statuses.
async fn set_serving(reporter: &HealthReporter, serving: bool) {
    let status = match serving {
        true => ServingStatus::Serving,
        false => ServingStatus::NotServing,
    };
    reporter.set_service_status("", status).await;
    reporter
        .set_service_status(lease_service_server::SERVICE_NAME, status)
        .await;
    reporter
        .set_service_status(lease_admin_service_server::SERVICE_NAME, status)
        .await;
}
