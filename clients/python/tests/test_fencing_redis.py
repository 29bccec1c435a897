"""Fencing with Redis as the resource (leased_client.fencing with redis-py) on a redis-server of
its own with the repository's `leased_fencing` library loaded: `FencedRedis` (fenced SET, HSET,
DEL, and the check alone), `RedisMarks` behind the gRPC interceptor, Kleppmann's scenario with
real processes against the real leased (fencing on: holder 1 refused; off: it overwrites), and
concurrent writers with random pauses.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
import redis
import redis.asyncio

from fencing_stack import (
    assert_the_interceptor_refused_holder_1,
    concurrent_writers,
    kleppmann,
    redis_mark,
    store_server,
    unique,
    write_grpc,
)
from leased_stack import Stack

from leased_client.fencing import (
    MAX_TOKEN,
    AsyncFencedRedis,
    AsyncRedisMarks,
    FencedRedis,
    FencingInterceptor,
    InvalidTokenError,
    RedisMarks,
    StaleTokenError,
    _redis_error,
    fencing_metadata,
)


@pytest.fixture
def client(redis_resource: str) -> redis.Redis:
    with redis.Redis.from_url(redis_resource, decode_responses=True) as opened:
        yield opened


def test_kleppmann_a_paused_holder_is_refused_by_redis(stack: Stack, redis_resource: str) -> None:
    scenario = kleppmann(stack.target, "redis", redis_resource, fenced=True)
    print(scenario.line("redis", True))
    assert scenario.holder2_token > scenario.holder1_token
    assert scenario.holder1_outcome.startswith(
        f"refused: stale fencing token {scenario.holder1_token} for fence:{{"), scenario
    assert scenario.holder1_outcome.endswith(f"the highest seen is {scenario.holder2_token}")
    assert scenario.final_value == "holder 2"


def test_kleppmann_without_fencing_the_paused_holder_overwrites(
    stack: Stack, redis_resource: str
) -> None:
    scenario = kleppmann(stack.target, "redis", redis_resource, fenced=False)
    print(scenario.line("redis", False))
    assert scenario.holder2_token > scenario.holder1_token
    assert scenario.holder1_outcome == "wrote"
    assert scenario.final_value == "holder 1", "the stale write overwrote holder 2's"


def test_concurrent_writers_with_pauses_write_only_increasing_tokens(
    stack: Stack, redis_resource: str
) -> None:
    key = unique("concurrent")
    writers = concurrent_writers(stack.target, "redis", redis_resource, key)
    # Each accepted write is a SET ... GET of its own token: it answered the value it replaced.
    # In token order, each must have replaced the one before: the writes landed in token order,
    # none lost, none stale.
    replaced = dict(writers.accepted)
    tokens = sorted(replaced)
    print(f"redis: {len(tokens)} writes accepted, {writers.refused} stale refused")
    assert tokens, "some writes were accepted"
    assert writers.refused >= 1, "the laggard writer's stale writes were refused"
    assert len(tokens) == len(writers.accepted), "one write per token"
    assert [replaced[token] for token in tokens] == [None] + [str(t) for t in tokens[:-1]]
    with redis.Redis.from_url(redis_resource, decode_responses=True) as client:
        assert client.get(key) == str(tokens[-1])
        assert client.get(redis_mark(key)) == str(tokens[-1])


def test_fenced_writes_refuse_a_smaller_token_and_write_nothing(client: redis.Redis) -> None:
    fenced, mark = FencedRedis(client), unique("fence:{orders}")
    assert fenced.set(mark, "{orders}:a", 7, "seven") == "OK"
    assert fenced.set(mark, "{orders}:a", 7, "seven again", "PX", 60_000) == "OK"
    assert fenced.hset(mark, "{orders}:h", 8, {"f": "1", "g": "2"}) == 2
    with pytest.raises(StaleTokenError) as stale:
        fenced.set(mark, "{orders}:a", 6, "six")
    assert (stale.value.resource, stale.value.token, stale.value.mark) == (mark, 6, 8)
    assert str(stale.value) == f"stale fencing token 6 for {mark}: the highest seen is 8"
    with pytest.raises(StaleTokenError):
        fenced.hset(mark, "{orders}:h", 6, {"f": "x"})
    with pytest.raises(StaleTokenError):
        fenced.delete(mark, 6, "{orders}:a", "{orders}:h")
    with pytest.raises(StaleTokenError):
        fenced.fence(mark, 7)
    assert client.get("{orders}:a") == "seven again"
    assert client.hgetall("{orders}:h") == {"f": "1", "g": "2"}
    assert fenced.delete(mark, 9, "{orders}:a", "{orders}:h") == 2
    assert fenced.fence(mark, 9) == 9, "an equal token passes"
    assert client.get(mark) == "9"


def test_bad_tokens_are_refused_before_sending_and_the_boundary_is_exact(
    client: redis.Redis,
) -> None:
    fenced, mark = FencedRedis(client), unique("fence:{boundary}")
    for bad in (0, -1, 2**63, True, "5"):
        with pytest.raises(InvalidTokenError, match="^token must be a fencing token from 1 to "
                                                    "9223372036854775807"):
            fenced.set(mark, "{boundary}:k", bad, "x")  # type: ignore[arg-type]
    assert client.exists(mark) == 0, "nothing was sent"
    assert fenced.fence(mark, MAX_TOKEN - 1) == MAX_TOKEN - 1
    assert fenced.fence(mark, MAX_TOKEN) == MAX_TOKEN
    with pytest.raises(StaleTokenError) as stale:
        fenced.fence(mark, MAX_TOKEN - 1)  # as doubles, 2^63 - 2 and 2^63 - 1 are equal
    assert stale.value.mark == MAX_TOKEN
    # The library's own BADTOKEN (a raw FCALL past the helper's check) maps to the same error.
    with pytest.raises(redis.ResponseError) as raw:
        client.fcall("leased_fence", 1, mark, "05")
    mapped = _redis_error(raw.value, mark, 5)
    assert isinstance(mapped, InvalidTokenError), raw.value
    assert str(mapped) == ("token must be a fencing token from 1 to 9223372036854775807, "
                           "not '05'")


def test_the_async_client_is_fenced_the_same_way(redis_resource: str) -> None:
    mark = unique("fence:{async}")

    async def run() -> None:
        async with redis.asyncio.Redis.from_url(redis_resource, decode_responses=True) as client:
            fenced = AsyncFencedRedis(client)
            assert await fenced.set(mark, "{async}:k", 5, "five") == "OK"
            assert await fenced.hset(mark, "{async}:h", 5, {"f": "v"}) == 1
            with pytest.raises(StaleTokenError):
                await fenced.delete(mark, 4, "{async}:k")
            assert await fenced.delete(mark, 5, "{async}:k", "{async}:h") == 2
            marks = AsyncRedisMarks(client, prefix="svc:")
            assert await marks.fence("lease", 3) == 3
            with pytest.raises(StaleTokenError, match='for lease "lease": the highest seen is 3'):
                await marks.fence("lease", 2)

    asyncio.run(run())


def test_redis_marks_are_shared_by_two_replicas_of_a_fenced_service(client: redis.Redis) -> None:
    lease, prefix = unique("svc-lease"), unique("svc") + ":"
    with store_server(FencingInterceptor(RedisMarks(client, prefix=prefix))) as (first, _), \
            store_server(FencingInterceptor(RedisMarks(client, prefix=prefix))) as (second, store):
        write_grpc(first, fencing_metadata(lease, 20), "twenty")
        with pytest.raises(Exception, match=f'stale fencing token 19 for lease "{lease}": the '
                                            "highest seen is 20"):
            write_grpc(second, fencing_metadata(lease, 19), "nineteen")
        assert store.value is None
    assert client.get(prefix + lease) == "20"


def test_kleppmann_a_paused_holder_is_refused_by_the_interceptor_with_redis_marks(
    stack: Stack, client: redis.Redis
) -> None:
    with store_server(FencingInterceptor(RedisMarks(client))) as (target, store):
        scenario = kleppmann(stack.target, "grpc", target, fenced=True, store=store)
    print(scenario.line("grpc interceptor, RedisMarks", True))
    assert_the_interceptor_refused_holder_1(scenario, store)


def test_a_redis_store_that_fails_is_unavailable_and_the_handler_does_not_run() -> None:
    from leased_stack import free_port

    dead = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=2)
    with store_server(FencingInterceptor(RedisMarks(dead))) as (target, store):
        with pytest.raises(grpc.RpcError) as failed:
            write_grpc(target, fencing_metadata("svc", 5), "never")
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert failed.value.details().startswith("the fencing mark store failed: ")
    assert store.value is None and store.history == []
