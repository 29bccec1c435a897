//! [`AcquireOptions`]: how to acquire, and [`default_holder`], the holder it names by default.

use std::{fmt, time::Duration};

/// How to acquire: TTL, how long to wait for a busy lease, who is asking, how many may hold the
/// name at once, the lock-delay after an expiry, the mode, and (rarely) the lease id.
#[derive(Clone)]
pub struct AcquireOptions {
    /// How long the lease lives without a renewal; the guard renews at a third of it.
    pub ttl: Duration,
    /// How long to wait in line for a busy lease; zero (the default) answers at once.
    pub wait: Duration,
    /// Who is asking, shown to other callers and operators: a host and process name, never a
    /// secret (anyone who may Describe the lease reads it).
    pub holder: String,
    /// How many holders may hold the name at once: 0 (the default) or 1 is an exclusive lease.
    pub limit: u32,
    /// How long the name (this permit) stays ungranted after this grant expires; zero by default.
    pub lock_delay: Duration,
    /// A shared (read) grant of a read-write lease; false (the default) is exclusive.
    pub shared: bool,
    /// The lease id to acquire with; `None` (the default) makes a fresh random one for each
    /// acquisition. See [`lease_id`](Self::lease_id).
    pub lease_id: Option<String>,
}

/// The lease id is a secret: shown only as set or not.
impl fmt::Debug for AcquireOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcquireOptions")
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("holder", &self.holder)
            .field("limit", &self.limit)
            .field("lock_delay", &self.lock_delay)
            .field("shared", &self.shared)
            .field("lease_id", &self.lease_id.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl AcquireOptions {
    /// A TTL, no waiting, this host and process as the holder, an exclusive lease, no lock-delay,
    /// a fresh lease id for each acquisition.
    pub fn new(ttl: Duration) -> Self {
        AcquireOptions {
            ttl,
            wait: Duration::ZERO,
            holder: default_holder(),
            limit: 0,
            lock_delay: Duration::ZERO,
            shared: false,
            lease_id: None,
        }
    }

    /// Wait up to `wait` for a busy lease.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Describe the holder to others (shown by `Describe`).
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// Let up to `limit` holders hold the name at once: a counting lease (a semaphore) of
    /// `limit` permits. Each grant is one permit with its own guard, lease id and fencing token
    /// (larger than every earlier grant of the name, whichever permit), renewed, released and
    /// expiring on its own. 0 or 1 is an exclusive lease. Every holder of a name must ask for the
    /// same limit: while any permit is taken, another limit fails with
    /// [`ClientError::LimitMismatch`](super::ClientError::LimitMismatch). At most the server's
    /// `--max-limit` (default 10,000).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Lock-delay (up to 60 s): if this grant ends by expiry (the holder stopped renewing: it
    /// died, or is paused or cut off and may still believe it holds the lease), nobody is granted
    /// the name (this permit, for a counting lease) until `delay` after the expiry, so that such a
    /// holder has time to notice before the next one starts. A release ends the lease at once,
    /// without delay. Sent in milliseconds.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Ask for a shared (read) grant: the shared grants of a name coexist, an exclusive grant
    /// (the default) excludes every other, which makes the name a read-write lock. Both modes
    /// wait in one queue, in order: a waiting exclusive caller holds back the shared callers
    /// behind it. Only with limit 0 or 1 (a counting lease has no modes). There is no upgrade
    /// or downgrade: release, then acquire again.
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// Acquire with this lease id (22 to 128 characters of `A-Z a-z 0-9 _ -`) instead of a fresh
    /// random one. An Acquire whose id already holds the name is answered that grant again (same
    /// token, same expiry), so repeating an acquisition with its id is safe (`leased acquire
    /// --lease-id`); giving such an acquisition up, or its failing, releases the id, and with it
    /// the grant. The id is the holder's secret: make it 128 bits or more from a secure random
    /// generator, and use a new one for each new acquisition.
    pub fn lease_id(mut self, lease_id: impl Into<String>) -> Self {
        self.lease_id = Some(lease_id.into());
        self
    }
}

/// `hostname/pid`: enough for an operator to find the process that holds a lease.
pub fn default_holder() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most `buffer.len()` bytes into the buffer we own.
    let hostname = match unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } {
        0 => {
            let end = buffer.iter().position(|b| *b == 0).unwrap_or(buffer.len());
            String::from_utf8_lossy(&buffer[..end]).into_owned()
        }
        _ => "unknown-host".to_owned(),
    };
    format!("{hostname}/{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lease id never shows in the options' Debug.
    #[test]
    fn options_debug_hides_the_lease_id() {
        let options =
            AcquireOptions::new(Duration::from_secs(1)).lease_id("s3cret-lease-id-0123456789");
        let shown = format!("{options:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("lease_id: Some(\"<redacted>\")"), "{shown}");
    }
}
