"""What the blocking client (`leased_client`) and the asyncio client (`leased_client.aio`) share:
the results they return, their errors, the retry and timing policy, and the conversions from the
generated messages. Nothing here does I/O, so both clients follow exactly the same rules.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import secrets
import threading
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Optional, Protocol, TypeVar, Union

import grpc

from ._proto.lease.v1 import lease_pb2 as pb


@dataclass(frozen=True)
class NotGranted:
    """Someone else holds the lease. `acquire` returns this when the lease stayed busy, and passes
    it to `on_waiting` while the server waits for the lease on the caller's behalf.

    `holder`, `fencing_token` and `remaining_ms` describe the holder of an exclusive lease, or the
    permit that frees soonest of a counting lease; `held` and `limit` say how full the name is.
    """

    name: str
    holder: str
    fencing_token: int
    #: Until the holder's lease (permit) frees unless renewed, lock-delay included; -1 if it has
    #: no expiry.
    remaining_ms: int
    #: Permits taken: held, or in their lock-delay (1 for a held exclusive lease).
    held: int
    #: The limit in force: 1 for an exclusive lease, N for a counting lease; 0 when none is taken.
    limit: int


@dataclass(frozen=True)
class HolderInfo:
    """One holder of a lease (one permit of a counting lease), as anyone may see it."""

    holder: str
    fencing_token: int
    #: Until this permit frees unless renewed, lock-delay included; -1 if it has no expiry.
    remaining_ms: int
    #: A shared (read) grant; False for an exclusive grant and for a permit of a counting lease.
    shared: bool = False


@dataclass(frozen=True)
class LeaseInfo:
    """What `Describe` tells anyone about a lease (never a lease_id), and what `list` gives per
    held lease. `holder`, `fencing_token` and `remaining_ms` describe the holder with the smallest
    token; `holders` lists every permit taken (held, or in its lock-delay), by increasing token."""

    name: str
    held: bool
    holder: str
    fencing_token: int
    remaining_ms: int
    #: The limit in force: 1 for an exclusive lease, N for a counting lease; 0 when not held.
    limit: int
    holders: tuple[HolderInfo, ...]
    #: Callers waiting for the name, on every replica.
    waiters: int


@dataclass(frozen=True)
class WatchEvent:
    """What happened to a watched lease (`LeaseClient.watch`).

    `cause` is "snapshot" (the whole current state: the first event, and again whenever the server
    may have missed events; replace what you knew with it), "granted", "released", "expired" or
    "revoked" ("cause-N" for a cause this client does not know). `holder`, `fencing_token` and
    `expires_at_ms` are those of the grant the event is about: the new holder's for "granted", the
    one that ended for "released", "expired" and "revoked", the holder with the smallest token for
    a snapshot ("", 0 and None in a snapshot of a free lease). `held`, `limit` and `holders` are
    the state after the event.
    """

    name: str
    cause: str
    held: bool
    holder: str
    fencing_token: int
    #: When that grant expires unless renewed, Unix ms on the store's clock; None if unset.
    expires_at_ms: Optional[int]
    #: The limit in force after the event: 1 exclusive, N counting; 0 when nobody holds it.
    limit: int
    #: Every holder after the event, by increasing token (`remaining_ms` as last known).
    holders: tuple[HolderInfo, ...]
    #: For "revoked": the operator's reason.
    reason: str

    @property
    def current_holder(self) -> Optional[HolderInfo]:
        """The holder with the smallest token after the event: an exclusive lease's holder (in
        leader election, the leader); None when nobody holds it."""
        return self.holders[0] if self.holders else None


@dataclass(frozen=True)
class TokenCheck:
    """`LeaseClient.check_token`'s answer, true when sent: it can be stale by the time it arrives."""

    #: The lease is held with exactly this token (for a counting lease: one of its permits is).
    current: bool
    #: The token checked when `current`; otherwise the largest token held, 0 when nobody holds it.
    current_token: int
    #: Anyone holds the lease now.
    held: bool


@dataclass(frozen=True)
class ListPage:
    """One page of `LeaseClient.list_page`: leases in no particular order (possibly fewer than
    asked for, even none, while more follow), and the token of the next page (None at the end)."""

    leases: tuple[LeaseInfo, ...]
    next_page_token: Optional[str]


# --- The retry and give-up policy ------------------------------------------------------------------

