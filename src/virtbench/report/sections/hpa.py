"""Hash Partitioned Apriori (study 003 item 2): execution time against dataset size per storage
condition (local, remote, remote + delay) and against the delay, the CPU and network use the monitor
saw, whether every environment found the same itemsets, and our datasets beside the study's."""

from __future__ import annotations

import json
from collections import defaultdict

from ...studies import published
from .. import fmt
from ..data import RunData
from ..model import Note, Section, Table
from .common import describe
from .study import all_results, curve, number, published_table, sid

HIDE = ("transactions", "seed", "avg_size", "pattern_size", "confidence", "total_vcpus")
DATASETS = ("003", "HPA datasets")
FINDING = ("003", "HPA execution time against iSCSI delay")
DELAY_KEYS = ("delay_ms", "storage_delay_ms")


def _storage(condition: dict) -> str:
    """The storage condition a result ran under, without the delay (that is the other axis)."""
    return describe({}, {k: v for k, v in condition.items() if k not in DELAY_KEYS and not k.startswith("measured")})


def build(data: RunData, rows: list[dict]) -> Section:
    section = Section(sid(data, "hpa"), "Parallel data mining: HPA (study 003)", intro=(
        "vb-hpa's execution time (reading, all mining passes, rules) against the number of transactions, one "
        "line per environment and storage condition, and against the storage delay where the run has one, with "
        "CIs (95 %, or the lower level a row's notes give); then what the monitor measured (CPU, network) and the study's datasets beside ours."))
    timed = [r for r in rows if r["metric"] == "time" and r["n"] and number(r["params"].get("transactions"))]
    # time against transactions: one chart per (other parameters, delay), lines = environment x storage
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in timed:
        rest = {k: v for k, v in r["params"].items() if k not in HIDE}
        delay = {k: r["condition"][k] for k in DELAY_KEYS if k in r["condition"]}
        groups[json.dumps([rest, delay], sort_keys=True)].append(r)
    for key, grp in groups.items():
        if len({r["params"]["transactions"] for r in grp}) < 2:
            continue
        rest, delay = json.loads(key)
        where = describe(rest, delay, hide=("items", "support"))
        pts = [(float(r["params"]["transactions"]), _line(r), r) for r in grp]
        section.blocks.append(curve(data, sid(data, "hpa", "transactions", where),
                                    "HPA: time against transactions" + (f" ({where})" if where else ""), pts,
                                    "transactions", x_text=lambda x: str(int(x))))
    # time against delay: one chart per (other parameters), lines = environment x transactions x storage
    by_delay: dict[str, list[dict]] = defaultdict(list)
    for r in timed:
        d = next((k for k in DELAY_KEYS if number(r["condition"].get(k)) is not None), None)
        if d:
            rest = {k: v for k, v in r["params"].items() if k not in HIDE}
            by_delay[json.dumps([rest, d], sort_keys=True)].append(r)
    for key, grp in by_delay.items():
        rest, d = json.loads(key)
        if len({number(r["condition"][d]) for r in grp}) < 2:
            continue
        where = describe(rest, {}, hide=("items", "support"))
        pts = [(number(r["condition"][d]), f"{_line(r)} · {r['params']['transactions']} tx", r) for r in grp]
        section.blocks.append(curve(data, sid(data, "hpa", "delay", where),
                                    "HPA: time against storage delay" + (f" ({where})" if where else ""), pts,
                                    f"one-way delay [{d}]", log_x=False, log_y=False))
    if not section.blocks and timed:
        section.blocks.append(Note("One dataset size and no delay sweep: no curve to draw (the tables have "
                                   "every result)."))
    section.blocks += _monitor_table(data, rows, timed)
    section.blocks += _passes_table(timed)
    section.blocks += _same_itemsets(data, rows)
    section.blocks += _beside_study(data, timed)
    section.blocks.append(all_results(data, "hpa", rows, lambda r: [
        r["metric"], str(r["params"].get("transactions", "")), describe({}, r["condition"])],
        ["metric", "transactions", "condition"]))
    return section


def _line(r: dict) -> str:
    storage = _storage(r["condition"])
    return r["environment"] + (f" · {storage}" if storage else "")


