"""A reproduce run in the report: the scorecard first, then the plan, then each experiment's run."""

from __future__ import annotations

from ..store import Store
from .fmt import seconds
from .model import Note, Part, Section, Table

VERDICT_MARK = {"holds": "holds", "differs": "DIFFERS", "not measured": "not measured"}


def is_reproduce(run: dict) -> bool:
    return run["spec"].get("kind") == "reproduce"


def part(store: Store, run_id: str) -> tuple[Part, list[str]]:
    """The scorecard and plan part of a reproduce run, and the ids of its experiments' runs."""
    from ..studies import card, codeversion

    data = card.result(store, run_id)
    c = data["counts"]
    rows, keys = [], []
    for v in data["scorecard"]:
        said = (v["measured"] + (f"; interval at {v['level']:.1%}" if v.get("level") else "")
                if v["verdict"] != "not measured" else v["reason"])
        verdict = VERDICT_MARK[v["verdict"]] + "".join(
            f" (finding revised {r['date']}: {r['change']}; why: {r['why']})" for r in v.get("revised") or [])
        words = (f": \u201c{v['quote']}\u201d" if v.get("quote") else "") + (
            f" ({v['quote_en']})" if v.get("quote_en") and v.get("quote_en") != v.get("quote") else "")
        rows.append([v["finding"], v["study"], verdict, said, v["tolerance"], v["cite"] + words])
        keys.append({"claim": v["id"], "verdict": v["verdict"]})
    score = Table("Scorecard: each published finding of the studies, checked against this run's measurements",
                  ["finding", "study", "verdict", "measured (interval, at its level: 95 % or more) / why not measured", "holds if",
                   "where and how the study says it"], rows, keys=keys,
                  note="Findings and tolerances are the study files' as this run recorded them ("
                       + ("; ".join(f"{f['path']} sha256 {f['sha256'][:16]}" for f in data.get("study_files") or [])
                          or "studies/NNN.toml") + "); scored by "
                       + codeversion.describe(data["scoring"]["scored_with"])
                       + (f" ({data['scoring']['note']})" if data["scoring"]["note"] else
                          ", the scoring code the run was recorded with")
                       + ". A finding revised after results were seen says so beside "
                       "its verdict. Emulated (TCG) VMs never count for or against a finding about "
                       "hardware virtualization.")
    facts = data.get("facts") or {}
    intro = (f"{c['holds']} hold, {c['differs']} differ, {c['not measured']} not measured. Budget "
             f"{seconds(data['budget_s'])}, took {seconds(data['elapsed_s'])}; run {data['status']}. QEMU accelerator "
             f"here: {facts.get('accelerator')}; cluster: "
             f"{(facts.get('cluster_detail') or 'yes') if facts.get('cluster') else 'none given'}; "
             f"NFS client: {'yes' if facts.get('nfs') else 'no'}"
             + (f" ({facts['nfs_detail']})" if facts.get("nfs_detail") and not facts.get("nfs") else "") + ".")
    plan_rows, children = [], []
    for p in data["plan"]:
        scale = p.get("ran_scale") or p["scale"] or "-"
        plan_rows.append([p["id"], p["study"], ", ".join(p["environments"]), scale,
                          seconds(p["estimate_at_run_s"] or p["estimate_s"]) if (p["estimate_at_run_s"] or p["estimate_s"])
                          else "-", seconds(p["actual_s"]) if p["actual_s"] is not None else "-",
                          p["status"] + (f": {p['reason']}" if p.get("reason") else "")
                          + (f": {p['left_out']}" if p["status"] == "left out" else ""),
                          p["child_run"] or "-"])
        if p["child_run"]:
            children.append(p["child_run"])
    for key, why in data["left_out"].items():
        plan_rows.append([key, key[:3], "-", "-", "-", "-", f"left out: {why}", "-"])
    plan = Table("Plan: what ran where, at what scale, estimated and actual time",
                 ["experiment", "study", "where", "scale", "estimate", "actual", "status", "run"], plan_rows,
                 numeric={4, 5})
    blocks = [score, plan]
    if data["scoring"]["note"]:  # a stored run scored again by other scoring code: the verdicts may have moved
        blocks.insert(0, Note(f"Scoring code: {data['scoring']['note']}.", "warn"))
    if data["status"] != "completed":
        blocks.insert(0, Note(f"This reproduce run is {data['status']}: the experiments not run yet have no "
                              f"verdict. Continue it with: virtbench reproduce --resume {data['run_id']}"
                              f"{store.db_option}", "warn"))
    section = Section(f"{data['run_id']}-scorecard", "Do the studies' findings hold here?", blocks, intro=intro)
    return Part(data["run_id"], f"Reproduce run {data['run_id']}: the five studies", [section]), children
