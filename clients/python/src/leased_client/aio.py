"""The asyncio client of leased, on `grpc.aio`: the blocking client's rules (`leased_client`), with
tasks where that one has threads.

    async with LeaseClient("127.0.0.1:50051") as client:
        result = await client.acquire("nightly-report", ttl_ms=15_000, wait_ms=60_000)
        if isinstance(result, NotGranted):
            print("busy, held by", result.holder)
        else:
            async with result as lease:            # renewed by a task, released on exit
                while not lease.lost.is_set():     # an asyncio.Event
                    await storage.write(..., fencing_token=lease.fencing_token)

Giving up a wait is cancelling the task that awaits `acquire` (or `asyncio.wait_for` around
it), or `timeout_s=`, which raises `AcquireTimeout`: either way the call is cancelled at once and
the acquisition's own lease id released by a background task, so that a grant that crossed the
give-up is never left held until its TTL. `close()` waits for those Releases.

`lock(...)` is a reentrant lock per asyncio task (`async with lock as hold:`), `rw_lock(...)` a
read-write lock over shared grants, and `watch(name)` an async iterator of `WatchEvent`s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional

import grpc
import grpc.aio

from ._common import (
    ACQUIRE_RETRIES,
    GIVE_UP_RELEASE_TIMEOUT_S,
    NO_RENEWAL,
    AcquireCancelled,
    AcquireState,
    AcquireTimeout,
    Holding,
    LeaseBusy,
    LeaseInfo,
    ListPage,
    LockHoldBase,
    ReadWriteLockBase,
    ReentrantLockBase,
    NotGranted,
    RenewError,
    TokenCheck,
    Trust,
    WatchEvent,
    acquire_request,
    check_timeout,
    describe_error,
    fencing_metadata,
    lease_info,
    list_page,
    new_lease_id,
    not_granted,
    not_granted_now,
    refused,
    retry_backoff_s,
    retryable,
    status,
    token_check,
    watch_event,
)
from ._proto.lease.v1 import lease_pb2 as pb
from ._stubs import AioLeaseStub

__all__ = ["Lease", "LeaseClient", "LockHold", "ReadWriteLock", "ReentrantLock", "Watch"]

logger = logging.getLogger("leased_client.aio")

if TYPE_CHECKING:  # the grpc.aio call classes are generic only in typeshed's stubs
    _AcquireCall = grpc.aio.UnaryStreamCall[pb.AcquireRequest, pb.AcquireResponse]


class _Attempt:
    """The acquisition in progress: its lease id, the call of the current attempt, the retries."""

    def __init__(self, name: str) -> None:
        self.lease_id = new_lease_id()
        self.call: Optional[_AcquireCall] = None
        self.state = AcquireState(name)
        self.retries = 0


class LeaseClient:
    """A connection to a leased server, for one event loop. `rpc_timeout_s` bounds every call that
    should answer quickly (Release, Describe, each renewal, and Acquire beyond its `wait_ms`)."""

    def __init__(self, target: str, *, rpc_timeout_s: float = 5.0) -> None:
        self._channel = grpc.aio.insecure_channel(target)
        self._stub = AioLeaseStub(self._channel)
        self._rpc_timeout_s = rpc_timeout_s
        # The Releases of acquisitions given up, which `close()` waits for. Kept here also because
        # the event loop holds only weak references to tasks.
        self._give_ups: set[asyncio.Task[Optional[bool]]] = set()

    async def acquire(
        self,
        name: str,
        ttl_ms: int,
        wait_ms: int = 0,
        holder: str = "",
        *,
        limit: int = 0,
        shared: bool = False,
        lock_delay_ms: int = 0,
        keepalive: bool = True,
        safety_margin_ms: Optional[int] = None,
        on_waiting: Optional[Callable[[NotGranted], None]] = None,
        cancel: Optional[asyncio.Event] = None,
        timeout_s: Optional[float] = None,
    ) -> Lease | NotGranted:
        """Asks for `name`, waiting up to `wait_ms` if it is busy: `leased_client.LeaseClient.
        acquire`'s arguments, answers, retries and errors, with the give-up of asyncio. Setting
        `cancel` raises `AcquireCancelled`, `timeout_s` passing raises `AcquireTimeout` (whose
        `released` is an asyncio task), and cancelling the awaiting task raises
        `asyncio.CancelledError`: each cancels the call at once and releases the lease id behind
        it. The `Lease` renews on a task of this event loop."""
        check_timeout(timeout_s)
        requested_at = time.monotonic()
        attempt = _Attempt(name)
        attempts = asyncio.ensure_future(self._attempts(
            attempt, requested_at, on_waiting, name=name, holder=holder, ttl_ms=ttl_ms,
            wait_ms=wait_ms, limit=limit, lock_delay_ms=lock_delay_ms, shared=shared,
        ))
        # An outcome nobody reads once the caller gave up: retrieve it, so asyncio logs nothing.
        attempts.add_done_callback(lambda task: task.cancelled() or task.exception())
        try:
            outcome = await _unless_given_up(attempts, cancel, timeout_s)
        except _GaveUp as gave_up:
            released = self._give_up(attempt)
            raise (
                AcquireTimeout(name, released) if gave_up.timed_out
                else AcquireCancelled(name, released)
            ) from None
        except BaseException as error:
            # Cancelled, or failed with the outcome unknown: unless the server refused the first
            # attempt, a grant may exist.
            attempts.cancel()
            if not refused(error, attempt.retries):
                self._give_up(attempt)
            raise
        if isinstance(outcome, pb.NotGranted):
            return not_granted(name, outcome)

        lease = Lease(
            self._stub, outcome, requested_at=requested_at, safety_margin_ms=safety_margin_ms,
            rpc_timeout_s=self._rpc_timeout_s, shared=shared,
        )
        if lease._trust.waited_long(requested_at, time.monotonic()):
            # A long wait: "a TTL after the request" may be nearly over although the grant is
            # fresh. Renew once and trust the lease from that renewal instead.
            try:
                confirmed = await lease._renew(self._rpc_timeout_s)
            except BaseException:
                await lease._discard()  # never leave a grant unguarded and unreleased
                raise
            if not confirmed:
                return not_granted_now(await self.describe(name))
        if keepalive:
            lease.start_keepalive()
        return lease

    async def _attempts(
        self,
        attempt: _Attempt,
        requested_at: float,
        on_waiting: Optional[Callable[[NotGranted], None]],
        *,
        name: str,
        holder: str,
        ttl_ms: int,
        wait_ms: int,
        limit: int,
        lock_delay_ms: int,
        shared: bool,
    ) -> pb.Granted | pb.NotGranted:
        """Sends the Acquire, and again with the same id after UNAVAILABLE or a stream that ended
        without an answer, up to `ACQUIRE_RETRIES` times; the terminal message."""
        wait_ends_at = requested_at + wait_ms / 1000
        while True:
            request = acquire_request(
                name, holder, ttl_ms, wait_ms, wait_ends_at, time.monotonic(),
                limit=limit, lock_delay_ms=lock_delay_ms, shared=shared, lease_id=attempt.lease_id,
            )
            attempt.state = AcquireState(name)
            # The gRPC deadline is only a backstop against a server that stops answering.
            attempt.call = self._stub.Acquire(
                request, timeout=request.wait_ms / 1000 + self._rpc_timeout_s
            )
            try:
                return await _read_outcome(attempt.call, attempt.state, on_waiting)
            except Exception as error:
                if not retryable(error) or attempt.retries == ACQUIRE_RETRIES:
                    raise
                attempt.retries += 1
                logger.info(
                    "Acquire of %r failed (%s): retry %d of %d with the same lease id",
                    name, describe_error(error), attempt.retries, ACQUIRE_RETRIES,
                )
                await asyncio.sleep(retry_backoff_s(attempt.retries))

    def _give_up(self, attempt: _Attempt) -> asyncio.Future[Optional[bool]]:
        """Cancels the call at once, then releases the lease id on a task: a grant that crossed
        the give-up is ended whichever way the race went. The task's result is Release's answer,
        or None if the Release failed; `close()` waits for it."""
        if attempt.call is not None:
            attempt.call.cancel()
            if isinstance(attempt.state.terminal, pb.NotGranted):
                # The server never answers `not_granted` to an id that holds the name.
                nothing: asyncio.Future[Optional[bool]] = asyncio.get_running_loop().create_future()
                nothing.set_result(False)
                return nothing
        task = asyncio.get_running_loop().create_task(
            self._release_given_up(attempt.state.name, attempt.lease_id)
        )
        self._give_ups.add(task)
        task.add_done_callback(self._give_ups.discard)
        return task

    async def _release_given_up(self, name: str, lease_id: str) -> Optional[bool]:
        """The Release of a give-up. Best effort: a failure is logged, never raised."""
        try:
            answer = await self._stub.Release(
                pb.ReleaseRequest(name=name, lease_id=lease_id),
                timeout=min(GIVE_UP_RELEASE_TIMEOUT_S, self._rpc_timeout_s),
            )
        except Exception as error:  # grpc.aio.AioRpcError, or a closed channel
            logger.warning(
                "releasing lease %r after its caller gave up failed (%s): if it was granted, it "
                "stays held until its TTL", name, describe_error(error),
            )
            return None
        if answer.released:
            logger.info("lease %r was granted as its caller gave up: released", name)
        return answer.released

    def lock(
        self, name: str, ttl_ms: int, wait_ms: int = 0, holder: str = "", *,
        lock_delay_ms: int = 0, safety_margin_ms: Optional[int] = None,
    ) -> ReentrantLock:
        """A reentrant lock over the exclusive lease `name`, per asyncio task: `async with lock as
        hold:` acquires (`LeaseBusy` if it stays busy for `wait_ms`); the same task entering it
        again inside costs no round trip."""
        return ReentrantLock(
            self, name, ttl_ms, wait_ms, holder,
            lock_delay_ms=lock_delay_ms, safety_margin_ms=safety_margin_ms,
        )

    def rw_lock(
        self, name: str, ttl_ms: int, wait_ms: int = 0, holder: str = "", *,
        lock_delay_ms: int = 0, safety_margin_ms: Optional[int] = None,
    ) -> ReadWriteLock:
        """A read-write lock over `name`: `async with rw.read() as hold:` beside other readers,
        `async with rw.write() as hold:` alone."""
        read, write = (
            ReentrantLock(self, name, ttl_ms, wait_ms, holder, shared=shared,
                          lock_delay_ms=lock_delay_ms, safety_margin_ms=safety_margin_ms)
            for shared in (True, False)
        )
        return ReadWriteLock(read, write)

    async def describe(self, name: str) -> LeaseInfo:
        """Who holds `name` now (every holder of a counting lease), as anyone may ask."""
        answer = await self._stub.Describe(
            pb.DescribeRequest(name=name), timeout=self._rpc_timeout_s
        )
        return lease_info(name, answer)

    def watch(self, name: str) -> Watch:
        """Follows who holds `name`: `async for event in client.watch(name)`, a snapshot first,
        then one `WatchEvent` per change of holder. It never ends on its own: it raises
        `grpc.aio.AioRpcError` when the server refuses or ends the watch (watching again is safe);
        `Watch.close()` or leaving its `async with` block stops it."""
        return Watch(self._stub.Watch(pb.WatchRequest(name=name)))

    async def check_token(self, name: str, fencing_token: int) -> TokenCheck:
        """Whether `fencing_token` is the token of a grant that holds `name` now."""
        answer = await self._stub.CheckToken(
            pb.CheckTokenRequest(name=name, fencing_token=fencing_token),
            timeout=self._rpc_timeout_s,
        )
        return token_check(answer)

    async def list_page(
        self, prefix: str = "", *, page_size: int = 0, page_token: Optional[str] = None
    ) -> ListPage:
        """One page of the leases held now whose names start with `prefix` (LeaseAdminService)."""
        answer = await self._stub.List(
            pb.ListRequest(prefix=prefix, page_size=page_size, page_token=page_token or ""),
            timeout=self._rpc_timeout_s,
        )
        return list_page(answer)

    async def list(self, prefix: str = "", *, page_size: int = 0) -> AsyncIterator[LeaseInfo]:
        """Every lease held now whose name starts with `prefix`, page after page."""
        page_token: Optional[str] = None
        while True:
            page = await self.list_page(prefix, page_size=page_size, page_token=page_token)
            for lease in page.leases:
                yield lease
            if page.next_page_token is None:
                return
            page_token = page.next_page_token

    async def revoke(self, name: str, reason: str, fencing_token: int = 0) -> Optional[int]:
        """Ends the lease `name` at once (LeaseAdminService); the token revoked, or None."""
        answer = await self._stub.Revoke(
            pb.RevokeRequest(name=name, reason=reason, fencing_token=fencing_token),
            timeout=self._rpc_timeout_s,
        )
        return answer.fencing_token if answer.revoked else None

    async def close(self) -> None:
        """Waits for the Releases of acquisitions given up (each bounded by
        `GIVE_UP_RELEASE_TIMEOUT_S`), then closes the channel; leases still held stop renewing
        and expire at their TTL."""
        if self._give_ups:
            await asyncio.gather(*self._give_ups, return_exceptions=True)
        await self._channel.close()

    async def __aenter__(self) -> LeaseClient:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()


class _GaveUp(Exception):
    """Internal: the caller's `cancel` event was set, or its `timeout_s` passed."""

    def __init__(self, timed_out: bool) -> None:
        super().__init__()
        self.timed_out = timed_out


