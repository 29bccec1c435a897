//! What `/proc` says about a process (resident memory, open descriptors), signals to the
//! harness's children, and this process's descriptor limit.

use std::io;

/// Resident memory of `pid`, in KiB (`VmRSS` in `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no VmRSS line"))
}

/// Open file descriptors of `pid` (entries of `/proc/<pid>/fd`).
pub fn open_fds(pid: u32) -> io::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// Sends `signal` (e.g. `libc::SIGTERM`) to `pid`.
pub fn signal(pid: u32, signal: i32) -> io::Result<()> {
    // SAFETY: kill(2) only sends a signal; the pids are our own children's.
    match unsafe { libc::kill(pid as i32, signal) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to at least `wanted` (up to the hard limit) and
/// returns the soft limit now in force. Child processes inherit it.
pub fn raise_fd_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    limit.rlim_cur
}
