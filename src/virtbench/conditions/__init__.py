"""Condition registry: one line per condition key, imported lazily."""

from __future__ import annotations

import importlib
from typing import Any

from . import hostres  # registers the finder of what conditions leave (machines/ledger.py)
from ..errors import ConditionUnavailable
from .base import Applied, Condition, Instance

REGISTRY: dict[str, str] = {
    "storage": "virtbench.conditions.storage:Storage",
    "delay_ms": "virtbench.conditions.network:Delay",
    "rate_mbit": "virtbench.conditions.network:Rate",
}


def names() -> list[str]:
    return sorted(REGISTRY)


def get(key: str) -> Condition:
    if key not in REGISTRY:
        raise KeyError(key)
    module, _, attr = REGISTRY[key].partition(":")
    return getattr(importlib.import_module(module), attr)()


def apply_all(condition: dict[str, Any], instances: dict[str, list[Instance]]) -> Applied:
    """Apply every condition of a cell in order; on failure undo what was done and re-raise."""
    applied = Applied()
    try:
        for key in sorted(condition, key=lambda k: (get(k).order, k)):
            get(key).apply(condition[key], instances, applied, condition)
    except BaseException:
        applied.close()
        raise
    return applied


__all__ = ["Applied", "Condition", "ConditionUnavailable", "REGISTRY", "names", "get", "apply_all"]
