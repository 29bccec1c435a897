"""The asyncio client (`leased_client.aio`) against the real `leased` binary and a real
redis-server: the keepalive task holding a short lease, a busy lease, a lost lease (revoked), the
give-up race (100 give-ups with `cancel=` racing grants, the floor of test_give_up.py), giving up
by cancelling the task and by `timeout_s`, the reentrant and read-write locks per task, and Watch
as an async iterator. Each test runs its own event loop (`asyncio.run`) against the module's stack.

Run by clients/python/test.sh, against the installed package.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import AsyncIterator, Awaitable, Callable

import pytest

from leased_stack import Stack
from test_give_up import RACE_HIT, RACE_HIT_AT_LEAST, RACE_TRIES, SETTLE_S

from leased_client import AcquireCancelled, AcquireTimeout, LeaseBusy, NotGranted, WatchEvent
from leased_client.aio import Lease, LeaseClient

RACE_AT_ONCE = 10  # tries run side by side, each on its own lease name, as in test_give_up.py


@contextlib.asynccontextmanager
async def aio_clients(stack: Stack, count: int = 2) -> AsyncIterator[list[LeaseClient]]:
    """`count` independent clients (channels), as as many processes of a fleet would have."""
    clients = [LeaseClient(stack.target) for _ in range(count)]
    try:
        yield clients
    finally:
        for client in clients:
            await client.close()


def run(stack: Stack, test: Callable[[list[LeaseClient]], Awaitable[None]]) -> None:
    async def main() -> None:
        async with aio_clients(stack) as clients:
            await test(clients)

    asyncio.run(main())


def test_the_keepalive_task_holds_a_short_lease_until_it_is_released(stack: Stack) -> None:
    async def test(clients: list[LeaseClient]) -> None:
        holder, observer = clients
        lease = await holder.acquire("aio-keepalive", ttl_ms=600, wait_ms=5_000, holder="h")
        assert isinstance(lease, Lease)
        async with lease:
            # Five TTLs: only the keepalive can keep the lease alive that long.
            held_until = time.monotonic() + 3.0
            while time.monotonic() < held_until:
                info = await observer.describe("aio-keepalive")
                assert (info.held, info.fencing_token) == (True, lease.fencing_token)
                assert not lease.lost.is_set(), lease.lost_reason
                await asyncio.sleep(0.2)
        assert not (await observer.describe("aio-keepalive")).held
        assert await lease.release() is False, "a second release is a no-op"
        assert not lease.lost.is_set()

    run(stack, test)


def test_a_busy_lease_is_not_granted_and_a_waiter_gets_it_with_a_larger_token(
    stack: Stack,
) -> None:
    async def test(clients: list[LeaseClient]) -> None:
        first_client, waiter_client = clients
        first = await first_client.acquire("aio-busy", ttl_ms=10_000, holder="first")
        assert isinstance(first, Lease)
        busy = await waiter_client.acquire("aio-busy", ttl_ms=10_000, holder="second")
        assert isinstance(busy, NotGranted)
        assert (busy.holder, busy.fencing_token) == ("first", first.fencing_token)

        seen: list[NotGranted] = []
        waiting = asyncio.ensure_future(waiter_client.acquire(
            "aio-busy", ttl_ms=10_000, wait_ms=20_000, holder="waiter", on_waiting=seen.append))
        while not seen:
            await asyncio.sleep(0.02)
        assert await first.release() is True
        second = await waiting
        assert isinstance(second, Lease)
        assert second.fencing_token > first.fencing_token
        await second.release()

    run(stack, test)


def test_a_revoked_lease_is_lost_at_the_next_renewal(stack: Stack) -> None:
    async def test(clients: list[LeaseClient]) -> None:
        holder, operator = clients
        lease = await holder.acquire("aio-lost", ttl_ms=900, holder="h")
        assert isinstance(lease, Lease)
        assert await operator.revoke("aio-lost", "test") == lease.fencing_token
        # The keepalive renews every 300 ms; its renewal answers lost.
        await asyncio.wait_for(lease.lost.wait(), timeout=5)
        assert lease.lost_reason is not None and "revoked" in lease.lost_reason
        assert await lease.release() is False, "nothing left to release"

    run(stack, test)


async def give_up_racing_a_grant(holder_client: LeaseClient, waiter_client: LeaseClient,
                                 name: str) -> tuple[str, bool]:
    """H holds `name`; W waits for it; then H releases and W gives up (`cancel` set) the moment
    the Release answered, so that the server's grant to W races W's give-up. What happened to W,
    and whether anyone still held `name` once W's give-up was over."""
    held = await holder_client.acquire(name, ttl_ms=30_000, holder="H")
    assert isinstance(held, Lease)
    queued, cancel = asyncio.Event(), asyncio.Event()
    waiter = asyncio.ensure_future(waiter_client.acquire(
        name, ttl_ms=30_000, wait_ms=30_000, holder="W", cancel=cancel,
        on_waiting=lambda _: queued.set()))
    await asyncio.wait_for(queued.wait(), timeout=10)
    await held.release()
    cancel.set()
    gave_up_at = time.monotonic()
    try:
        value: object = await asyncio.wait_for(waiter, timeout=10)
    except AcquireCancelled as error:
        value = error
    if isinstance(value, Lease):
        outcome = "granted before the give-up was seen"
        await value.release()
    elif isinstance(value, AcquireCancelled):
        answered_after_s = time.monotonic() - gave_up_at
        assert answered_after_s < 0.5, f"acquire answered the give-up after {answered_after_s} s"
        released = await asyncio.wait_for(value.released, timeout=10)
        assert released is not None, "the give-up's Release failed"
        outcome = RACE_HIT if released else "nothing held at the give-up"
    else:
        raise AssertionError(f"acquire answered {value!r}")
    await asyncio.sleep(SETTLE_S)
    return outcome, (await holder_client.describe(name)).held


