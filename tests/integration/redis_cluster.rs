//! `leased` on a `redis-cluster://` URL: a real three-master Redis Cluster on loopback. Every
//! lease's keys share a hash tag, so each script touches one slot wherever the name hashes; the
//! release wake-up crosses nodes, on the name's shard channel (SPUBLISH), never classic PUBLISH;
//! and Watch and waiting follow a name whose slot moves to another master.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use crate::common::{
    harness::{
        cluster::{RedisCluster, key_slot, keys_in_slot, slot_owner, slot_ranges},
        redis::{Resp, query},
    },
    *,
};
use futures::StreamExt;
use leased::{
    lease::{
        AcquireOutcome, Caller, LeaseId, LeaseStore, StoreEvents, ValidatedAcquire,
        limits::parse_name,
    },
    proto::{
        AcquireRequest, Granted, WatchEvent, acquire_response,
        lease_service_client::LeaseServiceClient, watch_event::Cause,
    },
    store::{RedisOptions, RedisStore, ReplicaWait},
};

/// Grants, renewals, releases and increasing tokens for names spread over every node, and a
/// waiter on one replica woken by a release through another, on a three-master cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut client_a = replica_a.client().await;
    let mut client_b = replica_b.client().await;

    // 30 names land on all three masters' slots.
    for index in 0..30 {
        let name = format!("cluster/job-{index}");
        let first = must_acquire(&mut client_a, &name, 10_000).await;
        must_renew(&mut client_a, &first).await;
        assert!(release(&mut client_a, &first).await);
        let second = must_acquire(&mut client_b, &name, 10_000).await;
        assert!(second.fencing_token > first.fencing_token);
        assert!(release(&mut client_b, &second).await);
    }

    let held = must_acquire(&mut client_b, "cluster/handoff", 30_000).await;
    let (mut waiter, _) = start_waiting(&mut client_a, "cluster/handoff", "on-a", 20_000).await;
    assert!(release(&mut client_b, &held).await);
    let released_at = Instant::now();
    let terminal = next_result(&mut waiter).await;
    assert!(
        matches!(terminal, acquire_response::Result::Granted(_)),
        "{terminal:?}"
    );
    assert!(
        released_at.elapsed() < Duration::from_secs(1),
        "woken by the release, not by the 30 s expiry: {:?}",
        released_at.elapsed()
    );
}

/// Counting leases with a lock-delay on a cluster: for 12 names spread over the masters, three
/// permits are granted with increasing tokens, a fourth caller waits and is granted the permit a
/// release frees (woken across replicas), Describe lists every holder, and the permits' keys
/// share the name's slot (a cross-slot script would fail with CROSSSLOT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_leases_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut client_a = replica_a.client().await;
    let mut client_b = replica_b.client().await;
    let request = |name: &str, holder: &str, wait_ms: i64| AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms: 30_000,
        wait_ms,
        limit: 3,
        lock_delay_ms: 1_000,
        ..AcquireRequest::default()
    };

    for index in 0..12 {
        let name = format!("cluster/pool-{index}");
        let mut permits = Vec::new();
        for holder in ["p0", "p1", "p2"] {
            permits.push(must_acquire_request(&mut client_a, request(&name, holder, 0)).await);
        }
        assert!(
            permits
                .windows(2)
                .all(|pair| pair[0].fencing_token < pair[1].fencing_token)
        );
        let (mut waiter, waiting) =
            start_waiting_request(&mut client_b, request(&name, "w", 20_000)).await;
        assert_eq!((waiting.position, waiting.held, waiting.limit), (1, 3, 3));
        let described = describe(&mut client_b, &name).await;
        assert_eq!(described.limit, 3);
        assert_eq!(described.holders.len(), 3);
        assert_eq!(described.waiters, 1);

        assert!(release(&mut client_a, &permits[1]).await);
        match next_result(&mut waiter).await {
            acquire_response::Result::Granted(granted) => {
                assert!(granted.fencing_token > permits[2].fencing_token);
                assert!(release(&mut client_b, &granted).await);
            }
            other => panic!("{name}: expected granted, got {other:?}"),
        }
        assert!(release(&mut client_a, &permits[0]).await);
        assert!(release(&mut client_a, &permits[2]).await);
        assert!(!describe(&mut client_a, &name).await.held);
    }
}

