"""System suite (UnixBench-style): ratio bars per test with CI whiskers and significance marks,
index scores, single and N copies, the overall index, and the published indexes beside ours."""

from __future__ import annotations

import json
from collections import defaultdict

from ...studies import published
from ...workloads.system import TESTS
from .. import fmt, svg
from ..data import RunData
from ..model import Chart, Note, Section, Table
from .common import describe, result_table, slug, versus

INDEX = "overall index"


def _panel_title(params: dict, condition: dict) -> str:
    copies = str(params.get("copies", "1"))
    what = {"1": "single copy", "vcpus": "N copies (one per vCPU)"}.get(copies, f"{copies} copies")
    rest = describe(params, condition, hide=("copies", "test", "duration"))
    return what + (f" · {rest}" if rest else "")


def _label(row: dict) -> str:
    return INDEX if row["metric"] == "index" else row["metric"]


def build(data: RunData, rows: list[dict]) -> Section:
    baseline, envs = data.baseline, data.env_order
    panels: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        key = json.dumps([{k: v for k, v in r["params"].items() if k != "test"}, r["condition"]], sort_keys=True)
        panels[key].append(r)
    section = Section(slug(data.id, "system"), "System suite (UnixBench-style)", intro=(
        "Each test's score (higher is better) in each environment, as a ratio to the baseline "
        f"environment '{baseline}' with its CI (95 % raised for the table's correction; a row's lower level is in "
        "its notes), and as an index: score / UnixBench "
        "baseline x 10; the overall index is their geometric mean."))
    index_rows = []
    for key, prow in panels.items():
        first = prow[0]
        title = _panel_title(first["params"], first["condition"])
        sid = slug(data.id, "system", title)
        section.blocks += _panel(sid, title, [r for r in prow if _is_test(r)], envs, baseline)
        section.blocks += _others(title, [r for r in prow if not _is_test(r)], baseline)
        index_rows += [r for r in prow if r["metric"] == "index"]
    section.blocks += _scratch_note(rows)
    section.blocks += _published(data, index_rows)
    return section


def _scratch_note(rows: list[dict]) -> list:
    """fcopy* measure the file system they write to: say so when the environments' differ (issue 14)."""
    fs = {r["environment"]: r["metadata"].get("scratch_fs") for r in rows
          if r["metric"].startswith("fcopy") and r["metadata"].get("scratch_fs")}
    if len(set(fs.values())) < 2:
        return []
    where = ", ".join(f"{env}: {kind}" for env, kind in fs.items())
    return [Note(f"The file-copy tests (fcopy*) wrote to different file systems ({where}; sample metadata "
                 "scratch_dir and scratch_fs): their ratios compare those file systems (a container's overlay "
                 "root against the host's scratch directory) as much as the environments. Give every environment "
                 "the same kind of scratch (a storage condition) to measure the environment alone.")]


def _is_test(row: dict) -> bool:
    return row["metric"] in TESTS or row["metric"] in ("index", "(none)")


def _others(title: str, rows: list[dict], baseline: str) -> list:
    """Other metrics recorded with the tests (e.g. the monitor's per-repetition summaries): a table."""
    if not rows:
        return []
    return [result_table(f"System suite, {title}: other metrics recorded with the tests", rows, baseline,
                         lambda r: [r["params"].get("test", ""), r["metric"]], ["test", "metric"])]


def _ordered(rows: list[dict]) -> list[str]:
    metrics = {r["metric"] for r in rows if r["metric"] not in ("index", "(none)")}
    order = [t for t in TESTS if t in metrics] + sorted(metrics - set(TESTS))
    return order + ([INDEX] if any(r["metric"] == "index" for r in rows) else [])