async def _unless_given_up(
    attempts: asyncio.Future[pb.Granted | pb.NotGranted],
    cancel: Optional[asyncio.Event],
    timeout_s: Optional[float],
) -> pb.Granted | pb.NotGranted:
    """The outcome of `attempts`, unless `cancel` is set or `timeout_s` passes first (`_GaveUp`,
    with `attempts` cancelled). A `cancel` set by the time the outcome is there wins too: a
    caller who gave up before `acquire` returned never gets the lease."""
    cancelled = None if cancel is None else asyncio.ensure_future(cancel.wait())
    waiters: set[asyncio.Future[Any]] = {attempts} if cancelled is None else {attempts, cancelled}
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if cancelled is not None:
            cancelled.cancel()
    if cancel is not None and cancel.is_set():
        attempts.cancel()
        raise _GaveUp(timed_out=False)
    if not attempts.done():
        attempts.cancel()
        raise _GaveUp(timed_out=True)
    return attempts.result()


async def _read_outcome(
    call: _AcquireCall, state: AcquireState, on_waiting: Optional[Callable[[NotGranted], None]]
) -> pb.Granted | pb.NotGranted:
    """Reads an Acquire call to its end (so that it finishes OK rather than cancelled, which the
    server could take for a waiter that gave up) and returns its terminal message."""
    try:
        async for response in call:
            state.take(response, on_waiting)
    except grpc.RpcError:
        if state.terminal is None:
            raise
        # The answer was read: a connection lost after it changes nothing.
    return state.outcome()


