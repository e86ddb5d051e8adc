#!/usr/bin/env python3
"""How long does a report take, and how big is it, for a large run? (issue 7)

Synthesizes a stored run with 10,000 samples (system suite: 12 tests x 2 copy counts x 3
environments x 139 repetitions) and 8 instances, plus 1 hour of 1 Hz monitoring time series for the
8 instances (4 metrics each). The series are made in memory and served through Store.timeseries()
(the monitor's row shape), so the report reads them as it reads stored ones. Then times report
generation from the store to the HTML file (analysis, sections, charts, HTML) and prints the time
and the file size.

Each timed generation runs in a fresh process, so imports count; the median of --rounds is judged.
Wall time depends on the machine's load: CPU times are printed too, and the analysis alone
(analysis.results, which `virtbench show` pays as well) is timed beside it.
Targets: < 5 s and < 5 MB.      python bench/report_speed.py [--keep DIR] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from virtbench import store as store_mod  # noqa: E402
from virtbench.workloads.system import TESTS  # noqa: E402

TARGET_SECONDS, TARGET_BYTES = 5.0, 5 * 1024 * 1024
ENVS = {  # name -> (driver, speed factor against the host, facts)
    "host": ("host", 1.0, {"cpu_model": "Bench CPU", "kernel": "6.1.0-bench", "virtualization": "none"}),
    "container": ("container", 0.97, {"cpu_model": "Bench CPU", "kernel": "6.1.0-bench",
                                      "virtualization": "podman", "image_hash": "ab" * 32}),
    "vm": ("vm", 0.88, {"cpu_model": "QEMU Virtual CPU", "kernel": "6.1.0-cloud", "virtualization": "kvm",
                        "accelerator": "kvm", "image_hash": "ab" * 32}),
}
REPS = 139  # 24 cells x 3 environments x 139 = 10,008 samples
INSTANCES = [("host", "host-main-0")] + [("container", f"container-main-{i}") for i in range(4)] + \
            [("vm", f"vm-main-{i}") for i in range(3)]


def synthesize(db: Path) -> tuple[store_mod.Store, str]:
    st = store_mod.Store(db)
    rng = np.random.default_rng(7)
    cells = [{"key": f"{test}-{copies}", "workload": "system", "condition": {},
              "params": {"copies": copies, "duration": 10.0, "test": test}}
             for test in TESTS for copies in ("1", "vcpus")]
    spec = {"name": "bench", "path": None, "baseline": "host", "description": "", "cells": cells,
            "environments": [{"name": n, "driver": d, "options": {}, "shape": {"name": "m1.large", "vcpus": 2,
                                                                                 "memory_mb": 512, "disk_gb": 10}}
                             for n, (d, _, _) in ENVS.items()],
            "policy": {"warmup": 0, "min_repetitions": REPS, "max_repetitions": REPS}}
    run_id = st.create_run(spec, suite_name="bench", suite_path=None, baseline="host", command="report_speed.py")
    for name, (driver, _, facts) in ENVS.items():
        st.save_environment(run_id, name, driver, spec["environments"][0] | {"name": name, "driver": driver},
                            facts)
    t0 = st.run(run_id)["created_at"]
    for k, (env, name) in enumerate(INSTANCES):
        boot = {"host": 0.0, "container": 0.8, "vm": 14.0}[env]
        st.save_instance(run_id, env, name, "main", {
            "requested": t0, "created": t0 + boot * 0.2, "running": t0 + boot * 0.5, "init": t0 + boot * 0.7,
            "ready": t0 + boot + 0.01 * k}, {"driver": ENVS[env][0], "instance": name})
    # One transaction for all attempts and samples: record_attempt's shape, without 10,000 commits.
    with st.engine.begin() as conn:
        for rep in range(REPS):
            for cell in cells:
                base = TESTS[cell["params"]["test"]][0] * 40 * (2 if cell["params"]["copies"] == "vcpus" else 1)
                for env, (driver, factor, _) in ENVS.items():
                    row = {"run_id": run_id, "cell_key": cell["key"], "workload": "system",
                           "params_json": store_mod.canonical(cell["params"]), "condition_json": "{}",
                           "environment": env, "repetition": rep}
                    attempt = conn.execute(store_mod.attempts.insert().values(
                        **row, warmup=False, status="ok", started_at=t0, ended_at=t0 + 10)).inserted_primary_key[0]
                    value = float(base * factor * rng.lognormal(0, 0.03))
                    conn.execute(store_mod.samples.insert().values(
                        **row, attempt_id=attempt, metric=cell["params"]["test"], value=value,
                        unit=TESTS[cell["params"]["test"]][1], higher_is_better=True,
                        metadata_json=json.dumps({"driver": driver,
                                                  "index": value / TESTS[cell["params"]["test"]][0] * 10})))
    st.set_status(run_id, "completed")
    return st, run_id


def series(start: float, seconds: int = 3600) -> list[dict]:
    """1 Hz CPU, memory, network and disk for each instance, as rows of the proposed `timeseries` table."""
    rng = np.random.default_rng(11)
    t = np.arange(seconds, dtype=float)
    rows = []
    for k, (env, name) in enumerate(INSTANCES):
        load = 60 + 30 * np.sin(t / 300 + k) + rng.normal(0, 5, seconds)
        for metric, unit, values in (
                ("cpu", "%", np.clip(load, 0, 100)),
                ("memory used", "MB", 300 + k * 20 + np.cumsum(rng.normal(0, 0.2, seconds))),
                ("network", "MB/s", np.abs(rng.normal(40, 10, seconds))),
                ("disk", "MB/s", np.abs(rng.normal(80, 25, seconds)))):
            rows += [{"instance": name, "environment": env, "metric": metric, "unit": unit, "t": start + float(ti),
                      "value": float(v)} for ti, v in zip(t, values)]
    return rows


class MonitoredStore(store_mod.Store):
    """The store as it will be once the monitor lands: Store.timeseries(run_id) -> rows. In memory here."""

    def __init__(self, db, rows: list[dict]):
        super().__init__(db)
        self._rows = rows

    def timeseries(self, run_id: str) -> list[dict]:
        return self._rows


def analyse_only(db: Path, run_id: str) -> tuple[float, float]:
    """analysis.results() alone, in a fresh process: the part of a report that `virtbench show` pays too."""
    st = store_mod.Store(db)
    t0, c0 = time.perf_counter(), time.process_time()
    from virtbench import analysis

    analysis.results(st, run_id)
    return time.perf_counter() - t0, time.process_time() - c0


def generate(db: Path, run_id: str, out: Path) -> tuple[float, float]:
    """One timed report generation, in this (fresh) process so lazy imports are counted: (wall, CPU) s."""
    st = store_mod.Store(db)
    rows = series(st.run(run_id)["created_at"])
    t0, c0 = time.perf_counter(), time.process_time()
    from virtbench import report

    report.write(MonitoredStore(db, rows), [run_id], out)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="write the database and report into this directory and keep them")
    ap.add_argument("--rounds", type=int, default=3, help="timed generations, each in a fresh process")
    ap.add_argument("--generate", nargs=3, metavar=("DB", "RUN_ID", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        db, run_id, out = args.generate
        wall, cpu = analyse_only(Path(db), run_id) if out == "-" else generate(Path(db), run_id, Path(out))
        print(json.dumps({"wall": wall, "cpu": cpu}))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        db = where / "bench.sqlite"
        db.unlink(missing_ok=True)
        t = time.perf_counter()
        st, run_id = synthesize(db)
        print(f"synthesized run {run_id}: {sum(r['samples'] for r in st.runs())} samples, {len(INSTANCES)} "
              f"instances, {len(INSTANCES) * 4 * 3600} time-series points in {time.perf_counter() - t:.1f} s")
        out = where / "report.html"
        report_runs, alone = [], []

        def timed(target: str) -> dict:
            res = subprocess.run([sys.executable, __file__, "--generate", str(db), run_id, target],
                                 capture_output=True, text=True, check=True)
            return json.loads(res.stdout.strip().splitlines()[-1])
        for k in range(args.rounds):  # interleaved, so changing machine load hits both alike
            report_runs.append(timed(str(out)))
            alone.append(timed("-"))
            rep = report_runs[-1]
            print(f"  round {k + 1}: report {rep['wall']:.2f} s wall ({rep['cpu']:.2f} s CPU); "
                  f"analysis.results alone {alone[-1]['wall']:.2f} s wall ({alone[-1]['cpu']:.2f} s CPU); "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

        def med(runs: list[dict], key: str) -> float:
            return statistics.median(r[key] for r in runs)
        median = med(report_runs, "wall")
        print(f"report generation: median {median:.2f} s wall, {med(report_runs, 'cpu'):.2f} s CPU, over "
              f"{len(report_runs)} fresh processes (load, analysis, sections, {out.read_text().count('<svg')} "
              f"charts, HTML; imports included); target < {TARGET_SECONDS:g} s: "
              f"{'ok' if median < TARGET_SECONDS else 'MISSED'}")
        print(f"  of which the analysis alone (analysis.results, importing scipy): median {med(alone, 'wall'):.2f} s "
              f"wall, {med(alone, 'cpu'):.2f} s CPU; the report's own part: about "
              f"{med(report_runs, 'cpu') - med(alone, 'cpu'):.2f} s CPU")
        size = out.stat().st_size
        print(f"report size: {size / 1048576:.2f} MB ({size} bytes); target < 5 MB: "
              f"{'ok' if size < TARGET_BYTES else 'MISSED'}")
        if args.keep:
            print(f"kept {out} and {db}")
        return 0 if median < TARGET_SECONDS and size < TARGET_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
