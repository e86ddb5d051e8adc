"""Scoring a finding (a study file's, model.Finding) against measured evidence: pure functions, no store, no I/O.

Evidence is a list of measured groups (the repetitions of one metric of one cell in one environment)
plus facts about the machine (accelerator, cluster, NFS client) and, per plan experiment, why it has
no data when it has none. A verdict is one of HOLDS, DIFFERS or NOT_MEASURED, with what was
measured (the value and its interval) and, for NOT_MEASURED, the reason.

One rule for every tolerance with an interval (ratios, efficiencies, levels, the steps of an order,
a slope): the finding HOLDS when the whole 95 % interval meets the tolerance, DIFFERS when the
whole interval misses it, and is NOT_MEASURED when the interval reaches both sides ("more
repetitions needed"): a point estimate on one side of a band its own interval crosses decides
nothing. Every interval a verdict is read from is at 95 % or more: fewer repetitions than its method
needs for that (repetitions_for_level) is NOT_MEASURED, "too few repetitions for a 95 % interval (n =
...)", with the level they could give and what it needs; each verdict carries its interval's actual
level. A verdict read from several intervals at once (a peak: every pair of x values; the network
penalty: four ratios) has each at 1 - 0.05 / their number, so they hold together at 95 % (Bonferroni),
and that joint level is the one it carries (a slope's straight line: the k medians' intervals at
1 - 0.025 / k each, the slope's equal-tailed interval taking the other 2.5 %). The study's own printed numbers (`reproduce --published`,
score(points=True)) decide as points where a group has one value, and whatever level their interval
reaches is said, never required.

One rule for every claim about where a quantity is largest or smallest (a peak over a count, a
"best" count a ratio is taken against): the study's own location of that extreme (`published_at` in
the claim's args) must lie inside the range we measured, or our extreme must lie inside it. When
our extreme lies at an end of the measured range and the published location lies beyond that end,
the range was too short to see the study's extreme: a verdict that a longer range could overturn is
NOT_MEASURED ("the measured range stops at 8, below the published peak at 32: a larger tier or
cluster needed"), never "differs". For a peak that is any verdict; for a ratio against the best
count only "holds" (a longer range can only raise the best, so "differs" against it stands).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import stats
from ..stats import exact as stats_exact
from ..stats import linearity as stats_linearity
from .model import Finding

HOLDS, DIFFERS, NOT_MEASURED = "holds", "differs", "not measured"

REASONS = {
    "kvm": "TCG instead of KVM: QEMU can only emulate the CPU on this machine, so a VM's figures say what "
           "emulation costs, never what a hypervisor does; they count neither for nor against this finding",
    "cluster": "no cluster: the finding is about Kubernetes pods; pass --kubeconfig of a cluster, or --testbed",
    "nfs": "no kernel NFS client on this host: bare metal and pods cannot mount the export",
    "cloud": "no cloud: the finding is about instances a cloud places on its nodes; pass --cloud settings",
}
# Whether a cluster counts, and how the verdict says which it was: the pods findings compare pods on
# one node (study 004 measured "Kubernetes クラスタの 1 ノード", one node of its cluster, section 6), so
# a cluster counts whatever its nodes are; the verdict names them (one machine playing nodes, or
# separate machines: reproduce_facts.describe_nodes).
CLUSTER_RULE = ("a cluster counts whatever its nodes are: study 004 measured its pods on one node of its cluster "
                "(section 6)")
EMULATED_CLOUD = ("the cloud's results come from moto, a local EC2-compatible server that starts no machine "
                  "(backend {backend}): they count neither for nor against a finding")
# Conditions that mean "none" when a cell does not name them.
_ZERO_CONDITIONS = ("delay_ms", "rate_mbit")


@dataclass
class Group:
    experiment: str
    workload: str
    params: dict[str, Any]
    condition: dict[str, Any]
    env: str
    kind: str                 # the environment's driver: host, container, vm, pods, ssh, cloud
    metric: str
    unit: str
    higher_is_better: bool
    values: list[float]
    meta: dict[str, Any] = field(default_factory=dict)  # accelerator, backend, rounds_of (the cell's run)
    rounds: list[int] | None = None  # the round (repetition) of each value, where recorded

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan


@dataclass
class Evidence:
    groups: list[Group]
    facts: dict[str, Any] = field(default_factory=dict)  # accelerator, cluster, nfs
    notes: dict[str, str] = field(default_factory=dict)  # experiment -> why it has no data


@dataclass
class Verdict:
    id: str
    study: str
    finding: str
    cite: str
    quantity: str
    tolerance: str
    verdict: str
    measured: str = ""
    value: float | None = None
    ci: list[float] | None = None
    reason: str = ""
    environments: list[str] = field(default_factory=list)
    level: float | None = None   # the actual level of the interval the verdict was read from (None: none)
    quote: str = ""
    quote_en: str = ""
    # revisions of the finding (date, change, why): one made after results were seen is shown beside the verdict
    revised: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _NoData(Exception):
    """The selection found nothing to compute with; the message says what is missing."""


class _RangeTooShort(Exception):
    """Measured, but on a range that stops short of the published extreme (the module's second rule):
    the verdict is NOT_MEASURED with this reason, and the measured text still said."""

    def __init__(self, reason: str, measured: str, envs: list[str]):
        super().__init__(reason)
        self.measured, self.envs = measured, envs


# -- selection ----------------------------------------------------------------------------------------

def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)i?B?\s*", str(v), re.I)
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "K": 2**-20, "M": 2**-10, "G": 1, "T": 2**10}[m.group(2).upper()]


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    x, y = _num(a), _num(b)
    return x is not None and y is not None and not isinstance(a, str) and not isinstance(b, str) and math.isclose(x, y)


_SPECIAL = ("max", "min", "best")


def _experiments(s: dict[str, Any]) -> tuple[str, ...]:
    e = s["experiment"]
    return (e,) if isinstance(e, str) else tuple(e)


def emulated_cloud(g: Group) -> bool:
    """A result of a local EC2 stand-in (moto): its instances are no machines of a cloud."""
    return str(g.meta.get("backend") or "").startswith("moto")


def select(ev: Evidence, s: dict[str, Any], *, exclude_tcg: bool = False, emulated: bool = False) -> list[Group]:
    """Groups matching a selector (a study file's selector). A param or condition value "max"/"min" keeps the groups
    with the largest/smallest value of that key; "best" the one whose median is best. Results of an
    emulated cloud (moto) are never taken (`emulated` True: only for saying so)."""
    out = []
    for g in ev.groups:
        if (g.experiment not in _experiments(s) or g.workload != s["workload"] or g.metric != s["metric"]
                or g.kind not in s["kind"] or not g.values):
            continue
        if s.get("env") and g.env not in s["env"]:  # two environments of one kind (a VM with virtio, one with e1000)
            continue
        if exclude_tcg and g.meta.get("accelerator") == "tcg":
            continue
        if emulated_cloud(g) and not emulated:
            continue
        ok = True
        for where, wanted in (("params", s["params"]), ("condition", s["condition"])):
            have = getattr(g, where)
            for k, v in wanted.items():
                if v in _SPECIAL:
                    ok = ok and k in have
                    continue
                hv = have.get(k, 0 if k in _ZERO_CONDITIONS and where == "condition" else None)
                ok = ok and _same(hv, v)
        if ok:
            out.append(g)
    for kind in s.get("prefer", ()):
        if any(g.kind == kind for g in out):
            out = [g for g in out if g.kind == kind]
            break
    for where, wanted in (("params", s["params"]), ("condition", s["condition"])):
        for k, v in wanted.items():
            if v in ("max", "min") and out:
                key = lambda g: _num(getattr(g, where)[k]) or 0.0  # noqa: E731
                pick = max if v == "max" else min
                edge = key(pick(out, key=key))
                out = [g for g in out if math.isclose(key(g), edge)]
            elif v == "best" and out:
                best = max(out, key=lambda g: g.median if g.higher_is_better else -g.median)
                out = [best]
    return out


def one(ev: Evidence, s: dict[str, Any], *, exclude_tcg: bool = False) -> Group:
    found = select(ev, s, exclude_tcg=exclude_tcg)
    if not found:
        fake = [g for g in select(ev, s, exclude_tcg=exclude_tcg, emulated=True) if emulated_cloud(g)]
        if fake:
            raise _NoData(EMULATED_CLOUD.format(backend=fake[0].meta["backend"]))
        exps = _experiments(s)
        why = "; ".join(ev.notes[e] for e in exps if e in ev.notes)
        what = f"{s['workload']} {s['metric']} on {'/'.join(s['kind'])}"
        raise _NoData(f"no results for {what}" + (f": {why}" if why else f" (experiment {', '.join(exps)})"))
    return max(found, key=lambda g: len(g.values))  # several environments of one kind: the fullest


# -- the rules ----------------------------------------------------------------------------------------

def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    a = abs(v)
    return f"{v:.3g}" if a < 1000 else f"{v:,.0f}"


def _ci_text(lo: float, hi: float) -> str:
    return f" [{_fmt(lo)}, {_fmt(hi)}]" if math.isfinite(lo) and math.isfinite(hi) else " (no interval: too few values)"


def paired_rounds(num: Group, den: Group, confidence: float | None = None) -> tuple[list[float], list[float]] | None:
    """The two groups' values round by round, where they are one cell's environments run in lockstep
    rounds (load and drift of a round hit both) and enough rounds have both for the signed-rank
    interval to reach `confidence` (LEVEL when None); None: compare them as two groups."""
    key = num.meta.get("rounds_of")
    if not key or key != den.meta.get("rounds_of") or num.rounds is None or den.rounds is None:
        return None
    a, b = dict(zip(num.rounds, num.values)), dict(zip(den.rounds, den.values))
    both = sorted(set(a) & set(b))
    if len(both) < stats_exact.min_n("signed-rank", LEVEL if confidence is None else confidence):
        return None
    return [a[r] for r in both], [b[r] for r in both]


def _ratio(num: Group, den: Group, confidence: float | None = None) -> stats.Ratio:
    """num / den at `confidence` (LEVEL when None): from paired rounds where there are enough of them
    for that level (the signed-rank interval of the rounds' ratios), else from two groups (the
    Mann-Whitney interval)."""
    conf = LEVEL if confidence is None else confidence
    pairs = paired_rounds(num, den, conf)
    if pairs:
        return stats.paired_ratio(*pairs, confidence=conf)
    return stats.ratio(num.values, den.values, higher_is_better=num.higher_is_better, confidence=conf)


def _method(num: Group, den: Group) -> str:
    return ", paired rounds" if paired_rounds(num, den) else ""


def _bonferroni(levels: list[float]) -> float:
    """The level at which several intervals hold together (Bonferroni: 1 - the sum of their misses;
    NaN when one of them has no interval)."""
    if not all(math.isfinite(x) for x in levels):
        return math.nan
    return max(0.0, 1.0 - sum(1.0 - x for x in levels))


def _each_level(comparisons: int) -> float:
    """The level each of `comparisons` intervals needs for them all to hold together at LEVEL."""
    return 1.0 - (1.0 - LEVEL) / comparisons


def _bounds(r: stats.Ratio) -> tuple[float, float]:
    """A ratio's interval, or the point twice where it has none (a study's printed single values)."""
    if math.isfinite(r.ci_low) and math.isfinite(r.ci_high):
        return r.ci_low, r.ci_high
    return r.ratio, r.ratio


UNDECIDED = None  # the interval reaches both sides of the tolerance
TOLERANCES = ("above", "below", "within", "at_most", "at_least")
LEVEL = 0.95  # every interval a verdict is read from is at least at this level


@dataclass(frozen=True)
class Level:
    """The actual level of the interval a rule decided from (NaN: no interval), the sizes behind it and
    what reaching LEVEL (or `required`, where a rule needs more of each interval) needs, said when it
    is not reached."""
    level: float
    n: str
    need: str = ""
    required: float = 0.95  # what each interval must reach (an order of 3 or more steps: more than LEVEL)


def repetitions_for_level(rule: str, per_repetition: tuple[int, int] = (1, 1), *, points: int | None = None) -> int:
    """Fewest repetitions per group whose interval can reach LEVEL under `rule`'s method: the exact
    two-sample (Mann-Whitney) interval of a ratio, 4 per side (stats_exact.min_n), or with
    `per_repetition` values a repetition on each side (a boot grid's c instances at once give c) the
    fewest r whose r*a and r*b values reach it (1 and 4 at once: 2); one cell's environments are
    paired round by round from 6 rounds on (paired_rounds); a median's order-statistic interval, 6;
    a peak over `points` x values, every pair's Mann-Whitney interval at 1 - 0.05 / pairs (3 or 4
    points: 5, 5 to 7: 6, 8 or 9: 7; 3 when `points` is not given); a ratio against the best of
    `points` values, each of the num's ratios at 1 - 0.05 / points (4 values: 5 per side); an order of
    `points` steps, each at 1 - 0.1 / points from 3 steps on (4 per side up to 3 steps, 5 from 4); the network
    penalty, its 4 ratios' at 98.75 % each (5 per side); a slope's straight-line check over `points` x
    values, each x's median order-statistic interval at 1 - 0.025 / points (3 values: 8 per x, 4 to
    6: 9, 7: 10); 1 where the interval comes from all the points together (the slope alone)."""
    if rule == "slope":
        return stats_exact.min_n("median", _line_each(points)) if points else 1
    if rule == "ratio" and points and points > 1 and per_repetition == (1, 1):  # against the best of `points` values
        return stats_exact.min_n("mann-whitney", _each_level(points))
    if rule in ("order", "steps") and points and per_repetition == (1, 1):  # `points` steps
        return stats_exact.min_n("mann-whitney", _step_level(points))
    if rule in ("ratio", "efficiency", "order", "steps", "peak_sum"):
        a, b = per_repetition
        if (a, b) == (1, 1):
            return stats_exact.min_n("mann-whitney", LEVEL)
        r = 1
        while 1.0 - stats_exact.mw_min_p(r * a, r * b) < LEVEL - 1e-12:
            r += 1
        return r
    if rule in ("level", "memory_share"):
        return stats_exact.min_n("median", LEVEL)
    if rule == "peak":
        k = max(points or 3, 3)
        return stats_exact.min_n("mann-whitney", _each_level(k * (k - 1) // 2))
    if rule == "penalty":
        return stats_exact.min_n("mann-whitney", _each_level(PENALTY_RATIOS))
    return 1


def decide(r: float, lo: float, hi: float, args: dict) -> bool | None:
    """True when the whole interval [lo, hi] meets the tolerance, False when it wholly misses it,
    UNDECIDED when it reaches both sides. No interval (lo or hi not finite): the point r decides."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo = hi = r
    if "above" in args:
        meets, misses = lo > args["above"], hi <= args["above"]
    elif "below" in args:
        meets, misses = hi < args["below"], lo >= args["below"]
    elif "within" in args:
        a, b = args["within"]
        meets, misses = a <= lo and hi <= b, hi < a or lo > b
    elif "at_most" in args:
        meets, misses = hi <= args["at_most"], lo > args["at_most"]
    elif "at_least" in args:
        meets, misses = lo >= args["at_least"], hi < args["at_least"]
    else:
        raise ValueError(f"rule without a test: {args}")
    return True if meets else False if misses else UNDECIDED


