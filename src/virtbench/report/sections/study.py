"""What the study sections (boot, mpi, web, hpa) share: a curve of one metric against a numeric
setting from result rows (one line per environment, or per environment and setting; CI error bars;
log axes), a study's published table as it was printed, and the complete results table."""

from __future__ import annotations

import math
from collections.abc import Callable

from ...studies import published
from .. import fmt, svg
from ..data import RunData
from ..model import Chart, Table
from .common import result_table, slug

CURVE_COLUMNS = ["environment", "n", "median", "CI low", "CI high", "unit", "ratio", "ratio CI low",
                 "ratio CI high", "sig."]
LOG_SPAN = 100  # values spanning two decades or more get a log axis


def number(v) -> float | None:
    if isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def wants_log(values: list[float]) -> bool:
    return bool(values) and min(values) > 0 and max(values) / min(values) >= LOG_SPAN


Point = tuple[float, str, dict]  # x, line label, analysis.results() row


def curve(data: RunData, cid: str, title: str, points: list[Point], xlabel: str, *, log_x: bool | None = None,
          log_y: bool | None = None, x_text: Callable[[float], str] = fmt.value,
          reference: list[svg.Line] | None = None, description: str = "") -> Chart:
    """Median of one metric against x, one line per label with CI error bars (95 %, or the level its table gives); its data table
    (one row per point, keyed by cell, metric and environment) follows the chart."""
    points = sorted(points, key=lambda p: (p[1], p[0]))
    labels = list(dict.fromkeys(lbl for _, lbl, _ in sorted(points, key=lambda p: _line_order(data, p))))
    unit = points[0][2]["unit"] if points else ""
    metric = points[0][2]["metric"] if points else ""
    xs = [x for x, _, r in points]
    ys = [r["median"] for _, _, r in points if r["median"] is not None]
    log_x = wants_log(xs) if log_x is None else log_x
    log_y = wants_log(ys) if log_y is None else log_y
    lines = []
    for k, label in enumerate(labels):
        mine = [(x, r) for x, lbl, r in points if lbl == label]
        lines.append(svg.Line(label, [x for x, _ in mine], [nan_if_none(r["median"]) for _, r in mine],
                              [nan_if_none(r["ci_low"]) for _, r in mine], [nan_if_none(r["ci_high"]) for _, r in mine], style=k))
    lines += reference or []
    named = any(label != r["environment"] for _, label, r in points)  # lines other than one per environment
    cells = [[x_text(x), *([label] if named else []), *curve_cells(r, data.baseline)] for x, label, r in points]
    keys = [{"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]} for _, _, r in points]
    k = 1 + named
    table = Table(title, [xlabel, *(["line"] if named else []), *CURVE_COLUMNS], cells, keys,
                  numeric={0, *(k + i for i in (1, 2, 3, 4, 6, 7, 8))},
                  note=fmt.ratio_note([r for _, _, r in points], data.baseline, " at the same point"))
    ylabel = f"{metric} [{unit}]" + (" (log scale)" if log_y else "")
    xl = xlabel + (" (log scale)" if log_x else "")
    return Chart(cid, title, description or (
        f"Lines: median {metric} against {xlabel}, one line per {'environment' if len(labels) < 2 else 'series'} "
        "(each with its own marker and dash pattern, named at its end and in the legend), with CI error bars (95 %, or the level its table gives)"
        + ("; logarithmic axes where marked." if log_x or log_y else ".")),
        lambda uid: svg.lines(uid, title, lines, xl, ylabel, log_x=log_x, log_y=log_y), table)


def nan_if_none(v):
    return math.nan if v is None else v


def _line_order(data: RunData, p: Point) -> tuple:
    env = p[2]["environment"]
    return (data.env_order.index(env) if env in data.env_order else 99, p[1])


def curve_cells(r: dict, baseline: str) -> list[str]:
    return [r["environment"], str(r["n"]), fmt.value(r["median"]), fmt.value(r["ci_low"]), fmt.value(r["ci_high"]),
            r["unit"], fmt.ratio(r["ratio"]), fmt.ratio(r["ratio_ci_low"]), fmt.ratio(r["ratio_ci_high"]),
            fmt.mark(r, baseline)]


def all_results(data: RunData, workload: str, rows: list[dict], label: Callable[[dict], list[str]],
                columns: list[str]) -> Table:
    """Every result of the workload (the monitor's summaries too), folded: nothing stored is left out."""
    t = result_table(f"{workload}: all results", rows, data.baseline, label, columns)
    t.collapsed = True
    return t


def published_table(pub: published.PublishedTable, *, caption: str = "") -> Table:
    """A study's table as printed (None = the study's 'fail'), or its finding when it printed no numbers."""
    if not pub.rows:
        return Table(caption or f"Published: {pub.cite()}", ["source", "finding"], [[pub.cite(), pub.notes]])
    cells = [[row, *("fail" if v is None else f"{v:g}" for v in vals)] for row, vals in pub.rows.items()]
    unit = f" [{pub.unit}]" if pub.unit else ""
    return Table(caption or f"Published: {pub.cite()}{unit}", ["row", *pub.columns], cells,
                 numeric=set(range(1, len(pub.columns) + 1)), note=pub.notes)


def sid(data: RunData, *parts) -> str:
    return slug(data.id, *parts)
