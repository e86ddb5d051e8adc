"""OCI runtimes side by side: for a run whose container environments ran under different runtimes
(runc, crun, gVisor's runsc ...), what each runtime is (version, options, why an option's first
choice was not taken), what a container of it cost to start and to keep (start-up phases and memory
per container from the instances' own records), and every metric's ratio to the baseline per
runtime in one table, so the sandbox's cost reads across.
"""

from __future__ import annotations

import statistics

from .. import fmt
from ..data import RunData
from ..model import Note, Section, Table
from .common import describe, slug


def _runtime_envs(data: RunData) -> list[str]:
    return [n for n in data.env_order if (data.env(n).get("facts") or {}).get("runtime_label")]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _startup(data: RunData, env: str) -> tuple[float | None, float | None, int]:
    """Median seconds from requested to running and to ready over the environment's instances."""
    runs, readies = [], []
    for inst in data.instances:
        lc = inst["lifecycle"] if inst["environment"] == env else {}
        if lc.get("requested") and lc.get("ready"):
            readies.append(lc["ready"] - lc["requested"])
            if lc.get("running"):
                runs.append(lc["running"] - lc["requested"])
    return _median(runs), _median(readies), len(readies)


def _memory(data: RunData, env: str) -> tuple[dict[str, float], int]:
    """Median kB of PSS per holder over the environment's containers (ociruntime.footprint)."""
    got = [(i.get("metadata") or {}).get("host_pss_kb") for i in data.instances if i["environment"] == env]
    got = [g for g in got if g]
    keys = ("total", "runtime", "workload", "conmon")
    return {k: statistics.median(g.get(k, 0) for g in got) for k in keys} if got else {}, len(got)


def _mb(kb: float | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def build(data: RunData) -> Section | None:
    envs = _runtime_envs(data)
    labels = {n: data.env(n)["facts"]["runtime_label"] for n in envs}
    if not envs or (len(set(labels.values())) < 2 and len(data.env_order) < 2):
        return None
    section = Section(slug(data.id, "runtimes"), "OCI runtimes side by side")
    rows, notes = [], []
    for n in envs:
        facts = data.env(n)["facts"]
        run_s, ready_s, starts = _startup(data, n)
        mem, counted = _memory(data, n)
        rows.append([n, labels[n], str(facts.get("runtime_version") or "-"), str(starts),
                     f"{run_s:.2f} s" if run_s is not None else "-",
                     f"{ready_s:.2f} s" if ready_s is not None else "-",
                     _mb(mem.get("total")), _mb(mem.get("runtime")), _mb(mem.get("workload")), str(counted)])
        if facts.get("runtime_note"):
            notes.append(f"{n}: {facts['runtime_note']}")
    section.blocks.append(Table(
        "Runtimes: what each is, its start-up and its memory per container",
        ["environment", "runtime", "version", "starts", "requested to running", "requested to ready",
         "memory MB", "runtime's MB", "workload's MB", "measured"], rows, numeric={3, 4, 5, 6, 7, 8, 9},
        note="Start-up: medians over the environment's container starts in this run (the lifecycle phases; "
             "ready = the first command that ran inside). Memory: median PSS on the machine right after each "
             "start (idle), summed over the container's processes: the runtime's own that stay (gVisor: its "
             "sentry and gofer; runc and crun exit once the container runs), the workload's (under gVisor's "
             "ptrace platform the stub processes holding its address spaces) and conmon's (in the total)."))
    for text in notes:
        section.blocks.append(Note(f"Why not the runtime option's first choice, {text}"))
    ratio_table = _ratios(data, envs, labels)
    if ratio_table is not None:
        section.blocks.append(ratio_table)
    return section


def _ratios(data: RunData, envs: list[str], labels: dict[str, str]) -> Table | None:
    """Every workload metric's ratio to the baseline (with its CI and verdict), one column per runtime."""
    shown = [n for n in envs if n != data.baseline]
    if not data.baseline or not shown:
        return None
    by_key: dict[tuple, dict[str, dict]] = {}
    for r in data.results["results"]:
        if r["environment"] in shown and r.get("ratio") is not None and "." not in r["metric"]:
            key = (r["workload"], describe(r["params"], r["condition"], hide=("duration",)), r["metric"])
            by_key.setdefault(key, {})[r["environment"]] = r
    if not by_key:
        return None
    rows = []
    for (workload, where, metric), cells in sorted(by_key.items()):
        row = [f"{workload} {where}".strip(), metric]
        for n in shown:
            r = cells.get(n)
            row.append("-" if r is None else f"{fmt.ratio(r['ratio'])} [{fmt.ratio(r.get('ratio_ci_low'))}, "
                       f"{fmt.ratio(r.get('ratio_ci_high'))}] {fmt.mark(r)}".rstrip())
        rows.append(row)
    return Table(f"Each runtime against {data.baseline}: ratio [CI] and verdict",
                 ["cell", "metric", *(f"{n} ({labels[n]})" for n in shown)], rows,
                 note=fmt.ratio_note(data.results["results"], data.baseline)
                 + " The same figures as the workload tables, one column per runtime.")
