//! The checker: clients contend for a few names through real `leased` replicas, hold what they
//! are granted while renewing it, write to a fenced resource while they believe they hold it, and
//! record every event on one monotonic clock. Some names are exclusive leases; the counting names
//! are counting leases (every caller asks for the same `limit`, [`Counting`]), and the read-write
//! names are held shared or exclusive ([`ReadWrite`]), each kind contended by its own clients.
//! [`Checker::verify`] then checks the record:
//!
//! - **At most `limit` holders (1 for an exclusive lease).** A holder's lease, by its own view,
//!   runs from the moment it received `granted` until the earliest of: its release call, its
//!   first `lost`, and its expiry, which is the *send* time of the Acquire (or of the last renewal
//!   answered before that expiry) plus the TTL. Each view is cut short by [`CLOCK_SLACK`]; no
//!   point in time may lie in more than `limit` such views of one name.
//! - **Own lease ids** ([`OwnIdCuts`]). A grant answered to a retry of the caller's own lease id
//!   may have been made by any earlier attempt whose answer was lost: it counts from the first
//!   attempt's send (its expiry, and the grants it must come after), and its view begins only
//!   when `granted` arrived (a cut or `UNAVAILABLE` attempt leaves it possibly held, not held).
//!   A holder told `lost` because another holder held the name while its own view ran is a
//!   violation too (outside data-loss windows): only a grant undone behind its back says that.
//! - **Tokens.** If a grant was received before another grant of the same name was requested,
//!   its token is smaller (whichever permit of a counting lease). Tokens of one name are unique.
//! - **Fencing** (exclusive names). The resource accepts a write only with a token at least as
//!   high as every token it accepted before; a holder's write within its own interval is never
//!   rejected; a stale holder's write after another holder wrote is always rejected. Holders of a
//!   counting name do not write: up to `limit` of them hold it at once, so a per-name fence
//!   would refuse rightful writes.
//! - **FIFO waiting.** A waiter X is in its name's queue once its first `waiting` has arrived. A
//!   caller Y of the same name whose Acquire was *sent* after that must not be granted before X:
//!   if X was granted, Y's token is larger than X's (tokens order the grants at Redis, with no
//!   clock involved); if X was answered `not_granted`, Y was not granted before X's wait could
//!   have run out (X's send time plus its `wait_ms`, a lower bound of the server's deadline). A
//!   waiter answered `not_granted` before that bound had its wait cut short. The first `waiting`
//!   must report a position (1 = next in line). Waiters whose call failed are not checked. On a
//!   counting name, several permits may free at once and then the first callers in line, Y
//!   among them, may take them in any order: a pair is checked only when Y took the last free
//!   permit, that is when `limit - 1` other holders' views span Y's whole call.
//! - **Occupancy.** `waiting` and `not_granted` report `held` at most the limit, and as the limit
//!   in force the name's own (1 for an exclusive lease) or 0; no call fails with
//!   `FAILED_PRECONDITION` (every caller of a name asks for the same limit).
//!
//! The read-write names ([`ReadWrite`]) have clients of their own, each of whose calls asks for a
//! shared (read) or an exclusive (write) grant at random:
//!
//! - **Modes.** An exclusive view never overlaps any other view of the name, shared or exclusive
//!   (beyond [`CLOCK_SLACK`]); shared views may overlap each other, and the report gives the most
//!   that did. `waiting` and `not_granted` report the limit in force as 1 or 0 (`held` counts the
//!   shared grants, so it is not bounded).
//! - **FIFO between modes**, the rule above with the modes mixed: a waiter X (first `waiting`
//!   arrived) is not overtaken by a caller Y that asked after that, whatever their modes, when the
//!   record can prove it. The server serves one queue for both modes: a caller not in line is
//!   granted only while nobody waits, an exclusive caller in line only when it is first and
//!   nothing is taken, and a shared one only in the run of shared callers at the head of the line,
//!   behind every exclusive one. So Y cannot go before X if X is exclusive (it holds back every
//!   caller behind it: a later shared one too), if Y is exclusive (it stands behind X), or if Y
//!   never waited (granted on its first attempt, which finds the queue empty only once X left).
//!   A shared Y that waited behind a shared X may be due together with it, in the same run, and
//!   take its grant first: such a pair is counted apart, not checked.
//! - Tokens, as above, increase across the grants of both modes; exclusive holders write to the
//!   fenced resource and are checked as on an exclusive name, shared holders do not write.
//!
//! Faults that lose Redis data (a restart without persistence, a failover to a replica that
//! missed writes) suspend mutual exclusion for up to one TTL: overlaps that begin inside such a
//! window (from the data loss until the longest TTL after it) are reported apart and allowed.
//! Tokens and fencing are checked everywhere, with no exception. Every fault but the GC pause
//! (a client misbehaving, not the system) may legitimately reorder a queue (a killed replica, a
//! cut link, lost data): FIFO is checked only for calls that touch no fault window, each
//! extended by the longest TTL.
//!
//! The model and the record are here; [`clients`] runs the contending clients and the GC-pause
//! holder, [`verify`] checks the record.

