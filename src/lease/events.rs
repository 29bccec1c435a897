//! The seam between a store and the core: the store reports what it sees into [`StoreEvents`], a
//! sink that the core makes and hands to the store when it is built; the core keeps this
//! replica's waiting callers ([`Waiters`]) and watchers ([`Watchers`]) behind it. The
//! [`LeaseStore`](super::LeaseStore) and [`QueueStore`](super::QueueStore) traits keep only the
//! store's operations.
//!
//! What a store reports: a wake-up for one of this replica's queue entries, positions moved, a
//! change of holder, and that its reports of one name (or of every name) may have been missed, so
//! that the name's callers read the state again. A store that delivers reports per name (Redis:
//! one shard channel per name) also follows which names the core listens to, and says when the
//! deliveries of a name are in place.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard, OnceLock},
};

use tokio::sync::watch;

use super::{LeaseChange, LeaseName, QueueEntry, Waiters, Watchers};

/// Told the name whose listening changed (first listener in, or last one out); it reads
/// [`StoreEvents::is_listened`] for which.
type ListeningFollower = Box<dyn Fn(&LeaseName) + Send + Sync>;

/// Where a store reports what it sees. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct StoreEvents(Arc<Shared>);

struct Shared {
    waiters: Arc<Waiters>,
    watchers: Arc<Watchers>,
    /// Names with waiters or watchers here, each counted by its listeners.
    listened: Mutex<HashMap<LeaseName, usize>>,
    /// The store's follower of `listened`, if it delivers reports per name.
    follower: OnceLock<ListeningFollower>,
    /// Names whose deliveries the store confirmed: what [`StoreEvents::listening`] waits for.
    delivering: watch::Sender<HashSet<LeaseName>>,
}

impl std::fmt::Debug for StoreEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreEvents")
            .field("replica", &self.replica())
            .finish_non_exhaustive()
    }
}

impl Default for StoreEvents {
    fn default() -> Self {
        StoreEvents::new()
    }
}

impl StoreEvents {
    /// A sink for a new replica: no waiters, no watchers, a fresh replica id.
    pub fn new() -> Self {
        StoreEvents(Arc::new(Shared {
            waiters: Arc::new(Waiters::new()),
            watchers: Arc::new(Watchers::new()),
            listened: Mutex::new(HashMap::new()),
            follower: OnceLock::new(),
            delivering: watch::Sender::default(),
        }))
    }

    // ---- What a store reports.

    /// This replica's id in its queue entries ([`QueueEntry::replica`]), which the store keeps
    /// with each entry: random, so that replicas never collide.
    pub fn replica(&self) -> &str {
        self.0.waiters.replica()
    }

    /// A free permit of `name` goes to this replica's queue `entry`: its caller tries now.
    pub fn wake(&self, name: &str, entry: &QueueEntry) {
        self.0.waiters.wake(name, entry);
    }

    /// Positions in the queue of `name`, or its holders, changed: its waiters read where they
    /// stand again.
    pub fn moved(&self, name: &str) {
        self.0.waiters.moved(name);
    }

    /// A grant, release or revoke of `name`, in the store's order for the name.
    pub fn changed(&self, name: &str, change: LeaseChange) {
        self.0.watchers.changed(name, change);
    }

    /// Reports of `name` may have been missed before now (its deliveries just started): its
    /// waiters and watchers read the state again.
    pub fn resync(&self, name: &str) {
        self.0.waiters.moved(name);
        self.0.watchers.resync(name);
    }

    /// Reports of every name may have been missed (the store fell behind its messages): every
    /// waiter and watcher reads the state again.
    pub fn resync_all(&self) {
        self.0.waiters.moved_everywhere();
        self.0.watchers.resync_everywhere();
    }

    /// The store reconnected: reports of every name may have been missed, and attempts in
    /// flight across the reconnect may have run late or not at all (so each name's queue entries
    /// are reconciled with this replica's callers).
    pub fn reconnected(&self) {
        self.resync_all();
        self.0.waiters.reconcile_everywhere();
    }

    /// Makes the store follow which names are listened to: `follower` is called with a name
    /// whenever its first listener comes or its last one leaves. At most one per sink.
    pub fn follow_listening(&self, follower: impl Fn(&LeaseName) + Send + Sync + 'static) {
        if self.0.follower.set(Box::new(follower)).is_err() {
            panic!("a store follows the listening of its sink once");
        }
    }

    /// Whether anyone here waits on or watches `name`.
    pub fn is_listened(&self, name: &LeaseName) -> bool {
        self.listened().contains_key(name)
    }

    /// Every name someone here waits on or watches.
    pub fn listened_names(&self) -> Vec<LeaseName> {
        self.listened().keys().cloned().collect()
    }

