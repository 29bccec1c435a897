//! Faults on one Redis: network and process faults of Redis and of the replicas, each once in
//! the CI schedule and repeated in the ignored long run.

use std::{net::SocketAddr, time::Duration};

use crate::common::{
    proxy::{Fault, FaultProxy, ProxyCounts},
    *,
};
use crate::reliability::checker::{
    self, Checker, Counting, ReadWrite, Report, Stalled, Workload, until,
};
use crate::reliability::{
    COUNTING_LIMIT, REDIS_TIMEOUT, SHARED_PERCENT, assert_report, ci_workload, long_run_seconds,
    one_at_a_time, start_clients,
};

/// Puts `fault` on the links of `proxies` during `window` on the checker's clock, then lets the
/// traffic pass again and records the fault as `kind`, stalling the `stalled` replicas. Asserts
/// that every proxy injected it: delayed, dropped or cut something (a proxy that silently passed
/// the traffic would make the fault prove nothing).
async fn link_fault(
    checker: &Checker,
    proxies: &[FaultProxy],
    fault: Fault,
    window: std::ops::Range<Duration>,
    kind: &'static str,
    (stalled, endpoints): (Stalled, &[String]),
) {
    until(checker, window.start).await;
    let start = checker.now();
    let before: Vec<ProxyCounts> = proxies.iter().map(|proxy| proxy.stats().counts()).collect();
    for proxy in proxies {
        proxy.set(fault);
    }
    probe(checker, endpoints, &stalled, window.end).await;
    until(checker, window.end).await;
    for proxy in proxies {
        proxy.set(Fault::Pass);
    }
    checker.stalling_fault(kind, start, false, stalled);
    for (proxy, before) in proxies.iter().zip(before) {
        let injected = proxy.stats().counts().since(&before);
        let felt = match fault {
            Fault::Delay(_) => injected.chunks_delayed,
            Fault::BlackHole => injected.chunks_dropped,
            Fault::Cut => injected.connections_closed_by_fault,
            Fault::Pass => continue,
        };
        println!("{kind}: proxy {} injected {injected:?}", proxy.port);
        assert!(
            felt > 0,
            "{kind}: the proxy on port {} injected nothing ({injected:?})",
            proxy.port
        );
    }
}

/// How often [`probe`] calls a stalled replica.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// Describes a name through each of the `stalled` replicas, one call after another every
/// [`PROBE_EVERY`], from now until `end` on the checker's clock, and records each call answered
/// by then: every
/// stalling fault meets calls even when no client happens to be on its replica (a client moves
/// on at its first failure), and the checker holds each to the stall's bound.
async fn probe(checker: &Checker, endpoints: &[String], stalled: &Stalled, end: Duration) {
    use checker::Event;
    use leased::proto::DescribeRequest;
    let probes = endpoints
        .iter()
        .enumerate()
        .filter(|(replica, _)| stalled.includes(*replica))
        .map(|(replica, endpoint)| async move {
            let mut client = checker::lazy_client(endpoint);
            while checker.now() < end {
                let sent = checker.now();
                let mut request = tonic::Request::new(DescribeRequest {
                    name: checker.names[0].clone(),
                });
                request.set_timeout(Duration::from_secs(5));
                // The fault ends on time: a probe still unanswered then is dropped, unrecorded.
                let answer = tokio::select! {
                    answer = client.describe(request) => answer,
                    _ = until(checker, end) => break,
                };
                let ended = checker.now();
                checker.record(match answer {
                    Ok(_) => Event::Answered {
                        rpc: "Describe",
                        replica,
                        sent,
                        received: ended,
                    },
                    Err(status) => Event::Failed {
                        rpc: "Describe",
                        code: status.code(),
                        replica,
                        sent,
                        ended,
                        gave_up: false,
                        after_waiting: false,
                    },
                });
                until(checker, (sent + PROBE_EVERY).min(end)).await;
            }
        });
    futures::future::join_all(probes).await;
}

