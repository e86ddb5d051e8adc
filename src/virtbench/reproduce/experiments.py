"""The experiments of `virtbench reproduce`: the built-in study files' (studies/NNN.toml), each naming a
suite, the environments and cells of it that bear on the studies' findings, and its tiers (scales)
with a prior estimate each, in priority order (reproduce.py plans and runs them); and the names of
the environments beyond this machine a reproduce run adds."""

from __future__ import annotations

from dataclasses import replace

from ..studies import score, studyfile
from ..studies.model import Experiment, Finding, Study, Tier

REMOTE_ENV = "hosts"  # the environment of the inventory's SSH hosts in a reproduce run
CLOUD_ENV = "cloud"   # the environment of the --cloud settings' instances
PLATFORM_ENVS = (REMOTE_ENV, CLOUD_ENV)
CLOUD_SHAPE = "m1.small"  # the studies' instance type (EC2 and Eucalyptus name it; shape_map maps it elsewhere)


def in_priority(studies: list[Study]) -> tuple[Experiment, ...]:
    """Study files' experiments in the order a budget keeps them (by priority, then file order), each
    tier with at least the repetitions its findings' intervals need for 95 %."""
    exps = sorted((e for s in studies for e in s.experiments), key=lambda e: e.priority)
    return with_repetitions_for_level(exps, [f for s in studies for f in s.findings])


def with_repetitions_for_level(exps: list[Experiment], findings: list[Finding]) -> tuple[Experiment, ...]:
    """Each experiment's tiers raised to the repetitions the findings reading it need for a 95 %
    interval (score.repetitions_for_level: 4 per side for a ratio, 6 for a median, 5 for the network
    penalty and for a peak over 3 or 4 values, 8 per size for a slope's straight-line check over 3 sizes; fewer where a boot grid's instances started at once
    give several values a repetition), the label saying so; extra
    tiers that then repeat no more than the largest ordinary one go."""
    reading: dict[str, list[Finding]] = {}
    for f in findings:
        for eid in score.experiments_read(f):
            reading.setdefault(eid, []).append(f)
    out = []
    for e in exps:
        tiers = []
        for t in e.tiers:
            n = max([_needed(e, t, f) for f in reading.get(e.id, [])] or [1])
            tiers.append(t if t.repeat >= n else replace(
                t, repeat=n, estimate_s=t.estimate_s * n / t.repeat,
                label=f"{t.label}; raised to {n} repetitions (a 95 % interval needs {n})"))
        if tiers == list(e.tiers):
            out.append(e)
            continue
        top = max(t.repeat for t in tiers if not t.extra)
        out.append(replace(e, tiers=tuple(t for t in tiers if not t.extra or t.repeat > top)))
    return tuple(out)


def _needed(exp: Experiment, tier: Tier, f: Finding) -> int:
    """Repetitions of this tier finding `f` needs: a peak's depend on how many x values the tier has,
    and so do a ratio's against the best of a range (every value of it compared at once);
    in a boot grid a ratio's sides hold as many values a repetition as instances start at once (its
    selectors' concurrency: a number, "max" or "min")."""
    if f.rule == "peak":  # every pair of the tier's x values compared at once: more points need more
        xs = tier.select.get(f.args["x"]) or exp.where.get(f.args["x"]) or []
        return score.repetitions_for_level("peak", points=len(xs) if isinstance(xs, list) else 3)
    if f.rule == "slope" and f.args.get("min_r2", 0) > 0:  # each x's median for the straight-line check
        xs = (tier.boot.get("sizes_gb") if exp.boot else tier.select.get(f.args["x"]) or exp.where.get(f.args["x"]))
        return score.repetitions_for_level("slope", points=max(len(xs) if isinstance(xs, list) else 3, 3))
    if f.rule in ("order", "steps"):  # more steps need more of each step's interval
        return score.repetitions_for_level(f.rule, points=len(f.args["chain"]) - 1 if f.rule == "order"
                                           else len(f.args["steps"]))
    den = f.args.get("den") if f.rule == "ratio" else None
    best = next((k for k, v in den["params"].items() if v == "best"), None) if den else None
    if best and not exp.boot:  # num against every value of the den's range at once
        xs = tier.select.get(best) or exp.where.get(best) or []
        return score.repetitions_for_level("ratio", points=len(xs) if isinstance(xs, list) else None)
    grid = [int(c) for c in tier.boot.get("concurrency") or []] if exp.boot else []
    if not grid or f.rule != "ratio":
        return score.repetitions_for_level(f.rule)

    def per(side: str) -> int:
        c = f.args[side]["params"].get("concurrency", 1)
        return max(grid) if c == "max" else min(grid) if c == "min" else int(c)
    return score.repetitions_for_level(f.rule, (per("num"), per("den")))


def builtin_experiments() -> tuple[Experiment, ...]:
    """The built-in studies' experiments in priority order: what a budget keeps first."""
    return in_priority(studyfile.builtin())


EXPERIMENTS: tuple[Experiment, ...] = builtin_experiments()
# Parts of the studies never run, and why (the study files' [[left_out]]).
LEFT_OUT_ALWAYS = {k: v for s in studyfile.builtin() for k, v in s.left_out.items()}
