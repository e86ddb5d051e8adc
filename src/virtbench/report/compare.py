"""Two runs side by side (analysis.compare): B / A per matched result, with CIs and verdicts."""

from __future__ import annotations

import time
from collections import defaultdict

from .. import analysis
from ..store import Store
from . import fmt, header
from .data import load
from .model import Chart, Document, Note, Part, Section, Table
from . import svg
from .sections.common import describe, slug
from .sections.ratios import monitor_metrics

COLUMNS = ["metric", "parameters", "environment", "unit", "n A", "median A", "A CI low", "A CI high", "n B",
           "median B", "B CI low", "B CI high", "B / A", "ratio CI low", "ratio CI high", "p", "verdict", "notes"]


def _label(r: dict) -> str:
    where = describe(r["params"], r["condition"], hide=("duration",))
    return f"{r['metric']} · {where} @ {r['environment']}" if where else f"{r['metric']} @ {r['environment']}"


def cells(r: dict) -> list[str]:
    return [r["metric"], describe(r["params"], r["condition"], hide=("duration",)), r["environment"], r["unit"],
            str(r["n_a"]), fmt.value(r["median_a"]), fmt.value(r["ci_low_a"]), fmt.value(r["ci_high_a"]),
            str(r["n_b"]), fmt.value(r["median_b"]), fmt.value(r["ci_low_b"]), fmt.value(r["ci_high_b"]),
            fmt.ratio(r["ratio"]), fmt.ratio(r["ratio_ci_low"]), fmt.ratio(r["ratio_ci_high"]),
            fmt.p_value(r["p_value"]), fmt.mark(r), fmt.levels(r)]


def _run_cells(side: str, d) -> list[str]:
    run = d.run
    took = fmt.seconds(run["finished_at"] - run["created_at"]) if run["finished_at"] else "not finished"
    return [side, d.id, run["suite_name"] or "-", run["status"], fmt.when(run["created_at"]), took,
            ", ".join(d.env_order), str(d.sample_count)]


def document(store: Store, run_a: str, run_b: str, margin: float | None = None) -> Document:
    da, db = load(store, run_a), load(store, run_b)
    data = analysis.compare(store, da.id, db.id, margin=margin)
    summary = Section(slug("compare", da.id, db.id), f"Run B {db.id} against run A {da.id}", intro=(
        "Results matched by workload, parameters, condition, metric and environment. B / A is the ratio of "
        "medians with its CI (95 % raised for the correction across each table, or the lower level its notes give); for a time metric > 1 means B is slower, for a throughput metric "
        "> 1 means B is faster."))
    summary.blocks.append(Table("The two runs", ["", "run", "suite", "status", "started", "took", "environments",
                                                 "samples"], [_run_cells("A", da), _run_cells("B", db)]))
    if not data["results"]:
        summary.blocks.append(Note("The two runs have no (workload, parameters, metric, environment) in common: "
                                   "there is nothing to compare.", "warn"))
    for side, label in (("only_in_a", "Only in A"), ("only_in_b", "Only in B")):
        if data[side]:
            summary.blocks.append(Note(f"{label}: {', '.join(data[side][:40])}"
                                       + (" ..." if len(data[side]) > 40 else "")))
    monitor = monitor_metrics(da.results["results"] + db.results["results"])
    by_workload: dict[str, list[dict]] = defaultdict(list)
    for r in data["results"]:
        by_workload[r["workload"]].append(r)
    for workload, rows in by_workload.items():
        table = Table(f"{workload}: run B / run A", COLUMNS, [cells(r) for r in rows],
                      [{"metric": r["metric"], "env": r["environment"],
                        "params": describe(r["params"], r["condition"])} for r in rows],
                      numeric={4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
                      note=f"{fmt.COMPARE_HELP}.")
        # The monitor's summaries stay in the table, out of the chart (they are not the workload's results).
        charted = [r for r in rows if (r["workload"], r["metric"]) not in monitor]
        if not charted:
            summary.blocks.append(table)
            continue
        groups = [_label(r) for r in charted]
        by = dict(zip(groups, charted))

        def get(g, _series, by=by):
            r = by[g]
            return None if r["ratio"] is None else (r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"], fmt.mark(r))
        summary.blocks.append(Chart(
            slug("compare", da.id, db.id, workload), f"{workload}: run B / run A",
            "Horizontal bars: median in run B divided by median in run A, with CI whiskers (95 %, or the level its table gives); the dashed "
            f"line is 1 (no change). Marks: {fmt.MARK_HELP}.",
            lambda uid, groups=groups, get=get, w=workload: svg.bars(
                uid, f"{w}: run B / run A", groups, ["B / A"], get, "run B / run A", refline=1.0, digits=fmt.ratio),
            table))
    parts = [Part(da.id + "-vs-" + db.id, f"Comparison: {db.id} against {da.id}", [summary]),
             Part(da.id, f"Run A: {da.id}", [header.build(da)]),
             Part(db.id, f"Run B: {db.id}", [header.build(db)])]
    return Document(f"virtbench comparison: {db.id} against {da.id}", time.time(), parts, legend=fmt.COMPARE_HELP)
