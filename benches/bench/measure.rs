//! Closed-loop load: N workers, each doing one operation after another for a bounded time and
//! count, with a warm-up that is not measured; latencies of every measured operation; one result
//! row per scenario.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::BenchResult;

/// How long a measurement runs, and at most how many operations each worker does.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub warmup: Duration,
    pub measure: Duration,
    pub max_ops_per_worker: u64,
}

/// One worker of a closed loop: it owns its connection or stream and does one operation per call.
pub trait Worker: Send + 'static {
    fn op(&mut self) -> impl Future<Output = BenchResult<()>> + Send;

    /// The latency to record for the operation just done, given how long the whole call took:
    /// the whole call by default; a worker that times one part of its operation (the wait for a
    /// grant inside a cycle) answers that part.
    fn latency(&self, whole: Duration) -> Duration {
        whole
    }

    /// Called after each measured operation (never after one of the warm-up), once its latency
    /// is recorded: a worker that tallies its operations by outcome counts the measured ones here.
    fn measured(&mut self) {}
}

/// What a measurement saw: the latency of every measured operation, the time they took, and
/// the CPU time each metered process spent meanwhile.
#[derive(Debug, Default)]
pub struct Samples {
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
    pub cpu: Vec<(String, Duration)>,
    /// Measured operations of each worker, in the order [`closed_loop`] gives the workers back.
    pub per_worker: Vec<usize>,
}

/// The processes whose CPU time closed loops measure: `(label, pid)`.
static METERED: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

/// Measures the CPU time of `pid` (as `label`) in every closed loop from now on.
pub fn meter_cpu(label: &str, pid: u32) {
    let mut metered = METERED.lock().expect("metered lock");
    metered.retain(|(known, _)| known != label);
    metered.push((label.to_owned(), pid));
}

/// Stops measuring the CPU time of `label` (its process ended).
pub fn unmeter_cpu(label: &str) {
    METERED
        .lock()
        .expect("metered lock")
        .retain(|(known, _)| known != label);
}

/// A process of the harness whose CPU time closed loops measure (as `label`) while it lives.
pub struct Metered<T> {
    process: T,
    label: String,
}

impl<T> Metered<T> {
    /// Meters `pid`, the process of `process`, from now on.
    pub fn new(label: &str, pid: u32, process: T) -> Self {
        meter_cpu(label, pid);
        Metered {
            process,
            label: label.to_owned(),
        }
    }

    /// The label its CPU time is metered under, in [`cpu_times`].
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl<T> std::ops::Deref for Metered<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.process
    }
}

impl<T> Drop for Metered<T> {
    fn drop(&mut self) {
        // Before the process itself is stopped (fields drop after this body).
        unmeter_cpu(&self.label);
    }
}

/// User plus system CPU time of each metered process so far.
pub fn cpu_times() -> Vec<(String, Duration)> {
    let metered = METERED.lock().expect("metered lock").clone();
    metered
        .into_iter()
        .filter_map(|(label, pid)| Some((label, crate::harness::proc::cpu_time(pid).ok()?)))
        .collect()
}

/// CPU time spent between two [`cpu_times`] readings, per process.
pub fn cpu_spent(
    before: &[(String, Duration)],
    after: Vec<(String, Duration)>,
) -> Vec<(String, Duration)> {
    after
        .into_iter()
        .filter_map(|(label, total)| {
            let (_, start) = before.iter().find(|(known, _)| *known == label)?;
            Some((label, total.saturating_sub(*start)))
        })
        .collect()
}

impl Samples {
    /// Several measurements of the same workload as one: their operations, time and CPU added up.
    pub fn merge(parts: Vec<Samples>) -> Samples {
        let mut merged = Samples::default();
        for part in parts {
            merged.latencies.extend(part.latencies);
            merged.elapsed += part.elapsed;
            for (label, spent) in part.cpu {
                match merged.cpu.iter_mut().find(|(known, _)| *known == label) {
                    Some((_, total)) => *total += spent,
                    None => merged.cpu.push((label, spent)),
                }
            }
        }
        merged
    }

    pub fn ops_per_s(&self) -> f64 {
        match self.elapsed.as_secs_f64() {
            0.0 => 0.0,
            seconds => self.latencies.len() as f64 / seconds,
        }
    }

    /// The `quantile` (0 to 1) latency in milliseconds, nearest rank.
    pub fn quantile_ms(&self, quantile: f64) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        match sorted.len() {
            0 => f64::NAN,
            n => {
                let rank = ((quantile * n as f64).ceil() as usize).clamp(1, n);
                sorted[rank - 1].as_secs_f64() * 1000.0
            }
        }
    }
}

