"""The plan a run prints before its first repetition: cells x environments x repetitions and an
estimate of the time, from the matrix (each cell's seconds per repetition from run/estimates.py: this
machine's earlier samples, else the workload's model; the warm-up and the adaptive minimum and
maximum), not from the runner's loop. Each workload's line says where its estimate comes from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .. import drivers, stats, workloads
from . import estimates, noise
from ..stats.verdicts import FDR
from ..suite import Matrix, cell_environments

# Per repetition on top of the workload's own seconds (starting its process, the monitor, storing),
# each driver declares `Traits.repetition_overhead_s`. Measured on the 2-core development machine under
# load 5-9 (system tests, duration 0.3): a host attempt took 0.04 s more than its duration, a container
# one 0.94 s more (podman exec). The rest are estimates of the same order (ssh, a pod exec via the API).
ASK_ABOVE_SECONDS = 3600.0  # a run estimated longer asks before it starts (on a terminal)
AUTO_WARMUP = (2, 5)  # warmup = "auto": two runs that agree at best, five at most (runner.WARMUP_MAX)


@dataclass
class Plan:
    cells: int
    environments: int
    runs: int  # (cell, environment) pairs
    min_repetitions: int
    max_repetitions: int
    warmup: tuple[int, int]
    repetitions: tuple[int, int]  # in all, warm-ups included: at least, at most
    seconds: tuple[float, float]  # for the pairs with an estimate
    unknown: list[str] = field(default_factory=list)  # workloads without an estimate
    unknown_ceiling: float = 0.0  # what their timeouts allow, at most
    time_budget: float | None = None
    sources: dict[str, "Source"] = field(default_factory=dict)  # workload -> where its estimates come from
    stop_floor: tuple[int, int] = (0, 0)  # (rounds, comparisons): the largest table's earliest ratio stop
    floors: list[noise.Floor] = field(default_factory=list)  # what each ratio's noise lets ci_target reach
    no_history: int = 0  # ratios (cell x environment) without earlier rounds here to estimate it from
    ci_target: float | None = None

    FLOOR_LINES = 8  # the plan shows the worst of its ratios' noise floors, at most this many

    @property
    def adaptive(self) -> bool:
        return self.min_repetitions < self.max_repetitions

    def longest(self) -> float:
        """At most: the maximum, or the time budget when that ends the adaptive repetitions earlier
        (the minimum repetitions always run)."""
        if self.time_budget:
            return max(self.seconds[0], min(self.seconds[1], self.time_budget))
        return self.seconds[1]

    def text(self) -> str:
        floor, m = self.stop_floor
        reps = (f"{self.min_repetitions}-{self.max_repetitions} repetitions (adaptive"
                + (f"; a table of {m} comparisons cannot stop before {floor} rounds" if floor > self.min_repetitions
                   else "") + ")"
                if self.adaptive else f"{self.min_repetitions} repetitions")
        warm = self.warmup[0] if self.warmup[0] == self.warmup[1] else f"{self.warmup[0]}-{self.warmup[1]}"
        head = (f"plan: {self.cells} cell(s) x {self.environments} environment(s) ({self.runs} in all) x {reps}"
                + (f" + {warm} warm-up" if self.warmup[1] else "")
                + f" = {_range(*self.repetitions)} runs")
        low, high = self.seconds
        if low == high == 0 and self.unknown:
            when = "no time estimate"
        else:
            high = self.longest()
            when = "estimated " + (human(low) if human(low) == human(high) else f"{human(low)} to {human(high)}")
            if self.time_budget and self.time_budget < self.seconds[1]:
                when += f" (time budget {human(self.time_budget)} for the adaptive repetitions)"
        if self.unknown:
            when += (f"; not counting {', '.join(self.unknown)}: no estimate per repetition (their timeouts "
                     f"allow up to {human(self.unknown_ceiling)})")
        return "\n".join([f"{head}; {when}, plus starting instances",
                          *(f"  {w}: {src.text()}" for w, src in self.sources.items() if src.cells),
                          *self.floor_lines()])

    def floor_lines(self) -> list[str]:
        """The noise floor: per ratio, what ci_target needs at this machine's noise (stored history),
        the worst first; the ones that reach it within max_repetitions summed up in one line."""
        if not self.adaptive or self.ci_target is None or not (self.floors or self.no_history):
            return []
        short = sorted((f for f in self.floors if f.short), key=lambda f: -f.sd)
        lines = [f"  noise floor (ci_target ±{self.ci_target * 100:g} %, this machine's earlier rounds):"] \
            if self.floors else []
        lines += [f"    {f.text()}" for f in short[:self.FLOOR_LINES]]
        if len(short) > self.FLOOR_LINES:
            lines.append(f"    and {len(short) - self.FLOOR_LINES} more that max_repetitions cannot bring to the target")
        fine = len(self.floors) - len(short)
        if fine:
            worst = max((f for f in self.floors if not f.short), key=lambda f: f.rounds or 0)
            lines.append(f"    {fine} ratio(s) reach it within max_repetitions (the slowest ~{worst.rounds} rounds: "
                         f"{worst.label})")
        if short:
            lines.append("    to reach the target: raise max_repetitions, lengthen each repetition (duration), or "
                         "accept the wider interval (the table marks such rows †)")
        if self.no_history:
            lines.append(f"  noise floor: {self.no_history} ratio(s) have no earlier rounds on this machine to estimate "
                         f"it from; a row that ends at max_repetitions without ±{self.ci_target * 100:g} % is marked † "
                         "in its table")
        return lines


@dataclass
class Source:
    """One workload's per-repetition estimates in a plan: how many cells had history (and from how
    many earlier samples), how many only the model, and the range of seconds."""
    cells: int = 0
    history_cells: int = 0
    history_samples: int = 0
    model_cells: int = 0
    low: float = float("inf")
    high: float = 0.0

    def add(self, est: estimates.Estimate) -> None:
        if est.seconds is None:
            return
        self.cells += 1
        if est.source == "history":
            self.history_cells += 1
            self.history_samples += est.samples
        else:
            self.model_cells += 1
        self.low, self.high = min(self.low, est.seconds), max(self.high, est.seconds)

    def text(self) -> str:
        each = _seconds(self.low) if _seconds(self.low) == _seconds(self.high) else \
            f"{_seconds(self.low)}-{_seconds(self.high)}"
        whence = []
        if self.history_cells:
            whence.append(f"from {self.history_samples} earlier sample{'s' if self.history_samples > 1 else ''}"
                          + (f" ({self.history_cells} of {self.cells} cell/environment pairs)" if self.model_cells else ""))
        if self.model_cells:
            whence.append("model" + (f" ({self.model_cells} of {self.cells})" if self.history_cells else ""))
        return f"{each} s per repetition, {'; '.join(whence)}"


def _seconds(x: float) -> str:
    return f"{x:.2g}" if x < 10 else f"{x:.0f}"


def _range(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def human(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def verdict_minimum(min_reps: int, max_reps: int) -> int:
    """The minimum the runner takes: an adaptive run is raised to what a verdict needs (up to its
    maximum); a fixed count (--repeat N) is kept."""
    if min_reps >= max_reps:
        return min_reps
    return max(min_reps, min(stats.min_repetitions(), max_reps))


def family_size(matrix: Matrix, cell: dict) -> int:
    """Comparisons per metric in the table `cell` belongs to (stats/verdicts.py:table_family: cells of one workload,
    parameters except the indexed test's, condition), one per non-baseline environment: the stop
    rule reads a ratio at 1 - FDR / that (times the metrics) as the table will."""
    wl = workloads.get(cell["workload"])

    def family(c: dict) -> str:
        params = {k: v for k, v in c["params"].items() if k != wl.index_param}
        return json.dumps([c["workload"], params, c["condition"]], sort_keys=True, default=str)

    names = [e.name for e in matrix.environments]
    return sum(len([e for e in cell_environments(c, names) if e != matrix.baseline])
               for c in matrix.cells if family(c) == family(cell)) or 1


def earliest_stop(matrix: Matrix, cell: dict, minimum: int, maximum: int) -> tuple[int, int]:
    """(The first round at which the ratio stop rule can stop `cell`, its table's comparisons): its
    minimum, or more where the table's level needs more rounds than that (stats.rounds_for_level;
    one metric assumed, so a lower bound), at most the maximum."""
    envs = cell_environments(cell, [e.name for e in matrix.environments])
    if minimum >= maximum or matrix.policy.ci_target is None or matrix.baseline not in envs or len(envs) < 2:
        return minimum, 0
    m = family_size(matrix, cell)
    return min(maximum, max(minimum, stats.rounds_for_level(1.0 - FDR / m))), m


def make(matrix: Matrix, only: set[tuple[str, str]] | None = None, store=None) -> Plan:
    """The plan of `matrix`; `only`: just these (cell key, environment) pairs (a retry); `store`: where
    earlier samples are (without it, only the workloads' models)."""
    policy = matrix.policy
    names = [e.name for e in matrix.environments]
    driver = {e.name: e.driver for e in matrix.environments}
    spec = {e.name: e for e in matrix.environments}
    low_reps = verdict_minimum(policy.min_repetitions, policy.max_repetitions)
    high_reps = max(policy.max_repetitions, low_reps)
    warm = AUTO_WARMUP if policy.warmup == "auto" else (int(policy.warmup), int(policy.warmup))
    pairs, cells, envs_used, unknown = 0, 0, set(), {}
    seconds, ceiling = [0.0, 0.0], 0.0
    history = estimates.History(store, {c["workload"] for c in matrix.cells})
    spread = noise.NoiseHistory(store, {c["workload"] for c in matrix.cells}) \
        if policy.ci_target is not None and low_reps < high_reps else None
    floors: list[noise.Floor] = []
    no_history = 0
    sources: dict[str, Source] = {}
    floor, reps_low = (low_reps, 0), 0
    for cell in matrix.cells:
        envs = [e for e in cell_environments(cell, names) if only is None or (cell["key"], e) in only]
        if not envs:
            continue
        cells += 1
        pairs += len(envs)
        envs_used.update(envs)
        wl = workloads.get(cell["workload"])
        per = 0.0
        reps_low += len(envs) * (earliest_stop(matrix, cell, low_reps, high_reps)[0] + warm[0])
        for e in envs:
            est = estimates.per_repetition(cell, driver[e], history)
            sources.setdefault(cell["workload"], Source()).add(est)
            if est.seconds is None:
                unknown[cell["workload"]] = unknown.get(cell["workload"], 0) + 1
                ceiling += (policy.timeout or wl.timeout(cell["params"])) * (high_reps + warm[1])
                continue
            # a measured wall time already holds the driver's start of the command; a model does not
            per += est.seconds + (drivers.traits_for(spec[e]).repetition_overhead_s if est.source == "model" else 0)
        first, m = earliest_stop(matrix, cell, low_reps, high_reps)
        floor = max(floor, (first, m))
        if spread is not None and m:
            got = _floors(matrix, cell, envs, driver, spread, high_reps, m)
            floors += got[0]
            no_history += got[1]
        seconds[0] += per * (first + warm[0])
        seconds[1] += per * (high_reps + warm[1])
    return Plan(cells, len(envs_used), pairs, low_reps, high_reps, warm,
                (reps_low, pairs * (high_reps + warm[1])), (seconds[0], seconds[1]),
                [f"{w} ({n} cell/environment pair{'s' if n > 1 else ''})" for w, n in unknown.items()], ceiling,
                policy.time_budget, sources, floor, floors, no_history, policy.ci_target)


def cell_label(matrix: Matrix, cell: dict) -> str:
    """A cell by the parameters that tell it from the suite's other cells of its workload: 'dhrystone',
    'dhrystone copies=vcpus', 'fio rw=read'."""
    same = [c for c in matrix.cells if c["workload"] == cell["workload"]]
    keys = [k for k in cell["params"] if len({json.dumps(c["params"].get(k), default=str) for c in same}) > 1]
    test = workloads.get(cell["workload"]).index_param
    head = str(cell["params"][test]) if test in keys else cell["workload"]
    return " ".join([head, *(f"{k}={cell['params'][k]}" for k in keys if k != test)])


def _floors(matrix: Matrix, cell: dict, envs: list[str], driver: dict[str, str], spread: noise.NoiseHistory,
            maximum: int, m: int) -> tuple[list[noise.Floor], int]:
    """The noise floors of `cell`'s ratios (one per environment beside the baseline) at its table's level,
    and how many of them have no history."""
    base = matrix.baseline
    if base not in envs:
        return [], 0
    out, unknown = [], 0
    others = [e for e in envs if e != base]
    level = 1.0 - FDR / m
    for e in others:
        got = spread.sd(cell["workload"], cell["params"], cell.get("condition") or {}, (driver[e], driver[base]))
        if got is None:
            unknown += 1
            continue
        label = cell_label(matrix, cell) + (f" @{e}" if len(others) > 1 else "")
        out.append(noise.floor(label, got[0], got[1], matrix.policy.ci_target, level, maximum))
    return out, unknown
