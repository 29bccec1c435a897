"""The blocking client: `leased_client.LeaseClient` and what it hands out (`Lease`, the reentrant
and read-write locks, `Watch`). Each `Lease` renews on a keepalive thread; `acquire` waits on the
caller's thread. The asyncio client (`leased_client.aio`) follows the same rules with the same
policy (`_common.py`).

    client = LeaseClient("127.0.0.1:50051")
    result = client.acquire("nightly-report", ttl_ms=15_000, wait_ms=60_000, holder="host-a/pid-42")
    if isinstance(result, NotGranted):
        print("busy, held by", result.holder)
    else:
        with result as lease:                     # renews in the background, releases on exit
            while not lease.lost.is_set():        # stop the moment the lease may be gone
                storage.write(..., fencing_token=lease.fencing_token)

Every acquisition sends a lease id of its own (`new_lease_id()`), which makes it safe to retry
and to give up: an Acquire that ends UNAVAILABLE, or whose stream ends without an answer, is sent
again with the same id (`ACQUIRE_RETRIES` times), and the server answers a grant it already made
to that id again. A caller gives up a wait with `acquire(..., cancel=event)` (a
`threading.Event`, set from any thread) or `timeout_s=`: `acquire` raises `AcquireCancelled`
(`AcquireTimeout`) at once, cancels the call, and then releases the id in the background, so that
a grant that crossed the give-up is never left held until its TTL.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Callable, Iterator, Optional, Protocol

import grpc

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
from ._stubs import LeaseStub

logger = logging.getLogger("leased_client")

# How often a waiting `acquire` looks at its `cancel` event: a `threading.Event` cannot wake a
# thread that waits for something else, so a give-up is noticed within this long.
_CANCEL_POLL_S = 0.02


class _GaveUp(Exception):
    """Internal: the caller's `cancel` event was set, or its `timeout_s` passed."""

    def __init__(self, timed_out: bool) -> None:
        super().__init__()
        self.timed_out = timed_out


