"""A reproduce run as one object: the scorecard first, then the plan with estimates and actual times
(`virtbench reproduce --json`, and the report's first section)."""

from __future__ import annotations

import time

from ..errors import UserError
from ..store import Store
from . import chosen, codeversion, evidence, score


def result(store: Store, run_id: str) -> dict:
    """The `reproduce --json` object: the scorecard (scored with the study files the run recorded,
    their hashes beside it, and the scoring code's version: recorded, scored with, and a note where
    they differ) first, then the plan with estimates and actual times."""
    from ..reproduce import experiments_done, experiments_of

    run = store.run(run_id)
    spec = run["spec"]
    if spec.get("kind") != "reproduce":
        raise UserError(f"run {run['id']} is not a reproduce run", f"show it with: virtbench show {run['id']}{store.db_option}")
    tiers = {e.id: e.tiers for e in experiments_of(spec)}
    ev = evidence.collect(store, run["id"])
    findings = [f for s in chosen.from_spec(spec) for f in s.findings]
    cards = score.scorecard(ev, findings)
    done = experiments_done(store, run["id"])
    plan = []
    for p in spec["plan"]:
        d = done.get(p["id"], {})
        plan.append({**p, "status": d.get("status") or ("left out" if p["tier"] is None else "not run"),
                     "reason": d.get("reason"), "child_run": d.get("child"), "ran_tier": d.get("tier"),
                     "ran_scale": tiers[p["id"]][d["tier"]].label if d.get("tier") is not None else None,
                     "estimate_at_run_s": d.get("estimate_s"), "actual_s": d.get("actual_s")})
    elapsed = (run["finished_at"] or time.time()) - run["created_at"]
    return {"run_id": run["id"], "status": run["status"], "budget_s": spec["budget_s"],
            "elapsed_s": round(elapsed, 1), "studies": spec.get("studies"), "study_files": chosen.hashes(spec),
            "scoring": scoring(spec),
            "facts": spec.get("facts"), "counts": score.counts(cards), "scorecard": [c.as_dict() for c in cards],
            "plan": plan, "left_out": spec.get("left_out", {})}


def scoring(spec: dict) -> dict:
    """The scoring code a run recorded, the code scoring it now, and what the scorecard says where they differ."""
    now = codeversion.current()
    recorded = spec.get("scoring")
    return {"recorded": recorded, "scored_with": now, "note": codeversion.rescored_note(recorded, now)}