def _both_sides(lo: float, hi: float, level: float | None = None) -> str:
    at = f"{level:.1%}" if level else "95 %"
    return (f"its interval [{_fmt(lo)}, {_fmt(hi)}] (at {at}) reaches both sides of the tolerance: more "
            "repetitions needed")


def _rule_ratio(c: Finding, ev: Evidence, tcg: bool):
    num, den = one(ev, c.args["num"], exclude_tcg=tcg), one(ev, c.args["den"], exclude_tcg=tcg)
    best = _against_best(c, ev, num, tcg)
    r, also = best[:2] if best else (_ratio(num, den), "")
    ok = decide(r.ratio, r.ci_low, r.ci_high, c.args)
    text = (f"{_fmt(r.ratio)}x{_ci_text(r.ci_low, r.ci_high)}: {_label(num)} {_fmt(num.median)} / {_label(den)} "
            f"{_fmt(den.median)} {den.unit} (n = {len(num.values)} / {len(den.values)}{_method(num, den)}){also}")
    ci = [r.ci_low, r.ci_high] if math.isfinite(r.ci_low) else None
    envs = sorted({num.env, den.env})
    if ok:  # against the best of a range: "holds" only where the range could see the published best
        short = _best_short_of(c, ev, den, tcg)
        if short:
            raise _RangeTooShort(short, text, envs)
    need = f"{repetitions_for_level('ratio', points=best[2])} per group" if best else ""
    return ok, text, r.ratio, ci, envs, Level(r.ci_level, f"{len(num.values)} / {len(den.values)}", need)