#: How many times `acquire` sends an Acquire again, with the same lease id, after one that ended
#: UNAVAILABLE or without an answer (a connection reset, a server shutting down): enough to ride
#: out a dropped connection or a replica going away behind a load balancer, few enough that a
#: server that is really down is reported within a second.
ACQUIRE_RETRIES = 3
#: The pause before the first retry; each further retry doubles it (0.05, 0.1, 0.2 s).
ACQUIRE_RETRY_BACKOFF_S = 0.05
#: The deadline of the Release that a give-up sends: best effort, so a stalled server delays
#: nothing but the background clean-up (and `LeaseClient.close()`) by more than this.
GIVE_UP_RELEASE_TIMEOUT_S = 2.0

# Errors with which the server refuses an Acquire before granting anything: after such an answer
# to the first attempt there is nothing to release.
_REFUSALS = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
})


def new_lease_id() -> str:
    """A lease id of the caller's own for one acquisition (AcquireRequest.lease_id): 32 hex digits,
    128 bits from the OS's cryptographically secure generator. It is the holder's secret: whoever
    knows it can renew or release the lease."""
    return secrets.token_hex(16)


def retry_backoff_s(retry: int) -> float:
    """The pause before retry number `retry` (1, 2, ...) of an Acquire."""
    return ACQUIRE_RETRY_BACKOFF_S * 2.0 ** (retry - 1)


def check_timeout(timeout_s: Optional[float]) -> None:
    if timeout_s is not None and timeout_s < 0:
        raise ValueError("timeout_s must not be negative")


def acquire_request(
    name: str, holder: str, ttl_ms: int, wait_ms: int, wait_ends_at: float, now: float, *,
    limit: int, lock_delay_ms: int, shared: bool, lease_id: str,
) -> pb.AcquireRequest:
    """The AcquireRequest of one attempt. A retry asks only for what is left of the wait (0: "is
    it mine?", answered at once), so that a retried wait ends when the first one would have."""
    remaining_wait_ms = max(0, math.ceil((wait_ends_at - now) * 1000))
    return pb.AcquireRequest(
        name=name, holder=holder, ttl_ms=ttl_ms, wait_ms=min(wait_ms, remaining_wait_ms),
        limit=limit, lock_delay_ms=lock_delay_ms, shared=shared, lease_id=lease_id,
    )


def refused(error: BaseException, retries: int) -> bool:
    """The server refused the first attempt outright: no grant can exist, nothing to release."""
    return retries == 0 and status(error) in _REFUSALS


def retryable(error: BaseException) -> bool:
    """An Acquire that failed so is sent again with the same lease id; any other error is the
    answer (bad input, a limit, access control), or says that waiting longer will not help."""
    if isinstance(error, EndedWithoutAnswer):
        return True
    return status(error) == grpc.StatusCode.UNAVAILABLE


def status(error: BaseException) -> Optional[grpc.StatusCode]:
    """The gRPC status code of a failed call; None for anything else. (grpc.RpcError itself has
    no `code()`: the errors that calls raise add it, blocking and asyncio alike.)"""
    code = getattr(error, "code", None)
    answer = code() if isinstance(error, grpc.RpcError) and callable(code) else None
    return answer if isinstance(answer, grpc.StatusCode) else None


def describe_error(error: BaseException) -> str:
    """A one-line description; a gRPC error's default text spans several lines of debug detail."""
    code, details = status(error), getattr(error, "details", None)
    if code is not None and callable(details):
        return f"{code.name}: {details()}"
    return str(error)


