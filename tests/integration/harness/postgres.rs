//! A throwaway PostgreSQL on 127.0.0.1 through `scripts/postgres-scratch.sh` (the one way every
//! language's tests start it: as the `postgres` user when run as root, trust authentication,
//! fsync off), and `psql` to talk to it.

use std::{
    io::{self, Write},
    path::PathBuf,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use super::{Owned, free_port, poll_until, proc, spawn};

/// How long the first start may take: initdb (about 2 s) and the server's startup, on a busy
/// machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fast shutdown (SIGINT) may take before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A scratch PostgreSQL in a fresh directory under the system's temporary directory: stopped
/// (fast shutdown, then SIGKILL) and its directory removed on drop.
pub struct PostgresServer {
    pub port: u16,
    dir: PathBuf,
    process: Owned,
}

impl PostgresServer {
    /// On a fresh port; panics if it does not accept a connection within 60 s.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|error| panic!("{error}"))
    }

    /// [`PostgresServer::start`] that answers an error instead.
    pub fn try_start() -> io::Result<Self> {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("leased-postgres-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres-scratch.sh");
        let log = std::fs::File::create(
            std::env::temp_dir().join(format!("leased-postgres-{}-{port}.log", std::process::id())),
        )?;
        let child = spawn(
            Command::new(script)
                .arg(&dir)
                .arg(port.to_string())
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log),
        )?;
        let mut server = PostgresServer {
            port,
            dir,
            process: Owned(Some(child)),
        };
        let mut exited = None;
        poll_until("PostgreSQL to accept a connection", START_TIMEOUT, || {
            exited = server
                .process
                .0
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            exited.is_some() || server.psql("SELECT 1").is_ok()
        })?;
        if let Some(status) = exited {
            return Err(io::Error::other(format!(
                "postgres-scratch.sh on port {port} exited at start ({status}); see {}",
                server.log_path().display()
            )));
        }
        Ok(server)
    }

    fn log_path(&self) -> PathBuf {
        std::env::temp_dir().join(format!(
            "leased-postgres-{}-{}.log",
            std::process::id(),
            self.port
        ))
    }

    /// `postgresql://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// tokio-postgres's key-value form of [`url`](Self::url).
    pub fn config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// Runs `sql` (a script: statements and psql's backslash commands) with `psql`, stopping at
    /// the first error, and answers its output: unaligned, tuples only, `|` between columns. An
    /// error carries psql's stderr.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        let mut child = self
            .psql_command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(sql.as_bytes())?;
        drop(stdin);
        psql_output(child.wait_with_output()?)
    }

    /// `psql` connected to this server, quiet, stopping at the first error, with unaligned
    /// tuples-only output; add the SQL (`-c`, `-f`, stdin).
    pub fn psql_command(&self) -> Command {
        let mut command = Command::new("psql");
        command
            .arg(self.url())
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .stdin(Stdio::null());
        command
    }
}

fn psql_output(output: Output) -> io::Result<String> {
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned())
    } else {
        Err(io::Error::other(format!(
            "psql failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        )))
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // SIGINT is PostgreSQL's fast shutdown: its backends end with it. SIGKILL if it hangs.
        if let Some(pid) = self.process.pid() {
            let _ = proc::signal(pid, libc::SIGINT);
            let stopped = Instant::now();
            while let Some(child) = self.process.0.as_mut() {
                if child.try_wait().ok().flatten().is_some() || stopped.elapsed() > STOP_TIMEOUT {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.process.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(self.log_path());
    }
}