def _best_key(sel: dict[str, Any]) -> str | None:
    return next((k for k, v in sel["params"].items() if v == "best"), None)


def _against_best(c: Finding, ev: Evidence, num: Group, tcg: bool):
    """num against the best of the den's range ("best" of a param): not the group whose median is
    best (a pick the medians make, which the interval would not know), but every value of the range,
    num / each one's interval at 1 - 0.05 / their number, so all hold together at LEVEL (Bonferroni).
    Against the largest of several values num / max is the smallest of the ratios, so its interval is
    [smallest lower bound, smallest upper bound] (the largest ones where lower is better). None: no
    "best" in the den; else (ratio, what the text adds, the candidates' count)."""
    key = _best_key(c.args["den"])
    if key is None:
        return None
    everything = {**c.args["den"], "params": {k: w for k, w in c.args["den"]["params"].items() if k != key}}
    found = [g for g in select(ev, everything, exclude_tcg=tcg) if key in g.params]
    by_x: dict[float, Group] = {}
    for g in found:
        x = _x_of(g, key)
        if x not in by_x or len(g.values) > len(by_x[x].values):
            by_x[x] = g
    each = _each_level(len(by_x))
    rs = [_ratio(num, g, each) for g in by_x.values()]
    pick = min if num.higher_is_better else max
    lows, highs = zip(*(_bounds(r) for r in rs))
    none = not all(math.isfinite(r.ci_low) and math.isfinite(r.ci_high) for r in rs)
    lo, hi = (math.nan, math.nan) if none else (pick(lows), pick(highs))
    level = _bonferroni([r.ci_level for r in rs])
    r = stats.Ratio(pick(x.ratio for x in rs), lo, hi, math.nan, False, level)
    also = (f"; against the best of {len(rs)} {key} values " + _together("their ratio intervals", level, rs))
    return r, also, len(rs)


