"""Monitoring time series (CPU, memory, network, disk at 1 Hz) per instance, as Ganglia showed them.

Drawn from bin means (at most MAX_POINTS per line) so an hour of 1 Hz data for many instances stays
small and quick; the tables give per-instance statistics and per-minute means.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .. import fmt
from ..data import RunData, Series
from .. import svg
from ..model import Chart, Section, Table
from ...monitor.hostside import SCOPE as HOST_SIDE
from .common import slug

MAX_POINTS = 600
# What Ganglia showed the studies: CPU, memory, network and disk. Charted; other metrics are tabled.
HEADLINE = ("cpu_util", "mem_used", "net_rx_bytes", "net_tx_bytes", "disk_read_bytes", "disk_write_bytes",
            "cpu", "memory used", "network", "disk")
SUMMARY_COLUMNS = ["instance", "environment", "samples", "min", "median", "mean", "p95", "max", "unit"]


def _bin_means(s: Series, width: float) -> tuple[np.ndarray, np.ndarray]:
    idx = np.floor(s.t / width).astype(int)
    idx -= idx.min()
    sums = np.bincount(idx, weights=s.value)
    counts = np.bincount(idx)
    keep = counts > 0
    return (np.nonzero(keep)[0] + 0.5) * width + math.floor(s.t.min() / width) * width, sums[keep] / counts[keep]


def build(data: RunData) -> Section | None:
    if not data.timeseries:
        return None
    by_metric: dict[str, list[Series]] = defaultdict(list)
    for s in data.timeseries:
        by_metric[s.metric].append(s)
    section = Section(slug(data.id, "timeseries"), "Monitoring time series", intro=(
        "What the monitor sampled on each instance while the workloads ran."))
    drawn = [m for m in by_metric if m in HEADLINE] or list(by_metric)
    for metric in drawn:
        series = sorted(by_metric[metric], key=lambda s: s.instance)
        section.blocks.append(_chart(data, metric, series))
        section.blocks.append(_per_minute(data, metric, series))
    section.blocks += _scopes(data.timeseries)
    rest = [s for m, ss in by_metric.items() if m not in drawn for s in ss]
    if rest:
        section.blocks.append(Table("Other monitored metrics", ["metric", *SUMMARY_COLUMNS],
                                    [[s.metric, *_summary(s)] for s in rest], numeric={3, 4, 5, 6, 7, 8},
                                    collapsed=True))
    return section


def _scopes(series: list[Series]) -> list:
    """Where each instance's series were read, when some were read outside it: a gVisor sandbox's CPU
    and memory come from its cgroup on the host (monitor/hostside.py), a runc container's from inside."""
    where: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for s in sorted(series, key=lambda s: (s.instance, s.metric)):
        if s.source.startswith(HOST_SIDE):
            where[(s.instance, s.environment, s.source[len(HOST_SIDE):].lstrip(": "))].append(s.metric)
    if not where:
        return []
    rows = [[inst, env, ", ".join(metrics), source] for (inst, env, source), metrics in where.items()]
    return [Table("Series read outside their instance", ["instance", "environment", "metrics", "where"], rows,
                  collapsed=len(rows) > 12,
                  note=f"Scope '{HOST_SIDE}': CPU and memory from the sandbox's cgroup on its machine (its "
                       "runtime's own processes included), network and disk from inside; every other instance's "
                       "series were read inside it (a container's cgroup, a VM's kernel) or on the host.")]


def _summary(s: Series) -> list[str]:
    v = s.value
    return [s.instance, s.environment, str(v.size), *(fmt.value(float(x)) for x in (
        v.min(), np.median(v), v.mean(), np.percentile(v, 95), v.max())), s.unit]


def _chart(data: RunData, metric: str, series: list[Series]) -> Chart:
    span = max(float(s.t.max() - s.t.min()) for s in series if s.t.size) or 1.0
    width = max(1.0, math.ceil(span / MAX_POINTS))
    unit = series[0].unit

    def draw(uid: str) -> str:
        lines = []
        for i, s in enumerate(series):
            x, y = _bin_means(s, width)
            lines.append(svg.Line(f"{s.instance} ({s.environment})", x / 60, y, style=i))
        return svg.lines(uid, f"{metric} over time", lines, "minutes since the run started",
                         f"{metric} [{unit}]", end_labels=False, markers=8)

    table = Table(f"{metric} per instance", SUMMARY_COLUMNS, [_summary(s) for s in series],
                  numeric={2, 3, 4, 5, 6, 7})
    return Chart(slug(data.id, "ts", metric), f"{metric} over time",
                 f"One line per instance (distinct marker and line style; legend below), {width:g}-second means.",
                 draw, table)


def _per_minute(data: RunData, metric: str, series: list[Series]) -> Table:
    minutes: dict[int, dict[str, float]] = defaultdict(dict)
    for s in series:
        idx = np.floor(s.t / 60).astype(int)
        sums, counts = np.bincount(idx - idx.min(), weights=s.value), np.bincount(idx - idx.min())
        for k in np.nonzero(counts)[0]:
            minutes[int(k + idx.min())][s.instance] = sums[k] / counts[k]
    names = [s.instance for s in series]
    cells = [[str(m), *(fmt.value(minutes[m].get(n)) for n in names)] for m in sorted(minutes)]
    return Table(f"{metric}: per-minute means [{series[0].unit}]", ["minute", *names], cells,
                 numeric=set(range(len(names) + 1)), collapsed=True)
