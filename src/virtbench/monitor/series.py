"""Pure functions: vb-monitor output -> time-series rows, and rows -> per-repetition summary samples.

vb-monitor prints one JSON object per line: a "start" line naming the scope, the CPU capacity and
the source of every series, then one "tick" per interval (rates over that interval, stamped at its
end), and an "end" line. Nothing here touches a process or the store, so it is tested on captured
output.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..model import Sample

MIB = 1024 * 1024

# vb-monitor key -> (metric, unit, scale, source group). Memory is stored in MiB, rates as given.
SERIES: dict[str, tuple[str, str, float, str]] = {
    "cpu_util": ("cpu_util", "fraction", 1.0, "cpu"),
    "cpu_user": ("cpu_user", "fraction", 1.0, "cpu"),
    "cpu_system": ("cpu_system", "fraction", 1.0, "cpu"),
    "cpu_iowait": ("cpu_iowait", "fraction", 1.0, "cpu"),
    "cpu_steal": ("cpu_steal", "fraction", 1.0, "cpu"),
    "cpu_idle": ("cpu_idle", "fraction", 1.0, "cpu"),
    "cpu_cores": ("cpu_cores", "cores", 1.0, "cpu"),
    "cpu_throttled": ("cpu_throttled", "fraction", 1.0, "cpu"),
    "mem_used": ("mem_used", "MiB", 1.0 / MIB, "memory"),
    "mem_cache": ("mem_cache", "MiB", 1.0 / MIB, "memory"),
    "swap_used": ("swap_used", "MiB", 1.0 / MIB, "memory"),
    "net_rx_bytes": ("net_rx_bytes", "B/s", 1.0, "network"),
    "net_tx_bytes": ("net_tx_bytes", "B/s", 1.0, "network"),
    "net_rx_packets": ("net_rx_packets", "packets/s", 1.0, "network"),
    "net_tx_packets": ("net_tx_packets", "packets/s", 1.0, "network"),
    "disk_read_bytes": ("disk_read_bytes", "B/s", 1.0, "disk"),
    "disk_write_bytes": ("disk_write_bytes", "B/s", 1.0, "disk"),
    "disk_read_ops": ("disk_read_ops", "ops/s", 1.0, "disk"),
    "disk_write_ops": ("disk_write_ops", "ops/s", 1.0, "disk"),
}


@dataclass
class Trace:
    """What one sampler recorded: its start line and its ticks, for one instance (or the host)."""

    name: str
    role: str
    scope: str = ""
    capacity: float = math.nan
    interval: float = math.nan
    mem_limit: float = math.nan  # bytes the scope may use (MemTotal, or a cgroup's lower limit)
    sources: dict[str, str] = field(default_factory=dict)
    ticks: list[dict[str, Any]] = field(default_factory=list)
    end_reason: str | None = None


def parse(text: str, name: str, role: str) -> Trace:
    """vb-monitor's lines -> a Trace. Unreadable lines (a line cut by SIGKILL) are skipped; a run
    with neither a start line nor ticks raises ValueError."""
    trace = Trace(name, role)
    started = False
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = rec.get("type")
        if kind == "start":
            started = True
            trace.scope = rec.get("scope", "")
            trace.capacity = float(rec.get("cpu_capacity") or math.nan)
            trace.interval = float(rec.get("interval") or math.nan)
            trace.mem_limit = float(rec.get("mem_limit") or math.nan)
            trace.sources = dict(rec.get("sources") or {})
        elif kind == "tick" and "t" in rec:
            trace.ticks.append(rec)
        elif kind == "end":
            trace.end_reason = rec.get("reason")
    if not started and not trace.ticks:
        raise ValueError(f"no vb-monitor output for {name}")
    return trace


def rows(trace: Trace, environment: str) -> list[dict[str, Any]]:
    """One store row per (tick, metric): instance, role, environment, t, metric, value, unit, source."""
    out = []
    for tick in trace.ticks:
        t = float(tick["t"])
        for key, (metric, unit, scale, group) in SERIES.items():
            value = tick.get(key)
            if value is None:
                continue
            value = float(value) * scale
            if not math.isfinite(value):
                continue
            out.append({"instance": trace.name, "role": trace.role, "environment": environment, "t": t,
                        "metric": metric, "value": value, "unit": unit,
                        "source": f"{trace.scope}: {trace.sources.get(group, '?')}"})
    return out


def _window(ticks: list[dict], window: tuple[float, float] | None) -> list[dict]:
    """Ticks whose interval's midpoint lies in the window (all ticks without a window, or if none do)."""
    if not window:
        return ticks
    lo, hi = window
    inside = [k for k in ticks if lo <= float(k["t"]) - float(k.get("dt", 0)) / 2 <= hi]
    return inside or ticks