    /// The deliveries of `name` are in place (Redis: its channel's subscription is confirmed):
    /// reports of it made before may have been missed, so its callers read the state again.
    pub fn delivering(&self, name: &LeaseName) {
        self.resync(name.as_str());
        self.0.delivering.send_modify(|delivering| {
            delivering.insert(name.clone());
        });
    }

    /// The deliveries of `name` stopped (nobody listens any more).
    pub fn not_delivering(&self, name: &LeaseName) {
        self.0.delivering.send_modify(|delivering| {
            delivering.remove(name);
        });
    }

    /// Every delivery stopped (the store's connection was lost); each starts again with
    /// [`Self::delivering`]. Reported in order with those, by the one task that makes them.
    pub fn no_deliveries(&self) {
        self.0.delivering.send_modify(HashSet::clear);
    }

    // ---- The core's side.

    /// This replica's waiting callers.
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.0.waiters
    }

    /// This replica's watchers.
    pub(crate) fn watchers(&self) -> &Arc<Watchers> {
        &self.0.watchers
    }

    /// Someone here starts waiting on or watching `name`; counted, ended by [`Self::unlisten`].
    pub(crate) fn listen(&self, name: &LeaseName) {
        let first = {
            let mut listened = self.listened();
            let count = listened.entry(name.clone()).or_insert(0);
            *count += 1;
            *count == 1
        };
        if first {
            self.tell_follower(name);
        }
    }

    /// One listener of `name` leaves.
    pub(crate) fn unlisten(&self, name: &LeaseName) {
        let last = {
            let mut listened = self.listened();
            match listened.get_mut(name) {
                Some(count) if *count > 1 => {
                    *count -= 1;
                    false
                }
                Some(_) => {
                    listened.remove(name);
                    true
                }
                None => false,
            }
        };
        if last {
            self.tell_follower(name);
        }
    }

    /// Resolves once the store delivers the reports of `name` (at once for a store that
    /// delivers every report without being asked, like the embedded one). May never resolve
    /// while the store is unreachable: bound it with a timeout.
    pub(crate) async fn listening(&self, name: &LeaseName) {
        if self.0.follower.get().is_none() {
            return;
        }
        let mut delivering = self.0.delivering.subscribe();
        // Fails only when the sink is being dropped.
        let _ = delivering
            .wait_for(|delivering| delivering.contains(name))
            .await;
    }

    fn tell_follower(&self, name: &LeaseName) {
        if let Some(follower) = self.0.follower.get() {
            follower(name);
        }
    }

    fn listened(&self) -> MutexGuard<'_, HashMap<LeaseName, usize>> {
        self.0
            .listened
            .lock()
            .expect("listened names lock poisoned")
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Mutex, time::Duration};

    use super::*;
    use crate::lease::limits::parse_name;

    /// A name is listened to from its first `listen` to its last `unlisten`; the store's follower
    /// hears of the name at those two moments only.
    #[test]
    fn listening_is_counted_and_the_follower_told_at_the_edges() {
        let events = StoreEvents::new();
        let told = Arc::new(Mutex::new(Vec::new()));
        events.follow_listening({
            let told = told.clone();
            move |name: &LeaseName| told.lock().unwrap().push(name.to_string())
        });
        let name = parse_name("jobs/nightly").unwrap();
        events.listen(&name);
        events.listen(&name);
        assert!(events.is_listened(&name));
        events.unlisten(&name);
        assert!(events.is_listened(&name), "one listener is left");
        events.unlisten(&name);
        assert!(!events.is_listened(&name));
        events.unlisten(&name); // unmatched: ignored
        assert_eq!(*told.lock().unwrap(), ["jobs/nightly", "jobs/nightly"]);
        assert!(events.listened_names().is_empty());
    }

    /// Without a follower (the embedded store delivers everything) `listening` resolves at once;
    /// with one, once the store says the name's deliveries are in place, and not after a
    /// reconnect stopped them.
    #[tokio::test(start_paused = true)]
    async fn listening_waits_for_the_store_when_it_delivers_per_name() {
        let name = parse_name("jobs/nightly").unwrap();
        let in_process = StoreEvents::new();
        in_process.listening(&name).await;

        let per_name = StoreEvents::new();
        per_name.follow_listening(|_: &LeaseName| {});
        let wait = Duration::from_secs(1);
        assert!(
            tokio::time::timeout(wait, per_name.listening(&name))
                .await
                .is_err()
        );
        per_name.delivering(&name);
        assert!(
            tokio::time::timeout(wait, per_name.listening(&name))
                .await
                .is_ok()
        );
        per_name.no_deliveries();
        assert!(
            tokio::time::timeout(wait, per_name.listening(&name))
                .await
                .is_err()
        );
    }
}
