//! Lock objects over [`LeaseClient::acquire`]: [`ReentrantLease`], a handle that its task may lock
//! again while it holds it, and [`ReadWriteLease`], a read-write lock.

use std::{
    cell::Cell,
    future::Future,
    marker::PhantomData,
    ops::Deref,
    sync::{Arc, Mutex, Weak},
};

use tokio::task::JoinHandle;

use super::{AcquireOptions, Acquired, ClientError, LeaseClient, LeaseGuard, NotGranted};

/// A lease that the task owning this handle may lock again while it holds it: a reentrant lock.
/// The first [`lock`](Self::lock) acquires the name; a `lock` while a guard of that lease lives
/// answers at once, without a call to the server, with one more guard of the same lease. The
/// lease ends when the last of its guards ends (the outermost, as scopes nest): dropped, or
/// [`released`](ReentrantGuard::release).
///
/// The handle is the owner. It is `Send` but not `Sync`, so it cannot be shared between tasks:
/// two tasks locking one handle would both be let in. Give each task its own handle; two handles
/// of one name are two holders, which exclude each other like any two callers.
///
/// The guards of a lease are one [`LeaseGuard`]: when the lease is lost, every level sees it
/// (`lost()`, `is_lost()`), and `lock` answers [`ClientError::Lost`] until every guard of that
/// lease has ended; the next `lock` acquires the name again.
///
/// ```no_run
/// use std::time::Duration;
/// use leased::client::{AcquireOptions, ClientError, LeaseClient, ReentrantLease};
///
/// # async fn example(client: LeaseClient) -> Result<(), ClientError> {
/// let ledger = ReentrantLease::new(client, "ledger", AcquireOptions::new(Duration::from_secs(10)));
/// let outer = ledger.lock().await?.expect("free"); // acquires the lease
/// let inner = ledger.lock().await?.expect("ours"); // answers at once: the same lease
/// assert_eq!(outer.fencing_token(), inner.fencing_token());
/// inner.release().await?; // the lease is still held by `outer`
/// outer.release().await?; // the last level releases it
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ReentrantLease {
    client: LeaseClient,
    name: String,
    options: AcquireOptions,
    /// The lease the open levels share, alive while any guard is; behind a lock that lets one
    /// `lock` at a time acquire.
    held: Arc<tokio::sync::Mutex<Weak<LeaseGuard>>>,
    /// The release of the last lease, started when its last guard was dropped: awaited before
    /// acquiring again, so that this handle never queues behind its own previous grant.
    releasing: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// Not `Sync`: the handle is its task's.
    _one_task: PhantomData<Cell<()>>,
}

impl ReentrantLease {
    /// A handle of `name`, acquired as `options` say (TTL, wait, mode...) when it is locked. A
    /// lease id in `options` is not used: each acquisition takes a fresh one.
    pub fn new(client: LeaseClient, name: impl Into<String>, options: AcquireOptions) -> Self {
        ReentrantLease {
            client,
            name: name.into(),
            options: AcquireOptions {
                lease_id: None,
                ..options
            },
            held: Arc::default(),
            releasing: Arc::default(),
            _one_task: PhantomData,
        }
    }

    /// The lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Locks the lease: acquires it (waiting as the options say), or, while a guard of it lives,
    /// answers at once with one more guard of the same lease. `Ok(Err(busy))` says who held the
    /// name for the whole wait. Dropping the future gives the acquisition up, as for
    /// [`LeaseClient::acquire`].
    ///
    /// The future does not borrow the handle, so that it is `Send` although the handle is not
    /// `Sync`: a spawned task can await it.
    pub fn lock(
        &self,
    ) -> impl Future<Output = Result<Result<ReentrantGuard, NotGranted>, ClientError>> + Send + use<>
    {
        let (client, name) = (self.client.clone(), self.name.clone());
        let options = self.options.clone();
        let (held, releasing) = (self.held.clone(), self.releasing.clone());
        async move {
            // One acquisition at a time: a `lock` that overlaps another of this handle (in one
            // `join!`) nests in the lease the first one gets rather than acquiring a second.
            let mut current = held.lock().await;
            if let Some(lease) = current.upgrade() {
                return match lease.lost_reason() {
                    Some(reason) => Err(ClientError::Lost(reason)),
                    None => Ok(Ok(ReentrantGuard::new(lease, releasing))),
                };
            }
            let previous_release = releasing.lock().expect("never poisoned").take();
            if let Some(previous_release) = previous_release {
                let _ = previous_release.await;
            }
            match client.acquire(&name, options).await? {
                Acquired::Granted(guard) => {
                    let lease = Arc::new(guard);
                    *current = Arc::downgrade(&lease);
                    Ok(Ok(ReentrantGuard::new(lease, releasing)))
                }
                Acquired::NotGranted(busy) => Ok(Err(busy)),
            }
        }
    }
}