def _best_short_of(c: Finding, ev: Evidence, den: Group, tcg: bool) -> str | None:
    """For a denominator picked as the "best" of a range: why that range was too short, or None."""
    for key, v in c.args["den"]["params"].items():
        published = (c.args.get("published_at") or {}).get(key)
        if v != "best" or published is None:
            continue
        everything = {**c.args["den"], "params": {k: w for k, w in c.args["den"]["params"].items() if k != key}}
        xs = sorted({_x_of(g, key) for g in select(ev, everything, exclude_tcg=tcg) if key in g.params})
        why = short_of(_x_of(den, key), xs, published, key, f"best {key}")
        if why:
            return why
    return None


def _label(g: Group) -> str:
    extra = [f"{k}={v}" for k, v in g.condition.items() if k != "storage"]
    if "storage" in g.condition:
        extra.insert(0, str(g.condition["storage"]))
    if g.meta.get("backend"):  # a cloud: what answered its API
        extra.append(str(g.meta["backend"]))
    return g.env + (f" ({', '.join(extra)})" if extra else "")


def _rule_efficiency(c: Finding, ev: Evidence, tcg: bool):
    a = c.args
    one_, many = one(ev, a["one"], exclude_tcg=tcg), one(ev, a["many"], exclude_tcg=tcg)
    r = stats.ratio(one_.values, many.values, higher_is_better=False)  # T1 / Tn
    e, lo, hi = r.ratio / a["factor"], r.ci_low / a["factor"], r.ci_high / a["factor"]
    lo_b, hi_b = a["within"]
    text = (f"efficiency {_fmt(e)}{_ci_text(lo, hi)}: T1 {_fmt(one_.median)} s, T{a['factor']} {_fmt(many.median)} s "
            f"on {many.env} (n = {len(one_.values)} / {len(many.values)})")
    ok = decide(e, lo, hi, {"within": [lo_b, hi_b]})
    return ok, text, e, ([lo, hi] if math.isfinite(lo) else None), sorted({one_.env, many.env}), \
        Level(r.ci_level, f"{len(one_.values)} / {len(many.values)}")


def _step_level(steps: int) -> float:
    """The level each step of an order needs: a step's interval is equal-tailed, so it lies wholly on
    the wrong side of 1 with probability at most (1 - level) / 2; a wrong "differs" needs one truly
    down step wholly up, a wrong "holds" one truly up step wholly down, so with each at 1 - 0.1 / steps
    neither passes 5 % (LEVEL itself for up to 2 steps, never less)."""
    return max(LEVEL, 1.0 - 2.0 * (1.0 - LEVEL) / max(steps, 1))


def _steps_level(levels: list[float], steps: int, sizes: str) -> Level:
    """The weakest step's level, and what the steps need where it falls short."""
    level = min(levels) if levels and all(math.isfinite(x) for x in levels) else math.nan
    each = _step_level(steps)
    return Level(level, sizes, f"{repetitions_for_level('steps', points=steps)} per side for {steps} steps at "
                               f"{_pct(each)} each", each)


def _rule_order(c: Finding, ev: Evidence, tcg: bool):
    chain = [one(ev, s, exclude_tcg=tcg) for s in c.args["chain"]]
    each = _step_level(len(chain) - 1)
    decided, steps, levels = [], [], []
    for prev, nxt in zip(chain, chain[1:]):
        r = _ratio(nxt, prev, each)
        levels.append(r.ci_level)
        decided.append(decide(r.ratio, r.ci_low, r.ci_high, {"below": 1.0}))
        steps.append(f"{_fmt(r.ratio)}x{_ci_text(r.ci_low, r.ci_high)}")
    # every step must be down: one step wholly not down differs; otherwise an undecided step leaves it open
    ok = False if False in decided else UNDECIDED if UNDECIDED in decided else True
    medians = " > ".join(f"{_label(g)} {_fmt(g.median)}" for g in chain)
    return ok, f"{medians} {chain[0].unit}; steps {', '.join(steps)}", None, None, sorted({g.env for g in chain}), \
        _steps_level(levels, len(chain) - 1, " / ".join(str(len(g.values)) for g in chain))


def _rule_steps(c: Finding, ev: Evidence, tcg: bool):
    """An order measured in separate steps, each a like-for-like pair [from, to] (e.g. the same file
    size on both sides): every step must go down (to / from below 1), as in `order`."""
    pairs = [(one(ev, a, exclude_tcg=tcg), one(ev, b, exclude_tcg=tcg)) for a, b in c.args["steps"]]
    each = _step_level(len(pairs))
    decided, steps, levels = [], [], []
    for prev, nxt in pairs:
        r = _ratio(nxt, prev, each)
        levels.append(r.ci_level)
        decided.append(decide(r.ratio, r.ci_low, r.ci_high, {"below": 1.0}))
        steps.append(f"{_label(prev)} {_fmt(prev.median)} > {_label(nxt)} {_fmt(nxt.median)} {prev.unit}: "
                     f"{_fmt(r.ratio)}x{_ci_text(r.ci_low, r.ci_high)}")
    ok = False if False in decided else UNDECIDED if UNDECIDED in decided else True
    return ok, "; ".join(steps), None, None, sorted({g.env for p in pairs for g in p}), \
        _steps_level(levels, len(pairs), ", ".join(f"{len(a.values)} / {len(b.values)}" for a, b in pairs))