/// Redis, and `replicas` `leased` processes each reaching it through its own fault proxy.
struct Standalone {
    redis: RedisServer,
    proxies: Vec<FaultProxy>,
    replicas: Vec<Option<LeasedProcess>>,
    addresses: Vec<SocketAddr>,
    test: &'static str,
}

impl Standalone {
    async fn start(replicas: usize, test: &'static str) -> Self {
        let redis = RedisServer::start();
        let proxies: Vec<FaultProxy> = (0..replicas)
            .map(|_| FaultProxy::start(([127, 0, 0, 1], redis.port).into()))
            .collect();
        let mut started = Vec::new();
        for (index, proxy) in proxies.iter().enumerate() {
            started.push(Some(spawn_replica(proxy, test, index, None).await));
        }
        let addresses = started
            .iter()
            .map(|r| r.as_ref().unwrap().address)
            .collect();
        Standalone {
            redis,
            proxies,
            replicas: started,
            addresses,
            test,
        }
    }

    fn endpoints(&self) -> Vec<String> {
        self.addresses
            .iter()
            .map(|address| format!("http://{address}"))
            .collect()
    }

    /// SIGKILL to replica `index`: its clients move on to another replica.
    fn kill_replica(&mut self, index: usize) {
        if let Some(mut replica) = self.replicas[index].take() {
            replica.kill();
        }
    }

    /// Starts replica `index` again, on its old address.
    async fn respawn_replica(&mut self, index: usize) {
        let address = self.addresses[index];
        let replica = spawn_replica(&self.proxies[index], self.test, index, Some(address)).await;
        self.replicas[index] = Some(replica);
    }

    /// Every live replica grants and releases a fresh lease within 20 s: the system recovered by
    /// itself.
    async fn assert_recovered(&self) {
        for replica in self.replicas.iter().flatten() {
            replica.wait_serving().await;
            let mut client = replica.client().await;
            let name = format!("recovered/{}", replica.address.port());
            let granted = must_acquire(&mut client, &name, 5_000).await;
            assert!(release(&mut client, &granted).await);
        }
    }
}

async fn spawn_replica(
    proxy: &FaultProxy,
    test: &str,
    index: usize,
    address: Option<SocketAddr>,
) -> LeasedProcess {
    let log = log_dir(test).join(format!("leased-{index}.log"));
    let mut serve = LeasedProcess::serve()
        .redis(&proxy.redis_url())
        .redis_timeout(&format!("{}ms", REDIS_TIMEOUT.as_millis()))
        .args(["--drain-grace", "2s"])
        .log(Log::File(log));
    if let Some(address) = address {
        serve = serve.at(address);
    }
    serve.start().await
}