/// Runs every worker as its own task until the budget is spent; fails if any operation fails.
/// Gives the workers back (with their connections and streams still open).
pub async fn closed_loop<W: Worker>(
    workers: Vec<W>,
    budget: Budget,
) -> BenchResult<(Samples, Vec<W>)> {
    let started = Instant::now();
    let measure_from = started + budget.warmup;
    let stop_at = measure_from + budget.measure;
    let cpu_at_start = tokio::spawn(async move {
        tokio::time::sleep_until(measure_from.into()).await;
        cpu_times()
    });
    let mut tasks = tokio::task::JoinSet::new();
    for mut worker in workers {
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut last_done = measure_from;
            for _ in 0..budget.max_ops_per_worker {
                let op_started = Instant::now();
                if op_started >= stop_at {
                    break;
                }
                worker.op().await?;
                let done = Instant::now();
                if op_started >= measure_from {
                    latencies.push(worker.latency(done - op_started));
                    worker.measured();
                    last_done = done;
                }
            }
            BenchResult::Ok((worker, latencies, last_done))
        });
    }
    let mut samples = Samples::default();
    let mut workers = Vec::new();
    let mut last_done = measure_from;
    while let Some(joined) = tasks.join_next().await {
        let (worker, latencies, done) = joined??;
        workers.push(worker);
        samples.per_worker.push(latencies.len());
        samples.latencies.extend(latencies);
        last_done = last_done.max(done);
    }
    samples.elapsed = last_done.saturating_duration_since(measure_from);
    samples.cpu = cpu_spent(&cpu_at_start.await?, cpu_times());
    Ok((samples, workers))
}

/// Latencies collected by many tasks at once (for scenarios that are not a closed loop).
#[derive(Clone, Default)]
pub struct SharedSamples(Arc<std::sync::Mutex<Vec<Duration>>>);

impl SharedSamples {
    pub fn record(&self, latency: Duration) {
        self.0.lock().expect("samples lock").push(latency);
    }

    pub fn len(&self) -> usize {
        self.0.lock().expect("samples lock").len()
    }

    pub fn take(&self, elapsed: Duration) -> Samples {
        Samples {
            latencies: std::mem::take(&mut *self.0.lock().expect("samples lock")),
            elapsed,
            cpu: Vec::new(),
            per_worker: Vec::new(),
        }
    }
}

/// One line of the results table and of `report.json`.
#[derive(Clone, Debug)]
pub struct Row {
    pub name: String,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub samples: usize,
    /// Extra numbers of this scenario (memory, counts), for `report.json`.
    pub extra: serde_json::Map<String, Value>,
    /// What the numbers mean or how they were made, for the table.
    pub note: String,
    /// Why the scenario failed, if it did.
    pub error: Option<String>,
}

impl Row {
    pub fn new(name: impl Into<String>, samples: &Samples, note: impl Into<String>) -> Self {
        let mut extra = serde_json::Map::new();
        if !samples.cpu.is_empty() && !samples.latencies.is_empty() {
            let per_op: serde_json::Map<String, Value> = samples
                .cpu
                .iter()
                .map(|(label, spent)| {
                    let micros = spent.as_secs_f64() * 1e6 / samples.latencies.len() as f64;
                    (label.clone(), json!(micros.round()))
                })
                .collect();
            extra.insert("cpu_us_per_op".into(), per_op.into());
        }
        Row {
            name: name.into(),
            ops_per_s: samples.ops_per_s(),
            p50_ms: samples.quantile_ms(0.50),
            p99_ms: samples.quantile_ms(0.99),
            samples: samples.latencies.len(),
            extra,
            note: note.into(),
            error: None,
        }
    }

    /// `leased 109 · bench 65 · redis 44`: CPU microseconds per operation, by process.
    pub fn cpu_text(&self) -> String {
        let Some(Value::Object(per_op)) = self.extra.get("cpu_us_per_op") else {
            return String::new();
        };
        per_op
            .iter()
            .filter_map(|(label, micros)| {
                let micros = micros.as_f64().filter(|micros| *micros >= 1.0)?;
                Some(format!("{label} {micros:.0}"))
            })
            .collect::<Vec<_>>()
            .join(" · ")
    }

    /// A row from numbers another tool measured (redis-benchmark, the redis-py script).
    pub fn measured_elsewhere(
        name: impl Into<String>,
        ops_per_s: f64,
        p50_ms: f64,
        p99_ms: f64,
        samples: usize,
        note: impl Into<String>,
    ) -> Self {
        Row {
            name: name.into(),
            ops_per_s,
            p50_ms,
            p99_ms,
            samples,
            extra: serde_json::Map::new(),
            note: note.into(),
            error: None,
        }
    }