mod clients;
mod verify;

pub use clients::{GcPauses, lazy_client, run_client, run_gc_pauses, until};
pub use verify::{Report, first_answers};

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tonic::Code;

/// How much two holders' intervals may overlap before it counts: all timestamps come from one
/// monotonic clock, so this only absorbs Redis's millisecond expiry resolution.
pub const CLOCK_SLACK: Duration = Duration::from_millis(10);

/// How long past `--redis-timeout` the median failure of a stall may reach the client: the gRPC
/// round trip and the scheduling of some 40 clients and 3 servers on two cores (measured: 3-30 ms
/// past a 1 s timeout). A server that retried once, or waited for Redis past its timeout, is a
/// timeout or more late.
pub const STALL_MEDIAN_MARGIN: Duration = Duration::from_millis(200);

/// How long past `--redis-timeout` any call sent during a stall may wait for its first answer:
/// wide, for the one call that a busy machine holds up (1.15 s and 1.55 s the worst seen against
/// a 1 s timeout with other test suites running beside). A server that ignored the timeout holds
/// the calls of the first second of a 3 s stall for 2 to 3 s.
pub const STALL_CAP_MARGIN: Duration = Duration::from_secs(1);

/// What the clients do.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Clients of the exclusive names, and how many exclusive names there are.
    pub clients: usize,
    pub names: usize,
    /// The counting names and their own clients.
    pub counting: Counting,
    /// The read-write names and their own clients.
    pub read_write: ReadWrite,
    /// TTLs are drawn from this inclusive range.
    pub ttl_ms: (u64, u64),
    /// Holders keep a lease for up to this long (renewing every third of the TTL).
    pub max_hold_ms: u64,
    /// Waits are drawn from 0 to this; a quarter of the calls try once (`wait_ms = 0`).
    pub max_wait_ms: u64,
    /// Percentage of holders that walk away without renewing or releasing (a crash).
    pub abandon_percent: u64,
    /// Run the GC-pause holder alongside the clients.
    pub gc_pauses: bool,
    pub seed: u64,
    /// The replicas' `--redis-timeout`: the calls sent while a [`Stalled`] fault lasted must be
    /// answered within it (the median failure within [`STALL_MEDIAN_MARGIN`] of it, every call
    /// within [`STALL_CAP_MARGIN`]), `UNAVAILABLE` if they failed.
    pub redis_timeout: Duration,
    /// The clients of the exclusive names acquire with lease ids of their own, and cut some of
    /// their Acquires short and retry them ([`OwnIdCuts`]); `None`: the server makes the ids.
    pub own_id_cuts: Option<OwnIdCuts>,
}

/// Acquires with the caller's own lease id (32 hex digits from the OS, as a real client makes
/// it): `percent` % of the attempts are cut by the client after a time drawn from `after_ms`
/// (the call dropped, as a client deadline does), and the client then retries with the same id
/// through a replica drawn at random, until it is answered `granted` or refused outright. A grant
/// answered to a retry may have been made by any earlier attempt (its answer lost): its holder
/// counts its TTL from the first attempt's send, and the checker counts the grant from then
/// ([`Event::Granted`]'s `first_sent`).
#[derive(Clone, Copy, Debug)]
pub struct OwnIdCuts {
    pub percent: u64,
    pub after_ms: (u64, u64),
}