class AcquireState:
    """What one Acquire call has read so far: the terminal message (`granted` or `not_granted`)
    once it came. Both clients feed it each message with `take`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.terminal: Optional[pb.Granted | pb.NotGranted] = None

    def take(
        self, response: pb.AcquireResponse, on_waiting: Optional[Callable[[NotGranted], None]]
    ) -> None:
        kind = response.WhichOneof("result")
        if self.terminal is not None:
            raise RuntimeError(f"Acquire sent {kind!r} after its terminal message")
        if kind == "waiting":
            if on_waiting is not None:
                on_waiting(not_granted(self.name, response.waiting))
        elif kind == "granted":
            self.terminal = response.granted
        elif kind == "not_granted":
            self.terminal = response.not_granted
        else:
            raise RuntimeError(f"Acquire sent an unknown message: {response}")

    def outcome(self) -> pb.Granted | pb.NotGranted:
        """The terminal message, once the stream ended; `EndedWithoutAnswer` if there was none."""
        if self.terminal is None:
            raise EndedWithoutAnswer()
        return self.terminal


# --- Errors ----------------------------------------------------------------------------------------

#: `AcquireCancelled.released`: a `concurrent.futures.Future` from the blocking client, an
#: `asyncio.Future` (a task) from the asyncio one.
Released = Union["concurrent.futures.Future[Optional[bool]]", "asyncio.Future[Optional[bool]]"]


class AcquireCancelled(Exception):
    """`acquire` gave up its wait because the caller asked it to: its `cancel` event was set (or,
    for the subclass `AcquireTimeout`, its `timeout_s` passed) before `acquire` returned.

    It is raised at once. The Acquire call has been cancelled, and a Release of the attempt's lease
    id goes out in the background, so that a grant that crossed the give-up is released rather
    than left held until its TTL. `released` (a future) resolves when that is over: True if the
    Release ended such a grant, False if there was none, None if the Release failed (logged; such
    a grant would stay held until its TTL). Most callers ignore it; `LeaseClient.close()` waits
    for it.
    """

    def __init__(self, name: str, released: Released, message: Optional[str] = None) -> None:
        super().__init__(message or f"gave up waiting for lease {name!r}")
        self.name = name
        self.released = released


class AcquireTimeout(AcquireCancelled, TimeoutError):
    """`acquire`'s `timeout_s` passed before the server answered; see `AcquireCancelled`."""

    def __init__(self, name: str, released: Released) -> None:
        super().__init__(name, released, f"timed out waiting for lease {name!r}")


class LeaseBusy(Exception):
    """Entering a reentrant lock (`with lock:`) found the lease busy for the lock's whole wait.
    `not_granted` says who holds it."""

    def __init__(self, not_granted: NotGranted) -> None:
        super().__init__(f"lease {not_granted.name!r} is busy: held by {not_granted.holder!r} "
                         f"with token {not_granted.fencing_token}")
        self.not_granted = not_granted


class RenewError(Exception):
    """A renewal got no answer in time, or the server ended the Renew stream without a gRPC error
    status. (`acquire` raises it when the renewal that confirms a grant after a long wait fails.)"""


class EndedWithoutAnswer(RuntimeError):
    """The Acquire stream ended OK without `granted` or `not_granted`: a proxy or a server going
    away cut it short. Retried like UNAVAILABLE; raised (a RuntimeError) once the retries are
    spent."""

    def __init__(self) -> None:
        super().__init__("Acquire ended without granted or not_granted")


def mode_conflict(name: str, shared: bool) -> RuntimeError:
    """The error of a read-write lock's owner asking for the other mode: there is no upgrade or
    downgrade (it would wait for itself)."""
    want, have = ("read", "write") if shared else ("write", "read")
    return RuntimeError(
        f"this owner holds the {have} lock of {name!r}: no {want} lock beside it "
        f"(no upgrade or downgrade); release the {have} lock, then acquire the {want} lock"
    )


# --- The guard's timing ----------------------------------------------------------------------------

NO_RENEWAL = "no renewal succeeded before the lease could expire"


class Trust:
    """How long a held lease is certainly still ours, on the monotonic clock.

    The server expires a lease a TTL after it last read a request for it, which is after the
    client sent that request; so the client trusts the lease until the TTL minus a safety margin
    (for clocks that tick at slightly different rates) after the send, never longer. Renewals
    happen a third of the TTL after the last successful one, so two may fail in a row; after a
    failure they are retried every twentieth of the TTL (at least 20 ms).
    """

    def __init__(self, ttl_ms: int, safety_margin_ms: Optional[int], sent_at: float) -> None:
        self.ttl_ms = ttl_ms
        self.safety_margin_ms = ttl_ms // 10 if safety_margin_ms is None else safety_margin_ms
        if not 0 <= self.safety_margin_ms < ttl_ms:
            raise ValueError(f"safety_margin_ms must be in [0, {ttl_ms})")
        # When the send that the trust counts from happened, and when the trust ends.
        self.since = sent_at
        self.until = self._deadline(sent_at)

    def credit(self, sent_at: float, ttl_ms: int) -> None:
        """A renewal sent at `sent_at` was answered in time with a new TTL."""
        self.ttl_ms = ttl_ms
        self.since = sent_at
        self.until = self._deadline(sent_at)

    def renew_period_s(self) -> float:
        """How often the keepalive renews: a third of the TTL."""
        return self.ttl_ms / 3000

    def next_renewal(self) -> float:
        return self.since + self.renew_period_s()

    def retry_delay_s(self) -> float:
        return max(self.ttl_ms / 20_000, 0.02)

    def waited_long(self, requested_at: float, now: float) -> bool:
        """The grant came so long after the request (more than a renewal period) that "a TTL
        after the request" may be nearly over although the grant is fresh: `acquire` renews once
        and trusts the lease from that renewal instead."""
        return now - requested_at > self.renew_period_s()

    def _deadline(self, lower_bound: float) -> float:
        return lower_bound + (self.ttl_ms - self.safety_margin_ms) / 1000


