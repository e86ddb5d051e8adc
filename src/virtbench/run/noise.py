"""The machine's noise floor for the plan: how much a cell's round ratios vary here, from stored
history, and what that lets `ci_target` reach within `max_repetitions`.

A ratio's interval comes from the rounds' log ratios (environment / baseline, stats.paired_ratio), so
what limits it is their round-to-round spread. Earlier runs of the same workload, parameters and
condition on this machine (same CPU model and cores, estimates.this_machine) with the same pair of
drivers hold that spread: per earlier run, the standard deviation of its rounds' log ratios (not a
robust one: under load the rounds are heavy-tailed, and the tails set a high-level interval's width;
a median/MAD sd projected ±6 % where 8 busy rounds gave ±22 %); their median over the latest runs is
the estimate, projected by stats.exact.paired_halfwidth. One SQL query, no measuring: the plan costs
nothing on the machine (issue 32, item 3). Cells without such history say so; their table marks a
row that ended at max_repetitions without its target (analysis.TARGET_MISSED).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from .. import monitor
from ..stats import exact as stats_exact
from .estimates import ran_here  # the same machine test as the time estimates
from ..store import Store, canonical, environments, runs, samples

KEEP_RUNS = 10  # the latest earlier runs per cell and driver pair: the machine changes
READ_RUNS = 50  # the store's latest runs read at all: the plan's cost stays small in a large store
MIN_ROUNDS = 4  # an earlier run's spread from fewer rounds is not worth a plan line

Key = tuple[str, str, str, tuple[str, str]]  # workload, params, condition, (driver, baseline's driver)


def _key(workload: str, params: dict | str, condition: dict | str, drivers: tuple[str, str]) -> Key:
    p = params if isinstance(params, str) else canonical(params)
    c = condition if isinstance(condition, str) else canonical(condition or {})
    return workload, canonical(json.loads(p)), canonical(json.loads(c)), drivers


class NoiseHistory:
    """Earlier runs' round-to-round spread of each cell's ratios on this machine, read once."""

    def __init__(self, store: Store | None, workload_names: Iterable[str] = ()):
        self.sds: dict[Key, list[float]] = {}  # per key: one sd per earlier run, oldest first
        self.runs: dict[Key, int] = {}
        names = sorted(set(workload_names))
        if store is None or not names:
            return
        s, e = samples, environments
        query = (sa.select(s.c.run_id, s.c.workload, s.c.params_json, s.c.condition_json, s.c.metric,
                           s.c.environment, s.c.repetition, s.c.value, s.c.metadata_json, e.c.driver, e.c.facts_json)
                 .join(e, (e.c.run_id == s.c.run_id) & (e.c.name == s.c.environment))
                 .where(s.c.workload.in_(names), s.c.repetition >= 0, s.c.value > 0,
                        s.c.run_id.in_(sa.select(runs.c.id).order_by(runs.c.created_at.desc()).limit(READ_RUNS)))
                 .order_by(s.c.id))
        here: dict[str | None, bool] = {}
        # (run, workload, params, condition, metric) -> environment -> round -> value
        rounds: dict[tuple, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        driver: dict[tuple[str, str], str] = {}
        with store.engine.connect() as conn:
            for r in conn.execute(query):
                if r.facts_json not in here:
                    here[r.facts_json] = ran_here(r.facts_json)
                if not here[r.facts_json] or ('"monitor"' in (r.metadata_json or "")
                                               and monitor.is_monitor_sample(r.metadata_json)):
                    continue  # the monitor's series never decide when a cell stops
                rounds[(r.run_id, r.workload, r.params_json, r.condition_json, r.metric)][r.environment][
                    r.repetition] = r.value
                driver[(r.run_id, r.environment)] = r.driver
        per_run: dict[Key, dict[str, float]] = defaultdict(dict)  # the largest metric's sd per run
        for (run_id, workload, params, condition, _metric), by_env in rounds.items():
            envs = sorted(by_env)
            for i, a in enumerate(envs):
                for b in envs[i + 1:]:
                    common = sorted(set(by_env[a]) & set(by_env[b]))
                    if len(common) < MIN_ROUNDS:
                        continue
                    sd = statistics.stdev([math.log(by_env[a][k] / by_env[b][k]) for k in common])
                    pair = tuple(sorted((driver[(run_id, a)], driver[(run_id, b)])))
                    key = _key(workload, params, condition, pair)
                    per_run[key][run_id] = max(per_run[key].get(run_id, 0.0), sd)
        for key, by_run in per_run.items():
            self.sds[key] = list(by_run.values())[-KEEP_RUNS:]

    def sd(self, workload: str, params: dict, condition: dict, drivers: tuple[str, str]) -> tuple[float, int] | None:
        """(The estimated sd of the rounds' log ratios, the earlier runs it comes from), or None."""
        got = self.sds.get(_key(workload, params, condition, tuple(sorted(drivers))))
        return (statistics.median(got), len(got)) if got else None


@dataclass(frozen=True)
class Floor:
    """What one cell's noise lets its ratio interval reach: `sd` of its rounds' log ratios (from
    `runs` earlier runs), the `rounds` the target needs (None: more than stats.exact.rounds_for_halfwidth's limit) and
    the half-width `at_max` that max_repetitions gives, at the table's `level`."""
    label: str
    sd: float
    runs: int
    target: float
    level: float
    rounds: int | None
    maximum: int
    at_max: float
    first: int = 0  # runs == 0: measured on this run's first rounds, this many

    @property
    def short(self) -> bool:
        return self.rounds is None or self.rounds > self.maximum

    def text(self) -> str:
        need = f"~{self.rounds} rounds" if self.rounds is not None else "more than 2000 rounds"
        whence = (f"from {self.runs} earlier run{'s' if self.runs > 1 else ''}" if self.runs
                  else f"from this run's first {self.first} rounds")
        return (f"{self.label}: round-to-round sd {_pct(self.sd)} ({whence}): {need} for ±{self.target * 100:g} % "
                f"at {self.level * 100:.3g} %; max_repetitions {self.maximum} gives ±{_pct(self.at_max)}")


def _pct(x: float) -> str:
    """0.048 -> '4.8 %', 0.33 -> '33 %', 1.1 -> '110 %'."""
    return f"{x * 100:.0f} %" if x >= 0.1 else f"{x * 100:.2g} %"


def floor(label: str, sd: float, runs: int, target: float, level: float, maximum: int, first: int = 0) -> Floor:
    return Floor(label, sd, runs, target, level, stats_exact.rounds_for_halfwidth(sd, target, level), maximum,
                 stats_exact.paired_halfwidth(sd, maximum, level), first)


def from_rounds(label: str, pairs: list[tuple[float, float]], target: float, level: float, maximum: int) -> Floor | None:
    """The floor measured on a running cell's first rounds, (value, baseline value) per round: for a
    cell without history, said as soon as its minimum is in (the runner's note). None below 3 rounds
    or with values that have no log."""
    logs = [math.log(v / b) for v, b in pairs if v > 0 and b > 0]
    if len(logs) < 3:
        return None
    return floor(label, statistics.stdev(logs), 0, target, level, maximum, first=len(logs))
