"""Parallel efficiency and the constant-total-cores shape comparison, from result rows (pure).

Strong scaling: within one (workload, other parameters, condition, environment), the row with
1 rank and 1 thread gives T1; every row with p = ranks x threads cores gets
speedup S(p) = T1 / Tp and efficiency E(p) = T1 / (p x Tp), with the CI of stats.ratio (the exact
Mann-Whitney interval of the two groups' ratio; a bootstrap where values are not positive) at 95 %,
or at the lower level its groups allow (3 and 3 times: 90 %), which `ci_level` says. Where the 1-rank row's metadata
has the fraction f of work every rank duplicates (`duplicated_fraction_median`, vb-eigen), each row
also gets the algorithmic ideal E_ideal(p) = 1 / (p f + 1 - f) (Amdahl; study 001 Fig. 4).

Shapes: cells with `total_vcpus` > 0 ask for a fixed number of cores arranged as instances x vCPUs
(study 000: 16 x 1, 8 x 2, 4 x 4). An environment runs only the cells whose shape it makes, so
the comparison is across cells: for the same (workload, other parameters, ranks, total_vcpus,
condition), each arrangement's time against the baseline environment's arrangement (or the
fastest one when the baseline has none). Shape cells also count for strong scaling (same
environment, growing ranks), so one suite gives both tables.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

from .. import stats

SCALING_PARAMS = ("ranks", "instances", "threads", "total_vcpus")
TIME_METRIC = "time"


def analyse(rows: list[dict], values: dict[tuple[str, str, str], list[float]], baseline: str,
            *, seed: int = 0) -> dict[str, list[dict]]:
    """{"efficiency": [...], "shapes": [...]}, each only when the run has such rows."""
    out = {}
    eff = efficiency(rows, values, seed=seed)
    if eff:
        out["efficiency"] = eff
    shp = shapes(rows, values, baseline, seed=seed)
    if shp:
        out["shapes"] = shp
    return out


def _timed(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["metric"] == TIME_METRIC and r.get("n") and "ranks" in r["params"]]


def _finite(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def efficiency(rows: list[dict], values: dict[tuple[str, str, str], list[float]], *,
               seed: int = 0) -> list[dict]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in _timed(rows):
        rest = {k: v for k, v in r["params"].items() if k not in SCALING_PARAMS}
        groups[json.dumps([r["workload"], rest, r["condition"], r["environment"]], sort_keys=True)].append(r)
    out = []
    for key, grp in groups.items():
        ones = [r for r in grp if r["params"]["ranks"] == 1 and r["params"].get("threads", 1) == 1]
        if not ones or len(grp) < 2:
            continue
        one = ones[0]
        t1 = values.get((one["cell_key"], one["metric"], one["environment"]), [])
        # Amdahl's ideal where the code measures the work every rank repeats (vb-eigen: f on 1 rank)
        f = _finite((one.get("metadata") or {}).get("duplicated_fraction_median"))
        workload, rest, condition, env = json.loads(key)
        for r in sorted(grp, key=lambda r: (r["params"]["ranks"] * r["params"].get("threads", 1),
                                            r["params"].get("instances", 1))):
            p = r["params"]["ranks"] * r["params"].get("threads", 1)
            tp = values.get((r["cell_key"], r["metric"], r["environment"]), [])
            s = stats.Ratio(1.0, 1.0, 1.0, math.nan, False) if r is one else \
                stats.ratio(t1, tp, higher_is_better=False, seed=seed)
            out.append({"workload": workload, "params": rest, "condition": condition, "environment": env,
                        "ranks": r["params"]["ranks"], "instances": r["params"].get("instances", 1),
                        "threads": r["params"].get("threads", 1), "cores": p, "time": _finite(r["median"]),
                        "speedup": _finite(s.ratio), "speedup_ci_low": _finite(s.ci_low),
                        "speedup_ci_high": _finite(s.ci_high), "efficiency": _finite(s.ratio / p),
                        "efficiency_ci_low": _finite(s.ci_low / p), "efficiency_ci_high": _finite(s.ci_high / p),
                        "ci_level": _finite(s.ci_level),  # of both CIs; the 1-rank row's own is exact (None)
                        **({"ideal_efficiency": 1.0 / (p * f + 1.0 - f), "duplicated_fraction": f}
                           if f is not None else {})})
    return out


def shapes(rows: list[dict], values: dict[tuple[str, str, str], list[float]], baseline: str, *,
           seed: int = 0) -> list[dict]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in _timed(rows):
        if not r["params"].get("total_vcpus"):
            continue
        rest = {k: v for k, v in r["params"].items() if k != "instances"}
        groups[json.dumps([r["workload"], rest, r["condition"]], sort_keys=True)].append(r)
    out = []
    for key, grp in groups.items():
        if len(grp) < 2:
            continue  # one arrangement: nothing to compare
        workload, rest, condition = json.loads(key)
        ref = next((r for r in grp if r["environment"] == baseline), None) or min(grp, key=lambda r: r["median"])
        ref_values = values.get((ref["cell_key"], ref["metric"], ref["environment"]), [])
        for r in sorted(grp, key=lambda r: -r["params"].get("instances", 1)):
            inst = r["params"].get("instances", 1)
            per = rest["total_vcpus"] // inst if inst else None
            rv = stats.ratio(values.get((r["cell_key"], r["metric"], r["environment"]), []), ref_values,
                             higher_is_better=False, seed=seed)
            out.append({"workload": workload, "params": rest, "condition": condition, "environment": r["environment"],
                        "shape": f"{inst} x {per}", "instances": inst, "vcpus_per_instance": per,
                        "time": _finite(r["median"]), "time_ci_low": _finite(r["ci_low"]),
                        "time_ci_high": _finite(r["ci_high"]), "time_ci_level": _finite(r.get("ci_level")),
                        "reference": ref["environment"], "ratio": _finite(rv.ratio), "ratio_ci_low": _finite(rv.ci_low),
                        "ratio_ci_high": _finite(rv.ci_high), "ratio_ci_level": _finite(rv.ci_level)})
    return out
