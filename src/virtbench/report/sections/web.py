"""Web serving (study 004 item 4): requests/s against replicas (scale-out behind the balancer) and
against workers (scale-up, one server), the peak of each curve with the CPU use there, and the
study's best configurations (32 pods 19,864.9 req/s; 1 VM x 8 workers 20,512.2 req/s; both at 94 % CPU)
beside ours."""

from __future__ import annotations

import json
from collections import defaultdict

from ...studies import published
from .. import fmt
from ..data import RunData
from ..model import Note, Section, Table
from .common import describe
from .study import all_results, curve, sid

METRIC = "requests_per_second"
SWEEPS = (("replicas", "replicas (servers behind the balancer)"), ("workers", "nginx workers in one server"))
CPU_METRICS = ("server_cpu_util", "host.cpu_util_mean", "server.cpu_util_mean")
STUDY = ("004", "nginx static file, best configuration")
HIDE = ("duration", "replica_memory_mb", "lb_workers", "threads")


def build(data: RunData, rows: list[dict]) -> Section:
    section = Section(sid(data, "web"), "Web serving (study 004)", intro=(
        "Requests per second served by nginx (wrk on the host, closed loop) against the number of replicas "
        "behind the balancer (nginx, or a Kubernetes Service) and against the worker processes of one server, "
        "per environment, with "
        "CIs (95 %, or the lower level a row's notes give); then the peak of each curve with the CPU use measured there, beside the study's."))
    peaks = []
    for by, label in SWEEPS:
        groups: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            if r["metric"] == METRIC and r["n"] and by in r["params"]:
                rest = {k: v for k, v in r["params"].items() if k != by and k not in HIDE}
                groups[json.dumps([rest, r["condition"]], sort_keys=True)].append(r)
        for key, grp in groups.items():
            if len({r["params"][by] for r in grp}) < 2:
                continue  # one point: not a curve (the table below has it)
            rest, condition = json.loads(key)
            where = describe(rest, condition, hide=("replicas", "workers", "file_size", "connections"))
            title = f"Web: requests/s against {by}" + (f" ({where})" if where else "")
            pts = [(float(r["params"][by]), r["environment"], r) for r in grp]
            section.blocks.append(curve(data, sid(data, "web", by, where), title, pts, label,
                                        log_x=max(p[0] for p in pts) / min(p[0] for p in pts) >= 16, log_y=False,
                                        x_text=lambda x: str(int(x))))
            for env in dict.fromkeys(r["environment"] for r in grp):
                mine = [r for r in grp if r["environment"] == env]
                best = max(mine, key=lambda r: (r["median"], -r["params"][by]))
                peaks.append((by, where, best, _cpu(rows, best)))
    if peaks:
        section.blocks.append(_peak_table(data, peaks))
    else:
        section.blocks.append(Note("No sweep of replicas or workers with two or more points: no curve or peak to "
                                   "show (every result is in the table below)."))
    section.blocks += beside_study(data, peaks)
    hide = ("balancer", "file_size", "connections", *HIDE)
    section.blocks.append(all_results(data, "web", rows, lambda r: [r["metric"], describe(r["params"], r["condition"],
                                                                                           hide=hide)],
                                      ["metric", "settings"]))
    return section


def _cpu(rows: list[dict], best: dict) -> dict[str, dict]:
    """The CPU figures measured in the same cell and environment as the peak."""
    return {r["metric"]: r for r in rows if r["cell_key"] == best["cell_key"] and r["environment"] ==
            best["environment"] and r["metric"] in CPU_METRICS and r["n"]}


def _pct(r: dict | None) -> str:
    if r is None or r["median"] is None:
        return "-"
    v = r["median"] * 100 if r["unit"] in ("fraction", "") or r["median"] <= 1.0 else r["median"]
    return f"{v:.0f} %"


