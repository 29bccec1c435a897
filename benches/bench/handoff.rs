//! Handoff: how long after a holder calls release the next waiter holds the lock. Several
//! contenders take turns on one name; before each release the holder waits until every other
//! contender waits in the server's queue, so each sample is a real handoff to a waiter.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use leased::proto::{
    AcquireRequest, Granted, acquire_response, lease_service_client::LeaseServiceClient,
};
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::{
    BenchResult,
    measure::{Samples, SharedSamples},
    workload::{CYCLE_TTL_MS, release},
};

/// How many contenders wait in the server's queue now, as far as they can tell.
pub type Queue = watch::Sender<usize>;

/// How long a holder waits for the others to line up before the run counts as failed.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(10);

/// One party taking turns on the lock.
pub trait Contender: Send + 'static {
    type Held: Send;

    /// Takes the lock, waiting as long as needed; counts itself in `queue` while it waits in
    /// line, if the protocol tells it so.
    fn lock(&mut self, queue: &Queue) -> impl Future<Output = BenchResult<Self::Held>> + Send;

    fn unlock(&mut self, held: Self::Held) -> impl Future<Output = BenchResult<()>> + Send;

    /// Resolves once `others` other contenders wait in line.
    fn until_queued(
        &mut self,
        queue: &Queue,
        others: usize,
    ) -> impl Future<Output = BenchResult<()>> + Send;
}

struct Turns {
    queue: Queue,
    released_at: Mutex<Option<Instant>>,
    samples: SharedSamples,
    stop: AtomicBool,
}

/// Runs the contenders until `rounds` handoffs were measured or `limit` passed.
pub async fn handoff<C: Contender>(
    contenders: Vec<C>,
    rounds: usize,
    limit: Duration,
) -> BenchResult<Samples> {
    let turns = Arc::new(Turns {
        queue: watch::channel(0).0,
        released_at: Mutex::new(None),
        samples: SharedSamples::default(),
        stop: AtomicBool::new(false),
    });
    let others = contenders.len().saturating_sub(1);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut contender in contenders {
        let turns = turns.clone();
        tasks.spawn(async move {
            loop {
                let held = contender.lock(&turns.queue).await?;
                let granted_at = Instant::now();
                let released_at = turns.released_at.lock().expect("handoff lock").take();
                if let Some(released_at) = released_at {
                    turns.samples.record(granted_at - released_at);
                }
                if turns.samples.len() >= rounds || started.elapsed() >= limit {
                    turns.stop.store(true, Ordering::SeqCst);
                }
                // Once stopping, each waiter in turn takes the lock, gives it back and leaves.
                let stopping = turns.stop.load(Ordering::SeqCst);
                if !stopping {
                    contender.until_queued(&turns.queue, others).await?;
                    *turns.released_at.lock().expect("handoff lock") = Some(Instant::now());
                }
                contender.unlock(held).await?;
                if stopping {
                    return BenchResult::Ok(());
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    Ok(turns.samples.take(started.elapsed()))
}

/// A leased client that waits in `Acquire` (`wait_ms` > 0) for one shared name.
pub struct LeasedContender {
    pub client: LeaseServiceClient<Channel>,
    pub name: String,
}

impl Contender for LeasedContender {
    type Held = Granted;

    async fn lock(&mut self, queue: &Queue) -> BenchResult<Granted> {
        let request = AcquireRequest {
            name: self.name.clone(),
            holder: "bench".to_owned(),
            ttl_ms: CYCLE_TTL_MS,
            wait_ms: QUEUE_TIMEOUT.as_millis() as i64 * 2,
            ..Default::default()
        };
        let mut stream = self.client.acquire(request).await?.into_inner();
        let mut queued = false;
        let outcome = loop {
            let Some(message) = stream.message().await? else {
                break Err("Acquire ended without a terminal message".into());
            };
            match message.result {
                // The server subscribed to releases before it answered `waiting`.
                Some(acquire_response::Result::Waiting(_)) if !queued => {
                    queued = true;
                    queue.send_modify(|waiting| *waiting += 1);
                }
                Some(acquire_response::Result::Granted(granted)) => break Ok(granted),
                Some(acquire_response::Result::NotGranted(_)) => {
                    break Err("a waiter was not granted within its wait".into());
                }
                _ => {}
            }
        };
        if queued {
            queue.send_modify(|waiting| *waiting -= 1);
        }
        outcome
    }

    async fn unlock(&mut self, granted: Granted) -> BenchResult<()> {
        release(&mut self.client, granted.name, granted.lease_id).await
    }

    async fn until_queued(&mut self, queue: &Queue, others: usize) -> BenchResult<()> {
        let mut waiting = queue.subscribe();
        tokio::time::timeout(QUEUE_TIMEOUT, waiting.wait_for(|count| *count >= others))
            .await
            .map_err(|_| "the other contenders never lined up")??;
        Ok(())
    }
}