/// Counting leases: `clients` more clients contend for `names` more names, each a counting lease
/// of `limit` permits (every one of its callers asks for that limit).
#[derive(Clone, Copy, Debug)]
pub struct Counting {
    pub clients: usize,
    pub names: usize,
    pub limit: u32,
}

/// Read-write names: `clients` more clients contend for `names` more names, each call asking for
/// a shared grant with probability `shared_percent` %, else for an exclusive one (`limit` 0).
#[derive(Clone, Copy, Debug)]
pub struct ReadWrite {
    pub clients: usize,
    pub names: usize,
    pub shared_percent: u64,
}

impl Workload {
    pub fn max_ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.1)
    }

    /// Every name: the exclusive ones, the counting ones, then the read-write ones.
    pub fn all_names(&self) -> usize {
        self.names + self.counting.names + self.read_write.names
    }

    /// Every client: those of the exclusive names, of the counting names, then of the read-write
    /// names.
    pub fn all_clients(&self) -> usize {
        self.clients + self.counting.clients + self.read_write.clients
    }

    /// Whether name `name` (an index into [`Checker::names`]) is a counting lease.
    pub fn is_counting(&self, name: usize) -> bool {
        (self.names..self.names + self.counting.names).contains(&name)
    }

    /// Whether name `name` is a read-write name (its callers ask for shared or exclusive grants).
    pub fn is_read_write(&self, name: usize) -> bool {
        name >= self.names + self.counting.names
    }

    /// The `limit` that callers of `name` send: 0 (exclusive, or a read-write name) or the
    /// counting limit.
    pub fn limit_of(&self, name: usize) -> u32 {
        match self.is_counting(name) {
            true => self.counting.limit,
            false => 0,
        }
    }

    /// How many holders `name` may have at once: its limit, 1 for an exclusive lease. On a
    /// read-write name, 1 exclusive holder, or shared holders without a bound (the limit in force
    /// that `waiting` reports is 1 all the same).
    pub fn holders_allowed(&self, name: usize) -> usize {
        self.limit_of(name).max(1) as usize
    }

    /// The names client `index` contends for.
    fn names_of(&self, client: usize) -> std::ops::Range<usize> {
        let counting = self.names + self.counting.names;
        if client < self.clients {
            0..self.names
        } else if client < self.clients + self.counting.clients {
            self.names..counting
        } else {
            counting..self.all_names()
        }
    }
}

