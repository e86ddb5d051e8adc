#!/usr/bin/env python3
"""Does vb-hpa (Hash Partitioned Apriori) speed up with ranks? Issue 15 item 2.

Generates Quest T10I4 transactions once per rank count (vb-questgen, seed 1; the same
transactions split into R parts), then runs vb-hpa in interleaved rounds: every round runs
every variant on every rank count, so load from other processes hits all of them alike.
Reports median and best times (vb-hpa's own `time_s`: reading + mining + rules, and the wall clock
of mpirun), the speed-up time(1 rank) / time(R ranks) against the bar (1.6 at 2 ranks, goal 1.8;
medians; the best-round ratio is shown too: on a machine other jobs share, the 2-rank runs are
bimodal, whole when they get both cores and about twice as slow when they do not),
checks that every run found exactly the same itemsets, and prints the per-pass table of the
median run of each rank count.

    python bench/hpa_scaling.py [--transactions 1000000] [--items 1000] [--support 0.007]
        [--ranks 1,2,4] [--rounds 7] [--variant LABEL=BINARY[:ARG,ARG..]] ...

Without --variant: the built vb-hpa with its defaults. A variant names a binary and extra
arguments, e.g. `--variant subsets=native/build/bin/vb-hpa:--ship,subsets` (several variants
measure changes against each other in one run). More ranks than cores are oversubscribed.

--setsid starts every rank in its own session (`setsid -w`). On a Linux machine shared with
other jobs and sched_autogroup enabled, the scheduler gives each session an equal share of the
CPUs, so all ranks of one mpirun together get what a single rank gets and no program can speed
up with ranks; one session per rank gives each rank the share a 1-rank run has, as dedicated
cores would. It changes nothing on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hpa_vs_naive import hpa_argv, native_bin_dir, questgen  # noqa: E402

BAR, GOAL = 1.6, 1.8
PASS_COLS = ("pass", "candidates", "frequent", "bytes_sent", "time_s", "gen_s", "count_s", "exchange_s",
             "gather_s", "imbalance")


def run(argv: list[str]) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def parse_variant(text: str) -> tuple[str, Path, list[str]]:
    label, sep, rest = text.partition("=")
    if not sep or not label:
        raise SystemExit(f"--variant wants LABEL=BINARY[:ARG,ARG..], got {text!r}")
    binary, _, args = rest.partition(":")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"--variant {label}: {binary} is not an executable file (build it with make -C native/hpa)")
    return label, Path(binary), [a for a in args.split(",") if a]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=1_000_000)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--support", type=float, default=0.007)
    ap.add_argument("--ranks", default="1,2,4", help="comma-separated rank counts; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--variant", action="append", default=[], help="LABEL=BINARY[:ARG,ARG..] (repeatable)")
    ap.add_argument("--setsid", action="store_true", help="every rank in its own session (see above)")
    args = ap.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    variants = [parse_variant(v) for v in args.variant] or [("vb-hpa", native_bin_dir() / "vb-hpa", [])]
    base = ranks[0]
    times: dict[tuple[str, int], list[tuple[float, float, list[dict]]]] = {}
    itemsets: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="vb-hpa-scaling-") as tmp:
        for r in ranks:
            questgen(native_bin_dir(), Path(tmp) / f"d{r}", args.transactions, args.items, parts=r)
        out = Path(tmp) / "itemsets"
        for _ in range(args.rounds):
            for label, binary, extra in variants:
                for r in ranks:
                    argv = hpa_argv(binary, r, Path(tmp) / f"d{r}", args.support, out, *extra)
                    if args.setsid:
                        at = argv.index(str(binary))
                        argv[at:at] = ["setsid", "-w"]
                    wall, recs = run(argv)
                    summary = recs[-1]
                    times.setdefault((label, r), []).append((summary["time_s"], wall, recs))
                    itemsets.add(out.read_text())
    n_sets = len(next(iter(itemsets)).splitlines())
    print(f"{args.transactions} transactions, {args.items} items, support {args.support}, {args.rounds} interleaved "
          f"rounds, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end (not controlled)"
          f"{', one session per rank' if args.setsid else ''}")
    print(f"frequent itemsets: {n_sets}; identical in every run: {'yes' if len(itemsets) == 1 else 'NO'}")
    failed = len(itemsets) != 1
    for label, _, extra in variants:
        print(f"\n== {label} {' '.join(extra)}")
        print(f"{'ranks':>5} {'median time_s':>13} {'speed-up':>8} {'best time_s':>11} {'speed-up':>8} "
              f"{'median wall':>11} {'MB sent':>8}  rounds (time_s)")
        t_base = statistics.median(t for t, _, _ in times[(label, base)])
        b_base = min(t for t, _, _ in times[(label, base)])
        for r in ranks:
            runs = times[(label, r)]
            t = statistics.median(x for x, _, _ in runs)
            b = min(x for x, _, _ in runs)
            w = statistics.median(x for _, x, _ in runs)
            mb = runs[0][2][-1]["bytes_exchanged"] / 1e6
            print(f"{r:>5} {t:>13.3f} {t_base / t:>8.2f} {b:>11.3f} {b_base / b:>8.2f} {w:>11.3f} {mb:>8.1f}  "
                  f"{', '.join(f'{x:.3f}' for x, _, _ in runs)}")
        if 2 in ranks and base == 1:
            s = t_base / statistics.median(x for x, _, _ in times[(label, 2)])
            verdict = "meets the goal" if s >= GOAL else "meets the bar" if s >= BAR else "BELOW the bar"
            sb = b_base / min(x for x, _, _ in times[(label, 2)])
            print(f"speed-up at 2 ranks {s:.2f}: {verdict} ({BAR} bar, {GOAL} goal); best rounds: {sb:.2f} "
                  f"(the least disturbed runs, when other jobs share the machine)")
        for r in ranks:
            runs = sorted(times[(label, r)], key=lambda x: x[0])
            recs = runs[len(runs) // 2][2]
            print(f"\n  per pass, {r} rank(s), median run (time_s {recs[-1]['time_s']:.3f}, "
                  f"read_time_s {recs[-1].get('read_time_s', 0):.3f}):")
            print("  " + " ".join(f"{c:>11}" for c in PASS_COLS))
            for p in recs[:-1]:
                print("  " + " ".join(f"{p.get(c, ''):>11}" if not isinstance(p.get(c), float) else
                                      f"{p[c]:>11.4f}" for c in PASS_COLS))
    if failed:
        raise SystemExit("runs found different itemsets")


if __name__ == "__main__":
    main()
