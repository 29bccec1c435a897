//! The give-up race with the caller's own lease id: a waiter cancels its Acquire while the
//! holder's release hands it the lease, then releases its id. Whichever way each race goes,
//! nothing is left held.

use futures::future::join_all;

use super::*;

/// How many give-ups race a release.
const GIVE_UPS: usize = 100;

pub async fn give_ups_by_cancel_and_release_leave_no_orphans(replicas: &Replicas) {
    let races = (0..GIVE_UPS).map(|index| race(replicas, index));
    let outcomes = join_all(races).await;
    let granted_before_cancel = outcomes.iter().filter(|granted| **granted).count();
    let mut client = replicas.client(0).await;
    let mut orphans = 0;
    for index in 0..GIVE_UPS {
        if describe(&mut client, &format!("give-up/{index}"))
            .await
            .held
        {
            orphans += 1;
        }
    }
    println!(
        "{GIVE_UPS} give-ups by cancel + Release of the own id: {granted_before_cancel} saw \
         `granted` before cancelling, {orphans} orphans"
    );
    assert_eq!(orphans, 0, "leases left held after their callers gave up");
}

/// One race on its own name: the holder releases while the waiter cancels (after a delay that
/// spreads the cancels around the release), then the waiter releases its id. Whether the waiter
/// read `granted` before it cancelled.
async fn race(replicas: &Replicas, index: usize) -> bool {
    let name = format!("give-up/{index}");
    let mut holder = replicas.client(index).await;
    let mut waiter = replicas.client(index + 1).await;
    let held = take(&mut holder, &name, "holder", false).await;
    let id = own_id();
    let (mut stream, _) = start_waiting_request(
        &mut waiter,
        AcquireRequest {
            lease_id: id.clone(),
            ..request(&name, "waiter", false, 60_000)
        },
    )
    .await;
    let cancel_after = Duration::from_micros((index as u64 % 20) * 150);
    let release = async { assert!(release(&mut holder, &held).await) };
    let give_up = async {
        tokio::time::sleep(cancel_after).await;
        // Whatever the stream brought so far: a grant already read is the caller's to release.
        let granted = matches!(
            tokio::time::timeout(Duration::ZERO, next_result(&mut stream)).await,
            Ok(acquire_response::Result::Granted(_))
        );
        drop(stream); // cancel
        granted
    };
    let ((), granted) = tokio::join!(release, give_up);
    release_id(&mut waiter, &name, &id).await;
    granted
}
