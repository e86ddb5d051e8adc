"""What the MPI workloads (npb, mpi, hpa) share: cluster parameters, capacity checks, one mpirun
with memory-pressure detection around it, and reading the output back.

A repetition's raw output is the tool's stdout followed by one line `{"virtbench": {...}}` holding
what the harness saw (placement, mpirun options, memory counters), so parsers stay pure and the
stored raw output explains itself.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from . import mpicluster as cluster
from .. import sizes
from ..errors import ConditionUnavailable
from ..drivers import class_for, names, traits_for
from ..drivers.base import Instance
from ..drivers.container import ociruntime
from ..errors import WorkloadFailed
from ..model import EnvSpec
from .base import Param, RunContext

MB = 1024 * 1024
# Open MPI's own footprint per rank (libraries, shared-memory segments), beyond the kernel's data.
MPI_RUNTIME_PER_RANK = 48 * MB


class ShapeMismatch(ConditionUnavailable):
    """This environment's shape does not make the cluster shape a cell asks for (total_vcpus):
    the cell is skipped there, with this reason, and runs where the shape fits."""


def cluster_params(ranks: Any = 1, instances: Any = 1) -> tuple[Param, ...]:
    return (
        Param("ranks", int, ranks, "MPI ranks in total (spread evenly over the instances)", min=1, max=1024),
        Param("instances", int, instances, "instances of the environment in the cluster", min=1, max=64),
    )


TOTAL_VCPUS = Param("total_vcpus", int, 0, "constant-total-cores comparison: run only where instances x vCPUs "
                    "per instance equals this (skipped elsewhere); 0 = run everywhere", min=0, max=4096)
THREADS = Param("threads", int, 1, "OpenMP threads per rank (hybrid MPI + OpenMP)", min=1, max=256)
TRANSPORT = Param("transport", str, "auto", "how ranks talk: auto = Open MPI's choice (shared memory between ranks of "
                  "one instance), tcp = over TCP even within one instance, so that ranks on one machine take a "
                  "network path as ranks on separate instances do", choices=("auto", "tcp"))


def suffixed_int(value: Any, units: dict[str, int | float], decimals: bool = False) -> int:
    """A whole number with an optional unit suffix from `units` ({"": 1, "K": 1024, ...}), as the
    MPI tools read their options; `decimals` allows "1.5M" when it comes out whole.  ValueError else."""
    return sizes.parse_suffixed(value, units, decimals=decimals)


def machine_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def mem_available() -> int | None:
    """MemAvailable of this machine in bytes (None when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def human(n: float) -> str:
    return f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{n / MB:.0f} MiB"


def check_layout(params: dict[str, Any], threads: int = 1) -> None:
    """Rank counts the cluster can run at all; ValueError naming the parameter."""
    ranks, inst = params["ranks"], params["instances"]
    if ranks % inst:
        raise ValueError(f"ranks ({ranks}) must be a multiple of instances ({inst}): each instance gets the same "
                         "number of ranks")
    limit = cluster.OVERSUBSCRIBE_LIMIT * machine_cores()
    if ranks * threads > limit:
        raise ValueError(f"ranks x threads = {ranks * threads} is far above this machine's {machine_cores()} cores "
                         f"(at most {limit}, {cluster.OVERSUBSCRIBE_LIMIT} per core, are accepted)")
    total = params.get("total_vcpus") or 0
    if total and total % inst:
        raise ValueError(f"total_vcpus ({total}) must be a multiple of instances ({inst})")


def check_machine_memory(need: float, what: str) -> None:
    """Every instance of a run shares this machine's memory: refuse what cannot fit at all."""
    avail = mem_available()
    if avail is not None and need > avail:
        raise ValueError(f"{what} needs about {human(need)}, but this machine has only {human(avail)} available")


def capacity_problems(params: dict[str, Any], env: EnvSpec, need_per_instance: float, what: str,
                      threads: int = 1) -> list[str]:
    """Checks that need the environment's shape (the runner's check before anything starts)."""
    problems = []
    inst, per = params["instances"], params["ranks"] // params["instances"]
    shape = env.shape
    avail = mem_available()
    memory_mb = shape.memory_mb or instance_memory_mb(env)
    if memory_mb:
        named = shape.name if shape.memory_mb else f"{env.driver} default"
        # with swap beside its memory an instance that outgrows the memory pages (slowly) instead of dying
        swap = class_for(env).swap_bytes(env) if env.driver in names() else 0
        if need_per_instance > memory_mb * MB + swap:
            gives = f"the shape {shape.name}" if shape.memory_mb else f"a {env.driver} without a memory shape"
            problems.append(f"{what} needs about {human(need_per_instance)} per instance ({per} rank(s)), but "
                            f"{gives} gives {memory_mb} MB" + (f" and {human(swap)} of swap" if swap else ""))
        if avail is not None and not traits_for(env).host_process and inst * memory_mb * MB > avail:
            problems.append(f"{inst} instances x {memory_mb} MB ({named}) do not fit in this machine's "
                            f"{human(avail)} available memory")
    if shape.vcpus and per * threads > cluster.OVERSUBSCRIBE_LIMIT * shape.vcpus:
        problems.append(f"{per} rank(s) x {threads} thread(s) per instance is far above the shape's "
                        f"{shape.vcpus} vCPU(s)")
    return problems


def instance_memory_mb(env: EnvSpec) -> int | None:
    """Memory of one instance without a memory shape: its driver's default (a VM's; None: its
    machine's, shared)."""
    return class_for(env).default_memory_mb if env.driver in names() else None


def get_cluster(instances: dict[str, list[Instance]], params: dict[str, Any]) -> cluster.Cluster:
    nodes = instances["node"][:params["instances"]]
    for node in nodes:  # said before mpirun starts: its own error would not name the runtime
        if why := ociruntime.cannot_run(node.metadata(), "MPI"):
            raise WorkloadFailed(f"{node.name}: {why}")
    cl = cluster.get(nodes)
    total = params.get("total_vcpus") or 0
    if total and sum(cl.vcpus) != total:
        raise ShapeMismatch(f"cluster shape {len(nodes)} x {cl.vcpus[0]} vCPU(s) = {sum(cl.vcpus)} vCPUs here, "
                            f"this cell compares arrangements of {total}")
    return cl


def run(cl: cluster.Cluster, argv: list[str], params: dict[str, Any], ctx: RunContext, tool: str, *,
        threads: int = 1, map_by: str = "slot", extra: dict[str, Any] | None = None,
        mem_env: str | None = None) -> str:
    """One mpirun with memory counters read before and after; raw output for the parser. `mem_env`:
    the tool's variable for the memory its own check may count on; set to memory + swap where the
    instances' environment gives them swap (the vm option swap), so a run that outgrows the memory
    pages, as the shape was made to, rather than being refused."""
    before = cl.memory_snapshot()
    env, extra = {}, dict(extra or {})
    granted = bool(cl.instances) and all(i.env.driver in names() and class_for(i.env).swap_bytes(i.env) > 0
                                         for i in cl.instances)
    room = cluster.swap_room(before) if mem_env and granted else None
    if room is not None:
        env[mem_env] = str(room)
        extra["memory_check"] = f"MemAvailable + SwapFree: {human(room)} (the instances have swap)"
    job = cl.run(argv, params["ranks"], threads=threads, map_by=map_by, timeout=ctx.timeout,
                 transport=params.get("transport", "auto"), env=env)
    after = cl.memory_snapshot()
    pressure = cluster.memory_pressure(before, after)
    if not job.ok:
        reason = cluster.tool_error(job.result, tool)
        if pressure["warnings"]:
            reason += " | " + " | ".join(pressure["warnings"])
        raise WorkloadFailed(reason, job.result.stdout[-4000:] + job.result.stderr[-4000:])
    record = {**cl.metadata(job, threads), **pressure, **extra}
    return job.result.stdout.rstrip("\n") + "\n" + cluster.dumps_record(record) + "\n"


def read_output(raw: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the tool's JSON records, the harness record); ValueError on unreadable lines."""
    records, harness = [], {}
    for line in raw.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"unreadable JSON line {line[:80]!r}: {exc}") from None
        if set(rec) == {"virtbench"}:
            harness.update(rec["virtbench"])  # later harness lines (e.g. result digests) add to the first
        else:
            records.append(rec)
    return records, harness


def verified_record(raw: str, tool: str, select, required: set[str],
                    want: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A verifying kernel's one JSON record (the one `select` accepts) and its sample metadata:
    ValueError unless it has the `required` keys, ran what `want` asked for and says true or false
    in "verified"; the metadata carries the harness record, "verified", "verify" and the code's version."""
    records, harness = read_output(raw)
    recs = [r for r in records if select(r)]
    if len(recs) != 1:
        raise ValueError(f"expected one JSON record from {tool}, got {len(recs)}")
    rec = recs[0]
    missing = (required | set(want) | {"verified"}) - set(rec)
    if missing:
        raise ValueError(f"{tool} record lacks {', '.join(sorted(missing))}")
    got = tuple(rec[k] for k in want)
    if got != tuple(want.values()):
        raise ValueError(f"{tool} ran {'/'.join(want)} {got}, expected {tuple(want.values())}")
    if not isinstance(rec["verified"], bool):
        raise ValueError(f"{tool} 'verified' is {rec['verified']!r}, not true or false")
    meta = harness_metadata(harness)
    meta.update(verified=rec["verified"], verify=rec.get("verify") or {}, code_version=rec.get("version"))
    return rec, meta


def warn_unverified(rec: dict[str, Any], meta: dict[str, Any], consequence: str) -> None:
    """A failed verification leads the warnings: the first failed checks, then `consequence`."""
    if rec["verified"]:
        return
    verify = rec.get("verify") or {}
    failed = [c for c in rec.get("checks") or [verify] if c and not c.get("passed", False)] or [verify]
    what = "; ".join(f"{c.get('check')} = {c.get('value')!r}, reference {c.get('reference')!r}, "
                     f"relative error {c.get('rel_err') if c.get('rel_err') is not None else float('inf'):.3g}"
                     f" > {c.get('epsilon')}" for c in failed[:3])
    meta["warnings"] = [f"verification FAILED ({what}): {consequence}", *meta["warnings"]]


# The plan's model of an MPI job (run/estimates.py; history replaces it after one run): mpirun's start
# and the harness around one repetition. A singleton vb-npb took 0.5-1.1 s beyond its timed section
# here, a 2-rank vb-mpibench under mpirun about 1.5 s.
MODEL_START_S = 1.5


def model_seconds(params: dict[str, Any], one_core_s: float) -> float:
    """One repetition: `one_core_s` of work on one core, shared over the ranks x threads the machine
    can run at once (oversubscribed ranks take turns), plus the start."""
    return MODEL_START_S + one_core_s / max(1, min(params["ranks"] * params["threads"], machine_cores()))


def scaled_timeout(params: dict[str, Any], seconds: float) -> float:
    """Seconds a repetition may take: `seconds` on one core of a slow machine, stretched when ranks
    x threads exceed the cores and shrunk (at most 4x) by the square root of the cores used."""
    cores = min(params["ranks"] * params["threads"], machine_cores())
    over = max(1.0, params["ranks"] * params["threads"] / machine_cores())
    return seconds * over * max(1.0, 4 / math.sqrt(cores)) + 60


def harness_metadata(harness: dict[str, Any]) -> dict[str, Any]:
    """Sample metadata from the harness record: placement, cluster facts, memory pressure, warnings."""
    keep = ("cluster_mode", "cluster_instances", "placement", "ranks_per_instance", "threads_per_rank",
            "instance_vcpus", "oversubscribed", "machine_oversubscribed", "mpirun", "memory_pressure", "memory",
            "cluster_network", "memory_check")
    meta = {k: harness[k] for k in keep if k in harness}
    warnings = list(harness.get("warnings") or [])
    if harness.get("oversubscription"):
        warnings.append(harness["oversubscription"])
    elif harness.get("oversubscribed"):  # records written before the sentence was
        warnings.append("oversubscribed: ranks x threads exceed the vCPUs; ranks wait for each other's CPU")
    meta["warnings"] = warnings
    return meta