/// Read-write leases and own lease ids on a cluster, for names on every master: readers hold
/// together, a writer waiting behind them holds back a later reader and is granted at the last
/// reader's release (woken across replicas), the later reader follows at the writer's release;
/// an own lease id's retry through the other replica is answered the same grant, and its
/// release ends the id (a late Acquire of it grants nothing). Every key a script touches shares
/// the name's slot (a cross-slot script would fail with CROSSSLOT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_leases_and_own_ids_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut client_a = replica_a.client().await;
    let mut client_b = replica_b.client().await;
    let request = |name: &str, holder: &str, shared: bool, wait_ms: i64| AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms: 30_000,
        wait_ms,
        shared,
        ..AcquireRequest::default()
    };
    for (_, name) in one_name_per_master(&cluster.ports()) {
        let first = must_acquire_request(&mut client_a, request(&name, "r1", true, 0)).await;
        let second = must_acquire_request(&mut client_b, request(&name, "r2", true, 0)).await;
        let (mut writer, waiting) =
            start_waiting_request(&mut client_b, request(&name, "w", false, 20_000)).await;
        assert_eq!((waiting.position, waiting.held), (1, 2));
        let (mut later, waiting) =
            start_waiting_request(&mut client_a, request(&name, "r3", true, 20_000)).await;
        assert_eq!(waiting.position, 2);
        let described = describe(&mut client_a, &name).await;
        assert!(described.holders.iter().all(|holder| holder.shared));
        assert!(release(&mut client_a, &first).await);
        assert!(release(&mut client_b, &second).await);
        let written = match next_result(&mut writer).await {
            acquire_response::Result::Granted(granted) => granted,
            other => panic!("{name}: expected the writer granted, got {other:?}"),
        };
        assert!(written.fencing_token > second.fencing_token);
        assert!(release(&mut client_b, &written).await);
        loop {
            match next_result(&mut later).await {
                acquire_response::Result::Waiting(_) => continue,
                acquire_response::Result::Granted(granted) => {
                    assert!(granted.fencing_token > written.fencing_token);
                    assert!(release(&mut client_a, &granted).await);
                    break;
                }
                other => panic!("{name}: expected the later reader granted, got {other:?}"),
            }
        }

        // The same name (on the same master), free again, with the caller's own lease id.
        let own = name.clone();
        let id = format!("own-lease-id-{}", own.replace('/', "-"));
        let with_id = |wait_ms| AcquireRequest {
            lease_id: id.clone(),
            ..request(&own, "own", false, wait_ms)
        };
        let grant = must_acquire_request(&mut client_a, with_id(0)).await;
        assert_eq!(
            must_acquire_request(&mut client_b, with_id(5_000)).await,
            grant
        );
        assert!(release(&mut client_b, &grant).await);
        let status = acquire_refusal(&mut client_a, with_id(0)).await;
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert!(!describe(&mut client_a, &own).await.held);
    }
}

/// For each master, a lease name whose slot it serves: `(the master's port, name)`. Slots come
/// from `CLUSTER KEYSLOT` of the name's lease key and `CLUSTER SLOTS`.
fn one_name_per_master(ports: &[u16]) -> Vec<(u16, String)> {
    let ranges = slot_ranges(ports[0]).expect("CLUSTER SLOTS failed");
    let mut names: Vec<(u16, String)> = Vec::new();
    for index in 0..1_000 {
        if names.len() == ports.len() {
            break;
        }
        let name = format!("cluster/fair-{index}");
        let slot = key_slot(ports[0], &format!("leased:{{{name}}}"));
        let owner = ranges
            .iter()
            .find(|range| (range.first..=range.last).contains(&slot))
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
            .master;
        if !names.iter().any(|(port, _)| *port == owner) {
            names.push((owner, name));
        }
    }
    assert_eq!(
        names.len(),
        ports.len(),
        "a name for every master: {names:?}"
    );
    names
}