def _peak_table(data: RunData, peaks: list) -> Table:
    cells, keys = [], []
    for by, where, r, cpu in peaks:
        cells.append([by + (f" ({where})" if where else ""), r["environment"], str(r["params"][by]),
                      fmt.value(r["median"]), fmt.value(r["ci_low"]), fmt.value(r["ci_high"]), fmt.ratio(r["ratio"]),
                      _pct(cpu.get("server_cpu_util")), _pct(cpu.get("host.cpu_util_mean"))])
        keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
    return Table("Web: peak of each curve", ["sweep", "environment", "count at the peak", "req/s", "CI low",
                                             "CI high", f"ratio to {data.baseline}", "server CPU", "host CPU"],
                 cells, keys, numeric={2, 3, 4, 5, 6, 7, 8},
                 note="Peak = the count with the highest median requests/s (a tie goes to the smaller count). "
                      "Server CPU = CPU seconds per second of every server's nginx over the CPUs the servers may "
                      "use; host CPU = the monitor's mean host CPU use over the repetition.")


def _what_ran(data: RunData, env: str) -> str:
    """What a pods environment ran on: a Kubernetes cluster (the testbed: one machine) or podman; a VM
    without KVM is said to be emulated, beside the study's hardware-virtualized one."""
    facts = data.env(env).get("facts") or {}
    if str(facts.get("accelerator", "")).lower() == "tcg":
        return "emulated: TCG, not virtualization overhead"
    if facts.get("backend") == "kubernetes":
        return "Kubernetes testbed on one machine" if facts.get("cluster_testbed") else "Kubernetes cluster"
    return "podman pods" if facts.get("backend") == "kube-play" else ""


def _env_label(data: RunData, env: str, where: str) -> str:
    """'pods (Kubernetes testbed on one machine; balancer=service)': one bracket, not two in a row."""
    said = "; ".join(x for x in (_what_ran(data, env), where) if x)
    return f"{env} ({said})" if said else env


def beside_study(data: RunData, peaks: list) -> list:
    pub = published.table(*STUDY)
    cells = []
    for row, kind in pub.kinds.items():
        by = "replicas" if kind == "container" else "workers"
        pv, pcpu, pcount = (pub.value(row, c) for c in pub.columns)
        # the study's pods: our containers and our pods (of either backend), each labelled as what it was
        drivers = ("container", "pods") if kind == "container" else (kind,)
        ours = [(b, w, r, cpu) for b, w, r, cpu in peaks if b == by and data.env(r["environment"])["driver"] in drivers]
        if not ours:
            cells.append([pub.cite(), row, f"{pv:g}", f"{pcpu:g} %", f"{pcount:g}",
                          f"no {kind} environment with a {by} sweep in this run", "-", "-", "-", "-", "-"])
        for b, w, r, cpu in ours:
            s = published.scale_factor(r["median"], pv)
            cells.append([pub.cite(), row, f"{pv:g}", f"{pcpu:g} %", f"{pcount:g}",
                          _env_label(data, r["environment"], w),
                          str(r["params"][by]), fmt.value(r["median"]),
                          _pct(cpu.get("server_cpu_util")), _pct(cpu.get("host.cpu_util_mean")), fmt.value(s)])
    pub_ratio = pub.value("1 VM, 8 workers", "requests/s") / pub.value("32 pods", "requests/s")
    return [Table(f"Published beside ours: {pub.cite()}",
                  ["source", "published row", "published req/s", "published CPU", "pods or workers",
                   "our environment", "our count at the peak", "our req/s", "our server CPU", "our host CPU",
                   "scale factor s"], cells, numeric={2, 3, 4, 6, 7, 8, 9, 10},
                  note=f"{pub.notes} Scale factor s = our peak req/s / published req/s for the same kind of "
                       "environment (container = pods, vm = the VM); published x s places a published figure on our "
                       f"scale. The study's VM / pods ratio is {fmt.ratio(pub_ratio)}; the study ran pods on a "
                       "4-node Kubernetes cluster and the VM on another machine, ours share one machine with wrk "
                       "and the balancer, so compare curve shapes and ratios rather than absolute req/s.")]
