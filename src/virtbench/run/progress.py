"""How much of a run is done and how much is still to come, for the progress bar and its ETA.

The count starts from what the run is sure to do (each (cell, environment)'s warm-ups and the
rounds before its cell's stop rule can first stop it) and follows what it learns: a warm-up "auto"
that goes on, a cell whose stop rule asks for another round, an environment that is skipped or
gives up, a cell that stops. So the total never falls below what is already done and the ETA does
not reach 0 while attempts are still to come. Each attempt is weighted by its estimated seconds
(run/estimates.py: this machine's earlier wall times, else the workload's model) so a TCG VM's attempt
counts for what it costs beside a host's; the bar's rate of estimated seconds per real second then
corrects the estimates as the run goes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .. import drivers
from . import estimates
from ..model import EnvSpec


@dataclass
class _Pair:
    warmups: int  # warm-up attempts expected in all
    rounds: int  # measured attempts expected in all
    seconds: float | None  # one attempt's estimated wall time; None: unknown
    warm_done: int = 0
    rounds_done: int = 0
    finished: bool = False


@dataclass
class Outlook:
    """Attempts expected and done per (cell key, environment), in this invocation of the runner."""

    pairs: dict[tuple[str, str], _Pair] = field(default_factory=dict)

    def expect(self, cell_key: str, env: str, warmups: int, rounds: int, seconds: float | None) -> None:
        self.pairs[(cell_key, env)] = _Pair(max(0, warmups), max(0, rounds), seconds)

    def attempt(self, cell_key: str, env: str, warmup: bool) -> None:
        pair = self.pairs.setdefault((cell_key, env), _Pair(0, 0, None))
        if warmup:
            pair.warm_done += 1
            pair.warmups = max(pair.warmups, pair.warm_done)  # "auto" took one more than expected
            return
        if pair.rounds_done == 0:
            pair.warmups = pair.warm_done  # the warm-up is over (it may have ended early)
        pair.rounds_done += 1
        if pair.rounds_done > pair.rounds:
            # The stop rule asked for another round: every environment still in the cell takes it.
            for (key, _), other in self.pairs.items():
                if key == cell_key and not other.finished:
                    other.rounds = max(other.rounds, pair.rounds_done)

    def stopped(self, cell_key: str, env: str) -> None:
        """This (cell, environment) takes no more attempts (its cell stopped, it was skipped or gave up)."""
        pair = self.pairs.setdefault((cell_key, env), _Pair(0, 0, None))
        pair.finished = True
        pair.warmups, pair.rounds = pair.warm_done, pair.rounds_done

    # -- totals ------------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return sum(p.warmups + p.rounds for p in self.pairs.values())

    @property
    def done(self) -> int:
        return sum(p.warm_done + p.rounds_done for p in self.pairs.values())

    def _weights(self) -> list[tuple[_Pair, float]]:
        """Each pair with its attempts' weight: its estimate, else the mean of the known ones (else 1:
        a plain count)."""
        known = [p.seconds for p in self.pairs.values() if p.seconds is not None]
        fallback = sum(known) / len(known) if known else 1.0
        return [(p, fallback if p.seconds is None else p.seconds) for p in self.pairs.values()]

    @property
    def total_seconds(self) -> float:
        return sum(w * (p.warmups + p.rounds) for p, w in self._weights())

    @property
    def done_seconds(self) -> float:
        return sum(w * (p.warm_done + p.rounds_done) for p, w in self._weights())


class Eta:
    """Seconds left at the pace the run has kept: estimated seconds done per real second over the last
    `window` seconds, measured from the last point at or before the window's start (so one attempt
    longer than the window still has a pace). Kept apart from the bar's total, which grows: rich
    forgets its own speed whenever a task's total changes."""

    def __init__(self, window: float = 300.0):
        self.window = window
        self.points: deque[tuple[float, float]] = deque()

    def add(self, t: float, done_seconds: float) -> None:
        self.points.append((t, done_seconds))
        while len(self.points) >= 2 and self.points[1][0] <= t - self.window:
            self.points.popleft()

    def left(self, total_seconds: float) -> float | None:
        """None until the run has a pace (before its first attempt ends)."""
        if len(self.points) < 2:
            return None
        (t0, d0), (t1, d1) = self.points[0], self.points[-1]
        if t1 <= t0 or d1 <= d0:
            return None
        return max(0.0, total_seconds - d1) * (t1 - t0) / (d1 - d0)


def hms(seconds: float | None) -> str:
    """h:mm:ss, or -:--:-- when unknown (as rich prints times)."""
    if seconds is None:
        return "-:--:--"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def attempt_seconds(cell: dict, env: EnvSpec, history: estimates.History | None) -> float | None:
    """One attempt's estimated wall time in `env`, as the plan counts it: a measured wall time
    already holds the driver's start of the command; a model gets the environment's per-repetition
    overhead (its traits, options included: a cluster's pods are not kube play's)."""
    est = estimates.per_repetition(cell, env.driver, history)
    if est.seconds is None:
        return None
    return est.seconds + (drivers.traits_for(env).repetition_overhead_s if est.source == "model" else 0.0)
