//! `examples/leader_election.rs` as three real candidate processes against a real server on
//! Redis: one leads, every candidate's Watch names it; the leader is killed with SIGKILL, and a
//! follower takes over one TTL later with a larger fencing token, which the last follower's Watch
//! reports after the expiry. (`clients/python/tests/test_leader_election.py` does the same with
//! `clients/python/examples/leader_election.py`.)

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use crate::common::*;
use leased::client::{CurrentHolder, LeaseClient};

/// The candidates' TTL: short for a quick test, with room for a slow renewal on 2 busy cores.
const TTL: &str = "2s";
/// How long each wait of the test may take: startup of three processes, one TTL, slack.
const PATIENCE: Duration = Duration::from_secs(30);

/// One candidate process, killed on drop, and what it printed so far.
struct Candidate {
    id: String,
    process: harness::proc::PrintingChild,
}

impl Candidate {
    fn start(binary: &Path, endpoint: &str, election: &str, id: &str) -> Self {
        let mut command = Command::new(binary);
        command.args([endpoint, "--election", election, "--id", id, "--ttl", TTL]);
        Candidate {
            id: id.to_owned(),
            process: harness::proc::PrintingChild::spawn(command),
        }
    }

    fn lines(&self) -> Vec<String> {
        self.process.lines()
    }

    /// SIGKILL: the machine died; nothing is released.
    fn kill(&mut self) {
        self.process.kill();
    }
}

/// What a candidate's Watch prints when `leader` leads.
fn follows(leader: &CurrentHolder) -> String {
    format!(
        "leader {:?}, fencing token {}",
        leader.holder, leader.fencing_token
    )
}

/// Waits until the lease is held by a grant with a token above `above`, and returns that holder.
async fn leader_above(client: &LeaseClient, election: &str, above: u64) -> CurrentHolder {
    let start = Instant::now();
    loop {
        if let Some(holder) = client.describe(election).await.unwrap()
            && holder.fencing_token > above
        {
            return holder;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "no leader with a token above {above}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `candidate` printed a line for which `wanted` holds.
async fn wait_for_line(candidate: &Candidate, what: &str, wanted: impl Fn(&str) -> bool) {
    let found = harness::poll_until_async(what, PATIENCE, || {
        std::future::ready(candidate.lines().iter().any(|l| wanted(l)))
    })
    .await;
    if let Err(error) = found {
        panic!("{error}; {} printed {:#?}", candidate.id, candidate.lines());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_over_when_the_leader_is_killed() {
    let binary = build_example("leader_election");
    let redis = RedisServer::start();
    let server = Leased::start(Some(redis.url())).await;
    let client = LeaseClient::connect(server.endpoint()).await.unwrap();
    let election = "election/rust";
    let mut candidates: Vec<Candidate> = ["c1", "c2", "c3"]
        .iter()
        .map(|id| Candidate::start(&binary, &server.endpoint(), election, id))
        .collect();

    // One candidate leads, says so, and every candidate's Watch names it.
    let first = leader_above(&client, election, 0).await;
    let leader_at = candidates
        .iter()
        .position(|c| c.id == first.holder)
        .unwrap_or_else(|| panic!("the lease is held by {first:?}, no candidate"));
    let leading = format!(
        "leading as {} with fencing token {}",
        first.holder, first.fencing_token
    );
    wait_for_line(&candidates[leader_at], &leading, |l| l == leading).await;
    for candidate in &candidates {
        let line = follows(&first);
        wait_for_line(candidate, &line, |l| l.ends_with(&line)).await;
    }

    let mut leader = candidates.remove(leader_at);
    leader.kill();
    let killed_at = Instant::now();

    // A follower takes over once the dead leader's TTL has passed, with a larger token.
    let second = leader_above(&client, election, first.fencing_token).await;
    let took = killed_at.elapsed();
    let new_at = candidates
        .iter()
        .position(|c| c.id == second.holder)
        .unwrap_or_else(|| panic!("the lease is held by {second:?}, no surviving candidate"));
    let leading = format!(
        "leading as {} with fencing token {}",
        second.holder, second.fencing_token
    );
    wait_for_line(&candidates[new_at], &leading, |l| l == leading).await;
    assert!(took < Duration::from_secs(15), "took over after {took:?}");

    // The other follower saw the expiry, then the new leader, in that order.
    let follower = &candidates[1 - new_at];
    let new_leader = follows(&second);
    wait_for_line(follower, &new_leader, |l| l.ends_with(&new_leader)).await;
    let lines = follower.lines();
    let position_of = |wanted: &str| {
        lines
            .iter()
            .position(|l| l.ends_with(wanted))
            .unwrap_or_else(|| panic!("{} never printed {wanted:?}: {lines:#?}", follower.id))
    };
    let (saw_old, saw_new) = (position_of(&follows(&first)), position_of(&new_leader));
    assert!(
        saw_old < saw_new
            && lines[saw_old..saw_new]
                .iter()
                .any(|l| l == "[expired] no leader"),
        "{} did not print the old leader, its expiry, then the new leader: {lines:#?}",
        follower.id
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("leading as")),
        "{} led too: {lines:#?}",
        follower.id
    );
}