/// Runs one pass of every standalone fault, starting at `offset` on the checker's clock; returns
/// when the pass is over.
async fn standalone_fault_pass(
    checker: &Checker,
    topology: &mut Standalone,
    offset: Duration,
) -> ReplicaKill {
    let at = |seconds: f64| offset + Duration::from_secs_f64(seconds);
    let replicas = topology.proxies.len();
    let endpoints = &topology.endpoints();

    let proxies = &topology.proxies;
    let link = |index: usize| std::slice::from_ref(&proxies[index % replicas]);
    let only = |index: usize| Stalled::Replicas(vec![index % replicas]);
    // 1. Latency on one replica's link, below the Redis timeout: calls are slower, none fails.
    let slow = Fault::Delay(SLOW_LINK);
    link_fault(
        checker,
        link(0),
        slow,
        at(3.0)..at(6.0),
        "net_delay_300ms",
        (Stalled::No, endpoints),
    )
    .await;
    // 2. A black hole on another replica's link.
    let hole = Fault::BlackHole;
    link_fault(
        checker,
        link(1),
        hole,
        at(7.0)..at(10.0),
        "net_black_hole",
        (only(1), endpoints),
    )
    .await;
    // 3. A cut link: connections closed and refused.
    link_fault(
        checker,
        link(2),
        Fault::Cut,
        at(11.0)..at(14.0),
        "net_cut",
        (only(2), endpoints),
    )
    .await;
    // 4. Every link slower than the Redis timeout: every outcome is unknown to leased.
    let slower = Fault::Delay(Duration::from_millis(1_500));
    link_fault(
        checker,
        proxies,
        slower,
        at(15.0)..at(17.0),
        "net_delay_1500ms_all",
        (Stalled::All, endpoints),
    )
    .await;

    // 5. Redis stopped (SIGSTOP) for 3 s.
    until(checker, at(18.0)).await;
    let start = checker.now();
    topology.redis.pause();
    probe(checker, endpoints, &Stalled::All, at(21.0)).await;
    until(checker, at(21.0)).await;
    topology.redis.resume();
    checker.stalling_fault("redis_sigstop_3s", start, false, Stalled::All);

    // 6. The busiest replica of the last 2 s killed; its clients continue through another one,
    // and so does a witness holding a lease through each replica across the kill.
    let witnesses = futures::future::join_all(
        (0..replicas).map(|replica| hold_across_the_kill(checker, endpoints, replica, at(25.0))),
    );
    let kill = async {
        until(checker, at(23.0)).await;
        let start = checker.now();
        let mut recent_grants = vec![0usize; replicas];
        for event in checker.events() {
            if let checker::Event::Granted {
                replica, received, ..
            } = event
                && received + Duration::from_secs(2) >= start
            {
                recent_grants[replica] += 1;
            }
        }
        let victim = (0..replicas)
            .max_by_key(|replica| recent_grants[*replica])
            .unwrap();
        topology.kill_replica(victim);
        checker.fault("leased_sigkill", start, false);
        (victim, start)
    };
    let (mut witnesses, (victim, killed_at)) = tokio::join!(witnesses, kill);
    let kill = ReplicaKill {
        replica: victim,
        at: killed_at,
        witness_renewals: witnesses.swap_remove(victim),
    };

    // 7. Redis restarted without persistence: every lease and counter is lost.
    until(checker, at(26.0)).await;
    let start = checker.now();
    topology.redis.restart();
    checker.stalling_fault("redis_restart_empty", start, true, Stalled::All);

    until(checker, at(32.0)).await;
    if topology.replicas[victim].is_none() {
        topology.respawn_replica(victim).await;
    }
    kill
}

/// A `leased` replica killed with SIGKILL.
struct ReplicaKill {
    replica: usize,
    at: Duration,
    /// The renewals answered `renewed` to the witness that held its lease through this replica
    /// when it was killed: which replica answered, and when.
    witness_renewals: Vec<(usize, Duration)>,
}

