#!/usr/bin/env python3
"""Does virtbench change what fio measures? fio run directly on the host and fio run through
`virtbench run --workload fio` (runner, host driver, storage condition, workload, parser, store),
on the same file system and with the same fio options, interleaved (direct, virtbench, virtbench,
direct, ...), compared by median throughput.

Target (issue 4): the virtbench/direct throughput ratio within 2 %.

    python bench/fio_direct_vs_virtbench.py [--dir DIR] [--rw write] [--bs 1m] [--size-mb 1024]
                                            [--rounds 8] [--direct 1]

DIR defaults to a fresh directory under $TMPDIR (the host's disk here); both sides write their
file in it, and it is removed at the end. `virtbench run` does one unrecorded warm-up repetition
first, so the direct side does too. The file is 1 GiB by default: a 256 MiB direct write takes a
fraction of a second here and swings with the shared disk's bursts.
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
from virtbench.suite import Policy  # noqa: E402
from virtbench.workloads.fio import Fio  # noqa: E402

WARMUP = Policy().warmup  # what `virtbench run --repeat 1` does before its measured repetition


def params(args) -> dict:
    wl = Fio()
    p = {x.name: x.default for x in wl.params}
    p.update(rw=args.rw, bs=args.bs, size_mb=float(args.size_mb), direct=bool(args.direct), dir=args.dir)
    wl.validate(p)
    return p


def direct(args, p: dict) -> float:
    """fio itself, with exactly the options the workload builds, in its own subdirectory; like the
    runner (one warm-up repetition by default), an unrecorded pass first, so both sides write the
    same amount in the same rhythm."""
    work = Path(tempfile.mkdtemp(prefix="direct-", dir=args.dir))
    try:
        argv = Fio().fio_args(p, str(work), False)
        for _ in range(WARMUP):
            subprocess.run(argv, capture_output=True, text=True, check=True)
            subprocess.run(["rm", "-f", *map(str, work.glob("vb-fio.*"))], check=False)
        # virtbench removes the warm-up's directory and starts the next repetition a moment later;
        # without this sync the freeing of the 1 GiB file overlaps the measured write here only.
        os.sync()
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        doc = json.loads(out[out.index("{"):])
        job = next(j for j in doc["jobs"] if j["jobname"] == ("rewrite" if args.rw == "rewrite" else args.rw))
        return job["read" if "read" in args.rw else "write"]["bw_bytes"] / 1e6
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=False)


def through_virtbench(args, db: str) -> float:
    cmd = [sys.executable, "-m", "virtbench.cli", "run", "--workload", "fio", "--param", f"rw={args.rw}",
           "--param", f"bs={args.bs}", "--param", f"size_mb={args.size_mb}", "--param",
           f"direct={'true' if args.direct else 'false'}", "--param", f"dir={args.dir}", "--envs", "host",
           "--repeat", "1", "--db", db, "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"virtbench run failed ({res.returncode}): {res.stderr[-2000:]}")
    row = next(r for r in json.loads(res.stdout)["results"] if r["metric"] == "throughput")
    return row["median"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="")
    ap.add_argument("--rw", default="write", choices=["write", "read", "rewrite", "randread", "randwrite"])
    ap.add_argument("--bs", default="1m")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--direct", type=int, default=1, choices=[0, 1])
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    print("load average at start (1/5/15 min): %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    own = not args.dir
    if own:
        args.dir = tempfile.mkdtemp(prefix="vb-fio-bench-")
    d_rates, v_rates = [], []
    try:
        p = params(args)
        with tempfile.TemporaryDirectory() as tmp:
            db = str(Path(tmp) / "bench.sqlite")
            for i in range(args.rounds):
                for which in ((0, 1) if i % 2 == 0 else (1, 0)):  # alternate who goes first
                    if which == 0:
                        d_rates.append(direct(args, p))
                    else:
                        v_rates.append(through_virtbench(args, db))
                print(f"round {i + 1}: direct {d_rates[-1]:8.1f}  virtbench {v_rates[-1]:8.1f} MB/s", flush=True)
    finally:
        if own:
            subprocess.run(["rm", "-rf", "--one-file-system", args.dir], check=False)
    r = stats.ratio(v_rates, d_rates)
    print(f"fio rw={args.rw} bs={args.bs} size={args.size_mb} MiB direct={args.direct}, "
          f"{args.rounds} interleaved rounds")
    print(f"direct   : median {statistics.median(d_rates):8.1f} MB/s  cv {stats.summarize(d_rates).cv:.1%}")
    print(f"virtbench: median {statistics.median(v_rates):8.1f} MB/s  cv {stats.summarize(v_rates).cv:.1%}")
    print(f"virtbench / direct = {r.ratio:.4f}  95% CI [{r.ci_low:.4f}, {r.ci_high:.4f}]  "
          f"Mann-Whitney p = {r.p_value:.3f}")
    paired = statistics.median(v / d for v, d in zip(v_rates, d_rates))  # neighbours share the machine's mood
    print(f"median of the per-round ratios (paired): {paired:.4f}")
    for name, value in (("ratio of medians", r.ratio), ("paired ratio", paired)):
        verdict = "within" if abs(value - 1) <= 0.02 else "OUTSIDE"
        print(f"target |ratio - 1| <= 2 %, {name}: {verdict} ({(value - 1) * 100:+.2f} %)")
    print("load average at the end (1/5/15 min): %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
