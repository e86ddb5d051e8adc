"""Stored samples -> result rows: summary statistics, ratio to the baseline, indexes, warnings.

The row shape is the public `--json` contract of `run`, `show` and `compare`.

Series: a workload whose one repetition measures a whole series (vb-mpibench: one value per message
size) names the sample metadata key that tells the points apart in `series_key` (e.g. "bytes").
That key then joins the row identity: one row per (cell, metric, series value, environment), with
the value added to the row's `params` and `cell_key` "<cell key>/<series_key>=<value>".
Sample metadata conventions: `warnings` (a list of sentences) are carried into the row's warnings;
`verified` (true/false) becomes the row's `verified`, false when any sample failed its check.

Ratios come from paired rounds: the runner runs a cell's environments in lockstep rounds and
stores each sample's `round`. A round's value is the median of its samples (usually one); each
environment's ratio to the baseline is estimated from the rounds where both have a value
(stats.paired_ratio). A round with a value on one side only (a failed repetition: a hole) is left
out of that ratio and counted in the row's `holes`, with a warning. Samples stored without a round
(runs made before rounds were recorded) fall back to the unpaired groups (stats.ratio), and the row
says so.
"""

from __future__ import annotations

import json
import statistics
import math
from collections import defaultdict
from typing import Any

from . import monitor, stats, workloads
from .stats import scaling
from .run.outcomes import reason_line
from .store import Store, canonical
from .stats.exact import MIN_N_95
from .stats.interval_verdict import DEFAULT_MARGIN
from .stats.verdicts import apply_verdicts, FDR, table_family, verdict_fields

# Sample metadata that differs per repetition; not lifted into a result's metadata.
_PER_SAMPLE = {"repetition", "round", "measured_seconds", "count", "index", "instance", "condition", "warnings",
               "load_1m", "cpu_given"}


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


def run_margin(run: dict) -> float:
    """The equivalence margin a run's suite stated (key `margin`), else the default (2 %)."""
    m = (run.get("spec") or {}).get("policy", {}).get("margin")
    return float(m) if isinstance(m, (int, float)) and m > 0 else DEFAULT_MARGIN


