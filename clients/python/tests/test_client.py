"""The Python client (the installed leased_client) against the real `leased` binary and a real redis-server:
leases, counting leases, lock-delay, the examples, Watch, CheckToken, List and Revoke, and loss
when the server dies. Giving up a wait is in test_give_up.py; the stack and its
fixtures are in leased_stack.py and conftest.py.

Run by clients/python/test.sh, against the installed package. The `leased` binary comes from
$LEASED_BIN, else target/debug/leased (built with `cargo build` if missing). Timing margins are
generous: these tests must pass on a loaded 2-core machine.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from leased_stack import EXAMPLES, Stack, answers, running_stack, wait_until

from leased_client import (
    FencedResource,
    HolderInfo,
    Lease,
    LeaseClient,
    NotGranted,
    StaleTokenError,
    TokenCheck,
    WatchEvent,
)


def test_keepalive_holds_a_short_lease_until_it_is_released(clients) -> None:
    holder, observer, _ = clients
    lease = holder.acquire("py-keepalive", ttl_ms=600, wait_ms=5_000, holder="py-holder")
    assert isinstance(lease, Lease)
    try:
        # Five TTLs: only the keepalive can keep the lease alive that long.
        held_until = time.monotonic() + 3.0
        while time.monotonic() < held_until:
            info = observer.describe("py-keepalive")
            assert (info.held, info.holder) == (True, "py-holder")
            assert info.fencing_token == lease.fencing_token
            assert not lease.lost.is_set(), lease.lost_reason
            time.sleep(0.2)
    finally:
        released = lease.release()
    assert released is True
    assert lease.release() is False, "a second release is a no-op"
    assert observer.describe("py-keepalive").held is False
    assert not lease.lost.is_set()


def test_busy_lease_is_not_granted_and_a_waiter_gets_it_with_a_larger_token(clients) -> None:
    first_client, second_client, waiter_client = clients
    name = "py-contended"
    first = first_client.acquire(name, ttl_ms=10_000, holder="first")
    assert isinstance(first, Lease)

    busy = second_client.acquire(name, ttl_ms=10_000, wait_ms=0, holder="second")
    assert busy == NotGranted(name, "first", first.fencing_token, busy.remaining_ms,
                              held=1, limit=1)
    assert 0 < busy.remaining_ms <= 10_000

    # The waiter's TTL is shorter than its wait: the client cannot count its trust from the
    # request, and must confirm the grant by renewing before the keepalive takes over.
    seen: list[NotGranted] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(
            waiter_client.acquire, name, ttl_ms=600, wait_ms=20_000, holder="waiter",
            on_waiting=seen.append,
        )
        wait_until(lambda: bool(seen), 10, "the server to report that the waiter waits")
        assert (seen[0].holder, seen[0].fencing_token) == ("first", first.fencing_token)
        time.sleep(1.0)
        assert not waiting.done()
        assert first.release() is True
        waiter = waiting.result(timeout=10)

    assert isinstance(waiter, Lease)
    assert waiter.fencing_token > first.fencing_token
    time.sleep(1.5)  # beyond its TTL: held only thanks to the keepalive
    assert not waiter.lost.is_set(), waiter.lost_reason
    info = second_client.describe(name)
    assert (info.held, info.holder, info.fencing_token) == (True, "waiter", waiter.fencing_token)
    assert waiter.release() is True


def test_takeover_sets_lost_and_the_resource_fences_off_the_old_holder(clients) -> None:
    stalled_client, new_client, _ = clients
    name = "py-takeover"
    resource = FencedResource()
    # No keepalive: this holder stalls (think GC pause) and renews only when it wakes up.
    stalled = stalled_client.acquire(name, ttl_ms=300, keepalive=False, holder="stalled")
    assert isinstance(stalled, Lease)
    resource.write(name, stalled.fencing_token, "from the stalled holder")

    time.sleep(1.0)  # well past the 300 ms TTL
    new = new_client.acquire(name, ttl_ms=10_000, wait_ms=5_000, holder="new")
    assert isinstance(new, Lease)
    assert new.fencing_token > stalled.fencing_token
    resource.write(name, new.fencing_token, "from the new holder")

    # The stalled holder wakes up: its renewal answers lost, and the resource refuses its write.
    assert not stalled.lost.is_set()
    assert stalled.renew() is False
    assert stalled.lost.is_set()
    assert stalled.lost_reason in ("held by another holder", "expired or released")
    with pytest.raises(StaleTokenError):
        resource.write(name, stalled.fencing_token, "late write from the stalled holder")
    assert resource.read(name) == "from the new holder"

    assert stalled.release() is False
    assert new.release() is True


def test_lost_fires_before_the_ttl_when_renewals_fail(tmp_path: Path) -> None:
    ttl_ms, margin_ms = 2_000, 800
    with running_stack(tmp_path) as own, LeaseClient(own.target) as client:
        lease = client.acquire("py-unreachable", ttl_ms=ttl_ms, safety_margin_ms=margin_ms)
        assert isinstance(lease, Lease)
        time.sleep(1.0)  # at least one renewal has gone through
        assert not lease.lost.is_set(), lease.lost_reason

        # Freeze Redis: renewals now fail. No renewal sent after this moment can succeed, so the
        # server keeps the lease at most a TTL past it; the holder must give up before that.
        own.redis.send_signal(signal.SIGSTOP)
        try:
            frozen_at = time.monotonic()
            assert lease.lost.wait(timeout=10), "lost never fired"
            gave_up_after_s = time.monotonic() - frozen_at
        finally:
            own.redis.send_signal(signal.SIGCONT)
        assert gave_up_after_s < ttl_ms / 1000, f"lost fired only after {gave_up_after_s:.3f} s"
        assert lease.lost_reason == "no renewal succeeded before the lease could expire"

        # Redis is back: the server answers again without a restart.
        wait_until(lambda: answers(own.redis, tmp_path / "redis.log",
                                   lambda: client.describe("py-unreachable")),
                   20, "leased to recover after Redis resumed")
        lease.release()


def test_bad_input_is_invalid_argument_naming_the_field(clients) -> None:
    client, _, _ = clients
    with pytest.raises(grpc.RpcError) as raised:
        client.acquire("py bad name", ttl_ms=1_000)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "name" in raised.value.details()


def test_example_runs_against_the_server(stack: Stack) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "example.py"), "--target", stack.target,
         "--name", "py-example", "--ttl-ms", "1500", "--hold-s", "2"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    for line in ("granted: fencing token", "rejected stale write", "still held", "released: True"):
        assert line in run.stdout, run.stdout


def test_counting_lease_lets_limit_holders_in_and_describe_lists_them(clients) -> None:
    a_client, b_client, c_client = clients
    name = "py-counting"
    first = a_client.acquire(name, ttl_ms=10_000, holder="a", limit=2)
    second = b_client.acquire(name, ttl_ms=10_000, holder="b", limit=2)
    assert isinstance(first, Lease) and isinstance(second, Lease)
    assert second.fencing_token > first.fencing_token
    try:
        busy = c_client.acquire(name, ttl_ms=10_000, holder="c", limit=2)
        assert isinstance(busy, NotGranted)
        assert (busy.held, busy.limit) == (2, 2)
        assert busy.fencing_token in (first.fencing_token, second.fencing_token)

        info = c_client.describe(name)
        assert (info.held, info.limit, info.waiters) == (True, 2, 0)
        assert [(h.holder, h.fencing_token) for h in info.holders] == [
            ("a", first.fencing_token), ("b", second.fencing_token)]
        assert all(isinstance(h, HolderInfo) and h.remaining_ms > 0 for h in info.holders)
        # The single-holder fields describe the smallest token, as for clients before limits.
        assert (info.holder, info.fencing_token) == ("a", first.fencing_token)

        with pytest.raises(grpc.RpcError) as raised:
            c_client.acquire(name, ttl_ms=10_000, limit=3)
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "limit in force, 2" in raised.value.details()

        # A waiter gets the permit that the first release frees.
        with ThreadPoolExecutor(max_workers=1) as pool:
            waiting = pool.submit(c_client.acquire, name, ttl_ms=10_000, wait_ms=20_000,
                                  holder="c", limit=2)
            wait_until(lambda: c_client.describe(name).waiters == 1, 10, "the waiter to queue")
            assert first.release() is True
            third = waiting.result(timeout=10)
        assert isinstance(third, Lease)
        assert third.fencing_token > second.fencing_token
        assert third.release() is True
    finally:
        first.release()
        second.release()
    info = c_client.describe(name)
    assert (info.held, info.limit, info.holders, info.waiters) == (False, 0, (), 0)


def test_lock_delay_holds_an_expired_lease_back(clients) -> None:
    stalled_client, next_client, _ = clients
    name = "py-lock-delay"
    asked_at = time.monotonic()
    stalled = stalled_client.acquire(name, ttl_ms=300, lock_delay_ms=1_500, keepalive=False,
                                     holder="stalled")
    assert isinstance(stalled, Lease)
    time.sleep(max(0.0, asked_at + 0.6 - time.monotonic()))  # expired, in its lock-delay

    info = next_client.describe(name)
    assert (info.held, info.holder, info.fencing_token) == (True, "stalled", stalled.fencing_token)
    assert 0 < info.remaining_ms <= 1_500
    assert stalled.renew() is False and stalled.lost_reason == "expired or released"

    new = next_client.acquire(name, ttl_ms=5_000, wait_ms=10_000, holder="next")
    assert isinstance(new, Lease)
    # The stalled lease expired no earlier than 300 ms after it was asked for.
    assert time.monotonic() - asked_at >= 1.8
    assert new.fencing_token > stalled.fencing_token
    assert new.release() is True

    with pytest.raises(grpc.RpcError) as raised:
        next_client.acquire(name, ttl_ms=1_000, lock_delay_ms=60_001)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "lock_delay_ms" in raised.value.details()


def test_example_takes_one_permit_of_a_counting_lease(stack: Stack, clients) -> None:
    client, _, _ = clients
    name = "py-example-counting"

    def example(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(EXAMPLES / "example.py"), "--target", stack.target,
             "--name", name, "--limit", "2", "--ttl-ms", "1500", "--hold-s", "1", *extra],
            capture_output=True, text=True, timeout=60,
        )

    # One permit is taken: the example takes the other at once, beside it.
    other = client.acquire(name, ttl_ms=30_000, holder="other", limit=2)
    assert isinstance(other, Lease)
    run = example("--wait-ms", "0")
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    for line in ("one of 2 permits", "still held: 2 of 2 permits held, 0 waiting",
                 f"holder 'other', token {other.fencing_token}", "(this program)",
                 "released: True"):
        assert line in run.stdout, run.stdout

    # Both permits are taken: the example is not granted and says how full the lease is.
    another = client.acquire(name, ttl_ms=30_000, holder="another", limit=2)
    assert isinstance(another, Lease)
    run = example("--wait-ms", "0")
    assert run.returncode == 2, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "not granted: 2 of 2 permits held" in run.stdout, run.stdout
    assert other.release() is True
    assert another.release() is True


class WatchedEvents:
    """A `LeaseClient.watch` read on a thread, so that the test can act and then look."""

    def __init__(self, client: LeaseClient, name: str) -> None:
        self.watch = client.watch(name)
        self.events: list[WatchEvent] = []
        self.error: list[BaseException] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self.watch:
                self.events.append(event)
        except BaseException as error:  # reported by the test, not lost on the thread
            self.error.append(error)

    def wait_for(self, cause: str, what: str = "") -> WatchEvent:
        wait_until(lambda: any(e.cause == cause for e in self.events) or bool(self.error), 10,
                   f"a {cause} event {what}")
        assert not self.error, self.error
        return next(e for e in self.events if e.cause == cause)

    def close(self) -> None:
        self.watch.close()
        self._thread.join(timeout=5)
        assert not self._thread.is_alive(), "closing the watch did not end its iteration"
        assert not self.error, self.error


def test_watch_check_token_list_and_revoke(clients) -> None:
    holder_client, observer, operator = clients
    name = "py-watched"
    watched = WatchedEvents(observer, name)
    snapshot = watched.wait_for("snapshot")
    assert (snapshot.name, snapshot.held, snapshot.fencing_token, snapshot.holders) == (
        name, False, 0, ())
    assert snapshot.current_holder is None

    # A 1.5 s TTL: the keepalive renews every 0.5 s and learns of the revoke at its next renewal.
    lease = holder_client.acquire(name, ttl_ms=1_500, holder="py-holder")
    assert isinstance(lease, Lease)
    token = lease.fencing_token
    granted = watched.wait_for("granted")
    assert (granted.holder, granted.fencing_token, granted.held, granted.limit) == (
        "py-holder", token, True, 1)
    assert granted.expires_at_ms is not None and granted.expires_at_ms > 0
    assert granted.current_holder == HolderInfo("py-holder", token, granted.holders[0].remaining_ms)

    assert observer.check_token(name, token) == TokenCheck(current=True, current_token=token,
                                                           held=True)
    assert observer.check_token(name, token - 1) == TokenCheck(current=False, current_token=token,
                                                               held=True)
    with pytest.raises(grpc.RpcError) as raised:
        observer.check_token(name, 0)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "fencing_token" in raised.value.details()

    listed = [info for info in operator.list("py-watch") if info.name == name]
    assert len(listed) == 1, listed
    assert (listed[0].holder, listed[0].fencing_token, listed[0].held) == ("py-holder", token, True)

    assert operator.revoke(name, "stale", fencing_token=token - 1) is None
    assert not lease.lost.is_set()
    assert operator.revoke(name, "py wedged (INC-9)") == token
    revoked = watched.wait_for("revoked")
    assert (revoked.fencing_token, revoked.reason, revoked.held) == (token, "py wedged (INC-9)",
                                                                      False)
    assert lease.lost.wait(timeout=10), "the holder never learned of the revoke"
    assert lease.lost_reason == "revoked: py wedged (INC-9)"
    assert lease.release() is False
    assert observer.check_token(name, token) == TokenCheck(current=False, current_token=0,
                                                           held=False)
    assert operator.revoke(name, "again") is None
    causes = [event.cause for event in watched.events]
    assert causes == ["snapshot", "granted", "revoked"], watched.events
    watched.close()


def test_list_pages_through_every_held_lease_under_a_prefix(clients) -> None:
    client, _, _ = clients
    names = [f"py-list/{i}" for i in range(5)]
    leases = [client.acquire(name, ttl_ms=30_000, holder="lister") for name in names]
    outside = client.acquire("py-listed-not", ttl_ms=30_000)
    try:
        first = client.list_page("py-list/", page_size=2)
        assert len(first.leases) <= 2 and first.next_page_token is not None
        listed = list(client.list("py-list/", page_size=2))
        assert sorted(info.name for info in listed) == names
        assert {info.fencing_token for info in listed} == {lease.fencing_token for lease in leases}
        assert all(info.holders == (HolderInfo("lister", info.fencing_token, info.holders[0]
                                                .remaining_ms),) for info in listed)
        with pytest.raises(grpc.RpcError) as raised:
            client.list_page("py-list/", page_size=1001)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_size" in raised.value.details()
    finally:
        for lease in [*leases, outside]:
            assert isinstance(lease, Lease)
            lease.release()
    assert list(client.list("py-list/")) == []


# --- Loss when the server dies --------------------------------------------------------------------


def test_lost_fires_before_the_ttl_when_the_server_is_killed(tmp_path: Path) -> None:
    ttl_ms = 3_000
    trusted_ms = ttl_ms - ttl_ms // 10  # the default safety margin is a tenth of the TTL
    with running_stack(tmp_path) as own, LeaseClient(own.target) as client:
        lease = client.acquire("py-killed", ttl_ms=ttl_ms)
        assert isinstance(lease, Lease)
        time.sleep(1.5)  # renewals go through
        assert not lease.lost.is_set(), lease.lost_reason

        own.leased.kill()
        own.leased.wait()
        killed_at = time.monotonic()
        time.sleep(0.05)  # an answer read just before the kill is credited by now
        # No renewal can succeed any more: the trust counts from the last one that did.
        last_renewal_sent = time.monotonic() + lease.trusted_for_s() - trusted_ms / 1000
        assert lease.lost.wait(timeout=10), "lost never fired"
        lost_at = time.monotonic()
        print(f"\nleased killed: lost after {(lost_at - killed_at) * 1000:.0f} ms, "
              f"{(lost_at - last_renewal_sent) * 1000:.0f} ms after the last renewal was sent "
              f"(TTL {ttl_ms} ms)")
        assert lost_at - last_renewal_sent <= ttl_ms / 1000
        assert lease.lost_reason == "no renewal succeeded before the lease could expire"
