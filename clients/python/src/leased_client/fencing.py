"""Fencing: a lease's token checked where the data lives, so that a holder that stalled past its
lease (a GC pause, a stopped VM) and resumes a write is refused by the resource itself.

Three adapters, each one call with the token from the guard (`lease.fencing_token`):

- PostgreSQL (psycopg 3), with `fencing/postgres/leased_fencing.sql` applied once per database:
  `fence_postgres(conn_or_cursor, resource, token)` inside the writer's transaction, before the
  write; the check and the write commit or fail together. The row-level form (a `fencing_token`
  column guarded by `leased.fencing_token_guard()`) needs no call: wrap its writes in
  `postgres_errors()` to get the same errors.
- Redis as the resource (redis-py), with the `leased_fencing` Functions library of
  `fencing/redis/leased_fencing.lua` loaded once: `FencedRedis(client).set / hset / delete / fence`.
- Your own gRPC services: `FencingInterceptor` (and `AioFencingInterceptor` for `grpc.aio`)
  refuses a call whose `leased-fencing-token` is below the mark it keeps for that lease name; the
  marks live in process (`InProcessMarks`, the default), in PostgreSQL (`PostgresMarks`) or in
  Redis (`RedisMarks`). Clients attach the metadata with `lease.fencing_metadata()`.

Errors: `StaleTokenError` (`.resource`, `.token`, `.mark`) when a newer holder wrote (PostgreSQL's
SQLSTATE LF001, Redis's STALETOKEN); `InvalidTokenError`, a `ValueError`, for bad input (a token
outside 1 to 9223372036854775807, checked before anything is sent; PostgreSQL's 22023, Redis's
BADTOKEN). Tokens are 64-bit: leased's are floored at the grant's Unix time in microseconds (about
1.8e15 in 2026) and fit PostgreSQL's `bigint` and Redis's integers.

psycopg and redis-py are not dependencies of this package (`pip install leased-client[postgres]`
or `[redis]` adds them): the helpers take the caller's connection or client and never import them.
Fencing suits exclusive grants: one mark per resource refuses the older of two concurrent permit
holders of a counting lease.
"""

from __future__ import annotations

import asyncio
import re
import threading
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    Optional,
    Protocol,
    TypeAlias,
    Union,
)

import grpc
import grpc.aio

from ._common import (
    FENCING_TOKEN_METADATA,
    LEASE_NAME_METADATA,
    InvalidTokenError,
    StaleTokenError,
    fencing_metadata,
)

__all__ = [
    "FENCING_TOKEN_METADATA",
    "LEASE_NAME_METADATA",
    "MAX_TOKEN",
    "AioFencingInterceptor",
    "AsyncFenceMarks",
    "AsyncFencedRedis",
    "AsyncInProcessMarks",
    "AsyncPostgresMarks",
    "AsyncRedisMarks",
    "FenceMarks",
    "FencedRedis",
    "FencingInterceptor",
    "InProcessMarks",
    "InvalidTokenError",
    "PostgresMarks",
    "RedisMarks",
    "StaleTokenError",
    "check_token",
    "fence_postgres",
    "fence_postgres_async",
    "fencing_metadata",
    "parse_token",
    "postgres_errors",
]

#: The largest fencing token an adapter accepts: 2^63 - 1, PostgreSQL's largest `bigint`.
MAX_TOKEN = 2**63 - 1

_CANONICAL_TOKEN = re.compile(r"[1-9][0-9]{0,18}")
_MARK_IN_MESSAGE = re.compile(r"the highest seen is ([0-9]+)\s*$")
_TOKEN_IN_MESSAGE = re.compile(r"stale fencing token ([0-9]+) ")
_SHOWN_CHARS = 40


def check_token(token: int, argument: str = "token") -> int:
    """`token` if it is a fencing token an adapter can store (an int from 1 to `MAX_TOKEN`), else
    `InvalidTokenError` naming `argument`. A bool is not a token."""
    if isinstance(token, bool) or not isinstance(token, int) or not 1 <= token <= MAX_TOKEN:
        raise InvalidTokenError(
            f"{argument} must be a fencing token from 1 to {MAX_TOKEN}, not {token!r}"
        )
    return token


