"""A lease holder as a process of its own, for Kleppmann's scenario (fencing_stack.kleppmann):
acquires a 500 ms lease from the real leased (keepalive on), prints `token N`, then, with
--wait-for-go, waits for a line on stdin (the test stops this process with SIGSTOP meanwhile and
resumes it past its TTL) and writes `--value` to the resource with its token, without looking
at `lease.lost`: a holder paused mid-write. Prints `wrote` (exit 0) or `refused: <the resource's
message>` (exit 3).
"""

from __future__ import annotations

import argparse
import sys

from fencing_stack import Refused, write

from leased_client import Lease, LeaseClient

TTL_MS = 500


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leased", required=True, help="leased's address")
    parser.add_argument("--lease", required=True, help="the lease's name")
    parser.add_argument("--adapter", required=True,
                        choices=["postgres-fence", "postgres-row", "redis", "grpc"])
    parser.add_argument("--url", required=True, help="the resource: a URL, or a gRPC target")
    parser.add_argument("--key", required=True, help="the resource key written")
    parser.add_argument("--value", required=True)
    parser.add_argument("--unfenced", action="store_true", help="write without fencing")
    parser.add_argument("--wait-for-go", action="store_true")
    args = parser.parse_args()

    with LeaseClient(args.leased) as client:
        lease = client.acquire(args.lease, ttl_ms=TTL_MS, wait_ms=10_000, holder=args.value)
        if not isinstance(lease, Lease):
            print(f"not granted: {lease}", flush=True)
            return 2
        print(f"token {lease.fencing_token}", flush=True)
        if args.wait_for_go:
            sys.stdin.readline()
        try:
            write(args.adapter, args.url, args.key, lease, args.value, not args.unfenced)
        except Refused as refused:
            print(f"refused: {refused}", flush=True)
            return 3
        finally:
            try:
                lease.release()
            except Exception:  # lost long ago: the server answers it is not ours
                pass
        print("wrote", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
