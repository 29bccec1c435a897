//! The cap on open connections: admission, each connection's slot, and eviction of the oldest
//! connection still in its handshake.

use std::{
    collections::BTreeMap,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tokio::sync::oneshot;

use super::Connections;
use crate::metrics::metrics;

/// Connections admitted beyond the cap while the ones they evicted are still closing: evicting
/// is a message to the evicted connection's task, which closes its socket when it next runs.
const EVICTION_HEADROOM: usize = 64;

/// Longest pause of accepting while evicted connections close (see `admit_when_room`).
const CLOSING_WAIT: Duration = Duration::from_millis(100);

impl Connections {
    /// A slot for one more connection, evicting the oldest handshake at the cap.
    fn admit(self: &Arc<Self>) -> Admission {
        let open = self.open.load(Ordering::Relaxed);
        let max = self.limits.max_connections;
        if open >= max + EVICTION_HEADROOM {
            return Admission::Closing;
        }
        if open >= max && !self.evict_oldest_handshake() {
            return Admission::Full;
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        metrics().connections.inc();
        Admission::Admitted(Slot(self.clone()))
    }

    /// [`Connections::admit`], waiting (briefly, up to [`CLOSING_WAIT`]) while the connections
    /// already evicted close: in a burst, evictions can run ahead of the tasks that close them,
    /// and a real client arriving then must not be refused for it. `accept` pauses meanwhile;
    /// the kernel queues new clients.
    pub(super) async fn admit_when_room(self: &Arc<Self>) -> Option<Slot> {
        let started = tokio::time::Instant::now();
        loop {
            match self.admit() {
                Admission::Admitted(slot) => return Some(slot),
                Admission::Full => return None,
                Admission::Closing if started.elapsed() >= CLOSING_WAIT => return None,
                Admission::Closing => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    }

    /// Tells the oldest connection still in its handshake to close; false if there is none.
    fn evict_oldest_handshake(&self) -> bool {
        let mut handshakes = self.lock_handshakes();
        while let Some((_, evict)) = handshakes.pop_first() {
            // A closed receiver is a handshake that has just ended: try the next.
            if evict.send(()).is_ok() {
                return true;
            }
        }
        false
    }

    fn lock_handshakes(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, oneshot::Sender<()>>> {
        self.handshakes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a handshake as evictable until the returned entry is dropped.
    pub(super) fn start_handshake(self: &Arc<Self>) -> (HandshakeEntry, oneshot::Receiver<()>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (evict, evicted) = oneshot::channel();
        self.lock_handshakes().insert(id, evict);
        let entry = HandshakeEntry {
            connections: self.clone(),
            id,
        };
        (entry, evicted)
    }
}

/// What [`Connections::admit`] decided for a new connection.
enum Admission {
    Admitted(Slot),
    /// Every open connection is past its handshake: close the new one.
    Full,
    /// Connections evicted to make room have not closed yet: ask again shortly.
    Closing,
}

/// One admitted connection's place under the cap, given back on drop.
pub(super) struct Slot(Arc<Connections>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        metrics().connections.dec();
    }
}

/// A handshake in progress, evictable until dropped.
pub(super) struct HandshakeEntry {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for HandshakeEntry {
    fn drop(&mut self) {
        self.connections.lock_handshakes().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::connections::ConnectionLimits;

    /// At the cap, a new connection evicts the oldest handshake; with none left, it is refused.
    #[tokio::test]
    async fn at_the_cap_the_oldest_handshake_makes_room() {
        let connections = Connections::new(ConnectionLimits {
            max_connections: 2,
            ..ConnectionLimits::default()
        });
        let admitted = |admission| match admission {
            Admission::Admitted(slot) => Some(slot),
            Admission::Full | Admission::Closing => None,
        };
        let first = admitted(connections.admit()).unwrap();
        let (first_entry, mut first_evicted) = connections.start_handshake();
        let second = admitted(connections.admit()).unwrap();
        let (second_entry, mut second_evicted) = connections.start_handshake();

        let third = admitted(connections.admit()).expect("evicts the oldest handshake");
        assert!(
            first_evicted.try_recv().is_ok(),
            "the oldest is told to close"
        );
        assert!(second_evicted.try_recv().is_err());
        drop((first_entry, first));

        // The second completes its handshake: nothing is evictable, so the cap holds.
        drop(second_entry);
        assert!(matches!(connections.admit(), Admission::Full));
        drop(second);
        assert!(
            admitted(connections.admit()).is_some(),
            "a closed connection frees its slot"
        );
        drop(third);
    }
}