class LeaseClient:
    """A connection to a leased server. Thread-safe; share one per process.

    `rpc_timeout_s` bounds every call that should answer quickly (Release, Describe, each renewal,
    and Acquire beyond its `wait_ms`), so a stalled server or network never hangs the caller.
    """

    def __init__(self, target: str, *, rpc_timeout_s: float = 5.0) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = LeaseStub(self._channel)
        self._rpc_timeout_s = rpc_timeout_s
        # Sends the Releases of the acquisitions whose callers gave up (`_give_up`), so that the
        # caller is answered at once. Its threads are started when needed, and Python waits for
        # them at exit, so the Release goes out even if the program ends right after giving up.
        self._give_ups = ThreadPoolExecutor(max_workers=64, thread_name_prefix="leased-give-up")

    def acquire(
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
        cancel: Optional[threading.Event] = None,
        timeout_s: Optional[float] = None,
    ) -> Lease | NotGranted:
        """Asks for `name`, waiting up to `wait_ms` if it is busy.

        `limit` N > 1 asks for one of N permits of a counting lease: up to N holders at once, each
        with its own `Lease` and fencing token; 0 or 1 is an exclusive lease. Every holder of a
        name must ask for the same limit. `shared` asks for a shared (read) grant: shared grants of
        a name coexist, an exclusive one (the default) excludes every other; only with `limit` 0
        or 1. `lock_delay_ms` (0 to 60,000): if this lease ends by expiry (not by release), nobody
        gets it (this permit) until that long after the expiry.

        Returns a `Lease` (renewed in the background unless `keepalive` is False, in which case the
        caller renews with `Lease.renew()`), or `NotGranted` naming the holder if the lease stayed
        busy. `on_waiting` is called each time the server reports whom it is waiting on. Raises
        `grpc.RpcError` for bad input (INVALID_ARGUMENT), a `limit` other than the one the name's
        holders use (FAILED_PRECONDITION, naming the limit in force), or an unavailable server
        (UNAVAILABLE, once the retries are spent).

        The acquisition has its own lease id (`new_lease_id()`), sent with the request. An Acquire
        that ends UNAVAILABLE, or whose stream ends without an answer, is sent again with that id
        up to `ACQUIRE_RETRIES` times, after a short pause, asking only for the rest of the wait:
        the server answers a grant it already made to the id again (same token), and a retried
        wait keeps its place in the line. Other errors are raised at once.

        Giving up: setting `cancel` (from any thread) makes `acquire` raise `AcquireCancelled`
        within about 20 ms, and `timeout_s` (the caller's own deadline, unlike `wait_ms`, after
        which the server answers `NotGranted`) makes it raise `AcquireTimeout`, also a
        `TimeoutError`. The call is cancelled, then the lease id released in the background (see
        `AcquireCancelled.released`): whichever way the give-up raced a grant, the caller never
        holds the lease. Any other exception on the way (Ctrl-C, one from `on_waiting`, an error
        after a retry) releases the id the same way before it propagates.

        After a long wait (the grant came more than a third of the TTL after the request), the
        lease is renewed once before it is returned, and trusted from that renewal: the server
        granted it at some unknown moment during the wait. If that renewal finds the lease gone,
        `acquire` returns `NotGranted` for whoever holds it now; if it fails (`grpc.RpcError`,
        `RenewError`), the lease is released and the error raised.
        """
        check_timeout(timeout_s)
        # The server grants no earlier than now, so the lease lasts at least a TTL from here.
        requested_at = time.monotonic()
        give_up_at = None if timeout_s is None else requested_at + timeout_s
        wait_ends_at = requested_at + wait_ms / 1000
        lease_id = new_lease_id()
        call: Optional[_AcquireCall] = None
        retries = 0
        try:
            while True:
                request = acquire_request(
                    name, holder, ttl_ms, wait_ms, wait_ends_at, time.monotonic(),
                    limit=limit, lock_delay_ms=lock_delay_ms, shared=shared, lease_id=lease_id,
                )
                # The gRPC deadline is only a backstop against a server that stops answering, past
                # the wait; callers give up through `cancel` and `timeout_s`.
                call = _AcquireCall(
                    self._stub, request, timeout_s=request.wait_ms / 1000 + self._rpc_timeout_s
                )
                try:
                    outcome = _read_outcome(call, on_waiting, cancel, give_up_at)
                    break
                except Exception as error:
                    if not retryable(error) or retries == ACQUIRE_RETRIES:
                        raise
                    retries += 1
                    logger.info(
                        "Acquire of %r failed (%s): retry %d of %d with the same lease id",
                        name, describe_error(error), retries, ACQUIRE_RETRIES,
                    )
                    _pause(retry_backoff_s(retries), cancel, give_up_at)
        except _GaveUp as gave_up:
            released = self._give_up(name, lease_id, call)
            raise (
                AcquireTimeout(name, released)
                if gave_up.timed_out
                else AcquireCancelled(name, released)
            ) from None
        except BaseException as error:
            # Unless the server refused the first attempt, a grant may exist: the call failed with
            # its outcome unknown, or after a retry (an earlier attempt may have been granted), or
            # the caller was interrupted (Ctrl-C, an exception from `on_waiting`).
            if not refused(error, retries):
                self._give_up(name, lease_id, call)
            raise
        if isinstance(outcome, pb.NotGranted):
            return not_granted(name, outcome)

        lease = Lease(
            self._stub,
            outcome,
            requested_at=requested_at,
            safety_margin_ms=safety_margin_ms,
            rpc_timeout_s=self._rpc_timeout_s,
            shared=shared,
        )
        if lease._trust.waited_long(requested_at, time.monotonic()):
            # A long wait: "a TTL after the request" may be nearly over although the grant is
            # fresh. Renew once and trust the lease from that renewal instead.
            try:
                confirmed = lease._confirm()
            except BaseException:
                lease._discard()  # never leave a grant unguarded and unreleased
                raise
            if not confirmed:
                # Lost between the grant and now: report whoever holds the name instead.
                return not_granted_now(self.describe(name))
        if keepalive:
            lease.start_keepalive()
        return lease

    def lock(
        self,
        name: str,
        ttl_ms: int,
        wait_ms: int = 0,
        holder: str = "",
        *,
        lock_delay_ms: int = 0,
        safety_margin_ms: Optional[int] = None,
    ) -> ReentrantLock:
        """A reentrant lock over the exclusive lease `name`, per thread like `threading.RLock`:
        `with lock as hold:` acquires (waiting up to `wait_ms`; `LeaseBusy` if it stays busy), and
        the same thread entering it again inside costs no round trip. See `ReentrantLock`."""
        return ReentrantLock(
            self, name, ttl_ms, wait_ms, holder,
            lock_delay_ms=lock_delay_ms, safety_margin_ms=safety_margin_ms,
        )

    def rw_lock(
        self,
        name: str,
        ttl_ms: int,
        wait_ms: int = 0,
        holder: str = "",
        *,
        lock_delay_ms: int = 0,
        safety_margin_ms: Optional[int] = None,
    ) -> ReadWriteLock:
        """A read-write lock over `name`: `with rw.read() as hold:` takes a shared grant, beside
        other readers; `with rw.write() as hold:` an exclusive one. See `ReadWriteLock`."""
        read, write = (
            ReentrantLock(self, name, ttl_ms, wait_ms, holder, shared=shared,
                          lock_delay_ms=lock_delay_ms, safety_margin_ms=safety_margin_ms)
            for shared in (True, False)
        )
        return ReadWriteLock(read, write)

    def _give_up(
        self, name: str, lease_id: str, call: Optional[_AcquireCall]
    ) -> Future[Optional[bool]]:
        """Ends an acquisition whose caller will not take the lease: cancels the call at once (the
        server then takes the caller out of the line), then releases `lease_id` in the background,
        which ends a grant that crossed the cancel, whichever way the race went. The future
        resolves to Release's answer, or None if the Release failed."""
        if call is not None:
            call.cancel()
            if isinstance(call.state.terminal, pb.NotGranted):
                # Answered `not_granted`, which the server never answers an id that holds the
                # name: nothing to release.
                nothing: Future[Optional[bool]] = Future()
                nothing.set_result(False)
                return nothing
        return self._give_ups.submit(self._release_given_up, name, lease_id)

    def _release_given_up(self, name: str, lease_id: str) -> Optional[bool]:
        """The Release of a give-up. Best effort: a failure is logged, never raised, as the
        caller has moved on; a grant it misses stays held until its TTL."""
        try:
            answer = self._stub.Release(
                pb.ReleaseRequest(name=name, lease_id=lease_id),
                timeout=min(GIVE_UP_RELEASE_TIMEOUT_S, self._rpc_timeout_s),
            )
        except Exception as error:  # grpc.RpcError, or ValueError on a closed channel
            logger.warning(
                "releasing lease %r after its caller gave up failed (%s): if it was granted, it "
                "stays held until its TTL", name, describe_error(error),
            )
            return None
        if answer.released:
            logger.info("lease %r was granted as its caller gave up: released", name)
        return answer.released

    def describe(self, name: str) -> LeaseInfo:
        """Who holds `name` now (every holder of a counting lease), as anyone may ask."""
        answer = self._stub.Describe(pb.DescribeRequest(name=name), timeout=self._rpc_timeout_s)
        return lease_info(name, answer)

    def watch(self, name: str) -> Watch:
        """Follows who holds `name`: iterate the returned `Watch` for `WatchEvent`s, a snapshot
        first, then one per change of holder (granted, released, expired, revoked; renewals are not
        events), in order, with the tokens of grants increasing. It never ends on its own: it raises
        `grpc.RpcError` when the server refuses the watch (INVALID_ARGUMENT, PERMISSION_DENIED) or
        ends it (UNAVAILABLE at shutdown); watching again is safe, its first event is a snapshot.
        `Watch.close()` (or leaving its `with` block) stops it from another thread too."""
        return Watch(self._stub.Watch(pb.WatchRequest(name=name)))

    def check_token(self, name: str, fencing_token: int) -> TokenCheck:
        """Whether `fencing_token` is the token of a grant that holds `name` now (Chubby's
        CheckSequencer), for a resource that cannot store tokens. The answer can be stale when it
        arrives; a resource that keeps the highest token it has seen is the stronger check."""
        answer = self._stub.CheckToken(
            pb.CheckTokenRequest(name=name, fencing_token=fencing_token),
            timeout=self._rpc_timeout_s,
        )
        return token_check(answer)

    def list_page(
        self, prefix: str = "", *, page_size: int = 0, page_token: Optional[str] = None
    ) -> ListPage:
        """One page of the leases held now whose names start with `prefix` (LeaseAdminService).
        `page_size` 0 is the server's default (100), at most 1000; `page_token` is the previous
        page's `next_page_token`."""
        answer = self._stub.List(
            pb.ListRequest(prefix=prefix, page_size=page_size, page_token=page_token or ""),
            timeout=self._rpc_timeout_s,
        )
        return list_page(answer)

    def list(self, prefix: str = "", *, page_size: int = 0) -> Iterator[LeaseInfo]:
        """Every lease held now whose name starts with `prefix`, reading page after page. A lease
        held for the whole listing comes exactly once; one granted or released meanwhile may or
        may not."""
        page_token: Optional[str] = None
        while True:
            page = self.list_page(prefix, page_size=page_size, page_token=page_token)
            yield from page.leases
            if page.next_page_token is None:
                return
            page_token = page.next_page_token

    def revoke(self, name: str, reason: str, fencing_token: int = 0) -> Optional[int]:
        """Ends the lease `name` at once, without lock-delay (LeaseAdminService; needs a token
        with the `revoke` operation where access control is on). With `fencing_token`, only the
        grant with that token, and only if it still holds the lease; with 0, whoever holds it.
        `reason` (1 to 256 bytes) goes to the audit log and to the holder, whose next renewal
        answers lost with "revoked: <reason>". Returns the token of the grant revoked (the
        largest, for several permits), or None if nothing matched."""
        answer = self._stub.Revoke(
            pb.RevokeRequest(name=name, reason=reason, fencing_token=fencing_token),
            timeout=self._rpc_timeout_s,
        )
        return answer.fencing_token if answer.revoked else None

    def close(self) -> None:
        """Closes the channel; leases still held stop renewing and expire at their TTL. First
        waits (up to `GIVE_UP_RELEASE_TIMEOUT_S`) for the Releases of acquisitions given up lately,
        so that a grant that crossed a give-up is still released."""
        self._give_ups.shutdown(wait=True)
        self._channel.close()

    def __enter__(self) -> LeaseClient:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class Watch:
    """The events of one `LeaseClient.watch`: iterate it for `WatchEvent`s (once). `close()`
    cancels it, from any thread; iteration then ends quietly."""

    def __init__(self, call: _EventStream) -> None:
        self._call = call
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            for event in self._call:
                yield watch_event(event)
        except grpc.RpcError as error:
            if self._closed.is_set() and status(error) == grpc.StatusCode.CANCELLED:
                return
            raise
        if not self._closed.is_set():
            # The server never ends a watch with OK: silence must not pass for "no change".
            raise RuntimeError("the server ended the Watch stream")

    def close(self) -> None:
        self._closed.set()
        self._call.cancel()

    def __enter__(self) -> Watch:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class _EventStream(Protocol):
    """A Watch call as the blocking channel returns it: an iterator that can be cancelled."""

    def __iter__(self) -> Iterator[pb.WatchEvent]: ...

    def cancel(self) -> bool: ...


