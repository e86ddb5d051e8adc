"""Stored samples -> result rows: summary statistics, ratio to the baseline, indexes, warnings.

The row shape is the public `--json` contract of `run`, `show` and `compare`.

Series: a workload whose one repetition measures a whole series (vb-mpibench: one value per message
size) names the sample metadata key that tells the points apart in `series_key` (e.g. "bytes").
That key then joins the row identity: one row per (cell, metric, series value, environment), with
the value added to the row's `params` and `cell_key` "<cell key>/<series_key>=<value>".
Sample metadata conventions: `warnings` (a list of sentences) are carried into the row's warnings;
`verified` (true/false) becomes the row's `verified`, false when any sample failed its check.
"""

from __future__ import annotations

import json
import statistics
import math
from collections import defaultdict
from typing import Any

from . import scaling, stats, workloads
from .store import Store, canonical

# Sample metadata that differs per repetition; not lifted into a result's metadata.
_PER_SAMPLE = {"repetition", "measured_seconds", "count", "index", "instance", "condition", "warnings"}


def _series_key(workload: str) -> str | None:
    try:
        return workloads.get(workload).series_key
    except KeyError:
        return None


def _series_of(sample: dict, key: str | None) -> Any:
    return json.loads(sample["metadata_json"]).get(key) if key else None


def _series_cell(cell: dict, key: str | None, value: Any) -> dict:
    """The cell one series point belongs to, with the point in its params and key."""
    if key is None or value is None:
        return cell
    return {**cell, "key": f"{cell['key']}/{key}={value}", "params": {**cell["params"], key: value}}