# --- Reentrant locks -------------------------------------------------------------------------------


class _Holdable(Protocol):
    """What a reentrant lock needs of a lease: the blocking `Lease` and the asyncio one."""

    name: str
    fencing_token: int
    shared: bool
    lost_reason: Optional[str]

    def trusted_for_s(self) -> float: ...

    def _holds(self) -> bool: ...


L = TypeVar("L", bound=_Holdable)
C = TypeVar("C")


@dataclass
class Holding(Generic[L]):
    """One owner's lease of a reentrant lock, and how many of its levels are held."""

    owner: object
    lease: L
    levels: int


class LockBook(Generic[L]):
    """Which owner (a thread, or an asyncio task) holds which lease of a reentrant lock, and how
    many levels of it. A nested acquire reuses a lease that still holds; the last level's release
    ends it. The mutex is never held across a round trip."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._holdings: dict[object, Holding[L]] = {}

    def nest(self, owner: object) -> Optional[Holding[L]]:
        """A new level of `owner`'s lease if it holds one that still holds, else None."""
        with self._mutex:
            holding = self._holdings.get(owner)
            if holding is not None and holding.lease._holds():
                holding.levels += 1
                return holding
            return None

    def add(self, owner: object, lease: L) -> Holding[L]:
        holding = Holding(owner=owner, lease=lease, levels=1)
        with self._mutex:
            # A lost lease of this owner's, if any, lives on in its levels until they release.
            self._holdings[owner] = holding
        return holding

    def held_levels(self, owner: object) -> int:
        with self._mutex:
            holding = self._holdings.get(owner)
            return holding.levels if holding is not None and holding.lease._holds() else 0

    def end_level(self, holding: Holding[L]) -> bool:
        """Ends one level; True if it was the last, and the caller must release the lease."""
        with self._mutex:
            holding.levels -= 1
            if holding.levels > 0:
                return False
            if self._holdings.get(holding.owner) is holding:
                del self._holdings[holding.owner]
            return True


# --- From the generated messages -------------------------------------------------------------------


def holders(items: Iterable[pb.HolderInfo]) -> tuple[HolderInfo, ...]:
    return tuple(
        HolderInfo(
            holder=h.holder, fencing_token=h.fencing_token, remaining_ms=h.remaining_ms,
            shared=h.shared,
        )
        for h in items
    )


def not_granted(name: str, busy: pb.Waiting | pb.NotGranted) -> NotGranted:
    return NotGranted(
        name=name, holder=busy.holder, fencing_token=busy.fencing_token,
        remaining_ms=busy.remaining_ms, held=busy.held, limit=busy.limit,
    )


def not_granted_now(info: LeaseInfo) -> NotGranted:
    """Whoever holds the name now, as `NotGranted`: what `acquire` answers when the renewal that
    confirms a grant after a long wait finds it lost."""
    return NotGranted(
        name=info.name, holder=info.holder, fencing_token=info.fencing_token,
        remaining_ms=info.remaining_ms, held=len(info.holders), limit=info.limit,
    )


def lease_info(name: str, answer: pb.DescribeResponse) -> LeaseInfo:
    return LeaseInfo(
        name=name, held=answer.held, holder=answer.holder, fencing_token=answer.fencing_token,
        remaining_ms=answer.remaining_ms, limit=answer.limit, holders=holders(answer.holders),
        waiters=answer.waiters,
    )


