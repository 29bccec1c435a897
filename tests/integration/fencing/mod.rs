//! Fencing end to end, with real parts only: a real leased on a real redis-server grants the
//! tokens over gRPC, and the resource is a real PostgreSQL (`leased.fence` and the row trigger)
//! or a real Redis (the `leased_fencing` library), through the Rust adapters
//! (`leased::fencing::{postgres, redis}`).
//!
//! - Kleppmann's scenario: holder 1 (`examples/fenced_write.rs`, a real process) is granted a
//!   500 ms lease and is stopped (SIGSTOP) before its write until well past its TTL; holder 2
//!   (another process) is granted the lease with a larger token and writes; holder 1 resumes
//!   (SIGCONT) and its write is refused, and the resource holds holder 2's data. With fencing off
//!   the same run shows holder 1 overwriting holder 2.
//! - Concurrent writers with random pauses for a few seconds: the resource's history of accepted
//!   tokens only increases.
//! - Bad input and the 2^63 - 1 / 2^63 boundary.
//! - `leased run`'s shell form and the book's page (docs/src/fencing.md), run as written.

mod docs;
mod postgres;
mod redis_resource;
mod shell;

use std::{
    io::{BufRead, BufReader, Write},
    path::PathBuf,
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::common::{harness::postgres::PostgresServer, harness::proc, *};

/// Holder 1's TTL: short, so that the test waits little past it.
const HOLDER_1_TTL: &str = "500ms";
/// How long holder 1 stays stopped: well past its TTL.
const PAUSE: Duration = Duration::from_millis(1_500);
/// A ceiling for each step of a process (a start, a grant, a write), not a test margin.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// leased on its own redis-server, for the tokens.
struct Leases {
    _redis: RedisServer,
    server: Leased,
}

impl Leases {
    async fn start() -> Self {
        let redis = RedisServer::start();
        let server = Leased::start(Some(redis.url())).await;
        Leases {
            _redis: redis,
            server,
        }
    }

    async fn client(&self) -> leased::client::LeaseClient {
        leased::client::LeaseClient::connect(self.server.endpoint())
            .await
            .expect("cannot connect to leased")
    }
}

/// The resource the holders write, and how: what `examples/fenced_write.rs` is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    /// PostgreSQL, `leased.fence('ledger', token)` in the writer's transaction.
    PostgresFence,
    /// PostgreSQL, the `fencing_token` column of `accounts` guarded by the trigger.
    PostgresRow,
    /// Redis, `FCALL leased_set` under the mark `fence:{ledger}`.
    Redis,
}

