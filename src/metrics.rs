//! Prometheus metrics, served over HTTP on `--metrics-listen` at `/metrics` (the port:
//! `server::metrics_port`).
//!
//! One process-wide registry ([`metrics`]); handlers, the waiting policy and the Redis store
//! record into it.

use std::{sync::LazyLock, time::Duration};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};
/// Labels of per-RPC metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub rpc: &'static str,
    /// The gRPC status code's name as tonic spells it (`Ok`, `NotFound`, ...).
    pub code: &'static str,
}

/// Labels naming one thing: an RPC, a store operation, a reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// Every metric leased exports.
pub struct Metrics {
    registry: Registry,
    /// Finished RPCs by method and gRPC status code (streams count once, when they end).
    pub rpc_requests: Family<RpcLabels, Counter>,
    /// RPC duration in seconds (for streams: the stream's whole life).
    pub rpc_duration: Family<RpcLabels, Histogram>,
    /// Leases granted.
    pub grants: Counter,
    /// Acquires that ended in not_granted.
    pub not_granted: Counter,
    /// Successful renewals.
    pub renewals: Counter,
    /// Renewals that answered lost, by reason.
    pub losses: Family<KindLabels, Counter>,
    /// Waiters woken by the timer at a holder's expiry (the holder neither renewed nor released).
    pub expiries_seen: Counter,
    /// Callers waiting in Acquire now.
    pub waiters: Gauge,
    /// Queue entries of this replica found in Redis without a caller here (an attempt that ran
    /// after the server gave up on it), and removed.
    pub callerless_entries_removed: Counter,
    /// Queue entries of other replicas that held up a free permit and were taken out: their
    /// replica's heartbeat had lapsed, or they stalled far past any live replica's delay.
    pub stalled_entries_removed: Counter,
    /// Open Acquire and Renew streams, by RPC.
    pub open_streams: Family<KindLabels, Gauge>,
    /// Redis script latency in seconds, by operation.
    pub store_duration: Family<KindLabels, Histogram>,
    /// Redis commands that failed or timed out, by operation.
    pub store_errors: Family<KindLabels, Counter>,
    /// Open client connections (gRPC and health ports), handshakes included.
    pub connections: Gauge,
    /// Connections closed at once because `--max-connections` were open past their handshake.
    pub connections_refused: Counter,
    /// Connections closed before their handshake completed, by reason (timeout, evicted,
    /// closed, tls, io).
    pub handshake_failures: Family<KindLabels, Counter>,
    /// `accept` failures that paused accepting (out of file descriptors or memory).
    pub accept_errors: Counter,
    /// Metrics-port connections closed at its cap to make room for a new one.
    pub metrics_port_evictions: Counter,
    /// Console connections closed at its cap to make room for a new one.
    pub console_evictions: Counter,
    /// Open Renew and Watch streams, and waiting Acquires, ended because a tokens reload took
    /// away what they do.
    pub streams_ended_by_reload: Counter,
    /// Trace spans dropped because the export queue was full (a slow or stalled collector).
    pub trace_spans_dropped: Counter,
    /// 1 while Redis's `maxmemory-policy` may evict lease keys (anything but `noeviction`) and
    /// `--redis-allow-eviction` let the server start anyway.
    pub redis_eviction_unsafe: Gauge,
    /// How long Redis `WAIT` took to confirm a grant or renewal on `--redis-wait-replicas`
    /// replicas, in seconds.
    pub redis_wait_duration: Histogram,
    /// Grants and renewals that fewer replicas than `--redis-wait-replicas` confirmed in time
    /// (answered UNAVAILABLE).
    pub redis_wait_shortfalls: Counter,
    /// Grants that their replicas did not confirm and whose release failed: they expire at
    /// their TTL, held by nobody who knows it.
    pub unconfirmed_grants_expiring: Counter,
}

