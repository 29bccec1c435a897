//! Shared and exclusive grants of one name: who may hold together, the order of one queue for
//! both modes, tokens, lock-delay, revoke, and what Describe, List and Watch show.

use leased::proto::{AcquireRequest, watch_event::Cause};
use tonic::Code;

use super::*;

pub async fn readers_hold_together_and_a_writer_alone(replicas: &Replicas) {
    let name = "rw/together";
    let mut clients = Vec::new();
    for index in 0..4 {
        clients.push(replicas.client(index).await);
    }
    let first = take(&mut clients[0], name, "reader-1", true).await;
    let second = take(&mut clients[1], name, "reader-2", true).await;
    let third = take(&mut clients[2], name, "reader-3", true).await;
    assert_ne!(first.lease_id, second.lease_id);

    // A writer is refused while readers hold it, and told of the grant that frees soonest.
    let busy = refused(&mut clients[3], name, "writer", false).await;
    assert_eq!((busy.held, busy.limit), (3, 1), "{busy:?}");
    assert!(busy.holder.starts_with("reader-"), "{busy:?}");

    let description = describe(&mut clients[0], name).await;
    assert!(description.held);
    assert_eq!(description.limit, 1);
    let tokens: Vec<u64> = description
        .holders
        .iter()
        .map(|h| h.fencing_token)
        .collect();
    assert_eq!(
        tokens,
        [
            first.fencing_token,
            second.fencing_token,
            third.fencing_token
        ]
    );
    assert!(description.holders.iter().all(|holder| holder.shared));

    for (client, grant) in clients.iter_mut().zip([&first, &second, &third]) {
        assert!(release(client, grant).await);
    }
    let writer = take(&mut clients[3], name, "writer", false).await;
    let description = describe(&mut clients[0], name).await;
    assert_eq!(description.holders.len(), 1);
    assert!(!description.holders[0].shared);

    // A reader is refused while the writer holds it.
    let busy = refused(&mut clients[0], name, "reader-4", true).await;
    assert_eq!(busy.fencing_token, writer.fencing_token);
    assert!(release(&mut clients[3], &writer).await);
}

/// A writer waiting behind readers holds back every reader that comes after it, try-once
/// readers included, though only readers hold the name; it is granted when the last of them
/// releases, before the later readers.
pub async fn a_waiting_writer_holds_back_later_readers(replicas: &Replicas) {
    let name = "rw/writer-first";
    let mut reader = replicas.client(0).await;
    let mut writer = replicas.client(1).await;
    let mut later = replicas.client(2).await;
    let held = take(&mut reader, name, "reader", true).await;

    let (mut writer_stream, position) = wait_in_line(&mut writer, name, "writer", false).await;
    assert_eq!(position, 1);
    let (mut later_stream, position) = wait_in_line(&mut later, name, "later reader", true).await;
    assert_eq!(position, 2);
    refused(&mut replicas.client(3).await, name, "try-once reader", true).await;
    still_waiting_for(&mut later_stream, A_WHILE).await;

    assert!(release(&mut reader, &held).await);
    let written = granted_within(&mut writer_stream, "writer").await;
    assert!(written.fencing_token > held.fencing_token);
    still_waiting_for(&mut later_stream, A_WHILE).await;

    assert!(release(&mut writer, &written).await);
    let read = granted_within(&mut later_stream, "later reader").await;
    assert!(read.fencing_token > written.fencing_token);
}

/// The readers waiting behind a writer are granted together at its release, and a writer behind
/// them waits for all of them.
pub async fn readers_behind_a_writer_are_granted_together(replicas: &Replicas) {
    let name = "rw/run";
    let mut holder = replicas.client(0).await;
    let written = take(&mut holder, name, "writer", false).await;
    let mut readers = Vec::new();
    for index in 0..3 {
        let mut client = replicas.client(index + 1).await;
        let who = format!("reader-{index}");
        let (stream, position) = wait_in_line(&mut client, name, &who, true).await;
        assert_eq!(position, index as u32 + 1);
        readers.push((client, stream, who));
    }
    let mut last_writer = replicas.client(5).await;
    let (mut last_stream, position) = wait_in_line(&mut last_writer, name, "writer-2", false).await;
    assert_eq!(position, 4);

    assert!(release(&mut holder, &written).await);
    let mut grants = Vec::new();
    for (_, stream, who) in &mut readers {
        grants.push(granted_within(stream, who).await);
    }
    // All three hold at once.
    let description = describe(&mut holder, name).await;
    assert_eq!(description.holders.len(), 3, "{description:?}");
    still_waiting_for(&mut last_stream, A_WHILE).await;
    for ((client, _, _), grant) in readers.iter_mut().zip(&grants) {
        assert!(release(client, grant).await);
    }
    let last = granted_within(&mut last_stream, "writer-2").await;
    assert!(
        grants
            .iter()
            .all(|grant| grant.fencing_token < last.fencing_token)
    );
}

pub async fn tokens_increase_across_modes(replicas: &Replicas) {
    let name = "rw/tokens";
    let mut client = replicas.client(0).await;
    let mut other = replicas.client(1).await;
    let mut last = 0;
    for round in 0..20 {
        let shared = round % 3 != 0;
        let grant = take(&mut client, name, "holder", shared).await;
        assert!(grant.fencing_token > last, "round {round}");
        last = grant.fencing_token;
        if shared {
            // A second reader beside it: a larger token again.
            let beside = take(&mut other, name, "beside", true).await;
            assert!(beside.fencing_token > last);
            last = beside.fencing_token;
            assert!(release(&mut other, &beside).await);
        }
        assert!(release(&mut client, &grant).await);
    }
}

