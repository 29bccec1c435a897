"""Giving up a wait with the Python client in examples/python: cancels racing releases against
the real `leased` binary and a real redis-server, then the guard's timing and the give-up path
against a scripted server (no network). The stack and its fixtures are in leased_stack.py and
conftest.py.

Run from the repository root: `.venv/bin/pytest tests/python`. Timing margins are generous: these
tests must pass on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import grpc
import pytest

# leased_stack first: it puts examples/python on the path.
from leased_stack import wait_until

import leased_client  # noqa: E402  (importing generates the stubs)
from leased_client import (  # noqa: E402
    GIVE_UP_GRACE_S,
    AcquireCancelled,
    AcquireTimeout,
    Lease,
    LeaseClient,
    NotGranted,
    RenewError,
    pb,
)


# --- Giving up a wait: 100 cancels racing releases, against the real server ---------------------

RACE_TRIES = 100
RACE_AT_ONCE = 10  # tries run side by side, each on its own lease name


def cancel_racing_release(holder_client: LeaseClient, waiter_client: LeaseClient,
                          name: str) -> tuple[str, bool]:
    """H holds `name`; W waits for it; then H releases and W gives up at the same moment. Returns
    what happened to W and whether anyone still held `name` a second after the give-up grace."""
    held = holder_client.acquire(name, ttl_ms=30_000, holder="H")
    assert isinstance(held, Lease)
    queued, cancel = threading.Event(), threading.Event()
    answer: dict[str, object] = {}

    def wait() -> None:
        try:
            answer["value"] = waiter_client.acquire(
                name, ttl_ms=30_000, wait_ms=30_000, holder="W", cancel=cancel,
                on_waiting=lambda _: queued.set())
        except BaseException as error:  # reported below, not lost on the thread
            answer["value"] = error
        answer["at"] = time.monotonic()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert queued.wait(timeout=10), "W never reported that it waits"
    both = threading.Barrier(2)
    releaser = threading.Thread(target=lambda: (both.wait(), held.release()))
    releaser.start()
    both.wait()
    cancel.set()
    gave_up_at = time.monotonic()
    waiter.join(timeout=10)
    releaser.join(timeout=10)
    assert not waiter.is_alive(), "acquire did not return after the give-up"

    value = answer["value"]
    if isinstance(value, Lease):
        # Granted before W noticed its own give-up: a lease like any other, W's to release.
        outcome = "granted before the give-up was seen"
        value.release()
    elif isinstance(value, AcquireCancelled):
        # The caller is answered at once, not after the grace.
        answered_after_s = float(answer["at"]) - gave_up_at
        assert answered_after_s < GIVE_UP_GRACE_S / 2, "acquire waited for the grace"
        late_token = value.late_grant.result(timeout=GIVE_UP_GRACE_S + 10)
        outcome = ("granted after the give-up, released by the give-up path" if late_token
                   else "no grant reached the client")
    else:
        raise AssertionError(f"acquire answered {value!r}")
    time.sleep(max(0.0, gave_up_at + GIVE_UP_GRACE_S + 1.0 - time.monotonic()))
    return outcome, holder_client.describe(name).held


def race_many(holder_client: LeaseClient, waiter_client: LeaseClient,
              prefix: str) -> tuple[Counter[str], list[str]]:
    names = [f"{prefix}-{i}" for i in range(RACE_TRIES)]
    with ThreadPoolExecutor(max_workers=RACE_AT_ONCE) as pool:
        results = list(pool.map(
            lambda name: cancel_racing_release(holder_client, waiter_client, name), names))
    outcomes = Counter(outcome for outcome, _ in results)
    still_held = [name for name, (_, held) in zip(names, results) if held]
    print(f"\n{RACE_TRIES} cancels racing releases ({prefix}): {dict(outcomes)}; "
          f"left held: {len(still_held)}")
    return outcomes, still_held


def test_cancels_racing_releases_never_leave_the_lease_held(clients) -> None:
    # The client keeps W's call open through the grace, so W keeps its place in the line: the
    # server hands it the lease H released, and the give-up path must release it. Without that
    # (see the next test) some of these grants stay held until their TTL.
    holder_client, waiter_client, _ = clients
    outcomes, still_held = race_many(holder_client, waiter_client, "py-race")
    assert still_held == [], f"held after W gave up: {still_held}; outcomes {dict(outcomes)}"


@pytest.mark.skipif(os.environ.get("LEASED_RACE_WITHOUT_GRACE") != "1",
                    reason="a measurement: set LEASED_RACE_WITHOUT_GRACE=1")
def test_without_the_grace_a_cancel_leaves_the_lease_held(clients, monkeypatch) -> None:
    """The same race with a client that cancels the call at once (no grace; the give-up seen
    within a millisecond): grants that the server sent before the cancel reached it stay held
    until their TTL."""
    holder_client, waiter_client, operator = clients
    monkeypatch.setattr(leased_client, "GIVE_UP_GRACE_S", 0.0)
    monkeypatch.setattr(leased_client, "_CANCEL_POLL_S", 0.001)
    _, still_held = race_many(holder_client, waiter_client, "py-race-no-grace")
    for name in still_held:
        operator.revoke(name, "race test cleanup")
    assert still_held, "no grant was orphaned: the race was not hit this time"


# --- The guard's timing and the give-up path, against a scripted server (no network) -------------


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class FakeCall:
    """A streaming call's answers, as the client reads them; `cancel()` ends it as gRPC does."""

    _END = object()

    def __init__(self) -> None:
        self._answers: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.cancelled_at: float | None = None

    def send(self, answer: object) -> None:
        self._answers.put(answer)

    def end(self) -> None:
        self._answers.put(self._END)

    def cancel(self) -> None:
        if self.cancelled_at is None:
            self.cancelled_at = time.monotonic()
        self._answers.put(FakeRpcError(grpc.StatusCode.CANCELLED, "cancelled"))

    def __iter__(self) -> FakeCall:
        return self

    def __next__(self) -> object:
        answer = self._answers.get()
        if answer is self._END:
            raise StopIteration
        if isinstance(answer, Exception):
            raise answer
        return answer


