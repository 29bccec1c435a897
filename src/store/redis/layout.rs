//! The layout version of what `leased` keeps in Redis: one key, `<prefix>layout`, holds the
//! version (an integer) of the keys, values and messages under the prefix, so that a replica
//! never reads a layout it does not know. A Redis without the key holds layout 1, that of the
//! releases before the key existed (the layouts before theirs, which a rolling upgrade crosses
//! with one re-acquire per lease, count as 1 too).
//!
//! Checked at startup (a layout this binary cannot read refuses to start) and after every
//! (re)connection of the pool's clients (it may be another Redis now, or a restored one): while
//! the layout is unreadable, [`Layout::refusal`] makes the store's ping fail (health
//! NOT_SERVING) and every script call answer `UNAVAILABLE`, and the check repeats until it is
//! readable again. The rule for a release that changes the layout:
//! docs/src/internals/redis-layout.md, "Layout version".

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use fred::{
    clients::{Client, Pool},
    prelude::{EventInterface, KeysInterface},
    types::SetOptions,
};
use futures::{FutureExt, StreamExt, stream};
use tokio::sync::watch;
use tokio_stream::wrappers::BroadcastStream;

use super::replies::is_transient;
use crate::{
    error::{Error, StartupError},
    throttle::{LOG_INTERVAL, Throttle},
};

/// The layout this binary writes, and the newest it reads: a Redis holding a newer one was
/// written by a newer release.
const LAYOUT_WRITTEN: u64 = 1;

/// The oldest layout this binary reads: a Redis holding an older one needs an intermediate
/// release first.
const OLDEST_LAYOUT_READ: u64 = 1;

/// What a Redis without the layout key holds: the releases before the key wrote layout 1.
const LAYOUT_WITHOUT_KEY: u64 = 1;

/// How soon a check that Redis did not answer is tried again.
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// While the layout is unreadable, how often it is read again, so that a Redis set right (or a
/// newer release rolled back) is served again without waiting for a reconnect.
const UNREADABLE_RECHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Every reconnect of a Redis whose layout is unreadable would log it.
static UNREADABLE: Throttle = Throttle::new(LOG_INTERVAL);
/// A Redis that does not answer would log every retry.
static CHECK_FAILED: Throttle = Throttle::new(LOG_INTERVAL);

/// Why this binary cannot read the layout Redis holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Unreadable {
    /// A newer release wrote it.
    Newer(u64),
    /// Older than this binary still reads.
    TooOld(u64),
    /// The key holds something no release writes: what it holds, described.
    NotAVersion(String),
}

impl Unreadable {
    /// The error naming the key, the layout found, those this binary reads, and what to do.
    pub(super) fn error(&self, key: &str) -> StartupError {
        let key = key.to_owned();
        match self {
            Unreadable::Newer(held) => StartupError::RedisLayoutNewer {
                key,
                held: *held,
                known: LAYOUT_WRITTEN,
            },
            Unreadable::TooOld(held) => StartupError::RedisLayoutTooOld {
                key,
                held: *held,
                oldest: OLDEST_LAYOUT_READ,
                known: LAYOUT_WRITTEN,
            },
            Unreadable::NotAVersion(found) => StartupError::RedisLayoutUnknown {
                key,
                found: found.clone(),
            },
        }
    }
}

/// The layout held by a Redis whose layout key holds `value` (`None`: no key), if this binary
/// reads it.
pub(super) fn readable_layout(value: Option<&str>) -> Result<u64, Unreadable> {
    let Some(value) = value else {
        return Ok(LAYOUT_WITHOUT_KEY);
    };
    match value.parse::<u64>() {
        Ok(held) if held > LAYOUT_WRITTEN => Err(Unreadable::Newer(held)),
        Ok(held) if held < OLDEST_LAYOUT_READ => Err(Unreadable::TooOld(held)),
        Ok(held) => Ok(held),
        Err(_) => Err(Unreadable::NotAVersion(format!("{value:?}"))),
    }
}

