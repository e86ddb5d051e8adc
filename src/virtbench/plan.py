"""The plan a run prints before its first repetition: cells x environments x repetitions and an
estimate of the time, from the matrix alone (each workload's expected seconds per repetition, the
warm-up and the adaptive minimum and maximum), not from the runner's loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import drivers, stats, workloads
from .suite import Matrix, cell_environments

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
        reps = (f"{self.min_repetitions}-{self.max_repetitions} repetitions (adaptive)" if self.adaptive
                else f"{self.min_repetitions} repetitions")
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
        return f"{head}; {when}, plus starting instances"


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


def make(matrix: Matrix, only: set[tuple[str, str]] | None = None) -> Plan:
    """The plan of `matrix`; `only`: just these (cell key, environment) pairs (a retry)."""
    policy = matrix.policy
    names = [e.name for e in matrix.environments]
    driver = {e.name: e.driver for e in matrix.environments}
    low_reps = verdict_minimum(policy.min_repetitions, policy.max_repetitions)
    high_reps = max(policy.max_repetitions, low_reps)
    warm = AUTO_WARMUP if policy.warmup == "auto" else (int(policy.warmup), int(policy.warmup))
    pairs, cells, envs_used, unknown = 0, 0, set(), {}
    seconds, ceiling = [0.0, 0.0], 0.0
    for cell in matrix.cells:
        envs = [e for e in cell_environments(cell, names) if only is None or (cell["key"], e) in only]
        if not envs:
            continue
        cells += 1
        pairs += len(envs)
        envs_used.update(envs)
        wl = workloads.get(cell["workload"])
        each = wl.expected_seconds(cell["params"])
        if each is None:
            unknown[cell["workload"]] = unknown.get(cell["workload"], 0) + 1
            ceiling += len(envs) * (policy.timeout or wl.timeout(cell["params"])) * (high_reps + warm[1])
            continue
        per = sum(each + drivers.traits_of(driver[e]).repetition_overhead_s for e in envs)
        seconds[0] += per * (low_reps + warm[0])
        seconds[1] += per * (high_reps + warm[1])
    return Plan(cells, len(envs_used), pairs, low_reps, high_reps, warm,
                (pairs * (low_reps + warm[0]), pairs * (high_reps + warm[1])), (seconds[0], seconds[1]),
                [f"{w} ({n} cell{'s' if n > 1 else ''})" for w, n in unknown.items()], ceiling, policy.time_budget)
