"""Verdicts of one table's ratio rows: Benjamini-Hochberg across the table's comparisons, each
ratio's CI redone at the matching Benjamini-Yekutieli level, and the verdict read from it.

Split out of ``analysis.py`` (issue 23): analysis builds the rows, this step corrects them across
each family (table) and fills in ``significant`` (a Benjamini-Hochberg discovery: the printed CI
excludes 1), ``p_adjusted``, ``p_threshold``, ``comparisons`` and the verdict fields
(:func:`verdict_fields`: ``verdict``, one of faster / slower / equivalent / inconclusive,
``detectable``, ``margin``, ``verdict_reason``), all by :func:`apply_verdicts`.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

from .. import stats, workloads
from .interval_verdict import DEFAULT_MARGIN, interval_verdict

#: False discovery rate of the correction across one table's comparisons (Benjamini-Hochberg).
FDR = 0.05


def table_family(row: dict, cell: dict | None) -> str:
    """The comparisons corrected together: those of one table (workload, parameters except the one
    enumerating indexed tests, requested condition), the monitor's resource metrics apart."""
    wl = workloads.get(row["workload"])
    params = {k: v for k, v in row["params"].items() if k != wl.index_param}
    return json.dumps([row["workload"], params, (cell or {}).get("condition", row["condition"]),
                       bool(row["metadata"].get("monitor"))], sort_keys=True, default=str)


def verdict_fields(low: float, high: float, level: float, needed: float, margin: float,
                   higher_is_better: bool) -> dict:
    """A row's verdict fields from its ratio interval (stats.interval_verdict): ``verdict``,
    ``detectable`` (None unless finite), ``margin`` and ``verdict_reason`` ("n too small", "no
    interval" or None)."""
    v = interval_verdict(low, high, level=level, needed=needed, margin=margin, higher_is_better=higher_is_better)
    return {"verdict": v.verdict, "detectable": v.detectable, "margin": margin, "verdict_reason": v.reason or None}


def apply_verdicts(rows: list[dict], values: dict, family, value_key, margin: float = DEFAULT_MARGIN) -> None:
    """Benjamini-Hochberg across each family of ratio rows, and each ratio's CI at the matching
    Benjamini-Yekutieli level (1 - R q / m), so `significant` is read from the interval printed:
    it excludes 1 exactly when the comparison is a BH discovery (without ties). The verdict is read
    from that same interval (:func:`verdict_fields`; equivalent within `margin`, else faster or
    slower when it excludes 1, else inconclusive). A comparison whose group sizes cannot reach that
    level gets its widest interval, with the lower level it has, and verdict "inconclusive" with
    reason "n too small". Rows without a ratio (baseline, missing data) get verdict None."""
    fams: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("_compared"):
            fams[family(r)].append(r)
    for members in fams.values():
        threshold, tested, _ = stats.bh_level([r["p_value"] for r in members],
                                              [r.pop("_min_p") for r in members], FDR)
        adjusted = bh_adjusted([r["p_value"] for r in members], tested)
        for r, p_adj in zip(members, adjusted):
            del r["_compared"]
            cand_key, base_key = value_key(r)
            paired = r.pop("_paired", None)
            if paired:
                rr = stats.paired_ratio(*paired, confidence=1.0 - threshold, alpha=threshold)
                r.pop("_seed", None)
            else:
                rr = stats.ratio(values[cand_key], values[base_key], confidence=1.0 - threshold,
                                 alpha=threshold, seed=r.pop("_seed", 0))
            reachable = math.isfinite(rr.min_p) and rr.min_p <= threshold + 1e-12
            excludes = rr.ci_low > 1.0 or rr.ci_high < 1.0
            # a bootstrap states its nominal level; the test's own floor says whether it is reachable
            level = rr.ci_level if reachable else min(rr.ci_level, 1.0 - rr.min_p)
            r.update(ratio_ci_low=rr.ci_low, ratio_ci_high=rr.ci_high, ratio_ci_level=level,
                     ratio_ci_method=rr.method, significant=bool(reachable and excludes), p_adjusted=p_adj,
                     p_threshold=threshold, comparisons=tested,
                     **verdict_fields(rr.ci_low, rr.ci_high, level, 1.0 - threshold, margin,
                                      r.get("higher_is_better", True)))
    for r in rows:  # rows that never had a ratio
        for k in ("_compared", "_min_p", "_seed", "_paired"):
            r.pop(k, None)


def bh_adjusted(ps: list[float], tested: int) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values) over `tested` comparisons; NaN stays NaN."""
    order = sorted((p, i) for i, p in enumerate(ps) if math.isfinite(p))
    out = [math.nan] * len(ps)
    m = max(tested, len(order))
    running = 1.0
    for rank in range(len(order), 0, -1):
        p, i = order[rank - 1]
        running = min(running, p * m / rank)
        out[i] = running
    return out