def _x_of(g: Group, key: str) -> float:
    v = g.params.get(key, g.condition.get(key))
    x = _num(v)
    if x is None:
        raise _NoData(f"{key}={v!r} is not a number")
    return x


_X_UNITS = {"image_size": "GB", "delay_ms": "ms"}  # how a slope's x reads in its text


# The slope's t interval is equal-tailed at 95 %: it lies wholly on the wrong side of 0 with probability
# at most 2.5 %. The medians' box then gets the rest of the 5 %: a wrong verdict (either part wholly on
# the wrong side) stays below 5 % when the box holds together at 97.5 %.
SLOPE_MISS = (1.0 - LEVEL) / 2
LINE_LEVEL = LEVEL + SLOPE_MISS


def _line_each(points: int) -> float:
    """The level each x's median interval needs for `points` of them to hold together at LINE_LEVEL."""
    return 1.0 - (1.0 - LINE_LEVEL) / points


def _line_check(c: Finding, groups: list[Group], key: str, xs: list[float]):
    """Whether the medians are a straight line (R^2 of a line through them >= min_r2), read from the
    range of R^2 over every median vector the x values' order-statistic intervals allow together
    (each at 1 - 0.025 / k: the box at 97.5 %, Bonferroni): (decided, text, the box's joint level)."""
    each = _line_each(len(xs))
    vals = {x: [v for g in groups if _x_of(g, key) == x for v in g.values] for x in xs}
    bounds = []
    for x in xs:
        lo, hi, level = stats.median_ci(vals[x], each)
        m = statistics.median(vals[x])
        bounds.append((lo, hi, level) if math.isfinite(lo) else (m, m, math.nan))  # one value: the point
    if len(xs) > stats_linearity.MAX_POINTS:
        raise _NoData(f"the straight-line check reads at most {stats_linearity.MAX_POINTS} {key} values; "
                      f"measured {len(xs)}")
    r2lo, r2hi = stats_linearity.r2_range(xs, [b[0] for b in bounds], [b[1] for b in bounds])
    joint = _bonferroni([b[2] for b in bounds])
    ok = decide(r2lo, r2lo, r2hi, {"at_least": c.args["min_r2"]})
    text = (f"R^2 of a line through the medians [{r2lo:.3f}, {r2hi:.3f}] over their intervals together"
            + (f" (at {_pct(joint)}, each at {_pct(each)})" if math.isfinite(joint)
               else " (an x with one value: its point, no interval)"))
    return ok, text, joint


def _rule_slope(c: Finding, ev: Evidence, tcg: bool):
    """The slope's t interval (least squares through every value) above 0 and, where the finding
    asks for a straight line (min_r2 > 0), the range of the medians' R^2 (_line_check) at or above
    min_r2: holds when both are met wholly, differs when either is wholly missed."""
    from scipy import stats as sps

    s, key = c.args["select"], c.args["x"]
    groups = select(ev, s, exclude_tcg=tcg)
    xs = sorted({_x_of(g, key) for g in groups})
    if len(xs) < 3:
        one(ev, s, exclude_tcg=tcg)  # raises the missing-data reason when there is nothing at all
        raise _NoData(f"a slope needs at least 3 {key} values; measured {len(xs)}")
    pts = [(_x_of(g, key), v) for g in groups for v in g.values]
    fit = sps.linregress([p[0] for p in pts], [p[1] for p in pts])
    t = sps.t.ppf(1.0 - SLOPE_MISS, len(pts) - 2) if len(pts) > 2 else math.nan
    lo, hi = fit.slope - t * fit.stderr, fit.slope + t * fit.stderr
    med = {x: statistics.median([v for g in groups if _x_of(g, key) == x for v in g.values]) for x in xs}
    decided = [decide(fit.slope, lo, hi, {"above": 0.0})]
    unit = groups[0].unit
    per = _X_UNITS.get(key, key)
    text = f"slope {_fmt(fit.slope)} {unit}/{per}{_ci_text(lo, hi)}"
    # the t interval of the slope is at 95 % where it exists (normal errors about the line)
    level, need, n = (LEVEL if math.isfinite(lo) else math.nan), "", str(len(pts))
    if c.args.get("min_r2", 0) > 0:
        straight, line_text, joint = _line_check(c, groups, key, xs)
        decided.append(straight)
        text += f", {line_text}"
        # a wrong verdict: the slope's interval wholly on the wrong side (2.5 %) or the box missing
        level = joint - SLOPE_MISS if math.isfinite(level) and math.isfinite(joint) else math.nan
        counts = [sum(len(g.values) for g in groups if _x_of(g, key) == x) for x in xs]
        n = " / ".join(map(str, counts)) + f" per {key}"
        need = (f"{repetitions_for_level('slope', points=len(xs))} per {key} for {len(xs)} values' medians at "
                f"{_pct(_line_each(len(xs)))} each (together {_pct(LINE_LEVEL)}, with the slope's 2.5 % a "
                f"95 % verdict)")
    text += "; medians " + ", ".join(f"{_fmt(x)} {per}: {_fmt(med[x])} {unit}" for x in xs)
    ok = False if False in decided else UNDECIDED if UNDECIDED in decided else True
    return ok, text, fit.slope, ([lo, hi] if math.isfinite(lo) else None), sorted({g.env for g in groups}), \
        Level(level, n, need)