class _AcquireCall:
    """One Acquire call, read on its own thread into a queue, so that the caller can wait for the
    next message with a timeout, and so give up at any moment."""

    def __init__(
        self, stub: LeaseStub, request: pb.AcquireRequest, timeout_s: float
    ) -> None:
        # What the stream said so far: its terminal message, once read.
        self.state = AcquireState(request.name)
        # True once the end of the stream (OK or an error) has been read.
        self.ended = False
        # Messages, then None (the stream ended OK) or the exception that ended it.
        self._messages: queue.SimpleQueue[Optional[pb.AcquireResponse | Exception]] = (
            queue.SimpleQueue()
        )
        self._call = stub.Acquire(request, timeout=timeout_s)
        threading.Thread(target=self._read, name="leased-acquire-reader", daemon=True).start()

    def next(self, timeout_s: Optional[float]) -> Optional[pb.AcquireResponse]:
        """The next message, or None once the stream has ended. Raises the error that ended the
        stream, or `queue.Empty` if nothing came within `timeout_s` (None: no limit)."""
        if self.ended:
            return None
        item = self._messages.get(timeout=timeout_s)
        if item is None or isinstance(item, Exception):
            self.ended = True
        if isinstance(item, Exception):
            raise item
        return item

    def cancel(self) -> None:
        self._call.cancel()

    def _read(self) -> None:
        try:
            for response in self._call:
                self._messages.put(response)
            self._messages.put(None)
        except Exception as error:  # grpc.RpcError, or ValueError on a closed channel
            self._messages.put(error)


