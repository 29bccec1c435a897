"""Fencing with PostgreSQL as the resource (leased_client.fencing with psycopg 3) on a real
PostgreSQL started by scripts/postgres-scratch.sh, with the repository's fencing SQL applied:
`fence_postgres` in the writer's transaction (form 1), the row trigger (form 2) with
`postgres_errors`, and `PostgresMarks` behind the gRPC interceptor. Each form plays Kleppmann's
scenario with real processes against the real leased, with fencing on (holder 1 refused) and
off (holder 1 overwrites), and runs concurrent writers with random pauses.
"""

from __future__ import annotations

import asyncio

import grpc
import psycopg
import pytest

from fencing_stack import (
    assert_the_interceptor_refused_holder_1,
    concurrent_writers,
    kleppmann,
    postgres_history,
    store_server,
    strictly_increasing,
    unique,
    write_grpc,
)
from leased_stack import Stack

from leased_client.fencing import (
    MAX_TOKEN,
    AsyncPostgresMarks,
    FencingInterceptor,
    InvalidTokenError,
    PostgresMarks,
    StaleTokenError,
    fence_postgres,
    fence_postgres_async,
    fencing_metadata,
    postgres_errors,
)


@pytest.mark.parametrize("adapter", ["postgres-fence", "postgres-row"])
def test_kleppmann_a_paused_holder_is_refused_by_postgres(
    stack: Stack, postgres_url: str, adapter: str
) -> None:
    scenario = kleppmann(stack.target, adapter, postgres_url, fenced=True)
    print(scenario.line(adapter, True))
    assert scenario.holder2_token > scenario.holder1_token
    assert scenario.holder1_outcome.startswith("refused: stale fencing token "), scenario
    assert f"the highest seen is {scenario.holder2_token}" in scenario.holder1_outcome
    assert scenario.final_value == "holder 2"


@pytest.mark.parametrize("adapter", ["postgres-fence", "postgres-row"])
def test_kleppmann_without_fencing_the_paused_holder_overwrites(
    stack: Stack, postgres_url: str, adapter: str
) -> None:
    scenario = kleppmann(stack.target, adapter, postgres_url, fenced=False)
    print(scenario.line(adapter, False))
    assert scenario.holder2_token > scenario.holder1_token
    assert scenario.holder1_outcome == "wrote"
    assert scenario.final_value == "holder 1", "the stale write overwrote holder 2's"


@pytest.mark.parametrize("adapter", ["postgres-fence", "postgres-row"])
def test_concurrent_writers_with_pauses_commit_only_increasing_tokens(
    stack: Stack, postgres_url: str, adapter: str
) -> None:
    key = unique(f"concurrent-{adapter}")
    writers = concurrent_writers(stack.target, adapter, postgres_url, key)
    history = postgres_history(postgres_url, key)
    print(f"{adapter}: {len(history)} writes committed, {writers.refused} stale refused")
    assert history, "some writes were accepted"
    assert writers.refused >= 1, "the laggard writer's stale writes were refused"
    assert strictly_increasing(history), history
    assert sorted(token for token, _ in writers.accepted) == history


def test_fence_postgres_refuses_a_smaller_token_and_passes_an_equal_one(postgres_url: str) -> None:
    resource = unique("orders")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        with conn.transaction():
            assert fence_postgres(conn, resource, 7) == 7
        with conn.transaction():
            assert fence_postgres(conn.cursor(), resource, 7) == 7, "a cursor works too"
        with pytest.raises(StaleTokenError) as stale, conn.transaction():
            fence_postgres(conn, resource, 6)
        assert (stale.value.resource, stale.value.token, stale.value.mark) == (resource, 6, 7)
        assert str(stale.value) == (
            f"stale fencing token 6 for resource '{resource}': the highest seen is 7")
        # The refused transaction rolled back: the connection goes on.
        with conn.transaction():
            assert fence_postgres(conn, resource, 8) == 8


def test_fence_postgres_refuses_bad_tokens_before_sending_and_takes_the_largest(
    postgres_url: str,
) -> None:
    resource = unique("boundary")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for bad in (0, -1, 2**63, 2**64, True, "5", None):
            with pytest.raises(InvalidTokenError, match=r"^token must be a fencing token from 1 "
                                                        r"to 9223372036854775807"):
                fence_postgres(conn, resource, bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidTokenError, match="^resource must be a non-empty"):
            fence_postgres(conn, "", 5)
        # The server's 22023 (a key over 1024 bytes) is the same error.
        with pytest.raises(InvalidTokenError, match="^resource must be at most 1024 bytes"):
            fence_postgres(conn, "r" * 1025, 5)
        assert isinstance(InvalidTokenError("x"), ValueError)
        assert fence_postgres(conn, resource, MAX_TOKEN) == MAX_TOKEN
        with pytest.raises(StaleTokenError) as stale:
            fence_postgres(conn, resource, MAX_TOKEN - 1)
        assert stale.value.mark == MAX_TOKEN, "2^63 - 1 is stored exactly"


