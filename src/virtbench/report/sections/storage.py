"""Disk workloads (bonnie, iozone-like, dd, fio; studies 000-004): each metric of interest against the
file size and, where the run has a delay condition, against the delay actually measured, one line per
environment and storage target with CI error bars (95 %, or the level its table gives); throughput per storage target where nothing
was swept; ratio bars for the other metrics; the studies' findings beside ours."""

from __future__ import annotations

import json
import math
from collections import defaultdict

from ...studies import published
from .. import fmt, svg
from ..data import RunData
from ..model import Chart, Note, Section, Table
from .common import describe
from .ratios import monitor_table, ratio_charts, requested, split_monitor
from .study import CURVE_COLUMNS, curve_cells, all_results, nan_if_none, number, published_table, sid, wants_log

# workload -> (metrics drawn, file size parameter, its unit in MiB)
FAMILIES: dict[str, tuple[tuple[str, ...], str, float]] = {
    "bonnie": (("write_block", "rewrite", "read_block"), "size_mb", 1.0),
    "iozone-like": (("write", "read"), "file_size_kb", 1 / 1024),
    "dd": (("write", "read"), "file_size_mb", 1.0),
    "fio": (("throughput", "iops", "lat_mean", "lat_p99", "lat_max"), "size_mb", 1.0),
}
DELAY_KEYS = ("delay_ms", "storage_delay_ms")
MEASURED = "delay_measured_ms"
DELAY_LOG_SPAN = 20
HIDE = ("dir", "scale")  # never a line or a title: scale is folded into the file size


def file_mib(workload: str, params: dict) -> float | None:
    """The file size actually written, in MiB (the size parameter times scale)."""
    size = number(params.get(FAMILIES[workload][1]))
    return None if size is None else size * FAMILIES[workload][2] * (number(params.get("scale")) or 1.0)


def _delay(cond: dict) -> tuple[str, float] | None:
    for k in DELAY_KEYS:
        if number(cond.get(k)) is not None:
            return k, number(cond[k])
    return None


def _mib(x: float) -> str:
    return f"{x:.4g}"


def build(data: RunData, rows: list[dict]) -> Section:
    workload = rows[0]["workload"]
    metrics, size_key, _ = FAMILIES[workload]
    results, summaries = split_monitor(rows)
    section = Section(sid(data, "storage", workload), f"Storage: {workload}", intro=(
        f"{workload}: the median of each throughput (or latency) metric with its CI (95 %, or the lower level a row's notes give), against the file "
        "size actually written (size parameter x scale) and, where the run sets a delay, against the one-way delay "
        "measured through the delay mechanism (condition.delay_measured_ms; the requested delay where none was "
        "measured). One line per environment and storage target, each with its own marker and dash pattern. "
        "Ratios to the baseline are in each figure's table."))
    cand = [r for r in results if r["metric"] in metrics and r["n"] and r["median"] is not None]
    varying = _varying(cand, size_key)
    drawn: set[tuple] = set()
    for chart in _size_curves(data, workload, cand, varying) + _delay_curves(data, workload, cand, varying):
        section.blocks.append(chart)
        drawn |= {(k["cell"], k["metric"], k["env"]) for k in chart.table.keys or []}
    rest = [r for r in cand if (r["cell_key"], r["metric"], r["environment"]) not in drawn]
    section.blocks += _per_target(data, workload, rest, varying)
    if not cand:
        section.blocks.append(Note(f"No {workload} throughput results with samples in this run: the tables below "
                                   "say why.", "warn"))
    others = [r for r in results if r["metric"] not in metrics and r["metric"] != "(none)"]
    label = lambda r: [r["metric"], _where(workload, r, varying, size=True)]  # noqa: E731
    section.blocks += ratio_charts(data, sid(data, "storage", workload, "other"), f"{workload}, other metrics",
                                   others, label, ["metric", "settings"])
    section.blocks += _beside_study(data, workload, cand)
    section.blocks += [published_table(pub) for pub in published.for_workload(workload)]
    mon = monitor_table(data, workload, summaries, label, ["metric", "settings"])
    if mon is not None:
        section.blocks.append(mon)
    section.blocks.append(all_results(data, workload, rows, lambda r: [
        r["metric"], _where(workload, r, varying, size=True), describe({}, r["condition"])],
        ["metric", "settings", "condition as applied"]))
    return section


def _varying(rows: list[dict], size_key: str) -> list[str]:
    """Parameters and requested conditions that differ between results (other than size, scale, delay)."""
    merged = [{**{k: v for k, v in r["params"].items() if k not in HIDE and k != size_key},
               **{k: v for k, v in requested(r["condition"]).items() if k not in DELAY_KEYS}} for r in rows]
    keys = list(dict.fromkeys(k for m in merged for k in m))
    return [k for k in keys if len({json.dumps(m.get(k)) for m in merged}) > 1]


