#!/usr/bin/env python3
"""Does virtbench change what it measures? The same kernel run directly and through `virtbench run`
on the host, interleaved (direct, harness, direct, harness ...), compared by median rate.

Target (issue 2): the harness/direct ratio within 2 %. Also prints the harness's peak memory.

    python bench/harness_overhead.py [--test dhrystone] [--duration 2] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench import stats  # noqa: E402
from virtbench.kernels import native_bin_dir  # noqa: E402


def direct(test: str, duration: float) -> float:
    out = subprocess.run([str(native_bin_dir() / "vb-system"), test, "--duration", str(duration)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["rate"]


def harness(test: str, duration: float, db: str) -> tuple[float, int]:
    """The rate virtbench stored, and the peak RSS (KiB) of the virtbench process tree."""
    cmd = [sys.executable, "-m", "virtbench.cli", "run", "--workload", "system", "--param", f"test={test}",
           "--param", "copies=1", "--duration", str(duration), "--envs", "host", "--repeat", "1", "--db", db,
           "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"virtbench run failed with status {status}")
    row = next(r for r in json.loads(out)["results"] if r["metric"] == test)
    return row["median"], usage.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--test", default="dhrystone")
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    direct_rates, harness_rates, peaks = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.sqlite")
        for i in range(args.rounds):
            order = (0, 1) if i % 2 == 0 else (1, 0)  # alternate who goes first
            for which in order:
                if which == 0:
                    direct_rates.append(direct(args.test, args.duration))
                else:
                    rate, peak = harness(args.test, args.duration, db)
                    harness_rates.append(rate)
                    peaks.append(peak)
    r = stats.ratio(harness_rates, direct_rates)
    print(f"test {args.test}, {args.duration} s per run, {args.rounds} interleaved rounds")
    print(f"direct : median {statistics.median(direct_rates):,.0f}  cv {stats.summarize(direct_rates).cv:.1%}")
    print(f"harness: median {statistics.median(harness_rates):,.0f}  cv {stats.summarize(harness_rates).cv:.1%}")
    print(f"harness / direct = {r.ratio:.4f}  95% CI [{r.ci_low:.4f}, {r.ci_high:.4f}]  "
          f"Mann-Whitney p = {r.p_value:.3f}")
    verdict = "within" if abs(r.ratio - 1) <= 0.02 else "OUTSIDE"
    print(f"target |ratio - 1| <= 2 %: {verdict} ({(r.ratio - 1) * 100:+.2f} %)")
    print(f"harness peak memory (max RSS of the virtbench process tree): {max(peaks) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
