"""Parallel efficiency and speedup against cores with the ideal line (study 001), and the
constant-total-cores shape comparison (study 000: 16 x 1, 8 x 2, 4 x 4), from analysis's `scaling`."""

from __future__ import annotations

import json
from collections import defaultdict

from ...studies import published
from .. import fmt, svg
from ..data import RunData
from ..model import Chart, Section, Table
from .common import describe, slug


def build(data: RunData) -> Section | None:
    scaling = data.results.get("scaling") or {}
    eff, shapes = scaling.get("efficiency") or [], scaling.get("shapes") or []
    if not eff and not shapes:
        return None
    section = Section(slug(data.id, "scaling"), "Parallel scaling", intro=(
        "Speedup S(p) = T1 / Tp and efficiency E(p) = S(p) / p against p = ranks x threads cores, per "
        "environment, with CIs (the exact Mann-Whitney interval of T1 / Tp at 95 %, or the lower level its "
        "repetitions allow, given in each table); the dotted line is ideal scaling."))
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in eff:
        groups[json.dumps([r["workload"], r["params"], r["condition"]], sort_keys=True)].append(r)
    for key, rows in groups.items():
        workload, params, condition = json.loads(key)
        section.blocks += _efficiency(data, workload, describe(params, condition, hide=("duration",)), rows)
    if shapes:
        section.blocks.append(_shapes(data, shapes))
    if any(r["workload"] == "npb" for r in eff):
        section.blocks.append(_published_npb())
    return section


def _published_npb() -> Table:
    """Study 000's NPB times on 2-16 VMs as speedup and efficiency relative to 2 VMs (its smallest count)."""
    pub = published.table("000", "NPB on 2, 4, 8, 16 m1.small VMs")
    cells = []
    base_p = int(pub.columns[0])
    for kernel, times in pub.rows.items():
        for col, t in zip(pub.columns, times):
            p = int(col)
            s = times[0] / t if t else None
            cells.append([kernel, col, f"{t:g}", fmt.value(s), fmt.value(s * base_p / p if s else None)])
    return Table(f"Published: {pub.cite()}, as speedup and efficiency relative to {base_p} VMs",
                 ["kernel", "VMs (1 rank each)", "time [s]", f"speedup T{base_p} / Tp",
                  f"efficiency ({base_p} x T{base_p}) / (p x Tp)"],
                 cells, numeric={1, 2, 3, 4},
                 note=f"{pub.notes} The study had no 1-VM run, so its efficiency is relative to {base_p} VMs (1 at "
                      f"{base_p}); ours above is relative to 1 core.")


def _lines(data: RunData, rows: list[dict], what: str) -> list[svg.Line]:
    envs = [e for e in data.env_order if any(r["environment"] == e for r in rows)]
    out = []
    for env in envs:
        pts = sorted((r for r in rows if r["environment"] == env), key=lambda r: r["cores"])
        out.append(svg.Line(env, [r["cores"] for r in pts], [r[what] for r in pts],
                            [r[f"{what}_ci_low"] for r in pts], [r[f"{what}_ci_high"] for r in pts],
                            style=data.env_order.index(env)))
    return out