class Watch:
    """The events of one `LeaseClient.watch`: `async for event in watch` (once). `close()`
    cancels it; iteration then ends quietly."""

    def __init__(self, call: grpc.aio.UnaryStreamCall[pb.WatchRequest, pb.WatchEvent]) -> None:
        self._call = call
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[WatchEvent]:
        try:
            async for event in self._call:
                yield watch_event(event)
        except (grpc.RpcError, asyncio.CancelledError) as error:
            # grpc.aio ends an iteration cancelled by `close()` with CancelledError.
            if self._closed and (
                isinstance(error, asyncio.CancelledError)
                or status(error) == grpc.StatusCode.CANCELLED
            ):
                return
            raise
        if not self._closed:
            # The server never ends a watch with OK: silence must not pass for "no change".
            raise RuntimeError("the server ended the Watch stream")

    def close(self) -> None:
        self._closed = True
        self._call.cancel()

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class Lease:
    """One held lease, guarded as the blocking `leased_client.Lease` is: a task renews it over one
    Renew stream a third of its TTL after the last successful renewal was sent; `lost` (an
    `asyncio.Event`) is set, for good, when a renewal answers `lost` or when no renewal has
    succeeded for the TTL minus a safety margin, counted from when that renewal was sent. Check
    `lost` before each piece of protected work and pass `fencing_token` with every write."""

    def __init__(
        self,
        stub: AioLeaseStub,
        granted: pb.Granted,
        *,
        requested_at: float,
        safety_margin_ms: Optional[int],
        rpc_timeout_s: float,
        shared: bool = False,
    ) -> None:
        self.name: str = granted.name
        self.lease_id: str = granted.lease_id
        self.fencing_token: int = granted.fencing_token
        self.shared = shared
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._trust = Trust(granted.ttl_ms, safety_margin_ms, requested_at)
        self._stub = stub
        self._rpc_timeout_s = rpc_timeout_s
        # One renewal at a time on the stream.
        self._renew_lock = asyncio.Lock()
        self._stream: Optional[_RenewStream] = None
        self._released = False
        self._keepalive: Optional[asyncio.Task[None]] = None

    @property
    def ttl_ms(self) -> int:
        """The TTL in force: the granted one, then the last renewal's."""
        return self._trust.ttl_ms

    def trusted_for_s(self) -> float:
        """Seconds for which the lease is certainly still ours (negative once that has passed)."""
        return self._trust.until - time.monotonic()

    def fencing_metadata(self) -> list[tuple[str, str]]:
        """The lease's name and fencing token as the metadata pairs a fenced gRPC service reads
        (`leased-lease-name`, `leased-fencing-token`), for a call's `metadata=`:
        `stub.Put(request, metadata=lease.fencing_metadata())`."""
        return fencing_metadata(self.name, self.fencing_token)

    def renew_period_s(self) -> float:
        return self._trust.renew_period_s()

    def start_keepalive(self) -> None:
        """Starts the renewals on a task (`acquire` does this unless asked not to)."""
        if self._keepalive is None:
            self._keepalive = asyncio.get_running_loop().create_task(
                self._run_keepalive(), name=f"leased-keepalive-{self.name}"
            )

    async def renew(self) -> bool:
        """Renews once, now: True if extended; False if the renewal failed (logged), if the lease
        was released, or if it is gone (`lost` is set)."""
        try:
            return await self._renew(self._rpc_timeout_s)
        except _RENEW_ERRORS as error:
            self._log_renew_error(error)
            return False

    async def release(self) -> bool:
        """Stops the keepalive and releases the lease. True if this call ended the lease; False
        if it was no longer ours or was already released. Idempotent."""
        if self._released:
            return False
        self._released = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)
        self._close_stream()
        answer = await self._stub.Release(
            pb.ReleaseRequest(name=self.name, lease_id=self.lease_id), timeout=self._rpc_timeout_s
        )
        return answer.released

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.release()

    def __repr__(self) -> str:
        # Never show the lease_id: it is the holder's secret.
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        mode = ", shared" if self.shared else ""
        return f"Lease(name={self.name!r}, fencing_token={self.fencing_token}{mode}, {state})"

    def _holds(self) -> bool:
        return not self.lost.is_set() and not self._released

    async def _discard(self) -> None:
        """Releases a lease that `acquire` will not hand out; best effort (it expires anyway)."""
        try:
            await self.release()
        except Exception as error:
            logger.warning(
                "releasing lease %r (token %d) failed: %s; it stays held until its TTL",
                self.name, self.fencing_token, describe_error(error),
            )

    async def _run_keepalive(self) -> None:
        """The keepalive task. If it dies of anything but its cancellation, `lost` is set first:
        a holder whose lease nobody renews any more must not go on trusting it."""
        try:
            await self._keep_renewing()
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            self._mark_lost(f"keepalive failed: {error!r}")
            raise

    async def _keep_renewing(self) -> None:
        """Renews on the trust's schedule and sets `lost` at the trust deadline if no renewal
        succeeded by then, also while a renewal is in flight: none waits past the deadline."""
        next_renewal = self._trust.next_renewal()
        while True:
            # The deadline comes first when both are due: a renewal sent now could not help.
            wake_at = min(next_renewal, self._trust.until)
            await asyncio.sleep(max(0.0, wake_at - time.monotonic()))
            trusted_for_s = self.trusted_for_s()
            if trusted_for_s <= 0:
                self._mark_lost(NO_RENEWAL)
                return
            try:
                renewed = await self._renew(
                    timeout_s=min(trusted_for_s, self._rpc_timeout_s), lock_timeout_s=trusted_for_s
                )
            except _RENEW_ERRORS as error:
                self._log_renew_error(error)
                renewed = False
            if self.lost.is_set() or self._released:
                return
            if renewed:
                next_renewal = self._trust.next_renewal()
            else:
                next_renewal = time.monotonic() + self._trust.retry_delay_s()

    async def _renew(self, timeout_s: float, lock_timeout_s: Optional[float] = None) -> bool:
        """One renewal over the Renew stream, opened if needed: True if renewed (the trust now
        counts from when it was sent); False if released, another renewal still in flight after
        `lock_timeout_s`, or gone (`lost` is set). Raises if no answer came within `timeout_s`;
        the stream is dropped then, so that a late answer is never taken for a later one's."""
        try:
            await asyncio.wait_for(self._renew_lock.acquire(), lock_timeout_s)
        except asyncio.TimeoutError:
            return False
        try:
            if self._released or self.lost.is_set():
                return False
            sent_at = time.monotonic()
            request = pb.RenewRequest(name=self.name, lease_id=self.lease_id, ttl_ms=0)
            try:
                if self._stream is None:
                    self._stream = _RenewStream(self._stub)
                response = await self._stream.renew(request, timeout_s)
            except _RENEW_ERRORS:
                self._close_stream()
                raise
            if response.WhichOneof("result") == "lost":
                self._close_stream()
                self._mark_lost(response.lost.reason)
                return False
            if self.lost.is_set():
                return False  # the deadline passed while we waited: never trusted again
            if self._keepalive is None or time.monotonic() < self._trust.until:
                self._trust.credit(sent_at, response.renewed.ttl_ms)
                return True
            # Answered too late: a loss is never taken back.
            self._mark_lost(NO_RENEWAL)
            return False
        finally:
            self._renew_lock.release()

    def _mark_lost(self, reason: str) -> None:
        """Records why the lease is gone and sets `lost` (once: the first reason stays)."""
        if self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        logger.warning("lease %r (token %d) lost: %s", self.name, self.fencing_token, reason)

    def _log_renew_error(self, error: BaseException) -> None:
        if not self._released:  # else release() cancelled the stream on purpose
            logger.warning("renewing lease %r failed: %s", self.name, describe_error(error))

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class _RenewStream:
    """One bidi Renew call: a request written, its answer read (the server answers in order)."""

    def __init__(self, stub: AioLeaseStub) -> None:
        self._call = stub.Renew()

    async def renew(self, request: pb.RenewRequest, timeout_s: float) -> pb.RenewResponse:
        async def round_trip() -> pb.RenewResponse:
            await self._call.write(request)
            answer = await self._call.read()
            if answer is grpc.aio.EOF or not isinstance(answer, pb.RenewResponse):
                raise RenewError("the server ended the Renew stream")
            return answer

        try:
            return await asyncio.wait_for(round_trip(), max(timeout_s, 0.0))
        except asyncio.TimeoutError:
            raise RenewError(f"no answer within {timeout_s:.3f} s") from None

    def close(self) -> None:
        self._call.cancel()