/// One level of a [`ReentrantLease`]. It derefs to the [`LeaseGuard`] that every level of the
/// lease shares (name, fencing token, `lost()`). Dropping it, or [`release`](Self::release),
/// ends this level; the last level of the lease to end releases it.
#[derive(Debug)]
pub struct ReentrantGuard {
    /// `None` only once `release` or `drop` took it.
    lease: Option<Arc<LeaseGuard>>,
    /// The handle's record of a release started by a drop.
    releasing: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl ReentrantGuard {
    fn new(lease: Arc<LeaseGuard>, releasing: Arc<Mutex<Option<JoinHandle<()>>>>) -> Self {
        ReentrantGuard {
            lease: Some(lease),
            releasing,
        }
    }

    /// Ends this level. The last level of the lease releases it and answers as
    /// [`LeaseGuard::release`] (false if it was no longer ours); another level sends nothing and
    /// answers whether the lease is still held (not lost).
    pub async fn release(mut self) -> Result<bool, ClientError> {
        let lease = self.lease.take().expect("taken only once");
        match Arc::try_unwrap(lease) {
            Ok(last) => last.release().await,
            Err(shared) => Ok(!shared.is_lost()),
        }
    }
}

impl Deref for ReentrantGuard {
    type Target = LeaseGuard;

    fn deref(&self) -> &LeaseGuard {
        self.lease
            .as_deref()
            .expect("taken only by release or drop")
    }
}

impl Drop for ReentrantGuard {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        // Other levels are open: the lease stays.
        let Ok(last) = Arc::try_unwrap(lease) else {
            return;
        };
        if last.is_lost() {
            return;
        }
        // Release in the background, as a dropped LeaseGuard does, but where the handle's next
        // `lock` can wait for it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let release = runtime.spawn(async move {
                let name = last.name().to_owned();
                if let Err(error) = last.release().await {
                    tracing::warn!(%name, %error, "could not release a dropped lease; it expires at its TTL");
                }
            });
            *self.releasing.lock().expect("never poisoned") = Some(release);
        }
    }
}

/// A read-write lock on one name: [`read`](Self::read) takes a shared grant, which coexists with
/// the other shared grants of the name; [`write`](Self::write) an exclusive one, which excludes
/// every other grant. Both wait (as the options say) in the name's one queue, in order: a waiting
/// writer holds back the readers that come after it, so that readers cannot starve it. Each
/// answers as [`LeaseClient::acquire`]: a [`LeaseGuard`] of its own, or who holds the name.
///
/// There is no upgrade from read to write, nor downgrade: release, then acquire again. (Two
/// readers that both waited to upgrade would wait for each other for ever.)
///
/// ```no_run
/// use std::time::Duration;
/// use leased::client::{AcquireOptions, Acquired, ClientError, LeaseClient, ReadWriteLease};
///
/// # async fn example(client: LeaseClient) -> Result<(), ClientError> {
/// let options = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(30));
/// let config = ReadWriteLease::new(client, "config", options);
/// if let Acquired::Granted(reader) = config.read().await? {
///     // Other readers may hold `config` now too; no writer does.
///     reader.release().await?;
/// }
/// if let Acquired::Granted(writer) = config.write().await? {
///     // Nobody else holds `config`.
///     writer.release().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ReadWriteLease {
    client: LeaseClient,
    name: String,
    options: AcquireOptions,
}

impl ReadWriteLease {
    /// The read-write lock `name`, acquired as `options` say (TTL, wait, holder, lock-delay).
    /// Their mode is set by `read` or `write`; their limit and lease id are not used (a
    /// read-write lock has a limit of 1, since a counting lease has no modes, and each
    /// acquisition takes a fresh id).
    pub fn new(client: LeaseClient, name: impl Into<String>, options: AcquireOptions) -> Self {
        ReadWriteLease {
            client,
            name: name.into(),
            options: AcquireOptions {
                limit: 0,
                lease_id: None,
                ..options
            },
        }
    }

    /// The lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Acquires a shared (read) grant.
    pub async fn read(&self) -> Result<Acquired, ClientError> {
        let options = self.options.clone().shared(true);
        self.client.acquire(&self.name, options).await
    }

    /// Acquires an exclusive (write) grant.
    pub async fn write(&self) -> Result<Acquired, ClientError> {
        let options = self.options.clone().shared(false);
        self.client.acquire(&self.name, options).await
    }
}