def _read_outcome(
    call: _AcquireCall,
    on_waiting: Optional[Callable[[NotGranted], None]],
    cancel: Optional[threading.Event],
    give_up_at: Optional[float],
) -> pb.Granted | pb.NotGranted:
    """Reads an Acquire call to its end and returns its terminal message. Raises `_GaveUp` as soon
    as `cancel` is set or `give_up_at` passes, also after the terminal message was read: a caller
    who gave up before `acquire` returned never gets the lease. Raises the error that ended the
    call before its terminal message, or `EndedWithoutAnswer`."""
    # Read to the end of the stream rather than returning at the terminal message: the call then
    # finishes with OK instead of being cancelled, which the server could take for a waiter that
    # gave up.
    while True:
        if cancel is not None and cancel.is_set():
            raise _GaveUp(timed_out=False)
        timeout_s: Optional[float] = None
        if give_up_at is not None:
            timeout_s = give_up_at - time.monotonic()
            if timeout_s <= 0:
                raise _GaveUp(timed_out=True)
        if cancel is not None:
            timeout_s = _CANCEL_POLL_S if timeout_s is None else min(timeout_s, _CANCEL_POLL_S)
        try:
            response = call.next(timeout_s)
        except queue.Empty:
            continue
        except Exception:
            if call.state.terminal is not None:
                break  # the answer was read: a connection lost after it changes nothing
            raise
        if response is None:
            break
        call.state.take(response, on_waiting)
    return call.state.outcome()