def parse_token(text: str, argument: str = FENCING_TOKEN_METADATA) -> int:
    """A token in canonical decimal, as the metadata convention carries it: digits only, no sign,
    no leading zero, 1 to `MAX_TOKEN`. Else `InvalidTokenError` naming `argument` and showing what
    was given (escaped, cut to 40 characters)."""
    if _CANONICAL_TOKEN.fullmatch(text) and int(text) <= MAX_TOKEN:
        return int(text)
    raise InvalidTokenError(
        f"{argument} must be a fencing token from 1 to {MAX_TOKEN}, not {_shown(text)}"
    )


def _shown(text: str) -> str:
    """`text` in double quotes with escapes, cut to its first 40 characters: it may be anything a
    caller sent."""
    cut = "…" if len(text) > _SHOWN_CHARS else ""
    escaped = text[:_SHOWN_CHARS].encode("unicode_escape").decode("ascii").replace('"', '\\"')
    return f'"{escaped}"{cut}'


def _check_resource(resource: str, argument: str = "resource") -> str:
    if not isinstance(resource, str) or not resource:
        raise InvalidTokenError(f"{argument} must be a non-empty resource key, not {resource!r}")
    return resource


def _mark_in(message: str) -> Optional[int]:
    """The mark at the end of a stale-token message ("... the highest seen is N")."""
    found = _MARK_IN_MESSAGE.search(message)
    return int(found.group(1)) if found else None


# --- PostgreSQL (psycopg 3) ------------------------------------------------------------------------

_FENCE_SQL = "SELECT leased.fence(%s::text, %s::bigint)"
_STALE_SQLSTATE = "LF001"
_INVALID_SQLSTATE = "22023"  # invalid_parameter_value


class PostgresExecutor(Protocol):
    """What `fence_postgres` needs: a psycopg 3 `Connection` or `Cursor` (both have `execute`,
    which returns something with `fetchone`)."""

    def execute(self, query: Any, params: Any, /) -> Any: ...


class AsyncPostgresExecutor(Protocol):
    """A psycopg 3 `AsyncConnection` or `AsyncCursor`."""

    def execute(self, query: Any, params: Any, /) -> Awaitable[Any]: ...


def _postgres_error(error: BaseException, resource: str, token: int) -> Optional[Exception]:
    """The fencing error for a psycopg error of the fencing SQL, or None for any other error.
    22023 counts only from the fencing SQL (its message starts with the argument's name): the
    SQLSTATE is shared with other invalid parameters."""
    sqlstate = getattr(error, "sqlstate", None)
    diag = getattr(error, "diag", None)
    message = getattr(diag, "message_primary", None) or str(error).splitlines()[0]
    if sqlstate == _STALE_SQLSTATE:
        refused = _TOKEN_IN_MESSAGE.match(message)
        if not token and refused:  # postgres_errors() without the token: the message has it
            token = int(refused.group(1))
        return StaleTokenError(message, resource=resource, token=token, mark=_mark_in(message))
    if sqlstate == _INVALID_SQLSTATE and message.startswith(
        ("token must", "resource must", "fencing_token must")
    ):
        return InvalidTokenError(message)
    return None


def fence_postgres(conn_or_cursor: PostgresExecutor, resource: str, token: int) -> int:
    """Fences `resource` with `token` inside the caller's transaction: `SELECT leased.fence(...)`.
    Call it before the transaction's writes to the resource; returns the mark (now `token`).

    Raises `StaleTokenError` (SQLSTATE LF001) if a newer holder wrote: the transaction is then
    aborted (roll it back; do not retry with this token). Raises `InvalidTokenError` for a token
    outside 1 to 9223372036854775807 or an empty resource before sending anything, and for the
    server's 22023 (a resource key over 1024 bytes). The mark's row lock is held until the
    transaction ends, so fenced transactions of one resource commit in token order: run it in a
    transaction (psycopg's default, or `with conn.transaction():`), not in autocommit, or the
    check and the write are two transactions.
    """
    check_token(token)
    _check_resource(resource)
    with postgres_errors(resource, token):
        row = conn_or_cursor.execute(_FENCE_SQL, (resource, token)).fetchone()
    return int(row[0])


