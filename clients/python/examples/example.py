"""Hold a leased lease while writing to a fenced resource, then release it.
An example of the leased-client package, run against it installed (`pip install ./clients/python`).

    python example.py --target 127.0.0.1:50051 --name demo
    python example.py --target 127.0.0.1:50051 --name workers --limit 3   # one of 3 permits
    python example.py --target 127.0.0.1:50051 --name config --shared     # a reader

With `--limit N` (N > 1) the lease is a counting lease: up to N copies of this program hold it at
once, each with its own fencing token, and the N+1st waits for a permit to free. With `--shared`
it takes a shared (read) grant: copies with `--shared` hold it together, one without waits for
them all.

Exit status: 0 when the lease was held for the whole run and released, 1 when it was lost on the
way, 2 when it stayed busy for the whole wait, 3 on a gRPC error (bad input, server unavailable).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

import grpc

from leased_client import FencedResource, LeaseClient, LeaseInfo, NotGranted, StaleTokenError


def main() -> int:
    try:
        return run(parse_args())
    except grpc.RpcError as error:
        print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
        return 3


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="leased gRPC address")
    parser.add_argument("--name", default="demo", help="the lease to take")
    parser.add_argument("--ttl-ms", type=int, default=3000, help="lease TTL; renewed at a third")
    parser.add_argument("--wait-ms", type=int, default=30_000, help="how long to wait if busy")
    parser.add_argument("--hold-s", type=float, default=4.0, help="how long to keep the lease")
    parser.add_argument("--holder", default=f"{socket.gethostname()}/pid-{os.getpid()}")
    parser.add_argument("--limit", type=int, default=1,
                        help="how many may hold the lease at once (N > 1: a counting lease)")
    parser.add_argument("--lock-delay-ms", type=int, default=0,
                        help="after an expiry, keep the lease from the next holder this long")
    parser.add_argument("--shared", action="store_true",
                        help="a shared (read) grant, beside other shared ones")
    return parser.parse_args()


def busy_text(busy: NotGranted) -> str:
    """Who holds the lease, as NotGranted (and each waiting update) says."""
    if busy.limit > 1:
        return (f"{busy.held} of {busy.limit} permits held; the first frees in "
                f"{busy.remaining_ms} ms (holder {busy.holder!r}, token {busy.fencing_token})")
    return (f"held by {busy.holder!r} with token {busy.fencing_token}, "
            f"{busy.remaining_ms} ms left unless renewed")


def print_holders(info: LeaseInfo, own_token: int) -> None:
    """Describe's answer: the one holder of an exclusive lease, or every holder of a counting
    lease's permits or of a shared lease."""
    if info.limit <= 1 and len(info.holders) <= 1:
        print(f"still held: holder {info.holder!r}, token {info.fencing_token}, "
              f"{info.remaining_ms} ms left")
        return
    if info.limit > 1:
        print(f"still held: {len(info.holders)} of {info.limit} permits held, "
              f"{info.waiters} waiting")
    else:
        print(f"still held: {len(info.holders)} shared holders, {info.waiters} waiting")
    for holder in info.holders:
        mine = " (this program)" if holder.fencing_token == own_token else ""
        print(f"  holder {holder.holder!r}, token {holder.fencing_token}, "
              f"{holder.remaining_ms} ms left{mine}")


def run(args: argparse.Namespace) -> int:
    """Acquires, writes with the fencing token, holds, releases; returns the exit status."""
    # Stands in for the database or bucket that the lease protects. (With a counting lease, each
    # holder works on its own share of the work and fences that share: tokens grow across permits.)
    resource = FencedResource()

    with LeaseClient(args.target) as client:
        grant_kind = f", one of {args.limit} permits" if args.limit > 1 else ""
        grant_kind += ", shared" if args.shared else ""
        print(f"acquiring {args.name!r} as {args.holder!r} "
              f"(ttl {args.ttl_ms} ms, wait {args.wait_ms} ms{grant_kind})")
        result = client.acquire(
            args.name,
            ttl_ms=args.ttl_ms,
            wait_ms=args.wait_ms,
            holder=args.holder,
            limit=args.limit,
            lock_delay_ms=args.lock_delay_ms,
            shared=args.shared,
            on_waiting=lambda busy: print(f"waiting: {busy_text(busy)}"),
        )
        if isinstance(result, NotGranted):
            print(f"not granted: {busy_text(result)}")
            return 2

        with result as lease:
            print(f"granted: fencing token {lease.fencing_token}{grant_kind}")
            resource.write(lease.name, lease.fencing_token, f"written by {args.holder}")
            print(f"wrote with token {lease.fencing_token}: {resource.read(lease.name)!r}")

            # A holder that lost the lease without noticing would come back with an older token:
            # the resource refuses it.
            try:
                resource.write(lease.name, lease.fencing_token - 1, "written by a stale holder")
            except StaleTokenError as error:
                print(f"rejected stale write: {error}")

            print(f"holding for {args.hold_s} s while the keepalive renews")
            if lease.lost.wait(timeout=args.hold_s):
                print(f"lost the lease: {lease.lost_reason}; stopping work")
                return 1
            print_holders(client.describe(lease.name), lease.fencing_token)
            # Leaving the with block releases too (also on an exception); here we want the answer.
            print(f"released: {lease.release()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