def summarize(traces: list[Trace], window: tuple[float, float] | None = None) -> list[Sample]:
    """Per role, over the repetition (or the workload's measured window): CPU utilization mean and
    peak (mean over the role's instances of each one's value; the peak is the highest instance's),
    and the role's summed peaks of memory used, network (rx + tx) and disk (read + write).

    Metric names carry the role ("host.cpu_util_mean", "server.cpu_util_peak"): analysis groups by
    metric, and the host, a server and a load balancer must never be pooled. Every sample has
    metadata monitor=true so the runner's stopping rule leaves them out."""
    by_role: dict[str, list[Trace]] = defaultdict(list)
    for tr in traces:
        if tr.ticks:
            by_role[tr.role].append(tr)
    out: list[Sample] = []
    for role, group in by_role.items():
        means, peaks, mem, net, disk = [], [], 0.0, 0.0, 0.0
        have_mem = have_net = have_disk = False
        for tr in group:
            ticks = _window(tr.ticks, window)
            util = [float(k["cpu_util"]) for k in ticks if "cpu_util" in k]
            if util:
                means.append(sum(util) / len(util))
                peaks.append(max(util))
            mems = [float(k["mem_used"]) for k in ticks if "mem_used" in k]
            if mems:
                mem += max(mems) / MIB
                have_mem = True
            nets = [float(k.get("net_rx_bytes", 0)) + float(k.get("net_tx_bytes", 0)) for k in ticks
                    if "net_rx_bytes" in k]
            if nets:
                net += max(nets) / 1e6
                have_net = True
            disks = [float(k.get("disk_read_bytes", 0)) + float(k.get("disk_write_bytes", 0)) for k in ticks
                     if "disk_read_bytes" in k]
            if disks:
                disk += max(disks) / 1e6
                have_disk = True
        meta = {"monitor": True, "role": role, "instance": ",".join(t.name for t in group),
                "instances": len(group), "scope": ",".join(sorted({t.scope for t in group})),
                "ticks": sum(len(_window(t.ticks, window)) for t in group), "window": "workload" if window else
                "repetition"}
        src = {g: "; ".join(sorted({t.sources.get(g, "?") for t in group})) for g in ("cpu", "memory", "network",
                                                                                   "disk")}
        if means:
            out.append(Sample(f"{role}.cpu_util_mean", sum(means) / len(means), "fraction", False,
                              {**meta, "source": src["cpu"]}))
            out.append(Sample(f"{role}.cpu_util_peak", max(peaks), "fraction", False, {**meta, "source": src["cpu"]}))
        if have_mem:
            limit = sum(t.mem_limit for t in group) / MIB
            out.append(Sample(f"{role}.mem_used_peak", mem, "MiB", False, {
                **meta, "source": src["memory"], **({"mem_limit_mib": limit} if math.isfinite(limit) else {})}))
        if have_net:
            out.append(Sample(f"{role}.net_peak", net, "MB/s", False, {**meta, "source": src["network"]}))
        if have_disk:
            out.append(Sample(f"{role}.disk_peak", disk, "MB/s", False, {**meta, "source": src["disk"]}))
    return out


SUMMARY_SUFFIXES = (".cpu_util_mean", ".cpu_util_peak", ".mem_used_peak", ".net_peak", ".disk_peak")


def is_monitor_metric(metric: str) -> bool:
    """True for the name of a summary made here ("host.cpu_util_mean", "server.net_peak", ...)."""
    return any(metric.endswith(suffix) and len(metric) > len(suffix) for suffix in SUMMARY_SUFFIXES)


def is_monitor_sample(metadata: dict[str, Any] | str) -> bool:
    """True for a summary sample made here (stored metadata, as a dict or its JSON text)."""
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            return False
    return bool(metadata.get("monitor"))
