"""Export a stored run as CSV (one row per sample) or JSON (run, environments, attempts, samples);
with `timeseries=True`, the monitor's series too: CSV of the series instead of the samples (one row
per tick, instance and metric), or a `timeseries` list added to the JSON document."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from .store import Store

SAMPLE_COLUMNS = ("run_id", "workload", "params_json", "condition_json", "environment", "repetition", "metric",
                  "value", "unit", "higher_is_better", "metadata_json")


# The monitor's rows, each with what its attempt ran (cell, workload, params) and its time since
# the attempt started.
TIMESERIES_COLUMNS = ("run_id", "environment", "cell_key", "workload", "params_json", "condition_json", "attempt_id",
                      "repetition", "warmup", "instance", "role", "t", "elapsed_s", "metric", "value", "unit", "source")


def timeseries_rows(store: Store, run_id: str, *, instance: str | None = None,
                    metric: str | None = None) -> list[dict[str, Any]]:
    """The monitor's series of a run (store table `timeseries`), oldest first, joined with their attempts."""
    run_id = store.run(run_id)["id"]
    attempts = {a["id"]: a for a in store.attempts(run_id)}
    out = []
    for r in store.timeseries(run_id, instance=instance, metric=metric):
        a = attempts.get(r["attempt_id"], {})
        started = a.get("started_at")
        out.append({"run_id": run_id, "environment": r["environment"], "cell_key": a.get("cell_key"),
                    "workload": a.get("workload"), "params_json": a.get("params_json"),
                    "condition_json": a.get("condition_json"), "attempt_id": r["attempt_id"],
                    "repetition": r["repetition"], "warmup": bool(a.get("warmup")), "instance": r["instance"],
                    "role": r["role"], "t": r["t"], "elapsed_s": r["t"] - started if started is not None else None,
                    "metric": r["metric"], "value": r["value"], "unit": r["unit"], "source": r["source"]})
    return out


def to_csv(store: Store, run_id: str, *, timeseries: bool = False) -> str:
    run_id = store.run(run_id)["id"]
    buf = io.StringIO()
    writer = csv.writer(buf)
    columns = TIMESERIES_COLUMNS if timeseries else SAMPLE_COLUMNS
    writer.writerow(c.removesuffix("_json") for c in columns)
    for s in timeseries_rows(store, run_id) if timeseries else store.samples(run_id):
        writer.writerow(s[c] for c in columns)
    return buf.getvalue()


def to_json(store: Store, run_id: str, *, timeseries: bool = False) -> str:
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
    if timeseries:
        doc["timeseries"] = [decoded(r) for r in timeseries_rows(store, run_id)]
    return json.dumps(doc, indent=1, default=str)
