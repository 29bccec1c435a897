"""A gRPC service fenced by leased_client.fencing.FencingInterceptor (in-process marks), a real
server on loopback: Kleppmann's scenario with real processes against the real leased (fencing on:
holder 1 refused with FAILED_PRECONDITION; off: it overwrites), concurrent writers with random
pauses, the metadata rules (bad input is INVALID_ARGUMENT naming the entry, the 2^63 - 1 / 2^63
boundary), the guards' `fencing_metadata()`, one name's handlers in turn, and the same rules on
`grpc.aio` (AioFencingInterceptor). The PostgreSQL and Redis mark stores are in
test_fencing_postgres.py and test_fencing_redis.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import grpc
import grpc.aio
import pytest

from fencing_stack import (
    STORE_PUT,
    Store,
    assert_the_interceptor_refused_holder_1,
    concurrent_writers,
    kleppmann,
    store_server,
    strictly_increasing,
)
from leased_stack import Stack

from leased_client import Lease, LeaseClient
from leased_client.fencing import (
    MAX_TOKEN,
    AioFencingInterceptor,
    FencingInterceptor,
    InProcessMarks,
    fencing_metadata,
)
from leased_client.aio import Lease as AioLease
from leased_client.aio import LeaseClient as AioLeaseClient


@pytest.fixture
def fenced() -> Iterator[tuple[str, Store]]:
    with store_server(FencingInterceptor()) as served:
        yield served


def put(target: str, metadata: Any, value: str = "v") -> grpc.RpcError | None:
    """Calls Store.Put; the error it ended with, None if it succeeded."""
    with grpc.insecure_channel(target) as channel:
        try:
            channel.unary_unary(STORE_PUT)(value.encode(), metadata=metadata, timeout=10)
            return None
        except grpc.RpcError as error:
            return error


def test_kleppmann_a_paused_holder_is_refused_by_the_interceptor(stack: Stack) -> None:
    with store_server(FencingInterceptor()) as (target, store):
        scenario = kleppmann(stack.target, "grpc", target, fenced=True, store=store)
    print(scenario.line("grpc interceptor", True))
    assert_the_interceptor_refused_holder_1(scenario, store)


def test_kleppmann_without_the_interceptor_the_paused_holder_overwrites(stack: Stack) -> None:
    with store_server(None) as (target, store):
        scenario = kleppmann(stack.target, "grpc", target, fenced=False, store=store)
    print(scenario.line("grpc interceptor", False))
    assert scenario.holder2_token > scenario.holder1_token
    assert scenario.holder1_outcome == "wrote"
    assert scenario.final_value == "holder 1", "the stale write overwrote holder 2's"


def test_concurrent_writers_with_pauses_reach_the_handler_in_token_order(stack: Stack) -> None:
    with store_server(FencingInterceptor()) as (target, store):
        writers = concurrent_writers(stack.target, "grpc", target, "unused")
    history = [token for token, _ in store.history]
    print(f"grpc interceptor: {len(history)} calls accepted, {writers.refused} stale refused")
    assert history, "some calls were accepted"
    assert writers.refused >= 1, "the laggard writer's stale calls were refused"
    assert strictly_increasing(history), history
    assert sorted(token for token, _ in writers.accepted) == history


@pytest.mark.parametrize(("metadata", "details"), [
    ([], "this service is fenced: the call needs leased-lease-name and leased-fencing-token "
         "metadata"),
    ([("leased-fencing-token", "5")], "leased-lease-name is missing"),
    ([("leased-lease-name", "job")], "leased-fencing-token is missing"),
    ([("leased-lease-name", ""), ("leased-fencing-token", "5")],
     "leased-lease-name must not be empty"),
    ([("leased-lease-name", "a"), ("leased-lease-name", "b"), ("leased-fencing-token", "5")],
     "leased-lease-name is given 2 times"),
] + [
    ([("leased-lease-name", "job"), ("leased-fencing-token", bad)],
     "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not "
     f"\"{bad}\"")
    for bad in ["0", "-5", "05", "12a", "+5", " 5", str(2**63), "99999999999999999999"]
])
def test_bad_metadata_is_invalid_argument_naming_the_entry(
    fenced: tuple[str, Store], metadata: list[tuple[str, str]], details: str
) -> None:
    target, store = fenced
    error = put(target, metadata)
    assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(details), error.details()
    assert store.history == [], "the handler never ran"


def test_a_long_bad_token_is_shown_cut_and_escaped(fenced: tuple[str, Store]) -> None:
    error = put(fenced[0], [("leased-lease-name", "job"), ("leased-fencing-token", "x" * 100)])
    assert error is not None
    assert error.details().endswith(f'not "{"x" * 40}"…'), error.details()
    error = put(fenced[0], [("leased-lease-name", "job"), ("leased-fencing-token", '12"a')])
    assert error is not None and error.details().endswith('not "12\\"a"'), error.details()


def test_the_largest_token_passes_and_stays_the_mark(fenced: tuple[str, Store]) -> None:
    target, store = fenced
    assert put(target, fencing_metadata("edge", MAX_TOKEN - 1)) is None
    assert put(target, fencing_metadata("edge", MAX_TOKEN)) is None
    assert put(target, fencing_metadata("edge", MAX_TOKEN)) is None, "an equal token passes"
    stale = put(target, fencing_metadata("edge", MAX_TOKEN - 1))
    assert stale is not None and stale.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert stale.details() == (f'stale fencing token {MAX_TOKEN - 1} for lease "edge": the '
                               f"highest seen is {MAX_TOKEN}")
    assert [token for token, _ in store.history] == [MAX_TOKEN - 1, MAX_TOKEN, MAX_TOKEN]


def test_with_required_off_a_call_without_metadata_passes_but_a_bad_one_does_not() -> None:
    with store_server(FencingInterceptor(required=False)) as (target, store):
        assert put(target, []) is None
        error = put(target, [("leased-lease-name", "job"), ("leased-fencing-token", "0")])
        assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert put(target, fencing_metadata("job", 9)) is None
        stale = put(target, fencing_metadata("job", 8))
        assert stale is not None and stale.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert len(store.history) == 2


def test_the_guards_attach_the_metadata(stack: Stack, fenced: tuple[str, Store]) -> None:
    target, store = fenced
    with LeaseClient(stack.target) as client:
        lease = client.acquire("py-guard-metadata", ttl_ms=5_000, wait_ms=5_000)
        assert isinstance(lease, Lease)
        with lease:
            assert lease.fencing_metadata() == [
                ("leased-lease-name", "py-guard-metadata"),
                ("leased-fencing-token", str(lease.fencing_token)),
            ]
            assert put(target, lease.fencing_metadata()) is None
            token_sent = lease.fencing_token
        with client.lock("py-guard-lock", ttl_ms=5_000, wait_ms=5_000) as hold:
            assert hold.fencing_metadata() == fencing_metadata(hold.name, hold.fencing_token)

    async def aio() -> list[tuple[str, str]]:
        async with AioLeaseClient(stack.target) as client:
            lease = await client.acquire("py-guard-aio", ttl_ms=5_000, wait_ms=5_000)
            assert isinstance(lease, AioLease)
            async with lease:
                return lease.fencing_metadata()

    metadata = asyncio.run(aio())
    assert metadata[0] == ("leased-lease-name", "py-guard-aio")
    assert int(metadata[1][1]) > 0
    assert [token for token, _ in store.history] == [token_sent]


def test_unary_handlers_of_one_name_run_one_at_a_time_in_process() -> None:
    """A handler that pauses mid-call keeps the name: a newer token's call waits for it, so the
    writes land in token order (the pausing one first), and other names are not held up."""
    running, order = threading.Event(), []
    release = threading.Event()

    def slow_put(request: bytes, context: grpc.ServicerContext) -> bytes:
        if request == b"slow":
            running.set()
            release.wait(timeout=10)
        order.append(request.decode())
        return b"ok"

    server = grpc.server(ThreadPoolExecutor(max_workers=8), interceptors=[FencingInterceptor()])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "fencingtest.Store", {"Put": grpc.unary_unary_rpc_method_handler(slow_put)})])
    target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        with ThreadPoolExecutor(max_workers=3) as callers:
            slow = callers.submit(put, target, fencing_metadata("n", 5), "slow")
            assert running.wait(timeout=10)
            newer = callers.submit(put, target, fencing_metadata("n", 6), "newer")
            other = callers.submit(put, target, fencing_metadata("other", 1), "other name")
            assert other.result(timeout=10) is None
            time.sleep(0.3)
            assert not newer.done(), "the newer token waits for the name"
            release.set()
            assert slow.result(timeout=10) is None and newer.result(timeout=10) is None
        assert order == ["other name", "slow", "newer"]
    finally:
        server.stop(grace=None).wait()


def test_the_aio_interceptor_follows_the_same_rules() -> None:
    async def run() -> None:
        history: list[str] = []

        async def aio_put(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            history.append(request.decode())
            return b"ok"

        async def aio_list(request: bytes, context: Any) -> Any:
            for part in (b"a", b"b"):
                yield part

        server = grpc.aio.server(interceptors=[AioFencingInterceptor()])
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "fencingtest.Store", {
                "Put": grpc.unary_unary_rpc_method_handler(aio_put),
                "List": grpc.unary_stream_rpc_method_handler(aio_list),
            })])
        target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                call = channel.unary_unary(STORE_PUT)
                assert await call(b"seven", metadata=fencing_metadata("a", 7)) == b"ok"
                assert await call(b"seven again", metadata=fencing_metadata("a", 7)) == b"ok"
                with pytest.raises(grpc.aio.AioRpcError) as stale:
                    await call(b"six", metadata=fencing_metadata("a", 6))
                assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert stale.value.details() == (
                    'stale fencing token 6 for lease "a": the highest seen is 7')
                for metadata in ([], [("leased-lease-name", "a"), ("leased-fencing-token", "0")],
                                 [("leased-fencing-token", "9")]):
                    with pytest.raises(grpc.aio.AioRpcError) as bad:
                        await call(b"bad", metadata=metadata)
                    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                listing = channel.unary_stream("/fencingtest.Store/List")
                parts = [part async for part in listing(b"", metadata=fencing_metadata("a", 8))]
                assert parts == [b"a", b"b"], "a streaming call is checked when it starts"
                with pytest.raises(grpc.aio.AioRpcError) as stale_stream:
                    _ = [part async for part in listing(b"", metadata=fencing_metadata("a", 7))]
                assert stale_stream.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        finally:
            await server.stop(grace=None)
        assert history == ["seven", "seven again"]

    asyncio.run(run())


def test_streaming_calls_are_checked_when_they_start() -> None:
    def listing(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"part"

    marks = InProcessMarks()
    server = grpc.server(ThreadPoolExecutor(max_workers=4), interceptors=[FencingInterceptor(marks)])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "fencingtest.Store", {"List": grpc.unary_stream_rpc_method_handler(listing)})])
    target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        with grpc.insecure_channel(target) as channel:
            call = channel.unary_stream("/fencingtest.Store/List")
            assert list(call(b"", metadata=fencing_metadata("s", 3))) == [b"part"]
            with pytest.raises(grpc.RpcError) as stale:
                list(call(b"", metadata=fencing_metadata("s", 2)))
            assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            with pytest.raises(grpc.RpcError) as bad:
                list(call(b"", metadata=[("leased-lease-name", "s")]))
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        server.stop(grace=None).wait()
    assert marks.fence("s", 3) == 3

