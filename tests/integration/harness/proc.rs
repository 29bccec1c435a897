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

/// User plus system CPU time `pid` has used so far (`/proc/<pid>/stat`, in ticks of 1/100 s).
pub fn cpu_time(pid: u32) -> io::Result<std::time::Duration> {
    const TICK: std::time::Duration = std::time::Duration::from_millis(10);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/<pid>/stat");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .ok_or_else(invalid)?
        .1
        .split_whitespace()
        .collect();
    let field = |index: usize| -> io::Result<u64> {
        fields
            .get(index)
            .and_then(|value| value.parse().ok())
            .ok_or_else(invalid)
    };
    Ok(TICK * (field(11)? + field(12)?) as u32)
}

/// Raises this process's soft `RLIMIT_NOFILE` to at least `wanted`, and the hard limit too if it
/// is lower and this process may (root may), and returns the soft limit now in force. Child
/// processes inherit it.
pub fn raise_fd_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_max < wanted {
            let raised = libc::rlimit {
                rlim_cur: wanted,
                rlim_max: wanted,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return wanted;
            }
        }
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    limit.rlim_cur
}

/// A child process whose standard output a thread collects line by line as it comes, killed
/// (SIGKILL) on drop: for the tests that run examples as real processes and wait for what they
/// print.
pub struct PrintingChild {
    process: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl PrintingChild {
    /// Spawns `command` with its stdout piped into the collected lines.
    pub fn spawn(mut command: std::process::Command) -> Self {
        use std::io::{BufRead, BufReader};
        let mut process = command
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", command.get_program()));
        let lines: std::sync::Arc<std::sync::Mutex<Vec<String>>> = std::sync::Arc::default();
        let stdout = process.stdout.take().expect("piped");
        std::thread::spawn({
            let lines = std::sync::Arc::clone(&lines);
            move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            }
        });
        PrintingChild { process, lines }
    }

    /// Every line printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The child's process id (to signal it).
    pub fn id(&self) -> u32 {
        self.process.id()
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Drop for PrintingChild {
    fn drop(&mut self) {
        self.kill();
    }
}
