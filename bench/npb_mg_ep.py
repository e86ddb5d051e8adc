#!/usr/bin/env python3
"""NPB MG and EP against CG as the yardstick, class A on 1 and 2 ranks (issue 15, item 3).

Absolute Mop/s move from one machine to the next, so the bar is a shape measured in one run:
Mop/s(MG) / Mop/s(CG), with CG (at parity with the reference NPB 3.4) as the yardstick.
Rounds interleave binary, rank count and kernel so that drift and other load hit all alike;
the table shows median Mop/s, the ratios MG/CG and EP/CG, and pass/fail per bar. Every run
must verify. With several --bin, each later binary is also compared with the first (e.g. a
build before and after a change): the "vs first" columns are median-over-median speed-ups.

    python bench/npb_mg_ep.py [--rounds 5] [--bin PATH ...] [--strict] [--verbose]

--strict exits 1 when a bar is missed (default: report only, exit 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from npb_class_a import MPIRUN  # noqa: E402  (also puts src/ on sys.path)
from virtbench.kernels import native_bin_dir  # noqa: E402

KERNELS = ("mg", "ep", "cg")
RANKS = (1, 2)
# Source for all constants: issue 15 (measured side by side on one 2-core machine, reference
# NPB 3.4 built with gfortran -O3, vb-npb as of the issue's filing).
BAR_MG_CG = {1: 1.45, 2: 1.6}  # done when Mop/s(MG) / Mop/s(CG) reaches this
REF_MG_CG = {1: 1.53, 2: 1.67}  # reference NPB 3.4
FILED_MG_CG = {1: 1.35, 2: 1.36}  # vb-npb when the issue was filed
# vb-npb / reference Mop/s at filing; for EP no EP/CG ratio of the reference was given
FILED_FRACTION = {("mg", 1): 0.87, ("mg", 2): 0.84, ("ep", 1): 0.93, ("ep", 2): 0.93}


def run(binary: Path, kernel: str, ranks: int) -> float:
    """One class A run; its Mop/s, after checking that it verified."""
    cmd = [*MPIRUN, "-np", str(ranks), str(binary), kernel, "A"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {res.returncode}); build vb-npb with "
                         f"`make -C native` or pass a working --bin:\n{res.stderr[-2000:]}")
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    if not rec["verified"]:
        raise SystemExit(f"{binary} {kernel} class A on {ranks} rank(s) FAILED verification: "
                         f"{rec['verify']}")
    return float(rec["mops"])


def measure(bins: list[Path], rounds: int) -> dict[tuple[Path, str, int], list[float]]:
    samples: dict[tuple[Path, str, int], list[float]] = {}
    for _ in range(rounds):
        for b in bins:
            for ranks in RANKS:
                for k in KERNELS:
                    samples.setdefault((b, k, ranks), []).append(run(b, k, ranks))
    return samples


def report(bins: list[Path], samples: dict[tuple[Path, str, int], list[float]], rounds: int,
           verbose: bool) -> bool:
    med = {key: statistics.median(v) for key, v in samples.items()}
    print(f"NPB class A, vb-npb MG/EP vs CG ({rounds} interleaved rounds, medians; all verified)")
    ok = True
    first = bins[0]
    for b in bins:
        print(f"\n{b}")
        print(f"{'ranks':<6}{'MG':>9}{'EP':>9}{'CG':>9}{'MG/CG':>8}{'bar':>6}{'ref':>6}{'filed':>7}"
              f"{'':>6}{'EP/CG':>8}" + (f"{'MG vs 1st':>11}{'EP vs 1st':>11}{'CG vs 1st':>11}"
                                        if b != first else ""))
        for r in RANKS:
            mg, ep, cg = (med[(b, k, r)] for k in KERNELS)
            passed = mg / cg >= BAR_MG_CG[r]
            ok &= passed
            line = (f"{r:<6}{mg:9.1f}{ep:9.1f}{cg:9.1f}{mg / cg:8.2f}{BAR_MG_CG[r]:6.2f}"
                    f"{REF_MG_CG[r]:6.2f}{FILED_MG_CG[r]:7.2f}{'pass' if passed else 'FAIL':>6}"
                    f"{ep / cg:8.3f}")
            if b != first:
                line += "".join(f"{med[(b, k, r)] / med[(first, k, r)]:11.3f}" for k in KERNELS)
            print(line)
        if verbose:
            for r in RANKS:
                print("  " + "  ".join(f"{k} {r}r: {' '.join(f'{v:.0f}' for v in samples[(b, k, r)])}"
                                       for k in KERNELS))
    print("\nbar/ref/filed: MG/CG bar of issue 15, reference NPB 3.4 (gfortran -O3) and vb-npb at filing,")
    print("measured on another machine of this kind; EP has no reference EP/CG ratio (issue 15: EP "
          f"was {FILED_FRACTION[('ep', 1)]} of the reference).")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bin", action="append", type=Path,
                    help="vb-npb binary (repeatable; default: the one `make -C native` builds)")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a bar is missed")
    ap.add_argument("--verbose", action="store_true", help="also print every round's Mop/s")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    bins = args.bin or [native_bin_dir() / "vb-npb"]
    for b in bins:
        if not b.is_file():
            ap.error(f"{b} does not exist: build it with `make -C native` or pass --bin PATH")
    ok = report(bins, measure(bins, args.rounds), args.rounds, args.verbose)
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
