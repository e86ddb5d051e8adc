#!/usr/bin/env python3
"""vb-npb against the reference NPB 3.4 (MPI) built on the same machine (issue 15, items 3 and 4).

Issue 15's bar for MG is a shape, Mop/s(MG) / Mop/s(CG), because absolute Mop/s move from one
machine to the next. That shape moves too: MG is memory-bound and CG largely cache-bound, so the
MG/CG of any one build depends on the machine's caches and memory bandwidth. The direct question -
is vb-npb's kernel as fast as the established one? - needs both built and run here, in one run.

This script runs each kernel of both at class A on 1 and 2 ranks, interleaving implementation,
rank count and kernel round by round so that drift and other load hit all alike, checks that every
run verified, and prints the median Mop/s, vb-npb / reference per kernel, and the MG/CG shape of
each build beside issue 15's bar.

The reference is not part of virtbench and is not fetched by it. Build it from the NAS sources
(NPB 3.4, MPI version) with the flags the issue measured with, then point --reference at its bin/:

    cp config/make.def.template config/make.def   # MPIFC=mpif90 FFLAGS=-O3 (gfortran 12 also needs
                                                  # -fallow-argument-mismatch), MPICC=mpicc CFLAGS=-O3
    make mg CLASS=A; make cg CLASS=A; make ep CLASS=A; make ft CLASS=A; make is CLASS=A

    python bench/npb_vs_reference.py --reference NPB3.4-MPI/bin [--kernels mg,cg,ep,ft,is]
                                     [--rounds 5] [--bin native/build/bin/vb-npb] [--verbose]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from npb_class_a import MPIRUN  # noqa: E402  (also puts src/ on sys.path)
from npb_mg_ep import run as run_vb  # noqa: E402  (one verified vb-npb class A run: its Mop/s)
from virtbench.kernels import native_bin_dir  # noqa: E402

RANKS = (1, 2)
BAR_MG_CG = {1: 1.45, 2: 1.6}  # issue 15's "done when", measured on the issue's machine
_MOPS = re.compile(r"^\s*Mop/s total\s*=\s*([0-9.Ee+-]+)", re.M)
_VERIFIED = re.compile(r"^\s*Verification\s*=\s*SUCCESSFUL", re.M)


def run_ref(bindir: Path, kernel: str, ranks: int) -> float:
    """One reference class A run: its Mop/s, after checking that it verified."""
    exe = bindir / f"{kernel}.A.x"
    cmd = [*MPIRUN, "-np", str(ranks), str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed (exit {res.returncode}):\n{res.stderr[-2000:]}")
    out = res.stdout
    m = _MOPS.search(out)
    if not m or not _VERIFIED.search(out):
        raise SystemExit(f"reference {exe} on {ranks} rank(s) did not verify or print Mop/s:\n{out[-2000:]}")
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", type=Path, required=True,
                    help="bin/ of a reference NPB 3.4 MPI build holding <kernel>.A.x")
    ap.add_argument("--bin", type=Path, default=None, help="vb-npb binary (default: the one `make -C native` builds)")
    ap.add_argument("--kernels", default="mg,cg,ep,ft,is")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--verbose", action="store_true", help="also print every round's Mop/s")
    args = ap.parse_args()
    vb = args.bin or native_bin_dir() / "vb-npb"
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    if not vb.is_file():
        ap.error(f"{vb} does not exist: build it with `make -C native` or pass --bin PATH")
    missing = [f"{k}.A.x" for k in kernels if not (args.reference / f"{k}.A.x").is_file()]
    if missing:
        ap.error(f"{args.reference} lacks {', '.join(missing)}: build them with `make KERNEL CLASS=A` in NPB3.4-MPI")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")

    samples: dict[tuple[str, str, int], list[float]] = {}
    for _ in range(args.rounds):
        for ranks in RANKS:
            for k in kernels:
                samples.setdefault(("vb", k, ranks), []).append(run_vb(vb, k, ranks))
                samples.setdefault(("ref", k, ranks), []).append(run_ref(args.reference, k, ranks))
    med = {key: statistics.median(v) for key, v in samples.items()}

    print(f"NPB class A: vb-npb vs reference NPB 3.4 on this machine ({args.rounds} interleaved rounds, "
          "median Mop/s, every run verified)\n")
    print(f"{'kernel':<8}{'ranks':>6}{'vb-npb':>10}{'reference':>11}{'vb/ref':>8}   min-max vb/ref per round")
    for k in kernels:
        for r in RANKS:
            per_round = [a / b for a, b in zip(samples[("vb", k, r)], samples[("ref", k, r)])]
            print(f"{k:<8}{r:>6}{med[('vb', k, r)]:10.1f}{med[('ref', k, r)]:11.1f}"
                  f"{med[('vb', k, r)] / med[('ref', k, r)]:8.2f}   {min(per_round):.2f}-{max(per_round):.2f}")
    if "mg" in kernels and "cg" in kernels:
        print(f"\n{'MG/CG':<8}{'ranks':>6}{'vb-npb':>10}{'reference':>11}{'bar':>8}")
        for r in RANKS:
            print(f"{'':<8}{r:>6}{med[('vb', 'mg', r)] / med[('vb', 'cg', r)]:10.2f}"
                  f"{med[('ref', 'mg', r)] / med[('ref', 'cg', r)]:11.2f}{BAR_MG_CG[r]:8.2f}")
        print("\nbar: issue 15's MG/CG, set from the reference's MG/CG on the issue's machine (1.53, 1.67);"
              "\nthe reference column is the same shape on this machine.")
    if args.verbose:
        for key, v in sorted(samples.items()):
            print(f"  {key[0]:>3} {key[1]} x{key[2]}: {' '.join(f'{x:.0f}' for x in v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