/// A shared grant that expires with a lock-delay keeps writers out until the delay ends, and
/// readers in.
pub async fn a_shared_lock_delay_keeps_writers_out_not_readers(replicas: &Replicas) {
    let name = "rw/lock-delay";
    let mut client = replicas.client(0).await;
    let mut other = replicas.client(1).await;
    let expiring = must_acquire_request(
        &mut client,
        AcquireRequest {
            ttl_ms: 200,
            lock_delay_ms: 1_500,
            ..request(name, "expiring reader", true, 0)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Expired, in its delay: a writer is refused, a reader is granted.
    refused(&mut other, name, "writer", false).await;
    let reader = take(&mut other, name, "reader", true).await;
    assert!(reader.fencing_token > expiring.fencing_token);
    assert!(release(&mut other, &reader).await);
    refused(&mut other, name, "writer", false).await;
    // Once the delay is over, the writer is granted.
    tokio::time::sleep(Duration::from_millis(1_400)).await;
    take(&mut other, name, "writer", false).await;
}

pub async fn revoking_one_shared_grant_leaves_the_others(replicas: &Replicas) {
    let name = "rw/revoke";
    let mut client = replicas.client(0).await;
    let mut admin = replicas.admin(1).await;
    let first = take(&mut client, name, "reader-1", true).await;
    let second = take(&mut client, name, "reader-2", true).await;
    let answer = revoke(&mut admin, name, "stuck reader", first.fencing_token).await;
    assert!(answer.revoked);
    assert_eq!(answer.fencing_token, first.fencing_token);

    let lost = renew_once(&mut client, &first, 0).await;
    assert!(
        format!("{lost:?}").contains("revoked: stuck reader"),
        "{lost:?}"
    );
    let kept = renew_once(&mut client, &second, 0).await;
    assert!(format!("{kept:?}").contains("Renewed"), "{kept:?}");
    assert!(
        !check_token(&mut client, name, first.fencing_token)
            .await
            .current
    );
    assert!(
        check_token(&mut client, name, second.fencing_token)
            .await
            .current
    );
    // A writer still waits for the other reader.
    refused(&mut client, name, "writer", false).await;
    assert!(release(&mut client, &second).await);
    take(&mut client, name, "writer", false).await;
}

pub async fn watch_and_list_show_each_holders_mode(replicas: &Replicas) {
    let name = "rw-list/watched";
    let mut client = replicas.client(0).await;
    let mut watcher = replicas.client(1).await;
    let mut events = open_watch(&mut watcher, name).await;
    let snapshot = next_event_within(&mut events, SOON).await;
    assert_eq!(snapshot.cause(), Cause::Snapshot);

    let reader = take(&mut client, name, "reader", true).await;
    let granted = next_event_within(&mut events, SOON).await;
    assert_eq!(granted.cause(), Cause::Granted);
    assert_eq!(granted.fencing_token, reader.fencing_token);
    assert!(granted.holders.iter().all(|holder| holder.shared));
    let beside = take(&mut client, name, "reader-2", true).await;
    let granted = next_event_within(&mut events, SOON).await;
    assert_eq!(granted.holders.len(), 2, "{granted:?}");
    assert!(granted.holders.iter().all(|holder| holder.shared));

    let mut admin = replicas.admin(0).await;
    let pages = list_pages(&mut admin, "rw-list/", 100, 10).await;
    let listed: Vec<_> = pages.iter().flat_map(|page| &page.leases).collect();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].holders.len(), 2);
    assert!(listed[0].holders.iter().all(|holder| holder.shared));

    assert!(release(&mut client, &reader).await);
    assert!(release(&mut client, &beside).await);
    let writer = take(&mut client, name, "writer", false).await;
    let mut seen_writer = false;
    for _ in 0..3 {
        let event = next_event_within(&mut events, SOON).await;
        if event.cause() == Cause::Granted {
            assert_eq!(event.fencing_token, writer.fencing_token);
            assert_eq!(event.holders.len(), 1);
            assert!(!event.holders[0].shared);
            seen_writer = true;
            break;
        }
    }
    assert!(seen_writer, "no GRANTED event for the writer");
    let pages = list_pages(&mut admin, "rw-list/", 100, 10).await;
    let listed: Vec<_> = pages.iter().flat_map(|page| &page.leases).collect();
    assert!(!listed[0].holders[0].shared);
}

pub async fn shared_with_a_limit_is_refused(replicas: &Replicas) {
    let name = "rw/limit";
    let mut client = replicas.client(0).await;
    let status = acquire_refusal(
        &mut client,
        AcquireRequest {
            limit: 3,
            ..request(name, "reader", true, 0)
        },
    )
    .await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("shared"), "{status:?}");

    // A counting lease held: a shared caller asks for another limit (1).
    must_acquire_request(
        &mut client,
        AcquireRequest {
            limit: 3,
            ..request(name, "permit", false, 0)
        },
    )
    .await;
    let status = acquire_refusal(&mut client, request(name, "reader", true, 0)).await;
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(status.message().contains('3'), "{status:?}");
}