NAME, LEASE_ID, TOKEN, TTL_MS = "fake", "f" * 32, 41, 900


def granted() -> pb.AcquireResponse:
    return pb.AcquireResponse(granted=pb.Granted(name=NAME, lease_id=LEASE_ID,
                                                 fencing_token=TOKEN, ttl_ms=TTL_MS))


def waiting() -> pb.AcquireResponse:
    return pb.AcquireResponse(waiting=pb.Waiting(holder="other", fencing_token=7, position=1))


def renewed() -> pb.RenewResponse:
    return pb.RenewResponse(name=NAME, renewed=pb.Renewed(fencing_token=TOKEN, ttl_ms=TTL_MS))


class FakeServer:
    """Stands in for `LeaseServiceStub`. `acquire_script(call)` plays the Acquire stream on a
    thread. The Renew streams answer in order, like the server: renewal number k (counted over
    all streams) is answered `renew_answers[k]` = (delay after it arrives or after the previous
    answer, whichever is later; the answer, an error that ends the stream, or None to end it)."""

    def __init__(self, acquire_script: Callable[[FakeCall], None] = lambda call: None,
                 renew_answers: tuple[tuple[float, object], ...] = ()) -> None:
        self._acquire_script = acquire_script
        self._renew_answers = list(renew_answers)
        self.acquire_calls: list[FakeCall] = []
        self.renew_calls: list[FakeCall] = []
        self.renewals_sent: list[float] = []
        self.answered: list[float] = []
        self.released: list[tuple[str, float]] = []

    def Acquire(self, request: pb.AcquireRequest, timeout: float) -> FakeCall:
        call = FakeCall()
        self.acquire_calls.append(call)
        threading.Thread(target=self._acquire_script, args=(call,), daemon=True).start()
        return call

    def Renew(self, requests: Iterator[pb.RenewRequest]) -> FakeCall:
        call = FakeCall()
        self.renew_calls.append(call)
        threading.Thread(target=self._serve_renew, args=(requests, call), daemon=True).start()
        return call

    def _serve_renew(self, requests: Iterator[pb.RenewRequest], call: FakeCall) -> None:
        answer_at = 0.0
        for _ in requests:
            self.renewals_sent.append(time.monotonic())
            delay_s, answer = self._renew_answers.pop(0) if self._renew_answers else (0, renewed())
            answer_at = max(answer_at, time.monotonic()) + delay_s
            time.sleep(max(0.0, answer_at - time.monotonic()))
            self.answered.append(time.monotonic())
            if answer is None:
                call.end()
                return
            call.send(answer)
            if isinstance(answer, Exception):
                return

    def Release(self, request: pb.ReleaseRequest, timeout: float) -> pb.ReleaseResponse:
        self.released.append((request.lease_id, time.monotonic()))
        return pb.ReleaseResponse(released=True)

    def Describe(self, request: pb.DescribeRequest, timeout: float) -> pb.DescribeResponse:
        holder = pb.HolderInfo(holder="other", fencing_token=77, remaining_ms=500)
        return pb.DescribeResponse(held=True, holder="other", fencing_token=77, remaining_ms=500,
                                   limit=1, holders=[holder])


