"""NAS Parallel Benchmarks: the generic tables and charts, then the multi-zone codes' times beside study
001's single-node NPB-MZ table (SP-MZ, BT-MZ class C, MPI x 2 OpenMP threads on bare metal, Xen PV/HVM
and EC2), matched by kind of environment, with each side's ratio to its bare-metal row."""

from __future__ import annotations

from collections import defaultdict

from ...studies import published
from .. import fmt
from ..data import RunData
from ..model import Section, Table
from . import generic

MZ = ("001", "Single-node NPB-MZ class C and Bloss")
COLUMNS = {"sp-mz": "SP-MZ", "bt-mz": "BT-MZ"}
REF_ROW = "BMM"


def build(data: RunData, rows: list[dict]) -> Section:
    section = generic.build(data, rows)
    mz = [r for r in rows if r["metric"] == "time" and r["n"] and r["params"].get("kernel") in COLUMNS]
    if mz:
        section.blocks.insert(0, beside_study(data, mz, lambda r: COLUMNS[r["params"]["kernel"]],
                                              "published time [s] (class C, 2 threads per rank)", "NPB-MZ times"))
    return section


def beside_study(data: RunData, rows: list[dict], column_of, published_header: str, what: str) -> Table:
    """Our time rows beside study 001's single-node table: `column_of(row)` names the study's column."""
    pub = published.table(*MZ)
    by_kind: dict[str, list[str]] = defaultdict(list)
    for prow, kind in pub.kinds.items():
        by_kind[kind].append(prow)
    cells, keys = [], []
    order = {e: i for i, e in enumerate(data.env_order)}
    for r in sorted(rows, key=lambda r: (column_of(r), r["params"].get("class", ""),
                                         r["params"].get("ranks", 0), r["params"].get("threads", 0),
                                         order.get(r["environment"], 99))):
        col = column_of(r)
        p = r["params"]
        kind = data.env(r["environment"])["driver"]
        for prow in by_kind.get(kind) or [None]:
            pv = pub.value(prow, col) if prow else None
            pub_ratio = pv / pub.value(REF_ROW, col) if pv else None
            cells.append([col, f"{p.get('class')} · {p.get('ranks')} x {p.get('threads')}", r["environment"],
                          fmt.value(r["median"]), fmt.value(r["ci_low"]), fmt.value(r["ci_high"]),
                          fmt.ratio(r["ratio"]), prow or f"none: the study had no {kind} environment",
                          "-" if pv is None else f"{pv:g}", fmt.ratio(pub_ratio)])
            keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
    return Table(f"{what} beside {pub.cite()}",
                 ["code", "our class · ranks x threads", "our environment", "our time [s]", "CI low", "CI high",
                  f"our ratio to {data.baseline}", "published row", published_header,
                  f"published ratio to {REF_ROW}"], cells, keys, numeric={3, 4, 5, 6, 8, 9},
                 note=(f"{pub.notes} Rows are matched by kind: host = BMM (bare metal), vm = PVM and HVM (Xen). "
                       "Our classes are scaled to this machine, so compare the ratios (time / bare-metal time, "
                       "> 1 is slower), not the times."))