async def fence_postgres_async(
    conn_or_cursor: AsyncPostgresExecutor, resource: str, token: int
) -> int:
    """`fence_postgres` for psycopg's `AsyncConnection` or `AsyncCursor`."""
    check_token(token)
    _check_resource(resource)
    with postgres_errors(resource, token):
        cursor = await conn_or_cursor.execute(_FENCE_SQL, (resource, token))
        row = await cursor.fetchone()
    return int(row[0])


@contextmanager
def postgres_errors(resource: str = "", token: int = 0) -> Iterator[None]:
    """Turns the fencing SQL's errors raised inside the block into `StaleTokenError` (LF001) and
    `InvalidTokenError` (22023): for the row-level form, whose writes are plain INSERTs and
    UPDATEs of a table with the `leased.fencing_token_guard()` trigger. `resource` and `token`
    (what the block writes with) fill the error's fields (the token, when not given, is read from
    the message); other errors pass unchanged."""
    try:
        yield
    except Exception as error:
        fencing_error = _postgres_error(error, resource, token)
        if fencing_error is None:
            raise
        raise fencing_error from error


# --- Redis as the resource (redis-py) --------------------------------------------------------------


class RedisCommands(Protocol):
    """What `FencedRedis` needs: a redis-py `Redis` (or `RedisCluster`) client."""

    def fcall(self, function: str, numkeys: int, *keys_and_args: Any) -> Any: ...


class AsyncRedisCommands(Protocol):
    """A `redis.asyncio.Redis` client."""

    def fcall(self, function: str, numkeys: int, *keys_and_args: Any) -> Awaitable[Any]: ...


def _redis_error(error: BaseException, mark: str, token: int) -> Optional[Exception]:
    """The fencing error for a Redis error reply of the `leased_fencing` library, or None."""
    message = str(error)
    if message.startswith("STALETOKEN "):
        text = message.removeprefix("STALETOKEN ")
        return StaleTokenError(text, resource=mark, token=token, mark=_mark_in(text))
    if message.startswith("BADTOKEN "):
        return InvalidTokenError(message.removeprefix("BADTOKEN "))
    return None


@contextmanager
def _redis_errors(mark: str, token: int) -> Iterator[None]:
    try:
        yield
    except Exception as error:
        fencing_error = _redis_error(error, mark, token)
        if fencing_error is None:
            raise
        raise fencing_error from error


def _fcall_args(
    function: str, keys: tuple[Any, ...], token: int, args: tuple[Any, ...]
) -> tuple[Any, ...]:
    check_token(token)
    return (function, len(keys), *keys, str(token), *args)


def _hset_args(mapping: Mapping[Any, Any]) -> tuple[Any, ...]:
    if not mapping:
        raise ValueError("hset needs at least one field")
    return tuple(item for pair in mapping.items() for item in pair)


class FencedRedis:
    """Fenced writes to your own Redis, over the `leased_fencing` Functions library (load it once
    per Redis: `redis-cli -x FUNCTION LOAD REPLACE < fencing/redis/leased_fencing.lua`).

    Each write names a mark key: a string holding the largest token accepted for the resource it
    guards (e.g. `fence:{orders}` for the keys `{orders}:*`; in a Cluster the mark and the keys
    must share a hash slot). A token below the mark raises `StaleTokenError` and writes nothing;
    otherwise the token becomes the mark and the write is done, atomically. The marks are as
    durable as that Redis's data.
    """

    def __init__(self, client: RedisCommands) -> None:
        self.client = client

    def _call(self, function: str, keys: tuple[Any, ...], token: int, *args: Any) -> Any:
        call = _fcall_args(function, keys, token, args)
        with _redis_errors(str(keys[0]), token):
            return self.client.fcall(*call)

    def fence(self, mark: str, token: int) -> int:
        """Checks and records `token` against `mark` only (then write however you like, knowing a
        write after this one is not atomic with it); returns the mark."""
        return int(self._call("leased_fence", (mark,), token))

    def set(self, mark: str, key: str, token: int, value: Any, *options: Any) -> Any:
        """SET `key` `value` [options, e.g. "PX", 5000 or "GET"], fenced; SET's reply."""
        return self._call("leased_set", (mark, key), token, value, *options)

    def hset(self, mark: str, key: str, token: int, mapping: Mapping[Any, Any]) -> int:
        """HSET `key` with the fields of `mapping`, fenced; the number of fields added."""
        return int(self._call("leased_hset", (mark, key), token, *_hset_args(mapping)))

    def delete(self, mark: str, token: int, *keys: str) -> int:
        """DEL `keys`, fenced; the number of keys removed."""
        if not keys:
            raise ValueError("delete needs at least one key")
        return int(self._call("leased_del", (mark, *keys), token))