/// `examples/fenced_write.rs` as a running process, its stdout read line by line in the
/// background. Resumed and killed on drop.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Holder {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cannot start examples/fenced_write");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Holder {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line that starts with `prefix`, without it; panics after [`STEP_TIMEOUT`].
    fn line_starting(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_owned();
                    }
                }
                Err(_) => panic!(
                    "no line starting with {prefix:?} from the holder; it printed {:?}",
                    self.seen
                ),
            }
        }
    }

    /// Its token, from `granted token=N`.
    fn token(&mut self) -> u64 {
        self.line_starting("granted token=")
            .parse()
            .expect("a token")
    }

    fn signal(&self, signal: i32) {
        proc::signal(self.child.id(), signal).expect("cannot signal the holder");
    }

    /// Lets a holder started with `--pause-before-write` go on to its write.
    fn go(&mut self) {
        let mut stdin = self.stdin.take().expect("go once");
        stdin
            .write_all(b"go\n")
            .expect("cannot write to the holder");
    }

    /// Waits for it to exit; answers its exit code and the line that says how the write went
    /// (`written token=N` or `refused: ...`).
    fn outcome(&mut self) -> (i32, String) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "the holder never exited");
            std::thread::sleep(Duration::from_millis(20));
        };
        let line = self
            .lines
            .recv_timeout(STEP_TIMEOUT)
            .ok()
            .into_iter()
            .chain(self.lines.try_iter())
            .find(|line| line.starts_with("written") || line.starts_with("refused"))
            .unwrap_or_else(|| panic!("no outcome line; {status}, printed {:?}", self.seen));
        (status.code().unwrap_or(-1), line)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = proc::signal(self.child.id(), libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `examples/fenced_write` writing `value` to `resource`, built once per test run.
fn fenced_write(
    leases: &Leases,
    target: &str,
    resource: Resource,
    value: &str,
    fencing: bool,
) -> Command {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let binary = BINARY.get_or_init(|| build_example("fenced_write"));
    let mut command = Command::new(binary);
    command
        .args(["--endpoint", &leases.server.endpoint(), "--lease", "ledger"])
        .args(["--value", value]);
    match resource {
        Resource::PostgresFence => command.args(["--postgres", target]),
        Resource::PostgresRow => command.args(["--postgres", target, "--row-form"]),
        Resource::Redis => command.args(["--redis", target]),
    };
    if !fencing {
        command.arg("--no-fencing");
    }
    command
}

/// How Kleppmann's scenario ended.
struct Scenario {
    holder_1_token: u64,
    holder_2_token: u64,
    /// Holder 1's exit code and its last line (`written ...` or `refused: ...`).
    holder_1_exit: i32,
    holder_1_line: String,
}

/// Kleppmann's scenario with real processes: holder 1 is granted a 500 ms lease, connects to the
/// resource and is stopped (SIGSTOP) just before its write, for well past its TTL; holder 2 is
/// granted the lease (a larger token) and writes; holder 1 is resumed (SIGCONT) and writes. The
/// caller reads the resource afterwards.
fn kleppmann(leases: &Leases, target: &str, resource: Resource, fencing: bool) -> Scenario {
    let mut holder_1 = fenced_write(leases, target, resource, "holder-1", fencing);
    holder_1.args(["--ttl", HOLDER_1_TTL, "--pause-before-write"]);
    let mut holder_1 = Holder::spawn(holder_1);
    let holder_1_token = holder_1.token();
    holder_1.line_starting("paused before the write");
    holder_1.signal(libc::SIGSTOP);
    // The line is in its pipe, read only once it runs again.
    holder_1.go();
    std::thread::sleep(PAUSE);

    let mut holder_2 = fenced_write(leases, target, resource, "holder-2", fencing);
    holder_2.args(["--ttl", "10s", "--wait", "20s"]);
    let mut holder_2 = Holder::spawn(holder_2);
    let holder_2_token = holder_2.token();
    let (code, line) = holder_2.outcome();
    assert_eq!(code, 0, "holder 2's write failed: {line}");
    assert!(holder_2_token > holder_1_token);

    holder_1.signal(libc::SIGCONT);
    let (holder_1_exit, holder_1_line) = holder_1.outcome();
    Scenario {
        holder_1_token,
        holder_2_token,
        holder_1_exit,
        holder_1_line,
    }
}

/// Asserts the fenced outcome: holder 1 refused as stale, naming both tokens.
fn assert_refused(what: &str, scenario: &Scenario, owner: &str) {
    let Scenario {
        holder_1_token,
        holder_2_token,
        holder_1_exit,
        holder_1_line,
    } = scenario;
    println!(
        "{what}, fencing on: holder 1 (token {holder_1_token}) after its pause: {holder_1_line}; \
         the resource holds {owner} (holder 2, token {holder_2_token})"
    );
    assert_eq!(*holder_1_exit, 3, "{holder_1_line}");
    assert!(
        holder_1_line.contains(&format!("stale fencing token {holder_1_token}"))
            && holder_1_line.contains(&format!("the highest seen is {holder_2_token}")),
        "{holder_1_line}"
    );
    assert_eq!(owner, "holder-2");
}

/// Asserts the unfenced outcome: holder 1's late write went through, over holder 2's.
fn assert_overwritten(what: &str, scenario: &Scenario, owner: &str) {
    println!(
        "{what}, fencing off: holder 1 (token {}) after its pause: {}; the resource holds {owner} \
         (holder 2's write, token {}, was overwritten)",
        scenario.holder_1_token, scenario.holder_1_line, scenario.holder_2_token
    );
    assert_eq!(scenario.holder_1_exit, 0, "{}", scenario.holder_1_line);
    assert_eq!(owner, "holder-1");
}

/// A small deterministic random source (xorshift64*), seeded per test and printed, so that a
/// failing run's pauses can be replayed.
struct Random(u64);

impl Random {
    fn seeded() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |since| since.as_nanos() as u64)
            | 1;
        println!("random seed {seed}");
        Random(seed)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
    }
}

/// What each concurrent writer saw.
#[derive(Default, Debug)]
struct Tally {
    accepted: Vec<u64>,
    refused: u64,
}

