"""What the fencing tests share: a real PostgreSQL (scripts/postgres-scratch.sh) with the
repository's fencing SQL applied, a real redis-server as the resource with the `leased_fencing`
library loaded, a small real gRPC service (`Store`) to fence with the interceptor, the writes each
adapter makes (also made by fencing_holder.py, the holder process), and the two scenarios every
adapter is proven with: Kleppmann's paused holder, and concurrent writers with random pauses.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import grpc
import psycopg
import redis

from leased_client import Lease, LeaseClient, StaleTokenError
from leased_client.fencing import FencedRedis, FencingInterceptor, fence_postgres, postgres_errors

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
FENCING_SQL = REPO / "fencing" / "postgres" / "leased_fencing.sql"
FENCING_LUA = REPO / "fencing" / "redis" / "leased_fencing.lua"
HOLDER = HERE / "fencing_holder.py"
POSTGRES_STARTUP_S = 120.0  # initdb on first use, or the script installing PostgreSQL

# The tables the PostgreSQL writes go to: `docs` fenced per resource with leased.fence (and the
# unfenced writes too: fencing off is not calling it); `rows_fenced` with the row trigger and
# `rows_plain` without it. Each write also appends to `history` in its transaction, so the order
# of accepted writes is the order of `history.id`.
SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (key text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS rows_fenced (
  key text PRIMARY KEY, value text NOT NULL, fencing_token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS rows_plain (
  key text PRIMARY KEY, value text NOT NULL, fencing_token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS history (
  id bigserial PRIMARY KEY, key text NOT NULL, token bigint NOT NULL, value text NOT NULL);
DROP TRIGGER IF EXISTS rows_fenced_fencing ON rows_fenced;
CREATE TRIGGER rows_fenced_fencing BEFORE INSERT OR UPDATE ON rows_fenced
  FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
"""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- The resources ---------------------------------------------------------------------------------


@contextlib.contextmanager
def running_postgres() -> Iterator[str]:
    """A throwaway PostgreSQL through scripts/postgres-scratch.sh on a free loopback port, the
    fencing SQL and the test tables applied; its URL. Stopped (SIGINT, fast shutdown) and its
    directory removed at the end."""
    from leased_stack import free_port, wait_until

    # Under /tmp, not pytest's tmp_path: as root, the server runs as `postgres`, which must be
    # able to reach the directory.
    workdir = Path(tempfile.mkdtemp(prefix="leased-py-pg-"))
    port = free_port()
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    log = (workdir.parent / f"{workdir.name}.log").open("wb")
    server = subprocess.Popen(
        [str(REPO / "scripts" / "postgres-scratch.sh"), str(workdir), str(port)],
        stdout=log, stderr=subprocess.STDOUT,
    )

    def connects() -> bool:
        if server.poll() is not None:
            raise RuntimeError(f"postgres-scratch.sh exited with {server.returncode}: "
                               f"{Path(log.name).read_text()}")
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    try:
        wait_until(connects, POSTGRES_STARTUP_S, "PostgreSQL to accept connections")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(FENCING_SQL.read_text())
            conn.execute(SCHEMA)
        yield url
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        log.close()
        os.unlink(log.name)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def running_redis_resource(workdir: Path) -> Iterator[str]:
    """A redis-server of its own as the resource (not leased's), `leased_fencing` loaded; its URL."""
    from leased_stack import running_redis

    with running_redis(workdir) as (port, _):
        url = f"redis://127.0.0.1:{port}"
        with redis.Redis.from_url(url) as client:
            client.function_load(FENCING_LUA.read_text(), replace=True)
        yield url


# --- A gRPC service to fence -----------------------------------------------------------------------

STORE_PUT = "/fencingtest.Store/Put"


@dataclass
class Store:
    """One value, written by `Put` (bytes in, bytes out), with the history of accepted writes:
    (the fencing token the call carried, the value), in the order the handler ran."""

    value: Optional[str] = None
    history: list[tuple[int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = dict(context.invocation_metadata())
        token = int(str(metadata.get("leased-fencing-token", "0")))
        with self.lock:
            self.value = request.decode()
            self.history.append((token, self.value))
        return b"ok"


@contextlib.contextmanager
def store_server(interceptor: Optional[grpc.ServerInterceptor]) -> Iterator[tuple[str, Store]]:
    """A real gRPC server on a free loopback port serving a `Store`, behind `interceptor` (none:
    fencing off); its target and the store."""
    store = Store()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        interceptors=[interceptor] if interceptor is not None else [],
    )
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "fencingtest.Store", {"Put": grpc.unary_unary_rpc_method_handler(store.put)},
    )])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", store
    finally:
        server.stop(grace=None).wait()


# --- The writes ------------------------------------------------------------------------------------


class Refused(Exception):
    """The resource refused a write (a StaleTokenError, or FAILED_PRECONDITION from a service)."""