/// The layout check of one store: the key, and what the last check found.
pub(super) struct Layout {
    key: String,
    /// The last check found a layout this binary cannot read. A copy of `verdict`'s error for
    /// every script call, which reads it: an atomic load, where the channel takes a lock.
    unreadable: AtomicBool,
    /// The last check's verdict: `None` until Redis first answered one.
    verdict: watch::Sender<Option<Result<u64, Unreadable>>>,
    /// The startup check is over and the server serves: from now on an unreadable layout is
    /// logged here (before, the startup error says it).
    serving: AtomicBool,
}

impl Layout {
    pub(super) fn new(key: String) -> Self {
        Layout {
            key,
            unreadable: AtomicBool::new(false),
            verdict: watch::Sender::new(None),
            serving: AtomicBool::new(false),
        }
    }

    /// The error every call answers while the last check found the layout unreadable.
    pub(super) fn refusal(&self) -> Option<Error> {
        if !self.unreadable.load(Ordering::Relaxed) {
            return None;
        }
        match &*self.verdict.borrow() {
            Some(Err(unreadable)) => {
                Some(Error::Unavailable(unreadable.error(&self.key).to_string()))
            }
            _ => None,
        }
    }

    /// Waits (up to `timeout`) for the first check, and refuses a layout this binary cannot
    /// read. A Redis that does not answer in time is not an error here: the server starts
    /// unhealthy, and the layout is checked once Redis answers.
    pub(super) async fn check_at_startup(&self, timeout: Duration) -> Result<(), StartupError> {
        let mut verdicts = self.verdict.subscribe();
        let first = tokio::time::timeout(timeout, async {
            verdicts
                .wait_for(Option::is_some)
                .await
                .map(|verdict| verdict.clone())
        })
        .await;
        if let Ok(Ok(Some(Err(unreadable)))) = first {
            return Err(unreadable.error(&self.key));
        }
        self.serving.store(true, Ordering::SeqCst);
        if !matches!(first, Ok(Ok(Some(Ok(_))))) {
            // A verdict that came in since the wait gave up was not logged: judge it here.
            if let Some(Err(unreadable)) = &*self.verdict.borrow() {
                return Err(unreadable.error(&self.key));
            }
            tracing::warn!(
                key = %self.key,
                "Redis did not tell its layout version at startup; it is checked once Redis answers"
            );
        }
        Ok(())
    }

    /// Reads the layout key, records layout 1 if it is missing, and remembers the verdict. An
    /// error only when Redis did not answer (the caller tries again).
    async fn check(&self, client: &Client) -> Result<(), fred::error::Error> {
        let held = match client.get::<Option<String>, _>(self.key.as_str()).await {
            Ok(held) => held,
            Err(error) if is_transient(&error) => return Err(error),
            // WRONGTYPE: something else wrote the key.
            Err(error) => {
                let found = format!("a value GET cannot read ({})", error.details());
                self.remember(Err(Unreadable::NotAVersion(found)));
                return Ok(());
            }
        };
        if held.is_none() {
            // NX: a replica that recorded it meanwhile wins. If this write fails (a full or
            // read-only Redis), the missing key still reads as layout 1.
            let recorded = client
                .set::<(), _, _>(
                    self.key.as_str(),
                    LAYOUT_WITHOUT_KEY,
                    None,
                    Some(SetOptions::NX),
                    false,
                )
                .await;
            if let Err(error) = recorded {
                tracing::debug!(%error, key = %self.key, "could not record the layout version");
            }
        }
        self.remember(readable_layout(held.as_deref()));
        Ok(())
    }

    fn remember(&self, verdict: Result<u64, Unreadable>) {
        let was_unreadable = self.unreadable.load(Ordering::Relaxed);
        let logged = match &verdict {
            Err(unreadable) => Some(unreadable.clone()),
            Ok(layout) => {
                if was_unreadable {
                    tracing::info!(layout, key = %self.key, "Redis's layout is readable again");
                }
                None
            }
        };
        // The verdict before the flag: a call that sees the flag finds its error in the verdict.
        // And before `serving` is read: the startup check sets it, then reads the verdict, so one
        // of the two sees the other and an unreadable layout is never left unsaid.
        self.verdict.send_replace(Some(verdict));
        self.unreadable.store(logged.is_some(), Ordering::SeqCst);
        if let Some(unreadable) = logged
            && self.serving.load(Ordering::SeqCst)
            && let Some(suppressed) = UNREADABLE.admit()
        {
            tracing::error!(
                suppressed,
                "{}; health is NOT_SERVING and every call answers UNAVAILABLE until the layout is \
                 one this leased reads",
                unreadable.error(&self.key)
            );
        }
    }

