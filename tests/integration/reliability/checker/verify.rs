//! [`Checker::verify`]: checks the record for the rules in the checker's module documentation and
//! makes the [`Report`].

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};

use super::{
    CLOCK_SLACK, Checker, Event, FaultRecord, STALL_CAP_MARGIN, STALL_MEDIAN_MARGIN, WaitOutcome,
};
use tonic::Code;

/// One holder's lease as it saw it.
#[derive(Clone, Debug)]
struct Interval {
    lease: usize,
    token: u64,
    start: Duration,
    end: Duration,
    /// A shared grant of a read-write name.
    shared: bool,
}

/// `exclusive` or `shared`, for the messages about read-write names.
fn mode(shared: bool) -> &'static str {
    match shared {
        true => "shared",
        false => "exclusive",
    }
}

/// FIFO pairs of a read-write name by the modes of the waiter and of the later caller.
#[derive(Debug, Default)]
pub struct ModePairs {
    pub exclusive_then_exclusive: usize,
    /// A shared caller that asked after an exclusive waiter was queued: the rule that keeps
    /// writers from starving.
    pub exclusive_then_shared: usize,
    pub shared_then_exclusive: usize,
    /// A shared caller granted on its first attempt (it never waited) after a shared waiter was
    /// queued.
    pub shared_then_shared_first_attempt: usize,
    /// Not checked: a shared caller that waited too, behind a shared waiter, may be due in the
    /// same run and take its grant first.
    pub shared_then_shared_unprovable: usize,
}

/// The calls sent to a stalled replica during one kind of [`Stalled`] fault.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StalledCalls {
    pub calls: usize,
    /// Those whose first answer was a failure.
    pub failed: usize,
    /// The longest time to a first answer, and the median time to a failure.
    pub longest: Duration,
    pub median_failure: Duration,
}

/// When a call got its first answer (a `waiting`, a terminal message, a renewal's answer, or a
/// failure), and whether that answer was a failure.
pub struct FirstAnswer {
    pub rpc: &'static str,
    pub replica: usize,
    pub sent: Duration,
    pub answered: Duration,
    pub failed: Option<Code>,
}

/// The first answers in the record, of every call that recorded its send time: Acquires
/// (granted without waiting, answered `waiting`, `not_granted` without waiting, or failed
/// before any `waiting`), renewals, failed releases and the test's probes. Calls the client gave
/// up on were not answered.
pub fn first_answers(events: &[Event]) -> Vec<FirstAnswer> {
    let answer = |rpc, replica, sent, answered| FirstAnswer {
        rpc,
        replica,
        sent,
        answered,
        failed: None,
    };
    events
        .iter()
        .filter_map(|event| match *event {
            Event::Granted {
                replica,
                sent,
                received,
                waited: false,
                ..
            } => Some(answer("Acquire", replica, sent, received)),
            Event::Waited {
                replica,
                sent,
                queued: received,
                ..
            }
            | Event::NotGranted {
                replica,
                sent,
                received,
            } => Some(answer("Acquire", replica, sent, received)),
            Event::Renewed {
                replica,
                sent,
                received,
                ..
            } => Some(answer("Renew", replica, sent, received)),
            Event::Answered {
                rpc,
                replica,
                sent,
                received,
            } => Some(answer(rpc, replica, sent, received)),
            Event::Failed {
                rpc,
                code,
                replica,
                sent,
                ended,
                gave_up: false,
                after_waiting: false,
            } => Some(FirstAnswer {
                failed: Some(code),
                ..answer(rpc, replica, sent, ended)
            }),
            _ => None,
        })
        .collect()
}