def results(store: Store, run_id: str, *, seed: int = 0) -> dict[str, Any]:
    run = store.run(run_id)
    run_id = run["id"]
    baseline = run["baseline"]
    env_order = [e["name"] for e in run["spec"]["environments"]]
    cells = {c["key"]: c for c in run["spec"]["cells"]}

    series_keys = {c["workload"]: _series_key(c["workload"]) for c in cells.values()}
    groups: dict[tuple[str, str, Any], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for s in store.samples(run_id):
        series = _series_of(s, series_keys.get(s["workload"]))
        groups[(s["cell_key"], s["metric"], series)][s["environment"]].append(s)
    failures: dict[tuple[str, str], int] = defaultdict(int)
    reasons: dict[tuple[str, str], list[str]] = defaultdict(list)
    skipped: dict[tuple[str, str], str] = {}
    for a in store.outcomes(run_id):
        where = (a["cell_key"], a["environment"])
        if a["status"] == "skipped":
            skipped[where] = a["reason"] or "skipped"
        elif a["status"] != "ok" and not a["warmup"]:
            failures[where] += 1
            reasons[where].append(a["reason"] or "")

    rows: list[dict[str, Any]] = []
    values: dict[tuple[str, str, str], list[float]] = {}
    for (cell_key, metric, series), by_env in groups.items():
        cell = _series_cell(cells[cell_key], series_keys.get(cells[cell_key]["workload"]), series)
        base_values = [s["value"] for s in by_env.get(baseline, [])]
        for env, ss in by_env.items():
            values[(cell["key"], metric, env)] = [s["value"] for s in ss]
        # A suite entry may name its environments: rows only where the cell ran (or was meant to);
        # without the baseline among them, a row keeps its absolute figures but gets no ratio.
        here = [e for e in env_order if e in by_env or e in _cell_envs(cells[cell_key], env_order)]
        for env in here:
            row = _row(cell, metric, env, by_env.get(env, []), base_values, env == baseline,
                       failures[(cell_key, env)], reasons[(cell_key, env)], seed)
            if baseline not in _cell_envs(cells[cell_key], env_order) and env != baseline and row["n"]:
                row["warnings"].append(f"no ratio: this cell does not run on the baseline ({baseline})")
            rows.append(row)
    # Cells whose every attempt failed still deserve a line saying so.
    seen = {(r["cell_key"].split("/")[0], r["environment"]) for r in rows}
    for (cell_key, env), count in failures.items():
        if (cell_key, env) not in seen and cell_key in cells:
            rows.append(_failed_row(cells[cell_key], env, count, reasons[(cell_key, env)]))
    for (cell_key, env), reason in skipped.items():
        # rows made for a skipped environment (the cell ran elsewhere) carry the reason too
        for r in rows:
            if (r["cell_key"].split("/")[0], r["environment"]) == (cell_key, env) and not r["n"]:
                r["skipped"] = reason
                r["warnings"].append(f"skipped: {reason}")
        if (cell_key, env) not in seen and cell_key in cells:
            row = _row(cells[cell_key], "(none)", env, [], [], False, 0, [], 0)
            row["skipped"] = reason
            row["warnings"] = [f"skipped: {reason}"]
            rows.append(row)
    rows += _index_rows(rows, groups, cells, env_order, baseline, seed)
    order = {k: i for i, k in enumerate(cells)}

    def point(r: dict) -> float:
        v = r["params"].get(series_keys.get(r["workload"]) or "")
        return float(v) if isinstance(v, (int, float)) else -math.inf

    rows.sort(key=lambda r: (order.get(r["cell_key"].split("/")[0], len(order)), r["metric"] == "index",
                             r["metric"], point(r),
                             env_order.index(r["environment"]) if r["environment"] in env_order else 99))
    out = {"run_id": run_id, "status": run["status"], "suite": run["suite_name"], "baseline": baseline,
           "environments": env_order, "results": [_clean(r) for r in rows]}
    scaled = scaling.analyse(rows, values, baseline, seed=seed)
    if scaled:
        out["scaling"] = scaled
    return out


def _cell_envs(cell: dict, env_order: list[str]) -> list[str]:
    """The environments a cell runs on: its suite entry's `environments`, else all of the run's."""
    only = cell.get("environments")
    return [e for e in env_order if not only or e in only]



def _row(cell, metric, env, samples_, base_values, is_baseline, failures, reasons, seed) -> dict[str, Any]:
    values = [s["value"] for s in samples_]
    summary = stats.summarize(values, seed=seed)
    hib = bool(samples_[0]["higher_is_better"]) if samples_ else True
    if is_baseline:
        r = stats.Ratio(1.0, 1.0, 1.0, math.nan, False) if values else _nan_ratio()
    elif values and base_values:
        r = stats.ratio(values, base_values, higher_is_better=hib, seed=seed)
    else:
        r = _nan_ratio()
    metas = [json.loads(s["metadata_json"]) for s in samples_]
    meta = _common_metadata(metas)
    verified = [m["verified"] for m in metas if isinstance(m.get("verified"), bool)]
    if verified:
        meta["verified"] = all(verified)
    condition = {**cell["condition"], **_measured_condition(metas)}
    wl = workloads.get(cell["workload"])
    base = wl.index_baselines.get(metric)
    if base and values:
        meta.update(index=summary.median / base * 10, index_ci_low=summary.ci_low / base * 10,
                    index_ci_high=summary.ci_high / base * 10, index_baseline=base)
    monitor = bool(meta.get("monitor"))
    # Resource use varies by nature; its spread is not a measurement-quality problem.
    warnings = stats.warnings_for(summary) if values and not monitor else []
    warnings += _sample_warnings(metas)
    if failures:
        warnings.append(f"{failures} failed repetition(s): {_top(reasons)}")
    return {"cell_key": cell["key"], "workload": cell["workload"], "params": cell["params"],
            "condition": condition, "metric": metric, "unit": samples_[0]["unit"] if samples_ else "",
            "environment": env, "n": summary.n, "median": summary.median, "mean": summary.mean,
            "stdev": summary.stdev, "ci_low": summary.ci_low, "ci_high": summary.ci_high, "cv": summary.cv,
            "outliers": summary.outliers, "ratio": r.ratio, "ratio_ci_low": r.ci_low,
            "ratio_ci_high": r.ci_high, "p_value": r.p_value, "significant": r.significant,
            "higher_is_better": hib, "failures": failures, "metadata": meta, "warnings": warnings}


def _failed_row(cell, env, failures, reasons) -> dict[str, Any]:
    row = _row(cell, "(none)", env, [], [], False, failures, reasons, 0)
    row["warnings"] = [f"every repetition failed ({failures}): {_top(reasons)}"]
    return row


def _index_rows(rows, groups, cells, env_order, baseline, seed) -> list[dict[str, Any]]:
    """Overall index per (workload, params without the test param, condition) and environment."""
    families: dict[str, dict[str, Any]] = {}
    for (cell_key, metric, _series), by_env in groups.items():
        cell = cells[cell_key]
        wl = workloads.get(cell["workload"])
        if metric not in wl.index_baselines:
            continue
        rest = {k: v for k, v in cell["params"].items() if k != wl.index_param}
        key = json.dumps([cell["workload"], rest, cell["condition"]], sort_keys=True)
        fam = families.setdefault(key, {"cell": {**cell, "params": rest, "key": "index:" + key},
                                        "wl": wl, "tests": {}})
        fam["tests"][metric] = {env: [s["value"] for s in ss] for env, ss in by_env.items()}
    out = []
    for fam in families.values():
        tests = sorted(fam["tests"])
        bases = [fam["wl"].index_baselines[t] for t in tests]
        for env in env_order:
            per_test = [fam["tests"][t].get(env, []) for t in tests]
            if any(not v for v in per_test):
                continue  # an index over a different set of tests would not be comparable
            point, lo, hi = stats.geomean_index_ci(per_test, bases, seed=seed)
            base_tests = [fam["tests"][t].get(baseline, []) for t in tests]
            if env == baseline:
                r = stats.Ratio(1.0, 1.0, 1.0, math.nan, False)
            elif all(base_tests):
                r = stats.index_ratio(per_test, base_tests, bases, seed=seed)
            else:
                r = _nan_ratio()
            n = min(len(v) for v in per_test)
            out.append({"cell_key": fam["cell"]["key"], "workload": fam["cell"]["workload"],
                        "params": fam["cell"]["params"], "condition": fam["cell"]["condition"], "metric": "index",
                        "unit": "index", "environment": env, "n": n, "median": point, "mean": math.nan,
                        "stdev": math.nan, "ci_low": lo, "ci_high": hi, "cv": math.nan, "outliers": 0,
                        "ratio": r.ratio, "ratio_ci_low": r.ci_low, "ratio_ci_high": r.ci_high,
                        "p_value": r.p_value, "significant": r.significant, "higher_is_better": True,
                        "failures": 0, "metadata": {"tests": tests, "index_of": len(tests)}, "warnings": []})
    return out


def _nan_ratio() -> stats.Ratio:
    return stats.Ratio(math.nan, math.nan, math.nan, math.nan, False)


def _measured_condition(metas: list[dict]) -> dict[str, Any]:
    """What the conditions reported (mechanism, measured delay): medians of numbers, common strings."""
    values: dict[str, list] = defaultdict(list)
    for m in metas:
        for k, v in (m.get("condition") or {}).items():
            values[k].append(v)
    out: dict[str, Any] = {}
    for k, vs in values.items():
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vs):
            out[k] = float(statistics.median(vs))
        elif all(v == vs[0] for v in vs):
            out[k] = vs[0]
    return out


