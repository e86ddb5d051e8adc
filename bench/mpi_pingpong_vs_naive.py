#!/usr/bin/env python3
"""Our PingPong (vb-mpibench) against a naive MPI_Send/MPI_Recv loop compiled here, on the host.

Both run 2 ranks under the same mpirun options; rounds alternate (ours, naive, ours, naive ...)
so drift hits both alike. Per message size: median half-round-trip time of each, their ratio, and
the bandwidth in MB/s (10^6 bytes), and the smallest of our rounds' t_avg (steadier than the median
when other jobs preempt the ranks). Both time N round trips with one MPI_Wtime pair; the naive loop
has no warm-up beyond one exchange and sends from the buffer it receives into, so above the eager
limit (4 KiB) each copy reads lines the other core just wrote: it is expected to be slower than
ours at 4 KiB - 1 MiB, the cause of issue 15 (see native/mpibench/README.md).

    python bench/mpi_pingpong_vs_naive.py [--max-bytes 4M] [--rounds 5] [--transport shm|tcp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench.kernels import native_bin_dir  # noqa: E402

NAIVE_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* naive ping-pong: rank 0 sends, rank 1 sends back; time = elapsed / (2 n) */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long max = atol(argv[1]);
    char *buf = malloc(max > 0 ? max : 1);
    memset(buf, 1, max > 0 ? max : 1);
    for (long size = 0; size <= max; size = size ? size * 2 : 1) {
        long n = size < 65536 ? 1000 : (size < (1L << 20) ? 100 : 20);
        MPI_Status st;
        if (rank == 0) { MPI_Send(buf, (int)size, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
                         MPI_Recv(buf, (int)size, MPI_CHAR, 1, 0, MPI_COMM_WORLD, &st); }
        else if (rank == 1) { MPI_Recv(buf, (int)size, MPI_CHAR, 0, 0, MPI_COMM_WORLD, &st);
                              MPI_Send(buf, (int)size, MPI_CHAR, 0, 0, MPI_COMM_WORLD); }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < n; i++) {
            if (rank == 0) { MPI_Send(buf, (int)size, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
                             MPI_Recv(buf, (int)size, MPI_CHAR, 1, 0, MPI_COMM_WORLD, &st); }
            else if (rank == 1) { MPI_Recv(buf, (int)size, MPI_CHAR, 0, 0, MPI_COMM_WORLD, &st);
                                  MPI_Send(buf, (int)size, MPI_CHAR, 0, 0, MPI_COMM_WORLD); }
        }
        double t = (MPI_Wtime() - t0) / (2.0 * n) * 1e6;
        if (rank == 0) printf("{\"bytes\":%ld,\"t_us\":%.4f}\n", size, t);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
"""


def mpirun(transport: str) -> list[str]:
    cmd = ["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "none"]
    if transport == "tcp":
        cmd += ["--mca", "btl", "tcp,self"]
    return cmd


def ours(transport: str, max_bytes: int) -> dict[int, tuple[float, float]]:
    out = subprocess.run([*mpirun(transport), str(native_bin_dir() / "vb-mpibench"), "pingpong",
                          "--max-bytes", str(max_bytes), "--time-budget", "0.1"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return {r["bytes"]: (r["t_avg_us"], r["t_avg_us"]) for r in map(json.loads, out.splitlines())}


def naive(binary: Path, transport: str, max_bytes: int) -> dict[int, float]:
    out = subprocess.run([*mpirun(transport), str(binary), str(max_bytes)],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return {r["bytes"]: r["t_us"] for r in map(json.loads, out.splitlines())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-bytes", default="4M", help="largest size (K, M suffixes are binary)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--transport", choices=("shm", "tcp"), default="shm",
                    help="shm: Open MPI's default (shared memory); tcp: loopback TCP (--mca btl tcp,self)")
    args = ap.parse_args()
    if not shutil.which("mpicc"):
        raise SystemExit("mpicc not found (apt-get install libopenmpi-dev)")
    unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    max_bytes = int(args.max_bytes[:-1]) * unit[args.max_bytes[-1]] if args.max_bytes[-1] in unit \
        else int(args.max_bytes)
    with tempfile.TemporaryDirectory(prefix="vb-naive-") as tmp:
        src, binary = Path(tmp) / "naive.c", Path(tmp) / "naive"
        src.write_text(NAIVE_C)
        subprocess.run(["mpicc", "-O2", "-o", str(binary), str(src)], check=True)
        a: dict[int, list[float]] = {}
        amin: dict[int, list[float]] = {}
        b: dict[int, list[float]] = {}
        for _ in range(args.rounds):
            for size, (t, tmin) in ours(args.transport, max_bytes).items():
                a.setdefault(size, []).append(t)
                amin.setdefault(size, []).append(tmin)
            for size, t in naive(binary, args.transport, max_bytes).items():
                b.setdefault(size, []).append(t)
    print(f"PingPong, 2 ranks on the host over {args.transport}, {args.rounds} rounds, medians")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (interference inflates means)")
    print(f"{'bytes':>9} {'ours us':>10} {'naive us':>10} {'ours/naive':>10} {'ours MB/s':>10} {'naive MB/s':>10}"
          f" {'ours min':>10}")
    for size in sorted(a):
        ta, tb = statistics.median(a[size]), statistics.median(b.get(size, [float("nan")]))
        bw = (lambda t: f"{size / t:10.1f}" if size and t > 0 else f"{'-':>10}")
        print(f"{size:>9} {ta:10.3f} {tb:10.3f} {ta / tb:10.2f} {bw(ta)} {bw(tb)} {min(amin[size]):10.3f}")


if __name__ == "__main__":
    main()