def _rule_level(c: Finding, ev: Evidence, tcg: bool):
    g = one(ev, c.args["select"], exclude_tcg=tcg)
    lo, hi, level = stats.median_ci(g.values)
    ok = decide(g.median, lo, hi, {k: v for k, v in c.args.items() if k in TOLERANCES})
    return ok, f"median {_fmt(g.median)}{_ci_text(lo, hi)} {g.unit} on {g.env} (n = {len(g.values)})", g.median, \
        ([lo, hi] if math.isfinite(lo) else None), [g.env], Level(level, str(len(g.values)))


def short_of(best: float, xs: list[float], published: float | None, key: str, what: str) -> str | None:
    """Why a range was too short to see the published extreme (None: it was long enough): our extreme
    `best` lies at an end of the measured values `xs` and the published location lies beyond it."""
    if published is None or len(xs) < 2:
        return None
    if best == xs[-1] and published > xs[-1]:
        side = f"stops at {_fmt(xs[-1])}, below"
    elif best == xs[0] and published < xs[0]:
        side = f"starts at {_fmt(xs[0])}, above"
    else:
        return None
    return (f"our best {key} ({_fmt(best)}) is at the end of the measured range {_fmt(xs[0])}-{_fmt(xs[-1])}, "
            f"which {side} the published {what} at {_fmt(published)}: a larger tier or cluster needed")


def _peak_set(xs: list[float], ratio_of) -> list[float]:
    """The x values that may be the peak: those no other x lies wholly above (the interval of
    y(x') / y(x) above 1; with no interval, the point above 1). Read from intervals that hold together,
    it holds the true peak at their joint level (every x ruled out has one truly above it)."""
    return [x for x in xs if not any(_bounds(ratio_of(o, x))[0] > 1.0 for o in xs if o != x)]


def _rule_peak(c: Finding, ev: Evidence, tcg: bool):
    """Where a curve peaks: the set of x values that may hold its largest value, from the ratio
    intervals of every pair of x values together at LEVEL (each at 1 - 0.05 / pairs, Bonferroni).
    Holds when that set lies strictly inside the measured range, differs when it holds only ends of
    it, else not decided."""
    s, key = c.args["select"], c.args["x"]
    by_x: dict[float, Group] = {}
    for g in select(ev, s, exclude_tcg=tcg):  # one group per x: the fullest
        x = _x_of(g, key)
        if x not in by_x or len(g.values) > len(by_x[x].values):
            by_x[x] = g
    if len(by_x) < 3:
        one(ev, s, exclude_tcg=tcg)
        raise _NoData(f"a peak needs at least 3 {key} values; measured {len(by_x)}")
    xs = sorted(by_x)
    pairs = len(xs) * (len(xs) - 1) // 2
    each = _each_level(pairs)
    ratios = {(hi, lo): _ratio(by_x[hi], by_x[lo], each) for i, lo in enumerate(xs) for hi in xs[i + 1:]}

    def ratio_of(a: float, b: float) -> stats.Ratio:  # y(a) / y(b) from the one interval of the pair
        if (a, b) in ratios:
            return ratios[(a, b)]
        r = ratios[(b, a)]
        return stats.Ratio(_inv(r.ratio), _inv(r.ci_high), _inv(r.ci_low), r.p_value, r.significant, r.ci_level)

    best = max(xs, key=lambda x: by_x[x].median)
    maybe = _peak_set(xs, ratio_of) or xs  # none left (intervals that cross in a circle): any may be
    ends = {xs[0], xs[-1]}
    ok = True if not ends & set(maybe) else False if set(maybe) <= ends else UNDECIDED
    level = _bonferroni([r.ci_level for r in ratios.values()])
    text = (f"best at {key} = {_fmt(best)}: " + ", ".join(f"{_fmt(x)}: {_fmt(by_x[x].median)}" for x in xs)
            + f"; the peak lies at {key} in {{{', '.join(_fmt(x) for x in maybe)}}} "
            + _together(f"the {pairs} pairwise ratio intervals", level, ratios.values()))
    envs = sorted({g.env for g in by_x.values()})
    short = short_of(best, xs, c.args.get("published_at"), key, "peak")
    if short:
        raise _RangeTooShort(short, text, envs)
    need = (f"{repetitions_for_level('peak', points=len(xs))} per {key} value for {pairs} pairwise intervals "
            f"at {_pct(each)} each")
    return ok, text, best, [min(maybe), max(maybe)], envs, \
        Level(level, " / ".join(str(len(by_x[x].values)) for x in xs), need)


def _together(what: str, level: float, ratios, extra: str = "") -> str:
    """How the intervals a verdict read together stand: "(WHAT together at 96.8%, each at 99.2%)", or
    that there were none (one value a group: printed numbers, where the points decide)."""
    each = _weakest(ratios)
    said = (f"{what} together at {_pct(level)}, each at {_pct(each)}" if math.isfinite(each)
            else "no interval: one value a group, or too few")
    return f"({said}{'; ' + extra if extra else ''})"


def _weakest(ratios) -> float:
    """The lowest level among intervals (each is at least this; NaN when one has none)."""
    levels = [r.ci_level for r in ratios]
    return min(levels) if levels and all(math.isfinite(x) for x in levels) else math.nan


def _inv(x: float) -> float:
    return math.inf if x == 0 else 1.0 / x


def _pct(level: float) -> str:
    return f"{level:.1%}" if math.isfinite(level) else "no level (too few values)"


# The penalty's ratios (virtual / host at 1 and at 2 instances, for each code): their intervals hold together.
PENALTY_RATIOS = 4


