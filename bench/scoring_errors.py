#!/usr/bin/env python3
"""How often do the scorecard's peak and network-penalty rules give a wrong verdict, and how often a
right one? (docs/statistics.md, "Several intervals read together")

Draws repetitions from known curves (lognormal noise with coefficient of variation --cv) and scores
the built-in findings 004-web-pods-peak and 001-coarse-copes on them with studies/score.py, as a
reproduce run would. Cases whose truth is "not holds" (a peak at an end or tied with one, a
coarse-grained penalty at the finding's maximum, equal penalties) must hold in at most 5 % of the
trials, those whose truth holds differ in at most 5 %; these also show the rules' power (how often
they hold) at the repetitions given. Exit status 1 when a wrong verdict passes 5 %.

    python bench/scoring_errors.py [--trials 400] [--n 5,8] [--cv 0.1] [--penalty-cv 0.03]
"""

from __future__ import annotations

import argparse
import random

from virtbench.studies import score
from virtbench.studies.score import Evidence, Group
from virtbench.studies.studyfile import builtin_findings

PEAKS = (("peak at the top end, 2 % above its neighbour", {1: 100, 2: 180, 4: 196, 8: 200}, False),
         ("two equal tops, one at the end", {1: 100, 2: 180, 4: 200, 8: 200}, False),
         ("a peak inside, 5 % above the next", {1: 100, 2: 200, 4: 190, 8: 150}, True))
PENALTIES = (("P(coarse) at the maximum 1.1", 1.5, 1.1, False), ("P(fine) = P(coarse)", 1.05, 1.05, False),
             ("P(fine) 1.5, P(coarse) 1.0", 1.5, 1.0, True))


def _finding(fid: str):
    return next(f for f in builtin_findings() if f.id == fid)


def peak_groups(curve: dict[int, float], n: int, cv: float, rng: random.Random) -> list[Group]:
    return [Group("004-web", "web", {"workers": 1, "replicas": x}, {}, "pods", "pods", "requests_per_second",
                  "req/s", True, [m * rng.lognormvariate(0, cv) for _ in range(n)]) for x, m in curve.items()]


def penalty_groups(finding, p_fine: float, p_coarse: float, n: int, cv: float, rng: random.Random) -> list[Group]:
    a = finding.args
    out = []
    for name, p in (("fine", p_fine), ("coarse", p_coarse)):
        for kind in ("host", "container"):
            for inst in (1, 2):
                t = 10.0 * (p if kind != "host" and inst == 2 else 1.0)
                out.append(Group(a["experiment"], a[name]["workload"], {**a[name]["params"], "instances": inst}, {},
                                 kind, kind, a["metric"], "s", False, [t * rng.lognormvariate(0, cv) for _ in range(n)]))
    return out


def tally(verdicts: list[str]) -> dict[str, float]:
    return {k: round(verdicts.count(k) / len(verdicts), 3) for k in (score.HOLDS, score.DIFFERS, score.NOT_MEASURED)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--n", default="5,8", help="repetitions per group, comma-separated")
    ap.add_argument("--cv", type=float, default=0.1, help="noise of the peak's groups")
    ap.add_argument("--penalty-cv", type=float, default=0.03, help="noise of the penalty's groups")
    args = ap.parse_args()
    rng = random.Random(1)
    peak, penalty = _finding("004-web-pods-peak"), _finding("001-coarse-copes")
    bad = False
    facts = {"cluster": True}
    for n in (int(x) for x in args.n.split(",")):
        for what, curve, truth in PEAKS:
            t = tally([score.score(peak, Evidence(peak_groups(curve, n, args.cv, rng), facts)).verdict
                       for _ in range(args.trials)])
            bad |= t[score.HOLDS if not truth else score.DIFFERS] > 0.05
            print(f"peak, n = {n}, {what} (truth: {'holds' if truth else 'not holds'}): {t}")
        for what, pf, pc, truth in PENALTIES:
            t = tally([score.score(penalty, Evidence(penalty_groups(penalty, pf, pc, n, args.penalty_cv, rng), {})).verdict
                       for _ in range(args.trials)])
            bad |= t[score.HOLDS if not truth else score.DIFFERS] > 0.05
            print(f"penalty, n = {n}, {what} (truth: {'holds' if truth else 'not holds'}): {t}")
    print("a wrong verdict above 5 %: FAIL" if bad else "every wrong verdict at or below 5 %")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
