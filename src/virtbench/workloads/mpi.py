"""MPI micro-benchmarks through virtbench's own `vb-mpibench` (native/mpibench): the IMB-MPI1 set
(PingPong, Sendrecv, Exchange, Bcast, Reduce, Allreduce, Allgather, Alltoall, Gather, Scatter,
Barrier) over a message-size sweep, IMB-style (study 001 item 2, issue 13).

One mpirun measures every size from 0 to max_bytes; each size becomes its own result row because
`series_key = "bytes"` makes the sample's `bytes` part of the row identity (analysis adds it to the
row's params). Ranks go round robin over the instances by default, so PingPong's ranks 0 and 1 sit
on different instances whenever there are two or more.
"""

from __future__ import annotations

from typing import Any

from ..model import EnvSpec, Sample
from ..sizes import BINARY, parse_suffixed
from . import mpijob
from .base import MetricSpec, Param, RunContext, Workload

OPS = ("pingpong", "sendrecv", "exchange", "bcast", "reduce", "allreduce", "allgather", "alltoall", "gather",
       "scatter", "barrier")
STUDY_OPS = ("pingpong", "bcast", "reduce", "allreduce")  # study 001's table; the default
MAX_BYTES = 1 << 30  # vb-mpibench's limit (MPI int counts)
# Messages counted for MB/s, as IMB defines it (Sendrecv 2X/t, Exchange 4X/t); Bcast, Reduce and Allreduce
# X/t as study 001's table has them; the others report time only.
MB_FACTOR = {"pingpong": 1, "sendrecv": 2, "exchange": 4, "bcast": 1, "reduce": 1, "allreduce": 1}
# Buffers per rank in messages of max_bytes: (send, receive); None = one per rank.
BUFFERS = {"pingpong": (1, 1), "sendrecv": (1, 1), "exchange": (1, 2), "bcast": (1, 0), "reduce": (1, 1),
           "allreduce": (1, 1), "allgather": (1, None), "alltoall": (None, None), "gather": (1, None),
           "scatter": (None, 1), "barrier": (0, 0)}


_KMG = {u: BINARY[u] for u in ("", "k", "m", "g")}  # what vb-mpibench reads


def message_size(value: Any) -> int:
    """Bytes: a whole number or one with a binary suffix K, M, G (as vb-mpibench reads them)."""
    try:
        n = parse_suffixed(value, _KMG, ignore_case=True, ib=True)
    except ValueError:
        raise ValueError(f"{value!r} is not a size such as 4096, 64K, 4M or 1G") from None
    if not 0 <= n <= MAX_BYTES:
        raise ValueError(f"{n} bytes is outside 0 .. 1G")
    return n


message_size.__name__ = "size"


def sizes(op: str, min_bytes: int, max_bytes: int) -> list[int]:
    """The sizes vb-mpibench measures: 0, then powers of two from max(min, 1 or 4) to max (Barrier: 0 only)."""
    if op == "barrier":
        return [0]
    size = 1
    while size < max(min_bytes, 4 if op in ("reduce", "allreduce") else 1):
        size *= 2
    out = [0]
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


