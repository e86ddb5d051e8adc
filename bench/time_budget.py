#!/usr/bin/env python3
"""The time budget that gives 2 % (issue 14, item 4): kernel duration against repetitions.

Goal: the UnixBench-style index (12 tests, 1 copy and N copies) on host and container, every
per-test 95 % CI half-width of the median at most 2 % of the median, in under 11 minutes.

For each kernel duration, one run of the system suite on host and container with --max-n
interleaved repetitions (and 1 warm-up), as the runner makes it. Then, for every n from 6 (the
fewest that give a 95 % interval of a median) to --max-n, the first n rounds are taken as if the run
had stopped there: per-test CI half-widths (order statistics, as the tables print them) and the
wall time those rounds took (provisioning and warm-up included, pro rata). The cheapest
(duration, n) meeting the target is the default to choose. The "adaptive" line replays the
runner's own rule on the same rounds (suites/quick.toml: ci_target = 0.02): each cell stops at the
first n within 2 %, so quiet cells cost 6 rounds and noisy ones take the rest, up to --max-n.

    python bench/time_budget.py [--durations 0.25,0.5,1,2] [--max-n 12] [--copies 1,vcpus]
                                [--envs host,container] [--tests all] [--json FILE]

A loaded machine (other programs running) widens the intervals: the script prints the load average
before and after, and its figures are only the target's on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench import stats, suite  # noqa: E402
from virtbench.run.runner import Runner  # noqa: E402
from virtbench.store import Store  # noqa: E402
from virtbench.workloads.system import TESTS  # noqa: E402

TARGET, LIMIT_S = 0.02, 660.0


def one_run(db: Path, duration: float, max_n: int, copies: list[str], envs: list[str], tests: list[str]) -> dict:
    m = suite.adhoc("system", {"test": ",".join(tests), "copies": ",".join(copies)}, envs, repeat=max_n,
                    duration=duration)
    m.policy.warmup = 1
    store = Store(db)
    t0 = time.monotonic()
    rid = Runner(store, m).start()
    wall = time.monotonic() - t0
    attempts = store.attempts(rid)
    measured = sum(a["ended_at"] - a["started_at"] for a in attempts)
    values: dict[tuple, dict[int, float]] = defaultdict(dict)
    for s in store.samples(rid):
        if s["metric"] in TESTS:
            values[(s["metric"], json.loads(s["params_json"])["copies"], s["environment"])][s["repetition"]] = s["value"]
    by_rep = defaultdict(float)  # attempt seconds of each repetition round (-1: warm-up)
    cell_rep: dict[tuple, dict[int, float]] = defaultdict(dict)  # attempt seconds per cell and round
    for a in attempts:
        by_rep[a["repetition"]] += a["ended_at"] - a["started_at"]
        p = json.loads(a["params_json"])
        cell_rep[(p["test"], p["copies"], a["environment"])][a["repetition"]] = a["ended_at"] - a["started_at"]
    fixed = wall - measured  # provisioning, teardown, the runner's own work
    out = []
    for n in range(stats.min_repetitions(), max_n + 1):
        widths = {}
        for key, reps in values.items():
            first = [reps[r] for r in sorted(reps) if r < n]
            widths["/".join(key)] = stats.relative_ci_halfwidth(first) if len(first) == n else float("inf")
        seconds = fixed + by_rep[-1] + sum(by_rep[r] for r in range(n))
        worst = max(widths.values())
        out.append({"duration": duration, "n": n, "seconds": seconds, "worst": worst,
                    "median_width": sorted(widths.values())[len(widths) // 2],
                    "met": sum(w <= TARGET for w in widths.values()), "cells": len(widths),
                    "worst_cell": max(widths, key=widths.get),
                    "over": {k: w for k, w in sorted(widths.items(), key=lambda kv: -kv[1]) if w > TARGET}})
    return {"duration": duration, "wall": wall, "rows": out,
            "adaptive": adaptive(values, cell_rep, fixed + by_rep[-1], max_n)}


def adaptive(values: dict, cell_rep: dict, overhead: float, max_n: int) -> dict:
    """What the runner's own rule (ci_target) would have done with these rounds: each cell stops at
    the first n >= min_repetitions whose half-width is within the target, else at max_n; its time
    is the attempts it took (with the fixed costs and the warm-up round of every cell)."""
    widths, stops, seconds = {}, {}, overhead
    for key, reps in values.items():
        first = [reps[r] for r in sorted(reps)]
        n = next((k for k in range(stats.min_repetitions(), len(first) + 1)
                  if stats.relative_ci_halfwidth(first[:k]) <= TARGET), len(first))
        widths["/".join(key)], stops["/".join(key)] = stats.relative_ci_halfwidth(first[:n]), n
        seconds += sum(t for r, t in cell_rep[key].items() if 0 <= r < n)
    return {"seconds": seconds, "met": sum(w <= TARGET for w in widths.values()), "cells": len(widths),
            "worst": max(widths.values()), "worst_cell": max(widths, key=widths.get), "max_n": max_n,
            "stops": stops, "over": {k: w for k, w in widths.items() if w > TARGET}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--durations", default="0.25,0.5,1,2")
    ap.add_argument("--max-n", type=int, default=12)
    ap.add_argument("--copies", default="1,vcpus")
    ap.add_argument("--envs", default="host,container")
    ap.add_argument("--tests", default="all")
    ap.add_argument("--json")
    args = ap.parse_args()
    tests = list(TESTS) if args.tests == "all" else args.tests.split(",")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in [float(x) for x in args.durations.split(",")]:
            res = one_run(Path(tmp) / f"d{d}.sqlite", d, args.max_n, args.copies.split(","), args.envs.split(","), tests)
            results.append(res)
            print(f"\nduration {d:g} s: run took {res['wall']:.0f} s for {args.max_n} repetitions")
            print(f"  {'n':>3} {'minutes':>8} {'worst half-width':>17} {'median':>8} {'<= 2 %':>8}  worst cell")
            for r in res["rows"]:
                print(f"  {r['n']:>3} {r['seconds'] / 60:>8.1f} {r['worst'] * 100:>16.2f}% {r['median_width'] * 100:>7.2f}% "
                      f"{r['met']:>4}/{r['cells']:<3}  {r['worst_cell']}")
            a = res["adaptive"]
            print(f"  adaptive (stop each cell once within 2 %, at most {a['max_n']}): {a['seconds'] / 60:.1f} min, "
                  f"{a['met']}/{a['cells']} cells <= 2 %, worst {a['worst'] * 100:.2f}% ({a['worst_cell']}), "
                  f"median stop n={sorted(a['stops'].values())[len(a['stops']) // 2]}")
            last = res["rows"][-1]
            print(f"  over 2 % at n={last['n']}: " +
                  (", ".join(f"{k} {w * 100:.1f}%" for k, w in last["over"].items()) or "none"))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    rows = [r for res in results for r in res["rows"]]
    ok = [r for r in rows if r["met"] == r["cells"] and r["seconds"] <= LIMIT_S]
    best = min(ok, key=lambda r: r["seconds"]) if ok else min(rows, key=lambda r: (r["worst"], r["seconds"]))
    print(("target met" if ok else "target NOT met; closest") +
          f": duration {best['duration']:g} s x {best['n']} repetitions, {best['seconds'] / 60:.1f} min, "
          f"worst half-width {best['worst'] * 100:.2f}% ({best['worst_cell']}), {best['met']}/{best['cells']} cells <= 2 %")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