class AsyncFencedRedis:
    """`FencedRedis` for a `redis.asyncio.Redis` client."""

    def __init__(self, client: AsyncRedisCommands) -> None:
        self.client = client

    async def _call(self, function: str, keys: tuple[Any, ...], token: int, *args: Any) -> Any:
        call = _fcall_args(function, keys, token, args)
        with _redis_errors(str(keys[0]), token):
            return await self.client.fcall(*call)

    async def fence(self, mark: str, token: int) -> int:
        return int(await self._call("leased_fence", (mark,), token))

    async def set(self, mark: str, key: str, token: int, value: Any, *options: Any) -> Any:
        return await self._call("leased_set", (mark, key), token, value, *options)

    async def hset(self, mark: str, key: str, token: int, mapping: Mapping[Any, Any]) -> int:
        return int(await self._call("leased_hset", (mark, key), token, *_hset_args(mapping)))

    async def delete(self, mark: str, token: int, *keys: str) -> int:
        if not keys:
            raise ValueError("delete needs at least one key")
        return int(await self._call("leased_del", (mark, *keys), token))


# --- Mark stores for the gRPC middleware -----------------------------------------------------------


class FenceMarks(Protocol):
    """A store of high-water marks, the largest token accepted per lease name: `fence` raises
    `StaleTokenError` when a larger one was recorded for `name`, else records `token` (an equal
    one passes) and returns it. Any other exception is a store failure (UNAVAILABLE)."""

    def fence(self, name: str, token: int) -> int: ...


class AsyncFenceMarks(Protocol):
    """`FenceMarks` for `AioFencingInterceptor`."""

    async def fence(self, name: str, token: int) -> int: ...


def _stale(name: str, token: int, mark: Optional[int]) -> StaleTokenError:
    return StaleTokenError(
        f"stale fencing token {token} for lease {_quoted(name)}: the highest seen is {mark}",
        resource=name, token=token, mark=mark,
    )


def _quoted(name: str) -> str:
    return '"' + name.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


