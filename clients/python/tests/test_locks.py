"""The Python client's locks against the real `leased` binary and a real redis-server: the
reentrant lock (`LeaseClient.lock`: nested levels without a round trip, only the outermost
release releasing, a loss ending every level) and the read-write lock over shared grants
(`LeaseClient.rw_lock`). The stack and its fixtures are in leased_stack.py and conftest.py.

Run by clients/python/test.sh, against the installed package. Timing margins are generous: these
tests must pass on a loaded 2-core machine.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from leased_stack import Stack, recording, wait_until

from leased_client import (
    Lease,
    LeaseBusy,
    LeaseClient,
    LockHold,
    NotGranted,
)


def server_supports(feature: str) -> bool:
    """What $LEASED_BIN.features lists, when the binary comes with that file (a server built
    before `shared` cannot run the read-write tests)."""
    binary = os.environ.get("LEASED_BIN")
    features = Path(f"{binary}.features") if binary else None
    if features is None or not features.exists():
        return True
    return feature in features.read_text().split()


needs_shared = pytest.mark.skipif(not server_supports("shared"),
                                  reason="the server does not support shared grants")


# --- The reentrant lock ---------------------------------------------------------------------------


def test_a_nested_acquire_costs_no_round_trip_and_only_the_outermost_release_releases(
        clients) -> None:
    client, observer, _ = clients
    name = "py-reentrant"
    sent = recording(client)
    lock = client.lock(name, ttl_ms=10_000, wait_ms=5_000, holder="nested")
    outer = lock.acquire()
    assert isinstance(outer, LockHold)
    assert len(sent.acquires) == 1
    started = time.monotonic()
    with lock as inner:
        nested_s = time.monotonic() - started
        assert len(sent.acquires) == 1, "the nested acquire went to the server"
        assert inner.lease is outer.lease and inner.fencing_token == outer.fencing_token
        third = lock.acquire()
        assert isinstance(third, LockHold) and third.lease is outer.lease
        assert len(sent.acquires) == 1 and lock.held_levels() == 3
        assert third.release() is False, "an inner level released the lease"
        assert third.release() is False and lock.held_levels() == 2, "a level released twice"

        # Another thread is another owner: it asks the server, and waits in line.
        other: list[object] = []
        thread = threading.Thread(target=lambda: other.append(lock.acquire(wait_ms=0)))
        thread.start()
        thread.join(timeout=10)
        assert isinstance(other[0], NotGranted) and other[0].holder == "nested"
        assert len(sent.acquires) == 2
    print(f"\nnested acquire and release: {nested_s * 1e6:.0f} us, no Acquire sent")

    # The inner level ended; the lease is still held, by the same grant, and renewed.
    assert lock.held_levels() == 1
    info = observer.describe(name)
    assert (info.held, info.holder, info.fencing_token) == (True, "nested", outer.fencing_token)
    assert not outer.lost.is_set()
    assert outer.release() is True, "the outermost release did not release"
    assert outer.lease.release() is False, "the lease outlived its last level"
    assert observer.describe(name).held is False
    assert lock.held_levels() == 0


def test_with_a_busy_lock_raises_lease_busy(clients) -> None:
    holder_client, other_client, _ = clients
    name = "py-reentrant-busy"
    with holder_client.lock(name, ttl_ms=10_000, holder="first") as hold:
        with pytest.raises(LeaseBusy) as raised:
            with other_client.lock(name, ttl_ms=10_000, wait_ms=0):
                pass
        assert raised.value.not_granted.fencing_token == hold.fencing_token
    assert other_client.describe(name).held is False


def test_a_loss_ends_every_level(clients) -> None:
    client, observer, operator = clients
    name = "py-reentrant-lost"
    sent = recording(client)
    # A 1.5 s TTL: the keepalive renews every 0.5 s and learns of the revoke at its next renewal.
    lock = client.lock(name, ttl_ms=1_500, holder="revoked")
    outer = lock.acquire()
    inner = lock.acquire()
    assert isinstance(outer, LockHold) and isinstance(inner, LockHold)
    assert operator.revoke(name, "py reentrant test") == outer.fencing_token
    assert inner.lost.wait(timeout=10), "the nested level never saw the loss"
    assert outer.lost.is_set()
    assert inner.lost_reason == outer.lost_reason == "revoked: py reentrant test"
    assert lock.held_levels() == 0

    # The thread holds nothing now: its next acquire asks the server for a new lease.
    again = lock.acquire()
    assert isinstance(again, LockHold)
    assert len(sent.acquires) == 2
    assert again.lease is not outer.lease and again.fencing_token > outer.fencing_token
    # The lost levels release without touching the new lease.
    assert inner.release() is False
    assert outer.release() is False
    info = observer.describe(name)
    assert (info.held, info.fencing_token) == (True, again.fencing_token)
    assert again.release() is True
    assert observer.describe(name).held is False


# --- The read-write lock --------------------------------------------------------------------------


@needs_shared
def test_readers_share_a_writer_waits_for_them_and_a_reader_behind_it_waits_for_the_writer(
        stack: Stack, clients) -> None:
    a_client, b_client, writer_client = clients
    name = "py-rw"
    with LeaseClient(stack.target) as late_client, ThreadPoolExecutor(max_workers=2) as pool:
        reader_a = a_client.rw_lock(name, ttl_ms=10_000, holder="reader-a").read()
        reader_b = b_client.rw_lock(name, ttl_ms=10_000, holder="reader-b").read()
        writer = writer_client.rw_lock(name, ttl_ms=10_000, wait_ms=20_000, holder="writer").write()
        late_reader = late_client.rw_lock(name, ttl_ms=10_000, wait_ms=20_000,
                                          holder="late-reader").read()

        first, second = reader_a.acquire(), reader_b.acquire()
        assert isinstance(first, LockHold) and isinstance(second, LockHold), (first, second)
        assert first.shared and second.shared
        info = late_client.describe(name)
        assert [(h.holder, h.fencing_token, h.shared) for h in info.holders] == [
            ("reader-a", first.fencing_token, True), ("reader-b", second.fencing_token, True)]

        writing = pool.submit(writer.acquire)
        wait_until(lambda: late_client.describe(name).waiters == 1, 10, "the writer to queue")
        # A waiting writer holds back the readers that come after it, try-once ones too.
        busy = late_reader.acquire(wait_ms=0)
        assert isinstance(busy, NotGranted), busy
        reading = pool.submit(late_reader.acquire)
        wait_until(lambda: late_client.describe(name).waiters == 2, 10, "the late reader to queue")

        assert first.release() is True
        time.sleep(0.3)
        assert not writing.done(), "the writer was granted beside a reader"
        assert second.release() is True
        written = writing.result(timeout=10)
        assert isinstance(written, LockHold) and not written.shared
        assert written.fencing_token > second.fencing_token
        time.sleep(0.3)
        assert not reading.done(), "the late reader was granted beside the writer"
        info = late_client.describe(name)
        assert [(h.holder, h.shared) for h in info.holders] == [("writer", False)]
        assert info.waiters == 1

        assert written.release() is True
        read = reading.result(timeout=10)
        assert isinstance(read, LockHold) and read.shared
        assert read.fencing_token > written.fencing_token
        info = late_client.describe(name)
        assert [(h.holder, h.shared) for h in info.holders] == [("late-reader", True)]
        assert read.release() is True
    assert a_client.describe(name).held is False


@needs_shared
def test_no_upgrade_or_downgrade_and_each_mode_nests(clients) -> None:
    client, observer, _ = clients
    name = "py-rw-modes"
    sent = recording(client)
    rw = client.rw_lock(name, ttl_ms=10_000, holder="one-thread")
    with rw.read() as reading:
        with pytest.raises(RuntimeError, match="no upgrade or downgrade"):
            rw.write().acquire(wait_ms=1_000)
        with rw.read() as nested:
            assert nested.lease is reading.lease
        assert len(sent.acquires) == 1
        assert observer.describe(name).holders[0].shared is True
    with rw.write() as writing:
        with pytest.raises(RuntimeError, match="release the write lock"):
            rw.read().acquire()
        assert observer.describe(name).holders[0].shared is False
        assert not writing.shared
    assert observer.describe(name).held is False


@needs_shared
def test_shared_with_a_limit_is_invalid(clients) -> None:
    client, _, _ = clients
    with pytest.raises(grpc.RpcError) as raised:
        client.acquire("py-rw-limit", ttl_ms=1_000, shared=True, limit=2)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "shared" in raised.value.details()


@needs_shared
def test_a_shared_lease_from_acquire(clients) -> None:
    first_client, second_client, _ = clients
    name = "py-rw-acquire"
    first = first_client.acquire(name, ttl_ms=10_000, shared=True, holder="r1")
    second = second_client.acquire(name, ttl_ms=10_000, shared=True, holder="r2")
    assert isinstance(first, Lease) and isinstance(second, Lease)
    assert first.shared and "shared" in repr(first)
    busy = second_client.acquire(name, ttl_ms=10_000, holder="w")
    assert isinstance(busy, NotGranted) and busy.held == 2
    assert first.release() is True and second.release() is True