def write_postgres_fence(url: str, key: str, token: int, value: str, fenced: bool) -> None:
    """Form 1: leased.fence, then the write, in one transaction."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        if fenced:
            fence_postgres(conn, key, token)
        conn.execute(
            "INSERT INTO docs (key, value, token) VALUES (%s, %s, %s) ON CONFLICT (key) "
            "DO UPDATE SET value = excluded.value, token = excluded.token", (key, value, token))
        conn.execute("INSERT INTO history (key, token, value) VALUES (%s, %s, %s)",
                     (key, token, value))


def write_postgres_row(url: str, key: str, token: int, value: str, fenced: bool) -> None:
    """Form 2: an upsert of a row whose fencing_token column the trigger guards (`rows_fenced`),
    or of the same row in a table without the trigger (`rows_plain`)."""
    table = "rows_fenced" if fenced else "rows_plain"
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        with postgres_errors(key, token):
            conn.execute(
                f"INSERT INTO {table} (key, value, fencing_token) VALUES (%s, %s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
                "fencing_token = excluded.fencing_token", (key, value, token))
        conn.execute("INSERT INTO history (key, token, value) VALUES (%s, %s, %s)",
                     (key, token, value))


def redis_mark(key: str) -> str:
    return f"fence:{{{key}}}"


def write_redis(url: str, key: str, token: int, value: str, fenced: bool) -> Optional[str]:
    """A fenced SET (leased_set with GET: the value it replaced), or a plain SET."""
    with redis.Redis.from_url(url, decode_responses=True) as client:
        if fenced:
            previous: Optional[str] = FencedRedis(client).set(
                redis_mark(key), key, token, value, "GET")
            return previous
        return client.set(key, value, get=True)


def write_grpc(target: str, metadata: list[tuple[str, str]], value: str) -> None:
    with grpc.insecure_channel(target) as channel:
        put = channel.unary_unary(STORE_PUT)
        try:
            put(value.encode(), metadata=metadata, timeout=10)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise Refused(error.details()) from None
            raise


def write(adapter: str, url: str, key: str, lease: Lease, value: str, fenced: bool) -> Any:
    """`lease` writes `value` to the resource `key` through `adapter`; `Refused` if the resource
    refuses it. (For "grpc", `url` is the target of a fenced Store server, or an unfenced one.)"""
    token = lease.fencing_token
    try:
        if adapter == "postgres-fence":
            write_postgres_fence(url, key, token, value, fenced)
        elif adapter == "postgres-row":
            write_postgres_row(url, key, token, value, fenced)
        elif adapter == "redis":
            return write_redis(url, key, token, value, fenced)
        elif adapter == "grpc":
            write_grpc(url, lease.fencing_metadata(), value)
        else:
            raise ValueError(f"unknown adapter {adapter!r}")
    except StaleTokenError as error:
        raise Refused(str(error)) from error
    return None


def read_value(adapter: str, url: str, key: str, fenced: bool, store: Optional[Store]) -> Any:
    """What the resource holds for `key` now."""
    if adapter in ("postgres-fence", "postgres-row"):
        table = "docs" if adapter == "postgres-fence" else (
            "rows_fenced" if fenced else "rows_plain")
        with psycopg.connect(url) as conn:
            row = conn.execute(f"SELECT value FROM {table} WHERE key = %s", (key,)).fetchone()
            return row[0] if row else None
    if adapter == "redis":
        with redis.Redis.from_url(url, decode_responses=True) as client:
            return client.get(key)
    assert store is not None
    return store.value


# --- Kleppmann's scenario --------------------------------------------------------------------------


@dataclass
class Scenario:
    holder1_token: int
    holder2_token: int
    holder1_outcome: str  # "wrote" or "refused: <the resource's message>"
    final_value: Any

    def line(self, adapter: str, fenced: bool) -> str:
        mode = "fencing on" if fenced else "fencing off"
        return (f"{adapter}, {mode}: holder 1 (token {self.holder1_token}) paused past its "
                f"lease; holder 2 (token {self.holder2_token}) wrote; holder 1 resumed: "
                f"{self.holder1_outcome}; the resource holds {self.final_value!r}")


def holder_command(leased: str, lease_name: str, adapter: str, url: str, key: str, value: str,
                   fenced: bool, wait_for_go: bool) -> list[str]:
    command = [sys.executable, str(HOLDER), "--leased", leased, "--lease", lease_name,
               "--adapter", adapter, "--url", url, "--key", key, "--value", value]
    if not fenced:
        command.append("--unfenced")
    if wait_for_go:
        command.append("--wait-for-go")
    return command


def wait_until_stopped(pid: int, timeout_s: float = 10.0) -> None:
    """Waits until every thread of process `pid` is stopped (state T in
    /proc/<pid>/task/*/stat): SIGSTOP is delivered asynchronously, and a go-ahead sent before the
    holder has really stopped could let it write before its lease expires."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = []
        for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
            with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                # The state follows the command name, which is in parentheses and may hold any
                # character: take what follows the last ')'.
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        if states and all(state == "T" for state in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not stop within {timeout_s} s: {states}")
        time.sleep(0.01)


def kleppmann(leased: str, adapter: str, url: str, fenced: bool,
              store: Optional[Store] = None) -> Scenario:
    """Holder 1, a process, acquires a 500 ms lease and is stopped (SIGSTOP) just before its
    write; well past its TTL, holder 2 (another process) acquires the lease and writes; holder 1
    is resumed (SIGCONT) and writes with its old token. Returns what happened."""
    lease_name, key = unique("py-kleppmann"), unique(f"doc-{adapter}")
    holder1 = subprocess.Popen(
        holder_command(leased, lease_name, adapter, url, key, "holder 1", fenced, True),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        first = holder1.stdout.readline()
        assert first.startswith("token "), f"holder 1: {first!r} {holder1.stderr.read()}"
        holder1_token = int(first.split()[1])
        holder1.send_signal(signal.SIGSTOP)  # paused before its write (a GC pause, a stopped VM)
        wait_until_stopped(holder1.pid)
        holder1.stdin.write("go\n")  # read when it resumes
        holder1.stdin.flush()
        time.sleep(1.5)  # three TTLs: its lease has expired at the server
        holder2 = subprocess.run(
            holder_command(leased, lease_name, adapter, url, key, "holder 2", fenced, False),
            capture_output=True, text=True, timeout=60,
        )
        lines = holder2.stdout.splitlines()
        assert holder2.returncode == 0 and lines[-1] == "wrote", holder2.stdout + holder2.stderr
        holder2_token = int(lines[0].split()[1])
    finally:
        holder1.send_signal(signal.SIGCONT)
    out, err = holder1.communicate(timeout=60)
    outcome = out.splitlines()[-1] if out.strip() else f"no output: {err}"
    return Scenario(holder1_token, holder2_token, outcome,
                    read_value(adapter, url, key, fenced, store))


def assert_the_interceptor_refused_holder_1(scenario: Scenario, store: Store) -> None:
    """Kleppmann's scenario through a fenced Store (any mark store): holder 1's call was refused
    with both tokens named, and only holder 2's reached the handler."""
    assert scenario.holder2_token > scenario.holder1_token
    assert scenario.holder1_outcome.startswith(
        f"refused: stale fencing token {scenario.holder1_token} for lease \"py-kleppmann-")
    assert scenario.holder1_outcome.endswith(f"the highest seen is {scenario.holder2_token}")
    assert scenario.final_value == "holder 2"
    assert [token for token, _ in store.history] == [scenario.holder2_token]


# --- Concurrent writers ----------------------------------------------------------------------------


@dataclass
class Writers:
    #: (token, what the write returned) of each accepted write, in the order they were answered.
    accepted: list[tuple[int, Any]] = field(default_factory=list)
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def concurrent_writers(
    leased: str, adapter: str, url: str, key: str, *, writers: int = 4, seconds: float = 2.0,
    max_writes: int = 40,
) -> Writers:
    """`writers` threads, for `seconds` (and at most `max_writes` writes each), each acquire a
    150 ms lease without keepalive, pause at random (half the time 0 to 50 ms, else 200 to 400
    ms: past the TTL, so that another writer may be granted the lease and write meanwhile), then
    write their token, once, with it.

    Writer 0 is the laggard that makes stale attempts certain rather than left to chance: after
    each grant it pauses past its TTL until a write with a larger token has been accepted (at
    most 3 s), then writes with its old token, which the resource must refuse."""
    result = Writers()
    newest_accepted = threading.Condition(result.lock)
    lease_name = unique("py-concurrent")
    deadline = time.monotonic() + seconds

    def overtaken(token: int) -> bool:
        return any(accepted > token for accepted, _ in result.accepted)

    def writer(number: int) -> None:
        rng = random.Random(number)
        with LeaseClient(leased) as client:
            for _ in range(max_writes):
                if time.monotonic() > deadline:
                    return
                lease = client.acquire(lease_name, ttl_ms=150, wait_ms=2_000, keepalive=False)
                if not isinstance(lease, Lease):
                    continue
                token = lease.fencing_token
                if number == 0:
                    with newest_accepted:
                        newest_accepted.wait_for(lambda: overtaken(token), timeout=3.0)
                else:
                    # Short pauses, or pauses past the TTL during which another writer may win.
                    time.sleep(
                        rng.uniform(0, 0.05) if rng.random() < 0.5 else rng.uniform(0.2, 0.4))
                try:
                    answer = write(adapter, url, key, lease, str(token), True)
                    with newest_accepted:
                        result.accepted.append((token, answer))
                        newest_accepted.notify_all()
                except Refused:
                    with result.lock:
                        result.refused += 1
                with contextlib.suppress(grpc.RpcError):
                    lease.release()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return result


def postgres_history(url: str, key: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT token FROM history WHERE key = %s ORDER BY id", (key,))
        return [token for (token,) in rows.fetchall()]


def strictly_increasing(tokens: list[int]) -> bool:
    return all(earlier < later for earlier, later in zip(tokens, tokens[1:]))

