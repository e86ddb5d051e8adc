"""Export a stored run as CSV (one row per sample) or JSON (run, environments, attempts, samples)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from .store import Store

SAMPLE_COLUMNS = ("run_id", "workload", "params_json", "condition_json", "environment", "repetition", "metric",
                  "value", "unit", "higher_is_better", "metadata_json")


def to_csv(store: Store, run_id: str) -> str:
    run_id = store.run(run_id)["id"]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(c.removesuffix("_json") for c in SAMPLE_COLUMNS)
    for s in store.samples(run_id):
        writer.writerow(s[c] for c in SAMPLE_COLUMNS)
    return buf.getvalue()


def to_json(store: Store, run_id: str) -> str:
    run = store.run(run_id)
    run_id = run["id"]

    def decoded(row: dict[str, Any]) -> dict[str, Any]:
        return {k.removesuffix("_json"): (json.loads(v) if k.endswith("_json") and v else v)
                for k, v in row.items()}

    doc = {
        "format": "virtbench-run/1",
        "run": run,
        "environments": [{k: v for k, v in e.items() if not k.endswith("_json")} for e in store.environments(run_id)],
        "instances": [{k: v for k, v in i.items() if not k.endswith("_json")} for i in store.instances(run_id)],
        "attempts": [decoded(a) for a in store.attempts(run_id)],
        "samples": [decoded(s) for s in store.samples(run_id)],
    }
    return json.dumps(doc, indent=1, default=str)
