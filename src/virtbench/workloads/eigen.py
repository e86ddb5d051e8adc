"""A coarse-grained MPI + OpenMP application through virtbench's own `vb-eigen` (native/eigen): a block
Sakurai-Sugiura contour-integral eigensolver, the counterpart of study 001's Bloss (items 3-4).

The quadrature points' shifted linear systems are dealt out to the ranks, solved with OpenMP threads,
summed with one large MPI_Allreduce (`allreduce_bytes` pads it to the study's ~1 GB), and every rank then
repeats the same small dense Rayleigh-Ritz step. The run reports the fraction of the work every rank
duplicates (`duplicated_fraction`), from which the algorithmic ideal efficiency E(p) = 1 / (p f + 1 - f)
follows, to put beside the measured one as in study 001's Fig. 4.

A failed verification (an eigenvalue missing, spurious or off the closed form) is a result, not a lost one:
the samples are kept with `verified: false` and a warning. The class table and the memory estimate mirror
native/eigen/main.c, so bad input is refused before anything starts; vb-eigen checks each node's real memory
again at run time.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..model import EnvSpec, Sample
from . import mpijob
from .base import MetricSpec, Param, RunContext, Workload

MB = mpijob.MB
# class: (grid g, block L, moments M, quadrature points N), from native/eigen/main.c
CLASSES = {"S": (48, 4, 8, 32), "W": (96, 8, 4, 32), "A": (128, 8, 8, 32), "B": (256, 16, 16, 32)}
# Seconds one repetition may take, by class, on one core of a slow, loaded machine (x ranks' share).
CLASS_SECONDS = {"S": 60, "W": 300, "A": 900, "B": 7200}
# The plan's model of one repetition (run/estimates.py; this machine's history replaces it after one run):
# millions of operations of the class's 32 points (vb-eigen's mops x time_s, single rank: S and W
# measured here; A and B from W by grid^3 x block, the CG solves' cost), at NPB CG's speed on one quiet
# core here (the solves are CG iterations; docs/npb-performance.md), half again for set-up.
MODEL_MOP = {"S": 3460, "W": 42700, "A": 101000, "B": 1620000}
MODEL_MOPS = 3470
MAX_ALLREDUCE = 64 * 1024**3  # vb-eigen's limit


def byte_count(value: Any) -> int:
    """A byte count with an optional binary suffix K, M, G (1M = 2^20), as vb-eigen reads them."""
    return mpijob.suffixed_int(value, {"": 1, "k": 1024, "K": 1024, "M": 1024**2, "G": 1024**3})


byte_count.__name__ = "byte count"


def moments_bytes(cls: str) -> int:
    g, block, moments, _ = CLASSES[cls]
    return g * g * block * moments * 8


def points(params: dict[str, Any]) -> int:
    return params.get("points") or CLASSES[params["class"]][3]


def reduced_bytes(params: dict[str, Any]) -> int:
    """The buffer the allreduce sums: the moments, padded to allreduce_bytes (rounded up to doubles)."""
    return max(moments_bytes(params["class"]), math.ceil((params.get("allreduce_bytes") or 0) / 8) * 8)


def mem_per_rank(params: dict[str, Any]) -> float:
    """Bytes one rank needs (vb-eigen's own estimate + Open MPI's)."""
    g, block, moments, _ = CLASSES[params["class"]]
    n = float(g * g)
    matrix, rhs, setup = n * (4 + 5 * 12), n * block * 8, n * 8
    threads, mine = params.get("threads", 1), -(-(points(params) // 2) // params.get("ranks", 1))
    concurrent = threads if threads > 1 and mine >= threads else 1  # threads own whole solves (thread_mode)
    solve, dense = 4 * n * 2 * block * 8 * concurrent, n * block * moments * 8
    return matrix + rhs + reduced_bytes(params) + max(solve, dense, setup) + 32 * MB + mpijob.MPI_RUNTIME_PER_RANK


class Eigen(Workload):
    name = "eigen"
    description = ("block Sakurai-Sugiura contour-integral eigensolver (MPI + OpenMP, one large allreduce), "
                   "verified against the closed form")
    params = (
        Param("class", str, "S", "problem class (2-D Laplacian on a 48^2 .. 256^2 grid)", choices=tuple(CLASSES)),
        *mpijob.cluster_params(ranks=1, instances=1),
        mpijob.THREADS,
        mpijob.TRANSPORT,
        Param("allreduce_bytes", byte_count, 0, "bytes the one MPI_Allreduce sums: the moments padded with zeros "
              "(K/M/G suffixes, 1M = 2^20; 0 = the moments' own size; study 001: ~1G)", min=0, max=MAX_ALLREDUCE),
        Param("points", int, 0, "quadrature points on the circle, even (0 = the class's 32); points/2 shifted "
              "systems are dealt out to the ranks", min=0, max=1024),
        mpijob.TOTAL_VCPUS,
    )
    metrics = (
        MetricSpec("time", "s", False, "time of the timed section (slowest rank): solves, allreduce, Rayleigh-Ritz"),
        MetricSpec("solves_per_s", "solves/s", True, "shifted linear systems solved (one right-hand side each) "
                   "per second"),
        MetricSpec("mops", "Mop/s", True, "millions of counted floating-point operations per second"),
        MetricSpec("allreduce_time", "s", False, "time of the one MPI_Allreduce of the moments (runs of 2 ranks "
                   "or more)"),
    )

    def validate(self, params: dict[str, Any]) -> None:
        cls, ranks, threads = params["class"], params["ranks"], params["threads"]
        n_points = points(params)
        if n_points % 2 or n_points < 4:
            raise ValueError(f"points must be even and at least 4 (or 0 for the class's 32), got {n_points}")
        if ranks > n_points // 2:
            raise ValueError(f"class {cls} with {n_points} quadrature points has {n_points // 2} shifted systems "
                             f"to share; run on at most {n_points // 2} ranks (or raise points), got {ranks}")
        own = moments_bytes(cls)
        if 0 < params.get("allreduce_bytes", 0) < own:
            raise ValueError(f"allreduce_bytes {params['allreduce_bytes']} is smaller than class {cls}'s moments "
                             f"({own} bytes); give at least that, or 0 for exactly that")
        mpijob.check_layout(params, threads)
        mpijob.check_machine_memory(mem_per_rank(params) * ranks, f"eigen class {cls} on {ranks} rank(s)")

    def check_capacity(self, params: dict[str, Any], env: EnvSpec) -> list[str]:
        per = params["ranks"] // params["instances"]
        return mpijob.capacity_problems(params, env, mem_per_rank(params) * per, f"eigen class {params['class']}",
                                        params["threads"])

    def roles(self, params: dict[str, Any]) -> dict[str, int]:
        return {"node": params["instances"]}

    def timeout(self, params: dict[str, Any]) -> float:
        return mpijob.scaled_timeout(params, CLASS_SECONDS[params["class"]] * points(params) / 32)

    def expected_seconds(self, params: dict[str, Any]) -> float | None:
        mop = MODEL_MOP[params["class"]] * points(params) / 32
        return mpijob.model_seconds(params, 1.5 * mop / MODEL_MOPS)

    def execute(self, instances, params: dict[str, Any], ctx: RunContext) -> str:
        cl = mpijob.get_cluster(instances, params)
        argv = [cl.launcher.bin("vb-eigen"), params["class"], "--threads", str(params["threads"]),
                "--points", str(points(params)), "--allreduce-bytes", str(reduced_bytes(params))]
        return mpijob.run(cl, argv, params, ctx, "vb-eigen", threads=params["threads"])

    def summarize_metadata(self, metas: list[dict[str, Any]]) -> dict[str, Any]:
        """The median duplicated fraction f over the repetitions: the scaling analysis draws the ideal
        E(p) = 1 / (p f + 1 - f) from the 1-rank row's f."""
        f = [m["duplicated_fraction"] for m in metas if isinstance(m.get("duplicated_fraction"), (int, float))]
        return {"duplicated_fraction_median": statistics.median(f)} if f else {}

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        rec, meta = mpijob.verified_record(
            raw, "vb-eigen", lambda r: r.get("kernel") == "eigen",
            {"time_s", "mops", "solves_per_s", "allreduce_s", "duplicated_fraction"},
            {"class": params["class"], "ranks": params["ranks"], "threads": params["threads"],
             "allreduce_bytes": reduced_bytes(params)})
        meta.update({k: rec.get(k) for k in (
            "duplicated_fraction", "ideal_efficiency", "allreduce_bytes", "moments_bytes", "allreduce_s",
            "wait_s", "solve_s", "dense_s", "duplicated_s", "setup_s", "solve_imbalance", "iterations",
            "size", "n", "points", "systems", "block", "moments", "subspace", "thread_mode", "interval",
            "expected", "found", "rejected", "max_multiplicity")})
        mpijob.warn_unverified(rec, meta, "the eigenvalues are wrong, the time means nothing")
        samples = [Sample("time", rec["time_s"], "s", False, dict(meta)),
                   Sample("solves_per_s", rec["solves_per_s"], "solves/s", True, dict(meta)),
                   Sample("mops", rec["mops"], "Mop/s", True, dict(meta))]
        if rec["ranks"] > 1:  # on one rank the allreduce moves nothing: no time to compare
            samples.append(Sample("allreduce_time", rec["allreduce_s"], "s", False, dict(meta)))
        return samples