/// Fair waiting on a three-master cluster with two replicas, for a name on each master: grants
/// and releases that nobody waits for publish nothing on any node; a waiter on replica A is
/// granted promptly on a release through replica B, woken through SPUBLISH on the name's master,
/// and no node ever sees a classic PUBLISH. No queue key is left afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_shard_pubsub_on_every_master() {
    let cluster = RedisCluster::start();
    let ports = cluster.ports();
    let names = one_name_per_master(&ports);
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut client_a = replica_a.client().await;
    let mut client_b = replica_b.client().await;
    for port in &ports {
        assert_eq!(
            query(*port, &["CONFIG", "RESETSTAT"]).unwrap(),
            Resp::Simple("OK".into())
        );
    }

    for (_, name) in &names {
        for _ in 0..5 {
            let granted = must_acquire(&mut client_a, name, 10_000).await;
            assert!(release(&mut client_b, &granted).await);
        }
    }
    for port in &ports {
        let (publish, spublish) = (
            command_calls(*port, "publish"),
            command_calls(*port, "spublish"),
        );
        assert_eq!(
            (publish, spublish),
            (0, 0),
            "node {port}: releases nobody waited for published (publish, spublish)"
        );
    }

    for (port, name) in &names {
        for round in 0..3 {
            let held = must_acquire(&mut client_b, name, 30_000).await;
            let (mut waiter, first) = start_waiting(&mut client_a, name, "on-a", 20_000).await;
            assert_eq!(first.position, 1, "{name}: {first:?}");
            assert!(release(&mut client_b, &held).await);
            let released_at = Instant::now();
            let terminal = next_result_within(&mut waiter, Duration::from_secs(5)).await;
            let handoff = released_at.elapsed();
            let acquire_response::Result::Granted(granted) = terminal else {
                panic!("{name} (master {port}), round {round}: expected granted, got {terminal:?}");
            };
            assert!(
                handoff < Duration::from_secs(1),
                "{name} (master {port}), round {round}: woken {handoff:?} after the release"
            );
            assert!(granted.fencing_token > held.fencing_token);
            assert!(release(&mut client_a, &granted).await);
        }
    }
    for (port, name) in &names {
        let (publish, spublish) = (
            command_calls(*port, "publish"),
            command_calls(*port, "spublish"),
        );
        println!("master {port} ({name}): publish {publish}, spublish {spublish}");
        assert_eq!(publish, 0, "master {port}: classic PUBLISH was used");
        assert!(
            spublish > 0,
            "master {port}: the waiters of {name} were not woken through SPUBLISH"
        );
    }

    let start = Instant::now();
    loop {
        let left: Vec<String> = ports
            .iter()
            .map(|port| (*port, "*:queue"))
            .filter_map(|(port, pattern)| {
                let keys = query(port, &["KEYS", pattern]).unwrap().to_string();
                (!keys.is_empty()).then(|| format!("{port}: {keys}"))
            })
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "queue keys left after every waiter is gone: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// List on a three-master cluster: 2,500 leases under a prefix (spread over every master), next
/// to leases under a sibling prefix, are each on exactly one page of at most 1000, and nothing
/// else is; pages of 7 over a narrower prefix find each of its leases once too (batches that do
/// not fit on a page, pages that move from one master to the next).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_through_2500_leases_on_every_master() {
    let cluster = RedisCluster::start();
    let server = Leased::start(Some(cluster.url())).await;
    let store = RedisStore::connect(
        &RedisOptions {
            url: cluster.url(),
            command_timeout: Duration::from_secs(2),
            pool_size: 4,
            key_prefix: "leased:".into(),
            max_waiters_per_name: 1_000,
            counter_keep: Duration::from_secs(600),
            wait_for_replicas: ReplicaWait::NONE,
        },
        StoreEvents::new(),
    )
    .unwrap();
    let start = Instant::now();
    while store.ping().await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the store never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let names: Vec<String> = (0..2_500)
        .map(|index| format!("list/many/{index:04}"))
        .chain((0..50).map(|index| format!("list/many-not/{index}")))
        .collect();
    let granted = futures::stream::iter(&names)
        .map(|name| {
            let request = ValidatedAcquire {
                name: parse_name(name).unwrap(),
                holder: "lister".into(),
                ttl: Duration::from_secs(120),
                wait: Duration::ZERO,
                limit: 1,
                lock_delay: Duration::ZERO,
                shared: false,
                max_shared: 10_000,
                lease_id: None,
                caller: Caller::anyone(),
            };
            let store = &store;
            async move {
                store
                    .try_acquire(&request, &LeaseId::generate(), None)
                    .await
            }
        })
        .buffer_unordered(64)
        .filter(|outcome| std::future::ready(matches!(outcome, Ok(AcquireOutcome::Granted(_)))))
        .count()
        .await;
    assert_eq!(granted, names.len());
    for port in cluster.ports() {
        let keys = query(port, &["DBSIZE"]).unwrap().as_int().unwrap();
        assert!(
            keys > 500,
            "node {port} holds {keys} keys: the names should spread"
        );
    }

    let mut admin = admin_client(&server.endpoint()).await;
    let expected: BTreeSet<String> = names[..2_500].iter().cloned().collect();
    let started = Instant::now();
    let pages = list_pages(&mut admin, "list/many/", 1_000, 100).await;
    println!(
        "2,500 leases over 3 masters: {} pages of at most 1000 in {:?}",
        pages.len(),
        started.elapsed()
    );
    let listed: Vec<String> = pages
        .iter()
        .flat_map(|page| {
            assert!(page.leases.len() <= 1_000);
            page.leases.iter().map(|lease| lease.name.clone())
        })
        .collect();
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(listed.len(), unique.len(), "a lease on two pages");
    assert_eq!(unique, expected);
    assert!(
        pages
            .iter()
            .flat_map(|page| &page.leases)
            .all(|lease| lease.holder == "lister" && lease.fencing_token > 0 && lease.limit == 1)
    );

    let narrow: BTreeSet<String> = (0..100)
        .map(|index| format!("list/many/00{index:02}"))
        .collect();
    let pages = list_pages(&mut admin, "list/many/00", 7, 1_000).await;
    let listed: Vec<String> = pages
        .iter()
        .flat_map(|page| page.leases.iter().map(|lease| lease.name.clone()))
        .collect();
    assert_eq!(
        listed.len(),
        narrow.len(),
        "a lease on two pages, or missed"
    );
    assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), narrow);
}

