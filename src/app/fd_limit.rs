//! The process's open-file limit: each client connection is a file descriptor, the soft limit is
//! often 1024 while the hard one is far higher, and the default `--max-connections` must leave
//! room for everything else.

use std::io;

/// File descriptors kept free for everything but gRPC client connections: Redis connections,
/// listeners, the runtime's own (epoll, eventfd), stdio, and the metrics port's and the console's
/// connections.
pub const RESERVED_FDS: u64 = 128
    + crate::server::METRICS_PORT_MAX_CONNECTIONS as u64
    + crate::server::CONSOLE_MAX_CONNECTIONS as u64;

/// The process's open-file limit after raising the soft limit to the hard one: each connection
/// is a file descriptor, and the soft limit is often 1024 while the hard one is far higher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit found at startup.
    pub before: u64,
    /// The soft limit now.
    pub now: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit.
pub fn raise_fd_limit() -> io::Result<FdLimit> {
    let mut limit = nofile_limit()?;
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(FdLimit {
        before,
        now: limit.rlim_cur,
    })
}

/// The process's soft open-file limit now.
pub fn fd_limit() -> io::Result<u64> {
    Ok(nofile_limit()?.rlim_cur)
}

/// `RLIMIT_NOFILE`, soft and hard.
fn nofile_limit() -> io::Result<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(limit)
}

/// The most connections that `fd_limit` leaves room for, after [`RESERVED_FDS`].
pub fn connections_within(fd_limit: u64) -> usize {
    usize::try_from(fd_limit.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fd_limit_reserves_room_for_everything_else() {
        assert_eq!(connections_within(20_000), 20_000 - 128 - 32 - 128);
        assert_eq!(connections_within(100), 0);
        let limit = raise_fd_limit().unwrap();
        assert!(limit.now >= limit.before);
        assert_eq!(fd_limit().unwrap(), limit.now);
    }
}