@contextlib.contextmanager
def fake_client(server: FakeServer) -> Iterator[LeaseClient]:
    with LeaseClient("127.0.0.1:9", rpc_timeout_s=5.0) as client:  # never connects
        client._stub = server  # type: ignore[assignment]
        yield client


def guarded_lease(server: FakeServer) -> Lease:
    lease = Lease(
        server,  # type: ignore[arg-type]
        granted().granted, requested_at=time.monotonic(), safety_margin_ms=None, rpc_timeout_s=5.0)
    lease.start_keepalive()
    return lease


def wait_lost(lease: Lease, deadline: float) -> float:
    """Waits for `lost`; fails unless it fired by `deadline` plus scheduling slack. Returns when."""
    assert lease.lost.wait(timeout=max(0.0, deadline + 0.25 - time.monotonic())), (
        "lost did not fire at the trust deadline")
    lost_at = time.monotonic()
    assert lost_at >= deadline - 0.005, "lost fired before the trust deadline"
    return lost_at


def test_a_renewal_answered_after_the_trust_deadline_is_never_credited() -> None:
    # The first renewal is answered at once; the second only after the trust has run out.
    server = FakeServer(renew_answers=((0.0, renewed()), (1.0, renewed())))
    lease = guarded_lease(server)
    wait_until(lambda: len(server.answered) >= 1, 5, "the first renewal")
    time.sleep(0.02)
    deadline = time.monotonic() + lease.trusted_for_s()

    wait_lost(lease, deadline)
    assert lease.lost_reason == "no renewal succeeded before the lease could expire"
    # The stream that still owes an answer was dropped, not reused for another request.
    assert server.renew_calls[0].cancelled_at is not None
    wait_until(lambda: len(server.answered) >= 2, 5, "the late answer")
    time.sleep(0.1)
    assert lease.lost.is_set() and lease.trusted_for_s() < 0, "a late answer was credited"
    assert len(server.renewals_sent) == 2, "renewed after the loss"
    assert lease.release() is True


def test_lost_fires_at_the_deadline_while_a_callers_renewal_is_in_flight() -> None:
    # The caller's own renewal is answered long after the trust has run out. The keepalive must
    # not wait behind it: `lost` fires at the deadline, and the late "renewed" does not count.
    server = FakeServer(renew_answers=((1.2, renewed()),))
    lease = guarded_lease(server)
    deadline = time.monotonic() + lease.trusted_for_s()
    renewal: dict[str, bool] = {}
    caller = threading.Thread(target=lambda: renewal.update(result=lease.renew()))
    caller.start()

    wait_lost(lease, deadline)
    caller.join(timeout=5)
    assert renewal == {"result": False}, "the late answer was credited"
    assert lease.trusted_for_s() < 0
    assert lease.lost_reason == "no renewal succeeded before the lease could expire"