# What a renewal raises when it gets no answer (an error status, none in time, a closed channel).
_RENEW_ERRORS = (grpc.RpcError, RenewError, grpc.aio.UsageError, asyncio.InvalidStateError)


class ReentrantLock(ReentrantLockBase["LeaseClient", "Lease"]):
    """A lease as a reentrant lock owned per asyncio task (`LeaseClient.lock`, and the two locks
    of a `ReadWriteLock`): the blocking `leased_client.ReentrantLock` with tasks for threads.
    A task's first acquire asks the server; while that lease holds, the same task acquiring again
    gets a new level at once; the last level's release releases the lease. Another task is
    another owner, which waits in line at the server. A loss ends every level."""

    def _owner(self) -> object:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a reentrant lock of leased_client.aio is used from a task")
        return task

    async def acquire(
        self,
        wait_ms: Optional[int] = None,
        *,
        on_waiting: Optional[Callable[[NotGranted], None]] = None,
        timeout_s: Optional[float] = None,
    ) -> LockHold | NotGranted:
        """A new level of the current task's lease, at once if it holds the lock, else from the
        server (`LeaseClient.acquire`'s waiting, give-up and errors). RuntimeError if the task
        holds the other mode of the same `ReadWriteLock` (no upgrade or downgrade)."""
        me = self._owner()
        holding = self._nest(me)
        if holding is not None:
            return LockHold(self, holding)
        result = await self._client.acquire(
            self.name, ttl_ms=self.ttl_ms, wait_ms=self.wait_ms if wait_ms is None else wait_ms,
            holder=self.holder, shared=self.shared, lock_delay_ms=self._lock_delay_ms,
            safety_margin_ms=self._safety_margin_ms, on_waiting=on_waiting, timeout_s=timeout_s,
        )
        if isinstance(result, NotGranted):
            return result
        return LockHold(self, self._book.add(me, result))

    async def __aenter__(self) -> LockHold:
        """Acquires a level with the lock's wait; raises `LeaseBusy` if the lease stayed busy."""
        result = await self.acquire()
        if isinstance(result, NotGranted):
            raise LeaseBusy(result)
        self._push_entered(self._owner(), result)
        return result

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        hold: LockHold = self._pop_entered(self._owner())
        await hold.release()

    async def _release_level(self, holding: Holding[Lease]) -> bool:
        return self._book.end_level(holding) and await holding.lease.release()


class LockHold(LockHoldBase["Lease"]):
    """One level of a `ReentrantLock` held: the lease's guard (`lost`, `lost_reason`,
    `fencing_token`, `trusted_for_s()`, `renew()`; `lease` is shared by every level), whose
    `release()` ends this level only."""

    def __init__(self, lock: ReentrantLock, holding: Holding[Lease]) -> None:
        super().__init__(holding)
        self._lock = lock

    @property
    def lost(self) -> asyncio.Event:
        """Set for good when the lease may be gone: for every level at once."""
        return self.lease.lost

    async def renew(self) -> bool:
        return await self.lease.renew()

    async def release(self) -> bool:
        """Ends this level (idempotent). The last level releases the lease: True if that ended
        it."""
        if self._released:
            return False
        self._released = True
        return await self._lock._release_level(self._holding)

    async def __aenter__(self) -> LockHold:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.release()


class ReadWriteLock(ReadWriteLockBase[ReentrantLock]):
    """A read-write lock over the lease `name` (`LeaseClient.rw_lock`): `read()` and `write()` are
    `ReentrantLock`s, reentrant per task; see `ReadWriteLockBase` for the rules."""