/// What [`Checker::verify`] found.
#[derive(Debug, Default)]
pub struct Report {
    pub grants: usize,
    pub renewals: usize,
    pub releases: usize,
    pub writes_accepted: usize,
    pub writes_rejected: usize,
    pub failures: BTreeMap<String, usize>,
    /// Calls the client stopped waiting for on its own (not answers), by RPC.
    pub gave_up: BTreeMap<&'static str, usize>,
    pub faults: BTreeMap<&'static str, usize>,
    /// Per kind of [`Stalled`] fault: the calls sent to a stalled replica while it lasted, checked
    /// to be answered within `--redis-timeout` (`UNAVAILABLE`, if they failed).
    pub stalled_calls: BTreeMap<&'static str, StalledCalls>,
    /// GC pauses whose name was granted again after the paused lease expired: each next token
    /// checked to be above the paused one.
    pub takeovers_checked: usize,
    /// Views that overlapped more holders than the name allows (each also a violation), and
    /// those inside data-loss windows (allowed).
    pub overlaps: usize,
    pub overlaps_in_data_loss_windows: usize,
    /// Grants of own lease ids answered to a retry after a cut or failed attempt: counted from
    /// the first attempt's send.
    pub retried_grants: usize,
    /// Holders told `lost` because another holder held the name, while their own view still ran
    /// (each also a violation).
    pub lost_to_another_in_view: usize,
    /// Own-id Acquires, the client's only call with their id, refused because an earlier attempt
    /// that the client had cut took their place in line ([`Event::Superseded`]): not violations.
    pub superseded_live_calls: Vec<String>,
    pub stale_writes_rejected: usize,
    /// Grants of counting names, and the most holders' views of one counting name that
    /// overlapped at once outside data-loss windows (the limit, if the run reached it).
    pub counting_grants: usize,
    pub max_holders_counting: usize,
    /// Grants of read-write names by mode, and the most shared views of one read-write name that
    /// overlapped at once outside data-loss windows (at least 2, if shared grants coexisted).
    pub rw_exclusive_grants: usize,
    pub rw_shared_grants: usize,
    pub max_shared_holders: usize,
    /// The most grants a `waiting`/`not_granted` reported held on a read-write name (shared ones,
    /// when more than 1).
    pub max_reported_held_rw: u32,
    /// Waiters of read-write names by the mode they asked for.
    pub rw_exclusive_waiters: usize,
    pub rw_shared_waiters: usize,
    /// FIFO pairs of read-write names, by mode (the checked ones count in `fifo_pairs_checked`
    /// too).
    pub mode_fifo_pairs: ModePairs,
    /// `waiting` and `not_granted` messages checked, and the most permits held one reported on a
    /// counting name.
    pub occupancy_reports: usize,
    pub max_reported_held: u32,
    /// Acquire calls that were answered `waiting`, and the highest position one first reported.
    pub waiters: usize,
    pub max_position: u32,
    /// Waiters left out of the FIFO check: their call failed, or touched a fault window.
    pub waiters_unchecked: usize,
    /// Pairs (waiter, later caller granted while it could still wait) checked for FIFO, and
    /// how many of them were on counting names.
    pub fifo_pairs_checked: usize,
    pub counting_fifo_pairs_checked: usize,
    /// Pairs in which a caller that asked after a waiter was queued was granted before it (each
    /// also a violation).
    pub overtakes: usize,
    /// Waiters answered `not_granted` before their wait could have run out (also violations).
    pub waits_cut_short: usize,
    pub violations: Vec<String>,
}

