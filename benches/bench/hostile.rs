//! Connections that never become clients: what each costs the server, and how a flood of 25,000
//! idle and 500 preface-only connections affects a client that is being served meanwhile
//! (README, Guarantees, "hostile clients").

use std::time::{Duration, Instant};

use leased::proto::{DescribeRequest, lease_service_client::LeaseServiceClient};
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::{
    BenchResult,
    harness::{flood, leased::LeasedProcess, proc},
    measure::{Row, Samples},
    procs::{connect, rss_bytes, start_leased},
};

/// Connections the flood opens that send nothing, and that send only the HTTP/2 preface.
const FLOOD_IDLE: usize = 25_000;
const FLOOD_PREFACE_ONLY: usize = 500;

/// Between two Describes of the served client during the flood.
const DESCRIBE_PERIOD: Duration = Duration::from_millis(5);

pub async fn hostile_connections(
    redis_url: &str,
    log_level: &str,
    quick: bool,
) -> BenchResult<Vec<Row>> {
    let scale = if quick { 10 } else { 1 };
    let mut rows = connection_memory(redis_url, log_level, 5_000 / scale, 1_000 / scale).await?;
    rows.push(
        idle_flood(
            redis_url,
            log_level,
            FLOOD_IDLE / scale,
            FLOOD_PREFACE_ONLY / scale,
        )
        .await?,
    );
    Ok(rows)
}

/// Resident memory per connection in its handshake (silent) and per established gRPC
/// connection, on a server whose handshake timeout outlasts the measurement.
async fn connection_memory(
    redis_url: &str,
    log_level: &str,
    silent: usize,
    established: usize,
) -> BenchResult<Vec<Row>> {
    let args = ["--handshake-timeout".to_owned(), "120s".to_owned()];
    let server = start_leased("hostile-memory", Some(redis_url), &args, log_level).await?;
    let mut first = LeaseServiceClient::new(connect(server.address).await?);
    describe(&mut first).await?;
    let settle = Duration::from_millis(500);

    tokio::time::sleep(settle).await;
    let rss_before = rss_bytes(server.pid())?;
    let address = server.address;
    let idle =
        tokio::task::spawn_blocking(move || flood::IdleConnections::open(address, silent, 2))
            .await??;
    tokio::time::sleep(settle).await;
    let rss_idle = rss_bytes(server.pid())?;
    let idle_opened = idle.opened;
    let per_idle = rss_idle.saturating_sub(rss_before) as f64 / idle_opened as f64;
    drop(idle);

    tokio::time::sleep(settle * 4).await;
    let rss_before_clients = rss_bytes(server.pid())?;
    let mut clients = Vec::with_capacity(established);
    for _ in 0..established {
        let mut client = LeaseServiceClient::new(connect(server.address).await?);
        describe(&mut client).await?;
        clients.push(client);
    }
    tokio::time::sleep(settle).await;
    let rss_clients = rss_bytes(server.pid())?;
    let per_client = rss_clients.saturating_sub(rss_before_clients) as f64 / established as f64;
    drop(clients);

    let empty = Samples::default();
    Ok(vec![
        Row::new(
            "idle_connection_memory",
            &empty,
            format!(
                "server RSS per silent connection in its handshake: {:.1} KiB ({} connections)",
                per_idle / 1024.0,
                idle_opened
            ),
        )
        .with("connections", idle_opened)
        .with("rss_bytes_per_connection", per_idle.round()),
        Row::new(
            "established_connection_memory",
            &empty,
            format!(
                "server RSS per established gRPC connection (one Describe each): {:.1} KiB ({} \
                 connections)",
                per_client / 1024.0,
                established
            ),
        )
        .with("connections", established)
        .with("rss_bytes_per_connection", per_client.round()),
    ])
}