    fn is_unreadable(&self) -> bool {
        self.unreadable.load(Ordering::Relaxed)
    }
}

/// Checks the layout after every connection of a client of `pool` (fred reports the first
/// connection too), retrying until Redis answers; while it is unreadable, every
/// [`UNREADABLE_RECHECK_INTERVAL`] as well.
///
/// It listens for connections when called, not when its task first runs: a task spawned just
/// before `connect_pool` may first run after the connection on a busy runtime, and would then
/// miss it and leave the startup check waiting for a verdict that never comes (seen in CI).
pub(super) fn follow_layout(pool: Pool, layout: Arc<Layout>) -> impl Future<Output = ()> {
    let mut connections = stream::select_all(
        pool.clients()
            .iter()
            .map(|client| BroadcastStream::new(client.reconnect_rx())),
    );
    async move {
        loop {
            let check_now = match layout.is_unreadable() {
                true => tokio::select! {
                    connected = connections.next() => connected.is_some(),
                    _ = tokio::time::sleep(UNREADABLE_RECHECK_INTERVAL) => true,
                },
                false => connections.next().await.is_some(),
            };
            if !check_now {
                return;
            }
            // The clients of the pool reconnect together: one check for all of them.
            while let Some(Some(_)) = connections.next().now_or_never() {}
            while let Err(error) = layout.check(pool.next()).await {
                if let Some(suppressed) = CHECK_FAILED.admit() {
                    tracing::warn!(
                        suppressed,
                        %error,
                        "cannot read Redis's layout version; retrying"
                    );
                }
                tokio::time::sleep(RETRY_DELAY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No key is layout 1; this binary's layouts are read; a newer, an older and a value that is
    /// not a version are refused, each with a message that names the layout and what to do.
    #[test]
    fn only_the_layouts_this_binary_knows_are_readable() {
        assert_eq!(readable_layout(None), Ok(1));
        assert_eq!(readable_layout(Some("1")), Ok(1));
        assert_eq!(readable_layout(Some("2")), Err(Unreadable::Newer(2)));
        assert_eq!(readable_layout(Some("99")), Err(Unreadable::Newer(99)));
        assert_eq!(readable_layout(Some("0")), Err(Unreadable::TooOld(0)));
        for value in ["", "one", "-1", " 1", "1.0"] {
            assert_eq!(
                readable_layout(Some(value)),
                Err(Unreadable::NotAVersion(format!("{value:?}"))),
                "{value:?}"
            );
        }

        let newer = Unreadable::Newer(99).error("leased:layout").to_string();
        for expected in ["layout 99", "up to 1", "leased:layout", "--key-prefix"] {
            assert!(newer.contains(expected), "{expected:?} not in {newer}");
        }
        let older = Unreadable::TooOld(0).error("leased:layout").to_string();
        for expected in ["layout 0", "1 to 1", "intermediate release"] {
            assert!(older.contains(expected), "{expected:?} not in {older}");
        }
        let unknown = Unreadable::NotAVersion("\"one\"".into())
            .error("leased:layout")
            .to_string();
        assert!(unknown.contains("holds \"one\""), "{unknown}");
    }

    /// The flag and the verdict agree: a refusal while the last check found the layout
    /// unreadable, none once a later check finds it readable.
    #[test]
    fn a_later_readable_check_clears_the_refusal() {
        let layout = Layout::new("leased:layout".into());
        assert!(layout.refusal().is_none(), "nothing checked yet");
        layout.remember(Err(Unreadable::Newer(99)));
        let refusal = layout.refusal().expect("refused").to_string();
        assert!(refusal.contains("layout 99"), "{refusal}");
        layout.remember(Ok(1));
        assert!(layout.refusal().is_none());
    }
}