def _pause(seconds: float, cancel: Optional[threading.Event], give_up_at: Optional[float]) -> None:
    """Sleeps before a retry; raises `_GaveUp` if the caller gives up meanwhile."""
    until = time.monotonic() + seconds
    if give_up_at is not None and give_up_at <= until:
        if cancel is not None and cancel.wait(max(0.0, give_up_at - time.monotonic())):
            raise _GaveUp(timed_out=False)
        time.sleep(max(0.0, give_up_at - time.monotonic()))
        raise _GaveUp(timed_out=True)
    if cancel is not None:
        if cancel.wait(seconds):
            raise _GaveUp(timed_out=False)
    else:
        time.sleep(seconds)



class Lease:
    """One held lease.

    With the keepalive on, a background thread renews it over one `Renew` stream, a third of its
    TTL after the last successful renewal was sent. `lost` is set, for good, when a renewal answers
    `lost` (expired, released, or taken over), or when no renewal has succeeded for the TTL minus a
    safety margin, counted from when that renewal was sent: past that point the server may already
    have expired the lease and granted it to someone else, so the holder must stop trusting it
    *before* that can happen. That moment is kept without exception: a renewal answered later does
    not count, even if it says "renewed". Check `lost` before each piece of protected work, and
    pass `fencing_token` along with every write so the resource can reject a stale holder.
    """

    def __init__(
        self,
        stub: LeaseStub,
        granted: pb.Granted,
        *,
        requested_at: float,
        safety_margin_ms: Optional[int],
        rpc_timeout_s: float,
        shared: bool = False,
    ) -> None:
        self.name: str = granted.name
        # The acquisition's own id (`new_lease_id()`), which the server answered with.
        self.lease_id: str = granted.lease_id
        self.fencing_token: int = granted.fencing_token
        #: A shared (read) grant (`acquire(..., shared=True)`).
        self.shared = shared
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._stub = stub
        self._rpc_timeout_s = rpc_timeout_s
        # One renewal at a time on the stream; held while a renewal waits for its answer.
        self._renew_lock = threading.Lock()
        self._stream: Optional[_RenewStream] = None
        # Guards the trust and `lost`. Never held while waiting on the network, so the keepalive
        # can declare the loss at the trust deadline even while a renewal is in flight.
        self._state_lock = threading.Lock()
        # Counted from the Acquire request, then from the last successful renewal.
        self._trust = Trust(granted.ttl_ms, safety_margin_ms, requested_at)
        # Set once by the first release(); also tells the keepalive to stop.
        self._released = threading.Event()
        self._release_lock = threading.Lock()
        self._keepalive: Optional[threading.Thread] = None

    def trusted_for_s(self) -> float:
        """Seconds for which the lease is certainly still ours (negative once that has passed)."""
        return self._trust.until - time.monotonic()

    def fencing_metadata(self) -> list[tuple[str, str]]:
        """The lease's name and fencing token as the metadata pairs a fenced gRPC service reads
        (`leased-lease-name`, `leased-fencing-token`), for a call's `metadata=`:
        `stub.Put(request, metadata=lease.fencing_metadata())`."""
        return fencing_metadata(self.name, self.fencing_token)

    @property
    def ttl_ms(self) -> int:
        """The TTL in force: the granted one, then the last renewal's."""
        return self._trust.ttl_ms

    def renew_period_s(self) -> float:
        """How often the keepalive renews: a third of the TTL, so two renewals may fail in a row."""
        return self._trust.renew_period_s()

    def start_keepalive(self) -> None:
        """Starts the background renewals (`acquire` does this unless asked not to)."""
        if self._keepalive is None:
            self._keepalive = threading.Thread(
                target=self._run_keepalive, name=f"leased-keepalive-{self.name}", daemon=True
            )
            self._keepalive.start()

    def renew(self) -> bool:
        """Renews the lease once, now. True if the server extended it. False if the renewal failed
        (logged; try again while `trusted_for_s()` is positive), if the lease was released, or if
        it is gone, in which case `lost` is set: the server answered so, or, with the keepalive on,
        the answer came after the moment the lease stopped being trusted."""
        try:
            return self._renew(self._rpc_timeout_s)
        except _RENEW_ERRORS as error:
            self._log_renew_error(error)
            return False

    def release(self) -> bool:
        """Stops the keepalive and releases the lease. True if this call ended the lease; False if
        it was no longer ours or was already released. Idempotent."""
        with self._release_lock:
            if self._released.is_set():
                return False
            self._released.set()
        # Cancel the stream without waiting for the renewal lock, so a renewal in flight ends now.
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._keepalive is not None:
            self._keepalive.join()
        with self._renew_lock:
            # A renewal that raced with us may have opened a new stream; it waits at most one
            # renewal timeout.
            self._close_stream()
        answer = self._stub.Release(
            pb.ReleaseRequest(name=self.name, lease_id=self.lease_id), timeout=self._rpc_timeout_s
        )
        return answer.released

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        # Never show the lease_id: it is the holder's secret.
        state = "lost" if self.lost.is_set() else "released" if self._released.is_set() else "held"
        mode = ", shared" if self.shared else ""
        return f"Lease(name={self.name!r}, fencing_token={self.fencing_token}{mode}, {state})"

    def _holds(self) -> bool:
        """Neither lost nor released: a nested acquire of a `ReentrantLock` may reuse it."""
        return not self.lost.is_set() and not self._released.is_set()

    def _confirm(self) -> bool:
        """The renewal `acquire` makes after a long wait, before the keepalive starts: True if
        renewed (the trust now counts from it), False if the lease is gone. Raises the error if
        the renewal failed."""
        return self._renew(self._rpc_timeout_s)

    def _discard(self) -> None:
        """Releases a lease that `acquire` will not hand out; best effort (it expires anyway)."""
        try:
            self.release()
        except Exception as error:
            logger.warning(
                "releasing lease %r (token %d) failed: %s; it stays held until its TTL",
                self.name, self.fencing_token, describe_error(error),
            )

    def _run_keepalive(self) -> None:
        """The keepalive thread. If it ever dies of a bug, `lost` is set first: a holder whose
        lease nobody renews any more must not go on trusting it."""
        try:
            self._keep_renewing()
        except BaseException as error:
            self._mark_lost(f"keepalive failed: {error!r}")
            raise

    def _keep_renewing(self) -> None:
        """Renews a third of the TTL after the last successful renewal was sent, retries every
        twentieth of the TTL (at least 20 ms) after a failure, and sets `lost` at the trust
        deadline if no renewal succeeded by then: at the deadline itself, also when a renewal is
        in flight (no renewal waits past the deadline, and a later answer does not count)."""
        next_renewal = self._trust.next_renewal()
        while True:
            # The deadline comes first when both are due: a renewal sent now could not help.
            wake_at = min(next_renewal, self._trust.until)
            if self._released.wait(max(0.0, wake_at - time.monotonic())):
                return
            trusted_for_s = self.trusted_for_s()
            if trusted_for_s <= 0:
                if not self._released.is_set():
                    self._mark_lost(NO_RENEWAL)
                return
            try:
                renewed = self._renew(
                    timeout_s=min(trusted_for_s, self._rpc_timeout_s),
                    # Another renewal (a caller's `renew()`) may be in flight: wait for it no
                    # longer than the trust lasts.
                    lock_timeout_s=trusted_for_s,
                )
            except _RENEW_ERRORS as error:
                self._log_renew_error(error)
                renewed = False
            if self.lost.is_set() or self._released.is_set():
                return
            if renewed:
                next_renewal = self._trust.next_renewal()
            else:
                next_renewal = time.monotonic() + self._trust.retry_delay_s()

    def _renew(self, timeout_s: float, lock_timeout_s: float = -1) -> bool:
        """One renewal over the lease's Renew stream, opened if needed.

        True: renewed, and the trust now counts from when this renewal was sent. False: released,
        another renewal still in flight after `lock_timeout_s`, or gone (`lost` is set): the server
        answered `lost`, or the keepalive runs and the answer came at or after the trust deadline.
        Raises the error (grpc.RpcError, RenewError, or ValueError when the client was closed) if
        no answer came within `timeout_s`; the stream is dropped then, so that a late answer can
        never be taken for the answer to a later request.
        """
        if not self._renew_lock.acquire(timeout=lock_timeout_s):
            return False
        try:
            if self._released.is_set() or self.lost.is_set():
                return False
            sent_at = time.monotonic()
            request = pb.RenewRequest(name=self.name, lease_id=self.lease_id, ttl_ms=0)
            try:
                if self._stream is None:
                    self._stream = _RenewStream(self._stub)
                response = self._stream.renew(request, timeout_s)
            except _RENEW_ERRORS:
                self._close_stream()
                raise
            if response.WhichOneof("result") == "lost":
                self._close_stream()
                self._mark_lost(response.lost.reason)
                return False
            with self._state_lock:
                if self.lost.is_set():
                    return False  # the deadline passed while we waited: never trusted again
                if self._keepalive is None or time.monotonic() < self._trust.until:
                    # The server moved the expiry a TTL past the moment it read our request,
                    # which is after we sent it: counting from `sent_at` errs on the safe side.
                    self._trust.credit(sent_at, response.renewed.ttl_ms)
                    return True
            # Answered too late: the keepalive declares the loss at the deadline, whatever the
            # answer says, and a loss is never taken back.
            self._mark_lost(NO_RENEWAL)
            return False
        finally:
            self._renew_lock.release()

    def _mark_lost(self, reason: str) -> None:
        """Records why the lease is gone and sets `lost` (once: the first reason stays)."""
        with self._state_lock:
            if self.lost.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
        logger.warning("lease %r (token %d) lost: %s", self.name, self.fencing_token, reason)

    def _log_renew_error(self, error: Exception) -> None:
        if not self._released.is_set():  # else release() cancelled the stream on purpose
            logger.warning("renewing lease %r failed: %s", self.name, describe_error(error))

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class ReentrantLock(ReentrantLockBase["LeaseClient", "Lease"]):
    """A lease as a reentrant lock, owned per thread like `threading.RLock` (`LeaseClient.lock`,
    and the two locks of a `ReadWriteLock`).

        lock = client.lock("nightly-report", ttl_ms=15_000, wait_ms=60_000)
        with lock as hold:                 # Acquire (LeaseBusy if still busy after wait_ms)
            with lock as inner:            # same thread: no round trip; inner.lease is hold.lease
                ...
            # still held: only the outermost level releases
        # released, keepalive stopped

    A thread's first acquire asks the server (`LeaseClient.acquire`, with its own lease id, its
    retries and its give-up); while that lease holds, the same thread acquiring again gets a new
    level of it at once. Each level is a `LockHold`: the lease's guard, whose `release()` (or the
    end of its `with` block) ends that level only; the last level's release releases the lease
    and stops its keepalive. Another thread acquiring the same lock is another owner: it asks the
    server and waits in line like any other caller.

    The guard's loss ends every level: `lost` is one event, set for all of them, exactly as on a
    plain `Lease`. Afterwards an acquire by the same thread asks the server for a new lease rather
    than nesting in the lost one; releasing the lost levels costs nothing but a Release that
    answers False.
    """

    def _owner(self) -> object:
        return threading.get_ident()

    def acquire(
        self,
        wait_ms: Optional[int] = None,
        *,
        on_waiting: Optional[Callable[[NotGranted], None]] = None,
        cancel: Optional[threading.Event] = None,
        timeout_s: Optional[float] = None,
    ) -> LockHold | NotGranted:
        """A new level of the calling thread's lease: at once if the thread holds the lock (and the
        lease is neither lost nor released), else from the server, waiting up to `wait_ms` (the
        lock's own by default), with `LeaseClient.acquire`'s `on_waiting`, `cancel`, `timeout_s`
        and errors. `NotGranted` if the lease stayed busy.

        Raises RuntimeError when the thread holds the other mode of the same `ReadWriteLock`: there
        is no upgrade or downgrade (it would wait for itself); release, then acquire again."""
        me = self._owner()
        holding = self._nest(me)
        if holding is not None:
            return LockHold(self, holding)
        result = self._client.acquire(
            self.name, ttl_ms=self.ttl_ms, wait_ms=self.wait_ms if wait_ms is None else wait_ms,
            holder=self.holder, shared=self.shared, lock_delay_ms=self._lock_delay_ms,
            safety_margin_ms=self._safety_margin_ms, on_waiting=on_waiting, cancel=cancel,
            timeout_s=timeout_s,
        )
        if isinstance(result, NotGranted):
            return result
        return LockHold(self, self._book.add(me, result))

    def __enter__(self) -> LockHold:
        """Acquires a level with the lock's wait; raises `LeaseBusy` if the lease stayed busy."""
        result = self.acquire()
        if isinstance(result, NotGranted):
            raise LeaseBusy(result)
        self._push_entered(self._owner(), result)
        return result

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        hold: LockHold = self._pop_entered(self._owner())
        hold.release()

    def _release_level(self, holding: Holding[Lease]) -> bool:
        """Ends one level of `holding`; the last one releases its lease (True if that ended it)."""
        return self._book.end_level(holding) and holding.lease.release()


