"""The top of a flame graph in words: the functions with the most samples in a collapsed-stacks
file (inferno-collapse-perf's output: `frame;frame;...;leaf count` per line).

    python3 scripts/profile_top.py target/profile/grpc_cycle@64.folded [--top 25]

Prints, as shares of the CPU time sampled: the leaf functions (self time), the functions on the stack
(inclusive time, each counted once per sample), and the share of a few groups of frames that
answer "where does a grant's CPU go" (kernel, h2/hyper/tonic, fred, tokio, allocator, logging,
metrics, leased's own code).
"""

import argparse
import re
from collections import Counter

# Frames by where they come from, matched against the demangled name; the first match wins.
# Kernel frames carry inferno's `_[k]` mark (scripts/profile.sh collapses with --kernel).
GROUPS = [
    ("kernel", re.compile(r"_\[k\]$")),
    ("memcpy/memmove", re.compile(r"^__mem(cpy|move|set)")),
    ("allocator", re.compile(r"^_?mi_|malloc|^free|realloc|__rust_alloc|__rust_dealloc")),
    ("logging", re.compile(r"tracing")),
    ("metrics", re.compile(r"prometheus_client|leased::metrics")),
    ("fred", re.compile(r"\bfred::|redis_protocol")),
    ("h2/hyper/tonic", re.compile(r"\bh2::|hyper|tonic|tower|http_body|prost|\bhttp::|axum")),
    ("tokio", re.compile(r"\btokio(_util)?::|mio::")),
    ("leased", re.compile(r"\bleased::")),
]


def strip(frame: str) -> str:
    """A frame without its hash suffix and argument noise, short enough to read."""
    frame = re.sub(r"::h[0-9a-f]{16}(_\[k\])?$", r"\1", frame)
    frame = re.sub(r"\{\{closure\}\}", "{closure}", frame)
    return frame[:140]


def group_of(frame: str) -> str:
    for name, pattern in GROUPS:
        if pattern.search(frame):
            return name
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folded")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    leaves, inclusive, groups = Counter(), Counter(), Counter()
    total = 0
    with open(args.folded) as folded:
        for line in folded:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            samples = int(count)
            frames = [strip(frame) for frame in stack.split(";")]
            total += samples
            leaves[frames[-1]] += samples
            for frame in set(frames[1:]):  # the first frame is the thread's name
                inclusive[frame] += samples
            groups[group_of(frames[-1])] += samples
    if total == 0:
        print("no samples")
        return

    def share(samples: int) -> str:
        return f"{100.0 * samples / total:5.1f}%"

    # inferno weighs each stack by the sample's period: nanoseconds of CPU for cpu-clock.
    print(f"{total / 1e9:.2f} s of CPU sampled")
    print("\nself time by where the leaf frame comes from:")
    for name, samples in groups.most_common():
        print(f"  {share(samples)}  {name}")
    print(f"\nself time, top {args.top} functions:")
    for frame, samples in leaves.most_common(args.top):
        print(f"  {share(samples)}  {frame}")
    print(f"\ninclusive time, top {args.top} functions:")
    for frame, samples in inclusive.most_common(args.top):
        print(f"  {share(samples)}  {frame}")


if __name__ == "__main__":
    main()
