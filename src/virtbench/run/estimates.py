"""How long one repetition of a cell takes, for the plan a run prints before it starts.

First from history: the wall times of this machine's earlier attempts of the same workload,
parameters and condition on the same kind of environment (driver), as the store holds them; their
median. Where there is none, the workload's model (`Workload.expected_seconds`: its duration, or its
problem size times a rate measured on a small machine). Every estimate says which it is, and the
plan prints it, because a model can be far off where history is not.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from .. import workloads
from ..store import Store, attempts, canonical, environments

KEEP = 30  # the latest attempts per (workload, parameters, condition, driver): the machine changes


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # one repetition's wall time; None: unknown
    source: str  # "history", "model" or "none"
    samples: int = 0  # the earlier attempts it comes from (history)


def _key(workload: str, params: dict, condition: dict, driver: str) -> tuple[str, str, str, str]:
    return workload, canonical(params), canonical(condition or {}), driver


@lru_cache(maxsize=1)
def this_machine() -> tuple[str, int]:
    """(CPU model, cores) as sysinfo records them for the local machine."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return model, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def ran_here(facts_json: str | None) -> bool:
    """Whether an environment's local machine was this one (same CPU model and cores). Remote machines
    (ssh, cloud, pods) are not checked: the plan cannot know them before the run."""
    try:
        facts = json.loads(facts_json or "{}")
    except ValueError:
        return False
    model, cores = this_machine()
    local = [m for m in (facts.get("machine_facts") or {}).values() if m.get("kind") == "local"]
    return all(m.get("cpu_model") == model and m.get("cores") == cores for m in local)


class History:
    """Earlier measured attempts' wall times, read once for a plan."""

    def __init__(self, store: Store | None, workload_names: Iterable[str] = ()):
        self.times: dict[tuple[str, str, str, str], list[float]] = {}
        names = sorted(set(workload_names))
        if store is None or not names:
            return
        a, e = attempts, environments
        query = (sa.select(a.c.workload, a.c.params_json, a.c.condition_json, e.c.driver, e.c.facts_json,
                           a.c.started_at, a.c.ended_at)
                 .join(e, (e.c.run_id == a.c.run_id) & (e.c.name == a.c.environment))
                 .where(a.c.status == "ok", a.c.warmup.is_(False), a.c.workload.in_(names),
                        a.c.started_at.is_not(None), a.c.ended_at.is_not(None))
                 .order_by(a.c.ended_at))
        here: dict[str | None, bool] = {}
        with store.engine.connect() as conn:
            for r in conn.execute(query):
                if r.facts_json not in here:
                    here[r.facts_json] = ran_here(r.facts_json)
                if not here[r.facts_json] or r.ended_at <= r.started_at:
                    continue
                key = (r.workload, canonical(json.loads(r.params_json)), canonical(json.loads(r.condition_json)),
                       r.driver)
                self.times.setdefault(key, []).append(r.ended_at - r.started_at)
        for k, v in self.times.items():
            self.times[k] = v[-KEEP:]

    def get(self, workload: str, params: dict, condition: dict, driver: str) -> list[float]:
        return self.times.get(_key(workload, params, condition, driver), [])


def per_repetition(cell: dict[str, Any], driver: str, history: History | None = None) -> Estimate:
    """One repetition of `cell` on an environment of `driver`: history, else the model, else unknown."""
    earlier = history.get(cell["workload"], cell["params"], cell.get("condition") or {}, driver) if history else []
    if earlier:
        return Estimate(statistics.median(earlier), "history", len(earlier))
    model = workloads.get(cell["workload"]).expected_seconds(cell["params"])
    return Estimate(model, "model") if model is not None else Estimate(None, "none")