def test_the_row_trigger_refuses_a_smaller_token_and_a_bad_one(postgres_url: str) -> None:
    key = unique("row")
    upsert = ("INSERT INTO rows_fenced (key, value, fencing_token) VALUES (%s, %s, %s) "
              "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
              "fencing_token = excluded.fencing_token")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(upsert, (key, "a", MAX_TOKEN - 1))
        with pytest.raises(StaleTokenError) as stale, postgres_errors(key, 5):
            conn.execute(upsert, (key, "b", 5))
        assert (stale.value.token, stale.value.mark) == (5, MAX_TOKEN - 1)
        with pytest.raises(StaleTokenError) as unnamed, postgres_errors():
            conn.execute(upsert, (key, "b", 6))
        assert (unnamed.value.token, unnamed.value.mark) == (6, MAX_TOKEN - 1), "from the message"
        for bad in (0, -5):
            with pytest.raises(InvalidTokenError, match="^fencing_token must be"), \
                    postgres_errors(key, bad):
                conn.execute(upsert, (key, "c", bad))
        conn.execute(upsert, (key, "d", MAX_TOKEN))
        row = conn.execute("SELECT value, fencing_token FROM rows_fenced WHERE key = %s",
                           (key,)).fetchone()
        assert row == ("d", MAX_TOKEN)
        # Any other error passes unchanged.
        with pytest.raises(psycopg.errors.UndefinedTable), postgres_errors():
            conn.execute("SELECT * FROM no_such_table")


def test_the_async_helper_fences_an_async_connection(postgres_url: str) -> None:
    resource = unique("async")

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            async with conn.transaction():
                assert await fence_postgres_async(conn, resource, 10) == 10
            with pytest.raises(StaleTokenError):
                async with conn.transaction():
                    await fence_postgres_async(conn, resource, 9)
            marks = AsyncPostgresMarks(
                lambda: psycopg.AsyncConnection.connect(postgres_url, autocommit=True),
                prefix="svc:")
            assert await marks.fence(resource, 3) == 3
            with pytest.raises(StaleTokenError, match=f'for lease "{resource}"'):
                await marks.fence(resource, 2)

    asyncio.run(run())


def test_postgres_marks_are_shared_by_two_replicas_of_a_fenced_service(postgres_url: str) -> None:
    lease, prefix = unique("svc-lease"), unique("svc") + ":"

    def marks() -> PostgresMarks:
        return PostgresMarks(lambda: psycopg.connect(postgres_url, autocommit=True),
                             prefix=prefix)

    with store_server(FencingInterceptor(marks())) as (first, store_1), \
            store_server(FencingInterceptor(marks())) as (second, store_2):
        write_grpc(first, fencing_metadata(lease, 20), "twenty")
        with pytest.raises(Exception, match="stale fencing token 19 for lease") as refused:
            write_grpc(second, fencing_metadata(lease, 19), "nineteen")
        assert "the highest seen is 20" in str(refused.value)
        write_grpc(second, fencing_metadata(lease, 20), "twenty again")
        assert (store_1.value, store_2.value) == ("twenty", "twenty again")
    with psycopg.connect(postgres_url) as conn:
        mark = conn.execute("SELECT token FROM leased.fence_marks WHERE resource = %s",
                            (prefix + lease,)).fetchone()
    assert mark == (20,), "the mark is kept under the prefix"


def test_kleppmann_a_paused_holder_is_refused_by_the_interceptor_with_postgres_marks(
    stack: Stack, postgres_url: str
) -> None:
    marks = PostgresMarks(lambda: psycopg.connect(postgres_url, autocommit=True))
    with store_server(FencingInterceptor(marks)) as (target, store):
        scenario = kleppmann(stack.target, "grpc", target, fenced=True, store=store)
    print(scenario.line("grpc interceptor, PostgresMarks", True))
    assert_the_interceptor_refused_holder_1(scenario, store)


def test_a_postgres_store_that_fails_is_unavailable_and_the_handler_does_not_run() -> None:
    from leased_stack import free_port

    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    marks = PostgresMarks(lambda: psycopg.connect(dead, autocommit=True, connect_timeout=2))
    with store_server(FencingInterceptor(marks)) as (target, store):
        with pytest.raises(grpc.RpcError) as failed:
            write_grpc(target, fencing_metadata("svc", 5), "never")
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert failed.value.details().startswith("the fencing mark store failed: ")
    assert store.value is None and store.history == []
