#!/usr/bin/env python3
"""HPA on one rank (vb-hpa) against the straightforward single-process Apriori (tests/hpa_reference.py)
on the same generated data. Target (issue 6): HPA faster.

Both must find exactly the same frequent itemsets (compared line by line); times are wall clock of
the whole program (reading, mining, rule generation), medians over the rounds, alternating.

    python bench/hpa_vs_naive.py [--transactions 100000] [--items 1000] [--support 0.01] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench.kernels import native_bin_dir  # noqa: E402


MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, timeout=3600)
    return time.perf_counter() - t0


def questgen(bindir: Path, prefix: Path, transactions: int, items: int, parts: int = 1) -> None:
    """Quest T10I4 transactions (seed 1) into prefix.0 .. prefix.(parts-1)."""
    subprocess.run([str(bindir / "vb-questgen"), "--transactions", str(transactions), "--items", str(items),
                    "--parts", str(parts), "--out", str(prefix)], check=True, capture_output=True, timeout=3600)


def hpa_argv(binary: Path, ranks: int, prefix: Path, support: float, itemsets: Path, *extra: str) -> list[str]:
    return [*MPIRUN, "-np", str(ranks), str(binary), "--input", str(prefix), "--support", str(support),
            "--itemsets-out", str(itemsets), *extra]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=100_000)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--support", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    bindir = native_bin_dir()
    with tempfile.TemporaryDirectory(prefix="vb-hpa-bench-") as tmp:
        prefix = Path(tmp) / "data"
        questgen(bindir, prefix, args.transactions, args.items)
        hpa = hpa_argv(bindir / "vb-hpa", 1, prefix, args.support, Path(tmp) / "hpa.txt")
        ref = [sys.executable, str(ROOT / "tests" / "hpa_reference.py"), "--input", str(prefix),
               "--support", str(args.support), "--itemsets-out", str(Path(tmp) / "ref.txt")]
        t_hpa, t_ref = [], []
        for _ in range(args.rounds):
            t_hpa.append(timed(hpa))
            t_ref.append(timed(ref))
        ours, theirs = (Path(tmp) / "hpa.txt").read_text(), (Path(tmp) / "ref.txt").read_text()
    if ours != theirs:
        raise SystemExit("vb-hpa and the reference miner found different itemsets")
    a, b = statistics.median(t_hpa), statistics.median(t_ref)
    print(f"{args.transactions} transactions, {args.items} items, support {args.support}: "
          f"{len(ours.splitlines())} frequent itemsets (identical)")
    print(f"vb-hpa, 1 rank (incl. mpirun start-up): {a:8.3f} s   (rounds: {', '.join(f'{t:.3f}' for t in t_hpa)})")
    print(f"reference Apriori (Python):             {b:8.3f} s   (rounds: {', '.join(f'{t:.3f}' for t in t_ref)})")
    print(f"vb-hpa is {b / a:.1f}x faster" if a < b else f"vb-hpa is SLOWER: {a / b:.2f}x the reference's time")


if __name__ == "__main__":
    main()