/// A small deterministic PRNG (SplitMix64), one per client (and one per fault schedule).
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    fn percent(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Everything a client records, timestamped on the checker's clock (time since the run began).
#[derive(Clone, Debug)]
pub enum Event {
    Granted {
        lease: usize,
        /// The client's index (`usize::MAX` for the GC-pause holder).
        client: usize,
        /// Which `leased` replica answered.
        replica: usize,
        name: usize,
        token: u64,
        ttl: Duration,
        /// When the call answered `granted` was sent, and when that answer arrived.
        sent: Duration,
        received: Duration,
        /// When the first attempt with this grant's lease id was sent: `sent`, unless the grant
        /// was answered to a retry of the caller's own lease id ([`OwnIdCuts`]). Any attempt
        /// since may have made it, so it is counted from here: its TTL (the holder's view ends at
        /// the latest `first_sent + ttl` unless renewed), and the tokens and the queue places
        /// that must be below or behind it.
        first_sent: Duration,
        /// A shared grant (of a read-write name).
        shared: bool,
        /// The call was answered `waiting` before its grant (it stood in the queue; it also has
        /// its [`Event::Waited`]). Without, it was granted on its first attempt.
        waited: bool,
    },
    Renewed {
        lease: usize,
        /// Which `leased` replica answered.
        replica: usize,
        sent: Duration,
        received: Duration,
        ttl: Duration,
    },
    Lost {
        lease: usize,
        received: Duration,
        /// The reason given was "held by another holder": while the holder's view ran, only a
        /// grant undone behind its back (or lost data) can say that.
        by_another: bool,
    },
    ReleaseCalled {
        lease: usize,
        at: Duration,
    },
    Write {
        lease: usize,
        name: usize,
        token: u64,
        at: Duration,
        accepted: bool,
        /// Written on purpose after the lease was gone (the GC-pause holder).
        stale_on_purpose: bool,
    },
    /// The GC-pause holder's first renewal answered after its pause: it must be `lost`.
    RenewAfterPause {
        lease: usize,
        lost: bool,
    },
    /// A call that failed: the server's (or the transport's) status, or the client giving up on
    /// its own.
    Failed {
        rpc: &'static str,
        code: Code,
        /// The replica the call went to, when it was sent and when it failed.
        replica: usize,
        sent: Duration,
        ended: Duration,
        /// The client stopped waiting on its own (a renewal answered after the holder's view
        /// ended, a stream that did not open in time): `code` is the client's, not an answer.
        gave_up: bool,
        /// An Acquire answered `waiting` before it failed: its first answer is its
        /// [`Event::Waited`]'s `queued`.
        after_waiting: bool,
    },
    /// An Acquire of the client's own lease id, its only call with that id still running, refused
    /// `FAILED_PRECONDITION` because "a newer Acquire with this lease id took this call's place
    /// in line". With no other call of that id running, what took it can only be an earlier
    /// attempt that the client had cut, whose command reached Redis after the retry's (a
    /// command sent on a connection where a `WAIT` for the stopped replica blocks runs only
    /// after it) and took back the place that the retry had taken from it. Counted apart, not a
    /// violation: the id is not ended and the client retries; the grant checks are unaffected.
    Superseded {
        replica: usize,
        sent: Duration,
        ended: Duration,
    },
    /// Another call that was answered (the test's probes of a stalled replica).
    Answered {
        rpc: &'static str,
        replica: usize,
        sent: Duration,
        received: Duration,
    },
    /// An Acquire answered `not_granted` without waiting (a waiting one's is in
    /// [`Event::Waited`]).
    NotGranted {
        replica: usize,
        sent: Duration,
        received: Duration,
    },
    /// The GC-pause holder's name was granted again after its paused lease expired: the next
    /// holder's token must be above the paused one, or a fenced resource would take the paused
    /// holder's stale write.
    TakenOverAfterPause {
        lease: usize,
        name: usize,
        paused_token: u64,
        next_token: u64,
    },
    /// What a `waiting` or `not_granted` reported of the name's permits.
    Occupancy {
        name: usize,
        held: u32,
        limit: u32,
    },
    /// An Acquire that was answered `waiting` (it stood in the name's queue), recorded when the
    /// call ended. A granted one also has its [`Event::Granted`].
    Waited {
        client: usize,
        replica: usize,
        name: usize,
        /// It asked for a shared grant (of a read-write name).
        shared: bool,
        /// When the Acquire was sent, and the `wait_ms` it asked for.
        sent: Duration,
        wait: Duration,
        /// When its first `waiting` arrived, and the position that message reported.
        queued: Duration,
        position: u32,
        /// When the call ended (its terminal message or failure), and how.
        ended: Duration,
        outcome: WaitOutcome,
    },
}

/// How a waiting Acquire ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Granted, with this fencing token.
    Granted(u64),
    NotGranted,
    /// The call failed or the client gave up on it.
    Failed,
}

/// A fault the test injected, on the checker's clock.
#[derive(Clone, Debug, Default)]
pub struct FaultRecord {
    pub kind: &'static str,
    pub start: Duration,
    pub end: Duration,
    /// Redis lost data (restart without persistence, failover to a lagging replica).
    pub data_loss: bool,
    /// Which replicas' Redis calls went unanswered past `--redis-timeout`.
    pub stalled: Stalled,
}

/// The replicas that a fault kept from getting Redis's answers within `--redis-timeout` (Redis
/// stopped, a black hole, a cut link, every link slower than the timeout): each call sent to them
/// while it lasted must be answered within the timeout (see [`Workload::redis_timeout`]), and if
/// it failed, with `UNAVAILABLE`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Stalled {
    /// Not such a fault: calls may fail otherwise (a cut link, a killed replica) or not at all.
    #[default]
    No,
    Replicas(Vec<usize>),
    All,
}