def long_wait_then_granted(call: FakeCall) -> None:
    call.send(waiting())
    time.sleep(TTL_MS / 1000 / 3 + 0.2)  # longer than a third of the TTL
    call.send(granted())
    call.end()


@pytest.mark.parametrize(
    ("answer", "error_type"),
    [(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "store down"), grpc.RpcError),
     (None, RenewError)],  # the server ends the Renew stream without answering
    ids=["renewal-error", "renew-stream-ends"],
)
def test_a_failed_confirmation_after_a_long_wait_releases_the_grant(answer, error_type) -> None:
    server = FakeServer(long_wait_then_granted, renew_answers=((0.0, answer),))
    with fake_client(server) as client, pytest.raises(error_type):
        client.acquire(NAME, ttl_ms=TTL_MS, wait_ms=10_000)
    assert [lease_id for lease_id, _ in server.released] == [LEASE_ID]


def test_a_confirmation_that_finds_the_lease_lost_is_not_granted() -> None:
    lost = pb.RenewResponse(name=NAME, lost=pb.Lost(reason="held by another holder"))
    server = FakeServer(long_wait_then_granted, renew_answers=((0.0, lost),))
    with fake_client(server) as client:
        answer = client.acquire(NAME, ttl_ms=TTL_MS, wait_ms=10_000)
    assert answer == NotGranted(NAME, "other", 77, 500, held=1, limit=1)


def test_giving_up_answers_at_once_and_releases_a_grant_that_arrives_later() -> None:
    gave_up = threading.Event()

    def granted_just_after_the_give_up(call: FakeCall) -> None:
        call.send(waiting())
        gave_up.wait()
        time.sleep(0.3)  # the grant was on the wire when the caller gave up
        call.send(granted())
        call.end()

    server = FakeServer(granted_just_after_the_give_up)
    cancel = threading.Event()
    with fake_client(server) as client:
        threading.Timer(0.2, lambda: (cancel.set(), gave_up.set())).start()
        started = time.monotonic()
        with pytest.raises(AcquireCancelled) as raised:
            client.acquire(NAME, ttl_ms=TTL_MS, wait_ms=10_000, cancel=cancel)
        assert time.monotonic() - started < 0.2 + GIVE_UP_GRACE_S / 2, "waited for the grace"
        assert not isinstance(raised.value, TimeoutError)
        assert raised.value.late_grant.result(timeout=10) == TOKEN
    [(lease_id, released_at)] = server.released
    assert lease_id == LEASE_ID
    # Released first, then the call is cancelled.
    cancelled_at = server.acquire_calls[0].cancelled_at
    assert cancelled_at is not None and cancelled_at >= released_at


def test_a_give_up_timeout_raises_timeout_and_cancels_the_call_after_the_grace() -> None:
    server = FakeServer(lambda call: call.send(waiting()))  # never granted
    with fake_client(server) as client:
        started = time.monotonic()
        with pytest.raises(AcquireTimeout) as raised:
            client.acquire(NAME, ttl_ms=TTL_MS, wait_ms=10_000, timeout_s=0.3)
        gave_up_after = time.monotonic() - started
        assert 0.3 <= gave_up_after < 0.3 + GIVE_UP_GRACE_S / 2
        assert isinstance(raised.value, TimeoutError)
        assert raised.value.late_grant.result(timeout=10) is None
    call = server.acquire_calls[0]
    assert call.cancelled_at is not None
    assert call.cancelled_at - started >= 0.3 + GIVE_UP_GRACE_S - 0.05, "cancelled before the grace"
    assert server.released == []