def _where(workload: str, r: dict, varying: list[str], *, size: bool = False, delay: bool = True) -> str:
    both = {**r["params"], **requested(r["condition"])}
    bits = [f"{both[k]}" if k == "storage" else f"{k}={both[k]}" for k in varying if k in both]
    d = _delay(r["condition"])
    if delay and d:
        bits.append(f"{d[0]}={d[1]:g}")
    mib = file_mib(workload, r["params"])
    if size and mib is not None:
        bits.append(f"{_mib(mib)} MiB")
    return " · ".join(bits)


def _line(r: dict, line_keys: list[str]) -> str:
    both = {**r["params"], **requested(r["condition"])}
    bits = [f"{both[k]}" if k == "storage" else f"{k}={both[k]}" for k in line_keys if k in both]
    return " · ".join([r["environment"], *bits])


def _split(varying: list[str]) -> tuple[list[str], list[str]]:
    """(keys that make lines: the storage target and other conditions, keys that make charts: parameters)."""
    cond = [k for k in varying if k == "storage" or not k.startswith(("rw", "bs", "record", "block", "chunk"))]
    return [k for k in cond if k == "storage"], [k for k in varying if k != "storage"]


def _size_curves(data: RunData, workload: str, rows: list[dict], varying: list[str]) -> list[Chart]:
    line_keys, chart_keys = _split(varying)
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        both = {**r["params"], **requested(r["condition"])}
        d = _delay(r["condition"])
        groups[json.dumps([r["metric"], {k: both.get(k) for k in chart_keys}, d and d[1]])].append(r)
    out = []
    for key, grp in groups.items():
        metric, rest, delay = json.loads(key)
        if len({file_mib(workload, r["params"]) for r in grp}) < 2:
            continue
        where = " · ".join([*(f"{k}={v}" for k, v in rest.items()), *([f"delay {delay:g} ms"] if delay else [])])
        title = f"{workload}: {metric} against file size" + (f" ({where})" if where else "")
        pts = [(file_mib(workload, r["params"]), _line(r, line_keys), r) for r in grp]
        out.append(_chart(data, sid(data, "storage", workload, metric, "size", where), title, pts,
                          "file size [MiB]", x_text=_mib))
    return out


def _delay_curves(data: RunData, workload: str, rows: list[dict], varying: list[str]) -> list[Chart]:
    line_keys, chart_keys = _split(varying)
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if _delay(r["condition"]):
            both = {**r["params"], **requested(r["condition"])}
            groups[json.dumps([r["metric"], {k: both.get(k) for k in chart_keys}])].append(r)
    out = []
    for key, grp in groups.items():
        metric, rest = json.loads(key)
        if len({_delay(r["condition"])[1] for r in grp}) < 2:
            continue
        where = " · ".join(f"{k}={v}" for k, v in rest.items())
        title = f"{workload}: {metric} against one-way delay" + (f" ({where})" if where else "")
        pts = []
        for r in grp:
            x = number(r["condition"].get(MEASURED))
            pts.append((_delay(r["condition"])[1] if x is None else x, _line(r, line_keys), r))
        sizes = {file_mib(workload, r["params"]) for r in grp}
        note = ("" if len(sizes) < 2 else " The file size differs between delays (see the table): a suite may "
                "write less behind a long delay to keep the run short.")
        out.append(_chart(data, sid(data, "storage", workload, metric, "delay", where), title, pts,
                          "one-way delay, measured [ms]", delay_columns=True, extra_note=note))
    return out