def listed_lease(lease: pb.LeaseInfo) -> LeaseInfo:
    return LeaseInfo(
        name=lease.name, held=True, holder=lease.holder, fencing_token=lease.fencing_token,
        remaining_ms=lease.remaining_ms, limit=lease.limit, holders=holders(lease.holders),
        waiters=lease.waiters,
    )


def list_page(answer: pb.ListResponse) -> ListPage:
    return ListPage(
        leases=tuple(listed_lease(lease) for lease in answer.leases),
        next_page_token=answer.next_page_token or None,
    )


def token_check(answer: pb.CheckTokenResponse) -> TokenCheck:
    return TokenCheck(current=answer.current, current_token=answer.current_token, held=answer.held)


def watch_event(event: pb.WatchEvent) -> WatchEvent:
    try:
        cause = pb.WatchEvent.Cause.Name(event.cause).removeprefix("CAUSE_").lower()
    except ValueError:  # a cause added after this client was generated
        cause = f"cause-{event.cause}"
    expires_at = event.expires_at if event.HasField("expires_at") else None
    return WatchEvent(
        name=event.name,
        cause=cause,
        held=event.held,
        holder=event.holder,
        fencing_token=event.fencing_token,
        expires_at_ms=None if expires_at is None else expires_at.ToMilliseconds(),
        limit=event.limit,
        holders=holders(event.holders),
        reason=event.reason,
    )


# --- Fencing on the resource's side ----------------------------------------------------------------

#: The gRPC metadata of the fencing convention (the proto's header comment): a call to a fenced
#: service carries the lease's name and its fencing token in canonical decimal.
LEASE_NAME_METADATA = "leased-lease-name"
FENCING_TOKEN_METADATA = "leased-fencing-token"


def fencing_metadata(name: str, fencing_token: int) -> list[tuple[str, str]]:
    """The metadata pairs a fenced gRPC service reads (`leased_client.fencing.FencingInterceptor`),
    for a call's `metadata=`."""
    return [(LEASE_NAME_METADATA, name), (FENCING_TOKEN_METADATA, str(fencing_token))]



