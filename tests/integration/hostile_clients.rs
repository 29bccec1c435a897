//! Hostile and careless clients at the connection level: silent connections, connections that
//! stop after the HTTP/2 preface, more connections than `--max-connections`, a server out of file
//! descriptors, and a flood of 25,000 idle connections. Real servers on loopback, real gRPC
//! clients over TCP; every loop is bounded in count and time.

use std::time::{Duration, Instant};

use crate::common::{
    harness::{flood, proc},
    *,
};
use leased::{
    config::ServeConfig,
    proto::{DescribeRequest, lease_service_client::LeaseServiceClient},
};
use tokio::net::TcpStream;
use tonic::transport::Channel;

/// A client with its own HTTP/2 connection, past its handshake once this returns (a Describe
/// went through).
async fn connected_client(address: std::net::SocketAddr) -> LeaseServiceClient<Channel> {
    let mut client = LeaseServiceClient::connect(format!("http://{address}"))
        .await
        .expect("cannot connect");
    describe(&mut client, "hostile/probe").await;
    client
}

/// What a flood test watches while the flood runs: an established client describes every 10 ms,
/// and the server's open file descriptors and RSS are sampled.
struct Probe {
    stop: tokio::sync::watch::Sender<bool>,
    describing: tokio::task::JoinHandle<(LeaseServiceClient<Channel>, Vec<Duration>)>,
    sampling: tokio::task::JoinHandle<(usize, u64)>,
}

/// What a [`Probe`] saw: the Describe latencies (sorted), the most file descriptors and RSS (KiB).
struct Seen {
    latencies: Vec<Duration>,
    max_fds: usize,
    max_rss: u64,
}

impl Seen {
    fn p99(&self) -> Duration {
        self.latencies[self.latencies.len() * 99 / 100]
    }

    fn median(&self) -> Duration {
        self.latencies[self.latencies.len() / 2]
    }
}

impl Probe {
    /// Starts describing `name` with `client`, and sampling the process `pid` every
    /// `sample_every`.
    fn start(
        mut client: LeaseServiceClient<Channel>,
        pid: u32,
        name: &'static str,
        sample_every: Duration,
    ) -> Self {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let describing = tokio::spawn({
            let mut stopped = stopped.clone();
            async move {
                let mut latencies = Vec::new();
                while !*stopped.borrow() {
                    let started = Instant::now();
                    describe(&mut client, name).await;
                    latencies.push(started.elapsed());
                    let _ =
                        tokio::time::timeout(Duration::from_millis(10), stopped.changed()).await;
                }
                (client, latencies)
            }
        });
        let sampling = tokio::spawn(async move {
            let (mut max_fds, mut max_rss) = (0, 0);
            while !*stopped.borrow() {
                max_fds = max_fds.max(proc::open_fds(pid).unwrap_or(0));
                max_rss = max_rss.max(proc::rss_kib(pid).unwrap_or(0));
                tokio::time::sleep(sample_every).await;
            }
            (max_fds, max_rss)
        });
        Probe {
            stop,
            describing,
            sampling,
        }
    }

    /// Stops, and gives the client back with what was seen.
    async fn stop(self) -> (LeaseServiceClient<Channel>, Seen) {
        let _ = self.stop.send(true);
        let (client, mut latencies) = self.describing.await.unwrap();
        let (max_fds, max_rss) = self.sampling.await.unwrap();
        latencies.sort();
        let seen = Seen {
            latencies,
            max_fds,
            max_rss,
        };
        (client, seen)
    }
}