    pub fn failed(name: impl Into<String>, error: String) -> Self {
        Row {
            name: name.into(),
            ops_per_s: f64::NAN,
            p50_ms: f64::NAN,
            p99_ms: f64::NAN,
            samples: 0,
            extra: serde_json::Map::new(),
            note: String::new(),
            error: Some(error),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    pub fn to_json(&self) -> Value {
        let number = |value: f64| match value.is_finite() {
            true => json!((value * 1000.0).round() / 1000.0),
            false => Value::Null,
        };
        let mut object = json!({
            "name": self.name,
            "ops_per_s": number(self.ops_per_s),
            "p50_ms": number(self.p50_ms),
            "p99_ms": number(self.p99_ms),
            "samples": self.samples,
            "note": self.note,
        });
        let map = object.as_object_mut().expect("an object");
        map.extend(self.extra.clone());
        if let Some(error) = &self.error {
            map.insert("error".into(), json!(error));
        }
        object
    }
}

/// Two workloads measured in turns on the same processes, so that a drift of the machine's speed
/// (other processes, thermal) weighs on both alike: `around` runs first and last, `between` in
/// between (`around` 0, `between` 0, `around` 1, ..., `between` n-1, `around` n). Each turn of
/// `between` is compared with the mean of the two `around` rounds on either side of it, so a
/// steady drift cancels out of each turn's ratio; the ratio quoted is the median of the turns'.
#[derive(Debug, Default)]
pub struct Turns {
    /// `rounds + 1` measurements.
    pub around: Vec<Samples>,
    /// `rounds` measurements.
    pub between: Vec<Samples>,
}

/// Runs `around` and `between` in turns, `rounds` turns of `between` (see [`Turns`]); each closure
/// is given the round's index.
pub async fn in_turns<A, B, FA, FB>(
    rounds: u32,
    mut around: FA,
    mut between: FB,
) -> BenchResult<Turns>
where
    FA: FnMut(u32) -> A,
    A: Future<Output = BenchResult<Samples>>,
    FB: FnMut(u32) -> B,
    B: Future<Output = BenchResult<Samples>>,
{
    let mut turns = Turns::default();
    for round in 0..=rounds {
        turns.around.push(around(round).await?);
        if round < rounds {
            turns.between.push(between(round).await?);
        }
    }
    Ok(turns)
}

/// [`closed_loop`] on workers kept in `slot` from one round to the next (open streams, sessions):
/// takes them out, runs them for `budget`, puts them back.
pub async fn closed_loop_kept<W: Worker>(
    slot: &tokio::sync::Mutex<Vec<W>>,
    budget: Budget,
) -> BenchResult<Samples> {
    let mut kept = slot.lock().await;
    let (samples, workers) = closed_loop(std::mem::take(&mut *kept), budget).await?;
    *kept = workers;
    Ok(samples)
}

/// Which side of a ratio measured in [`Turns`] ran around the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Around {
    Numerator,
    Denominator,
}

/// A throughput ratio measured in [`Turns`]: `numerator / denominator` ops/s, per turn and their
/// median.
#[derive(Clone, Debug)]
pub struct TurnRatio {
    pub numerator: String,
    pub denominator: String,
    pub by_turn: Vec<f64>,
    pub median: f64,
    pub numerator_ops_per_s_by_round: Vec<f64>,
    pub denominator_ops_per_s_by_round: Vec<f64>,
}

impl Turns {
    /// The ratio of `numerator` to `denominator`, one of which ran `around` the other.
    pub fn ratio(&self, numerator: &str, denominator: &str, around: Around) -> TurnRatio {
        let rate =
            |parts: &[Samples]| -> Vec<f64> { parts.iter().map(Samples::ops_per_s).collect() };
        let (around_rates, between_rates) = (rate(&self.around), rate(&self.between));
        let by_turn: Vec<f64> = between_rates
            .iter()
            .enumerate()
            .map(|(turn, between)| {
                let bracket = (around_rates[turn] + around_rates[turn + 1]) / 2.0;
                let ratio = match around {
                    Around::Numerator => bracket / between,
                    Around::Denominator => between / bracket,
                };
                round3(ratio)
            })
            .collect();
        let rounded = |rates: Vec<f64>| rates.into_iter().map(f64::round).collect::<Vec<_>>();
        let (numerator_rates, denominator_rates) = match around {
            Around::Numerator => (rounded(around_rates), rounded(between_rates)),
            Around::Denominator => (rounded(between_rates), rounded(around_rates)),
        };
        TurnRatio {
            numerator: numerator.to_owned(),
            denominator: denominator.to_owned(),
            median: round3(median(&by_turn)),
            by_turn,
            numerator_ops_per_s_by_round: numerator_rates,
            denominator_ops_per_s_by_round: denominator_rates,
        }
    }
}

impl TurnRatio {
    /// `0.41 (median of 5 turns: 0.40, 0.41, ...)`.
    pub fn text(&self) -> String {
        let turns: Vec<String> = self.by_turn.iter().map(|r| format!("{r:.2}")).collect();
        format!(
            "{:.2} (median of {} turns: {})",
            self.median,
            self.by_turn.len(),
            turns.join(", ")
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "numerator": self.numerator,
            "denominator": self.denominator,
            "by_turn": self.by_turn,
            "median": self.median,
            "numerator_ops_per_s_by_round": self.numerator_ops_per_s_by_round,
            "denominator_ops_per_s_by_round": self.denominator_ops_per_s_by_round,
        })
    }
}

/// The rows whose name starts with `prefix` and that did not fail.
pub fn measured<'a>(rows: &'a [Row], prefix: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|row| row.name.starts_with(prefix) && row.error.is_none())
        .collect()
}

/// `12345.6` as `12,346`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The median (the mean of the middle two of an even count); NaN for none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}