class _Marks:
    """The in-process marks: a dict under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, int] = {}

    def _fence(self, name: str, token: int) -> int:
        with self._lock:
            mark = self._marks.get(name, 0)
            if token < mark:
                raise _stale(name, token, mark)
            self._marks[name] = token
            return token


class InProcessMarks(_Marks):
    """The default store: the marks live in this process's memory. Only as durable as the
    process: a restarted service accepts any token until it sees a newer one, and each replica of
    a service keeps its own marks (use `PostgresMarks` or `RedisMarks` to share them). With it,
    the interceptor runs the unary handlers of one lease name one at a time, so their writes land
    in token order even if the service itself pauses mid-call."""

    def fence(self, name: str, token: int) -> int:
        return self._fence(name, token)


class AsyncInProcessMarks(_Marks):
    """`InProcessMarks` for `AioFencingInterceptor` (the dict's lock is never held across an
    await)."""

    async def fence(self, name: str, token: int) -> int:
        return self._fence(name, token)


class PostgresMarks:
    """Marks in PostgreSQL: `SELECT leased.fence(prefix || name, token)` in autocommit, one
    statement per call, shared by every replica of the service. `connect` opens a psycopg 3
    connection in autocommit, e.g. `lambda: psycopg.connect(url, autocommit=True)`; it is opened
    on first use and again after it broke. Calls share that connection one at a time."""

    def __init__(self, connect: Callable[[], Any], *, prefix: str = "") -> None:
        self._connect = connect
        self._prefix = prefix
        self._lock = threading.Lock()
        self._conn: Any = None

    def fence(self, name: str, token: int) -> int:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
                if not self._conn.autocommit:
                    raise ValueError("PostgresMarks needs a connection in autocommit mode")
            try:
                return fence_postgres(self._conn, self._prefix + name, token)
            except StaleTokenError as error:
                raise _stale(name, token, error.mark) from error


class AsyncPostgresMarks:
    """`PostgresMarks` with psycopg's `AsyncConnection`: `connect` is a coroutine function, e.g.
    `lambda: psycopg.AsyncConnection.connect(url, autocommit=True)`."""

    def __init__(self, connect: Callable[[], Awaitable[Any]], *, prefix: str = "") -> None:
        self._connect = connect
        self._prefix = prefix
        self._lock = asyncio.Lock()
        self._conn: Any = None

    async def fence(self, name: str, token: int) -> int:
        async with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = await self._connect()
                if not self._conn.autocommit:
                    raise ValueError("AsyncPostgresMarks needs a connection in autocommit mode")
            try:
                return await fence_postgres_async(self._conn, self._prefix + name, token)
            except StaleTokenError as error:
                raise _stale(name, token, error.mark) from error


class RedisMarks:
    """Marks in Redis: `FCALL leased_fence 1 <prefix><name> <token>` (the `leased_fencing`
    library loaded), shared by every replica of the service; as durable as that Redis's data."""

    def __init__(self, client: RedisCommands, *, prefix: str = "") -> None:
        self._redis = FencedRedis(client)
        self._prefix = prefix

    def fence(self, name: str, token: int) -> int:
        try:
            return self._redis.fence(self._prefix + name, token)
        except StaleTokenError as error:
            raise _stale(name, token, error.mark) from error


class AsyncRedisMarks:
    """`RedisMarks` for a `redis.asyncio.Redis` client."""

    def __init__(self, client: AsyncRedisCommands, *, prefix: str = "") -> None:
        self._redis = AsyncFencedRedis(client)
        self._prefix = prefix

    async def fence(self, name: str, token: int) -> int:
        try:
            return await self._redis.fence(self._prefix + name, token)
        except StaleTokenError as error:
            raise _stale(name, token, error.mark) from error


# --- The gRPC middleware ---------------------------------------------------------------------------