/// Waits up to `timeout` until the server has closed all of `streams`.
async fn wait_all_closed(streams: &[TcpStream], timeout: Duration) -> Result<(), usize> {
    let start = Instant::now();
    loop {
        let open = streams.len() - flood::count_closed(streams);
        if open == 0 {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(open);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The handshake timeout of
/// [`silent_and_preface_only_connections_are_closed_at_the_handshake_timeout`].
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long after [`HANDSHAKE_TIMEOUT`] the median connection may be seen closed: the server's
/// timer task closing the socket and this test's 10 ms polling, in the debug build on a loaded
/// 2-core machine (measured: the median 5-88 ms late in 20 runs, 15 ms as a rule). A timeout
/// that is ignored (the 5 s default), doubled, or checked by a sweep once a second (half a second
/// late on average) is far later.
const HANDSHAKE_CLOSE_MEDIAN_MARGIN: Duration = Duration::from_millis(250);

/// How long after [`HANDSHAKE_TIMEOUT`] any one connection may be seen closed: a wide cap per
/// connection against a connection the timeout missed, which a loaded machine's scheduling
/// delays stay well inside.
const HANDSHAKE_CLOSE_CAP: Duration = Duration::from_secs(1);

/// When the server closed each of `streams`, counted from `opened_before` (a moment before they
/// were opened, so never less than the connection's real age): polls every 10 ms, until all are
/// closed or `give_up` has passed; the ones still open are `None`.
async fn close_times(
    streams: &[TcpStream],
    opened_before: Instant,
    give_up: Duration,
) -> Vec<Option<Duration>> {
    let mut closed_at = vec![None; streams.len()];
    while closed_at.iter().any(Option::is_none) && opened_before.elapsed() < give_up {
        for (stream, closed_at) in streams.iter().zip(&mut closed_at) {
            if closed_at.is_none() && flood::closed_by_peer(stream) {
                *closed_at = Some(opened_before.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    closed_at
}

/// A connection that sends nothing, or only the preface, is closed at `--handshake-timeout`:
/// none before it, the median within [`HANDSHAKE_CLOSE_MEDIAN_MARGIN`] after it, each within
/// [`HANDSHAKE_CLOSE_CAP`] after it; a client that completed its handshake is not closed, however
/// long it stays idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_preface_only_connections_are_closed_at_the_handshake_timeout() {
    let server = Leased::start_with(ServeConfig {
        handshake_timeout: HANDSHAKE_TIMEOUT,
        ..test_config(None)
    })
    .await;
    let mut client = connected_client(server.address).await;
    let give_up = HANDSHAKE_TIMEOUT + HANDSHAKE_CLOSE_CAP + Duration::from_secs(5);
    for (kind, first_bytes) in [("silent", &b""[..]), ("preface-only", flood::PREFACE)] {
        let opened_before = Instant::now();
        let streams = flood::open(server.address, 20, first_bytes).await;
        assert_eq!(streams.len(), 20, "{kind}");
        let times = close_times(&streams, opened_before, give_up).await;
        let mut closed: Vec<Duration> = times.iter().flatten().copied().collect();
        closed.sort();
        assert_eq!(
            closed.len(),
            times.len(),
            "{} {kind} connections still open {give_up:?} after they were opened",
            times.len() - closed.len()
        );
        let median = closed[closed.len() / 2];
        println!(
            "{kind} connections closed after {:?} to {:?}, median {median:?} (handshake timeout \
             {HANDSHAKE_TIMEOUT:?})",
            closed[0],
            closed[closed.len() - 1]
        );
        assert!(
            closed[0] >= HANDSHAKE_TIMEOUT,
            "a {kind} connection was closed {:?} after it was opened, before the handshake \
             timeout",
            closed[0]
        );
        assert!(
            closed[closed.len() - 1] <= HANDSHAKE_TIMEOUT + HANDSHAKE_CLOSE_CAP,
            "a {kind} connection was closed only {:?} after it was opened",
            closed[closed.len() - 1]
        );
        assert!(
            median <= HANDSHAKE_TIMEOUT + HANDSHAKE_CLOSE_MEDIAN_MARGIN,
            "{kind} connections were closed a median {median:?} after they were opened \
             (handshake timeout {HANDSHAKE_TIMEOUT:?}): {closed:?}"
        );
    }
    // The client was idle for longer than the handshake timeout, on the same connection.
    describe(&mut client, "hostile/idle").await;
}

/// At `--max-connections`, a new client takes the place of the oldest connection still in its
/// handshake; once every connection is an established client, a new one is closed at once, and
/// a slot freed by a client that leaves is taken by the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_clients_evict_silent_connections_and_established_ones_are_kept() {
    const CAP: usize = 10;
    let server = Leased::start_with(ServeConfig {
        max_connections: Some(CAP),
        handshake_timeout: Duration::from_secs(60),
        ..test_config(None)
    })
    .await;
    // The harness's health check closed its connection: wait until the server has seen it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut silent = Vec::new();
    for _ in 0..CAP {
        silent.extend(flood::open(server.address, 1, b"").await);
        // Accepted in this order: the first is the oldest handshake.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(silent.len(), CAP);

    let first = connected_client(server.address).await;
    if let Err(open) = wait_all_closed(&silent[..1], Duration::from_secs(5)).await {
        panic!("the oldest silent connection was not evicted ({open} open)");
    }
    assert_eq!(
        flood::count_closed(&silent[1..]),
        0,
        "only the oldest is evicted"
    );

    let mut clients = vec![first];
    for _ in 1..CAP {
        clients.push(connected_client(server.address).await);
    }
    if let Err(open) = wait_all_closed(&silent, Duration::from_secs(5)).await {
        panic!("{open} silent connections survived {CAP} clients arriving at the cap");
    }

    // Every slot holds an established client: the next connection is closed at once.
    let refused = flood::open(server.address, 3, b"").await;
    if let Err(open) = wait_all_closed(&refused, Duration::from_secs(2)).await {
        panic!("{open} connections over the cap were not closed at once");
    }
    for client in &mut clients {
        describe(client, "hostile/established").await;
    }

    // A client that leaves frees its slot for the next one.
    drop(clients.pop());
    let mut next = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Ok(mut client) = LeaseServiceClient::connect(server.endpoint()).await
            && client
                .describe(DescribeRequest {
                    name: "hostile/next".into(),
                })
                .await
                .is_ok()
        {
            next = Some(client);
            break;
        }
    }
    assert!(next.is_some(), "the freed slot was never taken");
}

/// Out of file descriptors, the server pauses accepting instead of spinning, says so in its log
/// (once per interval, not per attempt), and serves again once connections close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_the_server_backs_off_and_recovers() {
    const FD_LIMIT: u64 = 96;
    let mut server = LeasedProcess::serve()
        .fd_limit(FD_LIMIT)
        .args(["--max-connections", "1000", "--handshake-timeout", "30s"])
        .log(Log::Captured)
        .start()
        .await;
    let pid = server.pid();
    let flood = flood::open(server.address, 150, b"").await;
    // Let the server run into the limit, then measure its CPU while it stays there.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fds = proc::open_fds(pid).unwrap();
    assert!(
        fds as u64 >= FD_LIMIT - 2,
        "the server never ran out ({fds} fds open)"
    );
    let cpu_before = proc::cpu_time(pid).unwrap();
    let window = Duration::from_secs(2);
    tokio::time::sleep(window).await;
    let cpu = proc::cpu_time(pid).unwrap() - cpu_before;
    println!("out of file descriptors: {cpu:?} of CPU in {window:?}");
    assert!(
        cpu < window / 4,
        "the server used {cpu:?} of CPU in {window:?} while out of file descriptors"
    );

    drop(flood);
    let mut served = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if server.health().await.is_some() {
            served = true;
            break;
        }
    }
    assert!(served, "not serving again after the connections closed");
    let mut client = server.client().await;
    describe(&mut client, "hostile/after-emfile").await;

    let log = server.stop_and_read_log();
    let pauses = log.matches("cannot accept connections").count();
    assert!(
        (1..=2).contains(&pauses),
        "expected one throttled line about accept failures, found {pauses}:\n{log}"
    );
}

/// Opens `count` idle connections from child processes (this process's open-file limit is too
/// low for them all), half from 127.0.0.2-11, half from 127.0.0.12-21.
async fn idle_flood(address: std::net::SocketAddr, count: usize) -> Vec<flood::IdleConnections> {
    let halves = [(count / 2, 2), (count - count / 2, 12)].map(|(count, first_source)| {
        tokio::task::spawn_blocking(move || {
            flood::IdleConnections::open(address, count, first_source).expect("idle flood")
        })
    });
    let mut children = Vec::new();
    for half in halves {
        children.push(half.await.unwrap());
    }
    children
}

/// How many of the children's connections the server has closed.
async fn idle_closed(
    children: Vec<flood::IdleConnections>,
) -> (Vec<flood::IdleConnections>, usize) {
    tokio::task::spawn_blocking(move || {
        let mut children = children;
        let closed = children
            .iter_mut()
            .map(|child| child.closed().expect("idle flood"))
            .sum();
        (children, closed)
    })
    .await
    .unwrap()
}

/// How slow the median Describe of an established client may be during the flood. Row 10 of
/// the Guarantees cites a p99 of 18 ms for this debug-build test (the release build: p50 1.1
/// ms); the median measured 2.8-4.5 ms here in 20 runs (p99 22-89 ms), 6.4 ms once at a load
/// average of 6. A server that lets the flood's
/// connections hold up established clients (blocking work per accepted connection on the
/// runtime's workers, a handshake served ahead of every request) moves the median, where a few
/// slow Describes on a noisy machine only move the tail.
const FLOOD_DESCRIBE_MEDIAN: Duration = Duration::from_millis(20);

/// A wide cap on the p99 of those Describes, against clients stalled for good by the flood.
const FLOOD_DESCRIBE_P99_CAP: Duration = Duration::from_millis(500);

/// How much more CPU the server may use while the flood's connections sit there than for the
/// probe's Describes alone, measured over windows of the same length: 10 % of a core. Guarantee 10
/// says idle connections cost little CPU (the bench quotes both figures); measured here: -50 to +10
/// ms in 2 s in 20 runs, +60 ms once at a load average of 6 (the window also sees the first connections time out).
/// With every handshake woken every 100 ms it measured +400 to +950 ms. Connections that each woke
/// up a few times a second (a timer or a poll per connection) would cost far more with 10,000 of
/// them.
const FLOOD_EXTRA_CPU_PER_SECOND: Duration = Duration::from_millis(100);

/// The reliability check of a flood: 25,000 idle and 500 preface-only connections against a
/// server with the default limits. An established client is served throughout, a new client
/// gets in during the flood, the server's file descriptors stay under the cap, its CPU stays
/// low, and everything returns to normal once the flood goes away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_five_thousand_idle_connections_leave_clients_served() {
    const IDLE: usize = 25_000;
    const PREFACE_ONLY: usize = 500;
    const CAP: usize = 10_000; // --max-connections' default when the fd limit allows
    let _turn = heavy_turn().await;
    let fd_limit = proc::raise_fd_limit(16_000);
    assert!(
        fd_limit >= 16_000,
        "the server needs room for {CAP} connections"
    );
    let redis = RedisServer::start();
    let server = LeasedProcess::serve().redis(&redis.url()).start().await;
    let pid = server.pid();
    let client = connected_client(server.address).await;
    let fds_before = proc::open_fds(pid).unwrap();
    let rss_before = proc::rss_kib(pid).unwrap();

    let probe = Probe::start(client, pid, "hostile/flood", Duration::from_millis(100));
    // The server's CPU for the probe's Describes alone, before the flood.
    let window = Duration::from_secs(2);
    let cpu_before = proc::cpu_time(pid).unwrap();
    tokio::time::sleep(window).await;
    let cpu_alone = proc::cpu_time(pid).unwrap() - cpu_before;

    let started = Instant::now();
    let idle = idle_flood(server.address, IDLE).await;
    let preface_only = flood::open(server.address, PREFACE_ONLY, flood::PREFACE).await;
    let opened = idle.iter().map(|child| child.opened).sum::<usize>();
    println!(
        "flood: {opened} idle and {} preface-only connections opened in {:?}",
        preface_only.len(),
        started.elapsed()
    );
    assert!(opened >= IDLE * 9 / 10, "only {opened} connected");

    // A new client gets in while the flood holds its connections.
    let newcomer = tokio::time::timeout(Duration::from_secs(10), connected_client(server.address))
        .await
        .expect("a new client could not get in during the flood");

    // The server's CPU while the flood's connections sit there.
    let cpu_before = proc::cpu_time(pid).unwrap();
    tokio::time::sleep(window).await;
    let cpu = proc::cpu_time(pid).unwrap() - cpu_before;

    // The handshake timeout (5 s) closes whatever the flood still holds. A few of the flood's
    // connections may never have reached the server: past a full accept queue, Linux drops
    // the handshake's last ACK while the client believes it is connected.
    let mut idle = idle;
    let mut closed = 0;
    let mut fds_held = usize::MAX;
    for _ in 0..40 {
        (idle, closed) = idle_closed(idle).await;
        fds_held = proc::open_fds(pid).unwrap();
        if fds_held <= fds_before + 5 && closed >= opened * 9 / 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (mut client, seen) = probe.stop().await;
    let (latencies, p99, max_fds, max_rss) =
        (&seen.latencies, seen.p99(), seen.max_fds, seen.max_rss);
    println!(
        "during the flood: {} describes, median {:?}, p90 {:?}, p99 {p99:?}, max {:?}; server \
         fds {fds_before} -> max {max_fds}; RSS {rss_before} -> max {max_rss} KiB; CPU \
         {cpu:?} in {window:?} (before the flood, the Describes alone: {cpu_alone:?})",
        latencies.len(),
        seen.median(),
        latencies[latencies.len() * 9 / 10],
        latencies.last().unwrap(),
    );
    println!("the server closed {closed} of {opened} idle connections");
    assert!(
        fds_held <= fds_before + 5,
        "the server still holds {fds_held} fds ({fds_before} before the flood)"
    );
    assert!(
        wait_all_closed(&preface_only, Duration::from_secs(5))
            .await
            .is_ok(),
        "preface-only connections never closed"
    );
    assert!(
        max_fds <= fds_before + CAP + 200,
        "{max_fds} fds open with a cap of {CAP} connections"
    );
    let extra_cpu = cpu.saturating_sub(cpu_alone);
    assert!(
        extra_cpu <= FLOOD_EXTRA_CPU_PER_SECOND.mul_f64(window.as_secs_f64()),
        "the flood's idle connections cost {extra_cpu:?} of CPU in {window:?} ({cpu:?}, against \
         {cpu_alone:?} for the Describes alone)"
    );
    // A debug build on a noisy 2-core machine (the bench measures the release build: README,
    // Guarantees): the median against the promise, a wide cap on the tail.
    let median = seen.median();
    assert!(
        median <= FLOOD_DESCRIBE_MEDIAN,
        "describe median {median:?} during the flood (p99 {p99:?})"
    );
    assert!(p99 <= FLOOD_DESCRIBE_P99_CAP, "describe p99 {p99:?}");

    // The flood goes away: descriptors return to where they were, and clients are served.
    drop((idle, preface_only, newcomer));
    let mut fds_after = usize::MAX;
    for _ in 0..100 {
        fds_after = proc::open_fds(pid).unwrap();
        if fds_after <= fds_before + 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        fds_after <= fds_before + 5,
        "{fds_after} fds after the flood, {fds_before} before"
    );
    describe(&mut client, "hostile/after").await;
    connected_client(server.address).await;
}

/// A plain HTTP side port of the server, and what a flood of it looks like.
struct SidePort {
    /// Its flag: `--metrics-listen`, `--console-listen`.
    flag: &'static str,
    /// Its connection cap.
    max_connections: usize,
    /// A request whose headers never end.
    half_sent: &'static [u8],
    /// The counter of connections closed at its cap.
    evictions: &'static str,
}

/// The metrics port under a flood of half-sent requests (headers never finished), with an
/// open-file limit the flood would exhaust without a cap: the server's descriptors stay under
/// what the metrics port may hold, an established gRPC client is served throughout (Describe p99
/// under 50 ms) and a new one gets in, the half-sent requests are closed, and Prometheus can
/// scrape again once the flood stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_half_sent_metrics_requests_leaves_the_grpc_port_serving() {
    half_sent_flood_leaves_the_grpc_port_serving(SidePort {
        flag: "--metrics-listen",
        max_connections: leased::server::METRICS_PORT_MAX_CONNECTIONS,
        half_sent: b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n",
        evictions: "leased_metrics_port_evictions_total",
    })
    .await;
}

/// The same flood on the console's port (its guards are the metrics port's, with a larger cap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_half_sent_console_requests_leaves_the_grpc_port_serving() {
    half_sent_flood_leaves_the_grpc_port_serving(SidePort {
        flag: "--console-listen",
        max_connections: leased::server::CONSOLE_MAX_CONNECTIONS,
        half_sent: b"GET /api/leases HTTP/1.1\r\nHost: localhost\r\n",
        evictions: "leased_console_evictions_total",
    })
    .await;
}

async fn half_sent_flood_leaves_the_grpc_port_serving(port: SidePort) {
    const FLOOD: usize = 3_000;
    const FD_LIMIT: u64 = 1_024;
    // The port's cap, the connections evicted at it and not yet closed, and slack for the
    // runtime.
    let port_fds = port.max_connections + 8 + 8;
    let metrics_port = free_port();
    let metrics_address: std::net::SocketAddr = ([127, 0, 0, 1], metrics_port).into();
    let flooded: std::net::SocketAddr = match port.flag {
        "--metrics-listen" => metrics_address,
        _ => ([127, 0, 0, 1], free_port()).into(),
    };
    let mut args = vec![
        "--metrics-listen".to_owned(),
        metrics_address.to_string(),
        "--handshake-timeout".to_owned(),
        "2s".to_owned(),
    ];
    if flooded != metrics_address {
        args.extend([port.flag.to_owned(), flooded.to_string()]);
    }
    let server = LeasedProcess::serve()
        .fd_limit(FD_LIMIT)
        .args(args)
        .start()
        .await;
    let pid = server.pid();
    let client = connected_client(server.address).await;
    assert!(scrape_metrics(metrics_port).contains("leased_grants_total"));
    tokio::time::sleep(Duration::from_millis(200)).await; // the scrape's connection closes
    let fds_before = proc::open_fds(pid).unwrap();

    let probe = Probe::start(
        client,
        pid,
        "hostile/side-port-flood",
        Duration::from_millis(20),
    );

    let flood = flood::open(flooded, FLOOD, port.half_sent).await;
    println!(
        "{} flood: {} half-sent requests connected",
        port.flag,
        flood.len()
    );
    assert!(
        flood.len() >= FLOOD * 9 / 10,
        "only {} connected",
        flood.len()
    );
    let newcomer = tokio::time::timeout(Duration::from_secs(5), connected_client(server.address))
        .await
        .expect("a new gRPC client could not get in during the flood");
    // The flood's connections are closed: evicted at the cap, or at the request deadline.
    let closed = wait_all_closed(&flood, Duration::from_secs(10)).await;

    let (_, seen) = probe.stop().await;
    let (latencies, p99, max_fds) = (&seen.latencies, seen.p99(), seen.max_fds);
    println!(
        "during the {} flood: {} describes, p99 {p99:?}, max {:?}; server fds {fds_before} \
         -> max {max_fds}",
        port.flag,
        latencies.len(),
        latencies.last().unwrap()
    );
    assert!(
        closed.is_ok(),
        "{:?} half-sent requests still open",
        closed.err()
    );
    assert!(
        max_fds <= fds_before + port_fds,
        "{max_fds} fds open during the flood ({fds_before} before; the port may hold {port_fds})"
    );
    assert!(p99 < Duration::from_millis(50), "describe p99 {p99:?}");
    drop(newcomer);
    let scraped = scrape_metrics(metrics_port);
    assert!(
        metric_sample(&scraped, port.evictions) >= 1.0,
        "no eviction counted"
    );
}
