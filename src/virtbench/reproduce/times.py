"""How long an experiment of `virtbench reproduce` should take: its recorded times, else its child run's plan.

Every finished experiment records its time (with the load average and a CPU probe) in the data
directory (`reproduce-times.json`, per experiment, platforms beyond this machine and tier). The
estimate of a tier with recorded times is their median, each scaled by how much busier the machine
is now than when it was recorded (the CPU probe). Without one, a workload experiment's estimate is
the plan of the child run it would start (plan.make: this machine's earlier samples of the same
cells, else the workloads' models, as `virtbench run` prints it) plus the start-up that plan leaves
out: the run, its instances and its conditions. A boot grid, or a child the plan cannot estimate,
takes its tier's prior times the median actual/prior of the recorded experiments.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from .. import paths, workloads
from ..run import plan as plan_mod
from .experiments import PLATFORM_ENVS
from ..studies.model import Experiment, Tier
from .matrix import matrix_for
from ..suite import Matrix, cell_environments

HISTORY_KEEP = 10

# What a child run costs beyond its plan's repetitions. Measured on this 2-core machine at load 8.5:
# one 0.05 s dhrystone repetition and its warm-up took 4.5 s on the host alone (the run: machine
# facts, the store), 19.7 s with a container beside it and 50.4 s with a TCG VM beside it.
RUN_START_S = 5.0
INSTANCE_START_S = {"host": 0.0, "container": 15.0, "vm": 45.0}
OTHER_INSTANCE_START_S = 15.0  # pods, SSH hosts, a cloud: not measured here; a container's order
# Per condition a cell applies (an iSCSI target, a link's cap or delay): recorded reproduce runs
# ran 0-40 s over their child's plan with 2 storage conditions (002-link), 88 s with 5 (003-hpa).
CONDITION_SETUP_S = 15.0


def history_path() -> Path:
    return paths.data_dir() / "reproduce-times.json"


def load_history(path: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    try:
        data = json.loads((path or history_path()).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def record_history(exp_id: str, tier: Tier, actual_s: float, load: float | None, probe: float | None,
                   path: Path | None = None, prior_scale: float = 1.0) -> None:
    path = path or history_path()
    data = load_history(path)
    key = f"{exp_id}|{tier.label}"
    data[key] = (data.get(key, []) + [{"seconds": round(actual_s, 1), "prior": tier.estimate_s * prior_scale,
                                       "load_1m": load, "probe_s": probe, "at": time.time()}])[-HISTORY_KEEP:]
    tmp = path.with_name(path.name + f".{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _slower(now: float | None, then: float | None) -> float:
    """How much slower work runs now than when a time was recorded (1 when either is unknown). Never
    below 1: the probe sees CPU contention only, and disk-bound experiments do not speed up with it."""
    if not now or not then:
        return 1.0
    return max(1.0, min(4.0, now / then))


def estimate(exp_id: str, tier: Tier, history: dict[str, list[dict[str, Any]]], probe: float | None,
             prior_scale: float = 1.0, child_s: float | None = None) -> float:
    """Seconds this tier should take now: the median of its own recorded times if any (each scaled by
    the CPU probe now against the probe when it was recorded); else `child_s`, the child run's plan
    with its start-up, times `prior_scale`; else its prior (times `prior_scale`) corrected by how the
    other recorded experiments compared with their priors."""
    own = history.get(f"{exp_id}|{tier.label}", [])
    if own:
        return statistics.median(r["seconds"] * _slower(probe, r.get("probe_s")) for r in own)
    if child_s is not None:
        return child_s * prior_scale
    ratios = [r["seconds"] / r["prior"] * _slower(probe, r.get("probe_s"))
              for recs in history.values() for r in recs if r.get("prior")]
    factor = statistics.median(ratios) if ratios else 1.0
    return tier.estimate_s * prior_scale * factor


def timing_key(exp: Experiment, envs: tuple[str, ...]) -> tuple[str, float]:
    """The history key of an experiment on these environments, and the factor on its estimates: they
    are for this machine's own platforms; each platform beyond it (SSH hosts, a cloud) adds its share
    of the cells' time, and its times are recorded apart."""
    extra = [e for e in envs if e in PLATFORM_ENVS and e not in exp.envs]
    base = max(1, len(envs) - len(extra))
    return exp.id + "".join(f"+{e}" for e in extra), (base + len(extra)) / base


def startup_s(matrix: Matrix) -> float:
    """What the child run of `matrix` costs beyond its repetitions: the run, each environment's
    instances (as many as its largest cell holds at once) and each distinct condition's set-up."""
    names = [e.name for e in matrix.environments]
    total = RUN_START_S
    for env in matrix.environments:
        peak: dict[str, int] = {}
        for c in matrix.cells:
            if env.name in cell_environments(c, names):
                for role, n in workloads.get(c["workload"]).roles(c["params"]).items():
                    peak[role] = max(peak.get(role, 0), n)
        total += sum(peak.values()) * INSTANCE_START_S.get(env.driver, OTHER_INSTANCE_START_S)
    conditions = {json.dumps(c["condition"], sort_keys=True, default=str) for c in matrix.cells if c["condition"]}
    return total + CONDITION_SETUP_S * len(conditions)


def child_seconds(exp: Experiment, tier: Tier, envs: tuple[str, ...], store) -> float | None:
    """The plan's estimate of the child run on this machine's own environments of `envs`, with its
    start-up; None for a boot grid, or where a workload has no estimate or the matrix cannot be made."""
    if exp.boot:
        return None
    try:
        m = matrix_for(exp, tier, tuple(e for e in envs if e not in PLATFORM_ENVS))
    except Exception:  # a suite that no longer matches: the run says so; the estimate falls back
        return None
    p = plan_mod.make(m, store=store)
    if p.unknown:
        return None
    return p.seconds[1] + startup_s(m)


class Estimator:
    """The estimates of one plan (or one run-time decision): recorded times, the child plans (read
    from `store`; None: the workloads' models only), the CPU probe now; each tier's figured once."""

    def __init__(self, history: dict[str, list[dict[str, Any]]], probe: float | None, store=None):
        self.history, self.probe, self.store = history, probe, store
        self._memo: dict[tuple[str, int, tuple[str, ...]], float] = {}

    def __call__(self, exp: Experiment, tier_i: int, envs: tuple[str, ...]) -> float:
        """Seconds of `exp` at tier `tier_i` on `envs`. A recorded time is kept as it is; an estimate
        without one is never less than the tier below (a larger scale is no quicker, though a smaller
        tier's recorded time may exceed a larger one's plan)."""
        k = (exp.id, tier_i, tuple(envs))
        if k not in self._memo:
            tier = exp.tiers[tier_i]
            key, scale = timing_key(exp, envs)
            recorded = bool(self.history.get(f"{key}|{tier.label}"))
            child = None if recorded else child_seconds(exp, tier, envs, self.store)
            own = estimate(key, tier, self.history, self.probe, scale, child)
            self._memo[k] = max(own, self(exp, tier_i - 1, envs)) if tier_i and not recorded else own
        return self._memo[k]