def _rule_penalty(c: Finding, ev: Evidence, tcg: bool):
    """P = R2 / R1 per code, R = virtual / host time at that many instances; P(fine) / P(coarse) and
    P(coarse) from the four ratios' intervals, each at 1 - 0.05 / 4, so all derived intervals hold
    together at LEVEL (Bonferroni). Holds when P(fine) / P(coarse) lies wholly above 1 and P(coarse)
    wholly at or below coarse_max; differs when either lies wholly on the wrong side."""
    a = c.args
    each = _each_level(PENALTY_RATIOS)
    r: dict[tuple[str, int], stats.Ratio] = {}
    sizes, envs = [], set()
    for name in ("fine", "coarse"):
        base = {"experiment": a["experiment"], "workload": a[name]["workload"], "metric": a["metric"],
                "condition": {}}
        for inst in (1, 2):
            side = {}
            for kind in ("host", "virtual"):
                s = {**base, "kind": ("host",) if kind == "host" else tuple(a["kind"]),
                     "prefer": () if kind == "host" else tuple(a.get("prefer", ())),
                     "params": {**a[name]["params"], "instances": inst}}
                side[kind] = one(ev, s, exclude_tcg=tcg)
                envs.add(side[kind].env)
            r[(name, inst)] = _ratio(side["virtual"], side["host"], each)
            sizes.append(f"{len(side['virtual'].values)} / {len(side['host'].values)}")
    p, lo, hi = {}, {}, {}
    for name in ("fine", "coarse"):
        (lo1, hi1), (lo2, hi2) = _bounds(r[(name, 1)]), _bounds(r[(name, 2)])
        p[name], lo[name], hi[name] = r[(name, 2)].ratio / r[(name, 1)].ratio, lo2 / hi1, hi2 / lo1
    q, q_lo, q_hi = p["fine"] / p["coarse"], lo["fine"] / hi["coarse"], hi["fine"] / lo["coarse"]
    cmax = a["coarse_max"]
    meets = q_lo > 1.0 and hi["coarse"] <= cmax
    misses = q_hi <= 1.0 or lo["coarse"] > cmax
    ok = True if meets else False if misses else UNDECIDED
    level = _bonferroni([x.ci_level for x in r.values()])
    def shown(low: float, high: float) -> str:  # printed single values have none
        return _ci_text(low, high) if math.isfinite(_weakest(r.values())) else ""

    text = (f"P(fine-grained) {_fmt(p['fine'])}{shown(lo['fine'], hi['fine'])}, P(coarse-grained) "
            f"{_fmt(p['coarse'])}{shown(lo['coarse'], hi['coarse'])}, fine / coarse {_fmt(q)}{shown(q_lo, q_hi)} "
            + _together(f"from {PENALTY_RATIOS} ratio intervals", level, r.values(), f"n = {', '.join(sizes)}"))
    need = (f"{repetitions_for_level('penalty')} per side for {PENALTY_RATIOS} ratio intervals at {_pct(each)} "
            "each")
    ci = [q_lo, q_hi] if math.isfinite(q_lo) and math.isfinite(q_hi) else None
    return ok, text, q, ci, sorted(envs), Level(level, ", ".join(sizes), need)


def _rule_memory_share(c: Finding, ev: Evidence, tcg: bool):
    """How much of its memory a workload's instances used: each repetition's peak of memory used (the
    monitor's, summed over the role's instances) over the memory the monitor found them given (MemTotal,
    or a container's memory limit, summed alike), the median share's interval against the tolerance."""
    g = one(ev, c.args["select"], exclude_tcg=tcg)
    limits = g.meta.get("mem_limit_mib")
    if not limits or len(limits) != len(g.values) or not all(m > 0 for m in limits):
        raise _NoData(f"{g.metric} on {g.env}: no memory size was recorded beside the peak (a monitor that "
                      "predates its mem_limit), so no share of it can be computed")
    shares = [v / m for v, m in zip(g.values, limits)]
    lo, hi, level = stats.median_ci(shares)
    med = statistics.median(shares)
    ok = decide(med, lo, hi, {k: v for k, v in c.args.items() if k in TOLERANCES})
    text = (f"median share {_fmt(med)}{_ci_text(lo, hi)}: peak {_fmt(g.median)} {g.unit} used of "
            f"{_fmt(statistics.median(limits))} MiB on {_label(g)} (n = {len(shares)})")
    return ok, text, med, ([lo, hi] if math.isfinite(lo) else None), [g.env], Level(level, str(len(shares)))


MACHINE_SERIES = "machine."  # the metric prefix of the series of the machines that hold guests
_APART = ("ssh", "cloud")      # one instance per machine of its own (the reproduce layout of both)


def _apart(ev: Evidence, side: list[dict[str, Any]], tcg: bool) -> list[Group]:
    """One side of a network-peak comparison: its groups (the ranks' own series, and for guests the
    series of the machines holding them), once the ranks are known to have run on machines of their
    own; _NoData with the reason where they shared one machine (no wire between them to measure)."""
    ranks = [s for s in side if not s["metric"].startswith(MACHINE_SERIES)]
    hosts = [s for s in side if s["metric"].startswith(MACHINE_SERIES)]
    for s in ranks:
        if select(ev, s, exclude_tcg=tcg) or "host" not in s["kind"]:
            continue
        here = [g for g in ev.groups if g.experiment in _experiments(s) and g.workload == s["workload"]
                and g.kind == "host" and g.values]
        if here:
            raise _NoData(f"the ranks of {here[0].env} ran as processes of this one machine: what they exchange "
                          "moves through its memory, not over a network, so there is no network peak to compare "
                          "(a like-for-like one needs ranks on machines of their own: --inventory)")
    groups = [one(ev, s, exclude_tcg=tcg) for s in ranks]
    for g in list(groups):
        if g.kind in _APART:
            continue
        if g.kind == "host":
            raise _NoData(f"the ranks of {g.env} shared this one machine: no network between them to measure")
        n = g.meta.get("monitor_instances")
        held = [h for s in hosts for h in select(ev, {**s, "env": (g.env,)}, exclude_tcg=tcg)]
        if not held:
            raise _NoData(f"the {n or 'several'} {g.kind} instances of {g.env} ran on one machine: the traffic "
                          "between them crossed its virtual bridge, not a wire, and no machine of their own carried "
                          "it (a like-for-like peak needs each guest on a machine of its own, with that machine's "
                          "series beside it; the vm driver puts an environment's VMs on one machine)")
        m = max(held, key=lambda h: len(h.values))
        if m.meta.get("monitor_instances") != n:
            raise _NoData(f"the {n} {g.kind} instances of {g.env} ran on {m.meta.get('monitor_instances')} "
                          "machine(s): some shared one, so their traffic partly crossed a virtual bridge, not a wire")
        groups.append(m)
    return groups


