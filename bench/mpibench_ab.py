#!/usr/bin/env python3
"""Two vb-mpibench binaries (A: e.g. the previous build, B: this one) on the host, interleaved.

Rounds alternate A, B, A, B ... under the same mpirun options, so load drift hits both alike.
Per message size: the median and the minimum over the rounds of each binary's t_avg and their
ratios A/B (> 1: B is faster). On a busy machine a rank that busy-polls loses whole time slices
to other processes, which inflates some rounds' means many times over: the minimum over rounds is
then the steadier figure. `--iterations N` gives both binaries the same number of calls per size
(a shorter loop is hit by fewer preemptions, which would favour the binary with fewer calls).
For PingPong also the shape against the established suite's figures of issue 15 (same kind of
2-core machine, `mpirun --bind-to none`): t(64 KiB)/t(1 KiB) and t(1 MiB)/t(1 KiB), which move
less from one machine to the next than absolute times. Absolute figures need a quiet machine.

    python bench/mpibench_ab.py OLD_BINARY [NEW_BINARY] [--op pingpong] [--max-bytes 4M] [--rounds 15]
                                [--iterations N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench.kernels import native_bin_dir  # noqa: E402

# Issue 15: an established MPI micro-benchmark suite, PingPong half round trip [us], same machine kind.
REFERENCE_PINGPONG = {1: 0.36, 1024: 0.80, 65536: 5.0, 1 << 20: 66.0, 4 << 20: 390.0}


def once(binary: str, op: str, max_bytes: str, ranks: int, iterations: int) -> dict[int, float]:
    fixed = ["--iterations", str(iterations)] if iterations else []
    out = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks),
                          binary, op, "--max-bytes", max_bytes, *fixed], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    return {r["bytes"]: r["t_avg_us"] for r in map(json.loads, out.splitlines())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="binary A (e.g. the previous vb-mpibench)")
    ap.add_argument("b", nargs="?", default=str(native_bin_dir() / "vb-mpibench"), help="binary B")
    ap.add_argument("--op", default="pingpong")
    ap.add_argument("--max-bytes", default="4M")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iterations", type=int, default=0, help="fixed calls per size for both (0: their own rule)")
    args = ap.parse_args()
    a: dict[int, list[float]] = {}
    b: dict[int, list[float]] = {}
    for _ in range(args.rounds):
        for binary, acc in ((args.a, a), (args.b, b)):
            for size, t in once(binary, args.op, args.max_bytes, args.ranks, args.iterations).items():
                acc.setdefault(size, []).append(t)
    med_a = {s: statistics.median(v) for s, v in a.items()}
    med_b = {s: statistics.median(v) for s, v in b.items()}
    min_a = {s: min(v) for s, v in a.items()}
    min_b = {s: min(v) for s, v in b.items()}
    calls = f"{args.iterations} calls per size" if args.iterations else "each binary's own call counts"
    print(f"{args.op}, {args.ranks} ranks on the host, {args.rounds} interleaved rounds, {calls}; t_avg [us]; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'bytes':>9} {'A median':>10} {'B median':>10} {'A/B':>6} {'A min':>10} {'B min':>10} {'A/B':>6}")
    for size in sorted(med_b):
        ta, tb = med_a.get(size, float("nan")), med_b[size]
        ma, mb = min_a.get(size, float("nan")), min_b[size]
        print(f"{size:>9} {ta:10.3f} {tb:10.3f} {ta / tb:6.2f} {ma:10.3f} {mb:10.3f} {ma / mb:6.2f}")
    if args.op == "pingpong" and 1024 in med_b:
        ref = REFERENCE_PINGPONG
        for big in (65536, 1 << 20):
            if big in med_b:
                print(f"t({big})/t(1024) of the minima: A {min_a[big] / min_a[1024]:.1f}, "
                      f"B {min_b[big] / min_b[1024]:.1f}, established suite {ref[big] / ref[1024]:.1f}")


if __name__ == "__main__":
    main()