impl Stalled {
    pub fn includes(&self, replica: usize) -> bool {
        match self {
            Stalled::No => false,
            Stalled::Replicas(replicas) => replicas.contains(&replica),
            Stalled::All => true,
        }
    }
}

/// A resource that keeps the highest token per name and rejects lower ones; every write is
/// timestamped under its lock, so the log order is the resource's order.
struct FencedResource {
    highest: Mutex<Vec<u64>>,
}

/// The shared state of one run.
pub struct Checker {
    pub workload: Workload,
    pub names: Vec<String>,
    origin: Instant,
    events: Mutex<Vec<Event>>,
    faults: Mutex<Vec<FaultRecord>>,
    resource: FencedResource,
    next_lease: AtomicUsize,
    stop: AtomicBool,
}

impl Checker {
    pub fn new(workload: Workload, name_prefix: &str) -> Arc<Self> {
        let names = (0..workload.names)
            .map(|index| format!("{name_prefix}/resource-{index}"))
            .chain(
                (0..workload.counting.names).map(|index| format!("{name_prefix}/counting-{index}")),
            )
            .chain((0..workload.read_write.names).map(|index| format!("{name_prefix}/rw-{index}")))
            .collect();
        Arc::new(Checker {
            resource: FencedResource {
                highest: Mutex::new(vec![0; workload.all_names()]),
            },
            workload,
            names,
            origin: Instant::now(),
            events: Mutex::default(),
            faults: Mutex::default(),
            next_lease: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        })
    }

    /// Time since the run began.
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Appends an event to the record.
    pub fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }

    /// Appends a fault with explicit times to the record.
    pub fn record_fault(&self, fault: FaultRecord) {
        self.faults.lock().unwrap().push(fault);
    }

    /// Records a fault that lasted from `start` to now.
    pub fn fault(&self, kind: &'static str, start: Duration, data_loss: bool) {
        self.stalling_fault(kind, start, data_loss, Stalled::No);
    }

    /// Records a fault that lasted from `start` to now and kept the `stalled` replicas from
    /// Redis's answers.
    pub fn stalling_fault(
        &self,
        kind: &'static str,
        start: Duration,
        data_loss: bool,
        stalled: Stalled,
    ) {
        let end = self.now();
        println!(
            "[{:>6.2}s] fault {kind} ({:.2}s){}",
            start.as_secs_f64(),
            (end - start).as_secs_f64(),
            if data_loss { ", Redis lost data" } else { "" }
        );
        self.faults.lock().unwrap().push(FaultRecord {
            kind,
            start,
            end,
            data_loss,
            stalled,
        });
    }

    /// Asks every client to finish its current lease and stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Writes `token` to `name` if `in_view(now)` holds at the moment of the write.
    fn write(
        &self,
        lease: usize,
        name: usize,
        token: u64,
        stale_on_purpose: bool,
        in_view: impl Fn(Duration) -> bool,
    ) -> Option<bool> {
        let mut highest = self.resource.highest.lock().unwrap();
        let at = self.now();
        if !in_view(at) {
            return None;
        }
        let accepted = token >= highest[name];
        if accepted {
            highest[name] = token;
        }
        // Recorded under the resource's lock: the event order is the resource's order.
        self.record(Event::Write {
            lease,
            name,
            token,
            at,
            accepted,
            stale_on_purpose,
        });
        Some(accepted)
    }

    fn highest_written(&self, name: usize) -> u64 {
        self.resource.highest.lock().unwrap()[name]
    }

    /// The token of the first grant of `name` whose Acquire was sent at or after `since`, if
    /// there was one.
    pub fn first_grant_since(&self, name: usize, since: Duration) -> Option<u64> {
        let events = self.events.lock().unwrap();
        let mut first = None;
        // Recent events are at the end: look back a few seconds past `since`, no further.
        for event in events.iter().rev() {
            if let Event::Granted {
                name: granted,
                token,
                sent,
                received,
                ..
            } = *event
            {
                if granted == name && sent >= since {
                    first = Some(token);
                }
                if received + Duration::from_secs(5) < since {
                    break;
                }
            }
        }
        first
    }

    /// Events of the whole run, in recording order.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    pub fn faults(&self) -> Vec<FaultRecord> {
        self.faults.lock().unwrap().clone()
    }
}
