#!/usr/bin/env python3
"""Each NPB kernel's Mop/s at class A on 1 and 2 ranks (vb-npb on the host), with a profile.

Rounds alternate over (kernel, ranks) so drift hits all alike; the table shows the median Mop/s,
time and the 2-rank speedup, and every run must verify. Then, unless --no-profile, one 1-rank run
per kernel under `perf record` (if perf works here) and the top functions by samples: where our
kernels spend their time.

Published NPB figures for comparable hardware: none found (searched for NPB 3.x MPI class A
outputs on recent AMD EPYC/Zen or similar x86 cores; the outputs found had no hardware stated,
or were for 2007-era CPUs or other classes), so no ratio to published Mop/s is printed.

    python bench/npb_class_a.py [--rounds 3] [--kernels ep,cg,mg,ft,is] [--no-profile]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench.kernels import native_bin_dir  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--bind-to", "none"]


def run(kernel: str, ranks: int) -> dict:
    res = subprocess.run([*MPIRUN, "-np", str(ranks), str(native_bin_dir() / "vb-npb"), kernel, "A"],
                         capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"vb-npb {kernel} A on {ranks} rank(s) failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def profile(kernel: str, top: int = 6) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="vb-perf-") as tmp:
        data = Path(tmp) / "perf.data"
        rec = subprocess.run(["perf", "record", "-q", "-o", str(data), "--", *MPIRUN, "-np", "1",
                              str(native_bin_dir() / "vb-npb"), kernel, "A"],
                             capture_output=True, text=True, timeout=1800)
        if rec.returncode != 0:
            return [f"(perf record failed: {rec.stderr.strip().splitlines()[-1:]})"]
        rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", "dso,symbol",
                              "--percent-limit", "2"], capture_output=True, text=True, timeout=600)
    lines = [ln.strip() for ln in rep.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    return lines[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kernels", default="ep,cg,mg,ft,is")
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    kernels = args.kernels.split(",")
    results: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.rounds):
        for k in kernels:
            for ranks in (1, 2):
                rec = run(k, ranks)
                if not rec["verified"]:
                    raise SystemExit(f"{k} class A on {ranks} rank(s) FAILED verification: {rec['verify']}")
                results.setdefault((k, ranks), []).append(rec)
    print(f"NPB class A on the host ({args.rounds} rounds, medians; all verified)")
    print(f"{'kernel':<7}{'Mop/s 1r':>10}{'Mop/s 2r':>10}{'time 1r s':>11}{'time 2r s':>11}{'speedup':>9}"
          f"{'eff.':>7}")
    for k in kernels:
        m1 = statistics.median(r["mops"] for r in results[(k, 1)])
        m2 = statistics.median(r["mops"] for r in results[(k, 2)])
        t1 = statistics.median(r["time_s"] for r in results[(k, 1)])
        t2 = statistics.median(r["time_s"] for r in results[(k, 2)])
        print(f"{k:<7}{m1:10.1f}{m2:10.1f}{t1:11.3f}{t2:11.3f}{t1 / t2:9.2f}{t1 / t2 / 2:7.2f}")
    print("published NPB Mop/s for comparable hardware: none found, no ratio given")
    if args.no_profile:
        return
    if not shutil.which("perf"):
        print("profile: perf is not installed (apt-get install linux-perf), or build vb-npb with "
              "CFLAGS='-O2 -pg' and read gprof's flat profile")
        return
    for k in kernels:
        print(f"\nprofile of {k} class A, 1 rank (perf, by dso and symbol, >= 2 %):")
        for line in profile(k):
            print("   " + line)


if __name__ == "__main__":
    main()