/// The flood against a server with the default limits except a handshake timeout that outlasts
/// the measurement (so that the connections are held idle, not closed, while the CPU is
/// measured), while one client describes every 5 ms on its own connection: its latency, the
/// server's file descriptors and CPU.
async fn idle_flood(
    redis_url: &str,
    log_level: &str,
    idle_count: usize,
    preface_only_count: usize,
) -> BenchResult<Row> {
    let args = ["--handshake-timeout".to_owned(), "120s".to_owned()];
    let server = start_leased("hostile-flood", Some(redis_url), &args, log_level).await?;
    let pid = server.pid();
    let mut client = LeaseServiceClient::new(connect(server.address).await?);
    describe(&mut client).await?;
    let fds_before = proc::open_fds(pid)?;

    let (stop, stopped) = watch::channel(false);
    let describing = tokio::spawn(describe_until(client, stopped.clone()));
    let sampling = tokio::spawn(max_fds_until(pid, stopped));
    let window = Duration::from_secs(3);
    let cpu_percent =
        |cpu: Duration, wall: Duration| 100.0 * cpu.as_secs_f64() / wall.as_secs_f64();

    // The served client alone, for comparison.
    let cpu_at_start = proc::cpu_time(pid)?;
    tokio::time::sleep(window).await;
    let baseline = cpu_percent(proc::cpu_time(pid)? - cpu_at_start, window);

    let started = Instant::now();
    let cpu_at_start = proc::cpu_time(pid)?;
    let address = server.address;
    let halves =
        [(idle_count / 2, 2u8), (idle_count - idle_count / 2, 12)].map(|(count, first_source)| {
            tokio::task::spawn_blocking(move || {
                flood::IdleConnections::open(address, count, first_source)
            })
        });
    let mut idle = Vec::new();
    for half in halves {
        idle.push(half.await??);
    }
    let preface_only = flood::open(server.address, preface_only_count, flood::PREFACE).await;
    let arrival = started.elapsed();
    let arriving = cpu_percent(proc::cpu_time(pid)? - cpu_at_start, arrival);

    let cpu_at_hold = proc::cpu_time(pid)?;
    tokio::time::sleep(window).await;
    let held = cpu_percent(proc::cpu_time(pid)? - cpu_at_hold, window);
    let open_while_held = proc::open_fds(pid)?;

    stop.send_replace(true);
    let latencies = describing.await??;
    let max_fds = sampling.await?;
    let opened: usize = idle.iter().map(|child| child.opened).sum();
    drop((idle, preface_only));
    wait_for_fds(&server, fds_before + 2, Duration::from_secs(30)).await?;

    let samples = Samples {
        elapsed: started.elapsed(),
        latencies,
        ..Samples::default()
    };
    Ok(Row::new(
        "idle_flood",
        &samples,
        format!(
            "Describe every 5 ms on an established connection while {opened} idle and \
             {preface_only_count} preface-only connections arrive ({:.1} s) and are held; server \
             CPU {baseline:.1} % of a core with the Describes alone, {arriving:.1} % while the \
             flood arrived, {held:.1} % while it was held ({open_while_held} fds); fds \
             {fds_before} -> max {max_fds} (cap 10,000)",
            arrival.as_secs_f64(),
        ),
    )
    .with("idle_connections", opened)
    .with("preface_only_connections", preface_only_count)
    .with("arrival_seconds", arrival.as_secs_f64())
    .with("server_cpu_percent_describes_alone", round1(baseline))
    .with("server_cpu_percent_arriving", round1(arriving))
    .with("server_cpu_percent_held", round1(held))
    .with("server_fds_before", fds_before)
    .with("server_fds_held", open_while_held)
    .with("server_fds_max", max_fds))
}

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

async fn describe(client: &mut LeaseServiceClient<Channel>) -> BenchResult<()> {
    client
        .describe(DescribeRequest {
            name: "bench/hostile".into(),
        })
        .await?;
    Ok(())
}

async fn describe_until(
    mut client: LeaseServiceClient<Channel>,
    mut stopped: watch::Receiver<bool>,
) -> BenchResult<Vec<Duration>> {
    let mut latencies = Vec::new();
    while !*stopped.borrow() {
        let started = Instant::now();
        describe(&mut client).await?;
        latencies.push(started.elapsed());
        let _ = tokio::time::timeout(DESCRIBE_PERIOD, stopped.changed()).await;
    }
    Ok(latencies)
}

async fn max_fds_until(pid: u32, stopped: watch::Receiver<bool>) -> usize {
    let mut max_fds = 0;
    while !*stopped.borrow() {
        max_fds = max_fds.max(proc::open_fds(pid).unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    max_fds
}

/// Waits until the server holds at most `fds` descriptors.
async fn wait_for_fds(server: &LeasedProcess, fds: usize, timeout: Duration) -> BenchResult<()> {
    let started = Instant::now();
    loop {
        let open = proc::open_fds(server.pid())?;
        if open <= fds {
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(format!("the server still holds {open} fds after {timeout:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
