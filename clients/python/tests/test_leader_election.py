"""clients/python/examples/leader_election.py as three real candidate processes against the real
`leased` binary on a real redis-server: one leads and every candidate's Watch names it; the leader
is killed with SIGKILL, and a follower takes over one TTL later with a larger fencing token, which
the last follower's Watch reports after the expiry. (tests/integration/leader_election.rs does the
same with the Rust example.) Run by clients/python/test.sh, against the installed package.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from leased_stack import EXAMPLES, running_stack

from leased_client import HolderInfo, LeaseClient

#: The candidates' TTL: short for a quick test, with room for a slow renewal on 2 busy cores.
TTL_MS = 2_000
#: How long each wait of the test may take: startup of three interpreters, one TTL, slack.
PATIENCE_S = 30.0


class Candidate:
    """One candidate process, and the lines it printed so far."""

    def __init__(self, target: str, election: str, candidate_id: str) -> None:
        self.id = candidate_id
        self.process = subprocess.Popen(
            [sys.executable, "-u", str(EXAMPLES / "leader_election.py"), "--target", target,
             "--election", election, "--id", candidate_id, "--ttl-ms", str(TTL_MS)],
            stdout=subprocess.PIPE, text=True,
        )
        self._lines: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self._lines.append(line.rstrip("\n"))

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def wait_for_line(self, what: str, wanted: Callable[[str], bool]) -> None:
        deadline = time.monotonic() + PATIENCE_S
        while not any(wanted(line) for line in self.lines()):
            if time.monotonic() > deadline:
                pytest.fail(f"{self.id} never printed {what!r}; it printed {self.lines()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: the machine died; nothing is released."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def candidates(target: str, election: str, ids: list[str]) -> Iterator[list[Candidate]]:
    started: list[Candidate] = []
    try:
        for candidate_id in ids:
            started.append(Candidate(target, election, candidate_id))
        yield started
    finally:
        for candidate in started:
            candidate.kill()


def leader_above(client: LeaseClient, election: str, above: int) -> HolderInfo:
    """Waits until the lease is held by a grant with a token above `above`; that holder."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        info = client.describe(election)
        if info.held and info.fencing_token > above:
            return info.holders[0]
        if time.monotonic() > deadline:
            pytest.fail(f"no leader with a token above {above}: {info}")
        time.sleep(0.02)


def follows(leader: HolderInfo) -> str:
    """What a candidate's Watch prints when `leader` leads."""
    return f"leader {leader.holder!r}, fencing token {leader.fencing_token}"


def test_a_follower_takes_over_when_the_leader_is_killed(tmp_path: Path) -> None:
    election = "election/python"
    with running_stack(tmp_path) as stack, LeaseClient(stack.target) as client, \
            candidates(stack.target, election, ["p1", "p2", "p3"]) as running:
        # One candidate leads, says so, and every candidate's Watch names it.
        first = leader_above(client, election, 0)
        by_id = {candidate.id: candidate for candidate in running}
        assert first.holder in by_id, first
        leading = f"leading as {first.holder} with fencing token {first.fencing_token}"
        by_id[first.holder].wait_for_line(leading, lambda line: line == leading)
        for candidate in running:
            candidate.wait_for_line(follows(first), lambda line: line.endswith(follows(first)))

        leader = by_id.pop(first.holder)
        leader.kill()
        killed_at = time.monotonic()

        # A follower takes over once the dead leader's TTL has passed, with a larger token.
        second = leader_above(client, election, first.fencing_token)
        took_s = time.monotonic() - killed_at
        assert second.holder in by_id, second
        leading = f"leading as {second.holder} with fencing token {second.fencing_token}"
        by_id[second.holder].wait_for_line(leading, lambda line: line == leading)
        assert took_s < 15, f"took over after {took_s:.1f} s"

        # The other follower saw the expiry, then the new leader, in that order.
        (follower,) = (c for c in by_id.values() if c.id != second.holder)
        new_leader = follows(second)
        follower.wait_for_line(new_leader, lambda line: line.endswith(new_leader))
        lines = follower.lines()
        saw_old = next(i for i, line in enumerate(lines) if line.endswith(follows(first)))
        saw_new = next(i for i, line in enumerate(lines) if line.endswith(new_leader))
        assert saw_old < saw_new and "[expired] no leader" in lines[saw_old:saw_new], lines
        assert not any(line.startswith("leading as") for line in lines), lines


def test_a_stopped_leader_hands_over_at_once(tmp_path: Path) -> None:
    """SIGTERM: the leader releases on its way out, so a follower leads well within the TTL."""
    election = "election/python-sigterm"
    with running_stack(tmp_path) as stack, LeaseClient(stack.target) as client, \
            candidates(stack.target, election, ["s1", "s2"]) as running:
        first = leader_above(client, election, 0)
        by_id = {candidate.id: candidate for candidate in running}
        leader = by_id.pop(first.holder)
        (follower,) = by_id.values()
        follower.wait_for_line(follows(first), lambda line: line.endswith(follows(first)))

        leader.process.terminate()
        stopped_at = time.monotonic()
        assert leader.process.wait(timeout=10) == 0
        assert "stepped down: stopping" in leader.lines()
        second = leader_above(client, election, first.fencing_token)
        took_s = time.monotonic() - stopped_at
        assert second.holder == follower.id
        assert took_s < TTL_MS / 1000, f"handed over after {took_s:.2f} s, not at once"
        follower.wait_for_line("released", lambda line: line == "[released] no leader")
