"""redis-py's Lock against a real Redis, for the leased benchmark (benches/bench/peers.rs).

Measures acquire+release cycles at 1 and 16 threads (one lock name per thread) and the handoff to
one blocked waiter. The Lock keeps its default settings (blocking, polling every 0.1 s), except
timeout=30, so that a lock expires like a lease, and, for the handoff, thread_local=False, so that
the thread that took the lock over can hand it on. Prints one JSON object on stdout.
"""

import argparse
import concurrent.futures
import json
import math
import random
import threading
import time

import redis


def quantile_ms(latencies, q):
    ordered = sorted(latencies)
    rank = min(max(math.ceil(q * len(ordered)), 1), len(ordered))
    return ordered[rank - 1] * 1000.0


def row(name, latencies, elapsed, note):
    return {
        "name": name,
        "ops_per_s": len(latencies) / elapsed,
        "p50_ms": quantile_ms(latencies, 0.50),
        "p99_ms": quantile_ms(latencies, 0.99),
        "samples": len(latencies),
        "note": note,
    }


def cycles(client, threads, warmup_s, measure_s, max_ops):
    """Acquire+release in a closed loop per thread; latencies of the measured part only."""
    started = time.perf_counter()
    measure_from = started + warmup_s
    stop_at = measure_from + measure_s

    def run(thread):
        latencies = []
        last_done = measure_from
        name = f"bench:py:cycle:{thread}"
        for _ in range(max_ops):
            begin = time.perf_counter()
            if begin >= stop_at:
                break
            lock = client.lock(name, timeout=30)
            if not lock.acquire():
                raise RuntimeError(f"{name} was not acquired")
            lock.release()
            done = time.perf_counter()
            if begin >= measure_from:
                latencies.append(done - begin)
                last_done = done
        return latencies, last_done

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        results = [future.result() for future in [pool.submit(run, t) for t in range(threads)]]
    latencies = [latency for thread_latencies, _ in results for latency in thread_latencies]
    elapsed = max(last_done for _, last_done in results) - measure_from
    return latencies, elapsed


def handoff(client, rounds, limit_s):
    """Time from the holder's release to the blocked waiter's acquire, one waiter at a time."""
    name = "bench:py:handoff"
    started = time.perf_counter()
    holder = client.lock(name, timeout=30, thread_local=False)
    if not holder.acquire():
        raise RuntimeError("the handoff lock was not acquired")
    samples = []
    for _ in range(rounds):
        if time.perf_counter() - started > limit_s:
            break
        got = {}
        waiting = threading.Event()

        def wait():
            lock = client.lock(name, timeout=30, thread_local=False)
            waiting.set()
            lock.acquire()
            got["at"] = time.perf_counter()
            got["lock"] = lock

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiting.wait()
        # Release at a random phase of the waiter's 0.1 s polling, as in real use.
        time.sleep(random.uniform(0.01, 0.11))
        released_at = time.perf_counter()
        holder.release()
        waiter.join(timeout=5)
        if "at" not in got:
            raise RuntimeError("the waiter never acquired the lock")
        samples.append(got["at"] - released_at)
        holder = got["lock"]
    holder.release()
    return samples, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    client = redis.Redis(host="127.0.0.1", port=args.port)
    client.ping()
    warmup_s, measure_s, rounds = (0.2, 1.0, 8) if args.quick else (1.0, 5.0, 50)
    rows = []
    for threads in (1, 16):
        latencies, elapsed = cycles(client, threads, warmup_s, measure_s, 1_000_000)
        rows.append(row(f"redis_py_lock@{threads}", latencies, elapsed,
                        f"redis-py {redis.__version__} Lock, {threads} threads"))
    samples, elapsed = handoff(client, rounds, 30.0)
    rows.append(row("redis_py_lock_handoff@1", samples, elapsed,
                    "one blocked waiter; default polling every 0.1 s"))
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