class LockHold(LockHoldBase["Lease"]):
    """One level of a `ReentrantLock` held: the guard of the lease underneath, as a `Lease` gives
    it (`lost`, `lost_reason`, `fencing_token`, `trusted_for_s()`, `renew()`; `lease` is the
    `Lease` itself, shared by every level of it), whose `release()` ends this level only. Check
    `lost` before each piece of protected work and pass `fencing_token` with every write."""

    def __init__(self, lock: ReentrantLock, holding: Holding[Lease]) -> None:
        super().__init__(holding)
        self._lock = lock
        self._release_lock = threading.Lock()

    @property
    def lost(self) -> threading.Event:
        """Set for good when the lease may be gone: for every level at once."""
        return self.lease.lost

    def renew(self) -> bool:
        return self.lease.renew()

    def release(self) -> bool:
        """Ends this level (idempotent; from any thread). The last level of the lease releases it
        and stops its keepalive: True if that ended the lease; False for an inner level, a level
        already released, or a lease that was no longer held."""
        with self._release_lock:
            if self._released:
                return False
            self._released = True
        return self._lock._release_level(self._holding)

    def __enter__(self) -> LockHold:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()


class ReadWriteLock(ReadWriteLockBase[ReentrantLock]):
    """A read-write lock over the lease `name` (`LeaseClient.rw_lock`): `read()` and `write()` are
    `ReentrantLock`s, reentrant per thread; see `ReadWriteLockBase` for the rules.

        rw = client.rw_lock("config", ttl_ms=10_000, wait_ms=30_000)
        with rw.read() as hold:            # beside other readers
            value = load(fencing_token=hold.fencing_token)
        with rw.write() as hold:           # alone
            store(value, fencing_token=hold.fencing_token)

    A thread that holds one mode and asks for the other gets RuntimeError instead of waiting for
    itself: release, then acquire again (and re-read what you read: another writer may have come
    between).
    """


