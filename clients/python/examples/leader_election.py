"""Leader election on a leased lease.
An example of the leased-client package, run against it installed (`pip install ./clients/python`).

    python leader_election.py --target 127.0.0.1:50051 --id candidate-1

Every copy of this program is a candidate: it campaigns with a blocking Acquire, leads while its
lease holds, and steps down (then campaigns again) the moment the lease is lost. Every candidate
follows the election with Watch and prints who leads. A leader that dies is replaced one TTL
later, with a larger fencing token; one stopped with Ctrl-C or SIGTERM releases the lease and is
replaced at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Optional, TextIO

import grpc

from leased_client import Lease, LeaseClient, NotGranted, WatchEvent

#: How long one campaign waits in line before asking again (the server's --max-wait is 10 min).
CAMPAIGN_WAIT_MS = 60_000
#: Pause before retrying a campaign or a watch that failed (server unreachable, say).
RETRY_DELAY_S = 1.0


class Stop(Exception):
    """SIGTERM or Ctrl-C: step down and exit."""


def main() -> int:
    args = parse_args()
    stop_on_signals()
    exiting = threading.Event()
    with LeaseClient(args.target) as client:
        # Every candidate follows the election, the leader too: one view of who leads, for all.
        threading.Thread(
            target=follow, args=(client, args.election, exiting), name="follow", daemon=True
        ).start()
        try:
            campaign(client, args)
        except Stop:
            pass
        finally:
            exiting.set()  # closing the client ends the watch: not a failure to report
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="leased gRPC address")
    parser.add_argument("--election", default="leader/demo",
                        help="the lease every candidate campaigns for")
    parser.add_argument("--id", default=f"{socket.gethostname()}/pid-{os.getpid()}",
                        help="this candidate's name, which the others print as the leader's")
    parser.add_argument("--ttl-ms", type=int, default=5_000,
                        help="the lease's TTL: how long a dead leader keeps the others waiting")
    return parser.parse_args()


def stop_on_signals() -> None:
    """SIGTERM and Ctrl-C raise `Stop` in the main thread, wherever it waits (an Acquire in line,
    or leading); leaving the lease's `with` block on the way releases it."""

    def stop(signum: int, _frame: Optional[FrameType]) -> None:
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def campaign(client: LeaseClient, args: argparse.Namespace) -> None:
    """Campaigns for ever: wait in line for the lease, lead while it holds, and campaign again
    after losing it."""
    while True:
        try:
            result = client.acquire(
                args.election, ttl_ms=args.ttl_ms, wait_ms=CAMPAIGN_WAIT_MS, holder=args.id
            )
            if isinstance(result, NotGranted):
                continue  # someone else led for the whole wait: stand in line again
            with result as lease:  # released on the way out, also when stopped
                say(f"leading as {args.id} with fencing token {lease.fencing_token}")
                try:
                    lead(lease)
                except Stop:
                    say("stepped down: stopping")
                    raise
                # Stop leading before anyone else can be granted the lease, then campaign again.
                say(f"stepped down: lease lost: {lease.lost_reason}")
        except grpc.RpcError as error:
            say(f"campaign failed: {describe(error)}; retrying", sys.stderr)
            time.sleep(RETRY_DELAY_S)


def lead(lease: Lease) -> None:
    """The leader's work, until the lease is lost. Every write it makes carries the fencing
    token, so that a resource can refuse a leader that was replaced without noticing."""
    while not lease.lost.wait(timeout=1.0):
        do_the_leaders_work(lease.fencing_token)


def do_the_leaders_work(fencing_token: int) -> None:
    """E.g. run the scheduler once, passing `fencing_token` with every write."""


def follow(client: LeaseClient, election: str, exiting: threading.Event) -> None:
    """Prints who leads, from the election's Watch: a snapshot first, then each change. A watch
    that ends (the server restarts, say) is opened again; its snapshot restates the leader."""
    while not exiting.is_set():
        try:
            with client.watch(election) as events:
                for event in events:
                    print_leader(event)
        except (grpc.RpcError, RuntimeError, ValueError) as error:
            if exiting.is_set():  # ValueError: the client's channel is closed
                return
            say(f"watch ended: {describe(error)}; watching again", sys.stderr)
        exiting.wait(RETRY_DELAY_S)


def print_leader(event: WatchEvent) -> None:
    """`[granted] leader 'candidate-2', fencing token 17`, or `[expired] no leader`. `!r` escapes
    characters a terminal would act on."""
    leader = event.current_holder
    if leader is None:
        say(f"[{event.cause}] no leader")
    else:
        say(f"[{event.cause}] leader {leader.holder!r}, fencing token {leader.fencing_token}")


_output = threading.Lock()


def say(line: str, stream: TextIO = sys.stdout) -> None:
    """Prints one whole line. The campaign and the watch print from two threads, and `print`
    writes the text and its newline apart: lines of the two could run into each other."""
    with _output:
        stream.write(line + "\n")
        stream.flush()


def describe(error: Exception) -> str:
    """One line; a gRPC error's default text spans several lines of debug detail."""
    if isinstance(error, grpc.Call):
        return f"{error.code().name}: {error.details()}"
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