def _summed(groups: list[Group]) -> Group:
    """The side's groups added up repetition by repetition (the same cell and environment: its rounds)."""
    first = groups[0]
    if len(groups) == 1:
        return first
    per = [dict(zip(g.rounds or range(len(g.values)), g.values)) for g in groups]
    both = sorted(set.intersection(*(set(p) for p in per)))
    return Group(first.experiment, first.workload, first.params, first.condition, first.env, first.kind,
                 " + ".join(g.metric for g in groups), first.unit, True, [sum(p[r] for p in per) for r in both],
                 dict(first.meta), list(both) if first.rounds is not None else None)


def _rule_peak_sum(c: Finding, ev: Evidence, tcg: bool):
    """The highest network rate of one run against another's, each the sum of the peaks of the machines
    that carried it (the ranks' own, and for guests their machines'), measured only where the ranks ran on
    machines of their own: the ratio of the sums, repetition by repetition, against the tolerance."""
    sides = {name: _apart(ev, c.args[name], tcg) for name in ("num", "den")}
    num, den = _summed(sides["num"]), _summed(sides["den"])
    r = _ratio(num, den)
    ok = decide(r.ratio, r.ci_low, r.ci_high, {k: v for k, v in c.args.items() if k in TOLERANCES})

    def parts(gs: list[Group]) -> str:
        return " + ".join(f"{g.metric} {_fmt(g.median)}" for g in gs)
    text = (f"{_fmt(r.ratio)}x{_ci_text(r.ci_low, r.ci_high)}: {num.env} {parts(sides['num'])} / {den.env} "
            f"{parts(sides['den'])} {den.unit} (n = {len(num.values)} / {len(den.values)}{_method(num, den)})")
    ci = [r.ci_low, r.ci_high] if math.isfinite(r.ci_low) else None
    envs = sorted({g.env for gs in sides.values() for g in gs})
    return ok, text, r.ratio, ci, envs, Level(r.ci_level, f"{len(num.values)} / {len(den.values)}")


RULES = {"ratio": _rule_ratio, "efficiency": _rule_efficiency, "order": _rule_order, "steps": _rule_steps, "slope": _rule_slope,
         "level": _rule_level, "peak": _rule_peak, "penalty": _rule_penalty,
         "memory_share": _rule_memory_share, "peak_sum": _rule_peak_sum}


# -- scoring --------------------------------------------------------------------------------------------

def experiments_read(c: Finding) -> set[str]:
    """The experiments whose groups the finding's rule reads."""
    out: set[str] = set()
    for v in c.args.values():
        for s in (v if isinstance(v, list) else [v]):
            if isinstance(s, dict) and "experiment" in s and "metric" in s:
                out |= set(_experiments(s))
    if isinstance(c.args.get("experiment"), str):  # the penalty's
        out.add(c.args["experiment"])
    return out


def missing_need(c: Finding, facts: dict[str, Any]) -> str | None:
    """Why the machine cannot measure this claim at all, or None."""
    if c.unmeasurable:
        return c.unmeasurable
    for need in c.needs:
        have = facts.get("accelerator") == "kvm" if need == "kvm" else bool(facts.get(need))
        if not have:
            detail = facts.get(f"{need}_detail") if need in ("nfs", "cluster") else None
            return REASONS[need] + (f" ({detail})" if detail else "")
    return None


def score(c: Finding, ev: Evidence, *, points: bool = False) -> Verdict:
    """The finding's verdict. `points`: the evidence is the study's own printed numbers (reproduce
    --published), where a printed value decides as a point, without an interval."""
    v = Verdict(c.id, c.study, c.finding, c.cite, c.quantity, c.tolerance, NOT_MEASURED, quote=c.quote,
                quote_en=c.quote_en, revised=[{"date": r.date, "change": r.change, "why": r.why} for r in c.revised])
    why = missing_need(c, ev.facts)
    if why:
        v.reason = why
        return v
    try:
        ok, text, value, ci, envs, level = RULES[c.rule](c, ev, "kvm" in c.needs)
    except _NoData as exc:
        v.reason = str(exc)
        return v
    except _RangeTooShort as exc:
        v.measured, v.environments, v.reason = exc.measured, exc.envs, str(exc)
        return v
    v.verdict = HOLDS if ok else DIFFERS if ok is not UNDECIDED else NOT_MEASURED
    v.measured, v.environments, v.ci = text, envs, ci
    v.level = level.level if level and math.isfinite(level.level) else None
    if "cluster" in c.needs and ev.facts.get("cluster_detail"):
        v.measured += f"; cluster: {ev.facts['cluster_detail']} ({CLUSTER_RULE})"
        text = v.measured
    if level and not points and not level.level >= max(LEVEL, level.required) - 1e-12:
        # an interval below 95 % (or none) decides nothing under a 95 % label
        v.verdict = NOT_MEASURED
        v.reason = (f"too few repetitions for a 95 % interval (n = {level.n}"
                    + (f": the widest interval they give is at {level.level:.1%})" if math.isfinite(level.level)
                       else ": no interval)") + (f"; it needs {level.need}" if level.need else "")
                    + f"; measured {text}")
        v.value = value if value is None or math.isfinite(value) else None
        return v
    if ok is UNDECIDED:
        v.reason = f"{text}; " + (_both_sides(*ci, v.level) if ci else "it reaches both sides of the tolerance")
    v.value = value if value is None or math.isfinite(value) else None
    return v


def scorecard(ev: Evidence, findings: list[Finding], *, points: bool = False) -> list[Verdict]:
    return [score(f, ev, points=points) for f in findings]


def counts(verdicts: list[Verdict]) -> dict[str, int]:
    out = {HOLDS: 0, DIFFERS: 0, NOT_MEASURED: 0}
    for v in verdicts:
        out[v.verdict] += 1
    return out