impl Report {
    pub fn print(&self, title: &str) {
        println!("== checker: {title} ==");
        println!(
            "grants checked: {}; renewals: {}; releases: {}; writes accepted: {}, rejected: {}",
            self.grants, self.renewals, self.releases, self.writes_accepted, self.writes_rejected
        );
        println!("faults injected: {:?}", self.faults);
        println!("failed calls (allowed under faults): {:?}", self.failures);
        println!("calls the client stopped waiting for: {:?}", self.gave_up);
        let stalled: Vec<String> = self
            .stalled_calls
            .iter()
            .map(|(kind, checked)| {
                format!(
                    "{kind}: {} calls ({} failed, median failure {:?}), longest {:?}",
                    checked.calls, checked.failed, checked.median_failure, checked.longest
                )
            })
            .collect();
        println!(
            "calls sent while Redis stalled (failures UNAVAILABLE, their median within the timeout \
             + {STALL_MEDIAN_MARGIN:?}, every call within the timeout + {STALL_CAP_MARGIN:?}): {}; \
             takeovers after a GC pause with a larger token: {}",
            stalled.join("; "),
            self.takeovers_checked
        );
        println!(
            "stale writes rejected: {}; overlaps: {}, inside data-loss windows (allowed): {}",
            self.stale_writes_rejected, self.overlaps, self.overlaps_in_data_loss_windows
        );
        println!(
            "own lease ids: {} grants answered to a retry (counted from the first attempt); \
             holders told lost to another holder while they held: {}; live calls whose place \
             a cut earlier attempt took back (FAILED_PRECONDITION, retried): {} {:?}",
            self.retried_grants,
            self.lost_to_another_in_view,
            self.superseded_live_calls.len(),
            self.superseded_live_calls
                .iter()
                .take(5)
                .collect::<Vec<_>>()
        );
        println!(
            "counting names: {} grants; most holders at once (outside data-loss windows): {}; \
             most permits held reported by waiting/not_granted: {} ({} reports checked)",
            self.counting_grants,
            self.max_holders_counting,
            self.max_reported_held,
            self.occupancy_reports
        );
        let pairs = &self.mode_fifo_pairs;
        println!(
            "read-write names: {} exclusive and {} shared grants; most shared holders at once \
             (outside data-loss windows): {}; most held reported by waiting/not_granted: {}; \
             waiters: {} exclusive, {} shared; FIFO pairs checked (waiter -> later caller): \
             exclusive -> exclusive {}, exclusive -> shared {}, shared -> exclusive {}, shared -> \
             shared granted on its first attempt {}; not checked, shared -> shared that waited too \
             (due together): {}",
            self.rw_exclusive_grants,
            self.rw_shared_grants,
            self.max_shared_holders,
            self.max_reported_held_rw,
            self.rw_exclusive_waiters,
            self.rw_shared_waiters,
            pairs.exclusive_then_exclusive,
            pairs.exclusive_then_shared,
            pairs.shared_then_exclusive,
            pairs.shared_then_shared_first_attempt,
            pairs.shared_then_shared_unprovable
        );
        println!(
            "FIFO: {} waiters (highest first position {}), {} unchecked (failed or in a fault \
             window); {} pairs checked ({} on counting names); overtakes: {}; waits cut short: {}",
            self.waiters,
            self.max_position,
            self.waiters_unchecked,
            self.fifo_pairs_checked,
            self.counting_fifo_pairs_checked,
            self.overtakes,
            self.waits_cut_short
        );
        println!("violations: {}", self.violations.len());
        for violation in self.violations.iter().take(20) {
            println!("  VIOLATION {violation}");
        }
    }
}