def _chart(data: RunData, cid: str, title: str, points: list[tuple[float, str, dict]], xlabel: str, *,
           x_text=fmt.value, delay_columns: bool = False, extra_note: str = "") -> Chart:
    """Median against x, one line per label, CI error bars, with the data table (requested delay and file
    size beside the measured delay on a delay axis)."""
    order = {e: i for i, e in enumerate(data.env_order)}
    points = sorted(points, key=lambda p: (order.get(p[2]["environment"], 99), p[1], p[0]))
    labels = list(dict.fromkeys(lbl for _, lbl, _ in points))
    unit, metric = points[0][2]["unit"], points[0][2]["metric"]
    xs = [x for x, _, _ in points]
    ys = [r["median"] for _, _, r in points]
    log_x, log_y = wants_log(xs), wants_log(ys)
    if delay_columns:  # throughput falls by orders of magnitude behind a delay: keep the delayed points readable
        log_y = bool(ys) and min(ys) > 0 and max(ys) / min(ys) >= DELAY_LOG_SPAN
    lines = []
    for k, label in enumerate(labels):
        mine = [(x, r) for x, lbl, r in points if lbl == label]
        lines.append(svg.Line(label, [x for x, _ in mine], [r["median"] for _, r in mine],
                              [nan_if_none(r["ci_low"]) for _, r in mine], [nan_if_none(r["ci_high"]) for _, r in mine], style=k))
    named = any(lbl != r["environment"] for _, lbl, r in points)
    cells, keys = [], []
    for x, label, r in points:
        extra = []
        if delay_columns:
            d = _delay(r["condition"])
            extra = [fmt.value(d[1]) if d else "-", _mib(file_mib(r["workload"], r["params"]) or math.nan)]
        cells.append([x_text(x), *extra, *([label] if named else []), *curve_cells(r, data.baseline)])
        keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
    head = [xlabel, *(["requested delay [ms]", "file size [MiB]"] if delay_columns else []),
            *(["line"] if named else [])]
    k = len(head)
    table = Table(title, [*head, *CURVE_COLUMNS], cells, keys,
                  numeric={0, *(range(1, 3) if delay_columns else ()), *(k + i for i in (1, 2, 3, 4, 6, 7, 8))},
                  note=fmt.ratio_note([r for _, _, r in points], data.baseline, " at the same point")
                  + extra_note)
    ylabel = f"{metric} [{unit}]" + (" (log scale)" if log_y else "")
    xl = xlabel + (" (log scale)" if log_x else "")
    return Chart(cid, title, (
        f"Lines: median {metric} against {xlabel}, one line per {'environment and storage target' if named else 'environment'}"
        " (each with its own marker and dash pattern, named at its end and in the legend), with CI error bars (95 %, or the level its table gives)"
        + ("; logarithmic axes where marked." if log_x or log_y else ".")),
        lambda uid: svg.lines(uid, title, lines, xl, ylabel, log_x=log_x, log_y=log_y), table)