def removals(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The leftovers of earlier runs this run's sweeps removed (machines/ledger.py), oldest first:
    `{"at": epoch seconds, "what": name}`, as `virtbench show` lists them."""
    return [{"at": e["at"], "what": e["detail"]} for e in store.events(run_id) if e["kind"] == "removed"]


def results(store: Store, run_id: str, *, seed: int = 0, margin: float | None = None) -> dict[str, Any]:
    """A run's result rows (the `--json` object of `run` and `show`); `margin`: the equivalence
    margin of the verdicts, a fraction (default: the suite's `margin`, else 2 %)."""
    run = store.run(run_id)
    run_id = run["id"]
    baseline = run["baseline"]
    margin = run_margin(run) if margin is None else margin
    env_order = [e["name"] for e in run["spec"]["environments"]]
    cells = {c["key"]: c for c in run["spec"]["cells"]}

    series_keys = {c["workload"]: _series_key(c["workload"]) for c in cells.values()}
    groups: dict[tuple[str, str, Any], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    loads: dict[tuple, dict] = {}  # one sample's metadata per attempt: the machine's load and CPU given
    for s in store.samples(run_id):
        series = _series_of(s, series_keys.get(s["workload"]))
        groups[(s["cell_key"], s["metric"], series)][s["environment"]].append(s)
        if '"load_1m"' in s["metadata_json"] or '"cpu_given"' in s["metadata_json"]:
            m = json.loads(s["metadata_json"])
            loads[(s["cell_key"], s["environment"], m.get("repetition"))] = m
    failures: dict[tuple[str, str], int] = defaultdict(int)
    reasons: dict[tuple[str, str], list[str]] = defaultdict(list)
    skipped: dict[tuple[str, str], str] = {}
    warmups_failed: dict[tuple[str, str], list[str]] = defaultdict(list)
    for a in store.outcomes(run_id):
        where = (a["cell_key"], a["environment"])
        if a["status"] == "skipped":
            skipped[where] = a["reason"] or "skipped"
        elif a["status"] != "ok" and not a["warmup"]:
            failures[where] += 1
            reasons[where].append(a["reason"] or "")
        elif a["status"] != "ok":
            warmups_failed[where].append(a["reason"] or "")

    rows: list[dict[str, Any]] = []
    values: dict[tuple[str, str, str], list[float]] = {}
    for (cell_key, metric, series), by_env in groups.items():
        cell = _series_cell(cells[cell_key], series_keys.get(cells[cell_key]["workload"]), series)
        base_values = [s["value"] for s in by_env.get(baseline, [])]
        for env, ss in by_env.items():
            values[(cell["key"], metric, env)] = [s["value"] for s in ss]
        # A suite entry may name its environments: rows only where the cell ran (or was meant to);
        # without the baseline among them, a row keeps its absolute figures but gets no ratio.
        # The monitor's series exist only where a repetition succeeded: no empty rows for them elsewhere.
        is_monitor = any(monitor.is_monitor_sample(s["metadata_json"]) for ss in by_env.values() for s in ss[:1])
        here = [e for e in env_order if e in by_env or (not is_monitor and e in _cell_envs(cells[cell_key], env_order))]
        for env in here:
            row = _row(cell, metric, env, by_env.get(env, []), base_values, env == baseline,
                       0 if is_monitor else failures[(cell_key, env)], reasons[(cell_key, env)], seed,
                       base_samples=by_env.get(baseline, []), margin=margin)
            if baseline not in _cell_envs(cells[cell_key], env_order) and env != baseline and row["n"]:
                row["warnings"].append(f"no ratio: this cell does not run on the baseline ({baseline})")
            rows.append(row)
    # Cells whose every attempt failed still deserve a line saying so; there the warm-ups count too,
    # as in the end summary (run/outcomes.py: attempts, not only measured repetitions).
    seen = {(r["cell_key"].split("/")[0], r["environment"]) for r in rows}
    for where, why in warmups_failed.items():
        if where not in seen:
            failures[where] += len(why)
            reasons[where] += why
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
    apply_verdicts(rows, values, lambda r: table_family(r, cells.get(r["cell_key"].split("/")[0])),
              lambda r: ((r["cell_key"], r["metric"], r["environment"]), (r["cell_key"], r["metric"], baseline)),
              margin)
    _target_notes(rows, (run.get("spec") or {}).get("policy") or {})
    rows += _index_rows(rows, groups, cells, env_order, baseline, seed, margin)
    order = {k: i for i, k in enumerate(cells)}

    def point(r: dict) -> float:
        v = r["params"].get(series_keys.get(r["workload"]) or "")
        return float(v) if isinstance(v, (int, float)) else -math.inf

    rows.sort(key=lambda r: (order.get(r["cell_key"].split("/")[0], len(order)), r["metric"] == "index",
                             r["metric"], point(r),
                             env_order.index(r["environment"]) if r["environment"] in env_order else 99))
    _attach_failures(rows, failures, reasons)
    out = {"run_id": run_id, "status": run["status"], "suite": run["suite_name"], "baseline": baseline,
           "environments": env_order, "margin": margin, "results": [_clean(r) for r in rows]}
    scaled = scaling.analyse(rows, values, baseline, seed=seed)
    if scaled:
        out["scaling"] = scaled
    from .run.outcomes import cell_outcomes

    out["outcome"] = cell_outcomes(store, run_id)
    out["removals"] = removals(store, run_id)
    load = machine_load(list(loads.values()))
    if load:
        out["machine_load"] = load
    return out


#: Other programs' CPU (cores' worth, median over the repetitions) from which a machine counts as busy.
BUSY_OTHERS = 0.25
#: Steal (share of all CPUs' time taken by the hypervisor for other guests) from which it counts as busy.
BUSY_STEAL = 0.05


def _given(metas: list[dict]) -> list[dict]:
    return [m["cpu_given"] for m in metas if isinstance(m.get("cpu_given"), dict)]


def _median_of(given: list[dict], key: str) -> float | None:
    vals = [g[key] for g in given if isinstance(g.get(key), (int, float))]
    return float(statistics.median(vals)) if vals else None


def machine_load(metas: list[dict]) -> dict[str, Any] | None:
    """Was the machine busy? From the CPU it gave each repetition (sample metadata `cpu_given`,
    runner/cpugiven.py): busy during the run when other programs took a median of BUSY_OTHERS cores
    or more, or the hypervisor stole BUSY_STEAL of the CPU time; the kernel's CPU pressure (share of
    the time some task waited for a CPU, which counts our own tasks too) is reported beside them.
    Busy before: the 1-minute load average was at least half the cores with nothing of ours running
    yet. Runs stored before `cpu_given` fall back to the load average during the run (median above
    the cores + 0.5)."""
    during = sorted(m["load_1m"] for m in metas if isinstance(m.get("load_1m"), (int, float)))
    given = _given(metas)
    if not during and not given:
        return None
    cores = next((m["cores_here"] for m in metas if m.get("cores_here")), None) or 1
    before = next((m["load_before_run"] for m in metas if isinstance(m.get("load_before_run"), (int, float))), None)
    median = float(statistics.median(during)) if during else None
    busy_before = before is not None and before >= 0.5 * cores
    out: dict[str, Any] = {"cores": cores, "before_run": before, "during_median": median,
                           "during_max": during[-1] if during else None, "note": None}
    what = [f"load average {before:.2f} before the run"] if busy_before else []
    if given:
        others = _median_of(given, "others_cores") or 0.0
        steal = _median_of(given, "steal") or 0.0
        psi = _median_of(given, "psi_some")
        peak = max((g["others_cores"] for g in given if isinstance(g.get("others_cores"), (int, float))), default=0.0)
        out.update(measured="cpu_given", others_cores_median=others, others_cores_max=peak, steal_median=steal,
                   psi_some_median=psi)
        busy_during = others >= BUSY_OTHERS or steal >= BUSY_STEAL
        if busy_during:
            what.append(f"other programs took a median {others:.2f} cores (max {peak:.2f}) during the repetitions"
                        + (f", the hypervisor stole {steal * 100:.0f} %" if steal >= BUSY_STEAL else "")
                        + (f", some task waited for a CPU {psi * 100:.0f} % of the time" if psi is not None else ""))
    else:
        out["measured"] = "load average"
        busy_during = median is not None and median > cores + 0.5
        if busy_during:
            what.append(f"load average median {median:.2f} (max {during[-1]:.2f}) during it")
    out["busy"] = busy_before or busy_during
    if out["busy"]:
        out["note"] = (f"busy machine: {' and '.join(what)}, on {cores} cores: other programs competed for the CPU, "
                       "so intervals are wider and ratios may be shifted; rerun on a quiet machine to confirm")
    return out


def busy_cause(metas: list[dict]) -> str:
    """For a noisy row: what other programs took while its repetitions ran, if that was much."""
    given = _given(metas)
    others = _median_of(given, "others_cores")
    if others is None or others < BUSY_OTHERS:
        return ""
    return f" (other programs took a median {others:.2f} cores during these repetitions: a busy machine)"


def _cell_envs(cell: dict, env_order: list[str]) -> list[str]:
    """The environments a cell runs on: its suite entry's `environments`, else all of the run's."""
    only = cell.get("environments")
    return [e for e in env_order if not only or e in only]



#: Fewest repetitions per side that let a rank test reach p <= 0.05 (4: 2 / C(8, 4) = 0.029).
_MIN_VERDICT_N = MIN_N_95["bootstrap"]


def _rounds(samples_: list[dict]) -> dict[int, float] | None:
    """Round -> the median of that round's values; None when a sample has no round (an old run)."""
    by_round: dict[int, list[float]] = defaultdict(list)
    for s in samples_:
        rnd = json.loads(s["metadata_json"]).get("round")
        if not isinstance(rnd, int):
            return None
        by_round[rnd].append(s["value"])
    return {k: float(statistics.median(v)) for k, v in by_round.items()}


def _paired(samples_: list[dict], base_samples: list[dict]) -> tuple[list[float], list[float], int] | None:
    """Candidate and baseline values aligned by round (NaN where one side has none) and the count of
    such holes; None when either side's samples carry no round."""
    cand, base = _rounds(samples_), _rounds(base_samples)
    if cand is None or base is None:
        return None
    every = sorted(set(cand) | set(base))
    holes = len(set(cand) ^ set(base))
    return [cand.get(i, math.nan) for i in every], [base.get(i, math.nan) for i in every], holes


def _row(cell, metric, env, samples_, base_values, is_baseline, failures, reasons, seed,
         base_samples=None, margin: float = DEFAULT_MARGIN) -> dict[str, Any]:
    values = [s["value"] for s in samples_]
    summary = stats.summarize(values, seed=seed)
    hib = bool(samples_[0]["higher_is_better"]) if samples_ else True
    paired, holes, ratio_notes = None, 0, []
    if is_baseline:
        r = stats.Ratio(1.0, 1.0, 1.0, math.nan, False) if values else _nan_ratio()
    elif values and base_values:
        aligned = _paired(samples_, base_samples or [])
        if aligned is not None:
            paired, holes = aligned[:2], aligned[2]
            r = stats.paired_ratio(*paired)
            if holes:
                ratio_notes.append(f"{holes} round(s) with a value on one side only (a failed or missing repetition) "
                                   f"left out of the ratio, which pairs the {r.pairs} round(s) with both")
        else:
            r = stats.ratio(values, base_values, higher_is_better=hib, seed=seed)
            ratio_notes.append("unpaired ratio: these samples carry no round (stored before virtbench ran lockstep "
                               "rounds), so the interval treats the two environments' repetitions as independent")
    else:
        r = _nan_ratio()
    metas = [json.loads(s["metadata_json"]) for s in samples_]
    meta = _common_metadata(metas)
    verified = [m["verified"] for m in metas if isinstance(m.get("verified"), bool)]
    if verified:
        meta["verified"] = all(verified)
    condition = {**cell["condition"], **_measured_condition(metas)}
    wl = workloads.get(cell["workload"])
    if metas:
        meta.update(wl.summarize_metadata(metas))
    base = wl.index_baselines.get(metric)
    if base and values:
        meta.update(index=summary.median / base * 10, index_ci_low=summary.ci_low / base * 10,
                    index_ci_high=summary.ci_high / base * 10, index_baseline=base)
    monitor = bool(meta.get("monitor"))
    # Resource use varies by nature; its spread is not a measurement-quality problem.
    warnings = stats.warnings_for(summary) if values and not monitor else []
    cause = busy_cause(metas)
    warnings = [w + cause if w.startswith("noisy") else w for w in warnings]
    warnings += _sample_warnings(metas)
    warnings += ratio_notes
    row = {"cell_key": cell["key"], "workload": cell["workload"], "params": cell["params"],
           "condition": condition, "metric": metric, "unit": samples_[0]["unit"] if samples_ else "",
           "environment": env, "n": summary.n, "median": summary.median, "mean": summary.mean,
           "stdev": summary.stdev, "ci_low": summary.ci_low, "ci_high": summary.ci_high, "cv": summary.cv,
           "outliers": summary.outliers, "ratio": r.ratio, "ratio_ci_low": r.ci_low,
           "ratio_ci_high": r.ci_high, "p_value": r.p_value, "significant": r.significant,
           "higher_is_better": hib, "failures": failures, "metadata": meta, "warnings": warnings,
           "ci_level": summary.ci_level, "ratio_ci_level": r.ci_level, "ratio_ci_method": r.method,
           "verdict": None, "detectable": None, "margin": None, "verdict_reason": None, "ci_target_met": None,
           "p_adjusted": math.nan, "p_threshold": math.nan, "comparisons": 0,
           "pairs": r.pairs, "holes": holes}
    if not is_baseline and math.isfinite(r.ratio) and math.isfinite(r.min_p):
        # picked up by apply_verdicts, which corrects across the table and removes these keys
        row.update(_compared=True, _min_p=r.min_p, _seed=seed)
        if paired is not None:
            row["_paired"] = paired
    elif not is_baseline and math.isfinite(r.ratio):
        # a ratio, but too few values on a side for any test (and so no interval)
        row.update(verdict_fields(r.ci_low, r.ci_high, 0.0, 1.0 - FDR, margin, hib), verdict_reason="n too small")
    return row


#: The warning of a row that ended at max_repetitions without its ci_target (render groups by it).
TARGET_MISSED = ("ci_target {target} not reached in {rounds} rounds (max_repetitions): raise max_repetitions or the "
                 "workload's duration, or accept the wider interval")


def _target_notes(rows: list[dict], policy: dict) -> None:
    """A compared row that took the run's max_repetitions rounds and still has a ratio interval wider
    than ci_target says so (`ci_target_met` False, and a warning with what to change); True where it
    is met; None where the run had no adaptive target."""
    target, most, least = policy.get("ci_target"), policy.get("max_repetitions"), policy.get("min_repetitions")
    for r in rows:
        if r.get("verdict") is None or not target or not most or (least or 0) >= most or r["metadata"].get("monitor"):
            continue  # the monitor's series never decide when a cell stops
        lo, hi, ratio = r["ratio_ci_low"], r["ratio_ci_high"], r["ratio"]
        half = (hi - lo) / 2 / ratio if all(isinstance(x, float) and math.isfinite(x) for x in (lo, hi, ratio)) \
            and ratio > 0 else math.inf
        r["ci_target_met"] = bool(half <= target + 1e-12 and r.get("verdict_reason") is None)
        if not r["ci_target_met"] and max(r.get("pairs") or 0, r["n"]) >= most:
            got = f"±{half * 100:.2g} %" if math.isfinite(half) and r.get("verdict_reason") is None \
                else "no interval at the table's level"
            r["warnings"].append(f"{TARGET_MISSED.format(target=f'±{target * 100:g} %', rounds=most)}: {got}")


def _failed_row(cell, env, failures, reasons) -> dict[str, Any]:
    return _row(cell, "(none)", env, [], [], False, failures, reasons, 0)


def _attach_failures(rows: list[dict], failures: dict, reasons: dict) -> None:
    """Each (cell, environment) with failed repetitions says so once, on its first row of the
    workload's own metrics (not on every metric, series point or monitor series)."""
    done: set[tuple[str, str]] = set()
    for r in rows:
        where = (r["cell_key"].split("/")[0], r["environment"])
        if where in done or not failures.get(where) or r["metric"] == "index" or r["metadata"].get("monitor"):
            continue
        done.add(where)
        count = failures[where]
        r["warnings"].append(f"every repetition failed ({count}): {_top(reasons[where])}" if not r["n"] else
                             f"{count} failed repetition(s): {_top(reasons[where])}")


def _index_rows(rows, groups, cells, env_order, baseline, seed, margin=DEFAULT_MARGIN) -> list[dict[str, Any]]:
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
            # No verdict from fewer repetitions than a rank test needs for p <= 0.05 on either side:
            # a bootstrap of 2 or 3 values does not hold 95 %, so no level is claimed for it.
            small = env != baseline and min([n, *(len(v) for v in base_tests)]) < _MIN_VERDICT_N
            level = 0.95 if math.isfinite(r.ci_low) and env != baseline and not small else math.nan
            said = {"verdict": None, "detectable": None, "margin": None, "verdict_reason": None}
            if env != baseline and math.isfinite(r.ratio):
                said = verdict_fields(r.ci_low, r.ci_high, level if not small else 0.0, 0.95, margin, True)
                if small:
                    said["verdict_reason"] = "n too small"
            out.append({"cell_key": fam["cell"]["key"], "workload": fam["cell"]["workload"],
                        "params": fam["cell"]["params"], "condition": fam["cell"]["condition"], "metric": "index",
                        "unit": "index", "environment": env, "n": n, "median": point, "mean": math.nan,
                        "stdev": math.nan, "ci_low": lo, "ci_high": hi, "cv": math.nan, "outliers": 0,
                        "ratio": r.ratio, "ratio_ci_low": r.ci_low, "ratio_ci_high": r.ci_high,
                        "p_value": r.p_value, "significant": r.significant and not small, "higher_is_better": True,
                        "failures": 0, "metadata": {"tests": tests, "index_of": len(tests)}, "warnings": [],
                        # an index summarizes the table's tests, so it is not one more comparison in
                        # their correction; its CI's level is its weakest test's
                        "ci_level": min(stats.median_ci(v)[2] for v in per_test) if math.isfinite(lo) else math.nan,
                        "ratio_ci_level": level,
                        "ratio_ci_method": "bootstrap" if env != baseline else "", **said, "ci_target_met": None, "pairs": 0, "holes": 0,
                        "p_adjusted": math.nan, "p_threshold": math.nan, "comparisons": 0})
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
        counts[reason_line(r)] += 1
    reason, count = max(counts.items(), key=lambda kv: kv[1])
    return reason + (f" (and {len(reasons) - count} other)" if len(reasons) > count else "")


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: missing numbers become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def compare(store: Store, run_a: str, run_b: str, *, seed: int = 0, margin: float | None = None) -> dict[str, Any]:
    """Run B against run A: the same (workload, params, condition, metric, environment) matched up;
    `margin`: the equivalence margin (default: run A's suite's, else 2 %)."""
    a, b = store.run(run_a)["id"], store.run(run_b)["id"]
    margin = run_margin(store.run(a)) if margin is None else margin

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
    rows, values = [], {}
    for key in [k for k in ga if k in gb]:
        va, vb = [s["value"] for s in ga[key]], [s["value"] for s in gb[key]]
        values[("a", key)], values[("b", key)] = va, vb
        hib = bool(ga[key][0]["higher_is_better"])
        sa_, sb_ = stats.summarize(va, seed=seed), stats.summarize(vb, seed=seed)
        r = stats.ratio(vb, va, higher_is_better=hib, seed=seed)
        workload, params, condition, metric, env = key
        row = {
            "workload": workload, "params": json.loads(params), "condition": json.loads(condition),
            "metric": metric, "unit": ga[key][0]["unit"], "environment": env, "higher_is_better": hib,
            "n_a": sa_.n, "median_a": sa_.median, "ci_low_a": sa_.ci_low, "ci_high_a": sa_.ci_high,
            "n_b": sb_.n, "median_b": sb_.median, "ci_low_b": sb_.ci_low, "ci_high_b": sb_.ci_high,
            "ratio": r.ratio, "ratio_ci_low": r.ci_low, "ratio_ci_high": r.ci_high, "p_value": r.p_value,
            "significant": r.significant, "ci_level_a": sa_.ci_level, "ci_level_b": sb_.ci_level,
            "ratio_ci_level": r.ci_level, "ratio_ci_method": r.method, "verdict": None, "detectable": None,
            "margin": None, "verdict_reason": None,
            "p_adjusted": math.nan, "p_threshold": math.nan, "comparisons": 0, "_key": key}
        if math.isfinite(r.ratio) and math.isfinite(r.min_p):
            row.update(_compared=True, _min_p=r.min_p, _seed=seed)
        elif math.isfinite(r.ratio):  # one value on a side: no interval, no test
            row.update(verdict_fields(r.ci_low, r.ci_high, 0.0, 1.0 - FDR, margin, hib), verdict_reason="n too small")
        rows.append(row)

    def family(r: dict) -> str:
        index_param = workloads.get(r["workload"]).index_param if r["workload"] in workloads.names() else None
        params = {k: v for k, v in r["params"].items() if k != index_param}
        return json.dumps([r["workload"], params, r["condition"], monitor.is_monitor_metric(r["metric"])],
                          sort_keys=True, default=str)

    apply_verdicts(rows, values, family, lambda r: (("b", r["_key"]), ("a", r["_key"])), margin)
    rows = [_clean({k: v for k, v in r.items() if k != "_key"}) for r in rows]
    only_a = sorted({k[3] + "@" + k[4] for k in ga if k not in gb})
    only_b = sorted({k[3] + "@" + k[4] for k in gb if k not in ga})
    return {"run_a": a, "run_b": b, "margin": margin, "results": rows, "only_in_a": only_a, "only_in_b": only_b}
