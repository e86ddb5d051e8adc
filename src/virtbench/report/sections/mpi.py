"""MPI micro-benchmarks (study 001 item 2): time and bandwidth against message size on log axes,
one chart per operation, and our throughput at the largest size beside the study's 1 GB table."""

from __future__ import annotations

import json
from collections import defaultdict

from ...studies import published
from .. import fmt
from ..data import RunData
from ..model import Note, Section, Table
from .common import describe
from .study import all_results, curve, published_table, sid

# IMB's names for every operation vb-mpibench runs; the study's table has only the first four.
OPS = {"pingpong": "PingPong", "bcast": "Bcast", "reduce": "Reduce", "allreduce": "Allreduce",
       "sendrecv": "Sendrecv", "exchange": "Exchange", "allgather": "Allgather", "alltoall": "Alltoall",
       "gather": "Gather", "scatter": "Scatter", "barrier": "Barrier"}
STUDY_OPS = ("pingpong", "bcast", "reduce", "allreduce")
SWEEP = ("bytes", "min_bytes", "max_bytes", "time_budget", "iterations", "op")
IMB = ("001", "IMB throughput at 1 GB")
GIB = 1 << 30


def _size(n: float) -> str:
    n = int(n)
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def build(data: RunData, rows: list[dict]) -> Section:
    section = Section(sid(data, "mpi"), "MPI micro-benchmarks (study 001)", intro=(
        "Each operation's time per call (PingPong: half the round trip) and throughput against the message "
        "size, IMB-style, with CIs (95 %, or the lower level a row's notes give); both axes logarithmic. Zero-byte messages (pure latency) "
        "are in the tables only. Then our throughput at the largest size beside the study's table at 1 GB."))
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if "bytes" in r["params"] and r["metric"] in ("time_us", "bandwidth_mbps"):
            rest = {k: v for k, v in r["params"].items() if k not in SWEEP}
            groups[json.dumps([r["params"].get("op"), rest, r["condition"]], sort_keys=True)].append(r)
    varying = _varying([json.loads(k)[1:] for k in groups])
    for key, grp in groups.items():
        op, rest, condition = json.loads(key)
        where = describe({k: v for k, v in rest.items() if k in varying}, condition)
        name = OPS.get(op, op) + (f" ({where})" if where else "")
        for metric, what in (("time_us", "time per call"), ("bandwidth_mbps", "throughput")):
            pts = [(float(r["params"]["bytes"]), r["environment"], r) for r in grp
                   if r["metric"] == metric and r["params"]["bytes"] > 0 and r["n"]]
            if pts:
                section.blocks.append(curve(
                    data, sid(data, "mpi", op, metric, where), f"MPI {name}: {what} against message size", pts,
                    "message size [bytes]", log_x=True, log_y=True, x_text=lambda x: str(int(x))))
        zero = [r for r in grp if r["metric"] == "time_us" and r["params"]["bytes"] == 0 and r["n"]]
        if zero:
            t = all_results(data, f"MPI {name}: zero-byte messages (latency)", zero,
                            lambda r: [r["metric"]], ["metric"])
            t.caption, t.collapsed = f"MPI {name}: zero-byte messages (latency)", False
            section.blocks.append(t)
    section.blocks += _beside_study(data, [r for g in groups.values() for r in g])
    section.blocks.append(all_results(data, "mpi", rows, lambda r: [r["params"].get("op", ""), r["metric"],
                                                                     str(r["params"].get("bytes", ""))],
                                      ["op", "metric", "bytes"]))
    return section


def _varying(keys: list[list]) -> set[str]:
    """Settings (other than op and size) that differ between the groups: they go in the titles."""
    if len(keys) < 2:
        return set()
    merged = [k[0] for k in keys]
    names = {n for m in merged for n in m}
    return {n for n in names if len({json.dumps(m.get(n)) for m in merged}) > 1}


def _beside_study(data: RunData, rows: list[dict]) -> list:
    pub = published.table(*IMB)
    ref_row = "BMM"
    bw = [r for r in rows if r["metric"] == "bandwidth_mbps" and r["n"] and r["params"].get("op") in STUDY_OPS]
    if not bw:
        return [published_table(pub), Note("No throughput results in this run to put beside the study's.")]
    top = max(r["params"]["bytes"] for r in bw)
    largest = [r for r in bw if r["params"]["bytes"] == top]
    by_kind: dict[str, list[str]] = defaultdict(list)
    for row, kind in pub.kinds.items():
        by_kind[kind].append(row)
    cells, keys = [], []
    for r in sorted(largest, key=lambda r: (list(OPS).index(r["params"]["op"]),
                                            data.env_order.index(r["environment"]) if r["environment"] in
                                            data.env_order else 99)):
        col = OPS[r["params"]["op"]]
        kind = data.env(r["environment"])["driver"]
        matches = by_kind.get(kind) or [None]
        for prow in matches:
            pv = pub.value(prow, col) if prow else None
            s = published.scale_factor(r["median"], pv) if prow else None
            pub_ratio = pv / pub.value(ref_row, col) if prow and pv else None
            cells.append([col, r["environment"], _size(top), fmt.value(r["median"]), fmt.value(r["ci_low"]),
                          fmt.value(r["ci_high"]), fmt.ratio(r["ratio"]),
                          prow or f"none: the study had no {kind} environment", "-" if pv is None else f"{pv:g}",
                          fmt.ratio(pub_ratio), fmt.value(s)])
            keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
    share = f"1/{GIB // top}" if top and GIB % top == 0 else f"{top / GIB:.3g}"
    size_note = ("" if top == GIB else
                 f" Our largest message is {_size(top)}, the study's 1 GiB ({share} of it): at a smaller "
                 "size the throughput is lower on any platform, so s mixes the size difference with the hardware's; "
                 "compare the ratios.")
    table = Table(f"MPI throughput at our largest message size beside {pub.cite()} [MB/s]",
                  ["operation", "our environment", "our size", "our MB/s", "CI low", "CI high",
                   f"our ratio to {data.baseline}", "published row", "published MB/s at 1 GB",
                   f"published ratio to {ref_row}", "scale factor s"], cells, keys, numeric={3, 4, 5, 6, 8, 9, 10},
                  note=(f"{pub.notes} Rows are matched by kind: host = BMM (bare metal), vm = PVM and HVM (Xen). "
                        "Scale factor s = our MB/s / published MB/s for the same kind of environment; published x s "
                        "places a published figure on our scale. Ratios are compared unscaled." + size_note))
    return [table, published_table(pub)]