/// The witness of a replica kill: holds a lease of its own (1.5 s TTL) through `replica` from now
/// until `end`, renewing it every 250 ms on a Renew stream, and moves its renewals to the next
/// replica when one fails, as a client should. Returns the renewals answered `renewed`; a `lost`
/// fails the test (a replica's death must not cost a lease).
async fn hold_across_the_kill(
    checker: &Checker,
    endpoints: &[String],
    replica: usize,
    end: Duration,
) -> Vec<(usize, Duration)> {
    use leased::proto::{
        AcquireRequest, ReleaseRequest, RenewRequest, acquire_response, renew_response,
    };
    use tokio_stream::StreamExt;
    const TTL: Duration = Duration::from_millis(1_500);
    const EVERY: Duration = Duration::from_millis(250);
    let mut clients: Vec<_> = endpoints
        .iter()
        .map(|endpoint| checker::lazy_client(endpoint))
        .collect();
    let name = format!("{}-witness-{replica}", checker.names[0]);
    let mut request = tonic::Request::new(AcquireRequest {
        name: name.clone(),
        holder: format!("witness-{replica}"),
        ttl_ms: TTL.as_millis() as i64,
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(5));
    let mut stream = clients[replica]
        .acquire(request)
        .await
        .expect("the witness's Acquire")
        .into_inner();
    let granted = match stream.next().await {
        Some(Ok(response)) => match response.result {
            Some(acquire_response::Result::Granted(granted)) => granted,
            other => panic!("the witness of replica {replica} was not granted: {other:?}"),
        },
        other => panic!("the witness of replica {replica} was not granted: {other:?}"),
    };
    let mut current = replica;
    let mut renewals = Vec::new();
    let mut requests = None;
    let mut responses = None;
    while checker.now() < end {
        let sent = checker.now();
        if requests.is_none() {
            let (sender, receiver) = tokio::sync::mpsc::channel(4);
            let opened = clients[current]
                .renew(tokio_stream::wrappers::ReceiverStream::new(receiver))
                .await;
            match opened {
                Ok(opened) => {
                    requests = Some(sender);
                    responses = Some(opened.into_inner());
                }
                Err(_) => {
                    current = (current + 1) % clients.len();
                    continue;
                }
            }
        }
        let renew = RenewRequest {
            name: name.clone(),
            lease_id: granted.lease_id.clone(),
            ttl_ms: 0,
        };
        let _ = requests.as_ref().unwrap().send(renew).await;
        let answer =
            tokio::time::timeout(Duration::from_secs(1), responses.as_mut().unwrap().next()).await;
        match answer {
            Ok(Some(Ok(response))) => match response.result {
                Some(renew_response::Result::Renewed(renewed)) => {
                    assert_eq!(renewed.fencing_token, granted.fencing_token);
                    renewals.push((current, checker.now()));
                }
                other => panic!(
                    "the witness holding through replica {replica} renewed through replica \
                     {current} at {sent:?}: {other:?}"
                ),
            },
            // The replica is gone (or did not answer): the next one.
            _ => {
                requests = None;
                responses = None;
                current = (current + 1) % clients.len();
                continue;
            }
        }
        until(checker, sent + EVERY).await;
    }
    let _ = clients[current]
        .release(ReleaseRequest {
            name,
            lease_id: granted.lease_id,
        })
        .await;
    renewals
}

/// What became of the clients of a killed replica.
struct MovedOn {
    /// Clients granted a lease through it in the 5 s before the kill: each was granted again
    /// through another replica.
    clients: usize,
    /// Leases held through it at the kill (their last grant or renewal answered by it, their
    /// holder's view still running), and how many of them were renewed through another replica
    /// afterwards (with the same token: the clients assert it) or answered `lost`.
    held: usize,
    renewed_elsewhere: usize,
    lost: usize,
}

/// Every client that was granted a lease through the killed replica in the 5 s before the kill
/// was granted again afterwards, through another replica; the witness's lease held through it
/// was renewed through another one (with its token, never `lost`). What became of the clients'
/// leases held through it is counted: whether one of them needed a renewal before it ended is
/// chance.
fn assert_clients_moved_on(checker: &Checker, kill: &ReplicaKill) -> MovedOn {
    use checker::Event;
    let events = checker.events();
    let grants: Vec<(usize, usize, Duration)> = events
        .iter()
        .filter_map(|event| match *event {
            Event::Granted {
                client,
                replica,
                received,
                ..
            } if client != usize::MAX => Some((client, replica, received)),
            _ => None,
        })
        .collect();
    let window = kill.at.saturating_sub(Duration::from_secs(5))..kill.at;
    let mut on_victim: Vec<usize> = grants
        .iter()
        .filter(|(_, replica, received)| *replica == kill.replica && window.contains(received))
        .map(|(client, _, _)| *client)
        .collect();
    on_victim.sort();
    on_victim.dedup();
    for client in &on_victim {
        assert!(
            grants
                .iter()
                .any(|(other, replica, received)| other == client
                    && *replica != kill.replica
                    && *received > kill.at),
            "client {client} was on the killed replica {} and was never granted again",
            kill.replica
        );
    }

    // Each lease's last answer before the kill (which replica, and until when its holder's view
    // ran), then what its holder heard after it.
    let mut last_before: std::collections::HashMap<usize, (usize, Duration)> = Default::default();
    for event in &events {
        match *event {
            Event::Granted {
                lease,
                client,
                replica,
                sent,
                received,
                ttl,
                ..
            } if client != usize::MAX && received < kill.at => {
                last_before.insert(lease, (replica, sent + ttl));
            }
            Event::Renewed {
                lease,
                replica,
                sent,
                received,
                ttl,
            } if received < kill.at => {
                if let Some(last) = last_before.get_mut(&lease) {
                    *last = (replica, sent + ttl);
                }
            }
            _ => {}
        }
    }
    let held: std::collections::HashSet<usize> = last_before
        .iter()
        .filter(|(_, (replica, expiry))| *replica == kill.replica && *expiry > kill.at)
        .map(|(lease, _)| *lease)
        .collect();
    let mut renewed_elsewhere = std::collections::HashSet::new();
    let mut lost = std::collections::HashSet::new();
    for event in &events {
        match *event {
            Event::Renewed {
                lease,
                replica,
                received,
                ..
            } if held.contains(&lease) && replica != kill.replica && received > kill.at => {
                renewed_elsewhere.insert(lease);
            }
            Event::Lost {
                lease, received, ..
            } if held.contains(&lease) && received > kill.at => {
                lost.insert(lease);
            }
            _ => {}
        }
    }
    let witness_moved = kill
        .witness_renewals
        .iter()
        .find(|(replica, at)| *replica != kill.replica && *at > kill.at);
    let Some((through, at)) = witness_moved else {
        panic!(
            "the witness holding a lease through replica {} was never renewed through another \
             after the kill: {:?}",
            kill.replica, kill.witness_renewals
        );
    };
    println!(
        "the witness's lease held through the killed replica {} was renewed through replica \
         {through} {:?} after the kill",
        kill.replica,
        *at - kill.at
    );

    MovedOn {
        clients: on_victim.len(),
        held: held.len(),
        renewed_elsewhere: renewed_elsewhere.len(),
        lost: lost.len(),
    }
}

/// The latency that `net_delay_300ms` puts on one replica's link.
const SLOW_LINK: Duration = Duration::from_millis(300);

/// Every fault was felt by the calls, not only injected by the proxy: each fault that stalls Redis
/// made calls fail (the checker holds every call sent while it lasted to an answer within the
/// timeout, `UNAVAILABLE` if it failed), and while the slow link lasted, every call through its
/// replica took at least its latency there and back to its first answer (each needs Redis).
fn assert_faults_felt(checker: &Checker, report: &Report) {
    for kind in [
        "net_black_hole",
        "net_cut",
        "net_delay_1500ms_all",
        "redis_sigstop_3s",
    ] {
        let checked = report.stalled_calls.get(kind).copied().unwrap_or_default();
        assert!(
            checked.failed > 0,
            "{kind}: no call sent while it lasted failed ({checked:?}): the fault was not felt"
        );
    }
    let slow: Vec<(Duration, Duration)> = checker
        .faults()
        .iter()
        .filter(|fault| fault.kind == "net_delay_300ms")
        .map(|fault| (fault.start, fault.end))
        .collect();
    // Sent through replica 0 while its link was slow, early enough for the trip to Redis and back
    // to be over before the link was fast again.
    let mut took: Vec<Duration> = checker::first_answers(&checker.events())
        .into_iter()
        .filter(|call| {
            call.replica == 0
                && slow
                    .iter()
                    .any(|(start, end)| call.sent >= *start && call.sent + 2 * SLOW_LINK <= *end)
        })
        .map(|call| call.answered - call.sent)
        .collect();
    took.sort();
    assert!(
        !took.is_empty(),
        "no call through the slow link's replica was answered while it was slow"
    );
    println!(
        "net_delay_300ms: {} calls through the slow replica first answered after {:?} (fastest), \
         {:?} (median)",
        took.len(),
        took[0],
        took[took.len() / 2]
    );
    // Both ways: the request to Redis and its answer.
    assert!(
        took[0] >= 2 * SLOW_LINK,
        "a call through the slow link's replica was answered in {:?}, under the link's latency \
         there and back ({:?}): the delay was not felt",
        took[0],
        2 * SLOW_LINK
    );
}

/// The CI run: 16 clients on 4 names, 12 clients on 2 counting names of limit 3 and 12 clients on
/// 2 read-write names, 3 replicas, every standalone fault once (about 40 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_double_grant_and_no_backwards_token_under_redis_network_and_replica_faults() {
    let _serial = one_at_a_time().await;
    let mut topology = Standalone::start(3, "reliability-standalone").await;
    let checker = Checker::new(ci_workload(), "standalone");
    let clients = start_clients(&checker, &topology.endpoints());

    let kill = standalone_fault_pass(&checker, &mut topology, Duration::ZERO).await;
    let gc_pauses = clients.stop(&checker).await;
    topology.assert_recovered().await;
    let moved = assert_clients_moved_on(&checker, &kill);
    println!(
        "{} clients were using the replica killed at {:?}; each was granted again through \
         another. {} leases were held through it: {} renewed through another replica, {} lost",
        moved.clients, kill.at, moved.held, moved.renewed_elsewhere, moved.lost
    );
    assert!(moved.clients > 0, "no client was using the killed replica");

    let report = checker.verify();
    report.print("standalone Redis, network, replica faults");
    assert_faults_felt(&checker, &report);
    assert_report(&report, &checker, "reliability-standalone", gc_pauses, 1);
}

