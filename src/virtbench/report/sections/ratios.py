"""Ratio bar charts that stay readable, for any section: the monitor's summaries left out (they belong
to the monitoring section), rows without a ratio for every drawn environment left to the table, and
more than MAX_ROWS rows split into one figure per metric (then into parts)."""

from __future__ import annotations

from collections.abc import Callable

from ... import monitor
from .. import fmt, svg
from ..data import RunData
from ..model import Chart, Table
from .common import result_table, slug, versus

MAX_ROWS = 40  # bar groups per figure

# Condition keys a condition records about how it was applied (per environment), as opposed to the
# keys a suite requests: results of one cell share the requested ones, the recorded ones differ.
RECORDED_SUFFIXES = ("_mechanism", "_fs", "_measured_ms", "_rtt_ms", "_rtt_direct_ms")


def monitor_metrics(rows: list[dict]) -> set[tuple[str, str]]:
    """(workload, metric) pairs the monitor produced (virtbench.monitor marks its summary samples and
    names); a bare row without samples of one counts too, as in the terminal (render.results_tables)."""
    return {(r["workload"], r["metric"]) for r in rows
            if monitor.is_monitor_sample(r.get("metadata") or {}) or monitor.is_monitor_metric(r["metric"])}


def split_monitor(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(workload results, monitor summaries)."""
    mon = monitor_metrics(rows)
    keep, summaries = [], []
    for r in rows:
        (summaries if (r["workload"], r["metric"]) in mon else keep).append(r)
    return keep, summaries


def requested(condition: dict) -> dict:
    """The condition a suite asked for, without what was recorded while applying it."""
    return {k: v for k, v in condition.items()
            if not k.endswith(RECORDED_SUFFIXES) and not k.startswith("measured")}


def monitor_table(data: RunData, workload: str, rows: list[dict], label: Callable[[dict], list[str]],
                  columns: list[str]) -> Table | None:
    if not rows:
        return None
    t = result_table(f"{workload}: resource use while running (monitor summaries)", rows, data.baseline,
                     label, columns, note="Summaries of the monitor's samples per repetition "
                     "(*.cpu_util_*: fraction of the role's CPUs; *_peak: highest 1-second rate); the "
                     "monitoring section draws them over time. They are not in the ratio charts.")
    t.collapsed = True
    return t


def ratio_charts(data: RunData, cid: str, title: str, rows: list[dict], label: Callable[[dict], list[str]],
                 columns: list[str]) -> list[Chart]:
    """Ratio bars of `rows` (monitor summaries dropped), one bar group per distinct label, each
    figure followed by the table of its rows (every environment, with or without data)."""
    rows, _ = split_monitor(rows)
    baseline = data.baseline
    others = [e for e in data.env_order if e != baseline]
    text = {id(r): " · ".join(x for x in label(r) if x) for r in rows}
    by = {(text[id(r)], r["environment"]): r for r in rows}
    ratio_of = {k: r for k, r in by.items() if r["n"] and r["ratio"] is not None and k[1] in others}
    groups = list(dict.fromkeys(g for g, _ in ratio_of))
    if not groups:
        return []
    # Split: by metric when too many rows, then into parts.
    chunks: list[tuple[str, list[str]]] = []
    if len(groups) <= MAX_ROWS:
        chunks.append(("", groups))
    else:
        metric_of = {text[id(r)]: r["metric"] for r in rows}
        for metric in dict.fromkeys(metric_of[g] for g in groups):
            mine = [g for g in groups if metric_of[g] == metric]
            parts = [mine[i:i + MAX_ROWS] for i in range(0, len(mine), MAX_ROWS)]
            for k, part in enumerate(parts):
                chunks.append((metric + (f", part {k + 1} of {len(parts)}" if len(parts) > 1 else ""), part))
    out = []
    for suffix, chunk in chunks:
        series = [e for e in others if any((g, e) in ratio_of for g in chunk)]
        drawn = [g for g in chunk if all((g, e) in ratio_of for e in series)] or chunk
        left = len(chunk) - len(drawn)
        name = f"{title}: ratio to {baseline}" + (f" ({suffix})" if suffix else "")

        def get(g, e, _by=ratio_of):
            r = _by.get((g, e))
            return None if r is None else (r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"], fmt.mark(r, baseline))

        chunk_set = set(chunk)
        table_rows = [r for r in rows if text[id(r)] in chunk_set]
        table = result_table(name, table_rows, baseline, label, columns)
        out.append(Chart(
            slug(cid, "ratio", suffix), name,
            f"Horizontal bars: each environment's ratio to {baseline} (the table's note says how), with CI whiskers; "
            f"the dashed line is 1. Marks: {fmt.MARK_HELP}."
            + (f" {left} row(s) without a ratio for every environment are in the table only." if left else ""),
            lambda uid, _n=name, _g=drawn, _s=series, _get=get: svg.bars(
                uid, _n, _g, _s, _get, f"ratio {versus(_s, baseline)}", refline=1.0,
                style_of=data.env_order.index, digits=fmt.ratio),
            table))
    return out
