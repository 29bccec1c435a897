"""The stack the Python client's tests run against: a real redis-server and the real `leased`
binary on ephemeral loopback ports (`running_stack`), and the helpers that start and stop them.
`leased_client` is the installed package (clients/python/test.sh installs the wheel), never the
source tree.

The `leased` binary comes from $LEASED_BIN, else target/debug/leased (built with `cargo build` if
missing).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import grpc
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
EXAMPLES = HERE.parent / "examples"

from leased_client import LeaseClient, pb

STARTUP_TIMEOUT_S = 20.0


@dataclass
class Stack:
    """A running redis-server and a leased serving from it."""

    target: str
    redis: subprocess.Popen[bytes]
    leased: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Polls `condition` until it holds; fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (leased drains and exits 0), then SIGKILL if it takes too long."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def leased_binary() -> Path:
    if "LEASED_BIN" in os.environ:
        return Path(os.environ["LEASED_BIN"])
    binary = REPO / "target" / "debug" / "leased"
    if not binary.exists():
        subprocess.run(["cargo", "build", "--bin", "leased"], cwd=REPO, check=True)
    return binary


def answers(process: subprocess.Popen[bytes], log: Path, check: Callable[[], object]) -> bool:
    """True once `check` succeeds; fails the test at once if the process died meanwhile."""
    if process.poll() is not None:
        pytest.fail(f"{process.args[0]} exited with {process.returncode}:\n{log.read_text()}")
    try:
        check()
        return True
    except (OSError, grpc.RpcError):
        return False


def redis_ping(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(b"PING\r\n")
        if not sock.recv(64).startswith(b"+PONG"):
            raise ConnectionError("redis-server is not ready")


@contextlib.contextmanager
def running_redis(workdir: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Starts redis-server (no persistence) on an ephemeral loopback port; stops it at the end."""
    port, log = free_port(), workdir / "redis.log"
    with contextlib.ExitStack() as cleanup:
        redis = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port),
             "--save", "", "--appendonly", "no", "--dir", str(workdir)],
            stdout=cleanup.enter_context(log.open("wb")),
            stderr=subprocess.STDOUT,
        )
        cleanup.callback(stop, redis)
        wait_until(lambda: answers(redis, log, lambda: redis_ping(port)),
                   STARTUP_TIMEOUT_S, "redis-server")
        yield port, redis


@contextlib.contextmanager
def running_stack(workdir: Path) -> Iterator[Stack]:
    """Starts redis-server (no persistence) and leased on ephemeral loopback ports; stops both."""
    leased_port, leased_log = free_port(), workdir / "leased.log"
    with contextlib.ExitStack() as cleanup:
        redis_port, redis = cleanup.enter_context(running_redis(workdir))
        target = f"127.0.0.1:{leased_port}"
        leased = subprocess.Popen(
            [str(leased_binary()), "serve", "--listen", target,
             "--redis-url", f"redis://127.0.0.1:{redis_port}"],
            stdout=cleanup.enter_context(leased_log.open("wb")),
            stderr=subprocess.STDOUT,
        )
        cleanup.callback(stop, leased)
        client = cleanup.enter_context(LeaseClient(target, rpc_timeout_s=2.0))
        wait_until(lambda: answers(leased, leased_log, lambda: client.describe("py-ready")),
                   STARTUP_TIMEOUT_S, "leased to answer Describe")
        yield Stack(target=target, redis=redis, leased=leased)


class RecordingStub:
    """Stands in front of a client's `LeaseServiceStub` and keeps every AcquireRequest sent."""

    def __init__(self, stub: object) -> None:
        self._stub = stub
        self.acquires: list[pb.AcquireRequest] = []

    def Acquire(self, request: pb.AcquireRequest, **kwargs: object) -> object:
        self.acquires.append(request)
        return self._stub.Acquire(request, **kwargs)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stub, name)


def recording(client: LeaseClient) -> RecordingStub:
    """Puts a RecordingStub in front of `client`'s stub: the AcquireRequests it sends from now on."""
    stub = RecordingStub(client._stub)
    client._stub = stub  # type: ignore[assignment]
    return stub
