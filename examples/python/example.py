"""Hold a leased lease while writing to a fenced resource, then release it.

    python example.py --target 127.0.0.1:50051 --name demo

Exit status: 0 when the lease was held for the whole run and released, 1 when it was lost on the
way, 2 when it stayed busy for the whole wait, 3 on a gRPC error (bad input, server unavailable).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

import grpc

from leased_client import FencedResource, LeaseClient, NotGranted, StaleTokenError


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
    return parser.parse_args()


def run(args: argparse.Namespace) -> int:
    """Acquires, writes with the fencing token, holds, releases; returns the exit status."""
    # Stands in for the database or bucket that the lease protects.
    resource = FencedResource()

    with LeaseClient(args.target) as client:
        print(f"acquiring {args.name!r} as {args.holder!r} "
              f"(ttl {args.ttl_ms} ms, wait {args.wait_ms} ms)")
        result = client.acquire(
            args.name,
            ttl_ms=args.ttl_ms,
            wait_ms=args.wait_ms,
            holder=args.holder,
            on_waiting=lambda busy: print(
                f"waiting: held by {busy.holder!r} with token {busy.fencing_token}, "
                f"{busy.remaining_ms} ms left unless renewed"
            ),
        )
        if isinstance(result, NotGranted):
            print(f"not granted: {result.holder!r} still holds it "
                  f"with token {result.fencing_token}")
            return 2

        with result as lease:
            print(f"granted: fencing token {lease.fencing_token}")
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
            info = client.describe(lease.name)
            print(f"still held: holder {info.holder!r}, token {info.fencing_token}, "
                  f"{info.remaining_ms} ms left")
            # Leaving the with block releases too (also on an exception); here we want the answer.
            print(f"released: {lease.release()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