/// Watch on a cluster, for a name on each master: the snapshot, then a grant and a release made
/// through another replica, in order, from the name's shard channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_names_on_every_master() {
    let cluster = RedisCluster::start();
    let names = one_name_per_master(&cluster.ports());
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut watcher = replica_a.client().await;
    let mut client = replica_b.client().await;
    for (port, name) in &names {
        let mut events = open_watch(&mut watcher, name).await;
        let context = format!("{name} (master {port})");
        snapshot_grant_and_release(&mut events, &mut client, name, &context).await;
    }
}

/// The first events of a fresh Watch of the free lease `name`: its snapshot (not held); then a
/// grant through `client` as GRANTED with its token, and its release as RELEASED, each within
/// 5 s. Answers the grant.
async fn snapshot_grant_and_release(
    events: &mut tonic::Streaming<WatchEvent>,
    client: &mut LeaseServiceClient<tonic::transport::Channel>,
    name: &str,
    context: &str,
) -> Granted {
    let snapshot = next_event_within(events, Duration::from_secs(5)).await;
    assert_eq!(
        (snapshot.cause(), snapshot.held),
        (Cause::Snapshot, false),
        "{context}"
    );
    let granted = must_acquire(client, name, 30_000).await;
    let event = next_event_within(events, Duration::from_secs(5)).await;
    assert_eq!(
        (event.cause(), event.fencing_token, event.held),
        (Cause::Granted, granted.fencing_token, true),
        "{context}"
    );
    assert!(release(client, &granted).await);
    let event = next_event_within(events, Duration::from_secs(5)).await;
    assert_eq!(
        (event.cause(), event.fencing_token, event.held),
        (Cause::Released, granted.fencing_token, false),
        "{context}"
    );
    granted
}

