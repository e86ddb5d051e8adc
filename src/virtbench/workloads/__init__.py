"""Workload registry: one line per workload, imported lazily."""

from __future__ import annotations

import importlib

from .base import MetricSpec, Param, RunContext, Workload

REGISTRY: dict[str, str] = {
    "system": "virtbench.workloads.system:SystemSuite",
}


def names() -> list[str]:
    return sorted(REGISTRY)


def get(name: str) -> Workload:
    if name not in REGISTRY:
        raise KeyError(name)
    module, _, attr = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), attr)()


__all__ = ["MetricSpec", "Param", "RunContext", "Workload", "REGISTRY", "names", "get"]