class _Refusal(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


_NOT_FENCED = (
    f"this service is fenced: the call needs {LEASE_NAME_METADATA} and {FENCING_TOKEN_METADATA} "
    "metadata (the lease's name and fencing token: pass metadata=lease.fencing_metadata())"
)


def _fencing_entries(
    metadata: Optional[Any], required: bool
) -> Optional[tuple[str, int]]:
    """The (lease name, token) a call carries; None if it carries neither and fencing is not
    required. Raises `_Refusal` (INVALID_ARGUMENT) for anything else that is not a valid pair."""
    names: list[str] = []
    tokens: list[str] = []
    for key, value in metadata or ():
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        if key == LEASE_NAME_METADATA:
            names.append(text)
        elif key == FENCING_TOKEN_METADATA:
            tokens.append(text)
    if not names and not tokens:
        if required:
            raise _Refusal(grpc.StatusCode.INVALID_ARGUMENT, _NOT_FENCED)
        return None
    for entry, values in ((LEASE_NAME_METADATA, names), (FENCING_TOKEN_METADATA, tokens)):
        other = FENCING_TOKEN_METADATA if entry == LEASE_NAME_METADATA else LEASE_NAME_METADATA
        if not values:
            raise _Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{entry} is missing: a fenced call carries {other} and {entry} together",
            )
        if len(values) > 1:
            raise _Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{entry} is given {len(values)} times: a fenced call carries one",
            )
    if not names[0]:
        raise _Refusal(grpc.StatusCode.INVALID_ARGUMENT, f"{LEASE_NAME_METADATA} must not be empty")
    try:
        token = parse_token(tokens[0])
    except InvalidTokenError as error:
        raise _Refusal(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None
    return names[0], token


def _entries_or_handler(
    handler: Handler, details: grpc.HandlerCallDetails, required: bool,
    refusing: Callable[[Handler, _Refusal], Handler],
) -> Union[_FencedCall, Handler]:
    """The call's lease name and token to check; else the handler to run instead: one that
    refuses the call (bad metadata), or `handler` itself (no metadata, not required)."""
    try:
        entries = _fencing_entries(details.invocation_metadata, required)
    except _Refusal as refusal:
        return refusing(handler, refusal)
    return handler if entries is None else _FencedCall(*entries)


@dataclass(frozen=True)
class _FencedCall:
    """What a call carries, well formed. (Not a tuple: grpc's method handlers are namedtuples.)"""

    name: str
    token: int


def _store_refusal(name: str, token: int, error: Exception) -> _Refusal:
    if isinstance(error, StaleTokenError):
        stale = error if error.resource == name else _stale(name, token, error.mark)
        return _Refusal(grpc.StatusCode.FAILED_PRECONDITION, str(stale))
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    return _Refusal(grpc.StatusCode.UNAVAILABLE, f"the fencing mark store failed: {detail}")


class _NameLocks:
    """One lock per lease name, kept while a call holds or waits for it (then dropped)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[Any, int]] = {}

    def enter(self, name: str) -> Any:
        with self._guard:
            lock, users = self._locks.get(name, (None, 0))
            if lock is None:
                lock = self._make()
            self._locks[name] = (lock, users + 1)
            return lock

    def leave(self, name: str) -> None:
        with self._guard:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)


if TYPE_CHECKING:  # generic only in typeshed's stubs; annotations are never evaluated
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]


class FencingInterceptor(grpc.ServerInterceptor):
    """Makes a gRPC server a fenced resource: `grpc.server(pool, interceptors=[FencingInterceptor()])`.

    Each call must carry `leased-lease-name` and `leased-fencing-token` (`lease.fencing_metadata()`).
    A token below the mark of that lease name is refused with FAILED_PRECONDITION ("stale fencing
    token <t> for lease "<name>": the highest seen is <mark>"); otherwise the mark becomes the token
    (an equal one passes) and the handler runs. Bad metadata (one entry without the other, an empty
    name, a token that is not canonical decimal 1 to 9223372036854775807) is INVALID_ARGUMENT
    naming the entry; a call with neither is INVALID_ARGUMENT too unless `required=False`, when it
    passes unchecked. A store failure is UNAVAILABLE, and the handler does not run.

    `marks` is where the marks live: `InProcessMarks()` (the default; only as durable as the
    process), `PostgresMarks`, `RedisMarks`. With the in-process marks, the unary handlers of one
    lease name run one at a time (a lock per name held across the check and the handler), so their
    writes land in token order even if the service pauses mid-call. Streaming calls are checked
    when they start.
    """

    def __init__(self, marks: Optional[FenceMarks] = None, *, required: bool = True) -> None:
        self.marks: FenceMarks = marks if marks is not None else InProcessMarks()
        self.required = required
        self._in_turn = isinstance(self.marks, InProcessMarks)
        self._name_locks = _NameLocks(threading.Lock)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Optional[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Optional[Handler]:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        entries = _entries_or_handler(handler, handler_call_details, self.required, _refusing)
        if not isinstance(entries, _FencedCall):
            return entries  # refusing the call, or passing it unchecked
        name, token = entries.name, entries.token
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, name, token),
                handler.request_deserializer, handler.response_serializer,
            )
        return _checked_at_start(handler, lambda context: self._check(name, token, context))

    def _check(self, name: str, token: int, context: grpc.ServicerContext) -> None:
        try:
            self.marks.fence(name, token)
        except Exception as error:
            refusal = _store_refusal(name, token, error)
            context.abort(refusal.code, refusal.details)

    def _unary(
        self, behaviour: Callable[[Any, grpc.ServicerContext], Any], name: str, token: int
    ) -> Callable[[Any, grpc.ServicerContext], Any]:
        def fenced(request: Any, context: grpc.ServicerContext) -> Any:
            if not self._in_turn:
                self._check(name, token, context)
                return behaviour(request, context)
            lock = self._name_locks.enter(name)
            try:
                with lock:
                    self._check(name, token, context)
                    return behaviour(request, context)
            finally:
                self._name_locks.leave(name)

        return fenced


def _refusing(handler: Handler, refusal: _Refusal) -> Handler:
    """A handler of `handler`'s kind that ends every call with `refusal`."""

    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(refusal.code, refusal.details)

    return _same_kind(handler, refuse)


def _same_kind(handler: Handler, behaviour: Callable[[Any, Any], Any]) -> Handler:
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(behaviour, handler.request_deserializer, handler.response_serializer)


def _checked_at_start(handler: Handler, check: Callable[[Any], None]) -> Handler:
    """A streaming handler that runs `check(context)` (which aborts a refused call) first."""
    behaviour: Any = handler.unary_stream or handler.stream_unary or handler.stream_stream

    def fenced(request_or_iterator: Any, context: Any) -> Any:
        check(context)
        return behaviour(request_or_iterator, context)

    return _same_kind(handler, fenced)


class AioFencingInterceptor(grpc.aio.ServerInterceptor):
    """`FencingInterceptor` for `grpc.aio` servers:
    `grpc.aio.server(interceptors=[AioFencingInterceptor()])`, with the same rules and messages.
    `marks` is an `AsyncFenceMarks`: `AsyncInProcessMarks()` (the default), `AsyncPostgresMarks`,
    `AsyncRedisMarks`. With the in-process marks, the unary handlers of one lease name run one at
    a time (an `asyncio.Lock` per name); streaming calls are checked when they start."""

    def __init__(self, marks: Optional[AsyncFenceMarks] = None, *, required: bool = True) -> None:
        self.marks: AsyncFenceMarks = marks if marks is not None else AsyncInProcessMarks()
        self.required = required
        self._in_turn = isinstance(self.marks, AsyncInProcessMarks)
        self._name_locks = _NameLocks(asyncio.Lock)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Optional[Handler]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Optional[Handler]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        entries = _entries_or_handler(handler, handler_call_details, self.required, _aio_refusing)
        if not isinstance(entries, _FencedCall):
            return entries  # refusing the call, or passing it unchecked
        name, token = entries.name, entries.token
        check = self._checker(name, token)
        if handler.unary_unary is not None:
            unary: Any = handler.unary_unary

            async def fenced_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                async with self._turn(name):
                    await check(context)
                    return await unary(request, context)

            return grpc.unary_unary_rpc_method_handler(
                fenced_unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_unary is not None:
            stream_unary: Any = handler.stream_unary

            async def fenced_stream_unary(requests: Any, context: Any) -> Any:
                await check(context)
                return await stream_unary(requests, context)

            return _same_kind(handler, fenced_stream_unary)
        streaming: Any = handler.unary_stream or handler.stream_stream

        async def fenced_streaming(request_or_iterator: Any, context: Any) -> AsyncIterator[Any]:
            await check(context)
            answer = streaming(request_or_iterator, context)
            if hasattr(answer, "__aiter__"):
                async for message in answer:
                    yield message
            else:  # a handler that writes with context.write and returns
                await answer

        return _same_kind(handler, fenced_streaming)

    def _checker(
        self, name: str, token: int
    ) -> Callable[[grpc.aio.ServicerContext[Any, Any]], Awaitable[None]]:
        async def check(context: grpc.aio.ServicerContext[Any, Any]) -> None:
            try:
                await self.marks.fence(name, token)
            except Exception as error:
                refusal = _store_refusal(name, token, error)
                await context.abort(refusal.code, refusal.details)

        return check

    @asynccontextmanager
    async def _turn(self, name: str) -> AsyncIterator[None]:
        if not self._in_turn:
            yield
            return
        lock = self._name_locks.enter(name)
        try:
            async with lock:
                yield
        finally:
            self._name_locks.leave(name)


def _aio_refusing(handler: Handler, refusal: _Refusal) -> Handler:
    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(refusal.code, refusal.details)

    if handler.response_streaming:

        async def refuse_streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            await context.abort(refusal.code, refusal.details)
            yield  # never reached: makes this an async generator

        return _same_kind(handler, refuse_streaming)
    return _same_kind(handler, refuse)

