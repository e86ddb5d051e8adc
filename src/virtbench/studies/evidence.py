"""A reproduce run's stored measurements -> score.Evidence (the children's samples as groups)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

from .. import workloads
from ..store import Store
from .score import Evidence, Group


def collect(store: Store, run_id: str) -> Evidence:
    from ..reproduce import experiments_done

    spec = store.run(run_id)["spec"]
    notes: dict[str, str] = {}
    for p in spec.get("plan", []):
        if p["tier"] is None:
            notes[p["id"]] = f"experiment {p['id']} left out: {p['left_out']}"
    groups: list[Group] = []
    for exp_id, d in experiments_done(store, run_id).items():
        if d["status"] != "ok":
            notes[exp_id] = f"experiment {exp_id} {d['status']}: {d.get('reason') or 'no reason recorded'}"
        if d.get("child"):
            groups += child_groups(store, exp_id, d["child"])
    return Evidence(groups, dict(spec.get("facts", {})), notes)


def child_groups(store: Store, experiment: str, child_id: str) -> list[Group]:
    """Every (cell, series point, environment, metric) of one child run with its values."""
    spec = store.run(child_id)["spec"]
    if spec.get("kind") == "boot":
        kinds = {spec["boot"]["driver"]: spec["boot"]["driver"]}
    else:
        kinds = {e["name"]: e["driver"] for e in spec["environments"]}
    cells = {c["key"]: c for c in spec["cells"]}
    acc: dict[tuple, dict[str, Any]] = {}
    for s in store.samples(child_id):
        cell = cells.get(s["cell_key"])
        if cell is None:
            continue
        meta = json.loads(s["metadata_json"])
        params = dict(cell["params"])
        try:
            skey = workloads.get(cell["workload"]).series_key
        except KeyError:
            skey = None
        if skey and skey in meta:
            params[skey] = meta[skey]
        key = (s["cell_key"], json.dumps(params, sort_keys=True, default=str), s["environment"], s["metric"])
        g = acc.get(key)
        if g is None:
            g = acc[key] = {"group": Group(experiment, cell["workload"], params, dict(cell["condition"]),
                                           s["environment"], kinds.get(s["environment"], s["environment"]),
                                           s["metric"], s["unit"], bool(s["higher_is_better"]), []),
                            "reps": [], "limits": []}
            for k in ("accelerator", "backend"):  # emulation (TCG, a local EC2 stand-in) is never scored
                if meta.get(k):
                    g["group"].meta[k] = meta[k]
            if meta.get("monitor") and meta.get("instances"):  # how many series a role's summary adds up
                g["group"].meta["monitor_instances"] = int(meta["instances"])
            if spec.get("kind") != "boot":  # a cell's environments run in lockstep rounds: its groups pair
                g["group"].meta["rounds_of"] = f"{child_id}|{key[0]}|{key[1]}"
        g["group"].values.append(float(s["value"]))
        g["reps"].append(meta.get("repetition", s["repetition"]))
        g["limits"].append(meta.get("mem_limit_mib"))
    for g in acc.values():
        g["group"].rounds = list(g["reps"])
        if all(isinstance(x, (int, float)) for x in g["limits"]):  # a peak of memory used: the memory it had
            g["group"].meta["mem_limit_mib"] = [float(x) for x in g["limits"]]
    groups = [g["group"] for g in acc.values()]
    return groups + _index_groups(acc)


def _index_groups(acc: dict[tuple, dict[str, Any]]) -> list[Group]:
    """Workloads with an index (UnixBench-style): one 'index' group per cell without its test param and
    environment, one value per repetition: the geometric mean of score / baseline x 10 over the tests."""
    per: dict[tuple, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    proto: dict[tuple, Group] = {}
    for (_, _, env, metric), item in acc.items():
        g = item["group"]
        try:
            wl = workloads.get(g.workload)
        except KeyError:
            continue
        base = wl.index_baselines.get(metric)
        if not base or not wl.index_param:
            continue
        rest = {k: v for k, v in g.params.items() if k != wl.index_param}
        key = (g.experiment, g.workload, json.dumps(rest, sort_keys=True, default=str), json.dumps(g.condition, sort_keys=True), env)
        for rep, v in zip(item["reps"], g.values):
            if v > 0:
                per[key][rep].append(math.log(v / base * 10))
        proto.setdefault(key, Group(g.experiment, g.workload, rest, g.condition, env, g.kind, "index", "index",
                                    True, [], dict(g.meta)))
    out = []
    for key, reps in per.items():
        counts = {len(v) for v in reps.values()}
        full = max(counts)
        g = proto[key]
        g.values = [math.exp(sum(v) / len(v)) for v in reps.values() if len(v) == full]
        out.append(g)
    return out