fn latency_histogram() -> Histogram {
    // 50 µs to about 26 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("leased");
        let metrics = Metrics {
            rpc_requests: Family::default(),
            rpc_duration: Family::new_with_constructor(latency_histogram),
            grants: Counter::default(),
            not_granted: Counter::default(),
            renewals: Counter::default(),
            losses: Family::default(),
            expiries_seen: Counter::default(),
            waiters: Gauge::default(),
            callerless_entries_removed: Counter::default(),
            stalled_entries_removed: Counter::default(),
            open_streams: Family::default(),
            store_duration: Family::new_with_constructor(latency_histogram),
            store_errors: Family::default(),
            connections: Gauge::default(),
            connections_refused: Counter::default(),
            handshake_failures: Family::default(),
            accept_errors: Counter::default(),
            metrics_port_evictions: Counter::default(),
            console_evictions: Counter::default(),
            streams_ended_by_reload: Counter::default(),
            trace_spans_dropped: Counter::default(),
            redis_eviction_unsafe: Gauge::default(),
            redis_wait_duration: latency_histogram(),
            redis_wait_shortfalls: Counter::default(),
            unconfirmed_grants_expiring: Counter::default(),
            registry: Registry::default(),
        };
        let m = &metrics;
        registry.register(
            "rpc_requests",
            "Finished RPCs by method and status code",
            m.rpc_requests.clone(),
        );
        registry.register(
            "rpc_duration_seconds",
            "RPC duration (streams: whole life)",
            m.rpc_duration.clone(),
        );
        registry.register("grants", "Leases granted", m.grants.clone());
        registry.register(
            "not_granted",
            "Acquires that ended in not_granted",
            m.not_granted.clone(),
        );
        registry.register("renewals", "Successful renewals", m.renewals.clone());
        registry.register(
            "losses",
            "Renewals that answered lost, by reason",
            m.losses.clone(),
        );
        registry.register(
            "expiries_seen",
            "Waiters woken at a holder's expiry",
            m.expiries_seen.clone(),
        );
        registry.register("waiters", "Callers waiting in Acquire", m.waiters.clone());
        registry.register(
            "callerless_entries_removed",
            "Queue entries found without a caller here, removed",
            m.callerless_entries_removed.clone(),
        );
        registry.register(
            "stalled_entries_removed",
            "Queue entries of gone or stalled replicas that held up a free permit, removed",
            m.stalled_entries_removed.clone(),
        );
        registry.register(
            "open_streams",
            "Open Acquire and Renew streams",
            m.open_streams.clone(),
        );
        registry.register(
            "store_duration_seconds",
            "Redis script latency by operation",
            m.store_duration.clone(),
        );
        registry.register(
            "store_errors",
            "Redis commands that failed or timed out",
            m.store_errors.clone(),
        );
        registry.register(
            "connections",
            "Open client connections, handshakes included",
            m.connections.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at once at --max-connections",
            m.connections_refused.clone(),
        );
        registry.register(
            "handshake_failures",
            "Connections closed before their handshake completed, by reason",
            m.handshake_failures.clone(),
        );
        registry.register(
            "accept_errors",
            "accept failures that paused accepting",
            m.accept_errors.clone(),
        );
        registry.register(
            "metrics_port_evictions",
            "Metrics-port connections closed at its cap",
            m.metrics_port_evictions.clone(),
        );
        registry.register(
            "console_evictions",
            "Console connections closed at its cap",
            m.console_evictions.clone(),
        );
        registry.register(
            "streams_ended_by_reload",
            "Renew and Watch streams and waiting Acquires ended because a tokens reload removed their access",
            m.streams_ended_by_reload.clone(),
        );
        registry.register(
            "trace_spans_dropped",
            "Trace spans dropped because the OTLP export queue was full",
            m.trace_spans_dropped.clone(),
        );
        registry.register(
            "redis_eviction_unsafe",
            "1 while Redis's maxmemory-policy may evict lease keys",
            m.redis_eviction_unsafe.clone(),
        );
        registry.register(
            "redis_wait_duration_seconds",
            "Redis WAIT latency confirming a grant or renewal on --redis-wait-replicas replicas",
            m.redis_wait_duration.clone(),
        );
        registry.register(
            "redis_wait_shortfalls",
            "Grants and renewals not confirmed by --redis-wait-replicas replicas in time",
            m.redis_wait_shortfalls.clone(),
        );
        registry.register(
            "unconfirmed_grants_expiring",
            "Grants not confirmed by replicas whose release failed: they expire at their TTL",
            m.unconfirmed_grants_expiring.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }

    /// Records one finished RPC; `code` is the status code's name (`Ok`, `NotFound`, ...).
    pub fn record_rpc(&self, rpc: &'static str, code: &'static str, elapsed: Duration) {
        let labels = RpcLabels { rpc, code };
        self.rpc_requests.get_or_create(&labels).inc();
        self.rpc_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Records one store operation.
    pub fn record_store(&self, operation: &'static str, elapsed: Duration, failed: bool) {
        let labels = KindLabels { kind: operation };
        self.store_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if failed {
            self.store_errors.get_or_create(&labels).inc();
        }
    }
}
