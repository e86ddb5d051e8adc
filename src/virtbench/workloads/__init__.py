"""Workload registry: one line per workload, imported lazily."""

from __future__ import annotations

import importlib

from .base import MetricSpec, Param, RunContext, Workload

REGISTRY: dict[str, str] = {
    "system": "virtbench.workloads.system:SystemSuite",
    "npb": "virtbench.workloads.npb:NPB",
    "mpi": "virtbench.workloads.mpi:MPIBench",
    "hpa": "virtbench.workloads.hpa:HPA",
    "eigen": "virtbench.workloads.eigen:Eigen",
    "web": "virtbench.workloads.web:Web",
    "fio": "virtbench.workloads.fio:Fio",
    "iozone-like": "virtbench.workloads.iozone:IozoneLike",
    "dd": "virtbench.workloads.ddsweep:DdSweep",
    "bonnie": "virtbench.workloads.bonnie:Bonnie",
    "iperf": "virtbench.workloads.iperf:Iperf",
    "netrr": "virtbench.workloads.netrr:NetRR",
    "boot": "virtbench.run.boot:BootWorkload",  # measured by `virtbench boot`, described here for analysis
}


def names() -> list[str]:
    return sorted(REGISTRY)


def get(name: str) -> Workload:
    if name not in REGISTRY:
        raise KeyError(name)
    module, _, attr = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), attr)()


__all__ = ["MetricSpec", "Param", "RunContext", "Workload", "REGISTRY", "names", "get"]
