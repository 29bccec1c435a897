//! Watching a lease: this replica's watchers by name, and the changes the stores report to them.
//! (Stub of the interface; the registry and the per-name tending task are being written.)

use std::sync::Mutex;

use super::LeaseChange;

/// The `Watch` streams of this replica, by lease name. The stores report every change of holder
/// of a watched name here ([`Watchers::changed`]), in the store's order, and say when changes may
/// have been missed ([`Watchers::resync`], [`Watchers::resync_everywhere`]).
#[derive(Debug, Default)]
pub struct Watchers {
    by_name: Mutex<()>,
}

impl Watchers {
    pub fn new() -> Self {
        Watchers::default()
    }

    /// A grant, release or revoke of `name`, as the store saw it. Called in the store's order for
    /// each name; a name nobody watches here is ignored.
    pub fn changed(&self, name: &str, change: LeaseChange) {
        let _ = (name, change, &self.by_name);
    }

    /// Changes of `name` may have been missed before now (its subscription just started): its
    /// watchers read the state again, and get a snapshot if it differs from what they were told.
    pub fn resync(&self, name: &str) {
        let _ = name;
    }

    /// Changes may have been missed on every name (a reconnect, a lagging subscriber): every
    /// watched name reads its state again and its watchers get a snapshot.
    pub fn resync_everywhere(&self) {}
}
