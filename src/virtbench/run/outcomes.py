"""Which cells of a run have results, which failed and why: the run's exit status, its end summary
and the cells `--retry-failed` runs again.

A cell here is one (workload cell, environment) pair the run was meant to measure. It has results
when at least one measured repetition succeeded; it failed when it had attempts and none succeeded;
a skipped cell (a condition this machine cannot make) is neither.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ..store import Store

EXIT_OK = 0  # every cell has results
EXIT_SOME_FAILED = 3  # some cells have results, others failed or never ran
EXIT_NONE_SUCCEEDED = 4  # no cell has results


def reason_line(reason: str | None, limit: int = 300) -> str:
    """The first line of a failure's reason, for summaries. A line that ends with a colon only
    introduces what follows ("cannot start ssh on its hosts:" then ssh's own message), so the next
    non-empty lines are joined to it until one says something."""
    lines = [ln.strip() for ln in (reason or "").splitlines() if ln.strip()]
    if not lines:
        return "unknown"
    text = lines[0]
    for ln in lines[1:]:
        if not text.endswith(":"):
            break
        text += " " + ln
    return text if len(text) <= limit else text[:limit - 3] + "..."


def cell_outcomes(store: Store, run_id: str) -> dict[str, Any]:
    """{cells, with_results, skipped, failed: [...], not_run: [...]} of a stored run; each failed or
    not-run entry has cell_key, workload, params, condition, environment, attempts, failures, reason."""
    from ..suite import cell_environments

    run = store.run(run_id)
    spec = run["spec"]
    env_order = [e["name"] for e in spec.get("environments", [])]
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for row in store.attempt_counts(run["id"]):
        # a warm-up's result is no result (it is not in the statistics): a cell whose only ok
        # attempt was its warm-up has none, and --retry-failed runs it again
        kind = row["status"] + ("_warmup" if row["warmup"] and row["status"] in ("ok", "failed") else "")
        counts[(row["cell_key"], row["environment"])][kind] += row["count"]
    reasons: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for a in store.outcomes(run["id"]):
        if a["status"] == "failed":
            reasons[(a["cell_key"], a["environment"])][reason_line(a["reason"])] += 1
    out: dict[str, Any] = {"cells": 0, "with_results": 0, "skipped": 0, "failed": [], "not_run": []}
    for cell in spec.get("cells", []):
        for env in cell_environments(cell, env_order):
            out["cells"] += 1
            c = counts.get((cell["key"], env), Counter())
            entry = {"cell_key": cell["key"], "workload": cell["workload"], "params": cell["params"],
                     "condition": cell["condition"], "environment": env,
                     "attempts": c["ok"] + c["failed"], "failures": c["failed"] + c["failed_warmup"]}
            if c["ok"]:
                out["with_results"] += 1
            elif c["skipped"]:
                out["skipped"] += 1
            elif entry["failures"]:
                top = reasons[(cell["key"], env)].most_common()
                entry["reason"] = top[0][0] if top else "unknown"
                if len(top) > 1:
                    entry["other_reasons"] = [r for r, _ in top[1:3]]
                out["failed"].append(entry)
            else:
                entry["reason"] = "never ran"
                out["not_run"].append(entry)
    return out


def exit_code(outcome: dict[str, Any]) -> int:
    """0 when every cell (skipped ones aside) has results, 4 when none has, else 3."""
    if not outcome["failed"] and not outcome["not_run"]:
        return EXIT_OK
    return EXIT_NONE_SUCCEEDED if outcome["with_results"] == 0 else EXIT_SOME_FAILED


def shortfall(outcome: dict[str, Any]) -> str | None:
    """What a finished run lacks, in words ("no cell has results", "2 of 8 cells have no results"),
    or None when every cell has results: the run's end summary and its status in `virtbench runs`."""
    code = exit_code(outcome)
    if code == EXIT_OK:
        return None
    if code == EXIT_NONE_SUCCEEDED:
        return "no cell has results"
    missing = len(outcome["failed"]) + len(outcome["not_run"])
    return f"{missing} of {outcome['cells'] - outcome['skipped']} cells have no results"


def failed_keys(outcome: dict[str, Any]) -> set[tuple[str, str]]:
    """(cell key, environment) of every cell without results: what --retry-failed runs again."""
    return {(e["cell_key"], e["environment"]) for e in outcome["failed"] + outcome["not_run"]}