/// Long run (ignored): every standalone fault, over and over, for `LEASED_CHECKER_SECONDS`, with
/// 32 clients on 6 names, 18 on 3 counting names and 18 on 3 read-write names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long run: LEASED_CHECKER_SECONDS=600 cargo test --test integration reliability:: -- --ignored"]
async fn long_run_standalone_faults() {
    let _serial = one_at_a_time().await;
    let mut topology = Standalone::start(3, "reliability-long-standalone").await;
    let checker = Checker::new(
        Workload {
            clients: 32,
            names: 6,
            counting: Counting {
                clients: 18,
                names: 3,
                limit: COUNTING_LIMIT,
            },
            read_write: ReadWrite {
                clients: 18,
                names: 3,
                shared_percent: SHARED_PERCENT,
            },
            ..ci_workload()
        },
        "long-standalone",
    );
    let clients = start_clients(&checker, &topology.endpoints());
    let run_for = Duration::from_secs(long_run_seconds());
    let mut offset = Duration::ZERO;
    let mut kills = Vec::new();
    while offset + Duration::from_secs(34) <= run_for {
        kills.push(standalone_fault_pass(&checker, &mut topology, offset).await);
        offset = checker.now();
    }
    until(&checker, run_for).await;
    let gc_pauses = clients.stop(&checker).await;
    topology.assert_recovered().await;
    let moved: Vec<MovedOn> = kills
        .iter()
        .map(|kill| assert_clients_moved_on(&checker, kill))
        .collect();
    let sum = |of: fn(&MovedOn) -> usize| moved.iter().map(of).sum::<usize>();
    println!(
        "{} replica kills; {} clients were using a killed replica and moved on; {} leases held \
         through one: {} renewed through another replica, {} lost",
        kills.len(),
        sum(|moved| moved.clients),
        sum(|moved| moved.held),
        sum(|moved| moved.renewed_elsewhere),
        sum(|moved| moved.lost)
    );

    let report = checker.verify();
    report.print("long run, standalone faults");
    assert_faults_felt(&checker, &report);
    assert_report(
        &report,
        &checker,
        "reliability-long-standalone",
        gc_pauses,
        1,
    );
}
