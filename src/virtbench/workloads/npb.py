"""NAS Parallel Benchmarks through virtbench's own `vb-npb` (native/npb): the kernels EP, CG, MG, FT, IS,
the pseudo-applications LU, SP, BT and the multi-zone SP-MZ, BT-MZ, LU-MZ (MPI + OpenMP), on a cluster of
instances (study 000 item 5, study 001 items 3-4).

A failed verification is a result, not a lost one: the samples are kept with `verified: false` and
a warning saying which check failed. The rank rules and memory estimates below mirror the kernels'
own `check`/`mem_per_rank` functions (native/npb/*.c), so bad input is refused before anything
starts; vb-npb still checks again at run time against each node's real memory.
"""

from __future__ import annotations

import math
from typing import Any

from ..model import EnvSpec, Sample
from . import mpijob
from .base import MetricSpec, Param, RunContext, Workload

KERNELS = ("ep", "cg", "mg", "ft", "is", "lu", "sp", "bt", "sp-mz", "bt-mz", "lu-mz")
APPS = ("lu", "sp", "bt")  # pseudo-applications: a z-slab (LU: y-rows) of the n^3 grid per rank
MZ = ("sp-mz", "bt-mz", "lu-mz")  # multi-zone: whole zones per rank
CLASSES = ("S", "W", "A", "B")
MB = mpijob.MB

# Class sizes from native/npb/classes.h.
EP_M = {"S": 24, "W": 25, "A": 28, "B": 30}
CG_NA = {"S": (1400, 7), "W": (7000, 8), "A": (14000, 11), "B": (75000, 13)}
MG_N = {"S": 32, "W": 128, "A": 256, "B": 256}
FT_N = {"S": (64, 64, 64), "W": (128, 128, 32), "A": (256, 256, 128), "B": (512, 256, 256)}
IS_LOG2 = {"S": (16, 11), "W": (20, 16), "A": (23, 19), "B": (25, 21)}
APP_N = {"lu": {"S": 12, "W": 33, "A": 64, "B": 102}, "sp": {"S": 12, "W": 36, "A": 64, "B": 102},
         "bt": {"S": 12, "W": 24, "A": 64, "B": 102}}
# NPB-MZ: zones (x_zones * y_zones; LU-MZ always 4 x 4) and grid points of the whole problem.
MZ_ZONES = {"S": 4, "W": 16, "A": 16, "B": 64}
MZ_POINTS = {"S": 3456, "W": 32768, "A": 262144, "B": 1074944}
# Seconds one repetition may take, by class, on one core of a slow, loaded machine (x ranks' share).
CLASS_SECONDS = {"S": 30, "W": 120, "A": 900, "B": 3600}
# The plan's model of one repetition (run/estimates.py; this machine's history replaces it after one run).
# Work: millions of operations, by vb-npb's own counts (mops x time_s of single-rank runs of classes S
# and W here, and of A for EP, CG, MG, FT, IS; the other A and all B from the nearest measured class by
# the ratio of grid points x iterations, or for LU its operation-count polynomial).
MODEL_MOP = {
    "ep": (33.6, 67.1, 537, 2150), "cg": (66.7, 421, 1500, 54800), "mg": (7.6, 487, 3890, 19500),
    "ft": (177, 373, 7140, 103000), "is": (0.66, 10.5, 84, 336), "lu": (102, 18100, 119000, 499000),
    "sp": (96.7, 14200, 79700, 323000), "bt": (228, 7720, 146000, 593000), "sp-mz": (163, 7290, 58300, 239000),
    "bt-mz": (382, 14400, 115000, 471000), "lu-mz": (46.5, 11600, 77700, 318000),
}
# Speed: Mop/s of one quiet core of the 2-core development machine, class A, 1 rank
# (docs/npb-performance.md; FT, IS and the multi-zone codes relative to CG, SP, BT and LU in the runs
# above). Set-up outside the timed section (data, verification) adds about half again.
MODEL_MOPS = {"ep": 306, "cg": 3470, "mg": 4700, "ft": 4000, "is": 250, "lu": 11800, "sp": 4630, "bt": 8520,
              "sp-mz": 7140, "bt-mz": 13300, "lu-mz": 16500}
MODEL_SETUP = 1.5


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def max_ranks(kernel: str, cls: str) -> int:
    if kernel == "ep":
        return 1 << (EP_M[cls] - 16)
    if kernel == "cg":
        return CG_NA[cls][0] // 2
    if kernel == "mg":
        return MG_N[cls] // 2
    if kernel == "ft":
        return min(FT_N[cls][1:])
    if kernel in APPS:
        return APP_N[kernel][cls] // 2  # at least 2 planes (LU: rows) per rank
    if kernel in MZ:
        return 16 if kernel == "lu-mz" else MZ_ZONES[cls]  # at least one zone per rank
    return 1 << 10


def rank_problem(kernel: str, cls: str, ranks: int) -> str | None:
    """Why `kernel` class `cls` cannot run on `ranks` ranks, or None."""
    if kernel not in ("ep", *APPS, *MZ) and not _pow2(ranks):
        return f"{kernel} needs a power-of-two number of ranks (1, 2, 4, 8, ...), got {ranks}"
    if ranks > max_ranks(kernel, cls):
        return f"{kernel} class {cls} can use at most {max_ranks(kernel, cls)} ranks, got {ranks}"
    return None


