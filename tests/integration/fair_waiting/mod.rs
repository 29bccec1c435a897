//! Fair FIFO waiting: the callers waiting for a busy lease form one queue per name, across every
//! `leased` replica on the same Redis, and are granted in the order their wait began.
//!
//! What the tests show, through real gRPC clients over TCP:
//! - arrival order: waiters alternating between two replicas are granted in the order they
//!   arrived; each hears its place (`Waiting.position`, 1 = next in line) when it starts waiting
//!   and again as the ones ahead of it are granted or leave;
//! - no barging: while anyone waits, a try-once Acquire answers not_granted, even in the moment
//!   the lease is handed from a releasing holder to the first waiter, and a newcomer queues last;
//! - leaving: a cancelled waiter or one whose `wait_ms` runs out leaves the queue, and a replica
//!   killed with SIGKILL stops holding up the queue within 3 s, whether the holder releases or
//!   expires;
//! - a lost wake-up: a release published while the waiter's replica had lost its subscription
//!   (its connection killed on the Redis side) still reaches the waiter within 3 s;
//! - expiry: when the holder neither renews nor releases, the first waiter is granted right after
//!   the expiry;
//! - Redis traffic: a release nobody waits for publishes nothing; a release with a waiter uses
//!   sharded pub/sub (SPUBLISH), never classic PUBLISH;
//! - `--max-waiters-per-name` bounds the whole queue of a name across replicas;
//! - the queue's keys (`leased:{name}:queue`, `leased:{name}:replicas`) are gone once nobody
//!   waits.
//!
//! Scenarios that make sense on both stores run twice (`order::memory::NAME`,
//! `order::redis::NAME`); on the embedded store the "two replicas" are one server. Timing bounds
//! are wide: the test machine has two noisy cores.
//!
//! Two modules: `order` (the scenarios on both stores: arrival order, no barging, leaving, expiry)
//! and `redis_queue` (on Redis only: a killed replica, a lost wake-up, the Redis traffic, the bound
//! across replicas, the queue's keys); the helpers they share are below.

mod order;
mod redis_queue;

use std::time::Duration;

use crate::common::*;
use leased::proto::{NotGranted, lease_service_client::LeaseServiceClient};
use tonic::transport::Channel;

type Client = LeaseServiceClient<Channel>;

/// How long something that should happen at once may take on a loaded machine.
const SOON: Duration = Duration::from_secs(5);

/// How long a caller must be seen still waiting to count as "not granted".
const A_WHILE: Duration = Duration::from_millis(300);

/// A not_granted seen while the lease is handed to `heir`: either nobody holds it for the moment
/// (holder "", token 0, remaining_ms 0) or `heir` already does.
fn assert_free_or_held_by(not_granted: &NotGranted, heir: &str) {
    let momentarily_free = not_granted.holder.is_empty()
        && not_granted.fencing_token == 0
        && not_granted.remaining_ms == 0;
    let held_by_heir = not_granted.holder == heir && not_granted.fencing_token > 0;
    assert!(
        momentarily_free || held_by_heir,
        "expected the lease free for a moment or held by {heir}: {not_granted:?}"
    );
}

/// Who holds `name` now, per Describe ("" when nobody does).
async fn holder_of(client: &mut Client, name: &str) -> String {
    let described = describe(client, name).await;
    if described.held {
        described.holder
    } else {
        String::new()
    }
}