impl Checker {
    /// Checks the whole record; see the module documentation for what is checked.
    pub fn verify(&self) -> Report {
        let events = self.events();
        let faults = self.faults();
        let mut report = Report::default();
        for fault in &faults {
            *report.faults.entry(fault.kind).or_default() += 1;
        }
        let slack = CLOCK_SLACK;
        let loss_windows: Vec<(Duration, Duration)> = faults
            .iter()
            .filter(|fault| fault.data_loss)
            .map(|fault| (fault.start, fault.end + self.workload.max_ttl() + slack))
            .collect();
        let in_loss_window = |at: Duration| {
            loss_windows
                .iter()
                .any(|(from, to)| *from <= at && at <= *to)
        };

        // Each lease's interval, by the holder's own view.
        struct Lease {
            name: usize,
            token: u64,
            shared: bool,
            ttl: Duration,
            /// When the first attempt that may have made the grant was sent.
            first_sent: Duration,
            received: Duration,
            renewals: Vec<(Duration, Duration, Duration)>,
            lost: Option<Duration>,
            /// Its first `lost` said another holder held the name.
            lost_to_another: bool,
            release: Option<Duration>,
        }
        let mut leases: HashMap<usize, Lease> = HashMap::new();
        for event in &events {
            match event {
                Event::Granted {
                    lease,
                    name,
                    token,
                    ttl,
                    sent,
                    received,
                    first_sent,
                    shared,
                    ..
                } => {
                    if first_sent < sent {
                        report.retried_grants += 1;
                    }
                    leases.insert(
                        *lease,
                        Lease {
                            name: *name,
                            token: *token,
                            shared: *shared,
                            ttl: *ttl,
                            first_sent: *first_sent,
                            received: *received,
                            renewals: Vec::new(),
                            lost: None,
                            lost_to_another: false,
                            release: None,
                        },
                    );
                }
                Event::Renewed {
                    lease,
                    sent,
                    received,
                    ttl,
                    ..
                } => {
                    report.renewals += 1;
                    if let Some(lease) = leases.get_mut(lease) {
                        lease.renewals.push((*sent, *received, *ttl));
                    }
                }
                Event::Lost {
                    lease,
                    received,
                    by_another,
                } => {
                    if let Some(lease) = leases.get_mut(lease)
                        && lease.lost.is_none()
                    {
                        lease.lost = Some(*received);
                        lease.lost_to_another = *by_another;
                    }
                }
                Event::ReleaseCalled { lease, at } => {
                    report.releases += 1;
                    if let Some(lease) = leases.get_mut(lease) {
                        lease.release.get_or_insert(*at);
                    }
                }
                Event::Failed {
                    rpc,
                    code,
                    replica,
                    sent,
                    ended,
                    gave_up,
                    ..
                } => {
                    if *gave_up {
                        *report.gave_up.entry(rpc).or_default() += 1;
                        continue;
                    }
                    *report
                        .failures
                        .entry(format!("{rpc} {code:?}"))
                        .or_default() += 1;
                    if matches!(
                        code,
                        Code::Internal | Code::InvalidArgument | Code::FailedPrecondition
                    ) {
                        report.violations.push(format!(
                            "{rpc} to replica {replica} answered {code:?} at {ended:?}: never \
                             expected"
                        ));
                    }
                    // tonic answers CANCELLED when a call's deadline passes on the server; the
                    // client's own timeout comes a second after that deadline. (A call its
                    // connection closed under is recorded as UNAVAILABLE: `failure_code`.)
                    if matches!(code, Code::DeadlineExceeded | Code::Cancelled) {
                        report.violations.push(format!(
                            "{rpc} to replica {replica}, sent at {sent:?}, failed {code:?} at \
                             {ended:?}: no answer before the call's deadline"
                        ));
                    }
                }
                Event::TakenOverAfterPause {
                    lease,
                    name,
                    paused_token,
                    next_token,
                } => {
                    report.takeovers_checked += 1;
                    if next_token <= paused_token {
                        report.violations.push(format!(
                            "{}: granted again with token {next_token} after the GC-paused lease \
                             {lease} (token {paused_token}) expired: a fenced resource would take \
                             the paused holder's stale write",
                            self.names[*name]
                        ));
                    }
                }
                Event::RenewAfterPause { lease, lost } => {
                    if !lost {
                        report.violations.push(format!(
                            "lease {lease}: renewed after its TTL passed and another holder was \
                             granted the name"
                        ));
                    }
                }
                Event::Occupancy { name, held, limit } => {
                    report.occupancy_reports += 1;
                    let allowed = self.workload.holders_allowed(*name) as u32;
                    if self.workload.is_counting(*name) {
                        report.max_reported_held = report.max_reported_held.max(*held);
                    }
                    // A read-write name's `held` counts its shared grants: no bound to check.
                    let read_write = self.workload.is_read_write(*name);
                    if read_write {
                        report.max_reported_held_rw = report.max_reported_held_rw.max(*held);
                    }
                    if (*held > allowed && !read_write) || (*limit != 0 && *limit != allowed) {
                        report.violations.push(format!(
                            "{}: `waiting`/`not_granted` reported {held} permits held of limit \
                             {limit}; every caller asks for limit {}",
                            self.names[*name],
                            self.workload.limit_of(*name)
                        ));
                    }
                }
                Event::Write { .. }
                | Event::Waited { .. }
                | Event::NotGranted { .. }
                | Event::Answered { .. } => {}
                Event::Superseded {
                    replica,
                    sent,
                    ended,
                } => report.superseded_live_calls.push(format!(
                    "Acquire to replica {replica}, sent at {sent:?}, refused at {ended:?}"
                )),
            }
        }
        report.grants = leases.len();
        report.counting_grants = leases
            .values()
            .filter(|lease| self.workload.is_counting(lease.name))
            .count();
        for lease in leases.values() {
            if self.workload.is_read_write(lease.name) {
                match lease.shared {
                    true => report.rw_shared_grants += 1,
                    false => report.rw_exclusive_grants += 1,
                }
            }
        }
        let mut intervals: HashMap<usize, Vec<Interval>> = HashMap::new();
        let mut interval_of: HashMap<usize, (Duration, Duration)> = HashMap::new();
        for (id, lease) in &leases {
            // A grant answered to a retry may have been made by the first attempt.
            let mut expiry = lease.first_sent + lease.ttl;
            let mut renewals = lease.renewals.clone();
            renewals.sort();
            for (sent, received, ttl) in renewals {
                if received >= expiry {
                    break; // answered after the holder's view had ended
                }
                expiry = expiry.max(sent + ttl);
            }
            let mut end = expiry;
            if let Some(release) = lease.release {
                end = end.min(release);
            }
            if let Some(lost) = lease.lost {
                // While its view ran, the grant was the holder's: nobody else could hold the name
                // unless the grant was undone behind its back (the retried own id of issue 51) or
                // Redis lost it.
                if lease.lost_to_another && lost + slack < end && !in_loss_window(lost) {
                    report.lost_to_another_in_view += 1;
                    report.violations.push(format!(
                        "{}: lease {id} (token {}) was told lost, held by another holder, at \
                         {lost:?} while its view ran until {end:?}",
                        self.names[lease.name], lease.token
                    ));
                }
                end = end.min(lost);
            }
            interval_of.insert(*id, (lease.received, end));
            intervals.entry(lease.name).or_default().push(Interval {
                lease: *id,
                token: lease.token,
                start: lease.received,
                end,
                shared: lease.shared,
            });
        }

        // At most `limit` holders (1 for an exclusive lease): each view is cut short by `slack`,
        // and when a view begins, the earlier ones still running share that instant with it.
        for (name, list) in &mut intervals {
            let allowed = self.workload.holders_allowed(*name);
            list.sort_by_key(|interval| interval.start);
            if self.workload.is_read_write(*name) {
                self.verify_modes(*name, list, &in_loss_window, &mut report);
                continue;
            }
            let mut active: Vec<&Interval> = Vec::new();
            for interval in list.iter() {
                if interval.end <= interval.start + slack {
                    continue; // shorter than the slack: it overlaps nothing
                }
                active.retain(|earlier| earlier.end > interval.start + slack);
                if self.workload.is_counting(*name) && !in_loss_window(interval.start) {
                    report.max_holders_counting = report.max_holders_counting.max(active.len() + 1);
                }
                if active.len() >= allowed {
                    if in_loss_window(interval.start) {
                        report.overlaps_in_data_loss_windows += 1;
                    } else {
                        report.overlaps += 1;
                        let view = |interval: &Interval| {
                            format!(
                                "{} (token {}, {:?}..{:?})",
                                interval.lease, interval.token, interval.start, interval.end
                            )
                        };
                        let earlier: Vec<String> =
                            active.iter().map(|earlier| view(earlier)).collect();
                        report.violations.push(format!(
                            "{}: the views of {} holders overlap, limit {allowed}: lease {} began \
                             while leases {} held it",
                            self.names[*name],
                            active.len() + 1,
                            view(interval),
                            earlier.join(", ")
                        ));
                    }
                }
                active.push(interval);
            }
        }

        // Tokens: unique per name, and increasing in grant order.
        let mut by_name: HashMap<usize, Vec<&Lease>> = HashMap::new();
        for lease in leases.values() {
            by_name.entry(lease.name).or_default().push(lease);
        }
        for (name, mut grants) in by_name {
            let mut seen = HashSet::new();
            for grant in &grants {
                if !seen.insert(grant.token) {
                    report.violations.push(format!(
                        "{}: token {} granted twice",
                        self.names[name], grant.token
                    ));
                }
            }
            grants.sort_by_key(|grant| grant.received);
            let mut prefix_max = Vec::with_capacity(grants.len());
            let mut max = 0;
            for grant in &grants {
                max = max.max(grant.token);
                prefix_max.push(max);
            }
            for later in &grants {
                // Grants received before `later` was requested happened before it (requested by
                // its first attempt, which may have made it).
                let before = grants.partition_point(|earlier| earlier.received < later.first_sent);
                if before > 0 && prefix_max[before - 1] >= later.token {
                    report.violations.push(format!(
                        "{}: token {} granted after token {} had been received (backwards)",
                        self.names[name],
                        later.token,
                        prefix_max[before - 1]
                    ));
                }
            }
        }

        self.verify_fifo(&events, &faults, &intervals, &mut report);
        self.verify_stalls(&events, &faults, &mut report);

        // Fencing, in the resource's own order.
        let mut highest = vec![0u64; self.workload.all_names()];
        for event in &events {
            let Event::Write {
                lease,
                name,
                token,
                at,
                accepted,
                stale_on_purpose,
            } = event
            else {
                continue;
            };
            if *accepted {
                report.writes_accepted += 1;
            } else {
                report.writes_rejected += 1;
            }
            let stale = *token < highest[*name];
            if stale && *accepted {
                report.violations.push(format!(
                    "{}: write with stale token {token} accepted after {}",
                    self.names[*name], highest[*name]
                ));
            }
            if *accepted {
                highest[*name] = highest[*name].max(*token);
            }
            if *stale_on_purpose {
                if *accepted {
                    report.violations.push(format!(
                        "{}: the GC-paused holder's stale token {token} was accepted",
                        self.names[*name]
                    ));
                } else {
                    report.stale_writes_rejected += 1;
                }
            } else if !accepted && !in_loss_window(*at) {
                let (start, end) = interval_of[lease];
                report.violations.push(format!(
                    "{}: lease {lease} (token {token}) was refused a write at {at:?} inside its own \
                     interval {start:?}..{end:?}: a newer token was already written",
                    self.names[*name]
                ));
            }
        }
        report
    }