def mem_per_rank(kernel: str, cls: str, ranks: int) -> float:
    """Bytes one rank needs (the kernel's estimate + Open MPI's own)."""
    if kernel == "ep":
        need = 1.0 * MB
    elif kernel == "cg":
        na, nonzer = CG_NA[cls]
        n, k = float(na), nonzer + 1.0
        need = (n * k * k / ranks * 1.3 * 12 + n * k * 12 + n * 4 + n / ranks * 8 + 2 * n * 8 + 5 * n / ranks * 8)
    elif kernel == "mg":
        n = float(MG_N[cls])
        need = (n + 2) ** 2 * (n / ranks + 2) * 8 * (3 + 2 / 7 * 1.3) + MB
    elif kernel == "ft":
        nx, ny, nz = FT_N[cls]
        need = nx * ny * nz / ranks * ((4 if ranks > 1 else 2) * 16 + 8) + 4 * MB  # one rank: no transposes
    elif kernel == "lu":
        n = APP_N["lu"][cls]
        need = n * n * (math.ceil(n / ranks) + 4) * 136
    elif kernel == "sp":
        n = APP_N[kernel][cls]
        # u, rhs, forcing and the derived fields of a z-slab with halo planes; with 2+ ranks the y-slab
        # copies and transpose buffers (cfd_mem_per_rank in native/npb/cfd.c)
        q = n * n * (n / ranks + 1)
        need = 8 * (n * n * (n / ranks + 5) * 22 + (17 * q + 20 * (q + 4 * ranks * n * n) if ranks > 1 else 0))
    elif kernel == "bt":
        n = APP_N[kernel][cls]
        need = 8 * (21 * n * n * (n / ranks + 4)
                    + (17 * n * n * (n / ranks + 1) + 20 * n * n * (n / ranks + 4) if ranks > 1 else 0)) + 38400 * n
    elif kernel in MZ:
        points = MZ_POINTS[cls]
        zones = 16 if kernel == "lu-mz" else MZ_ZONES[cls]
        # the rank's zones (bin packing: at most its share plus the largest zone; BT-MZ's largest is
        # several times the mean) at ~320 bytes per point, and the exchange buffers
        need = 320 * (points / ranks + 4 * points / zones) + 2 * 40 * points / ranks + MB
    else:
        keys, maxkey = IS_LOG2[cls]
        need = 4 * (2**keys / ranks) * 7 + 4 * 2**maxkey + MB
    return need + 32 * MB + mpijob.MPI_RUNTIME_PER_RANK


class NPB(Workload):
    name = "npb"
    description = ("NAS Parallel Benchmarks (kernels EP, CG, MG, FT, IS; pseudo-applications LU, SP, BT; multi-zone "
                   "SP-MZ, BT-MZ, LU-MZ; classes S-B) with MPI (+ OpenMP), verified")
    params = (
        Param("kernel", str, list(KERNELS), "NPB benchmark (kernel, pseudo-application or multi-zone code)", choices=KERNELS),
        Param("class", str, "S", "problem class", choices=CLASSES),
        *mpijob.cluster_params(ranks=1, instances=1),
        mpijob.THREADS,
        mpijob.TOTAL_VCPUS,
        mpijob.TRANSPORT,
    )
    metrics = (
        MetricSpec("mops", "Mop/s", True, "millions of operations per second, by the NPB operation counts"),
        MetricSpec("time", "s", False, "time of the timed section (slowest rank)"),
    )

    def validate(self, params: dict[str, Any]) -> None:
        kernel, cls, ranks, threads = params["kernel"], params["class"], params["ranks"], params["threads"]
        problem = rank_problem(kernel, cls, ranks)
        if problem:
            raise ValueError(problem)
        if kernel == "is" and threads > 1:
            raise ValueError("is runs one thread per rank; threads must be 1 (use more ranks instead)")
        mpijob.check_layout(params, threads)
        mpijob.check_machine_memory(mem_per_rank(kernel, cls, ranks) * ranks,
                                    f"{kernel} class {cls} on {ranks} rank(s)")

    def check_capacity(self, params: dict[str, Any], env: EnvSpec) -> list[str]:
        per = params["ranks"] // params["instances"]
        need = mem_per_rank(params["kernel"], params["class"], params["ranks"]) * per
        return mpijob.capacity_problems(params, env, need, f"{params['kernel']} class {params['class']}",
                                        params["threads"])

    def roles(self, params: dict[str, Any]) -> dict[str, int]:
        return {"node": params["instances"]}

    def timeout(self, params: dict[str, Any]) -> float:
        return mpijob.scaled_timeout(params, CLASS_SECONDS[params["class"]])

    def expected_seconds(self, params: dict[str, Any]) -> float | None:
        kernel = params["kernel"]
        mop = MODEL_MOP[kernel][CLASSES.index(params["class"])]
        return mpijob.model_seconds(params, MODEL_SETUP * mop / MODEL_MOPS[kernel])

    def execute(self, instances, params: dict[str, Any], ctx: RunContext) -> str:
        cl = mpijob.get_cluster(instances, params)
        argv = [cl.launcher.bin("vb-npb"), params["kernel"], params["class"], "--threads", str(params["threads"])]
        return mpijob.run(cl, argv, params, ctx, "vb-npb", threads=params["threads"], mem_env="VB_NPB_MEM_AVAILABLE")

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        rec, meta = mpijob.verified_record(
            raw, "vb-npb", lambda r: "kernel" in r, {"time_s", "mops"},
            {"kernel": params["kernel"], "class": params["class"], "ranks": params["ranks"],
             "threads": params["threads"]})
        meta.update(size=rec.get("size"), iterations=rec.get("iterations"))
        mpijob.warn_unverified(rec, meta, "the result is wrong, its time means nothing")
        return [Sample("mops", rec["mops"], "Mop/s", True, dict(meta)),
                Sample("time", rec["time_s"], "s", False, dict(meta))]
