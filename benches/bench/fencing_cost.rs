//! `fencing_cost`: what leased's fencing middleware (`leased::fencing::FencingLayer`, in-process
//! marks) costs a gRPC call. Two servers of `examples/fenced_kv`'s store in the bench's process,
//! on loopback TCP, which differ only in that the Writer service of one is wrapped in the layer:
//! - `fencing_off@N`: Put without the layer (the calls carry the metadata all the same);
//! - `fencing_on@N`: Put through the layer: the metadata read and parsed, the name's turn taken,
//!   the mark checked and raised.
//!
//! N callers, each on a lease name of its own (so no call waits for another's turn) with one
//! fencing token (equal tokens pass: one holder writing again and again), on one HTTP/2
//! connection per server. The two take turns (off around on, `measure::in_turns`), so a drift of
//! the machine's speed weighs on both alike; each turn prints µs per call (the machine's time per
//! call, 1 / throughput, with N callers) of both and their ratio.

use leased::fencing::FencingInterceptor;
use tonic::{service::interceptor::InterceptedService, transport::Channel};

use crate::{
    BenchResult, Run,
    kv::{
        self,
        proto::{PutRequest, writer_client::WriterClient},
    },
    measure::{Around, Row, Worker, closed_loop_kept, in_turns},
};

/// Callers of each server.
const CALLERS: usize = 16;

/// One caller: Puts to its own key under its own lease name.
struct Putter {
    client: WriterClient<InterceptedService<Channel, FencingInterceptor>>,
    key: String,
}

impl Worker for Putter {
    async fn op(&mut self) -> BenchResult<()> {
        let put = PutRequest {
            key: self.key.clone(),
            value: "v".to_owned(),
        };
        self.client.put(put).await?;
        Ok(())
    }
}

/// Serves the store on an ephemeral loopback port in this process; `fenced` puts the layer on.
async fn start_store(fenced: bool) -> BenchResult<Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let fencing = fenced.then(leased::fencing::FencingLayer::new);
    tokio::spawn(kv::serve(listener, kv::Kv::default(), fencing));
    Ok(Channel::from_shared(format!("http://{address}"))?
        .connect()
        .await?)
}

async fn putters(fenced: bool) -> BenchResult<tokio::sync::Mutex<Vec<Putter>>> {
    let channel = start_store(fenced).await?;
    let putters = (0..CALLERS)
        .map(|caller| {
            let lease = format!("bench/fencing/{caller}");
            Putter {
                client: WriterClient::with_interceptor(
                    channel.clone(),
                    FencingInterceptor::new(&lease, 1_800_000_000_000_000),
                ),
                key: lease,
            }
        })
        .collect();
    Ok(tokio::sync::Mutex::new(putters))
}

pub async fn fencing_cost(run: &Run) -> BenchResult<Vec<Row>> {
    let (off, on) = (putters(false).await?, putters(true).await?);
    let turns = in_turns(
        run.rounds_in_turns(),
        |round| closed_loop_kept(&off, run.round_budget(round)),
        |round| closed_loop_kept(&on, run.round_budget(round)),
    )
    .await?;
    let (on_name, off_name) = (
        format!("fencing_on@{CALLERS}"),
        format!("fencing_off@{CALLERS}"),
    );
    // Time per call, on over off: the around (off) rates over the between (on) rates.
    let ratio = turns.ratio(&on_name, &off_name, Around::Denominator);
    let us_per_call = |ops_per_s: f64| 1e6 / ops_per_s;
    for (turn, cost) in ratio.by_turn.iter().enumerate() {
        let off_rate = (ratio.denominator_ops_per_s_by_round[turn]
            + ratio.denominator_ops_per_s_by_round[turn + 1])
            / 2.0;
        let on_rate = ratio.numerator_ops_per_s_by_round[turn];
        eprintln!(
            "bench: fencing_cost turn {}: {:.1} µs per call fenced, {:.1} µs unfenced (the mean \
             of the rounds around it): {:.3} × the time per call",
            turn + 1,
            us_per_call(on_rate),
            us_per_call(off_rate),
            1.0 / cost,
        );
    }
    let (off_samples, on_samples) = (
        crate::measure::Samples::merge(turns.around),
        crate::measure::Samples::merge(turns.between),
    );
    let (off_us, on_us) = (
        us_per_call(off_samples.ops_per_s()),
        us_per_call(on_samples.ops_per_s()),
    );
    let time_ratio = 1.0 / ratio.median;
    eprintln!(
        "bench: fencing_cost: {on_us:.1} µs per call fenced, {off_us:.1} µs unfenced; fenced / \
         unfenced time per call {time_ratio:.3} (median of the turns), {:+.1} µs per call",
        on_us - off_us
    );
    let workload = format!(
        "Put to examples/fenced_kv's store in the bench process, {CALLERS} callers with a lease \
         name each, one HTTP/2 connection, in turns"
    );
    let off_row = Row::new(
        off_name,
        &off_samples,
        format!("{workload}; no fencing layer; {off_us:.1} µs per call"),
    )
    .with("us_per_call", (off_us * 10.0).round() / 10.0);
    let on_row = Row::new(
        on_name,
        &on_samples,
        format!(
            "{workload}; FencingLayer, in-process marks; {on_us:.1} µs per call, {time_ratio:.3} \
             × the time per call unfenced (median of the turns)"
        ),
    )
    .with("us_per_call", (on_us * 10.0).round() / 10.0)
    .with("in_turns", ratio.to_json())
    .with(
        "time_per_call_ratio",
        (time_ratio * 1000.0).round() / 1000.0,
    );
    Ok(vec![off_row, on_row])
}
