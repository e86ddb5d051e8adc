"""A study's own printed numbers scored as if they were measurements (`virtbench reproduce
--published`): each finding's [findings.published] groups become the groups its rule reads, and the
same rule decides. A finding the study's own numbers do not pass has a wrong tolerance or reading.

A printed value is one point: most studies print means, so a group is the values printed for it
(e.g. one per version of a platform), and where there is one value a side the point decides (said
as such); more values give an interval at whatever level they reach, stated beside it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import score
from .model import Finding, PublishedGroup
from .score import Evidence, Group, Verdict

# the study's numbers meet no machine: every need is taken as met
ALL_FACTS = {"accelerator": "kvm", "cluster": True, "nfs": True, "cloud": True}
_SPECIAL = ("max", "min", "best")


def selector_of(f: Finding, role: str) -> dict[str, Any]:
    """The selector a published group's `of` names: num, den, select, one, many; chain.I; steps.I.J;
    the penalty's fine and coarse."""
    a = f.args
    parts = role.split(".")
    if parts[0] in ("fine", "coarse") and f.rule == "penalty":
        return {"experiment": (a["experiment"],), "workload": a[parts[0]]["workload"], "metric": a["metric"],
                "kind": tuple(a["kind"]), "params": dict(a[parts[0]].get("params", {})), "condition": {},
                "prefer": tuple(a.get("prefer", ()))}
    s = a[parts[0]]
    for i in parts[1:]:
        s = s[int(i)]
    return s


def _concrete(wanted: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The selector's params (or condition) with the printed group's values: a "max"/"min"/"best" key
    takes the value given (or 1: the only group there is)."""
    out = {k: (given.get(k, 1) if v in _SPECIAL else v) for k, v in wanted.items()}
    out.update(given)
    return out


def group(f: Finding, pg: PublishedGroup, higher_is_better: bool) -> Group:
    s = selector_of(f, pg.of)
    kind = pg.kind or s["kind"][0]
    env = f"published ({kind})"
    if s.get("env"):  # a selector that names its environment takes only groups of that one
        env = s["env"][0]
    return Group(s["experiment"][0], s["workload"], _concrete(s["params"], pg.params),
                 _concrete(s.get("condition", {}), pg.condition), env, kind, s["metric"], "",
                 higher_is_better, list(pg.values))


def evidence(f: Finding, index: int | None = None) -> Evidence:
    """The printed numbers as groups: all of each group's values (`index` None), or its index-th value
    (a group with one value gives it to every index)."""
    p = f.published
    groups = []
    for g in p.groups:
        if index is not None:
            g = replace(g, values=(g.values[index if len(g.values) > 1 else 0],))
        groups.append(group(f, g, p.higher_is_better))
    return Evidence(groups, dict(ALL_FACTS))


def point_sets(f: Finding) -> int | None:
    """How many sets of points the printed values make: values printed side by side for settings of the
    study (versions, runs it printed as means) are scored set by set, value i of every group together;
    None where they are runs (`repetitions = 1`: each value one run), scored together with their
    interval, or where the groups' lengths do not line up."""
    p = f.published
    if p.repetitions == 1:
        return None
    lens = {len(g.values) for g in p.groups} - {1}
    return (lens.pop() if lens else 1) if len(lens) <= 1 else None


def verdict(f: Finding) -> Verdict:
    """The finding scored on its study's own numbers (it must have them): each set of points must pass."""
    p = f.published
    k = point_sets(f)
    if k is None:
        v = score.score(f, evidence(f), points=True)
        how = "each value one run: scored together" if p.repetitions == 1 else "scored together"
        if v.level is not None and v.level < score.LEVEL:
            v.measured += f" (the interval of the printed values is at {v.level:.1%})"
        v.measured = f"published ({p.source}; {how}): {v.measured}" if v.measured else v.measured
        return v
    each = [score.score(f, evidence(f, i), points=True) for i in range(k)]
    worst = next((x for x in each if x.verdict == score.DIFFERS), None) or \
        next((x for x in each if x.verdict == score.NOT_MEASURED), None) or each[0]
    v = worst
    how = (f"{k} sets of points" if k > 1 else "points") + (f", each a mean of {p.repetitions} runs" if p.repetitions else "")
    v.measured = f"published ({p.source}; {how}, each must pass): " + "; ".join(
        f"{x.verdict}: {x.measured}" for x in each)
    if v.verdict == score.NOT_MEASURED and not v.reason:
        v.reason = v.measured
    return v


def scorecard(findings: list[Finding]) -> dict[str, Any]:
    """The `reproduce --published` object: each finding with published numbers scored on them, and
    the ids of those without."""
    with_numbers = [f for f in findings if f.published]
    cards = [verdict(f) for f in with_numbers]
    return {"counts": score.counts(cards), "scorecard": [c.as_dict() for c in cards],
            "without_published": [f.id for f in findings if not f.published]}