    /// The calls sent to a replica while a [`Stalled`] fault kept it from Redis's answers
    /// (guarantee 4): those that failed, `UNAVAILABLE`, and their median within
    /// [`STALL_MEDIAN_MARGIN`] of `--redis-timeout`; every call's first answer within
    /// [`STALL_CAP_MARGIN`] of it: not held until Redis came back, nor until the client's
    /// deadline.
    fn verify_stalls(&self, events: &[Event], faults: &[FaultRecord], report: &mut Report) {
        let timeout = self.workload.redis_timeout;
        let cap = timeout + STALL_CAP_MARGIN;
        let mut failures: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
        for call in first_answers(events) {
            for fault in faults {
                if !fault.stalled.includes(call.replica)
                    || call.sent < fault.start
                    || call.sent > fault.end
                {
                    continue;
                }
                let took = call.answered.saturating_sub(call.sent);
                let checked = report.stalled_calls.entry(fault.kind).or_default();
                checked.calls += 1;
                checked.longest = checked.longest.max(took);
                if let Some(code) = call.failed {
                    checked.failed += 1;
                    failures.entry(fault.kind).or_default().push(took);
                    if code != Code::Unavailable {
                        report.violations.push(format!(
                            "{} to replica {}, sent at {:?} during {} ({:?}..{:?}), failed \
                             {code:?}: a stalled Redis must make calls answer UNAVAILABLE",
                            call.rpc, call.replica, call.sent, fault.kind, fault.start, fault.end
                        ));
                    }
                }
                if took > cap {
                    report.violations.push(format!(
                        "{} to replica {}, sent at {:?} during {} ({:?}..{:?}), first answered \
                         after {took:?}: a stalled Redis must not hold a call past {cap:?}",
                        call.rpc, call.replica, call.sent, fault.kind, fault.start, fault.end
                    ));
                }
            }
        }
        let bound = timeout + STALL_MEDIAN_MARGIN;
        for (kind, mut took) in failures {
            took.sort();
            let median = took[took.len() / 2];
            report.stalled_calls.get_mut(kind).unwrap().median_failure = median;
            if median > bound {
                report.violations.push(format!(
                    "{kind}: the calls it made fail answered after {median:?} (median of {}): \
                     UNAVAILABLE must come within the timeout, {timeout:?}, + \
                     {STALL_MEDIAN_MARGIN:?}",
                    took.len()
                ));
            }
        }
    }