class MPIBench(Workload):
    name = "mpi"
    description = ("MPI PingPong, Sendrecv, Exchange and the collectives over message sizes (IMB-MPI1 set and "
                   "methodology), across instances")
    series_key = "bytes"
    params = (
        Param("op", str, list(STUDY_OPS), "operation (default: study 001's four)", choices=OPS),
        Param("min_bytes", message_size, 1, "smallest non-zero message size (rounded up to a power of two; 0 is always "
              "measured)"),
        Param("max_bytes", message_size, 1 << 22, "largest message size (K, M, G suffixes are binary); at most 1G"),
        *mpijob.cluster_params(ranks=2, instances=1),
        mpijob.TRANSPORT,
        Param("map_by", str, "node", "rank placement: node = round robin over instances (IMB: one rank per node), "
              "slot = fill each instance in turn", choices=("node", "slot")),
        Param("time_budget", float, 0.2, "at most about this many seconds per size (cuts IMB's count)", min=0.001,
              max=60),
        Param("iterations", int, 0, "fixed calls per size; 0 = IMB's rule (1000, at most 40 MiB / size), cut to "
              "time_budget", min=0, max=1_000_000),
    )
    metrics = (
        MetricSpec("time_us", "us", False, "t_avg: time per call (PingPong: half round trip) as the mean over "
                   "the ranks of each rank's whole timed loop / calls; t_min/t_max over ranks in metadata"),
        MetricSpec("bandwidth_mbps", "MB/s", True, "IMB's throughput, 1 MB = 10^6 bytes: X/t_avg (Sendrecv 2X, "
                   "Exchange 4X); Bcast/Reduce/Allreduce X/t_avg as in study 001; none for the other collectives"),
    )

    def validate(self, params: dict[str, Any]) -> None:
        if params["op"] == "pingpong" and params["ranks"] < 2:
            raise ValueError("pingpong needs at least 2 ranks")
        if params["min_bytes"] > params["max_bytes"]:
            raise ValueError(f"min_bytes ({params['min_bytes']}) is above max_bytes ({params['max_bytes']})")
        mpijob.check_layout(params)
        mpijob.check_machine_memory(self._per_rank(params) * params["ranks"],
                                    f"{params['op']} up to {params['max_bytes']} bytes on {params['ranks']} ranks")

    @staticmethod
    def _per_rank(params: dict[str, Any]) -> float:
        """Send + receive buffers at the largest size (gather, alltoall ...: one message per rank)."""
        messages = sum(params["ranks"] if n is None else n for n in BUFFERS[params["op"]])
        return float(messages * params["max_bytes"]) + mpijob.MPI_RUNTIME_PER_RANK

    def check_capacity(self, params: dict[str, Any], env: EnvSpec) -> list[str]:
        per = params["ranks"] // params["instances"]
        return mpijob.capacity_problems(params, env, self._per_rank(params) * per,
                                        f"{params['op']} up to {params['max_bytes']} bytes")

    def roles(self, params: dict[str, Any]) -> dict[str, int]:
        return {"node": params["instances"]}

    def timeout(self, params: dict[str, Any]) -> float:
        n = len(sizes(params["op"], params["min_bytes"], params["max_bytes"]))
        # calibration probes + warm-up + the budget per size, and the biggest messages at ~20 MB/s
        big = sum(s for s in sizes(params["op"], params["min_bytes"], params["max_bytes"])) / 20e6
        per_size = params["time_budget"] * 3 if not params["iterations"] else 1.0
        return n * (per_size + 0.5) + big * 12 + 120

    def expected_seconds(self, params: dict[str, Any]) -> float | None:
        # the plan's model: each size takes about twice its time budget (calibration probe, warm-up,
        # the measured calls) plus 0.1 s, or its fixed count; the largest messages move at ~1 GB/s
        # (measured: pingpong, 22 sizes to 1 MiB, time_budget 0.1: 8.3-11.2 s a repetition, load 9)
        szs = sizes(params["op"], params["min_bytes"], params["max_bytes"])
        per_size = 2 * params["time_budget"] if not params["iterations"] else 0.05
        return mpijob.MODEL_START_S + len(szs) * (per_size + 0.1) + sum(szs) * 4 / 1e9

    def execute(self, instances, params: dict[str, Any], ctx: RunContext) -> str:
        cl = mpijob.get_cluster(instances, params)
        argv = [cl.launcher.bin("vb-mpibench"), params["op"], "--min-bytes", str(params["min_bytes"]),
                "--max-bytes", str(params["max_bytes"]), "--time-budget", str(params["time_budget"])]
        if params["iterations"]:
            argv += ["--iterations", str(params["iterations"])]
        return mpijob.run(cl, argv, params, ctx, "vb-mpibench", map_by=params["map_by"])

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        records, harness = mpijob.read_output(raw)
        recs = [r for r in records if "op" in r]
        if not recs:
            raise ValueError("vb-mpibench printed no records")
        want = sizes(params["op"], params["min_bytes"], params["max_bytes"])
        if [r.get("bytes") for r in recs] != want:
            raise ValueError(f"vb-mpibench measured sizes {[r.get('bytes') for r in recs]}, expected {want}")
        meta = mpijob.harness_metadata(harness)
        out = []
        for r in recs:
            missing = {"op", "bytes", "ranks", "iterations", "t_min_us", "t_avg_us", "t_max_us", "mbps"} - set(r)
            if missing:
                raise ValueError(f"vb-mpibench record lacks {', '.join(sorted(missing))}")
            if r["op"] != params["op"] or r["ranks"] != params["ranks"]:
                raise ValueError(f"vb-mpibench ran {r['op']} on {r['ranks']} ranks, expected {params['op']} on "
                                 f"{params['ranks']}")
            m = {**meta, "bytes": r["bytes"], "t_min_us": r["t_min_us"], "t_max_us": r["t_max_us"],
                 "iterations": r["iterations"], "code_version": r.get("version")}
            out.append(Sample("time_us", r["t_avg_us"], "us", False, m))
            factor = MB_FACTOR.get(r["op"])
            if factor and r["bytes"] and r["t_avg_us"] > 0:
                # bytes per microsecond = MB/s (10^6 bytes); from t_avg (1 ns resolution) rather than the
                # printed mbps (3 decimals), so tiny messages do not round to 0
                out.append(Sample("bandwidth_mbps", factor * r["bytes"] / r["t_avg_us"], "MB/s", True, dict(m)))
        return out
