"""The section registry: one module per workload family, plus sections about the run as a whole.

A new workload's figure is one module with `build(data, rows) -> Section` and one line below; any
workload without one gets the generic section.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..data import RunData
from ..model import Section

# workload name -> "module:function" building its section from analysis.results() rows.
WORKLOAD_SECTIONS: dict[str, str] = {
    "system": "virtbench.report.sections.system:build",
    "boot": "virtbench.report.sections.boot:build",
    "mpi": "virtbench.report.sections.mpi:build",
    "web": "virtbench.report.sections.web:build",
    "hpa": "virtbench.report.sections.hpa:build",
    "npb": "virtbench.report.sections.npb:build",
    "eigen": "virtbench.report.sections.eigen:build",
    "bonnie": "virtbench.report.sections.storage:build",
    "iozone-like": "virtbench.report.sections.storage:build",
    "dd": "virtbench.report.sections.storage:build",
    "fio": "virtbench.report.sections.storage:build",
}
GENERIC = "virtbench.report.sections.generic:build"

# Sections built from the run as a whole (analysis's derived results, instances, time series);
# each returns None when the run has nothing for it.
RUN_SECTIONS: list[str] = [
    "virtbench.report.sections.scaling:build",
    "virtbench.report.sections.lifecycle:build",
    "virtbench.report.sections.podphases:build",
    "virtbench.report.sections.runtimes:build",
    "virtbench.report.sections.timeseries:build",
]


def _load(ref: str) -> Callable:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def workload_sections(data: RunData) -> list[Section]:
    by_workload: dict[str, list[dict]] = {}
    for row in data.results["results"]:
        by_workload.setdefault(row["workload"], []).append(row)
    return [_load(WORKLOAD_SECTIONS.get(wl, GENERIC))(data, rows) for wl, rows in by_workload.items()]


def run_sections(data: RunData) -> list[Section]:
    return [s for s in (_load(ref)(data) for ref in RUN_SECTIONS) if s is not None]