/// Watch and waiting across a slot move, on a three-master cluster with two replicas. A Watch
/// through replica A on a name: its snapshot, then a grant and a release through B, as events.
/// Then the name's slot moves to another master, with its keys, while the lease is free
/// (checked: every node's `CLUSTER SLOTS` names the new master, which holds the name's keys, and
/// the old one holds none). A grant through B after the move reaches the watcher within 15 s, as
/// GRANTED or as a SNAPSHOT that shows that holder and token (a snapshot of the free lease may
/// come first), with a token above those before the move; after 1 s in which only snapshots of
/// that grant may come (the resubscriptions' re-reads), the release through B comes as RELEASED
/// within 5 s (only a repeated snapshot of the holder may come first). A waiter
/// through A on the moved name is granted within 5 s of a release through B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_a_name_across_a_slot_move() {
    let cluster = RedisCluster::start();
    let ports = cluster.ports();
    let (source, name) = one_name_per_master(&ports).swap_remove(0);
    let target = *ports.iter().find(|port| **port != source).unwrap();
    let slot = key_slot(source, &format!("leased:{{{name}}}"));
    let replica_a = Leased::start(Some(cluster.url())).await;
    let replica_b = Leased::start(Some(cluster.url())).await;
    let mut watcher = replica_a.client().await;
    let mut client_a = replica_a.client().await;
    let mut client = replica_b.client().await;

    let mut events = open_watch(&mut watcher, &name).await;
    let context = format!("{name} before the move");
    let before_move = snapshot_grant_and_release(&mut events, &mut client, &name, &context).await;

    let started = Instant::now();
    let moved = cluster.move_slot(slot, target);
    println!(
        "slot {slot} of {name} moved from master {source} to {target} in {:?}: {moved:?}",
        started.elapsed()
    );
    for port in &ports {
        assert_eq!(
            slot_owner(*port, slot),
            Some(target),
            "node {port} after the move"
        );
    }
    let owner_key = format!("leased:{{{name}}}:owner");
    assert!(
        moved.contains(&owner_key),
        "the name's token counter did not move: {moved:?}"
    );
    let on_target = keys_in_slot(target, slot, 1_000);
    assert!(
        moved.iter().all(|key| on_target.contains(key)),
        "keys moved {moved:?}, on the target {on_target:?}"
    );
    assert_eq!(keys_in_slot(source, slot, 1_000), Vec::<String>::new());
    assert_eq!(
        query(target, &["EXISTS", &owner_key]).unwrap(),
        Resp::Int(1)
    );

    let granted = must_acquire(&mut client, &name, 30_000).await;
    let granted_at = Instant::now();
    assert!(granted.fencing_token > before_move.fencing_token);
    let (before, seen) = watch_for(
        &mut events,
        Duration::from_secs(15),
        "GRANTED (or a SNAPSHOT showing the grant) after the move",
        |event| {
            let shows_grant = event.held
                && event.fencing_token == granted.fencing_token
                && event.holder == "test";
            shows_grant && matches!(event.cause(), Cause::Granted | Cause::Snapshot)
        },
        |event| event.cause() == Cause::Snapshot && !event.held,
    )
    .await;
    let seen_after = granted_at.elapsed();
    println!(
        "the grant after the move seen as {:?} {seen_after:?} after it (snapshots before it: {})",
        seen.cause(),
        before.len()
    );

    // The slot-map check that noticed the move resubscribes, and each resubscription may re-read
    // the name: let those snapshots (of this same grant) come before the release, so that the
    // release is a change the moved subscription must carry as itself.
    let settle = Duration::from_secs(1);
    while let Ok(event) = tokio::time::timeout(settle, events.next()).await {
        let event = event
            .expect("the Watch stream ended")
            .expect("the Watch stream failed");
        assert!(
            event.cause() == Cause::Snapshot
                && event.held
                && event.fencing_token == granted.fencing_token,
            "expected only snapshots of the grant while the move settles, got {event:?}"
        );
    }

    assert!(release(&mut client, &granted).await);
    let released_at = Instant::now();
    let (before, _) = watch_for(
        &mut events,
        Duration::from_secs(5),
        "RELEASED after the move",
        |event| {
            event.cause() == Cause::Released
                && event.fencing_token == granted.fencing_token
                && !event.held
        },
        |event| {
            event.cause() == Cause::Snapshot
                && event.held
                && event.fencing_token == granted.fencing_token
        },
    )
    .await;
    println!(
        "the release after the move seen {:?} after it (snapshots before it: {})",
        released_at.elapsed(),
        before.len()
    );

    let held = must_acquire(&mut client, &name, 30_000).await;
    let (mut waiter, first) = start_waiting(&mut client_a, &name, "on-a", 20_000).await;
    assert_eq!(first.position, 1, "{first:?}");
    assert!(release(&mut client, &held).await);
    let released_at = Instant::now();
    let (waitings, terminal) = read_to_terminal(&mut waiter, Duration::from_secs(5)).await;
    let handoff = released_at.elapsed();
    let acquire_response::Result::Granted(woken) = terminal else {
        panic!("the waiter on the moved name: expected granted, got {terminal:?}");
    };
    println!(
        "the waiter on A granted {handoff:?} after the release through B (waiting messages \
         meanwhile: {waitings:?})"
    );
    assert!(woken.fencing_token > held.fencing_token);
    assert!(release(&mut client_a, &woken).await);
}