def test_give_ups_racing_grants_leave_no_lease_held(stack: Stack) -> None:
    async def test(clients: list[LeaseClient]) -> None:
        holder_client, waiter_client = clients
        names = [f"aio-race-{i}" for i in range(RACE_TRIES)]
        at_once = asyncio.Semaphore(RACE_AT_ONCE)

        async def one(name: str) -> tuple[str, bool]:
            async with at_once:
                return await give_up_racing_a_grant(holder_client, waiter_client, name)

        results = await asyncio.gather(*(one(name) for name in names))
        outcomes = Counter(outcome for outcome, _ in results)
        still_held = [name for name, (_, held) in zip(names, results) if held]
        print(f"\n{RACE_TRIES} asyncio give-ups racing grants: {dict(outcomes)}; "
              f"orphans (left held): {len(still_held)}/{RACE_TRIES}")
        assert still_held == [], f"held after W gave up: {still_held}; outcomes {dict(outcomes)}"
        assert outcomes[RACE_HIT] >= RACE_HIT_AT_LEAST, (
            f"only {outcomes[RACE_HIT]} of {RACE_TRIES} give-ups hit the race: "
            f"nothing-left-held shows nothing; outcomes {dict(outcomes)}")

    run(stack, test)


def test_cancelling_the_task_and_timing_out_give_up_and_release_by_id(stack: Stack) -> None:
    async def test(clients: list[LeaseClient]) -> None:
        holder_client, waiter_client = clients
        held = await holder_client.acquire("aio-give-up", ttl_ms=30_000, holder="H")
        assert isinstance(held, Lease)

        with pytest.raises(AcquireTimeout) as timed_out:
            await waiter_client.acquire("aio-give-up", ttl_ms=30_000, wait_ms=30_000,
                                        holder="W", timeout_s=0.3)
        assert await asyncio.wait_for(timed_out.value.released, 10) is False, "nothing granted"

        queued = asyncio.Event()
        waiter = asyncio.ensure_future(waiter_client.acquire(
            "aio-give-up", ttl_ms=30_000, wait_ms=30_000, holder="W",
            on_waiting=lambda _: queued.set()))
        await asyncio.wait_for(queued.wait(), 10)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        # W left the line (once the server saw the cancel): H's release leaves the name free.
        deadline = time.monotonic() + 5
        while (await holder_client.describe("aio-give-up")).waiters:
            assert time.monotonic() < deadline, "the cancelled waiter stayed in line"
            await asyncio.sleep(0.02)
        await held.release()
        await asyncio.sleep(SETTLE_S)
        assert not (await holder_client.describe("aio-give-up")).held

    run(stack, test)


def test_reentrant_and_read_write_locks_are_per_task(stack: Stack) -> None:
    async def test(clients: list[LeaseClient]) -> None:
        mine, other = clients
        lock = mine.lock("aio-lock", ttl_ms=5_000)
        async with lock as outer:
            async with lock as inner:  # the same task: no round trip, the same lease
                assert inner.lease is outer.lease and lock.held_levels() == 2
            assert lock.held_levels() == 1 and (await mine.describe("aio-lock")).held

            async def in_another_task() -> None:
                with pytest.raises(LeaseBusy):
                    async with lock:
                        pass

            await asyncio.ensure_future(in_another_task())  # another task is another owner
        assert not (await mine.describe("aio-lock")).held

        rw, theirs = mine.rw_lock("aio-rw", ttl_ms=5_000), other.rw_lock("aio-rw", ttl_ms=5_000)
        async with rw.read() as reader, theirs.read() as other_reader:  # readers share
            assert reader.shared and other_reader.shared
            with pytest.raises(RuntimeError, match="no upgrade or downgrade"):
                await rw.write().acquire()
            # Another task (another owner) asking for the write lock finds the readers.
            writing = asyncio.ensure_future(theirs.write().acquire(wait_ms=0))
            assert isinstance(await writing, NotGranted)
        async with rw.write() as writer:
            assert not writer.shared and writer.fencing_token > reader.fencing_token

    run(stack, test)


def test_watch_is_an_async_iterator_of_changes(stack: Stack) -> None:
    async def test(clients: list[LeaseClient]) -> None:
        holder, watcher = clients
        events: list[WatchEvent] = []
        watch = watcher.watch("aio-watch")

        async def follow() -> None:
            async for event in watch:
                events.append(event)

        following = asyncio.ensure_future(follow())
        while not events:
            await asyncio.sleep(0.02)
        lease = await holder.acquire("aio-watch", ttl_ms=5_000, holder="h")
        assert isinstance(lease, Lease)
        await lease.release()
        while len(events) < 3:
            await asyncio.sleep(0.02)
        watch.close()
        await asyncio.wait_for(following, 5)  # ends quietly once closed
        assert [e.cause for e in events] == ["snapshot", "granted", "released"]
        current = events[1].current_holder
        assert current is not None
        assert (current.holder, current.fencing_token) == ("h", lease.fencing_token)
        check = await watcher.check_token("aio-watch", lease.fencing_token)
        assert (check.current, check.held) == (False, False)

    run(stack, test)
