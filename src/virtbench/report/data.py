"""Everything a report needs about one run, read from the store once."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import sqlalchemy as sa

from .. import analysis
from .. import store as store_mod
from ..store import Store

_TS_FIELDS = itemgetter("instance", "environment", "metric", "unit", "t", "value")


@dataclass
class Series:
    """One monitored quantity of one instance over time (the monitor's 1 Hz samples)."""

    instance: str
    environment: str
    metric: str
    unit: str
    t: np.ndarray  # seconds since the run started
    value: np.ndarray
    source: str = ""  # where the monitor read it (scope: file), e.g. a gVisor sandbox's cgroup on the host


@dataclass
class RunData:
    run: dict[str, Any]
    results: dict[str, Any]  # analysis.results(): the stored statistics the report shows
    environments: list[dict[str, Any]]
    instances: list[dict[str, Any]]
    attempts: list[dict[str, Any]]  # attempt_summary(): one row per kind of outcome, with a count
    sample_count: int
    timeseries: list[Series] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # Store.events(): resumed, retry-failed

    @property
    def id(self) -> str:
        return self.run["id"]

    @property
    def baseline(self) -> str:
        return self.results["baseline"]

    @property
    def env_order(self) -> list[str]:
        return self.results["environments"]

    def env(self, name: str) -> dict[str, Any]:
        for e in self.environments:
            if e["name"] == name:
                return e
        return {"name": name, "driver": "?", "facts": {}, "problem": None, "spec": {}}

    def attempt_counts(self) -> Counter:
        counts: Counter = Counter()
        for a in self.attempts:
            if not a["warmup"]:
                counts[a["status"]] += a["count"]
        return counts


def load(store: Store, run_id: str, margin: float | None = None) -> RunData:
    """A run's data for the report; `margin`: the verdicts' equivalence margin (default: the suite's)."""
    run = store.run(run_id)  # raises UserError for an unknown or ambiguous id
    rid = run["id"]
    attempts = attempt_summary(store, rid)
    sample_count = count_samples(store, rid)
    return RunData(run=run, results=analysis.results(store, rid, margin=margin),
                   environments=store.environments(rid), instances=store.instances(rid), attempts=attempts,
                   sample_count=sample_count, timeseries=load_timeseries(store, rid, run["created_at"]),
                   events=store.events(rid))


def count_samples(store: Store, run_id: str) -> int:
    """Samples of this run (Store.runs() would count every run's)."""
    s = store_mod.samples
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(s).where(s.c.run_id == run_id)).scalar() or 0)


def attempt_summary(store: Store, run_id: str) -> list[dict[str, Any]]:
    """Attempts grouped by (cell, environment, warm-up, status, reason) with a count: what the header
    needs, without reading 10,000 rows and their raw output."""
    a = store_mod.attempts
    cols = [a.c.workload, a.c.params_json, a.c.condition_json, a.c.environment, a.c.warmup, a.c.status, a.c.reason]
    q = (sa.select(*cols, sa.func.count().label("count"), sa.func.min(a.c.id).label("first"))
         .where(a.c.run_id == run_id).group_by(*cols).order_by("first"))
    with store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def load_timeseries(store: Store, run_id: str, t0: float) -> list[Series]:
    """The monitor's series, once the store has them: Store.timeseries(run_id), proposed for the
    monitor issue, returning rows (dicts) with instance, environment, metric, unit, t (epoch s), value.
    """
    reader = getattr(store, "timeseries", None)
    if reader is None:
        return []
    points: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    sources: dict[tuple, dict[str, None]] = defaultdict(dict)
    rows = reader(run_id)
    for row, (inst, env, metric, unit, t, v) in zip(rows, map(_TS_FIELDS, rows)):
        points[(inst, env, metric, unit)].append((t, v))
        if row.get("source"):
            sources[(inst, env, metric, unit)][row["source"]] = None
    out = []
    for key, pts in points.items():
        arr = np.asarray(pts, dtype=float)
        arr = arr[np.argsort(arr[:, 0], kind="stable")]
        out.append(Series(*key, arr[:, 0] - t0, arr[:, 1], "; ".join(sources[key])))
    return out