def _efficiency(data: RunData, workload: str, where: str, rows: list[dict]) -> list[Chart]:
    cores = sorted({r["cores"] for r in rows})
    title = f"{workload} ({where})" if where else workload
    ideal = any(r.get("ideal_efficiency") is not None for r in rows)
    cells = [[str(r["cores"]), r["environment"], str(r["ranks"]), str(r["instances"]), str(r["threads"]),
              fmt.value(r["time"]), fmt.value(r["speedup"]), fmt.value(r["speedup_ci_low"]),
              fmt.value(r["speedup_ci_high"]), fmt.value(r["efficiency"]), fmt.value(r["efficiency_ci_low"]),
              fmt.value(r["efficiency_ci_high"]), fmt.level(r.get("ci_level")),
              *([fmt.value(r.get("ideal_efficiency"))] if ideal else [])]
             for r in sorted(rows, key=lambda r: (r["cores"], r["environment"]))]
    table = Table(f"{title}: speedup and efficiency", ["cores", "environment", "ranks", "instances", "threads",
                                                      "median time", "speedup", "CI low", "CI high", "efficiency",
                                                      "CI low", "CI high", "CI level",
                                                      *(["algorithmic ideal efficiency"] if ideal else [])],
                  cells, numeric=set(range(14 if ideal else 13)),
                  note=("algorithmic ideal: 1 / (p f + 1 - f), f = the fraction of the 1-rank run's work that "
                        "every rank repeats (Amdahl), as the code measured it." if ideal else ""))
    speed = _lines(data, rows, "speedup") + [svg.Line("ideal", cores, cores, reference=True)]
    effic = _lines(data, rows, "efficiency") + [svg.Line("ideal", cores, [1.0] * len(cores), reference=True)]
    # The code's own algorithmic ideal (Amdahl with the duplicated fraction f it measured on 1 rank),
    # per environment: study 001 Fig. 4 puts it beside the measured efficiency.
    amdahl = [r for r in rows if r.get("ideal_efficiency") is not None]
    for env in [e for e in data.env_order if any(r["environment"] == e for r in amdahl)]:
        pts = sorted((r for r in amdahl if r["environment"] == env), key=lambda r: r["cores"])
        effic.append(svg.Line(f"{env}: algorithmic ideal (f = {pts[0]['duplicated_fraction']:.3g})",
                              [r["cores"] for r in pts], [r["ideal_efficiency"] for r in pts],
                              style=data.env_order.index(env), reference=True))
    sid = slug(data.id, "scaling", workload, where)
    return [
        Chart(f"{sid}-speedup", f"{title}: speedup against cores",
              "Lines: speedup per environment (distinct marker and dash pattern) with CI error bars (95 %, or the level its table gives); "
              "the dotted line is ideal (S = p).",
              lambda uid: svg.lines(uid, f"{title}: speedup", speed, "cores (ranks x threads)", "speedup T1 / Tp"),
              table),
        Chart(f"{sid}-efficiency", f"{title}: parallel efficiency against cores",
              "Lines: efficiency per environment with CI error bars (95 %, or the level its table gives); the dotted line is ideal (E = 1)"
              + ("; the other dotted lines are each environment's algorithmic ideal 1 / (p f + 1 - f)."
                 if ideal else "."),
              lambda uid: svg.lines(uid, f"{title}: efficiency", effic, "cores (ranks x threads)",
                                    "efficiency S / p"), table),
    ]


def _shapes(data: RunData, shapes: list[dict]) -> Chart:
    label = {id(r): f"{r['workload']} {describe(r['params'], r['condition'], hide=('duration',))}: {r['shape']}"
             for r in shapes}
    groups = list(dict.fromkeys(label[id(r)] for r in shapes))
    envs = [e for e in data.env_order if any(r["environment"] == e for r in shapes)]
    by = {(label[id(r)], r["environment"]): r for r in shapes}

    def get(g, e):
        r = by.get((g, e))
        return None if r is None or r["ratio"] is None else (r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"], "")
    cells = [[label[id(r)], r["environment"], fmt.value(r["time"]), fmt.value(r["time_ci_low"]),
              fmt.value(r["time_ci_high"]), fmt.level(r.get("time_ci_level")), r["reference"], fmt.ratio(r["ratio"]),
              fmt.ratio(r["ratio_ci_low"]), fmt.ratio(r["ratio_ci_high"]), fmt.level(r.get("ratio_ci_level"))]
             for r in shapes]
    table = Table("Constant total cores: time per shape (instances x vCPUs)",
                  ["shape", "environment", "median time", "CI low", "CI high", "CI level", "reference", "ratio",
                   "CI low", "CI high", "CI level"], cells, numeric={2, 3, 4, 7, 8, 9})
    return Chart(slug(data.id, "scaling-shapes"), "Constant total cores: time ratio per shape",
                 "Horizontal bars: each shape's median time divided by the reference's, with CI whiskers (95 %, or the level its table gives); "
                 "> 1 is slower.",
                 lambda uid: svg.bars(uid, "time ratio per shape", groups, envs, get, "time ratio to the reference",
                                      refline=1.0, style_of=data.env_order.index, digits=fmt.ratio), table)