class StaleTokenError(Exception):
    """A write carried a fencing token smaller than one the resource has already seen: a newer
    holder of the lease wrote, so this one lost its lease. Do not retry the write with this token.

    `resource` is the resource key (a PostgreSQL resource or table row, a Redis mark key, a lease
    name for the gRPC middleware), `token` the refused token, `mark` the largest token seen for
    the resource (None when the store did not say).
    """

    def __init__(
        self, message: str, *, resource: str = "", token: int = 0, mark: Optional[int] = None
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.token = token
        self.mark = mark


class InvalidTokenError(ValueError):
    """Bad fencing input, refused before (or by) the resource: a token outside 1 to
    9223372036854775807 (PostgreSQL's `bigint`), or a bad resource key. The message names the
    argument (`token`, `resource`, `fencing_token`, or a metadata entry)."""


class FencedResource:
    """The check a resource protected by a lease makes: it remembers the largest fencing token seen
    per lease name and rejects writes that carry a smaller one.

    This is what makes a lease safe when its holder stalls (a GC pause, a partition) and wakes up
    still believing it holds the lease: by then a new holder has written with a larger token, so
    the stale holder's write is refused. In a real system the check runs inside the storage,
    atomically with the write (a conditional UPDATE, a compare-and-set); here a lock does it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._highest_token: dict[str, int] = {}
        self._values: dict[str, str] = {}

    def write(self, name: str, fencing_token: int, value: str) -> None:
        """Stores `value` under `name`, unless a larger token has written there before. An equal
        token is accepted: the same holder writes many times under one lease."""
        with self._lock:
            highest = self._highest_token.get(name, 0)
            if fencing_token < highest:
                raise StaleTokenError(
                    f"{name}: token {fencing_token} is older than token {highest}, "
                    "which already wrote",
                    resource=name, token=fencing_token, mark=highest,
                )
            self._highest_token[name] = fencing_token
            self._values[name] = value

    def read(self, name: str) -> Optional[str]:
        """The last accepted value for `name`, if any."""
        with self._lock:
            return self._values.get(name)


class ReentrantLockBase(Generic[C, L]):
    """What the blocking and the asyncio reentrant locks share: their settings, the book of who
    holds which level, and the rule of a read-write lock's two modes. `_owner()` says who asks:
    the thread, or the asyncio task."""

    def __init__(
        self,
        client: C,
        name: str,
        ttl_ms: int,
        wait_ms: int = 0,
        holder: str = "",
        *,
        shared: bool = False,
        lock_delay_ms: int = 0,
        safety_margin_ms: Optional[int] = None,
    ) -> None:
        self.name = name
        self.ttl_ms = ttl_ms
        self.wait_ms = wait_ms
        self.holder = holder
        self.shared = shared
        self._client = client
        self._lock_delay_ms = lock_delay_ms
        self._safety_margin_ms = safety_margin_ms
        # Each owner's lease and how many of its levels are held.
        self._book: LockBook[L] = LockBook()
        # The other mode of a read-write lock: one owner may not hold both.
        self._other_mode: Optional[ReentrantLockBase[C, L]] = None
        # The levels entered with `with lock:` (`async with`), per owner, innermost last: what
        # `__exit__` releases.
        self._entered: dict[object, list[Any]] = {}

    def _push_entered(self, owner: object, hold: Any) -> None:
        with self._book._mutex:
            self._entered.setdefault(owner, []).append(hold)

    def _pop_entered(self, owner: object) -> Any:
        with self._book._mutex:
            levels = self._entered[owner]
            hold = levels.pop()
            if not levels:
                del self._entered[owner]
            return hold

    def _owner(self) -> object:
        raise NotImplementedError

    def held_levels(self) -> int:
        """How many levels the calling owner holds of a lease that still holds (0: none)."""
        return self._book.held_levels(self._owner())

    def _nest(self, owner: object) -> Optional[Holding[L]]:
        """A new level of `owner`'s lease if it holds one; None if the server must be asked.
        Raises RuntimeError if `owner` holds the other mode: no upgrade or downgrade (it would
        wait for itself)."""
        holding = self._book.nest(owner)
        if holding is None and self._other_mode is not None:
            if self._other_mode._book.held_levels(owner):
                raise mode_conflict(self.name, self.shared)
        return holding

    def __repr__(self) -> str:
        mode = ", shared" if self.shared else ""
        return f"{type(self).__name__}(name={self.name!r}{mode})"


class LockHoldBase(Generic[L]):
    """One level of a reentrant lock held: the guard of the lease underneath, shared by every
    level of it (`lease`). The blocking and asyncio holds add `lost`, `renew()` and `release()`."""

    def __init__(self, holding: Holding[L]) -> None:
        self.lease = holding.lease
        self._holding = holding
        self._released = False

    @property
    def name(self) -> str:
        return self.lease.name

    @property
    def fencing_token(self) -> int:
        return self.lease.fencing_token

    @property
    def shared(self) -> bool:
        return self.lease.shared

    @property
    def lost_reason(self) -> Optional[str]:
        return self.lease.lost_reason

    def trusted_for_s(self) -> float:
        return self.lease.trusted_for_s()

    def fencing_metadata(self) -> list[tuple[str, str]]:
        """The lease's name and fencing token as the metadata pairs a fenced gRPC service reads:
        `stub.Put(request, metadata=hold.fencing_metadata())`."""
        return fencing_metadata(self.name, self.fencing_token)

    def __repr__(self) -> str:
        return f"LockHold({self.lease!r})"


LockT = TypeVar("LockT", bound=ReentrantLockBase[Any, Any])


class ReadWriteLockBase(Generic[LockT]):
    """A read-write lock over one lease name: `read()` is a reentrant lock of shared grants,
    which coexist; `write()` one of exclusive grants, which exclude every other. Both queue in
    one line at the server, first come, first served: a waiting writer holds back the readers
    that come after it, so readers never starve a writer. There is no upgrade (read to write) or
    downgrade: an owner that holds one and asks for the other gets RuntimeError. Fence writes with
    the largest exclusive token the resource has seen; a shared token orders a read after the
    writes before it."""

    def __init__(self, read: LockT, write: LockT) -> None:
        self.name = read.name
        self._read, self._write = read, write
        read._other_mode, write._other_mode = write, read

    def read(self) -> LockT:
        """The read lock: shared grants."""
        return self._read

    def write(self) -> LockT:
        """The write lock: exclusive grants."""
        return self._write

    def __repr__(self) -> str:
        return f"ReadWriteLock(name={self.name!r})"