    /// The views of read-write name `name` (`list`, sorted by start): an exclusive view overlaps
    /// no other view, shared views may overlap each other. Each view is cut short by
    /// [`CLOCK_SLACK`], as for the other names.
    fn verify_modes(
        &self,
        name: usize,
        list: &[Interval],
        in_loss_window: &impl Fn(Duration) -> bool,
        report: &mut Report,
    ) {
        let slack = CLOCK_SLACK;
        let view = |interval: &Interval| {
            format!(
                "{} ({}, token {}, {:?}..{:?})",
                interval.lease,
                mode(interval.shared),
                interval.token,
                interval.start,
                interval.end
            )
        };
        let mut active: Vec<&Interval> = Vec::new();
        for interval in list {
            if interval.end <= interval.start + slack {
                continue; // shorter than the slack: it overlaps nothing
            }
            active.retain(|earlier| earlier.end > interval.start + slack);
            let conflicting: Vec<&Interval> = active
                .iter()
                .copied()
                .filter(|earlier| !(earlier.shared && interval.shared))
                .collect();
            if interval.shared && !in_loss_window(interval.start) {
                let shared = active.iter().filter(|earlier| earlier.shared).count() + 1;
                report.max_shared_holders = report.max_shared_holders.max(shared);
            }
            if !conflicting.is_empty() {
                if in_loss_window(interval.start) {
                    report.overlaps_in_data_loss_windows += 1;
                } else {
                    report.overlaps += 1;
                    let earlier: Vec<String> =
                        conflicting.iter().map(|earlier| view(earlier)).collect();
                    report.violations.push(format!(
                        "{}: an exclusive view overlaps another view: lease {} began while \
                         leases {} held it",
                        self.names[name],
                        view(interval),
                        earlier.join(", ")
                    ));
                }
            }
            active.push(interval);
        }
    }

