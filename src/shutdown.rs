//! A shutdown signal that every long-lived task can wait on: SIGTERM in the binary, a dropped
//! handle in tests.

use tokio::sync::watch;

/// Fires the shutdown signal; dropping it fires it too.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// A cloneable view of the shutdown signal.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// A new, not yet fired, shutdown signal.
pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (sender, receiver) = watch::channel(false);
    (ShutdownTrigger(sender), Shutdown(receiver))
}

impl ShutdownTrigger {
    /// Starts the shutdown: every [`Shutdown::fired`] resolves.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// A signal that never fires, for callers that have no shutdown of their own.
    pub fn never() -> Self {
        let (sender, receiver) = watch::channel(false);
        // Keep the sender alive forever so that the receiver never sees the channel close.
        std::mem::forget(sender);
        Shutdown(receiver)
    }

    /// Resolves once the shutdown has started (or its trigger was dropped).
    pub async fn fired(&self) {
        let mut receiver = self.0.clone();
        // An error means the trigger was dropped, which also means "shut down".
        let _ = receiver.wait_for(|fired| *fired).await;
    }

    /// True once the shutdown has started.
    pub fn is_fired(&self) -> bool {
        *self.0.borrow() || self.0.has_changed().is_err()
    }
}