class _RenewStream:
    """One bidi `Renew` call. A generator feeds gRPC the requests put on a queue; a reader thread
    moves each answer (or the error that ended the call) onto another queue, so that the caller can
    wait for the answer to its request with a timeout, which iterating the call cannot do."""

    def __init__(self, stub: LeaseStub) -> None:
        self._requests: queue.SimpleQueue[Optional[pb.RenewRequest]] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[pb.RenewResponse | Exception] = queue.SimpleQueue()
        self._call = stub.Renew(self._request_iterator())
        threading.Thread(target=self._read, name="leased-renew-reader", daemon=True).start()

    def renew(self, request: pb.RenewRequest, timeout_s: float) -> pb.RenewResponse:
        """Sends `request` and returns its answer (the server answers in order)."""
        self._requests.put(request)
        try:
            answer = self._answers.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            raise RenewError(f"no answer within {timeout_s:.3f} s") from None
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        """Half-closes the request side and cancels the call; the reader thread then ends."""
        self._requests.put(None)
        self._call.cancel()

    def _request_iterator(self) -> Iterator[pb.RenewRequest]:
        while (request := self._requests.get()) is not None:
            yield request

    def _read(self) -> None:
        try:
            for answer in self._call:
                self._answers.put(answer)
            self._answers.put(RenewError("the server ended the Renew stream"))
        except grpc.RpcError as error:
            self._answers.put(error)


# What a renewal raises when it gets no answer: ValueError when the client's channel was closed.
_RENEW_ERRORS = (grpc.RpcError, RenewError, ValueError)

