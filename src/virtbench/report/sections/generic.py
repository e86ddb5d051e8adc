"""Any workload without a section of its own: medians, CIs and ratios as a table, ratio bars, and
each metric against a swept numeric parameter (file size, message size, ranks, replicas, delay ...)
with log axes when the values span two decades or more."""

from __future__ import annotations

import json
from collections import defaultdict

from ...studies import published
from .. import fmt, svg
from ..data import RunData
from ..model import Chart, Note, Section, Table
from .common import describe, result_table, slug
from .ratios import monitor_table, ratio_charts, requested, split_monitor
from .study import number, published_table

MIN_POINTS = 3  # a sweep with fewer points is a comparison, not a curve


def _settings(rows: list[dict]) -> tuple[dict, list[str]]:
    """(settings shared by every row, names of the settings that vary): constants go in captions."""
    merged = [{**r["params"], **requested(r["condition"])} for r in rows]
    keys = list(dict.fromkeys(k for m in merged for k in m))
    const = {k: merged[0][k] for k in keys
             if all(k in m for m in merged) and all(m[k] == merged[0][k] for m in merged)}
    return const, [k for k in keys if k not in const and k != "duration"]


def _where(r: dict, varying: list[str]) -> str:
    both = {**r["params"], **requested(r["condition"])}
    return " · ".join(f"{k}={both[k]}" for k in varying if k in both)


def build(data: RunData, rows: list[dict]) -> Section:
    workload = rows[0]["workload"]
    baseline, envs = data.baseline, data.env_order
    # The monitor's summaries go in a folded table of their own, never in a ratio chart or a curve.
    rows, summaries = split_monitor(rows)
    const, varying = _settings(rows or summaries)
    shared = describe({k: v for k, v in const.items() if k != "duration"}, {})
    section = Section(slug(data.id, workload), f"Workload: {workload}", intro=(
        f"Median of each metric per environment with its CI (95 %, or the lower level a row's notes give), and the ratio to '{baseline}' "
        "(for a time metric > 1 is slower, for a throughput metric > 1 is faster)."
        + (f" Settings of every result here: {shared}." if shared else "")))
    table = result_table(f"{workload}: medians and ratios", rows, baseline,
                         lambda r: [r["metric"], _where(r, varying)], ["metric", "settings"])
    sweeps = _sweeps(data, workload, [r for r in rows if r["n"] and r["metric"] != "(none)"], varying)
    drawn = {k["cell"] + "|" + k["metric"] for c in sweeps for k in c.table.keys or []}
    # Results drawn as curves are not repeated as bars (their ratios are in the curves' tables).
    barred = [r for r in rows if r["cell_key"] + "|" + r["metric"] not in drawn]
    charts = ratio_charts(data, slug(data.id, workload), workload, barred,
                          lambda r: [r["metric"], _where(r, varying)], ["metric", "settings"])
    if charts:
        section.blocks += charts
        table.collapsed = True  # every result, with or without data, stays in the file
    if rows:
        section.blocks.append(table)
    if not charts and len(envs) < 2:
        section.blocks.append(Note("One environment only: there are no ratios to draw."))
    section.blocks += sweeps
    # The studies' figures for this family, as printed (their own sections put them beside ours).
    section.blocks += [published_table(pub) for pub in published.for_workload(workload)]
    mon = monitor_table(data, workload, summaries, lambda r: [r["metric"], _where(r, varying)],
                        ["metric", "settings"])
    if mon is not None:
        section.blocks.append(mon)
    return section


def _sweeps(data: RunData, workload: str, rows: list[dict], varying: list[str]) -> list[Chart]:
    """One line chart per (metric, swept numeric setting, values of the other varying settings)."""
    out = []
    for key in varying:
        lines: dict[str, list[tuple[float, dict]]] = defaultdict(list)
        for r in rows:
            x = number({**r["params"], **requested(r["condition"])}.get(key))
            if x is not None:
                rest = [k for k in varying if k != key]
                lines[json.dumps([r["metric"], _where(r, rest)])].append((x, r))
        for ident, points in lines.items():
            if len({x for x, _ in points}) >= MIN_POINTS:
                metric, where = json.loads(ident)
                out.append(_sweep_chart(data, workload, key, metric, where, sorted(points, key=lambda p: p[0])))
    return out


def _sweep_chart(data: RunData, workload: str, key: str, metric: str, where: str,
                 points: list[tuple[float, dict]]) -> Chart:
    envs = [e for e in data.env_order if any(r["environment"] == e for _, r in points)]
    unit = points[0][1]["unit"]
    title = f"{workload}: {metric} against {key}" + (f" ({where})" if where else "")
    xs = [x for x, _ in points]
    medians = [r["median"] for _, r in points]
    log_x = min(xs) > 0 and max(xs) / min(xs) >= 100
    log_y = min(medians) > 0 and max(medians) / min(medians) >= 100
    lines = [svg.Line(env, [x for x, r in points if r["environment"] == env],
                      [r["median"] for _, r in points if r["environment"] == env],
                      [r["ci_low"] for _, r in points if r["environment"] == env],
                      [r["ci_high"] for _, r in points if r["environment"] == env],
                      style=data.env_order.index(env)) for env in envs]
    cells = [[fmt.value(x), r["environment"], str(r["n"]), fmt.value(r["median"]), fmt.value(r["ci_low"]),
              fmt.value(r["ci_high"]), unit, fmt.ratio(r["ratio"]), fmt.ratio(r["ratio_ci_low"]),
              fmt.ratio(r["ratio_ci_high"]), fmt.mark(r, data.baseline)] for x, r in points]
    keys = [{"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]} for _, r in points]
    table = Table(title, [key, "environment", "n", "median", "CI low", "CI high", "unit", "ratio", "ratio CI low",
                          "ratio CI high", "sig."], cells, keys, numeric={0, 2, 3, 4, 5, 7, 8, 9},
                  note=fmt.ratio_note([r for _, r in points], data.baseline))
    return Chart(slug(data.id, workload, metric, key, where), title,
                 f"Lines: median {metric} against {key}, one line per environment (distinct marker and dash "
                 "pattern, labelled at its end), with CI error bars (95 %, or the level its table gives)"
                 + ("; logarithmic axes where marked." if log_x or log_y else "."),
                 lambda uid: svg.lines(uid, title, lines, key + (" (log scale)" if log_x else ""),
                                       f"{metric} [{unit}]" + (" (log scale)" if log_y else ""),
                                       log_x=log_x, log_y=log_y), table)
