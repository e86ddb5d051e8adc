#!/usr/bin/env python3
"""How close each experiment's estimate was to its actual time in a `virtbench reproduce` run
(issue 25, item 3).

For one stored reproduce run (default: the latest in the database): each experiment's scale, the
estimate it was started with (the planner's, corrected at run time by the slowdown measured on the
experiments before it), the time it really took and their ratio; then the whole run against its
budget, and the machine's load average before it and at each experiment's end (other programs
competing for the CPU lengthen every time, and the estimate model only sees that through its CPU
probe and the slowdown it measures).

    python bench/reproduce_estimates.py [RUN_ID] [--db FILE] [--json FILE] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench import paths  # noqa: E402
from virtbench.store import Store  # noqa: E402
from virtbench.studies import card  # noqa: E402


def latest_reproduce(store: Store) -> str:
    for r in store.runs():
        if store.run(r["id"])["spec"].get("kind") == "reproduce":
            return r["id"]
    sys.exit("no reproduce run in this database: run `virtbench reproduce` first")


def rows(data: dict) -> list[dict]:
    out = []
    for p in data["plan"]:
        if p["status"] == "left out":
            continue
        est, act = p.get("estimate_at_run_s"), p.get("actual_s")
        out.append({"experiment": p["id"], "scale": p.get("ran_scale") or p["scale"], "planned_s": p["estimate_s"],
                    "estimate_s": est, "actual_s": act, "status": p["status"],
                    "actual_over_estimate": round(act / est, 2) if est and act is not None else None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_id", nargs="?")
    ap.add_argument("--db", default=str(paths.default_db()))
    ap.add_argument("--json", help="also write the table as JSON here")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    a = ap.parse_args()
    store = Store(a.db)
    run_id = a.run_id or latest_reproduce(store)
    data = card.result(store, run_id)
    table = rows(data)
    facts = data.get("facts") or {}
    ratios = [r["actual_over_estimate"] for r in table if r["actual_over_estimate"]]
    summary = {"run_id": data["run_id"], "status": data["status"], "budget_s": data["budget_s"],
               "elapsed_s": data["elapsed_s"], "planned_s": round(sum(r["planned_s"] or 0 for r in table), 1),
               "experiments_s": round(sum(r["actual_s"] or 0 for r in table), 1),
               "median_actual_over_estimate": statistics.median(ratios) if ratios else None,
               "load_1m_before": facts.get("load_1m"), "cores": facts.get("cores"),
               "cpu_probe_s": facts.get("probe_s"), "counts": data["counts"]}
    if a.markdown:
        print("| experiment | scale | estimate (s) | actual (s) | actual / estimate | status |")
        print("|---|---|---:|---:|---:|---|")
        for r in table:
            print(f"| {r['experiment']} | {r['scale']} | {r['estimate_s'] or '-'} | {r['actual_s'] or '-'} | "
                  f"{r['actual_over_estimate'] or '-'} | {r['status']} |")
    else:
        for r in table:
            print(f"{r['experiment']:22} est {r['estimate_s'] or 0:7.0f} s  actual {r['actual_s'] or 0:7.0f} s  "
                  f"ratio {r['actual_over_estimate'] or float('nan'):5.2f}  {r['status']}  ({r['scale']})")
    print(f"\nrun {summary['run_id']} ({summary['status']}): {summary['elapsed_s'] / 60:.1f} min of a "
          f"{summary['budget_s'] / 60:.0f} min budget; experiments {summary['experiments_s'] / 60:.1f} min against "
          f"{summary['planned_s'] / 60:.1f} min planned; median actual/estimate {summary['median_actual_over_estimate']}; "
          f"load {summary['load_1m_before'] and round(summary['load_1m_before'], 2)} on {summary['cores']} cores before the run; verdicts {summary['counts']}")
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": summary, "experiments": table}, indent=1))


if __name__ == "__main__":
    main()
