//! Read-write leases (`AcquireRequest.shared`) and the caller's own lease id
//! (`AcquireRequest.lease_id`), run against both stores: every scenario runs once on the embedded
//! store and once on a real redis-server with two `leased` replicas (consecutive clients
//! alternate between them), through real gRPC clients over TCP.
//!
//! What the tests show:
//! - shared grants hold together, an exclusive grant alone; Describe, List and Watch mark each
//!   holder's mode;
//! - one FIFO queue for both modes: a writer waiting behind readers is granted before later
//!   readers (a try-once reader too), and the readers behind a writer are granted together at
//!   its release;
//! - tokens increase across modes; a shared grant's lock-delay keeps writers out, not readers;
//!   revoking one shared grant leaves the others;
//! - `shared` with a limit is INVALID_ARGUMENT naming `shared`, a counting lease answers a shared
//!   caller FAILED_PRECONDITION; a bad own lease id is INVALID_ARGUMENT naming `lease_id`;
//! - an Acquire retried with its own lease id is answered the same grant (only when it asks for
//!   the mode and limit it holds), and a retried wait keeps its place in line (on the other
//!   replica, too);
//! - 100 give-ups racing releases, each by cancel + Release of the own id: 0 orphans.

mod give_up;
mod modes;
mod own_ids;

use std::time::Duration;

use crate::common::*;
use leased::proto::{
    AcquireRequest, AcquireResponse, Granted, NotGranted, ReleaseRequest, acquire_response,
    lease_service_client::LeaseServiceClient,
};
use tonic::transport::Channel;

type Client = LeaseServiceClient<Channel>;
type AcquireStream = tonic::Streaming<AcquireResponse>;

/// How long something that should happen at once may take on a loaded machine.
const SOON: Duration = Duration::from_secs(5);

/// How long a caller must be seen still waiting to count as "not granted".
const A_WHILE: Duration = Duration::from_millis(500);

/// An Acquire request: shared or exclusive, trying once (`wait_ms` 0) or waiting.
fn request(name: &str, holder: &str, shared: bool, wait_ms: i64) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms: 30_000,
        wait_ms,
        shared,
        ..AcquireRequest::default()
    }
}

/// A fresh own lease id, as the clients make them: 32 hex digits from the OS's CSPRNG.
fn own_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A try-once Acquire of `name` that must be granted.
async fn take(client: &mut Client, name: &str, holder: &str, shared: bool) -> Granted {
    must_acquire_request(client, request(name, holder, shared, 0)).await
}

/// A try-once Acquire of `name` that must not be granted.
async fn refused(client: &mut Client, name: &str, holder: &str, shared: bool) -> NotGranted {
    let terminal = acquire_request_terminal(client, request(name, holder, shared, 0)).await;
    expect_not_granted(terminal, holder)
}

/// Starts a waiting Acquire and returns once the server reports its position.
async fn wait_in_line(
    client: &mut Client,
    name: &str,
    holder: &str,
    shared: bool,
) -> (AcquireStream, u32) {
    let (stream, waiting) =
        start_waiting_request(client, request(name, holder, shared, 60_000)).await;
    (stream, waiting.position)
}

/// The grant a waiting Acquire ends with, within [`SOON`].
async fn granted_within(stream: &mut AcquireStream, who: &str) -> Granted {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match next_result_within(stream, left).await {
            acquire_response::Result::Waiting(_) => continue,
            terminal => return expect_granted(terminal, who),
        }
    }
}

/// Releases `name` for `lease_id`; whether it ended a grant.
async fn release_id(client: &mut Client, name: &str, lease_id: &str) -> bool {
    client
        .release(ReleaseRequest {
            name: name.into(),
            lease_id: lease_id.into(),
        })
        .await
        .unwrap_or_else(|status| panic!("Release {name} failed: {status:?}"))
        .into_inner()
        .released
}

use give_up::*;
use modes::*;
use own_ids::*;

on_both_stores!(
    readers_hold_together_and_a_writer_alone,
    a_waiting_writer_holds_back_later_readers,
    readers_behind_a_writer_are_granted_together,
    tokens_increase_across_modes,
    a_shared_lock_delay_keeps_writers_out_not_readers,
    revoking_one_shared_grant_leaves_the_others,
    watch_and_list_show_each_holders_mode,
    shared_with_a_limit_is_refused,
    a_retry_with_the_same_id_is_answered_the_same_grant,
    a_retry_that_asks_for_another_mode_or_limit_is_refused,
    a_retried_wait_keeps_its_place_in_line,
    a_retry_ends_the_call_it_took_the_place_of,
    a_bad_own_lease_id_is_invalid_argument_naming_lease_id,
    give_ups_by_cancel_and_release_leave_no_orphans,
);