def _common_metadata(metas: list[dict]) -> dict[str, Any]:
    """Keys whose value is the same in every sample (driver, image hash, accelerator, ...)."""
    if not metas:
        return {}
    common = {k: v for k, v in metas[0].items() if k not in _PER_SAMPLE}
    for m in metas[1:]:
        common = {k: v for k, v in common.items() if m.get(k) == v}
    return common


def _sample_warnings(metas: list[dict]) -> list[str]:
    """The samples' own warnings (failed verification, memory pressure), once each, with how often."""
    counts: dict[str, int] = defaultdict(int)
    for m in metas:
        for w in dict.fromkeys(m.get("warnings") or []):
            counts[str(w)] += 1
    return [w if k == len(metas) else f"{w} ({k} of {len(metas)} samples)" for w, k in counts.items()]


def _top(reasons: list[str]) -> str:
    if not reasons:
        return ""
    counts: dict[str, int] = defaultdict(int)
    for r in reasons:
        counts[r.splitlines()[0][:200] if r else "unknown"] += 1
    reason, count = max(counts.items(), key=lambda kv: kv[1])
    return reason + (f" (and {len(reasons) - count} other)" if len(reasons) > count else "")


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: missing numbers become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def compare(store: Store, run_a: str, run_b: str, *, seed: int = 0) -> dict[str, Any]:
    """Run B against run A: the same (workload, params, condition, metric, environment) matched up."""
    a, b = store.run(run_a)["id"], store.run(run_b)["id"]

    def grouped(run_id: str) -> dict[tuple, list[dict]]:
        out: dict[tuple, list[dict]] = defaultdict(list)
        for s in store.samples(run_id):
            params = s["params_json"]
            key = _series_key(s["workload"])
            if key:  # one series point per row, as in results()
                params = canonical({**json.loads(params), key: _series_of(s, key)})
            out[(s["workload"], params, s["condition_json"], s["metric"], s["environment"])].append(s)
        return out

    ga, gb = grouped(a), grouped(b)
    rows = []
    for key in [k for k in ga if k in gb]:
        va, vb = [s["value"] for s in ga[key]], [s["value"] for s in gb[key]]
        hib = bool(ga[key][0]["higher_is_better"])
        sa_, sb_ = stats.summarize(va, seed=seed), stats.summarize(vb, seed=seed)
        r = stats.ratio(vb, va, higher_is_better=hib, seed=seed)
        workload, params, condition, metric, env = key
        rows.append(_clean({
            "workload": workload, "params": json.loads(params), "condition": json.loads(condition),
            "metric": metric, "unit": ga[key][0]["unit"], "environment": env, "higher_is_better": hib,
            "n_a": sa_.n, "median_a": sa_.median, "ci_low_a": sa_.ci_low, "ci_high_a": sa_.ci_high,
            "n_b": sb_.n, "median_b": sb_.median, "ci_low_b": sb_.ci_low, "ci_high_b": sb_.ci_high,
            "ratio": r.ratio, "ratio_ci_low": r.ci_low, "ratio_ci_high": r.ci_high, "p_value": r.p_value,
            "significant": r.significant}))
    only_a = sorted({k[3] + "@" + k[4] for k in ga if k not in gb})
    only_b = sorted({k[3] + "@" + k[4] for k in gb if k not in ga})
    return {"run_a": a, "run_b": b, "results": rows, "only_in_a": only_a, "only_in_b": only_b}