    /// FIFO waiting; see the module documentation.
    fn verify_fifo(
        &self,
        events: &[Event],
        faults: &[FaultRecord],
        views: &HashMap<usize, Vec<Interval>>,
        report: &mut Report,
    ) {
        let settle = self.workload.max_ttl() + CLOCK_SLACK;
        let windows: Vec<(Duration, Duration)> = faults
            .iter()
            .filter(|fault| !QUEUE_SAFE_FAULTS.contains(&fault.kind))
            .map(|fault| (fault.start, fault.end + settle))
            .collect();
        let touches_fault = |from: Duration, to: Duration| {
            windows
                .iter()
                .any(|(start, end)| from <= *end && *start <= to)
        };

        /// A grant as FIFO sees it.
        struct Grant {
            lease: usize,
            client: usize,
            replica: usize,
            token: u64,
            sent: Duration,
            received: Duration,
            shared: bool,
            waited: bool,
        }
        let mut grants: HashMap<usize, Vec<Grant>> = HashMap::new();
        for event in events {
            if let Event::Granted {
                lease,
                client,
                replica,
                name,
                token,
                received,
                first_sent,
                shared,
                waited,
                ..
            } = event
            {
                // A retried own id's place in line may be its first attempt's.
                grants.entry(*name).or_default().push(Grant {
                    lease: *lease,
                    client: *client,
                    replica: *replica,
                    token: *token,
                    sent: *first_sent,
                    received: *received,
                    shared: *shared,
                    waited: *waited,
                });
            }
        }
        for list in grants.values_mut() {
            list.sort_by_key(|grant| grant.sent);
        }
        let who = |client: usize| match client {
            usize::MAX => "the GC-pause holder".to_owned(),
            client => format!("client {client}"),
        };
        // On a read-write name, who with the mode it asked for.
        let who_as =
            |client: usize, name: usize, shared: bool| match self.workload.is_read_write(name) {
                true => format!("{} {}", mode(shared), who(client)),
                false => who(client),
            };

        for event in events {
            let Event::Waited {
                client,
                replica,
                name,
                shared,
                sent,
                wait,
                queued,
                position,
                ended,
                outcome,
            } = *event
            else {
                continue;
            };
            report.waiters += 1;
            report.max_position = report.max_position.max(position);
            let read_write = self.workload.is_read_write(name);
            if read_write {
                match shared {
                    true => report.rw_shared_waiters += 1,
                    false => report.rw_exclusive_waiters += 1,
                }
            }
            if outcome == WaitOutcome::Failed || touches_fault(sent, ended) {
                report.waiters_unchecked += 1;
                continue;
            }
            let name_text = &self.names[name];
            let waiter = format!(
                "{} (replica {replica}; Acquire sent at {sent:?}, wait {wait:?}; first waiting at \
                 {queued:?}, position {position})",
                who_as(client, name, shared)
            );
            if position == 0 {
                report.violations.push(format!(
                    "{name_text}: {waiter} reported position 0 (1 = next in line)"
                ));
            }
            // The server's deadline is at least this: it started counting after the send.
            let deadline = sent + wait;
            let (until, outcome_text) = match outcome {
                WaitOutcome::Granted(token) => {
                    (ended, format!("granted token {token} at {ended:?}"))
                }
                _ => (deadline, format!("answered not_granted at {ended:?}")),
            };
            if outcome == WaitOutcome::NotGranted && ended + CLOCK_SLACK < deadline {
                report.waits_cut_short += 1;
                report.violations.push(format!(
                    "{name_text}: {waiter} was answered not_granted at {ended:?}, before its wait \
                     could have run out ({deadline:?})"
                ));
            }
            let list = grants.get(&name).map_or(&[][..], Vec::as_slice);
            let others_needed = self.workload.holders_allowed(name) - 1;
            let name_views = views.get(&name).map_or(&[][..], Vec::as_slice);
            // Callers that asked after the waiter was queued, and early enough to be granted
            // while it still waited.
            let first = list.partition_point(|grant| grant.sent <= queued);
            for later in list[first..].iter().take_while(|grant| grant.sent < until) {
                if touches_fault(later.sent, later.received) {
                    continue;
                }
                // On a counting name, `later` may go first if another permit was free for the
                // waiter too: only when the other permits were held all through its call did it
                // take the one the waiter was in line for.
                if others_needed > 0 {
                    let held_throughout = name_views
                        .iter()
                        .take_while(|view| view.start <= later.sent)
                        .filter(|view| {
                            view.lease != later.lease && view.end >= later.received + CLOCK_SLACK
                        })
                        .count();
                    if held_throughout < others_needed {
                        continue;
                    }
                    report.counting_fifo_pairs_checked += 1;
                }
                // On a read-write name: a shared caller behind a shared waiter may be due in the
                // same run and take its grant first, unless it never stood in line.
                if read_write {
                    let pairs = &mut report.mode_fifo_pairs;
                    match (shared, later.shared) {
                        (false, false) => pairs.exclusive_then_exclusive += 1,
                        (false, true) => pairs.exclusive_then_shared += 1,
                        (true, false) => pairs.shared_then_exclusive += 1,
                        (true, true) if !later.waited => {
                            pairs.shared_then_shared_first_attempt += 1
                        }
                        (true, true) => {
                            pairs.shared_then_shared_unprovable += 1;
                            continue;
                        }
                    }
                }
                report.fifo_pairs_checked += 1;
                let before = match outcome {
                    WaitOutcome::Granted(token) => later.token < token,
                    _ => later.received < deadline,
                };
                if before {
                    report.overtakes += 1;
                    let first_attempt = match read_write && !later.waited {
                        true => " on its first attempt (it never waited)",
                        false => "",
                    };
                    report.violations.push(format!(
                        "{name_text}: overtake: {waiter}, {outcome_text}, was overtaken by {} \
                         (replica {}), whose Acquire was sent later at {:?} and granted token {} \
                         at {:?}{first_attempt}",
                        who_as(later.client, name, later.shared),
                        later.replica,
                        later.sent,
                        later.token,
                        later.received
                    ));
                }
            }
        }
    }
}

/// Faults that must not reorder a queue: the GC-pause holder is a client that stops renewing,
/// and the lease's expiry hands it on to the next in line like any release.
const QUEUE_SAFE_FAULTS: &[&str] = &["gc_pause"];
