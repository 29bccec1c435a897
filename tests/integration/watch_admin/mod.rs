//! Watch, CheckToken, List and Revoke (issue 13), run against both stores: every scenario runs
//! once on the embedded store and once on a real redis-server with two `leased` replicas (the
//! watcher on one replica, the holders and the operator on the other), through real gRPC clients
//! over TCP.
//!
//! What the tests show:
//! - Watch: a snapshot first, then GRANTED, RELEASED, GRANTED, EXPIRED, GRANTED, REVOKED in
//!   order, GRANTED tokens increasing, each event naming the grant it is about and the holders
//!   after it; renewals are not events and a renewed lease does not expire; EXPIRED comes at the
//!   TTL (not at the end of a lock-delay): the median of 12 expiries within the 50 ms target
//!   ([`watch::EXPIRY_LATENESS_TARGET_MS`]), each within a wide cap (every measurement is
//!   printed); a counting lease has one event per permit;
//!   no event carries a lease id; after a Redis restart the watcher gets a fresh snapshot, never
//!   silence; the stream ends with UNAVAILABLE when the server shuts down.
//! - CheckToken: current for the holder's token; not after release, expiry (a lock-delay counts as
//!   expired) or revoke; `current_token` and `held` say who holds it now.
//! - List: 2,500 leases under a prefix, in pages of at most 1000, each exactly once, nothing from
//!   outside the prefix, nothing released; the default page size is 100; a page token is bound to
//!   its prefix.
//! - Revoke: a stale token is refused (`revoked: false`); the right one ends the lease at once
//!   (without lock-delay), the holder's Renew answers lost "revoked: <reason>" and its Release
//!   false; waiters are served in order with larger tokens; a grant in its lock-delay has expired
//!   and is not revoked; a counting lease's permits are revoked one or all.
//! - Bad input answers INVALID_ARGUMENT naming the field, for each of the four RPCs.
//! - Load: 1,000 watchers of one name, spread over a few connections, while the name is granted
//!   and released 100 times a second: every watcher gets every event, in order, and the server's
//!   resident memory stays bounded (the server runs as a child process; the numbers are printed).
//!
//! Timing bounds are wide: the test machine has two noisy cores. The 3-master Cluster listing is
//! in tests/integration/redis_cluster.rs.
//!
//! One module per topic: `watch` (Watch events, resync and shutdown), `admin` (CheckToken,
//! List, Revoke, and bad input to all four RPCs) and `load` (the 1,000-watcher load test); the
//! helpers they share are below.

mod admin;
mod load;
mod watch;

use std::time::Duration;

use crate::common::*;
use leased::proto::{
    AcquireRequest, Granted, WatchEvent, lease_service_client::LeaseServiceClient, renew_response,
};
use tonic::transport::Channel;

type Client = LeaseServiceClient<Channel>;
type Events = tonic::Streaming<WatchEvent>;

/// How long something that should happen at once may take on a loaded machine.
const SOON: Duration = Duration::from_secs(5);

/// Unix milliseconds of `granted.expires_at`.
fn expires_at_ms(granted: &Granted) -> i64 {
    timestamp_ms(
        granted
            .expires_at
            .as_ref()
            .expect("Granted without expires_at"),
    )
}

/// An Acquire request that tries once; `limit` 0 is exclusive.
fn request(name: &str, holder: &str, ttl_ms: i64, limit: u32) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms,
        wait_ms: 0,
        limit,
        ..AcquireRequest::default()
    }
}

async fn grant(client: &mut Client, name: &str, holder: &str, ttl_ms: i64) -> Granted {
    must_acquire_request(client, request(name, holder, ttl_ms, 0)).await
}

/// The `Lost.reason` of a renewal of `granted`; panics if it is renewed.
async fn lost_reason(client: &mut Client, granted: &Granted) -> String {
    let response = renew_once(client, granted, 0).await.expect("Renew failed");
    match response.result {
        Some(renew_response::Result::Lost(lost)) => lost.reason,
        other => panic!(
            "expected lost for token {}, got {other:?}",
            granted.fencing_token
        ),
    }
}
