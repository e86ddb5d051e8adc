#!/usr/bin/env python3
"""vb-eigen's parallel efficiency against its algorithmic ideal (study 001, Fig. 4, for Bloss), in one run.

Runs class A (default) on 1 rank, 2 ranks and 1 rank x 2 threads on the host, in interleaved rounds so that
drift and the machine's other load hit every layout alike; every run must verify. For each layout it prints
the median time, the speedup T1 / Tp, the measured efficiency E = T1 / (p Tp) (p = ranks x threads) and, for
the rank layouts, the ideal E_ideal(p) = 1 / (p f + 1 - f) from f, the fraction of the work every rank
duplicates, measured on the 1-rank runs (median). Threads share the duplicated part too (it is OpenMP-
parallel), so no Amdahl line is drawn for them. The solve imbalance (slowest rank's solve time over the
mean) and the wait before the allreduce say where a rank layout falls short of its ideal.

    python bench/eigen_scaling.py [--class A] [--rounds 3] [--allreduce-bytes 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench.kernels import native_bin_dir  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
LAYOUTS = [(1, 1), (2, 1), (1, 2)]  # (ranks, threads)


def run(cls: str, ranks: int, threads: int, allreduce: int) -> dict:
    argv = [*MPIRUN, "-np", str(ranks), str(native_bin_dir() / "vb-eigen"), cls, "--threads", str(threads),
            "--allreduce-bytes", str(allreduce)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=7200)
    if res.returncode != 0:
        raise SystemExit(f"vb-eigen {cls} on {ranks} rank(s) x {threads} thread(s) failed:\n{res.stderr[-2000:]}")
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    if not rec["verified"]:
        raise SystemExit(f"vb-eigen {cls} on {ranks} x {threads} did not verify: {rec['verify']}")
    return rec


def load() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--class", dest="cls", default="A", choices=["S", "W", "A", "B"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--allreduce-bytes", type=int, default=0, help="pad the allreduce (0: the moments' size)")
    args = ap.parse_args()

    recs: dict[tuple[int, int], list[dict]] = {lay: [] for lay in LAYOUTS}
    loads = [load()]
    started = time.time()
    for r in range(args.rounds):
        order = LAYOUTS[r % len(LAYOUTS):] + LAYOUTS[:r % len(LAYOUTS)]  # rotate: no layout always first
        for ranks, threads in order:
            rec = run(args.cls, ranks, threads, args.allreduce_bytes)
            recs[(ranks, threads)].append(rec)
            print(f"round {r + 1}: {ranks} rank(s) x {threads} thread(s): {rec['time_s']:.2f} s "
                  f"(f = {rec['duplicated_fraction']:.4f}, allreduce {rec['allreduce_s']:.4f} s)", file=sys.stderr)
        loads.append(load())

    med = {lay: statistics.median(x["time_s"] for x in v) for lay, v in recs.items()}
    f1 = statistics.median(x["duplicated_fraction"] for x in recs[(1, 1)])
    t1 = med[(1, 1)]
    first = recs[(1, 1)][0]
    print(f"vb-eigen class {args.cls}: {first['size']} grid, {first['systems']} shifted systems x {first['block']} "
          f"right-hand sides, {first['expected']} eigenvalues, allreduce {first['allreduce_bytes']} bytes; "
          f"{args.rounds} interleaved rounds, medians; load average {min(loads):.1f}-{max(loads):.1f} on "
          f"{len(os.sched_getaffinity(0))} cores; {time.time() - started:.0f} s")
    print(f"duplicated fraction f (1 rank) = {f1:.4f}")
    print(f"{'layout':<18} {'time s':>8} {'speedup':>8} {'E meas':>7} {'E ideal':>8} {'allreduce s':>11} "
          f"{'wait s':>7} {'imbalance':>9}")
    for (ranks, threads), v in recs.items():
        p = ranks * threads
        speedup = t1 / med[(ranks, threads)]
        ideal = f"{1 / (ranks * f1 + 1 - f1):.4f}" if threads == 1 else "-"
        print(f"{ranks} rank x {threads} thr  {med[(ranks, threads)]:8.2f} {speedup:8.3f} {speedup / p:7.3f} "
              f"{ideal:>8} {statistics.median(x['allreduce_s'] for x in v):11.4f} "
              f"{statistics.median(x['wait_s'] for x in v):7.3f} "
              f"{statistics.median(x['solve_imbalance'] for x in v):9.3f}")


if __name__ == "__main__":
    main()