def _monitor_table(data: RunData, rows: list[dict], timed: list[dict]) -> list:
    """Per timed result: the monitor's CPU and network figures of the same cell and environment."""
    by = defaultdict(dict)
    for r in rows:
        if r["n"] and (r["metric"].endswith(".cpu_util_mean") or r["metric"].endswith(".net_peak")):
            by[(r["cell_key"], r["environment"])][r["metric"]] = r
    metrics = sorted({m for d in by.values() for m in d}, key=lambda m: (not m.endswith("cpu_util_mean"), m))
    if not metrics or not timed:
        return []
    cells, keys = [], []
    for r in timed:
        mon = by.get((r["cell_key"], r["environment"]), {})
        vals = []
        for m in metrics:
            x = mon.get(m)
            if x is None:
                vals.append("-")
            elif m.endswith("cpu_util_mean"):
                vals.append(f"{x['median'] * 100:.0f} %")
            else:
                vals.append(f"{fmt.value(x['median'])} {x['unit']}")
        cells.append([str(r["params"]["transactions"]), describe({}, r["condition"]), r["environment"],
                      fmt.value(r["median"]), *vals])
        keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
    return [Table("HPA: time and what the monitor measured", ["transactions", "condition", "environment",
                                                             "time [s] (median)", *metrics], cells, keys,
                  numeric=set(range(3, 4 + len(metrics))),
                  note="Medians over the repetitions. *.cpu_util_mean: mean CPU use of that role during the run "
                       "(host = the whole machine); *.net_peak: the highest 1-second network rate. The study "
                       "found HPA CPU-bound (~100 % CPU) with peak network ~60 MB/s (dom0) and 45 + 24 MB/s (domU).")]


PASS_COLUMNS = (("candidates", "candidates"), ("frequent", "frequent"), ("time_s", "time [s]"),
                ("count_s", "counting [s]"), ("exchange_s", "exchange [s]"), ("bytes_sent", "MB sent"),
                ("imbalance", "imbalance"))


def _passes_table(timed: list[dict]) -> list:
    """Per timed result and mining pass: medians over the repetitions of the time, its counting and
    exchange parts and the bytes every rank sent (vb-hpa output v2; older runs show what they have)."""
    cells, keys = [], []
    for r in timed:
        for p in r["metadata"].get("pass_medians") or []:
            vals = []
            for field, _ in PASS_COLUMNS:
                v = p.get(field)
                vals.append("-" if v is None else f"{v / 1e6:.3g}" if field == "bytes_sent" else fmt.value(v))
            cells.append([str(r["params"].get("transactions")), str(r["params"].get("ranks")), r["environment"],
                          describe({}, r["condition"]), str(p["pass"]), *vals])
            keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
    if not cells:
        return []
    return [Table("HPA: each mining pass (medians over the repetitions)",
                  ["transactions", "ranks", "environment", "condition", "pass k",
                   *(label for _, label in PASS_COLUMNS)], cells, keys, numeric=set(range(4, 5 + len(PASS_COLUMNS))),
                  note="Pass k counts the candidate k-itemsets. counting and exchange are rank 0's (exchange includes "
                       "waiting for the other ranks); MB sent: by all ranks together (10^6 bytes); imbalance: the "
                       "busiest rank's share of the counted subsets over the mean (1 = even). Where exchange "
                       "dominates, the network path matters; where counting does, the CPU.")]


def _same_itemsets(data: RunData, rows: list[dict]) -> list:
    sums: dict[str, dict[str, str]] = defaultdict(dict)
    for r in rows:
        digest = r["metadata"].get("itemsets_sha256")
        if r["metric"] == "time" and digest:
            sums[r["cell_key"]][r["environment"]] = digest
    differ = [k for k, d in sums.items() if len(set(d.values())) > 1]
    compared = [k for k, d in sums.items() if len(d) > 1]
    if differ:
        return [Note(f"{len(differ)} dataset(s) gave different frequent itemsets in different environments "
                     "(SHA-256 of the itemsets differ): a result is wrong somewhere.", "warn")]
    if compared:
        return [Note(f"Every environment found exactly the same frequent itemsets for each of the {len(compared)} "
                     "dataset(s) run in more than one (SHA-256 of the itemsets compared).")]
    return []


def _beside_study(data: RunData, timed: list[dict]) -> list:
    pub = published.table(*DATASETS)
    ours = sorted({int(r["params"]["transactions"]) for r in timed})
    theirs = list(pub.rows)
    cells = []
    paired = len(ours) == len(theirs)
    for i, row in enumerate(theirs):
        tx = pub.value(row, "transactions")
        mine = ours[i] if paired else None
        cells.append([pub.cite(), row, f"{tx:,.0f}", f"{pub.value(row, 'MB per node'):g}",
                      f"{mine:,}" if mine else "-", fmt.ratio(mine / tx) if mine else "-"])
    note = (f"{pub.notes} Scale factor = our transactions / the study's, dataset by dataset."
            if paired else f"{pub.notes} This run's datasets ({', '.join(f'{t:,}' for t in ours) or 'none'}) are "
                           f"not the study's four sizes scaled, so no scale factor is given.")
    return [Table(f"Published beside ours: {pub.cite()}", ["source", "published dataset", "transactions",
                                                           "MB per node", "our transactions", "scale factor"],
                  cells, numeric={2, 3, 4, 5}, note=note),
            published_table(published.table(*FINDING))]