def _per_target(data: RunData, workload: str, rows: list[dict], varying: list[str]) -> list[Chart]:
    """Results on no curve (one file size, no delay sweep): each metric's median per storage target and
    setting, bars per environment, with CI whiskers."""
    _, chart_keys = _split(varying)
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        both = {**r["params"], **requested(r["condition"])}
        groups[json.dumps([r["metric"], {k: both.get(k) for k in chart_keys if k != "storage"}])].append(r)
    out = []
    for key, grp in groups.items():
        metric, rest = json.loads(key)
        where = " · ".join(f"{k}={v}" for k, v in rest.items())
        title = f"{workload}: {metric} per storage target" + (f" ({where})" if where else "")
        label = {id(r): _where(workload, r, [k for k in varying if k == "storage"], size=True) or "as run"
                 for r in grp}
        bars = list(dict.fromkeys(label[id(r)] for r in grp))
        envs = [e for e in data.env_order if any(r["environment"] == e for r in grp)]
        by = {(label[id(r)], r["environment"]): r for r in grp}
        unit = grp[0]["unit"]

        def get(g, e, by=by):
            r = by.get((g, e))
            return None if r is None else (r["median"], r["ci_low"], r["ci_high"], fmt.mark(r, data.baseline))
        cells = [[label[id(r)], *curve_cells(r, data.baseline)] for r in grp]
        keys = [{"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]} for r in grp]
        table = Table(title, ["storage target · file size", *CURVE_COLUMNS], cells, keys,
                      numeric={2, 3, 4, 5, 7, 8, 9},
                      note=fmt.ratio_note(grp, data.baseline))
        out.append(Chart(sid(data, "storage", workload, metric, "targets", where), title,
                         f"Horizontal bars: median {metric} per storage target and file size, one bar per environment "
                         "(value written beside each bar), with CI whiskers (95 %, or the level its table gives).",
                         lambda uid, t=title, b=bars, e=envs, g=get, u=unit, m=metric: svg.bars(
                             uid, t, b, e, g, f"{m} [{u}]", style_of=data.env_order.index, digits=fmt.value),
                         table))
    return out


# Study findings our results can be set beside: workload -> (published table, metric, {kind: the study's figure}).
FINDINGS: dict[str, list[tuple[tuple[str, str], str, dict[str, str]]]] = {
    "dd": [(("004", "dd to NFS, sequential, bs 64 MB, 64 MB - 8 GB files"), "write",
            {"container": "about 0.9 (pod)", "vm": "about 0.9 (NFS mounted by the VM); about 0.7 (by the hypervisor)"}),
           (("004", "dd to NFS, sequential, bs 64 MB, 64 MB - 8 GB files"), "read",
            {"container": "about 1 (alike)", "vm": "about 1 (alike)"})],
    "iozone-like": [(("001", "iozone write/read throughput against file size (64 kB records)"), "write",
                     {"vm": "close to 1 (PVM); about 0.5 (HVM)"})],
    "bonnie": [(("003", "bonnie++ write: local, iSCSI, iSCSI + 10 ms one-way delay"), "write_block",
                {"host": "dom0: local > iSCSI > iSCSI + 10 ms", "container": "domU: iSCSI > local; delay costs most",
                 "vm": "domU: iSCSI > local; delay costs most"})],
}
FIO = ("004", "fio sequential read max latency, mean of 5")


def _beside_study(data: RunData, workload: str, rows: list[dict]) -> list:
    if workload == "fio":
        return _beside_fio(data, rows)
    out = []
    for ref, metric, figure in FINDINGS.get(workload, []):
        try:
            pub = published.table(*ref)
        except KeyError:
            continue
        mine = [r for r in rows if r["metric"] == metric and data.env(r["environment"])["driver"] in figure]
        if not mine:
            continue
        # Per environment and storage target: the largest file (the studies' conclusions are about large files).
        best: dict[tuple, dict] = {}
        for r in mine:
            k = (r["environment"], _where(workload, r, ["storage"]))
            if k not in best or (file_mib(workload, r["params"]) or 0) > (file_mib(workload, best[k]["params"]) or 0):
                best[k] = r
        cells, keys = [], []
        for (env, where), r in best.items():
            kind = data.env(env)["driver"]
            cells.append([pub.cite(), figure[kind], env, where or "-", _mib(file_mib(workload, r["params"]) or math.nan),
                          fmt.value(r["median"]), fmt.value(r["ci_low"]), fmt.value(r["ci_high"]), r["unit"],
                          fmt.ratio(r["ratio"]), fmt.ratio(r["ratio_ci_low"]), fmt.ratio(r["ratio_ci_high"])])
            keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
        out.append(Table(f"Ours beside the published finding: {pub.cite()} ({metric})",
                         ["source", "published (ratio to bare metal, or order)", "our environment", "storage · delay",
                          "file size [MiB]", "our median", "CI low", "CI high", "unit", f"our ratio to {data.baseline}",
                          "ratio CI low", "ratio CI high"], cells, keys, numeric={4, 5, 6, 7, 9, 10, 11},
                         note=f"{pub.notes} The study printed no numbers here, so no scale factor s = ours / "
                              "published can be given: compare our ratios (and the order of the storage targets) "
                              "with the study's finding. Our largest file per environment and storage target."))
    return out


def _beside_fio(data: RunData, rows: list[dict]) -> list:
    pub = published.table(*FIO)
    by_kind = {kind: row for row, kind in pub.kinds.items()}
    mine = [r for r in rows if r["metric"] == "lat_max" and r["params"].get("rw") == "read"]
    if not mine:
        return [Note("No fio sequential-read max latency in this run to put beside study 004's.")]
    ref_pub = pub.value("bare", "max latency")
    cells, keys = [], []
    for r in mine:
        kind = data.env(r["environment"])["driver"]
        prow = by_kind.get(kind)
        pv = pub.value(prow, "max latency") if prow else None
        ours_ns = r["median"] * 1000 if r["unit"] == "us" else None
        s = published.scale_factor(ours_ns, pv) if ours_ns is not None else None
        cells.append([r["environment"], _where("fio", r, ["storage"], size=True) or "-", fmt.value(ours_ns),
                      fmt.value(r["median"]), fmt.value(r["ci_low"]), fmt.value(r["ci_high"]), fmt.ratio(r["ratio"]),
                      prow or f"none: the study had no {kind} environment", "-" if pv is None else f"{pv:g}",
                      fmt.ratio(pv / ref_pub if pv else None), fmt.value(s)])
        keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
    return [Table(f"fio max latency beside {pub.cite()} [ns]",
                  ["our environment", "storage · file size", "our max latency [ns]", "median [us]", "CI low", "CI high",
                   f"our ratio to {data.baseline}", "published row", "published [ns]", "published ratio to bare",
                   "scale factor s"], cells, keys, numeric={2, 3, 4, 5, 6, 8, 9, 10},
                  note=f"{pub.notes} Rows matched by kind: host = bare, container = container, vm = VM. Scale factor "
                       "s = our max latency / published, same kind; published x s places the study's figure on our "
                       "scale. The study's value is a mean of 5 maxima, ours a median; ratios are compared unscaled.")]