def _panel(sid: str, title: str, rows: list[dict], envs: list[str], baseline: str) -> list:
    by = {(_label(r), r["environment"]): r for r in rows}
    groups = _ordered(rows)
    blocks: list = []
    failed = [r for r in rows if r["metric"] == "(none)"]
    if failed:
        what = [f"{r['params'].get('test', '')} on {r['environment']}: {(r['warnings'] or ['?'])[0]}" for r in failed]
        blocks.append(Note(f"{title}: {len(failed)} cell(s) produced no samples: " + "; ".join(what), "warn"))
    if not groups:
        return blocks
    table = result_table(f"System suite, {title}: medians and ratios", [by[(g, e)] for g in groups for e in envs
                                                                        if (g, e) in by],
                         baseline, lambda r: [_label(r)], ["test"])
    others = [e for e in envs if e != baseline]
    with_ratio = [r for r in rows if r["environment"] in others and r["ratio"] is not None]
    if with_ratio:
        def get_ratio(g, e):
            r = by.get((g, e))
            return None if r is None or r["ratio"] is None else (
                r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"], fmt.mark(r, baseline))
        blocks.append(Chart(
            f"{sid}-ratio", f"System suite, {title}: ratio to {baseline}",
            f"Horizontal bars: each test's score in each environment as a ratio to {baseline}'s (from the "
            "rounds run side by side; the table's note says how), with CI whiskers; the dashed line is 1 (no "
            "difference); > 1 is faster. "
            f"Marks: {fmt.MARK_HELP}.",
            lambda uid: svg.bars(uid, f"{title}: ratio to {baseline}", groups, others, get_ratio,
                                 f"score ratio {versus(others, baseline)} (higher is better)", refline=1.0,
                                 bold=[INDEX], style_of=envs.index, digits=fmt.ratio),
            table))
    else:
        blocks.append(table)
        blocks.append(Note(f"Only the baseline '{baseline}' has results here, so there are no ratios to draw."))

    def get_index(g, e):
        r = by.get((g, e))
        if r is None or not r["n"]:
            return None
        if r["metric"] == "index":
            return r["median"], r["ci_low"], r["ci_high"], ""
        m = r["metadata"]
        return (m["index"], m.get("index_ci_low"), m.get("index_ci_high"), "") if "index" in m else None
    blocks.append(Chart(
        f"{sid}-index", f"System suite, {title}: index per test",
        "Horizontal bars: score / UnixBench baseline x 10 per test and environment, with CI whiskers (95 %, or the level its table gives); "
        "the last row is the overall index (geometric mean).",
        lambda uid: svg.bars(uid, f"{title}: index per test", groups, envs, get_index,
                             "index (score / UnixBench baseline x 10)", bold=[INDEX], digits=fmt.value,
                             style_of=envs.index),
        _index_table(title, groups, envs, by)))
    idx = [r for r in rows if r["metric"] == "index"]
    if idx and idx[0]["metadata"].get("index_of", 12) < len(TESTS):
        tests = idx[0]["metadata"].get("tests", [])
        blocks.append(Note(f"The overall index here covers {len(tests)} of {len(TESTS)} tests "
                           f"({', '.join(tests)}): it is not comparable with a full UnixBench index."))
    return blocks


def _index_table(title: str, groups: list[str], envs: list[str], by: dict) -> Table:
    cells, keys = [], []
    for g in groups:
        for e in envs:
            r = by.get((g, e))
            if r is None or not r["n"]:
                continue
            if r["metric"] == "index":
                vals = (r["median"], r["ci_low"], r["ci_high"])
                base, unit = "-", "geometric mean"
            else:
                m = r["metadata"]
                vals = (m.get("index"), m.get("index_ci_low"), m.get("index_ci_high"))
                base, unit = fmt.value(m.get("index_baseline")), r["unit"]
            cells.append([g, e, *(fmt.value(v) for v in vals), base, unit])
            keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": e})
    return Table(f"System suite, {title}: index", ["test", "environment", "index", "CI low", "CI high",
                                                    "UnixBench baseline", "unit"], cells, keys, numeric={2, 3, 4, 5})


def _published(data: RunData, index_rows: list[dict]) -> list:
    blocks: list = []
    for pub in published.for_workload("system"):
        if not pub.rows:
            blocks.append(Note(f"Published ({pub.cite()}): {pub.notes}"))
            continue
        ref_row = list(pub.rows)[-1]  # published ratios are stated against the table's last row
        cells = []
        for row, kind in pub.kinds.items():
            pub_value = pub.value(row, pub.columns[0])
            pub_ratio = pub_value / pub.value(ref_row, pub.columns[0])
            ours = [r for r in index_rows if data.env(r["environment"])["driver"] == kind and r["n"]]
            if not ours:
                cells.append([pub.cite(), row, f"{pub_value:g}", fmt.ratio(pub_ratio),
                              f"no {kind} environment in this run", "-", "-", "-", "-"])
            for r in ours:
                full = r["metadata"].get("index_of", 0) == len(TESTS)
                s = published.scale_factor(r["median"], pub_value) if full else None
                cells.append([pub.cite(), row, f"{pub_value:g}", fmt.ratio(pub_ratio),
                              f"{r['environment']} ({_panel_title(r['params'], r['condition'])})",
                              fmt.value(r["median"]), fmt.ratio(r["ratio"]) + f" to {data.baseline}",
                              fmt.ratio(s) if s is not None else "-",
                              "" if full else f"our index covers {r['metadata'].get('index_of')} of {len(TESTS)} "
                                              "tests: no scale factor"])
        blocks.append(Table(
            f"Published beside ours: {pub.cite()}",
            ["source", "published row", "published index", f"published ratio to {ref_row}", "our environment",
             "our index", "our ratio", "scale factor s", "why no s"], cells, numeric={2, 3, 5, 7},
            note=f"{pub.notes} Scale factor s = our index / published index for the same kind of environment; "
                 "published x s places a published figure on our scale. Ratios are compared unscaled."))
    return blocks