/// How long the concurrent writers run, and their lease's TTL: the first writer's pauses (2 to 3
/// TTLs) always outlast the lease, the others' (up to half a TTL) never do.
const CONCURRENT_RUN: Duration = Duration::from_secs(3);
const CONCURRENT_WRITERS: usize = 4;
const CONCURRENT_TTL: Duration = Duration::from_millis(200);

/// `writers` tasks, each in a loop for [`CONCURRENT_RUN`]: acquire the lease (waiting for it),
/// pause at random, `write` under the token, release. Answers each write's outcome, counted:
/// `write` answers whether the resource accepted the token (a refusal must be a stale token,
/// checked by `write`).
///
/// Stale writes are made by construction, not left to chance (a loaded machine once drew 17
/// writes with no stale one): the first writer pauses past its lease every time, so the lease
/// expires, a waiting writer is granted a larger token and writes within half a TTL, and the
/// paused writer's write then comes late. The others' short pauses keep accepted writes coming.
async fn concurrent_writers<W, F>(leases: &Leases, write: W) -> Tally
where
    W: Fn(u64) -> F + Clone + Send + 'static,
    F: Future<Output = bool> + Send,
{
    let mut random = Random::seeded();
    let mut tasks = Vec::new();
    for writer in 0..CONCURRENT_WRITERS {
        let client = leases.client().await;
        let write = write.clone();
        let mut random = Random(random.below(u64::MAX) | 1);
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let started = Instant::now();
            let options = leased::client::AcquireOptions::new(CONCURRENT_TTL)
                .wait(Duration::from_secs(10))
                .holder(format!("writer-{writer}"));
            while started.elapsed() < CONCURRENT_RUN {
                let grant = client
                    .acquire_once("ledger", &options)
                    .await
                    .expect("acquire")
                    .expect("granted within 10 s");
                let ttl_ms = CONCURRENT_TTL.as_millis() as u64;
                let pause = match writer {
                    0 => 2 * ttl_ms + random.below(ttl_ms),
                    _ => random.below(ttl_ms / 2),
                };
                tokio::time::sleep(Duration::from_millis(pause)).await;
                if write(grant.fencing_token).await {
                    tally.accepted.push(grant.fencing_token);
                } else {
                    tally.refused += 1;
                }
                let _ = client.release("ledger", &grant.lease_id).await;
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for task in tasks {
        let tally = task.await.expect("a writer panicked");
        total.accepted.extend(tally.accepted);
        total.refused += tally.refused;
    }
    total
}

/// Asserts that `history` (accepted tokens in the order the resource applied them) only
/// increases and is every accepted write, and that the run refused some.
fn assert_history(what: &str, history: &[u64], tally: &Tally) {
    let stale = history.windows(2).filter(|pair| pair[1] <= pair[0]).count();
    println!(
        "{what}: {} writes accepted, {} refused as stale, {stale} stale writes accepted (the \
         accepted tokens only increase: {})",
        tally.accepted.len(),
        tally.refused,
        stale == 0
    );
    assert_eq!(stale, 0, "the history went back: {history:?}");
    let mut accepted = tally.accepted.clone();
    accepted.sort_unstable();
    assert_eq!(history, accepted, "the history is not the accepted writes");
    assert!(tally.accepted.len() >= 2, "{tally:?}");
    assert!(
        tally.refused >= 1,
        "no write was refused, so nothing was tested: {tally:?}"
    );
}

/// A mark store ([`leased::fencing::FenceMarks`], the middleware's) for the lease `orders`: 7 is
/// recorded and passes again, 6 is refused naming `orders` (not its key under the prefix), 0 is
/// bad input. The caller checks where the mark 7 landed.
async fn assert_mark_store_refuses_a_smaller_token(marks: &impl leased::fencing::FenceMarks) {
    use leased::fencing::FenceError;
    assert_eq!(marks.fence("orders", 7).await, Ok(7));
    assert_eq!(marks.fence("orders", 7).await, Ok(7));
    assert_eq!(
        marks.fence("orders", 6).await,
        Err(FenceError::Stale {
            resource: "orders".into(),
            token: 6,
            mark: 7,
        })
    );
    assert!(matches!(
        marks.fence("orders", 0).await,
        Err(FenceError::Invalid(_))
    ));
}
