"""The runner's bookkeeping of lockstep rounds: what each (cell, environment) has given so far (Tally),
how those counts are rebuilt from the store on resume and started afresh for a retry, and the stop
rule over them (minimum repetitions, time budget, every ratio to the baseline within `ci_target`).

`Rounds` is a base of runner.Runner: its methods read the Runner's matrix, store, clock and events.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .. import monitor, stats, workloads
from ..stats.verdicts import FDR  # the tables' false discovery rate: the stopping rule aims at their level
from ..suite import cell_environments

GIVE_UP_AFTER = 3  # consecutive failures of one cell in one environment


@dataclass
class Tally:
    """What has happened so far for one (cell, environment)."""

    attempts: int = 0
    ok: int = 0
    consecutive_failures: int = 0
    warmed_up: bool = False
    warmups: int = 0  # warm-up runs taken (recorded in every sample's metadata)
    # metric (or (metric, series point)) -> round -> that round's values (usually one)
    values: dict[Any, dict[int, list[float]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    finished: bool = False
    stop_reason: str = ""


class Rounds:
    """Counting a run's rounds and deciding when a cell stops (mixed into runner.Runner)."""

    def _retry_tallies(self, failed: set[tuple[str, str]]) -> tuple[dict[tuple[str, str], Tally], dict[str, int]]:
        """Every other (cell, environment) is finished; a cell with a failed environment runs again
        with all its environments in fresh lockstep rounds (none runs rounds alone), counted from 0
        for its stop rule and stored after the rounds it already has (self._round_offset)."""
        tallies, stored_rounds = self._tallies_from_store()
        retry_cells = {key for key, _ in failed}
        self._fresh_rounds(tallies, stored_rounds, retry_cells)
        all_envs = [e.name for e in self.matrix.environments]
        for cell in self.matrix.cells:
            if cell["key"] not in retry_cells:
                for env in cell_environments(cell, all_envs):
                    tally = tallies.setdefault((cell["key"], env), Tally())
                    tally.warmed_up = tally.finished = True
                    tally.stop_reason = tally.stop_reason or "not retried"
        return tallies, {}

    def _fresh_rounds(self, tallies: dict[tuple[str, str], Tally], next_round: dict[str, int],
                      cell_keys: set[str]) -> None:
        """These cells start over with every environment: counts from 0 for the stop rule, rounds
        stored after the ones they have (self._round_offset), so new rounds never pair with old."""
        all_envs = [e.name for e in self.matrix.environments]
        for cell in self.matrix.cells:
            if cell["key"] in cell_keys:
                for env in cell_environments(cell, all_envs):
                    tallies[(cell["key"], env)] = Tally()
                self._round_offset[cell["key"]] = next_round.pop(cell["key"], 0)

    def _verdict_minimum(self, policy) -> None:
        """An adaptive run (min < max repetitions) takes at least what a verdict needs: below 6
        repetitions a median has no 95 % interval and the signed-rank test over the rounds cannot reach
        p <= 0.05 (stats.min_repetitions). A fixed count (--repeat N) is kept; its table says 'n too small'."""
        need = stats.min_repetitions()
        if policy.min_repetitions < min(need, policy.max_repetitions):
            raised = min(need, policy.max_repetitions)
            if raised == need:
                why = f"a 95 % interval of a median needs {need} repetitions (fewer give only min to max, at 75-94 %)"
            else:  # the suite's maximum is below what a verdict needs
                why = (f"as many as max_repetitions allows; a 95 % interval of a median needs {need}, so with {raised} "
                       f"it is [min, max] at {100 * (1 - 2 * 0.5 ** raised):.3g} % (raise max_repetitions to {need} "
                       "for 95 %)")
            self.events.note(f"min_repetitions raised from {policy.min_repetitions} to {raised}: {why}")
            policy.min_repetitions = raised

    def _cell_budget(self, started: float, index: int, total: int) -> bool:
        """True while this cell may still take extra (adaptive) repetitions."""
        budget = self.matrix.policy.time_budget
        if budget is None:
            return True
        used = self.clock() - started
        # Cells share what is left evenly; this one may use its share.
        return used < budget * (index + 1) / total

    def _cell_stop(self, cell: dict, active: list[str], tallies: dict[tuple[str, str], Tally], rounds: int,
                   within_budget: bool) -> str:
        """Why the cell stops before round `rounds` ("" to go on). Limits: `max_repetitions` rounds;
        at least `min_repetitions` ok values in every environment still running before anything else
        stops it. Then it stops when every ratio to the baseline is within `ci_target` (or, in a cell
        without a baseline beside other environments, every median), or when its time is spent."""
        policy = self.matrix.policy
        if rounds >= policy.max_repetitions:
            return "max_repetitions"
        tally = {env: tallies[(cell["key"], env)] for env in active}
        if any(t.ok < policy.min_repetitions for t in tally.values()):
            return ""
        if self._targets_met(cell, tally):
            return "ci_target reached"
        if rounds == policy.min_repetitions:  # once: what this cell's noise lets the target reach
            self._note_floor(cell, tally)
        return "" if within_budget else "time budget spent"

    def _targets_met(self, cell: dict, tally: dict[str, Tally]) -> bool:
        """Every non-baseline environment's ratio to the baseline, per metric, from the rounds both
        have (stats.paired_ratio), within ci_target at the level the cell's table will use when
        nothing in it is significant (Benjamini-Hochberg over its m comparisons: 1 - 0.05 / m; a
        table with discoveries reports narrower intervals). A cell whose baseline is not running
        (not in the cell, or gave up) stops on each environment's median CI at 95 % instead."""
        target = self.matrix.policy.ci_target
        base = tally.get(self.matrix.baseline)
        others = [env for env in tally if env != self.matrix.baseline]
        if base is None or not others:
            return all(stats.relative_ci_halfwidth([v for vs in by_round.values() for v in vs]) <= target
                       for t in tally.values() for by_round in t.values.values())
        # a series point (message size ...) is a table of its own in the analysis: count metrics only
        metrics = {k[0] if isinstance(k, tuple) else k for k in base.values}
        level = 1.0 - FDR / max(1, self._family_size(cell) * len(metrics))
        for env in others:
            for key, by_round in tally[env].values.items():
                base_rounds = base.values.get(key, {})
                rounds = sorted(set(by_round) & set(base_rounds))
                r = stats.paired_ratio([statistics.median(by_round[i]) for i in rounds],
                                       [statistics.median(base_rounds[i]) for i in rounds], confidence=level)
                if stats.ratio_halfwidth(r, level) > target:
                    return False
        return True

    def _note_floor(self, cell: dict, tally: dict[str, Tally]) -> None:
        """A cell that has its minimum rounds and not its target says what its rounds' spread needs
        (noise.from_rounds), when max_repetitions cannot bring it there: the plan's noise floor measured
        again on this run's own first rounds (the first word on it for a cell without history here)."""
        from . import noise
        from .plan import cell_label

        base = tally.get(self.matrix.baseline)
        others = [env for env in tally if env != self.matrix.baseline]
        if base is None or not others or self.matrix.policy.ci_target is None:
            return
        metrics = {k[0] if isinstance(k, tuple) else k for k in base.values}
        level = 1.0 - FDR / max(1, self._family_size(cell) * len(metrics))
        for env in others:
            worst = None
            for key, by_round in tally[env].values.items():
                base_rounds = base.values.get(key, {})
                pairs = [(statistics.median(by_round[i]), statistics.median(base_rounds[i]))
                         for i in sorted(set(by_round) & set(base_rounds))]
                f = noise.from_rounds(cell_label(self.matrix, cell) + (f" @{env}" if len(others) > 1 else ""), pairs,
                                      self.matrix.policy.ci_target, level, self.matrix.policy.max_repetitions)
                worst = f if f is not None and (worst is None or f.sd > worst.sd) else worst
            if worst is not None and worst.short:
                self.events.note(f"noise floor: {worst.text()}")

    def _family_size(self, cell: dict) -> int:
        """Comparisons per metric in the table this cell belongs to (plan.family_size: the plan's
        earliest stop counts the same)."""
        from .plan import family_size

        return family_size(self.matrix, cell)

    def _tallies_from_store(self) -> tuple[dict[tuple[str, str], Tally], dict[str, int]]:
        """Counts and values per (cell, environment), and the round each cell goes on with: one after
        the last it started, so a round cut short by the interruption keeps its holes (completing it
        now would pair values from different times)."""
        tallies: dict[tuple[str, str], Tally] = defaultdict(Tally)
        next_round: dict[str, int] = {}
        for a in self.store.attempts(self.run_id):
            tally = tallies[(a["cell_key"], a["environment"])]
            if a["status"] == "skipped":  # final, also when the warm-up found it
                tally.finished, tally.stop_reason = True, a["reason"] or "skipped"
                continue
            if a["warmup"]:
                continue  # fresh instances after a resume get a fresh warm-up
            next_round[a["cell_key"]] = max(next_round.get(a["cell_key"], 0), a["repetition"] + 1)
            tally.attempts += 1
            if a["status"] == "ok":
                tally.ok += 1
                tally.consecutive_failures = 0
            else:
                tally.consecutive_failures += 1
        series = {c["key"]: workloads.get(c["workload"]).series_key for c in self.matrix.cells}
        for s in self.store.samples(self.run_id):
            if monitor.is_monitor_sample(s["metadata_json"]):
                continue  # the monitor's summaries never decide when to stop
            key = series.get(s["cell_key"])
            metric = (s["metric"], json.loads(s["metadata_json"]).get(key)) if key else s["metric"]
            tallies[(s["cell_key"], s["environment"])].values[metric][s["repetition"]].append(s["value"])
        for tally in tallies.values():
            if tally.consecutive_failures >= GIVE_UP_AFTER:
                tally.finished, tally.stop_reason = True, f"gave up after {GIVE_UP_AFTER} failures in a row"
        return dict(tallies), next_round
